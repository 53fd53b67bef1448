"""Approval tokens: completion before and after the wait, expiry, single use, refusals, the HTTP door (both stores)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import httpx
import pytest

import lockgate as lg
from lockgate.crypto import generate_key
from lockgate.errors import PayloadError
from lockgate.http import AccessPolicy, create_app
from lockgate.store import messages

from .apps.tokens import app, handed
from .apps.waits import parked_on

KEY = generate_key()


async def token_messages(engine: lg.Engine, run_id: str) -> list[Any]:
    return [m for m in await engine.store.read(messages.list_messages, run_id) if m["kind"] == "token"]


async def test_a_completion_after_the_body_parked_resumes_it(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY], public_url="https://approvals.example.com/") as env:
        engine = env.engine
        h = await engine.start("tok.approve", {"timeout": 3600})
        await env.settle()
        await parked_on(engine, h.run_id, "token")
        assert len(engine.executing) == 0  # parked: no task, no slot
        tok = handed[h.run_id]
        assert tok.url == f"https://approvals.example.com/callbacks/{tok.token}"
        assert tok.token.startswith("lgcb_") and len(tok.token) >= 5 + 43  # 256 bits, URL-safe
        assert tok.token not in repr(tok)
        [info] = await engine.inspector.tokens(h.run_id)
        assert (info.id, info.name, info.state) == (tok.id, "approval", "pending")
        assert await engine.complete_token(tok.token, {"approved": True, "by": "ana"}) == tok.id
        assert await engine.result(h.run_id, timeout=10) == [[True, "ana"]]
        [info] = await engine.inspector.tokens(h.run_id)
        assert info.state == "completed" and info.uses == 1
        # the store holds the hash only: the secret is in no column of the token's row
        [row] = await engine.store.read(_token_rows, h.run_id)
        assert row["hash"] == hashlib.sha256(tok.token.encode()).hexdigest()
        assert tok.token not in repr(dict(row))


async def _token_rows(tx: Any, run_id: str) -> list[Any]:
    from lockgate.store import callbacks

    return [await callbacks.find_token(tx, None, r["id"]) for r in await callbacks.run_tokens(tx, run_id)]


async def test_a_completion_before_the_body_waits_is_kept_for_it(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {"hold": True})
        await env.settle()
        await parked_on(engine, h.run_id, "signal")
        tok = handed[h.run_id]
        assert tok.url is None and tok.path == f"/callbacks/{tok.token}"  # no public URL configured
        await engine.complete_token(tok.token, {"approved": False, "by": "bo"})
        await engine.signal(h.run_id, "go", {"approved": True})
        assert await engine.result(h.run_id, timeout=10) == [[False, "bo"]]


async def test_expiry_raises_in_the_body_and_refuses_a_late_completion(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {"timeout": 2 * 86400})
        await env.settle()
        await parked_on(engine, h.run_id, "token")
        tok = handed[h.run_id]
        await env.advance("1d")
        assert (await engine.get_run(h.run_id)).status == "running"
        await env.advance("1d")
        assert await engine.result(h.run_id, timeout=10) == ["expired"]
        with pytest.raises(lg.TokenExpired):
            await engine.complete_token(tok.token, {"approved": True})
        assert await token_messages(engine, h.run_id) == []  # nothing written


async def test_expiry_is_refused_at_the_door_before_the_run_wakes(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {"timeout": 60})
        await env.settle()
        tok = handed[h.run_id]
        env.clock.advance(61)  # the run has not woken yet: the token is expired all the same
        with pytest.raises(lg.TokenExpired):
            await engine.complete_token(tok.token, {"approved": True})
        [info] = await engine.inspector.tokens(h.run_id)
        assert info.state == "expired"


async def test_two_concurrent_completions_of_a_single_use_token_one_wins(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {})
        await env.settle()
        tok = handed[h.run_id]
        # two clients of their own (two connections): the store decides, not this process
        options: dict[str, Any] = {"encryption_keys": [KEY], "clock": env.clock}
        async with lg.Client(app, env.store_url, **options) as a, lg.Client(app, env.store_url, **options) as b:
            results = await asyncio.gather(
                a.complete_token(tok.token, {"approved": True, "by": "a"}),
                b.complete_token(tok.token, {"approved": True, "by": "b"}),
                return_exceptions=True,
            )
        won = [r for r in results if isinstance(r, str)]
        lost = [r for r in results if isinstance(r, lg.TokenUsed)]
        assert len(won) == 1 and len(lost) == 1, results
        assert len(await token_messages(engine, h.run_id)) == 1
        engine.wake()  # another process's write: its wake-up is polled for on the real clock
        [[_, by]] = await engine.result(h.run_id, timeout=10)
        assert by in ("a", "b")
        with pytest.raises(lg.TokenUsed):  # and again, later: 409, nothing changed
            await engine.complete_token(tok.token, {"approved": False})
        assert len(await token_messages(engine, h.run_id)) == 1


async def test_a_multi_use_token_feeds_one_wait_per_completion(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {"single_use": False, "waits": 2})
        await env.settle()
        tok = handed[h.run_id]
        await engine.complete_token(tok.token, {"approved": True, "by": "first"})
        await engine.complete_token(tok.token, {"approved": False, "by": "second"})
        assert await engine.result(h.run_id, timeout=10) == [[True, "first"], [False, "second"]]


async def test_unknown_tampered_and_invalid_completions_write_nothing(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {})
        await env.settle()
        tok = handed[h.run_id]
        flipped = tok.token[:-1] + ("A" if tok.token[-1] != "A" else "B")
        for bad in (flipped, tok.token + "x", "lgcb_" + "a" * 43, "nonsense", "", tok.id):
            with pytest.raises(lg.UnknownToken):
                await engine.complete_token(bad, {"approved": True})
        with pytest.raises(PayloadError):  # validated by the token's model before anything is written
            await engine.complete_token(tok.token, {"approved": "perhaps"})
        assert await token_messages(engine, h.run_id) == []
        [info] = await engine.inspector.tokens(h.run_id)
        assert info.state == "pending"
        await engine.reject_token(tok.token, "over budget")
        assert await engine.result(h.run_id, timeout=10) == [["rejected", "over budget"]]


async def test_a_token_of_an_ended_run_is_gone(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {})
        await env.settle()
        tok = handed[h.run_id]
        await engine.cancel(h.run_id, "no longer needed")
        with pytest.raises(lg.TokenGone):
            await engine.complete_token(tok.token, {"approved": True})


async def test_an_encrypted_run_seals_the_completion(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.sealed", {})
        await env.settle()
        await parked_on(engine, h.run_id, "token")
        tok = handed[h.run_id]
        await engine.complete_token(tok.token, {"iban": "DE00 secret"})
        assert await engine.result(h.run_id, timeout=10) == {"iban": "DE00 secret"}
        [message] = await token_messages(engine, h.run_id)
        assert "secret" not in (message["payload"] or "")
        steps = await engine.store.read(_journal_text, h.run_id)
        assert tok.token not in steps and "DE00" not in steps


async def _journal_text(tx: Any, run_id: str) -> str:
    from lockgate.store import journal

    return repr([dict(r) for r in await journal.load_journal(tx, run_id)])


async def test_bad_arguments_are_refused_in_the_body(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        h = await env.engine.start("tok.bad", {})
        assert "model must be a pydantic model class" in await env.engine.result(h.run_id, timeout=10)
        assert await env.engine.inspector.tokens(h.run_id) == []


async def test_the_http_door_needs_no_bearer_token_and_answers_problems(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {"timeout": 3600})
        await env.settle()
        tok = handed[h.run_id]
        api = create_app(engine.client, policy=AccessPolicy(token="op-secret"))
        transport = httpx.ASGITransport(app=api, client=("203.0.113.9", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            assert (await http.get(f"/api/v1/runs/{h.run_id}")).status_code == 401  # the API keeps its token
            state = await http.get(tok.path)
            assert state.status_code == 200
            assert state.json()["state"] == "pending" and state.json()["name"] == "approval"
            assert h.run_id not in state.text
            unknown = await http.post("/callbacks/lgcb_" + "x" * 43, json={"approved": True})
            assert unknown.status_code == 404
            assert unknown.headers["content-type"] == "application/problem+json"
            assert unknown.json()["type"] == "urn:lockgate:error:UnknownToken"
            invalid = await http.post(tok.path, json={"approved": "maybe"})
            assert invalid.status_code == 422 and invalid.json()["errors"][0]["field"] == "approved"
            assert tok.token not in invalid.text
            done = await http.post(tok.path, json={"approved": True, "by": "web"})
            assert done.status_code == 200 and done.json() == {"state": "completed"}
            again = await http.post(tok.path, json={"approved": False})
            assert again.status_code == 409 and again.json()["type"] == "urn:lockgate:error:TokenUsed"
            assert (await http.get(tok.path)).json()["state"] == "completed"
            metrics = await http.get("/metrics", headers={"authorization": "Bearer op-secret"})
            line = 'lockgate_callback_failures_total{client="203.0.113.9",reason="unknown"} 1.0'
            assert line in metrics.text
            assert 'client="203.0.113.9",reason="used"} 1.0' in metrics.text
        assert await engine.result(h.run_id, timeout=10) == [[True, "web"]]


async def test_the_dashboard_lists_pending_tokens_and_an_operator_completes_one(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {"timeout": 3600})
        await env.settle()
        await parked_on(engine, h.run_id, "token")
        tok = handed[h.run_id]
        transport = httpx.ASGITransport(app=create_app(engine.client, policy=AccessPolicy()))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            page = await http.get(f"/ui/runs/{h.run_id}")
            assert page.status_code == 200 and "Pending tokens" in page.text and tok.id in page.text
            assert tok.token not in page.text  # the secret is nowhere to be shown
            form = await http.get(f"/ui/runs/{h.run_id}/tokens/{tok.id}")
            assert form.status_code == 200 and 'name="payload"' in form.text
            url = f"/ui/runs/{h.run_id}/tokens/{tok.id}"
            bad = await http.post(url, data={"action": "complete", "payload": '{"approved": "?"}'})
            assert bad.status_code == 422 and "PayloadError" in bad.text
            done = await http.post(url, data={"action": "complete", "payload": '{"approved": true, "by": "op"}'})
            assert done.status_code == 303
            assert await engine.result(h.run_id, timeout=10) == [[True, "op"]]
            page = await http.get(f"/ui/runs/{h.run_id}")
            assert "Pending tokens" not in page.text


async def test_lockgate_check_replays_token_waits_from_the_journal(env_factory: Any) -> None:
    from lockgate.testing import replay_check

    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("tok.approve", {"single_use": False, "waits": 2})
        await env.settle()
        tok = handed[h.run_id]
        await engine.complete_token(tok.token, {"approved": True, "by": "one"})
        await env.settle()
        await parked_on(engine, h.run_id, "token")  # the second wait
        export = await engine.inspector.export_run(h.run_id or "")
        verdict = await replay_check(app, export)
        assert not verdict.breaks, verdict.to_dict()
        await engine.reject_token(tok.token, "changed my mind")
        assert await engine.result(h.run_id, timeout=10) == [[True, "one"], ["rejected", "changed my mind"]]
        verdict = await replay_check(app, await engine.inspector.export_run(h.run_id or ""))
        assert not verdict.breaks, verdict.to_dict()
