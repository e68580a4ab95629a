"""Runtime helpers shared by genai-pacer's Lambda handlers (and usable in any Python service)."""

from .bedrock import (
    ConverseResult,
    RequestError,
    bedrock_client,
    build_converse_request,
    converse,
    is_throttle,
)

__all__ = [
    "ConverseResult",
    "RequestError",
    "bedrock_client",
    "build_converse_request",
    "converse",
    "is_throttle",
]
