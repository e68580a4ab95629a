"""The batch loader's throughput, in records per second, on one job's 50,000-record output.

What is timed: one call of `batch_precompute.load.load_job` (the loader's own code, as the Lambda
handler calls it) from its start to its return: reading the recordId -> key mapping, streaming and
parsing every `.jsonl.out` line, joining on recordId, extracting each answer, building each
`pacer_runtime.answers.Answer` and writing it with the real `answers.put_answer` from
`--concurrency` threads, listing the errored records and writing their list, and reconciling the
manifest. Preparing the output (generating and shuffling the lines) is not timed.

What stands in for AWS, so the figure is the loader's and not a local emulator's:
- S3 is a dict of bytes in this process (GetObject returns a stream over them, ListObjectsV2 the keys);
- DynamoDB is a dict behind one lock that evaluates put_answer's condition (a stored answer with a
  higher sequence, or the same sequence and a request id that sorts as high, wins) and, with
  `--put-latency-ms`, sleeps that long per PutItem outside the lock, as a network round trip would.

Two scenarios: `cpu` (no put latency: the loader's own cost per record, the ceiling) and
`network` (a fixed per-put latency, default 5 ms, roughly DynamoDB's in-Region PutItem: then the
thread pool, not the parsing, bounds the rate, at most concurrency / latency). Real DynamoDB adds
variance and throttling this does not model; S3 reads here cost no network time.

    .venv/bin/python bench/batch_loader_bench.py [--records 50000] [--trials 3] [--out results.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "lambda")]
# The handler module creates boto3 clients at import (never used here): give them a Region.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")

from batch_precompute import load  # noqa: E402
from batch_precompute.records import record_id  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402

BUCKET_IN, BUCKET_OUT, TABLE = "in", "out", "answers"
JOB_ID = "abcdef123456"
JOB_ARN = f"arn:aws:bedrock:us-east-1:123456789012:model-invocation-job/{JOB_ID}"
OUTPUT_PREFIX = "batch-output/run/job-0000/"
KEYS_KEY = "batch-input/run/job-0000.keys.jsonl"


class StandInS3:
    """get_object, list_objects_v2 and put_object over bytes held in this process."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes) -> dict:  # noqa: N803 (boto3's names)
        self.objects[(Bucket, Key)] = bytes(Body)
        return {}

    def get_object(self, *, Bucket: str, Key: str) -> dict:  # noqa: N803
        return {"Body": io.BytesIO(self.objects[(Bucket, Key)])}

    def list_objects_v2(self, *, Bucket: str, Prefix: str, **_: Any) -> dict:  # noqa: N803
        keys = sorted(key for bucket, key in self.objects if bucket == Bucket and key.startswith(Prefix))
        return {"Contents": [{"Key": key} for key in keys], "IsTruncated": False}


class StandInTable:
    """PutItem with put_answer's condition, one lock for the table, optional latency per call."""

    def __init__(self, latency_seconds: float) -> None:
        self.items: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.latency = latency_seconds
        self.calls = 0

    def put_item(self, *, TableName: str, Item: dict, ExpressionAttributeValues: dict, **_: Any) -> dict:  # noqa: N803
        if self.latency:
            time.sleep(self.latency)
        sequence, request_id = int(ExpressionAttributeValues[":seq"]["N"]), ExpressionAttributeValues[":rid"]["S"]
        with self.lock:
            self.calls += 1
            stored = self.items.get(Item["pk"]["S"])
            if stored is not None and "sequence" in stored:
                stored_sequence, stored_id = int(stored["sequence"]["N"]), stored["request_id"]["S"]
                if stored_sequence > sequence or (stored_sequence == sequence and stored_id >= request_id):
                    raise ClientError({"Error": {"Code": "ConditionalCheckFailedException", "Message": ""}}, "PutItem")
            self.items[Item["pk"]["S"]] = Item
        return {}


