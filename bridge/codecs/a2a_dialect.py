"""Which A2A an interface speaks: the dialect (1.0 or 0.3) and the binding (JSON-RPC or HTTP+JSON).

Both sides use these: the client side (`bridge.codecs.a2a_client`) reads them from
the agent card, the server side (`bridge.codecs.a2a_server`) from the request's
`A2A-Version` header and path (A2A spec §3.2 "Protocol version", §5 "Protocol
Bindings"; 0.3 is the dialect a2a-sdk 0.3 speaks).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

__all__ = ["Binding", "Dialect", "Interface"]


class Dialect(str, Enum):
    V1_0 = "1.0"
    V0_3 = "0.3"


class Binding(str, Enum):
    JSONRPC = "JSONRPC"
    HTTP_JSON = "HTTP+JSON"


class Interface(NamedTuple):
    url: str
    dialect: Dialect
    binding: Binding
