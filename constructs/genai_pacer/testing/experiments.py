"""Experiments run against the emulator with real boto3 clients, each repeated over seeded trials.

Single runs move by several points (thread timing on a shared machine), so every experiment runs
`trials` times with seeds seed, seed+1, ... and reports, per metric, the mean, the min-max range and
a 95% t-interval of the mean. Within a trial every variant gets the same seed (the same arrivals,
prompts and emulator jitter), so variants are compared pair-wise by trial. A comparison says
`differs` only when the difference exceeds the spread: the two min-max ranges do not overlap (with
5 trials each, 2 chances in 252 when there is no difference) and the 95% interval of the mean
paired difference excludes 0.

quota_experiment: the same Poisson request stream, at about twice what the quota sustains, sent
four ways. Three strategies at the SAME max_tokens (4,096, a common copy-pasted default): one
thread per request with botocore's standard retries; one thread per request with botocore's
adaptive mode; genai-pacer's BoundedCalls with the cap `planning.sustainable_rate` gives for that
max_tokens and full-jitter retries. A fourth row changes only max_tokens (to what
`planning.size_max_tokens` gives for the prompts' p99 output) with its re-planned cap: the effect of
sizing, on its own. Quota use (settled tokens, throttles) is read from the emulator's totals,
outcomes from the clients; goodput counts requests answered within an end-to-end target measured
from arrival (queue wait included), so a strategy cannot look good by queueing forever.

side_by_side_experiment: independent calls of about equal latency, in sequence and with
run_side_by_side.

pool_experiment: many threads sharing one client with the default pool of 10 connections versus a
pool sized to the threads: connections opened and latency percentiles.

Time scaling: the emulator runs the quota window and model latencies time_scale times faster, but
client-side retry backoff (botocore's and genai-pacer's alike) sleeps in real seconds, so each
backoff spans time_scale times more quota window than it would against Bedrock. All strategies get
the same distortion; run with time_scale=1 for unscaled figures.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .._internal.checks import Checks
from .._internal.runtime_constants import replay_module
from ..quota import planning
from .bench import Prompt, converse_request, error_code, expected_output_tokens, percentiles
from .emulator import BedrockEmulator, ModelSpec, approx_tokens

__all__ = [
    "EXPERIMENT_MODEL",
    "NAIVE_MAX_TOKENS",
    "QuotaStrategy",
    "RUNS_DIFFERENCE_RULE",
    "compare",
    "compare_runs",
    "pool_experiment",
    "quota_experiment",
    "quota_plan",
    "quota_strategies",
    "side_by_side_experiment",
    "spread",
    "strategy_requests",
    "summary_markdown",
    "write_summary",
]

EXPERIMENT_MODEL = ModelSpec(
    "us.anthropic.claude-3-5-haiku-20241022-v1:0",
    tpm_quota=300_000,
    burndown=5,
    max_output_tokens=8_192,
    ttft_seconds=0.5,
    prefill_tokens_per_second=8_000,
    output_tokens_per_second=60,
    jitter=0.1,
)
NAIVE_MAX_TOKENS = 4_096  # a common copy-pasted default, far above what these prompts produce
DEFAULT_TRIALS = 5
#: Goodput's end-to-end target, model seconds from arrival: a 363-token answer (the prompts' p99)
#: takes about 7 s on EXPERIMENT_MODEL, so 10 s leaves room for a short wait or one quick retry.
DEFAULT_E2E_TARGET_SECONDS = 10.0

DIFFERENCE_RULE = ("differs: the two variants' min-max ranges over the trials do not overlap and the 95% "
                   "t-interval of the mean paired (same-seed) difference excludes 0")

# Two-sided 95% quantiles of Student's t by degrees of freedom; beyond the table, the next smaller
# listed df (conservative), and 1.96 from 120 on.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
         18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


# ---- repeated trials: spread and comparisons ------------------------------------------------------

def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t with df degrees of freedom (a 95% two-sided interval)."""
    if df < 1:
        raise ValueError(f"t_quantile: df={df!r} must be >= 1 (an interval needs at least 2 trials)")
    if df > 120:
        return 1.96
    return _T975[max(k for k in _T975 if k <= df)]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean, min, max and the 95% t-interval of the mean over trials.

    None (a percentile of a trial with no successful request) is left out and n says how many
    trials count; the interval needs two.
    """
    present = [float(v) for v in values if v is not None]
    n = len(present)
    result: dict[str, Any] = {"n": n, "mean": None, "min": None, "max": None, "ci95": None,
                              "values": [_round(v) for v in values]}
    if not present:
        return result
    mean = statistics.fmean(present)
    result.update(mean=_round(mean), min=_round(min(present)), max=_round(max(present)))
    if n >= 2:
        half = t_quantile(n - 1) * statistics.stdev(present) / math.sqrt(n)
        result["ci95"] = [_round(mean - half), _round(mean + half)]
    return result


def compare(a: Sequence[float | None], b: Sequence[float | None]) -> dict[str, Any]:
    """b minus a over paired trials (same index = same seed); see DIFFERENCE_RULE for `differs`.

    A trial where either value is None is left out of the pairs and the ranges.
    """
    if len(a) != len(b):
        raise ValueError(f"compare: {len(a)} trials against {len(b)}; pair the same trials (one value per seed)")
    pairs = [(float(x), float(y)) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    diffs = [y - x for x, y in pairs]
    n = len(diffs)
    result: dict[str, Any] = {"n": n, "mean_difference": _round(statistics.fmean(diffs)) if diffs else None,
                              "ci95": None, "ranges_overlap": None, "differs": False}
    if n < 2:
        return result
    mean = statistics.fmean(diffs)
    half = t_quantile(n - 1) * statistics.stdev(diffs) / math.sqrt(n)
    low, high = mean - half, mean + half
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    overlap = max(xs) >= min(ys) and max(ys) >= min(xs)
    result.update(ci95=[_round(low), _round(high)], ranges_overlap=overlap,
                  differs=not overlap and (low > 0 or high < 0))
    return result


#: Runs against real Bedrock have no seed, so a run before a change and one after it are not paired: a
#: difference is stated only where the two sides' spreads are apart (DIFFERENCE_RULE's first half).
RUNS_DIFFERENCE_RULE = ("differs: at least two runs a side, and the two sides' min-max ranges over the runs do not "
                        "overlap (runs against Bedrock have no seed, so they are not paired)")
#: The summary figures compare_runs compares by default (paths into a report's summary).
RUN_METRICS = ("ttft_s.p50", "ttft_s.p90", "ttft_s.p99", "otps.p50", "otps.p90", "otps.p99", "e2e_s.p50",
               "e2e_s.p90", "e2e_s.p99", "goodput.fraction", "throttles", "failed")


def compare_runs(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]],
                 metrics: Sequence[str] = RUN_METRICS) -> dict[str, Any]:
    """Compare benchmark runs before and after a change (each a report's summary: bench.summarize's, a
    local run's <name>.json "summary" or a deployed run's): per metric, each side's spread (mean, min,
    max) and the difference of the means (after minus before), `differs` by RUNS_DIFFERENCE_RULE. Fewer
    than two runs on a side is refused: one run's figure has no spread to beat."""
    for side, runs in (("before", before), ("after", after)):
        if len(runs) < 2:
            raise ValueError(f"compare_runs: {len(runs)} run(s) {side} the change; a difference is stated only "
                             "beyond the spread, which takes at least two runs a side")
    compared: dict[str, Any] = {}
    for metric in metrics:
        a = [_at(summary, metric) for summary in before]
        b = [_at(summary, metric) for summary in after]
        xs, ys = [float(v) for v in a if v is not None], [float(v) for v in b if v is not None]
        row: dict[str, Any] = {"before": spread(a), "after": spread(b), "difference": None, "ranges_overlap": None,
                               "differs": False}
        if len(xs) >= 2 and len(ys) >= 2:
            overlap = max(xs) >= min(ys) and max(ys) >= min(xs)
            row.update(difference=_round(statistics.fmean(ys) - statistics.fmean(xs)), ranges_overlap=overlap,
                       differs=not overlap)
        compared[metric] = row
    return {"rule": RUNS_DIFFERENCE_RULE, "runs": {"before": len(before), "after": len(after)}, "metrics": compared}


