"""Runtime helpers shared by genai-pacer's Lambda handlers (and usable in any Python service)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from . import answers, ledger, metrics, quota_pacer, sampling, streaming
from .bedrock import (
    ConverseResult,
    RequestError,
    bedrock_client,
    build_converse_request,
    converse,
    converse_stream,
    is_throttle,
)
from .ledger import LedgerError, SharedLedger
from .quota_pacer import AdmissionRejected, QuotaPacer
from .sampling import EXTRACTION, VARIED, Sampling
from .side_by_side import Backoff, BoundedCalls, Outcome, call_with_backoff, run_side_by_side
from .streaming import SentenceSplitter, SentenceStream, sentences, stream_sentences
from .structured_log import log

__all__ = [
    "answers",
    "experiment",
    "ledger",
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
    "LedgerError",
    "Outcome",
    "QuotaPacer",
    "RequestError",
    "Sampling",
    "SharedLedger",
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

# Loaded on first use: the library's own handlers never need them, and importing them eagerly cost
# every handler's cold start about 17 ms (threading, urllib.request, hashlib, a module of regexes).
_ON_FIRST_USE = ("experiment", "retrieval")

if TYPE_CHECKING:
    from . import experiment as experiment
    from . import retrieval as retrieval


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        module = import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
