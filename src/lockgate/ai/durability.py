"""``LockgateDurability``: Pydantic AI's durable-execution capability, on a workflow body's ``lg.Context``.

Pydantic AI routes an agent's I/O through a durability capability (``pydantic_ai.durable_exec``):
each model request, tool call and toolset discovery becomes one *durable unit* that the engine
runs and records, and a replay of the run gets the recorded result back without the I/O. Here a
unit is a ``ctx.step``:

- a model request is a step under the model's flow key, reserving the request's estimated tokens
  and settled at the usage its response reports; a provider error that asks to wait (a 429 with
  ``Retry-After``) becomes ``lg.RetryAfter``, which pauses the key for every run and retries the
  request after the wait;
- a tool call is a step with the tool's own retry policy and flow key (``ToolPolicy``);
- validating a tool's arguments and delivering events run inline: both are decided by recorded
  values, and the live model events are handled inside the model request's step, where its text
  deltas go to the run's stream.

Values cross the step as JSON (``JSON_CODEC``): the journal stores them, sealed for an
``encrypt_steps`` workflow, and a replay rebuilds them through Pydantic AI's own type adapters.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai import RunContext
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    EventStreamHandlerId,
    JournalCallableOperationBackend,
    ModelCompactMessagesId,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
    model_error_retry_after,
)
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UserError
from pydantic_ai.messages import AgentStreamEvent, PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
from pydantic_ai.tools import AgentDepsT

from ..context import Context
from ..definitions import Retry
from ..errors import RetryAfter
from ..flowcontrol import INHERIT, FlowControl
from .tokens import Estimate, estimate_tokens, reported_tokens

__all__ = ["DEFAULT_MODEL_RETRY", "DEFAULT_TOOL_RETRY", "LockgateDurability", "ToolPolicy", "current_context"]

_CURRENT: contextvars.ContextVar[Context | None] = contextvars.ContextVar("lockgate_ai_context", default=None)


def current_context() -> Context | None:
    """The ``lg.Context`` of the workflow body running an agent through ``LockgateAgent.run``, else ``None``.

    A tool marked ``durable=False`` runs in the body, not in a step, and may use it for durable
    operations of its own (``create_token``, ``wait_for_token``, ``step``)."""
    return _CURRENT.get()


def _retryable_model_error(error: BaseException) -> bool:
    """A model request is tried again on a wait the provider asked for, a server error, a timeout or a lost
    connection; not on a request the provider refused (4xx) nor a mistake in the agent's configuration."""
    if isinstance(error, RetryAfter):
        return True
    if isinstance(error, UserError):
        return False
    if isinstance(error, ModelHTTPError):
        return error.status_code >= 500 or error.status_code in (408, 409, 429)
    return True


DEFAULT_MODEL_RETRY = Retry(max_attempts=6, base_delay=1.0, max_delay=60.0, retryable=_retryable_model_error)
DEFAULT_TOOL_RETRY = Retry(max_attempts=3)


@dataclass(frozen=True)
class ToolPolicy:
    """How one tool's calls run as steps: their ``retry`` policy (default ``Retry(max_attempts=3)``) and
    ``flow_control`` (an ``lg.FlowControl``; default: the run's, as for any step)."""

    retry: Retry | None = None
    flow_control: FlowControl | None = None


@dataclass(frozen=True)
class _Unit:
    """A durable unit's configuration: what kind of step it is, its retry policy and flow key."""

    kind: Literal["model", "tool", "other"]
    retry: Retry
    flow_control: FlowControl | None


def _weighted(fc: FlowControl | None) -> bool:
    return fc is not None and fc.cost is not None


async def _unit(body: Callable[[], Awaitable[object]]) -> Any:
    """A durable unit's body as a step's function (one function for every step: its facts are worked out once)."""
    return await body()


async def _request(ctx: Context, body: Callable[[], Awaitable[object]], max_wait: float, wait_on_429: float) -> Any:
    """A model request as a step's function. Under a weighted key (``ctx.flow_control.cost`` is what it reserved)
    it settles at the tokens its response reports, or at none when the provider refused it with a wait; a
    provider's wait becomes ``lg.RetryAfter``, which pauses the key."""
    weighted = (ctx.flow_control is not None) and ctx.flow_control.cost is not None
    try:
        payload = await body()
    except ModelAPIError as exc:
        wait = model_error_retry_after(exc, maximum=max_wait)
        if wait is None and isinstance(exc, ModelHTTPError) and exc.status_code == 429:
            wait = wait_on_429
        if wait is not None and wait > 0:
            if weighted:
                ctx.settle(0)  # refused before any token was counted
            raise RetryAfter(wait, f"{exc} (the provider asked to wait {wait:g}s)") from exc
        raise
    if weighted:
        ctx.settle(reported_tokens(payload))
    return payload


