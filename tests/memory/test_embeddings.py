"""The static embedding model: loaded from its package with the network cut off, and
mixed into store search on every backend the same way."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("wordllama")

from statekeeper.errors import ConfigurationError
from statekeeper.memory.embeddings import STATIC_DIMS, StaticEmbeddings, _read_model
from statekeeper.memory.store import open_store
from statekeeper.memory.store.search import Fusion


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


def test_similarity_needs_lexical_support_to_count() -> None:
    """The static model's similarity adds to a lexical score of at least its
    ``lexical_support`` only: alone it lifted unrelated notes above recall's floor."""
    support = StaticEmbeddings.lexical_support
    fusion = Fusion(0.5, StaticEmbeddings.similarity_floor, support)
    assert fusion.score(support / 2, 1.0) == support / 2
    assert fusion.score(support, 1.0) == pytest.approx(1 - (1 - support) * 0.5)
    assert fusion.score(0.9, 0.0) == 0.9
    assert Fusion(0.5, 0.35).score(0.0, 1.0) == 0.5  # no support given: similarity alone counts
    assert Fusion(0.5, None, 0.2).score(0.0, 0.8) == 0.4  # the weighted mix ignores it
    notes = {
        "free": "Yuki: Finally some free time.",
        "photos": "Yuki: I finally backed up all my photos, what a relief.",
        "college": "Yuki: My brother went to college in Toronto.",
    }
    question = "Where did Yuki go to university?"
    with open_store("memory://") as lexical, open_store("memory://?embed=static") as hybrid:
        for each in (lexical, hybrid):
            for key, text in notes.items():
                each.put(("n",), key, {"text": text})
        plain = {item.key: item.score for item in lexical.search(("n",), query=question)}
        mixed = {item.key: item.score for item in hybrid.search(("n",), query=question)}
    assert set(plain) == set(mixed) == set(notes)  # all share "Yuki" only
    assert all(plain[key] < support for key in notes)
    assert mixed == plain  # and similarity does not lift them
