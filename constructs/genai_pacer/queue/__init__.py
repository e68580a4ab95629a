"""Queue-driven inference: `QueuedInference` (`inference`: SQS -> Lambda with the event source's maximum
concurrency as the cap on model calls in flight, partial batch failures, a dead-letter queue, ordered and
claimed writes to an AnswerStore, alarms). Its worker is lambda/queued_worker. Documentation:
docs/queue.md.

The construct loads on first use, like the package's own exports. (`genai_pacer.queue` is this package;
the standard library's `queue` is unaffected: absolute imports never resolve to it.)
"""

from typing import TYPE_CHECKING

from .._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from .inference import QueuedInference as QueuedInference

_LAZY = {"QueuedInference": ".inference"}
__all__ = ["QueuedInference"]


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, ("inference",))
