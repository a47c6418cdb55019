"""Generate the multi-session conversation datasets of ``statekeeper memory eval``.

Two splits, each deterministic: ``dev`` (for tuning the pipeline) and ``test`` (held out:
reported on, never tuned on). They differ in their random seed and in their vocabulary:
every list of names, employers, cities, pets, foods, hobbies, cars, small-talk topics,
greetings and question wordings is cut in two halves, one per split, so nothing tuned on
the words of ``dev`` can carry over to ``test``. The committed files are::

    .venv/bin/python benchmarks/memory/make_dataset.py --split dev > benchmarks/memory/dev.json
    .venv/bin/python benchmarks/memory/make_dataset.py --split test > benchmarks/memory/test.json

Each conversation is a user (one persona) chatting with an assistant over several sessions
weeks apart. Most turns are small talk; among them the user mentions facts about their
life (a pet, a job, a sibling, a move, a hobby...), some of which change later (a new job,
a new city, a new car). Other people's pets, jobs and cities come up too, as distractors.

Questions are written the way a person would ask them, not with the words of the message
that answers them:

* ``single-hop``: one fact, paraphrased;
* ``multi-hop``: needs two messages from different sessions;
* ``temporal``: when something happened (answered by the session time), or what happened
  in a given month;
* ``knowledge-update``: the current value of a fact that changed;
* ``no-answer``: plausible, but never said in the conversation (``evidence`` is empty).

Evidence is the messages that hold the answer: the user's message, and the assistant's
reply too when it restates the answer.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

SPLITS = {"dev": (0, 20240508), "test": (1, 20240917)}  # split -> (half, seed)
ASSISTANT = "Assistant"
PERSONAS = [  # even entries are dev's, odd entries test's
    ("Ana", "she", "her"),
    ("Grace", "she", "her"),
    ("Marcus", "he", "his"),
    ("Ravi", "he", "his"),
    ("Priya", "she", "her"),
    ("Sofia", "she", "her"),
    ("Tomás", "he", "his"),
    ("Kwame", "he", "his"),
    ("Yuki", "she", "her"),
    ("Hannah", "she", "her"),
    ("Daniel", "he", "his"),
    ("Mateo", "he", "his"),
    ("Leila", "she", "her"),
    ("Ingrid", "she", "her"),
    ("Owen", "he", "his"),
    ("Jun", "he", "his"),
]


def half(options: list[T], split: int) -> list[T]:
    """The split's half of a vocabulary list: even entries for dev, odd ones for test."""
    return options[split::2]


@dataclass
class Turn:
    """A user message and the assistant's reply; ``evidence`` says which of the two
    (``"u"``, ``"a"``) hold the answer to the fact's questions."""

    user: str
    assistant: str
    evidence: str = "u"


@dataclass
class Event:
    key: str
    turns: list[Turn]


@dataclass
class Fact:
    """Events in chronological order, and questions naming the events that answer them
    (``"{date:key}"`` / ``"{month:key}"`` in a text become the session date or month)."""

    events: list[Event]
    questions: list[tuple[str, str, str, list[str]]] = field(default_factory=list)
    # (category, question, answer, evidence): evidence names events ("adopt"), an event's
    # later turn ("offer.1") or one message of a turn ("adopt/u": the user's only)


@dataclass
class Persona:
    name: str
    subj: str
    poss: str
    rng: random.Random
    split: int  # 0 dev, 1 test: which half of every vocabulary list this persona uses
    absent: set[str] = field(default_factory=set)  # fact kinds never mentioned

    def pick(self, options: list[Any]) -> Any:
        """One entry of the split's half of ``options`` (a wording or a vocabulary list)."""
        return self.rng.choice(half(options, self.split))

    def sample(self, options: list[Any], n: int) -> list[Any]:
        """``n`` distinct entries of the split's half of ``options``."""
        return self.rng.sample(half(options, self.split), n)


HOME_CITIES = [
    "Lisbon", "Rotterdam", "Denver", "Porto", "Toronto", "Glasgow",
    "Edinburgh", "Minneapolis", "Austin", "Nagoya", "Osaka", "Adelaide",
]  # fmt: skip
FAR_CITIES = [
    "Montreal", "Vancouver", "Dublin", "Munich", "Valencia", "Cape Town",
    "Seattle", "Santiago", "Melbourne", "Helsinki",
]  # fmt: skip
FIRMS = [
    "Northwind Logistics", "Pinecrest Insurance", "Brightpath Health", "Harbor & Finch",
    "Lumen Studio", "Bluefield Energy", "Crescent Bank", "Orchard Robotics",
    "Tidewater Labs", "Silverline Media", "Quarry Systems", "Maple Street Clinic",
]  # fmt: skip


