"""Is an A2A route's agent there? `doctor` and `/readyz` through `A2ABack.probe`: its
agent card is read (the back's own card cache; A2A spec §8.2, the well-known URI) and
the interface it chose is named."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["probe_card"]


class _CardReader(Protocol):
    """`A2ABack` as seen here (not imported: it imports this module)."""

    async def card(self) -> tuple[Any, Any]: ...


async def probe_card(back: _CardReader) -> str:
    """What was found; a BackError from the card fetch says what was not."""
    view, wire = await back.card()
    iface: Any = getattr(wire, "iface", None)
    how = ""
    if iface is not None:
        dialect = getattr(getattr(iface, "dialect", None), "value", "?")
        binding = getattr(getattr(iface, "binding", None), "value", "?")
        how = f"; A2A {dialect} over {binding} at {getattr(iface, 'url', '?')}"
    return f"agent card of {getattr(view, 'name', None) or 'an unnamed agent'!r} read{how}"
