"""Typed, validated reads of TOML tables for the cluster config (:mod:`node.config.load`).

Role: one :class:`Table` wraps one table of the parsed file and its key path; each getter
checks type and range and raises a :class:`ConfigError` ``"<file>: <key path>: expected
<what>, found <what>"``, the found value shown with its TOML type (``'7101' (a string)``).
Invariants: a getter without a default makes its key required; bool is never a number; a
duration is seconds in the file and integer microseconds out (rounded, at least 1 µs);
every key asked for (present or not, or named by :meth:`Table.allow`) is allowed, and
:meth:`Table.finish` refuses any other key as a typo, suggesting the closest allowed one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from node.errors import ConfigError

__all__ = ["MISSING", "NAME_RE", "US", "Table", "config_error"]

#: What a source, node, replica, client or output operator may be called (no dots: a
#: node's output stream is "<node>.<soutput operator>").
NAME_RE = re.compile(r"[A-Za-z0-9_-]+\Z")
_BARE_KEY = NAME_RE  # TOML's bare keys: the same characters
#: Microseconds per second.
US = 1_000_000
#: "No default": the key is required.
MISSING: Any = object()


def config_error(file: Path, key: str, message: str) -> ConfigError:
    """The one shape of every config error: file, key path, then what is wrong."""
    return ConfigError(f"{file}: {key}: {message}")


def _show(v: object) -> str:
    """A found value, with its TOML type."""
    if isinstance(v, bool):
        return f"{str(v).lower()} (a boolean)"
    if isinstance(v, str):
        return f"{v!r} (a string)"
    if isinstance(v, int):
        return f"{v} (an integer)"
    if isinstance(v, float):
        return f"{v!r} (a float)"
    if isinstance(v, Mapping):
        return "a table"
    if isinstance(v, list):
        text = repr(v)
        return f"an array {text if len(text) < 60 else text[:57] + '...'}"
    return f"{v!r} (a {type(v).__name__})"


class Table:
    """Typed reads of one TOML table, each error naming file, key path, expected, found.

    A getter without a default makes the key required. Every key asked for, present or
    not, is allowed; :meth:`finish` refuses any other (a typo)."""

    def __init__(self, file: Path, path: str, raw: object) -> None:
        self.file, self.path = file, path
        if not isinstance(raw, Mapping):
            raise config_error(file, path, f"expected a table, found {_show(raw)}")
        self.raw: Mapping[str, Any] = raw
        self._asked: list[str] = []

    def key(self, k: str) -> str:
        """The key path of ``k`` in this table (quoted, TOML-style, unless a bare key)."""
        k = k if _BARE_KEY.match(k) else json.dumps(k)
        return f"{self.path}.{k}" if self.path else k

    def fail(self, k: str, expected: str, found: object) -> ConfigError:
        """An error about key ``k``; ``found`` is the value found (shown with its type)."""
        return self.fail_text(k, expected, _show(found))

    def fail_text(self, k: str, expected: str, found: str) -> ConfigError:
        """An error about key ``k``; ``found`` is prose."""
        return config_error(self.file, self.key(k), f"expected {expected}, found {found}")

    def allow(self, *keys: str) -> None:
        """Keys this table may hold though the reader did not ask for them."""
        self._asked.extend(k for k in keys if k not in self._asked)

    def has(self, k: str) -> bool:
        return k in self.raw

    def _take(self, k: str, default: Any, expected: str) -> Any:
        if k not in self._asked:
            self._asked.append(k)
        if k in self.raw:
            return self.raw[k]
        if default is MISSING:
            typo = get_close_matches(k, [x for x in self.raw if x not in self._asked], 1)
            why = f"; is {typo[0]!r} a typo?" if typo else ""
            raise self.fail_text(k, expected, f"nothing (the key is missing{why})")
        return default

    def string(
        self,
        k: str,
        default: Any = MISSING,
        *,
        nonempty: bool = False,
        choices: tuple[str, ...] = (),
    ) -> str:
        expected = "one of " + ", ".join(f'"{c}"' for c in choices) if choices else "a string"
        expected += " (non-empty)" if nonempty else ""
        v = self._take(k, default, expected)
        if not isinstance(v, str) or (nonempty and not v) or (choices and v not in choices):
            raise self.fail(k, expected, v)
        return v

    def boolean(self, k: str, default: Any = MISSING) -> bool:
        v = self._take(k, default, "true or false")
        if not isinstance(v, bool):
            raise self.fail(k, "true or false", v)
        return v

    def integer(
        self, k: str, default: Any = MISSING, *, lo: int | None = None, hi: int | None = None
    ) -> int:
        expected = "an integer"
        if lo is not None:
            expected += f" in {lo}..{hi}" if hi is not None else f" >= {lo}"
        v = self._take(k, default, expected)
        if (
            not isinstance(v, int)
            or isinstance(v, bool)
            or (lo is not None and v < lo)
            or (hi is not None and v > hi)
        ):
            raise self.fail(k, expected, v)
        return v

    def number(self, k: str, default: Any, ok: Callable[[float], bool], expected: str) -> float:
        """A finite int or float for which ``ok(value)`` holds (bool is not a number)."""
        v = self._take(k, default, expected)
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise self.fail(k, expected, v)
        if not math.isfinite(v) or not ok(v):
            raise self.fail(k, expected, v)
        return v

    def seconds(self, k: str, default_us: int, max_us: int | None = None) -> int:
        """A duration in seconds in the file, returned in integer microseconds (> 0)."""
        expected = "a duration in seconds > 0" + (f" and <= {max_us / US:g}" if max_us else "")
        if k not in self.raw:
            self._take(k, default_us, expected)
            return default_us
        us = round(self.number(k, MISSING, lambda v: v > 0, expected) * US)
        if us < 1:
            raise self.fail(k, expected + " (at least one microsecond)", self.raw[k])
        if max_us is not None and us > max_us:
            raise self.fail(k, expected, self.raw[k])
        return us

    def names(self, k: str) -> tuple[str, ...]:
        """A non-empty array of distinct non-empty strings."""
        expected = "a non-empty array of distinct non-empty strings"
        v = self._take(k, MISSING, expected)
        if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
            raise self.fail(k, expected, v)
        dup = next((x for i, x in enumerate(v) if x in v[:i]), None)
        if dup is not None:
            raise self.fail_text(k, expected, f"{dup!r} twice")
        return tuple(v)

    def table(self, k: str, *, required: bool = False) -> Table:
        raw = self._take(k, MISSING if required else {}, f"a [{self.key(k)}] table")
        return Table(self.file, self.key(k), raw)

    def array(self, k: str) -> list[Any]:
        """An array of tables ([[k]]), possibly empty; the items are checked by the caller."""
        v = self._take(k, [], f"an array of [[{self.key(k)}]] tables")
        if not isinstance(v, list):
            raise self.fail(k, f"an array of [[{self.key(k)}]] tables", v)
        return v

    def tables(self, k: str) -> list[Table]:
        return [Table(self.file, f"{self.key(k)}[{i}]", r) for i, r in enumerate(self.array(k))]

    def entries(self, *, names: bool = True) -> Iterator[tuple[str, Table]]:
        """Each ``[path.NAME]`` sub-table; with ``names``, NAME must be a process name."""
        for name, raw in self.raw.items():
            self._take(name, MISSING, "")
            if names and not NAME_RE.match(name):
                raise config_error(
                    self.file,
                    self.key(name),
                    f"expected a name of letters, digits, '_' or '-', found {name!r}",
                )
            yield name, Table(self.file, self.key(name), raw)

    def finish(self) -> None:
        for k in self.raw:
            if k not in self._asked:
                hint = get_close_matches(k, self._asked, 1)
                raise config_error(
                    self.file,
                    self.key(k),
                    "unknown key; expected one of " + ", ".join(sorted(self._asked))
                    + (f" (did you mean {hint[0]!r}?)" if hint else ""),
                )
