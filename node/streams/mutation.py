"""Test-only breakages of the runtime, so that the harness can prove it catches them.

``DPC_TEST_MUTATION`` names one; it is read once, at each process's entry
(``node/procs/entry.py``; ``dpc simulate`` at its own), and passed down as a parameter to
the replica, the client and their input links. Nothing else reads the environment.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MUTATION_DUPLICATES", "Mutation"]


class Mutation(StrEnum):
    """Test-only breakages of a link, switched on by ``DPC_TEST_MUTATION`` (read once, at
    each process's entry: node/procs/entry.py) so that the harness can prove it catches
    them. RESUBSCRIBE_OVERLAP: every resubscription asks again for the last stable tuple
    the link holds (duplicate elimination on switching broken on purpose)."""

    RESUBSCRIBE_OVERLAP = "resubscribe-overlap"


#: The ``DPC_TEST_MUTATION`` value of the duplicates mutation.
MUTATION_DUPLICATES = Mutation.RESUBSCRIBE_OVERLAP
