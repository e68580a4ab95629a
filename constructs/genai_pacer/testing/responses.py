"""What a served request sends back: Converse bodies, native bodies and headers, and the event streams."""

from __future__ import annotations

import base64
import json
from typing import Any

from . import eventstream, native
from . import validation as v
from .records import Invocation
from .specs import SERVICE_TIER_HEADER, SERVICE_TIER_MEMBER


def body(req: v.Request, text: str, record: Invocation, cut: bool) -> dict[str, Any]:
    """A non-streaming answer: Converse's shape, or the native family's."""
    if req.family:
        return native.family_of(req.spec, req.operation).response(req.spec, text, record, cut)
    answer = {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "max_tokens" if cut else "end_turn",
        "usage": usage(record),
        "metrics": {"latencyMs": record.latency_ms},
        "performanceConfig": {"latency": record.served_latency},
    }
    return answer | served_tier(record)


def served_tier(record: Invocation) -> dict[str, Any]:
    """Converse's and the stream metadata's echo of the tier that served the call (none when none was asked)."""
    return {SERVICE_TIER_MEMBER: {"type": record.served_tier}} if record.served_tier else {}


def headers(req: v.Request, record: Invocation) -> dict[str, str]:
    """InvokeModel*'s response headers (Converse carries everything in its body)."""
    if not req.family:
        return {}
    sent = {"X-Amzn-Bedrock-PerformanceConfig-Latency": record.served_latency}
    if record.served_tier:
        sent[SERVICE_TIER_HEADER] = record.served_tier
    if req.operation == "InvokeModel":
        sent |= {
            "X-Amzn-Bedrock-Input-Token-Count": str(record.input_tokens),
            "X-Amzn-Bedrock-Output-Token-Count": str(record.output_tokens),
            "X-Amzn-Bedrock-Invocation-Latency": str(record.latency_ms),
        }
    else:
        sent["X-Amzn-Bedrock-Content-Type"] = "application/json"
    return sent



def usage(record: Invocation) -> dict[str, int]:
    return {
        "inputTokens": record.input_tokens,
        "outputTokens": record.output_tokens,
        "totalTokens": record.input_tokens + record.output_tokens + record.cache_read_tokens + record.cache_write_tokens,
        "cacheReadInputTokens": record.cache_read_tokens,
        "cacheWriteInputTokens": record.cache_write_tokens,
    }


class ConverseStream:
    """ConverseStream's events: messageStart, contentBlockDelta..., contentBlockStop, messageStop, metadata."""

    def __init__(self, req: v.Request):
        self.req = req  # the served tier is the record's, known once the call is admitted

    def start(self, record: Invocation) -> bytes:
        return eventstream.event("messageStart", {"role": "assistant"})

    def delta(self, text: str, record: Invocation) -> bytes:
        return eventstream.event("contentBlockDelta", {"delta": {"text": text}, "contentBlockIndex": 0})

    def stop(self, record: Invocation, cut: bool) -> bytes:
        metadata: dict[str, Any] = {
            "usage": usage(record),
            "metrics": {"latencyMs": record.latency_ms},
            "performanceConfig": {"latency": record.served_latency},
        }
        metadata |= served_tier(record)
        return b"".join([
            eventstream.event("contentBlockStop", {"contentBlockIndex": 0}),
            eventstream.event("messageStop", {"stopReason": "max_tokens" if cut else "end_turn"}),
            eventstream.event("metadata", metadata),
        ])


class InvokeStream:
    """InvokeModelWithResponseStream: `chunk` events whose bytes are the family's native stream
    events; the last carries amazon-bedrock-invocationMetrics as Bedrock adds it."""

    def __init__(self, req: v.Request):
        self.spec, self.family = req.spec, native.family_of(req.spec, req.operation)

    @staticmethod
    def _chunks(payloads: list[dict[str, Any]]) -> bytes:
        return b"".join(
            eventstream.event("chunk", {"bytes": base64.b64encode(json.dumps(p, separators=(",", ":")).encode()).decode()})
            for p in payloads
        )

    def start(self, record: Invocation) -> bytes:
        return self._chunks(self.family.stream_start(record))

    def delta(self, text: str, record: Invocation) -> bytes:
        return self._chunks([self.family.stream_delta(text, record)])

    def stop(self, record: Invocation, cut: bool) -> bytes:
        payloads = self.family.stream_stop(record, cut)
        payloads[-1] = payloads[-1] | {"amazon-bedrock-invocationMetrics": {
            "inputTokenCount": record.input_tokens,
            "outputTokenCount": record.output_tokens,
            "invocationLatency": record.latency_ms,
            "firstByteLatency": record.ttft_ms,
        }}
        return self._chunks(payloads)


def stream_for(req: v.Request) -> ConverseStream | InvokeStream:
    return ConverseStream(req) if req.family is None else InvokeStream(req)