def _at(summary: Mapping[str, Any], path: str) -> float | None:
    value: Any = summary
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _aggregate(trials: Sequence[Mapping[str, Mapping[str, Any]]], variant: str, metrics: Sequence[str]) -> dict[str, Any]:
    """One variant's spread per metric over the trials."""
    return {metric: spread([trial[variant][metric] for trial in trials]) for metric in metrics}


def _comparisons(trials: Sequence[Mapping[str, Mapping[str, Any]]], pairs: Sequence[tuple[str, str, str]],
                 metrics: Sequence[str]) -> list[dict[str, Any]]:
    """b against a for each (a, b, what the comparison isolates) and metric."""
    rows = []
    for a, b, isolates in pairs:
        for metric in metrics:
            row = {"a": a, "b": b, "isolates": isolates, "metric": metric}
            row.update(compare([t[a][metric] for t in trials], [t[b][metric] for t in trials]))
            rows.append(row)
    return rows


def _trial_settings(check: Checks, trials: Any) -> None:
    check.integer("trials", trials, minimum=2, maximum=1_000,
                  fix="a spread needs at least 2 trials; 5 or more give one worth reading")


def _machine() -> dict[str, Any]:
    """Where the figures were measured: they depend on the machine and on what else it ran."""
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {"cpus": os.cpu_count(), "load_average_1_5_15_min_at_start": load}


def machine_report(began: float, load_before: Sequence[float]) -> dict[str, Any]:
    """A bench script's `machine` entry: its wall time since `began` (time.perf_counter()) and the load
    average before and after, since figures measured beside other work differ."""
    return {"wall_seconds": round(time.perf_counter() - began, 1), "cpus": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version()}


def _cell(s: Mapping[str, Any], fmt: str = "{:.1f}", unit: str = "") -> str:
    """mean (min-max) as a table shows it."""
    if s["mean"] is None:
        return "n/a"
    text = f"{fmt.format(s['mean'])}{unit} ({fmt.format(s['min'])}–{fmt.format(s['max'])})"
    return text if s["n"] == len(s["values"]) else f"{text}, {s['n']} of {len(s['values'])} trials"


# ---- the quota experiment -----------------------------------------------------------------------

