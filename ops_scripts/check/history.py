"""The history of a run: every fault and heal with its time, every replica's state
changes, the final state digests (Jepsen's history, STYLE.md 12).

Role: the harness writes it (``ops_scripts/harness/history.py``: ``HistoryWriter``, used
by ``runner.py`` for real processes and ``simulate.py`` in the deterministic simulation);
the checkers read it with :func:`read_history` and analyse it with pure functions
(:func:`final_digests`, :func:`count_events` here, the outage model in
``ops_scripts/check/paths.py``). This module is the format's home: the table below. It lives in
``RUN_DIR/history.jsonl``, one JSON object per line, each with ``t`` (microseconds on the
cluster's clock: the wall clock for real processes, the virtual clock in simulation; the
clock of tuple times and client arrival times) and ``event``:

=========  ==================================================================================
event      fields
=========  ==================================================================================
start      ``config`` (path), ``name`` (scenario), ``seed`` (if random)
ready      the cluster is up and every client received a first tuple (before: start-up)
schedule   the settle time is over: schedule time 0 (faults' ``at`` counts from here)
fault      ``id``, ``fault`` (the TOML table, ``schedule.Fault``), ``describe``, and its
           resolved effects: ``cut`` (directed pairs ``[a, b]``: messages from a to b
           vanish), ``down`` (processes killed or paused), ``impaired`` (directed pairs
           slowed: delay, bandwidth, slow reader)
heal       ``id`` of the fault it ends
heal_all   every fault still in force ends; the quiet period starts
state      ``process`` (a replica), ``state`` (STABLE, UP_FAILURE, STABILIZATION,
           RECOVERING): merged from the replicas' own logs by ``merge_states``
digest     ``process``, ``node``, ``state``, ``hashes`` (operator -> state digest) at the end,
           ``cpu_s`` (its CPU seconds so far, or null where /proc does not say)
note       ``text``: something the harness could not do (e.g. a refused injection)
end        the cluster is stopped
=========  ==================================================================================

The client logs stay where they are (``RUN_DIR/clients``); the history and they share the
clock. Invariants: a writer flushes every event (a crashed harness leaves a readable
prefix); :func:`read_history` refuses a malformed line with its line number.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ops_scripts.errors import HistoryError

__all__ = ["count_events", "final_digests", "iter_history", "read_history"]


def iter_history(path: str | os.PathLike[str]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """``(line number, the line's text, event)`` of each event of a history file, in file
    order, streamed (blank lines skipped; a bad line raises :class:`HistoryError` with its
    number)."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except ValueError as exc:
                raise HistoryError(f"{path}:{n}: not JSON: {exc}") from None
            if not isinstance(e, dict) or not isinstance(e.get("t"), int) or "event" not in e:
                raise HistoryError(f"{path}:{n}: expected an object with int t and event")
            yield n, line.strip(), e


def read_history(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of a history file, in file order."""
    return [e for _, _, e in iter_history(path)]


def final_digests(events: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Reading side (pure): each process's last ``digest`` event, ``process -> hashes``
    (operator -> state digest), for the replica-convergence verdict."""
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["event"] == "digest":
            out[str(e["process"])] = dict(e["hashes"])
    return out


def count_events(events: Iterable[Mapping[str, Any]], event: str) -> int:
    """Reading side (pure): how many events of kind ``event`` (e.g. ``"fault"``)."""
    return sum(1 for e in events if e["event"] == event)
