"""Concept tags: the general words a personal fact is about, for notes that never say them.

"We drove home in a Mazda CX-5!" is about a vehicle; "I'm allergic to sesame" about food
and diet. A question asks with the general word ("What vehicle does Ana have?") while the
conversation says the specific one, and a lexical index cannot bridge the two. The
extractive summarizer adds the tags of the concepts a statement mentions to its topics,
which stores index with the text. The lexicon is small, fixed and deliberately general:
the kinds of personal facts an assistant is asked to remember.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["concept_tags"]

# tags -> trigger words (lower-case; a trailing "s" of the word is ignored)
_LEXICON: dict[tuple[str, ...], str] = {
    ("vehicle", "car"): """car drove drive driving sedan hatchback suv truck van pickup
        motorbike motorcycle scooter minivan convertible tesla toyota mazda kia volvo honda
        ford bmw audi volkswagen vw hyundai nissan subaru corolla prius""",
    ("food", "diet", "ingredient"): """allergic allergy allergies intolerant intolerance
        vegan vegetarian gluten lactose dairy peanut shellfish sesame nut recipe cooking
        cook dinner meal""",
    ("pet", "animal"): """dog cat puppy kitten beagle poodle labrador retriever terrier
        parrot hamster rabbit bunny goldfish turtle tortoise""",
    ("job", "work", "career"): """job work hired promoted promotion career nurse engineer
        teacher pilot doctor lawyer developer manager office boss colleague coworker
        shift startup company employer""",
    ("home", "moving"): """moved move moving apartment flat house rent lease neighborhood
        neighbourhood relocate relocated""",
    ("family",): """sister brother mother mom mum father dad son daughter wife husband
        partner parent grandma grandpa grandmother grandfather cousin aunt uncle niece
        nephew sibling""",
    ("health",): """hospital sick injury injured surgery diagnosed therapy medication
        physio physiotherapy sprained broke fracture doctor dentist""",
    ("hobby",): """painting guitar piano violin marathon yoga climbing knitting chess
        photography hiking pottery gardening""",
    ("travel", "trip"): """trip flight flew vacation holiday visited travel traveled
        travelled abroad""",
    ("study", "education"): """course class degree university college exam studying
        school thesis""",
}
_TRIGGERS: dict[str, tuple[str, ...]] = {}
for _tags, _words in _LEXICON.items():
    for _word in _words.split():
        _TRIGGERS[_word] = _TRIGGERS.get(_word, ()) + _tags


def concept_tags(words: Iterable[str]) -> list[str]:
    """The tags of the concepts ``words`` (lower-cased) mention, in lexicon order."""
    found: set[str] = set()
    for word in words:
        found.update(_TRIGGERS.get(word, ()) or _TRIGGERS.get(word.removesuffix("s"), ()))
    return [tag for tags in _LEXICON for tag in tags if tag in found]