def quota_plan(prompts: Sequence[Prompt], spec: ModelSpec, *, max_tokens: int | None = None) -> dict[str, Any]:
    """What genai_pacer.planning says for this workload on this model: max_tokens, rate, cap.

    max_tokens: plan for this max_tokens instead of the one size_max_tokens gives for the prompts'
    p99 output (the reservation, hence the rate and the cap, depend on it).
    """
    inputs = [approx_tokens(p.input_text) for p in prompts]
    outputs = expected_output_tokens(list(prompts), "the quota plan")  # a PromptError naming the line without one
    p99 = percentiles(outputs).p99
    if p99 is None:
        raise ValueError("quota_plan needs at least one prompt")
    sizing = planning.size_max_tokens(math.ceil(p99))
    planned = sizing.max_tokens if max_tokens is None else max_tokens
    mean_in, mean_out = statistics.fmean(inputs), statistics.fmean(outputs)
    call_seconds = spec.ttft_seconds + mean_in / spec.prefill_tokens_per_second + mean_out / spec.output_tokens_per_second
    profile = planning.TokenProfile(
        input_tokens=round(mean_in), output_tokens=round(mean_out), max_tokens=planned, burndown=spec.burndown
    )
    rate = planning.sustainable_rate(profile, tpm_quota=spec.tpm_quota, call_seconds=call_seconds)
    return {
        "mean_input_tokens": round(mean_in, 1),
        "mean_output_tokens": round(mean_out, 1),
        "p99_output_tokens": sizing.p99_output_tokens,
        "max_tokens": planned,
        "call_seconds": round(call_seconds, 3),
        "settled_per_request": profile.settled,
        "reserved_per_request": profile.reserved,
        "sustainable_requests_per_minute": round(rate.requests_per_minute, 1),
        "max_concurrency": rate.max_concurrency,
    }


@dataclass(frozen=True)
class QuotaStrategy:
    """One row of the quota experiment: how requests are sent and with which max_tokens.

    max_in_flight None sends each request on its own thread as it arrives; a number queues arrivals
    for that many BoundedCalls slots. sizing_of names the row this one repeats with only max_tokens
    (and the cap planned for it) changed.
    """

    name: str
    description: str
    max_tokens: int
    client_config: Mapping[str, Any] = field(default_factory=dict)
    max_in_flight: int | None = None
    sizing_of: str | None = None


def quota_strategies(sized_plan: Mapping[str, Any], shared_plan: Mapping[str, Any]) -> list[QuotaStrategy]:
    """The experiment's rows: three strategies at the shared max_tokens, then the sizing row.

    sized_plan and shared_plan are quota_plan's answers for the sized and the shared max_tokens.
    """
    shared, cap = shared_plan["max_tokens"], shared_plan["max_concurrency"]
    sized, sized_cap = sized_plan["max_tokens"], sized_plan["max_concurrency"]
    return [
        QuotaStrategy("unbounded", "a thread per request, botocore standard retries (3 attempts)", shared,
                      {"max_pool_connections": 256}),
        QuotaStrategy("adaptive", "a thread per request, botocore adaptive retry mode", shared,
                      {"max_pool_connections": 256, "retries": {"mode": "adaptive"}}),
        QuotaStrategy("genai-pacer", f"BoundedCalls({cap}) (the cap planned for max_tokens {shared:,}), full-jitter retries",
                      shared, {"max_pool_connections": cap, "retries": {"total_max_attempts": 1}}, max_in_flight=cap),
        QuotaStrategy("genai-pacer-sized", f"the same with max_tokens sized to the p99 output ({sized:,}) "
                      f"and its planned cap, BoundedCalls({sized_cap})", sized,
                      {"max_pool_connections": sized_cap, "retries": {"total_max_attempts": 1}},
                      max_in_flight=sized_cap, sizing_of="genai-pacer"),
    ]


def strategy_requests(strategy: QuotaStrategy, workload: Sequence[Prompt], model_id: str) -> list[dict[str, Any]]:
    """The Converse requests a strategy sends: the trial's prompts with the strategy's max_tokens."""
    return [converse_request(prompt, model_id, max_tokens=strategy.max_tokens) for prompt in workload]


def _replay(arrivals: Sequence[float], time_scale: float, submit: Callable[[int], None]) -> None:
    """Call submit(i) at each arrival time (model seconds from now)."""
    zero = time.perf_counter()
    for index, due in enumerate(arrivals):
        wait = due / time_scale - (time.perf_counter() - zero)
        if wait > 0:
            time.sleep(wait)
        submit(index)


def _thread_per_request(client: Any, requests: Sequence[dict[str, Any]], arrivals: Sequence[float],
                        time_scale: float) -> list[dict[str, Any]]:
    """Unbounded fan-out: every request gets its own thread the moment it arrives."""
    results: list[dict[str, Any]] = [{} for _ in requests]
    threads = []

    def one(index: int) -> None:
        arrived = time.perf_counter()
        try:
            client.converse(**requests[index])
            error = None
        except Exception as failure:  # counted as a failed request
            error = error_code(failure)
        seconds = time.perf_counter() - arrived
        results[index] = {"error": error, "seconds": seconds, "call_seconds": seconds}  # no queue: the same

    def submit(index: int) -> None:
        thread = threading.Thread(target=one, args=(index,), daemon=True)
        thread.start()
        threads.append(thread)

    _replay(arrivals, time_scale, submit)
    for thread in threads:
        thread.join()
    return results