def pet(p: Persona) -> Fact:
    breed, species, young = p.pick(
        [
            ("beagle", "dog", "puppy"),
            ("golden retriever", "dog", "puppy"),
            ("Maine Coon", "cat", "kitten"),
            ("Siamese", "cat", "kitten"),
            ("border collie", "dog", "puppy"),
            ("labrador", "dog", "puppy"),
            ("ragdoll", "cat", "kitten"),
            ("Persian", "cat", "kitten"),
        ]
    )
    name = p.pick(
        ["Biscuit", "Noodle", "Pepper", "Clementine", "Mochi", "Bruno", "Juniper", "Tofu",
         "Waffles", "Pickles", "Olive", "Rocket", "Ziggy", "Bean"]
    )  # fmt: skip
    p.absent.add("cat" if species == "dog" else "dog")
    pronoun = "him" if species == "dog" else "her"
    adopt = Event(
        "adopt",
        [
            Turn(
                p.pick(
                    [
                        f"Big news: we adopted a {breed} {young} from the shelter on Saturday! "
                        f"We're calling {pronoun} {name}.",
                        f"So I caved and brought home a little {breed} {young} from the shelter. "
                        f"Meet {name}, who already owns the couch.",
                    ]
                ),
                f"Congratulations! A {breed} is a wonderful companion. How is {name} settling "
                "in so far?",
                "ua",
            ),
            Turn(
                f"Mostly sleeping and chewing on everything. {name} cried the first night "
                "but was fine after that.",
                "That's very normal for the first few nights. A warm blanket can help.",
                "",
            ),
        ],
    )
    vet = Event(
        "vet",
        [
            Turn(
                p.pick(
                    [
                        f"Rough evening. {name} swallowed part of a sock and we ended up at the "
                        "emergency vet until midnight.",
                        f"Long night: {name} ate a hair tie and we spent four hours at the "
                        "animal clinic.",
                    ]
                ),
                "Oh no, that sounds scary. Is everything okay now?",
            ),
            Turn(
                "Yes, they got it out without surgery. Expensive lesson though.",
                "I'm glad it ended well. Maybe keep the laundry basket up high for a while.",
                "",
            ),
        ],
    )
    return Fact(
        [adopt, vet],
        [
            (
                "single-hop",
                p.pick(
                    [
                        f"What breed is {p.name}'s {species}?",
                        f"What kind of {species} did {p.name} get?",
                    ]
                ),
                breed,
                ["adopt"],
            ),
            (
                "single-hop",
                p.pick(
                    [
                        f"Where did {p.name} get the new {species} from?",
                        f"Which place did {p.name}'s {species} come from?",
                    ]
                ),
                "the shelter",
                ["adopt/u"],
            ),
            (
                "temporal",
                p.pick(
                    [
                        f"When did {name} join {p.name}'s household?",
                        f"When did {p.name} take {name} in?",
                    ]
                ),
                "{date:adopt}",
                ["adopt"],
            ),
            (
                "multi-hop",
                p.pick(
                    [
                        f"What breed is the animal {p.name} rushed to the animal hospital?",
                        f"What breed is the pet that {p.name} took for emergency treatment?",
                    ]
                ),
                breed,
                ["vet", "adopt"],
            ),
            (
                "temporal",
                p.pick(
                    [
                        f"Which month did {p.name}'s pet need emergency care?",
                        f"In what month did {p.name}'s animal have a medical scare?",
                    ]
                ),
                "{month:vet}",
                ["vet"],
            ),
        ],
    )


def job(p: Persona) -> Fact:
    roles = [
        "data analyst", "physiotherapist", "pediatric nurse", "software developer",
        "UX designer", "chemistry teacher", "civil engineer", "product manager",
    ]  # fmt: skip
    role, role2 = p.sample(roles, 2)
    company, company2 = p.sample(FIRMS, 2)
    offer = Event(
        "offer",
        [
            Turn(
                p.pick(
                    [
                        f"I signed the offer! I'm starting as a {role} at {company} on the "
                        "first of the month.",
                        f"It's official: {company} hired me as their new {role}, I start in "
                        "two weeks.",
                    ]
                ),
                "That's fantastic, congratulations! What made you say yes?",
            ),
            Turn(
                p.pick(
                    [
                        "The team felt kind, and the commute is twenty minutes by bike.",
                        "I liked the people, and I can cycle there in about twenty minutes.",
                    ]
                ),
                "Those two things matter more than people think.",
            ),
        ],
    )
    change = Event(
        "change",
        [
            Turn(
                p.pick(
                    [
                        f"Okay, I handed in my notice at {company}. In three weeks I'm joining "
                        f"{company2} as a {role2}.",
                        f"Big change: I resigned from {company} today, and next month I start "
                        f"at {company2} as a {role2}.",
                    ]
                ),
                f"Wow, a big step. {company2} sounds like a great place to work. How do "
                "you feel about it?",
                "ua",
            ),
        ],
    )
    return Fact(
        [offer, change],
        [
            (
                "single-hop",
                p.pick(
                    [
                        f"Which employer hired {p.name} first?",
                        f"What was the first company {p.name} worked at?",
                    ]
                ),
                company,
                ["offer"],
            ),
            (
                "single-hop",
                p.pick(
                    [
                        f"How does {p.name} get to the office at {company}?",
                        f"How does {p.name} commute to {company}?",
                    ]
                ),
                "twenty minutes",
                ["offer.1"],
            ),
            (
                "knowledge-update",
                p.pick(
                    [f"Who does {p.name} work for now?", f"What is {p.name}'s current employer?"]
                ),
                company2,
                ["change"],
            ),
            (
                "multi-hop",
                p.pick(
                    [
                        f"What was {p.name}'s position before {p.subj} switched to {company2}?",
                        f"What role did {p.name} have before joining {company2}?",
                    ]
                ),
                role,
                ["offer", "change"],
            ),
            (
                "temporal",
                p.pick(
                    [
                        f"When did {p.name} resign from {company}?",
                        f"When did {p.name} quit {p.poss} job at {company}?",
                    ]
                ),
                "{date:change}",
                ["change"],
            ),
        ],
    )


def home(p: Persona) -> Fact:
    city, city2 = p.sample(HOME_CITIES, 2)
    years = p.pick(["six", "five", "eight", "four", "three", "twelve", "ten", "seven"])
    settled = Event(
        "settled",
        [
            Turn(
                p.pick(
                    [
                        f"Funny, I've been in {city} {years} years and still haven't seen the "
                        "old fort everyone talks about.",
                        f"After {years} years in {city} I still get lost in the old town, "
                        "embarrassing.",
                    ]
                ),
                "Sometimes the sights closest to home are the ones we skip!",
            )
        ],
    )
    move = Event(
        "move",
        [
            Turn(
                p.pick(
                    [
                        f"The movers come Saturday. We're officially relocating to {city2}!",
                        f"Lease signed! We're packing up and moving to {city2} at the end of "
                        "the month.",
                    ]
                ),
                f"A new city! What made you pick {city2}?",
                "ua",
            ),
            Turn(
                "Cheaper rent and my partner's family is close by.",
                "Both very good reasons. I hope the packing goes smoothly.",
                "",
            ),
        ],
    )
    return Fact(
        [settled, move],
        [
            (
                "single-hop",
                p.pick(
                    [
                        f"How long had {p.name} lived in {city}?",
                        f"How many years did {p.name} spend in {city}?",
                    ]
                ),
                f"{years} years",
                ["settled"],
            ),
            (
                "knowledge-update",
                p.pick(
                    [
                        f"Which city is {p.name} living in these days?",
                        f"Where does {p.name} live now?",
                    ]
                ),
                city2,
                ["move"],
            ),
            (
                "multi-hop",
                p.pick(
                    [
                        f"Which city did {p.name} leave when {p.subj} moved to {city2}?",
                        f"Where was {p.name} based before heading to {city2}?",
                    ]
                ),
                city,
                ["settled", "move"],
            ),
            (
                "temporal",
                p.pick(
                    [
                        f"In which month did {p.name} move house?",
                        f"What month did {p.name} relocate?",
                    ]
                ),
                "{month:move}",
                ["move"],
            ),
        ],
    )


