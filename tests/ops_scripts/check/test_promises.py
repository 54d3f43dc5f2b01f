"""What each recovery mode promises, and ``dpc check`` judging it: a stream's promise is the
weakest of its path's modes (ops_scripts/check/paths.py), ``dpc launch`` prints it, and a
stream through an amnesia node is judged by gap recovery (properties.py, compose.py,
liveness.py): losses and different tuples allowed, the UNDO and tentative rules as ever, and
a client's stream must end recovered; a replica of the amnesia pair need not; its state
digests are not compared."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from node.config.load import load_config
from node.config.model import ClusterConfig
from operators.taxonomy import RecoveryType
from ops_scripts.check import History, Status, Verdict, check_client, check_replica, check_run
from ops_scripts.check.liveness import liveness_verdicts
from ops_scripts.check.paths import Promise, node_promise, stream_promise
from ops_scripts.check.properties import check_recovered_replica
from ops_scripts.check.reference import reference_outputs
from ops_scripts.harness.supervisor import promised
from protocol.tuples import Kind, Tuple
from tests.ops_scripts.check.world import (
    C1,
    EC,
    HASHES,
    LV,
    N1,
    RC,
    SECOND,
    World,
    arrivals_for,
    desc,
    digest,
    fault,
    keyed,
    state,
)

GAP = Promise(RecoveryType.GAP, (("n1", "amnesia"),))
PRECISE = Promise(RecoveryType.PRECISE, (("n1", "dpc"),))
JUMP = 1_000_000  # a takeover's new id range, far above the reference's ids

# ---------------------------------------------------------------- a stream's promise
TOML = """\
[cluster]
name = "t"
token = "secret"

[sources.s1]
schema = ["k", "v"]
port = 19001
rate = 100.0

[nodes.n1]
inputs = ["s1"]
ha = "amnesia"
  [[nodes.n1.operators]]
  name = "u"
  type = "sunion"
  inputs = ["s1"]
  [[nodes.n1.operators]]
  name = "out"
  type = "soutput"
  inputs = ["u"]
  [[nodes.n1.replicas]]
  name = "n1a"
  data_port = 19101
  control_port = 19201
  [[nodes.n1.replicas]]
  name = "n1b"
  data_port = 19102
  control_port = 19202

[nodes.n2]
inputs = ["n1.out"]
  [[nodes.n2.operators]]
  name = "u"
  type = "sunion"
  inputs = ["n1.out"]
  [[nodes.n2.operators]]
  name = "f"
  type = "filter"
  inputs = ["u"]
  where = "v > 1"
  [[nodes.n2.operators]]
  name = "out"
  type = "soutput"
  inputs = ["f"]
  [[nodes.n2.replicas]]
  name = "n2a"
  data_port = 19111
  control_port = 19211

[nodes.n3]
inputs = ["s1"]
ha = "active_standby"
  [[nodes.n3.operators]]
  name = "u"
  type = "sunion"
  inputs = ["s1"]
  [[nodes.n3.operators]]
  name = "a"
  type = "aggregate"
  inputs = ["u"]
  window = 1000000
  group_by = ["k"]
  aggregates = [{fn = "count", as = "n"}]
  [[nodes.n3.operators]]
  name = "out"
  type = "soutput"
  inputs = ["a"]
  [[nodes.n3.replicas]]
  name = "n3a"
  data_port = 19121
  control_port = 19221
  [[nodes.n3.replicas]]
  name = "n3b"
  data_port = 19122
  control_port = 19222

[clients.c1]
stream = "n2.out"