def _bounded(client: Any, requests: Sequence[dict[str, Any]], arrivals: Sequence[float],
             time_scale: float, max_in_flight: int) -> list[dict[str, Any]]:
    """genai-pacer's way: the runtime's BoundedCalls; arrivals wait for a slot, throttles back off."""
    from genai_pacer.runtime import Backoff, BoundedCalls

    results: list[dict[str, Any]] = [{} for _ in requests]

    def finish(index: int, arrived: float, future: Future) -> None:
        outcome = future.result()
        results[index] = {"error": None if outcome.ok else error_code(outcome.error),
                          "seconds": time.perf_counter() - arrived, "call_seconds": outcome.seconds}

    with BoundedCalls(max_in_flight, backoff=Backoff(base_seconds=1, cap_seconds=20, max_attempts=8)) as pool:
        def submit(index: int) -> None:
            arrived = time.perf_counter()
            future = pool.submit(lambda: client.converse(**requests[index]))
            future.add_done_callback(lambda done: finish(index, arrived, done))

        _replay(arrivals, time_scale, submit)
    return results


QUOTA_METRICS = ("settled_pct_of_quota", "throttled_pct_of_attempts", "failed_requests", "goodput_pct",
                 "e2e_p50_s", "e2e_p99_s", "busy_minutes", "attempts", "goodput", "settled_tpm", "mean_call_s")


def _quota_row(totals: Any, results: Sequence[Mapping[str, Any]], wall_seconds: float, time_scale: float,
               spec: ModelSpec, e2e_target: float) -> dict[str, Any]:
    """One strategy's figures in one trial: quota use from the emulator's totals (every request,
    not the capped history), outcomes and latency from arrival from the client."""
    busy_minutes = wall_seconds * time_scale / 60
    ok = [r for r in results if not r["error"]]
    e2e = [r["seconds"] * time_scale for r in ok]
    summary = percentiles(e2e)
    goodput = sum(seconds <= e2e_target for seconds in e2e)
    attempts = totals.requests
    return {
        "requests": len(results),
        "attempts": attempts,
        "throttled_attempts": totals.throttled,
        "throttled_pct_of_attempts": round(100 * totals.throttled / attempts, 2) if attempts else 0.0,
        "failed_requests": len(results) - len(ok),
        "errors": dict(Counter(r["error"] for r in results if r["error"])),
        "goodput": goodput,
        "goodput_pct": round(100 * goodput / len(results), 2) if results else 0.0,
        "busy_minutes": round(busy_minutes, 3),
        "settled_tpm": round(totals.settled / busy_minutes, 1),
        "settled_pct_of_quota": round(100 * totals.settled / busy_minutes / spec.tpm_quota, 2),
        "e2e_p50_s": summary.p50,
        "e2e_p99_s": summary.p99,
        # From the call's start to its answer (retries included, queue wait excluded), in model seconds:
        # compare with the plan's call_seconds, which counts only the model's own time.
        "mean_call_s": round(statistics.fmean(r["call_seconds"] for r in ok) * time_scale, 3) if ok else None,
        "in_flight_at_end": totals.in_flight,
    }


def _run_strategy(strategy: QuotaStrategy, client: Any, requests: Sequence[dict[str, Any]], arrivals: Sequence[float],
                  time_scale: float) -> tuple[list[dict[str, Any]], float]:
    """Send one strategy's requests at the arrival times; (per-request results, wall seconds)."""
    started = time.perf_counter()
    if strategy.max_in_flight is None:
        results = _thread_per_request(client, requests, arrivals, time_scale)
    else:
        results = _bounded(client, requests, arrivals, time_scale, strategy.max_in_flight)
    return results, time.perf_counter() - started


def _quota_trial(strategies: Sequence[QuotaStrategy], workload: Sequence[Prompt], arrivals: Sequence[float], *,
                 spec: ModelSpec, seed: int, time_scale: float, e2e_target: float, at_once: bool) -> dict[str, Any]:
    """One trial: each strategy on its own emulator (its own quota), the same seed and arrivals."""
    with ExitStack() as stack:
        runs = []
        for strategy in strategies:
            emulator = stack.enter_context(BedrockEmulator([spec], seed=seed, time_scale=time_scale))
            runs.append((strategy, emulator, emulator.client(**strategy.client_config),
                         strategy_requests(strategy, workload, spec.model_id)))
        with ThreadPoolExecutor(max_workers=len(runs) if at_once else 1) as pool:
            futures = [pool.submit(_run_strategy, strategy, client, requests, arrivals, time_scale)
                       for strategy, _, client, requests in runs]
            outcomes = [future.result() for future in futures]  # raises what a run raised
        rows = {}
        for (strategy, emulator, _, _), (results, wall) in zip(runs, outcomes, strict=True):
            rows[strategy.name] = _quota_row(emulator.totals, results, wall, time_scale, spec, e2e_target)
    return rows


