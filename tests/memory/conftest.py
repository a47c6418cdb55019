"""Shared fixtures of the memory tests.

``STORE_BACKENDS`` is the one list of memory stores the store suite (and every test using
the ``store`` fixture) runs against; a new store joins every test by adding one entry.
Redis stores get a fresh key prefix per test, deleted afterwards (``tests/redis_servers.py``).

``NOTES`` and ``QUERIES`` are a hand-labelled corpus of realistic notes (one person's
memory, as a summarizer writes it) and questions, the evidence behind
``DEFAULT_MIN_SCORE`` (see ``docs/memory-store.md``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from statekeeper.memory.notes import Note, Provenance
from statekeeper.memory.store import MemoryStore, open_store
from tests.conftest import BACKENDS, Backend

# The one list of backends (tests/conftest.py): every backend serves a checkpointer and a
# memory store; a store's URL is made for its own folder, ``tmp_path / "store"``.
STORE_BACKENDS = BACKENDS


# Matrices of cases that exercise only code every Redis deployment shares (filters,
# validation, query parsing) skip the Cluster: there a test's cost is opening a Cluster
# client, and these matrices would double the suite's time for no new storage code.
MATRIX_BACKENDS = [backend for backend in STORE_BACKENDS if backend.name != "redis-cluster"]


@pytest.fixture(params=STORE_BACKENDS, ids=str)
def store_backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def store_url(store_backend: Backend, tmp_path: Path) -> Iterator[str]:
    url = store_backend.url_for(tmp_path / "store")
    yield url
    if store_backend.cleanup is not None:
        store_backend.cleanup(url)


@pytest.fixture
def store(store_url: str) -> Iterator[MemoryStore]:
    with open_store(store_url) as opened:
        yield opened


# How the recall suites see a store: ours, ours with embeddings on (``embed=static``: the
# store contracts recall relies on, provenance, freshness, the conflict policy and the
# relevance floor, hold with the vectors too), and LangGraph's InMemoryStore (no index: it
# ignores queries, so recall scores its notes itself).
ANY_STORES = ["statekeeper", "statekeeper+embed", "langgraph-inmemory"]


@contextmanager
def pick_store(name: str, backend: Backend, tmp_path: Path) -> Iterator[Any]:
    """The store ``name`` (one of ``ANY_STORES``) on ``backend``, cleaned up after."""
    if name == "langgraph-inmemory":
        yield InMemoryStore()
        return
    url = backend.url_for(tmp_path / "store")
    if name == "statekeeper+embed":
        url += ("&" if "?" in url else "?") + "embed=static"
    try:
        with open_store(url) as opened:
            yield opened
    finally:
        if backend.cleanup is not None:
            backend.cleanup(url)


@pytest.fixture(params=ANY_STORES)
def any_store(
    request: pytest.FixtureRequest, store_backend: Backend, tmp_path: Path
) -> Iterator[Any]:
    """Each of ``ANY_STORES`` on ``store_backend``: for the recall suites."""
    with pick_store(request.param, store_backend, tmp_path) as opened:
        yield opened


@pytest.fixture(params=["statekeeper", "statekeeper+embed"])
def store_either(
    request: pytest.FixtureRequest, store_backend: Backend, tmp_path: Path
) -> Iterator[MemoryStore]:
    """``store`` without and with embeddings on: for the search contracts that must hold
    either way (scores in [0, 1], never padded, filter and paging, what is searched)."""
    with pick_store(request.param, store_backend, tmp_path) as opened:
        yield opened


@pytest.fixture(params=MATRIX_BACKENDS, ids=str)
def matrix_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    """``store`` for the matrices of cases described at ``MATRIX_BACKENDS``."""
    backend: Backend = request.param
    url = backend.url_for(tmp_path / "store")
    try:
        with open_store(url) as opened:
            yield opened
    finally:
        if backend.cleanup is not None:
            backend.cleanup(url)


# -- notes --------------------------------------------------------------------------------

T0 = datetime.datetime(2024, 5, 8, 13, 56, tzinfo=datetime.UTC)


def make_note(
    text: str,
    *,
    topics: tuple[str, ...] = (),
    thread_id: str = "t-1",
    message_ids: tuple[str, ...] = ("m1",),
    day: int = 0,
) -> Note:
    """A note made ``day`` days after ``T0`` from ``message_ids`` of ``thread_id``."""
    said = T0 + datetime.timedelta(days=day)
    return Note(
        text=text,
        topics=topics,
        provenance=Provenance(
            thread_id=thread_id,
            message_ids=message_ids,
            checkpoint_id=f"cp-{day}",
            said_from=said,
            said_to=said + datetime.timedelta(minutes=5),
            created_at=said + datetime.timedelta(minutes=6),
            summarizer="test/1",
        ),
    )


# id -> (text, topics). One person's memory after a few months of chats: work, family,
# health, errands; the texts are what a summarizer keeps (a fact per note, names, dates).
NOTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "n01": ("Ana works night shifts as a nurse at St. Mary's hospital.", ("hospital",)),
    "n02": ("Ana adopted a beagle puppy from the shelter and named him Biscuit.", ("Biscuit",)),
    "n03": ("Biscuit chewed through Ana's running shoes on his first night home.", ()),
    "n04": ("Ana's sister Maya lives in Dublin and recently became an airline pilot.", ("Maya",)),
    "n05": ("Ana is training for the Lisbon half marathon in October.", ("half marathon",)),
    "n06": ("Ana is allergic to penicillin.", ("allergy",)),
    "n07": ("Ana prefers dark mode and a large font in every app.", ()),
    "n08": (
        "The team decided to migrate the billing database from MySQL to PostgreSQL in Q3 "
        "because of licensing costs.",
        ("billing database", "PostgreSQL"),
    ),
    "n09": (
        "Deployments to production happen on Tuesdays and Thursdays; Friday deploys are forbidden.",
        ("deployments",),
    ),
    "n10": ("The staging cluster runs Kubernetes 1.29 on three nodes in Frankfurt.", ()),
    "n11": ("Ana's manager is Tomasz; their weekly one-on-one is on Monday at 10:00.", ()),
    "n12": ("Ana takes Portuguese lessons with a tutor twice a week.", ("Portuguese",)),
    "n13": ("Ana and her partner Leo are looking for a two-bedroom apartment near Alfama.", ()),
    "n14": ("Leo is a vegetarian and does not eat fish.", ("Leo",)),
    "n15": ("Ana's birthday is on 14 March; she wants a quiet dinner, no party.", ()),
    "n16": ("Ana's laptop is a 2021 ThinkPad X1 Carbon running Fedora.", ("laptop",)),
    "n17": (
        "The on-call rotation moved to PagerDuty; Ana is on call the first week of each month.",
        ("on-call",),
    ),
    "n18": ("Ana plays cello in a community orchestra that rehearses on Wednesday evenings.", ()),
    "n19": ("Ana's grandmother is recovering from hip surgery in Porto.", ("grandmother",)),
    "n20": (
        "Ana wants to read more science fiction; she loved The Left Hand of Darkness.",
        ("books",),
    ),
    "n21": ("The rate limit of the partner API is 600 requests per minute.", ("API",)),
    "n22": ("Ana booked flights to Dublin for 3-7 June to visit Maya.", ("Dublin trip",)),
    "n23": ("Ana drinks her coffee black and avoids caffeine after 2 pm.", ("coffee",)),
    "n24": ("The quarterly report for the board is due on 30 September.", ()),
    "n25": (
        "Ana's car, a 2015 Honda Civic, failed its inspection because of worn brakes.",
        ("car",),
    ),
    "n26": ("Ana's bank replaced her credit card after a fraud alert in April.", ()),
    "n27": ("Ana is saving for a down payment and puts 800 euros aside every month.", ()),
    "n28": ("The design review of the new checkout flow is next Friday with the UX team.", ()),
    "n29": ("Ana volunteers at the animal shelter on Saturday mornings.", ("volunteering",)),
    "n30": ("Ana gets migraines when she sleeps less than six hours.", ("migraines",)),
    "n31": ("Ana's team uses Python 3.12 and Poetry for dependency management.", ()),
    "n32": ("Ana hates cilantro and asks restaurants to leave it out.", ()),
    "n33": ("Ana's favourite restaurant is a small Georgian place called Tbilisi Nights.", ()),
    "n34": ("Ana's dentist appointment was moved to 12 November at 8:30.", ()),
    "n35": ("Ana runs 5 km along the river every morning before her shift.", ("running",)),
    "n36": (
        "The customer support backlog dropped below 50 tickets after the new triage process.",
        (),
    ),
    "n37": ("Ana's passport expires in January; she must renew it before travelling.", ()),
    "n38": (
        "Ana uses a standing desk and a split keyboard because of wrist pain.",
        ("wrist pain",),
    ),
    "n39": ("Leo works as a sound engineer for a theatre company.", ()),
    "n40": ("Ana's gym membership renews on the first of each month for 35 euros.", ("gym",)),
}

# (question, ids of the notes that help answer it). Empty: nothing in memory is relevant,
# and recall should return nothing. Some questions only a paraphrase matches ("dog" for a
# beagle): lexical search misses them whatever the floor; embeddings are what finds them.
QUERIES: list[tuple[str, frozenset[str]]] = [
    (q, frozenset(ids.split()))
    for q, ids in [
        ("What did Biscuit chew?", "n03 n02"),
        ("Where does my sister live?", "n04"),
        ("When am I flying to Dublin?", "n22 n04"),
        ("Which hospital do I work at?", "n01"),
        ("How is the half marathon training going?", "n05 n35"),
        ("Am I allergic to any medication?", "n06"),
        ("What are my display settings?", "n07"),
        ("Why are we moving the billing database to PostgreSQL?", "n08"),
        ("Can we deploy to production on Friday?", "n09"),
        ("What version of Kubernetes runs on staging?", "n10"),
        ("When is my one-on-one with Tomasz?", "n11"),
        ("How often do I have Portuguese lessons?", "n12"),
        ("What kind of apartment are we looking for?", "n13"),
        ("What should I cook for Leo?", "n14 n39"),
        ("When is my birthday dinner?", "n15"),
        ("What laptop do I use?", "n16"),
        ("When am I on call?", "n17"),
        ("When does the orchestra rehearse?", "n18"),
        ("How is grandma doing after her surgery?", "n19"),
        ("Recommend me a science fiction book", "n20"),
        ("What is the rate limit of the partner API?", "n21"),
        ("How do I take my coffee?", "n23"),
        ("When is the board report due?", "n24"),
        ("What's wrong with my car?", "n25"),
        ("Why was my credit card replaced?", "n26"),
        ("How much am I saving each month?", "n27"),
        ("When is the checkout design review?", "n28"),
        ("What do I do on Saturday mornings?", "n29 n35"),
        ("Why do I get headaches?", "n30"),
        ("Which Python version does the team use?", "n31"),
        ("Is there any food I can't stand?", "n32"),
        ("What's my favourite restaurant?", "n33"),
        ("When is the dentist appointment?", "n34"),
        ("Does my passport need renewing?", "n37"),
        ("Why do I have a split keyboard?", "n38"),
        ("What does Leo do for a living?", "n39 n14"),
        ("How much is the gym membership?", "n40"),
        ("What's my dog's name?", "n02 n03"),
        # what a chat turn looks like: the question inside a longer message
        ("I'm planning dinner for Leo this weekend, is there anything he doesn't eat?", "n14"),
        ("My wrist has been hurting again after long days at the keyboard, any tips?", "n38"),
        ("Should I book another trip to see my sister in Dublin this summer?", "n22 n04"),
        ("I have a terrible migraine today, barely slept four hours last night", "n30"),
        ("Work is crazy, the billing database migration is eating all my time", "n08"),
        ("Can you remind me what I told you about my grandmother's surgery?", "n19"),
        ("I'm at the mechanic, what was wrong with the brakes on my car again?", "n25"),
        ("Heading to the gym later, when does my membership renew?", "n40"),
        ("Support keeps asking me about tickets, how is the backlog looking these days?", "n36"),
        ("Thinking of buying a new laptop, which one do I have right now?", "n16"),
        ("We finally found a flat! Two bedrooms, close to Alfama, moving in next month", "n13"),
        ("Biscuit ate another pair of shoes today, I can't believe this dog", "n03 n02"),
        ("What's the weather forecast for tomorrow?", ""),
        ("Who won the football match last night?", ""),
        ("Explain quantum entanglement", ""),
        ("What's a good recipe for banana bread?", ""),
        ("How do I reset my router?", ""),
        ("What is the capital of Australia?", ""),
        ("Tell me a joke about cats", ""),
        ("Which stocks should I buy this year?", ""),
        ("How tall is Mount Everest?", ""),
        ("Translate good morning into Japanese", ""),
        ("What time does the pharmacy close?", ""),
        ("Summarise today's news from Brazil", ""),
        ("I just watched a great documentary about octopuses, they are so clever", ""),
        ("Can you help me write a cover letter for a marketing job?", ""),
        ("My neighbour's kids are so loud in the evenings, I can't focus", ""),
        ("What's the difference between a latte and a flat white?", ""),
        ("Long week, I'm exhausted and just want to sleep all weekend", ""),
    ]
]

ANA = ("users", "ana")


def corpus_notes() -> dict[str, Note]:
    """``NOTES`` as notes, each from its own messages of one of five threads."""
    return {
        note_id: make_note(
            text,
            topics=topics,
            thread_id=f"t-{int(note_id[1:]) % 5}",
            message_ids=(f"{note_id}-a", f"{note_id}-b"),
            day=int(note_id[1:]),
        )
        for note_id, (text, topics) in NOTES.items()
    }


def put_corpus(store: Any, namespace: tuple[str, ...] = ANA) -> dict[str, str]:
    """Put every corpus note under ``namespace``; return store key -> note id."""
    keys = {}
    for note_id, note in corpus_notes().items():
        store.put(namespace, note.key, note.to_value())
        keys[note.key] = note_id
    return keys
