"""The A2A back's streamed calls: SSE over httpx, with the deadlines of a stream that may go quiet.

`stream_events` sends `SendStreamingMessage` (`message/stream`) or `SubscribeToTask`
(`tasks/resubscribe`, the re-attachment after a broken stream) and hands every
event, decoded into 1.0 structs by the interface's `Wire`, to the turn (A2A spec §3,
SendStreamingMessage and SubscribeToTask; §9 and §11 for the SSE framing of each
binding). A failure worth resuming is `StreamBroken`; the turn
(`bridge.backs.a2a.turn`) decides whether to re-attach or poll.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import trio

from bridge.backs.a2a.http import AgentHttp, read_body, where
from bridge.codecs.a2a_client import HttpCall, InvalidResponse
from bridge.codecs.sse import EventTooLarge, SSEDecoder
from bridge.errors import BackError
from bridge.schema import a2a as s

__all__ = ["StreamBroken", "stream_events"]


class StreamBroken(Exception):
    """The event stream failed in a way worth resuming; `error` is what to report if
    it cannot be (or if there is nothing to resume yet)."""

    def __init__(self, reason: str, error: BackError) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows the last event (the agent closes the stream right after it), so
    the connection goes back to the pool instead of being torn down; give up quickly."""
    with trio.move_on_after(0.05):
        async for _ in chunks:
            pass


async def stream_events(
    http: AgentHttp,
    call: HttpCall,
    on_event: Callable[[s.StreamResponse], bool],
    *,
    first_s: float,
    idle_s: float,
    flow: Callable[[], Awaitable[None]],
) -> bool:
    """Send a streaming call and hand every decoded StreamResponse to `on_event`, which
    returns True once the task is done. True if it was; False if the stream ended first.

    Deadlines are one cancel scope whose deadline moves: `first_s` until the first
    event, then `idle_s` after every read (heartbeat comments count as life). Raises
    `StreamBroken` when resuming may help, `A2AError` for the agent's own error,
    BackError for the rest.
    """
    wire = http.wire
    assert wire is not None
    seen_event = False
    client = http.client
    try:
        with trio.CancelScope(deadline=trio.current_time() + first_s) as scope:
            auth, token = await http.auth(call.url)
            req = client.build_request(call.method, call.url, content=call.body, params=call.params, headers={**call.headers, **auth})
            resp = await client.send(req, stream=True)
            if http.unauthorized(resp.status_code, token):  # once more with a new OAuth token
                await resp.aclose()
                auth, token = await http.auth(call.url)
                req = client.build_request(call.method, call.url, content=call.body, params=call.params, headers={**call.headers, **auth})
                resp = await client.send(req, stream=True)
            try:
                if resp.status_code >= 300:
                    body = await read_body(resp, http.cfg.max_event_bytes)
                    raise http.http_error(call, resp, body)
                if not resp.headers.get("content-type", "").startswith("text/event-stream"):
                    # An error (or a plain result) instead of a stream: a JSON body.
                    body = await read_body(resp, http.cfg.max_event_bytes)
                    err = wire.decode_http_error(resp.status_code, body)
                    if err is not None:
                        raise err
                    result = wire.decode_send(body)
                    return on_event(s.StreamResponse(task=result) if isinstance(result, s.Task) else s.StreamResponse(message=result))
                decoder = SSEDecoder(http.cfg.max_event_bytes)
                chunks = resp.aiter_bytes()
                # Moving a deadline re-registers it with trio; doing so on every read cost
                # more than decoding the event. So the deadline moves only when less than
                # 90 % of the idle window is left: silence is caught after 0.9–1 × idle_s.
                slack = 0.1 * idle_s
                async for chunk in chunks:
                    if seen_event and scope.deadline - trio.current_time() < idle_s - slack:
                        scope.deadline = trio.current_time() + idle_s
                    for ev in decoder.feed(chunk):
                        if not seen_event:
                            seen_event = True
                            scope.deadline = trio.current_time() + idle_s
                        if on_event(wire.decode_event(ev.data)):
                            await _drain(chunks)
                            return True
                    # Time a slow editor holds us here (backpressure) is not agent silence.
                    paused = trio.current_time()
                    await flow()
                    if seen_event and trio.current_time() - paused > slack:
                        scope.deadline = trio.current_time() + idle_s
                decoder.feed_eof()
                return False
            finally:
                with trio.move_on_after(1, shield=True):
                    await resp.aclose()
    except httpx.TransportError as exc:
        raise StreamBroken(f"the connection broke: {exc or type(exc).__name__}", http.transport_error(exc, call.url)) from exc
    except EventTooLarge as exc:
        raise http.error(f"the A2A agent at {where(call.url)} sent {exc}") from exc
    except InvalidResponse as exc:
        raise http.error(f"the A2A agent at {where(call.url)} sent {exc}") from exc
    if scope.cancelled_caught:
        if not seen_event:
            why = f"sent no event within first_event_timeout_s ({first_s:g} s)"
        else:
            why = f"sent nothing for idle_timeout_s ({idle_s:g} s)"
        raise StreamBroken(f"the agent {why}", http.error(f"the A2A agent at {where(call.url)} {why}", unavailable=True))
    return False