def sibling(p: Persona) -> Fact:
    rel, pron = p.rng.choice([("sister", "she"), ("brother", "he")])
    p.absent.add("brother" if rel == "sister" else "sister")
    names = ["Maya", "Clara", "Rosa", "Amara", "Inés", "Freya"]
    name = p.pick(names if rel == "sister" else ["Leo", "Felix", "Karim", "Hugo", "Ben", "Arjun"])
    city = p.pick(FAR_CITIES)
    work = p.pick(
        ["firefighter", "veterinarian", "dentist", "translator", "architect", "chef",
         "airline pilot", "marine biologist", "journalist", "pharmacist"]
    )  # fmt: skip
    intro = Event(
        "intro",
        [
            Turn(
                p.pick(
                    [
                        f"My {rel} {name} called, {pron} finally got the {work} job {pron} "
                        f"wanted, in {city}, where {pron}'s lived since college.",
                        f"Good news from {name}, my {rel}: {pron} is now working as a {work} "
                        f"in {city}, where {pron} settled after college.",
                    ]
                ),
                f"That's lovely news for {name}! You must be proud.",
            )
        ],
    )
    trip = Event(
        "trip",
        [
            Turn(
                p.pick(
                    [
                        f"Just booked flights to see {name} for a long weekend. I haven't "
                        "visited in two years.",
                        f"Plane tickets bought! I'm going to visit {name} next month, first "
                        "time in ages.",
                    ]
                ),
                "That will be a special trip. Any plans while you're there?",
            ),
            Turn(
                "Mostly eating and walking. We want to try a cooking class together.",
                "A cooking class is a great thing to do as siblings.",
                "",
            ),
        ],
    )
    return Fact(
        [intro, trip],
        [
            (
                "single-hop",
                p.pick(
                    [
                        f"What is {p.name}'s {rel}'s occupation?",
                        f"What does {p.name}'s {rel} do for a living?",
                    ]
                ),
                work,
                ["intro"],
            ),
            (
                "multi-hop",
                p.pick(
                    [
                        f"Which city did {p.name} fly to when visiting {name}?",
                        f"Where did {p.name} travel to see {name}?",
                    ]
                ),
                city,
                ["intro", "trip"],
            ),
            (
                "temporal",
                p.pick(
                    [
                        f"When did {p.name} arrange the trip to {name}?",
                        f"When did {p.name} book the visit to {name}?",
                    ]
                ),
                "{date:trip}",
                ["trip"],
            ),
        ],
    )


def hobby(p: Persona) -> Fact:
    craft, result = p.pick(
        [
            ("pottery", "a bowl that didn't collapse"),
            ("calligraphy", "a framed poem for the hallway"),
            ("watercolor", "a painting of the harbor"),
            ("jewelry making", "a pair of silver earrings"),
            ("woodworking", "a small bookshelf"),
            ("stained glass", "a little sun catcher"),
            ("ceramics", "a set of two mugs"),
            ("bookbinding", "a leather notebook"),
        ]
    )
    start = Event(
        "start",
        [
            Turn(
                p.pick(
                    [
                        f"I enrolled in a {craft} course at the community center, Tuesday "
                        "evenings.",
                        f"Signed up for {craft} classes at the community center, every "
                        "Thursday night.",
                    ]
                ),
                "What a nice way to unwind after work! Have you tried it before?",
            )
        ],
    )
    done = Event(
        "done",
        [
            Turn(
                p.pick(
                    [
                        f"Proud moment: I finished {result} in class tonight.",
                        f"I brought home {result} from class, I'm weirdly proud.",
                    ]
                ),
                "That's a real milestone. Are you going to keep it or gift it?",
            )
        ],
    )
    return Fact(
        [start, done],
        [
            (
                "single-hop",
                p.pick(
                    [
                        f"What kind of lessons is {p.name} taking at the community center?",
                        f"What is {p.name} learning at the community center?",
                    ]
                ),
                craft,
                ["start"],
            ),
            (
                "single-hop",
                p.pick(
                    [f"What did {p.name} make in class?", f"What did {p.name} create in class?"]
                ),
                result,
                ["done"],
            ),
            (
                "temporal",
                p.pick(
                    [
                        f"Which new activity did {p.name} pick up in {{month:start}}?",
                        f"What hobby did {p.name} start in {{month:start}}?",
                    ]
                ),
                craft,
                ["start"],
            ),
        ],
    )


def food(p: Persona) -> Fact:
    allergen = p.pick(
        ["peanuts", "walnuts", "shellfish", "soy", "sesame", "mustard", "kiwi", "celery"]
    )
    allergy = Event(
        "allergy",
        [
            Turn(
                p.pick(
                    [
                        f"Quick heads-up for any recipes: I'm allergic to {allergen}.",
                        f"Before you suggest any dishes: anything with {allergen} gives me hives.",
                    ]
                ),
                f"Noted. I'll leave {allergen} out of any recipes I suggest.",
                "ua",
            )
        ],
    )
    veggie = Event(
        "veggie",
        [
            Turn(
                p.pick(
                    [
                        "Remember those steak recipes? I've gone fully vegetarian since the "
                        "documentary last month.",
                        "Small update: I stopped eating meat a few weeks ago, plants only now.",
                    ]
                ),
                "Got it, no meat from now on. Lentils and mushrooms can stand in nicely.",
                "ua",
            )
        ],
    )
    return Fact(
        [allergy, veggie],
        [
            (
                "single-hop",
                p.pick(
                    [
                        f"Which ingredient must be left out of {p.name}'s dinners?",
                        f"What should never go into a meal cooked for {p.name}?",
                    ]
                ),
                allergen,
                ["allergy"],
            ),
            (
                "knowledge-update",
                p.pick([f"Does {p.name} still eat meat?", f"Is {p.name} eating meat these days?"]),
                "no meat",
                ["veggie"],
            ),
        ],
    )


