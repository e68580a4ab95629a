"""Service tiers under load on the emulator (issue 37.6): what Priority buys and what Flex costs when
one model's serving capacity is contended, against the same arrivals all at default.

ASSUMPTION, the emulator's and so this benchmark's (genai_pacer.testing.slots.ASSUMED_TIER_ORDER):
AWS says in words only that Priority requests move ahead of Standard (`default`) ones in the
processing queue and that Flex trades immediate processing for a discount; how Bedrock orders its
queue, how long a call may wait and what it answers then are not published. The emulator serves a
model's calls in `serving_slots` slots; waiting calls are served Priority first, Flex last (ties:
first come, first served), and a call that waited `max_queue_seconds` of model time is refused with
ThrottlingException. Every tier runs at the same speed once served here (no TierLatency), so every
difference measured below is the queue order alone. The figures describe the emulator's model of
the tiers, not Bedrock: measure your own model and Region before relying on a tier's latency.

Per seed and load, one Poisson arrival stream (the shipped sample prompts, cycled; max_tokens 400;
ConverseStream) at `load` times the model's serving capacity (slots / the mean call's model
seconds), sent twice, each time to a fresh emulator:

- tiered: each arrival asks for priority, default or flex (a third each, drawn with the seed, the
  same draw in both scenarios);
- untiered: the same arrivals, each asking for default (each keeps its class for the report).

Reported per class and scenario, in model seconds from arrival (the client's clock x time_scale):
TTFT and end-to-end p50/p90/p99 of the answered calls, and the calls refused (throttled after the
queue limit; no client retries, so a refusal is counted once). Over the seeds: mean, min-max and the
95% t-interval (genai_pacer.testing.experiments.spread), and tiered minus untiered paired by seed
(compare: "differs" when the ranges do not overlap and the interval excludes 0). A class holds
about a third of `--requests` per run, so its p99 is close to its slowest call.

Run (about 1.5 minutes of wall time with the defaults, at time scale 20):
    .venv/bin/python bench/service_tier_experiment.py --out bench/results/service_tier_experiment.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "constructs"), str(ROOT / "lambda")]

from genai_pacer.testing import BedrockEmulator, ModelSpec  # noqa: E402
from genai_pacer.testing.bench import converse_request, load_prompts  # noqa: E402
from genai_pacer.testing.experiments import compare, machine_report, spread  # noqa: E402
from genai_pacer.testing.specs import approx_tokens  # noqa: E402
from pacer_runtime import converse_stream  # noqa: E402

#: The reference stacks' model (stacks/settings.py), burndown 1. Its quota is set far above the load:
#: the tiers share one on-demand quota, so the contention measured here is for serving slots only.
MODEL_ID = "us.amazon.nova-2-lite-v1:0"
TIERS = ("priority", "default", "flex")
SCENARIOS = ("tiered", "untiered")
MAX_TOKENS = 400
TTFT_SECONDS, PREFILL_PER_SECOND, OUTPUT_PER_SECOND = 0.5, 8_000.0, 60.0
DEFAULT_PROMPTS = ROOT / "constructs" / "genai_pacer" / "testing" / "data" / "prompts.jsonl"


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank on the sorted values (None without any)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def model_spec(slots: int, max_queue_seconds: float) -> ModelSpec:
    return ModelSpec(MODEL_ID, tpm_quota=100_000_000, burndown=1, ttft_seconds=TTFT_SECONDS,
                     prefill_tokens_per_second=PREFILL_PER_SECOND, output_tokens_per_second=OUTPUT_PER_SECOND,
                     jitter=0.1, serving_slots=slots, max_queue_seconds=max_queue_seconds)


def mean_call_seconds(prompts: list[Any]) -> float:
    """A call's model seconds once served, over the prompts (the emulator's latency model without jitter)."""
    def seconds(prompt: Any) -> float:
        output = min(prompt.expected_output_tokens or 300, MAX_TOKENS)
        return TTFT_SECONDS + approx_tokens(prompt.input_text) / PREFILL_PER_SECOND + output / OUTPUT_PER_SECOND
    return statistics.fmean(seconds(p) for p in prompts)


def arrivals(seed: int, count: int, per_minute: float) -> list[tuple[float, str]]:
    """(arrival model second, class) for each request: Poisson arrivals, a class drawn uniformly."""
    rng = random.Random(seed)
    at, out = 0.0, []
    for _ in range(count):
        out.append((at, rng.choice(TIERS)))
        at += rng.expovariate(per_minute / 60)
    return out


def run(scenario: str, plan: list[tuple[float, str]], prompts: list[Any], *, seed: int, slots: int,
        max_queue_seconds: float, time_scale: float) -> list[dict[str, Any]]:
    """Send the planned arrivals to a fresh emulator; one record per request (model seconds from arrival)."""
    records: list[dict[str, Any]] = [{} for _ in plan]
    with BedrockEmulator([model_spec(slots, max_queue_seconds)], seed=seed, time_scale=time_scale) as bedrock:
        client = bedrock.client(max_pool_connections=len(plan), retries={"total_max_attempts": 1},
                                read_timeout=max(60.0, 2 * max_queue_seconds / time_scale))
        zero = time.perf_counter()

        def now() -> float:
            return (time.perf_counter() - zero) * time_scale

        def one(index: int) -> None:
            arrived, klass = plan[index]
            request = converse_request(prompts[index % len(prompts)], MODEL_ID, max_tokens=MAX_TOKENS)
            request["serviceTier"] = {"type": klass if scenario == "tiered" else "default"}
            record: dict[str, Any] = {"class": klass, "asked": request["serviceTier"]["type"]}
            started = now()
            record["start_lag_s"] = round(started - arrived, 4)  # the client's own delay, counted in both scenarios
            try:
                result = converse_stream(client, request)
            except Exception as error:  # a refusal is counted, never hidden in a latency
                response = getattr(error, "response", None) or {}
                record["error"] = (response.get("Error") or {}).get("Code") or type(error).__name__
            else:
                record["served"] = result.served_tier
                if result.first_token_ms is not None:
                    record["ttft_s"] = round(started - arrived + result.first_token_ms / 1000 * time_scale, 4)
                record["e2e_s"] = round(now() - arrived, 4)
            records[index] = record

        with ThreadPoolExecutor(max_workers=len(plan), thread_name_prefix=scenario) as pool:
            futures = []
            for index, (arrived, _) in enumerate(plan):
                wait = arrived - now()
                if wait > 0:
                    time.sleep(wait / time_scale)
                futures.append(pool.submit(one, index))
            for future in futures:
                future.result()
        served = {i.served_tier for i in bedrock.invocations if i.outcome == "ok"}
        wrong = [r for r in records if "served" in r and r["served"] != r["asked"]]
        if wrong:  # the emulator echoes the tier it served; a mismatch would be a bug of the benchmark
            raise RuntimeError(f"{len(wrong)} calls served at another tier than asked ({served})")
    return records


def summary(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per class: answered and refused counts, TTFT and e2e p50/p90/p99; and how late the client
    itself started the calls after their arrival (its threads on a shared machine), all classes."""
    lags = [r["start_lag_s"] for r in records]
    out: dict[str, dict[str, Any]] = {"client": {"start_lag_s_p50": percentile(lags, 50), "start_lag_s_p99": percentile(lags, 99)}}
    for klass in TIERS:
        mine = [r for r in records if r["class"] == klass]
        answered = [r for r in mine if "error" not in r]
        figures: dict[str, Any] = {"requests": len(mine), "answered": len(answered),
                                   "refused": len(mine) - len(answered),
                                   "errors": sorted({r["error"] for r in mine if "error" in r})}
        for metric in ("ttft_s", "e2e_s"):
            values = [r[metric] for r in answered if metric in r]
            for q in (50, 90, 99):
                value = percentile(values, q)
                figures[f"{metric}_p{q}"] = None if value is None else round(value, 3)
        out[klass] = figures
    return out


