"""The reference's stage 2 (ops_scripts/reconcile/plans.py): the query networks as Spark
plans give exactly stage 1's rows (the operators themselves, ``reference_outputs``) on
simulated runs, on the examples' networks, and on random networks over random sources."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from node.config.load import load_config, parse_config
from node.config.model import ClusterConfig
from node.procs.generators import make_generator
from node.procs.rundir import RunDir
from operators.errors import OperatorError
from ops_scripts.check.recorded import load_history
from ops_scripts.check.reference import reference_outputs
from ops_scripts.errors import CheckError
from ops_scripts.examples import EXAMPLES
from ops_scripts.harness.simulate import DEFAULT_CLUSTER, simulate_one
from ops_scripts.reconcile.plans import Untranslatable, plan_reference
from ops_scripts.reconcile.tables import SCHEMAS, Tables, ingest
from protocol.tuples import Kind, Tuple, make_tuple
from tests.networks import networks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SEEDS = (3, 4)
Rows = dict[str, list[tuple[int, int, int, str]]]  # stream -> (id, time, tmax, values)


def rows_of(df: DataFrame) -> Rows:
    """A plan's rows (small: test runs) per stream, in id order."""
    out: Rows = {}
    for r in sorted(df.collect(), key=lambda r: (r["stream"], r["id"])):
        out.setdefault(r["stream"], []).append((r["id"], r["time"], r["tmax"], r["values"]))
    return out


def stage1(config: ClusterConfig, sources: Mapping[str, Sequence[Tuple]]) -> Rows:
    outputs = reference_outputs(config, sources)
    return {s: [(t.id, t.time, t.tmax, orjson.dumps(list(t.values)).decode()) for t in ts]
            for s, ts in outputs.items() if ts}


def write_sources(root: Path, run: str, sources: Mapping[str, Sequence[Tuple]]) -> Tables:
    """The ``sources`` table of one run, as tables.py writes it (a file per stream)."""
    d = root / "tables" / "sources"
    d.mkdir(parents=True)
    for k, (stream, tuples) in enumerate(sources.items()):
        n = len(tuples)
        cols = [[run] * n, [stream] * n, [0] * n, list(range(1, n + 1)),
                [t.kind.name for t in tuples], [t.id for t in tuples],
                [t.time for t in tuples], [t.tmax for t in tuples],
                [orjson.dumps(list(t.values)).decode() for t in tuples]]
        pq.write_table(pa.table(cols, schema=SCHEMAS["sources"]), d / f"part-{k}.parquet")
    return Tables(root / "tables", {run: root})


def random_tuples(rng: random.Random, values: Sequence[tuple[Any, ...]], span: int,
                  boundaries: bool = True) -> list[Tuple]:
    """STABLE tuples with ``values`` at random times on a grid of 10 ms (ties within and
    across streams, and disorder), ids 1.., with a BOUNDARY here and there (control
    tuples: skipped by the reference)."""
    out: list[Tuple] = []
    for i, v in enumerate(values, 1):
        time = rng.randrange(span // 10_000) * 10_000
        out.append(make_tuple(Kind.STABLE, i, time, time, v))
        if boundaries and rng.random() < 0.1:
            out.append(make_tuple(Kind.BOUNDARY, 0, time, time, ()))
    return out


# ---------------------------------------------------------------- simulated runs
@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Tables]:
    base = tmp_path_factory.mktemp("runs")
    config = load_config(DEFAULT_CLUSTER)
    runs = [base / f"seed-{s}" for s in SEEDS]
    for seed, run in zip(SEEDS, runs, strict=True):
        simulate_one(config, seed, run)
    return runs, ingest(runs, tmp_path_factory.mktemp("out"))


def test_simulated_runs_equal_stage_1(spark: SparkSession,
                                      sim: tuple[list[Path], Tables]) -> None:
    runs, tables = sim
    for run in runs:
        config = load_config(run / "config.toml")
        want = stage1(config, load_history(RunDir(run), config).sources)
        assert want and all(len(rows) > 10 for rows in want.values())  # not vacuous
        assert rows_of(plan_reference(spark, tables, run.name, config)) == want, run.name


# ---------------------------------------------------------------- the examples
@pytest.mark.parametrize("name", ["sim", "basic", "three", "chain4", "weather"])
def test_example_networks_equal_stage_1(spark: SparkSession, tmp_path: Path, name: str) -> None:
    config = load_config(EXAMPLES / f"{name}.toml")
    rng = random.Random(name)
    sources = {s: random_tuples(rng, list(islice(make_generator(src), 250)), 3_000_000)
               for s, src in config.sources.items()}
    tables = write_sources(tmp_path, name, sources)
    want = stage1(config, sources)
    assert want and all(len(rows) > 5 for rows in want.values())
    assert rows_of(plan_reference(spark, tables, name, config)) == want


