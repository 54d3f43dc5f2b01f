"""State of the pure core: checkpoints, output buffers, persistent tuple logs (DESIGN.md 3).

Sans-IO like the rest of the core, except :mod:`state.tuplelog` and :mod:`state.ceclog`
(a replica's persistent CEC log), whose whole job is files, and :mod:`state.spill` /
:mod:`state.spill_list`, where what a long failure makes a process
hold waits on disk past its memory bound. They are imported by their own names, not
re-exported here; the tuple log loads pyarrow with itself, the spill store at its first
spill, so that a replica (which writes no Arrow log) starts without pyarrow
(tests/node/procs/test_startup.py).
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
