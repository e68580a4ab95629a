"""Pre-computation: answers to predictable queries generated before the peak and served by lookup.
`AnswerStore` (`store`: the one DynamoDB table every writer and reader shares), `ScheduledPrecompute`
(`scheduled`: a cron-started Step Functions run, one model call per key), `BatchPrecompute` (`batch`:
Bedrock batch inference for large key sets) and `AnswerRouter` (`router`: serves a stored answer, or
generates it from the key alone). Their handlers stay under lambda/ (precompute_prepare,
batch_precompute, answer_router); the answer schema they share is pacer_runtime.answers.
Documentation: docs/precompute.md.

Until 0.2.0 `genai_pacer.precompute` was the module of ScheduledPrecompute (now `scheduled`): every
name of that module (RUN_LOCK_PREFIX, answer_schema, ...) still imports from here until
genai_pacer._internal.moved.REMOVED_IN. The constructs load on first use, like the package's exports.
"""

from typing import TYPE_CHECKING

from .._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from .batch import BatchPrecompute as BatchPrecompute
    from .router import AnswerRouter as AnswerRouter
    from .scheduled import *  # noqa: F403  (the names of the module this package replaced)
    from .scheduled import ScheduledPrecompute as ScheduledPrecompute
    from .store import AnswerStore as AnswerStore

_LAZY = {
    "AnswerRouter": ".router",
    "AnswerStore": ".store",
    "BatchPrecompute": ".batch",
    "ScheduledPrecompute": ".scheduled",
}
_SUBMODULES = ("batch", "router", "scheduled", "store")
__all__ = sorted(_LAZY)


if not TYPE_CHECKING:  # any other name is one of the former genai_pacer.precompute module's (the scheduled kind)
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, _SUBMODULES, rest=".scheduled")
