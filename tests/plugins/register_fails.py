"""A plugin front whose `register` raises (tests/test_e2e_plugin.py): the daemon does
not start (exit 70, the front and its error logged), never a traceback mid-start."""

from bridge.registry import FrontKind


def _register(app: object, config: object, manager: object) -> None:
    raise RuntimeError("this front cannot register")


FRONT = FrontKind(name="register_fails", config=None, register=_register)
