"""The ``dpc`` command: one console script, one subcommand per job (DESIGN.md section 5).

=============  =====================================================================  =============
command        does                                                                   module
=============  =====================================================================  =============
demo           a failure, tentative results and their correction, end to end         demo.py
launch         run a cluster locally: recorded start-up, crashes restarted, drain     supervisor.py
node           one process of a cluster (what launch runs)                            node/procs/entry.py
status         each replica's state and streams, from the control planes              status.py
fault          cut / heal / stall at one replica (``POST /fault``)                    node/faults/ops.py
inject         one fault or heal in a running cluster (by a run dir's pid files)      inject.py
run            play a scenario's fault schedule on a real cluster, then check it      runner.py
sweep          an experiment's grid of settings on real runs: CSV, plots, report      sweep/run.py
advise         X, alpha and strategies for a delay bound, from measured curves         sweep/advise*.py
torture        seeded random schedules on real clusters, every run checked           torture.py
soak           a long run under load and faults: memory and buffer growth per minute  soak.py
collect        copy an ssh run's files back from its hosts into the run directory     hosts/ssh.py
check          verify a run's logs against a reference evaluation                     check.py
log            a client's or replica's tuple log, one tuple per line                  check/logview.py
reconcile      the same on Spark, for many and large runs: report, differences        reconcile/run.py
generate-run   a large consistent run directory (no cluster), for benches and tests   reconcile/generate.py
fuzz           seeded malformed frames against the wire codec (sans-IO)               fuzz.py
bench          core, throughput, overhead, latency, failover, peers, reconcile, cec,  bench/*.py
               ha (process-pair modes: bandwidth, CPU, recovery), flux (Fig. 8)
=============  =====================================================================  =============

Only commands that work are registered. Exit codes: 0
done (a check: valid), 1 a failure found or a harness problem, 2 a usage error (bad
config, scenario, name or argument), 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ops_scripts.cluster.hosts.placement import HostsMode
from protocol.errors import DPCError

__all__ = ["main"]


def _rows(text: str) -> int:
    """``--tail 20``: a number of rows, >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of rows >= 0, got {text!r}")
    return int(text)


