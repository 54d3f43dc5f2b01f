"""``dpc fuzz`` (ops_scripts/harness/fuzz.py, fuzzcases.py): a long seeded run passes and
reaches every message class and every mutation; a broken decoder makes it fail, with the
bad frames kept and replayable; the command's summary, exit codes and bad arguments; the
same seed gives the same run; a message class without samples stops it."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import protocol.codec
import protocol.payloads
from ops_scripts.cli import main
from ops_scripts.errors import FuzzError
from ops_scripts.harness import fuzz as fuzz_module
from ops_scripts.harness import fuzzcases
from ops_scripts.harness.fuzz import Outcome, fuzz_codec, judge, run_fuzz
from ops_scripts.harness.fuzzcases import (
    SAMPLES,
    Mutation,
    SamplePool,
    check_samples,
    draw,
    frame_at,
)
from protocol.messages import MESSAGE_CLASSES, Ack, MessageType

SUMMARY = re.compile(r"dpc fuzz: (\d+) frames \(seed (\d+)\): (\d+) refused, (\d+) accepted, "
                     r"(\d+) accepted malformed, (\d+) crashes -> (PASS|FAIL)")


def test_100k_frames_pass_and_reach_every_class_and_mutation() -> None:
    report = fuzz_codec(100_000, 20240521)
    assert report.frames == 100_000
    assert report.outcomes[Outcome.CRASH] == 0, report.bad
    assert report.outcomes[Outcome.MALFORMED] == 0, report.bad
    assert report.passed and not report.bad
    assert report.outcomes[Outcome.REFUSED] > 50_000
    assert report.outcomes[Outcome.ACCEPTED] > 5_000
    # every mutation and every message class, each a fair share of the frames
    assert set(report.mutations) == set(Mutation)
    assert min(report.mutations.values()) > 100_000 / len(Mutation) / 2, report.mutations
    assert set(report.classes) == {cls.__name__ for cls in MESSAGE_CLASSES.values()}
    # Batch frames half the time (the hot path), the other classes share the rest evenly
    assert report.classes["Batch"] > 100_000 * 0.45, report.classes
    assert min(report.classes.values()) > 50_000 / len(MESSAGE_CLASSES) / 2, report.classes
    assert report.summary().endswith("0 accepted malformed, 0 crashes -> PASS")


def test_json_mutations_reach_the_payload_validation() -> None:
    """Not only the JSON parser: a mutation of the payload's values is refused by the
    message's own checks (it names the message), or accepted when the value is valid."""
    pool = SamplePool.of()
    said: dict[Mutation, list[str]] = {m: [] for m in Mutation}
    for index in range(4000):
        case = draw(5, index, pool)
        outcome, detail = judge(case.frame, case.chunks)
        said[case.mutation].append(f"{outcome.value}: {detail}")
    for m in (Mutation.WRONG_TYPE, Mutation.ARITY, Mutation.BOOL, Mutation.UNKNOWN_CODE,
              Mutation.DUPLICATE_KEY, Mutation.NEGATIVE_INT, Mutation.HUGE_INT):
        validated = [d for d in said[m] if d.startswith("refused") and "JSON" not in d]
        assert len(validated) > len(said[m]) / 10, (m, said[m][:10])
    assert any("appears twice" in d for d in said[Mutation.DUPLICATE_KEY])
    assert any("consistency state code" in d for d in said[Mutation.UNKNOWN_CODE])
    assert any("tuple kind code" in d for d in said[Mutation.UNKNOWN_CODE])
    assert any("integer >= 0" in d for d in said[Mutation.NEGATIVE_INT])
    assert any("not valid JSON: number is infinity" in d for d in said[Mutation.FLOAT])
    assert any("not valid JSON: str is not valid UTF-8" in d for d in said[Mutation.NON_UTF8])
    assert any("depth limit exceeded" in d for d in said[Mutation.NESTING])
    assert all(d.startswith("accepted") for d in said[Mutation.NONE])


