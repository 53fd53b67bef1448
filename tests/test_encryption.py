"""encrypt_steps: values at rest sealed, opened for replay and results, rotated, refused without a key."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.cli import run as cli_run
from lockgate.crypto import KEY_ENV, KEYS_ENV, Keyring, Sealer, Undecryptable, generate_key, is_sealed, parse_keys
from lockgate.inspect import connect
from lockgate.store import journal, runs, shared
from lockgate.store.keys import rotate_keys

from .apps.waits import eventually

MARK = "Zq7-MARKER"  # never to be found in clear in the store
OLD = "old:" + base64.b64encode(b"o" * 32).decode()
NEW = "new:" + base64.b64encode(b"n" * 32).decode()


class Secret(BaseModel):
    marker: str


class Note(BaseModel):
    text: str


class Items(BaseModel):
    items: list[Secret]


received: list[lg.FailureReport] = []


def make_app() -> lg.App:
    app = lg.App()

    def shout(text: str) -> str:
        return f"{text}-out"

    @app.workflow(name="sealed.parent", encrypt_steps=True)
    async def parent(ctx: lg.Context, p: Secret) -> str:
        out = await ctx.step("shout", shout, p.marker, input={"given": p.marker})
        note = await ctx.wait_for_signal("poke", Note)
        assert note is not None
        answer = await ctx.handle_update("ask", Note, lambda n: f"{n.text}-answer")
        child = await ctx.start_child("plain.child", {"marker": p.marker})
        back = await ctx.wait_child(child)
        return f"{out}|{note.text}|{answer}|{back}"

    @app.workflow(name="plain.child")
    async def child(ctx: lg.Context, p: Secret) -> str:
        return str(await ctx.step("echo", shout, p.marker))

    @app.workflow(name="sealed.fails", encrypt_steps=True, on_failure="sealed.handler")
    async def fails(ctx: lg.Context, p: Secret) -> str:
        await ctx.step("first", shout, p.marker)
        raise RuntimeError(f"gave up on {p.marker}")

    @app.workflow(name="sealed.handler")
    async def handler(ctx: lg.Context, p: lg.FailureReport) -> str:
        received.append(p)
        return f"handled {p.error_message}"

    @app.workflow(name="sealed.simple", encrypt_steps=True)
    async def simple(ctx: lg.Context, p: Secret) -> str:
        return str(await ctx.step("shout", shout, p.marker))

    return app


async def raw_dump(store_url: str) -> bytes:
    """Everything the store holds, as bytes: the SQLite files, or every lockgate table's rows as text."""
    if store_url.startswith("sqlite:"):
        path = Path(store_url.removeprefix("sqlite:///"))
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    out: list[str] = []
    async with await psycopg.AsyncConnection.connect(store_url) as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'lockgate%%' "
            "AND table_schema = current_schema()"
        )
        for (table,) in await cur.fetchall():
            rows = await (await conn.execute(f"SELECT t::text FROM {table} t")).fetchall()
            out += [r[0] for r in rows]
    return "\n".join(out).encode()


