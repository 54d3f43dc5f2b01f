"""Load and validate a cluster config (TOML) into :class:`node.config.model.ClusterConfig`.

Role: the one place a cluster file is read. Everything is checked here, once, before any
process starts (STYLE.md 9); every error is a :class:`ConfigError` whose message is
``"<file>: <key path>: expected <what>, found <what>"``, the key path written like
``nodes.n1.replicas[1].data_port``. This module reads each table (types, ranges, unknown
keys) through :mod:`node.config.read`; :mod:`node.config.check` checks what spans tables
and builds the networks.

The format (``examples/README.md`` has the long version)::

    [cluster]                  # required
    name = "basic"
    token = "change-me"        # shared secret for mutating control-plane requests, non-empty
    control_host = "127.0.0.1" # optional: the default of every control plane's host
                               # (without it: each process's own host)
    consumer_grace = 30.0      # optional, seconds (> 0): how long a consumer never heard
                               # from holds output buffers' trimming (state/buffer.py)

    [defaults]                 # optional; every key optional, these are the defaults
    x = 3.0                    # the delay bound X, seconds (> 0)
    alpha = 0.9                # 0 < alpha < 1; SUnion waits alpha * X
    bucket = 0.1               # SUnion bucket width, seconds (> 0)
    heartbeat_interval = 0.1   # seconds, 0 < h <= 0.1
    heartbeat_misses = 3       # integer >= 1
    checkpointing = "on_failure"  # "on_failure": checkpoint right before a failure's first
                               # tentative release (free while nothing fails);
                               # "periodic": every checkpoint_interval
                               # "cec": continuous eventual checkpoints in a persistent
                               # log per replica (docs/cec.md): a crashed replica recovers
                               # from its own disk (needs reconciliation = "checkpoint")
    checkpoint_interval = 0.2  # seconds (> 0); on_failure: how often SUnions forget
                               # what they released stable
    cec_q = 20000              # cec: G_check the oldest part while more than Q records
    cec_u = 200000             # or U input tuples lie after its footprint (0: never),
    cec_ci = 0.01              # during the first cec_ci seconds of every cec_cp;
    cec_cp = 0.1               # cec_fsync = true: fsync each frame (a machine crash)
    fault_tolerance = true     # false: no checkpoints, undo logs or output buffers (only
                               # for dpc bench overhead: a failure is then not corrected)
    reconciliation = "checkpoint"  # "checkpoint" | "undo"
    up_failure = "process"         # "delay" | "process"
    stabilization = "process"      # "suspend" | "delay" | "process"
    replay_step = 10           # at most this many buckets re-released per event-loop turn
                               # while reconciling (fewer when a turn took > interval/5)
    buffer_memory = 256.0      # MiB of input the SUnions keep in memory for a replay; a
                               # long failure's rest goes to disk (<run dir>/replicas/<name>/spill)
    data_path = "columns"      # "tuples": the per-tuple data path (dpc bench throughput's
                               # baseline only, until issue 48 ends)
    replay_engine = "auto"     # "inproc" | "vectorized" | "spark" | "auto": vectorized
    vectorized_from = 1000000  # from this many input tuples to replay, Spark from
    spark_from = 30000000      # this many (both optional, default: what dpc bench replay
                               # measured on this machine; a replica may set its own engine)
    ha = "dpc"                 # "dpc" | "active_standby" | "amnesia" | "passive_standby" |
                               # "upstream_backup" | "flux": a process pair (exactly two
                               # replicas, of each partition; the first starts primary;
                               # docs/ha-modes.md; "flux": docs/flux.md, needs [controller])
    ha_interval = 0.1          # seconds (> 0): a pair's communication interval M (passive
                               # standby's checkpoints, upstream backup's restart points)

    [sources.s1]
    schema = ["key", "value"]  # non-empty, distinct names
    host = "127.0.0.1"         # optional
    port = 7001                # 1..65535
    rate = 1000.0              # tuples/s, > 0
    boundary_interval = 0.1    # seconds, optional, default: defaults.bucket
    generator = "synthetic"    # optional; "synthetic" | "file"
    seed = 1                   # optional, default 0
    limit = 50000              # optional, >= 1; default: run until stopped
    [sources.s1.attributes]    # synthetic only; a missing attribute is int in [0, 100]
    key = { kind = "key", n = 10, dist = "zipf", s = 1.2 }  # dist "uniform" | "zipf"
    value = { kind = "int", min = 0, max = 100 }            # also "float", and "seq"
    # generator = "file" takes file = "data.csv" instead of attributes: a .csv or .parquet
    # file, relative to the config file (or "package:NAME/PATH": a file shipped in an
    # installed Python package), that has a column for each schema attribute.
    # constants = { city = "Seattle" }   # optional: attributes with a fixed value
    # time_column = "date"       # file sources: each row's event time (integer µs, an Arrow
    #                            # timestamp, ISO 8601 or "YYYY/MM/DD HH:MM:SS"), in order;
    # speedup = 540000.0         # then exactly one of speedup (data s per wall s) and rate
    # align = 86400.0            # optional, data seconds: multiples stay multiples (days)

    [nodes.n1]
    inputs = ["s1"]            # source names or "<node>.<soutput operator>" streams
    x = 3.0                    # any [defaults] key may be overridden per node
    [[nodes.n1.operators]]     # the query network (README.md "Query networks"); operator
    name = "u"                 # parameters are in the core's units (microseconds)
    type = "sunion"
    inputs = ["s1"]
    [[nodes.n1.operators]]
    name = "out"
    type = "soutput"
    inputs = ["u"]
    # partitions = 2           # optional (default 1): run as nodes n1_p0 and n1_p1, each
    # partition_by = ["key"]   # fed the tuples whose key hashes to it (docs/partitions.md)
    [[nodes.n1.replicas]]      # at least one (per partition)
    name = "n1a"
    host = "127.0.0.1"         # optional
    data_port = 7101
    control_port = 8101
    # control_host = "..."     # optional: where its control plane binds (default: the
                               # cluster's control_host, else its host)
    # partition = 0            # with partitions > 1: the partition it runs (0 .. P-1)

    [clients.c1]
    stream = "n1.out"          # a node output stream
    host = "127.0.0.1"         # optional: where it runs (dpc launch --hosts netns|ssh)

Invariants of the result: times are integer microseconds (seconds in the file, rounded to
the nearest microsecond); every ``soutput`` of a node is an output, stream
``"<node>.<operator>"``; a node's ``network.inputs`` maps its input streams, in file order,
to their schemas; SUnion ``bucket``, ``wait`` (alpha*X), ``mode`` (up_failure) and
``recovery`` (reconciliation) are filled from the node's settings unless the operator sets
them; ``nodes`` is in topological order; ``streams`` holds every stream's schema; a synthetic
source's ``attributes`` has one entry per schema attribute that is not a constant; a file
source's ``file`` is an absolute path, and with a ``time_column`` its event times were read
and found in order, and both ``rate`` and ``speedup`` are set (the one not given derived
from the file's row count and span); ``raw`` is the parsed TOML.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from node.config.check import (
    NodeDraft,
    build_node,
    check_clients,
    check_controller,
    check_names,
    check_ports,
    order_nodes,
)
from node.config.datafile import read_header, resolve_data_file, scan_event_times
from node.config.model import (
    DEFAULT_BUFFER_MEMORY,
    DEFAULT_CONSUMER_GRACE,
    AttributeGen,
    ClientConfig,
    ClusterConfig,
    ControllerConfig,
    NodeConfig,
    NodeSettings,
    ReplicaConfig,
    SourceConfig,
    TlsFiles,
)
from node.config.partitions import expand_partitions
from node.config.read import MISSING, NAME_RE, US, Table, config_error
from node.errors import ConfigError
from operators import OPERATORS  # the package import registers every operator type
from operators.errors import SpecError
from operators.network import ENGINES
from operators.spec import OperatorSpec
from protocol.tuples import Schema

__all__ = ["CLUSTER_TABLES", "DEFAULT_HOST", "DEFAULT_SETTINGS", "load_config", "parse_config"]

DEFAULT_HOST = "127.0.0.1"
#: The [defaults] table when the file says nothing (times in microseconds).
DEFAULT_SETTINGS = NodeSettings(
    x=3_000_000,
    alpha=0.9,
    bucket=100_000,
    heartbeat_interval=100_000,
    heartbeat_misses=3,
    checkpoint_interval=200_000,
    reconciliation="checkpoint",
    up_failure="process",
    stabilization="process",
)
_MAX_HEARTBEAT = 100_000  # the paper's 100 ms
REPLAY_ENGINES = (*ENGINES, "auto")
#: Every top-level table of a cluster file: what a copy of a cluster's tables keeps (a
#: scenario's self-contained dump, a sweep's experiment: ops_scripts/harness/scenario.py).
CLUSTER_TABLES = ("cluster", "defaults", "sources", "nodes", "clients", "spark", "controller",
                  "hosts")
#: How a node survives a crash (NodeSettings.ha).
HA_MODES = ("dpc", "active_standby", "amnesia", "passive_standby", "upstream_backup", "flux")


def load_config(path: str | Path) -> ClusterConfig:
    """Read, parse and validate the cluster file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read the cluster config: {e}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    return parse_config(raw, p)


