"""The scriptable SDK agent (acp_agent_sdk.py) plus words that break the bridge's frame bound.

Every word of acp_agent_sdk.py works; these are added (N in bytes):

    bigreply:N  answers session/prompt with a result padded to N bytes (`_meta.pad`)
    bigask:N    fs/write_text_file with N bytes of content; says "write-error=<code>" or "wrote"
    bigline:N   writes N bytes of "x" and a newline (a line that is not ACP), then goes on
    noline:N    writes N bytes of "x" with no newline, then waits for ever (ignores cancel)
    fifo:PATH:N N fs/read_text_file of PATH at once; says "fifo=<the error codes, sorted>"

Options as acp_agent_sdk.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import acp  # noqa: E402
import acp_agent_sdk  # noqa: E402
from acp import RequestError  # noqa: E402


class OversizedAgent(acp_agent_sdk.ScriptAgent):
    async def step(self, sid: str, name: str, arg: str, cancel: asyncio.Event) -> Any:
        if name == "bigreply":
            return {"stopReason": "end_turn", "_meta": {"pad": "x" * int(arg)}}
        if name == "bigask":
            try:
                await self.conn.write_text_file(session_id=sid, path="big.txt", content="x" * int(arg))
                await self.say(sid, "wrote")
            except RequestError as exc:
                await self.say(sid, f"write-error={exc.code}")
            return None
        if name in ("bigline", "noline"):
            data = b"x" * int(arg) + (b"\n" if name == "bigline" else b"")
            view = memoryview(data)
            while view:  # stdout is a pipe: os.write may take part of it
                view = view[os.write(1, view) :]
            if name == "noline":
                await asyncio.sleep(3600)
            return None
        if name == "fifo":
            path, _, count = arg.rpartition(":")
            results = await asyncio.gather(
                *(self.conn.read_text_file(session_id=sid, path=path) for _ in range(int(count))), return_exceptions=True
            )
            codes = sorted(str(r.code) if isinstance(r, RequestError) else "ok" for r in results)
            await self.say(sid, "fifo=" + ",".join(codes))
            return None
        return await super().step(sid, name, arg, cancel)


def main() -> None:
    args = acp_agent_sdk._args()
    asyncio.run(acp.run_agent(OversizedAgent(args), use_unstable_protocol=args.close))  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