# ------------------------------------------------------------------ a broken codec fails
def _ints_accept_bools(name: str, field: str, x: object, typ: type) -> None:
    """protocol.payloads._check_remote, broken: a bool passes for an int (isinstance)."""
    if not isinstance(x, typ):
        raise protocol.payloads.RemoteProtocolError(f"{name}: field {field!r}: wrong type")


def _raises_value_error(name: str, field: str, x: object, typ: type) -> None:
    """protocol.payloads._check_remote, broken: a wrong type raises ValueError."""
    if type(x) is not typ:
        raise ValueError(f"{name}: field {field!r}: wrong type")


def test_a_decoder_that_accepts_bools_for_ints_fails_with_the_frames_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol.payloads, "_check_remote", _ints_accept_bools)
    report = fuzz_codec(3000, 9, keep=5)
    assert not report.passed
    assert report.outcomes[Outcome.MALFORMED] > 0 and report.outcomes[Outcome.CRASH] == 0
    assert len(report.bad) == 5
    bad = report.bad[0]
    assert bad.outcome is Outcome.MALFORMED and "does not encode" in bad.detail
    assert bad.case == frame_at(9, bad.case.index)  # rebuilt from its seed and index
    assert judge(bad.case.frame, bad.case.chunks)[0] is Outcome.MALFORMED  # replayed
    monkeypatch.undo()
    assert judge(bad.case.frame, bad.case.chunks)[0] is Outcome.REFUSED


def test_a_decoder_that_raises_value_error_is_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol.payloads, "_check_remote", _raises_value_error)
    report = fuzz_codec(2000, 9)
    assert report.outcomes[Outcome.CRASH] > 0 and not report.passed
    crash = report.bad[0]
    assert crash.outcome is Outcome.CRASH
    assert crash.detail.startswith("ValueError:") and "in _raises_value_error" in crash.detail
    assert judge(crash.case.frame, crash.case.chunks)[0] is Outcome.CRASH


def test_whole_and_chunked_decodings_that_differ_are_malformed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = protocol.codec.decode_payload

    def refuses_split_payloads(code: int, raw: bytes | bytearray) -> Any:
        if type(raw) is bytearray:  # a payload that arrived in pieces
            raise protocol.codec.RemoteProtocolError("broken: a split payload")
        return real(code, raw)

    monkeypatch.setattr(protocol.codec, "decode_payload", refuses_split_payloads)
    report = fuzz_codec(2000, 4)
    assert report.outcomes[Outcome.MALFORMED] > 0 and report.outcomes[Outcome.CRASH] == 0
    assert any(re.search(r"whole: .*, accepted; in chunks: .*, refused: broken", f.detail)
               for f in report.bad), report.bad


