"""Storage backends: one package per storage technology.

Each package holds everything about its technology — its checkpointer (module
``checkpointer``), its memory store (module ``store``) and its own plumbing in private
modules — and imports only the shared rooms (:mod:`statekeeper.checkpointers`,
:mod:`statekeeper.memory.store`, ``statekeeper._storage``), never another backend.
:data:`statekeeper.urls.BACKENDS` lists them; ``docs/design.md`` says how to add one.
"""
