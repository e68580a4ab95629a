"""Old module paths of moved modules, kept working as aliases for one minor release.

The package is being regrouped into one folder per capability (issue 36). Each old path is a small
module that calls alias(__name__): that makes the old path the new module itself (sys.modules), so
every name, private ones included, and identity (`is`) carry over, and nothing is copied. The
CHANGELOG lists each move; tests/test_layout.py imports every old path both ways.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["MOVED", "REMOVED_IN", "alias"]

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


def alias(name: str) -> None:
    """Make module `name` (an old path in MOVED) the module it moved to."""
    sys.modules[name] = importlib.import_module(MOVED[name])
