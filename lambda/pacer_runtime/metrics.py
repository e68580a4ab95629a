"""Metrics every genai-pacer handler emits, in CloudWatch embedded metric format (EMF).

One JSON line on stdout becomes metrics through CloudWatch Logs, with no API call on the request
path. The namespace and metric names live here and nowhere else: the handlers write with them and
the constructs' `metric_*` methods read them (genai_pacer loads this file without boto3), so a
dashboard can never look for a name no handler writes. Standard library only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

__all__ = [
    "NAMESPACE",
    "INPUT_TOKENS",
    "OUTPUT_TOKENS",
    "LATENCY_MS",
    "ANSWER_HITS",
    "ANSWER_MISSES",
    "ANSWER_STALE",
    "PRECOMPUTE_FAILED_KEYS",
    "BATCH_RECORDS_LOADED",
    "BATCH_RECORDS_FAILED",
    "UNITS",
    "emf_line",
    "emit",
]

NAMESPACE = "GenaiPacer"

INPUT_TOKENS = "InputTokens"
OUTPUT_TOKENS = "OutputTokens"
LATENCY_MS = "LatencyMs"
#: AnswerRouter: a fresh stored answer served, no stored answer, a stored answer older than max-age.
ANSWER_HITS = "AnswerHits"
ANSWER_MISSES = "AnswerMisses"
ANSWER_STALE = "AnswerStale"
#: Pre-computation: keys whose answer could not be generated in a run.
PRECOMPUTE_FAILED_KEYS = "PrecomputeFailedKeys"
#: Batch inference loading: records written to the answer store, records the job reported as errors.
BATCH_RECORDS_LOADED = "BatchRecordsLoaded"
BATCH_RECORDS_FAILED = "BatchRecordsFailed"

UNITS: dict[str, str] = {
    INPUT_TOKENS: "Count",
    OUTPUT_TOKENS: "Count",
    LATENCY_MS: "Milliseconds",
    ANSWER_HITS: "Count",
    ANSWER_MISSES: "Count",
    ANSWER_STALE: "Count",
    PRECOMPUTE_FAILED_KEYS: "Count",
    BATCH_RECORDS_LOADED: "Count",
    BATCH_RECORDS_FAILED: "Count",
}


def emf_line(values: Mapping[str, float], dimensions: Mapping[str, str], *, timestamp_ms: int | None = None) -> str:
    """One EMF log line publishing `values` (metric name -> value) under `dimensions`."""
    unknown = sorted(set(values) - set(UNITS))
    if unknown:
        raise ValueError(f"unknown metric names {unknown}; add them to pacer_runtime.metrics.UNITS")
    return json.dumps(
        {
            "_aws": {
                "Timestamp": int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
                "CloudWatchMetrics": [
                    {
                        "Namespace": NAMESPACE,
                        "Dimensions": [sorted(dimensions)],
                        "Metrics": [{"Name": name, "Unit": UNITS[name]} for name in values],
                    }
                ],
            },
            **dimensions,
            **values,
        }
    )


def emit(values: Mapping[str, float], dimensions: Mapping[str, str]) -> None:
    """Print one EMF line (Lambda sends stdout to CloudWatch Logs)."""
    print(emf_line(values, dimensions))