def quota_experiment(
    prompts: Sequence[Prompt],
    *,
    spec: ModelSpec = EXPERIMENT_MODEL,
    load_factor: float = 2.0,
    arrival_minutes: float = 1.0,
    time_scale: float = 4.0,
    seed: int = 0,
    trials: int = DEFAULT_TRIALS,
    shared_max_tokens: int = NAIVE_MAX_TOKENS,
    e2e_target_seconds: float = DEFAULT_E2E_TARGET_SECONDS,
    strategies_at_once: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the strategies on the same arrivals in each of `trials` seeded trials; the plan, each
    strategy's spread per metric, the comparisons and every trial's figures.

    Arrivals come at load_factor x the rate the planner says the quota sustains with sized
    max_tokens, for arrival_minutes of model time. settled_pct_of_quota is settled tokens over the
    strategy's busy time (first arrival to last answer) against the TPM quota: the share of the
    quota turned into answers (with arrivals shorter than the one-minute window the window never
    fills, and it can exceed 100%). goodput counts requests answered within e2e_target_seconds of their
    arrival (model seconds). strategies_at_once runs a trial's strategies side by side, each on its
    own emulator and quota, so a trial takes as long as its slowest strategy and a load spike on the
    machine hits all of them alike; False runs them one after another.
    """
    with Checks("quota_experiment") as check:
        _trial_settings(check, trials)
        check.number("load_factor", load_factor, above=0, maximum=100, fix="2 offers twice the sustainable rate")
        check.number("arrival_minutes", arrival_minutes, above=0, maximum=60, fix="model minutes of arrivals, e.g. 1")
        check.number("time_scale", time_scale, above=0, fix="4 runs the model 4x faster than real time")
        check.integer("seed", seed)
        check.integer("shared_max_tokens", shared_max_tokens, minimum=1, maximum=spec.max_output_tokens,
                      fix=f"the max_tokens every strategy shares, e.g. {NAIVE_MAX_TOKENS}")
        check.number("e2e_target_seconds", e2e_target_seconds, above=0,
                     fix=f"model seconds from arrival to answer, e.g. {DEFAULT_E2E_TARGET_SECONDS:g}")
        check.instance("strategies_at_once", strategies_at_once, bool, "True or False")
    began, machine = time.perf_counter(), _machine()
    plan = quota_plan(prompts, spec)
    shared_plan = quota_plan(prompts, spec, max_tokens=shared_max_tokens)
    strategies = quota_strategies(plan, shared_plan)
    offered = load_factor * plan["sustainable_requests_per_minute"]
    count = max(1, round(offered * arrival_minutes))
    seeds = [seed + n for n in range(trials)]
    per_trial = []
    for number, trial_seed in enumerate(seeds, 1):
        rng = random.Random(trial_seed)
        arrivals = replay_module().arrivals(offered / 60, count, rng)  # the bench's and the replay's schedule
        workload = [prompts[rng.randrange(len(prompts))] for _ in range(count)]
        log(f"quota experiment, trial {number}/{trials} (seed {trial_seed}): {count} requests arriving at "
            f"{offered:.0f}/min ({load_factor:g}x sustainable), {len(strategies)} strategies "
            f"{'at once' if strategies_at_once else 'in turn'}")
        rows = _quota_trial(strategies, workload, arrivals, spec=spec, seed=trial_seed, time_scale=time_scale,
                            e2e_target=e2e_target_seconds, at_once=strategies_at_once)
        for name, row in rows.items():
            log(f"  {name}: {row['settled_pct_of_quota']}% of quota settled, {row['throttled_pct_of_attempts']}% of "
                f"attempts throttled, {row['failed_requests']}/{row['requests']} failed, goodput "
                f"{row['goodput']}/{row['requests']}, p99 from arrival {row['e2e_p99_s']} s")
        per_trial.append(rows)
    pairs = [("unbounded", "genai-pacer", f"strategy, both at max_tokens {shared_max_tokens:,}"),
             ("adaptive", "genai-pacer", f"strategy, both at max_tokens {shared_max_tokens:,}"),
             ("unbounded", "adaptive", f"strategy, both at max_tokens {shared_max_tokens:,}"),
             ("genai-pacer", "genai-pacer-sized", f"max_tokens {shared_max_tokens:,} -> {plan['max_tokens']:,}, "
                                                  "the same strategy")]
    result = {
        "experiment": "quota",
        "settings": {
            "trials": trials, "seeds": seeds, "time_scale": time_scale, "arrival_minutes": arrival_minutes,
            "load_factor": load_factor, "shared_max_tokens": shared_max_tokens,
            "e2e_target_s": e2e_target_seconds, "strategies_at_once": strategies_at_once,
            "confidence": 0.95, "difference_rule": DIFFERENCE_RULE,
            "wall_seconds": round(time.perf_counter() - began, 1), "machine": machine,
        },
        "model": spec.model_id, "tpm_quota": spec.tpm_quota, "burndown": spec.burndown,
        "plan": plan, "plan_at_shared_max_tokens": shared_plan,
        "offered_requests_per_minute": round(offered, 1), "requests_per_trial": count,
        "strategies": [
            {"strategy": s.name, "description": s.description, "max_tokens": s.max_tokens,
             "max_in_flight": s.max_in_flight, "client_config": dict(s.client_config), "sizing_of": s.sizing_of,
             "metrics": _aggregate(per_trial, s.name, QUOTA_METRICS)}
            for s in strategies
        ],
        "comparisons": _comparisons(per_trial, pairs, QUOTA_METRICS[:7]),
        "trials": [{"seed": s, "strategies": rows} for s, rows in zip(seeds, per_trial, strict=True)],
    }
    for row in result["strategies"]:
        m = row["metrics"]
        log(f"quota experiment over {trials} trials: {row['strategy']}: settled "
            f"{_cell(m['settled_pct_of_quota'], unit='%')}, goodput {_cell(m['goodput_pct'], unit='%')}, "
            f"p99 {_cell(m['e2e_p99_s'], unit=' s')}")
    return result


# ---- the connection-pool experiment -------------------------------------------------------------

class _PoolFullCounter(logging.Handler):
    """Counts urllib3's "Connection pool is full, discarding connection" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Connection pool is full" in record.getMessage():
            self.count += 1


def _fan_out_rounds(client: Any, model_id: str, threads: int, rounds: int) -> list[float]:
    """threads call together in each round (a barrier), idle in between; latencies in ms."""
    latencies: list[float] = []
    lock, barrier = threading.Lock(), threading.Barrier(threads)

    def work(worker: int) -> None:
        for n in range(rounds):
            barrier.wait()
            began = time.perf_counter()
            client.converse(modelId=model_id, messages=[{"role": "user", "content": [{"text": f"question {worker}-{n}"}]}],
                            inferenceConfig={"maxTokens": 100})
            with lock:
                latencies.append((time.perf_counter() - began) * 1000)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return latencies


POOL_METRICS = ("connections_opened", "pool_full_warnings", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms")


def _pool_run(pool: int, *, threads: int, rounds: int, connection_setup_seconds: float, seed: int) -> dict[str, Any]:
    """One pool size in one trial."""
    spec = ModelSpec("us.amazon.nova-lite-v1:0", ttft_seconds=0.2, output_tokens_per_second=200,
                     answer_tokens=50, jitter=0.1)
    counter = _PoolFullCounter()
    urllib3_log = logging.getLogger("urllib3.connectionpool")
    urllib3_log.addHandler(counter)
    try:
        with BedrockEmulator([spec], seed=seed, connection_setup_seconds=connection_setup_seconds) as emulator:
            latencies = _fan_out_rounds(emulator.client(max_pool_connections=pool), spec.model_id, threads, rounds)
            opened = emulator.connections_opened
    finally:
        urllib3_log.removeHandler(counter)
    summary = percentiles(latencies)
    return {"requests": len(latencies), "connections_opened": opened, "pool_full_warnings": counter.count,
            "latency_p50_ms": summary.p50, "latency_p90_ms": summary.p90, "latency_p99_ms": summary.p99}


def pool_experiment(
    *,
    threads: int = 40,
    rounds: int = 10,
    pools: Sequence[int] = (10, 40),
    connection_setup_seconds: float = 0.05,
    seed: int = 0,
    trials: int = DEFAULT_TRIALS,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """threads share one client and fire together in rounds (a fan-out per incoming event); compare
    pool sizes by connections opened, "pool is full" warnings and latency, over seeded trials.

    Between rounds the threads are idle, so every connection beyond the pool size is discarded and
    reopened in the next round. Each new connection costs connection_setup_seconds in the emulator,
    standing in for a TLS handshake (an assumption: loopback HTTP has no handshake of its own). The
    pool sizes run in turn, in reversed order every other trial, so a slow spell of the machine does
    not always land on the same size.
    """
    with Checks("pool_experiment") as check:
        _trial_settings(check, trials)
        check.integer("threads", threads, minimum=1, maximum=1_000)
        check.integer("rounds", rounds, minimum=1)
        if check.each("pools", pools, lambda name, value: check.integer(name, value, minimum=1)):
            check.rule(len(pools) >= 2, f"pools={list(pools)} needs at least two sizes to compare", id="pools.too-few")
        check.number("connection_setup_seconds", connection_setup_seconds, minimum=0)
        check.integer("seed", seed)
    began, machine = time.perf_counter(), _machine()
    seeds = [seed + n for n in range(trials)]
    per_trial = []
    for number, trial_seed in enumerate(seeds, 1):
        order = list(pools) if number % 2 else list(reversed(pools))
        rows = {}
        for pool in order:
            row = _pool_run(pool, threads=threads, rounds=rounds, connection_setup_seconds=connection_setup_seconds,
                            seed=trial_seed)
            rows[str(pool)] = row
            log(f"pool experiment, trial {number}/{trials} (seed {trial_seed}): pool {pool}, {threads} threads: "
                f"{row['connections_opened']} connections opened, {row['pool_full_warnings']} 'pool is full' "
                f"warnings, p50 {row['latency_p50_ms']:.0f} ms, p99 {row['latency_p99_ms']:.0f} ms")
        per_trial.append(rows)
    first = str(pools[0])
    pairs = [(first, str(pool), f"max_pool_connections {pools[0]} -> {pool}") for pool in pools[1:]]
    return {
        "experiment": "pool",
        "settings": {"trials": trials, "seeds": seeds, "threads": threads, "rounds": rounds,
                     "connection_setup_seconds": connection_setup_seconds, "confidence": 0.95,
                     "difference_rule": DIFFERENCE_RULE, "order": "pool sizes in turn, reversed every other trial",
                     "wall_seconds": round(time.perf_counter() - began, 1), "machine": machine},
        "pools": [{"max_pool_connections": pool, "threads": threads, "requests_per_trial": threads * rounds,
                   "metrics": _aggregate(per_trial, str(pool), POOL_METRICS)} for pool in pools],
        "comparisons": _comparisons(per_trial, pairs, POOL_METRICS),
        "trials": [{"seed": s, "pools": rows} for s, rows in zip(seeds, per_trial, strict=True)],
    }


# ---- the side-by-side experiment ----------------------------------------------------------------

def _side_by_side_trial(*, calls: int, call_seconds: float, jitter: float, time_scale: float, seed: int) -> dict[str, Any]:
    """One trial: the same calls in sequence, then side by side, on one client."""
    from genai_pacer.runtime import converse, run_side_by_side

    answer = 100
    spec = ModelSpec("us.amazon.nova-lite-v1:0", ttft_seconds=call_seconds / 5, jitter=jitter,
                     output_tokens_per_second=answer / (call_seconds * 4 / 5), answer_tokens=answer)
    with BedrockEmulator([spec], seed=seed, time_scale=time_scale) as emulator:
        client = emulator.client(max_pool_connections=calls)
        requests = [{"modelId": spec.model_id, "messages": [{"role": "user", "content": [{"text": f"part {i}"}]}]}
                    for i in range(calls)]
        began = time.perf_counter()
        for request in requests:
            converse(client, request)
        sequential = (time.perf_counter() - began) * time_scale
        began = time.perf_counter()
        outcomes = run_side_by_side([partial(converse, client, r) for r in requests], max_in_flight=calls)
        parallel = (time.perf_counter() - began) * time_scale
    return {"sequential_s": round(sequential, 3), "side_by_side_s": round(parallel, 3),
            "speedup": round(sequential / parallel, 3), "all_ok": all(o.ok for o in outcomes)}


def side_by_side_experiment(*, calls: int = 4, call_seconds: float = 5.0, jitter: float = 0.1, time_scale: float = 5.0,
                            seed: int = 0, trials: int = DEFAULT_TRIALS,
                            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Independent calls of about equal latency (seeded jitter), one after another versus side by
    side on one client, over seeded trials."""
    with Checks("side_by_side_experiment") as check:
        _trial_settings(check, trials)
        check.integer("calls", calls, minimum=2, maximum=100, fix="side by side needs at least 2 calls")
        check.number("call_seconds", call_seconds, above=0)
        check.number("jitter", jitter, minimum=0, maximum=1, fix="0.1 varies each call's latency by about 10%")
        check.number("time_scale", time_scale, above=0)
        check.integer("seed", seed)
    began, machine = time.perf_counter(), _machine()
    seeds = [seed + n for n in range(trials)]
    per_trial = []
    for number, trial_seed in enumerate(seeds, 1):
        row = _side_by_side_trial(calls=calls, call_seconds=call_seconds, jitter=jitter, time_scale=time_scale,
                                  seed=trial_seed)
        per_trial.append({"sequential": {"seconds": row["sequential_s"]},
                          "side_by_side": {"seconds": row["side_by_side_s"]}, "run": row})
        log(f"side by side, trial {number}/{trials} (seed {trial_seed}): {calls} calls of about {call_seconds:g} s took "
            f"{row['sequential_s']:.2f} s in sequence, {row['side_by_side_s']:.2f} s side by side ({row['speedup']:.2f}x)")
    runs = [trial["run"] for trial in per_trial]
    return {
        "experiment": "side_by_side",
        "settings": {"trials": trials, "seeds": seeds, "calls": calls, "call_seconds": call_seconds, "jitter": jitter,
                     "time_scale": time_scale, "confidence": 0.95, "difference_rule": DIFFERENCE_RULE,
                     "wall_seconds": round(time.perf_counter() - began, 1), "machine": machine},
        "sequential_s": spread([r["sequential_s"] for r in runs]),
        "side_by_side_s": spread([r["side_by_side_s"] for r in runs]),
        "speedup": spread([r["speedup"] for r in runs]),
        "all_ok": all(r["all_ok"] for r in runs),
        "comparisons": _comparisons(per_trial, [("sequential", "side_by_side", "in sequence -> side by side")],
                                    ["seconds"]),
        "trials": [{"seed": s, **r} for s, r in zip(seeds, runs, strict=True)],
    }


# ---- README-ready tables ------------------------------------------------------------------------

def _signed(value: float, fmt: str) -> str:
    """A difference as fmt shows it, never "-0" for a difference that rounds to nothing."""
    text = fmt.format(value)
    return fmt.format(0.0) if float(text) == 0 else text


def _difference(row: Mapping[str, Any], fmt: str, unit: str) -> str:
    """mean paired difference (95% CI): verdict."""
    if row["mean_difference"] is None:
        return "n/a"
    low, high = row["ci95"] or (None, None)
    interval = f" (95% CI {_signed(low, fmt)} to {_signed(high, fmt)})" if low is not None and high is not None else ""
    if row["differs"]:
        verdict = "**differs**"
    elif low == high == 0:
        verdict = "the same in every trial"
    else:
        verdict = "within the spread"
    return f"{_signed(row['mean_difference'], fmt)}{unit}{interval}: {verdict}"


def summary_markdown(quota: Mapping[str, Any] | None = None, side_by_side: Mapping[str, Any] | None = None,
                     pool: Mapping[str, Any] | None = None) -> str:
    """The experiments' tables in Markdown: mean (min-max over the trials), and each comparison's
    mean paired difference with its 95% interval and whether it exceeds the spread."""
    parts: list[str] = []
    if quota:
        s, plan, shared = quota["settings"], quota["plan"], quota["plan_at_shared_max_tokens"]
        target = f"{s['e2e_target_s']:g}"
        parts += [
            f"Quota experiment ([`quota_experiment.json`](bench/results/quota_experiment.json)): {s['trials']} trials "
            f"(seeds {s['seeds'][0]}-{s['seeds'][-1]}), each {quota['requests_per_trial']} requests arriving at "
            f"{quota['offered_requests_per_minute']:g} per minute ({s['load_factor']:g}x the "
            f"{plan['sustainable_requests_per_minute']:g} per minute the planner says the quota sustains with "
            f"max_tokens {plan['max_tokens']:,}; {shared['sustainable_requests_per_minute']:g} with "
            f"{shared['max_tokens']:,}), time scale {s['time_scale']:g}, the strategies of a trial run at once on "
            f"their own emulators. Mean (min–max) over the trials; goodput = answered within {target} s of "
            "arrival.",
            "",
            f"| strategy | max_tokens | settled TPM of quota | attempts throttled | failed after retries | "
            f"goodput (E2E <= {target} s) | p50 from arrival | p99 from arrival |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in quota["strategies"]:
            m = row["metrics"]
            parts.append(
                f"| {row['strategy']}: {row['description']} | {row['max_tokens']:,} | "
                f"{_cell(m['settled_pct_of_quota'], unit='%')} | {_cell(m['throttled_pct_of_attempts'], unit='%')} | "
                f"{_cell(m['failed_requests'], '{:.1f}')} / {quota['requests_per_trial']} | "
                f"{_cell(m['goodput_pct'], unit='%')} | {_cell(m['e2e_p50_s'], unit=' s')} | "
                f"{_cell(m['e2e_p99_s'], unit=' s')} |")
        parts += ["", "| comparison (b minus a, paired by seed) | settled TPM of quota | attempts throttled | "
                      "failed after retries | goodput | p99 from arrival |", "|---|---|---|---|---|---|"]
        by_pair: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
        for row in quota["comparisons"]:
            by_pair.setdefault((row["a"], row["b"]), {})[row["metric"]] = row
        for (a, b), rows in by_pair.items():
            parts.append(
                f"| {b} vs {a} ({rows['settled_pct_of_quota']['isolates']}) | "
                f"{_difference(rows['settled_pct_of_quota'], '{:+.1f}', ' pts')} | "
                f"{_difference(rows['throttled_pct_of_attempts'], '{:+.1f}', ' pts')} | "
                f"{_difference(rows['failed_requests'], '{:+.1f}', '')} | "
                f"{_difference(rows['goodput_pct'], '{:+.1f}', ' pts')} | "
                f"{_difference(rows['e2e_p99_s'], '{:+.1f}', ' s')} |")
        parts += ["", f"A difference is stated only where it exceeds the spread ({s['difference_rule']}).", ""]
    if side_by_side:
        s = side_by_side["settings"]
        cmp = side_by_side["comparisons"][0]
        parts += [
            f"Side by side ([`side_by_side_experiment.json`](bench/results/side_by_side_experiment.json)), "
            f"{s['trials']} trials: {s['calls']} independent calls of about {s['call_seconds']:g} s "
            f"({100 * s['jitter']:g}% jitter) took {_cell(side_by_side['sequential_s'], '{:.2f}', ' s')} in sequence and "
            f"{_cell(side_by_side['side_by_side_s'], '{:.2f}', ' s')} with `run_side_by_side` "
            f"({_cell(side_by_side['speedup'], '{:.2f}', 'x')}); difference {_difference(cmp, '{:+.2f}', ' s')}.",
            "",
        ]
    if pool:
        s = pool["settings"]
        parts += [
            f"Connection pool ([`pool_experiment.json`](bench/results/pool_experiment.json)), {s['trials']} trials: "
            f"{s['threads']} threads sharing one client, firing together {s['rounds']} times, each new connection "
            f"charged {1000 * s['connection_setup_seconds']:g} ms in the emulator as a stand-in for a TLS handshake.",
            "",
            "| max_pool_connections | connections opened | 'pool is full' warnings | p50 | p90 | p99 |",
            "|---|---|---|---|---|---|",
        ]
        for row in pool["pools"]:
            m = row["metrics"]
            parts.append(
                f"| {row['max_pool_connections']} | {_cell(m['connections_opened'], '{:.0f}')} | "
                f"{_cell(m['pool_full_warnings'], '{:.0f}')} | {_cell(m['latency_p50_ms'], '{:.0f}', ' ms')} | "
                f"{_cell(m['latency_p90_ms'], '{:.0f}', ' ms')} | {_cell(m['latency_p99_ms'], '{:.0f}', ' ms')} |")
        parts += ["", "| comparison | connections opened | p50 | p90 | p99 |", "|---|---|---|---|---|"]
        by_pair = {}
        for row in pool["comparisons"]:
            by_pair.setdefault((row["a"], row["b"]), {})[row["metric"]] = row
        for (a, b), rows in by_pair.items():
            parts.append(
                f"| pool {b} vs pool {a} | {_difference(rows['connections_opened'], '{:+.0f}', '')} | "
                f"{_difference(rows['latency_p50_ms'], '{:+.0f}', ' ms')} | "
                f"{_difference(rows['latency_p90_ms'], '{:+.0f}', ' ms')} | "
                f"{_difference(rows['latency_p99_ms'], '{:+.0f}', ' ms')} |")
        parts.append("")
    return "\n".join(parts)


def write_summary(directory: str | Path, name: str = "experiments.md") -> Path:
    """Write summary_markdown of the experiment reports found in directory (as `genai-pacer
    experiments --out directory` leaves them) to directory/name."""
    import json

    folder = Path(directory)
    reports = {}
    for key, file in (("quota", "quota_experiment.json"), ("side_by_side", "side_by_side_experiment.json"),
                      ("pool", "pool_experiment.json")):
        path = folder / file
        reports[key] = json.loads(path.read_text()) if path.exists() else None
    target = folder / name
    target.write_text(summary_markdown(**reports))
    return target
