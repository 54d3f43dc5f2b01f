"""Entry point of every process of a cluster: ``dpc node CLUSTER.toml NAME``.

NAME is a replica, a source or a client of the config, or ``controller`` (the Flux
controller, node/flux/controller.py, when the config has one). The process logs to
RUN_DIR/logs/<NAME>.log (and stderr), runs on uvloop (installed here, at the entry point
only), freezes its start-up heap out of the cyclic GC (DESIGN.md section 7), and stops
cleanly on SIGINT or SIGTERM: links closed, logs flushed, exit 0. A source also takes
SIGUSR1: end your stream (publish the end-of-stream boundary) and keep serving replays.
A replica restarted after a crash takes ``--recover`` (node/replica/recovery.py).

Every process takes SIGUSR2: read ``RUN_DIR/status/<NAME>.skew`` again and offset the clock
by it (the clock fault, issue 47: node/clock.py ``set_offset``; logged as "clock skew now
+2.000 s"). The same for every kind of process, because sources and clients have no
control plane. The file is read at start too, before the component is built, so a
restarted process keeps its skew; SIGUSR2 is ignored until the handler is installed, and
the file is read once more right after, so no write is missed.

The test-only switch ``DPC_TEST_MUTATION`` (node/streams/mutation.py's :class:`Mutation`) is
read here, once, and handed to the replica (its input links and its consistency manager)
and to the client's input link; nothing below the entry point reads the environment.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from node import clock
from node.config.model import ClusterConfig
from node.config.text import config_text
from node.errors import NodeError, RunLogError
from node.net.auth import authenticated
from node.net.ports import is_local_address
from node.net.tcp import TcpTransport
from node.procs.heap import tune_gc
from node.procs.rundir import RunDir
from node.streams.mutation import Mutation

__all__ = ["MUTATION_ENV", "mutation_from_env", "run_process"]

#: The environment variable of the test-only mutation switch.
MUTATION_ENV = "DPC_TEST_MUTATION"


def mutation_from_env(environ: Mapping[str, str] = os.environ) -> Mutation | None:
    """The test mutation ``environ`` asks for (None: none). An unknown value is refused:
    a test that believes it broke the build must not be run on a sound one."""
    value = environ.get(MUTATION_ENV)
    if not value:
        return None
    try:
        return Mutation(value)
    except ValueError:
        known = ", ".join(m.value for m in Mutation)
        raise NodeError(f"{MUTATION_ENV}={value!r} is no test mutation; known: {known}") from None


def _component(config: ClusterConfig, name: str, run_dir: RunDir, recover: bool,  # type: ignore[no-untyped-def]
               mutation: Mutation | None):
    transport = authenticated(TcpTransport(tls=config.tls), config, name)
    if name in config.sources:
        from node.procs.source import Source

        return Source(config, name, run_dir, transport)
    if config.controller is not None and name == config.controller.name:
        from node.flux.controller import ControllerProcess

        return ControllerProcess(config, run_dir)
    if name in config.clients:
        from node.procs.client import Client

        return Client(config, name, run_dir, transport, mutation=mutation)
    try:
        config.replica(name)
    except KeyError:
        known = sorted([*config.sources, *config.clients,
                        *(r.name for n in config.nodes.values() for r in n.replicas)])
        raise NodeError(f"{config.path}: no process named {name!r}; known: {', '.join(known)}") from None
    from node.procs.looplag import LoopLag
    from node.replica.runtime import Replica

    # A stall is a turn as long as a heartbeat interval: one more and a heartbeat is missed.
    interval = config.nodes[config.replica(name).node].settings.heartbeat_interval
    lag = LoopLag(name, stall=interval / 1e6, log=logging.getLogger("dpc.replica"))
    return Replica(config, name, run_dir, transport, recover=recover, mutation=mutation, loop_lag=lag)


def _check_hosts(config: ClusterConfig, name: str) -> None:
    """Every host ``name`` listens on is an address of this machine (of its network
    namespace): a clear error at start, not a traceback from the first bind."""
    if name in config.sources:
        hosts = [config.sources[name].host]
    elif config.controller is not None and name == config.controller.name:
        hosts = [config.controller.control_address]
    elif name in config.clients:
        hosts = []  # a client listens on nothing
    else:
        try:
            r = config.replica(name)
        except KeyError:
            return  # _component names the unknown process
        hosts = [r.host, r.control_address]
    for host in dict.fromkeys(hosts):
        if not is_local_address(host):
            raise NodeError(f"{name}: host {host} is not an address of this machine "
                            f"({config.path})")


def _check_recoverable(config: ClusterConfig, name: str) -> None:
    """``--recover`` rebuilds from another replica of the node (node/replica/recovery.py)."""
    node = next((n for n in config.nodes.values() if name in {r.name for r in n.replicas}), None)
    if node is None:
        raise NodeError(f"{name!r}: only a node replica can --recover")
    if len(node.replicas) < 2:
        raise NodeError(f"{name!r}: cannot --recover: node {node.name!r} has no other replica "
                        "to rebuild from (start it without --recover for a fresh start)")


def _setup_logging(run_dir: RunDir, name: str) -> None:
    fmt = logging.Formatter(f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for handler in (logging.FileHandler(run_dir.process_log(name)), logging.StreamHandler(sys.stderr)):
        handler.setFormatter(fmt)
        root.addHandler(handler)


def _apply_skew(run_dir: RunDir, name: str) -> None:
    """Set this process's clock offset from its skew file (the clock fault, issue 47); log
    a change. At start a bad file is fatal; on SIGUSR2 it is logged and the offset kept."""
    offset = round(run_dir.read_skew(name) * 1e6)
    if offset != clock.offset_us():
        clock.set_offset(offset)
        logging.getLogger("dpc").warning("%s: clock skew now %+.3f s", name, offset / 1e6)


def _on_skew_signal(run_dir: RunDir, name: str) -> None:
    try:
        _apply_skew(run_dir, name)
    except RunLogError as e:  # a launcher's bad write must not stop a running process
        logging.getLogger("dpc").error("%s: clock skew unchanged (%+.3f s): %s", name,
                                       clock.offset_us() / 1e6, e)


async def _main(component: object, run_dir: RunDir, name: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    end_stream = getattr(component, "end_stream", None)
    if end_stream is not None:  # sources: SIGUSR1 ends the stream, the process keeps serving
        loop.add_signal_handler(signal.SIGUSR1, end_stream)
    # Every process: SIGUSR2 says its skew file changed. Read it once more now: a write
    # between the read at start and this handler came with a signal that was ignored.
    loop.add_signal_handler(signal.SIGUSR2, _on_skew_signal, run_dir, name)
    _apply_skew(run_dir, name)
    tune_gc()  # start-up objects frozen, a large young generation (node/procs/heap.py)
    await component.run(stop)  # type: ignore[attr-defined]


def run_process(config_path: Path, name: str, run_dir: Path, *, recover: bool = False) -> int:
    from node.config.load import load_config

    # SIGUSR2 (the skew file changed) kills by default: ignored until _main handles it.
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    config = load_config(config_path)
    rd = RunDir(run_dir)
    rd.ensure()
    _setup_logging(rd, name)
    _check_hosts(config, name)
    if recover:
        _check_recoverable(config, name)
    if not rd.record_config(config_text(config)):
        logging.getLogger("dpc").warning(
            "%s: %s holds another config than %s: dpc check judges the run by the one it holds",
            name, rd.config, config.path)
    _apply_skew(rd, name)  # before the component reads the clock; a restart stays skewed
    component = _component(config, name, rd, recover, mutation_from_env())
    try:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(_main(component, rd, name))
    except OSError as e:
        logging.getLogger("dpc").error("%s cannot start: %s", name, e)
        return 1
    return 0