class _LockgateBackend(JournalCallableOperationBackend[_Unit]):
    """Runs each of Pydantic AI's durable units as a ``ctx.step`` of the body running the agent."""

    def __init__(self, owner: LockgateDurability[Any], *, agent_name: str) -> None:
        super().__init__(
            agent_name=agent_name,
            config=RoleBasedOperationConfig(
                model=owner._model_unit,
                event=_Unit("other", DEFAULT_TOOL_RETRY, None),
                capability=_Unit("other", DEFAULT_TOOL_RETRY, None),
                tool=owner._tool_unit(None, ""),
                resolve_tool=lambda _op, tool, name: owner._tool_unit(tool, name),
            ),
        )
        self._owner = owner

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: _Unit,
    ) -> object:
        ctx = _CURRENT.get()
        if ctx is None or isinstance(operation_id, EventStreamHandlerId | ToolsetValidateToolArgumentsId):
            # Events and argument checks are decided by recorded values: they run as they are.
            return await body()
        fc = config.flow_control
        if isinstance(operation_id, ModelRequestId | ModelCompactMessagesId):  # the model's key, else the run's
            return await self._model_step(ctx, name, body, cache_key, config, INHERIT if fc is None else fc)
        # A tool call runs under the key its policy names and no other: the run's key is usually the model's,
        # whose tokens a tool does not spend. Discovery, token counts and cancellations run under none.
        flow = fc if isinstance(operation_id, ToolsetCallToolId) else None
        return await ctx.step(name, _unit, body, retry=config.retry, flow_control=flow)

    async def _model_step(
        self,
        ctx: Context,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: _Unit,
        flow: Any,
    ) -> object:
        owner = self._owner
        waits = (owner.max_wait, owner.wait_on_429)
        if not _weighted(config.flow_control):  # none, unweighted, or the run's key (its own cost, if weighted)
            return await ctx.step(name, _request, ctx, body, *waits, retry=config.retry, flow_control=flow)
        messages = cache_key[1] if len(cache_key) > 1 and isinstance(cache_key[1], list) else []
        settings = cache_key[2] if len(cache_key) > 2 and isinstance(cache_key[2], Mapping) else None
        cost = owner.estimate(messages, settings)
        return await ctx.step(name, _request, ctx, body, *waits, retry=config.retry, flow_control=flow, cost=cost)


@dataclass(init=False, kw_only=True)
class LockgateDurability(BaseDurabilityCapability[AgentDepsT]):
    """The capability that runs an agent's model requests and tool calls as journaled steps of a workflow body.

    ``LockgateAgent`` builds one; it is inside a durable context only while ``LockgateAgent.run``
    runs the agent for a body (outside one, the agent runs as it would without it).
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="lockgate",
        durable_unit_noun="step",
        durable_container_noun="workflow",
        codec=JSON_CODEC,  # the journal stores JSON
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit", "dynamic": "enter-never"},
        journal_discovery=True,
        sequential_tools_in_durable_context=True,  # steps are named by occurrence: one order on every replay
        tool_config_key="lockgate",
    )

    def __init__(
        self,
        *,
        name: str,
        flow_control: FlowControl | None = None,
        retry: Retry | None = None,
        estimate: Estimate | None = None,
        tools: Mapping[str, ToolPolicy] | None = None,
        tool_retry: Retry | None = None,
        tool_flow_control: FlowControl | None = None,
        stream_topic: str | None = None,
        max_wait: float = 3_600.0,
        wait_on_429: float = 1.0,
    ) -> None:
        super().__init__(name=name, event_stream_handler=self._stream_text if stream_topic is not None else None)
        self.estimate: Estimate = estimate or estimate_tokens
        self.max_wait = max_wait
        self.wait_on_429 = wait_on_429
        self.stream_topic = stream_topic
        self._model_unit = _Unit("model", retry or DEFAULT_MODEL_RETRY, flow_control)
        self._tools = dict(tools or {})
        self._tool_default = ToolPolicy(tool_retry, tool_flow_control)
        self._backends: dict[str, _LockgateBackend] = {}  # by name: shared with the copies bound to agents

    def _tool_unit(self, tool: Any, tool_name: str) -> _Unit:
        policy = self._tools.get(tool_name)
        if policy is None and tool is not None:
            meta = getattr(getattr(tool, "tool_def", None), "metadata", None) or {}
            found = meta.get("lockgate") if isinstance(meta, Mapping) else None
            policy = found if isinstance(found, ToolPolicy) else None
        policy = policy or self._tool_default
        retry = policy.retry or self._tool_default.retry or DEFAULT_TOOL_RETRY
        return _Unit("tool", retry, policy.flow_control or self._tool_default.flow_control)

    @property
    def in_durable_context(self) -> bool:
        return _CURRENT.get() is not None

    def get_durable_operation_backend(self) -> DurableOperationBackend[_Unit]:
        backend = self._backends.get(self.name)
        if backend is None:
            backend = self._backends[self.name] = _LockgateBackend(self, agent_name=self.name)
        return backend

    async def _stream_text(self, run: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        """Inside a model request's step: each text delta to the run's stream, as the model writes it."""
        ctx = _CURRENT.get()
        async for event in events:
            if ctx is None or self.stream_topic is None:
                continue
            text = None
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                text = event.part.content
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                text = event.delta.content_delta
            if text:
                await ctx.stream(text, topic=self.stream_topic)