def partner(p: Persona) -> Fact:
    rel = p.rng.choice(["wife", "husband", "partner"])
    name = p.pick(
        ["Sam", "Alex", "Jordan", "Noor", "Elena", "Jamie", "Chris", "Lucia", "Mei", "Theo",
         "Rafael", "Hana"]
    )  # fmt: skip
    work = p.pick(
        ["a paramedic", "a pharmacist", "a sound engineer", "a bus driver", "a baker",
         "an electrician", "an accountant", "a librarian"]
    )  # fmt: skip
    place = p.pick(
        ["a cabin by the lake", "a treehouse in the forest", "a vineyard hotel",
         "a spa resort in the mountains", "a tiny inn on the coast", "a houseboat on the river"]
    )  # fmt: skip
    intro = Event(
        "partner",
        [
            Turn(
                p.pick(
                    [
                        f"My {rel} {name} is working nights again. Being {work} means odd hours.",
                        f"{name}, my {rel}, has early shifts all month; that's life as {work}.",
                    ]
                ),
                "Odd shifts are hard on a household. Do you get much time together?",
            )
        ],
    )
    anniversary = Event(
        "anniversary",
        [
            Turn(
                p.pick(
                    [
                        f"I booked {place} for our anniversary. {name} has no idea yet!",
                        f"Secret plan: a weekend at {place} for our anniversary, don't tell "
                        f"{name}!",
                    ]
                ),
                "What a lovely surprise. I hope the weather cooperates.",
            )
        ],
    )
    return Fact(
        [intro, anniversary],
        [
            (
                "single-hop",
                p.pick([f"What is the name of {p.name}'s {rel}?", f"Who is {p.name}'s {rel}?"]),
                name,
                ["partner"],
            ),
            (
                "single-hop",
                p.pick(
                    [
                        f"Where is {p.name} taking {name} to celebrate?",
                        f"Where will {p.name} and {name} spend their anniversary?",
                    ]
                ),
                place,
                ["anniversary"],
            ),
            (
                "multi-hop",
                p.pick(
                    [
                        f"What does the person {p.name} is surprising with a getaway do for a "
                        "living?",
                        f"What is the job of the person {p.name} planned a surprise trip for?",
                    ]
                ),
                work,
                ["anniversary", "partner"],
            ),
        ],
    )


def race(p: Persona) -> Fact:
    event, time = p.pick(
        [
            ("half marathon", "1:58"),
            ("10K", "52 minutes"),
            ("marathon", "4:21"),
            ("5K", "24 minutes"),
            ("trail run", "2:40"),
            ("ultramarathon", "9:47"),
        ]
    )
    signup = Event(
        "signup",
        [
            Turn(
                p.pick(
                    [
                        f"I registered for the autumn {event}. No backing out now.",
                        f"Paid the entry fee for the spring {event}, so I'm committed.",
                    ]
                ),
                "Exciting! Do you have a training plan yet?",
            )
        ],
    )
    finish = Event(
        "finish",
        [
            Turn(
                p.pick(
                    [
                        f"I did it!! Crossed the line in {time}. My legs are jelly.",
                        f"Finished! Official time {time}, and I can barely walk.",
                    ]
                ),
                f"{time}, that's a great result! Rest up and eat well today.",
                "ua",
            )
        ],
    )
    return Fact(
        [signup, finish],
        [
            (
                "single-hop",
                p.pick(
                    [
                        f"What running event did {p.name} sign up for?",
                        f"Which race did {p.name} enter?",
                    ]
                ),
                event,
                ["signup"],
            ),
            (
                "single-hop",
                p.pick(
                    [
                        f"What was {p.name}'s finishing time?",
                        f"How long did {p.name} take to finish?",
                    ]
                ),
                time,
                ["finish"],
            ),
            (
                "temporal",
                p.pick(
                    [f"When did {p.name} complete the race?", f"On what date did {p.name} race?"]
                ),
                "{date:finish}",
                ["finish"],
            ),
        ],
    )


def car(p: Persona) -> Fact:
    old = p.pick(
        ["old Corolla", "rusty hatchback", "ancient Volvo", "old Civic", "beat-up minivan",
         "tired Passat"]
    )  # fmt: skip
    new = p.pick(
        ["used Subaru Outback", "Mini Cooper", "Mazda CX-5", "Kia EV6", "Ford Focus",
         "Toyota RAV4", "Hyundai Ioniq", "Skoda Octavia"]
    )  # fmt: skip
    trade = Event(
        "trade",
        [
            Turn(
                p.pick(
                    [
                        f"Traded in the {old} today. We drove home in a {new}!",
                        f"Goodbye {old}, hello {new}! Picked it up from the dealer this morning.",
                    ]
                ),
                f"Enjoy the {new}! Does it feel very different to drive?",
                "ua",
            )
        ],
    )
    return Fact(
        [trade],
        [
            (
                "knowledge-update",
                p.pick(
                    [
                        f"What vehicle does {p.name} have now?",
                        f"What is {p.name} driving these days?",
                    ]
                ),
                new,
                ["trade"],
            ),
            (
                "single-hop",
                p.pick(
                    [
                        f"What did {p.name} get rid of at the dealership?",
                        f"Which car did {p.name} replace?",
                    ]
                ),
                old,
                ["trade/u"],
            ),
        ],
    )


KINDS: list[Callable[[Persona], Fact]] = [pet, job, home, sibling, hobby, food, partner, race, car]

# (the fact kind whose absence makes the question unanswerable, or "": never answerable;
# the question, worded for dev and for test)
NO_ANSWER: list[tuple[str, Callable[[Persona], list[str]]]] = [
    ("cat", lambda p: [f"What is the name of {p.name}'s cat?", f"What is {p.name}'s cat called?"]),
    ("dog", lambda p: [f"What breed is {p.name}'s dog?", f"What kind of dog does {p.name} own?"]),
    (
        "brother",
        lambda p: [
            f"What does {p.name}'s brother do for work?",
            f"Where does {p.name}'s brother work?",
        ],
    ),
    (
        "sister",
        lambda p: [f"Where does {p.name}'s sister live?", f"Which city is {p.name}'s sister in?"],
    ),
    (
        "",
        lambda p: [f"Where did {p.name} go to university?", f"Which college did {p.name} attend?"],
    ),
    ("", lambda p: [f"How much does {p.name} earn per year?", f"What is {p.name}'s salary?"]),
    (
        "",
        lambda p: [
            f"Which band did {p.name} see in concert?",
            f"What concert did {p.name} go to?",
        ],
    ),
    (
        "",
        lambda p: [
            f"How many languages does {p.name} speak?",
            f"Which languages can {p.name} speak?",
        ],
    ),
    (
        "",
        lambda p: [f"What is {p.name}'s favorite color?", f"Which color does {p.name} like best?"],
    ),
    ("", lambda p: [f"What did {p.name} study in school?", f"What was {p.name}'s major?"]),
    ("car", lambda p: [f"What color is {p.name}'s car?", f"What car brand does {p.name} drive?"]),
]

