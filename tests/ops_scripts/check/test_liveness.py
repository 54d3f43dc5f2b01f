"""Liveness, property 6 (ops_scripts/check/liveness.py), on hand-built histories: the bound
and its formula; a run whose replicas return to STABLE and whose client holds every result
is valid; a replica stuck in UP_FAILURE, STABILIZATION or RECOVERING, a replica STABLE only
after the bound, a client whose results come late or never are invalid; no heal, a fault
after the final heal or a run that ended before the bound are unknown; a process down at
the end excuses itself and what it feeds; a restart's start-up is never judged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ops_scripts.check import Status, Verdict, check_run
from ops_scripts.check.liveness import ending_of, liveness_verdicts, node_bounds
from ops_scripts.check.recorded import History
from protocol.tuples import Tuple
from tests.ops_scripts.check.world import (
    C1,
    LV,
    SECOND,
    World,
    arrivals_for,
    corrected,
    fault,
    heal,
    keyed,
    link,
    make_config,
    state,
)

HEAL_ALL = 7 * SECOND
#: The world's n1 after a failure of F = 2 s: detection 3 x 0.1 + alpha*X 2.7 + permission
#: max(2 replicas, 3 + 1) x 0.5 + recovery 0.2 + 0.2 + replay 2 x 0.5 x (2 + 0.2) = 7.6 s.
B_N1 = 7_600_000
FORMULA = ("B = 7.600 s = n1 7.600 (each node: detection 3 x 0.100 + alpha*X 2.700 + "
           "permission 4 x 0.500 + recovery 0.400 + replay 2 x 0.5 x (F 2.000 + checkpoint "
           "0.200))")


def history(*extra: dict[str, Any], end: int = 20 * SECOND) -> list[dict[str, Any]]:
    """s2 cut from both replicas of n1 from 1 s to 3 s; both fail and reconcile; the final
    heal at 7 s; ``extra`` events; the end at ``end``."""
    config = make_config()
    events = [
        {"t": 0, "event": "start", "config": "hand-built.toml", "name": "t"},
        state(0, "n1a", "STABLE"), state(0, "n1b", "STABLE"),
        fault(1 * SECOND, 0, config, fault="partition", shape="source", source="s2"),
        state(1_500_000, "n1a", "UP_FAILURE"), state(1_500_000, "n1b", "UP_FAILURE"),
        heal(3 * SECOND, 0),
        state(3_100_000, "n1a", "STABILIZATION"), state(3_150_000, "n1a", "STABLE"),
        state(3_200_000, "n1b", "STABILIZATION"), state(3_250_000, "n1b", "STABLE"),
        {"t": HEAL_ALL, "event": "heal_all"},
        *extra,
        {"t": end, "event": "end"},
    ]
    return sorted(events, key=lambda e: e["t"])


def judge(world: World, events: Sequence[dict[str, Any]], client: list[Tuple] | None = None,
          arrivals: list[int] | None = None, **kw: Any) -> dict[tuple[str, str], Verdict]:
    config, sources, ref = world
    client = corrected(ref) if client is None else client
    arrivals = arrivals_for(client) if arrivals is None else arrivals
    return keyed(liveness_verdicts(
        config, events, states={}, clients={"c1": list(zip(arrivals, client, strict=True))},
        sources=sources, reference={"n1.out": ref}, **kw))


def test_the_bound_is_the_formula_of_the_config_summed_along_the_path() -> None:
    (b,) = node_bounds(make_config(), 2 * SECOND).values()
    assert b.total == B_N1 and b.describe() == FORMULA
    chain = node_bounds(make_config(chain=True), 2 * SECOND)
    assert chain["n2"].total == 2 * B_N1 and [n.node for n in chain["n2"].path] == ["n1", "n2"]
    assert chain["n2"].describe().startswith("B = 15.200 s = n1 7.600 + n2 7.600 (each node: ")
    assert chain["n2"].for_client(6 * SECOND).describe().startswith(
        "B = 21.200 s = n1 7.600 + n2 7.600 + k*X 6.000 (")


def test_the_longest_failure_joins_overlapping_faults() -> None:
    config = make_config()
    events = [fault(1 * SECOND, 0, config, **link("n1a", "c1")), heal(3 * SECOND, 0),
              fault(2 * SECOND, 1, config, **link("n1b", "c1")), heal(5 * SECOND, 1),
              fault(8 * SECOND, 2, config, **link("s1", "n1a")), heal(10 * SECOND, 2),
              {"t": 11 * SECOND, "event": "heal_all"}]
    ending = ending_of(sorted(events, key=lambda e: e["t"]), 0)
    assert not isinstance(ending, str)
    assert (ending.heal, ending.how, ending.longest, ending.end) == (11 * SECOND, "heal_all",
                                                                     4 * SECOND, 11 * SECOND)


def test_replicas_back_to_stable_and_a_client_holding_every_result_are_valid(
        world: World) -> None:
    by = judge(world, history())
    assert {v.status for v in by.values()} == {Status.VALID}
    assert set(by) == {(LV, "replica n1a"), (LV, "replica n1b"), (LV, C1)}
    assert by[LV, "replica n1b"].evidence == (
        f"STABLE since -3.750 s; deadline +7.600 s after the final heal (heal_all); {FORMULA}")
    client = by[LV, C1].evidence
    assert client.startswith("all 32 results whose input came before the final heal held as "
                             "stable, the last from row ")
    assert "B = 10.600 s = n1 7.600 + k*X 3.000" in client


@pytest.mark.parametrize("stuck", ["UP_FAILURE", "STABILIZATION", "RECOVERING"])
def test_a_replica_stuck_after_the_final_heal_is_invalid(world: World, stuck: str) -> None:
    # The helper-free stand-in for DPC_TEST_MUTATION=stuck-reconciliation: n1b fails again
    # and never returns to STABLE; the run goes on 13 s past the final heal (B = 7.6 s).
    by = judge(world, history(state(6 * SECOND, "n1b", stuck)))
    v = by[LV, "replica n1b"]
    assert v.status is Status.INVALID
    assert v.evidence == (f"{stuck} since -1.000 s at the end of the run (+13.000 s), past the "
                          f"deadline +7.600 s after the final heal (heal_all); {FORMULA}")
    assert by[LV, "replica n1a"].status is by[LV, C1].status is Status.VALID


def test_a_replica_stable_only_after_the_bound_is_invalid(world: World) -> None:
    late = history(state(8 * SECOND, "n1b", "UP_FAILURE"), state(15 * SECOND, "n1b", "STABLE"))
    v = judge(world, late)[LV, "replica n1b"]
    assert v.status is Status.INVALID
    assert v.evidence.startswith("STABLE only at +8.000 s, after the deadline +7.600 s after ")
    in_time = history(state(8 * SECOND, "n1b", "UP_FAILURE"), state(14 * SECOND, "n1b", "STABLE"))
    assert judge(world, in_time)[LV, "replica n1b"].status is Status.VALID


def test_a_run_that_ended_before_the_bound_is_unknown_not_invalid(world: World) -> None:
    by = judge(world, history(state(6 * SECOND, "n1b", "UP_FAILURE"), end=10 * SECOND))
    v = by[LV, "replica n1b"]
    assert v.status is Status.UNKNOWN
    assert v.evidence.startswith("the run ended before the deadline: UP_FAILURE since -1.000 s at "
                                 "the end of the run (+3.000 s); deadline +7.600 s")
    assert by[LV, "replica n1a"].status is Status.VALID  # STABLE in time: judged anyway


def test_a_client_whose_results_come_late_or_never_is_invalid(world: World) -> None:
    _, _, ref = world
    client = corrected(ref)
    arrivals = arrivals_for(client)
    line = max(i for i, t in enumerate(client) if t == ref[-1]) + 1
    arrivals[line - 1:] = [HEAL_ALL + 12 * SECOND] * (len(client) - line + 1)  # > 7 + 10.6 s
    v = judge(world, history(end=25 * SECOND), client, arrivals)[LV, C1]
    assert v.status is Status.INVALID
    assert v.evidence.startswith(
        "1 of 32 results whose input came before the final heal not held as stable by the "
        f"deadline; first STABLE(id={ref[-1].id}, ")
    assert f"it arrived at row {line}, +12.000 s, after the deadline +10.600 s" in v.evidence
    never = [t for t in client if t != ref[-1]]
    v = judge(world, history(end=25 * SECOND), never, arrivals_for(never))[LV, C1]
    assert v.status is Status.INVALID and "never received as stable" in v.evidence
    v = judge(world, history(end=9 * SECOND), never, arrivals_for(never))[LV, C1]
    assert v.status is Status.UNKNOWN
    assert v.evidence.startswith("the run ended (+2.000 s) before the deadline: 1 of 32 results")


def test_a_tentative_result_never_corrected_does_not_count_as_held(world: World) -> None:
    _, _, ref = world
    client = corrected(ref)[:-3]  # the last corrections and REC_DONE never came
    v = judge(world, history(), client)[LV, C1]
    assert v.status is Status.INVALID and "not held as stable by the deadline" in v.evidence


def test_no_heal_or_a_fault_after_the_final_heal_is_unknown(world: World) -> None:
    config, _, _ = world
    no_heal = [e for e in history() if e["event"] not in ("heal", "heal_all")]
    by = judge(world, no_heal)
    assert {v.status for v in by.values()} == {Status.UNKNOWN}
    assert by[LV, C1].evidence == "the history has no heal: liveness is judged from the final heal"
    only_heal = [e for e in history() if e["event"] != "heal_all"]  # dpc inject by hand
    assert judge(world, only_heal)[LV, "replica n1a"].evidence.endswith(
        "deadline +7.600 s after the final heal (heal of fault 0); " + FORMULA)
    after = history(fault(8 * SECOND, 5, config, **link("n1a", "c1")))
    v = judge(world, after)[LV, "replica n1a"]
    assert v.status is Status.UNKNOWN
    assert v.evidence.startswith("fault 5 (partition link n1a <-> c1 (blackhole) for 1 s) came after "
                                 "the final heal (heal_all)")
    assert judge(world, history(), problems={C1: "missing log"})[LV, C1].evidence == "missing log"


def test_a_run_without_faults_is_judged_from_the_end_of_its_start_up(world: World) -> None:
    """``dpc launch`` alone records start-up but no fault and no heal: its replicas must be
    STABLE and its client complete after ``ready`` as after a heal (not ``unknown``)."""
    quiet = [{"t": 0, "event": "start", "config": "hand-built.toml", "name": "t"},
             state(0, "n1a", "STABLE"), state(0, "n1b", "STABLE"),
             {"t": 100_000, "event": "ready"}, {"t": 20 * SECOND, "event": "end"}]
    by = judge(world, quiet)
    assert by[LV, "replica n1a"].status is Status.VALID, by[LV, "replica n1a"].evidence
    assert "the final heal (ready (the run had no fault))" in by[LV, "replica n1a"].evidence


def test_a_run_stopped_during_its_start_up_is_not_judged_on_it(world: World) -> None:
    """Ctrl-C of ``dpc launch`` before ``ready`` (a test's race made it on a loaded
    machine): replicas that came up late are not late for a deadline counted from
    ``start`` (start-up is never judged); they must be STABLE by the run's end."""
    stopped = [{"t": 0, "event": "start", "config": "hand-built.toml", "name": "t"},
               state(8 * SECOND, "n1a", "STABLE"), state(9 * SECOND, "n1b", "STABLE"),
               {"t": 16 * SECOND, "event": "end"}]
    by = judge(world, stopped)
    for r in ("replica n1a", "replica n1b"):
        assert by[LV, r].status is Status.VALID, by[LV, r].evidence
        assert "(end (the run was stopped during its start-up))" in by[LV, r].evidence
    stuck = [*stopped[:2], state(9 * SECOND, "n1b", "UP_FAILURE"), stopped[-1]]
    v = judge(world, stuck)[LV, "replica n1b"]  # not STABLE at the end: never a pass
    assert v.status is Status.UNKNOWN and v.evidence.startswith("the run ended before the deadline")


