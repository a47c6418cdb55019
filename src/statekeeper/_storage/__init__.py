"""How statekeeper stores things, whatever the storage technology: payload framing and
exactness (``payload``), append deltas (``deltas``), lineage walks (``lineage``), claims on
this machine (``claims``), crash-safe files (``files``) and JSON equality (``json``).

Internal: the backends and the shared rooms import these modules; users do not.
"""
