"""Step retry: the policy's arithmetic, and how a run retries on the engine's clock."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv


class Job(BaseModel):
    fail_times: int = 1_000


class ProviderDown(Exception):
    pass


class Throttled(Exception):
    def __init__(self, *, retry_after: Any = None, retry_after_ms: Any = None) -> None:
        super().__init__("slow down")
        if retry_after is not None:
            self.retry_after = retry_after
        if retry_after_ms is not None:
            self.retry_after_ms = retry_after_ms


class Transient(Exception):
    transient = True


# -- the policy itself -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "delays"),
    [
        (lg.Retry(strategy="exponential", base_delay=1, factor=2, max_delay=None, jitter=False), [1, 2, 4, 8, 16]),
        (lg.Retry(strategy="exponential", base_delay="500ms", factor=3, max_delay=None, jitter=False), [0.5, 1.5, 4.5]),
        (lg.Retry(strategy="fixed", base_delay="3s", jitter=False), [3, 3, 3]),
        (lg.Retry(strategy="linear", base_delay=2, jitter=False), [2, 4, 6, 8]),
        (lg.Retry(strategy="exponential", base_delay=1, max_delay=5, jitter=False), [1, 2, 4, 5, 5, 5]),
        (lg.Retry(strategy="linear", base_delay=2, max_delay="5s", jitter=False), [2, 4, 5, 5]),
        (lg.Retry(strategy="exponential", base_delay=timedelta(seconds=10), jitter=False), [10, 20, 30, 30]),
        (lg.Retry(strategy="fixed", base_delay="2m", jitter=False), [120, 120]),  # the cap never cuts the base
        (lg.Retry(strategy="exponential", base_delay=60, max_delay=45, jitter=False), [60, 60]),
    ],
)
def test_backoff_without_jitter(policy: lg.Retry, delays: list[float]) -> None:
    assert [policy.backoff(n) for n in range(1, len(delays) + 1)] == pytest.approx(delays)


def test_jitter_stays_between_zero_and_the_computed_delay() -> None:
    policy = lg.Retry(strategy="exponential", base_delay=1, max_delay=5, jitter=True)
    plain = lg.Retry(strategy="exponential", base_delay=1, max_delay=5, jitter=False)
    rng = random.Random(7)
    for attempt in range(1, 7):
        samples = [policy.backoff(attempt, rng) for _ in range(200)]
        assert all(0 <= s <= plain.backoff(attempt) for s in samples)
        assert max(samples) - min(samples) > plain.backoff(attempt) / 4  # really spread out


def test_default_policy() -> None:
    policy = lg.Retry()
    assert (policy.max_attempts, policy.strategy, policy.jitter, policy.respect_retry_after) == (
        3,
        "exponential",
        True,
        True,
    )
    assert policy.is_retryable(ValueError()) and policy.is_retryable(ProviderDown())


def test_retryable_by_class_or_predicate() -> None:
    by_class = lg.Retry(retryable=(ProviderDown,))
    assert by_class.is_retryable(ProviderDown()) and not by_class.is_retryable(ValueError())
    by_predicate = lg.Retry(retryable=lambda e: getattr(e, "transient", False))
    assert by_predicate.is_retryable(Transient()) and not by_predicate.is_retryable(ProviderDown())


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (Throttled(retry_after=42), 42.0),
        (Throttled(retry_after="1m"), 60.0),
        (Throttled(retry_after=timedelta(seconds=3)), 3.0),
        (Throttled(retry_after_ms=2500), 2.5),
        (lg.RetryAfter(7), 7.0),
        (Throttled(retry_after=-5), 1.0),  # an unusable hint falls back to the computed backoff
        (Throttled(retry_after="soon"), 1.0),
        (ProviderDown(), 1.0),
    ],
)
def test_next_delay_honours_retry_hints(error: BaseException, expected: float) -> None:
    policy = lg.Retry(strategy="fixed", base_delay=1, jitter=False)
    assert policy.next_delay(1, error) == pytest.approx(expected)
    ignoring = lg.Retry(strategy="fixed", base_delay=1, jitter=False, respect_retry_after=False)
    assert ignoring.next_delay(1, error) == 1.0


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"strategy": "random"}, "strategy"),
        ({"factor": 0}, "factor"),
        ({"base_delay": "-1s"}, "base_delay"),
        ({"max_delay": "forever"}, "max_delay"),
        ({"max_elapsed": -1}, "max_elapsed"),
        ({"retryable": "ProviderDown"}, "retryable"),
        ({"retryable": (ProviderDown, "x")}, "retryable"),
    ],
)
def test_bad_policies_are_refused_naming_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"Retry\.{field}"):
        lg.Retry(**options)


# -- retrying inside a run ---------------------------------------------------------------


def flaky_app(calls: list[int], error: Callable[[int], Exception], retry: lg.Retry | None) -> lg.App:
    """One workflow whose step fails its first ``fail_times`` calls with ``error(call)``."""
    app = lg.App()

    @app.workflow(name="flaky")
    async def flaky(ctx: lg.Context, p: Job) -> str:
        def call() -> str:
            calls.append(len(calls) + 1)
            if len(calls) <= p.fail_times:
                raise error(len(calls))
            return f"ok after {len(calls)}"

        return str(await ctx.step("call", call, retry=retry))

    return app


async def offsets(env: TestEnv, run_id: str) -> list[float]:
    """Seconds from the first attempt to each attempt, on the engine's clock."""
    rows = await env.engine.attempts(run_id)
    first = rows[0].started_at
    assert first is not None
    return [round((r.started_at - first).total_seconds(), 3) for r in rows if r.started_at is not None]


