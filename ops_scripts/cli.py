"""The ``dpc`` command: one console script, one subcommand per job (DESIGN.md section 5).

Only commands that work are registered; later issues add launch, node, status, inject,
check, sweep, reconcile.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from protocol.errors import DPCError

__all__ = ["main"]


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
        help="reconciliation method (default: checkpoint)",
    )

    bench = sub.add_parser("bench", help="benchmarks, reported against a baseline of the same run")
    which = bench.add_subparsers(dest="which", required=True, metavar="BENCH")
    core = which.add_parser(
        "core",
        help="tuples/s through SUnion(3) -> filter -> aggregate -> SOutput vs a bare decode loop",
    )
    core.add_argument("--tuples", type=int, default=600_000, help="tuples per repetition")
    core.add_argument("--repeat", type=int, default=3, help="repetitions (the best is reported)")
    core.add_argument("--frame", type=int, default=100, help="tuples per wire frame")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(seed=args.seed, method=args.method)
        if args.command == "bench" and args.which == "core":
            from .bench import run_core_bench

            return run_core_bench(tuples=args.tuples, repeat=args.repeat, frame=args.frame)
    except DPCError as e:
        print(f"dpc: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
