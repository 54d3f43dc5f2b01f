"""One operator over a step's flows: vectorized where it can be, per tuple where not.

Role: the vectorized replay's dispatch. :func:`run_step` hands a step's input flows to
the operator's vectorized implementation (filter, map, join, union, aggregate) and,
when there is none or it raised :class:`Fallback` (which leaves the operator untouched),
runs the per-tuple operator itself wave by wave, exactly as the query network would: so
any operator, in any state, gets the per-tuple result, and the vectorized ones get it
faster.
"""

from __future__ import annotations

from collections.abc import Sequence

from operators.aggregate import Aggregate
from operators.base import Operator
from operators.errors import Fallback
from operators.filter import Filter
from operators.join import Join
from operators.map import Map
from operators.soutput import SOutput
from operators.union import Union
from protocol.tuples import Schema, Tuple

from .aggregate import run_aggregate
from .flow import Flow
from .join import run_join
from .soutput import run_soutput
from .stateless import run_filter, run_map
from .union import run_union

__all__ = ["VECTORIZED", "Stream", "run_operator", "run_per_tuple", "run_step"]

_VECTORIZED = {Filter: lambda op, flows, ports: run_filter(op, flows[0]),
               Map: lambda op, flows, ports: run_map(op, flows[0]),
               SOutput: lambda op, flows, ports: run_soutput(op, flows[0]),
               Join: run_join, Union: run_union, Aggregate: run_aggregate}
#: The operator types with a vectorized implementation (the conformance suite runs them).
VECTORIZED = frozenset(cls.type_name for cls in _VECTORIZED)


class Stream:
    """One stream's output over a step: a flow, or ``(wave, tuples)`` batches, each made
    from the other when a consumer needs it (a flow only if the tuples allow one)."""

    def __init__(self, schema: Schema, flow: Flow | None = None,
                 batches: list[tuple[int, list[Tuple]]] | None = None) -> None:
        if flow is None and batches is None:
            raise ValueError("a stream is a flow or batches")
        self.schema, self._flow, self._batches = schema, flow, batches
        #: Whether an operator's vectorized implementation made it.
        self.vectorized = False

    def flow(self) -> Flow:
        if self._flow is None:
            self._flow = Flow.from_waves(self.schema, self.batches())  # (or Fallback)
        return self._flow

    def batches(self) -> list[tuple[int, list[Tuple]]]:
        if self._batches is None:
            self._batches = self.flow().to_waves()
        return self._batches

    def tuples(self) -> list[Tuple]:
        if self._batches is None and self._flow is not None:
            return self._flow.to_tuples()  # (not cut into waves first)
        return [t for _, batch in self.batches() for t in batch]


def run_step(op: Operator, inputs: Sequence[Stream], ports: Sequence[int], now: int) -> Stream:
    """``op`` over a step's input streams (by port): vectorized if it has a vectorized
    implementation and this step allows it, else per tuple, wave by wave."""
    fn = _VECTORIZED.get(type(op))
    if fn is not None and not op.rebuilding:  # (a recovered operator's rebuild: per tuple)
        try:
            flows = [s.flow() for s in inputs]
            out = fn(op, flows, ports)
            op.now = now
            for port, f in enumerate(flows):
                if f.n:
                    op.in_ids[port] = f.data.column("id")[-1].as_py()
            stream = Stream(op.output_schema, flow=out)
            stream.vectorized = True
            return stream
        except Fallback:
            pass  # (op untouched)
    return Stream(op.output_schema,
                  batches=run_per_tuple(op, [s.batches() for s in inputs], ports, now))


def run_operator(op: Operator, flows: Sequence[Flow], ports: Sequence[int],
                 now: int = 0) -> tuple[Flow | None, list[tuple[int, list[Tuple]]] | None]:
    """:func:`run_step` over flows: ``(flow, None)`` when vectorized, else ``(None,
    batches)`` from the per-tuple operator (which of the two ran, for the tests)."""
    out = run_step(op, [Stream(f.schema, flow=f) for f in flows], ports, now)
    return (out.flow(), None) if out.vectorized else (None, out.batches())


def run_per_tuple(op: Operator, waves: Sequence[Sequence[tuple[int, Sequence[Tuple]]]],
                  ports: Sequence[int], now: int = 0) -> list[tuple[int, list[Tuple]]]:
    """What the query network does: wave by wave, each port's batch in ``ports`` order."""
    by_wave: dict[int, dict[int, Sequence[Tuple]]] = {}
    for p, batches in enumerate(waves):
        for wave, batch in batches:
            by_wave.setdefault(wave, {})[p] = batch
    out: list[tuple[int, list[Tuple]]] = []
    for wave in sorted(by_wave):
        got: list[Tuple] = []
        for p in ports:
            batch = by_wave[wave].get(p, ())
            if batch:
                got += op.process(p, batch, now)
        if got:
            out.append((wave, got))
    return out
