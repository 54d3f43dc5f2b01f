"""Schedule extensions: the fault combinations a uniform draw rarely gives (pure).

Role: ``schedule.random_faults`` draws independent faults; the defects that matter most hide
in *combinations* of them. Each function here draws one combination from ``rng`` only, as
``[[faults]]`` tables (``schedule.parse_faults`` validates them with the rest), or nothing
when the cluster cannot have it. ``dpc torture`` (real processes) and ``dpc simulate``
(virtual time) add them with their own probabilities:

* :func:`stabilization`: a fault during STABILIZATION: a source cut from a node's replicas
  for 1.5-2.5 X (longer than alpha*X: tentative results, then a reconciliation); a stall of
  one of those replicas from just before the heal (its replay holds mid-way; the run then
  uses one bucket per replay step); and a new source cut on the same node while it lasts;
* :func:`kills_in_turn`: kills of two replicas of a node one after the other, the second
  ``RECOVERY_GAP`` s after the first one's restart (the player waits, if need be, until
  the first has rejoined: ``timeline.blocked``);
* :func:`kill_during_failure`: on a node of three replicas or more, one replica killed while
  a source is cut from all the others, and still dead when that cut heals: the survivors
  must reconcile without it (issue 13: a dead partner never blocks reconciliation);
* :func:`kills_at_once`: on a node whose replicas recover from their own CEC logs
  (``checkpointing = "cec"``), every replica killed at once (each kill starts while the
  first lasts): the case CEC lifts DPC's n - 1 limit for;
* :func:`long_source_pause`: a source paused for longer than it takes to fall a whole
  batch (``SOURCE_BATCH`` tuples) behind; the caller raises that source's rate so that the
  pause stays a few seconds (issue 13: a source that falls behind must not end its stream);
* :func:`subset_failure`: a failure of one replica of a DPC node, which its partners mask
  (issue 46, the checker's masking property, ``ops_scripts/check/masking.py``): a source
  cut from it, it isolated, or it killed, for 1.2-2 X (longer than alpha*X: unmasked, it
  would bring tentative results), starting ``SUBSET_GAP`` X after every other fault of the
  schedule healed, so that no other fault makes its window one the checker cannot judge.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from node.config.model import ClusterConfig

__all__ = [
    "RECOVERY_GAP", "SOURCE_BATCH", "SUBSET_GAP", "cec_nodes", "kill_during_failure",
    "kills_at_once", "kills_in_turn", "long_source_pause", "stabilization", "subset_failure",
]

RECOVERY_GAP = 3.0  # seconds between a restart and the partner's kill
#: The most tuples a source produces in one batch (node/procs/source.py): a source paused
#: for longer than SOURCE_BATCH / rate seconds catches up over several batches.
SOURCE_BATCH = 10_000
#: A subset failure starts 1.5-2.5 X (this range) after the schedule's last heal: past the
#: masking checker's look-around (its bound B, about a second) and the reconciliations
#: of what came before (a replica not STABLE when it starts leaves it unjudged).
SUBSET_GAP = (1.5, 2.5)

Tables = list[dict[str, Any]]


def _fed_nodes(config: ClusterConfig, min_replicas: int) -> list[tuple[Any, str]]:
    """(node, source) for every source input of a node with ``min_replicas`` or more."""
    return [(n, s) for n in config.nodes.values() for s in n.inputs if s in config.sources
            if len(n.replicas) >= min_replicas]


def stabilization(config: ClusterConfig, rng: random.Random, duration: float) -> Tables:
    """A long source cut, a stall across its heal, a new fault during the stall."""
    fed = _fed_nodes(config, 2)
    if not fed:
        return []
    node, source = rng.choice(fed)
    x = node.settings.x / 1e6
    replicas = [r.name for r in node.replicas]
    long = round(rng.uniform(1.5, 2.5) * x, 3)
    at = round(rng.uniform(0.0, max(duration - long, 0.1)), 3)
    stalled = rng.choice(replicas)
    second = rng.choice([s for s in node.inputs if s in config.sources])
    return [
        {"at": at, "for": long, "fault": "partition", "shape": "source", "source": source,
         "replicas": replicas, "cut": rng.choice(("blackhole", "reset"))},
        {"at": round(at + long - 0.3, 3), "for": round(0.3 + 1.5 * x, 3), "fault": "stall",
         "process": stalled},
        {"at": round(at + long + 0.3, 3), "for": round(rng.uniform(0.5, 1.5) * x, 3),
         "fault": "partition", "shape": "source", "source": second,
         "replicas": rng.choice([[stalled], replicas]), "cut": "blackhole"},
    ]


def kills_in_turn(config: ClusterConfig, rng: random.Random, duration: float) -> Tables:
    """Two replicas of one node killed one after the other."""
    nodes = [n for n in config.nodes.values() if len(n.replicas) >= 2]
    if not nodes:
        return []
    first, second = rng.sample([r.name for r in rng.choice(nodes).replicas], 2)
    d1, d2 = round(rng.uniform(0.5, 1.5), 3), round(rng.uniform(0.5, 1.5), 3)
    at = round(rng.uniform(0.0, max(duration - d1 - RECOVERY_GAP, 0.1)), 3)
    return [{"at": at, "for": d1, "fault": "kill", "process": first},
            {"at": round(at + d1 + RECOVERY_GAP, 3), "for": d2, "fault": "kill",
             "process": second}]


def cec_nodes(config: ClusterConfig) -> list[Any]:
    """The nodes whose replicas recover from their own CEC logs."""
    return [n for n in config.nodes.values()
            if n.settings.checkpointing == "cec" and n.settings.fault_tolerance]


def kills_at_once(config: ClusterConfig, rng: random.Random, duration: float) -> Tables:
    """Every replica of one CEC node killed at once."""
    nodes = cec_nodes(config)
    if not nodes:
        return []
    replicas = [r.name for r in rng.choice(nodes).replicas]
    at = round(rng.uniform(0.0, max(duration - 1.5, 0.1)), 3)
    first = round(rng.uniform(0.8, 1.5), 3)
    return [{"at": at, "for": first, "fault": "kill", "process": replicas[0]},
            *({"at": round(at + rng.uniform(0.0, first / 2), 3), "fault": "kill",
               "for": round(rng.uniform(0.5, 1.5), 3), "process": r} for r in replicas[1:])]


def kill_during_failure(config: ClusterConfig, rng: random.Random, duration: float) -> Tables:
    """One of three (or more) replicas killed across a source cut from all the others."""
    fed = _fed_nodes(config, 3)
    if not fed:
        return []
    node, source = rng.choice(fed)
    x = node.settings.x / 1e6
    replicas = [r.name for r in node.replicas]
    victim = rng.choice(replicas)
    others = [r for r in replicas if r != victim]
    cut = round(rng.uniform(1.5, 2.5) * x, 3)
    at = round(rng.uniform(0.3, max(duration - cut, 0.4)), 3)
    return [
        {"at": round(at - 0.3, 3), "for": round(0.3 + cut + 2.0 * x, 3), "fault": "kill",
         "process": victim},
        {"at": at, "for": cut, "fault": "partition", "shape": "source", "source": source,
         "replicas": others, "cut": rng.choice(("blackhole", "reset"))},
    ]


def long_source_pause(config: ClusterConfig, rng: random.Random, duration: float,
                      rate: float) -> tuple[str, Tables]:
    """A source paused for 1.2-1.5 times SOURCE_BATCH / ``rate`` seconds (the caller runs
    that source at ``rate``); returns the source and the fault ("" and none without one)."""
    if not config.sources:
        return "", []
    source = rng.choice(sorted(config.sources))
    length = round(rng.uniform(1.2, 1.5) * SOURCE_BATCH / rate, 3)
    at = round(rng.uniform(0.0, max(duration - 1.0, 0.1)), 3)
    return source, [{"at": at, "for": length, "fault": "pause", "process": source}]


def subset_failure(config: ClusterConfig, rng: random.Random, after: float,
                   kinds: Sequence[str]) -> Tables:
    """One failure of one replica of a DPC node of two or more replicas, starting
    ``SUBSET_GAP`` X after ``after`` (the schedule's last heal): a source it reads cut from
    it alone, it isolated (``kinds`` has "partition"), or it killed ("kill"). Nothing when
    the cluster has no such node or ``kinds`` neither."""
    nodes = [n for n in config.nodes.values()
             if len(n.replicas) >= 2 and n.settings.ha == "dpc"]
    shapes = [s for s, kind in (("source", "partition"), ("isolate", "partition"),
                                ("kill", "kill")) if kind in kinds]
    if not nodes or not shapes:
        return []
    shape = rng.choice(shapes)
    if shape == "source":
        fed = [(n, s) for n in nodes for s in n.inputs if s in config.sources]
        if not fed:
            return []
        node, source = rng.choice(fed)
    else:
        node, source = rng.choice(nodes), ""
    x = node.settings.x / 1e6
    replica = rng.choice([r.name for r in node.replicas])
    at = round(after + rng.uniform(*SUBSET_GAP) * x, 3)
    table: dict[str, Any] = {"at": at, "for": round(rng.uniform(1.2, 2.0) * x, 3)}
    if shape == "kill":
        return [{**table, "fault": "kill", "process": replica}]
    cut = rng.choice(("blackhole", "reset"))
    if shape == "isolate":
        return [{**table, "fault": "partition", "shape": "isolate", "process": replica,
                 "cut": cut}]
    return [{**table, "fault": "partition", "shape": "source", "source": source,
             "replicas": [replica], "cut": cut}]
