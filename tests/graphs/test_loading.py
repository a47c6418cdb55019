"""``load_graph``: a builder or a compiled graph by ``"module:attr"``, or a clear error."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ConfigurationError, GraphLoadError
from statekeeper.graphs import load_graph
from tests.graphs.conftest import V1, Modules

COMPILED = (
    V1
    + "\nORIGINAL_SAVER = InMemorySaver()\ncompiled = graph.compile(checkpointer=ORIGINAL_SAVER)\n"
)
COMPILED = COMPILED.replace(
    "import operator\n",
    "import operator\nfrom langgraph.checkpoint.memory import InMemorySaver\n",
    1,
)


def test_builder_is_compiled_with_the_checkpointer(modules: Modules) -> None:
    ref = modules.write(V1)
    with open_checkpointer("memory://") as saver:
        graph = load_graph(ref, saver)
        assert graph.checkpointer is saver
        assert set(graph.nodes) >= {"intake", "triage", "review", "close"}


def test_compiled_graph_is_rebound_not_changed(modules: Modules) -> None:
    modules.write(COMPILED)
    with open_checkpointer("memory://") as saver:
        graph = load_graph(f"{modules.name}:compiled", saver)
        assert graph.checkpointer is saver
        module = __import__(modules.name)
        assert isinstance(module.compiled.checkpointer, InMemorySaver)
        assert module.compiled.checkpointer is module.ORIGINAL_SAVER


def test_dotted_attribute_path(modules: Modules) -> None:
    modules.write(V1 + "\nclass Holder:\n    graph = graph\n")
    assert set(load_graph(f"{modules.name}:Holder.graph").nodes) >= {"intake"}


@pytest.mark.parametrize("ref", ["no_colon", "a:", ":graph", "a b:graph", "a:graph.", "a:1x"])
def test_malformed_reference(ref: str) -> None:
    with pytest.raises(GraphLoadError, match=r"not of the form 'package\.module:attr'") as e:
        load_graph(ref)
    assert (e.value.ref, e.value.reason) == (ref, "ref")
    assert isinstance(e.value, ConfigurationError)


def test_missing_module(modules: Modules) -> None:
    with pytest.raises(GraphLoadError, match="no module named 'nowhere_to_be_found'") as e:
        load_graph("nowhere_to_be_found.agents:graph")
    assert e.value.reason == "module"


def test_missing_attribute_lists_the_graphs_there(modules: Modules) -> None:
    ref = modules.write(V1)
    with pytest.raises(GraphLoadError, match="has no attribute 'grpah'; graphs it defines: graph"):
        load_graph(ref.replace(":graph", ":grpah"))
    with pytest.raises(GraphLoadError, match="Ticket' has no attribute 'nope'") as e:
        load_graph(ref.replace(":graph", ":Ticket.nope"))
    assert e.value.reason == "attribute"


def test_not_a_graph(modules: Modules) -> None:
    ref = modules.write(V1)
    with pytest.raises(GraphLoadError, match=r"function, not a StateGraph builder") as e:
        load_graph(ref.replace(":graph", ":intake"))
    assert e.value.reason == "type"


def test_error_inside_the_module_keeps_its_cause(modules: Modules) -> None:
    modules.write("raise KeyError('boom at import')\n", name=f"{modules.name}_raises")
    with pytest.raises(GraphLoadError, match="raised KeyError: 'boom at import'") as e:
        load_graph(f"{modules.name}_raises:graph")
    assert e.value.reason == "import"
    assert isinstance(e.value.__cause__, KeyError)

    # a module that exists but imports a missing one is an import error, not "not found"
    modules.write("import missing_dependency_xyz\n", name=f"{modules.name}_imports")
    with pytest.raises(GraphLoadError, match="raised ModuleNotFoundError") as e:
        load_graph(f"{modules.name}_imports:graph")
    assert e.value.reason == "import"
    assert isinstance(e.value.__cause__, ModuleNotFoundError)


def test_compile_error_keeps_its_cause(modules: Modules) -> None:
    source = V1 + "\nbroken = StateGraph(Ticket)\nbroken.add_edge(START, 'nowhere')\n"
    modules.write(source)
    with pytest.raises(GraphLoadError, match="compiling it raised") as e:
        load_graph(f"{modules.name}:broken")
    assert e.value.reason == "compile"
    assert e.value.__cause__ is not None


def test_importing_graphs_imports_no_memory_cli_or_redis() -> None:
    import subprocess
    import sys

    code = (
        "import sys, statekeeper.graphs\n"
        "bad = [m for m in sys.modules if m.split('.')[:2] in "
        "(['statekeeper', 'memory'], ['statekeeper', 'cli']) or m == 'redis']\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(
    ("ref", "shown"), [(5, "int 5"), (None, "NoneType None"), (b"a:b", "bytes b'a:b'")]
)
def test_a_reference_that_is_not_text(ref: object, shown: str) -> None:
    with pytest.raises(GraphLoadError) as e:
        load_graph(ref)  # type: ignore[arg-type]
    assert str(e.value) == f"a graph reference is 'package.module:attr' text, got {shown}"
    assert e.value.reason == "ref"


def test_import_and_compile_errors_are_one_line(modules: Modules) -> None:
    modules.write('raise RuntimeError("a\\nb")\n', name=f"{modules.name}_bad")
    with pytest.raises(GraphLoadError, match=r"raised RuntimeError: a b$") as e:
        load_graph(f"{modules.name}_bad:graph")
    assert (e.value.reason, "\n" in str(e.value)) == ("import", False)
    assert isinstance(e.value.__cause__, RuntimeError)
    modules.write(
        V1 + "\nclass Bad(StateGraph):\n    def compile(self, *a, **k):\n"
        "        raise ValueError('x\\n  y')\n\nbad = Bad(Ticket)\n"
    )
    with pytest.raises(GraphLoadError, match=r"compiling it raised ValueError: x y$") as e:
        load_graph(f"{modules.name}:bad")
    assert e.value.reason == "compile"