def job_output(s3: StandInS3, records: int, *, errored_share: float, files: int, seed: int) -> dict:
    """A realistic job output: Converse answers of ~600 characters, some errored lines, shuffled."""
    rng = random.Random(seed)
    keys = [f"review-summary#B0{n:08d}" for n in range(records)]
    ids = [record_id(key) for key in keys]
    s3.put_object(Bucket=BUCKET_IN, Key=KEYS_KEY, Body="".join(
        json.dumps({"recordId": rid, "key": key}) + "\n" for rid, key in zip(ids, keys, strict=True)).encode())
    words = ["the", "battery", "lasts", "two", "days", "and", "the", "screen", "is", "bright", "but", "the", "case", "scratches", "easily"]
    lines, errored = [], 0
    for rid in ids:
        model_input = {"messages": [{"role": "user", "content": [{"text": "Summarize these reviews: " + " ".join(rng.choices(words, k=300))}]}],
                       "inferenceConfig": {"maxTokens": 400}}
        if rng.random() < errored_share:
            errored += 1
            lines.append({"recordId": rid, "modelInput": model_input,
                          "error": {"errorCode": 400, "errorMessage": "Input is too long for requested model."}})
        else:
            text = " ".join(rng.choices(words, k=110))
            lines.append({"recordId": rid, "modelInput": model_input, "modelOutput": {
                "output": {"message": {"role": "assistant", "content": [{"text": text}]}}, "stopReason": "end_turn",
                "usage": {"inputTokens": 420, "outputTokens": 150, "totalTokens": 570}}})
    rng.shuffle(lines)
    for n in range(files):
        part = "".join(json.dumps(line) + "\n" for line in lines[n::files]).encode()
        s3.put_object(Bucket=BUCKET_OUT, Key=f"{OUTPUT_PREFIX}{JOB_ID}/records-{n:04d}.jsonl.out", Body=part)
    s3.put_object(Bucket=BUCKET_OUT, Key=f"{OUTPUT_PREFIX}{JOB_ID}/manifest.json.out", Body=json.dumps({
        "totalRecordCount": records, "processedRecordCount": records, "successRecordCount": records - errored,
        "errorRecordCount": errored}).encode())
    return {"jobArn": JOB_ARN, "jobName": "job-0000", "jobIndex": 0, "status": "PartiallyCompleted",
            "outputUri": f"s3://{BUCKET_OUT}/{OUTPUT_PREFIX}", "keysUri": f"s3://{BUCKET_IN}/{KEYS_KEY}",
            "sequence": 1_796_104_800_000, "sentAt": "2026-12-01T06:00:00.000+00:00"}


def trial(records: int, *, concurrency: int, latency_ms: float, seed: int) -> dict:
    s3, table = StandInS3(), StandInTable(latency_ms / 1000)
    request = job_output(s3, records, errored_share=0.01, files=-(-records // 50_000), seed=seed)
    output_bytes = sum(len(body) for (bucket, key), body in s3.objects.items() if key.endswith(".jsonl.out"))
    began = time.perf_counter()
    result = load.load_job(s3, table, request, table=TABLE, model_id="us.amazon.nova-lite-v1:0",
                           ttl_seconds=30 * 86400, concurrency=concurrency)
    seconds = time.perf_counter() - began
    assert result["reconciled"], result["discrepancies"]
    assert result["loaded"] + result["errored"] == records and len(table.items) == result["loaded"]
    return {"records": records, "seconds": round(seconds, 3), "records_per_second": round(records / seconds),
            "loaded": result["loaded"], "errored": result["errored"], "output_megabytes": round(output_bytes / 1e6, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000, help="records in the job's output (default 50,000)")
    parser.add_argument("--trials", type=int, default=3, help="timed trials per scenario (default 3)")
    parser.add_argument("--concurrency", type=int, default=16, help="writer threads, as WRITE_CONCURRENCY (default 16)")
    parser.add_argument("--put-latency-ms", type=float, default=5.0, help="per-PutItem latency of the network scenario")
    parser.add_argument("--out", type=Path, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.records < 1 or args.trials < 1 or args.concurrency < 1 or args.put_latency_ms < 0:
        parser.error("--records, --trials and --concurrency must be positive, --put-latency-ms not negative")

    trial(2_000, concurrency=args.concurrency, latency_ms=0, seed=99)  # warm-up: imports, allocator
    scenarios = {}
    for name, latency in (("cpu", 0.0), ("network", args.put_latency_ms)):
        runs = [trial(args.records, concurrency=args.concurrency, latency_ms=latency, seed=seed) for seed in range(args.trials)]
        rates = [run["records_per_second"] for run in runs]
        scenarios[name] = {
            "put_latency_ms": latency,
            "median_records_per_second": round(statistics.median(rates)),
            "min_records_per_second": min(rates),
            "max_records_per_second": max(rates),
            "median_seconds": statistics.median(run["seconds"] for run in runs),
            "trials": runs,
        }
        print(f"{name:8s} put latency {latency:4.1f} ms: {statistics.median(rates):>8,.0f} records/s median "
              f"({min(rates):,}..{max(rates):,}) over {len(runs)} trials of {args.records:,} records, "
              f"{runs[0]['output_megabytes']} MB of output, {args.concurrency} writer threads")
    report = {
        "what": "batch_precompute.load.load_job on one job's output, S3 and DynamoDB stood in by in-process objects",
        "records": args.records,
        "concurrency": args.concurrency,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "scenarios": scenarios,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
