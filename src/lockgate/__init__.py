"""lockgate: durable Python workflows whose flow control is decided at the gate."""

from .app import App
from .context import ChildHandle, Context
from .definitions import Retry
from .engine import Client, Engine
from .errors import (
    BlockingStartRefused,
    DefinitionError,
    LockgateError,
    PayloadError,
    RateLimited,
    ResultTimeout,
    RetryAfter,
    RunCancelled,
    RunFailed,
    RunNotEligible,
    SingletonHeld,
    StepFailed,
    StoreError,
    UnknownRun,
    UnknownWorkflow,
    UpdateFailed,
    WorkflowCrashLooped,
    WorkflowVersionIncompatible,
)
from .handles import Deferral, RunHandle
from .records import AttemptInfo, EventInfo, RunInfo, StepInfo

__all__ = [
    "App",
    "AttemptInfo",
    "BlockingStartRefused",
    "ChildHandle",
    "Client",
    "Context",
    "Deferral",
    "DefinitionError",
    "Engine",
    "EventInfo",
    "LockgateError",
    "PayloadError",
    "RateLimited",
    "ResultTimeout",
    "Retry",
    "RetryAfter",
    "RunCancelled",
    "RunFailed",
    "RunHandle",
    "RunInfo",
    "RunNotEligible",
    "SingletonHeld",
    "StepFailed",
    "StepInfo",
    "StoreError",
    "UnknownRun",
    "UnknownWorkflow",
    "UpdateFailed",
    "WorkflowCrashLooped",
    "WorkflowVersionIncompatible",
]

__version__ = "0.1.0"
