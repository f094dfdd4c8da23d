"""agent-bridge: one daemon that lets any agent client talk to any agent backend.

Layers (imports go one way): cli → daemon → fronts/backs → {codecs, store} → {schema, core}.
"""

__version__ = "0.1.0"
