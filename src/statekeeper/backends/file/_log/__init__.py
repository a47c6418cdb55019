"""The file checkpointer's two logs per (thread, namespace), ``checkpoints`` and
``writes``, and the records that keep them honest.

* :mod:`.lines` — the line format: a checksum chained to the line before, then JSON;
* :mod:`.head` — the head of each log, kept beside it: how far its committed lines reach,
  so a log cut short at a line boundary is damage, not an empty or older history;
* :mod:`.blocks` — the bytes of an open log, read in cached blocks, and its line ends;
* :mod:`.view` — reading a log (backwards from the end, bisecting by checkpoint id) and
  checking it against its head;
* :mod:`.write` — appending (the commit), atomic rewrites, and new logs;
* :mod:`.check` — checking a log whole for ``verify()``, and repairing its head;
* :mod:`.manifest` — the list of a thread's namespaces, so a deleted namespace folder is
  damage too;
* :mod:`.catalog` — the directory's index (``index/``): every thread's head and every
  checkpoint, newest first, kept by every write (:mod:`.catalog_write`), in sorted files
  and a journal (:mod:`.catalog_files`) read as one view (:mod:`.catalog_view`).
"""
