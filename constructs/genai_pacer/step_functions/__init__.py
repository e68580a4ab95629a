"""Throttle-safe Step Functions: bounded fan-out and side-by-side prompts (`orchestration`: BoundedMap,
BoundedDistributedMap, ParallelPrompts), the model tasks they are built from (`model_tasks`:
ConverseRequest, NativeRequest, BedrockRetry, TaskOptions), a synchronous HTTPS front for a workflow
(`sync_execution`: SyncExecutionUrl) and how every construct's state machine is built (`state_machine`:
StateMachineOptions; logged, traced and allowed only its models). Documentation: docs/step_functions.md.

The constructs load on first use, like the package's own exports.
"""

from typing import TYPE_CHECKING

from .._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from .model_tasks import DEFAULT_RETRY_ERRORS as DEFAULT_RETRY_ERRORS
    from .model_tasks import BedrockRetry as BedrockRetry
    from .model_tasks import ConverseRequest as ConverseRequest
    from .model_tasks import NativeRequest as NativeRequest
    from .model_tasks import TaskOptions as TaskOptions
    from .orchestration import BoundedDistributedMap as BoundedDistributedMap
    from .orchestration import BoundedMap as BoundedMap
    from .orchestration import ParallelPrompts as ParallelPrompts
    from .state_machine import StateMachineOptions as StateMachineOptions
    from .sync_execution import SyncExecutionUrl as SyncExecutionUrl

_LAZY = {
    "DEFAULT_RETRY_ERRORS": ".model_tasks",
    "BedrockRetry": ".model_tasks",
    "ConverseRequest": ".model_tasks",
    "NativeRequest": ".model_tasks",
    "TaskOptions": ".model_tasks",
    "BoundedDistributedMap": ".orchestration",
    "BoundedMap": ".orchestration",
    "ParallelPrompts": ".orchestration",
    "StateMachineOptions": ".state_machine",
    "SyncExecutionUrl": ".sync_execution",
}
_SUBMODULES = ("model_tasks", "orchestration", "state_machine", "sync_execution")
__all__ = sorted(_LAZY)


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, _SUBMODULES)