def kill(t: int, fid: int, process: str) -> dict[str, Any]:
    """A kill as the history records it (contract point 4 for a source)."""
    return {"t": t, "event": "fault", "id": fid, "fault": {"fault": "kill", "process": process},
            "describe": f"kill {process}", "cut": [], "down": [process], "impaired": []}


def test_a_process_down_at_the_end_is_excused_and_so_is_what_it_feeds(world: World) -> None:
    # No heal_all: the final heal is the last heal; n1b was killed after it, never restarted.
    events = [e for e in history() if e["event"] != "heal_all"]
    by = judge(world, sorted([*events, kill(5 * SECOND, 1, "n1b")], key=lambda e: e["t"]))
    assert by[LV, "replica n1b"].status is Status.UNKNOWN  # a fault after the final heal
    events = [*events, kill(2 * SECOND, 1, "n1b"), state(1_999_000, "n1b", "UP_FAILURE")]
    by = judge(world, sorted(events, key=lambda e: e["t"]))
    v = by[LV, "replica n1b"]
    assert v.status is Status.VALID
    assert v.evidence == "n1b is down at the end (kill at 2000000, never healed): excused"
    assert by[LV, "replica n1a"].status is Status.VALID
    # A source killed and never restarted: n1 cannot be STABLE, nor c1 hold its results.
    events = [e for e in history() if e["event"] != "heal_all"]
    events += [kill(2 * SECOND, 1, "s1"), state(2_500_000, "n1a", "UP_FAILURE"),
               state(2_500_000, "n1b", "UP_FAILURE")]
    _, _, ref = world
    by = judge(world, sorted(events, key=lambda e: e["t"]), corrected(ref)[:10])
    assert {v.status for v in by.values()} == {Status.VALID}
    assert by[LV, C1].evidence == ("excused: its input s1 is down at the end (kill at 2000000, "
                                   "never healed)")


