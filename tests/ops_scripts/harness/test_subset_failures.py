"""Subset failures in random schedules (issue 46): ``dpc simulate`` and ``dpc torture`` draw,
after everything else healed, a failure of one replica (a source cut from it, it isolated,
or it killed) often enough that the checker's masking property judges most seeds; every
draw before it is what the seed drew without it (seeds that once failed replay their
faults); a process pair's cluster draws none."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from node.config.load import load_config
from node.config.model import ClusterConfig
from ops_scripts.check.masking import mask_bound, mask_windows
from ops_scripts.examples import EXAMPLES
from ops_scripts.harness import extras, simulate, torture
from ops_scripts.harness.history import fault_effects
from ops_scripts.harness.scenario import Scenario
from ops_scripts.harness.schedule import Fault, parse_faults
from ops_scripts.harness.simulate import SimOptions, simulation_schedule
from ops_scripts.harness.torture import torture_schedule

SEEDS = range(60)
SECOND = 1_000_000


def planned_history(config: ClusterConfig, faults: Sequence[Fault]) -> list[dict[str, Any]]:
    """The history a schedule would leave if played as planned (every replica STABLE
    throughout): what the masking checker reads."""
    events: list[dict[str, Any]] = [{"t": 0, "event": "ready"}]
    for i, f in enumerate(faults):
        at = SECOND + int(f.at * SECOND)
        events += [{"t": at, "event": "fault", "id": i, "fault": f.table(),
                    "describe": f.describe(), **fault_effects(f, config)},
                   {"t": at + int(f.duration * SECOND), "event": "heal", "id": i}]
    return sorted(events, key=lambda e: e["t"])


def judged(config: ClusterConfig, faults: Sequence[Fault]) -> bool:
    """Whether the masking property judges some fault of ``faults`` for every client."""
    events = planned_history(config, faults)
    return all(any(w.judged for w in mask_windows(config, c.name, events,
                                                  mask_bound(config, c.stream)))
               for c in config.clients.values())


def is_subset(f: Fault) -> bool:
    return (f.kind == "kill" or (f.kind == "partition" and (
        f.params["shape"] == "isolate"
        or (f.params["shape"] == "source" and len(f.params["replicas"]) == 1))))


def test_simulation_schedules_draw_subset_failures_the_masking_property_judges() -> None:
    config = load_config(simulate.DEFAULT_CLUSTER)
    draws = [simulation_schedule(config, random.Random(s), SimOptions()) for s in SEEDS]
    assert sum(judged(config, faults) for faults in draws) >= 0.7 * len(SEEDS)
    shapes = Counter(f.kind if f.kind == "kill" else f.params["shape"]
                     for faults in draws for f in faults[-1:] if is_subset(f))
    assert set(shapes) == {"kill", "isolate", "source"}, shapes
    for faults in draws:
        parse_faults([f.table() for f in faults], config)  # still valid schedules
    # Every kind is still drawn (coverage kept).
    kinds = Counter(f.kind for faults in draws for f in faults)
    assert set(simulate.SIM_KINDS) <= set(kinds), kinds


@pytest.mark.parametrize("cluster", torture.DEFAULT_CLUSTERS, ids=lambda p: p.name)
def test_torture_schedules_draw_subset_failures_the_masking_property_judges(
        cluster: Any) -> None:
    config = Scenario.of_cluster(cluster, name="t", settings=torture.SETTINGS).config()
    draws = [torture_schedule(config, random.Random(s), duration=8.0, count=4).faults
             for s in SEEDS]
    assert sum(judged(config, faults) for faults in draws) >= 0.7 * len(SEEDS)
    shapes = Counter(f.kind if f.kind == "kill" else f.params["shape"]
                     for faults in draws for f in faults[-1:] if is_subset(f))
    assert set(shapes) == {"kill", "isolate", "source"}, shapes


def test_the_subset_failure_comes_last_and_leaves_every_earlier_draw_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sim = load_config(simulate.DEFAULT_CLUSTER)
    basic = Scenario.of_cluster(torture.DEFAULT_CLUSTERS[0], name="t",
                                settings=torture.SETTINGS).config()
    with_it = {s: (simulation_schedule(sim, random.Random(s), SimOptions()),
                   torture_schedule(basic, random.Random(s), duration=8.0, count=4).faults)
               for s in SEEDS}
    monkeypatch.setattr(simulate, "P_SUBSET_FAILURE", 0.0)
    monkeypatch.setattr(torture, "P_SUBSET_FAILURE", 0.0)
    added = 0
    for s in SEEDS:
        before = (simulation_schedule(sim, random.Random(s), SimOptions()),
                  torture_schedule(basic, random.Random(s), duration=8.0, count=4).faults)
        for config, now, then in zip((sim, basic), with_it[s], before, strict=True):
            assert now[:len(then)] == then
            if len(now) > len(then):
                (extra,) = now[len(then):]
                added += 1
                assert is_subset(extra)
                x = max(n.settings.x for n in config.nodes.values()) / SECOND
                gap = (extra.at - max(f.heal_at for f in then)) / x  # in X
                assert extras.SUBSET_GAP[0] - 0.001 <= gap <= extras.SUBSET_GAP[1] + 0.001
    assert added >= 0.7 * 2 * len(SEEDS)


def test_a_process_pair_cluster_draws_no_subset_failure() -> None:
    pair = load_config(EXAMPLES / "active-standby.toml")
    for s in range(20):
        faults = simulation_schedule(pair, random.Random(s), SimOptions())
        assert all(f.kind == "kill" for f in faults)
        assert len(faults) == SimOptions().faults
