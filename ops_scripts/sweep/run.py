"""``dpc sweep EXPERIMENT.toml [--out DIR] [--repeat N] [--jobs 1]``: every point of an
experiment's grid run on real processes, measured, plotted and reported.

Role: the loop. Each run is a scenario played exactly as ``dpc run`` plays one
(``ops_scripts/harness/runner.py``: start, settle, the failure, quiet, drain, ``dpc
check``), in ``OUT/runs/p<point>-<key>-r<rep>``, with its progress lines in that run's
``.log`` beside it. After each run its row (the point's settings, the measures of
``measures.py``, the wall time, the run directory) is appended to ``OUT/results.csv`` and
flushed; so an interrupted sweep (Ctrl-C, a crash, a reboot) resumes where it stopped:
the same command skips every (point, repetition) the CSV holds and redoes a run that had
begun (its directory is replaced). At the end (an interrupted sweep too), ``report.py``
writes the plots and ``OUT/report.html``.

One line per run: a bar of runs done, the point, the repetition, and an estimate of the
time left (each run left: its failure's length plus the mean of what this session's runs
took besides theirs; a first guess from the experiment's times before one finished), then
the run's verdict and main figures. An
invalid run (the checker's verdict) is reported, kept in the CSV with ``valid`` false,
and never plotted; the exit code is then 1. ``--jobs N`` plays N runs at once: on a
small machine, runs that share its cores measure each other's load, so the default is 1;
Ctrl-C with ``--jobs`` above 1 lets the runs under way end (their processes stopped
normally) before the sweep stops.
"""

from __future__ import annotations

import csv
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TextIO

from ops_scripts.cluster.hosts.placement import HostsMode
from ops_scripts.errors import SweepError
from ops_scripts.harness.runner import play_scenario
from ops_scripts.harness.scenario import load_scenario

from .experiment import Experiment, Point, load_experiment
from .measures import MEASURES, measure_run
from .report import write_report

__all__ = ["run_sweep", "sweep_columns"]

RESULTS = "results.csv"


def sweep_columns(exp: Experiment) -> list[str]:
    """The CSV's header: identity, the grid's axes, the measures, the run's place."""
    return ["point", "key", "rep", *exp.columns, *MEASURES, "wall_s", "run_dir"]


def run_sweep(path: Path, out_dir: Path | None = None, repeat: int | None = None,
              jobs: int = 1, out: TextIO | None = None,
              hosts: HostsMode = HostsMode.LOCAL) -> int:
    """The ``dpc sweep`` command: 0 when every run was valid, 1 if one was not, 130 when
    interrupted (resume with the same command); each run's processes on ``hosts``."""
    out = sys.stdout if out is None else out
    if jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {jobs}")
    exp = load_experiment(path, repeat)
    out_dir = out_dir or Path("sweeps") / exp.name
    sweep = Sweep(exp, out_dir, out, hosts)
    return sweep.run(jobs)