def parse_config(raw: Mapping[str, Any], path: Path) -> ClusterConfig:
    """Validate already-parsed TOML; ``path`` names the file in errors and anchors the
    relative paths in it (source data files)."""
    root = Table(path, "", raw)
    cluster = root.table("cluster", required=True)
    defaults = root.table("defaults")
    sources_t, nodes_t = root.table("sources"), root.table("nodes")
    clients_t = root.table("clients")
    spark = _spark(root.table("spark"))
    ssh = _hosts(root.table("hosts"))
    controller_t = root.table("controller") if root.has("controller") else None
    root.allow("controller")
    root.finish()

    name = cluster.string("name", nonempty=True)
    token = cluster.string("token", nonempty=True)
    # Only a default: each replica's and the controller's control plane binds on its own
    # control_host, else this one, else its own host (so that a cluster spread over hosts
    # reaches each control plane where it is: issue 47).
    control_host = (cluster.string("control_host", nonempty=True)
                    if cluster.has("control_host") else None)
    consumer_grace = cluster.seconds("consumer_grace", DEFAULT_CONSUMER_GRACE)
    authenticate = cluster.boolean("authenticate", True)
    tls = _tls(cluster.table("tls")) if cluster.has("tls") else None
    cluster.finish()
    base = _settings(defaults, DEFAULT_SETTINGS)
    defaults.finish()

    sources = {n: _source(t, n, base.bucket) for n, t in sources_t.entries()}
    drafts = {n: _node(t, n, base, control_host) for n, t in nodes_t.entries()}
    clients = {n: _client(t, n) for n, t in clients_t.entries()}
    if not sources:
        raise config_error(
            path, "sources", "expected at least one [sources.NAME] table, found none"
        )
    if not drafts:
        raise config_error(path, "nodes", "expected at least one [nodes.NAME] table, found none")

    controller = _controller(controller_t, control_host) if controller_t is not None else None
    check_controller(path, controller, drafts)
    check_names(path, sources, drafts, clients, controller)
    check_ports(path, sources, drafts, controller)
    drafts = expand_partitions(path, drafts, clients)
    check_names(path, sources, drafts, clients, controller)  # a partition's name is a process's
    streams: dict[str, Schema] = {n: s.schema for n, s in sources.items()}
    outputs: dict[str, Schema] = {}
    nodes: dict[str, NodeConfig] = {}
    for n in order_nodes(path, sources, drafts):
        nodes[n], outs = build_node(path, drafts[n], streams)
        streams.update(outs)
        outputs.update(outs)
    check_clients(path, clients, outputs, sources)
    return ClusterConfig(
        path=path.resolve(),
        name=name,
        token=token,
        control_host=control_host,
        sources=sources,
        nodes=nodes,
        clients=clients,
        streams=streams,
        raw=raw,
        consumer_grace=consumer_grace,
        authenticate=authenticate,
        tls=tls,
        ssh=ssh,
        spark=spark,
        controller=controller,
    )


