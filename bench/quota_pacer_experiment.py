"""QuotaPacer against botocore's retry modes and a fixed concurrency cap, on the emulator, under each
quota model it offers.

Each trial replays the same Poisson arrivals (same seed, same prompts, the planned max_tokens for
everyone) through four strategies, each against a fresh emulator:

- botocore-standard: a thread per request, botocore's standard retry mode (3 attempts).
- botocore-adaptive: a thread per request, botocore's adaptive mode (client-side rate limiting
  after throttles).
- bounded: BoundedCalls with the planned cap (planning.sustainable_rate(...).max_concurrency),
  full-jitter retries.
- quota-pacer: QuotaPacer sized to the quota (tpm, burndown), inside BoundedCalls with room for
  every waiting call, the client's own retries off (each retry is admitted again).

Loads are multiples of the rate the planner says the quota sustains: 0.5x and 1x (does the pacer
slow a workload the quota can carry?), 2x without a deadline (how much of the quota turns into
answers, with how many throttles and failures), and 2x with a deadline for the pacer (calls that
cannot start in time are shed at admission and counted apart from failures). Every scenario runs
under each quota model the emulator offers (window sliding, clock-minute, token-bucket; max_tokens
reserved with or without the burndown), because Bedrock's algorithm is not public, and over
several seeds, reported as mean and spread.

Time scaling: the emulator runs time_scale times faster than model time. The pacer's window, the
backoff of BoundedCalls and botocore's retry sleeps are scaled to match; botocore's adaptive rate
limiter keeps wall-clock time internally (its recovery after a throttle is time_scale times slower
in model time than it would be against Bedrock). Latencies are reported in model seconds.

Run (about 90 s of wall time per quota model and seed at time_scale 20, 45 minutes for six quota
models and five seeds; --quota-models and --scenarios run a part):
    .venv/bin/python bench/quota_pacer_experiment.py --seeds 5 --time-scale 20

Reading settled_pct_second_minute: it counts the tokens settled by requests that started in the
second model minute, once the first window is full. The pacer admits in waves there (the first
minute's charges expire together), so it reads higher than a long saturated run would: in steady
state the pacer holds max_tokens x burndown while a call runs and keeps each charge for
expiry_margin_seconds past the window, which costs about (calls in flight x (hold - settlement)) /
tpm plus margin / window of the quota (about 3.5% + 1.6% for this workload at time_scale 20).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "constructs"), str(ROOT / "lambda")]

from genai_pacer.testing.bench import (  # noqa: E402
    SAMPLE_PROMPTS,
    Prompt,
    converse_request,
    error_code,
    load_prompts,
    percentiles,
)
from genai_pacer.testing.emulator import BedrockEmulator, ModelSpec  # noqa: E402
from genai_pacer.testing.experiments import EXPERIMENT_MODEL, quota_plan  # noqa: E402
from genai_pacer.testing.quota import QUOTA_WINDOWS, QuotaModel  # noqa: E402
from pacer_runtime.quota_pacer import AdmissionRejected, QuotaPacer  # noqa: E402
from pacer_runtime.side_by_side import Backoff, BoundedCalls  # noqa: E402

STRATEGIES = ("botocore-standard", "botocore-adaptive", "bounded", "quota-pacer")
#: Wall seconds a charge is kept past the window: the time a request takes to reach the emulator.
EXPIRY_MARGIN_WALL_SECONDS = 0.05
#: Threads BoundedCalls gives the pacer: enough for every call waiting for admission at 2x load.
PACER_THREADS = 400


# --- quota models ------------------------------------------------------------------------------------


def quota_models() -> tuple[list[tuple[str, Any]], str]:
    """The emulator's quota models as (name, QuotaModel): each window, with and without burndown on
    the reservation of max_tokens (Bedrock's algorithm is not public)."""
    models = [
        (f"{window}{'+burndown-reservation' if burndown else ''}",
         QuotaModel(window=window, reserve_output_with_burndown=burndown))
        for window in QUOTA_WINDOWS
        for burndown in (False, True)
    ]
    return models, "BedrockEmulator(quota=QuotaModel(...))"


def start_emulator(spec: ModelSpec, quota: Any, seed: int, time_scale: float) -> BedrockEmulator:
    return BedrockEmulator([spec], seed=seed, time_scale=time_scale, quota=quota)


# --- strategies --------------------------------------------------------------------------------------


@contextmanager
def scaled_botocore_sleep(time_scale: float) -> Iterator[None]:
    """botocore sleeps between retries with botocore.endpoint's time.sleep: scale it to the emulator's time."""
    import botocore.endpoint as endpoint

    real = endpoint.time

    class Scaled:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            real.sleep(seconds / time_scale)

    endpoint.time = Scaled()
    try:
        yield
    finally:
        endpoint.time = real


def replay(arrivals: Sequence[float], time_scale: float, submit: Callable[[int, float], None]) -> None:
    """Call submit(index, wall arrival time) at each arrival (model seconds from now)."""
    zero = time.perf_counter()
    for index, due in enumerate(arrivals):
        wait = due / time_scale - (time.perf_counter() - zero)
        if wait > 0:
            time.sleep(wait)
        submit(index, time.perf_counter())


def thread_per_request(client: Any, requests: Sequence[dict[str, Any]], arrivals: Sequence[float],
                       time_scale: float) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in requests]
    threads = []

    def one(index: int, arrived: float) -> None:
        try:
            client.converse(**requests[index])
            error = None
        except Exception as failure:  # counted as a failed request
            error = error_code(failure)
        results[index] = {"error": error, "shed": False, "seconds": time.perf_counter() - arrived}

    def submit(index: int, arrived: float) -> None:
        thread = threading.Thread(target=one, args=(index, arrived), daemon=True)
        thread.start()
        threads.append(thread)

    replay(arrivals, time_scale, submit)
    for thread in threads:
        thread.join()
    return results


