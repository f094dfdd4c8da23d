"""A plugin module declaring a back kind that is taken (tests/test_e2e_plugin.py: a clear config error)."""

from bridge.registry import BackKind
from throwaway import EchoBackConfig

BACK = BackKind(kind="demo", config=EchoBackConfig, factory=lambda name, route: None)