GREETINGS = [
    ("Hey, it's me again.", "Hi {name}! Good to hear from you. What's new?"),
    ("Good afternoon! Do you have a sec?", "Good afternoon, {name}! Sure, what's happening?"),
    ("Morning! Got a minute?", "Always. Good morning, {name}. What's on your mind?"),
    ("Yo, I'm around again.", "Hey {name}, welcome back! What's been going on?"),
    ("Hi there, long week.", "Hello {name}! Sounds like it. Want to talk it through?"),
    ("Hiya! Quick catch-up?", "Hi {name}! Happy to. How are you?"),
    ("Evening! I'm back.", "Welcome back, {name}. How has your week been?"),
    ("Hello hello. Quick chat?", "Of course, {name}. What's up?"),
    ("Hi! Finally some free time.", "Nice to see you, {name}. How are things?"),
    ("Hey. {mood}", "Hi {name}. Tell me about it."),
]
CLOSINGS = [
    ("Okay, I need to run. Talk soon!", "Take care, {name}! Talk soon."),
    ("Logging off now, bye!", "Bye {name}, speak soon."),
    ("That's all for today, thanks.", "Anytime. Have a good evening!"),
    ("I'll let you go, cheers.", "Cheers, {name}! Have a nice evening."),
    ("Going to bed, thanks for listening.", "Sleep well, {name}."),
    ("Okay, that's me done for tonight.", "Good night, {name}!"),
    ("Dinner's ready, gotta go.", "Enjoy your meal, {name}!"),
    ("Have to pick up the kids, later!", "See you later, {name}!"),
    ("Alright, back to work for me.", "Good luck with the rest of the day."),
    ("Thanks for the chat, see you soon.", "Always a pleasure. See you, {name}."),
]