def _hosts(t: Table) -> dict[str, str]:
    """``[hosts."ADDRESS"] ssh = "user@machine"``: the SSH destination of a host where it is
    not the address itself (``dpc launch --hosts ssh``: ops_scripts/cluster/hosts/)."""
    out: dict[str, str] = {}
    for address, host in t.entries(names=False):
        out[address] = host.string("ssh", nonempty=True)
        host.finish()
    return out


def _spark(t: Table) -> dict[str, str]:
    """``[spark]``: Spark settings for the cluster's bulk work (``dpc reconcile``), passed
    to Spark as text. Keys are Spark's own names, quoted (``"spark.master" = "..."``) or
    as dotted TOML keys (``spark.master = "..."``, which TOML nests: flattened back here);
    each must start with ``spark.`` (a typo of Spark's names is caught here, not in a JVM
    stack trace); values are strings, numbers or booleans (``true`` -> ``"true"``)."""
    out: dict[str, str] = {}

    def walk(prefix: str, raw: Mapping[str, Any]) -> None:
        for k, v in raw.items():
            name = f"{prefix}.{k}" if prefix else k
            if isinstance(v, Mapping):
                walk(name, v)
            elif not name.startswith("spark."):
                raise config_error(t.file, t.key(name),
                                   "expected a Spark setting, whose name starts with 'spark.' "
                                   "(e.g. \"spark.master\" = \"spark://host:7077\")")
            elif isinstance(v, bool):
                out[name] = "true" if v else "false"
            elif isinstance(v, str | int | float):
                out[name] = str(v)
            else:
                raise t.fail(name, "a string, number or boolean", v)

    walk("", t.raw)
    t.allow(*t.raw)
    t.finish()
    return out


