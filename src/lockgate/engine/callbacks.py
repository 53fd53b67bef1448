"""``ctx.create_token`` and ``ctx.wait_for_token``: a run waits for whoever holds a token.

Creating a token journals it (the secret, sealed when the run is encrypted, so a replay hands
the body the same token) and stores its row beside the entry, in one commit; the row holds the
secret's SHA-256 only. A completion (``complete_token``) is a message of kind ``token`` to the
run, named after the token's id: it may come before the body waits (it is kept) or after the
run parked (it wakes it), and the park looks once more for one that came as it parked, as a
signal's does. The wait's journal entry records the completion, so a replay returns the same
payload, rejection or expiry.
"""

from __future__ import annotations

import json
import typing
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from ..callbacks import CallbackToken, TokenExpired, TokenRejected, callback_url, new_token, token_hash
from ..crypto import Sealer, is_sealed
from ..durations import Duration, to_seconds
from ..errors import InvalidArgument
from ..ids import new_id
from ..names import name_problem
from ..serde import import_model, payload_json, validate_payload
from ..store import callbacks as store_tokens
from ..store.base import Row, Tx
from .core import Core
from .durable import Running, Wait, model_ref
from .operations import take_message

__all__ = ["TokenOperations", "complete_token", "create_token", "recorded_outcome", "wait_for_token"]


async def create_token(
    x: Running,
    name: str,
    *,
    model: type[BaseModel] | None = None,
    timeout: Duration | None = None,
    single_use: bool = True,
) -> CallbackToken:
    """``ctx.create_token``: a new token for this run, journaled (a replay returns the same one)."""
    where = f"ctx.create_token({name!r})"
    _check(name, model, single_use, where)
    key = x.key(f"token:{name}")
    entry = x.entry(key)
    if entry is not None and entry["status"] == "completed":
        return recorded_token(x, key, entry["output"], model)
    seconds = None if timeout is None else to_seconds(timeout, what=f"{where} timeout")
    async with x.busy():
        now = x.clock.now()
        secret = new_token()
        expires = None if seconds is None else now + seconds
        at = None if expires is None else datetime.fromtimestamp(expires, UTC)
        url = callback_url(x.host.public_url, secret)
        token = CallbackToken(name, new_id("tok"), secret, url, at, single_use, model)
        text = json.dumps(token.to_dict())
        output = text if x.sealer is None else x.sealer.seal(key, "output", text)
        row = {
            "id": token.id,
            "hash": token_hash(secret),
            "run_id": x.run_id,
            "step_key": key,
            "name": name,
            "model": None if model is None else model_ref(name, model).get(name),
            "single_use": 1 if single_use else 0,
            "now": now,
            "expires_at": expires,
        }

        async def insert(tx: Tx) -> None:
            await store_tokens.insert_token(tx, row)

        entry_row = {"step_key": key, "kind": "token", "status": "completed", "output": output, "started_at": now}
        await x.record_with(entry_row, insert)
        x.event("token-created", {"name": name, "token_id": token.id, "expires_at": expires, "step": key})
        return token


def _check(name: Any, model: Any, single_use: Any, where: str) -> None:
    problem = name_problem(name)
    if problem is not None:
        raise InvalidArgument(f"{where}: name {problem}")
    if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise InvalidArgument(f"{where}: model must be a pydantic model class, got {model!r}")
    if not isinstance(single_use, bool):
        raise InvalidArgument(f"{where}: single_use must be True or False, got {single_use!r}")


def recorded_token(x: Running, key: str, output: str, model: type[BaseModel] | None) -> CallbackToken:
    text = output if x.sealer is None else x.sealer.open(key, "output", output)
    return CallbackToken.from_dict(json.loads(text), model)



_REJECTED: Any = object()


def _outcome(token: CallbackToken, body: str) -> Any:
    """What a completion's payload gives the body, or ``_REJECTED`` (raised once the completion is recorded)."""
    try:
        return recorded_outcome(token, body)
    except TokenRejected:
        return _REJECTED

