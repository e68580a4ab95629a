"""Old module paths of moved modules, kept working as aliases for one minor release.

The package is being regrouped into one folder per capability (issue 36). Each old path is a small
module that calls alias(__name__): that makes the old path the new module itself (sys.modules), so
every name, private ones included, and identity (`is`) carry over, and nothing is copied. The
CHANGELOG lists each move; tests/test_layout.py imports every old path both ways.

A module that was split keeps the names that went elsewhere reachable from its old path too (SPLIT):
they resolve on first use, through the alias, so the new modules never point back at each other.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

__all__ = ["MOVED", "REMOVED_IN", "SPLIT", "alias"]

#: The release in which the aliases below are removed.
REMOVED_IN = "0.3.0"

#: Old module path -> where it lives now.
MOVED: dict[str, str] = {
    "genai_pacer._alarms": "genai_pacer._internal.alarms",
    "genai_pacer._assets": "genai_pacer._internal.assets",
    "genai_pacer._checks": "genai_pacer._internal.checks",
    "genai_pacer._docs": "genai_pacer._internal.docs",
    "genai_pacer._install": "genai_pacer._internal.install",
    "genai_pacer._nag": "genai_pacer._internal.nag",
    "genai_pacer._runtime_constants": "genai_pacer._internal.runtime_constants",
    "genai_pacer._s3": "genai_pacer._internal.s3",
    "genai_pacer.retrieval_tuning": "genai_pacer.retrieval.tuning",
    "genai_pacer.planning": "genai_pacer.quota.planning",
    "genai_pacer.quota_check": "genai_pacer.quota.check",
    "genai_pacer.prompt_experiment": "genai_pacer.experiments.prompt_experiment",
    "genai_pacer.experiment_verdict": "genai_pacer.experiments.verdict",
    "genai_pacer.observability": "genai_pacer.observe.dashboard",
    "genai_pacer.invocation_logging": "genai_pacer.observe.invocation_logging",
    "genai_pacer.llm_endpoint": "genai_pacer.endpoints.llm_endpoint",
    "genai_pacer.endpoint_scaling": "genai_pacer.endpoints.scaling",
    "genai_pacer.capacity": "genai_pacer.endpoints.capacity",
    "genai_pacer._secure": "genai_pacer._internal.secure",
    "genai_pacer.orchestration": "genai_pacer.step_functions.orchestration",
    "genai_pacer.model_tasks": "genai_pacer.step_functions.model_tasks",
    "genai_pacer.sync_execution": "genai_pacer.step_functions.sync_execution",
    "genai_pacer.queued_inference": "genai_pacer.queue.inference",
    "genai_pacer.answer_store": "genai_pacer.precompute.store",
    "genai_pacer.answer_router": "genai_pacer.precompute.router",
    "genai_pacer.batch_precompute": "genai_pacer.precompute.batch",
}

#: Old module path -> {name: the module it lives in now}, for names of a split module that did not go to
#: MOVED[path]: genai_pacer._secure's state-machine half is genai_pacer.step_functions.state_machine.
SPLIT: dict[str, dict[str, str]] = {
    "genai_pacer._secure": dict.fromkeys(
        (
            "EXPRESS_LIMIT",
            "LOG_DELIVERY_ACTIONS",
            "LOG_LEVELS",
            "STANDARD_LIMIT",
            "StateMachineOptions",
            "WILDCARD_REASON",
            "XRAY_ACTIONS",
            "configured_timeout",
            "model_state_machine",
        ),
        "genai_pacer.step_functions.state_machine",
    ),
}


def alias(name: str) -> None:
    """Make module `name` (an old path in MOVED) the module it moved to; the names SPLIT sends elsewhere
    resolve from there on first use."""
    module = importlib.import_module(MOVED[name])
    if name in SPLIT:
        _forward(module, SPLIT[name])
    sys.modules[name] = module


def _forward(module: ModuleType, names: dict[str, str]) -> None:
    """Give `module` a module __getattr__ that finds `names` in the modules they moved to."""
    previous = getattr(module, "__getattr__", None)

    def __getattr__(attribute: str) -> object:
        if attribute in names:
            return getattr(importlib.import_module(names[attribute]), attribute)
        if previous is not None:
            return previous(attribute)
        raise AttributeError(f"module {module.__name__!r} has no attribute {attribute!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
