"""A run's processes on other machines, started over SSH (``--hosts ssh``), and their files
gathered back (``dpc collect RUN_DIR``).

Role: the launching machine is the *control node* (Jepsen's term): as Jepsen's control node
and Flink's cluster scripts do, it runs the ordinary OpenSSH client, ``ssh HOST 'command'``,
for everything it does on a host. The host of each process and its SSH destination come
from the run's placement (``placement.py``: the config's ``host``, or ``[hosts.ADDRESS] ssh
= "user@machine"``).

Assumptions (as Flink's ``start-cluster.sh``): the project is installed at the same path on
every host (the same Python, ``sys.executable``, and the same project directory, where the
remote command ``cd``-s); every file the config names (a source's data ``file``, the TLS
files) is at the same absolute path there; the remote login shell is a POSIX shell.

Layout: each host keeps its part of the run directory at ``RUN_DIR/hosts/HOST/`` (the same
absolute path, HOST the placement's host name), never ``RUN_DIR`` itself, so that on real
machines sharing nothing, and in the tests where every "host" shares one filesystem alike,
a missing gather cannot go unnoticed: ``RUN_DIR`` holds a host's logs only once
:func:`collect` copied them there. Each host holds only its own processes' files (``logs/``,
``status/``, ``sources/``, ``clients/``, ``replicas/``) and a copy of the run's config.

* **Start** (:func:`start_node`): one command per process, ``ssh DEST 'mkdir -p D && cat >
  D/config.toml && cd PROJECT && echo "dpc ssh: pid $$ on HOST" && exec PY -m
  ops_scripts.cli node D/config.toml NAME --run-dir D'`` with the local config on its
  standard input (one round trip copies it, written aside and renamed, and starts the
  process). The ``exec`` keeps the shell's pid, so the echoed pid is the process's (a
  session and group leader: sshd ``setsid``-s its command). Variables ``DPC_*`` of the launcher's environment are passed
  on the command line (sshd accepts none by default). The client's output, the remote
  pid's line and then the process's stderr log, is appended to the local
  ``RUN_DIR/logs/NAME.out``, so that a failed start shows its reason at once
  (``launch.log_tail``). :class:`SshProcess` is the handle: ``pid`` the remote pid,
  ``poll``/``wait`` the SSH client's exit (the remote exit status; 255 when ssh failed or
  the process died of a signal), ``send_signal`` ``ssh DEST kill -s SIG PID``.
* **Waits** (:class:`HostWatch`): the launcher's waits (ready, done, a client's first
  results) ask the process's host, one ``test -e`` or ``dpc log HD CLIENT --count`` (the
  rows of its Arrow log) per question.
* **Connections**: each node process has an SSH connection of its own (a lost connection
  costs one process, not a host, and sshd's ``MaxSessions`` never limits a host's
  processes); the short commands (signals, waits, the gather) share one master connection
  per host (``ControlMaster``; :func:`connect_hosts` opens them at the start, checking
  that every host answers; :func:`gather` closes them at the end), whose socket is
  ``$TMPDIR/dpc-TAG-%C`` (short: a socket path has at most 107 bytes). ``BatchMode``: a
  host that wants a password fails at once instead of prompting.
* **Configuration**: the user's ``~/.ssh/config`` (user names, keys, ports, jump hosts), as
  ``ssh`` itself reads it; only when ``DPC_SSH_CONFIG`` is set is that file given instead
  (``ssh -F``: the suite's keys and known-hosts file, tests/integration/test_ssh_hosts.py).
* **Gather** (:func:`collect`): per host ``ssh DEST 'cd D && tar -cf - .'``, the stream
  unpacked into ``RUN_DIR``: the five directories merged (a file two hosts both hold is an
  error: each host holds only its own processes' files), the host's ``config.toml`` checked
  equal to the run's. Idempotent (a file is replaced whole, atomically). What was gathered
  is recorded in ``RUN_DIR/gathered.json``; ``dpc check`` refuses an ssh run with a host
  missing there (``ops_scripts/check/compose.py``).

Invariants: nothing here signals a local pid on a remote process's behalf; every SSH failure
is a :class:`HostsError` (or, where a run must go on stopping its other processes, a
warning on stderr) naming the host, the command and ssh's message.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import IO, TextIO

from node.procs.rundir import RunDir
from ops_scripts.cluster.hosts.placement import Host, HostsMode, Placement, read_placement
from ops_scripts.errors import HostsError, ProcessError

__all__ = [
    "CONFIG_ENV",
    "GATHERED_FILE",
    "HostWatch",
    "Mux",
    "SshClient",
    "SshProcess",
    "collect",
    "connect_hosts",
    "gather",
    "host_dir",
    "node_command",
    "parse_pid",
    "run_collect",
    "start_node",
]

#: The environment variable naming an ssh config file used instead of ``~/.ssh/config``.
CONFIG_ENV = "DPC_SSH_CONFIG"
#: What :func:`collect` gathered, per host (``dpc check`` reads it).
GATHERED_FILE = "gathered.json"
#: The directories of a host's part of a run directory (node/procs/rundir.py's layout).
GATHER_DIRS = ("logs", "status", "sources", "clients", "replicas")
CONNECT_TIMEOUT = 10  # s: ssh's ConnectTimeout
COMMAND_TIMEOUT = 60.0  # s: a short remote command (a signal, a test, a gather's end)
PID_TIMEOUT = 30.0  # s: from starting ssh until the remote pid's line arrives
PERSIST = 60  # s: an idle master connection outlives its last use (ControlPersist)
KILL_GRACE = 5.0  # s: after a remote SIGKILL, the ssh client's wait before it is killed

#: The project's directory (where ``-m ops_scripts.cli`` is found): the same on every host.
PROJECT = Path(__file__).resolve().parents[3]
_PID_LINE = re.compile(rb"^dpc ssh: pid (\d+) on ", re.M)


class Mux(Enum):
    """How a command uses the host's master connection."""

    OPEN = "open"  # start the master if there is none (only :meth:`SshClient.connect`)
    USE = "use"  # through the master if there is one, else a connection of its own
    OWN = "own"  # a connection of its own (a node process: its session lasts the run)


