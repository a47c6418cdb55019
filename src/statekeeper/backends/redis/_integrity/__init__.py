"""The Redis checkpointer's integrity checks: the checksums sealing every stored record
(:mod:`.seal`), the damage a read or a walk finds, and ``verify`` / ``repair`` over every
registered thread (:mod:`.verify`, :mod:`.repair`). See "Integrity" in ``docs/redis.md``.
"""
