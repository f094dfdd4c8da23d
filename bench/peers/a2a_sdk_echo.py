"""An echo agent on the official a2a-sdk (1.3) server: the reference for bench/a2a_front.py.

    python a2a_sdk_echo.py        # prints "PORT <n>", serves until killed

The same work as agent-bridge's demo back for the two benchmarked requests, the way
an a2a-sdk agent is usually written (`TaskUpdater`): a message "bench:N" streams N
one-character artifact chunks, then completes; any other message gets one artifact
"You said: <text>" and completes. A2A 1.0 JSON-RPC at `/` (and HTTP+JSON under
/rest), in-memory task store, uvicorn, one process: a2a-sdk's default setup.
"""

from __future__ import annotations

import asyncio
import socket
import sys

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from starlette.applications import Starlette


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message is not None
        up = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                pb.Task(id=context.task_id, context_id=context.context_id, status=pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED), history=[context.message])
            )
        await up.start_work()
        text = context.get_user_input()
        if text.startswith("bench:"):
            n = int(text.split(":", 1)[1].split()[0] or 1000)
            for i in range(n):
                await up.add_artifact([pb.Part(text="x")], artifact_id="bench", name="response", append=i > 0, last_chunk=i == n - 1)
        else:
            await up.add_artifact([pb.Part(text=f"You said: {text}")], artifact_id="response", name="response", last_chunk=True)
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY is inherited (see tests/peers/a2a_agent.py)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    card = pb.AgentCard(
        name="echo", description="a2a-sdk echo agent", version="1.0.0",
        supported_interfaces=[pb.AgentInterface(url=f"{base}/", protocol_binding="JSONRPC", protocol_version="1.0"),
                              pb.AgentInterface(url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0")],
        capabilities=pb.AgentCapabilities(streaming=True), default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="echo", name="Echo", description="Says what you said", tags=["echo"])],
    )  # fmt: skip
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card)
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/"), *create_rest_routes(handler, path_prefix="/rest")]
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=routes), log_level="warning", lifespan="off", access_log=False))
    print(f"PORT {port}", flush=True)
    sys.stdout.flush()
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