async def test_nothing_is_stored_in_clear(make_engine: Any, store_url: str) -> None:
    received.clear()
    app = make_app()
    async with make_engine(app, encryption_keys=[NEW]) as engine:
        h = await engine.start("sealed.parent", {"marker": MARK})
        await eventually(lambda: _waiting(engine, h.run_id, "signal"), what="waiting for the signal")
        await engine.signal(h.run_id, "poke", {"text": f"sig-{MARK}"})
        with pytest.raises(lg.PayloadError, match="text"):  # rejected by the body: its errors quote the payload
            await engine.update(h.run_id, "ask", {"txt": f"bad-{MARK}"}, timeout=30)
        assert await engine.update(h.run_id, "ask", {"text": f"upd-{MARK}"}) == f"upd-{MARK}-answer"
        result = await h.result(timeout=30)
        assert result == f"{MARK}-out|sig-{MARK}|upd-{MARK}-answer|{MARK}-out"

        failing = await engine.start("sealed.fails", {"marker": MARK})
        with pytest.raises(lg.RunFailed) as failed:
            await failing.result(timeout=30)
        assert MARK in str(failed.value)  # opened for the caller
        await eventually(lambda: received, timeout=30, what="the failure report")
        report = received[0]
        assert report.payload == {"marker": MARK}
        assert report.error_message is not None and MARK in report.error_message

        run = await engine.get_run(h.run_id)  # the engine holds the key: shown in clear
        assert run.payload == {"marker": MARK}
        steps = {s.key: s for s in await engine.steps(h.run_id)}
        assert steps["shout#0"].output == f"{MARK}-out"
        failed_events = [e for e in await engine.events(failing.run_id) if e.type == "run-failed"]
        assert MARK in failed_events[0].data["error_message"]
    dump = await raw_dump(store_url)
    assert b"$sealed" in dump
    assert MARK.encode() not in dump


async def _waiting(engine: lg.Client, run_id: str, on: str) -> bool:
    return (await engine.get_run(run_id)).waiting_on == on


async def test_a_reader_without_the_key_sees_encrypted(make_engine: Any, store_url: str) -> None:
    app = make_app()
    async with make_engine(app, encryption_keys=[NEW]) as engine:
        h = await engine.start("sealed.simple", {"marker": MARK})
        assert await h.result(timeout=30) == f"{MARK}-out"
    async with lg.Client(lg.App(), store_url, encryption_keys=[OLD]) as stranger:
        run = await stranger.get_run(h.run_id)
        assert (run.payload, run.output) == ("<encrypted>", "<encrypted>")
        assert [s.output for s in await stranger.steps(h.run_id)] == ["<encrypted>"]
        listed = await stranger.list_runs(workflow="sealed.simple")
        assert [r.output for r in listed] == ["<encrypted>"]
        with pytest.raises(lg.JournalDecryptionError, match=h.run_id):
            await stranger.result(h.run_id)
    async with lg.Client(lg.App(), store_url, encryption_keys=[]) as keyless:
        with pytest.raises(lg.EncryptionKeyError, match="no encryption key"):  # never sent in clear
            await keyless.signal(h.run_id, "poke", {"text": MARK})


async def test_the_inspector_opens_with_its_keyring_and_shows_encrypted_without(
    make_engine: Any, store_url: str
) -> None:
    async with make_engine(make_app(), encryption_keys=[NEW]) as engine:
        h = await engine.start("sealed.simple", {"marker": MARK})
        assert await h.result(timeout=30) == f"{MARK}-out"
    async with connect(store_url, keyring=Keyring.load([OLD])) as stranger:
        detail = await stranger.run_detail(h.run_id)
        assert (detail.run.payload, detail.run.output) == ("<encrypted>", "<encrypted>")
        assert [s.output for s in detail.steps] == ["<encrypted>"]
        assert [r.output for r in await stranger.runs(workflow="sealed.simple")] == ["<encrypted>"]
        assert [s.output for s in await stranger.steps(h.run_id)] == ["<encrypted>"]
    async with connect(store_url, keyring=Keyring.load([NEW])) as holder:
        run = await holder.run(h.run_id)
        assert (run.payload, run.output) == ({"marker": MARK}, f"{MARK}-out")
        assert [r.output for r in await holder.runs(workflow="sealed.simple", dead_letter=False)] == [f"{MARK}-out"]
        assert [s.output for s in (await holder.run_detail(h.run_id)).steps] == [f"{MARK}-out"]


