"""A plugin module that calls `sys.exit(0)` when imported (tests/test_e2e_plugin.py):
a config error (exit 78), never a silent exit 0 of `check-config`."""

import sys

sys.exit(0)