def _tls(t: Table) -> TlsFiles:
    """``[cluster.tls]``: three PEM files, each relative to the config file, read at load
    (a missing or unreadable one is a ConfigError naming its key, before any process)."""
    files = {}
    for key in ("cert", "key", "ca"):
        path = (t.file.parent / t.string(key, nonempty=True)).resolve()
        try:
            head = path.read_bytes()[:4096]
        except OSError as e:
            raise config_error(t.file, t.key(key), f"cannot read {path}: {e.strerror}") from None
        if b"-----BEGIN" not in head:
            raise config_error(t.file, t.key(key), f"{path} is not a PEM file (no -----BEGIN)")
        files[key] = path
    t.finish()
    return TlsFiles(**files)


# ------------------------------------------------------------------------------ sections
def _settings(t: Table, base: NodeSettings) -> NodeSettings:
    """The [defaults] keys of table ``t``, each falling back to ``base``."""
    return NodeSettings(
        x=t.seconds("x", base.x),
        alpha=t.number("alpha", base.alpha, lambda v: 0 < v < 1, "a number with 0 < alpha < 1"),
        bucket=t.seconds("bucket", base.bucket),
        heartbeat_interval=t.seconds("heartbeat_interval", base.heartbeat_interval, _MAX_HEARTBEAT),
        heartbeat_misses=t.integer("heartbeat_misses", base.heartbeat_misses, lo=1),
        checkpoint_interval=t.seconds("checkpoint_interval", base.checkpoint_interval),
        reconciliation=t.string(
            "reconciliation", base.reconciliation, choices=("checkpoint", "undo")
        ),
        up_failure=t.string("up_failure", base.up_failure, choices=("delay", "process")),
        stabilization=t.string(
            "stabilization", base.stabilization, choices=("suspend", "delay", "process")
        ),
        replay_step=t.integer("replay_step", base.replay_step, lo=1),
        checkpointing=t.string(
            "checkpointing", base.checkpointing, choices=("on_failure", "periodic", "cec")
        ),
        cec_q=t.integer("cec_q", base.cec_q, lo=0),
        cec_u=t.integer("cec_u", base.cec_u, lo=0),
        cec_ci=t.seconds("cec_ci", base.cec_ci),
        cec_cp=t.seconds("cec_cp", base.cec_cp),
        cec_fsync=t.boolean("cec_fsync", base.cec_fsync),
        fault_tolerance=t.boolean("fault_tolerance", base.fault_tolerance),
        buffer_memory=_buffer_memory(t, base.buffer_memory),
        replay_engine=t.string("replay_engine", base.replay_engine, choices=REPLAY_ENGINES),
        data_path=t.string("data_path", base.data_path, choices=("columns", "tuples")),
        vectorized_from=(t.integer("vectorized_from", lo=0) if t.has("vectorized_from")
                         else base.vectorized_from),
        spark_from=t.integer("spark_from", lo=0) if t.has("spark_from") else base.spark_from,
        ha=t.string("ha", base.ha, choices=HA_MODES),
        ha_interval=t.seconds("ha_interval", base.ha_interval),
    )


