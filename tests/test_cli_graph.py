"""``statekeeper graph``: drawing a graph from the command line, offline."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from statekeeper.cli import EXIT, main

ROOT = Path(__file__).resolve().parent.parent
AGENT = "examples.approval_agent:graph"
SVG = "{http://www.w3.org/2000/svg}"

SUBGRAPH_MODULE = """
import operator
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph


class S(TypedDict):
    x: Annotated[list, operator.add]


def step(state):
    return {"x": [1]}


child = StateGraph(S)
child.add_node("inner", step)
child.add_edge(START, "inner")
child.add_edge("inner", END)
parent = StateGraph(S)
parent.add_node("outer", step)
parent.add_node("child", child.compile())
parent.add_edge(START, "outer")
parent.add_edge("outer", "child")
parent.add_edge("child", END)
graph = parent.compile()


class Broken(type(graph)):
    def get_graph(self, *args, **kwargs):
        raise RuntimeError("no picture today")


broken = parent.compile()
broken.__class__ = Broken

hostile = StateGraph(S)
hostile.add_node("<script>alert(1)</script>", step)
hostile.add_node("\\u202eexe.txt\\x1b[31m", step)
hostile.add_edge(START, "<script>alert(1)</script>")
hostile.add_edge("<script>alert(1)</script>", "\\u202eexe.txt\\x1b[31m")
"""


@pytest.fixture(autouse=True)
def _importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))


@pytest.fixture
def subgraph_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module ``drawme`` in the current directory, with ``graph`` (a subgraph inside)
    and ``broken`` (whose ``get_graph`` raises)."""
    (tmp_path / "drawme.py").write_text(textwrap.dedent(SUBGRAPH_MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "drawme", raising=False)
    return "drawme"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _svg_nodes(text: str) -> set[str]:
    root = ET.fromstring(text)
    return {
        g.attrib["data-node"]
        for g in root.iter(f"{SVG}g")
        if "node" in g.attrib.get("class", "").split()
    }


AGENT_NODES = {"__start__", "agent", "tools", "approve", "send", "__end__"}


def test_svg_to_a_file_is_the_whole_drawing(tmp_path: Path, capsys: Any) -> None:
    target = tmp_path / "agent.svg"
    code, out, err = run(capsys, "graph", AGENT, "-o", str(target))
    assert (code, out, err) == (EXIT["ok"], "", "")
    assert _svg_nodes(target.read_text(encoding="utf-8")) == AGENT_NODES
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.svg"]  # no temporary left


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize(
    ("suffix", "starts"),
    [(".svg", "<svg "), (".mmd", "flowchart TD\n"), (".txt", "0  (__start__)\n")],
)
def test_the_output_suffix_chooses_the_format(
    tmp_path: Path, capsys: Any, suffix: str, starts: str
) -> None:
    target = tmp_path / f"agent{suffix}"
    assert run(capsys, "graph", AGENT, "-o", str(target))[0] == EXIT["ok"]
    assert target.read_text(encoding="utf-8").startswith(starts)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stdout_gets_text_on_a_terminal_and_svg_in_a_pipe(
    capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(capsys, "graph", AGENT)
    assert code == EXIT["ok"]
    assert _svg_nodes(out) == AGENT_NODES
    code, out, _ = run(capsys, "graph", AGENT, "--format", "mermaid", "-o", "-")
    assert out.startswith("flowchart TD\n")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["graph", AGENT]) == EXIT["ok"]
    assert terminal.getvalue().startswith("0  (__start__)\n     __start__ --> agent\n")


def test_xray_draws_the_nodes_inside_subgraphs(subgraph_module: str, capsys: Any) -> None:
    code, out, _ = run(capsys, "graph", f"{subgraph_module}:graph", "--format", "svg")
    assert code == EXIT["ok"]
    assert _svg_nodes(out) == {"__start__", "outer", "child", "__end__"}
    code, out, _ = run(capsys, "graph", f"{subgraph_module}:graph", "--xray", "1")
    assert code == EXIT["ok"]
    assert _svg_nodes(out) == {"__start__", "outer", "child:inner", "__end__"}
    assert 'data-cluster="child"' in out


def test_hostile_names_come_out_inert_in_every_format(subgraph_module: str, capsys: Any) -> None:
    ref = f"{subgraph_module}:hostile"
    code, out, err = run(capsys, "--json", "graph", ref)
    assert (code, err) == (EXIT["ok"], "")
    names = {node["id"] for node in json.loads(out)["nodes"]}
    assert names == {"__start__", "<script>alert(1)</script>", "\u202eexe.txt\x1b[31m", "__end__"}
    # controls as visible escapes; the script tag escaped in SVG, numeric entities in
    # Mermaid (where a backslash is #92; too), plain text in ascii
    shown = {
        "svg": ("&lt;script&gt;", "\\u202eexe.txt\\x1b[31m"),
        "mermaid": ("#60;script#62;", "#92;u202eexe.txt#92;x1b#91;31m"),
        "ascii": ("[<script>alert", "\\u202eexe.txt\\x1b[31m"),
    }
    for form, (script, controls) in shown.items():
        code, out, err = run(capsys, "graph", ref, "--format", form)
        assert (code, err) == (EXIT["ok"], ""), form
        assert not any(ch in out for ch in "\u202e\x1b"), form
        assert controls in out, form
        assert script in out, form
        if form != "ascii":
            assert "<script" not in out, form


def test_json_prints_the_graph_as_data(capsys: Any) -> None:
    code, out, _ = run(capsys, "--json", "graph", AGENT)
    assert code == EXIT["ok"]
    data = json.loads(out)
    assert data["layers"] == [["__start__"], ["agent"], ["approve", "tools"], ["send"], ["__end__"]]
    assert {
        "source": "tools",
        "target": "agent",
        "conditional": False,
        "label": None,
        "back": True,
    } in data["edges"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["graph", "not a reference"], "is not of the form 'package.module:attr'"),
        (["graph", "no_such_module_here:graph"], "no module named 'no_such_module_here'"),
        (["graph", "examples.approval_agent:nope"], "has no attribute 'nope'"),
        (["graph", AGENT, "--json", "--format", "svg"], "--json and --format cannot be combined"),
    ],
)
def test_bad_usage_is_one_line_with_exit_code_2(capsys: Any, argv: list[str], message: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == EXIT["usage"]
    assert out == ""
    assert err.count("\n") == 1
    if "--json" in argv:  # with --json, the error is the JSON error object
        assert json.loads(err)["error"]["code"] == "usage"
    else:
        assert err.startswith("statekeeper graph: ")
    assert message in err


def test_a_graph_that_cannot_be_drawn_is_one_line(subgraph_module: str, capsys: Any) -> None:
    code, out, err = run(capsys, "graph", f"{subgraph_module}:broken")
    assert (code, out) == (EXIT["usage"], "")
    assert err == (
        "statekeeper graph: cannot draw graph 'drawme:broken': get_graph raised "
        "RuntimeError: no picture today\n"
    )


def test_an_unwritable_output_is_one_line_and_leaves_the_old_file(
    tmp_path: Path, capsys: Any
) -> None:
    code, _, err = run(capsys, "graph", AGENT, "-o", str(tmp_path / "missing" / "agent.svg"))
    assert code == EXIT["usage"]
    assert err == (
        f"statekeeper graph: cannot write '{tmp_path / 'missing' / 'agent.svg'}': "
        "No such file or directory\n"
    )
    (tmp_path / "folder.svg").mkdir()
    code, _, err = run(capsys, "graph", AGENT, "-o", str(tmp_path / "folder.svg"))
    assert code == EXIT["usage"]
    assert err.startswith(f"statekeeper graph: cannot write '{tmp_path / 'folder.svg'}': ")
    assert err.count("\n") == 1
    kept = tmp_path / "kept.svg"
    kept.write_text("old")
    assert run(capsys, "graph", "examples.approval_agent:nope", "-o", str(kept))[0] == 2
    assert kept.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.svg", "kept.svg"]


def test_a_negative_xray_depth_is_refused(capsys: Any) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["graph", AGENT, "--xray", "-1"])
    assert stopped.value.code == EXIT["usage"]
    assert "argument --xray: expected a depth (0, 1, 2...), got '-1'" in capsys.readouterr().err


