"""Offline test bed: a local Bedrock Runtime emulator and a load-replay benchmark.

`BedrockEmulator` needs nothing beyond the standard library; the benchmark, `BedrockEmulator.client()`
and `fail_next` need boto3 / botocore (see `INSTALL_HINT`).
"""

from ._install import INSTALL_HINT
from .emulator import (
    ANSWER_TOKENS_KEY,
    EMULATED_OPERATIONS,
    BedrockEmulator,
    EmulatorError,
    Invocation,
    InvocationTotals,
    LatencyOptimized,
    ModelSpec,
    QuotaModel,
    TierLatency,
    approx_tokens,
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
    "ModelSpec",
    "QuotaModel",
    "TierLatency",
    "approx_tokens",
]
