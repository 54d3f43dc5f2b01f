"""Errors of the operations layer (the `dpc` commands, the harness, the checker).

Every one derives from the project's root error, ``protocol.errors.DPCError``, so a caller
can tell our errors from a bug's; the message names what failed and why."""

from __future__ import annotations

from protocol.errors import DPCError

__all__ = ["BenchFailed", "CheckError", "ClusterError", "FaultError", "FuzzError", "GenerateError", "HistoryError", "HostsError", "IngestError", "InjectError", "LogViewError", "ProcessError", "ReferenceJobError", "ScenarioError", "ScheduleError", "SweepError", "Untranslatable"]


class BenchFailed(DPCError):
    """A benchmark cannot measure: the replica failed to start or died, the config has no
    node to drive, or the measured chain produced nothing."""


class CheckError(DPCError):
    """A property cannot be judged from what the run left (the message says why)."""


class FaultError(DPCError):
    """A control plane refused or could not be reached."""


class HistoryError(DPCError):
    """A history file that cannot be read (the message names file and line)."""


class HostsError(DPCError):
    """A run's hosts cannot be made or reached (``--hosts netns|ssh``): not root, no
    ``ip`` or ``nft``, an address that cannot be placed, an SSH host that does not answer."""


class InjectError(DPCError):
    """A fault could not be injected or healed (the message names it and the reason)."""


class ProcessError(DPCError):
    """A process of a run cannot be found or acted on (the message names it and its pid file)."""


class ScenarioError(DPCError):
    """A scenario that cannot be played; the message names the file and the key."""


class ScheduleError(DPCError):
    """A fault schedule that cannot be played (the message names the fault and key)."""


class SweepError(DPCError):
    """An experiment file that cannot be swept, or an output directory that holds another
    experiment's results (the message names the file and the key)."""


class FuzzError(DPCError):
    """``dpc fuzz`` cannot run: a message class without samples, an invalid sample, a bad
    argument, or a replay file it did not write."""


class ClusterError(DPCError):
    """The standalone cluster did not come up (the message quotes both processes' logs)."""


class IngestError(DPCError):
    """A run directory or one of its logs cannot be made into tables (the message names
    the run directory or the file, and the record or line)."""


class LogViewError(DPCError):
    """``dpc log`` has no such log to show: no run directory, or no client or replica (or
    stream) of that name logged there (the message lists the ones that did)."""


class ReferenceJobError(DPCError):
    """The reference job cannot run: a session whose executors run another Python, tables
    that contradict a run's config, or no reference computed yet (the message says which
    run, stream or file)."""


class GenerateError(DPCError):
    """A run cannot be generated for this config or these arguments (says which)."""


class Untranslatable(DPCError):
    """A query network, an operator or an expression (or a piece of it) has no exact Spark
    translation in ``dpc reconcile``'s stage 2; the message says which piece and why. The
    run's reference then comes from stage 1 (ops_scripts/reconcile/reference.py)."""
