"""A minimal ACP agent on the official ACP Python SDK (`agent-client-protocol`).

It answers `initialize` and nothing more: the cold-start peer for bench/cold_start.py.
Run it as `python bench/peers/sdk_agent.py`; it speaks ACP on stdin/stdout.
"""

from __future__ import annotations

import asyncio
from typing import Any

import acp
from acp.schema import AgentCapabilities, Implementation, InitializeResponse


class MinimalAgent:
    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="sdk-minimal", version="0.0.1"),
        )


def main() -> None:
    asyncio.run(acp.run_agent(MinimalAgent()))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