def pooled(call: Callable[[int, float], Any], requests: Sequence[dict[str, Any]], arrivals: Sequence[float],
           time_scale: float, threads: int) -> list[dict[str, Any]]:
    """BoundedCalls with `threads` workers, full-jitter retries scaled to model time."""
    results: list[dict[str, Any]] = [{} for _ in requests]
    backoff = Backoff(base_seconds=1 / time_scale, cap_seconds=20 / time_scale, max_attempts=8)

    def finish(index: int, arrived: float, future: Future) -> None:
        outcome = future.result()
        shed = isinstance(outcome.error, AdmissionRejected)
        results[index] = {"error": None if outcome.ok or shed else error_code(outcome.error), "shed": shed,
                          "seconds": time.perf_counter() - arrived}

    with BoundedCalls(threads, backoff=backoff) as pool:
        def submit(index: int, arrived: float) -> None:
            future = pool.submit(lambda: call(index, arrived))
            future.add_done_callback(lambda done: finish(index, arrived, done))

        replay(arrivals, time_scale, submit)
    return results


def run_strategy(name: str, emulator: BedrockEmulator, spec: ModelSpec, plan: dict[str, Any],
                 requests: Sequence[dict[str, Any]], arrivals: Sequence[float], time_scale: float,
                 admission_wait: float | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One strategy's per-request results, and what it was configured with."""
    cap = plan["max_concurrency"]
    if name in ("botocore-standard", "botocore-adaptive"):
        mode = name.split("-")[1]
        client = emulator.client(max_pool_connections=512, retries={"mode": mode})
        return thread_per_request(client, requests, arrivals, time_scale), {"retries": mode}
    if name == "bounded":
        client = emulator.client(max_pool_connections=cap, retries={"total_max_attempts": 1})
        return pooled(lambda i, _: client.converse(**requests[i]), requests, arrivals, time_scale, cap), {"max_in_flight": cap}
    pacer = QuotaPacer(spec.tpm_quota, burndown=spec.burndown, window_seconds=60 / time_scale,
                       expiry_margin_seconds=EXPIRY_MARGIN_WALL_SECONDS, poll_seconds=0.25 / time_scale,
                       clock=time.perf_counter)  # the clock arrivals are stamped with
    client = emulator.client(max_pool_connections=64, retries={"total_max_attempts": 1})

    def paced(index: int, arrived: float) -> Any:
        start_by = None if admission_wait is None else arrived + admission_wait / time_scale
        return pacer.converse(client, requests[index], start_by=start_by)

    results = pooled(paced, requests, arrivals, time_scale, PACER_THREADS)
    stats = pacer.stats()
    return results, {"threads": PACER_THREADS, "admission_wait_s": admission_wait, "limit_tpm_at_end": stats.limit_tpm,
                     "decreases": stats.decreases, "rejected_at_once": stats.rejected_at_once,
                     "rejected_late": stats.rejected_late}


def measure(emulator: BedrockEmulator, results: Sequence[dict[str, Any]], wall: float, time_scale: float,
            spec: ModelSpec, deadline: float) -> dict[str, Any]:
    """A run's figures: quota use and throttles from the emulator's ledger, outcomes from the client."""
    invocations = emulator.invocations
    busy_minutes = wall * time_scale / 60
    settled = sum(i.settled for i in invocations)
    # Bedrock's window counts a charge by its request's start: the tokens settled by requests that
    # started in the second minute are that minute's use of the quota once the first window is full.
    zero = min((i.started for i in invocations), default=0.0)
    second_minute = sum(i.settled for i in invocations if 60 <= i.started - zero < 120)
    served = [r for r in results if not r["error"] and not r["shed"]]
    e2e = [r["seconds"] * time_scale for r in served]
    summary = percentiles(e2e)
    row = {
        "requests": len(results),
        "attempts": len(invocations),
        "throttled_attempts": sum(i.outcome == "throttled" for i in invocations),
        "failed_requests": sum(1 for r in results if r["error"]),
        "shed_requests": sum(1 for r in results if r["shed"]),
        "busy_minutes": round(busy_minutes, 3),
        "settled_pct_of_quota": round(100 * settled / busy_minutes / spec.tpm_quota, 2),
        "settled_pct_second_minute": round(100 * second_minute / spec.tpm_quota, 2),
        "e2e_p50_s": summary.p50, "e2e_p90_s": summary.p90, "e2e_p99_s": summary.p99,
    }
    row["answered_within_deadline"] = sum(1 for s in e2e if s <= deadline)  # for comparison in every scenario
    return row


# --- trials and summaries ----------------------------------------------------------------------------


def workload(prompts: Sequence[Prompt], rate_per_minute: float, minutes: float, seed: int) -> tuple[list[float], list[Prompt]]:
    rng = random.Random(seed)
    count = max(1, round(rate_per_minute * minutes))
    arrivals, due = [], 0.0
    for _ in range(count):
        arrivals.append(due)
        due += rng.expovariate(rate_per_minute / 60)
    return arrivals, [prompts[rng.randrange(len(prompts))] for _ in range(count)]


def spread(values: Sequence[float | None]) -> dict[str, float | None]:
    known = [v for v in values if v is not None]
    if not known:
        return {"mean": None, "stdev": None, "min": None, "max": None}
    return {"mean": round(statistics.fmean(known), 3), "stdev": round(statistics.stdev(known), 3) if len(known) > 1 else 0.0,
            "min": round(min(known), 3), "max": round(max(known), 3)}


SCENARIOS = (  # name, load factor, deadline?, strategies
    ("0.5x", 0.5, False, STRATEGIES),
    ("1x", 1.0, False, STRATEGIES),
    ("2x", 2.0, False, STRATEGIES),
    ("2x-deadline", 2.0, True, ("quota-pacer",)),
)


def experiment(prompts: Sequence[Prompt], *, seeds: Sequence[int], time_scale: float, arrival_minutes: float,
               saturated_minutes: float, deadline: float, call_allowance: float, models: Sequence[tuple[str, Any]], scenarios: Sequence[str],
               log: Callable[[str], None]) -> dict[str, Any]:
    spec = EXPERIMENT_MODEL
    plan = quota_plan(prompts, spec)
    admission_wait = deadline - call_allowance
    results: dict[str, Any] = {}
    started = time.perf_counter()
    with scaled_botocore_sleep(time_scale):
        for model_name, quota in models:
            for scenario, load, with_deadline, strategies in SCENARIOS:
                if scenario not in scenarios:
                    continue
                rate = load * plan["sustainable_requests_per_minute"]
                cell = results.setdefault(model_name, {}).setdefault(scenario, {})
                for seed in seeds:
                    minutes = saturated_minutes if load > 1 else arrival_minutes
                    arrivals, chosen = workload(prompts, rate, minutes, seed)
                    requests = [converse_request(p, spec.model_id, max_tokens=plan["max_tokens"]) for p in chosen]
                    for name in strategies:
                        with start_emulator(spec, quota, seed, time_scale) as emulator:
                            began = time.perf_counter()
                            rows, config = run_strategy(name, emulator, spec, plan, requests, arrivals, time_scale,
                                                        admission_wait if with_deadline else None)
                            wall = time.perf_counter() - began
                            row = {"seed": seed, **measure(emulator, rows, wall, time_scale, spec, deadline), **config}
                        cell.setdefault(name, {"runs": []})["runs"].append(row)
                        log(f"[{time.perf_counter() - started:6.0f}s] {model_name} {scenario} seed {seed} {name}: "
                            f"{row['settled_pct_of_quota']}% settled, {row['throttled_attempts']} throttled, "
                            f"{row['failed_requests']} failed, {row['shed_requests']} shed, p50 {row['e2e_p50_s']} "
                            f"p99 {row['e2e_p99_s']} s")
                for data in cell.values():
                    metrics = [k for k, v in data["runs"][0].items() if isinstance(v, int | float) and k != "seed"]
                    data["summary"] = {k: spread([run.get(k) for run in data["runs"]]) for k in metrics}
    return {"plan": plan, "admission_wait_s": admission_wait, "results": results,
            "wall_seconds": round(time.perf_counter() - started, 1)}


def claims(results: dict[str, Any], deadline: float) -> list[dict[str, Any]]:
    """The issue's claims, checked per quota model against every seed's run."""
    checked = []
    for model, scenarios in results.items():
        pacer_2x = scenarios.get("2x", {}).get("quota-pacer")
        if pacer_2x:
            runs = pacer_2x["runs"]
            checked.append({
                "quota_model": model,
                "claim": "2x load, no deadline: QuotaPacer settles >= 95% of the quota (in the second minute, once the "
                         "window is full), zero failed requests, zero throttled attempts",
                "measured": {k: [r[k] for r in runs] for k in ("settled_pct_second_minute", "settled_pct_of_quota",
                                                                "failed_requests", "throttled_attempts")},
                "holds": all(r["settled_pct_second_minute"] >= 95 and r["failed_requests"] == 0
                             and r["throttled_attempts"] == 0 for r in runs),
            })
        deadline_runs = scenarios.get("2x-deadline", {}).get("quota-pacer")
        if deadline_runs:
            runs = deadline_runs["runs"]
            checked.append({
                "quota_model": model,
                "claim": f"2x load, {deadline:g} s deadline: every admitted request's p99 from arrival is within the deadline; shed counted apart",
                "measured": {k: [r[k] for r in runs] for k in ("e2e_p99_s", "shed_requests", "failed_requests", "requests")},
                "holds": all(r["e2e_p99_s"] is not None and r["e2e_p99_s"] <= deadline and r["failed_requests"] == 0
                             for r in runs),
            })
        for scenario in ("0.5x", "1x"):
            cell = scenarios.get(scenario, {})
            if "quota-pacer" in cell and "botocore-standard" in cell:
                pairs = [(p["e2e_p50_s"], u["e2e_p50_s"]) for p, u in zip(cell["quota-pacer"]["runs"],
                                                                           cell["botocore-standard"]["runs"], strict=True)]
                checked.append({
                    "quota_model": model,
                    "claim": f"{scenario} load: the pacer's p50 is within 5% of unbounded (botocore-standard, a thread per request)",
                    "measured": {"pacer_p50_s": [p for p, _ in pairs], "unbounded_p50_s": [u for _, u in pairs],
                                 "ratio": [round(p / u, 4) if p and u else None for p, u in pairs]},
                    "holds": all(p is not None and u is not None and p <= 1.05 * u for p, u in pairs),
                })
    return checked


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--prompts", default=str(SAMPLE_PROMPTS))
    parser.add_argument("--seeds", type=int, default=5, help="trials per scenario, seeds 0..N-1 (default 5)")
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--arrival-minutes", type=float, default=1.0, help="model minutes of arrivals at 0.5x and 1x")
    parser.add_argument("--saturated-minutes", type=float, default=2.0,
                        help="model minutes of arrivals at 2x: two, so the second minute runs with a full window")
    parser.add_argument("--deadline", type=float, default=30.0, help="model seconds from arrival to answer (2x-deadline)")
    parser.add_argument("--call-allowance", type=float, default=8.0,
                        help="model seconds of the deadline kept for the call itself (about 2x the planned call)")
    parser.add_argument("--scenarios", default=",".join(s[0] for s in SCENARIOS))
    parser.add_argument("--quota-models", default="all", help="comma-separated names, or all")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "quota_pacer_experiment.json"))
    args = parser.parse_args(argv)
    models, how = quota_models()
    if args.quota_models != "all":
        wanted = set(args.quota_models.split(","))
        models = [m for m in models if m[0] in wanted]
    scenarios = args.scenarios.split(",")
    log = lambda line: print(line, flush=True)  # noqa: E731
    log(f"quota models ({how}): {', '.join(name for name, _ in models)}")
    load_before = _load()
    result = experiment(load_prompts(args.prompts), seeds=range(args.seeds), time_scale=args.time_scale,
                        arrival_minutes=args.arrival_minutes, saturated_minutes=args.saturated_minutes, deadline=args.deadline, call_allowance=args.call_allowance,
                        models=models, scenarios=scenarios, log=log)
    spec = EXPERIMENT_MODEL
    report = {
        "experiment": "quota_pacer",
        "description": (__doc__ or "").split("\n\n")[0],
        "conditions": {
            "time_scale": args.time_scale, "arrival_minutes": args.arrival_minutes,
            "saturated_minutes": args.saturated_minutes, "seeds": list(range(args.seeds)),
            "deadline_s": args.deadline, "call_allowance_s": args.call_allowance,
            "pacer_expiry_margin_wall_s": EXPIRY_MARGIN_WALL_SECONDS, "quota_models_passed_as": how,
            "machine": f"{platform.machine()}, {_cpus()} CPUs shared with other work; load average "
                       f"{load_before} before, {_load()} after",
            "model": {k: v for k, v in dataclasses.asdict(spec).items() if isinstance(v, int | float | str)},
        },
        **result,
    }
    report["claims"] = claims(result["results"], args.deadline)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for claim in report["claims"]:
        log(f"{'HOLDS ' if claim['holds'] else 'FAILS '} {claim['quota_model']}: {claim['claim']}: {claim['measured']}")
    log(f"wrote {out}")
    return 0


def _load() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "unknown"


def _cpus() -> int | str:
    import os

    return os.cpu_count() or "?"


if __name__ == "__main__":
    sys.exit(main())
