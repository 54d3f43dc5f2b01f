"""``dpc check``: the reference run, the checkers on correct and corrupted histories, and
``run_check`` on a run directory (config loaded from examples/basic.toml)."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from node.config.model import (
    ClientConfig,
    ClusterConfig,
    NodeConfig,
    NodeSettings,
    ReplicaConfig,
    SourceConfig,
)
from node.procs.rundir import JsonlTupleWriter, RunDir
from operators import QueryNetwork
from operators.spec import NetworkSpec
from ops_scripts.check import (
    FIGURE_KEYS,
    History,
    Status,
    Verdict,
    apply_undos_checked,
    check_client,
    check_history,
    check_no_duplicates,
    check_recovered_replica,
    check_replica,
    check_run,
    check_stable_never_undone,
    guarded,
    reference_outputs,
    run_check,
)
from ops_scripts.check.availability import NewResult, new_results
from ops_scripts.cluster.demo import apply_undos
from ops_scripts.harness.history import fault_effects
from ops_scripts.harness.schedule import parse_faults
from protocol.tuples import Kind, Tuple, boundary, make_tuple, rec_done, undo
from state.tuplelog import TupleLogWriter
from tests.paths import EXAMPLES

BUCKET = 100_000
SECOND = 1_000_000
C1 = "client c1 (n1.out)"
N1 = "node n1 (state digests)"
AV, ND, SU = "availability", "no-duplicates", "stable-never-undone"
EC, RC = "eventual-consistency", "replica-convergence"


# ---------------------------------------------------------------- factories
def settings() -> NodeSettings:
    return NodeSettings(
        x=3 * SECOND,
        alpha=0.9,
        bucket=BUCKET,
        heartbeat_interval=BUCKET,
        heartbeat_misses=3,
        checkpoint_interval=200_000,
        reconciliation="checkpoint",
        up_failure="process",
        stabilization="process",
    )


def sunion(inputs: list[str], wait: int = 2_700_000) -> dict[str, object]:
    return {
        "name": "u",
        "type": "sunion",
        "inputs": inputs,
        "bucket": BUCKET,
        "wait": wait,
        "mode": "process",
        "recovery": "checkpoint",
    }


def make_config(*, chain: bool = False, wait: int = 2_700_000) -> ClusterConfig:
    """s1, s2 -> n1: sunion -> per-key 1 s count/sum -> soutput -> client c1 (and with
    ``chain``, n1.out -> n2: sunion -> filter -> soutput -> client c2)."""
    schema = ("key", "value")
    n1 = NetworkSpec.from_dict(
        {
            "inputs": {"s1": list(schema), "s2": list(schema)},
            "operators": [
                sunion(["s1", "s2"], wait),
                {
                    "name": "agg",
                    "type": "aggregate",
                    "inputs": ["u"],
                    "window": SECOND,
                    "group_by": ["key"],
                    "aggregates": [
                        {"fn": "count", "as": "n"},
                        {"fn": "sum", "attr": "value", "as": "total"},
                    ],
                },
                {"name": "out", "type": "soutput", "inputs": ["agg"]},
            ],
            "outputs": ["out"],
        }
    )

    def replicas(node: str) -> tuple[ReplicaConfig, ...]:
        return tuple(ReplicaConfig(f"{node}{x}", node, "127.0.0.1", 0, 0) for x in "ab")

    nodes = {
        "n1": NodeConfig("n1", ("s1", "s2"), n1, {"n1.out": "out"}, replicas("n1"), settings())
    }
    clients = {"c1": ClientConfig("c1", "n1.out")}
    streams = {"s1": schema, "s2": schema, "n1.out": ("key", "n", "total")}
    if chain:
        n2 = NetworkSpec.from_dict(
            {
                "inputs": {"n1.out": ["key", "n", "total"]},
                "operators": [
                    sunion(["n1.out"], wait),
                    {"name": "big", "type": "filter", "inputs": ["u"], "where": "n >= 3"},
                    {"name": "out", "type": "soutput", "inputs": ["big"]},
                ],
                "outputs": ["out"],
            }
        )
        nodes["n2"] = NodeConfig(
            "n2", ("n1.out",), n2, {"n2.out": "out"}, replicas("n2"), settings()
        )
        clients["c2"] = ClientConfig("c2", "n2.out")
        streams["n2.out"] = streams["n1.out"]
    sources = {
        s: SourceConfig(s, schema, "127.0.0.1", 0, 100.0, BUCKET, "synthetic") for s in ("s1", "s2")
    }
    return ClusterConfig(
        Path("hand-built.toml"), "t", "tok", "127.0.0.1", sources, nodes, clients, streams
    )


def synth_sources(config: ClusterConfig, n: int = 300, seed: int = 3) -> dict[str, list[Tuple]]:
    """Each source: ``n`` tuples 20 ms apart (offset per source), tmax = time."""
    rng = random.Random(seed)
    logs: dict[str, list[Tuple]] = {}
    for k, (name, src) in enumerate(config.sources.items()):
        logs[name] = [
            make_tuple(
                Kind.STABLE,
                i,
                20_000 * i + 1_000 * k,
                20_000 * i + 1_000 * k,
                tuple(rng.randrange(5) if a == "key" else rng.randrange(100) for a in src.schema),
            )
            for i in range(1, n + 1)
        ]
    return logs


def corrected(ref: Sequence[Tuple]) -> list[Tuple]:
    """A correct history of a stream whose failure-free data is ``ref``: half stable, a
    tentative suffix (different values), UNDO of it, the stable corrections, REC_DONE."""
    k = len(ref) // 2
    out: list[Tuple] = [*ref[:k], boundary(ref[k - 1].time)]
    out += [t._replace(kind=Kind.TENTATIVE, values=(*t.values[:-1], -1)) for t in ref[k : k + 4]]
    out += [undo(ref[k - 1].id), *ref[k:], rec_done()]
    return out


def stable_lines(history: Sequence[Tuple]) -> list[int]:
    return [i for i, t in enumerate(history) if t.kind is Kind.STABLE]


def desc(t: Tuple) -> str:
    return f"id={t.id}, time={t.time}, tmax={t.tmax}, values={list(t.values)}"


# ---------------------------------------------------------------- history events
def fault(t: int, fid: int, config: ClusterConfig, **raw: object) -> dict[str, Any]:
    """A history ``fault`` event as the harness writes it (effects resolved)."""
    (f,) = parse_faults([{"at": 0, "for": 1, **raw}], config)
    return {"t": t, "event": "fault", "id": fid, "fault": raw, "describe": f.describe(),
            **fault_effects(f, config)}


def heal(t: int, fid: int) -> dict[str, Any]:
    return {"t": t, "event": "heal", "id": fid}


def state(t: int, process: str, name: str) -> dict[str, Any]:
    return {"t": t, "event": "state", "process": process, "state": name}


def link(a: str, b: str, *, one_way: bool = False) -> dict[str, Any]:
    return {"fault": "partition", "shape": "link", "between": [a, b], "one_way": one_way}


def digest(t: int, process: str, **hashes: str) -> dict[str, Any]:
    return {"t": t, "event": "digest", "process": process, "node": process[:-1],
            "state": "STABLE", "hashes": hashes}


def arrivals_for(history: Sequence[Tuple], lag: int = 50_000) -> list[int]:
    """Arrival times of a client log: each data tuple ``lag`` after its tmax, never before
    the tuple ahead of it (corrections arrive with the newest); control tuples with it."""
    out, last = [], 0
    for t in history:
        if t.kind in (Kind.STABLE, Kind.TENTATIVE):
            last = max(last, t.tmax + lag)
        out.append(last)
    return out


def logs(world: World, client: list[Tuple], arrivals: list[int] | None = None) -> History:
    """Correct logs of every replica, and ``client`` as c1's log."""
    _, sources, ref = world
    return History(
        sources=sources,
        clients={"c1": client},
        arrivals={"c1": arrivals if arrivals is not None else arrivals_for(client)},
        replicas={("n1a", "n1.out"): corrected(ref), ("n1b", "n1.out"): [*ref]},
    )


