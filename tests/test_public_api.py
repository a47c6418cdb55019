"""The public surface, pinned: a change to what users import is a deliberate diff here.

Names left out of a package's ``__all__`` stay importable from their submodule; these
lists are what ``from statekeeper.x import *`` and the documentation promise."""

from __future__ import annotations

import importlib

import pytest

import statekeeper
from statekeeper import errors

PINNED = {
    "statekeeper": [
        "AmbiguousReferenceError",
        "AnswerRequiredError",
        "ConfigurationError",
        "CorruptCheckpointError",
        "Damage",
        "GraphLoadError",
        "InvalidIdError",
        "InvalidInputError",
        "NoPendingInterruptError",
        "NothingToResumeError",
        "ReadOnlyError",
        "RefusedValuesError",
        "Refusal",
        "SchemaVersionError",
        "SerializationError",
        "StateValidationError",
        "StatekeeperError",
        "StorageError",
        "StorageNotFoundError",
        "SummarizerOutputError",
        "ThreadBusyError",
        "ThreadExistsError",
        "ThreadNotFoundError",
        "open_checkpointer",
    ],
    "statekeeper.checkpointers": [
        "Checkpointer",
        "FileCheckpointer",
        "RedisCheckpointer",
        "SqliteCheckpointer",
        "TaskWrite",
        "known_schemes",
        "open_checkpointer",
    ],
    "statekeeper.graphs": [
        "MULTITASK",
        "NO_ANSWER",
        "ForkResult",
        "Migration",
        "MigrationResult",
        "RunResult",
        "Runner",
        "VersionedState",
        "arun_exclusive",
        "check_input",
        "load_graph",
        "run_exclusive",
    ],
}


@pytest.mark.parametrize("module", sorted(PINNED))
def test_all_is_pinned_and_every_name_resolves(module: str) -> None:
    imported = importlib.import_module(module)
    assert sorted(imported.__all__) == sorted(PINNED[module])
    for name in imported.__all__:
        assert getattr(imported, name) is not None


def test_every_error_type_is_listed_once_and_exported_at_the_top() -> None:
    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.StatekeeperError)
    }
    # the error types, Damage (what a CorruptCheckpointError and verify() report) and
    # Refusal (what a RefusedValuesError and a transfer report)
    assert set(errors.__all__) == defined | {"Damage", "Refusal"}
    assert set(errors.__all__) <= set(statekeeper.__all__)
    for name in errors.__all__:
        assert getattr(statekeeper, name) is getattr(errors, name)
