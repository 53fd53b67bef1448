"""``LockgateAgent``: a Pydantic AI agent run durably from a workflow body.

``await LockgateAgent(agent, flow_control=...).run(ctx, prompt, deps=...)`` runs the agent with a
``LockgateDurability`` capability for that run: its model requests and tool calls are steps of
the body (see ``durability.py``). Tools that need a person's approval (``requires_approval=True``)
park the run on an approval token per call until someone decides, then the agent goes on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic

from pydantic import BaseModel
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.usage import UsageLimits

from ..context import Context
from ..definitions import Retry
from ..durations import Duration
from ..errors import InvalidArgument, OutsideWorkflowBody
from ..flowcontrol import FlowControl
from .durability import _CURRENT, LockgateDurability, ToolPolicy
from .tokens import Estimate

__all__ = ["Approval", "LockgateAgent", "OnApproval"]


class Approval(BaseModel):
    """What completes a tool call's approval token: ``{"approved": true}``, or a refusal with its ``reason``
    (the model is told the call was denied, and why)."""

    approved: bool
    reason: str | None = None


OnApproval = Callable[[Context, ToolCallPart, Any], Awaitable[None]]
"""``on_approval(ctx, call, token)``: hand ``token`` (an ``lg.CallbackToken``) to whoever decides ``call``.
Runs in the body: send the link from a ``ctx.step``."""


class LockgateAgent(Generic[AgentDepsT]):
    """A Pydantic AI ``Agent`` whose runs are durable steps of the workflow body that runs them.

    - ``flow_control``: the model requests' flow key (an ``lg.FlowControl``; one per model or
      provider). Weighted (``cost=``), each request reserves ``estimate(messages, settings)`` tokens
      (default: ``tokens.estimate_tokens``) and settles at the usage its response reports.
    - ``retry``: the model requests' retry policy (default ``DEFAULT_MODEL_RETRY``: 6 attempts on
      provider waits, server errors and lost connections; not on other 4xx).
    - ``tools``: a ``ToolPolicy`` (retry, flow key) per tool name; ``tool_retry`` and
      ``tool_flow_control`` for the others. A tool may also carry its policy in its metadata
      (``@agent.tool(metadata={"lockgate": ToolPolicy(...)})``).
    - ``stream_topic``: the run stream topic the model's text deltas go to (``None``: none).
    - ``approval_timeout``, ``on_approval``: a tool with ``requires_approval=True`` parks the run on
      an approval token (``lg.CallbackToken``, completed with ``Approval``) per call.
    """

    def __init__(
        self,
        agent: Agent[AgentDepsT, Any],
        *,
        name: str | None = None,
        flow_control: FlowControl | None = None,
        retry: Retry | None = None,
        estimate: Estimate | None = None,
        tools: Mapping[str, ToolPolicy] | None = None,
        tool_retry: Retry | None = None,
        tool_flow_control: FlowControl | None = None,
        stream_topic: str | None = None,
        approval_timeout: Duration | None = None,
        on_approval: OnApproval | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise InvalidArgument(f"LockgateAgent: agent must be a pydantic_ai.Agent, got {type(agent).__name__}")
        label = name or agent.name
        if not label:
            raise InvalidArgument(
                "LockgateAgent: the agent needs a name (Agent(name=...) or LockgateAgent(name=...)): "
                "it names the agent's steps in the journal"
            )
        for what, value in (("flow_control", flow_control), ("tool_flow_control", tool_flow_control)):
            if value is not None and not isinstance(value, FlowControl):
                raise InvalidArgument(f"LockgateAgent: {what} must be an lg.FlowControl, got {type(value).__name__}")
        for tool, policy in (tools or {}).items():
            if not isinstance(policy, ToolPolicy):
                got = type(policy).__name__
                raise InvalidArgument(f"LockgateAgent: tools[{tool!r}] must be a lockgate.ai.ToolPolicy, got {got}")
        self.agent = agent
        self.name = label
        self.approval_timeout = approval_timeout
        self.on_approval = on_approval
        attached = LockgateDurability.from_agent(agent)
        if attached is not None:  # the agent was built with it: its policies, bound once for every run
            given = [
                k
                for k, v in (
                    ("flow_control", flow_control),
                    ("retry", retry),
                    ("estimate", estimate),
                    ("tools", tools),
                    ("tool_retry", tool_retry),
                    ("tool_flow_control", tool_flow_control),
                    ("stream_topic", stream_topic),
                )
                if v is not None
            ]
            if given:
                raise InvalidArgument(
                    f"LockgateAgent: the agent holds a LockgateDurability already: give {', '.join(given)} to it"
                )
            self.durability: LockgateDurability[AgentDepsT] = attached
            self._per_run: list[LockgateDurability[AgentDepsT]] = []
            return
        self.durability = LockgateDurability(
            name=label,
            flow_control=flow_control,
            retry=retry,
            estimate=estimate,
            tools=tools,
            tool_retry=tool_retry,
            tool_flow_control=tool_flow_control,
            stream_topic=stream_topic,
        )
        self._per_run = [self.durability]  # bound to the agent at each run

    async def run(
        self,
        ctx: Context,
        prompt: str | None = None,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        message_history: Sequence[ModelMessage] | None = None,
        usage_limits: UsageLimits | None = None,
        **kwargs: Any,
    ) -> AgentRunResult[Any]:
        """Run the agent on ``prompt`` from a workflow body; a replay returns the recorded requests and tool
        results instead of calling them again. Other keyword arguments go to ``Agent.run``."""
        if not isinstance(ctx, Context):
            raise OutsideWorkflowBody("LockgateAgent.run", ctx)
        if "capabilities" in kwargs:
            raise InvalidArgument("LockgateAgent.run: capabilities= is its own: give them to the Agent")
        if "output_type" in kwargs and self._approving(kwargs["output_type"]):
            raise InvalidArgument(
                "LockgateAgent.run: approvals are its own: leave DeferredToolRequests out of output_type"
            )
        outer = _CURRENT.set(ctx)
        try:
            given = kwargs.pop("output_type", self.agent.output_type)
            output_type = (
                [*given, DeferredToolRequests] if isinstance(given, list | tuple) else [given, DeferredToolRequests]
            )
            result: AgentRunResult[Any] = await self.agent.run(
                prompt,
                deps=deps,
                message_history=message_history,
                usage_limits=usage_limits,
                output_type=output_type,
                capabilities=self._per_run,
                **kwargs,
            )
            while isinstance(result.output, DeferredToolRequests):
                answers = await self._decide(ctx, result.output)
                result = await self.agent.run(
                    None,
                    deps=deps,
                    message_history=result.all_messages(),
                    deferred_tool_results=answers,
                    usage_limits=usage_limits,
                    output_type=output_type,
                    capabilities=self._per_run,
                    **kwargs,
                )
            return result
        finally:
            _CURRENT.reset(outer)

    @staticmethod
    def _approving(output_type: Any) -> bool:
        kinds = output_type if isinstance(output_type, list | tuple) else [output_type]
        return DeferredToolRequests in kinds

    async def _decide(self, ctx: Context, asked: DeferredToolRequests) -> DeferredToolResults:
        """One approval token per call that needs one, all handed out before the run parks on the first."""
        if asked.calls:
            names = ", ".join(sorted({c.tool_name for c in asked.calls}))
            raise InvalidArgument(
                f"LockgateAgent.run: the agent deferred calls of {names} to the caller (external tools): "
                "make them ordinary tools, or approval tools (requires_approval=True)"
            )
        tokens = []
        for call in asked.approvals:
            token = await ctx.create_token(
                f"{self.name}:approve:{call.tool_name}", model=Approval, timeout=self.approval_timeout
            )
            if self.on_approval is not None:
                await self.on_approval(ctx, call, token)
            tokens.append((call, token))
        answers = DeferredToolResults()
        for call, token in tokens:
            decision = await ctx.wait_for_token(token)
            if not isinstance(decision, Approval):
                decision = Approval.model_validate(decision)
            answers.approvals[call.tool_call_id] = (
                True if decision.approved else ToolDenied(decision.reason or "The person who decides refused it.")
            )
        return answers
