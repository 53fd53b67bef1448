"""lockgate.ai: a Pydantic AI agent run from a workflow body, each model request and tool call a step.

Offline throughout: Pydantic AI's ``FunctionModel`` plays the provider and counts its calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import lockgate as lg
from lockgate.ai import (
    LockgateAgent,
    LockgateDurability,
    ToolPolicy,
    check_version,
    current_context,
    estimate_tokens,
    reported_tokens,
)
from lockgate.crypto import generate_key

from .apps.waits import eventually, parked_on
from .test_encryption import raw_dump


class Ask(BaseModel):
    text: str


def _turn(messages: list[ModelMessage]) -> int:
    return sum(1 for m in messages if m.kind == "response")


def _last_return(messages: list[ModelMessage]) -> str:
    parts = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    return str(parts[-1].content) if parts else ""


class Provider:
    """A scripted model: turn 0 and 1 call ``lookup``, turn 2 answers; counts every call per turn."""

    def __init__(self, *, fail_first: BaseException | None = None) -> None:
        self.calls: list[int] = []
        self.tools: list[str] = []
        self.fail_first = fail_first

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = _turn(messages)
        self.calls.append(turn)
        if self.fail_first is not None:
            error, self.fail_first = self.fail_first, None
            raise error
        usage = RequestUsage(input_tokens=100 * (turn + 1), output_tokens=20)
        if turn < 2:
            return ModelResponse(parts=[ToolCallPart("lookup", {"row": f"r{turn}"})], usage=usage)
        return ModelResponse(parts=[TextPart(f"{_last_return(messages)}; done")], usage=usage)

    def agent(self) -> Agent[None, str]:
        agent = Agent(FunctionModel(self.respond), name="narrator")

        @agent.tool_plain
        def lookup(row: str) -> str:
            self.tools.append(row)
            return f"{row} edited"

        return agent


TOKENS = lg.FlowControl("openai", rate=60_000, period="1m", parallelism=10, cost=1)


def narration_app(lg_agent: LockgateAgent[None], *, pause: bool = False, encrypt: bool = False) -> lg.App:
    app = lg.App()

    @app.workflow(name="ai.narrate", encrypt_steps=encrypt)
    async def narrate(ctx: lg.Context, p: Ask) -> str:
        result = await lg_agent.run(ctx, p.text)
        if pause:  # the run parks: the body is entered again from the top and replays the agent
            await ctx.sleep("cool-off", "1h")
        return str(result.output)

    return app


async def test_requests_and_tools_are_steps_that_a_replay_does_not_call_again(env_factory: Any) -> None:
    provider = Provider()
    app = narration_app(LockgateAgent(provider.agent(), flow_control=TOKENS), pause=True)
    async with env_factory(app) as env:
        handle = await env.engine.start("ai.narrate", {"text": "narrate row 1"})
        await parked_on(env.engine, handle.run_id, "timer")
        assert provider.calls == [0, 1, 2] and provider.tools == ["r0", "r1"]
        [key] = await env.engine.flow_keys("openai")  # reserved estimates, settled at the reported usage
        assert key.started == 3 and key.units_reserved == 0
        assert key.units_settled == (100 + 20) + (200 + 20) + (300 + 20)
        await env.advance("1h")
        assert await env.engine.result(handle.run_id, timeout=30) == "r1 edited; done"
        assert provider.calls == [0, 1, 2] and provider.tools == ["r0", "r1"]  # replayed, not called again
        steps = [s.key for s in await env.engine.steps(handle.run_id)]
        assert steps == [
            "narrator__model.request#0",
            "narrator__function_toolset__<agent>.call_tool:lookup#0",
            "narrator__model.request#1",
            "narrator__function_toolset__<agent>.call_tool:lookup#1",
            "narrator__model.request#2",
            "cool-off#0",
        ]


async def test_a_429_with_a_reset_time_pauses_the_key_and_the_request_runs_after_it(env_factory: Any) -> None:
    provider = Provider(fail_first=ModelHTTPError(429, "gpt", {"error": "slow down"}, retry_after=30.0))
    app = narration_app(LockgateAgent(provider.agent(), flow_control=TOKENS))
    async with env_factory(app) as env:
        handle = await env.engine.start("ai.narrate", {"text": "narrate row 1"})

        async def paused() -> bool:
            keys = await env.engine.flow_keys("openai")
            return bool(keys and keys[0].paused and keys[0].paused_until is not None)

        await eventually(paused, what="the key paused by the 429")
        assert provider.calls == [0]
        await env.advance("31s")
        assert await env.engine.result(handle.run_id, timeout=30) == "r1 edited; done"
        assert provider.calls == [0, 0, 1, 2]
        [key] = await env.engine.flow_keys("openai")
        assert key.units_settled == 120 + 220 + 320  # the refused request settled at nothing
        attempts = [a for a in await env.engine.attempts(handle.run_id) if a.status == "failed"]
        assert [a.error_tag for a in attempts] == ["RetryAfter"]


async def test_requests_under_the_runs_weighted_key_settle_at_the_reported_usage(make_engine: Any) -> None:
    provider = Provider()
    lg_agent = LockgateAgent(provider.agent())
    app = lg.App()

    @app.workflow(name="ai.run_key", flow_control=lg.FlowControl("llm-run", rate=60_000, period="1m", cost=2_000))
    async def narrate(ctx: lg.Context, p: Ask) -> str:
        return str((await lg_agent.run(ctx, p.text)).output)

    async with make_engine(app) as engine:
        handle = await engine.start("ai.run_key", {"text": "x"})
        assert await engine.result(handle.run_id, timeout=30) == "r1 edited; done"
        [key] = await engine.flow_keys("llm-run")  # the three requests, each at its usage; the tools under no key
        assert key.started == 3 and key.units_reserved == 0 and key.units_settled == 120 + 220 + 320


async def test_a_refused_request_fails_at_once_and_a_server_error_is_retried(make_engine: Any) -> None:
    refused = Provider(fail_first=ModelHTTPError(400, "gpt", {"error": "bad request"}))
    app = narration_app(LockgateAgent(refused.agent(), flow_control=TOKENS))
    async with make_engine(app) as engine:
        handle = await engine.start("ai.narrate", {"text": "x"})
        with pytest.raises(lg.RunFailed, match="status_code: 400"):
            await engine.result(handle.run_id, timeout=30)
        assert refused.calls == [0]
    down = Provider(fail_first=ModelHTTPError(503, "gpt", {"error": "overloaded"}))
    quick = lg.Retry(max_attempts=3, base_delay=0.01)
    app = narration_app(LockgateAgent(down.agent(), flow_control=TOKENS, retry=quick))
    async with make_engine(app) as engine:
        handle = await engine.start("ai.narrate", {"text": "x"})
        assert await engine.result(handle.run_id, timeout=30) == "r1 edited; done"
        assert down.calls == [0, 0, 1, 2]


async def _stream_answer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    for word in ["The ", "row ", "was ", "edited ", "twice."]:
        yield word


async def test_text_deltas_go_to_the_run_stream_in_order(make_engine: Any) -> None:
    agent = Agent(FunctionModel(stream_function=_stream_answer), name="writer")
    app = narration_app(LockgateAgent(agent, flow_control=TOKENS, stream_topic="answer"))
    async with make_engine(app) as engine:
        handle = await engine.start("ai.narrate", {"text": "narrate"})
        assert await handle.result(timeout=30) == "The row was edited twice."
        chunks = [c async for c in handle.stream("answer", after=0)]
        assert [c.data for c in lg.drop_resets(chunks)] == ["The ", "row ", "was ", "edited ", "twice."]
        assert {c.step for c in chunks} == {"writer__model.request_stream#0"}


class Refund(BaseModel):
    amount: int


def refund_agent(refunds: list[int]) -> Agent[None, str]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _turn(messages) == 0:
            return ModelResponse(parts=[ToolCallPart("refund", {"amount": 5})])
        return ModelResponse(parts=[TextPart(f"answer: {_last_return(messages)}")])

    agent = Agent(FunctionModel(respond), name="support")

    @agent.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        refunds.append(amount)
        return f"refunded {amount}"

    return agent


@pytest.mark.parametrize(
    ("decision", "answer"),
    [
        ({"approved": True}, "answer: refunded 5"),
        ({"approved": False, "reason": "over budget"}, "answer: over budget"),
    ],
)
async def test_a_tool_that_needs_approval_parks_the_run_until_a_person_decides(
    make_engine: Any, decision: dict[str, Any], answer: str
) -> None:
    refunds: list[int] = []
    handed: list[str] = []

    async def hand_out(ctx: lg.Context, call: ToolCallPart, token: Any) -> None:
        async def send(secret: str) -> None:
            handed.append(secret)

        await ctx.step("send link", send, token.token)

    lg_agent = LockgateAgent(refund_agent(refunds), on_approval=hand_out, approval_timeout="1d")
    app = narration_app(lg_agent)
    async with make_engine(app) as engine:
        handle = await engine.start("ai.narrate", {"text": "refund order 7"})
        await parked_on(engine, handle.run_id, "token")
        assert refunds == [] and len(handed) == 1
        await engine.client.complete_token(handed[0], decision)
        assert await engine.result(handle.run_id, timeout=30) == answer
        assert refunds == ([5] if decision["approved"] else []) and len(handed) == 1


async def test_prompts_and_outputs_of_an_encrypted_workflow_stay_sealed(make_engine: Any, store_url: str) -> None:
    async def secret_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "answer "
        yield "kqzv7777"

    agent = Agent(FunctionModel(stream_function=secret_stream), name="sealed")
    app = narration_app(LockgateAgent(agent, flow_control=TOKENS, stream_topic="default"), encrypt=True)
    async with make_engine(app, encryption_keys=[generate_key()]) as engine:
        handle = await engine.start("ai.narrate", {"text": "card wxjq4242"})
        assert await handle.result(timeout=30) == "answer kqzv7777"
        assert [c.data for c in lg.drop_resets([c async for c in handle.stream("default", after=0)])] == [
            "answer ",
            "kqzv7777",
        ]
    dump = await raw_dump(store_url)
    # markers no id or time in the dump can hold by chance (bare digits can: a timestamp held "4242")
    assert b"wxjq4242" not in dump and b"kqzv7777" not in dump


async def test_a_request_larger_than_the_rate_is_refused_at_once(make_engine: Any) -> None:
    provider = Provider()
    small = lg.FlowControl("tiny", rate=100, period="1m", cost=1)
    app = narration_app(LockgateAgent(provider.agent(), flow_control=small))
    async with make_engine(app) as engine:
        handle = await engine.start("ai.narrate", {"text": "x"})
        with pytest.raises(lg.RunFailed, match="CostExceedsRate"):
            await engine.result(handle.run_id, timeout=30)
        assert provider.calls == []


async def test_the_agent_outside_a_workflow_body_is_refused() -> None:
    lg_agent = LockgateAgent(Provider().agent())
    with pytest.raises(lg.OutsideWorkflowBody, match=r"LockgateAgent.run: needs the workflow body's lg.Context"):
        await lg_agent.run(None, "hello")  # type: ignore[arg-type]
    with pytest.raises(lg.InvalidArgument, match="capabilities= is its own"):
        await lg_agent.run(_FakeContext(), "hello", capabilities=[])


class _FakeContext(lg.Context):  # enough of a Context to get past the type check, never used
    run_id = "r"
    workflow = "w"
    attempt = 1

    def __getattribute__(self, name: str) -> Any:
        if name in ("run_id", "workflow", "attempt", "__class__"):
            return object.__getattribute__(self, name)
        raise AssertionError(f"the context was used: {name}")


for _name in list(lg.Context.__abstractmethods__):
    setattr(_FakeContext, _name, None)
_FakeContext.__abstractmethods__ = frozenset()


def test_bad_arguments_are_refused_naming_what_is_wrong() -> None:
    with pytest.raises(lg.InvalidArgument, match="needs a name"):
        LockgateAgent(Agent(FunctionModel(Provider().respond)))
    with pytest.raises(lg.InvalidArgument, match=r"must be a pydantic_ai\.Agent"):
        LockgateAgent("agent")  # type: ignore[arg-type]
    with pytest.raises(lg.InvalidArgument, match=r"flow_control must be an lg\.FlowControl"):
        LockgateAgent(Provider().agent(), flow_control="openai")  # type: ignore[arg-type]
    with pytest.raises(lg.InvalidArgument, match=r"tools\['lookup'\] must be a lockgate.ai.ToolPolicy"):
        LockgateAgent(Provider().agent(), tools={"lookup": lg.Retry()})  # type: ignore[dict-item]
    LockgateAgent(Provider().agent(), tools={"lookup": ToolPolicy(retry=lg.Retry(max_attempts=2))})


@pytest.mark.parametrize("found", [None, "1.107.10", "2.77.0", "3.0.0", "nonsense"])
def test_an_unsupported_pydantic_ai_is_refused_with_the_range(found: str | None) -> None:
    with pytest.raises(lg.UnsupportedIntegration, match=r"lockgate supports pydantic-ai-slim >=2.78,<3") as caught:
        check_version(found)
    assert isinstance(caught.value, ImportError) and caught.value.found == found


def test_the_estimate_counts_the_prompt_and_the_most_the_model_may_write() -> None:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("x" * 400)])]
    assert estimate_tokens(messages, None) == 100 + 1_000
    assert estimate_tokens(messages, {"max_tokens": 50}) == 150
    assert reported_tokens({"parts": [], "usage": {"input_tokens": 7, "output_tokens": 5}}) == 12
    assert reported_tokens({"response": {"usage": {"input_tokens": 3}}}) == 3
    assert reported_tokens(None) == 0


async def test_an_agent_built_with_the_capability_binds_it_once(make_engine: Any) -> None:
    provider = Provider()
    agent = Agent(FunctionModel(provider.respond), name="narrator", capabilities=[LockgateDurability(name="narrator")])

    @agent.tool_plain
    def lookup(row: str) -> str:
        provider.tools.append(row)
        return f"{row} edited"

    with pytest.raises(lg.InvalidArgument, match="holds a LockgateDurability already: give flow_control to it"):
        LockgateAgent(agent, flow_control=TOKENS)
    app = narration_app(LockgateAgent(agent))
    async with make_engine(app) as engine:
        handle = await engine.start("ai.narrate", {"text": "x"})
        assert await engine.result(handle.run_id, timeout=30) == "r1 edited; done"
        assert [s.name for s in await engine.steps(handle.run_id)][::2] == ["narrator__model.request"] * 3


async def test_a_tool_outside_the_steps_parks_the_run_on_a_token_of_its_own(make_engine: Any) -> None:
    handed: list[str] = []
    calls: list[int] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(_turn(messages))
        if _turn(messages) == 0:
            return ModelResponse(parts=[ToolCallPart("ask_manager", {"question": "refund 5?"})])
        return ModelResponse(parts=[TextPart(f"manager: {_last_return(messages)}")])

    agent = Agent(FunctionModel(respond), name="escalate")

    @agent.tool_plain(durable=False)  # runs in the body: its durable operations are the run's own
    async def ask_manager(question: str) -> str:
        ctx = current_context()
        assert ctx is not None
        token = await ctx.create_token("manager", timeout="1d")

        async def send(secret: str) -> None:
            handed.append(secret)

        await ctx.step("page manager", send, token.token)
        return str(await ctx.wait_for_token(token))

    app = narration_app(LockgateAgent(agent))
    async with make_engine(app) as engine:
        handle = await engine.start("ai.narrate", {"text": "refund?"})
        await parked_on(engine, handle.run_id, "token")
        assert calls == [0] and len(handed) == 1
        await engine.client.complete_token(handed[0], "yes")
        assert await engine.result(handle.run_id, timeout=30) == "manager: yes"
        assert calls == [0, 1] and len(handed) == 1  # the first request was replayed, not called again