async def test_a_step_without_a_policy_runs_once(env_factory: Any) -> None:
    calls: list[int] = []
    async with env_factory(flaky_app(calls, lambda n: ProviderDown(f"down #{n}"), None)) as env:
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.run("flaky", {}, timeout=10)
        steps = await env.engine.steps(info.value.run_id)
    assert calls == [1]
    assert info.value.error_tag == "ProviderDown"
    assert (steps[0].status, steps[0].attempts, steps[0].error_tag) == ("failed", 1, "ProviderDown")


async def test_exhausted_retries_fail_the_run_with_the_step_error_type(env_factory: Any) -> None:
    calls: list[int] = []
    policy = lg.Retry(max_attempts=3, base_delay=0, jitter=False)
    async with env_factory(flaky_app(calls, lambda n: ProviderDown(f"down #{n}"), policy)) as env:
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.run("flaky", {}, timeout=10)
        run_id = info.value.run_id
        steps = await env.engine.steps(run_id)
        attempts = await env.engine.attempts(run_id)
        events = [e for e in await env.engine.events(run_id) if e.type == "run-failed"]
    assert calls == [1, 2, 3]
    assert info.value.error_tag == "ProviderDown"
    assert "after 3 attempt(s)" in (info.value.error_message or "")
    assert "down #3" in (info.value.error_message or "")
    assert (steps[0].status, steps[0].attempts, steps[0].error_message) == ("failed", 3, "down #3")
    assert [(a.attempt, a.status, a.error_message) for a in attempts] == [
        (1, "failed", "down #1"),
        (2, "failed", "down #2"),
        (3, "failed", "down #3"),
    ]
    assert events[0].data["error_tag"] == "ProviderDown"


async def test_a_step_that_recovers_within_max_attempts_succeeds(env_factory: Any) -> None:
    calls: list[int] = []
    policy = lg.Retry(max_attempts=4, base_delay=0, jitter=False)
    async with env_factory(flaky_app(calls, lambda n: ProviderDown(), policy)) as env:
        assert await env.engine.run("flaky", {"fail_times": 3}, timeout=10) == "ok after 4"
    assert calls == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (lg.Retry(max_attempts=4, strategy="linear", base_delay=10, jitter=False), [0, 10, 30, 60]),
        (
            lg.Retry(max_attempts=4, strategy="exponential", base_delay=10, max_delay=None, jitter=False),
            [0, 10, 30, 70],
        ),
        (lg.Retry(max_attempts=4, strategy="fixed", base_delay="1m", jitter=False), [0, 60, 120, 180]),
        (lg.Retry(max_attempts=4, base_delay=10, max_delay=15, jitter=False), [0, 10, 25, 40]),
    ],
    ids=["linear", "exponential", "fixed", "capped"],
)
async def test_retries_wait_on_the_engine_clock(env_factory: Any, policy: lg.Retry, expected: list[float]) -> None:
    calls: list[int] = []
    async with env_factory(flaky_app(calls, lambda n: ProviderDown(), policy)) as env:
        handle = await env.engine.start("flaky", {"fail_times": 3})
        await env.settle()
        for attempt, (before, due) in enumerate(itertools.pairwise(expected), start=1):
            await env.advance(due - before - 0.5)
            assert len(calls) == attempt  # not a moment early
            await env.advance(0.5)
            assert len(calls) == attempt + 1
        assert await env.engine.result(handle.run_id, timeout=10) == "ok after 4"
        assert await offsets(env, handle.run_id) == pytest.approx(expected)


async def test_jittered_retries_stay_within_the_backoff(env_factory: Any) -> None:
    calls: list[int] = []
    policy = lg.Retry(max_attempts=3, strategy="fixed", base_delay=100, jitter=True)
    async with env_factory(flaky_app(calls, lambda n: ProviderDown(), policy)) as env:
        handle = await env.engine.start("flaky", {"fail_times": 2})
        await env.settle()
        await env.advance(100)
        await env.advance(100)
        assert await env.engine.result(handle.run_id, timeout=10) == "ok after 3"
        gaps = await offsets(env, handle.run_id)
    assert 0 <= gaps[1] <= 100 and 0 <= gaps[2] - gaps[1] <= 100


