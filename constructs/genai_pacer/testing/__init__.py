"""Offline test bed: a local Bedrock Runtime emulator and a load-replay benchmark.

`BedrockEmulator` needs nothing beyond the standard library; the benchmark and `BedrockEmulator.client()`
need boto3 (`pip install genai-pacer[bench]`).
"""

from .emulator import (
    ANSWER_TOKENS_KEY,
    BedrockEmulator,
    EmulatorError,
    Invocation,
    LatencyOptimized,
    ModelSpec,
    approx_tokens,
)

__all__ = [
    "ANSWER_TOKENS_KEY",
    "BedrockEmulator",
    "EmulatorError",
    "Invocation",
    "LatencyOptimized",
    "ModelSpec",
    "approx_tokens",
]
