"""Self-hosted model endpoints: `LlmEndpoint` (`llm_endpoint`: a SageMaker real-time endpoint, as a
production variant or inference components), `EndpointScaling` and `PeakWindow` (`scaling`: scheduled
capacity ahead of known peaks plus target tracking on concurrent requests per model or per copy) and
`capacity` (the arithmetic that sizes both: target concurrency, peak capacity, lead time; pure Python,
no CDK). Documentation: docs/endpoints.md.

The constructs load on first use, so `from genai_pacer.endpoints import capacity` (and the planner,
which re-exports it) starts no CDK.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

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

    def __getattr__(name: str) -> Any:
        if name in ("capacity", "llm_endpoint", "scaling"):
            return import_module(f".{name}", __name__)
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