World = tuple[ClusterConfig, dict[str, list[Tuple]], list[Tuple]]


@pytest.fixture(scope="module")
def world() -> World:
    config = make_config()
    sources = synth_sources(config)
    return config, sources, reference_outputs(config, sources)["n1.out"]


def keyed(verdicts: Sequence[Verdict]) -> dict[tuple[str, str], Verdict]:
    """Verdicts by (property, subject): a client has several verdicts."""
    out = {(v.name, v.subject): v for v in verdicts}
    assert len(out) == len(verdicts), "two verdicts for one property and subject"
    return out


def client_verdict(world: World, history: list[Tuple]) -> Verdict:
    config, _, ref = world
    return check_client(config.clients["c1"], history, {"n1.out": ref})


# ---------------------------------------------------------------- the reference run
def test_reference_is_stable_and_independent_of_interleaving(world: World) -> None:
    config, sources, ref = world
    assert len(ref) > 20 and all(t.kind is Kind.STABLE for t in ref)
    assert [t.id for t in ref] == sorted({t.id for t in ref})
    assert sum(t.values[1] for t in ref) == sum(len(v) for v in sources.values())  # every count
    # A live-like feed: 100 ms slices of both sources, interleaved, each with its boundary.
    net = QueryNetwork(config.nodes["n1"].network)
    live: list[Tuple] = []
    for b in range(0, 7 * SECOND, BUCKET):
        for s, log in reversed(sources.items()):
            batch = [t for t in log if b <= t.time < b + BUCKET]
            live += net.push(s, [*batch, boundary(b + BUCKET)], b).outputs["out"]
    for s in sources:
        live += net.push(s, [boundary(2**62)], 7 * SECOND).outputs["out"]
    assert [t for t in live if t.kind is Kind.STABLE] == ref


def test_reference_never_releases_tentatively_even_with_zero_wait() -> None:
    config = make_config(wait=0)
    sources = synth_sources(config)
    assert reference_outputs(config, sources) == reference_outputs(make_config(), sources)


def test_reference_chains_nodes_in_order() -> None:
    config = make_config(chain=True)
    ref = reference_outputs(config, synth_sources(config))
    big = [(t.time, t.values) for t in ref["n1.out"] if t.values[1] >= 3]
    assert big and [(t.time, t.values) for t in ref["n2.out"]] == big
    assert [t.id for t in ref["n2.out"]] == list(range(1, len(big) + 1))  # n2's SUnion renumbers


