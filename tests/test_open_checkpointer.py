"""Choosing a backend by URL: what is accepted, and what each bad URL is told."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.checkpointers import SqliteCheckpointer, known_schemes, open_checkpointer
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
        ("sqlite:///x.db?busy_timeout=-1", "busy_timeout must be >= 0"),
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
    with pytest.raises(ConfigurationError, match=expected.replace("?", r"\?")) as info:
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
