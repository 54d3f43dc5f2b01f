"""The entry point (node/procs/entry.py): the test-only mutation switch is read from the
environment here, once, and only a known value is taken."""

from __future__ import annotations

import pytest

from node.errors import NodeError
from node.procs.entry import MUTATION_ENV, mutation_from_env
from node.streams.mutation import MUTATION_DUPLICATES, Mutation


def test_the_switch_is_off_unless_set() -> None:
    assert mutation_from_env({}) is None
    assert mutation_from_env({MUTATION_ENV: ""}) is None


def test_a_known_value_is_its_mutation() -> None:
    env = {MUTATION_ENV: "resubscribe-overlap"}
    assert mutation_from_env(env) is Mutation.RESUBSCRIBE_OVERLAP is MUTATION_DUPLICATES
    assert MUTATION_DUPLICATES == "resubscribe-overlap"  # what the tests put in the env


def test_an_unknown_value_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(NodeError, match="DPC_TEST_MUTATION='overlap' is no test mutation; "
                                        "known: resubscribe-overlap"):
        mutation_from_env({MUTATION_ENV: "overlap"})


def test_the_default_is_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MUTATION_ENV, MUTATION_DUPLICATES)
    assert mutation_from_env() is Mutation.RESUBSCRIBE_OVERLAP
