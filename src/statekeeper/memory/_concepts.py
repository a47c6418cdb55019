"""Concept tags: the general words a personal fact is about, for notes that never say them.

"We drove home in the new hatchback!" is about a vehicle; "I'm allergic to nuts" about
food and diet. A question asks with the general word ("What vehicle does Ana have?")
while the conversation says a specific one, and a lexical index cannot bridge the two.
The extractive summarizer adds the tags of the concepts a statement mentions to its
topics, which stores index with the text.

The lexicon is small, fixed and deliberately generic: common nouns and verbs of the kinds
of personal facts an assistant is asked to remember (family, work, home, health...). It
holds no proper nouns (no brands, breeds, places or employers) and no open-ended lists of
instances (no dishes, diseases or hobbies one by one): those are what a lexicon can never
cover, and what embeddings are for. Words are compared by their stem
(:func:`statekeeper.memory.store.lexical.stem`), so "relocated" finds "relocate".

:func:`fact_key` names the single-valued fact a statement asserts ("We're relocating to
Toronto!" said by Ana: ``("ana", "home")``), by which contradicting notes are found, and
:func:`fact_topics` the words a question about that fact asks with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from statekeeper.memory.store.lexical import stem

__all__ = ["ASKED_WITH", "CONCEPTS", "concept_tags", "fact_key", "fact_topics"]

# tags -> trigger words (lower-case; compared by stem)
_LEXICON: dict[tuple[str, ...], str] = {
    ("vehicle", "car"): """car cars drove drive driving sedan hatchback suv truck van pickup
        minivan convertible coupe wagon motorbike motorcycle scooter dealership""",
    ("food", "diet", "ingredient"): """allergic allergy intolerant intolerance vegan vegetarian
        pescatarian gluten lactose dairy meat recipe dish meal ingredient""",
    ("pet", "animal"): """dog cat puppy kitten pet vet veterinarian shelter leash litter""",
    ("dog",): """puppy pup doggy""",
    ("cat",): """kitten kitty""",
    ("job", "work", "career"): """job hired promoted promotion career employer employee
        colleague coworker boss manager office shift salary notice interview
        offer contract""",
    ("home",): """apartment flat house home rent landlord neighborhood
        neighbourhood""",
    ("move", "relocation"): """moved move moving movers relocate relocation""",
    ("family",): """sister brother mother mom mum father dad son daughter wife husband
        partner parent grandma grandpa grandmother grandfather cousin aunt uncle niece
        nephew sibling""",
    ("health",): """hospital sick injury injured surgery diagnosed therapy
        medication prescription doctor dentist physio""",
    ("hobby", "activity"): """hobby course class classes lessons workshop club enrolled
        practice""",
    ("travel", "trip"): """trip flight flights flew fly vacation holiday visited visit
        travel traveled travelled abroad""",
    ("race", "sport"): """race marathon runner jog jogging""",
    ("celebration",): """anniversary birthday wedding party celebrate celebration""",
}
#: Every tag of the lexicon: the general words a note may be about ("vehicle", "pet"...).
CONCEPTS = frozenset(tag for tags in _LEXICON for tag in tags)
_TRIGGERS: dict[str, tuple[str, ...]] = {}
for _tags, _words in _LEXICON.items():
    for _word in _words.split():
        _stem = stem(_word)
        _TRIGGERS[_stem] = tuple(dict.fromkeys(_TRIGGERS.get(_stem, ()) + _tags))


def concept_tags(words: Iterable[str]) -> list[str]:
    """The tags of the concepts ``words`` (lower-cased) mention, in lexicon order."""
    found: set[str] = set()
    for word in words:
        found.update(_TRIGGERS.get(stem(word), ()))
    return [tag for tags in _LEXICON for tag in tags if tag in found]


# -- fact keys ------------------------------------------------------------------------------
#
# The (subject, attribute) of a statement that says the current value of a single-valued
# personal fact: where someone lives, who they work for, what they do, what they drive,
# what they eat. Two such statements about one person contradict: the later one is the
# update. Only statements that assert a value get a key ("I drive a Civic", not "my car
# broke down"), said by someone of themselves ("I", "we") or of a close relative ("my
# sister lives in Dublin"). Facts that coexist get no shared key: a second pet does not
# replace the first, so pets get none; each allergy is its own attribute ("allergy to
# peanuts"), so a new one does not hide an old one.


def _split(text: str) -> list[str]:
    return text.split()


_RELATIVES = """sister brother mother mom mum father dad son daughter wife husband partner
    boyfriend girlfriend grandmother grandfather grandma grandpa"""
_WHO = r"(?P<who>\b(?:i|we)\b|\bmy (?:" + "|".join(_split(_RELATIVES)) + r")\b)"
_AUX = r"(?:'m|'re|'ve|'s|'ll| am| are| have| has| is| will| will be| am now| are now)?"
_ADV = r"(?:\s+(?:now|just|finally|officially|also|recently|already|actually|fully))*"
_OBJ = r"(?P<obj>[^\W\d_][\w'-]*)"  # the named value: must be capitalised (checked below)
# (attribute, pattern, whether the value after it must be a name)
_FACT_PATTERNS: list[tuple[str, str, bool]] = [
    ("home", rf"{_WHO}{_AUX}{_ADV}\s+(?:live|lives|living|lived)\s+in\s+{_OBJ}", True),
    (  # "I've been in Austin eight years": a home; "been in Rome for a week" is a trip
        "home",
        rf"{_WHO}{_AUX}{_ADV}\s+been\s+(?:living\s+)?in\s+{_OBJ}(?:\s+for)?\s+(?:\w+\s+)?"
        r"(?:years|decades)\b",
        True,
    ),
    (
        "home",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:move|moved|moves|moving|relocate|relocated|relocates"
        rf"|relocating)\s+(?:back\s+)?to\s+{_OBJ}",
        True,
    ),
    ("employer", rf"{_WHO}{_AUX}{_ADV}\s+(?:work|works|working)\s+(?:at|for)\s+{_OBJ}", True),
    (
        "employer",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:start|starts|started|starting|join|joins|joined|joining)"
        rf"\s+(?:as\s+(?:a|an)\s+[\w -]{{1,40}}?\s+)?at\s+{_OBJ}",
        True,
    ),
    (  # "joining Acme as a nurse", not "joining Anna for lunch"
        "employer",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:join|joins|joined|joining)\s+{_OBJ}[\w' -]*?\s+as\s+(?:a|an)\s",
        True,
    ),
    ("employer", r"(?P<who>)\b(?:hired|hires|has hired) me\b", False),
    (
        "employer",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:got|landed|accepted)\s+(?:a|an|the)\s+(?:new\s+)?"
        rf"(?:job|position|role|offer)\s+(?:at|with|from)\s+{_OBJ}",
        True,
    ),
    (
        "employer",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:quit|left|resigned from|handed in (?:my|his|her) notice at)"
        rf"\s+(?:my job\b|{_OBJ})",
        False,
    ),
    ("occupation", rf"{_WHO}{_AUX}{_ADV}\s+(?:work|works|working)\s+as\s+(?:a|an)\b", False),
    (
        "car",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:drive|drives|driving|drove home in|drove off in)\s+(?:a|an)\s",
        False,
    ),
    (
        "car",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:bought|got|leased|picked up)\s+(?:a|an|our|my)\s+(?:new|used)"
        r"\s+(?:car|van|truck|suv|motorbike|motorcycle)\b",
        False,
    ),
    ("car", rf"{_WHO}\s+(?:car|new car) is (?:a|an)\s", False),
    (
        "diet",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:gone|become|became|going|turned|a)?{_ADV}\s*(?:vegetarian|vegan"
        r"|pescatarian)\b",
        False,
    ),
    (
        "diet",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:stopped|quit|gave up|started|don't|do not|no longer)\s+"
        r"(?:eating\s+|eat\s+)?meat\b",
        False,
    ),
    (
        "allergy to",
        rf"{_WHO}{_AUX}{_ADV}\s+(?:severely\s+)?allergic\s+to\s+(?P<obj>[\w -]+)",
        False,
    ),
]
_FACTS = [
    (attr, re.compile(pattern, re.IGNORECASE), named) for attr, pattern, named in _FACT_PATTERNS
]
# a sentence that wonders, plans or supposes says nothing about the current value
_HEDGES = frozenset(
    _split(
        """if might maybe perhaps thinking considering would could should wish hope hoping
        planning plan wondering dream someday whether unless"""
    )
)
# capitalised words that name a time, not a place or an employer ("I start Monday")
_NOT_NAMES = frozenset(
    _split(
        """monday tuesday wednesday thursday friday saturday sunday january february march
        april may june july august september october november december i the a an my our"""
    )
)
_SENTENCE = re.compile(r"[^.!?]+[.!?]*")


def fact_key(text: str, speaker: str) -> tuple[str, str] | None:
    """The ``(subject, attribute)`` of the first single-valued personal fact ``text``
    asserts, said by ``speaker`` ("Ana": "We're relocating to Toronto!" is ``("ana",
    "home")``; "My sister works at Acme." is ``("ana's sister", "employer")``); ``None``
    when it asserts none. Questions and hedged sentences ("if", "maybe", "thinking of")
    assert nothing."""
    for sentence in _SENTENCE.findall(text.replace("’", "'")):
        words = {word.lower() for word in re.findall(r"[\w']+", sentence)}
        if sentence.rstrip().endswith("?") or words & _HEDGES:
            continue
        for attribute, pattern, named in _FACTS:
            match = next(
                (
                    found
                    for found in pattern.finditer(sentence)
                    if not named or _is_name(found["obj"])
                ),
                None,
            )
            if match is None:
                continue
            value = match.groupdict().get("obj")
            if attribute == "allergy to":
                if not value:
                    continue
                attribute = f"allergy to {' '.join(value.split()[:3])}"
            who = match["who"].lower()
            subject = speaker if who in ("", "i", "we") else f"{speaker}'s {who.split()[1]}"
            return (subject.casefold(), attribute)
    return None


def _is_name(word: str | None) -> bool:
    return word is not None and word[:1].isupper() and word.lower() not in _NOT_NAMES


# the words a question about an attribute asks with ("where does Ana live?", "who does
# she work for?"): a note stating the attribute's value gets them as topics
_ATTRIBUTE_TOPICS = {
    "home": ("home", "lives"),
    "employer": ("job", "work", "employer"),
    "occupation": ("job", "work"),
    "car": ("vehicle", "car", "drives"),
    "diet": ("diet", "food", "eats"),
}


def fact_topics(attribute: str) -> tuple[str, ...]:
    """The words a question about ``attribute`` asks with, for the topics of a note that
    states its value."""
    if attribute.startswith("allergy to "):
        return ("allergy", "food")
    return _ATTRIBUTE_TOPICS.get(attribute, ())


# The words a question asks for an attribute with, as written ("Who does Ana work for
# now?", "Where is she living?", "What vehicle does he have?"): the attribute's own name,
# its common synonyms and the verbs that ask for its value. A question about a job asks
# about an employer and an occupation alike, since one statement usually tells both
# ("I'm joining Acme as a nurse"). "City" is not among them: "which city did she fly
# to?" asks about a trip as often as a home.
ASKED_WITH: dict[str, tuple[str, ...]] = {
    "home": tuple(
        _split(
            """home live lives living lived reside resides residing resident hometown
            address based relocate relocated relocating move moved moving"""
        )
    ),
    "employer": tuple(
        _split(
            """employer employers company companies employed hired hire workplace firm
            work works working worked job jobs position role career"""
        )
    ),
    "occupation": tuple(
        _split(
            """occupation occupations profession job jobs position role career title
            work works working worked"""
        )
    ),
    "car": tuple(_split("car cars vehicle vehicles drive drives driving drove automobile")),
    "diet": tuple(
        _split("diet diets eat eats eating ate meat vegetarian vegan food foods meal meals")
    ),
    "allergy": tuple(_split("allergy allergies allergic ingredient ingredients")),
}