def test_reference_refuses_a_tentative_source_tuple_and_a_missing_input(world: World) -> None:
    config, sources, _ = world
    bad = {**sources, "s1": [sources["s1"][0]._replace(kind=Kind.TENTATIVE)]}
    with pytest.raises(Exception, match="tentative"):
        reference_outputs(config, bad)
    with pytest.raises(Exception, match="s2"):
        reference_outputs(config, {"s1": sources["s1"]})


# ---------------------------------------------------------------- the checkers
def test_correct_histories_are_valid(world: World) -> None:
    _, _, ref = world
    for history in ([*ref, boundary(2**62)], corrected(ref), [undo(0), *corrected(ref)]):
        v = client_verdict(world, history)
        assert v.status is Status.VALID, v.evidence
        assert f"{len(ref)} stable tuples equal the reference" in v.evidence
    assert (
        "4 tentative received, 1 UNDO(s) applied" in client_verdict(world, corrected(ref)).evidence
    )
    kept, problem = apply_undos_checked(corrected(ref))
    assert problem is None and [t for _, t in kept] == apply_undos(corrected(ref)) == ref


def test_duplicate_stable_tuple_is_caught(world: World) -> None:
    _, _, ref = world
    history = corrected(ref)
    i = stable_lines(history)[5]
    history.insert(i + 1, history[i])
    v = client_verdict(world, history)
    assert v.status is Status.INVALID
    assert (
        "duplicate" in v.evidence
        and f"line {i + 2}" in v.evidence
        and desc(history[i]) in v.evidence
    )


def test_missing_tuple_is_caught(world: World) -> None:
    _, _, ref = world
    history = corrected(ref)
    gone = history.pop(stable_lines(history)[7])
    v = client_verdict(world, history)
    assert v.status is Status.INVALID
    assert "index 7" in v.evidence and f"expected {gone.kind.name}({desc(gone)})" in v.evidence
    assert "missing" in v.evidence


def test_missing_tail_says_how_many_were_received(world: World) -> None:
    _, _, ref = world
    v = client_verdict(world, list(ref[:-3]))
    assert v.status is Status.INVALID
    assert f"client received {len(ref) - 3} of {len(ref)} tuples" in v.evidence
    assert f"first missing: STABLE({desc(ref[-3])})" in v.evidence


def test_changed_value_is_caught(world: World) -> None:
    _, _, ref = world
    history = corrected(ref)
    i = stable_lines(history)[-2]  # among the corrections
    original = history[i]
    history[i] = original._replace(values=(*original.values[:-1], original.values[-1] + 1))
    v = client_verdict(world, history)
    assert v.status is Status.INVALID
    assert f"got STABLE({desc(history[i])}) (line {i + 1})" in v.evidence
    assert f"expected STABLE({desc(original)})" in v.evidence


def test_undone_stable_tuple_is_flagged_not_applied(world: World) -> None:
    _, _, ref = world
    history = corrected(ref)
    at = stable_lines(history)[10]
    # UNDO below a stable id, then the "corrections" re-send exactly what it removed: a
    # silent apply would end with the right stream.
    history[at + 1 : at + 1] = [undo(history[at - 2].id), history[at - 1], history[at]]
    assert apply_undos(history) == ref
    v = client_verdict(world, history)
    assert v.status is Status.INVALID
    assert f"line {at + 2}: UNDO({history[at - 2].id}) takes back the stable tuple" in v.evidence
    assert desc(history[at - 1]) in v.evidence


def test_no_duplicates_points_at_both_lines(world: World) -> None:
    _, _, ref = world
    assert check_no_duplicates(C1, corrected(ref)).status is Status.VALID
    # Tentative ids come again after their UNDO (the corrections): not a duplicate.
    ok = check_no_duplicates(C1, [*corrected(ref), undo(ref[-1].id)])
    assert ok.status is Status.VALID and f"{len(ref)} stable tuples" in ok.evidence
    history = corrected(ref)
    i = stable_lines(history)[5]
    history.insert(i + 3, history[i])  # the stable tuple of line i+1 again, at line i+4
    v = check_no_duplicates(C1, history)
    assert v.status is Status.INVALID and v.name == ND and v.subject == C1
    assert f"line {i + 4}: STABLE({desc(history[i])}) repeats the stable tuple of line {i + 1}" \
        in v.evidence
    assert client_verdict(world, history).status is Status.INVALID  # and eventual consistency
    swapped = corrected(ref)
    swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
    v = check_no_duplicates(C1, swapped)
    assert v.status is Status.INVALID
    assert f"line {i + 2}: STABLE({desc(swapped[i + 1])}) has an id not above the stable tuple " \
        f"of line {i + 1} (STABLE({desc(swapped[i])}))" in v.evidence