SMALL_TALK = [
    (
        "It's been {weather} all week and I'm running out of indoor ideas.",
        "Board games, a new recipe, or a long movie marathon could help.",
    ),
    (
        "I made {dish} for dinner {when} and it turned out better than expected.",
        "Nice! Cooking something new and having it work is very satisfying.",
    ),
    (
        "Work was chaos {when}, {count} meetings back to back.",
        "That's draining. Did you get any time to yourself afterwards?",
    ),
    (
        "I watched a documentary about {topic} {when}, fascinating stuff.",
        "Documentaries are a great rabbit hole. What surprised you most?",
    ),
    (
        "I can't decide whether to paint the {room} {color} or leave it white.",
        "{color} could be warm and cozy. Maybe try a sample patch first?",
    ),
    (
        "The neighbors' kid is learning the {instrument}. Every single evening.",
        "Oof. Noise-cancelling headphones might be a worthy investment.",
    ),
    (
        "Do you have a good tip for falling asleep faster?",
        "A cool room, no screens for half an hour, and the same bedtime every night.",
    ),
    (
        "I finally cleaned out the {storage} and found my old {oldthing}.",
        "Ha, what are you going to do with it?",
    ),
    (
        "Thinking about making {dish} this weekend, any advice?",
        "Prep everything before you start and taste as you go.",
    ),
    (
        "My phone screen cracked again, {count} times this year.",
        "A sturdier case might pay for itself at that rate.",
    ),
    (
        "Spent the afternoon at the farmers market, the {fruit} were amazing.",
        "Fresh {fruit} in season are hard to beat.",
    ),
    (
        "I keep forgetting to drink water during the day.",
        "A bottle on your desk and a reminder on your phone can help build the habit.",
    ),
    (
        "Any book recommendations? I just finished a {genre} novel.",
        "If you liked that one, a classic from the same shelf could be fun next.",
    ),
    (
        "Traffic was terrible {when}, {minutes} minutes to get downtown.",
        "That's frustrating. A podcast can make the wait less painful.",
    ),
    (
        "I'm trying to spend less time on my phone before bed.",
        "Keeping it charging in another room is a simple trick that works.",
    ),
    (
        "The weather was gorgeous {when} so I ate lunch in the {outdoors}.",
        "Lunch outside always feels like a small holiday.",
    ),
    (
        "I reorganized my desk and somehow I'm more productive.",
        "A tidy space really can clear the head.",
    ),
    (
        "Do you think {topic} is overrated?",
        "Opinions differ a lot on {topic}; what made you wonder?",
    ),
    (
        "I tried a new coffee place near the {landmark}, pretty good.",
        "Always nice to find a reliable coffee spot.",
    ),
    (
        "My {plant} is not doing well, the leaves are turning yellow.",
        "Yellow leaves often mean too much water. Let the soil dry out a bit.",
    ),
    (
        "We had friends over for {dish} and stayed up way too late.",
        "Those evenings are worth the tired morning after.",
    ),
    (
        "I'm so behind on emails, {count} dozen unread.",
        "Try answering the quick ones first; the pile shrinks fast.",
    ),
    (
        "There was a power cut for {count} hours {when}.",
        "Candlelight evenings can be oddly peaceful, at least for a while.",
    ),
    (
        "I've started walking to the {shop} instead of driving.",
        "Small walks add up, and they clear the head too.",
    ),
    (
        "The new season of that {tvshow} is out.",
        "Those shows are great background for a lazy evening.",
    ),
    (
        "I'm thinking of learning a few words of {language}.",
        "{language} is a lovely language to start with. Apps can make it a daily habit.",
    ),
    (
        "My {bodypart} hurts from sitting all day.",
        "Standing up every hour and a few stretches can make a real difference.",
    ),
    (
        "We finally fixed the {fixture} in the {room}.",
        "Satisfying! One less thing on the list.",
    ),
    (
        "I burned the {breakfast} {when}, classic.",
        "Some days start like that. Hopefully the rest went better.",
    ),
    (
        "It's my turn to host the book club, slightly nervous.",
        "Good snacks and one or two questions ready, and it will go fine.",
    ),
    (
        "I finally tried that {dish} recipe you mentioned, it was a hit.",
        "So glad it worked out! Did you change anything?",
    ),
    (
        "Our building's elevator has been broken for {count} days.",
        "Stairs every day is a workout nobody asked for.",
    ),
    (
        "I signed up for a newsletter about {topic} and now I read it every morning.",
        "A good newsletter is a nice morning ritual.",
    ),
    (
        "Somebody at work brought homemade {baked} {when}.",
        "That person deserves a raise.",
    ),
    (
        "The heating is acting up again, the flat is freezing.",
        "Worth calling the landlord before it gets colder.",
    ),
    (
        "I spent way too long choosing a new pair of {clothes}.",
        "Good {clothes} matter more than people think.",
    ),
    (
        "We watched an old {genre} movie {when}, still holds up.",
        "Some classics really do age well.",
    ),
    (
        "My sleep schedule is a mess after the long weekend.",
        "An early walk in daylight can help reset it.",
    ),
    (
        "I've been listening to a lot of {music} while working.",
        "Music without lyrics is great for focus.",
    ),
    (
        "The grocery store reorganized all the aisles, I couldn't find the {grocery}.",
        "Why do they always move the things you need most?",
    ),
    (
        "I cooked way too much {dish}, we'll be eating it all week.",
        "Leftovers are a gift to your future self.",
    ),
    (
        "A {bird} has been building a nest on our balcony.",
        "How lovely! You'll have a front-row seat when the chicks hatch.",
    ),
    (
        "I finally backed up all my photos, what a relief.",
        "Future you will be grateful for that.",
    ),
    (
        "I got a parking ticket {when}, totally my fault.",
        "Annoying, but at least it's a lesson learned.",
    ),
    (
        "Trying to get into podcasts, any genre you'd recommend?",
        "History and science storytelling shows are easy to start with.",
    ),
    (
        "The laptop fan sounds like a jet engine {when}.",
        "Maybe it needs a cleaning, dust builds up fast.",
    ),
    (
        "I went to bed at nine {when} and feel like a new person.",
        "Nothing beats a proper night of sleep.",
    ),
    (
        "I can't stop thinking about that {topic} article I read.",
        "Sounds like it struck a chord. What stayed with you?",
    ),
    (
        "Our street is having a yard sale on {day}.",
        "Perfect excuse to clear out a few things.",
    ),
    (
        "I'm trying to eat more vegetables, but I keep buying {snack}.",
        "Keeping cut vegetables at eye level in the fridge helps.",
    ),
    (
        "It snowed a little {when}, just enough to look pretty.",
        "The best kind of snow: pretty and gone by lunch.",
    ),
    (
        "I dropped my {item} down the drain, don't ask.",
        "Oh no! I hope you had a spare.",
    ),
    (
        "Our team is doing a {game} competition on {day}.",
        "Fun! Are you the competitive type?",
    ),
    (
        "I reorganized the spice rack alphabetically, it's very calming.",
        "An alphabetized spice rack is a small joy.",
    ),
    (
        "The new bus route saves me {minutes} minutes each way.",
        "That adds up quickly over a week.",
    ),
    (
        "{friend} and I had a long phone call {when}, we hadn't talked in ages.",
        "Those catch-up calls are the best. How is {friend} doing?",
    ),
    (
        "I found a great little {shop} around the corner.",
        "A good neighborhood {shop} is a treasure.",
    ),
    (
        "My {relative} sent me a box of {baked}, what a treat.",
        "That's so sweet of them. Did you save any?",
    ),
    (
        "I'm finally fixing my bike, the chain kept slipping.",
        "A bit of oil and tension usually does it. Good luck!",
    ),
    (
        "Did a big {store} run {when}, the fridge is full again.",
        "A full fridge is very satisfying.",
    ),
]
SLOTS = {  # each list is halved: even entries for dev, odd entries for test
    "dish": ["lasagna", "a lentil stew", "a Thai curry", "shakshuka", "homemade pizza",
             "dumplings", "mushroom risotto", "paella", "tacos", "chili", "ramen", "falafel"],
    "topic": ["octopuses", "glaciers", "deep sea mining", "medieval castles", "the history of jazz",
              "ant colonies", "bees", "black holes", "volcanoes", "the silk road"],
    "color": ["sage green", "charcoal grey", "terracotta", "ochre", "navy blue", "lavender",
              "mustard yellow", "teal", "pale pink", "cream"],
    "language": ["Italian", "Swedish", "Japanese", "Turkish", "Portuguese", "Dutch", "Greek",
                 "Polish", "Korean", "Hindi"],
    "genre": ["western", "horror", "science fiction", "romance", "noir", "spy", "musical",
              "historical", "mystery", "comedy", "fantasy", "war"],
    "when": ["today", "yesterday", "this morning", "last night", "on Monday", "on Sunday",
             "on Tuesday", "on Saturday"],
    "day": ["Saturday", "Sunday", "Friday", "Thursday"],
    "weather": ["raining", "foggy", "windy", "humid", "grey", "icy", "freezing", "muggy",
                "stormy", "drizzly"],
    "count": ["two", "three", "four", "five", "six", "seven"],
    "minutes": ["ten", "fifteen", "forty", "fifty", "twenty", "thirty"],
    "room": ["kitchen", "hallway", "bedroom", "bathroom", "living room", "study"],
    "instrument": ["trumpet", "drums", "violin", "recorder", "saxophone", "accordion"],
    "storage": ["garage", "attic", "basement", "hall closet", "shed", "loft"],
    "oldthing": ["skateboard", "guitar", "roller skates", "camera", "game console", "walkman"],
    "fruit": ["strawberries", "peaches", "cherries", "apricots", "plums", "figs"],
    "outdoors": ["park", "courtyard", "garden", "square", "botanical garden", "plaza"],
    "landmark": ["station", "library", "office", "river", "cathedral", "museum"],
    "plant": ["fern", "basil plant", "fiddle leaf fig", "monstera", "orchid", "rubber plant"],
    "shop": ["bakery", "bookshop", "cheese shop", "flower stall", "deli", "record store"],
    "tvshow": ["cooking competition", "baking show", "true crime series", "quiz show",
               "nature documentary series", "dating show"],
    "bodypart": ["back", "neck", "shoulder", "wrist"],
    "fixture": ["leaking tap", "squeaky door", "wobbly shelf", "broken blind", "loose handle",
                "flickering light"],
    "breakfast": ["toast", "pancakes", "porridge", "waffles"],
    "baked": ["cinnamon rolls", "brownies", "lemon cake", "cookies", "banana bread",
              "muffins"],
    "clothes": ["running socks", "winter boots", "jeans", "sneakers", "raincoat", "sweaters"],
    "music": ["film soundtracks", "lo-fi beats", "classical piano", "ambient music",
              "jazz records", "video game music"],
    "grocery": ["pasta", "rice", "coffee", "flour", "oats", "tea"],
    "bird": ["pigeon", "blackbird", "sparrow", "robin"],
    "snack": ["chips", "chocolate", "cookies", "gummy bears"],
    "item": ["keys", "earring", "sunglasses", "ring"],
    "game": ["puzzle", "trivia", "chess", "darts"],
    "friend": ["Jo", "Sasha", "Nico", "Ruth", "Dev", "Imke"],
    "relative": ["aunt", "grandmother", "uncle", "godmother"],
    "store": ["grocery", "market", "supermarket", "corner shop"],
    "mood": ["Tired but okay.", "Good day today!", "Bit of a rough week.", "Not bad at all."],
}  # fmt: skip
DISTRACTORS = [
    (
        "My coworker adopted a {breed} {young} too, we keep swapping photos.",
        "A photo exchange sounds adorable.",
    ),
    (
        "A friend of mine is moving to {city} next month, I'm a little jealous.",
        "{city} sounds like an adventure. You could visit!",
    ),
    (
        "My cousin got a job offer at {company} but turned it down.",
        "Turning down an offer takes confidence.",
    ),
    (
        "Our neighbor runs a marathon every spring, he says the first one is the hardest.",
        "That sounds about right; the first one is a big unknown.",
    ),
    (
        "My friend's sister is an airline pilot, she flies to {city} every week.",
        "What a job! Lots of time in different cities.",
    ),
    (
        "A colleague is allergic to cats, so our team meetups are always at cafés.",
        "Cafés are a good neutral choice anyway.",
    ),
    (
        "I saw a poster for evening painting classes at the library, not for me though.",
        "Fair enough, not every hobby clicks.",
    ),
    (
        "My boss just bought an electric car and won't stop talking about it.",
        "New car excitement is hard to contain!",
    ),
]
OTHER_BREEDS = ["dachshund", "poodle", "tabby", "corgi", "schnauzer", "sphynx"]


