"""A replica's CEC log (node/replica/cec.py) without processes: frames appended as the
network runs, then a new keeper over the same directory recovers the network, the output
streams' tails and where each input resumes; a fresh start forgets an old log."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from node.config.load import DEFAULT_SETTINGS
from node.replica.cec import CecKeeper
from operators import QueryNetwork
from tests.operators.test_cec import aggregate_spec, data, steps

LOG = logging.getLogger("test")
SETTINGS = replace(DEFAULT_SETTINGS, checkpointing="cec", cec_q=0, cec_u=0)


def keeper(directory: Path) -> CecKeeper:
    return CecKeeper(QueryNetwork(aggregate_spec(), undo_logs=False), directory, SETTINGS,
                     log=LOG, name="n1a")


def test_a_new_keeper_recovers_the_network_the_tails_and_the_resume_ids(tmp_path: Path) -> None:
    calls = steps(5, 30)
    first = keeper(tmp_path / "cec")
    first.start_fresh(0)
    emitted = []
    for k, (s, batch) in enumerate(calls[:60]):
        out = first.network.push(s, batch, k)
        first.after(out, k)
        emitted += out.outputs["out"]
    first.close()  # (a kill: nothing more is written)
    again = keeper(tmp_path / "cec")
    rec = again.recover(100)
    stable = data(emitted)
    assert stable, "the case must emit"
    assert rec.last_ids["out"] == stable[-1].id
    assert data(rec.held["out"]) == stable  # nothing acked: the whole stream is retained
    assert rec.trimmed["out"] == stable[0].id - 1
    assert set(rec.network.resume) == {"s1", "s2", "s3"}
    assert again.status()["recovery"]["phase"] == "replaying"
    assert again.acks() == rec.network.resume  # upstream may forget up to where it resumes
    again.close()


def test_a_fresh_start_deletes_an_old_log(tmp_path: Path) -> None:
    first = keeper(tmp_path / "cec")
    first.start_fresh(0)
    for k, (s, batch) in enumerate(steps(5, 10)):
        first.after(first.network.push(s, batch, k), k)
    first.close()
    before = first.status()["frames"]
    fresh = keeper(tmp_path / "cec")
    fresh.start_fresh(0)
    assert fresh.status()["frames"] == 1 and before > 5  # the genesis frame alone
    assert len(list(fresh.cec.backward())) == 1  # type: ignore[union-attr]
    fresh.close()
