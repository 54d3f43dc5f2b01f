"""One replica of a node: its runtime, its consistency machine, and recovery after a crash.

* ``consistency.py`` (pure): the STABLE / UP_FAILURE / STABILIZATION machine: one
  transition table, ``step(machine, event) -> (machine, actions)``; every fault-tolerance
  decision of a replica;
* ``vocabulary.py`` (pure): what the machine speaks: states, strategies, the policy, the
  events it takes and the actions it returns (re-exported by ``consistency.py``);
* ``manager.py``: performs the machine's actions on the query network (checkpoints,
  reconciliation replayed in steps, REC_DONE, permission requests to the partners) and
  runs the replica's one deadline loop;
* ``recovery.py``: a crashed replica restarted with ``--recover`` (a STABLE partner's state,
  the upstream buffers);
* ``runtime.py``: :class:`Replica`, links -> network -> publisher in one TaskGroup, the
  control plane's actions (status, fault, digest, state).
"""

from node.errors import ConsistencyError
from node.replica.consistency import (
    Method,
    Policy,
    StabilizationStrategy,
    State,
    UpFailureStrategy,
    next_deadline,
    start,
    step,
)
from node.replica.manager import Manager, Partner, policy_of
from node.replica.recovery import archive_output_logs, fetch_partner_state, record_recovery
from node.replica.runtime import MUTATION_DUPLICATES, Replica

__all__ = [
    "MUTATION_DUPLICATES", "ConsistencyError", "Manager", "Method", "Partner", "Policy",
    "Replica", "StabilizationStrategy", "State", "UpFailureStrategy", "archive_output_logs",
    "fetch_partner_state", "next_deadline", "policy_of", "record_recovery", "start", "step",
]
