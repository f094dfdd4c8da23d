"""A session's questions, asked of the editor on one ACP connection.

A canonical `Question` (bridge/core/events.py) goes to the editor as
`session/request_permission` (ACP schema, `RequestPermissionRequest`) when it is a plain
choice, or as `elicitation/create` (ACP schema, `elicitation/create`: a form in the JSON
Schema subset of MCP 2025-11-25, Elicitation) when it is a form, or a choice with
several answers or free text and the editor declared form elicitation in `initialize`
(ACP schema, `ClientCapabilities`). An editor that answers `elicitation/create` with
an error is asked as an editor without forms is (a choice as a permission request, a
form left to the back: answered `by="front"`), and the error logged. A permission
request names the tool call the question is about with everything the editor was told
of it (`seen`). The editor's answer goes back to the session; no answer in time, an
error, or an answer that does not decode is a cancelled question.
A question answered elsewhere (another client, a timeout, a cancel) withdraws our
request (`$/cancel_request`, through the connection's JSON-RPC peer). Each question is
asked by a task of its own in the connection's nursery, inside its own boundary
(STYLE.md rule 17): a bug while asking is logged and that question answered cancelled,
and the connection, its sessions and its other questions go on.
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.codecs import acp as codec
from bridge.codecs.acp_elicitation import answer_of, with_schema
from bridge.codecs.jsonrpc import decode_params
from bridge.codecs.jsonrpc_peer import RequestError, RequestResult
from bridge.core.events import Event, Question, QuestionAnswered, TurnEnded
from bridge.errors import CODES, InvalidParams, MethodNotFound, NotFound, PeerError
from bridge.fronts.acp.editor import EditorServices
from bridge.schema import acp
from bridge.session import Session

__all__ = ["EditorQuestions"]

log = logging.getLogger("bridge.fronts.acp.front")


class EditorQuestions:
    """The questions one connection has asked its editor and not yet seen answered.

    It asks through the connection and timeout of the editor's `services`, and reads
    there the capabilities the editor declared in `initialize`.
    """

    __slots__ = ("services", "elicitation_refused", "_asked", "_tool_calls")

    def __init__(self, services: EditorServices) -> None:
        self.services = services
        self.elicitation_refused = False  # the editor answered elicitation/create -32601
        self._asked: dict[str, Any] = {}  # question id → our request id
        self._tool_calls: dict[str, dict[str, acp.ToolCallFields]] = {}  # session id → tool call id → fields

    async def ask(self, session: Session, question: Question) -> None:
        """Ask the editor `question` and answer it in `session` (a task per question)."""
        try:
            await self._ask(session, question)
        except Exception:
            log.exception("asking the editor question %s of session %s failed; answered cancelled", question.id, session.id)
            try:
                await _answer(session, question.id, cancelled=True)
            except Exception:
                log.exception("cancelling question %s of session %s failed", question.id, session.id)

    async def _ask(self, session: Session, question: Question) -> None:
        caps = self.services.caps
        elicit = caps.elicitation is not None and caps.elicitation.form is not None and not self.elicitation_refused
        if question.kind == "form" or (question.kind == "choice" and elicit and (question.multi_select or question.allow_text)):
            if elicit:
                params: Any = codec.elicitation_request(session.id, with_schema(question))
                outcome = await self._request("elicitation/create", params, question_id=question.id)
                if type(outcome) is not RequestError:
                    await self._settle(session, question, outcome, acp.ElicitationResult)
                    return
                # An editor that declared forms but fails this one (ACP schema,
                # `elicitation/create` is still unstable; some clients answer -32601):
                # the question is asked as it is of an editor without forms.
                log.warning("editor answered elicitation/create with an error (%s: %s); asking it without a form",
                            outcome.error.code, outcome.error.message)  # fmt: skip
                if outcome.error.code == CODES[MethodNotFound].jsonrpc:
                    self.elicitation_refused = True  # and the next questions go there at once
                turn = session.turn
                if turn is None or turn.open_question(question.id) is None:
                    return  # answered meanwhile (another client, a timeout, a cancel)
            if question.kind == "form":
                await _answer(session, question.id, cancelled=True, by="front")  # nobody can see it here
                return
        tool_call = self._tool_calls.get(session.id, {}).get(question.tool_call_id or "")
        params = codec.permission_request(session.id, question, tool_call)
        outcome = await self._request("session/request_permission", params, question_id=question.id)
        await self._settle(session, question, outcome, acp.RequestPermissionResult)

    async def _settle(self, session: Session, question: Question, outcome: Any, result_type: type) -> None:
        """Answer `question` in `session` from the editor's `outcome` of our request."""
        method = "elicitation/create" if result_type is acp.ElicitationResult else "session/request_permission"
        if type(outcome) is not RequestResult or outcome.result is None:
            if type(outcome) is RequestError:
                log.warning("editor answered %s with an error: %s", method, outcome.error.message)
            await _answer(session, question.id, cancelled=True)
            return
        try:
            result = decode_params(outcome.result, result_type)
        except PeerError as exc:  # InvalidParams, or ParseError for bytes that are not JSON
            log.warning("editor's answer to %s is invalid: %s", method, exc.message)
            await _answer(session, question.id, cancelled=True)
            return
        if isinstance(result, acp.RequestPermissionResult):
            if result.outcome.outcome == "selected" and result.outcome.option_id:
                await _answer(session, question.id, selected=[result.outcome.option_id])
            else:
                await _answer(session, question.id, cancelled=True)
        else:
            if result.action == "accept":
                await _answer(session, question.id, **answer_of(question, result.content or {}))
            else:
                await _answer(session, question.id, cancelled=True)

    def seen(self, session_id: str, event: Event) -> None:
        """Keep what the editor was told of each tool call of the running turn, so a
        permission request about one carries all of it; forget them when the turn ends."""
        if type(event) is TurnEnded:
            self._tool_calls.pop(session_id, None)
        else:
            codec.track_tool_call(self._tool_calls.setdefault(session_id, {}), event)  # type: ignore[arg-type]

    def answered(self, session: Session, event: QuestionAnswered) -> None:
        """`event` answered a question: withdraw our request for it, if one is out."""
        rid = self._asked.pop(event.question_id, None)
        turn = session.turn
        if event.cancelled and event.by == "user" and turn is not None and turn.cancel_requested:
            # The editor cancelled the turn, and answers its own pending requests
            # `cancelled` (ACP, Prompt Turn: Cancellation).
            return
        if rid is not None:
            self.services.conn.withdraw(rid)

    async def _request(self, method: str, params: Any, *, question_id: str) -> RequestResult | RequestError | None:
        """Ask the editor; None when it does not answer in time or goes away."""
        conn = self.services.conn
        pending = conn.start_request(method, params)
        self._asked[question_id] = pending.id
        try:
            return await conn.wait(pending, timeout_s=self.services.timeout_s)
        finally:
            self._asked.pop(question_id, None)


async def _answer(session: Session, question_id: str, **answer: Any) -> None:
    try:
        await session.send_answer(question_id, **answer)
    except NotFound:
        pass  # already answered: by a timeout, a cancel or another client
    except InvalidParams as exc:
        log.warning("editor's answer does not fit the question: %s", exc.message)
        await session.send_answer(question_id, cancelled=True)

