"""Runtime helpers shared by genai-pacer's Lambda handlers (and usable in any Python service)."""

from . import answers, experiment, metrics, quota_pacer, retrieval, sampling, streaming
from .bedrock import (
    ConverseResult,
    RequestError,
    bedrock_client,
    build_converse_request,
    converse,
    converse_stream,
    is_throttle,
)
from .quota_pacer import AdmissionRejected, QuotaPacer
from .sampling import EXTRACTION, VARIED, Sampling
from .side_by_side import Backoff, BoundedCalls, Outcome, call_with_backoff, run_side_by_side
from .streaming import SentenceSplitter, SentenceStream, sentences, stream_sentences
from .structured_log import log

__all__ = [
    "answers",
    "experiment",
    "metrics",
    "quota_pacer",
    "retrieval",
    "sampling",
    "streaming",
    "AdmissionRejected",
    "Backoff",
    "BoundedCalls",
    "ConverseResult",
    "EXTRACTION",
    "Outcome",
    "QuotaPacer",
    "RequestError",
    "Sampling",
    "SentenceSplitter",
    "SentenceStream",
    "VARIED",
    "bedrock_client",
    "build_converse_request",
    "call_with_backoff",
    "converse",
    "converse_stream",
    "is_throttle",
    "log",
    "run_side_by_side",
    "sentences",
    "stream_sentences",
]
