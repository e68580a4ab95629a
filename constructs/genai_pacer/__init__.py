"""genai-pacer: AWS CDK constructs that keep generative-AI workloads fast and inside their quotas."""

from . import planning
from ._secure import StateMachineOptions
from .models import PROFILE_REGIONS, BedrockModel
from .orchestration import DEFAULT_RETRY_ERRORS, BedrockRetry, BoundedMap, ParallelPrompts, invoke_model_task
from .queued_inference import QueuedInference

__all__ = [
    "planning",
    "BedrockModel",
    "PROFILE_REGIONS",
    "BedrockRetry",
    "DEFAULT_RETRY_ERRORS",
    "BoundedMap",
    "ParallelPrompts",
    "StateMachineOptions",
    "invoke_model_task",
    "QueuedInference",
]