[clients.c3]
stream = "n3.out"
"""


def pairs_config(tmp_path: Path) -> ClusterConfig:
    """s1 -> n1 (amnesia) -> n2 (dpc) -> c1; s1 -> n3 (active standby, an aggregate) -> c3."""
    path = tmp_path / "cluster.toml"
    path.write_text(TOML)
    return load_config(path)


def test_a_gap_upstream_reaches_every_stream_below_it(tmp_path: Path) -> None:
    config = pairs_config(tmp_path)
    assert stream_promise(config, "s1") == Promise(RecoveryType.PRECISE)
    assert stream_promise(config, "n1.out") == GAP
    below = stream_promise(config, "n2.out")  # n2 is dpc, fed n1's gapped stream
    assert below == GAP and below.who() == "amnesia at node n1"
    # A convergent-capable network under active standby: precise (ids drop the repeats).
    assert stream_promise(config, "n3.out") == Promise(RecoveryType.PRECISE,
                                                       (("n3", "active_standby"),))
    assert node_promise(config, "n2") == below


def test_dpc_launch_prints_each_nodes_promised_recovery(tmp_path: Path) -> None:
    config = pairs_config(tmp_path)
    assert [promised(config, n) for n in ("n1", "n2", "n3")] == [
        "gap", "gap (amnesia at node n1)", "precise"]


# ---------------------------------------------------------------- a client's stream
def gapped(ref: list[Tuple], *, at: int = 10, lost: int = 4) -> list[Tuple]:
    """An amnesia takeover in ``ref``: ``lost`` tuples from ``at`` on lost, the next one a
    partial window (a lower count and sum: the state was lost), then the reference again,
    every id after the takeover in a new, higher range."""
    partial = ref[at + lost]
    partial = partial._replace(values=(partial.values[0], 0, -1))
    after = [partial, *ref[at + lost + 1:]]
    return [*ref[:at], *(t._replace(id=JUMP + t.id) for t in after)]


def gap_client(world: World, history: list[Tuple], promise: Promise | None = GAP) -> Verdict:
    config, _, ref = world
    return check_client(config.clients["c1"], history, {"n1.out": ref}, promise)


def test_a_gapped_client_stream_that_ends_recovered_keeps_the_gap_promise(world: World) -> None:
    _, _, ref = world
    v = gap_client(world, gapped(ref))
    assert v.status is Status.VALID, v.evidence
    assert v.evidence == (
        f"gap recovery, as amnesia at node n1 promises: 5 lost, 1 different (first lost: "
        f"STABLE({desc(ref[10])})); recovered by its end (its last tuple is the reference's)")


def test_a_gapped_client_stream_that_ends_differently_is_invalid(world: World) -> None:
    _, _, ref = world
    history = gapped(ref)
    history[-1] = history[-1]._replace(values=(*history[-1].values[:-1], -7))
    v = gap_client(world, history)
    assert v.status is Status.INVALID
    assert v.evidence.startswith(
        f"not recovered by its end: it ends with STABLE({desc(history[-1])}), the reference "
        f"with STABLE({desc(ref[-1])}); gap recovery, as amnesia at node n1 promises, the "
        "output is the failure-free one again after a loss; as a recovery: gap (")
    short = gapped(ref)[:-1]  # stopped one result short of the reference's end
    assert gap_client(world, short).status is Status.INVALID
    assert gap_client(world, []).status is Status.INVALID


def test_an_empty_reference_wants_an_empty_gap_stream(world: World) -> None:
    config, _, ref = world
    c1 = config.clients["c1"]
    assert check_client(c1, [], {"n1.out": []}, GAP).status is Status.VALID
    v = check_client(c1, ref[:1], {"n1.out": []}, GAP)
    assert v.status is Status.INVALID and "1 tuple(s) where the reference has none" in v.evidence


def test_a_gapped_stream_with_a_tentative_tuple_in_force_is_invalid(world: World) -> None:
    _, _, ref = world
    history = gapped(ref)
    history[-1] = history[-1]._replace(kind=Kind.TENTATIVE)  # its end is the reference's
    v = gap_client(world, history)
    assert v.status is Status.INVALID
    assert v.evidence.startswith("1 tentative tuple(s) still in force after applying UNDOs")


def test_the_same_gapped_stream_under_a_precise_promise_stays_invalid(world: World) -> None:
    _, _, ref = world
    for promise in (PRECISE, None):
        v = gap_client(world, gapped(ref), promise)
        assert v.status is Status.INVALID
        assert v.evidence.startswith("first difference at index 10 of the final stable stream")
        assert "; as a recovery: gap (5 lost, 1 different)" in v.evidence


# ---------------------------------------------------------------- replicas of the pair
def test_a_replica_of_the_amnesia_pair_need_not_end_recovered(world: World) -> None:
    _, _, ref = world
    refs = {"n1.out": ref}
    killed = ref[:12]  # the primary, killed mid-stream
    v = check_replica("n1a", "n1.out", killed, refs, GAP, judge_end=False)
    assert v.status is Status.VALID
    assert v.evidence.startswith(f"gap recovery, as amnesia at node n1 promises: "
                                 f"{len(ref) - 12} lost, 0 different")
    assert v.evidence.endswith("its end not judged (a pair's replica: a secondary emits "
                               "nothing, a primary killed stops mid-stream)")
    assert check_replica("n1b", "n1.out", [], refs, GAP, judge_end=False).status is Status.VALID
    # Downstream of the pair (judge_end, the default) the same log did not recover.
    assert check_replica("n2a", "n1.out", killed, refs, GAP).status is Status.INVALID
    # The UNDO rules hold for the pair's replicas too.
    undone = [*killed, killed[-1]._replace(id=killed[-1].id + 1, kind=Kind.TENTATIVE)]
    v = check_replica("n1a", "n1.out", undone, refs, GAP, judge_end=False)
    assert v.status is Status.INVALID and "tentative tuple(s) still in force" in v.evidence


def test_a_recovered_replica_of_a_gap_stream_counts_every_incarnation(world: World) -> None:
    _, _, ref = world
    refs = {"n1.out": ref}
    earlier = [ref[:10]]
    now = gapped(ref)[10:]  # after the takeover upstream: renumbered, one partial window
    v = check_recovered_replica("n2a", "n1.out", now, ref[9].id, earlier, refs, promise=GAP)
    assert v.status is Status.VALID, v.evidence
    assert v.evidence.startswith("recovered; 1 earlier incarnation(s) counted with it; gap "
                                 "recovery, as amnesia at node n1 promises: 5 lost, 1 different")
    # By ids (no promise), the renumbered log is not the reference's continuation.
    assert check_recovered_replica("n2a", "n1.out", now, ref[9].id, earlier,
                                   refs).status is Status.INVALID


# ---------------------------------------------------------------- a whole run
def amnesia_world(world: World) -> ClusterConfig:
    """The world's config with n1 an amnesia pair."""
    config, _, _ = world
    n1 = config.nodes["n1"]
    n1 = dataclasses.replace(n1, settings=dataclasses.replace(n1.settings, ha="amnesia"))
    return dataclasses.replace(config, nodes={"n1": n1})


