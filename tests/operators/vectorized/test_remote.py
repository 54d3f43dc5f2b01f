"""A replay step run elsewhere (QueryNetwork.replay_remote, ChainJob, run_job, finish_remote).

What a Spark task does (node/spark/replay.py), without Spark: the job and its result go
through pickle, as they do between the node and the task, and the job runs in a fresh
network of the same spec, reading spilled buckets by path. Every call returns exactly what
the per-tuple replay returns, and the operators end in exactly its state; Spark itself is
exercised by tests/node/spark/ and the real-process test (tests/integration/test_spill.py).
"""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from operators import NetworkOutput, QueryNetwork
from operators.buckets import Released
from operators.vectorized.release import released_streams
from operators.vectorized.remote import ChainJob, ChainResult, run_job
from protocol.tuples import Kind, boundary, make_tuple
from state.spill import Chunk, SegmentReader
from tests.operators.vectorized.test_replay import scenario, spec


class RemoteNetwork(QueryNetwork):
    """A network whose replay steps (after the first, which ``rewind`` runs here, as the
    manager does) go through jobs, each pickled both ways."""

    jobs: list[ChainJob]

    def replay(self, now: int) -> NetworkOutput:
        return self.replay_elsewhere(now, self.run_here)

    def run_here(self, jobs: list[ChainJob]) -> list[ChainResult]:
        self.jobs = [*getattr(self, "jobs", []), *jobs]
        wire = [pickle.loads(pickle.dumps(j, protocol=5)) for j in jobs]
        return [pickle.loads(pickle.dumps(run_job(j), protocol=5)) for j in wire]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([1, 4]),
       st.sampled_from(["join", "map-aggregate"]), st.sampled_from([0, 400]),
       st.sampled_from([None, 0]))
def test_a_replay_run_elsewhere_equals_the_per_tuple_replay(seed: int, step: int, kind: str,
                                                            band: int,
                                                            spill: int | None) -> None:
    inproc, remote = QueryNetwork(spec(kind, band)), RemoteNetwork(spec(kind, band))
    remote.set_engine("spark")
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        if spill is not None:
            inproc.set_spill(a, spill)
            remote.set_spill(b, spill)
        expected = scenario(inproc, seed, step)
        assert scenario(remote, seed, step) == expected
        assert remote.snapshot() == inproc.snapshot()
    # The operators below the SUnion ran in the jobs, vectorized there.
    assert remote.replay_runs["vectorized"] >= 3


def test_a_job_reads_the_spilled_buckets_by_path() -> None:
    """Nothing of a spilled bucket is in the pickled job: its chunks name their segment
    file, which the job maps where it runs (and the result is the same)."""
    inproc, remote = QueryNetwork(spec("join", 400)), RemoteNetwork(spec("join", 400))
    remote.set_engine("spark")
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        inproc.set_spill(a, 5000)  # (bytes: some buckets spilled, some kept in memory)
        remote.set_spill(b, 5000)
        assert scenario(remote, 1, 1) == scenario(inproc, 1, 1)
        chunks = [src for j in remote.jobs for r in j.runs for sources in r.ports
                  for src in sources if isinstance(src, Chunk)]
        assert len(chunks) >= 5
        assert all(c.segment.table is None and str(c.segment.path).startswith(b)
                   for c in chunks)
        assert all(isinstance(r.store, SegmentReader) for j in remote.jobs for r in j.runs
                   if any(isinstance(s, Chunk) for ss in r.ports for s in ss))
        # With spilling on, the buckets still in memory went to a segment of the job's
        # own (no tuple is pickled), which is gone once the job ran.
        assert not [src for j in remote.jobs for r in j.runs for sources in r.ports
                    for src in sources if isinstance(src, list) and src]
        assert any("/jobs/" in str(c.segment.path) for c in chunks)
        assert any("/input/" in str(c.segment.path) for c in chunks)
        assert not list((Path(b) / "jobs").glob("*.arrow"))


def test_a_job_names_the_operators_below_the_sunion_but_not_the_soutput() -> None:
    net = RemoteNetwork(spec("map-aggregate", 150))
    net.set_engine("spark")
    scenario(net, 7, 1)
    assert net.jobs, "the replay had steps after the first"
    assert {j.names for j in net.jobs} == {("lo", "hi", "j", "m", "a")}
    assert all(j.serializer == "u" for j in net.jobs)


def test_a_step_ending_tentative_keeps_its_stable_head_vectorized() -> None:
    """A long step (a Spark job's) ends with the failure's newest buckets, still
    tentative: its stable head is one flow, the rest plain tuples (released_streams)."""
    schema = ("key", "value")
    stable = [make_tuple(Kind.STABLE, 0, 5, 5, (1, 2)), make_tuple(Kind.STABLE, 0, 7, 7, (2, 3))]
    runs = [Released(0, 1, [[list(stable)]], None), Released(1, 3, [[list(stable)]], None)]
    out = [boundary(10), boundary(20), make_tuple(Kind.TENTATIVE, 5, 25, 25, (1, 1))]
    head, tail = released_streams(schema, out, runs)
    assert head.vectorized and not tail.vectorized
    assert head.flow().n == 4 and [m.tuple[2] for m in head.flow().marks] == [10, 20]
    assert [t[0] for t in tail.tuples()] == [Kind.TENTATIVE]
    # Nothing tentative: one stream, as before.
    (whole,) = released_streams(schema, out[:2], runs)
    assert whole.vectorized and whole.flow().n == 4
