"""AnswerRouter under a replayed peak: 80% of requests answered from the store vs every request
calling the model, side by side in one run, over several seeds.

What runs: the router's own handler code (lambda/answer_router/handler.py, imported as Lambda
imports it), called from `--concurrency` threads back to back (a closed-loop peak) with the same
request sequence in both scenarios. Bedrock is the project's BedrockEmulator on loopback (real
boto3 client, the quota and latency model of `genai_pacer.testing`, time_scale 1 so latencies are
in real seconds); DynamoDB is moto in this process, so a hit's latency here is moto's GetItem plus
the handler, not DynamoDB's (single-digit milliseconds on AWS, plus Lambda's own overhead).

Scenarios, per seed:
- precomputed: 80% of the requests name one of the keys written before the peak (fresh answers);
  the other 20% name keys nobody pre-computed, so the router calls the model (and writes back).
- model-only: the same requests with an empty store and write-back off, so every request calls
  the model, as an application without pre-computation would.

Reported per scenario (median over seeds, with min..max): p50 and p99 end-to-end latency of the
handler call, the requests that called the model, the quota tokens settled (input + output x
burndown, what the on-demand TPM quota is charged), the tokens reserved at admission, and throttles.

    .venv/bin/python bench/router_bench.py --out bench/results
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "constructs"), str(ROOT / "lambda")]

MODEL = "amazon.nova-lite-v1:0"
TABLE = "answers"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def requests_for(seed: int, count: int, stored_keys: int, hit_rate: float) -> list[dict]:
    """The peak: hit_rate of the requests name a stored key (drawn at random), the rest a key nobody stored."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if rng.random() < hit_rate:
            key = f"review-summary#{rng.randrange(stored_keys)}"
        else:
            key = f"review-summary#unseen-{seed}-{i}"
        out.append({"key": key})  # the router builds the prompt from the key (PROMPTS)
    return out


#: The router's server-side prompt for a review-summary key (AnswerRouter(prompts=...)).
PROMPTS = [{"key": "review-summary#{product}", "prompt": "Summarize the reviews of product {product} in three sentences."}]


def load_router(environment: dict[str, str]):
    os.environ.update({"PROMPTS": json.dumps(PROMPTS), **environment})
    sys.modules.pop("answer_router.handler", None)
    return importlib.import_module("answer_router.handler")


def run_scenario(router, bedrock, requests: list[dict], concurrency: int) -> dict:
    before = bedrock.totals
    latencies: list[float] = []
    sources: list[str] = []
    statuses: list[int] = []
    lock = threading.Lock()

    def one(request: dict) -> None:
        started = time.perf_counter()
        result = router.handler(dict(request))
        elapsed = (time.perf_counter() - started) * 1000
        with lock:
            latencies.append(elapsed)
            statuses.append(result["statusCode"])
            sources.append(result.get("source", result.get("error", "?")))

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, requests))
    after = bedrock.totals
    return {
        "p50_ms": round(percentile(latencies, 50), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "model_calls": sources.count("model"),
        "store_hits": sources.count("store"),
        "errors": sum(1 for s in statuses if s != 200),
        "settled_tokens": round(after.settled - before.settled),
        "reserved_tokens": after.reserved - before.reserved,
        "throttled": after.throttled - before.throttled,
    }


def one_seed(seed: int, args) -> dict[str, dict]:
    import boto3
    from genai_pacer.testing import BedrockEmulator, ModelSpec
    from moto import mock_aws

    spec = ModelSpec(MODEL, tpm_quota=args.tpm_quota, answer_tokens=args.answer_tokens,
                     output_tokens_per_second=args.otps, ttft_seconds=0.4)
    requests = requests_for(seed, args.requests, args.stored_keys, args.hit_rate)
    results = {}
    with mock_aws():
        for scenario in ("precomputed", "model-only"):
            # A fresh emulator per scenario: each starts with an empty quota window.
            with BedrockEmulator([spec], time_scale=1, seed=seed) as bedrock:
                ddb = boto3.client("dynamodb", region_name="us-east-1")
                name = f"{TABLE}-{scenario}"
                ddb.create_table(TableName=name, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                                 AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                                 BillingMode="PAY_PER_REQUEST")
                router = load_router({
                    "MODEL_ID": MODEL, "ANSWER_TABLE": name, "ANSWER_TTL_SECONDS": "86400", "MAX_AGE_SECONDS": "86400",
                    "WRITE_BACK": "true" if scenario == "precomputed" else "false", "MAX_OUTPUT_TOKENS": str(args.max_tokens),
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                    "AWS_LAMBDA_FUNCTION_NAME": "router-bench",
                })
                router.BEDROCK = bedrock.client(max_pool_connections=args.concurrency, retries={"total_max_attempts": 3, "mode": "standard"})
                router.DDB = ddb
                router.metrics.emit = lambda values, dimensions, **options: None  # EMF lines would flood stdout
                if scenario == "precomputed":
                    from pacer_runtime import answers

                    now = time.time()
                    for k in range(args.stored_keys):
                        answers.put_answer(ddb, name, answers.Answer(
                            key=f"review-summary#{k}", text="pre-computed summary " * 40, model_id=MODEL,
                            request_id="precompute-run", sequence=int(now * 1000), generated_at=answers.iso_utc(now)))
                results[scenario] = run_scenario(router, bedrock, requests, args.concurrency)
    return results


def summarize(per_seed: list[dict[str, dict]]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for scenario in per_seed[0]:
        fields = per_seed[0][scenario].keys()
        out[scenario] = {
            field: {"median": statistics.median(r[scenario][field] for r in per_seed),
                    "min": min(r[scenario][field] for r in per_seed),
                    "max": max(r[scenario][field] for r in per_seed)}
            for field in fields
        }
    return out


def table(summary: dict[str, dict], args) -> str:
    rows = [("p50 latency (ms)", "p50_ms"), ("p99 latency (ms)", "p99_ms"), ("requests that called the model", "model_calls"),
            ("quota tokens settled", "settled_tokens"), ("quota tokens reserved", "reserved_tokens"),
            ("throttled calls", "throttled"), ("error responses", "errors")]
    lines = [f"Router peak: {args.requests} requests, {args.concurrency} at once, {args.seeds} seeds; "
             "median (min..max over seeds)", "",
             "| | 80% pre-computed | every request calls the model |", "|---|---|---|"]
    for label, field in rows:
        cells = []
        for scenario in ("precomputed", "model-only"):
            s = summary[scenario][field]
            cells.append(f"{s['median']:g} ({s['min']:g}..{s['max']:g})")
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--hit-rate", type=float, default=0.8)
    parser.add_argument("--stored-keys", type=int, default=500)
    parser.add_argument("--answer-tokens", type=int, default=120)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--otps", type=float, default=120.0)
    parser.add_argument("--tpm-quota", type=int, default=60_000)
    args = parser.parse_args()
    if not 0 < args.hit_rate < 1 or min(args.seeds, args.requests, args.concurrency, args.stored_keys) < 1:
        parser.error("hit-rate must be between 0 and 1, and seeds, requests, concurrency and stored-keys at least 1")
    per_seed = [one_seed(seed, args) for seed in range(1, args.seeds + 1)]
    summary = summarize(per_seed)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    (args.out / "router_bench.json").write_text(json.dumps({"settings": settings, "per_seed": per_seed, "summary": summary}, indent=2))
    text = table(summary, args)
    (args.out / "router_bench.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
