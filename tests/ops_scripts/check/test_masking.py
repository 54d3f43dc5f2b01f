"""Masking (ops_scripts/check/masking.py, issue 46) on hand-built histories and client logs:
the bound and its formula; a failure of one replica whose client got no tentative result
and fast new results is valid; a tentative result in its window, or a new result later than
B, is invalid; a fault that touched every replica, overlapping faults that leave no clean
replica, a clean replica not STABLE, a fault during start-up and a slowed link are not
judged (valid, saying so); a process pair's path is not judged; an unreadable history or a
crash is unknown; ``check_run`` prints the row."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from node.config.model import ClusterConfig
from ops_scripts.check import Status, Verdict, check_run
from ops_scripts.check.masking import mask_bound, mask_windows, masking_verdicts
from ops_scripts.check.recorded import History
from protocol.tuples import Kind, Tuple, make_tuple
from tests.ops_scripts.check.world import (
    C1,
    SECOND,
    World,
    fault,
    heal,
    keyed,
    link,
    make_config,
    state,
)

MS = 1_000
MK = "masking"
Row = tuple[int, Tuple]
#: The world's settings (heartbeats every 100 ms, failed after more than 3, buckets of 100
#: ms), one node: B = 0.4 + 0.1 + 0.2 + 0.2 = 0.9 s.
FORMULA = ("B = 0.900 s = detection 4 x 0.100 + answer 1 x 0.100 + switch 2 x 0.100 + "
           "path 1 x (bucket 0.100 + heartbeat 0.100)")
CUT_N1A = {"fault": "partition", "shape": "source", "source": "s2", "replicas": ["n1a"]}
CUT_ALL = {"fault": "partition", "shape": "source", "source": "s2"}


# ---------------------------------------------------------------- factories
def data(kind: Kind, ident: int, tmax: int) -> Tuple:
    return make_tuple(kind, ident, tmax, tmax, ("k", ident, 1))


def steady(lag: int = 50 * MS, until: int = 6 * SECOND) -> list[Row]:
    """A stable result every 100 ms from 0.1 s, each ``lag`` after its tmax."""
    return [(t + lag, data(Kind.STABLE, t // (100 * MS), t))
            for t in range(100 * MS, until, 100 * MS)]


def history(*faults: dict[str, Any], extra: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Ready at 0, both replicas STABLE, ``faults`` (already events), a heal_all at 7 s."""
    events = [{"t": 0, "event": "start", "config": "hand-built.toml", "name": "t"},
              {"t": 0, "event": "ready"}, state(0, "n1a", "STABLE"), state(0, "n1b", "STABLE"),
              *faults, *extra, {"t": 7 * SECOND, "event": "heal_all"},
              {"t": 8 * SECOND, "event": "end"}]
    return sorted(events, key=lambda e: e["t"])