async def test_non_retryable_error_fails_fast(env_factory: Any) -> None:
    calls: list[int] = []
    policy = lg.Retry(max_attempts=5, base_delay=0, retryable=(ProviderDown,))
    async with env_factory(flaky_app(calls, lambda n: ValueError("bad request"), policy)) as env:
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.run("flaky", {}, timeout=10)
    assert calls == [1]
    assert info.value.error_tag == "ValueError"


async def test_retryable_class_is_retried(env_factory: Any) -> None:
    calls: list[int] = []
    policy = lg.Retry(max_attempts=5, base_delay=0, retryable=(ProviderDown,))
    async with env_factory(flaky_app(calls, lambda n: ProviderDown(), policy)) as env:
        assert await env.engine.run("flaky", {"fail_times": 2}, timeout=10) == "ok after 3"


async def test_predicate_decides_what_is_retried(env_factory: Any) -> None:
    def error(n: int) -> Exception:
        return Transient() if n == 1 else ProviderDown("permanent")

    calls: list[int] = []
    policy = lg.Retry(max_attempts=5, base_delay=0, retryable=lambda e: getattr(e, "transient", False))
    async with env_factory(flaky_app(calls, error, policy)) as env:
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.run("flaky", {}, timeout=10)
    assert calls == [1, 2]  # the transient error was retried, the permanent one was not
    assert info.value.error_tag == "ProviderDown"


async def test_max_elapsed_stops_retrying(env_factory: Any) -> None:
    calls: list[int] = []
    policy = lg.Retry(max_attempts=10, strategy="fixed", base_delay=60, jitter=False, max_elapsed="150s")
    async with env_factory(flaky_app(calls, lambda n: ProviderDown(), policy)) as env:
        handle = await env.engine.start("flaky", {})
        await env.settle()
        await env.advance(60)
        await env.advance(60)
        # a fourth attempt would start 180 s after the first: past the 150 s budget
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.result(handle.run_id, timeout=10)
        assert await offsets(env, handle.run_id) == [0, 60, 120]
    assert calls == [1, 2, 3]
    assert info.value.error_tag == "ProviderDown"


@pytest.mark.parametrize(
    ("error", "wait"),
    [
        (lambda n: Throttled(retry_after=42), 42.0),
        (lambda n: Throttled(retry_after_ms=2500), 2.5),
        (lambda n: lg.RetryAfter(90), 90.0),
    ],
    ids=["retry_after", "retry_after_ms", "RetryAfter"],
)
async def test_retry_after_hint_sets_the_next_delay(
    env_factory: Any, error: Callable[[int], Exception], wait: float
) -> None:
    calls: list[int] = []
    policy = lg.Retry(max_attempts=2, strategy="fixed", base_delay=1, jitter=False)
    async with env_factory(flaky_app(calls, error, policy)) as env:
        first = env.clock.now()
        handle = await env.engine.start("flaky", {"fail_times": 1})
        await env.settle()
        env.clock.set(first + wait - 0.1)
        await env.settle()
        assert calls == [1]
        env.clock.set(first + wait)
        await env.settle()
        assert await env.engine.result(handle.run_id, timeout=10) == "ok after 2"
        assert await offsets(env, handle.run_id) == pytest.approx([0, wait])


async def test_retry_after_hint_is_ignored_when_asked(env_factory: Any) -> None:
    calls: list[int] = []
    policy = lg.Retry(max_attempts=2, strategy="fixed", base_delay=1, jitter=False, respect_retry_after=False)
    async with env_factory(flaky_app(calls, lambda n: lg.RetryAfter(3600), policy)) as env:
        handle = await env.engine.start("flaky", {"fail_times": 1})
        await env.settle()
        await env.advance(1)
        assert await env.engine.result(handle.run_id, timeout=10) == "ok after 2"


@pytest.mark.parametrize("recording", ["full", "coarse"])
async def test_attempt_rows_follow_the_recording_level(env_factory: Any, recording: str) -> None:
    calls: list[int] = []
    policy = lg.Retry(max_attempts=3, base_delay=0, jitter=False)
    async with env_factory(flaky_app(calls, lambda n: ProviderDown(), policy), recording=recording) as env:
        handle = await env.engine.start("flaky", {"fail_times": 2})
        assert await env.engine.result(handle.run_id, timeout=10) == "ok after 3"
        attempts = await env.engine.attempts(handle.run_id)
        steps = await env.engine.steps(handle.run_id)
    assert [(s.key, s.status, s.attempts, s.output) for s in steps] == [("call#0", "completed", 3, "ok after 3")]
    if recording == "full":
        assert [(a.attempt, a.status) for a in attempts] == [(1, "failed"), (2, "failed"), (3, "completed")]
    else:
        assert attempts == []
