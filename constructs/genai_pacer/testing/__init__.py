"""Offline test bed: a local Bedrock Runtime emulator, an offline Step Functions runner, and a
load-replay benchmark.

`BedrockEmulator` needs nothing beyond the standard library; the benchmark, `BedrockEmulator.client()`
and `fail_next` need boto3 / botocore (see `INSTALL_HINT`); `StateMachineRunner` needs moto with its
Step Functions extra (loaded only when a runner starts).
"""

from .._internal.install import BOTO3_HINT as INSTALL_HINT
from .emulator import (
    ANSWER_TOKENS_KEY,
    EMULATED_OPERATIONS,
    BedrockEmulator,
    EmulatorError,
    Invocation,
    InvocationTotals,
    LatencyOptimized,
    ManualClock,
    ModelSpec,
    QuotaModel,
    TierLatency,
    WallClock,
    approx_tokens,
)
from .sfn import (
    BatchJob,
    BatchJobSimulator,
    BatchRecordError,
    Execution,
    OfflineExecutionError,
    StateMachineRunner,
    StateMachineSpec,
)

__all__ = [
    "ANSWER_TOKENS_KEY",
    "EMULATED_OPERATIONS",
    "INSTALL_HINT",
    "BedrockEmulator",
    "EmulatorError",
    "Invocation",
    "InvocationTotals",
    "LatencyOptimized",
    "ManualClock",
    "ModelSpec",
    "QuotaModel",
    "TierLatency",
    "WallClock",
    "approx_tokens",
    "BatchJob",
    "BatchJobSimulator",
    "BatchRecordError",
    "Execution",
    "OfflineExecutionError",
    "StateMachineRunner",
    "StateMachineSpec",
]
