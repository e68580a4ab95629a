"""genai-pacer: AWS CDK constructs that keep generative-AI workloads fast and inside their quotas.

The constructs load on first use, so `genai_pacer.planning` and `genai_pacer.testing` import
without starting the CDK's jsii runtime.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "planning": ".planning",
    "runtime": ".runtime",
    "BedrockModel": ".models",
    "PROFILE_REGIONS": ".models",
    "BedrockRetry": ".model_tasks",
    "DEFAULT_RETRY_ERRORS": ".model_tasks",
    "ConverseRequest": ".model_tasks",
    "NativeRequest": ".model_tasks",
    "TaskOptions": ".model_tasks",
    "BoundedMap": ".orchestration",
    "BoundedDistributedMap": ".orchestration",
    "ParallelPrompts": ".orchestration",
    "StateMachineOptions": "._secure",
    "QueuedInference": ".queued_inference",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'genai_pacer' has no attribute {name!r}")
    module = import_module(_EXPORTS[name], __name__)
    value = module if _EXPORTS[name].lstrip(".") == name else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
