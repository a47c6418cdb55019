"""Generate the multi-session conversation dataset ``statekeeper memory eval`` is tuned on.

Deterministic for a given ``--seed``: the committed ``benchmarks/memory/dataset.json`` is::

    .venv/bin/python benchmarks/memory/make_dataset.py > benchmarks/memory/dataset.json

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
from typing import Any

ASSISTANT = "Assistant"
PERSONAS = [
    ("Ana", "she", "her"),
    ("Marcus", "he", "his"),
    ("Priya", "she", "her"),
    ("Tomás", "he", "his"),
    ("Yuki", "she", "her"),
    ("Daniel", "he", "his"),
    ("Leila", "she", "her"),
    ("Owen", "he", "his"),
]


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
    absent: set[str] = field(default_factory=set)  # fact kinds never mentioned

    def pick(self, options: list[Any]) -> Any:
        return self.rng.choice(options)


def pet(p: Persona) -> Fact:
    breed, species, young = p.pick(
        [
            ("beagle", "dog", "puppy"),
            ("golden retriever", "dog", "puppy"),
            ("border collie", "dog", "puppy"),
            ("Maine Coon", "cat", "kitten"),
            ("Siamese", "cat", "kitten"),
        ]
    )
    name = p.pick(["Biscuit", "Pepper", "Mochi", "Juniper", "Waffles", "Olive", "Ziggy"])
    p.absent.add("cat" if species == "dog" else "dog")
    adopt = Event(
        "adopt",
        [
            Turn(
                p.pick(
                    [
                        f"Big news: we adopted a {breed} {young} from the shelter on Saturday! "
                        f"We're calling {'him' if species == 'dog' else 'her'} {name}.",
                        f"So I caved and brought home a little {breed} {young} from the shelter. "
                        f"Her name is {name} and she already owns the couch.",
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
                f"Rough evening. {name} swallowed part of a sock and we ended up at the "
                "emergency vet until midnight.",
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
            ("single-hop", f"What breed is {p.name}'s {species}?", breed, ["adopt"]),
            (
                "single-hop",
                f"Where did {p.name} get the new {species} from?",
                "the shelter",
                ["adopt/u"],
            ),
            ("temporal", f"When did {name} join {p.name}'s household?", "{date:adopt}", ["adopt"]),
            (
                "multi-hop",
                f"What breed is the animal {p.name} rushed to the animal hospital?",
                breed,
                ["vet", "adopt"],
            ),
            (
                "temporal",
                f"Which month did {p.name}'s pet need emergency care?",
                "{month:vet}",
                ["vet"],
            ),
        ],
    )


def job(p: Persona) -> Fact:
    roles = [
        "data analyst",
        "pediatric nurse",
        "UX designer",
        "chemistry teacher",
        "civil engineer",
        "product manager",
    ]
    role, role2 = p.rng.sample(roles, 2)
    firms = ["Northwind Logistics", "Brightpath Health", "Lumen Studio", "Crescent Bank"]
    company, company2 = p.rng.sample([*firms, "Tidewater Labs", "Quarry Systems"], 2)
    offer = Event(
        "offer",
        [
            Turn(
                f"I signed the offer! I'm starting as a {role} at {company} on the first of "
                "the month.",
                "That's fantastic, congratulations! What made you say yes?",
            ),
            Turn(
                "The team felt kind, and the commute is twenty minutes by bike.",
                "Those two things matter more than people think.",
            ),
        ],
    )
    change = Event(
        "change",
        [
            Turn(
                f"Okay, I handed in my notice at {company}. In three weeks I'm joining "
                f"{company2} as a {role2}.",
                f"Wow, a big step. {company2} sounds like a great place to work. How do "
                "you feel about it?",
                "ua",
            ),
        ],
    )
    return Fact(
        [offer, change],
        [
            ("single-hop", f"Which employer hired {p.name} first?", company, ["offer"]),
            (
                "single-hop",
                f"How does {p.name} get to the office at {company}?",
                "by bike, about twenty minutes",
                ["offer.1"],
            ),
            ("knowledge-update", f"Who does {p.name} work for now?", company2, ["change"]),
            (
                "multi-hop",
                f"What was {p.name}'s position before {p.subj} switched to {company2}?",
                role,
                ["offer", "change"],
            ),
            (
                "temporal",
                f"When did {p.name} resign from {company}?",
                "{date:change}",
                ["change"],
            ),
        ],
    )


def home(p: Persona) -> Fact:
    city, city2 = p.rng.sample(["Lisbon", "Denver", "Toronto", "Edinburgh", "Austin", "Osaka"], 2)
    years = p.pick(["six", "eight", "three", "ten"])
    settled = Event(
        "settled",
        [
            Turn(
                f"Funny, I've been in {city} {years} years and still haven't seen the "
                "old fort everyone talks about.",
                "Sometimes the sights closest to home are the ones we skip!",
            )
        ],
    )
    move = Event(
        "move",
        [
            Turn(
                f"The movers come Saturday. We're officially relocating to {city2}!",
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
                f"How long had {p.name} lived in {city}?",
                f"{years} years",
                ["settled"],
            ),
            ("knowledge-update", f"Which city is {p.name} living in these days?", city2, ["move"]),
            (
                "multi-hop",
                f"Which city did {p.name} leave when {p.subj} moved to {city2}?",
                city,
                ["settled", "move"],
            ),
            ("temporal", f"In which month did {p.name} move house?", "{month:move}", ["move"]),
        ],
    )


def sibling(p: Persona) -> Fact:
    rel, pron = p.pick([("sister", "she"), ("brother", "he")])
    p.absent.add("brother" if rel == "sister" else "sister")
    name = p.pick(["Maya", "Rosa", "Inés"] if rel == "sister" else ["Leo", "Karim", "Ben"])
    city = p.pick(["Montreal", "Dublin", "Valencia", "Seattle", "Melbourne"])
    work = p.pick(["firefighter", "dentist", "architect", "airline pilot", "journalist"])
    intro = Event(
        "intro",
        [
            Turn(
                f"My {rel} {name} called, {pron} finally got the {work} job {pron} wanted, "
                f"in {city}, where {pron}'s lived since college.",
                f"That's lovely news for {name}! You must be proud.",
            )
        ],
    )
    trip = Event(
        "trip",
        [
            Turn(
                f"Just booked flights to see {name} for a long weekend. I haven't visited "
                "in two years.",
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
            ("single-hop", f"What is {p.name}'s {rel}'s occupation?", work, ["intro"]),
            (
                "multi-hop",
                f"Which city did {p.name} fly to when visiting {name}?",
                city,
                ["intro", "trip"],
            ),
            ("temporal", f"When did {p.name} arrange the trip to {name}?", "{date:trip}", ["trip"]),
        ],
    )


def hobby(p: Persona) -> Fact:
    craft, result = p.pick(
        [
            ("pottery", "a bowl that didn't collapse"),
            ("watercolor", "a painting of the harbor"),
            ("woodworking", "a small bookshelf"),
            ("ceramics", "a set of two mugs"),
        ]
    )
    start = Event(
        "start",
        [
            Turn(
                f"I enrolled in a {craft} course at the community center, Tuesday evenings.",
                "What a nice way to unwind after work! Have you tried it before?",
            )
        ],
    )
    done = Event(
        "done",
        [
            Turn(
                f"Proud moment: I finished {result} in class tonight.",
                "That's a real milestone. Are you going to keep it or gift it?",
            )
        ],
    )
    return Fact(
        [start, done],
        [
            (
                "single-hop",
                f"What kind of lessons is {p.name} taking at the community center?",
                craft,
                ["start"],
            ),
            ("single-hop", f"What did {p.name} make in class?", result, ["done"]),
            (
                "temporal",
                f"Which new activity did {p.name} pick up in {{month:start}}?",
                craft,
                ["start"],
            ),
        ],
    )


def food(p: Persona) -> Fact:
    allergen = p.pick(["peanuts", "shellfish", "sesame", "kiwi"])
    allergy = Event(
        "allergy",
        [
            Turn(
                f"Quick heads-up for any recipes: I'm allergic to {allergen}.",
                f"Noted. I'll leave {allergen} out of any recipes I suggest.",
                "ua",
            )
        ],
    )
    veggie = Event(
        "veggie",
        [
            Turn(
                "Remember those steak recipes? I've gone fully vegetarian since the "
                "documentary last month.",
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
                f"Which ingredient must be left out of {p.name}'s dinners?",
                allergen,
                ["allergy"],
            ),
            (
                "knowledge-update",
                f"Does {p.name} still eat meat?",
                "no, vegetarian now",
                ["veggie"],
            ),
        ],
    )


def partner(p: Persona) -> Fact:
    rel = p.pick(["wife", "husband", "partner"])
    name = p.pick(["Sam", "Jordan", "Elena", "Chris", "Mei", "Rafael"])
    work = p.pick(["a paramedic", "a sound engineer", "a baker", "an accountant"])
    place = p.pick(["a cabin by the lake", "a vineyard hotel", "a tiny inn on the coast"])
    intro = Event(
        "partner",
        [
            Turn(
                f"My {rel} {name} is working nights again. Being {work} means odd hours.",
                "Odd shifts are hard on a household. Do you get much time together?",
            )
        ],
    )
    anniversary = Event(
        "anniversary",
        [
            Turn(
                f"I booked {place} for our anniversary. {name} has no idea yet!",
                "What a lovely surprise. I hope the weather cooperates.",
            )
        ],
    )
    return Fact(
        [intro, anniversary],
        [
            ("single-hop", f"What is the name of {p.name}'s {rel}?", name, ["partner"]),
            (
                "single-hop",
                f"Where is {p.name} taking {name} to celebrate?",
                place,
                ["anniversary"],
            ),
            (
                "multi-hop",
                f"What does the person {p.name} is surprising with a getaway do for a living?",
                work,
                ["anniversary", "partner"],
            ),
        ],
    )


def race(p: Persona) -> Fact:
    event, time = p.pick([("half marathon", "1:58"), ("10K", "52 minutes"), ("marathon", "4:21")])
    signup = Event(
        "signup",
        [
            Turn(
                f"I registered for the autumn {event}. No backing out now.",
                "Exciting! Do you have a training plan yet?",
            )
        ],
    )
    finish = Event(
        "finish",
        [
            Turn(
                f"I did it!! Crossed the line in {time}. My legs are jelly.",
                f"{time}, that's a great result! Rest up and eat well today.",
                "ua",
            )
        ],
    )
    return Fact(
        [signup, finish],
        [
            ("single-hop", f"What running event did {p.name} sign up for?", event, ["signup"]),
            ("single-hop", f"What was {p.name}'s finishing time?", time, ["finish"]),
            ("temporal", f"When did {p.name} complete the race?", "{date:finish}", ["finish"]),
        ],
    )


def car(p: Persona) -> Fact:
    old = p.pick(["old Corolla", "rusty hatchback", "ancient Volvo"])
    new = p.pick(["used Subaru Outback", "Mini Cooper", "Mazda CX-5", "Kia EV6"])
    trade = Event(
        "trade",
        [
            Turn(
                f"Traded in the {old} today. We drove home in a {new}!",
                f"Enjoy the {new}! Does it feel very different to drive?",
                "ua",
            )
        ],
    )
    return Fact(
        [trade],
        [
            ("knowledge-update", f"What vehicle does {p.name} have now?", new, ["trade"]),
            ("single-hop", f"What did {p.name} get rid of at the dealership?", old, ["trade/u"]),
        ],
    )


KINDS: list[Callable[[Persona], Fact]] = [pet, job, home, sibling, hobby, food, partner, race, car]

NO_ANSWER: list[tuple[str, Callable[[Persona], str]]] = [
    ("cat", lambda p: f"What is the name of {p.name}'s cat?"),
    ("dog", lambda p: f"What breed is {p.name}'s dog?"),
    ("brother", lambda p: f"What does {p.name}'s brother do for work?"),
    ("sister", lambda p: f"Where does {p.name}'s sister live?"),
    ("", lambda p: f"Where did {p.name} go to university?"),
    ("", lambda p: f"How much does {p.name} earn per year?"),
    ("", lambda p: f"Which band did {p.name} see in concert?"),
    ("", lambda p: f"How many languages does {p.name} speak?"),
    ("", lambda p: f"What is {p.name}'s favorite color?"),
    ("", lambda p: f"What did {p.name} study in school?"),
    ("car", lambda p: f"What color is {p.name}'s car?"),
]

GREETINGS = [
    ("Hey, it's me again.", "Hi {name}! Good to hear from you. What's new?"),
    ("Morning! Got a minute?", "Always. Good morning, {name}. What's on your mind?"),
    ("Hi there, long week.", "Hello {name}! Sounds like it. Want to talk it through?"),
    ("Evening! I'm back.", "Welcome back, {name}. How has your week been?"),
    ("Hello hello. Quick chat?", "Of course, {name}. What's up?"),
    ("Hi! Finally some free time.", "Nice to see you, {name}. How are things?"),
    ("Hey. {mood}", "Hi {name}. Tell me about it."),
]
CLOSINGS = [
    ("Okay, I need to run. Talk soon!", "Take care, {name}! Talk soon."),
    ("That's all for today, thanks.", "Anytime. Have a good evening!"),
    ("Going to bed, thanks for listening.", "Sleep well, {name}."),
    ("Dinner's ready, gotta go.", "Enjoy your meal, {name}!"),
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
SLOTS = {
    "dish": ["lasagna", "a Thai curry", "homemade pizza", "mushroom risotto", "tacos", "ramen"],
    "topic": ["octopuses", "deep sea mining", "the history of jazz", "bees", "volcanoes"],
    "color": ["sage green", "terracotta", "navy blue", "mustard yellow", "pale pink"],
    "language": ["Italian", "Japanese", "Portuguese", "Greek", "Korean"],
    "genre": ["western", "science fiction", "noir", "musical", "mystery", "fantasy"],
    "when": ["today", "yesterday", "this morning", "last night", "on Monday", "on Sunday"],
    "day": ["Saturday", "Sunday", "Friday", "Thursday"],
    "weather": ["raining", "windy", "grey", "freezing", "stormy"],
    "count": ["two", "three", "four", "five"],
    "minutes": ["ten", "fifteen", "forty", "fifty"],
    "room": ["kitchen", "hallway", "bedroom", "bathroom"],
    "instrument": ["trumpet", "drums", "violin", "recorder"],
    "storage": ["garage", "attic", "basement", "hall closet"],
    "oldthing": ["skateboard", "guitar", "roller skates", "camera"],
    "fruit": ["strawberries", "peaches", "cherries", "apricots"],
    "outdoors": ["park", "courtyard", "garden", "square"],
    "landmark": ["station", "library", "office", "river"],
    "plant": ["fern", "basil plant", "fiddle leaf fig", "monstera"],
    "shop": ["bakery", "bookshop", "cheese shop", "flower stall"],
    "tvshow": ["cooking competition", "baking show", "true crime series", "quiz show"],
    "bodypart": ["back", "neck", "shoulder"],
    "fixture": ["leaking tap", "squeaky door", "wobbly shelf", "broken blind"],
    "breakfast": ["toast", "pancakes", "porridge"],
    "baked": ["cinnamon rolls", "brownies", "lemon cake", "cookies"],
    "clothes": ["running socks", "winter boots", "jeans", "sneakers"],
    "music": ["film soundtracks", "lo-fi beats", "classical piano", "ambient music"],
    "grocery": ["pasta", "rice", "coffee", "flour"],
    "bird": ["pigeon", "blackbird", "sparrow"],
    "snack": ["chips", "chocolate", "cookies"],
    "item": ["keys", "earring", "sunglasses"],
    "game": ["puzzle", "trivia", "chess"],
    "friend": ["Jo", "Sasha", "Nico", "Ruth"],
    "relative": ["aunt", "grandmother", "uncle"],
    "store": ["grocery", "market", "supermarket"],
    "mood": ["Tired but okay.", "Good day today!", "Bit of a rough week."],
}
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
DISTRACTOR_SLOTS = {
    "breed": ["dachshund", "poodle", "tabby", "corgi"],
    "young": ["puppy", "kitten"],
    "city": ["Lisbon", "Denver", "Montreal", "Dublin", "Osaka", "Seattle"],
    "company": ["Crescent Bank", "Lumen Studio", "Tidewater Labs", "Harbor & Finch"],
}


def fill(pair: tuple[str, str], rng: random.Random, slots: dict[str, list[str]], name: str) -> Turn:
    """A small-talk turn: ``pair`` with each ``{slot}`` filled the same way in both texts."""
    chosen = {slot: rng.choice(options) for slot, options in slots.items()}
    user, assistant = (text.format(**chosen, name=name) for text in pair)
    return Turn(user[0].upper() + user[1:], assistant[0].upper() + assistant[1:], "")


Block = list[tuple[str | None, Turn]]  # turns kept together; the event each belongs to

# Ways to lead into and follow up on small talk, so a topic that comes up twice in a
# conversation is rarely worded twice the same way.
LEAD_INS = ["", "", "", "Anyway, ", "Oh, ", "So, ", "Random thought: ", "Also, ", "Honestly, "]
FOLLOW_UPS = [
    "",
    "",
    "",
    " How was the rest of your day?",
    " Anything fun planned for the weekend?",
    " How are you feeling otherwise?",
    " Let me know how it goes.",
    " Small things like that add up.",
    " I'm curious what you end up doing.",
]


def chat(pair: tuple[str, str], rng: random.Random, name: str) -> Turn:
    """A small-talk turn: ``pair`` filled, maybe with a lead-in and a follow-up."""
    turn = fill(pair, rng, SLOTS, name)
    lead = rng.choice(LEAD_INS)
    user = lead + turn.user[0].lower() + turn.user[1:] if lead else turn.user
    return Turn(user, turn.assistant + rng.choice(FOLLOW_UPS), "")


def conversation(index: int, rng: random.Random) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Conversation number ``index`` and the questions about it."""
    cid = f"c{index + 1}"
    persona = Persona(*PERSONAS[index % len(PERSONAS)], rng)
    kinds = rng.sample(KINDS, rng.randint(6, 8))
    if pet not in kinds:
        persona.absent |= {"cat", "dog"}
    if sibling not in kinds:
        persona.absent |= {"brother", "sister"}
    facts = [kind(persona) for kind in kinds]
    n_sessions = rng.randint(4, 8)
    plan: list[list[Block]] = [[] for _ in range(n_sessions)]
    for f, fact in enumerate(facts):
        at = sorted(rng.sample(range(n_sessions), len(fact.events)))
        for event, s in zip(fact.events, at, strict=True):
            # a follow-up turn is "key.1", "key.2"... so a question can name it alone
            refs = [f"{f}:{event.key}" + (f".{i}" if i else "") for i in range(len(event.turns))]
            plan[s].append(list(zip(refs, event.turns, strict=True)))

    time = datetime.datetime(2024, rng.randint(1, 3), rng.randint(1, 28), rng.randint(8, 21))
    time += datetime.timedelta(minutes=rng.randint(0, 59))
    sessions: list[dict[str, Any]] = []
    evidence: dict[str, list[str]] = {}  # "fact:event" (or "fact:event.turn") -> message ids
    when: dict[str, datetime.datetime] = {}
    count = 0
    deck: list[tuple[str, str]] = []
    for s, blocks in enumerate(plan):
        if rng.random() < 0.6:
            blocks.append([(None, fill(rng.choice(DISTRACTORS), rng, DISTRACTOR_SLOTS, ""))])
        wanted = rng.randint(10, 30) - 2 - sum(len(block) for block in blocks)
        for _ in range(wanted):
            if not deck:  # small talk repeats only once every topic has come up
                deck = rng.sample(SMALL_TALK, len(SMALL_TALK))
            blocks.append([(None, chat(deck.pop(), rng, persona.name))])
        rng.shuffle(blocks)
        opening = fill(rng.choice(GREETINGS), rng, SLOTS, persona.name)
        closing = fill(rng.choice(CLOSINGS), rng, SLOTS, persona.name)
        turns = [(None, opening), *(item for block in blocks for item in block), (None, closing)]
        messages = []
        for ref, turn in turns:
            for role, speaker, text, flag in (
                ("user", persona.name, turn.user, "u"),
                ("assistant", ASSISTANT, turn.assistant, "a"),
            ):
                count += 1
                mid = f"m{count}"
                messages.append({"id": mid, "speaker": speaker, "role": role, "text": text})
                if ref is not None:
                    when[ref] = time
                    if flag in turn.evidence:
                        evidence.setdefault(ref, []).append(mid)
                        evidence[f"{ref}/{flag}"] = [mid]
        sessions.append({"id": f"s{s + 1}", "time": time.isoformat(), "messages": messages})
        time += datetime.timedelta(days=rng.randint(4, 20), minutes=rng.randint(-300, 300))

    def render(text: str, f: int) -> str:
        for key_ref, moment in when.items():
            fact, key = key_ref.split(":")
            if int(fact) == f:
                text = text.replace(f"{{date:{key}}}", f"around {moment.day} {moment:%B %Y}")
                text = text.replace(f"{{month:{key}}}", f"{moment:%B %Y}")
        return text

    questions: list[dict[str, Any]] = []
    for f, fact in enumerate(facts):
        for category, question, answer, keys in fact.questions:
            ids = [mid for key in keys for mid in evidence[f"{f}:{key}"]]
            questions.append(
                {
                    "conversation": cid,
                    "question": render(question, f),
                    "evidence": ids,
                    "category": category,
                    "answer": render(answer, f),
                }
            )
    eligible = [ask for marker, ask in NO_ANSWER if not marker or marker in persona.absent]
    for ask in rng.sample(eligible, min(len(eligible), rng.randint(3, 5))):
        questions.append(
            {
                "conversation": cid,
                "question": ask(persona),
                "evidence": [],
                "category": "no-answer",
                "answer": None,
            }
        )
    rng.shuffle(questions)
    for q, asked in enumerate(questions, 1):
        asked["id"] = f"{cid}-q{q}"
    return {"id": cid, "sessions": sessions}, questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=20240508)
    parser.add_argument("--conversations", type=int, default=8)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    conversations, questions = [], []
    for index in range(args.conversations):
        conv, asked = conversation(index, rng)
        conversations.append(conv)
        questions.extend(asked)
    dataset = {"conversations": conversations, "questions": questions}
    json.dump(dataset, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