def distractor_slots(split: int) -> dict[str, list[str]]:
    """The distractors' fillers: the split's own cities and employers, so that other
    people's news mentions the same kinds of names as the user's."""
    return {
        "breed": half(OTHER_BREEDS, split),
        "young": ["puppy", "kitten"],
        "city": half(HOME_CITIES, split) + half(FAR_CITIES, split),
        "company": half(FIRMS, split),
    }


def fill(pair: tuple[str, str], rng: random.Random, slots: dict[str, list[str]], name: str) -> Turn:
    """A small-talk turn: ``pair`` with each ``{slot}`` filled the same way in both texts."""
    chosen = {slot: rng.choice(options) for slot, options in slots.items()}
    user, assistant = (text.format(**chosen, name=name) for text in pair)
    return Turn(user[0].upper() + user[1:], assistant[0].upper() + assistant[1:], "")


Block = list[tuple[str | None, Turn]]  # turns kept together; the event each belongs to

# Ways to lead into and follow up on small talk, so a topic that comes up twice in a
# conversation is rarely worded twice the same way.
LEAD_INS = [
    "", "", "", "", "", "", "Anyway, ", "Oh, ", "So, ", "Random thought: ", "Also, ",
    "Honestly, ", "By the way, ", "Okay so, ",
]  # fmt: skip
FOLLOW_UPS = [
    "",
    "",
    "",
    "",
    "",
    "",
    " How was the rest of your day?",
    " Anything fun planned for the weekend?",
    " How are you feeling otherwise?",
    " Let me know how it goes.",
    " Small things like that add up.",
    " I'm curious what you end up doing.",
    " Keep me posted.",
    " Anything else on your mind today?",
]


@dataclass(frozen=True)
class Vocabulary:
    """The split's halves of every small-talk list."""

    small_talk: list[tuple[str, str]]
    slots: dict[str, list[str]]
    distractors: list[tuple[str, str]]
    distractor_slots: dict[str, list[str]]
    greetings: list[tuple[str, str]]
    closings: list[tuple[str, str]]
    lead_ins: list[str]
    follow_ups: list[str]

    @classmethod
    def of(cls, split: int) -> Vocabulary:
        return cls(
            small_talk=half(SMALL_TALK, split),
            slots={slot: half(options, split) for slot, options in SLOTS.items()},
            distractors=half(DISTRACTORS, split),
            distractor_slots=distractor_slots(split),
            greetings=half(GREETINGS, split),
            closings=half(CLOSINGS, split),
            lead_ins=half(LEAD_INS, split),
            follow_ups=half(FOLLOW_UPS, split),
        )


def chat(pair: tuple[str, str], rng: random.Random, name: str, vocab: Vocabulary) -> Turn:
    """A small-talk turn: ``pair`` filled, maybe with a lead-in and a follow-up."""
    turn = fill(pair, rng, vocab.slots, name)
    lead = rng.choice(vocab.lead_ins)
    user = lead + turn.user[0].lower() + turn.user[1:] if lead else turn.user
    return Turn(user, turn.assistant + rng.choice(vocab.follow_ups), "")


