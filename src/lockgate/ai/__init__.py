"""Durable Pydantic AI agents on lockgate (the ``lockgate[ai]`` extra): see docs/ai.md.

``LockgateAgent(agent, flow_control=...).run(ctx, prompt, deps=...)`` from a workflow body runs
each model request and each tool call as a journaled step: a replay after a crash calls neither
again, a provider's 429 pauses the model's flow key, and the model's text streams to the run.

Importing this package with no Pydantic AI installed, or one outside ``SUPPORTED``, raises
``lg.UnsupportedIntegration``.
"""

from ._compat import SUPPORTED, check_version
from .agent import Approval, LockgateAgent, OnApproval
from .durability import DEFAULT_MODEL_RETRY, DEFAULT_TOOL_RETRY, LockgateDurability, ToolPolicy, current_context
from .tokens import Estimate, estimate_tokens, reported_tokens

__all__ = [
    "DEFAULT_MODEL_RETRY",
    "DEFAULT_TOOL_RETRY",
    "SUPPORTED",
    "Approval",
    "Estimate",
    "LockgateAgent",
    "LockgateDurability",
    "OnApproval",
    "ToolPolicy",
    "check_version",
    "current_context",
    "estimate_tokens",
    "reported_tokens",
]
