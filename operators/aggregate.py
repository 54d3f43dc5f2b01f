"""``aggregate``: windowed aggregates over tuple time, tumbling or sliding, with group-by.

Spec::

    {"type": "aggregate", "inputs": [s], "window": 60, "slide": 10,
     "group_by": ["sym"],
     "aggregates": [{"fn": "count", "as": "n"}, {"fn": "avg", "attr": "price", "as": "p"}]}

``window`` (> 0, tuple-time units), ``slide`` (default ``window``: tumbling; 0 < slide <=
window), ``group_by`` (default ``[]``), ``aggregates`` (``fn`` one of count, sum, avg,
min, max; ``attr`` for all but count; ``as`` the output name). Output schema: the group_by
names, then the ``as`` names.

Semantics and invariants:

* A tuple at time t belongs to every window ``[s, s + window)`` with s a multiple of
  ``slide``. A window closes when the watermark (min input boundary) reaches
  ``s + window``; it then emits one tuple per group, groups in order of first appearance
  in the window, with ``time = s`` and ``tmax`` the max tmax of the group's tuples.
  Windows close in start order; empty windows emit nothing; ``avg`` is a float.
* A tuple for a window that is already closed (it broke its input's boundary promise) is
  ignored for that window: emitting it would break this operator's own boundary.
* Theory of operation: the time axis is cut into *panes* of width ``gcd(window, slide)``;
  every window is a whole number of panes. Each tuple updates one accumulator, that of its
  group in its pane, sequentially in arrival order; closing a window merges its panes'
  accumulators in pane order (tumbling: one pane, nothing to merge). So the per-tuple
  cost does not grow with ``window / slide``, and results, floats included, do not depend
  on how the input was cut into batches: replicas that get the same tuples in different
  frames, and undo/redo replays, agree bit for bit.
* A pane is dropped once every window over it has closed. :meth:`oldest_time` is the
  smallest start of a window that can still emit; :meth:`oldest_seq` the log seq of the
  first tuple of the oldest pane kept.

Speed: the per-tuple loop is generated once per spec (Python source assembled from fixed
snippets and integer positions only -- no text from the spec reaches it), so a run costs
one call and the loop body does only dict lookups and arithmetic (about 200-300 ns per
tuple).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Mapping, Sequence
from itertools import islice
from math import gcd
from typing import Any

from protocol.tuples import Tuple

from .base import NO_TIME, Operator, Plain
from .errors import OperatorError, SpecError
from .parts import Accept, Partitioned, PartKey
from .registry import register
from .spec import Params, attribute_index
from .taxonomy import RecoveryClass

__all__ = ["FUNCTIONS", "Aggregate"]

#: Aggregate functions and the number of accumulator slots of their own each one takes.
#: Every accumulator is ``[tmax, count, first seq, slot, ...]``: count and avg share the
#: count; the seq of the group's first tuple orders groups when panes are merged.
FUNCTIONS: dict[str, int] = {"count": 0, "sum": 1, "avg": 1, "min": 1, "max": 1}
_FIRST_SLOT = 3

# A pane is [first seq, {group key: accumulator}], keyed by its start time.
Pane = list[Any]


def _generate(
    width: int, pane: int, slide: int, key_pos: Sequence[int], aggs: Sequence[tuple[str, int, int]]
) -> tuple[Callable[..., Any], Callable[[list[Any], list[Any]], None], Callable[..., Any]]:
    """Build ``_run(tuples, panes, seq_base, low)`` (adds a run to the panes; returns None
    or ``(index, exception)``), ``_merge(acc, other)`` and ``_result(key, acc)`` (the
    output values). ``width`` is the input arity; ``aggs`` holds ``(fn, attr position or
    -1, slot)``. A tuple's values are unpacked into locals ``x<i>`` (``_`` if unused)."""
    used = set(key_pos) | {p for _, p, _ in aggs if p >= 0}
    unpack = "".join(f"x{i}, " if i in used else "_, " for i in range(width))
    if len(key_pos) > 1:
        key = "(" + ", ".join(f"x{p}" for p in key_pos) + ")"
    else:
        key = f"x{key_pos[0]}" if key_pos else "None"
    init = ["tx", "1", "seq_base + i"]
    update = ["if tx > a[0]:", "    a[0] = tx", "a[1] += 1"]
    merge = [
        "if b[0] > a[0]:",
        "    a[0] = b[0]",
        "a[1] += b[1]",
        "if b[2] < a[2]:",
        "    a[2] = b[2]",
    ]
    results = []
    for fn, p, s in aggs:
        if fn in ("sum", "avg"):
            init.append(f"x{p}")
            update.append(f"a[{s}] += x{p}")
            merge.append(f"a[{s}] += b[{s}]")
        elif fn in ("min", "max"):
            op = "<" if fn == "min" else ">"
            init.append(f"x{p}")
            update += [f"if x{p} {op} a[{s}]:", f"    a[{s}] = x{p}"]
            merge += [f"if b[{s}] {op} a[{s}]:", f"    a[{s}] = b[{s}]"]
        results.append({"count": "a[1]", "avg": f"a[{s}] / a[1]"}.get(fn, f"a[{s}]"))
    key_out = {0: "", 1: "k, "}.get(len(key_pos), "*k, ")
    lines = [
        "def _run(tuples, panes, seq_base, low):",
        "    cur = groups = None",
        "    i = 0",
        "    try:",
        f"        for i, (_, _, tm, tx, ({unpack})) in enumerate(tuples):",
        f"            ps = tm - tm % {pane}",
        "            if ps != cur:",
        f"                if ps - ps % {slide} < low:",  # every window over the pane closed
        "                    continue",
        "                w = panes.get(ps)",
        "                if w is None:",
        "                    w = panes[ps] = [seq_base + i, {}]",
        "                cur = ps",
        "                groups = w[1]",
        f"            k = {key}",
        "            a = groups.get(k)",
        "            if a is None:",
        f"                groups[k] = [{', '.join(init)}]",
        "            else:",
        *("                " + line for line in update),
        "    except Exception as e:",
        "        return i, e",
        "    return None",
        "def _merge(a, b):",
        *("    " + line for line in merge),
        "def _result(k, a):",
        f"    return ({key_out}{', '.join(results)},)",
    ]
    env: dict[str, Any] = {"__builtins__": {"enumerate": enumerate, "Exception": Exception}}
    exec(compile("\n".join(lines), "<aggregate loop>", "exec"), env)  # from ints only
    return env["_run"], env["_merge"], env["_result"]


