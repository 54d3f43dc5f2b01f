"""The timeline both players follow (ops_scripts/harness/timeline.py): heals counted from the
injection, heals before starts at one time, and kills or pauses that wait for a partner
with a state, then give up."""

from __future__ import annotations

from ops_scripts.harness.schedule import Fault
from ops_scripts.harness.timeline import BLOCKED_LIMIT, RETRY, Timeline, blocked

NODE_OF = {"n1a": "n1", "n1b": "n1", "n2a": "n2"}


def test_heals_follow_the_injection_and_come_before_starts_at_one_time() -> None:
    t = Timeline([Fault(1.0, 2.0, "kill", {"process": "n1a"}),
                  Fault(3.5, 1.0, "stall", {"process": "n1b"})])
    assert t.next() == (1.0, 0, "fault")
    t.injected(0, 1.5)  # injected late: healed 2 s after that, at 3.5
    assert t.next() == (3.5, 0, "heal")  # before the start due at the same time
    assert t.next() == (3.5, 1, "fault")
    t.injected(1, 3.5)
    assert t.next() == (4.5, 1, "heal")
    assert not t


def test_a_blocked_fault_is_looked_at_again_until_the_limit() -> None:
    t = Timeline([Fault(1.0, 2.0, "kill", {"process": "n1a"})])
    assert t.next() == (1.0, 0, "fault")
    assert t.wait(0, 1.0)
    assert t.next() == (1.0 + RETRY, 0, "fault")
    assert not t.wait(0, 1.0 + BLOCKED_LIMIT)  # waited long enough: dropped
    assert not t


def test_a_kill_or_pause_waits_for_a_partner_with_a_state() -> None:
    states = {"n1a": "STABLE", "n1b": "RECOVERING", "n2a": "UP_FAILURE"}
    kill = Fault(0.0, 1.0, "kill", {"process": "n1a"})
    assert blocked(kill, NODE_OF, {}, states.get) == (
        "n1b is RECOVERING: n1a is the last replica of its node with a state")
    assert blocked(kill, NODE_OF, {"n1b": "killed"}, states.get) == (
        "n1b is killed: n1a is the last replica of its node with a state")
    assert blocked(kill, NODE_OF, {}, {"n1a": "STABLE"}.get) == (
        "n1b is unreachable: n1a is the last replica of its node with a state")
    assert blocked(kill, NODE_OF, {"n1a": "paused"}, states.get) == "n1a is still paused"
    states["n1b"] = "UP_FAILURE"  # a partner in a failure still holds a state
    assert blocked(kill, NODE_OF, {}, states.get) is None
    lone = Fault(0.0, 1.0, "pause", {"process": "n2a"})
    assert blocked(lone, NODE_OF, {}, states.get) == (
        "n2a is the only replica of its node: it could not recover")
    assert blocked(Fault(0.0, 1.0, "pause", {"process": "s1"}), NODE_OF, {}, states.get) is None
    assert blocked(Fault(0.0, 1.0, "stall", {"process": "n1a"}), NODE_OF, {"n1b": "killed"},
                   states.get) is None


def test_a_replica_that_recovers_from_its_own_log_is_never_held_back() -> None:
    """checkpointing = "cec": killing every replica of a node at once is the point."""
    kill = Fault(0.0, 1.0, "kill", {"process": "n1a"})
    alone = {"n1a", "n1b", "n2a"}
    assert blocked(kill, NODE_OF, {"n1b": "killed"}, {}.get, alone) is None
    assert blocked(Fault(0.0, 1.0, "kill", {"process": "n2a"}), NODE_OF, {}, {}.get, alone) is None
    assert blocked(kill, NODE_OF, {"n1a": "killed"}, {}.get, alone) == "n1a is still killed"