def subset(start: int = SECOND, end: int = 3 * SECOND, fid: int = 0,
           raw: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A fault and its heal: by default s2 cut from n1a alone, from 1 s to 3 s."""
    return [fault(start, fid, make_config(), **(raw or CUT_N1A)), heal(end, fid)]


def judge(events: Sequence[dict[str, Any]], rows: Sequence[Row],
          config: ClusterConfig | None = None, **kw: Any) -> Verdict:
    config = config or make_config()
    by = keyed(masking_verdicts(config, events, {"c1": list(rows)}, **kw))
    return by[MK, C1]


# ---------------------------------------------------------------- the bound
def test_the_bound_is_detection_answer_switch_and_the_paths_normal_delay() -> None:
    b = mask_bound(make_config(), "n1.out")
    assert b.total == 900_000 and b.describe() == FORMULA
    chain = mask_bound(make_config(chain=True), "n2.out")
    assert [n for n, _, _ in chain.path] == ["n1", "n2"] and chain.total == 1_100_000
    assert chain.describe().endswith("path 2 x (bucket 0.100 + heartbeat 0.100)")
    with pytest.raises(ValueError, match="source's stream"):
        mask_bound(make_config(), "s1")


# ---------------------------------------------------------------- judged windows
def test_a_masked_source_cut_from_one_replica_is_valid() -> None:
    v = judge(history(*subset()), steady())
    assert v.status is Status.VALID, v.evidence
    assert v.evidence.startswith(
        "1 subset failure(s) judged (#0 (partition source s2 from n1a (blackhole) for 1 s): "
        "kept every input: n1b of n1): no tentative result in them, 20 new result(s) in "
        "them within B, worst row ")
    assert v.evidence.endswith(FORMULA)


@pytest.mark.parametrize("raw", [
    {"fault": "partition", "shape": "isolate", "process": "n1a"},
    {"fault": "kill", "process": "n1b"},
    link("n1a", "c1"),  # the client cut from one replica: it switches to the other
])
def test_an_isolation_a_kill_and_a_client_cut_of_one_replica_are_judged(
        raw: dict[str, Any]) -> None:
    events = history(*subset(raw=raw))
    (w,) = mask_windows(make_config(), "c1", events, mask_bound(make_config(), "n1.out"))
    assert w.judged, w.why
    assert judge(events, steady()).status is Status.VALID


def test_a_tentative_result_in_a_masked_window_is_invalid() -> None:
    rows = steady()
    rows.insert(20, (2_050 * MS, data(Kind.TENTATIVE, 10_000, 2 * SECOND)))
    v = judge(history(*subset()), rows)
    assert v.status is Status.INVALID
    assert v.evidence.startswith(
        f"row 21: TENTATIVE(id=10000, time={2 * SECOND}, tmax={2 * SECOND}, values=['k', "
        "10000, 1]) arrived at 2050000: a tentative result whose input came during fault #0 "
        "(partition source s2 from n1a (blackhole) for 1 s), a subset failure (kept every "
        "input: n1b of n1): the client should have been switched to a STABLE replica; 1 "
        "tentative result(s) in the 1 judged window(s); ")
    assert FORMULA in v.evidence
    assert "note: alpha*X" not in v.evidence  # 2.7 s: room enough to switch


def test_input_in_flight_when_the_failure_began_counts_but_older_input_does_not() -> None:
    # A stuck bucket holds what came just before the fault: tentative within the path's
    # normal delay (0.2 s) before it is the failure's; 0.3 s before is another story.
    just = [*steady(), (2 * SECOND, data(Kind.TENTATIVE, 9_000, SECOND - 50 * MS))]
    assert judge(history(*subset()), just).status is Status.INVALID
    older = [*steady(), (2 * SECOND, data(Kind.TENTATIVE, 9_000, SECOND - 300 * MS))]
    assert judge(history(*subset()), older).status is Status.VALID


def test_a_new_result_later_than_the_bound_is_invalid() -> None:
    # The client stalls from 1.5 s: everything from tmax 1.5 s arrives at 2.45 s (0.95 s).
    rows = [(max(a, 2_450 * MS) if t.tmax >= 1_500 * MS else a, t) for a, t in steady()]
    rows.sort(key=lambda r: r[0])
    v = judge(history(*subset()), rows)
    assert v.status is Status.INVALID
    assert v.evidence.startswith(
        "row 15: STABLE(id=15, tmax=1500000) arrived at 2450000, delay 0.950 s > B in fault "
        "#0 (partition source s2 from n1a (blackhole) for 1 s), a subset failure (kept every "
        "input: n1b of n1); 1 of 20 new results in the 1 judged window(s) late; ")
    # The same stall outside any judged window is availability's business, not this one's.
    assert judge(history(*subset(start=3 * SECOND, end=4 * SECOND)), rows).status \
        is Status.VALID


def test_a_tight_alpha_x_is_noted_beside_an_invalid_verdict() -> None:
    config = make_config(wait=500_000)
    config = dataclasses.replace(config, nodes={"n1": dataclasses.replace(
        config.nodes["n1"], settings=dataclasses.replace(config.nodes["n1"].settings,
                                                         alpha=0.2))})
    rows = [*steady(), (2 * SECOND, data(Kind.TENTATIVE, 9_000, 2 * SECOND))]
    v = judge(history(*subset()), rows, config)
    assert v.status is Status.INVALID
    assert v.evidence.endswith(
        "note: alpha*X (n1 0.600 s) is not above detection + answer + switch 0.700 s: a "
        "replica may release tentative results before its consumers switch (the paper "
        "assumes the switch is small compared with alpha*X)")


# ---------------------------------------------------------------- not judged
def not_judged(events: Sequence[dict[str, Any]], rows: Sequence[Row] | None = None) -> str:
    """The evidence of a valid verdict that judged nothing (a tentative result in every
    window must not matter)."""
    rows = [*(steady() if rows is None else rows),
            (2_500 * MS, data(Kind.TENTATIVE, 9_000, 2 * SECOND))]
    v = judge(events, rows)
    assert v.status is Status.VALID, v.evidence
    assert v.evidence.startswith("not judged: ") and v.evidence.endswith(FORMULA)
    return v.evidence


def test_a_fault_that_touched_every_replica_is_not_judged() -> None:
    assert not_judged(history(*subset(raw=CUT_ALL))).startswith(
        "not judged: no fault of the run was a subset failure for this client (#0 (partition "
        "source s2 from n1a,n1b (blackhole) for 1 s): no replica of n1 kept every input (n1a "
        "lost s2; n1b lost s2)); B = ")


def test_overlapping_faults_that_leave_no_clean_replica_are_not_judged() -> None:
    # n1a cut from s2, then n1b killed while it lasts: neither window is judged; a kill
    # within B after the heal counts too (a result in flight then).
    kill = {"fault": "kill", "process": "n1b"}
    for start, end in [(2 * SECOND, 4 * SECOND), (3_500 * MS, 4 * SECOND)]:
        why = not_judged(history(*subset(), *subset(start, end, 1, kill)))
        assert "#0 (partition source s2 from n1a (blackhole) for 1 s): no replica of n1 kept " \
               "every input (n1a lost s2; n1b down or stalled)" in why
    # 1.5 s after the heal (more than B = 0.9 s): two judged windows.
    v = judge(history(*subset(), *subset(4_500 * MS, 5 * SECOND, 1, kill)), steady())
    assert v.status is Status.VALID and v.evidence.startswith("2 subset failure(s) judged")


def test_a_clean_replica_not_stable_when_the_window_starts_is_not_judged() -> None:
    extra = [state(900 * MS, "n1b", "STABILIZATION"), state(1_200 * MS, "n1b", "STABLE")]
    assert "n1b STABILIZATION within B before the start" in not_judged(
        history(*subset(), extra=extra))
    # STABLE again at the start, but not within B (0.9 s) before it: its tentative results
    # from then are the earlier failure's, not this one's (simulate seed 46473).
    extra = [state(300 * MS, "n1b", "UP_FAILURE"), state(800 * MS, "n1b", "STABLE")]
    assert "n1b UP_FAILURE within B before the start" in not_judged(
        history(*subset(), extra=extra))
    extra = [state(900 * MS, "n1b", "RECOVERING"), state(1_200 * MS, "n1b", "STABLE")]
    assert "n1b down or stalled" in not_judged(history(*subset(), extra=extra))


def test_start_up_slowed_links_cut_clients_and_dead_sources_are_not_judged() -> None:
    late_ready = [e if e["event"] != "ready" else {**e, "t": 2 * SECOND}
                  for e in history(*subset())]
    assert "#0 (partition source s2 from n1a (blackhole) for 1 s): during the start-up" in \
        not_judged(sorted(late_ready, key=lambda e: e["t"]))
    delay = {"fault": "delay", "between": ["n1a", "c1"], "seconds": 0.2}
    assert "delay cuts nothing and stops nothing: not a failure" in \
        not_judged(history(*subset(raw=delay)))
    both = [*subset(raw=link("n1a", "c1")), *subset(fid=1, raw=link("n1b", "c1"))]
    assert "c1 is cut from every replica of n1 that kept its inputs (n1a, n1b)" in \
        not_judged(history(*both))
    dead = {"fault": "kill", "process": "s1"}
    assert "source s1 down" in not_judged(history(*subset(raw=dead)))
    assert not_judged(history()).startswith("not judged: the run had no fault; B = ")


def test_a_process_pair_on_the_path_is_not_judged() -> None:
    config = make_config()
    n1 = config.nodes["n1"]
    pair = dataclasses.replace(config, nodes={"n1": dataclasses.replace(
        n1, settings=dataclasses.replace(n1.settings, ha="active_standby"))})
    v = judge(history(*subset()), [(1, data(Kind.TENTATIVE, 1, 0))], pair)
    assert v.status is Status.VALID
    assert v.evidence.startswith("not judged: masking by switching is DPC's promise, and the "
                                 "path has ha = active_standby at node n1")


def test_an_unreadable_history_or_a_crash_is_unknown() -> None:
    v = judge(history(*subset()), steady(), problems={"history": "history.jsonl:3: not JSON"})
    assert v.status is Status.UNKNOWN and v.evidence == "history.jsonl:3: not JSON"
    v = keyed(masking_verdicts(make_config(), history(*subset()), {}))[MK, C1]
    assert v.status is Status.UNKNOWN and v.evidence == "no log of the client"
    broken = [{k: v for k, v in e.items() if k != "cut"} for e in history(*subset())]
    v = judge(broken, steady())
    assert v.status is Status.UNKNOWN and v.evidence.startswith("checker crashed: HistoryError")


def test_check_run_prints_a_masking_row_per_client(world: World) -> None:
    config, sources, _ = world
    rows = steady()
    h = History(sources=sources, clients={"c1": [t for _, t in rows]},
                arrivals={"c1": [a for a, _ in rows]})
    verdicts, _ = check_run(config, history(*subset()), h)
    (v,) = [v for v in verdicts if v.name == MK]
    assert v.subject == C1 and v.status is Status.VALID
    assert verdicts[-1] is v  # after liveness
    no_history, _ = check_run(config, None, h)
    assert not [v for v in no_history if v.name == MK]  # without a history, nothing to judge