@register
class Aggregate(Operator, Partitioned):
    """Windowed count/sum/avg/min/max per group. See the module docstring; its parts
    (operators/parts.py) are the (pane, group) accumulators."""

    type_name = "aggregate"
    #: Windows aligned to absolute time (operators/taxonomy.py).
    recovery_class = RecoveryClass.CONVERGENT_CAPABLE
    n_inputs = 1
    _panes: dict[int, Pane]
    _closed_below: int

    def configure(self, params: Params) -> None:
        owner = self.describe()
        schema = self.input_schemas[0]
        self.window = params.get_int("window", minimum=1)
        self.slide = params.get_int("slide", self.window, minimum=1)
        if self.slide > self.window:
            raise SpecError(
                f"{owner}: parameter 'slide' must be <= window ({self.window}), got {self.slide}"
            )
        self.group_by = params.get_str_list("group_by", [])
        if len(set(self.group_by)) != len(self.group_by):
            raise SpecError(f"{owner}: parameter 'group_by' names an attribute twice")
        key_pos = [attribute_index(owner, schema, g, "group_by attribute") for g in self.group_by]
        raw = params.get_raw("aggregates")
        if not isinstance(raw, list | tuple) or not raw:
            raise SpecError(
                f"{owner}: parameter 'aggregates' must be a non-empty list of tables "
                f"{{fn, attr, as}}, got {raw!r}"
            )
        names = list(self.group_by)
        aggs: list[tuple[str, int, int]] = []
        slot = _FIRST_SLOT
        for i, a in enumerate(raw):
            fn, pos, name = self._parse_aggregate(f"{owner}: aggregates[{i}]", a, schema)
            if name in names:
                raise SpecError(f"{owner}: aggregates[{i}]: output name '{name}' is used twice")
            names.append(name)
            aggs.append((fn, pos, slot))
            slot += FUNCTIONS[fn]
        self.output_schema = tuple(names)
        #: ``(fn, attribute position or -1, accumulator slot)`` per output aggregate, in
        #: order (what the generated loop computes; the vectorized aggregate reads it).
        self.aggregates: tuple[tuple[str, int, int], ...] = tuple(aggs)
        self._n_key = len(key_pos)
        self._key_pos = tuple(key_pos)
        self._pane = gcd(self.window, self.slide)
        self._run, self._merge, self._result = _generate(
            len(schema), self._pane, self.slide, key_pos, aggs
        )
        self.clear()

    @staticmethod
    def _parse_aggregate(where: str, a: Any, schema: tuple[str, ...]) -> tuple[str, int, str]:
        if not isinstance(a, Mapping):
            raise SpecError(f"{where}: must be a table {{fn, attr, as}}, got {a!r}")
        unknown = sorted(set(a) - {"fn", "attr", "as"})
        if unknown:
            raise SpecError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
        fn = a.get("fn")
        if fn not in FUNCTIONS:
            raise SpecError(f"{where}: 'fn' must be one of {', '.join(FUNCTIONS)}, got {fn!r}")
        name = a.get("as")
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}: 'as' must be a non-empty output name, got {name!r}")
        attr = a.get("attr")
        if fn == "count":
            if attr is not None:
                raise SpecError(f"{where}: count takes no 'attr', got {attr!r}")
            return fn, -1, name
        if not isinstance(attr, str):
            raise SpecError(f"{where}: {fn} needs 'attr', an attribute name, got {attr!r}")
        return fn, attribute_index(where, schema, attr), name

    # ------------------------------------------------------------------ data path
    def _low(self) -> int:
        return self.low_at(self.watermark)

    def low_at(self, wm: int) -> int:
        """The smallest window start that is not closed at watermark ``wm``: s + window
        > wm."""
        if wm == NO_TIME:
            return 2 * NO_TIME
        return ((wm - self.window) // self.slide + 1) * self.slide

    def on_data(self, port: int, tuples: Sequence[Tuple], out: list[Tuple]) -> None:
        failed = self._run(tuples, self._panes, self.seq_base, self._low())
        if failed is not None:
            i, e = failed
            t = tuples[i]
            raise OperatorError(
                f"{self.describe()}: cannot aggregate tuple id {t[1]} (time {t[2]}, values "
                f"{t[4]!r}): {type(e).__name__}: {e}"
            ) from e

    def on_boundary(self, port: int, out: list[Tuple]) -> None:
        low = self._low()
        panes, window, slide = self._panes, self.window, self.slide
        done = self._closed_below  # windows starting below it were closed already
        starts: set[int] = set()
        for ps in panes:  # windows over a pane start in (ps - window, ps]; closing: < low
            s = min(ps - ps % slide, low - slide)
            while s > ps - window and s >= done:
                starts.add(s)
                s -= slide
        if starts:
            keys = sorted(panes)
            for s in sorted(starts):
                lo, hi = bisect_left(keys, s), bisect_left(keys, s + window)
                self._close(s, [panes[q][1] for q in keys[lo:hi]], out)
        self._closed_below = max(done, low)
        for ps in [ps for ps in panes if ps - ps % slide < low]:
            del panes[ps]

    def _close(self, start: int, groups: list[dict[Any, list[Any]]], out: list[Tuple]) -> None:
        """Emit window ``start`` from the group accumulators of its panes (in time order)."""
        if len(groups) == 1:
            accs = list(groups[0].items())  # one pane: insertion order = first appearance
        else:
            merged: dict[Any, list[Any]] = {}
            merge = self._merge
            for g in groups:
                for k, a in g.items():
                    m = merged.get(k)
                    if m is None:
                        merged[k] = list(a)
                    else:
                        merge(m, a)
            accs = sorted(merged.items(), key=lambda ka: ka[1][2])
        emit, result = self.emit, self._result
        for k, a in accs:
            try:
                values = result(k, a)
            except Exception as e:  # e.g. avg over strings
                raise OperatorError(
                    f"{self.describe()}: cannot finish window {start} group {k!r}: "
                    f"{type(e).__name__}: {e}"
                ) from e
            emit(out, start, a[0], values)

    def oldest_time(self) -> int:
        return NO_TIME if self.watermark == NO_TIME else self._low()

    def oldest_seq(self) -> int | None:
        if not self._panes:
            return None
        first: int = min(p[0] for p in self._panes.values())
        return first

    def clear(self) -> None:
        self._panes = {}
        self._closed_below = NO_TIME

    # ------------------------------------------------------------------ snapshots
    def snapshot_state(self) -> Plain:
        n = self._n_key
        panes = [
            [ps, p[0], [[[] if n == 0 else [k] if n == 1 else list(k), a] for k, a in p[1].items()]]
            for ps, p in self._panes.items()
        ]
        return {"closed_below": self._closed_below, "panes": panes}

    def digest_state(self) -> Plain:
        """The panes without the log sequence number of their first tuple."""
        state = self.snapshot_state()
        return {"closed_below": state["closed_below"],
                "panes": [[ps, groups] for ps, _, groups in state["panes"]]}

    def restore_state(self, state: Plain) -> None:
        n = self._n_key
        self._closed_below = state["closed_below"]
        self._panes = {
            ps: [
                first,
                {(None if n == 0 else k[0] if n == 1 else tuple(k)): list(a) for k, a in groups},
            ]
            for ps, first, groups in state["panes"]
        }

    # ------------------------------------------------------------------ parts (CEC)
    # A part is one group's accumulator in one pane, keyed (pane start, group key): a tuple
    # updates exactly one, and a window's result merges its panes' parts. A pane's own
    # "first seq" is the smallest of its groups' (each group's is its first tuple's).
    def part_keys(self) -> Collection[PartKey]:
        return [(ps, k) for ps, p in self._panes.items() for k in p[1]]

    def part_delta(self, memo: dict[Any, Any]) -> tuple[list[PartKey], list[PartKey]]:
        """By pane: a pane's groups are only ever added, in order, until the pane goes, so
        ``memo`` (pane -> its groups seen) tells the new ones without looking at the rest."""
        panes = self._panes
        closed = [(ps, k) for ps in [ps for ps in memo if ps not in panes]
                  for k in memo.pop(ps)]
        opened: list[PartKey] = []
        for ps, p in panes.items():
            groups, seen = p[1], memo.get(ps)
            if seen is None:
                seen = memo[ps] = []
            if len(groups) > len(seen):
                new = list(islice(groups, len(seen), None))
                seen.extend(new)
                opened += [(ps, k) for k in new]
        return opened, closed

    def part_state(self, key: PartKey) -> Plain:
        ps, k = key
        return list(self._panes[ps][1][k])

    def key_to_plain(self, key: PartKey) -> Plain:
        ps, k = key
        return [ps, list(k) if self._n_key > 1 else k]

    def keys_to_plain(self, keys: Sequence[PartKey]) -> list[Plain]:
        # The live keys themselves: orjson writes a tuple as an array, which reads back as
        # key_to_plain's lists.
        return list(keys)

    def part_states(self, keys: Sequence[PartKey]) -> list[Plain]:
        panes = self._panes
        return [panes[ps][1][k] for ps, k in keys]  # the live accumulators (see the base)

    def key_from_plain(self, plain: Plain) -> PartKey:
        ps, k = plain
        return (ps, tuple(k) if self._n_key > 1 else k)

    def global_state(self) -> Plain:
        return {"closed_below": self._closed_below}

    def load_parts(self, global_state: Plain, parts: Sequence[tuple[PartKey, Plain]]) -> None:
        self.clear()
        self._closed_below = global_state["closed_below"]
        # Groups in order of their first tuple: a one-pane window emits them in that order.
        for (ps, k), acc in sorted(parts, key=lambda p: p[1][2]):
            pane = self._panes.get(ps)
            if pane is None:
                pane = self._panes[ps] = [acc[2], {}]
            pane[1][k] = list(acc)
            pane[0] = min(pane[0], acc[2])

    def rebuild(self, port: int, tuples: Sequence[Tuple], accept: Accept) -> None:
        pane, key_pos = self._pane, self._key_pos
        for t in tuples:
            v = t[4]
            k = (None if not key_pos else v[key_pos[0]] if len(key_pos) == 1
                 else tuple(v[p] for p in key_pos))
            if accept((t[2] - t[2] % pane, k), t[1]):
                # The part exists (it was loaded): the loop only updates its accumulator.
                self.on_data(port, (t,), [])