@dataclass(frozen=True, slots=True)
class SshClient:
    """How this machine runs ``ssh``: the program, the config file (``DPC_SSH_CONFIG``, else
    the user's own) and the run's master-connection socket (None: no master)."""

    control_path: str | None = None
    config: str | None = field(default_factory=lambda: os.environ.get(CONFIG_ENV) or None)
    program: str = "ssh"

    @classmethod
    def for_run(cls, placement: Placement, program: str = "ssh") -> SshClient:
        """The client of a run: its masters' sockets carry the run's tag (a run's
        :func:`gather` closes its own masters, never another run's)."""
        return cls(str(Path(tempfile.gettempdir()) / f"dpc-{placement.tag}-%C"),
                   program=program)

    def argv(self, dest: str, command: str | None, mux: Mux = Mux.USE,
             control: str | None = None) -> list[str]:
        """The ``ssh`` command line running ``command`` on ``dest`` (``control``: an
        ``-O`` request to the master instead)."""
        if not dest or dest.startswith("-"):
            raise HostsError(f"{dest!r} is not an SSH destination")
        argv = [self.program]
        if self.config is not None:
            argv += ["-F", self.config]
        argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT}"]
        if self.control_path is None or mux is Mux.OWN:
            argv += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        elif mux is Mux.OPEN:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path}",
                     "-o", f"ControlPersist={PERSIST}", "-o", "ServerAliveInterval=15"]
        else:
            argv += ["-o", "ControlMaster=no", "-o", f"ControlPath={self.control_path}"]
        if control is not None:
            return [*argv, "-O", control, dest]
        return [*argv, dest] + ([] if command is None else [command])

    def run(self, host: Host, command: str, *, timeout: float = COMMAND_TIMEOUT,
            ) -> subprocess.CompletedProcess[bytes]:
        """``command`` on ``host``, through its master when there is one; ssh's exit
        status 255 (it could not run the command) is a :class:`HostsError`."""
        dest = destination(host)
        argv = self.argv(dest, command)
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HostsError(f"host {host.name}: `ssh {dest} {command}` took more than "
                             f"{timeout:g} s") from None
        except OSError as e:
            raise HostsError(f"cannot run {self.program!r}: {e}") from None
        if done.returncode == 255:
            raise HostsError(f"host {host.name}: `ssh {dest} {command}` failed: "
                             f"{_message(done.stderr)}")
        return done

    def connect(self, host: Host) -> None:
        """Open ``host``'s master connection (or use the one open): :class:`HostsError`
        saying why when the host does not answer. Its output goes to no pipe: a master
        that goes to the background keeps what it was given, and a pipe would never end."""
        dest = destination(host)
        with tempfile.TemporaryFile() as err:
            try:
                code = subprocess.run(self.argv(dest, "true", Mux.OPEN), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=err,
                                      timeout=CONNECT_TIMEOUT + COMMAND_TIMEOUT).returncode
            except subprocess.TimeoutExpired:
                raise HostsError(f"host {host.name}: `ssh {dest}` did not answer within "
                                 f"{CONNECT_TIMEOUT + COMMAND_TIMEOUT:g} s") from None
            except OSError as e:
                raise HostsError(f"cannot run {self.program!r}: {e}") from None
            if code != 0:
                err.seek(0)
                raise HostsError(f"host {host.name}: `ssh {dest} true` failed (exit {code}): "
                                 f"{_message(err.read())}")

    def disconnect(self, host: Host) -> None:
        """Close ``host``'s master connection, if one is open (``ssh -O exit``)."""
        if self.control_path is not None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(self.argv(destination(host), None, control="exit"),
                               stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=COMMAND_TIMEOUT)


