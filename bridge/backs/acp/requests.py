"""What an agent asks of the bridge: permissions, files and terminals (ACP, File System, Terminals).

- `session/request_permission` becomes a canonical permission Question with the
  agent's own options (id = optionId, label = name, kind = kind), unless the route's
  policy answers: `allow_read` allows read, search and fetch tool calls; `deny`
  picks a reject option. A timeout, or a front that cannot show the question, is
  answered with a reject option too; only a cancelled turn answers `cancelled`
  (DESIGN.md, complaint 9: a deny is never a cancel).
- `elicitation/create` (form mode: the one the bridge declares) becomes a canonical
  choice or form Question (codecs/acp_elicitation.py), asked in the running turn; the
  answer goes back in the agent's field names (`accept`), a declined or unanswered
  question as `decline`, and one cancelled with the turn as `cancel` (ACP schema,
  `CreateElicitationResponse`). Outside a turn nobody can answer: `decline`.
- `fs/*` and `terminal/*` go to the editor, unchanged but for the sessionId, when an
  ACP front offers them (`SessionHost.client_services`); else to the route's own
  confined files and terminals (`acp_local`) if it serves them; else -32601.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import msgspec
import trio

from bridge.backs.acp.local import LocalFiles, LocalTerminals
from bridge.backs.acp.setup import CANCELLED, pick, selected
from bridge.backs.base import SessionContext, TurnHandle
from bridge.codecs import safejson
from bridge.codecs.acp import permission_tool_call
from bridge.codecs.acp_elicitation import content_of, question_of
from bridge.backs.acp.config import AcpBackConfig
from bridge.core import events as ev
from bridge.errors import MethodNotFound
from bridge.schema import acp

__all__ = ["AgentRequestHost", "answer_elicitation", "answer_permission", "client_service"]

log = logging.getLogger("bridge.backs.acp.back")


class AgentRequestHost(Protocol):
    """What answering an agent's request needs of its session (`back.AcpSession` is one)."""

    back: Any  # its AcpBack: `.name` for messages
    cfg: AcpBackConfig
    ctx: SessionContext
    nursery: trio.Nursery
    session_id: str
    turn: TurnHandle | None
    tool_calls: dict[str, str]
    questions: int
    files: LocalFiles | None
    terminals: LocalTerminals | None


_READ_KINDS = frozenset(("read", "search", "fetch"))
_ASK_KINDS = ("allow_once", "allow_always", "reject_once", "reject_always")
_dict_decoder = safejson.Decoder(dict[str, Any])


async def answer_permission(session: AgentRequestHost, p: acp.RequestPermissionParams) -> acp.RequestPermissionResult:
    tc = p.tool_call
    kind = tc.kind or session.tool_calls.get(tc.tool_call_id) or "other"
    policy = session.cfg.permissions
    where = f"route {session.back.name} session {session.session_id}"
    if policy == "deny" or (policy == "allow_read" and kind in _READ_KINDS):
        kinds = ("reject_once", "reject_always") if policy == "deny" else ("allow_once", "allow_always")
        chosen = pick(p.options, kinds)
        if chosen is not None:
            log.info("%s: permission for %s tool call %s answered %s by policy %s", where, kind, tc.tool_call_id, chosen, policy)
            return selected(chosen)
        if policy == "deny":
            log.warning("%s: policy deny, but the agent offers no reject option; answered cancelled", where)
            return CANCELLED
    turn = session.turn
    if turn is None:
        log.warning("%s: permission asked outside a turn; rejected", where)
        chosen = pick(p.options, ("reject_once", "reject_always"))
        return selected(chosen) if chosen is not None else CANCELLED
    # Every field the agent gave its tool call (ACP schema, `RequestPermissionRequest.toolCall`)
    # reaches every front: a tool call it had not announced is announced with them (fronts
    # show a question about a tool call they know), a known one is updated with them.
    announced = tc.tool_call_id in session.tool_calls
    session.tool_calls[tc.tool_call_id] = kind
    event = permission_tool_call(tc, announced=announced)
    if event is not None:
        turn.emit(event)
    session.questions += 1
    question = ev.Question(
        id=f"{tc.tool_call_id}#{session.questions}",
        kind="permission",
        prompt=tc.title or f"Allow this {kind} tool call?",
        options=[
            ev.QuestionOption(id=o.option_id, label=o.name, kind=o.kind if o.kind in _ASK_KINDS else None)  # type: ignore[arg-type]
            for o in p.options
        ],
        tool_call_id=tc.tool_call_id,
    )
    answer = await turn.ask(question)
    if answer.selected:
        return selected(answer.selected[0])
    if turn.cancel_requested:
        return CANCELLED  # ACP: pending permissions are answered cancelled after session/cancel
    chosen = pick(p.options, ("reject_once", "reject_always"))
    return selected(chosen) if chosen is not None else CANCELLED


async def answer_elicitation(session: AgentRequestHost, p: acp.ElicitationParams) -> acp.ElicitationResult:
    session.questions += 1
    asked = question_of(f"{p.tool_call_id or 'elicitation'}#{session.questions}", p)  # InvalidParams: the agent's fault
    turn = session.turn
    if turn is None:
        log.warning("route %s session %s: elicitation asked outside a turn; declined", session.back.name, session.session_id)
        return acp.ElicitationResult(action="decline")
    answer = await turn.ask(asked.question)
    if answer.cancelled:
        # ACP, Prompt Turn: Cancellation: pending requests are answered cancelled after session/cancel.
        return acp.ElicitationResult(action="cancel" if turn.cancel_requested else "decline")
    return acp.ElicitationResult(action="accept", content=content_of(asked, answer))


async def client_service(session: AgentRequestHost, method: str, params: msgspec.Raw | None) -> Any:
    services = session.ctx.host.client_services if session.ctx.host is not None else None
    if services is not None:
        offered = {
            "fs/read_text_file": services.fs_read,
            "fs/write_text_file": services.fs_write,
        }.get(method, services.terminal if method.startswith("terminal/") else False)
        if offered:
            body = _dict_decoder.decode(params or b"{}")
            body["sessionId"] = session.session_id  # the editor knows the bridge's session id
            return await services.call(method, body)
    if method == "fs/read_text_file" and session.files is not None:
        return await session.files.read(params)
    if method == "fs/write_text_file" and session.files is not None:
        return await session.files.write(params)
    if method.startswith("terminal/") and session.terminals is not None:
        return await session.terminals.call(method, params, nursery=session.nursery)
    raise MethodNotFound(f"route {session.back.name} does not offer {method}: no editor offers it and the route does not serve it")