# ------------------------------------------------------------------------- the command
def test_the_command_passes_prints_the_summary_and_writes_no_bad_frame(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bad.jsonl"
    assert main(["fuzz", "--frames", "2000", "--seed", "3", "--out", str(out)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    m = SUMMARY.fullmatch(last)
    assert m, last
    frames, seed, refused, accepted, malformed, crashes, verdict = m.groups()
    assert (frames, seed, malformed, crashes, verdict) == ("2000", "3", "0", "0", "PASS")
    assert int(refused) + int(accepted) == 2000 and int(refused) > 0 and int(accepted) > 0
    assert out.read_text() == ""


def test_the_command_fails_on_a_broken_decoder_and_its_frames_replay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "bad.jsonl"
    monkeypatch.setattr(protocol.payloads, "_check_remote", _ints_accept_bools)
    assert main(["fuzz", "--frames", "2000", "--seed", "3", "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    m = SUMMARY.fullmatch(printed.splitlines()[-1])
    assert m and m.group(7) == "FAIL" and int(m.group(5)) > 0, printed
    assert "dpc fuzz: accepted malformed: frame " in printed
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines and all(d["outcome"] == "accepted malformed" and d["seed"] == 3 for d in lines)
    assert main(["fuzz", "--replay", str(out)]) == 1  # still broken
    assert capsys.readouterr().out.splitlines()[-1].endswith("still bad -> FAIL")
    monkeypatch.undo()
    assert main(["fuzz", "--replay", str(out)]) == 0  # fixed
    assert capsys.readouterr().out.splitlines()[-1].endswith(": 0 still bad -> PASS")


@pytest.mark.parametrize(("args", "says"), [
    (["--frames", "0"], "--frames"),
    (["--frames", "-5"], "--frames"),
    (["--seed", "-1"], "--seed"),
    (["--frames", "10", "--out", "/nonexistent/dir/bad.jsonl"], "--out"),
])
def test_bad_arguments_are_usage_errors(args: list[str], says: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpc fuzz: error: ") and says in err, err


def test_a_non_integer_argument_is_refused_by_the_parser(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fuzz", "--frames", "many"])
    assert exc.value.code == 2 and "--frames" in capsys.readouterr().err


def test_a_replay_file_it_did_not_write_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.jsonl").write_text('{"frame": "00"}\n')
    assert main(["fuzz", "--replay", str(tmp_path / "x.jsonl")]) == 2
    assert "x.jsonl:1: not a bad frame written by dpc fuzz" in capsys.readouterr().err


def test_long_runs_print_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz_module, "PROGRESS_SECONDS", 0.0)
    monkeypatch.setattr(fuzz_module, "PROGRESS_EVERY", 500)
    out = io.StringIO()
    assert run_fuzz(1000, 2, stdout=out) == 0
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"dpc fuzz: 500/1000 frames, \d+ frames/s: \d+ refused, \d+ "
                        r"accepted, 0 accepted malformed, 0 crashes", lines[0]), lines
    assert SUMMARY.fullmatch(lines[-1])


# ----------------------------------------------------------------- determinism, samples
def test_the_same_seed_gives_the_same_run() -> None:
    a, b, c = fuzz_codec(1500, 11), fuzz_codec(1500, 11), fuzz_codec(1500, 12)
    for x in (a.outcomes, a.mutations, a.classes):
        assert x
    assert (a.outcomes, a.mutations, a.classes) == (b.outcomes, b.mutations, b.classes)
    assert (a.outcomes, a.mutations) != (c.outcomes, c.mutations)
    pool = SamplePool.of()
    assert [draw(11, i, pool) for i in (0, 17, 1499)] == [frame_at(11, i) for i in (0, 17, 1499)]


@dataclass(frozen=True, slots=True)
class Hello:
    """A message class someone adds without samples."""

    peer: str


def test_a_message_class_without_samples_stops_the_fuzzer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    classes: dict[Any, Any] = {**MESSAGE_CLASSES, 10: Hello}
    monkeypatch.setattr(fuzzcases, "MESSAGE_CLASSES", classes)
    with pytest.raises(FuzzError, match="message class Hello has no sample in SAMPLES"):
        fuzz_codec(10, 1)
    monkeypatch.undo()
    without_ack = {cls: s for cls, s in SAMPLES.items() if cls is not Ack}
    with pytest.raises(FuzzError, match="message class Ack has no sample"):
        fuzz_codec(10, 1, samples=without_ack)
    assert MESSAGE_CLASSES[MessageType.ACK] is Ack


def test_an_invalid_sample_stops_the_fuzzer() -> None:
    broken = {**SAMPLES, Ack: (Ack("s", "c", True),)}  # type: ignore[arg-type]
    with pytest.raises(FuzzError, match=r"sample .* of Ack is invalid"):
        check_samples(broken)
    misfiled = {**SAMPLES, Ack: (SAMPLES[MESSAGE_CLASSES[MessageType.BATCH]][0],)}
    with pytest.raises(FuzzError, match="of Ack is not a valid Ack"):
        check_samples(misfiled)
