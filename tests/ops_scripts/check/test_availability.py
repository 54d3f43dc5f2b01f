"""Availability at the client (ops_scripts/check/availability.py): Delay_new on hand-built logs,
the bound k*X on the example configs, the loader on a run directory, and the report that
``dpc check`` prints and stores in check.json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from node.config.load import load_config
from node.config.model import ClusterConfig
from node.procs.runlog import RunLogWriter, count_rows, read_log
from ops_scripts.check.availability import (
    ClientAvailability,
    apply_undos,
    assess,
    bound_for,
    delay_new,
    judge_delays,
    percentile,
)
from ops_scripts.check.paths import client_outages, down_at_end
from ops_scripts.errors import HistoryError
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo
from tests.ops_scripts.check.world import fault, heal, link, run, state, write_run
from tests.paths import EXAMPLES

SECOND = 1_000_000
MS = 1_000

Row = tuple[int, Tuple]


# ---------------------------------------------------------------- factories
def data(kind: Kind, ident: int, tmax: int) -> Tuple:
    return make_tuple(kind, ident, tmax, tmax, ("k", ident))


def stable(ident: int, tmax: int) -> Tuple:
    return data(Kind.STABLE, ident, tmax)


def tentative(ident: int, tmax: int) -> Tuple:
    return data(Kind.TENTATIVE, ident, tmax)


def at(arrival: int, *tuples: Tuple) -> list[Row]:
    """Rows that arrived together (one batch)."""
    return [(arrival, t) for t in tuples]


def steady(n: int, lag: int, first: int = 1) -> list[Row]:
    """``n`` stable tuples, one per 100 ms, each arriving ``lag`` after its tmax."""
    return [(i * 100 * MS + lag, stable(i, i * 100 * MS)) for i in range(first, first + n)]


@pytest.fixture(scope="module")
def basic() -> ClusterConfig:
    return load_config(EXAMPLES / "basic.toml")


@pytest.fixture(scope="module")
def chain4() -> ClusterConfig:
    return load_config(EXAMPLES / "chain4.toml")


# ---------------------------------------------------------------- delay_new
def test_no_failure_delay_is_the_max_of_arrival_minus_tmax() -> None:
    rows = steady(10, lag=20 * MS)
    rows[4] = (rows[4][0] + 30 * MS, rows[4][1])  # one late batch: 50 ms
    rows.insert(3, (rows[3][0], boundary(300 * MS)))  # control tuples do not count
    assert delay_new(rows) == 50 * MS
    assert delay_new([]) == 0


def test_corrections_after_an_undo_are_excluded() -> None:
    # Stable to 0.5 s; the failure: tentative 0.6-0.9 s, each released 2.7 s late; then the
    # UNDO, the stable corrections (6 s late) and a REC_DONE; then new results again.
    rows = steady(5, lag=10 * MS)
    rows += [(t.tmax + 2700 * MS, t) for t in (tentative(i, i * 100 * MS) for i in range(6, 10))]
    rows += at(6 * SECOND, undo(5), *(stable(i, i * 100 * MS) for i in range(6, 10)), rec_done())
    rows += steady(3, lag=10 * MS, first=60)
    assert delay_new(rows) == 2700 * MS


def test_new_results_inside_a_reconciliation_count() -> None:
    # The node caught up during reconciliation: after the corrections of 0.6-0.7 s come
    # results about 0.8-0.9 s that the client never had, before the REC_DONE.
    rows = steady(5, lag=10 * MS)
    rows += [(2 * SECOND, tentative(i, i * 100 * MS)) for i in (6, 7)]
    rows += at(3 * SECOND, undo(5), *(stable(i, i * 100 * MS) for i in (6, 7, 8, 9)), rec_done())
    assert delay_new(rows) == 3 * SECOND - 800 * MS


def test_a_replayed_stable_stream_after_a_switch_is_excluded() -> None:
    # The client switches replicas: an UNDO, then the other replica's stream from id 3,
    # with no REC_DONE. The replay (ids 3-5, already held) arrives 4 s late; id 6 is new.
    rows = steady(5, lag=10 * MS)
    rows += at(4 * SECOND, undo(2), *(stable(i, i * 100 * MS) for i in range(3, 6)))
    rows += at(4 * SECOND + 10 * MS, stable(6, 600 * MS))
    assert delay_new(rows) == 4 * SECOND + 10 * MS - 600 * MS
    replay_only = rows[:-1]
    assert delay_new(replay_only) == 10 * MS


def test_tentative_new_tuples_are_counted() -> None:
    rows = steady(3, lag=10 * MS)
    rows += [(2900 * MS, tentative(4, 400 * MS)), (3000 * MS, tentative(5, 500 * MS))]
    assert delay_new(rows) == 2500 * MS


def test_apply_undos_keeps_what_is_in_force() -> None:
    rows = steady(3, lag=0)
    rows += at(1, tentative(4, 400 * MS), undo(3), stable(4, 400 * MS), rec_done())
    assert apply_undos(t for _, t in rows) == [stable(i, i * 100 * MS) for i in range(1, 5)]


# ---------------------------------------------------------------- bound_for
def test_bound_of_one_node_is_its_x(basic: ClusterConfig) -> None:
    (node,) = basic.nodes.values()
    assert bound_for(basic, "n1.out") == node.settings.x == 3 * SECOND
    assert bound_for(basic, "s1") == 0  # a source's stream crosses no node


def test_bound_of_a_chain_sums_x_over_its_four_nodes(chain4: ClusterConfig) -> None:
    xs = [n.settings.x for n in chain4.nodes.values()]
    assert len(xs) == 4
    assert bound_for(chain4, "n4.out") == sum(xs) == 13 * SECOND  # n4 sets x = 4 s
    assert bound_for(chain4, "n2.out") == 2 * 3 * SECOND


def test_bound_takes_the_path_with_the_largest_sum_of_x(chain4: ClusterConfig) -> None:
    # n3 reads n2.out (s1 -> n1 -> n2, 2 + 2 s) and s2 -> n5 (one node, X = 9 s).
    nodes = dict(chain4.nodes)
    spec = nodes["n1"]
    nodes = {
        "n1": dataclasses.replace(spec, settings=dataclasses.replace(spec.settings, x=2 * SECOND)),
        "n2": dataclasses.replace(
            nodes["n2"], settings=dataclasses.replace(spec.settings, x=2 * SECOND)
        ),
        "n5": dataclasses.replace(
            spec,
            name="n5",
            inputs=("s2",),
            settings=dataclasses.replace(spec.settings, x=9 * SECOND),
        ),
        "n3": dataclasses.replace(
            nodes["n3"],
            inputs=("n2.out", "n5.out"),
            settings=dataclasses.replace(spec.settings, x=1 * SECOND),
        ),
    }
    config = dataclasses.replace(chain4, nodes=nodes)
    assert bound_for(config, "n3.out") == 10 * SECOND


# ---------------------------------------------------------------- assess
def test_assess_counts_and_flags_an_exceeded_bound(basic: ClusterConfig) -> None:
    rows = steady(3, lag=10 * MS)
    rows += [(t.tmax + 2900 * MS, t) for t in (tentative(i, i * 100 * MS) for i in (4, 5))]
    rows += at(5 * SECOND, undo(3), stable(4, 400 * MS), stable(5, 500 * MS), rec_done())
    kept = assess(basic, "c1", rows)
    assert kept == ClientAvailability(
        client="c1",
        stream="n1.out",
        received=len(rows),
        n_tentative=2,
        n_undo=1,
        n_rec_done=1,
        delay_new_us=2900 * MS,
        bound_us=3 * SECOND,
        exceeded=False,
    )
    late = [*rows, (9 * SECOND, stable(6, 600 * MS))]  # 8.4 s after its tmax
    worse = assess(basic, "c1", late)
    assert worse.delay_new_us == 8400 * MS and worse.exceeded
    at_bound = [*rows, (3600 * MS, stable(6, 600 * MS))]  # exactly X: kept
    assert not assess(basic, "c1", at_bound).exceeded


# ---------------------------------------------------------------- dpc check's report
def test_check_reports_availability_without_changing_the_verdict(tmp_path: Path) -> None:
    rd, _, _ = write_run(tmp_path)
    code, text, report = run(rd)
    assert code == 0, text
    (entry,) = report["availability"]
    assert entry["client"] == "c1" and entry["stream"] == "n1.out"
    assert entry["bound_us"] == 3 * SECOND and entry["n_undo"] == 1 and not entry["exceeded"]
    assert entry["received"] == count_rows(rd.client_log("c1"))
    assert "availability: c1 received" in text and "bound k*X = 3.00 s: kept)" in text

    # The same tuples, each arriving 5 s after its tmax: Delay_new exceeds 3 s, still a PASS.
    rows = read_log(rd.client_log("c1"))
    rd.client_log("c1").unlink()
    with RunLogWriter(rd.client_log("c1")) as w:
        for _, t in rows:
            w.write([t], t.tmax + 5 * SECOND)
    code, text, report = run(rd)
    assert code == 0 and "PASS" in text, text
    assert report["availability"][0]["exceeded"] and "EXCEEDED" in text


def test_with_a_history_the_raw_delay_new_pronounces_no_verdict(tmp_path: Path) -> None:
    """The first results arrive 5 s late, before the history's ``ready``: the start-up,
    excused. The raw Delay_new (every new result) is 5 s; only the judged line speaks of
    the bound (``make demo`` once printed "EXCEEDED" for its start-up in a run that passed)."""
    rd, _, _ = write_run(tmp_path)
    rows = read_log(rd.client_log("c1"))
    rd.client_log("c1").unlink()
    late = 10
    with RunLogWriter(rd.client_log("c1")) as w:
        for k, (_, t) in enumerate(rows):
            w.write([t], t.tmax + (5 * SECOND if k < late else 1000))
    ready = max(t.tmax for _, t in rows[:late]) + 5 * SECOND + 1
    end = max(t.tmax for _, t in rows) + 10 * SECOND
    rd.history.write_text("".join(json.dumps(e) + "\n" for e in [
        {"t": 0, "event": "start", "config": str(rd.config), "name": "t"},
        {"t": ready, "event": "ready"}, {"t": end, "event": "end"}]))
    _, text, report = run(rd)
    assert not report["availability"][0]["delays"]["late"], text  # the judged figure
    assert "Delay_new 5.00 s over every new result, start-up and outages included" in text, text
    assert "EXCEEDED" not in text and "0 over the bound 3.000 s" in text, text


def test_check_with_a_missing_client_log_notes_it_and_keeps_its_code(tmp_path: Path) -> None:
    rd, _, _ = write_run(tmp_path)
    rd.client_log("c1").unlink()
    code, text, report = run(rd)
    assert code == 1  # the verdict's doing (unknown), as before the report existed
    assert report["availability"] == []
    assert "availability: client c1: no log" in text


# ---------------------------------------------------------------- outages (paths.py)
def spans(config: ClusterConfig, events: list[dict[str, Any]],
          client: str = "c1") -> list[tuple[int, int | None]]:
    return [(o.start, o.end) for o in client_outages(config, events)[client]]


def test_no_fault_no_outage_and_one_replica_down_keeps_the_path(basic: ClusterConfig) -> None:
    assert spans(basic, []) == []
    events = [fault(1 * SECOND, 1, basic, fault="pause", process="n1b"), heal(3 * SECOND, 1)]
    assert spans(basic, events) == []
    isolate = {"fault": "partition", "shape": "isolate", "process": "n1a"}
    assert spans(basic, [fault(SECOND, 1, basic, **isolate), heal(3 * SECOND, 1)]) == []


def test_a_one_way_cut_breaks_the_edge_in_either_direction(basic: ClusterConfig) -> None:
    for a, b in (("n1a", "c1"), ("c1", "n1a")):  # data one way, heartbeats the other
        events = [
            fault(1 * SECOND, 1, basic, **link(a, b, one_way=True)),
            fault(2 * SECOND, 2, basic, fault="pause", process="n1b"),
            heal(4 * SECOND, 1),
            heal(5 * SECOND, 2),
        ]
        (o,) = client_outages(basic, events)["c1"]
        assert (o.start, o.end) == (2 * SECOND, 4 * SECOND)
        assert o.why == "n1a-c1 cut; n1b down"


def test_a_slowed_link_counts_as_broken(basic: ClusterConfig) -> None:
    events = [
        fault(1 * SECOND, 1, basic, fault="delay", between=["n1a", "c1"], seconds=0.2),
        fault(1 * SECOND, 2, basic, **link("n1b", "c1")),
        {"t": 2 * SECOND, "event": "heal_all"},
    ]
    (o,) = client_outages(basic, events)["c1"]
    assert (o.start, o.end) == (SECOND, 2 * SECOND) and o.why == "n1a-c1 slowed; n1b-c1 cut"


def test_a_skewed_clock_on_the_path_is_an_outage_said_to_be_one(basic: ClusterConfig) -> None:
    """The bound k*X assumes synchronized clocks: a source 2 s ahead stamps results in the
    client's future, which the tmax rule took as new, hiding every later result from the
    check (a run with corrections 7 s late judged valid, unseen). The skew's window is now
    an outage, and says why."""
    events = [fault(1 * SECOND, 1, basic, fault="skew", process="s3", seconds=2.0),
              heal(3 * SECOND, 1)]
    (o,) = client_outages(basic, events)["c1"]
    assert (o.start, o.end) == (SECOND, 3 * SECOND)
    assert o.why == "the clock of s3 skewed (k*X assumes synchronized clocks)"
    own = [fault(SECOND, 1, basic, fault="skew", process="c1", seconds=-1.0), heal(2 * SECOND, 1)]
    assert spans(basic, own) == [(SECOND, 2 * SECOND)]  # its arrivals are stamped by it


def test_a_bridge_keeps_a_path_and_a_split_does_not(basic: ClusterConfig) -> None:
    sources, rest = ["s1", "s2", "s3"], ["n1b", "c1"]
    bridge = {"fault": "partition", "shape": "bridge", "sides": [sources, rest], "bridge": "n1a"}
    assert spans(basic, [fault(SECOND, 1, basic, **bridge), heal(2 * SECOND, 1)]) == []
    split = {"fault": "partition", "shape": "split", "sides": [sources, ["n1a", *rest]]}
    (o,) = client_outages(basic, [fault(SECOND, 1, basic, **split), heal(2 * SECOND, 1)])["c1"]
    assert (o.start, o.end) == (SECOND, 2 * SECOND)
    assert o.why == "n1a has no live input; n1b has no live input"
    # One source reaching a replica is enough: SUnion goes on, tentative, without the others.
    part = {"fault": "partition", "shape": "split", "sides": [["s1", "s2"], ["n1a", *rest]]}
    assert spans(basic, [fault(SECOND, 1, basic, **part), heal(2 * SECOND, 1)]) == []


def test_recovering_counts_as_down_and_a_killed_replica_is_down_until_recovered(
    basic: ClusterConfig,
) -> None:
    # n1a killed 1-3 s; restarted, it logs RECOVERING at 3.4 s and STABLE at 5 s. The other
    # replica's link to c1 is cut 2.5-3.2 s (the restart's start-up: n1a still down) and
    # 4-6 s (n1a RECOVERING until 5 s).
    events = [
        state(0, "n1a", "STABLE"),
        fault(1 * SECOND, 1, basic, fault="kill", process="n1a"),
        fault(2500 * MS, 2, basic, **link("n1b", "c1")),
        heal(3 * SECOND, 1),
        heal(3200 * MS, 2),
        state(3400 * MS, "n1a", "RECOVERING"),
        fault(4 * SECOND, 3, basic, **link("n1b", "c1")),
        state(5 * SECOND, "n1a", "STABLE"),
        heal(6 * SECOND, 3),
    ]
    assert spans(basic, events) == [(2500 * MS, 3200 * MS), (4 * SECOND, 5 * SECOND)]
    # A replica RECOVERING without a kill (started with --recover) is down as well; a
    # fault never healed leaves the outage open.
    events = [state(SECOND, "n1b", "RECOVERING"), fault(2 * SECOND, 1, basic, **link("n1a", "c1"))]
    assert spans(basic, events) == [(2 * SECOND, None)]
    assert down_at_end(events) == {"n1b"}


def test_outages_follow_the_chain(chain4: ClusterConfig) -> None:
    # Every replica of n2 cut from n1's replicas: n3 and n4 have no live input, c1 waits.
    n1, n2 = ["n1a", "n1b"], ["n2a", "n2b"]
    cut = {"fault": "partition", "shape": "split", "sides": [n1, n2]}
    events = [fault(SECOND, 1, chain4, **cut), {"t": 2 * SECOND, "event": "heal_all"}]
    (o,) = client_outages(chain4, events)["c1"]
    assert (o.start, o.end) == (SECOND, 2 * SECOND) and "no live input" in o.why


def test_a_fault_without_its_effects_is_refused(basic: ClusterConfig) -> None:
    with pytest.raises(HistoryError, match="no \\['cut', 'down', 'impaired'\\]"):
        client_outages(basic, [{"t": 1, "event": "fault", "id": 1}])


# ---------------------------------------------------------------- judge_delays
def test_judge_delays_excuses_within_the_bound_of_an_outage_and_describes_the_rest() -> None:
    # Ten new results, one per 100 ms from 0.1 s, each 20 ms late but id 5 (4 s) and id 9
    # (5 s); the corrections after an UNDO are not new and never judged.
    rows = steady(10, lag=20 * MS)
    rows[4] = (rows[4][1].tmax + 4 * SECOND, rows[4][1])
    rows[8] = (rows[8][1].tmax + 5 * SECOND, rows[8][1])
    rows += at(9 * SECOND, undo(2), stable(3, 300 * MS))
    bound = 1 * SECOND
    report = judge_delays("c1", "n1.out", rows, bound, None)  # no history: measured
    assert not report.judged and report.checked == 10 and report.excused == 0
    assert report.late == 2 and report.first_late is not None and report.first_late.id == 5
    assert report.worst is not None and report.worst.id == 9 and report.worst.row == 9
    assert (report.p50_us, report.p90_us, report.max_us) == (20 * MS, 4 * SECOND, 5 * SECOND)
    # An outage [1.5 s, 1.6 s): tmax within [0.5 s, 2.6 s] excused: ids 5 to 10.
    d = judge_delays("c1", "n1.out", rows, bound, [(1500 * MS, 1600 * MS)])
    assert d.judged and (d.checked, d.excused, d.late, d.outages) == (4, 6, 0, 1)
    assert d.max_us == d.p99_us == 20 * MS and d.first_late is None
    # The window's edges are inclusive: an outage ending exactly 1 s before tmax 0.9 s
    # excuses id 9 (5 s late); id 10, 0.1 s further, is checked.
    edge = judge_delays("c1", "n1.out", rows, bound, [(-SECOND, -100 * MS)])
    assert (edge.checked, edge.excused, edge.late) == (1, 9, 0)
    assert edge.worst is not None and edge.worst.id == 10
    # An outage never healed excuses everything from its start - bound on.
    open_ = judge_delays("c1", "n1.out", rows, bound, [(1400 * MS, None)])
    assert (open_.checked, open_.excused, open_.late) == (3, 7, 0)
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([7], 99) == 7


def test_start_up_is_an_outage_and_a_stall_only_where_no_partner_serves(
        basic: ClusterConfig) -> None:
    """Before ``ready`` the cluster was starting. A stalled replica serves nothing new, but
    its partner does: a stall is an outage only while no other replica can serve."""
    events = [{"t": 0, "event": "start"}, {"t": SECOND, "event": "ready"},
              fault(2 * SECOND, 1, basic, fault="stall", process="n1b"), heal(3 * SECOND, 1)]
    outages = client_outages(basic, events)["c1"]
    assert [(o.start, o.end) for o in outages] == [(0, SECOND)]
    assert outages[0].why == "the cluster was starting"
    events[3:3] = [fault(2500 * MS, 2, basic, fault="kill", process="n1a"),
                   heal(2800 * MS, 2)]
    outages = client_outages(basic, events)["c1"]
    assert [(o.start, o.end) for o in outages] == [(0, SECOND), (2500 * MS, 2800 * MS)]
    assert outages[1].why == "n1a down; n1b stalled"
    # Started, never ready (Ctrl-C of dpc launch during its start-up: test_cluster.py's
    # Ctrl-C test failed on a fresh clone, its first results judged against k*X): all of
    # it was start-up, however long the run went on.
    stopped = client_outages(basic, [{"t": 0, "event": "start"},
                                     fault(2 * SECOND, 1, basic, fault="pause", process="n1b"),
                                     {"t": 5 * SECOND, "event": "end"}])["c1"]
    assert [(o.start, o.end, o.why) for o in stopped] == [
        (0, None, "the cluster was stopped before it was ready")]
    assert spans(basic, []) == []  # no history events: nothing to excuse
