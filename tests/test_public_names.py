"""The public names of ``lockgate``: renaming or dropping one is a deliberate act, made here too."""

from __future__ import annotations

import lockgate as lg

PUBLIC = [
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
    "InvalidSchedule",
    "JournalDecryptionError",
    "Labels",
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
    "ScheduleExists",
    "ScheduleNotOwned",
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
    "UnknownSchedule",
    "UnknownWorkflow",
    "UnstorableValue",
    "UpdateFailed",
    "WebhookDef",
    "WorkflowCrashLooped",
    "WorkflowVersionIncompatible",
]


def test_all_is_pinned() -> None:
    assert lg.__all__ == PUBLIC


def test_every_public_name_resolves() -> None:
    missing = [name for name in lg.__all__ if not hasattr(lg, name)]
    assert missing == []