def test_the_cli_shows_encrypted_without_the_key_and_clear_with_it(
    make_engine: Any, store_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    async def start() -> str:
        async with make_engine(make_app(), encryption_keys=[NEW]) as engine:
            h = await engine.start("sealed.simple", {"marker": MARK})
            await h.result(timeout=30)
            return str(h.run_id)

    run_id = asyncio.run(start())

    def show() -> dict[str, Any]:
        capsys.readouterr()
        assert cli_run(["workflows", "show", run_id, "--store", store_url, "--format", "json"]) == 0
        return dict(json.loads(capsys.readouterr().out))

    monkeypatch.delenv(KEYS_ENV, raising=False)
    monkeypatch.delenv(KEY_ENV, raising=False)
    shown = show()
    assert (shown["run"]["payload"], shown["run"]["output"]) == ("<encrypted>", "<encrypted>")
    assert shown["steps"][0]["output"] == "<encrypted>"
    monkeypatch.setenv(KEYS_ENV, NEW)
    shown = show()
    assert shown["run"]["payload"] == {"marker": MARK}
    assert shown["steps"][0]["output"] == f"{MARK}-out"


async def test_rotation_reseals_under_the_new_key_and_the_old_one_can_go(make_engine: Any, store_url: str) -> None:
    received.clear()
    app = make_app()
    async with make_engine(app, encryption_keys=[OLD]) as engine:
        before = await engine.start("sealed.simple", {"marker": MARK})
        await before.result(timeout=30)
        failing = await engine.start("sealed.fails", {"marker": MARK})
        with pytest.raises(lg.RunFailed):
            await failing.result(timeout=30)
    async with make_engine(app, encryption_keys=[NEW, OLD]) as engine:
        assert await engine.result(before.run_id) == f"{MARK}-out"  # the old key still opens old values
        after = await engine.start("sealed.simple", {"marker": MARK})
        await after.result(timeout=30)
        row = await engine.store.read(shared.get_run, after.run_id)
        assert json.loads(row["payload"])["$sealed"] == "new"  # new values under the new key

        dry = await rotate_keys(engine.store, engine.keyring, batch=3, dry_run=True)
        assert dry.values_resealed > 0 and not dry.unopened
        done = await rotate_keys(engine.store, engine.keyring, batch=3)
        assert done.values_resealed == dry.values_resealed
        assert not done.unopened
        again = await rotate_keys(engine.store, engine.keyring, batch=3)
        assert again.values_resealed == 0 and again.values_current == done.values_current + done.values_resealed
    dump = await raw_dump(store_url)
    assert b'"$sealed":"old"' not in dump and b'\\"$sealed\\":\\"old\\"' not in dump
    async with make_engine(app, encryption_keys=[NEW]) as engine:  # the old key removed
        assert await engine.result(before.run_id) == f"{MARK}-out"
        with pytest.raises(lg.RunFailed, match=MARK):
            await engine.result(failing.run_id)
        events = [e for e in await engine.events(failing.run_id) if e.type == "run-failed"]
        assert MARK in events[0].data["error_message"]
        # a value sealed under a key nobody holds any more is reported, not dropped
        stray = Keyring(parse_keys([generate_key("gone")], source="test")).seal('"x"', (before.run_id, "", "output"))
        await engine.store.write(_set_output, before.run_id, stray)
        found = await rotate_keys(engine.store, engine.keyring)
        assert [(u.table, u.row, u.column, u.key_id) for u in found.unopened] == [
            ("runs", before.run_id, "output", "gone")
        ]


async def _set_output(tx: Any, run_id: str, output: str) -> None:
    current = await runs.find_run(tx, run_id)
    assert current is not None
    rows = await tx.execute(
        "reseal_runs",
        {
            "k1": run_id,
            "k2": "",
            "payload": current["payload"],
            "old_payload": current["payload"],
            "output": output,
            "old_output": current["output"],
            "error_message": current["error_message"],
            "old_error_message": current["error_message"],
        },
    )
    assert rows


async def test_a_workflow_that_encrypts_refuses_to_boot_without_a_key(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(lg.DefinitionError, match=r"sealed\.parent") as refused:
        async with lg.Engine(make_app(), store_url):
            pass
    assert refused.value.fields == ["encrypt_steps"]
    with pytest.raises(lg.DefinitionError, match=r"sealed\.parent"):
        async with lg.Client(make_app(), store_url):
            pass


async def test_one_key_in_lockgate_encryption_key_seals_and_opens(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)
    monkeypatch.setenv(KEY_ENV, NEW)
    async with lg.Engine(make_app(), store_url) as engine:  # boots: encrypt_steps has its key
        out = await engine.run("sealed.simple", {"marker": MARK}, timeout=30)
    assert out == f"{MARK}-out"
    assert MARK.encode() not in await raw_dump(store_url)
    assert Keyring.load().ids == ["new"]
    monkeypatch.setenv(KEYS_ENV, f"{NEW},{OLD}")  # moving to a list: the single key among them is fine
    assert Keyring.load().ids == ["new", "old"]


def test_lockgate_encryption_key_holds_one_key_that_agrees_with_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)
    monkeypatch.setenv(KEY_ENV, f"{NEW},{OLD}")
    with pytest.raises(lg.EncryptionKeyError, match=f"{KEY_ENV} holds one key"):
        lg.Client(lg.App(), "sqlite:///:memory:")
    monkeypatch.setenv(KEY_ENV, "k1:not*base64")
    with pytest.raises(lg.EncryptionKeyError, match=f"{KEY_ENV}: key 1.*base64"):
        lg.Client(lg.App(), "sqlite:///:memory:")
    monkeypatch.setenv(KEY_ENV, NEW)
    monkeypatch.setenv(KEYS_ENV, OLD)
    with pytest.raises(lg.EncryptionKeyError, match=f"{KEY_ENV} \\('new'\\) is not among the keys of {KEYS_ENV}"):
        lg.Client(lg.App(), "sqlite:///:memory:")


def test_a_bad_key_is_refused_naming_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv(KEYS_ENV, "k1:not*base64")
    with pytest.raises(lg.EncryptionKeyError, match=f"{KEYS_ENV}.*base64"):
        lg.Client(lg.App(), "sqlite:///:memory:")
    short = "k1:" + base64.b64encode(b"x" * 16).decode()
    with pytest.raises(lg.EncryptionKeyError, match=r"encryption_keys.*16 bytes"):
        lg.Client(lg.App(), "sqlite:///:memory:", encryption_keys=[short])
    with pytest.raises(lg.EncryptionKeyError, match="id:base64"):
        lg.Client(lg.App(), "sqlite:///:memory:", encryption_keys=["nocolon"])


def test_encrypt_steps_cannot_fold_batch_items() -> None:
    app = lg.App()

    @app.workflow(name="b", encrypt_steps=True, batch=lg.Batch(item=Secret, max_size=5, timeout="1s"))
    async def b(ctx: lg.Context, p: Items) -> None:
        return None

    with pytest.raises(lg.DefinitionError, match="batch"):
        app.definitions()


def test_a_value_sealed_for_one_place_does_not_open_in_another() -> None:
    ring = Keyring(parse_keys([NEW], source="test"))
    sealed = ring.seal('"v"', ("run_a", "step#0", "output"))
    assert is_sealed(sealed)
    assert ring.open(sealed, ("run_a", "step#0", "output")) == '"v"'
    sealer = Sealer(ring, "run_b")
    with pytest.raises(lg.JournalDecryptionError, match="run_b"):
        sealer.open("step#0", "output", sealed)
    for broken in (
        '{"$sealed":"new","for":{},"data":"AA=="}',
        '{"$sealed":7}',
        '{"$sealed":"new","for":[],"data":"!"}',
    ):
        with pytest.raises(Undecryptable):
            ring.reseal(broken)


async def test_a_tampered_ciphertext_suspends_the_run(make_engine: Any, store_url: str) -> None:
    app = lg.App()
    calls: list[str] = []

    def effect(marker: str) -> str:
        calls.append(marker)
        return f"{marker}-done"

    @app.workflow(name="sealed.sleeper", encrypt_steps=True)
    async def sleeper(ctx: lg.Context, p: Secret) -> str:
        first = await ctx.step("effect", effect, p.marker)
        await ctx.sleep("nap", "2s")
        return str(first)

    async with make_engine(app, encryption_keys=[NEW], inline_sleep="0s") as engine:
        h = await engine.start("sealed.sleeper", {"marker": MARK})
        await eventually(lambda: _waiting(engine, h.run_id, "timer"), what="parked on the timer")
        await engine.store.write(_tamper, h.run_id, "effect#0")
        run = await eventually(lambda: _suspended(engine, h.run_id), timeout=30, what="suspended")
        assert run.error_tag == "JournalDecryptionError"
        assert h.run_id in (run.error_message or "") and "effect#0" in (run.error_message or "")
        assert calls == [MARK]  # the step was not run again blindly


async def _tamper(tx: Any, run_id: str, step_key: str) -> None:
    entry = next(e for e in await journal.load_journal(tx, run_id) if e["step_key"] == step_key)
    envelope = json.loads(entry["output"])
    data = bytearray(base64.b64decode(envelope["data"]))
    data[-1] ^= 1
    envelope["data"] = base64.b64encode(bytes(data)).decode()
    await tx.execute(
        "reseal_journal",
        {
            "k1": run_id,
            "k2": step_key,
            "output": json.dumps(envelope, separators=(",", ":")),
            "old_output": entry["output"],
            "error_message": entry["error_message"],
            "old_error_message": entry["error_message"],
        },
    )


async def _suspended(engine: lg.Client, run_id: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    return run if run.status == "suspended" else None


async def test_redrive_and_retry_work_on_encrypted_runs(make_engine: Any) -> None:
    received.clear()
    app = make_app()
    async with make_engine(app, encryption_keys=[NEW]) as engine:
        failing = await engine.start("sealed.fails", {"marker": MARK})
        with pytest.raises(lg.RunFailed):
            await failing.result(timeout=30)
        again = await engine.retry(failing.run_id)
        with pytest.raises(lg.RunFailed, match=MARK):
            await again.result(timeout=30)
        retried = await engine.get_run(str(again.run_id))
        assert retried.payload == {"marker": MARK}
        await engine.redrive(failing.run_id)
        with pytest.raises(lg.RunFailed, match=MARK):
            await engine.result(failing.run_id, timeout=30)
        steps = await engine.steps(failing.run_id)
        assert [s.output for s in steps] == [f"{MARK}-out"]
        await engine.resume_from_step(failing.run_id, "first")
        with pytest.raises(lg.RunFailed, match=MARK):
            await engine.result(failing.run_id, timeout=30)
        assert [s.output for s in await engine.steps(failing.run_id)] == [f"{MARK}-out"]


def test_the_keys_commands(
    make_engine: Any, store_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    assert cli_run(["keys", "generate", "--id", "fresh"]) == 0
    fresh = capsys.readouterr().out.strip()
    assert parse_keys(fresh, source="printed")[0][0] == "fresh"

    async def start() -> None:
        async with make_engine(make_app(), encryption_keys=[OLD]) as engine:
            await (await engine.start("sealed.simple", {"marker": MARK})).result(timeout=30)

    asyncio.run(start())

    def rotate(*extra: str) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        code = cli_run(["keys", "rotate", "--store", store_url, "--format", "json", *extra])
        return code, dict(json.loads(capsys.readouterr().out))

    monkeypatch.setenv(KEYS_ENV, f"{fresh},{OLD}")
    code, dry = rotate("--dry-run", "--workflow", "sealed.simple")
    assert code == 0 and dry["dry_run"] and dry["values_resealed"] > 0
    code, done = rotate("--batch", "1")
    assert code == 0 and done["values_resealed"] == dry["values_resealed"] and done["unopened"] == []
    monkeypatch.setenv(KEYS_ENV, NEW)  # a key that opens nothing stored: every value is listed, none dropped
    code, stuck = rotate()
    assert code == 1 and {u["key_id"] for u in stuck["unopened"]} == {"fresh"}
    assert len(stuck["unopened"]) == done["values_resealed"]


async def test_a_start_parked_at_the_gate_waits_sealed(make_engine: Any, store_url: str) -> None:
    app = lg.App()

    @app.workflow(name="sealed.one_at_a_time", encrypt_steps=True, concurrency=lg.Concurrency(limit=1))
    async def one_at_a_time(ctx: lg.Context, p: Secret) -> str:
        await ctx.wait_for_signal("go", Note)
        return f"{p.marker}-went"

    async with make_engine(app, encryption_keys=[NEW]) as engine:
        first = await engine.start("sealed.one_at_a_time", {"marker": f"1-{MARK}"})
        second = await engine.start("sealed.one_at_a_time", {"marker": f"2-{MARK}"})
        assert second.status == "queued"
        await eventually(lambda: _waiting(engine, str(first.run_id), "signal"), what="first waiting")
        assert MARK.encode() not in await raw_dump(store_url)  # the parked payload too
        await engine.signal(str(first.run_id), "go", {"text": "now"})
        assert await first.result(timeout=30) == f"1-{MARK}-went"
        run_id = await engine.admitted_run(second.ticket, timeout=30)
        await eventually(lambda: _waiting(engine, run_id, "signal"), what="second waiting")
        await engine.signal(run_id, "go", {"text": "now"})
        assert await second.result(timeout=30) == f"2-{MARK}-went"
    assert MARK.encode() not in await raw_dump(store_url)


def make_publishing_app() -> tuple[lg.App, list[str]]:
    """An encrypted run publishes an event whose data carries the marker; a trigger and a cancel-on read it."""
    app = lg.App()
    seen: list[str] = []
    noted = app.event("sealed.noted", payload=Secret)

    @app.workflow(name="sealed.publisher", encrypt_steps=True)
    async def publisher(ctx: lg.Context, p: Secret) -> str:
        return await ctx.publish(noted, None, {"marker": p.marker})

    @app.workflow(name="sealed.listener", encrypt_steps=True)
    async def listener(ctx: lg.Context, p: Secret) -> str:
        seen.append(p.marker)
        return p.marker

    @app.workflow(
        name="sealed.sleeper",
        encrypt_steps=True,
        cancel_on=[lg.CancelOn(event=noted, match=lambda ev, p: ev.data.marker == p.marker)],
    )
    async def sleeper(ctx: lg.Context, p: Secret) -> None:
        await ctx.sleep("nap", "1h")

    app.trigger(on=noted, workflow="sealed.listener")
    return app, seen


async def test_an_encrypted_run_publishes_sealed_data_its_consumers_open(make_engine: Any, store_url: str) -> None:
    app, seen = make_publishing_app()
    async with make_engine(app, encryption_keys=[NEW]) as engine:
        sleeping = await engine.start("sealed.sleeper", {"marker": MARK})
        await eventually(lambda: _waiting(engine, sleeping.run_id, "timer"), what="the sleeper asleep")
        h = await engine.start("sealed.publisher", {"marker": MARK})
        event_id = await h.result(timeout=30)
        await eventually(lambda: seen == [MARK], timeout=30, what="the triggered run")  # opened by the fan-out

        async def cancelled() -> bool:
            return (await engine.get_run(sleeping.run_id)).status == "cancelled"

        await eventually(cancelled, timeout=30, what="the cancel-on")  # opened by the cancel-on sweep
        assert (await engine.get_event(event_id)).data == {"marker": MARK}
    dump = await raw_dump(store_url)
    assert MARK.encode() not in dump
    async with connect(store_url, keyring=Keyring.load([OLD])) as stranger:
        assert (await stranger.get_event(event_id)).data == "<encrypted>"
