"""Errors of the node layer."""

from __future__ import annotations

from protocol.errors import DPCError

__all__ = ["ConfigError", "NodeError"]


class ConfigError(DPCError):
    """A cluster config is invalid. The message names the file, the key, what was expected
    and what was found. Raised at load, before any process starts."""


class NodeError(DPCError):
    """A node, source or client process cannot go on (a local misuse or a fatal condition)."""
