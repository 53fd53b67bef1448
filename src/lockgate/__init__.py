"""lockgate: durable Python workflows whose flow control is decided at the gate."""

from .app import App
from .context import ChildHandle, Context
from .controls import Batch, Concurrency, Debounce, FailureReport, RateLimit, Singleton, Throttle, Timeouts
from .definitions import Retry
from .errors import (
    BlockingStartRefused,
    ChildNotStarted,
    DefinitionError,
    EncryptionKeyError,
    EngineClosed,
    ForeignTransaction,
    InvalidArgument,
    JournalDecryptionError,
    LockgateError,
    PayloadError,
    RateLimited,
    ResultTimeout,
    ResultTypeError,
    RetryAfter,
    RunCancelled,
    RunFailed,
    RunNotEligible,
    SingletonHeld,
    StartNotAdmitted,
    StartRolledBack,
    StepFailed,
    StoreError,
    StoreFull,
    UnknownRun,
    UnknownWorkflow,
    UnstorableValue,
    UpdateFailed,
    WorkflowCrashLooped,
    WorkflowVersionIncompatible,
)
from .events import CancelOn, DeliveryRecord, Event, EventDef, EventRecord, Subject
from .facades import Client, Engine
from .facades.operator import BulkItem, BulkResult
from .flowcontrol import FlowControl
from .handles import Deferral, RunHandle
from .inspect import FlowRow, Trace
from .queues import Queue
from .records import AttemptInfo, EventInfo, RunInfo, StepInfo
from .schedule import Schedule
from .webhooks import HmacSignature, WebhookDef

__all__ = [
    "App",
    "AttemptInfo",
    "Batch",
    "BlockingStartRefused",
    "BulkItem",
    "BulkResult",
    "CancelOn",
    "ChildHandle",
    "ChildNotStarted",
    "Client",
    "Concurrency",
    "Context",
    "Debounce",
    "Deferral",
    "DefinitionError",
    "DeliveryRecord",
    "EncryptionKeyError",
    "Engine",
    "EngineClosed",
    "Event",
    "EventDef",
    "EventInfo",
    "EventRecord",
    "FailureReport",
    "FlowControl",
    "FlowRow",
    "ForeignTransaction",
    "HmacSignature",
    "InvalidArgument",
    "JournalDecryptionError",
    "LockgateError",
    "PayloadError",
    "Queue",
    "RateLimit",
    "RateLimited",
    "ResultTimeout",
    "ResultTypeError",
    "Retry",
    "RetryAfter",
    "RunCancelled",
    "RunFailed",
    "RunHandle",
    "RunInfo",
    "RunNotEligible",
    "Schedule",
    "Singleton",
    "SingletonHeld",
    "StartNotAdmitted",
    "StartRolledBack",
    "StepFailed",
    "StepInfo",
    "StoreError",
    "StoreFull",
    "Subject",
    "Throttle",
    "Timeouts",
    "Trace",
    "UnknownRun",
    "UnknownWorkflow",
    "UnstorableValue",
    "UpdateFailed",
    "WebhookDef",
    "WorkflowCrashLooped",
    "WorkflowVersionIncompatible",
]

__version__ = "0.1.0"
