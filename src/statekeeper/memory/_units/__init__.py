"""The units of memory beyond a single statement, and how recall reads a question for them.

- :mod:`.temporal` (with :mod:`.tense`): time expressions ("yesterday", "last Tuesday",
  "in March", "on the 5th") resolved against the day they were said, into the absolute
  dates a note keeps (``Note.dates``) and its topics;
- :mod:`.sessions`: one note per conversation session (who, topics, dates), with
  provenance to all of its messages, beside the statements' notes; recall finds them by
  their time, for questions asking what was said when;
- :mod:`.facts`: what fact a question asks about (whose, which attribute, now or before),
  to recall the notes keyed by that fact and the values they replaced;
- :mod:`.ranking`: which notes a recall admits and in what order (time window, fact
  asked, relevance, freshness), without repeats.

Pure functions of text, time and notes, no model, no network: the same input always
gives the same output, so notes and recalls are deterministic.
"""