def _source(t: Table, name: str, default_boundary: int) -> SourceConfig:
    schema = t.names("schema")
    host = t.string("host", DEFAULT_HOST, nonempty=True)
    port = t.integer("port", lo=1, hi=65535)
    boundary_interval = t.seconds("boundary_interval", default_boundary)
    generator = t.string("generator", "synthetic", choices=("synthetic", "file"))
    seed = t.integer("seed", 0)
    limit = t.integer("limit", 0, lo=1) if t.has("limit") else None
    t.allow("limit", "attributes", "file", "rate", "speedup", "time_column", "align", "constants")
    buffer_memory = _buffer_memory(t, DEFAULT_BUFFER_MEMORY)
    constants = _constants(t, schema)
    time_column = t.string("time_column", nonempty=True) if t.has("time_column") else None
    attributes: dict[str, AttributeGen] = {}
    file: Path | None = None
    if generator == "synthetic":
        for key in ("file", "time_column"):
            if t.has(key):
                raise t.fail(key, f'no {key} for generator = "synthetic"', t.raw[key])
        given = t.table("attributes")
        for attr, a in given.entries(names=False):
            if attr not in schema or attr in constants:
                raise given.fail(attr, f"an attribute of the schema ({', '.join(schema)}) "
                                 "that is not a constant", attr)
            attributes[attr] = _attribute(a)
        given.finish()
        attributes = {a: attributes.get(a, AttributeGen("int", min=0, max=100))
                      for a in schema if a not in constants}
    else:
        if t.has("attributes"):
            raise t.fail("attributes", 'no attributes for generator = "file"', t.raw["attributes"])
        file = _data_file(t, schema, constants, time_column)
    rate, speedup, align = _pace(t, file, time_column)
    t.finish()
    return SourceConfig(
        name, schema, host, port, rate, boundary_interval, generator, seed, attributes, file, limit,
        time_column=time_column, speedup=speedup, align=align, constants=constants,
        buffer_memory=buffer_memory,
    )


def _buffer_memory(t: Table, default: int) -> int:
    """``buffer_memory``: MiB in the file, bytes in the model."""
    mib = t.number("buffer_memory", default / 2**20, lambda v: v > 0, "MiB, a number > 0")
    return round(2**20 * mib)