def takeover_events(config: ClusterConfig) -> list[dict[str, Any]]:
    """n1a, the primary, killed at 2 s (n1b takes over, empty), back at 4 s as the
    secondary; both STABLE throughout; digests at the end: n1b's network is not n1a's."""
    return sorted([
        {"t": 0, "event": "start", "config": "hand-built.toml", "name": "t"},
        {"t": 0, "event": "ready"},
        state(0, "n1a", "STABLE"), state(0, "n1b", "STABLE"),
        fault(2 * SECOND, 1, config, fault="kill", process="n1a"),
        {"t": 4 * SECOND, "event": "heal", "id": 1}, state(4 * SECOND, "n1a", "STABLE"),
        {"t": 7 * SECOND, "event": "heal_all"},
        digest(9 * SECOND, "n1a", **HASHES), digest(9 * SECOND, "n1b", **{**HASHES, "agg": "0"}),
        {"t": 20 * SECOND, "event": "end"},
    ], key=lambda e: e["t"])


def test_check_run_judges_an_amnesia_takeover_by_its_promise(world: World) -> None:
    _, sources, ref = world
    config = amnesia_world(world)
    client = gapped(ref)
    took_over = gapped(ref)[10:]  # n1b emitted only as the primary, from the takeover on
    h = History(sources=sources, clients={"c1": client}, arrivals={"c1": arrivals_for(client)},
                replicas={("n1a", "n1.out"): ref[:10], ("n1b", "n1.out"): took_over})
    by = keyed(check_run(config, takeover_events(config), h)[0])
    for key in [(EC, C1), (RC, "replica n1a (n1.out)"), (RC, "replica n1b (n1.out)"), (RC, N1),
                (LV, C1)]:
        assert by[key].status is Status.VALID, (key, by[key].evidence)
    assert by[RC, N1].evidence.startswith("not compared: ha amnesia's secondary does not hold")
    # The 5 lost never come; the 27 others are matched by content, whatever their ids.
    assert by[LV, C1].evidence.startswith(f"all {len(ref) - 5} results whose input came ")
    assert (f"held as stable, the last from row {len(client)} (arrived -0.949 s); gap "
            f"recovery, as amnesia at node n1 promises: 5 of the {len(ref)} results whose input "
            "came before the final heal never held") in by[LV, C1].evidence
    # The same logs under dpc: the stream, the digests and liveness are all wrong there.
    config, _, _ = world
    by = keyed(check_run(config, takeover_events(config), h)[0])
    for key in [(EC, C1), (RC, "replica n1b (n1.out)"), (RC, N1), (LV, C1)]:
        assert by[key].status is Status.INVALID, (key, by[key].evidence)


