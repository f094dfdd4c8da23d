"""A plugin module declaring a back kind that is taken (tests/test_e2e_plugin.py: a clear config error)."""

from bridge.config import ConfigStruct
from bridge.registry import BackKind


class ClashingBackConfig(ConfigStruct, tag="demo", tag_field="kind"):
    pass


BACK = BackKind(kind="demo", config=ClashingBackConfig, factory=lambda name, route: None)
