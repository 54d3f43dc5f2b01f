"""The wire-level vocabulary of the system (DESIGN.md section 2): tuples, messages, frames.

``protocol`` is the bottom package: it imports nothing else of the project, and everything
else imports it. It is sans-IO: no sockets, no asyncio, no clock. This module re-exports
the public API of :mod:`.tuples`, :mod:`.columns` (tuples as Arrow columns: a Batch's form
on the wire), :mod:`.undo_rule` (the UNDO rule), :mod:`.errors`, :mod:`.messages` and
:mod:`.codec`.
"""

from .codec import DEFAULT_MAX_FRAME_SIZE, HEADER_SIZE, VERSION, FrameDecoder, decode_frame, encode
from .columns import Columns
from .errors import DPCError, LocalProtocolError, ProtocolError, RemoteProtocolError
from .messages import (
    MESSAGE_CLASSES,
    MESSAGE_TYPES,
    Ack,
    Batch,
    ConsistencyState,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    MessageType,
    ReconcileGrant,
    ReconcileRefuse,
    ReconcileRequest,
    Subscribe,
    Unsubscribe,
)
from .tuples import (
    DATA_KINDS,
    KINDS,
    Kind,
    Schema,
    Tuple,
    Value,
    boundary,
    make_tuple,
    rec_done,
    undo,
)
from .undo_rule import apply_undo, apply_undos, kept_end, undo_cut, undone_from

__all__ = [
    "DATA_KINDS",
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER_SIZE",
    "KINDS",
    "MESSAGE_CLASSES",
    "MESSAGE_TYPES",
    "VERSION",
    "Ack",
    "Batch",
    "Columns",
    "ConsistencyState",
    "DPCError",
    "FrameDecoder",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "Kind",
    "LocalProtocolError",
    "Message",
    "MessageType",
    "ProtocolError",
    "ReconcileGrant",
    "ReconcileRefuse",
    "ReconcileRequest",
    "RemoteProtocolError",
    "Schema",
    "Subscribe",
    "Tuple",
    "Unsubscribe",
    "Value",
    "apply_undo",
    "apply_undos",
    "boundary",
    "decode_frame",
    "encode",
    "kept_end",
    "make_tuple",
    "rec_done",
    "undo",
    "undo_cut",
    "undone_from",
]
