"""Test-only breakages of the runtime, so that the harness can prove it catches them.

``DPC_TEST_MUTATION`` names one; it is read once, at each process's entry
(``node/procs/entry.py``; ``dpc simulate`` at its own), and passed down as a parameter to
the replica (its input links and its consistency manager), the client and its input link.
Nothing else reads the environment.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MUTATION_DUPLICATES", "Mutation"]


class Mutation(StrEnum):
    """Test-only breakages, switched on by ``DPC_TEST_MUTATION`` (read once, at each
    process's entry: node/procs/entry.py) so that the harness can prove it catches them.

    RESUBSCRIBE_OVERLAP (input links, node/streams/link.py): every resubscription asks again
    for the last stable tuple the link holds (duplicate elimination on switching broken on
    purpose). STUCK_RECONCILIATION (the replica's consistency manager,
    node/replica/manager.py): the replica never starts a reconciliation: its SUnions'
    REC_REQUESTs never reach the machine, so after a failure it stays in UP_FAILURE, its
    tentative output never corrected (what the liveness check must catch).
    LATE_UP_FAILURE (the replica, node/replica/runtime.py): the early UP_FAILURE is off: the
    replica never hears that an input became unavailable (its heartbeats' verdict), so it
    goes into UP_FAILURE only at its first tentative release and its partner's stability
    is not used until then (what the masking check must catch: issue 46)."""

    RESUBSCRIBE_OVERLAP = "resubscribe-overlap"
    STUCK_RECONCILIATION = "stuck-reconciliation"
    LATE_UP_FAILURE = "late-up-failure"


#: The ``DPC_TEST_MUTATION`` value of the duplicates mutation.
MUTATION_DUPLICATES = Mutation.RESUBSCRIBE_OVERLAP
