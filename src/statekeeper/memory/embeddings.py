"""A small static embedding model that ships inside a package: semantic search offline.

:class:`StaticEmbeddings` is a LangChain ``Embeddings`` over WordLlama's
``l2_supercat`` token embeddings (256 dimensions, 32,000 tokens, 16 MB of float16),
whose weights and tokenizer are files *inside* the ``wordllama`` wheel: nothing is
downloaded, ever, and no GPU, model server or API key is needed. A text's vector is the
average of its tokens' vectors (what WordLlama computes), so embedding is a table lookup:
tens of thousands of short texts a second on one core.

Install it with ``pip install 'statekeeper[embed]'``; ``open_store(url,
index={"embed": "static"})`` (or ``?embed=static`` in the URL) then embeds every note
as it is written and mixes the similarity into search scores (``docs/memory-store.md``).

The model is read from the package the first time a text is embedded, once per process
(about 0.4 s), and shared by every :class:`StaticEmbeddings`.
"""

from __future__ import annotations

import threading
from importlib.resources import files
from importlib.util import find_spec
from typing import Any

from langchain_core.embeddings import Embeddings

from statekeeper.errors import ConfigurationError

__all__ = ["STATIC_DIMS", "STATIC_MODEL", "StaticEmbeddings", "static_available"]

#: What :class:`StaticEmbeddings` is: the package, the model file, its dimensions.
STATIC_MODEL = "wordllama/l2_supercat_256"
STATIC_DIMS = 256

_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
_lock = threading.Lock()
_model: Any = None


def static_available() -> bool:
    """Whether the static model's package is installed (``statekeeper[embed]``)."""
    return find_spec("wordllama") is not None


class StaticEmbeddings(Embeddings):
    """Embeddings from the static model shipped in the ``wordllama`` package: unit
    vectors of :data:`STATIC_DIMS` floats, the same for the same text on every machine.
    Never touches the network. Safe to share between threads.

    Raises:
        ConfigurationError: when first used, if ``wordllama`` is not installed (``pip
            install 'statekeeper[embed]'``) or its package lacks the model files.
    """

    name = STATIC_MODEL
    dims = STATIC_DIMS
    #: The cosine texts unrelated to each other reach with this model (see
    #: ``docs/memory-store.md``): a store counts what lies below it as no similarity.
    similarity_floor = 0.35
    #: The lexical score an item needs before this model's similarity adds to it: on the
    #: dev split of ``benchmarks/memory``, of the notes its similarity alone lifted above
    #: recall's floor from a lexical score below this, none was relevant (and it cost
    #: unrelated questions their empty answer; see ``docs/memory-store.md``).
    lexical_support = 0.2

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order (an empty text gets a zero vector)."""
        if not texts:
            return []
        vectors = _load().embed(list(texts), norm=True)
        return [[float(x) for x in row] for row in vectors]

    def embed_query(self, text: str) -> list[float]:
        """The vector of one text, as :meth:`embed_documents` computes it."""
        return self.embed_documents([text])[0]

    def __repr__(self) -> str:
        return f"StaticEmbeddings({self.name!r})"


def _load() -> Any:
    global _model
    with _lock:
        if _model is None:
            _model = _read_model()
        return _model


def _read_model() -> Any:
    # WordLlama.load() looks for the tokenizer under a folder name the wheel does not
    # use and would then try to download it; reading the two packaged files directly
    # keeps loading local by construction.
    try:
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ConfigurationError(
            "the static embedding model needs its package: pip install 'statekeeper[embed]'"
        ) from exc
    root = files("wordllama")
    weights, tokenizer = root.joinpath(*_WEIGHTS), root.joinpath(*_TOKENIZER)
    if not (weights.is_file() and tokenizer.is_file()):
        raise ConfigurationError(
            f"the wordllama package has no {STATIC_MODEL} model files; reinstall it from "
            "its wheel (pip install --force-reinstall wordllama)"
        )
    with safe_open(str(weights), framework="np") as stored:
        table = stored.get_tensor("embedding.weight")
    return WordLlamaInference(table, Tokenizer.from_file(str(tokenizer)))


def as_embeddings(embed: Any) -> Any:
    """``embed`` with the name ``"static"`` replaced by :class:`StaticEmbeddings`;
    anything else is returned as it is (LangGraph's ``ensure_embeddings`` takes it)."""
    if isinstance(embed, str) and embed.strip().casefold() == "static":
        return StaticEmbeddings()
    return embed


def check_dims(dims: int | None, embed: object) -> int | None:
    """The ``dims`` of an index whose ``embed`` is ``embed``: the static model's own when
    none is given; a different number is refused."""
    if isinstance(embed, StaticEmbeddings):
        if dims is not None and dims != STATIC_DIMS:
            raise ConfigurationError(
                f"the static model's vectors have {STATIC_DIMS} dimensions, not dims={dims}"
            )
        return STATIC_DIMS
    return dims
