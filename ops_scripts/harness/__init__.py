"""The fault harness: schedules of faults played on real processes or in simulation.

Jepsen's split (STYLE.md 12): these modules do faults and write the run's history; the
checkers of :mod:`ops_scripts.check` judge it.

* ``schedule.py`` (pure): the fault data model, the ``[[faults]]`` TOML, random schedules;
* ``scenario.py``: scenario files (a cluster, settings, a schedule);
* ``timeline.py`` (pure): when each fault starts and heals, for both players;
* ``rules.py`` (pure): the fault operations each replica must hold for the faults in force;
* ``nemesis.py``: faults done to live processes (``POST /fault``, SIGKILL, SIGSTOP);
* ``kernel.py``: partitions made by the kernel between hosts (nftables, ``--hosts netns``);
* ``fault.py``: the control planes' HTTP client;
* ``runner.py``: ``dpc run``; ``inject.py``: ``dpc inject``; ``torture.py``: ``dpc
  torture``; ``simulate.py``: ``dpc simulate`` (the cluster in one process, virtual time);
  ``supervisor.py``: ``dpc launch`` (a cluster run by hand: start-up recorded, crashed
  processes restarted and recorded).
* ``soak.py``: ``dpc soak`` (memory and buffers over a long run); ``growth.py`` (pure):
  its rule, when a series grows steadily; ``soakreport.py``: its table and plot.
* ``fuzz.py``: ``dpc fuzz`` (the wire codec against random and mutated frames, sans-IO);
  ``fuzzcases.py``: its frames (valid samples of every message class, the mutations).
"""

from ops_scripts.errors import FuzzError, InjectError, ScenarioError, ScheduleError
from ops_scripts.harness.fuzz import Finding, FuzzReport, Outcome, fuzz_codec, judge, run_fuzz
from ops_scripts.harness.fuzzcases import SAMPLES, Case, Mutation, check_samples, frame_at
from ops_scripts.harness.nemesis import Nemesis
from ops_scripts.harness.runner import RunOutcome, play_scenario, run_scenario
from ops_scripts.harness.scenario import Scenario, dump_scenario, load_scenario
from ops_scripts.harness.schedule import Fault, parse_faults, random_faults
from ops_scripts.harness.simulate import SimOptions, SimResult, simulate_many, simulate_one
from ops_scripts.harness.soak import SoakOptions, run_soak
from ops_scripts.harness.timeline import Timeline
from ops_scripts.harness.torture import TortureOptions, run_torture

__all__ = [
    "SAMPLES", "Case", "Fault", "Finding", "FuzzError", "FuzzReport", "InjectError", "Mutation",
    "Nemesis", "Outcome", "RunOutcome", "Scenario", "ScenarioError", "ScheduleError",
    "SimOptions", "SimResult", "SoakOptions", "Timeline", "TortureOptions", "check_samples",
    "dump_scenario", "frame_at", "fuzz_codec", "judge", "load_scenario", "parse_faults",
    "play_scenario", "random_faults", "run_fuzz", "run_scenario", "run_soak", "run_torture",
    "simulate_many", "simulate_one",
]