def _widths(text: str) -> tuple[int, ...]:
    """``--buckets 50,100,300``: bucket widths in whole milliseconds, each > 0."""
    try:
        widths = tuple(int(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ms: {text!r}") from None
    if not widths or min(widths) <= 0:
        raise argparse.ArgumentTypeError(f"bucket widths must be > 0 ms: {text!r}")
    return widths


def _sizes(text: str) -> tuple[int, ...]:
    """``--sizes 1e6,1e7``: counts, each >= 1 (floats in exponent form allowed)."""
    from ops_scripts.bench.reconcile import parse_sizes

    try:
        return parse_sizes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _size(text: str) -> int:
    """``--tuples 1e6``: one count >= 1."""
    sizes = _sizes(text)
    if len(sizes) != 1:
        raise argparse.ArgumentTypeError(f"one count expected: {text!r}")
    return sizes[0]


def hosts_option(p: argparse.ArgumentParser) -> None:
    """``--hosts local|netns|ssh``: where a run's processes live (ops_scripts/cluster/hosts/)."""
    p.add_argument("--hosts", choices=[m.value for m in HostsMode], default=HostsMode.LOCAL.value,
                   help="local: this machine as the config says (default); netns: each "
                        "process on a host of its own, a network namespace (root), with "
                        "partitions cut by the kernel; ssh: each on its host over SSH")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpc",
        description="Borealis-style fault-tolerant stream processing (Delay, Process, Correct).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="the main job on the embedded default: a failure, tentative results, correction",
    )
    demo.add_argument("--seed", type=int, default=7, help="random seed of the synthetic sources")
    demo.add_argument(
        "--method", choices=("checkpoint", "undo"), default="checkpoint",
        help="reconciliation method of the failure walkthrough (default: checkpoint)",
    )
    demo.add_argument("--simulated-only", action="store_true",
                      help="only the single-node failure walkthrough (no processes)")
    demo.add_argument("--seconds", type=float, default=3.0,
                      help="how long the cluster runs STABLE before the failure")
    demo.add_argument("--failure", type=float, default=5.0,
                      help="how long s3 is cut off from the replicas (alpha*X = 2.7 s)")

    launch = sub.add_parser("launch", help="start every process of a cluster config, each on its host")
    launch.add_argument("config", type=Path, nargs="?", default=None, metavar="CLUSTER.toml")
    launch.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    launch.add_argument("--run-dir", type=Path, default=None, help="where logs go (default: runs/NAME-TIME)")
    hosts_option(launch)
    launch.add_argument("--cleanup", type=Path, default=None, metavar="RUN_DIR",
                        help="remove what a crashed launch of RUN_DIR left: its processes, "
                             "namespaces and links")

    node = sub.add_parser("node", help="run one process of a cluster config (replica, source or client)")
    node.add_argument("config", type=Path, metavar="CLUSTER.toml")
    node.add_argument("name", metavar="NAME")
    node.add_argument("--run-dir", type=Path, default=Path("runs/manual"), help="where logs go")
    node.add_argument("--recover", action="store_true",
                      help="a replica restarted after a crash: rebuild from a partner, then rejoin")

    status = sub.add_parser("status", help="each replica's state and streams, from the control planes")
    status.add_argument("target", type=Path, nargs="?", default=None, metavar="CLUSTER.toml|RUN_DIR",
                        help="default: the latest run under ./runs")

    fault = sub.add_parser("fault", help="cut a replica off from named processes, or heal (POST /fault)")
    fault.add_argument("config", type=Path, metavar="CLUSTER.toml")
    fault.add_argument("replica", help="the replica where the cut is made")
    fault.add_argument("action", choices=("cut", "heal", "stall", "unstall"),
                       help="stall / unstall: hold this replica's reconciliations mid-replay")
    fault.add_argument("peers", nargs="*", help="process names (heal without names: heal all)")

    from ops_scripts.harness.inject import add_inject_parser

    add_inject_parser(sub)

    torture = sub.add_parser(
        "torture", help="random fault schedules on real clusters, each run checked (seeded)")
    torture.add_argument("--seed", type=int, default=1, help="run i uses seed SEED+i (default 1)")
    torture.add_argument("--runs", type=int, default=1, help="how many runs (default 1)")
    torture.add_argument("--cluster", type=Path, action="append", default=None,
                         metavar="CLUSTER.toml",
                         help="repeat to use several in turn (default: examples/basic.toml and "
                              "examples/three.toml, at X = 1 s, alpha = 0.5, 300 tuples/s)")
    torture.add_argument("--run-dir", type=Path, default=None,
                         help="where the runs go, one seed-S directory each "
                              "(default: runs/torture-TIME)")
    torture.add_argument("--faults", type=int, default=4, help="random faults per run (default 4)")
    torture.add_argument("--duration", type=float, default=8.0,
                         help="seconds within which the faults start (default 8)")
    hosts_option(torture)

    soak = sub.add_parser(
        "soak", help="a long run under load with a fault every minute: does memory or a "
                     "buffer grow steadily?")
    soak.add_argument("config", type=Path, metavar="CLUSTER.toml")
    hosts_option(soak)
    soak.add_argument("--minutes", type=float, default=30.0, help="how long (default 30)")
    soak.add_argument("--warmup", type=float, default=None, metavar="MINUTES",
                      help="minutes of each series not judged (default: min(5, M/3))")
    soak.add_argument("--fault-every", type=float, default=60.0, metavar="S",
                      help="one random fault every S seconds, healed before the next "
                           "(default 60)")
    soak.add_argument("--sample", type=float, default=10.0, metavar="S",
                      help="seconds between samples of RSS and buffers (default 10)")
    soak.add_argument("--rate", type=float, default=None,
                      help="every source's rate, tuples/s (default: the config's)")
    soak.add_argument("--seed", type=int, default=1, help="the faults' seed (default 1)")
    soak.add_argument("--run-dir", type=Path, default=None,
                      help="where the run goes (default: runs/soak-NAME-TIME)")

    # `dpc simulate` (the deterministic simulation) registers here.

    collect = sub.add_parser(
        "collect", help="copy the files of a --hosts ssh run back from its hosts into RUN_DIR "
                        "(dpc launch and dpc run do it at the end)")
    collect.add_argument("run_dir", type=Path, metavar="RUN_DIR")

    log = sub.add_parser("log", help="a client's or a replica's tuple log, one tuple per line "
                                     "(row, kind, id, time, tmax, values, arrival)")
    log.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    log.add_argument("name", metavar="NAME", help="a client or a replica of the run")
    log.add_argument("--stream", default=None,
                     help="a replica's output stream (default: each of its logs, with a heading)")
    rows = log.add_mutually_exclusive_group()
    rows.add_argument("--tail", type=_rows, default=None, metavar="N", help="the last N rows")
    rows.add_argument("--head", type=_rows, default=None, metavar="N", help="the first N rows")
    rows.add_argument("--count", action="store_true", help="how many rows (nothing decoded)")
    log.add_argument("--json", action="store_true",
                     help="one JSON object per row: log, row, kind, id, time, tmax, values, "
                          "arrival")

    check = sub.add_parser("check", help="verify a run's logs against a reference evaluation")
    check.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    check.add_argument("--config", type=Path, default=None, metavar="CLUSTER.toml",
                       help="the cluster config the run used (default: RUN_DIR/config.toml, "
                            "which dpc launch, dpc run and every dpc node record)")

    rec = sub.add_parser(
        "reconcile", help="on Spark: each run's outputs against the failure-free reference, "
                          "availability per failure, a report (docs/reconcile.md)")
    rec.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    rec.add_argument("--master", default=None, metavar="URL",
                     help="Spark master (default: spark.master of --conf, else local[*])")
    rec.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                     help="a Spark setting, passed through (repeatable)")
    rec.add_argument("--out", type=Path, default=None, metavar="DIR",
                     help="report, tables and differences (default: RUN_DIR/reconcile, or "
                          "the run dirs' common parent/reconcile)")

    gen = sub.add_parser(
        "generate-run", help="write a large run directory that dpc check and dpc reconcile "
                             "call valid, without a cluster (ops_scripts/reconcile/generate.py)")
    gen.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="new or empty")
    gen.add_argument("--tuples", type=_size, default=10**6,
                     help="about this many logged tuples: source rows + client and replica "
                          "log lines (default 1e6)")
    gen.add_argument("--config", type=Path, default=None, metavar="CLUSTER.toml",
                     help="default: examples/basic.toml")
    gen.add_argument("--failures", type=int, default=0,
                     help="failure episodes (tentative, UNDO, corrections; default 0)")
    gen.add_argument("--seed", type=int, default=1, help="picks the tentative results")

    sim = sub.add_parser(
        "simulate",
        help="random fault schedules on the whole cluster in one process, on virtual time",
    )
    sim.add_argument("--seed", type=int, default=1, help="the first run's seed (run i: seed+i)")
    sim.add_argument("--runs", type=int, default=100, help="how many runs")
    sim.add_argument("--cluster", type=Path, default=None, metavar="CLUSTER.toml",
                     help="default: examples/sim.toml")
    sim.add_argument("--faults", type=int, default=4, help="faults per run")
    sim.add_argument("--duration", type=float, default=6.0,
                     help="virtual seconds the faults start within")
    sim.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    sim.add_argument("--run-dir", type=Path, default=None,
                     help="where run dirs go (default: a temporary directory)")
    sim.add_argument("--keep", action="store_true", help="keep the run dirs of valid runs too")

    fuzz = sub.add_parser(
        "fuzz", help="random and mutated frames against the wire codec: only refusals or "
                     "valid messages may come out")
    fuzz.add_argument("--frames", type=int, default=1_000_000,
                      help="how many frames (default 1,000,000)")
    fuzz.add_argument("--seed", type=int, default=1, help="the seed, >= 0 (default 1)")
    fuzz.add_argument("--out", type=Path, default=None, metavar="FILE",
                      help="write the bad frames kept (JSON lines) for --replay")
    fuzz.add_argument("--replay", type=Path, default=None, metavar="FILE",
                      help="judge again the frames an --out FILE holds (no new frames)")

    run = sub.add_parser("run", help="play a scenario's fault schedule on a real cluster, then check it")
    run.add_argument("scenario", type=Path, metavar="SCENARIO.toml")
    run.add_argument("--run-dir", type=Path, default=None,
                     help="where the run goes (default: runs/NAME-TIME; must be new or empty)")
    hosts_option(run)

    sweep = sub.add_parser(
        "sweep", help="run an experiment's grid of settings on real processes: a CSV of "
        "Delay_new, N_tentative, ..., plots and an HTML report (resumable)")
    sweep.add_argument("experiment", type=Path, metavar="EXPERIMENT.toml")
    hosts_option(sweep)
    sweep.add_argument("--out", type=Path, default=None,
                       help="where the results go (default: sweeps/NAME); the same --out "
                       "resumes an interrupted sweep")
    sweep.add_argument("--repeat", type=int, default=None,
                       help="runs per point (default: the file's repeat, else 3)")
    sweep.add_argument("--jobs", type=int, default=1,
                       help="runs at once (default 1: runs sharing cores measure each "
                       "other's load)")

    adv = sub.add_parser(
        "advise", help="per-node X, alpha and strategies that minimise the expected "
        "tentative results within an end-to-end delay bound, from measured curves")
    adv.add_argument("config", type=Path, metavar="CLUSTER.toml")
    adv.add_argument("--max-delay", type=float, required=True, metavar="D",
                     help="the end-to-end bound on a new result's delay, seconds")
    adv.add_argument("--failures", default=None, metavar="SPEC|FILE",
                     help="failure lengths: pareto:shape=S,min=M, exponential:mean=M, "
                     "lognormal:median=M,sigma=S, fixed:seconds=S, or a file of seconds "
                     "(default pareto:shape=1.2,min=1: most failures short, most downtime "
                     "in long ones)")
    adv.add_argument("--sweep", type=Path, default=None, metavar="DIR",
                     help="read the curves from this finished dpc sweep (default: run the "
                     "sweep they need into sweeps/advise-NAME-DD)")
    adv.add_argument("--validate", action="store_true",
                     help="run the advice on real processes under sampled failures")
    adv.add_argument("--overlay", type=Path, default=None, metavar="FILE",
                     help="where the advice goes (default advice-NAME-DD.toml)")
    adv.add_argument("--seed", type=int, default=1, help="of the validation's failures")

    bench = sub.add_parser("bench", help="benchmarks, reported against a baseline of the same run")
    which = bench.add_subparsers(dest="which", required=True, metavar="BENCH")
    core = which.add_parser(
        "core",
        help="tuples/s through SUnion(3) -> filter -> aggregate -> SOutput vs a bare decode loop",
    )
    core.add_argument("--tuples", type=int, default=600_000, help="tuples per repetition")
    core.add_argument("--repeat", type=int, default=3, help="repetitions (the best is reported)")
    core.add_argument("--frame", type=int, default=100, help="tuples per wire frame")
    thr = which.add_parser(
        "throughput",
        help="highest rate one replica of a config's node sustains (STABLE, bounded latency) "
             "vs raw codec + loopback",
    )
    thr.add_argument("--config", type=Path, default=Path("examples/basic.toml"), metavar="CLUSTER.toml")
    thr.add_argument("--seconds", type=float, default=3.0, help="seconds per offered rate")
    thr.add_argument("--start-rate", type=float, default=12_500, help="first rate offered, tuples/s")
    thr.add_argument("--max-rate", type=float, default=800_000, help="highest rate offered, tuples/s")
    thr.add_argument("--steps", type=int, default=8, help="at most this many rates are offered")
    thr.add_argument("--keys", choices=("scaled", "example"), default="scaled",
                     help="key domains scaled with the rate (default) or the config's as is")
    thr.add_argument("--partitions", type=int, default=1, metavar="P",
                     help="also run the node split by key into P partitions, one replica process "
                          "each, and report its scaling against one replica (default 1: only that)")
    thr.add_argument("--partition-by", type=lambda v: tuple(a.strip() for a in v.split(",")),
                     default=None, metavar="ATTR[,ATTR]",
                     help="the partition key (default: the node's partition_by, else key)")
    thr.add_argument("--no-baseline", dest="baseline", action="store_false",
                     help="skip the baseline search on the per-tuple data path "
                          "(data_path = \"tuples\"; issue 48's ratio)")
    ovh = which.add_parser(
        "overhead",
        help="highest rate one replica sustains with fault tolerance as configured vs off",
    )
    ovh.add_argument("--config", type=Path, default=Path("examples/basic.toml"), metavar="CLUSTER.toml")
    ovh.add_argument("--seconds", type=float, default=3.0, help="seconds per offered rate")
    ovh.add_argument("--start-rate", type=float, default=12_500, help="first rate offered, tuples/s")
    ovh.add_argument("--max-rate", type=float, default=800_000, help="highest rate offered, tuples/s")
    ovh.add_argument("--steps", type=int, default=14, help="at most this many rates per search")
    ovh.add_argument("--repeat", type=int, default=1, help="pairs of searches (the median is reported)")
    lat = which.add_parser(
        "latency", help="result latency (mean, stdev, p50, p99) per SUnion bucket width at a low rate",
    )
    lat.add_argument("--config", type=Path, default=Path("examples/basic.toml"), metavar="CLUSTER.toml")
    lat.add_argument("--rate", type=float, default=1_000, help="tuples/s over all sources")
    lat.add_argument("--seconds", type=float, default=5.0, help="seconds per bucket width")
    fo = which.add_parser(
        "failover", help="time from a kill, a stop or a cut of the replica a client reads to its "
                         "next new result",
    )
    fo.add_argument("--config", type=Path, default=Path("examples/basic.toml"), metavar="CLUSTER.toml")
    fo.add_argument("--trials", type=int, default=5, help="faults of each kind")
    peers = which.add_parser(
        "peers", help="the core query through our operators, Bytewax and Flink SQL (when "
                      "installed: pip install '.[peers]')",
    )
    peers.add_argument("--tuples", type=int, default=600_000, help="tuples per engine")
    lat.add_argument("--buckets", type=_widths, default=(50, 100, 150, 200, 300), metavar="MS,MS,...",
                     help="bucket widths in ms (default 50,100,150,200,300)")
    brec = which.add_parser(
        "reconcile", help="rows/s of dpc reconcile vs dpc check on generated runs of each size")
    brec.add_argument("--sizes", type=_sizes, default=(10**6, 10**7), metavar="N,N,...",
                      help="logged tuples per run (default 1e6,1e7)")
    brec.add_argument("--check-max", type=_size, default=10**6, metavar="N",
                      help="dpc check only on sizes up to N (default 1e6)")
    brec.add_argument("--keep", type=Path, default=None, metavar="DIR",
                      help="generate into DIR and keep the runs (default: a temporary dir)")
    brec.add_argument("--failures", type=int, default=2, help="failure episodes per run")
    brec.add_argument("--config", type=Path, default=None, metavar="CLUSTER.toml",
                      help="default: examples/basic.toml")
    bcec = which.add_parser(
        "cec", help="continuous eventual checkpoints in process: throughput cost, Q / U / state "
        "size vs extent, EC-load and replay, CP vs response time (the CEC paper's figures)")
    bcec.add_argument("--out", type=Path, default=Path("cec-bench"), metavar="DIR",
                      help="where the CSVs and plots go (default ./cec-bench)")
    bcec.add_argument("--size", choices=("tiny", "small", "full"), default="small",
                      help="scales tuples and groups (default small; full: 10^6 tuples, "
                      "20,000 groups)")
    bcec.add_argument("--reps", type=int, default=3,
                      help="throughput repetitions per mode, in turn (default 3; the median)")
    bha = which.add_parser(
        "ha", help="the process-pair modes on real processes: bandwidth and CPU overhead, "
        "recovery after a kill, per M and network (Hwang et al.'s Fig. 6, Tables 6-7)")
    bha.add_argument("--out", type=Path, default=Path("ha-bench"), metavar="DIR",
                     help="where the CSVs and plots go (default ./ha-bench)")
    bha.add_argument("--size", choices=("tiny", "full"), default="full",
                     help="tiny: the aggregate at M = 100 ms, a short window, one kill (about a "
                     "minute); full (default): every M, three networks, three windows "
                     "(15-25 minutes)")
    bha.add_argument("--kills", type=int, default=None,
                     help="kills of the primary per cluster (default: tiny 1, full 4)")
    bflux = which.add_parser(
        "flux", help="Flux's partition pairs on real processes: each producer's output rate "
        "through a machine's kill and two catch-ups (Shah et al.'s Fig. 8), loss and duplicates "
        "judged by dpc check")
    bflux.add_argument("--out", type=Path, default=Path("flux-bench"), metavar="DIR",
                       help="where the CSVs and the plot go (default ./flux-bench)")
    bflux.add_argument("--size", choices=("tiny", "full"), default="full",
                       help="tiny: phases of 2.5 s at 200 clicks/s (about 20 s); full "
                       "(default): the paper's 10 s phases at 800 clicks/s (about a minute)")
    bflux.add_argument("--run-dir", type=Path, default=None, metavar="DIR",
                       help="the run directory (default runs/flux-bench-TIME)")
    brep = which.add_parser(
        "replay", help="a reconciliation's replay per tuple (inproc), vectorized and on Spark, "
        "per size; stores the crossovers replicas read")
    brep.add_argument("--sizes", type=_sizes, default=(10**4, 10**5, 10**6), metavar="N,N,...",
                      help="input tuples the replay re-releases (default 1e4,1e5,1e6)")
    brep.add_argument("--config", type=Path, default=None, metavar="CLUSTER.toml",
                      help="default: examples/basic.toml")
    brep.add_argument("--node", default=None, help="the node to replay (default: the first)")
    brep.add_argument("--step", type=int, default=100,
                      help="SUnion buckets per replay step (default 100)")
    brep.add_argument("--engines", type=_engines, default=("inproc", "vectorized", "spark"),
                      metavar="E,E,...", help="of inproc, vectorized, spark (default: all)")
    brep.add_argument("--spark-step", type=int, default=10_000, metavar="BUCKETS",
                      help="SUnion buckets per Spark job (default 10000)")
    brep.add_argument("--failures", type=_seconds_list, default=None, metavar="S,S,...",
                      help="instead: a real replica's reconciliation after source failures "
                      "of these lengths (seconds), end to end (e.g. 10,60,600)")
    brep.add_argument("--rate", type=float, default=None,
                      help="with --failures: tuples/s per source (default: the config's)")
    brep.add_argument("--keep", type=Path, default=None, metavar="DIR",
                      help="with --failures: keep the runs in DIR (default: a temporary dir)")
    brep.add_argument("--no-store", action="store_true",
                      help="do not store the crossovers (default: stored where replicas "
                      "read them, $DPC_CROSSOVERS or ~/.cache/dpc/replay-crossovers.json)")
    return p


