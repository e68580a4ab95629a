"""Observability: `LatencyDashboard` and `LatencyAlarms` (`dashboard`: TTFT, output tokens per second,
quota use against the plan, throttles, with a watched model's `TpmQuota`) and `ModelInvocationLogging`
(`invocation_logging`: Bedrock's invocation logging, set by a custom resource). The per-call metrics
the handlers write are `pacer_runtime.metrics` (lambda/). Documentation: docs/observe.md.

The constructs load on first use, like the package's own exports.
"""

from typing import TYPE_CHECKING

from .._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from .dashboard import LatencyAlarms as LatencyAlarms
    from .dashboard import LatencyDashboard as LatencyDashboard
    from .dashboard import TpmQuota as TpmQuota
    from .dashboard import WatchedModel as WatchedModel
    from .invocation_logging import ModelInvocationLogging as ModelInvocationLogging

_LAZY = {
    "LatencyAlarms": ".dashboard",
    "LatencyDashboard": ".dashboard",
    "TpmQuota": ".dashboard",
    "WatchedModel": ".dashboard",
    "ModelInvocationLogging": ".invocation_logging",
}
__all__ = ["LatencyAlarms", "LatencyDashboard", "ModelInvocationLogging", "TpmQuota", "WatchedModel"]


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, ("dashboard", "invocation_logging"))
