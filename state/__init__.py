"""State of the pure core: checkpoints, output buffers, persistent tuple logs (DESIGN.md 3).

Sans-IO like the rest of the core, except :mod:`state.tuplelog`, whose whole job is files:
it is imported by its own name, not re-exported here, so that a replica (which writes no
Arrow log) does not load pyarrow at start-up (tests/node/procs/test_startup.py).
Depends on ``protocol`` only (protocol <- state <- operators <- node).
"""

from __future__ import annotations

from .buffer import OutputBuffer
from .checkpoint import (
    CHECKPOINT_VERSION,
    Checkpoint,
    Checkpointable,
    CheckpointStore,
    StoreStats,
    decode_checkpoint,
    encode_checkpoint,
    restore_checkpoint,
    take_checkpoint,
)
from .errors import CheckpointError, ReplayAheadError, ReplayError, StateError

__all__ = [
    "CHECKPOINT_VERSION",
    "Checkpoint",
    "CheckpointError",
    "CheckpointStore",
    "Checkpointable",
    "OutputBuffer",
    "ReplayAheadError",
    "ReplayError",
    "StateError",
    "StoreStats",
    "decode_checkpoint",
    "encode_checkpoint",
    "restore_checkpoint",
    "take_checkpoint",
]
