"""Experiments run against the emulator with real boto3 clients.

quota_experiment: the same Poisson request stream, at about twice what the quota sustains, sent
three ways: one thread per request with botocore's default retries; botocore's adaptive retry mode;
and genai-pacer's way (max_tokens sized by `planning.size_max_tokens`, at most
`planning.sustainable_rate(...).max_concurrency` calls in flight, full-jitter retries). The figures
are read from the emulator's own ledger (settled tokens, throttles) and from the clients (failed
requests, end-to-end latency from arrival, queue wait included).

side_by_side_experiment: independent calls of equal latency in sequence and with run_side_by_side.

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
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from .. import planning
from .bench import Prompt, converse_request, error_code, percentiles
from .emulator import BedrockEmulator, ModelSpec, approx_tokens

__all__ = ["EXPERIMENT_MODEL", "pool_experiment", "quota_experiment", "quota_plan", "side_by_side_experiment"]

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


def quota_plan(prompts: Sequence[Prompt], spec: ModelSpec) -> dict[str, Any]:
    """What genai_pacer.planning says for this workload on this model: max_tokens, rate, cap."""
    inputs = [approx_tokens((p.system or "") + p.prompt) for p in prompts]
    outputs = [p.expected_output_tokens for p in prompts]
    p99 = percentiles(outputs).p99
    if p99 is None:
        raise ValueError("quota_plan needs at least one prompt")
    sizing = planning.size_max_tokens(math.ceil(p99))
    mean_in, mean_out = statistics.fmean(inputs), statistics.fmean(outputs)
    call_seconds = spec.ttft_seconds + mean_in / spec.prefill_tokens_per_second + mean_out / spec.output_tokens_per_second
    profile = planning.TokenProfile(
        input_tokens=round(mean_in), output_tokens=round(mean_out), max_tokens=sizing.max_tokens, burndown=spec.burndown
    )
    rate = planning.sustainable_rate(profile, tpm_quota=spec.tpm_quota, call_seconds=call_seconds)
    return {
        "mean_input_tokens": round(mean_in, 1),
        "mean_output_tokens": round(mean_out, 1),
        "p99_output_tokens": sizing.p99_output_tokens,
        "max_tokens": sizing.max_tokens,
        "call_seconds": round(call_seconds, 3),
        "settled_per_request": profile.settled,
        "reserved_per_request": profile.reserved,
        "sustainable_requests_per_minute": round(rate.requests_per_minute, 1),
        "max_concurrency": rate.max_concurrency,
    }


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


def _row(name: str, description: str, max_tokens: int, client: Any, emulator: BedrockEmulator,
         results: Sequence[dict[str, Any]], wall_seconds: float, time_scale: float, spec: ModelSpec) -> dict[str, Any]:
    """One strategy's figures: quota use from the emulator's ledger, outcomes from the client."""
    invocations = emulator.invocations
    busy_minutes = wall_seconds * time_scale / 60
    settled = sum(i.settled for i in invocations)
    throttled = sum(i.outcome == "throttled" for i in invocations)
    failed = [r for r in results if r["error"]]
    e2e = percentiles([r["seconds"] * time_scale for r in results if not r["error"]])
    return {
        "strategy": name,
        "description": description,
        "retries": dict(client.meta.config.retries or {}),
        "max_tokens": max_tokens,
        "requests": len(results),
        "attempts": len(invocations),
        "throttled_attempts": throttled,
        "throttle_rate": round(throttled / len(invocations), 4) if invocations else 0.0,
        "failed_requests": len(failed),
        "failed_rate": round(len(failed) / len(results), 4),
        "busy_minutes": round(busy_minutes, 3),
        "settled_tpm": round(settled / busy_minutes, 1),
        "settled_pct_of_quota": round(100 * settled / busy_minutes / spec.tpm_quota, 1),
        "e2e_from_arrival_s": {"p50": e2e.p50, "p90": e2e.p90, "p99": e2e.p99, "n": e2e.n},
        # From the call's start to its answer (retries included, queue wait excluded), in model seconds:
        # compare with the plan's call_seconds, which counts only the model's own time.
        "mean_call_seconds": round(statistics.fmean(r["call_seconds"] for r in results if not r["error"]) * time_scale, 3)
        if len(failed) < len(results) else None,
    }


def _describe(row: dict[str, Any]) -> str:
    return (f"{row['settled_pct_of_quota']}% of quota settled, {100 * row['throttle_rate']:.1f}% of attempts throttled, "
            f"{row['failed_requests']}/{row['requests']} failed after retries, p99 e2e {row['e2e_from_arrival_s']['p99']} s")


def quota_experiment(
    prompts: Sequence[Prompt],
    *,
    spec: ModelSpec = EXPERIMENT_MODEL,
    load_factor: float = 2.0,
    arrival_minutes: float = 1.0,
    time_scale: float = 4.0,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the three strategies on the same arrivals; returns the plan and one row per strategy.

    settled_pct_of_quota is settled tokens over the strategy's busy time (first arrival to last
    answer) against the TPM quota: the share of the quota turned into answers.
    """
    plan = quota_plan(prompts, spec)
    offered = load_factor * plan["sustainable_requests_per_minute"]
    rng = random.Random(seed)
    count = max(1, round(offered * arrival_minutes))
    arrivals, due = [], 0.0
    for _ in range(count):
        arrivals.append(due)
        due += rng.expovariate(offered / 60)
    workload = [prompts[rng.randrange(len(prompts))] for _ in range(count)]
    cap = plan["max_concurrency"]
    strategies: list[tuple[str, str, int, dict[str, Any]]] = [
        ("unbounded", "a thread per request, botocore's default retries", NAIVE_MAX_TOKENS, {"max_pool_connections": 256}),
        ("adaptive", "a thread per request, botocore's adaptive retry mode", NAIVE_MAX_TOKENS,
         {"max_pool_connections": 256, "retries": {"mode": "adaptive"}}),
        ("genai-pacer", f"at most {cap} in flight (BoundedCalls), full-jitter retries, planned max_tokens",
         plan["max_tokens"], {"max_pool_connections": cap, "retries": {"total_max_attempts": 1}}),
    ]
    rows = []
    for name, description, max_tokens, config in strategies:
        log(f"quota experiment: {name}: {count} requests arriving at {offered:.0f}/min ({load_factor:g}x sustainable)")
        requests = [converse_request(prompt, spec.model_id, max_tokens=max_tokens) for prompt in workload]
        with BedrockEmulator([spec], seed=seed, time_scale=time_scale) as emulator:
            client = emulator.client(**config)
            started = time.perf_counter()
            if name == "genai-pacer":
                results = _bounded(client, requests, arrivals, time_scale, cap)
            else:
                results = _thread_per_request(client, requests, arrivals, time_scale)
            wall = time.perf_counter() - started
            rows.append(_row(name, description, max_tokens, client, emulator, results, wall, time_scale, spec))
        log(f"  {_describe(rows[-1])}")
    return {"plan": plan, "offered_requests_per_minute": round(offered, 1), "requests": count,
            "time_scale": time_scale, "model": spec.model_id, "tpm_quota": spec.tpm_quota,
            "burndown": spec.burndown, "strategies": rows}


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


