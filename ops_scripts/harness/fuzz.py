"""``dpc fuzz``: a seeded fuzzer of the wire codec (protocol/codec.py), sans-IO.

Role: feed the frame decoder bytes that no honest peer sends, and hold the codec to its
contract: decoding raises nothing but ``RemoteProtocolError``, whatever the bytes, and
whatever decodes is a valid message (``encode(m)`` succeeds and ``decode(encode(m)) == m``).
The frames come from :mod:`ops_scripts.harness.fuzzcases` (random bytes, and mutations of
valid samples of every message class); this module judges them and runs the command.

Rules:

* Deterministic: a run is a function of its seed and frame count (``random.Random`` seeded
  per frame, nothing else random); frame ``i`` of seed ``s`` is ``frame_at(s, i)``.
* Each frame is decoded by two fresh decoders, whole and in random chunks (then ``eof()``).
  :func:`judge` says *refused* (``RemoteProtocolError``), *accepted* (every message it gave
  re-encodes, decodes back equal and re-encodes to the same bytes), *accepted malformed* (a
  message that does not, or whole and chunked decodings that differ) or *crash* (any other
  exception, the codec's own ``LocalProtocolError`` included). The last two fail the run.
* The first few bad frames are kept as :class:`Finding`\\ s, with all a replay needs
  (``--out`` writes them as JSON lines, ``--replay`` judges them again).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from ops_scripts.errors import FuzzError
from ops_scripts.harness.fuzzcases import SAMPLES, Case, Mutation, SamplePool, draw
from protocol.codec import FrameDecoder, decode_frame, encode
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.messages import Message
from protocol.payloads import show

__all__ = ["PROGRESS_EVERY", "PROGRESS_SECONDS", "Finding", "FuzzReport", "Outcome", "fuzz_codec",
           "judge", "replay", "run_fuzz"]


class Outcome(Enum):
    """What became of one frame (module docstring); the last two fail a run."""

    REFUSED = "refused"
    ACCEPTED = "accepted"
    MALFORMED = "accepted malformed"
    CRASH = "crash"


_BAD = (Outcome.MALFORMED, Outcome.CRASH)


def _decode(frame: bytes, chunks: Sequence[int]) -> tuple[list[Message], RemoteProtocolError | None]:
    """What one fresh decoder delivers (messages completed before a refusal included)."""
    decoder, got, pos = FrameDecoder(), [], 0
    try:
        for n in chunks:
            got += decoder.feed(frame[pos : pos + n])
            pos += n
        decoder.eof()
    except RemoteProtocolError as exc:
        return got + exc.messages, exc
    return got, None


def _round_trip(msg: Message) -> str | None:
    try:
        data = encode(msg)
    except LocalProtocolError as exc:
        return f"decoded {show(msg)}, which does not encode: {exc}"
    try:
        back = decode_frame(data)
    except RemoteProtocolError as exc:
        return f"decoded {show(msg)}, whose own frame is refused: {exc}"
    if type(back) is not type(msg) or back != msg or encode(back) != data:
        return f"decoded {show(msg)}, which decodes back as {show(back)}"
    return None


def judge(frame: bytes, chunks: Sequence[int]) -> tuple[Outcome, str]:
    """The outcome of ``frame`` (fed whole, then in ``chunks``) and what happened."""
    if sum(chunks) != len(frame) or min(chunks, default=0) < 0:
        raise FuzzError(f"chunks {show(list(chunks))} do not cut a frame of {len(frame)} bytes")
    try:
        whole, refused = _decode(frame, (len(frame),))
        split, split_refused = _decode(frame, chunks)
        problem = next(filter(None, map(_round_trip, whole)), None)
    except Exception as exc:  # noqa: BLE001 - any other exception is the crash looked for
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return Outcome.CRASH, (f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:"
                               f"{where.lineno} in {where.name})")
    if problem is not None:
        return Outcome.MALFORMED, problem
    if (refused is None) != (split_refused is None) or whole != split:
        said = [f"{show(m)}, {'refused: ' + str(e) if e else 'accepted'}"
                for m, e in ((whole, refused), (split, split_refused))]
        return Outcome.MALFORMED, f"whole: {said[0]}; in chunks: {said[1]}"
    if refused is not None:
        return Outcome.REFUSED, str(refused)
    return Outcome.ACCEPTED, f"{len(whole)} message(s)"


# ------------------------------------------------------------------------------ the run
@dataclass(frozen=True, slots=True)
class Finding:
    """A bad frame, with all a replay needs: ``judge(bytes.fromhex(frame), chunks)``."""

    case: Case
    outcome: Outcome
    detail: str

    def to_json(self) -> dict[str, Any]:
        c = self.case
        return {"seed": c.seed, "index": c.index, "outcome": self.outcome.value,
                "mutation": c.mutation.value, "class": c.message_class, "detail": self.detail,
                "frame": c.frame.hex(), "chunks": list(c.chunks)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Finding:
        case = Case(d["seed"], d["index"], Mutation(d["mutation"]), d["class"],
                    bytes.fromhex(d["frame"]), tuple(d["chunks"]))
        return cls(case, Outcome(d["outcome"]), d["detail"])


@dataclass(slots=True)
class FuzzReport:
    """Counts of a run so far, and its first bad frames."""

    seed: int
    frames: int = 0
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    mutations: Counter[Mutation] = field(default_factory=Counter)
    classes: Counter[str] = field(default_factory=Counter)  # frames made from each class
    bad: list[Finding] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(self.outcomes[o] for o in _BAD)

    def counts(self) -> str:
        o = self.outcomes
        return (f"{o[Outcome.REFUSED]} refused, {o[Outcome.ACCEPTED]} accepted, "
                f"{o[Outcome.MALFORMED]} accepted malformed, {o[Outcome.CRASH]} crashes")

    def summary(self) -> str:
        return (f"dpc fuzz: {self.frames} frames (seed {self.seed}): {self.counts()} -> "
                f"{'PASS' if self.passed else 'FAIL'}")


def _problems(frames: int, seed: int) -> list[str]:
    bad = []
    if type(frames) is not int or not 1 <= frames <= 2**32:
        bad.append(f"the number of frames (--frames) must be in 1..2**32, got {show(frames)}")
    if type(seed) is not int or seed < 0:
        bad.append(f"the seed (--seed) must be an integer >= 0, got {show(seed)}")
    return bad


def fuzz_codec(frames: int, seed: int, *, keep: int = 10,
               samples: Mapping[type[Message], Sequence[Message]] = SAMPLES,
               progress: Callable[[FuzzReport], None] | None = None, every: int = 5000
               ) -> FuzzReport:
    """Judge frames ``0 .. frames - 1`` of ``seed``; keep the first ``keep`` bad ones.
    ``progress`` is called with the report every ``every`` frames."""
    if bad := _problems(frames, seed):
        raise FuzzError("; ".join(bad))
    pool, report = SamplePool.of(samples), FuzzReport(seed)
    for index in range(frames):
        case = draw(seed, index, pool)
        outcome, detail = judge(case.frame, case.chunks)
        report.frames += 1
        report.outcomes[outcome] += 1
        report.mutations[case.mutation] += 1
        if case.message_class is not None:
            report.classes[case.message_class] += 1
        if outcome in _BAD and len(report.bad) < keep:
            report.bad.append(Finding(case, outcome, detail))
        if progress is not None and report.frames % every == 0:
            progress(report)
    return report


#: Seconds between the progress lines of :func:`run_fuzz`, looked at every PROGRESS_EVERY frames.
PROGRESS_SECONDS = 5.0
PROGRESS_EVERY = 5000
_HEX_SHOWN = 512  # a longer frame's hex is cut in the printed line (not in --out)


def _line(f: Finding, now: str = "") -> str:
    c = f.case
    return (f"dpc fuzz: {f.outcome.value}{now}: frame {c.index} of seed {c.seed} ({c.mutation.value}"
            f" of {c.message_class or 'nothing'}, chunks {show(list(c.chunks))}): {f.detail}; "
            f"frame {c.frame.hex()[:_HEX_SHOWN]}{'...' * (len(c.frame) * 2 > _HEX_SHOWN)}")


def run_fuzz(frames: int, seed: int, out: Path | None = None, stdout: TextIO | None = None) -> int:
    """``dpc fuzz``: exit code 0 on PASS, 1 otherwise, 2 for a bad argument; ``out`` gets
    the kept bad frames (JSON lines of :meth:`Finding.to_json`; empty on PASS)."""
    stdout = sys.stdout if stdout is None else stdout  # read at call time: capture may replace it
    if problems := _problems(frames, seed):
        print(f"dpc fuzz: error: {'; '.join(problems)}", file=sys.stderr)
        return 2
    if out is not None:  # a path that cannot be written fails now, not after the run
        try:
            out.write_text("")
        except OSError as exc:
            print(f"dpc fuzz: error: --out {out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    start = last = time.monotonic()

    def tick(report: FuzzReport) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= PROGRESS_SECONDS:
            last = now
            rate = report.frames / max(now - start, 1e-9)
            print(f"dpc fuzz: {report.frames}/{frames} frames, {rate:.0f} frames/s: "
                  f"{report.counts()}", file=stdout, flush=True)

    report = fuzz_codec(frames, seed, progress=tick, every=PROGRESS_EVERY)
    elapsed = time.monotonic() - start
    for f in report.bad:
        print(_line(f), file=stdout)
    if (bad := sum(report.outcomes[o] for o in _BAD)) > len(report.bad):
        print(f"dpc fuzz: {bad - len(report.bad)} more bad frames not kept", file=stdout)
    if out is not None:
        out.write_text("".join(json.dumps(f.to_json()) + "\n" for f in report.bad))
        print(f"dpc fuzz: {len(report.bad)} bad frames written to {out}", file=stdout)
    print(f"dpc fuzz: {elapsed:.1f} s, {report.frames / max(elapsed, 1e-9):.0f} frames/s",
          file=stdout)
    print(report.summary(), file=stdout)
    return 0 if report.passed else 1


def replay(path: Path, stdout: TextIO | None = None) -> int:
    """``dpc fuzz --replay FILE``: judge again every frame a run wrote; exit code 1 if one
    is still bad."""
    stdout = sys.stdout if stdout is None else stdout
    findings = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            findings.append(Finding.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            raise FuzzError(f"{path}:{n}: not a bad frame written by dpc fuzz --out: {exc}") from None
    still = 0
    for f in findings:
        outcome, detail = judge(f.case.frame, f.case.chunks)
        still += outcome in _BAD
        print(_line(Finding(f.case, outcome, detail), f" (was {f.outcome.value})"), file=stdout)
    print(f"dpc fuzz: {len(findings)} frames replayed from {path}: {still} still bad -> "
          f"{'FAIL' if still else 'PASS'}", file=stdout)
    return 1 if still else 0