def conversation(
    index: int, rng: random.Random, split: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Conversation number ``index`` of the split and the questions about it."""
    cid = f"c{index + 1}"
    personas = half(PERSONAS, split)
    persona = Persona(*personas[index % len(personas)], rng, split)
    facts = life_facts(persona, rng)
    plan = plan_sessions(facts, rng)
    transcript = Transcript(persona, Vocabulary.of(split), rng)
    transcript.write(plan)
    questions = fact_questions(cid, facts, transcript) + no_answer_questions(cid, persona, rng)
    rng.shuffle(questions)
    for q, asked in enumerate(questions, 1):
        asked["id"] = f"{cid}-q{q}"
    return {"id": cid, "sessions": transcript.sessions}, questions


# The steps of ``conversation``, in the order they draw from its random generator (the
# order fixes the committed datasets: keep it).


def life_facts(persona: Persona, rng: random.Random) -> list[Fact]:
    """Six to eight facts of the persona's life, each of another kind; a pet or a sibling
    never mentioned is marked absent, for the no-answer questions."""
    kinds = rng.sample(KINDS, rng.randint(6, 8))
    if pet not in kinds:
        persona.absent |= {"cat", "dog"}
    if sibling not in kinds:
        persona.absent |= {"brother", "sister"}
    return [kind(persona) for kind in kinds]


def plan_sessions(facts: list[Fact], rng: random.Random) -> list[list[Block]]:
    """Four to eight sessions, each with the blocks of the fact events said in it (the
    events of one fact in distinct sessions, in their order)."""
    n_sessions = rng.randint(4, 8)
    plan: list[list[Block]] = [[] for _ in range(n_sessions)]
    for f, fact in enumerate(facts):
        at = sorted(rng.sample(range(n_sessions), len(fact.events)))
        for event, s in zip(fact.events, at, strict=True):
            # a follow-up turn is "key.1", "key.2"... so a question can name it alone
            refs = [f"{f}:{event.key}" + (f".{i}" if i else "") for i in range(len(event.turns))]
            plan[s].append(list(zip(refs, event.turns, strict=True)))
    return plan


@dataclass
class Transcript:
    """The sessions of one conversation as they are written, and for each fact event
    (``"fact:event"``, or ``"fact:event.turn"``) the session time it was said at and the
    ids of the messages that are its evidence."""

    persona: Persona
    vocab: Vocabulary
    rng: random.Random
    sessions: list[dict[str, Any]] = field(default_factory=list)
    evidence: dict[str, list[str]] = field(default_factory=dict)  # also "<ref>/u", "<ref>/a"
    when: dict[str, datetime.datetime] = field(default_factory=dict)
    count: int = 0  # messages so far: the next id is m<count + 1>
    deck: list[tuple[str, str]] = field(default_factory=list)  # small talk not used yet

    def write(self, plan: list[list[Block]]) -> None:
        """The sessions of ``plan``, days to weeks apart, from a time in early 2024."""
        rng = self.rng
        time = datetime.datetime(2024, rng.randint(1, 3), rng.randint(1, 28), rng.randint(8, 21))
        time += datetime.timedelta(minutes=rng.randint(0, 59))
        for s, blocks in enumerate(plan):
            turns = self.session_turns(blocks)
            messages = [message for ref, turn in turns for message in self.said(ref, turn, time)]
            self.sessions.append(
                {"id": f"s{s + 1}", "time": time.isoformat(), "messages": messages}
            )
            time += datetime.timedelta(days=rng.randint(4, 20), minutes=rng.randint(-300, 300))

    def session_turns(self, blocks: list[Block]) -> Block:
        """A session: its fact blocks, maybe a distractor, and small talk up to 10 to 30
        turns, shuffled, between a greeting and a closing."""
        rng, vocab, name = self.rng, self.vocab, self.persona.name
        if rng.random() < 0.6:
            distractor = rng.choice(vocab.distractors)
            blocks.append([(None, fill(distractor, rng, vocab.distractor_slots, ""))])
        wanted = rng.randint(10, 30) - 2 - sum(len(block) for block in blocks)
        for _ in range(wanted):
            if not self.deck:  # small talk repeats only once every topic has come up
                self.deck = rng.sample(vocab.small_talk, len(vocab.small_talk))
            blocks.append([(None, chat(self.deck.pop(), rng, name, vocab))])
        rng.shuffle(blocks)
        opening = fill(rng.choice(vocab.greetings), rng, vocab.slots, name)
        closing = fill(rng.choice(vocab.closings), rng, vocab.slots, name)
        return [(None, opening), *(item for block in blocks for item in block), (None, closing)]

    def said(self, ref: str | None, turn: Turn, time: datetime.datetime) -> list[dict[str, Any]]:
        """The user's and the assistant's message of ``turn``; for a fact event's turn
        (``ref``), also when it was said and which of the two are evidence."""
        messages = []
        for role, speaker, text, flag in (
            ("user", self.persona.name, turn.user, "u"),
            ("assistant", ASSISTANT, turn.assistant, "a"),
        ):
            self.count += 1
            mid = f"m{self.count}"
            messages.append({"id": mid, "speaker": speaker, "role": role, "text": text})
            if ref is not None:
                self.when[ref] = time
                if flag in turn.evidence:
                    self.evidence.setdefault(ref, []).append(mid)
                    self.evidence[f"{ref}/{flag}"] = [mid]
        return messages


def render(text: str, f: int, when: dict[str, datetime.datetime]) -> str:
    """``text`` with the ``{date:key}`` and ``{month:key}`` of fact ``f``'s events filled
    in from when they were said."""
    for key_ref, moment in when.items():
        fact, key = key_ref.split(":")
        if int(fact) == f:
            text = text.replace(f"{{date:{key}}}", f"around {moment.day} {moment:%B %Y}")
            text = text.replace(f"{{month:{key}}}", f"{moment:%B %Y}")
    return text


def fact_questions(cid: str, facts: list[Fact], transcript: Transcript) -> list[dict[str, Any]]:
    """Every fact's questions, with the ids of their evidence messages."""
    questions: list[dict[str, Any]] = []
    for f, fact in enumerate(facts):
        for category, question, answer, keys in fact.questions:
            ids = [mid for key in keys for mid in transcript.evidence[f"{f}:{key}"]]
            questions.append(
                {
                    "conversation": cid,
                    "question": render(question, f, transcript.when),
                    "evidence": ids,
                    "category": category,
                    "answer": render(answer, f, transcript.when),
                }
            )
    return questions


def no_answer_questions(cid: str, persona: Persona, rng: random.Random) -> list[dict[str, Any]]:
    """Three to five plausible questions the conversation never answers."""
    eligible = [ask for marker, ask in NO_ANSWER if not marker or marker in persona.absent]
    return [
        {
            "conversation": cid,
            "question": ask(persona)[persona.split],
            "evidence": [],
            "category": "no-answer",
            "answer": None,
        }
        for ask in rng.sample(eligible, min(len(eligible), rng.randint(3, 5)))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=sorted(SPLITS), required=True)
    parser.add_argument("--conversations", type=int, default=8)
    args = parser.parse_args()
    split, seed = SPLITS[args.split]
    rng = random.Random(seed)
    conversations, questions = [], []
    for index in range(args.conversations):
        conv, asked = conversation(index, rng, split)
        conversations.append(conv)
        questions.extend(asked)
    dataset = {"conversations": conversations, "questions": questions}
    json.dump(dataset, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
