"""genai-pacer: AWS CDK constructs that keep generative-AI workloads fast and inside their quotas.

The constructs load on first use, so `genai_pacer.planning` and `genai_pacer.testing` import
without starting the CDK's jsii runtime. Type checkers and editors read the TYPE_CHECKING imports
below instead, which name the same objects as _EXPORTS (tests/test_typing.py keeps the two equal).
"""

from typing import TYPE_CHECKING

from ._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from . import runtime as runtime
    from ._internal.checks import InvalidPropsError as InvalidPropsError
    from .benchmark import LoadReplay as LoadReplay
    from .endpoints import EndpointScaling as EndpointScaling
    from .endpoints import InferenceComponentOptions as InferenceComponentOptions
    from .endpoints import LlmEndpoint as LlmEndpoint
    from .endpoints import PeakWindow as PeakWindow
    from .endpoints import capacity as capacity
    from .experiments import ExperimentVariant as ExperimentVariant
    from .experiments import ManagedPrompt as ManagedPrompt
    from .experiments import PromptExperiment as PromptExperiment
    from .experiments import TextPrompt as TextPrompt
    from .experiments import verdict as experiment_verdict  # noqa: F401  (its name before it moved)
    from .models import PROFILE_REGIONS as PROFILE_REGIONS
    from .models import BedrockModel as BedrockModel
    from .observe import LatencyAlarms as LatencyAlarms
    from .observe import LatencyDashboard as LatencyDashboard
    from .observe import ModelInvocationLogging as ModelInvocationLogging
    from .observe import TpmQuota as TpmQuota
    from .observe import WatchedModel as WatchedModel
    from .precompute import AnswerRouter as AnswerRouter
    from .precompute import AnswerStore as AnswerStore
    from .precompute import BatchPrecompute as BatchPrecompute
    from .precompute import ScheduledPrecompute as ScheduledPrecompute
    from .queue import QueuedInference as QueuedInference
    from .quota import ModelQuota as ModelQuota
    from .quota import QuotaLedger as QuotaLedger
    from .quota import Share as Share
    from .quota import planning as planning
    from .retrieval import HybridSearchPipeline as HybridSearchPipeline
    from .retrieval import VectorIndexSettings as VectorIndexSettings
    from .retrieval import tuning as retrieval_tuning  # noqa: F401  (its name before it moved)
    from .runtime_layer import RuntimeLayer as RuntimeLayer
    from .step_functions import DEFAULT_RETRY_ERRORS as DEFAULT_RETRY_ERRORS
    from .step_functions import BedrockRetry as BedrockRetry
    from .step_functions import BoundedDistributedMap as BoundedDistributedMap
    from .step_functions import BoundedMap as BoundedMap
    from .step_functions import ConverseRequest as ConverseRequest
    from .step_functions import NativeRequest as NativeRequest
    from .step_functions import ParallelPrompts as ParallelPrompts
    from .step_functions import StateMachineOptions as StateMachineOptions
    from .step_functions import SyncExecutionUrl as SyncExecutionUrl
    from .step_functions import TaskOptions as TaskOptions

_EXPORTS = {
    "planning": ".quota.planning",
    "capacity": ".endpoints.capacity",
    "runtime": ".runtime",
    "BedrockModel": ".models",
    "PROFILE_REGIONS": ".models",
    "BedrockRetry": ".step_functions",
    "DEFAULT_RETRY_ERRORS": ".step_functions",
    "ConverseRequest": ".step_functions",
    "NativeRequest": ".step_functions",
    "TaskOptions": ".step_functions",
    "BoundedMap": ".step_functions",
    "BoundedDistributedMap": ".step_functions",
    "ParallelPrompts": ".step_functions",
    "SyncExecutionUrl": ".step_functions",
    "StateMachineOptions": ".step_functions",
    "InvalidPropsError": "._internal.checks",
    "QueuedInference": ".queue",
    "AnswerStore": ".precompute",
    "EndpointScaling": ".endpoints",
    "PeakWindow": ".endpoints",
    "LlmEndpoint": ".endpoints",
    "InferenceComponentOptions": ".endpoints",
    "AnswerRouter": ".precompute",
    "BatchPrecompute": ".precompute",
    "ModelInvocationLogging": ".observe",
    "LatencyAlarms": ".observe",
    "LatencyDashboard": ".observe",
    "TpmQuota": ".observe",
    "WatchedModel": ".observe",
    "ScheduledPrecompute": ".precompute",
    "ModelQuota": ".quota",
    "QuotaLedger": ".quota",
    "Share": ".quota",
    "HybridSearchPipeline": ".retrieval",
    "VectorIndexSettings": ".retrieval",
    "retrieval_tuning": ".retrieval.tuning",
    "PromptExperiment": ".experiments",
    "ExperimentVariant": ".experiments",
    "TextPrompt": ".experiments",
    "ManagedPrompt": ".experiments",
    "experiment_verdict": ".experiments.verdict",
    "RuntimeLayer": ".runtime_layer",
    "LoadReplay": ".benchmark",
}

#: Modules that need more than aws-cdk-lib and constructs (runtime needs boto3) stay out of
#: `from genai_pacer import *`, which must work with the library's own dependencies alone; they load
#: by name (`genai_pacer.runtime`, `from genai_pacer import runtime`).
_NEEDS_EXTRAS = frozenset({"runtime"})
#: Exported names that are modules (the others are attributes of their module).
_MODULES = frozenset({"planning", "capacity", "runtime", "retrieval_tuning", "experiment_verdict"})
__all__ = [name for name in _EXPORTS if name not in _NEEDS_EXTRAS]


if not TYPE_CHECKING:  # hidden from type checkers, so a misspelt name is an error there, not Any
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {name: module for name, module in _EXPORTS.items() if name not in _MODULES},
        {name: _EXPORTS[name] for name in _MODULES},
    )
