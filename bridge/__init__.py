"""agent-bridge: one daemon that lets any agent client talk to any agent backend.

Layers (imports go one way, ARCHITECTURE.md; tests/test_layering.py enforces them):
cli → app (daemon, service, …) → fronts → session → backs → {prompts, transport, store}
→ codecs → {schema, core}; settings (`config` modules) and the protocol registry sit
beside the bottom layers.
"""

__version__ = "0.1.0"
