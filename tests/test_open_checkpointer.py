"""Choosing a backend by URL: what is accepted, and what each bad URL is told."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from statekeeper.checkpointers import (
    FileCheckpointer,
    SqliteCheckpointer,
    known_schemes,
    open_checkpointer,
)
from statekeeper.errors import ConfigurationError, StatekeeperError


def test_memory_and_sqlite_schemes_are_known() -> None:
    assert {"memory", "sqlite"} <= set(known_schemes())


def test_memory_url_opens_an_in_memory_database() -> None:
    with open_checkpointer("memory://") as saver:
        assert isinstance(saver, SqliteCheckpointer)
        assert saver.path == ":memory:"


def test_sqlite_url_with_three_slashes_is_relative(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_checkpointer("sqlite:///nested/dir/state.db") as saver:
        assert Path(saver.path) == Path("nested/dir/state.db")
    assert (tmp_path / "nested/dir/state.db").is_file()


def test_sqlite_url_with_four_slashes_is_absolute(tmp_path: Path) -> None:
    target = tmp_path / "abs.db"
    with open_checkpointer(f"sqlite:///{target}") as saver:
        assert saver.path == str(target)
    assert target.is_file()


def test_query_options_are_parsed_and_keywords_win(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/o.db?busy_timeout=2.5&compress=false"
    with open_checkpointer(url) as saver:
        assert saver.compress is False
        assert saver._db.busy_timeout == 2.5
    with open_checkpointer(url, compress=True) as saver:
        assert saver.compress is True


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mongodb://localhost/db", "unknown storage scheme 'mongodb://'"),
        ("sqlite:/missing-slashes.db", "not a storage URL"),
        ("state.db", "not a storage URL"),
        ("", "not a storage URL"),
        ("sqlite://", "names no file"),
        ("sqlite:///", "names no file"),
        ("sqlite://host/x.db", "sqlite URLs have no host"),
        ("memory://somewhere", "memory:// takes no host or path"),
        ("sqlite:///x.db?nope=1", "unknown SQLite option 'nope'"),
        ("sqlite:///x.db?compress=maybe", "compress must be true or false"),
        ("sqlite:///x.db?busy_timeout=soon", "busy_timeout must be a number"),
        ("sqlite:///x.db?busy_timeout=-1", "busy_timeout must be a finite number of seconds >= 0"),
        ("sqlite:///x.db?busy_timeout=nan", "SQLite option busy_timeout must be a finite number"),
        ("sqlite:///x.db?busy_timeout=inf", "busy_timeout must be a finite number, got 'inf'"),
        ("sqlite:///x.db?busy_timeout=1e300", "seconds >= 0 (at most 2,147,483), got 1e+300"),
        ("sqlite:///x.db?busy_timeout=2147484", "seconds >= 0 (at most 2,147,483)"),
        ("file://./d?lock_timeout=nan", "file option lock_timeout must be a finite number"),
        ("file://./d?lock_timeout=-inf", "lock_timeout must be a finite number, got '-inf'"),
        ("sqlite:///x.db?compress=1&compress=0", "given twice"),
        ("sqlite:///a%00b.db", "a path cannot contain NUL"),
        ("sqlite:///a.db%00", "a path cannot contain NUL"),
        ("file://./x%00y", "a path cannot contain NUL"),
        ("file:///%00", "a path cannot contain NUL"),
    ],
)
def test_bad_urls_raise_configuration_errors_that_say_what_to_do(
    url: str, expected: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=re.escape(expected)) as info:
        open_checkpointer(url)
    assert isinstance(info.value, StatekeeperError)
    assert not list(tmp_path.iterdir()), "a rejected URL must not create files"


@pytest.mark.parametrize("mode", ["rw", "ro"])
def test_a_path_naming_the_wrong_kind_of_file_says_which(tmp_path: Path, mode: str) -> None:
    """A SQLite URL naming a directory, a file URL naming a file: said, not "disk I/O
    error", "File exists" or "no database"."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.txt").write_text("notes\n")
    with pytest.raises(ConfigurationError, match=r"folder' is a directory, not a SQLite"):
        open_checkpointer(f"sqlite:///{tmp_path}/folder", mode=mode)
    with pytest.raises(ConfigurationError, match=r"txt' is a file, not a directory"):
        open_checkpointer(f"file://{tmp_path}/notes.txt", mode=mode)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["folder", "notes.txt"]


