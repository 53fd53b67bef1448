"""What a run records: a step's input up to a size, and the recording mode a deployment chooses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.errors import InvalidArgument
from lockgate.recording import RECORDING_ENV


class Doc(BaseModel):
    text: str


def build_app() -> lg.App:
    app = lg.App()

    def length(text: str) -> int:
        return len(text)

    @app.workflow(name="measure")
    async def measure(ctx: lg.Context, p: Doc) -> int:
        return int(await ctx.step("length", length, p.text, input={"text": p.text}))

    return app


async def test_a_small_input_is_kept_whole(make_engine: Any) -> None:
    async with make_engine(build_app()) as engine:
        handle = await engine.start("measure", {"text": "hello"})
        assert await engine.result(handle.run_id, timeout=30) == 5
        (attempt,) = await engine.attempts(handle.run_id)
    assert attempt.input == {"text": "hello"}
    assert not attempt.input_truncated
    assert attempt.input_size == len('{"text":"hello"}')


async def test_an_input_past_the_limit_keeps_its_head_marked_truncated(make_engine: Any) -> None:
    text = "é" * 5000  # two bytes a character: the limit counts bytes
    async with make_engine(build_app(), step_input_limit=1024) as engine:
        handle = await engine.start("measure", {"text": text})
        assert await engine.result(handle.run_id, timeout=30) == 5000
        (attempt,) = await engine.attempts(handle.run_id)
        assert engine.core.input_limit == 1024
    assert attempt.input_truncated
    assert attempt.input_size == len(('{"text":"' + text + '"}').encode())
    assert isinstance(attempt.input, str) and attempt.input.startswith('{"text":"éé')
    assert len(attempt.input.encode()) <= 1024
    assert attempt.to_dict()["input_truncated"] is True


async def test_the_default_limit_is_64_kib(make_engine: Any) -> None:
    text = "x" * (64 * 1024)
    async with make_engine(build_app()) as engine:
        handle = await engine.start("measure", {"text": text})
        await engine.result(handle.run_id, timeout=30)
        (attempt,) = await engine.attempts(handle.run_id)
    assert attempt.input_truncated and len(attempt.input) == 64 * 1024


@pytest.mark.parametrize("limit", [-1, 1.5, "64k", True])
def test_a_bad_input_limit_is_refused(limit: Any, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="step_input_limit"):
        lg.Engine(build_app(), f"sqlite:///{tmp_path}/x.db", step_input_limit=limit)
    assert not (tmp_path / "x.db").exists()


async def test_the_environment_overrides_the_recording_mode(
    make_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RECORDING_ENV, "coarse")
    async with make_engine(build_app(), recording="full") as engine:
        assert engine.recording == "coarse"
        handle = await engine.start("measure", {"text": "hi"})
        await engine.result(handle.run_id, timeout=30)
        assert await engine.attempts(handle.run_id) == []  # coarse keeps no attempt rows
        run = await engine.get_run(handle.run_id)
    assert run.status == "succeeded"
    monkeypatch.setenv(RECORDING_ENV, "full")
    async with make_engine(build_app(), recording="coarse") as engine:
        assert engine.recording == "full"


def test_a_bad_recording_mode_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(RECORDING_ENV, "verbose")
    with pytest.raises(InvalidArgument, match=RECORDING_ENV):
        lg.Engine(build_app(), f"sqlite:///{tmp_path}/x.db")
    monkeypatch.delenv(RECORDING_ENV)
    with pytest.raises(InvalidArgument, match="recording"):
        lg.Engine(build_app(), f"sqlite:///{tmp_path}/x.db", recording="verbose")
    assert not (tmp_path / "x.db").exists()