def test_a_restart_is_judged_from_when_it_came_up_never_its_start_up(world: World) -> None:
    # n1b killed at 4 s, restarted by the final heal at 7 s, up (RECOVERING) only at 17 s.
    events = [kill(4 * SECOND, 1, "n1b"), state(17 * SECOND, "n1b", "RECOVERING"),
              state(18 * SECOND, "n1b", "STABLE")]
    by = judge(world, history(*events, end=30 * SECOND))
    v = by[LV, "replica n1b"]
    assert v.status is Status.VALID
    # (F is 3 s now: the kill, from 4 s to the final heal; B = 8.6 s)
    assert v.evidence.startswith("STABLE since +11.000 s; clock from a restart that came up at "
                                 "+10.000 s; deadline +18.600 s after the final heal (heal_all)")
    stuck = [kill(4 * SECOND, 1, "n1b"), state(17 * SECOND, "n1b", "RECOVERING")]
    assert judge(world, history(*stuck, end=30 * SECOND))[LV, "replica n1b"].status is (
        Status.INVALID)
    silent = judge(world, history(kill(4 * SECOND, 1, "n1b")))[LV, "replica n1b"]
    assert silent.status is Status.UNKNOWN
    assert silent.evidence == ("n1b was restarted at +0.000 s and logged no state since: its "
                               "start-up is not judged")


