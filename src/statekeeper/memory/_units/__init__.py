"""The units of memory beyond a single statement, and how their parts are read.

- :mod:`.temporal`: time expressions ("yesterday", "last Tuesday", "in March", "on the
  5th") resolved against when they were said, into absolute dates a note keeps;
- :mod:`.sessions`: one note per conversation session (who, topics, dates), with
  provenance to all of its messages, beside the statements' notes;
- :mod:`.facts`: what fact a question asks about (who, which attribute, now or before),
  to find the notes keyed by that fact.

Pure functions of text and time, no model, no network: the same input always gives the
same output, so notes and recalls are deterministic.
"""