def test_stable_never_undone_points_at_the_undo_and_the_stable_tuple(world: World) -> None:
    _, _, ref = world
    v = check_stable_never_undone(C1, corrected(ref))
    assert v.status is Status.VALID and "1 UNDO(s)" in v.evidence
    history = corrected(ref)
    at = stable_lines(history)[10]
    history[at + 1 : at + 1] = [undo(history[at - 2].id), history[at - 1], history[at]]
    v = check_stable_never_undone(C1, history)
    assert v.status is Status.INVALID and v.name == SU
    assert (f"line {at + 2}: UNDO({history[at - 2].id}) would take back the stable tuple "
            f"STABLE({desc(history[at])}) (line {at + 1})") in v.evidence
    # The re-sent tuples are duplicates too: property 2 has its own evidence.
    v = check_no_duplicates(C1, history)
    assert v.status is Status.INVALID and f"line {at + 3}:" in v.evidence
    assert f"repeats the stable tuple of line {at}" in v.evidence
    # An UNDO that reaches below a tentative suffix into the stable prefix, before any
    # stable tuple is re-sent: still caught (the stable tuple in force is named).
    k = len(ref) // 2
    cut = [*ref[:k], ref[k]._replace(kind=Kind.TENTATIVE), undo(ref[k - 3].id)]
    v = check_stable_never_undone(C1, cut)
    assert v.status is Status.INVALID and f"line {k + 2}: UNDO({ref[k - 3].id})" in v.evidence
    assert f"STABLE({desc(ref[k - 1])}) (line {k})" in v.evidence


def test_uncorrected_tentative_tuples_are_caught(world: World) -> None:
    _, _, ref = world
    k = len(ref) // 2
    history = [*ref[:k], ref[k]._replace(kind=Kind.TENTATIVE)]
    v = client_verdict(world, history)
    assert v.status is Status.INVALID and "1 tentative tuple(s) still in force" in v.evidence
    assert f"line {k + 1}" in v.evidence


def test_replica_divergence_is_caught(world: World) -> None:
    config, sources, ref = world
    bad = [*ref]
    bad[3] = bad[3]._replace(tmax=bad[3].tmax + 1)
    h = History(
        sources=sources,
        clients={"c1": corrected(ref)},
        replicas={("n1a", "n1.out"): corrected(ref), ("n1b", "n1.out"): bad},
    )
    verdicts = keyed(check_history(config, h))
    assert verdicts[EC, C1].status is Status.VALID
    assert verdicts[RC, "replica n1a (n1.out)"].status is Status.VALID
    assert verdicts[RC, "replica n1b (n1.out)"].status is Status.INVALID
    assert "index 3" in verdicts[RC, "replica n1b (n1.out)"].evidence
    assert check_replica("n1a", "n1.out", ref, {"n1.out": ref}).name == "replica-convergence"


def test_a_crashing_checker_is_unknown_never_valid(world: World) -> None:
    config, sources, ref = world

    def boom(*_: object) -> Verdict:
        raise ZeroDivisionError("kaput")

    v = guarded("p", "s", boom)
    assert v.status is Status.UNKNOWN and "ZeroDivisionError: kaput" in v.evidence
    assert guarded("p", "s", lambda: "valid").status is Status.UNKNOWN  # type: ignore[arg-type, return-value]
    assert guarded("p", "s", lambda: Verdict("p", "bogus", "")).status is Status.UNKNOWN  # type: ignore[arg-type]
    assert guarded("p", "s", lambda: Verdict("p", "valid", "")).status is Status.VALID  # type: ignore[arg-type]
    h = History(
        sources=sources,
        clients={"c1": [1, 2, 3]},  # type: ignore[list-item]
        replicas={("n1a", "n1.out"): ref, ("n1b", "n1.out"): ref},
    )
    verdicts = keyed(check_history(config, h))
    for name in (ND, SU, EC):  # every checker of the client crashes on ints
        assert verdicts[name, C1].status is Status.UNKNOWN
        assert "checker crashed" in verdicts[name, C1].evidence


def test_missing_logs_are_unknown(world: World) -> None:
    config, sources, ref = world
    h = History(
        sources=sources,
        clients={"c1": ref},
        replicas={("n1a", "n1.out"): ref},
        problems={"replica n1b (n1.out)": "missing log replicas/n1b/n1.out.jsonl"},
    )
    verdicts = keyed(check_history(config, h))
    assert verdicts[RC, "replica n1b (n1.out)"].status is Status.UNKNOWN
    assert "missing log replicas/n1b/n1.out.jsonl" in verdicts[RC, "replica n1b (n1.out)"].evidence
    no_source = History(
        sources={"s2": sources["s2"]},
        clients={"c1": ref},
        problems={"source s1": "missing log sources/s1.arrow"},
    )
    verdicts = keyed(check_history(config, no_source))
    # Changed with the per-property verdicts: no-duplicates and stable-never-undone need no
    # reference run, so they are still judged; the reference-based ones are unknown.
    assert verdicts[ND, C1].status is verdicts[SU, C1].status is Status.VALID
    assert {v.status for k, v in verdicts.items() if k[0] in (EC, RC)} == {Status.UNKNOWN}
    assert "no reference run: missing log sources/s1.arrow" in verdicts[EC, C1].evidence


# ---------------------------------------------------------------- check_run with a history
HASHES = {"u": "1f", "agg": "2e", "out": "3d"}


def clean_events(world: World) -> list[dict[str, Any]]:
    """A history: n1a cut from c1 for 1 s (n1b serves it), healed; digests at the end."""
    config, _, _ = world
    return [
        {"t": 0, "event": "start", "config": "hand-built.toml", "name": "t"},
        state(0, "n1a", "STABLE"), state(0, "n1b", "STABLE"),
        fault(1 * SECOND, 1, config, **link("n1a", "c1")),
        heal(2 * SECOND, 1),
        {"t": 7 * SECOND, "event": "heal_all"},
        digest(9 * SECOND, "n1a", **HASHES), digest(9 * SECOND, "n1b", **HASHES),
        {"t": 10 * SECOND, "event": "end"},
    ]