def destination(host: Host) -> str:
    """``host``'s SSH destination: ``[hosts.ADDRESS] ssh``, else its address."""
    return host.ssh or host.address


def _message(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    return " / ".join(text.splitlines()[-3:]) or "(no message)"


def host_dir(run_dir: Path, host: Host) -> PurePosixPath:
    """Where ``host`` keeps its part of the run (module docstring: the layout)."""
    return PurePosixPath(run_dir.resolve()) / "hosts" / host.name


def _forwarded(environ: Mapping[str, str]) -> dict[str, str]:
    """The launcher's ``DPC_*`` variables (the test mutation, the crossovers file), which
    a node process reads and sshd would not pass on (``DPC_SSH_CONFIG`` is the client's)."""
    return {k: v for k, v in sorted(environ.items())
            if k.startswith("DPC_") and k != CONFIG_ENV}


def node_command(host: Host, hd: PurePosixPath, name: str, *, recover: bool,
                 environ: Mapping[str, str] = os.environ) -> str:
    """The remote shell command that starts ``dpc node`` ``name`` on ``host`` in its run
    directory ``hd``, reading the config from standard input (module docstring)."""
    q = shlex.quote
    config = hd / "config.toml"
    tmp = f"{q(str(hd))}/.config.$$.tmp"  # $$: starts on one host at once never share it
    env = [f"{k}={v}" for k, v in _forwarded(environ).items()]
    node = [*(["env", *env] if env else []), sys.executable, "-m", "ops_scripts.cli", "node",
            str(config), name, "--run-dir", str(hd), *(["--recover"] if recover else [])]
    return (f"mkdir -p {q(str(hd))} && cat > {tmp} && mv -f {tmp} {q(str(config))} && "
            f"cd {q(str(PROJECT))} && echo {q('dpc ssh: pid')} $$ {q('on ' + host.name)} && "
            f"exec {shlex.join(node)}")


def parse_pid(output: bytes) -> int | None:
    """The remote pid in what a start printed so far (the first ``dpc ssh: pid N on
    HOST`` line), or None if it has not come yet."""
    m = _PID_LINE.search(output)
    return None if m is None else int(m.group(1))


class SshProcess:
    """A ``Popen``-like handle on a process started over SSH (module docstring). When ssh
    failed before the remote pid came, ``pid`` is the (exited) SSH client's own and
    ``remote`` is False: nothing is ever signalled then."""

    def __init__(self, popen: subprocess.Popen[bytes], client: SshClient, host: Host,
                 remote_pid: int | None, name: str) -> None:
        self._popen, self._client, self.host, self.name = popen, client, host, name
        self.remote = remote_pid is not None
        self.pid: int = remote_pid if remote_pid is not None else popen.pid
        self.args = popen.args

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._popen.wait(timeout)

    def send_signal(self, sig: int) -> None:
        """``kill -s SIG PID`` on its host, while its ssh client runs. A failure of ssh is a
        warning on stderr, not an exception: stopping a cluster goes on with the others,
        and whoever waits for the effect (the nemesis, ``stop_cluster``) sees none."""
        if self.poll() is None and self.remote:
            self._kill(f"kill -s {signal.Signals(sig).name.removeprefix('SIG')} {self.pid}")

    def kill_group(self) -> None:
        """SIGKILL its process group on its host (what ``stop_cluster`` does to a local
        process that ignored SIGTERM); if its ssh client still runs after that (the host
        cannot be reached), the client is killed: the remote process may then be left,
        and that is said on stderr."""
        if self.remote:
            self._kill(f"kill -s KILL -- -{self.pid}")
        try:
            self._popen.wait(KILL_GRACE)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()
            print(f"dpc: warning: {self.name} (pid {self.pid} on host {self.host.name}) may "
                  "still run: its ssh connection was closed without its exit", file=sys.stderr)

    def _kill(self, command: str) -> None:
        try:
            done = self._client.run(self.host, command)
        except HostsError as e:
            print(f"dpc: warning: {self.name}: {e}", file=sys.stderr)
            return
        # Exit 1: no such process (it ended meanwhile), as a local ProcessLookupError.
        if done.returncode not in (0, 1):
            print(f"dpc: warning: {self.name}: `{command}` on host {self.host.name} exited "
                  f"{done.returncode}: {_message(done.stderr)}", file=sys.stderr)

    def __repr__(self) -> str:
        return f"SshProcess({self.name}, pid {self.pid} on {self.host.name})"


def _host_of(placement: Placement, process: str) -> Host:
    host = placement.host_of(process)
    if host is None:
        raise ProcessError(f"{process}: not placed on a host of run {placement.tag} "
                           f"(hosts.json): cannot start it over SSH")
    return host


def start_node(rd: RunDir, placement: Placement, config_path: Path, name: str, *,
               recover: bool = False, client: SshClient | None = None) -> SshProcess:
    """Start ``dpc node`` ``name`` on its host over SSH with the config ``config_path``
    (module docstring); returns once the remote pid is known, or once ssh failed (the
    handle is dead then, and ``logs/NAME.out`` says why): a start that fails is seen by
    whoever waits for it to be ready, as a local one is."""
    client = client or SshClient.for_run(placement)
    host = _host_of(placement, name)
    with contextlib.suppress(HostsError):  # a speed-up only: the start says what fails
        _connect_once(client, host)
    out = rd.logs / f"{name}.out"
    out.parent.mkdir(parents=True, exist_ok=True)
    offset = out.stat().st_size if out.exists() else 0
    argv = client.argv(destination(host), node_command(host, host_dir(rd.path, host), name,
                                                       recover=recover), Mux.OWN)
    with open(config_path, "rb") as stdin, open(out, "ab") as log:
        # A session of its own: a Ctrl-C at the launcher's terminal must not end the ssh
        # clients, whose exit would read as the processes' death before they are stopped.
        popen = subprocess.Popen(argv, stdin=stdin, stdout=log, stderr=log,
                                 start_new_session=True)
    pid = None
    deadline = time.monotonic() + PID_TIMEOUT
    while pid is None:
        with open(out, "rb") as f:
            f.seek(offset)
            pid = parse_pid(f.read(1 << 16))
        if pid is not None or popen.poll() is not None:
            break
        if time.monotonic() > deadline:
            popen.kill()
            popen.wait()
            with open(out, "a") as f:
                f.write(f"dpc ssh: no pid from {destination(host)} within {PID_TIMEOUT:g} s: "
                        "ssh killed\n")
            break
        time.sleep(0.01)  # polling the log for the pid's line, bounded by the deadline
    return SshProcess(popen, client, host, pid, name)


_connected: set[tuple[str | None, str]] = set()  # (socket, destination) opened here


def _connect_once(client: SshClient, host: Host) -> None:
    key = (client.control_path, destination(host))
    if key not in _connected:
        client.connect(host)
        _connected.add(key)


def connect_hosts(placement: Placement, out: TextIO = sys.stdout,
                  client: SshClient | None = None) -> None:
    """At the start of an ssh run: open every host's master connection, all at once (a
    connection costs a handshake and a login shell: 0.3 s each on the test's machine),
    printing how long each took; :class:`HostsError` naming every host that does not
    answer (the others closed again). Nothing for a run of another mode."""
    if placement.mode is not HostsMode.SSH:
        return
    client = client or SshClient.for_run(placement)

    def connect(host: Host) -> tuple[Host, float, str | None]:
        t0 = time.monotonic()
        try:
            _connect_once(client, host)
        except HostsError as e:
            return host, time.monotonic() - t0, str(e)
        return host, time.monotonic() - t0, None

    hosts = list(placement.hosts.values())
    with ThreadPoolExecutor(max_workers=min(16, len(hosts) or 1)) as pool:
        results = list(pool.map(connect, hosts))
    failed = [why for _, _, why in results if why is not None]
    if failed:
        for host, _, why in results:
            if why is None:
                _disconnect(client, host)
        raise HostsError("; ".join(failed))
    for host, took, _ in results:
        print(f"  ssh {destination(host)}: connected in {took:.2f} s", file=out, flush=True)


def _disconnect(client: SshClient, host: Host) -> None:
    client.disconnect(host)
    _connected.discard((client.control_path, destination(host)))


class HostWatch:
    """What the launcher's waits read of an ssh run (``launch.RunWatch``): each question is
    one command on the process's host, answered from its part of the run directory. An
    SSH failure answers "not yet" (the wait's timeout then reports the process), with a
    warning on stderr."""

    def __init__(self, rd: RunDir, placement: Placement, client: SshClient | None = None) -> None:
        self.rd, self.placement = rd, placement
        self.client = client or SshClient.for_run(placement)

    def _path(self, process: str, *parts: str) -> tuple[Host, str]:
        host = _host_of(self.placement, process)
        return host, shlex.quote(str(host_dir(self.rd.path, host).joinpath(*parts)))

    def _ask(self, process: str, host: Host, command: str) -> subprocess.CompletedProcess[bytes] | None:
        try:
            return self.client.run(host, command)
        except HostsError as e:
            print(f"dpc: warning: {process}: {e}", file=sys.stderr)
            return None

    def _exists(self, process: str, marker: str) -> bool:
        # The markers of node/procs/rundir.py: status/<process>.ready | .done
        host, path = self._path(process, "status", f"{process}.{marker}")
        done = self._ask(process, host, f"test -e {path}")
        return done is not None and done.returncode == 0

    def is_ready(self, process: str) -> bool:
        return self._exists(process, "ready")

    def is_done(self, process: str) -> bool:
        return self._exists(process, "done")

    def clear_ready(self, process: str) -> None:
        host, path = self._path(process, "status", f"{process}.ready")
        done = self.client.run(host, f"rm -f {path}")
        if done.returncode != 0:
            raise ProcessError(f"{process}: cannot clear its ready marker on host {host.name}: "
                               f"{_message(done.stderr)}")

    def client_rows(self, client: str) -> int:
        host = _host_of(self.placement, client)
        count = [sys.executable, "-m", "ops_scripts.cli", "log",
                 str(host_dir(self.rd.path, host)), client, "--count"]
        # No log yet (or an unreadable one) exits non-zero: no rows yet.
        done = self._ask(client, host, f"cd {shlex.quote(str(PROJECT))} && "
                                       f"exec {shlex.join(count)} 2>/dev/null")
        if done is None or done.returncode != 0:
            return 0
        text = done.stdout.decode(errors="replace").strip()
        return int(text) if text.isdigit() else 0


# ------------------------------------------------------------------ gathering the run
def collect(run_dir: Path, out: TextIO = sys.stdout, client: SshClient | None = None,
            ) -> dict[str, int]:
    """Copy every host's part of the ssh run in ``run_dir`` into it (module docstring: the
    merge) and record it in ``gathered.json``; returns the files gathered per host.
    :class:`HostsError` naming the host and why when one cannot be gathered (the hosts
    gathered before it stay recorded)."""
    rd = RunDir(run_dir)
    placement = read_placement(rd.path)
    if placement is None or placement.mode is not HostsMode.SSH:
        mode = "none" if placement is None else placement.mode.value
        raise HostsError(f"{rd.path}: not an ssh run (hosts.json: {mode}): its files are "
                         "in the run directory already")
    client = client or SshClient.for_run(placement)
    origin: dict[str, str] = {}  # a gathered file -> the host it came from
    counts: dict[str, int] = {}
    for host in placement.hosts.values():
        files, size = _collect_host(rd, host, client, origin)
        counts[host.name] = files
        procs = sorted(p for p, h in placement.where.items() if h == host.name)
        _record(rd, host, files, size, procs)
        print(f"  collect: host {host.name} (ssh {destination(host)}): {files} files, "
              f"{size / 1e6:.1f} MB of {', '.join(procs)}", file=out, flush=True)
    return counts


def _collect_host(rd: RunDir, host: Host, client: SshClient,
                  origin: dict[str, str]) -> tuple[int, int]:
    hd = shlex.quote(str(host_dir(rd.path, host)))
    # Exit 3: the host has no part of the run (nothing of it ever started there).
    command = f"test -d {hd} || exit 3; cd {hd} && exec tar -cf - ."
    argv = client.argv(destination(host), command)
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err)
        except OSError as e:
            raise HostsError(f"cannot run {client.program!r}: {e}") from None
        stdout = proc.stdout
        if stdout is None:  # (Popen was given PIPE)
            raise HostsError(f"host {host.name}: ssh gave no output stream")
        refused: HostsError | None = None
        counted = (0, 0)
        try:
            counted = _unpack(stdout, rd, host, origin)
        except HostsError as e:  # judged below, with ssh's exit (an empty stream: no host)
            refused = e
        finally:
            stdout.close()
            try:
                code = proc.wait(COMMAND_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
        err.seek(0)
        message = _message(err.read())
    failed = f"`ssh {destination(host)} {command}` failed (exit {code}): {message}"
    if code == 3:
        raise HostsError(f"host {host.name}: {hd} does not exist: nothing of the run is there")
    if code == 255:  # ssh itself: the stream's state says nothing more
        raise HostsError(f"host {host.name}: {failed}")
    if refused is not None:
        raise HostsError(f"{refused}" + ("" if code in (0, 1) else f" ({failed})"))
    # GNU tar's exit 1: a file changed while it was read (a collect of a running run).
    if code == 1:
        print(f"  collect: host {host.name}: some files changed while read: {message}",
              file=sys.stderr)
    elif code != 0:
        raise HostsError(f"host {host.name}: {failed}")
    return counted


def _unpack(stream: IO[bytes], rd: RunDir, host: Host, origin: dict[str, str]) -> tuple[int, int]:
    """Unpack a host's tar stream into ``rd``: regular files of the five directories (each
    written aside, then renamed), the config compared; anything else refused or left."""
    files = size = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for m in tar:
                parts = [p for p in PurePosixPath(m.name).parts if p not in (".", "")]
                if not parts or m.isdir():
                    continue
                if m.name.startswith("/") or ".." in parts:
                    raise HostsError(f"host {host.name}: refused {m.name!r} (outside its "
                                     "run directory)")
                rel = "/".join(parts)
                if rel == "config.toml":
                    _compare_config(rd, host, _read(tar, m))
                    continue
                if parts[0] not in GATHER_DIRS or len(parts) < 2:
                    continue  # (a config's temporary copy, a stray file: not the run's)
                if not m.isfile():
                    raise HostsError(f"host {host.name}: {rel} is not a regular file")
                if origin.setdefault(rel, host.name) != host.name:
                    raise HostsError(f"{rel} is on host {origin[rel]} and on host {host.name}: "
                                     "each host holds only its own processes' files")
                dest = rd.path.joinpath(*parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = dest.with_name(f".{dest.name}.gather")
                src = tar.extractfile(m)
                if src is None:
                    raise HostsError(f"host {host.name}: {rel}: unreadable in the stream")
                with src, open(tmp, "wb") as f:
                    while chunk := src.read(1 << 20):
                        f.write(chunk)
                os.replace(tmp, dest)
                files += 1
                size += m.size
    except tarfile.TarError as e:
        raise HostsError(f"host {host.name}: its files came garbled ({e})") from None
    return files, size


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    return b"" if f is None else f.read()


def _compare_config(rd: RunDir, host: Host, text: bytes) -> None:
    """The host's copy of the config must be the run's (the tables, not the bytes)."""
    try:
        theirs = tomllib.loads(text.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise HostsError(f"host {host.name}: its config.toml is not TOML ({e})") from None
    if not rd.config.exists():
        rd.config.write_bytes(text)  # (a run directory that lost it: the hosts' is the run's)
        return
    if tomllib.loads(rd.config.read_text(encoding="utf-8")) != theirs:
        raise HostsError(f"host {host.name}: its config.toml differs from {rd.config}: its "
                         "processes ran another config than the run's")


def _record(rd: RunDir, host: Host, files: int, size: int, processes: list[str]) -> None:
    path = rd.path / GATHERED_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    hosts = data.get("hosts") if isinstance(data.get("hosts"), dict) else {}
    hosts[host.name] = {"ssh": destination(host), "files": files, "bytes": size,
                        "processes": processes, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    tmp = path.with_name(f".{GATHERED_FILE}.tmp")
    tmp.write_text(json.dumps({"hosts": hosts}, indent=1))
    os.replace(tmp, path)


def gather(rd: RunDir, out: TextIO = sys.stdout) -> bool:
    """At the end of a run: an ssh run's files gathered into its run directory and its
    master connections closed. True when all was gathered, or the run is not an ssh run;
    False when a host could not be (printed, with the ``dpc collect`` that retries)."""
    placement = read_placement(rd.path)
    if placement is None or placement.mode is not HostsMode.SSH:
        return True
    client = SshClient.for_run(placement)
    try:
        collect(rd.path, out, client)
        return True
    except HostsError as e:
        print(f"  collect: {e} (gather the logs again: dpc collect {rd.path})", file=out,
              flush=True)
        return False
    finally:
        for host in placement.hosts.values():
            _disconnect(client, host)


def run_collect(run_dir: Path, out: TextIO = sys.stdout) -> int:
    """``dpc collect RUN_DIR``: 0 when every host's files are in the run directory (also
    when the run was not an ssh run: they are there already), 1 when a host could not be
    gathered, 2 for no run directory."""
    if not run_dir.is_dir():
        print(f"dpc collect: error: {run_dir}: no such run directory", file=out)
        return 2
    placement = read_placement(run_dir)
    if placement is None or placement.mode is not HostsMode.SSH:
        mode = "no hosts.json" if placement is None else f"--hosts {placement.mode.value}"
        print(f"dpc collect: {run_dir} ran on this machine ({mode}): nothing to collect",
              file=out)
        return 0
    try:
        counts = collect(run_dir, out)
    except HostsError as e:
        print(f"dpc collect: error: {e}", file=out)
        return 1
    print(f"dpc collect: {sum(counts.values())} files from {len(counts)} host(s) in {run_dir}",
          file=out)
    return 0

