"""The base class's generic undo/redo, on small operators written for the purpose."""

from __future__ import annotations

from collections.abc import Sequence

from operators.base import Operator
from operators.spec import Params
from protocol.tuples import Kind, Tuple, boundary, make_tuple, undo

S, T = Kind.STABLE, Kind.TENTATIVE


class Count2(Operator):
    """Tumbling count of width 10 over two inputs; windows close on the min watermark."""

    type_name = "count2-test"
    n_inputs = 2

    def configure(self, params: Params) -> None:
        self.output_schema = ("n",)
        self.clear()

    def clear(self) -> None:
        self.win: dict[int, list[int]] = {}  # start -> [count, tmax, first seq]

    def on_data(self, port: int, tuples: Sequence[Tuple], out: list[Tuple]) -> None:
        for i, t in enumerate(tuples):
            w = self.win.setdefault(t[2] // 10 * 10, [0, t[3], self.seq_base + i])
            w[0] += 1
            w[1] = max(w[1], t[3])

    def on_boundary(self, port: int, out: list[Tuple]) -> None:
        for s in sorted(s for s in self.win if s + 10 <= self.watermark):
            n, tmax, _ = self.win.pop(s)
            self.emit(out, s, tmax, (n,))

    def oldest_time(self) -> int:
        return min([self.watermark, *self.win])

    def oldest_seq(self) -> int | None:
        return min((w[2] for w in self.win.values()), default=None)

    def snapshot_state(self) -> object:
        return [[s, *w] for s, w in self.win.items()]

    def restore_state(self, state: object) -> None:
        assert isinstance(state, list)
        self.win = {e[0]: list(e[1:]) for e in state}


def _run(tentative: bool) -> list[tuple[str, int, int, tuple[object, ...]]]:
    op = Count2("c", [("v",), ("v",)], Params("c", {}))
    out: list[Tuple] = []
    out += op.process(1, [boundary(100)])
    # Out of time order within the port: window [20, 30) stays open while [0, 10) closes.
    out += op.process(0, [make_tuple(S, 1, 25, 25, (0,)), make_tuple(S, 2, 5, 5, (0,))])
    out += op.process(0, [boundary(12)])
    if tentative:
        out += op.process(0, [make_tuple(T, 3, 26, 26, (9,))])
        out += op.process(0, [undo(2)])
    out += op.process(0, [make_tuple(S, 3, 26, 26, (0,)), boundary(30)])
    return [(t.kind.name, t.id, t.time, t.values) for t in out if t.kind in (S, T, Kind.UNDO)]


def test_rebuild_warms_up_with_the_watermarks_of_its_start() -> None:
    """A window that closed before the replay's start must not be emitted again (the
    warm-up used to start from no watermark at all, so [0, 10) came out twice)."""
    assert _run(tentative=True) == _run(tentative=False) == [("STABLE", 1, 0, (1,)), ("STABLE", 2, 20, (2,))]


def test_undo_keeps_the_stable_boundary_that_followed_the_last_kept_tuple() -> None:
    """UNDO(u) removes from the first undone tuple; the boundary closing the last stable
    window came before it and stays, so its window is not re-emitted."""
    agg = Count2("c", [("v",), ("v",)], Params("c", {}))
    agg.process(1, [boundary(1000)])
    out = agg.process(0, [make_tuple(S, 1, 1, 1, (0,)), make_tuple(S, 2, 12, 12, (0,)), boundary(10)])
    assert [t.values for t in out if t.kind is S] == [(1,)]
    agg.process(0, [make_tuple(T, 3, 13, 13, (0,))])
    out = agg.process(0, [undo(2), make_tuple(S, 3, 13, 13, (0,)), boundary(20)])
    assert [(t.kind, t.values) for t in out if t.kind is not Kind.BOUNDARY] == [(S, (2,))]
