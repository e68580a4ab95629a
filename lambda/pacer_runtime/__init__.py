"""Runtime helpers shared by genai-pacer's Lambda handlers (and usable in any Python service)."""

from . import answers, metrics
from .bedrock import (
    ConverseResult,
    RequestError,
    bedrock_client,
    build_converse_request,
    converse,
    converse_stream,
    is_throttle,
)
from .side_by_side import Backoff, BoundedCalls, Outcome, call_with_backoff, run_side_by_side

__all__ = [
    "answers",
    "metrics",
    "Backoff",
    "BoundedCalls",
    "ConverseResult",
    "Outcome",
    "RequestError",
    "bedrock_client",
    "build_converse_request",
    "call_with_backoff",
    "converse",
    "converse_stream",
    "is_throttle",
    "run_side_by_side",
]