def test_gap_liveness_still_waits_for_what_the_client_holds(world: World) -> None:
    _, sources, ref = world
    config = amnesia_world(world)
    client = gapped(ref)
    arrivals = arrivals_for(client)
    arrivals[-1] = 40 * SECOND  # the last result, held in the end, came far past B
    events = takeover_events(config)
    events[-1] = {"t": 45 * SECOND, "event": "end"}
    v = keyed(liveness_verdicts(
        config, events, states={}, clients={"c1": list(zip(arrivals, client, strict=True))},
        sources=sources, reference={"n1.out": reference_outputs(config, sources)["n1.out"]},
    ))[LV, C1]
    assert v.status is Status.INVALID, v.evidence
    assert f"first STABLE({desc(ref[-1])})" in v.evidence
    assert f"it arrived at row {len(client)}, +33.000 s" in v.evidence


# ------------------------------------------------- a pair's secondary that never served
def test_an_idle_secondary_emitted_nothing_and_its_earlier_lives_are_correct_prefixes() -> None:
    """Passive standby: a replica restarted as the secondary emits nothing until it takes
    over; its earlier incarnations (a primary's output from the start, or from the
    checkpoint it restored) must be correct prefixes; data emitted without a restore is
    invalid."""
    from ops_scripts.check.properties import check_idle_replica
    from protocol.tuples import Kind, boundary, make_tuple

    ref = [make_tuple(Kind.STABLE, i, 10 * i, 10 * i, (i,)) for i in range(1, 7)]
    reference = {"n1.out": ref}
    ok = check_idle_replica("n1a", "n1.out", [boundary(70)], [ref[:2], ref[3:5]], reference,
                            earlier_after=[0, 3])
    assert ok.status == "valid" and "a secondary in this incarnation" in ok.evidence
    wrong = [make_tuple(Kind.STABLE, 4, 40, 40, (99,))]
    bad = check_idle_replica("n1a", "n1.out", [], [ref[:2], wrong], reference,
                             earlier_after=[0, 3])
    assert bad.status == "invalid" and "incarnation 2" in bad.evidence
    noisy = check_idle_replica("n1a", "n1.out", ref[:1], [], reference)
    assert noisy.status == "invalid" and "without restoring a checkpoint" in noisy.evidence
