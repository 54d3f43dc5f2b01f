"""``dpc check``: the properties of DESIGN.md section 6, judged on what a run recorded.

Jepsen's split (STYLE.md 12): the harness writes a run's logs and history; these modules
read them and judge, as pure functions wherever they can be. A checker that crashes yields
``unknown``, never a pass.

* ``compose.py``: :func:`check_run` (pure: every verdict of a run) and :func:`run_check`
  (``dpc check RUN_DIR``: read, judge, print, write check.json);
* ``properties.py``: each property as a checker returning a :class:`Verdict` (properties 1-4);
* ``liveness.py``: property 6, liveness after the final heal, and its bound;
* ``masking.py``: a failure of some replicas only is masked (issue 46), and its bound;
* ``sources.py``: the sources' logs and end records, eventual consistency's inputs;
* ``reference.py``: the failure-free run of the source logs;
* ``availability.py``: new results, Delay_new and the bound k*X;
* ``paths.py``: outages (when a client had no clean path from the sources);
* ``recorded.py``: a run's logs and history read into plain data (:class:`History`);
* ``history.py``: the history file's format, and reading it (the harness writes it).
"""

from ops_scripts.check.availability import apply_undos, bound_for, delay_new, judge_delays
from ops_scripts.check.compose import FIGURE_KEYS, Figures, check_run, run_check
from ops_scripts.check.history import count_events, final_digests, read_history
from ops_scripts.check.liveness import (
    check_client_liveness,
    check_replica_liveness,
    liveness_verdicts,
    node_bounds,
)
from ops_scripts.check.masking import check_masking, mask_bound, mask_windows, masking_verdicts
from ops_scripts.check.properties import (
    Status,
    Verdict,
    apply_undos_checked,
    check_client,
    check_no_duplicates,
    check_recovered_replica,
    check_replica,
    check_stable_never_undone,
    check_stream,
    guarded,
)
from ops_scripts.check.recorded import History, load_events, load_history
from ops_scripts.check.reference import END_OF_STREAM, reference_outputs
from ops_scripts.check.sources import check_source_log
from ops_scripts.errors import CheckError

__all__ = [
    "END_OF_STREAM", "FIGURE_KEYS", "CheckError", "Figures", "History", "Status", "Verdict", "apply_undos", "apply_undos_checked", "bound_for", "check_client",
    "check_client_liveness", "check_masking", "check_no_duplicates", "check_recovered_replica", "check_replica",
    "check_replica_liveness", "check_run", "check_source_log", "check_stable_never_undone",
    "check_stream", "count_events", "delay_new", "final_digests", "guarded", "judge_delays",
    "liveness_verdicts", "load_events", "load_history", "mask_bound", "mask_windows",
    "masking_verdicts", "node_bounds", "read_history",
    "reference_outputs", "run_check",
]
