"""Inbound webhooks against a real ``lockgate serve``: valid, tampered, stale and duplicated signatures."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import lockgate as lg
from lockgate.errors import DefinitionError

from .apps.webhooks import GITHUB_SECRET_ENV, STRIPE_SECRET_ENV

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
STRIPE_SECRET = "whsec_test_0123456789"
GITHUB_SECRET = "gh-secret-9876543210"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(store_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``lockgate serve`` of tests/apps/webhooks.py on a free port: its base URL and its log."""
    port = _free_port()
    env = {
        **os.environ,
        STRIPE_SECRET_ENV: STRIPE_SECRET,
        GITHUB_SECRET_ENV: GITHUB_SECRET,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    env.pop("LOCKGATE_TOKEN", None)
    argv = [sys.executable, "-m", "lockgate.cli", "serve", "tests.apps.webhooks:app", "--store", store_url]
    argv += ["--http", f"127.0.0.1:{port}", "--token-file", str(tmp_path / "token")]
    (tmp_path / "token").write_text("operator-token-0123456789abcdef\n")
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                if httpx.get(f"{base}/api/v1/healthz", timeout=2).status_code < 500:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield base, log
    finally:
        process.terminate()
        process.wait(timeout=30)


def stripe_headers(body: bytes, secret: str = STRIPE_SECRET, at: int | None = None) -> dict[str, str]:
    """Stripe's documented scheme: HMAC-SHA256 of ``"{t}.{body}"``, sent as ``t=<t>,v1=<hex>``."""
    t = int(time.time()) if at is None else at
    sig = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return {"Stripe-Signature": f"t={t},v1={sig}", "Content-Type": "application/json"}


def github_headers(body: bytes, delivery: str, secret: str = GITHUB_SECRET) -> dict[str, str]:
    """GitHub's documented scheme: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``."""
    sig = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={sig}", "X-GitHub-Delivery": delivery, "Content-Type": "application/json"}


def stripe_body(pid: str, amount: Any = 1200, event_id: str | None = None) -> bytes:
    """A Stripe event (``evt_<pid>`` unless told): its ``id`` is what a retried delivery repeats."""
    data = {"object": {"id": pid, "amount": amount}}
    return json.dumps({"id": event_id or f"evt_{pid}", "type": "payment_intent.succeeded", "data": data}).encode()


async def test_signed_deliveries_publish_and_bad_ones_write_nothing(served: tuple[str, Path], store_url: str) -> None:
    base, log = served
    from .apps.webhooks import app

    async with httpx.AsyncClient(base_url=base, timeout=10) as http, lg.Client(app, store_url) as client:
        body = stripe_body("pi_1")
        ok = await http.post("/hooks/stripe", content=body, headers=stripe_headers(body))
        assert ok.status_code == 200, ok.text
        [event] = await client.list_events(name="payment.succeeded")
        assert (event.id, event.data, event.source) == (
            ok.json()["event_id"],
            {"payment_id": "pi_1", "amount": 1200},
            "webhook:stripe",
        )
        # tampered body, wrong secret, stale timestamp, no signature: 401, nothing written
        tampered = await http.post("/hooks/stripe", content=stripe_body("pi_2"), headers=stripe_headers(body))
        wrong = await http.post("/hooks/stripe", content=body, headers=stripe_headers(body, secret="whsec_other"))
        stale = await http.post("/hooks/stripe", content=body, headers=stripe_headers(body, at=int(time.time()) - 600))
        unsigned = await http.post("/hooks/stripe", content=body, headers={"Content-Type": "application/json"})
        for refused in (tampered, wrong, stale, unsigned):
            assert refused.status_code == 401, refused.text
            assert STRIPE_SECRET not in refused.text
        assert "outside the tolerance" in stale.json()["detail"]
        # a body that does not fit the event's model: 422 naming the field
        bad = stripe_body("pi_3", amount="lots")
        shaped = await http.post("/hooks/stripe", content=bad, headers=stripe_headers(bad))
        assert shaped.status_code == 422 and "amount" in shaped.text
        assert len(await client.list_events(name="payment.succeeded")) == 1
        # Stripe sends no delivery-id header: a retry (the same event, signed anew) is told by the body's id
        retry = await http.post("/hooks/stripe", content=body, headers=stripe_headers(body, at=int(time.time()) - 5))
        assert retry.status_code == 200 and retry.json() == {"event_id": ok.json()["event_id"], "duplicate": True}
        other = stripe_body("pi_1", event_id="evt_other")  # another Stripe event about the same payment
        fresh = await http.post("/hooks/stripe", content=other, headers=stripe_headers(other))
        assert fresh.status_code == 200 and fresh.json()["duplicate"] is False
        anonymous = json.dumps({"type": "payment_intent.succeeded", "data": {"object": {"id": "pi_4", "amount": 1}}})
        no_id = await http.post("/hooks/stripe", content=anonymous, headers=stripe_headers(anonymous.encode()))
        assert no_id.status_code == 400 and "body.id" in no_id.json()["detail"]
        assert len(await client.list_events(name="payment.succeeded")) == 2

        # GitHub: a retried delivery publishes once and answers with the same event id
        push = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "acme/app"}}).encode()
        first = await http.post("/hooks/github", content=push, headers=github_headers(push, "d-1"))
        again = await http.post("/hooks/github", content=push, headers=github_headers(push, "d-1"))
        assert first.status_code == again.status_code == 200
        assert again.json() == {"event_id": first.json()["event_id"], "duplicate": True}
        forged = await http.post("/hooks/github", content=push, headers=github_headers(push, "d-2", secret="nope"))
        assert forged.status_code == 401
        assert [e.id for e in await client.list_events(name="repo.pushed")] == [first.json()["event_id"]]
        # content type, size cap, unknown hook
        plain = await http.post(
            "/hooks/github", content=push, headers={**github_headers(push, "d-3"), "Content-Type": "text/plain"}
        )
        assert plain.status_code == 415
        big = json.dumps({"ref": "x" * 70_000, "repository": {"full_name": "a/b"}}).encode()
        assert (await http.post("/hooks/github", content=big, headers=github_headers(big, "d-4"))).status_code == 413
        assert (await http.post("/hooks/nowhere", content=push)).status_code == 404
    text = log.read_text()
    assert "refused" in text and STRIPE_SECRET not in text and GITHUB_SECRET not in text and "pi_2" not in text


def test_a_webhook_without_a_secret_or_with_an_inline_one_is_refused_at_boot() -> None:
    from pydantic import BaseModel

    class Data(BaseModel):
        x: int

    for secret, needle in (("", "a secret is required"), ("whsec_inline", "never inline")):
        bad = lg.App("bad-hooks")
        ev = bad.event("thing.happened", payload=Data)
        bad.webhook("thing", event=ev, verify=lg.HmacSignature(header="X-Sig", secret=secret))
        with pytest.raises(DefinitionError) as caught:
            bad.definitions()
        assert needle in str(caught.value) and "verify.secret" in str(caught.value)
        if secret:
            assert secret not in str(caught.value)
