"""``dpc check``'s exactly-once property (docs/flux.md): judged for a client whose every
upstream node is a flux pair, valid only when its raw log is the reference, each tuple once,
in order, stable on arrival; a loss, a repeat, a tentative tuple or an UNDO is invalid with
the line as evidence."""

from __future__ import annotations

from node.config.load import load_config
from ops_scripts.check import Status
from ops_scripts.check.paths import flux_path
from ops_scripts.check.properties import check_exactly_once
from protocol.tuples import boundary, undo
from tests.ops_scripts.check.world import World, corrected
from tests.paths import ROOT


def test_a_clean_log_is_exactly_once_and_each_violation_is_named(world: World) -> None:
    config, _, ref = world
    c1, refs = config.clients["c1"], {"n1.out": ref}
    got = check_exactly_once(c1, [ref[0], boundary(ref[0].time), *ref[1:]], refs)
    assert got.status is Status.VALID and f"{len(ref)} tuples, each once" in got.evidence
    cases = {
        "a loss": [*ref[:3], *ref[4:]],
        "a repeat": [*ref[:4], ref[3], *ref[4:]],
        "stable tuples only": corrected(ref),  # tentative, then UNDO and corrections
        "never arrived": ref[:-2],
    }
    for why, log in cases.items():
        v = check_exactly_once(c1, log, refs)
        assert v.status is Status.INVALID and why in v.evidence, (why, v.evidence)
    v = check_exactly_once(c1, [*ref[:2], undo(ref[1].id), *ref[2:]], refs)
    assert v.status is Status.INVALID and "row 3" in v.evidence


def test_only_clients_of_an_all_flux_path_are_judged(world: World) -> None:
    flux = load_config(ROOT / "examples" / "flux.toml")
    assert flux_path(flux, "n2.out") and not flux_path(flux, "s1")
    partitioned = load_config(ROOT / "examples" / "partitioned.toml")
    assert not flux_path(partitioned, "n2.out")
    config, _, _ = world
    assert not flux_path(config, "n1.out")  # a DPC node: corrections are its promise
