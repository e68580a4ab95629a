"""Queue-driven inference: `QueuedInference` (`inference`: SQS -> Lambda with the event source's maximum
concurrency as the cap on model calls in flight, partial batch failures, a dead-letter queue, ordered and
claimed writes to an AnswerStore, alarms). Its worker is lambda/queued_worker. Documentation:
docs/queue.md.

The construct loads on first use, like the package's own exports. (`genai_pacer.queue` is this package;
the standard library's `queue` is unaffected: absolute imports never resolve to it.)
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .inference import QueuedInference as QueuedInference

_LAZY = {"QueuedInference": ".inference"}
__all__ = ["QueuedInference"]


if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name == "inference":
            return import_module(f".{name}", __name__)
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
