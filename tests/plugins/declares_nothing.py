"""A plugin module that declares no protocol (tests/test_e2e_plugin.py: a clear config error)."""
