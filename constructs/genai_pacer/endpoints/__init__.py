"""Self-hosted model endpoints: `LlmEndpoint` (`llm_endpoint`: a SageMaker real-time endpoint, as a
production variant or inference components), `EndpointScaling` and `PeakWindow` (`scaling`: scheduled
capacity ahead of known peaks plus target tracking on concurrent requests per model or per copy) and
`capacity` (the arithmetic that sizes both: target concurrency, peak capacity, lead time; pure Python,
no CDK). Documentation: docs/endpoints.md.

The constructs load on first use, so `from genai_pacer.endpoints import capacity` (and the planner,
which re-exports it) starts no CDK.
"""

from typing import TYPE_CHECKING

from .._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from .llm_endpoint import InferenceComponentOptions as InferenceComponentOptions
    from .llm_endpoint import LlmEndpoint as LlmEndpoint
    from .scaling import EndpointScaling as EndpointScaling
    from .scaling import PeakWindow as PeakWindow

_LAZY = {
    "InferenceComponentOptions": ".llm_endpoint",
    "LlmEndpoint": ".llm_endpoint",
    "EndpointScaling": ".scaling",
    "PeakWindow": ".scaling",
}
__all__ = ["EndpointScaling", "InferenceComponentOptions", "LlmEndpoint", "PeakWindow", "capacity"]


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, ("capacity", "llm_endpoint", "scaling"))