def test_schedules_kill_every_replica_of_a_cec_node_at_once_and_refuse_it_otherwise() -> None:
    import random

    from node.config.load import load_config
    from ops_scripts.examples import EXAMPLES
    from ops_scripts.harness.schedule import ScheduleError, node_of, parse_faults, random_faults

    both = [{"at": 0.0, "for": 1.0, "fault": "kill", "process": "n2a"},
            {"at": 0.5, "for": 1.0, "fault": "kill", "process": "n2b"}]
    assert len(parse_faults(both, load_config(EXAMPLES / "cec.toml"))) == 2
    sim = load_config(EXAMPLES / "sim.toml")
    try:
        parse_faults(both, sim)
        raise AssertionError("a double kill of a node without CEC must be refused")
    except ScheduleError as e:
        assert "every replica of node 'n2' is down at once" in str(e)
    cec = load_config(EXAMPLES / "cec.toml")
    nodes = node_of(cec)
    drawn = 0
    for seed in range(40):
        faults = random_faults(cec, random.Random(seed), duration=6.0, count=4, kinds=["kill"])
        kills = [f for f in faults if f.params["process"] in nodes]
        for node in ("n1", "n2"):
            mine = [f for f in kills if nodes[f.params["process"]] == node]
            n = len(cec.nodes[node].replicas)
            drawn += any(len({g.params["process"] for g in mine
                              if g.at < f.heal_at and f.at < g.heal_at}) == n for f in mine)
    assert drawn >= 5, drawn


def test_torture_and_simulate_draw_every_replica_of_a_cec_node_killed_at_once() -> None:
    import random

    from node.config.load import load_config
    from ops_scripts.examples import EXAMPLES
    from ops_scripts.harness.schedule import node_of
    from ops_scripts.harness.simulate import SimOptions, simulation_schedule
    from ops_scripts.harness.torture import torture_schedule

    cec = load_config(EXAMPLES / "cec.toml")
    nodes = node_of(cec)

    def all_at_once(faults: list[Fault]) -> bool:
        kills = [f for f in faults if f.kind == "kill" and f.params["process"] in nodes]
        return any({g.params["process"] for g in kills if nodes[g.params["process"]] == node
                    and g.at < f.heal_at and f.at < g.heal_at} == {r.name for r in n.replicas}
                   for node, n in cec.nodes.items() for f in kills
                   if nodes[f.params["process"]] == node)

    sims = sum(all_at_once(simulation_schedule(cec, random.Random(s), SimOptions()))
               for s in range(60))
    tortures = sum(all_at_once(torture_schedule(cec, random.Random(s), duration=8.0,
                                                count=4).faults) for s in range(60))
    assert sims >= 20 and tortures >= 20, (sims, tortures)
    # A cluster without CEC draws no extra: its seeds replay the schedules they always did.
    sim = load_config(EXAMPLES / "sim.toml")
    assert not any(all_at_once(simulation_schedule(sim, random.Random(s), SimOptions()))
                   for s in range(60))


def test_a_pairs_partner_is_not_killed_before_the_restarted_replica_caught_up() -> None:
    """One failure at a time (Hwang et al.): a process pair's restarted replica copies its
    partner's state or waits for a checkpoint, so killing the partner within PAIR_RESYNC of
    the restart is a double failure, refused; after it, allowed. A DPC node is not held to
    it (its replicas each process everything)."""
    from node.config.load import load_config
    from ops_scripts.examples import EXAMPLES
    from ops_scripts.harness.schedule import PAIR_RESYNC, ScheduleError, parse_faults

    pair = load_config(EXAMPLES / "passive-standby.toml")
    soon = [{"at": 0.0, "for": 1.0, "fault": "kill", "process": "n1a"},
            {"at": 1.0 + PAIR_RESYNC / 2, "for": 1.0, "fault": "kill", "process": "n1b"}]
    try:
        parse_faults(soon, pair)
        raise AssertionError("a kill of the partner during the resync must be refused")
    except ScheduleError as e:
        assert "every replica of node 'n1' is down at once" in str(e)
    later = [soon[0], {**soon[1], "at": 1.0 + PAIR_RESYNC + 0.1}]
    assert len(parse_faults(later, pair)) == 2
    dpc = load_config(EXAMPLES / "sim.toml")
    assert len(parse_faults([{**f, "process": f["process"].replace("n1", "n2")} for f in soon],
                            dpc)) == 2
