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
(:func:`statekeeper.memory._lexical.stem`), so "relocated" finds "relocate".
"""

from __future__ import annotations

from collections.abc import Iterable

from statekeeper.memory._lexical import stem

__all__ = ["concept_tags"]

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