def late(world: World, by: int = 4 * SECOND) -> tuple[History, NewResult]:
    """Clean logs, but one new result of c1, mid-stream, arrives ``by`` after its tmax."""
    _, _, ref = world
    client = corrected(ref)
    arrivals = arrivals_for(client)
    results = new_results(list(zip(arrivals, client, strict=True)))
    r = results[len(results) // 2]
    arrivals[r.line - 1] = r.tmax + by
    return logs(world, client, arrivals), dataclasses.replace(r, arrival=r.tmax + by, delay=by)


def test_a_clean_run_with_a_history_is_valid_on_all_five_properties(world: World) -> None:
    config, _, ref = world
    verdicts, figures = check_run(config, clean_events(world), logs(world, corrected(ref)))
    assert [v for v in verdicts if v.status is not Status.VALID] == []
    assert {v.name for v in verdicts} == {AV, ND, SU, EC, RC}
    by = keyed(verdicts)
    assert "every new result within the bound k*X = 3.000 s" in by[AV, C1].evidence
    assert "0 excused by 0 outage(s)" in by[AV, C1].evidence  # n1b kept a path
    assert "n1a, n1b: identical digests of 3 operator(s)" in by[RC, N1].evidence
    assert figures.as_json() == {
        "tuples_checked": len([t for t in corrected(ref) if t.kind is not Kind.UNDO
                               and t.kind is not Kind.REC_DONE and t.kind is not Kind.BOUNDARY]),
        "new_results_checked": figures.delays[0].checked, "excused": 0,
        "worst_delay_us": 50_000, "bound_us": 3 * SECOND, "faults": 1, "worst_client": "c1",
        "availability_judged": True,
    }
    assert figures.delays[0].checked == 15 and figures.delays[0].p99_us == 50_000
    # Without a history: no availability verdict (a report), the other four as before.
    verdicts, figures = check_run(config, None, logs(world, corrected(ref)))
    assert AV not in {v.name for v in verdicts} and not figures.availability_judged
    assert figures.delays[0].checked == 15 and figures.new_results_checked == 0


def test_a_late_new_result_is_caught_with_its_line_id_and_delay(world: World) -> None:
    config, _, _ = world
    h, r = late(world)
    v = keyed(check_run(config, clean_events(world), h)[0])[AV, C1]
    assert v.status is Status.INVALID, v.evidence
    assert (f"line {r.line}: {r.kind}(id={r.id}, tmax={r.tmax}) arrived at {r.arrival}, delay "
            "4.000 s > bound k*X = 3.000 s while the client had a path; 1 of ") in v.evidence
    assert f"max 4.000 s; worst line {r.line}:" in v.evidence
    _, figures = check_run(config, clean_events(world), h)
    assert figures.worst_delay_us == 4 * SECOND and figures.bound_us == 3 * SECOND
    # At exactly the bound: kept.
    h, _ = late(world, by=3 * SECOND)
    assert keyed(check_run(config, clean_events(world), h)[0])[AV, C1].status is Status.VALID


@pytest.mark.parametrize("outage", ["client isolated", "every replica paused"])
def test_the_same_late_result_is_excused_by_an_outage(world: World, outage: str) -> None:
    config, _, _ = world
    h, r = late(world)
    at, until = r.tmax + 1 * SECOND, r.tmax + 2 * SECOND  # tmax within [start - 3 s, ...]
    if outage == "client isolated":
        isolate = {"fault": "partition", "shape": "isolate", "process": "c1"}
        faults = [fault(at, 7, config, **isolate), heal(until, 7)]
    else:
        faults = [fault(at, 7, config, fault="pause", process="n1a"),
                  fault(at, 8, config, fault="pause", process="n1b"),
                  heal(until, 7), heal(until, 8)]
    events = sorted([*clean_events(world), *faults], key=lambda e: e["t"])
    verdicts, figures = check_run(config, events, h)
    v = keyed(verdicts)[AV, C1]
    assert v.status is Status.VALID, v.evidence
    assert f"excused by 1 outage(s) ([{at}, {until}): " in v.evidence
    assert figures.excused >= 1 and figures.faults == 2 + (outage != "client isolated")
    why = "n1a-c1 cut; n1b-c1 cut" if outage == "client isolated" else "n1a down; n1b down"
    assert why in v.evidence
    # The excuse reaches k*X around the outage, no further: the same outage ending 3.5 s
    # before the late result's tmax leaves it checked.
    early = [dict(e, t=e["t"] - 5500 * 1000) if e in faults else e for e in events]
    early.sort(key=lambda e: e["t"])
    assert keyed(check_run(config, early, h)[0])[AV, C1].status is Status.INVALID


def test_duplicate_and_undone_stable_tuples_and_missing_and_extra_with_a_history(
    world: World,
) -> None:
    """Each corruption caught by its own property, with the history in place."""
    config, _, ref = world
    events = clean_events(world)
    base = corrected(ref)
    i = stable_lines(base)[5]
    dup = [*base[: i + 1], base[i], *base[i + 1 :]]
    by = keyed(check_run(config, events, logs(world, dup))[0])
    assert by[ND, C1].status is Status.INVALID and f"line {i + 2}:" in by[ND, C1].evidence
    assert f"repeats the stable tuple of line {i + 1}" in by[ND, C1].evidence
    assert by[SU, C1].status is Status.VALID and by[EC, C1].status is Status.INVALID
    undone = [*base[: i + 1], undo(base[i - 2].id), *base[i - 1 :]]
    by = keyed(check_run(config, events, logs(world, undone))[0])
    assert by[SU, C1].status is Status.INVALID
    assert f"line {i + 2}: UNDO({base[i - 2].id}) would take back the stable tuple " \
           f"STABLE({desc(base[i])}) (line {i + 1})" in by[SU, C1].evidence
    missing = [t for k, t in enumerate(base) if k != stable_lines(base)[7]]
    by = keyed(check_run(config, events, logs(world, missing))[0])
    assert by[EC, C1].status is Status.INVALID and "missing" in by[EC, C1].evidence
    assert by[ND, C1].status is by[SU, C1].status is by[AV, C1].status is Status.VALID
    extra_tuple = ref[-1]._replace(id=ref[-1].id + 1, time=ref[-1].time + SECOND)
    extra = [*base[:-1], extra_tuple, base[-1]]
    by = keyed(check_run(config, events, logs(world, extra))[0])
    assert by[EC, C1].status is Status.INVALID
    assert f"first extra: STABLE({desc(extra_tuple)}), line {len(extra) - 1}" in by[EC, C1].evidence


def test_replica_divergence_in_outputs_and_in_digests(world: World) -> None:
    config, _, ref = world
    h = logs(world, corrected(ref))
    bad = [*ref]
    bad[3] = bad[3]._replace(values=(*bad[3].values[:-1], -5))
    h.replicas[("n1b", "n1.out")] = bad
    events = [e for e in clean_events(world) if e["event"] != "digest"]
    events += [digest(9 * SECOND, "n1a", **HASHES),
               digest(9 * SECOND, "n1b", **{**HASHES, "agg": "ee", "out": "dd"})]
    by = keyed(check_run(config, events, h)[0])
    stream = by[RC, "replica n1b (n1.out)"]
    assert stream.status is Status.INVALID and "index 3" in stream.evidence
    assert f"got STABLE({desc(bad[3])}) (line 4)" in stream.evidence
    state_v = by[RC, N1]
    assert state_v.status is Status.INVALID
    assert ("replicas n1a and n1b differ at operator 'agg': n1a '2e', n1b 'ee' "
            "(2 of 3 operators differ)") in state_v.evidence


def test_a_missing_digest_is_excused_only_for_a_replica_down_at_the_end(world: World) -> None:
    config, _, ref = world
    h = logs(world, corrected(ref))
    only_a = [e for e in clean_events(world) if e.get("process") != "n1b" or e["event"] != "digest"]
    v = keyed(check_run(config, only_a, h)[0])[RC, N1]
    assert v.status is Status.UNKNOWN
    assert "no state digest from n1b, which the history does not show down at the end" in v.evidence
    recovering = sorted([*only_a, state(8 * SECOND, "n1b", "RECOVERING")],
                        key=lambda e: e["t"])
    v = keyed(check_run(config, recovering, h)[0])[RC, N1]
    assert v.status is Status.VALID
    assert v.evidence == ("only n1a reported a digest (3 operator(s)); no digest from n1b: down "
                          "at the end per the history")
    # A history with no digest events: no digest verdict at all.
    plain = [e for e in clean_events(world) if e["event"] != "digest"]
    assert N1 not in {v.subject for v in check_run(config, plain, h)[0]}


def test_a_crashing_or_unreadable_history_is_unknown_never_valid(world: World) -> None:
    config, _, ref = world
    h = logs(world, corrected(ref))
    broken = [*clean_events(world), {"t": 3 * SECOND, "event": "fault", "id": 9}]  # no effects
    by = keyed(check_run(config, broken, h)[0])
    assert by[AV, C1].status is Status.UNKNOWN
    assert "cannot compute the outages: HistoryError" in by[AV, C1].evidence
    bad_digest = [*clean_events(world), {"t": 9 * SECOND, "event": "digest", "process": "n1b",
                                         "hashes": 17}]
    v = keyed(check_run(config, bad_digest, h)[0])[RC, N1]
    assert v.status is Status.UNKNOWN and "checker crashed" in v.evidence
    h.problems["history"] = "unreadable history history.jsonl: line 3: not JSON"
    v = keyed(check_run(config, [], h)[0])[AV, C1]
    assert v.status is Status.UNKNOWN and "line 3: not JSON" in v.evidence
    no_arrivals = logs(world, corrected(ref))
    no_arrivals.arrivals.clear()
    v = keyed(check_run(config, clean_events(world), no_arrivals)[0])[AV, C1]
    assert v.status is Status.UNKNOWN and "checker crashed: KeyError" in v.evidence


# ---------------------------------------------------------------- run_check on a run dir
def write_run(tmp_path: Path) -> tuple[RunDir, ClusterConfig, list[Tuple]]:
    """A run directory for examples/basic.toml whose logs are all correct."""
    from node.config.load import load_config

    rd = RunDir(tmp_path / "run").ensure()
    shutil.copyfile(EXAMPLES / "basic.toml", rd.config)
    config = load_config(rd.config)
    sources = synth_sources(config, n=200)
    for name, tuples in sources.items():
        with TupleLogWriter(rd.source_log(name), config.sources[name].schema) as w:
            w.append(tuples)
    (stream,) = config.nodes["n1"].outputs
    ref = reference_outputs(config, sources)[stream]
    assert len(ref) > 10
    for path, history in [
        (rd.client_log("c1"), corrected(ref)),
        (rd.replica_output("n1a", stream), corrected(ref)),
        (rd.replica_output("n1b", stream), [*ref, boundary(2**62)]),
    ]:
        with JsonlTupleWriter(path) as jw:
            for i in range(0, len(history), 7):
                jw.write(history[i : i + 7], i)
    return rd, config, ref


def run(rd: RunDir) -> tuple[int, str, dict[str, Any]]:
    out = io.StringIO()
    code = run_check(rd.path, out=out)
    report = json.loads(rd.check_json.read_text()) if rd.check_json.exists() else {}
    return code, out.getvalue(), report


def test_run_check_passes_a_correct_run(tmp_path: Path) -> None:
    rd, _, _ = write_run(tmp_path)
    code, text, report = run(rd)
    assert code == 0, text
    assert "property" in text and "eventual-consistency" in text and "PASS" in text
    # Changed: three client verdicts (no-duplicates, stable-never-undone, eventual-
    # consistency) where there was one; no history, so no availability verdict.
    assert report["summary"] == {"valid": 5, "invalid": 0, "unknown": 0, "total": 5, "ok": True}
    keys = {(v["property"], v["subject"]) for v in report["verdicts"]}
    assert keys == {(ND, C1), (SU, C1), (EC, C1), (RC, "replica n1a (n1.out)"),
                    (RC, "replica n1b (n1.out)")}


def test_run_check_fails_a_corrupted_client_log(tmp_path: Path) -> None:
    rd, _, ref = write_run(tmp_path)
    lines = rd.client_log("c1").read_bytes().split(b"\n")
    del lines[3]  # a stable tuple lost
    rd.client_log("c1").write_bytes(b"\n".join(lines))
    code, text, report = run(rd)
    assert code == 1 and "invalid" in text and "FAIL" in text
    assert report["summary"]["invalid"] == 1
    assert f"expected STABLE({desc(ref[3])})" in text


def test_run_check_missing_or_corrupt_log_is_unknown_and_fails(tmp_path: Path) -> None:
    rd, _, _ = write_run(tmp_path)
    rd.replica_output("n1b", "n1.out").unlink()
    lines = rd.client_log("c1").read_bytes().split(b"\n")
    lines[4] = b"garbage"
    rd.client_log("c1").write_bytes(b"\n".join(lines))
    code, _, report = run(rd)
    assert code == 1
    verdicts = {(v["property"], v["subject"]): v for v in report["verdicts"]}
    assert verdicts[RC, "replica n1b (n1.out)"]["status"] == "unknown"
    assert "n1b/n1.out.jsonl" in verdicts[RC, "replica n1b (n1.out)"]["evidence"]
    for name in (ND, SU, EC):
        assert verdicts[name, C1]["status"] == "unknown"
        assert "line 5" in verdicts[name, C1]["evidence"]
    rd.source_log("s2").unlink()
    code, _, report = run(rd)
    assert code == 1 and report["summary"]["unknown"] == 5  # was 3: three client verdicts


def test_run_check_reads_the_parquet_copy_when_the_jsonl_is_gone(tmp_path: Path) -> None:
    from node.procs.rundir import write_client_parquet

    rd, _, _ = write_run(tmp_path)
    write_client_parquet(rd.client_log("c1"), rd.client_parquet("c1"))
    rd.client_log("c1").unlink()
    assert run(rd)[0] == 0


def test_run_check_unusable_run_dir(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_check(tmp_path / "nope", out=out) == 2 and "no such directory" in out.getvalue()
    rd = RunDir(tmp_path / "run").ensure()
    out = io.StringIO()
    assert run_check(rd.path, out=out) == 2 and "config.toml is missing" in out.getvalue()
    rd.config.write_text("[cluster]\nname = 1\n")
    out = io.StringIO()
    assert run_check(rd.path, out=out) == 2 and "cannot load" in out.getvalue()
    assert not rd.check_json.exists()


def write_client(rd: RunDir, history: Sequence[Tuple], arrivals: Sequence[int]) -> None:
    rd.client_log("c1").unlink(missing_ok=True)
    with JsonlTupleWriter(rd.client_log("c1")) as w:
        for t, arrival in zip(history, arrivals, strict=True):
            w.write([t], arrival)


def test_run_check_with_a_history_judges_availability_and_writes_figures(tmp_path: Path) -> None:
    rd, config, ref = write_run(tmp_path)
    code, text, report = run(rd)  # no history.jsonl: a report, as before
    assert code == 0 and "no run history (history.jsonl): delays are a report" in text
    assert report["figures"]["availability_judged"] is False and report["figures"]["faults"] == 0
    client = corrected(ref)
    arrivals = arrivals_for(client)
    write_client(rd, client, arrivals)
    events = [
        {"t": 0, "event": "start", "config": str(rd.config), "name": "basic"},
        fault(SECOND, 1, config, **link("n1a", "c1")), heal(2 * SECOND, 1),
        {"t": 9 * SECOND, "event": "heal_all"},
        digest(10 * SECOND, "n1a", **HASHES), digest(10 * SECOND, "n1b", **HASHES),
        {"t": 11 * SECOND, "event": "end"},
    ]
    rd.history.write_text("".join(json.dumps(e) + "\n" for e in events))
    code, text, report = run(rd)
    assert code == 0, text
    assert "dpc check: 7 valid, 0 invalid, 0 unknown -> PASS" in text
    assert {v["property"] for v in report["verdicts"]} == {AV, ND, SU, EC, RC}
    figures = report["figures"]
    assert set(figures) == set(FIGURE_KEYS)
    n_data = sum(1 for t in client if t.kind in (Kind.STABLE, Kind.TENTATIVE))
    assert figures["tuples_checked"] == n_data and figures["faults"] == 1
    assert figures["worst_delay_us"] == 50_000 and figures["bound_us"] == 3 * SECOND
    (entry,) = report["availability"]
    assert entry["delays"]["checked"] == figures["new_results_checked"] > 0
    assert entry["delays"]["worst"]["delay"] == 50_000 and entry["delays"]["p50_us"] == 50_000
    assert "availability: c1 new results, 0 excused by 0 outage(s);" in text

    results = new_results(list(zip(arrivals, client, strict=True)))
    r = results[len(results) // 2]
    arrivals[r.line - 1] = r.tmax + 5 * SECOND
    write_client(rd, client, arrivals)
    code, text, report = run(rd)
    assert code == 1 and "dpc check: 6 valid, 1 invalid, 0 unknown -> FAIL" in text
    (v,) = [v for v in report["verdicts"] if v["status"] == "invalid"]
    assert v["property"] == AV and v["subject"] == C1
    assert v["evidence"].startswith(
        f"line {r.line}: {r.kind}(id={r.id}, tmax={r.tmax}) arrived at {r.tmax + 5 * SECOND}, "
        "delay 5.000 s > bound k*X = 3.000 s")
    assert report["figures"]["worst_delay_us"] == 5 * SECOND

    rd.history.write_text(rd.history.read_text() + "not json\n")
    code, _, report = run(rd)
    verdicts = {(v["property"], v["subject"]): v for v in report["verdicts"]}
    assert code == 1 and verdicts[AV, C1]["status"] == "unknown"
    assert "unreadable history" in verdicts[AV, C1]["evidence"]
    assert f"history.jsonl:{len(events) + 1}: not JSON" in verdicts[AV, C1]["evidence"]


# ---------------------------------------------------------------- a crashed replica
def test_a_recovered_replica_is_judged_by_its_parts(world: World) -> None:
    _, _, ref = world
    refs = {"n1.out": ref}
    k = len(ref) // 2
    cut_short = [*ref[:10], ref[10]._replace(kind=Kind.TENTATIVE)]  # killed mid-failure
    after = ref[k - 1].id  # the partner's last id when the replica restored its state
    v = check_recovered_replica("n1a", "n1.out", ref[k:], after, [cut_short], refs)
    assert v.status is Status.VALID and "recovered after id" in v.evidence, v
    wrong = [*ref[:10], ref[11]]  # a stable tuple the reference does not have there
    v = check_recovered_replica("n1a", "n1.out", ref[k:], after, [wrong], refs)
    assert v.status is Status.INVALID and "incarnation 1" in v.evidence, v
    assert desc(ref[11]) in v.evidence
    gap = ref[k + 1 :]  # the new incarnation skipped a tuple after the restore point
    v = check_recovered_replica("n1a", "n1.out", gap, after, [], refs)
    assert v.status is Status.INVALID and "missing" in v.evidence, v
    undo_into_prefix = [undo(ref[0].id), *ref[k:]]  # takes back restored stable tuples
    v = check_recovered_replica("n1a", "n1.out", undo_into_prefix, after, [], refs)
    assert v.status is Status.INVALID and "never undone" in v.evidence, v


def test_a_replica_killed_twice_has_each_incarnation_judged_from_where_it_began(
        world: World) -> None:
    """Incarnation 2 began after the id its own recovery restored, not at the start."""
    _, _, ref = world
    refs = {"n1.out": ref}
    first, second = 5, 12  # ids restored by the first and the second recovery
    one = list(ref[:8])  # incarnation 1: from the start, killed after 8 tuples
    two = list(ref[first:10])  # incarnation 2: after the first restore, killed again
    now = list(ref[second:])  # incarnation 3: after the second restore
    after = [0, ref[first - 1].id]
    v = check_recovered_replica("n1a", "n1.out", now, ref[second - 1].id, [one, two], refs,
                                earlier_after=after)
    assert v.status is Status.VALID, v
    v = check_recovered_replica("n1a", "n1.out", now, ref[second - 1].id, [one, two], refs)
    assert v.status is Status.INVALID and "incarnation 2" in v.evidence  # judged from id 1
    bad_two = [*ref[first:8], ref[9]]  # incarnation 2 skipped a tuple
    v = check_recovered_replica("n1a", "n1.out", now, ref[second - 1].id, [one, bad_two], refs,
                                earlier_after=after)
    assert v.status is Status.INVALID and "incarnation 2" in v.evidence, v