METRICS = ("ttft_s_p50", "ttft_s_p90", "ttft_s_p99", "e2e_s_p50", "e2e_s_p90", "e2e_s_p99", "refused")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="trials per load (seeds 0..N-1); at least 3")
    parser.add_argument("--loads", default="1,2", help="comma-separated arrival rates as multiples of capacity")
    parser.add_argument("--requests", type=int, default=150, help="arrivals per run")
    parser.add_argument("--slots", type=int, default=4, help="calls the model serves at once")
    parser.add_argument("--max-queue-seconds", type=float, default=60.0, help="model seconds a call may wait")
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "service_tier_experiment.json")
    args = parser.parse_args(argv)
    if args.seeds < 3:
        parser.error("--seeds must be at least 3: the spread needs several trials")
    loads = [float(x) for x in args.loads.split(",") if x.strip()]
    if not loads or any(load <= 0 for load in loads):
        parser.error("--loads must be numbers > 0, e.g. 1,2")
    prompts = load_prompts(args.prompts)
    call_seconds = mean_call_seconds(prompts)
    capacity = args.slots * 60 / call_seconds
    began, load_before = time.perf_counter(), os.getloadavg()
    report: dict[str, Any] = {
        "experiment": "service tiers under contention for serving slots (issue 37.6)",
        "assumption": ("emulator: waiting calls are served priority first, flex last "
                       "(genai_pacer.testing.slots.ASSUMED_TIER_ORDER); every tier at the same speed once served; "
                       "a call that waited max_queue_seconds is refused with ThrottlingException"),
        "settings": {"model_id": MODEL_ID, "burndown": 1, "slots": args.slots, "max_queue_seconds": args.max_queue_seconds,
                     "time_scale": args.time_scale, "requests": args.requests, "seeds": list(range(args.seeds)),
                     "max_tokens": MAX_TOKENS, "streaming": True, "client_retries": 0,
                     "prompts": str(args.prompts.relative_to(ROOT) if args.prompts.is_relative_to(ROOT) else args.prompts),
                     "mean_call_model_seconds": round(call_seconds, 3),
                     "capacity_calls_per_minute": round(capacity, 2)},
        "units": "model seconds from arrival; refused: calls throttled after the queue limit, per run",
        "loads": {},
    }
    for load in loads:
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SCENARIOS}
        for seed in range(args.seeds):
            plan = arrivals(seed, args.requests, load * capacity)
            for scenario in SCENARIOS:
                figures = summary(run(scenario, plan, prompts, seed=seed, slots=args.slots,
                                      max_queue_seconds=args.max_queue_seconds, time_scale=args.time_scale))
                runs[scenario].append(figures)
                print(f"load {load:g}x seed {seed} {scenario}: " + "; ".join(
                    f"{k} ttft p50 {figures[k]['ttft_s_p50']} p99 {figures[k]['ttft_s_p99']} e2e p99 {figures[k]['e2e_s_p99']} "
                    f"refused {figures[k]['refused']}" for k in TIERS) + f"; client start lag p99 {figures['client']['start_lag_s_p99']}",
                    flush=True)
        entry: dict[str, Any] = {"arrivals_per_minute": round(load * capacity, 2), "runs": runs, "spread": {}, "tiered_minus_untiered": {}}
        for scenario in SCENARIOS:
            entry["spread"][scenario] = {klass: {m: spread([r[klass][m] for r in runs[scenario]]) for m in METRICS}
                                         for klass in TIERS}
        entry["tiered_minus_untiered"] = {
            klass: {m: compare([r[klass][m] for r in runs["untiered"]], [r[klass][m] for r in runs["tiered"]])
                    for m in METRICS}
            for klass in TIERS}
        entry["client_start_lag_s_p99"] = spread([r["client"]["start_lag_s_p99"] for s in SCENARIOS for r in runs[s]])
        report["loads"][f"{load:g}x"] = entry
    report["machine"] = machine_report(began, load_before)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out} in {report['machine']['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