class Sweep:
    def __init__(self, exp: Experiment, out_dir: Path, out: TextIO,
                 hosts: HostsMode = HostsMode.LOCAL) -> None:
        self.exp, self.dir, self.out, self.hosts = exp, out_dir, out, hosts
        self.columns = sweep_columns(exp)
        self.csv = out_dir / RESULTS
        self.lock = threading.Lock()
        self.overheads: list[float] = []  # each run's wall time less its failure's length
        self.waiting: dict[tuple[str, int], float] = {}  # runs not done -> failure length
        self.invalid: list[str] = []
        self.done = 0

    # ------------------------------------------------------------------ state on disk
    def finished(self) -> set[tuple[str, int]]:
        """(point key, rep) of every run the CSV holds; SweepError if the CSV is another
        experiment's (another header)."""
        if not self.csv.exists():
            return set()
        with self.csv.open(newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header != self.columns:
                raise SweepError(
                    f"{self.csv} holds results with other columns ({', '.join(header or [])}) "
                    f"than this experiment's: another experiment, or its grid's axes "
                    f"changed; pick another --out")
            return {(r[1], int(r[2])) for r in reader if len(r) == len(self.columns)}

    def append(self, row: dict[str, Any]) -> None:
        new = not self.csv.exists()
        with self.csv.open("a", newline="") as f:
            w = csv.DictWriter(f, self.columns)
            if new:
                w.writeheader()
            w.writerow({k: "" if row.get(k) is None else row[k] for k in self.columns})

    # ------------------------------------------------------------------ the loop
    def run(self, jobs: int) -> int:
        exp = self.exp
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "runs").mkdir(exist_ok=True)
        done = self.finished()
        (self.dir / "experiment.toml").write_text(exp.text)
        todo = [(p, r) for p in exp.points() for r in range(1, exp.repeat + 1)
                if (p.key, r) not in done]
        total = len(exp.points()) * exp.repeat
        self.done = total - len(todo)
        print(f"dpc sweep: {exp.name}: {len(exp.points())} point(s) x {exp.repeat} run(s) = "
              f"{total}; {self.done} done before, {len(todo)} to run; into {self.dir}",
              file=self.out, flush=True)
        self.total = total
        self.waiting = {(p.key, r): _length(p) for p, r in todo}
        code = self.loop(todo, jobs)
        rows = write_report(exp, self.dir)
        print(f"dpc sweep: {rows} run(s) in {self.csv}; report {self.dir / 'report.html'}",
              file=self.out, flush=True)
        if code == 130:
            print("dpc sweep: interrupted; the same command resumes it", file=self.out)
            return 130
        if self.invalid:
            print(f"dpc sweep: {len(self.invalid)} run(s) not valid (not plotted): "
                  f"{', '.join(self.invalid)}", file=self.out)
            return 1
        return 0

    def loop(self, todo: Sequence[tuple[Point, int]], jobs: int) -> int:
        if jobs == 1:
            for point, rep in todo:
                if self.one(point, rep) == 130:
                    return 130
            return 0
        pending = list(todo)
        running: dict[Future[int], tuple[Point, int]] = {}
        stopping = False
        with ThreadPoolExecutor(jobs) as pool:
            while pending or running:
                while pending and len(running) < jobs and not stopping:
                    point, rep = pending.pop(0)
                    running[pool.submit(self.one, point, rep)] = (point, rep)
                if not running:
                    break
                try:
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                except KeyboardInterrupt:
                    stopping = True
                    print("dpc sweep: interrupted: the runs under way end first",
                          file=self.out, flush=True)
                    continue
                for fut in finished:
                    del running[fut]
                    if fut.result() == 130:
                        stopping = True
        return 130 if stopping else 0

    def one(self, point: Point, rep: int) -> int:
        exp = self.exp
        name = f"p{point.index:03d}-{point.key}-r{rep}"
        run_dir = self.dir / "runs" / name
        if run_dir.exists():  # begun, not finished (the CSV does not hold it)
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        (run_dir / "scenario.toml").write_text(point.scenario_text)
        with self.lock:
            self.say(f"{self.bar()} point {point.index + 1}/{len(exp.points())} "
                     f"{point.label()} · run {rep}/{exp.repeat} · {self.left(point)}")
        began = time.monotonic()
        with (self.dir / "runs" / f"{name}.log").open("w") as log:
            outcome = play_scenario(load_scenario(run_dir / "scenario.toml"), run_dir, log,
                                    hosts=self.hosts)
        wall = time.monotonic() - began
        if outcome.code == 130:
            return 130
        verdict = outcome.verdict if not outcome.problems else \
            f"{outcome.verdict}; harness: {'; '.join(outcome.problems)}"
        row: dict[str, Any] = {"point": point.index, "key": point.key, "rep": rep,
                               **point.settings, "wall_s": round(wall, 1),
                               "run_dir": str(run_dir.relative_to(self.dir))}
        if outcome.verdict == "not checked":
            row.update(verdict=verdict, valid=False)
        else:
            row.update(measure_run(run_dir, outcome.verdict))
            row["verdict"], row["valid"] = verdict, outcome.verdict == "valid" and \
                not outcome.problems
        with self.lock:
            self.append(row)
            self.overheads.append(wall - _length(point))
            self.waiting.pop((point.key, rep), None)
            self.done += 1
            if not row["valid"]:
                self.invalid.append(name)
            self.say(f"    {self.describe(row)} ({wall:.0f} s)")
        return 0

    # ------------------------------------------------------------------ progress
    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def bar(self, width: int = 20) -> str:
        filled = round(width * self.done / max(self.total, 1))
        return f"[{'#' * filled}{'-' * (width - filled)}] {self.done}/{self.total}"

    def left(self, point: Point) -> str:
        """The runs not done: each its failure's length plus the mean of what the runs
        done took besides theirs (start-up, settle, quiet, drain, check); before any run
        finished, the experiment's first guess."""
        if not self.overheads:
            guess = sum(self.exp.seconds_per_run(point) - _length(point) + d
                        for d in self.waiting.values())
            return f"~{_duration(guess)} left (a guess)"
        overhead = sum(self.overheads) / len(self.overheads)
        return f"~{_duration(sum(overhead + d for d in self.waiting.values()))} left"

    @staticmethod
    def describe(row: dict[str, Any]) -> str:
        if not row["valid"]:
            return f"NOT VALID: {row['verdict']} (see {row['run_dir']})"
        parts = ["valid"]
        if row.get("delay_new_s") is not None:
            parts.append(f"Delay_new {row['delay_new_s']:.2f} s (bound {row['bound_s']:g} s)")
        parts.append(f"{row['n_tentative']:,} tentative")
        if row.get("reconciliation_s") is not None:
            parts.append(f"reconciliation {row['reconciliation_s']:.2f} s")
        return ", ".join(parts)


def _length(point: Point) -> float:
    return float(point.settings.get("duration", 0.0))


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    m, s = divmod(seconds, 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"
