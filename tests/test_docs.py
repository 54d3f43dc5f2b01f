"""Docs that match the code: the README's query-network example builds and runs."""

from __future__ import annotations

import ast
import re

from operators import QueryNetwork
from protocol.tuples import Kind, boundary, make_tuple
from tests.paths import ROOT

README = ROOT / "README.md"


def test_readme_network_example_builds_and_produces_output() -> None:
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block, "README lost its query-network example"
    spec = ast.literal_eval(block.group(1))
    net = QueryNetwork(spec)
    out = []
    for stream in ("s1", "s2"):
        batch = [make_tuple(Kind.STABLE, i, i * 100_000, i * 100_000, (f"s{i % 2}", 50 + i))
                 for i in range(1, 30)]
        out += net.push(stream, [*batch, boundary(10_000_000)]).outputs["out"]
    means = [t for t in out if t.kind is Kind.STABLE]
    assert means and all(len(t.values) == 3 for t in means)