def _seconds_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, comma-separated; got {text!r}")
    return values


def _engines(text: str) -> tuple[str, ...]:
    names = tuple(e.strip() for e in text.split(",") if e.strip())
    known = ("inproc", "vectorized", "spark")
    bad = [e for e in names if e not in known]
    if bad or "inproc" not in names:
        raise argparse.ArgumentTypeError(
            f"engines are {', '.join(known)}, inproc among them (the baseline); got {text!r}")
    return tuple(e for e in known if e in names)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from ops_scripts.cluster.demo import run_demo, run_simulated_demo

            if args.simulated_only:
                return run_simulated_demo(seed=args.seed, method=args.method)
            return run_demo(seed=args.seed, method=args.method, cluster_seconds=args.seconds,
                            failure_seconds=args.failure)
        if args.command == "launch":
            from ops_scripts.harness.supervisor import launch, launch_cleanup

            if (args.config is None) == (args.cleanup is None):
                print("dpc launch: error: give a CLUSTER.toml to launch, or --cleanup RUN_DIR",
                      file=sys.stderr)
                return 2
            if args.cleanup is not None:
                return launch_cleanup(args.cleanup)
            return launch(args.config, args.duration, args.run_dir, hosts=HostsMode(args.hosts))
        if args.command == "node":
            from node.procs.entry import run_process

            return run_process(args.config, args.name, args.run_dir, recover=args.recover)
        if args.command == "status":
            from node.config.load import load_config
            from ops_scripts.cluster.status import print_status, resolve_config

            return print_status(load_config(resolve_config(args.target)))
        if args.command == "fault":
            from node.config.load import load_config
            from node.faults.ops import Cut, FaultOp, Heal, Stall, Unstall
            from ops_scripts.errors import FaultError
            from ops_scripts.harness.fault import send_fault

            config = load_config(args.config)
            replicas = [r.name for n in config.nodes.values() for r in n.replicas]
            if args.replica not in replicas:
                print(f"dpc: error: no replica {args.replica!r} in {args.config}; replicas: "
                      f"{', '.join(replicas)}", file=sys.stderr)
                return 2
            if args.action == "cut" and not args.peers:
                print("dpc: error: cut needs at least one process name", file=sys.stderr)
                return 2
            peers = tuple(args.peers)
            ops: dict[str, FaultOp] = {"cut": Cut(peers), "heal": Heal(peers or None),
                                       "stall": Stall(), "unstall": Unstall()}
            try:
                print(send_fault(config, args.replica, ops[args.action]))
            except FaultError as e:
                print(f"dpc: error: {e}", file=sys.stderr)
                return 2
            return 0
        if args.command == "simulate":
            from ops_scripts.harness.simulate import DEFAULT_CLUSTER, SimOptions, run_simulate

            if args.runs < 1 or args.faults < 0 or args.duration <= 0:
                print("dpc: error: --runs must be >= 1, --faults >= 0, --duration > 0",
                      file=sys.stderr)
                return 2
            opts = SimOptions(faults=args.faults, duration=args.duration)
            return run_simulate(args.cluster or DEFAULT_CLUSTER, args.seed, args.runs,
                                args.run_dir, jobs=args.jobs, opts=opts, keep=args.keep)
        if args.command == "sweep":
            from ops_scripts.sweep import run_sweep

            return run_sweep(args.experiment, args.out, args.repeat, args.jobs,
                             hosts=HostsMode(args.hosts))
        if args.command == "advise":
            from ops_scripts.sweep.advise_run import run_advise

            return run_advise(args.config, args.max_delay, args.failures, args.sweep,
                              args.validate, args.overlay, args.seed)
        if args.command == "collect":
            from ops_scripts.cluster.hosts.ssh import run_collect

            return run_collect(args.run_dir)
        if args.command == "log":
            from ops_scripts.check.logview import run_log

            try:
                return run_log(args.run_dir, args.name, stream=args.stream, first=args.head,
                               last=args.tail, count=args.count, as_json=args.json)
            except BrokenPipeError:  # `dpc log ... | head`: the reader has what it wanted
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return 0
        if args.command == "check":
            from ops_scripts.check.compose import run_check

            return run_check(args.run_dir, config_path=args.config)
        if args.command == "reconcile":
            from ops_scripts.reconcile.run import parse_conf, run_reconcile

            try:
                conf = parse_conf(args.conf)
            except ValueError as e:
                print(f"dpc: error: {e}", file=sys.stderr)
                return 2
            return run_reconcile(args.run_dirs, master=args.master, conf=conf, out=args.out)
        if args.command == "generate-run":
            from ops_scripts.reconcile.generate import DEFAULT_CONFIG, generate_run

            generate_run(args.config or DEFAULT_CONFIG, args.run_dir, args.tuples, args.seed,
                         args.failures)
            return 0
        if args.command == "inject":
            from ops_scripts.harness.inject import run_inject

            return run_inject(args)
        if args.command == "torture":
            from ops_scripts.harness.torture import DEFAULT_CLUSTERS, TortureOptions, run_torture

            return run_torture(TortureOptions(
                seed=args.seed, runs=args.runs,
                clusters=tuple(args.cluster) if args.cluster else DEFAULT_CLUSTERS,
                run_dir=args.run_dir, faults=args.faults, duration=args.duration,
                hosts=HostsMode(args.hosts)))
        if args.command == "soak":
            from ops_scripts.harness.soak import SoakOptions, run_soak

            return run_soak(SoakOptions(
                cluster=args.config, minutes=args.minutes, warmup=args.warmup,
                fault_every=args.fault_every, sample=args.sample, rate=args.rate,
                seed=args.seed, run_dir=args.run_dir, hosts=HostsMode(args.hosts)))
        if args.command == "fuzz":
            from ops_scripts.harness.fuzz import replay, run_fuzz

            if args.replay is not None:
                return replay(args.replay)
            return run_fuzz(args.frames, args.seed, args.out)
        if args.command == "run":
            from ops_scripts.harness.runner import run_scenario

            return run_scenario(args.scenario, args.run_dir, hosts=HostsMode(args.hosts))
        if args.command == "bench" and args.which == "core":
            from ops_scripts.bench.core import run_core_bench

            return run_core_bench(tuples=args.tuples, repeat=args.repeat, frame=args.frame)
        if args.command == "bench" and args.which == "throughput":
            from ops_scripts.bench.throughput import run_throughput_bench

            return run_throughput_bench(args.config, seconds=args.seconds, start_rate=args.start_rate,
                                        max_rate=args.max_rate, max_steps=args.steps, keys=args.keys,
                                        partitions=args.partitions, partition_by=args.partition_by,
                                        baseline=args.baseline)
        if args.command == "bench" and args.which == "overhead":
            from ops_scripts.bench.overhead import run_overhead_bench

            return run_overhead_bench(args.config, seconds=args.seconds, start_rate=args.start_rate,
                                      max_rate=args.max_rate, steps=args.steps, repeat=args.repeat)
        if args.command == "bench" and args.which == "peers":
            from ops_scripts.bench.peers import run_peers_bench

            return run_peers_bench(tuples=args.tuples)
        if args.command == "bench" and args.which == "reconcile":
            from ops_scripts.bench.reconcile import run_reconcile_bench
            from ops_scripts.reconcile.generate import DEFAULT_CONFIG

            return run_reconcile_bench(args.sizes, check_max=args.check_max, keep=args.keep,
                                       config=args.config or DEFAULT_CONFIG,
                                       failures=args.failures)
        if args.command == "bench" and args.which == "cec":
            from ops_scripts.bench.cec import run_cec_bench

            return run_cec_bench(args.out, args.size, args.reps)
        if args.command == "bench" and args.which == "ha":
            from ops_scripts.bench.ha import run_ha_bench

            return run_ha_bench(args.out, args.size, args.kills)
        if args.command == "bench" and args.which == "flux":
            from ops_scripts.bench.flux import run_flux_bench

            return run_flux_bench(args.out, args.size, args.run_dir)
        if args.command == "bench" and args.which == "replay":
            from ops_scripts.bench.replay import run_replay_bench
            from ops_scripts.examples import EXAMPLES

            if args.failures is not None:
                from ops_scripts.bench.failures import run_failure_bench

                return run_failure_bench(args.failures, args.config or EXAMPLES / "basic.toml",
                                         rate=args.rate, keep=args.keep)
            return run_replay_bench(args.sizes, args.config or EXAMPLES / "basic.toml",
                                    args.node, step=args.step, engines=args.engines,
                                    spark_step=args.spark_step, store=not args.no_store)
        if args.command == "bench" and args.which == "failover":
            from ops_scripts.bench.failover import run_failover_bench

            return run_failover_bench(args.config, trials=args.trials)
        if args.command == "bench" and args.which == "latency":
            from ops_scripts.bench.latency import run_latency_bench

            return run_latency_bench(args.config, rate=args.rate, seconds=args.seconds,
                                     widths_ms=args.buckets)
    except DPCError as e:
        print(f"dpc: error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"dpc: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
