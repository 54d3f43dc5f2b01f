"""State of the pure core: checkpoints, output buffers, persistent tuple logs (DESIGN.md 3).

Sans-IO like the rest of the core, except :mod:`state.tuplelog`, whose whole job is files.
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
from .tuplelog import HEADER_COLUMNS, TupleLogWriter, read_tuple_log

__all__ = [
    "CHECKPOINT_VERSION",
    "HEADER_COLUMNS",
    "Checkpoint",
    "CheckpointError",
    "CheckpointStore",
    "Checkpointable",
    "OutputBuffer",
    "ReplayAheadError",
    "ReplayError",
    "StateError",
    "StoreStats",
    "TupleLogWriter",
    "decode_checkpoint",
    "encode_checkpoint",
    "read_tuple_log",
    "restore_checkpoint",
    "take_checkpoint",
]
