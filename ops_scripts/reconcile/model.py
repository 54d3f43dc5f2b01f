"""The plain results ``dpc reconcile``'s parts hand each other (docs/reconcile.md): small,
collected to the driver, printed and reported. Rows of tables stay in Spark DataFrames."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Availability", "RunResult", "Verdict"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """One property of one subject of one run, as ``dpc check`` names them: ``property``
    "eventual-consistency" (subject ``client c1 (n2.out)``) or "replica-convergence"
    (subject ``replica n1a (n1.out)``); ``status`` "valid" | "invalid" | "unknown";
    ``evidence``: why, naming the first differences (id, line, values)."""

    run: str
    property: str
    subject: str
    status: str
    evidence: str


@dataclass(frozen=True, slots=True)
class Availability:
    """One client during one failure of a run's history (times in µs on the run's clock,
    durations in ms; None: it did not happen, e.g. no tentative result in a short failure).
    ``failure`` is the fault's ``describe`` text from the history; ``delays_ms`` the
    p50, p99 and max delay of the new results (the checker's rule for "new") that arrived
    between the fault and the end of its correction (its REC_DONE, else the next fault or
    the end of the log: ops_scripts/reconcile/availability.py says which events belong to
    which fault)."""

    run: str
    client: str
    failure: str
    began_us: int
    healed_us: int | None
    first_tentative_ms: float | None
    undo_ms: float | None
    rec_done_ms: float | None
    n_tentative: int
    delays_ms: tuple[float, float, float] | None


@dataclass(slots=True)
class RunResult:
    """Everything the report says of one run."""

    run: str
    verdicts: list[Verdict] = field(default_factory=list)
    availability: list[Availability] = field(default_factory=list)
    differences: int = 0  # rows of the run in the differences table

    @property
    def valid(self) -> bool:
        return bool(self.verdicts) and all(v.status == "valid" for v in self.verdicts)