def pool_experiment(
    *,
    threads: int = 40,
    rounds: int = 10,
    pools: Sequence[int] = (10, 40),
    connection_setup_seconds: float = 0.05,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """threads share one client and fire together in rounds (a fan-out per incoming event); compare
    pool sizes by connections opened, "pool is full" warnings and latency.

    Between rounds the threads are idle, so every connection beyond the pool size is discarded and
    reopened in the next round. Each new connection costs connection_setup_seconds in the emulator,
    standing in for a TLS handshake (an assumption: loopback HTTP has no handshake of its own).
    """
    spec = ModelSpec("us.amazon.nova-lite-v1:0", ttft_seconds=0.2, output_tokens_per_second=200,
                     answer_tokens=50, jitter=0.1)
    rows = []
    urllib3_log = logging.getLogger("urllib3.connectionpool")
    for pool in pools:
        counter = _PoolFullCounter()
        urllib3_log.addHandler(counter)
        try:
            with BedrockEmulator([spec], seed=seed, connection_setup_seconds=connection_setup_seconds) as emulator:
                latencies = _fan_out_rounds(emulator.client(max_pool_connections=pool), spec.model_id, threads, rounds)
                opened = emulator.connections_opened
        finally:
            urllib3_log.removeHandler(counter)
        summary = percentiles(latencies)
        rows.append({"max_pool_connections": pool, "threads": threads, "requests": len(latencies),
                     "connections_opened": opened, "pool_full_warnings": counter.count,
                     "latency_ms": {"p50": summary.p50, "p90": summary.p90, "p99": summary.p99}})
        log(f"pool experiment: pool {pool}, {threads} threads: {opened} connections opened, "
            f"{counter.count} 'pool is full' warnings, p50 {summary.p50:.0f} ms, p99 {summary.p99:.0f} ms")
    return {"threads": threads, "rounds": rounds, "connection_setup_seconds": connection_setup_seconds, "pools": rows}


def side_by_side_experiment(*, calls: int = 4, call_seconds: float = 5.0, time_scale: float = 5.0,
                            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Independent calls of equal latency, one after another versus side by side on one client."""
    from genai_pacer.runtime import converse, run_side_by_side

    answer = 100
    spec = ModelSpec("us.amazon.nova-lite-v1:0", ttft_seconds=call_seconds / 5, jitter=0,
                     output_tokens_per_second=answer / (call_seconds * 4 / 5), answer_tokens=answer)
    with BedrockEmulator([spec], time_scale=time_scale) as emulator:
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
    result = {"calls": calls, "call_seconds": call_seconds, "sequential_s": round(sequential, 2),
              "side_by_side_s": round(parallel, 2), "speedup": round(sequential / parallel, 2),
              "all_ok": all(o.ok for o in outcomes)}
    log(f"side by side: {calls} calls of {call_seconds:g} s took {result['sequential_s']} s in sequence, "
        f"{result['side_by_side_s']} s side by side ({result['speedup']}x)")
    return result