def test_a_restart_that_was_up_before_its_heal_was_recorded_is_judged(world: World) -> None:
    """A replica recovering from its own CEC log can be STABLE before the harness records the
    heal of its kill (the heal is recorded once the restarted process is ready): its states
    logged after the kill began are the new incarnation's (torture seed 2401)."""
    events = [kill(4 * SECOND, 1, "n1b"), state(6_900_000, "n1b", "RECOVERING"),
              state(6_950_000, "n1b", "STABLE")]
    v = judge(world, history(*events, end=30 * SECOND))[LV, "replica n1b"]
    assert v.status is Status.VALID, v.evidence
    assert "clock from a restart" not in v.evidence  # it came up before the final heal


def test_check_run_judges_liveness_from_the_replicas_state_logs(world: World) -> None:
    config, sources, ref = world
    client = corrected(ref)
    h = History(sources=sources, clients={"c1": client}, arrivals={"c1": arrivals_for(client)},
                replicas={("n1a", "n1.out"): corrected(ref), ("n1b", "n1.out"): [*ref]})
    events = [e for e in history() if e["event"] != "state"]  # not merged into the history
    by = keyed(check_run(config, events, h)[0])
    assert by[LV, "replica n1a"].status is Status.UNKNOWN
    assert "no state change of n1a logged" in by[LV, "replica n1a"].evidence
    h.states = {"n1a": [(0, "STABLE")], "n1b": [(0, "STABLE"), (5 * SECOND, "UP_FAILURE")]}
    by = keyed(check_run(config, events, h)[0])
    assert by[LV, "replica n1a"].status is Status.VALID
    assert by[LV, "replica n1b"].status is Status.INVALID
    assert by[LV, C1].status is Status.VALID
    # Without a history: no liveness verdict (no final heal to judge from).
    assert LV not in {v.name for v in check_run(config, None, h)[0]}

