"""Fronts: where clients connect, one module per protocol."""
