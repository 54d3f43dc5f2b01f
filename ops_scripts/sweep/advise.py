"""``dpc advise``: the per-node X, alpha and strategies that minimise the expected number of
tentative results while every new result stays within an end-to-end bound D.

Role: the model half (pure: no I/O, no clock). From measured curves (``curves_of``: a
sweep's valid rows, each candidate's Delay_new and N_tentative against the failure's
length) and a failure-length distribution (:class:`Failures`), :func:`advise` ranks every
candidate ``(X, alpha, UP_FAILURE strategy, STABILIZATION strategy)``:

* **D split along the longest path** (the TODS paper's fixed total delay split across
  nodes): a path of k nodes gives each node X = D / k, since the runtime guarantees a new
  result within k*X (DESIGN.md property 1). A candidate whose X exceeds D / k is out.
* **Feasible** when its Delay_new, as measured end to end at the client, stays within D at
  every measured failure length up to the distribution's 99th percentile, and at that
  percentile (interpolated
  between measured lengths; beyond the longest, extrapolated from the last two, never
  downwards). Longer failures than the 99th percentile are not promised anything: a
  heavy tail has no longest failure.
* **Expected N_tentative**: the mean of the curve over the distribution's quantiles (200 of
  them), the curve interpolated likewise (below the shortest measured length, linearly
  from no tentative tuple at length 0).

The best feasible candidate wins (ties: the smaller expected Delay_new); every node gets it
(the curves are measured end to end, with the failure at the cluster's input: one setting
for all nodes is what they can tell apart). ``advise_run.py`` does the I/O: it runs the
sweep the curves need (or reads a finished one), prints the table, writes the overlay and
validates it.

Default failure lengths: Pareto with shape 1.2 and minimum 1 s, the heavy-tailed shape
the DPC paper cites (most failures are short: the median is 1.8 s; most downtime is in
long ones: 63% of it in failures over 10 s).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ops_scripts.errors import SweepError

__all__ = ["Advice", "Candidate", "Curve", "Failures", "advise", "curves_of"]

QUANTILES = 200
FEASIBLE_UP_TO = 0.99  # the failure quantile up to which the bound must hold


@dataclass(frozen=True, order=True)
class Candidate:
    x: float  # seconds
    alpha: float
    up_failure: str
    stabilization: str

    def describe(self) -> str:
        return (f"X {self.x:g} s, alpha {self.alpha:g}, {self.up_failure} & "
                f"{self.stabilization}")


@dataclass(frozen=True)
class Curve:
    """A candidate's measured means per failure length (seconds, sorted)."""

    candidate: Candidate
    durations: tuple[float, ...]
    delay_new: tuple[float, ...]
    n_tentative: tuple[float, ...]

    def delay_at(self, d: float) -> float:
        return _interpolate(self.durations, self.delay_new, d, origin=None)

    def tentative_at(self, d: float) -> float:
        return max(0.0, _interpolate(self.durations, self.n_tentative, d, origin=0.0))


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float,
                 origin: float | None) -> float:
    """Piecewise linear through (xs, ys); below xs[0]: from (0, origin), or flat at ys[0]
    when origin is None; beyond xs[-1]: the last segment's slope, never downwards."""
    if x <= xs[0]:
        if origin is None or xs[0] <= 0:
            return ys[0]
        return origin + (ys[0] - origin) * x / xs[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            x0, y0, x1, y1 = xs[i - 1], ys[i - 1], xs[i], ys[i]
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    if len(xs) < 2:
        return ys[-1]
    slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
    return ys[-1] + slope * (x - xs[-1])


def curves_of(rows: Sequence[Mapping[str, Any]]) -> list[Curve]:
    """One curve per candidate from a sweep's CSV rows (``read_results``): valid rows only,
    each point's runs averaged. The rows need ``up_failure``, ``stabilization`` and
    ``duration`` columns; X and alpha come from the measures ``x_s`` and ``alpha_x_s``."""
    need = ("up_failure", "stabilization", "duration", "x_s", "alpha_x_s", "delay_new_s",
            "n_tentative")
    groups: dict[Candidate, dict[float, list[Mapping[str, Any]]]] = {}
    for r in rows:
        if r.get("valid") is not True:
            continue
        missing = [k for k in need if r.get(k) is None]
        if missing:
            raise SweepError(f"a sweep row lacks {', '.join(missing)}: advise needs a sweep "
                             "whose grid has up_failure, stabilization and a failure")
        c = Candidate(float(r["x_s"]), round(float(r["alpha_x_s"]) / float(r["x_s"]), 4),
                      str(r["up_failure"]), str(r["stabilization"]))
        groups.setdefault(c, {}).setdefault(float(r["duration"]), []).append(r)
    curves = []
    for c, by_d in sorted(groups.items()):
        ds = sorted(by_d)
        curves.append(Curve(
            c, tuple(ds),
            tuple(statistics.fmean(float(r["delay_new_s"]) for r in by_d[d]) for d in ds),
            tuple(statistics.fmean(float(r["n_tentative"]) for r in by_d[d]) for d in ds)))
    return curves


class Failures:
    """A failure-length distribution: ``pareto:shape=1.2,min=1``, ``exponential:mean=10``,
    ``lognormal:median=5,sigma=1``, ``fixed:seconds=5``, or the lengths of a file (seconds,
    one per line; ``#`` comments)."""

    def __init__(self, name: str, quantile: Any, text: str) -> None:
        self.name, self._quantile, self.text = name, quantile, text

    DEFAULT = "pareto:shape=1.2,min=1"

    @classmethod
    def parse(cls, spec: str) -> Failures:
        kind, _, rest = spec.partition(":")
        params: dict[str, float] = {}
        for part in filter(None, rest.split(",")):
            key, eq, value = part.partition("=")
            try:
                params[key.strip()] = float(value) if eq else math.nan
            except ValueError:
                params[key.strip()] = math.nan
        want = {"pareto": ("shape", "min"), "exponential": ("mean",),
                "lognormal": ("median", "sigma"), "fixed": ("seconds",)}
        if kind not in want:
            raise SweepError(f"failure distribution {spec!r}: expected one of "
                             f"{', '.join(f'{k}:' + ','.join(f'{p}=...' for p in v) for k, v in want.items())}"
                             ", or a file of lengths")
        if set(params) != set(want[kind]) or not all(v > 0 for v in params.values()):
            raise SweepError(f"failure distribution {spec!r}: {kind} takes "
                             f"{', '.join(want[kind])}, each a number > 0")
        p = params
        if kind == "pareto":
            def q(u: float) -> float:
                return float(p["min"] * (1 - u) ** (-1 / p["shape"]))
        elif kind == "exponential":
            def q(u: float) -> float:
                return -p["mean"] * math.log(1 - u)
        elif kind == "lognormal":
            normal = statistics.NormalDist()

            def q(u: float) -> float:
                return p["median"] * math.exp(p["sigma"] * normal.inv_cdf(u))
        else:
            def q(u: float) -> float:
                return p["seconds"]
        return cls(spec, q, f"{kind}({', '.join(f'{k}={v:g}' for k, v in p.items())})")

    @classmethod
    def of_lengths(cls, name: str, lengths: Sequence[float]) -> Failures:
        if not lengths or min(lengths) <= 0:
            raise SweepError(f"{name}: expected failure lengths in seconds, each > 0")
        ordered = sorted(lengths)

        def q(u: float) -> float:  # the empirical quantile (nearest rank)
            return float(ordered[min(len(ordered) - 1, int(u * len(ordered)))])

        return cls(name, q, f"the {len(ordered)} lengths of {name}")

    def quantile(self, u: float) -> float:
        return float(self._quantile(u))

    def quantiles(self, n: int = QUANTILES) -> list[float]:
        return [self.quantile((i + 0.5) / n) for i in range(n)]

    def describe(self) -> str:
        return (f"{self.text}: median {self.quantile(0.5):.3g} s, p90 "
                f"{self.quantile(0.9):.3g} s, p99 {self.quantile(0.99):.3g} s")


@dataclass(frozen=True)
class Ranked:
    curve: Curve
    feasible: bool
    why: str  # why not feasible ("" if it is)
    expected_tentative: float
    expected_delay: float
    worst_delay: float


@dataclass(frozen=True)
class Advice:
    bound: float  # D, seconds
    path_nodes: int  # k
    per_node_x: float  # D / k
    ranked: tuple[Ranked, ...]  # best first: feasible ones, then the others

    @property
    def best(self) -> Ranked | None:
        return self.ranked[0] if self.ranked and self.ranked[0].feasible else None


def advise(curves: Sequence[Curve], failures: Failures, bound: float, path_nodes: int
           ) -> Advice:
    """Rank the candidates (module docstring); ``path_nodes`` is k, the longest path."""
    if bound <= 0 or path_nodes < 1:
        raise SweepError(f"advise: the bound must be > 0 s and the path at least one node "
                         f"(got {bound} s, {path_nodes})")
    per_node = bound / path_nodes
    qs = failures.quantiles()
    tail = failures.quantile(FEASIBLE_UP_TO)
    ranked = []
    for c in curves:
        checks = [*(d for d in c.durations if d <= tail), tail]
        worst = max(c.delay_at(d) for d in checks)
        why = ""
        if c.candidate.x > per_node * (1 + 1e-9):
            why = f"X {c.candidate.x:g} s is more than D/k = {per_node:g} s"
        elif worst > bound:
            at = max(checks, key=c.delay_at)
            why = f"Delay_new {worst:.2f} s > D at a {at:.3g} s failure"
        ranked.append(Ranked(c, not why, why, statistics.fmean(c.tentative_at(d) for d in qs),
                             statistics.fmean(c.delay_at(d) for d in qs), worst))
    ranked.sort(key=lambda r: (not r.feasible, r.expected_tentative, r.expected_delay,
                               r.curve.candidate))
    return Advice(bound, path_nodes, per_node, tuple(ranked))
