"""Fixtures of the ``dpc check`` tests; the factories are in world.py."""

from __future__ import annotations

import pytest

from ops_scripts.check import reference_outputs
from tests.ops_scripts.check.world import World, make_config, synth_sources


@pytest.fixture(scope="module")
def world() -> World:
    config = make_config()
    sources = synth_sources(config)
    return config, sources, reference_outputs(config, sources)["n1.out"]