_NOT_A_BOOL = "option compress must be True or False, got {} ({})"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        # compress="false" used to turn compression on (a non-empty string is true)
        ({"compress": "false"}, _NOT_A_BOOL.format("'false'", "str")),
        ({"compress": "maybe"}, _NOT_A_BOOL.format("'maybe'", "str")),
        ({"compress": 2}, _NOT_A_BOOL.format(2, "int")),
        ({"compress": 0}, _NOT_A_BOOL.format(0, "int")),
        ({"compress": None}, _NOT_A_BOOL.format(None, "NoneType")),
        ({"busy_timeout": "nan"}, "option busy_timeout must be a finite number, got 'nan' (str)"),
        ({"busy_timeout": "5"}, "option busy_timeout must be a finite number, got '5' (str)"),
        ({"busy_timeout": True}, "option busy_timeout must be a finite number, got True (bool)"),
        ({"busy_timeout": float("inf")}, "busy_timeout must be a finite number, got inf"),
        ({"busy_timeout": float("-inf")}, "busy_timeout must be a finite number, got -inf"),
        ({"busy_timeout": float("nan")}, "busy_timeout must be a finite number, got nan"),
        ({"busy_timeout": 1e300}, "seconds >= 0 (at most 2,147,483), got 1e+300"),
        ({"busy_timeout": -0.5}, "busy_timeout must be a finite number of seconds >= 0"),
        ({"mode": 1}, "option mode must be text, got 1 (int)"),
        ({"on_corrupt": b"raise"}, "option on_corrupt must be text, got b'raise' (bytes)"),
        ({"index_metadata": 5}, "index_metadata must be text or a list or a tuple, got 5"),
        ({"compress": "x" * 10_000}, "compress must be True or False, got 'xxx"),
    ],
)
def test_keyword_options_are_held_to_the_rule_of_their_url_form(
    options: dict[str, object], expected: str, tmp_path: Path
) -> None:
    """A keyword option takes a value of its URL form's type (a bool, a finite number that
    is not a bool...), refused in one line naming it, what it got and what it takes,
    before anything is created."""
    for url in ("memory://", f"sqlite:///{tmp_path}/k.db"):
        with pytest.raises(ConfigurationError, match=re.escape(expected)) as info:
            open_checkpointer(url, **options)
        assert "\n" not in str(info.value)
        assert len(str(info.value)) < 200
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"compress": "false"}, _NOT_A_BOOL.format("'false'", "str")),
        ({"fsync": "no"}, "option fsync must be True or False, got 'no' (str)"),
        ({"lock_timeout": float("inf")}, "lock_timeout must be a finite number, got inf"),
        ({"lock_timeout": float("nan")}, "lock_timeout must be a finite number, got nan"),
        ({"lock_timeout": False}, "lock_timeout must be a finite number, got False (bool)"),
        # a wait that long overflowed at the first write (OverflowError: timestamp out of range)
        ({"lock_timeout": 1e300}, "lock_timeout must be >= 0 seconds (finite, at most 1,000,000,"),
    ],
)
def test_file_keyword_options_are_held_to_the_rule_of_their_url_form(
    options: dict[str, object], expected: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(expected)):
        open_checkpointer(f"file://{tmp_path}/d", **options)
    assert not list(tmp_path.iterdir())


def test_keyword_options_of_the_right_type_are_taken(tmp_path: Path) -> None:
    with open_checkpointer("memory://", compress=False, busy_timeout=5) as saver:
        assert saver.compress is False
        assert saver._db.busy_timeout == 5
    with open_checkpointer("memory://", index_metadata=("user",), serde=None) as saver:
        assert saver.compress is True
    with open_checkpointer(f"file://{tmp_path}/d", compress=False, lock_timeout=1) as saver:
        assert saver.compress is False


def test_the_classes_refuse_what_open_checkpointer_refuses(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="option compress must be True or False"):
        SqliteCheckpointer(compress="false")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="finite number of seconds >= 0"):
        SqliteCheckpointer(busy_timeout=float("inf"))
    with pytest.raises(ConfigurationError, match="finite number of seconds >= 0"):
        SqliteCheckpointer(busy_timeout="1")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="option compress must be True or False"):
        FileCheckpointer(tmp_path / "d", compress=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="option fsync must be True or False"):
        FileCheckpointer(tmp_path / "d", fsync="false")  # type: ignore[typeddict-item]
    with pytest.raises(ConfigurationError, match=r"lock_timeout must be >= 0 seconds \(finite"):
        FileCheckpointer(tmp_path / "d", lock_timeout=float("nan"))
    assert not list(tmp_path.iterdir())


def test_unknown_scheme_error_lists_every_known_scheme() -> None:
    with pytest.raises(ConfigurationError) as info:
        open_checkpointer("mongodb://x")
    for scheme in known_schemes():
        assert f"{scheme}://" in str(info.value)


def test_non_string_url_is_rejected() -> None:
    with pytest.raises(ConfigurationError):
        open_checkpointer(42)  # type: ignore[arg-type]


def test_unknown_keyword_option_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="unknown SQLite option 'colour'"):
        open_checkpointer("memory://", colour="blue")


def test_passwords_never_appear_in_error_messages() -> None:
    with pytest.raises(ConfigurationError) as info:
        open_checkpointer("mysql://user:hunter2@db.example:3306/x")
    assert "hunter2" not in str(info.value)
    assert "user:***@db.example" in str(info.value)


def test_importing_statekeeper_does_not_import_redis() -> None:
    import subprocess
    import sys

    code = "import sys, statekeeper, statekeeper.checkpointers; print('redis' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter#2@127.0.0.1:6379/0",
        "redis://user:hunter?2@127.0.0.1:6379/0",
        "redis://user:hunt/er2@127.0.0.1:6379/0",
        "redis://user:hunter2@[bad:6379/0",
        "mysql://user:hunter2@db.example:3306/x",
    ],
)
def test_redact_hides_passwords_that_defeat_url_parsing(url: str) -> None:
    from statekeeper.urls import redact

    shown = redact(url)
    assert "hunt" not in shown
    assert "***@" in shown


def test_a_bad_redis_url_with_an_unencoded_password_never_echoes_it() -> None:
    with pytest.raises(ConfigurationError) as info:
        open_checkpointer("redis://:hunter#2@127.0.0.1:6379/0")
    assert "hunter" not in str(info.value)


def test_redact_leaves_urls_without_a_password_alone() -> None:
    from statekeeper.urls import redact

    for url in ("redis://127.0.0.1:6379/0", "sqlite:///a@b.db", "redis://user@host:1/0"):
        assert redact(url) == url