# ---------------------------------------------------------------- what is refused
def _one_node(operators: list[dict[str, Any]], schema: Sequence[str] = ("k", "v")
              ) -> ClusterConfig:
    gens = {"k": {"kind": "key", "n": 3}, "v": {"kind": "int", "min": 0, "max": 9},
            "f": {"kind": "float", "min": -5, "max": 5}}
    raw = {
        "cluster": {"name": "t", "token": "x"},
        "sources": {s: {"schema": list(schema), "port": 30001 + i, "rate": 10.0,
                        "attributes": {a: gens[a] for a in schema}}
                    for i, s in enumerate(("s1", "s2"))},
        "nodes": {"n1": {"inputs": ["s1", "s2"],
                         "operators": [{"name": "u", "type": "sunion", "inputs": ["s1", "s2"]},
                                       *operators],
                         "replicas": [{"name": "r1", "data_port": 30101,
                                       "control_port": 30201}]}},
        "clients": {"c1": {"stream": "n1.out"}},
    }
    return parse_config(raw, Path("/nonexistent/t.toml"))


def _values(rng: random.Random, schema: Sequence[str], n: int) -> list[tuple[Any, ...]]:
    draw: dict[str, Callable[[], Any]] = {"k": lambda: rng.randrange(3), "v": lambda: rng.randrange(10),
            "f": lambda: rng.choice([0.1, 0.2, 0.3, -0.0, 0.0, 1e16, rng.uniform(-5, 5)])}
    return [tuple(draw[a]() for a in schema) for _ in range(n)]


def test_a_runtime_error_is_untranslatable_as_stage_1_fails(spark: SparkSession,
                                                             tmp_path: Path) -> None:
    config = _one_node([{"name": "bad", "type": "filter", "inputs": ["u"], "where": "1 // v > 0"},
                        {"name": "out", "type": "soutput", "inputs": ["bad"]}])
    rng = random.Random(1)
    sources = {s: random_tuples(rng, [(1, 3), (2, 0), (0, 5)], 100_000) for s in ("s1", "s2")}
    with pytest.raises(OperatorError, match="ZeroDivisionError"):
        stage1(config, sources)
    tables = write_sources(tmp_path, "r", sources)
    with pytest.raises(Untranslatable, match=r"runtime error.*operator 'bad'"):
        plan_reference(spark, tables, "r", config)


def test_a_tentative_source_tuple_is_untranslatable(spark: SparkSession, tmp_path: Path) -> None:
    config = _one_node([{"name": "out", "type": "soutput", "inputs": ["u"]}])
    sources = {"s1": [make_tuple(Kind.STABLE, 1, 5, 5, (1, 2)),
                      make_tuple(Kind.TENTATIVE, 2, 6, 6, (1, 3))], "s2": []}
    with pytest.raises(CheckError, match="tentative"):
        stage1(config, sources)
    tables = write_sources(tmp_path, "r", sources)
    with pytest.raises(Untranslatable, match="source s1: a TENTATIVE tuple"):
        plan_reference(spark, tables, "r", config)


def test_a_join_over_an_aggregate_is_untranslatable(spark: SparkSession, tmp_path: Path) -> None:
    config = _one_node([
        {"name": "a", "type": "aggregate", "inputs": ["u"], "window": 100, "group_by": ["k"],
         "aggregates": [{"fn": "count", "as": "n"}]},
        {"name": "j", "type": "join", "inputs": ["a", "u"], "on": [["k", "k"]], "band": 10},
        {"name": "out", "type": "soutput", "inputs": ["j"]}])
    tables = write_sources(tmp_path, "r", {"s1": [], "s2": []})
    with pytest.raises(Untranslatable, match="input 0 comes from an aggregate"):
        plan_reference(spark, tables, "r", config)


# ---------------------------------------------------------------- random networks
# 5 networks (derandomized: the same five every run; seconds of Spark each): a guard on
# make test's 15 minutes; the example networks and the simulated runs above add theirs.
@settings(max_examples=5, deadline=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(net=networks(), seed=st.integers(0, 2**32), sizes=st.tuples(st.integers(0, 60),
                                                                    st.integers(0, 60)))
def test_random_networks_equal_stage_1(spark: SparkSession, net: tuple[list[dict[str, Any]],
                                       tuple[str, ...]], seed: int,
                                       sizes: tuple[int, int]) -> None:
    ops, schema = net
    config = _one_node(ops, schema)
    rng = random.Random(seed)
    sources = {s: random_tuples(rng, _values(rng, schema, n), 1_500_000)
               for s, n in zip(("s1", "s2"), sizes, strict=True)}
    want = stage1(config, sources)
    with tempfile.TemporaryDirectory() as d:
        tables = write_sources(Path(d), "r", sources)
        assert rows_of(plan_reference(spark, tables, "r", config)) == want
