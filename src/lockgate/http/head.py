"""``HEAD`` answered as ``GET`` without the body, on every path the API and the dashboard serve.

FastAPI routes declared with ``get`` answer only ``GET``; HTTP says a ``HEAD`` gets the same
status and headers (monitors and link checkers send it). A stream (a live page's events)
is told the client went away once its headers are sent, so it stops at once.
"""

from __future__ import annotations

from .security import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HeadAsGet"]


class HeadAsGet:
    """Runs a ``HEAD`` request as ``GET`` and sends its status and headers only."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        done = False

        async def headers_only(message: Message) -> None:
            nonlocal done
            if done:
                return
            if message["type"] == "http.response.start":
                await send(message)
            elif message["type"] == "http.response.body":
                done = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def receive_until_done() -> Message:
            if done:
                return {"type": "http.disconnect"}
            return await receive()

        await self.app({**scope, "method": "GET"}, receive_until_done, headers_only)
