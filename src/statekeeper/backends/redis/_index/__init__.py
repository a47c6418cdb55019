"""What the Redis checkpointer keeps in the registry's slot (``<prefix>:{<prefix>:threads}``,
one Cluster slot): the registry of threads, the thread index, and the indexes across
threads -- the checkpoint index that ``list(None)`` pages through, and one index per
declared metadata key (``index_metadata``). See "Key layout" in ``docs/redis.md``.

* :mod:`.members` -- their keys and members (pure);
* :mod:`.scripts` -- the Lua scripts that run in that slot;
* :mod:`.upkeep` -- keeping them: entries removed after deletions, the registry's sweep,
  builds (an upgraded layout, a newly declared key), the layout check on opening;
* :mod:`.listing` -- reading through them: ``list(None)`` and filtered listings.

The rule every index keeps: an entry may be *stale* (name a checkpoint that is not
there) but is never *missing* for a stored checkpoint. Entries are added before the
data, or in the same script; they are removed after it; readers check every entry
against its thread and leave stale ones out.
"""