def _constants(t: Table, schema: Schema) -> dict[str, Any]:
    """``constants = {attr = value}``: attributes of the schema with a fixed value."""
    given = t.table("constants")
    out: dict[str, Any] = {}
    for attr in given.raw:
        v = given.raw[attr]
        given.allow(attr)
        if attr not in schema:
            raise given.fail(attr, f"an attribute of the schema ({', '.join(schema)})", attr)
        if not isinstance(v, str | int | float | bool):
            raise given.fail(attr, "a string, a number or a boolean", v)
        out[attr] = v
    given.finish()
    return out


def _pace(t: Table, file: Path | None, time_column: str | None,
          ) -> tuple[float, float | None, int | None]:
    """``rate``, ``speedup`` and ``align`` (µs of data time): a source without a time
    column has a rate and nothing else; one with a time column has exactly one of rate and
    speedup, the other derived from the file's rows and span (module docstring)."""
    rate_expected = "a number of tuples per second > 0"
    if time_column is None or file is None:
        for key in ("speedup", "align"):
            if t.has(key):
                raise t.fail(key, f"no {key} without a time_column (it paces event time)",
                             t.raw[key])
        return float(t.number("rate", MISSING, lambda v: v > 0, rate_expected)), None, None
    align = t.seconds("align", 0) if t.has("align") else None
    if t.has("rate") == t.has("speedup"):
        found = "both" if t.has("rate") else "neither"
        raise t.fail_text("rate", "exactly one of rate (tuples/s on average) and speedup "
                          "(data seconds per wall second) for a source with a time_column", found)
    try:
        span = scan_event_times(file, time_column)
    except ConfigError as e:
        raise t.fail_text("time_column", f"a column of event times in order ({e})",
                          repr(time_column)) from None
    seconds = (span.last - span.first) / US
    if t.has("speedup"):
        speedup = float(t.number("speedup", MISSING, lambda v: v > 0, "data seconds per wall second > 0"))
        return (span.rows * speedup / seconds if seconds > 0 else float(span.rows)), speedup, align
    rate = float(t.number("rate", MISSING, lambda v: v > 0, rate_expected))
    if seconds <= 0:
        raise t.fail_text("rate", "speedup instead: rate is spread over the file's span of event "
                          "time", f"a file whose {span.rows} row(s) span no time")
    return rate, rate * seconds / span.rows, align


def _attribute(t: Table) -> AttributeGen:
    kind = t.string("kind", choices=("key", "int", "float", "seq"))
    gen = AttributeGen(kind)
    if kind == "key":
        dist = t.string("dist", "uniform", choices=("uniform", "zipf"))
        s = t.number("s", gen.s, lambda v: v > 0, "a zipf exponent > 0")
        if t.has("s") and dist != "zipf":
            raise t.fail("s", 'no exponent s unless dist = "zipf"', t.raw["s"])
        gen = AttributeGen(kind, n=t.integer("n", lo=1), dist=dist, s=s)
    elif kind == "int":
        imin = t.integer("min", 0)
        gen = AttributeGen(kind, min=imin, max=t.integer("max", 100, lo=imin))
    elif kind == "float":
        fmin = t.number("min", 0.0, math.isfinite, "a finite number")
        fmax = t.number("max", 100.0, lambda v: v > fmin, f"a finite number > min ({fmin})")
        gen = AttributeGen(kind, min=fmin, max=fmax)
    t.finish()
    return gen


def _data_file(t: Table, schema: Schema, constants: Mapping[str, Any], time_column: str | None,
               ) -> Path:
    given = t.string("file", nonempty=True)
    needed = [a for a in schema if a not in constants]
    if time_column is not None and time_column not in needed:
        needed.append(time_column)
    expected = f"a .csv or .parquet file with the columns {', '.join(needed)}"
    try:
        path = resolve_data_file(given, t.file.parent)
    except ConfigError as e:
        raise t.fail_text("file", expected, str(e)) from None
    if path.suffix not in (".csv", ".parquet"):
        raise t.fail("file", expected, given)
    try:
        columns = read_header(path)
    except ConfigError as e:
        raise t.fail_text("file", expected, f"{given!r}, which cannot be read ({e})") from None
    missing = [a for a in needed if a not in columns]
    if missing:
        raise t.fail_text("file", expected, f"{given!r} without the column(s) {', '.join(missing)}")
    return path


