"""``dpc check``'s reference run (``reference_outputs``): the failure-free output of every
stream, stable only, independent of how the sources interleave, chained through the nodes in
order; a tentative source tuple or a missing input is refused."""

from __future__ import annotations

import pytest

from operators import QueryNetwork
from ops_scripts.check import reference_outputs
from protocol.tuples import Kind, Tuple, boundary
from tests.ops_scripts.check.world import BUCKET, SECOND, World, make_config, synth_sources


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