# -- no network --------------------------------------------------------------------------

_PROBE = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
    "except OSError:\n"
    "    pass\n"
    "else:\n"
    "    raise SystemExit('the network is reachable')\n"
)


def _no_network_namespace() -> str | None:
    """Why ``unshare -rn`` cannot give a process a network of its own here, or None."""
    if shutil.which("unshare") is None:
        return "the unshare command is not installed"
    done = subprocess.run(
        ["unshare", "-rn", sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if done.returncode == 0 else f"unshare -rn failed: {done.stderr.strip()[-200:]}"


def test_the_svg_is_drawn_in_a_process_without_network(tmp_path: Path) -> None:
    """The acceptance check: ``statekeeper graph examples.approval_agent:graph --format
    svg`` in a network namespace with no interface up (not even a route to 1.1.1.1)."""
    reason = _no_network_namespace()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no network namespace under CI: {reason}")
        pytest.skip(f"no network namespace: {reason} (see the in-process test instead)")
    target = tmp_path / "agent.svg"
    # the probe proves the namespace has no network; then the command runs in it
    script = '"$1" -c "$2" && exec "$1" -m statekeeper graph "$3" --format svg -o "$4"'
    done = subprocess.run(
        ["unshare", "-rn", "sh", "-c", script, "sh", sys.executable, _PROBE, AGENT, str(target)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])},
    )
    assert done.returncode == 0, done.stderr
    assert _svg_nodes(target.read_text(encoding="utf-8")) == AGENT_NODES


def test_the_svg_is_drawn_with_every_socket_refused(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same in this process, for machines without network namespaces: any attempt
    to connect or resolve a name is recorded and refused."""
    attempts: list[str] = []

    def refuse(name: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            attempts.append(name)
            raise OSError(f"network access in a test: {name}")

        return refused

    for name in ("connect", "connect_ex", "sendto"):
        monkeypatch.setattr(socket.socket, name, refuse(name))
    for name in ("create_connection", "getaddrinfo", "gethostbyname"):
        monkeypatch.setattr(socket, name, refuse(name))
    target = tmp_path / "agent.svg"
    code, _, err = run(capsys, "graph", AGENT, "--format", "svg", "-o", str(target))
    assert (code, err) == (EXIT["ok"], "")
    assert attempts == []
    assert _svg_nodes(target.read_text(encoding="utf-8")) == AGENT_NODES


def test_the_picture_in_the_docs_is_what_the_command_draws(tmp_path: Path, capsys: Any) -> None:
    """docs/img/approval_agent.svg is regenerated with
    ``statekeeper graph examples.approval_agent:graph -o docs/img/approval_agent.svg``."""
    target = tmp_path / "agent.svg"
    assert run(capsys, "graph", AGENT, "-o", str(target))[0] == EXIT["ok"]
    committed = ROOT / "docs" / "img" / "approval_agent.svg"
    assert committed.read_bytes() == target.read_bytes()
    for page in ("cli.md", "graphs.md"):
        assert "(img/approval_agent.svg)" in (ROOT / "docs" / page).read_text(encoding="utf-8")