def _node(t: Table, name: str, base: NodeSettings, control_host: str | None) -> NodeDraft:
    inputs = t.names("inputs")
    ops: list[OperatorSpec] = []
    for i, raw in enumerate(t.array("operators")):
        key = f"{t.key('operators')}[{i}]"
        try:
            op = OperatorSpec.from_dict(raw, f"{t.file}: {key}")
        except SpecError as e:
            raise ConfigError(str(e)) from None
        if op.type not in OPERATORS:  # first: later checks would only see its consequences
            raise config_error(
                t.file,
                f"{key}.type",
                f"expected an operator type (known types: {', '.join(sorted(OPERATORS))}), "
                f"found {op.type!r} (unknown operator type)",
            )
        if op.type == "soutput" and not NAME_RE.match(op.name):
            raise config_error(
                t.file,
                f"{key}.name",
                f"expected an soutput name of letters, digits, '_' or '-', found {op.name!r}",
            )
        ops.append(op)
    if not ops:
        raise t.fail_text("operators", f"at least one [[{t.key('operators')}]] table", "none")
    if not any(o.type == "soutput" for o in ops):
        kinds = ", ".join(o.type for o in ops)
        raise t.fail_text("operators", "at least one soutput (the node's outputs)", f"only {kinds}")
    partitions = t.integer("partitions", 1, lo=1)
    by = t.names("partition_by") if t.has("partition_by") or partitions > 1 else ()
    read = [_replica(r, name, partitions, control_host) for r in t.tables("replicas")]
    if not read:
        raise t.fail_text("replicas", f"at least one [[{t.key('replicas')}]] table", "none")
    settings = _settings(t, base)
    t.finish()
    replicas = tuple(r for r, _ in read)
    return NodeDraft(name, inputs, tuple(ops), replicas, settings, partitions=partitions,
                     partition_by=by, replica_partitions=tuple(p for _, p in read))


def _replica(t: Table, node: str, partitions: int,
             control_host: str | None) -> tuple[ReplicaConfig, int]:
    """One replica, and the partition it runs (0 .. partitions - 1; required where the
    node has partitions); ``control_host`` is the cluster's default for its control plane."""
    partition = (t.integer("partition", 0 if partitions == 1 else MISSING, lo=0,
                           hi=partitions - 1))
    name = t.string("name", nonempty=True)
    if not NAME_RE.match(name):
        raise t.fail("name", "a name of letters, digits, '_' or '-'", name)
    r = ReplicaConfig(
        name=name,
        node=node,
        host=t.string("host", DEFAULT_HOST, nonempty=True),
        data_port=t.integer("data_port", lo=1, hi=65535),
        control_port=t.integer("control_port", lo=1, hi=65535),
        replay_engine=(t.string("replay_engine", choices=REPLAY_ENGINES)
                       if t.has("replay_engine") else None),
        control_host=(t.string("control_host", nonempty=True) if t.has("control_host")
                      else control_host),
    )
    t.finish()
    return r, partition


def _controller(t: Table, control_host: str | None) -> ControllerConfig:
    """``[controller]``: where the Flux controller listens (node/flux/controller.py)."""
    c = ControllerConfig(host=t.string("host", DEFAULT_HOST, nonempty=True),
                         control_port=t.integer("control_port", lo=1, hi=65535),
                         control_host=(t.string("control_host", nonempty=True)
                                       if t.has("control_host") else control_host))
    t.finish()
    return c


def _client(t: Table, name: str) -> ClientConfig:
    c = ClientConfig(name, t.string("stream", nonempty=True),
                     host=t.string("host", DEFAULT_HOST, nonempty=True))
    t.finish()
    return c
