"""Real processes over TLS ([cluster.tls]): a ``dpc run`` of examples/basic.toml whose data
ports and control planes all speak TLS with a throwaway CA's certificate (trustme): a
replica killed and restarted with ``--recover`` (its partner's state over HTTPS), a source
cut by ``POST /fault`` (HTTPS), the run valid; the control plane refuses plain HTTP."""

from __future__ import annotations

import asyncio
import http.client
import io
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from node.config.load import load_config
from node.net.ports import free_port
from node.net.tls import client_context, server_context
from node.procs.control import ControlPlane
from node.procs.rundir import RunDir
from ops_scripts.harness.runner import play_scenario
from ops_scripts.harness.scenario import load_scenario
from tests.node.net.test_tls import write_tls
from tests.paths import EXAMPLES

SCENARIO = """\
[scenario]
name = "tls"
cluster = "cluster.toml"
settle = 1.0
quiet = 2.0
source_rate = 300.0

[scenario.settings]
x = 1.0
alpha = 0.7

[[faults]]
at = 0.0
for = 1.5
fault = "kill"
process = "n1a"

[[faults]]
at = 0.5
for = 1.5
fault = "partition"
shape = "source"
source = "s1"
replicas = ["n1b"]
cut = "blackhole"
"""
TLS = '[cluster.tls]\ncert = "pki/cert.pem"\nkey = "pki/key.pem"\nca = "pki/ca.pem"\n\n'


def test_a_run_over_tls_is_valid(tmp_path: Path) -> None:
    write_tls(tmp_path / "pki", "127.0.0.1", "localhost")
    text = (EXAMPLES / "basic.toml").read_text()
    (tmp_path / "cluster.toml").write_text(text.replace("[defaults]", TLS + "[defaults]", 1))
    (tmp_path / "tls.toml").write_text(SCENARIO)
    out = io.StringIO()
    outcome = play_scenario(load_scenario(tmp_path / "tls.toml"), tmp_path / "run", out)
    log = out.getvalue()
    print(log)
    assert outcome.code == 0 and not outcome.problems, log
    rd = RunDir(tmp_path / "run")
    config = load_config(rd.config)  # the run's own config: absolute paths to the PEM files
    assert config.tls is not None and config.tls.ca == (tmp_path / "pki" / "ca.pem").resolve()
    # The restarted n1a took n1b's state over HTTPS (POST /state) and caught up.
    assert "recovering: restored n1b's state" in rd.process_log("n1a").read_text()
    # Nothing went in clear: the replicas' logs show no refused handshake or bad frame.
    for name in ("n1a", "n1b"):
        text = rd.process_log(name).read_text()
        assert "refused a connection" not in text and "sent bad data" not in text


def test_the_control_plane_refuses_plain_http(tmp_path: Path) -> None:
    """A control plane with TLS answers HTTPS with the cluster's CA, and nothing in clear."""
    files = write_tls(tmp_path / "pki", "127.0.0.1")
    port = free_port()

    def fetch(scheme: str, context: ssl.SSLContext | None = None) -> bytes:
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/status", timeout=5,
                                    context=context) as r:
            return bytes(r.read())

    async def main() -> None:
        plane = ControlPlane("n1a", "127.0.0.1", port, "t", lambda: {"state": "STABLE"}, {},
                             tls=server_context(files))
        await plane.start()
        try:
            with pytest.raises((urllib.error.URLError, http.client.HTTPException,
                                ConnectionError)):
                await asyncio.to_thread(fetch, "http")
            assert b"STABLE" in await asyncio.to_thread(fetch, "https", client_context(files))
        finally:
            await plane.stop()

    asyncio.run(main())
