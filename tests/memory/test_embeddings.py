"""The static embedding model: loaded from its package with the network cut off, and
mixed into store search on every backend the same way."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("wordllama")

from statekeeper.errors import ConfigurationError
from statekeeper.memory.embeddings import STATIC_DIMS, StaticEmbeddings, _read_model
from statekeeper.memory.store import open_store


def test_loads_and_embeds_with_sockets_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    model = _read_model()  # read again from the package, not the process's cached copy
    (vector,) = model.embed(["I adopted a kitten"], norm=True)
    assert len(vector) == STATIC_DIMS
    cat = StaticEmbeddings().embed_query("My cat is called Miso.")
    assert len(cat) == STATIC_DIMS
    assert abs(sum(x * x for x in cat) - 1.0) < 1e-4


def test_related_texts_are_closer_than_unrelated() -> None:
    embed = StaticEmbeddings()
    q, pet, train = embed.embed_documents(
        ["Does Ana have a pet?", "Ana adopted a kitten", "The train to Porto was late"]
    )
    dot = lambda a, b: sum(x * y for x, y in zip(a, b, strict=True))  # noqa: E731
    assert dot(q, pet) > dot(q, train)


@pytest.mark.parametrize("url", ["memory://", "memory://?embed=static"])
def test_similarity_adds_to_the_lexical_score_and_never_dilutes_it(url: str) -> None:
    with open_store("memory://") as lexical, open_store(url) as store:
        for each in (lexical, store):
            each.put(("n",), "cat", {"text": "I adopted a kitten last week"})
            each.put(("n",), "train", {"text": "the train was late again"})
        (plain,) = lexical.search(("n",), query="when did I adopt the kitten?")
        found = store.search(("n",), query="when did I adopt the kitten?")
    assert found[0].key == "cat"
    assert found[0].score is not None
    assert plain.score is not None
    assert found[0].score >= plain.score


def test_wrong_dims_for_the_static_model_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="256 dimensions"):
        open_store("memory://", index={"embed": "static", "dims": 3})
