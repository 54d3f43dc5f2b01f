"""Errors of the node layer."""

from __future__ import annotations

from protocol.errors import DPCError

__all__ = ["ActionError", "ConfigError", "ConsistencyError", "NodeError",
           "PeerAuthenticationError", "RunLogError", "SimulationDeadlock"]


class ConfigError(DPCError):
    """A cluster config is invalid. The message names the file, the key, what was expected
    and what was found. Raised at load, before any process starts."""


class NodeError(DPCError):
    """A node, source or client process cannot go on (a local misuse or a fatal condition)."""


class SimulationDeadlock(NodeError):
    """The simulated program waits for an event that nothing will ever produce, or spins
    without ever letting virtual time move (a livelock)."""


class ConsistencyError(NodeError):
    """The runtime fed the consistency manager an event it cannot take in its state."""


class RunLogError(NodeError):
    """A run-directory log cannot be written or read; the message names the file (and, for
    a corrupt tuple log, the record and its first row)."""


class ActionError(NodeError):
    """An action's request was wrong (unknown name, bad field): a 400 with this message."""


class PeerAuthenticationError(DPCError, ConnectionError):
    """The process at the other end of a new data connection failed the handshake (a wrong
    or missing token, the wrong name for its address, a protocol violation): no connection.
    A ``ConnectionError``, so that whoever connects treats it as a peer it cannot reach
    (and retries or turns to another replica); node/net/auth.py logs why."""