async def wait_for_token(x: Running, token: CallbackToken) -> Any:
    """``ctx.wait_for_token``: the payload the token was completed with (as its model, when it has one).

    ``TokenRejected`` when it was rejected, ``TokenExpired`` once its timeout passed first."""
    if not isinstance(token, CallbackToken):
        raise InvalidArgument(f"ctx.wait_for_token: expected the CallbackToken ctx.create_token made, got {token!r}")
    key = x.key(f"token-wait:{token.name}")
    entry = x.entry(key)
    if entry is not None and entry["status"] == "completed":
        return recorded_outcome(token, _opened(x, key, entry["output"]))
    due = None if token.expires_at is None else token.expires_at.timestamp()
    clock = x.clock
    async with x.busy():
        taken = await take_message(
            x,
            "token",
            token.id,
            lambda body: _outcome(token, body),  # a model the completing process could not import: checked here
            lambda _, exc: ("token-payload-rejected", {"name": token.name, "token_id": token.id, "error": str(exc)}),
        )
        if taken is not None:
            message, body, outcome = taken
            stored = body if x.sealer is None else x.sealer.seal(key, "output", body)
            done = {"step_key": key, "kind": "token", "status": "completed", "output": stored, "due_at": due}
            await x.record(done, message={"id": message["id"], "status": "consumed"})
            x.event("token-received", {"name": token.name, "token_id": token.id, "step": key})
            return recorded_outcome(token, body) if outcome is _REJECTED else outcome
        if due is not None and due <= clock.now():
            expired = json.dumps({"expired": True})
            stored = expired if x.sealer is None else x.sealer.seal(key, "output", expired)
            await x.record({"step_key": key, "kind": "token", "status": "completed", "output": stored, "due_at": due})
            x.event("token-expired", {"name": token.name, "token_id": token.id, "step": key})
            raise TokenExpired(token.name, token.id)
    models = {} if token.model is None else model_ref(token.id, token.model)
    await x.block(Wait("token", wake_at=due, names=[token.id], models=models))


def _opened(x: Running, key: str, output: str) -> str:
    return output if x.sealer is None else str(x.sealer.open(key, "output", output))


def recorded_outcome(token: CallbackToken, text: str) -> Any:
    """What a completion (``{"value": ...}``, ``{"rejected": ...}``, ``{"expired": true}``) means to the body."""
    data = json.loads(text)
    if data.get("expired"):
        raise TokenExpired(token.name, token.id)
    if "rejected" in data:
        raise TokenRejected(token.name, data.get("reason"))
    value = data.get("value")
    if token.model is None:
        return value
    return validate_payload(token.model, value, what=f"callback token {token.name!r} payload")


class TokenOperations:
    """The two ``Context`` methods, for the execution to inherit (it is the ``Running`` they take)."""

    async def create_token(
        self,
        name: str,
        *,
        model: type[BaseModel] | None = None,
        timeout: Duration | None = None,
        single_use: bool = True,
    ) -> CallbackToken:
        x = typing.cast(Running, self)
        return await create_token(x, name, model=model, timeout=timeout, single_use=single_use)

    async def wait_for_token(self, token: CallbackToken) -> Any:
        return await wait_for_token(typing.cast(Running, self), token)


# -- completing ------------------------------------------------------------------------------


async def complete_token(
    core: Core,
    *,
    token: str | None = None,
    token_id: str | None = None,
    payload: Any = None,
    rejected: str | None = None,
    reject: bool = False,
) -> Row:
    """Complete a token by its secret (``token``) or, for an operator, by its id; the token's row.

    The payload is validated before anything is written (``PayloadError``); ``UnknownToken``,
    ``TokenExpired``, ``TokenUsed`` or ``TokenGone`` when the token cannot be completed."""
    hashed = token_hash(token) if token is not None else None
    if hashed is None and not token_id:
        raise InvalidArgument("complete_token: a token or a token id is required")
    now = core.clock.now()
    row = await core.store.read(store_tokens.find_token, hashed, token_id)
    refused = store_tokens.refusal(row, now)
    if refused is not None:
        raise refused
    assert row is not None
    if reject:
        body = json.dumps({"rejected": True, "reason": rejected})
    else:
        model = None if row["model"] is None else import_model(row["model"])
        text = payload_json(model, payload, what=f"callback token {row['name']!r} payload")
        body = '{"value": ' + text + "}"
    mid = new_id("msg")
    if _sealed(core, row):
        body = Sealer(core.keyring, row["run_id"]).seal(f"msg:{mid}", "payload", body)
    done: Row = await core.store.write(
        store_tokens.complete_token, hashed, row["id"], {"id": mid, "payload": body}, now
    )
    core.runtime.wake(now)
    return done


def _sealed(core: Core, row: Row) -> bool:
    """Whether the token's run keeps its values sealed (its workflow encrypts, or its payload came sealed)."""
    if is_sealed(row["run_payload"]):
        return True
    try:
        return core.app.get(row["workflow"]).encrypt_steps
    except Exception:
        return False
