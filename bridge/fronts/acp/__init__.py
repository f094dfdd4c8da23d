"""ACP front: the agent side of ACP for editors (stdio, or the daemon's unix socket).

It registers nothing on the HTTP listener: the daemon serves it on its unix socket
(bridge/service.py, which owns socket activation and the socket's lifetime beside the
HTTP listener's), and `agent-bridge acp` on stdio (bridge/daemon.py).
"""

from __future__ import annotations

from bridge.fronts.acp.config import AcpFrontConfig
from bridge.registry import FrontKind

__all__ = ["FRONT"]

FRONT = FrontKind(name="acp", config=AcpFrontConfig, connections="acp")
