"""The canonical turn model: pure data and pure functions, no I/O.

Every front and back translates to and from this model, never to each other.
"""
