"""Several processes sharing one Bedrock quota (issue 25): static shares, the whole quota each, or the
shared DynamoDB ledger (QuotaPacer(ledger=SharedLedger(...))).

One emulator quota; N worker processes (real processes, each with its own QuotaPacer, its own
bedrock-runtime client and, for the ledger, its own DynamoDB client); 2x the load the planner says
the quota sustains, uneven: one consumer (process 0) receives 70% of the arrivals, the others share
the rest. Strategies:

- static: each process paces to 1/N of the quota (what ModelQuota shares do without a ledger).
- whole: each process paces to the whole quota, unaware of the others.
- ledger: each process paces to the whole quota (its burst cap) and admits a call only once the
  shared ledger holds it; its floor (and its fallback) is 1/N of the quota.

The ledger lives in moto's DynamoDB server, run single-threaded in a process of its own: DynamoDB
applies each UpdateItem atomically on the latest item, and moto only does so when its requests
run one at a time (moto evaluates a condition and applies the update without a lock).

Time: the emulator runs time_scale times faster than model time; the pacers and the ledger run on a
model-time clock (model seconds = wall seconds x time_scale, one epoch for every process), so the
ledger's one-second slots are model seconds. Latencies are model seconds.

Figures per run: settled_pct_saturated (tokens settled by requests that started from the end of
the first minute until arrivals stopped, as a % of the quota over those minutes: the window is full
there), settled_pct_of_quota (whole busy time), throttled_attempts, failed_requests, shed_requests,
busiest_p99_s (process 0's answered requests), p50_s (all), ledger_writes_per_call and
ledger_reads_per_call (ledger runs), and the machine's load.

Time scale and the ledger's round trips: every DynamoDB call of the ledger takes its wall time
times time_scale in model time, and a process asks the ledger for one call at a time (its head
waiter, to keep admission in arrival order). On a loaded machine (load average 20-50 on 2 cores)
moto's round trip was 76 ms at the median and 330 ms at p99: 0.76 and 3.3 model seconds at
time_scale 10, which capped each process at about 40 admissions a model minute and the shared
ledger at 54-66% of the quota. At time_scale 3 the same round trips are 0.06-0.18 model seconds
at the median, closer to DynamoDB's in-Region latency against Bedrock's minute; the ledger's runs
are measured there (bench/results/shared_quota_experiment.json). The strategies without a ledger do
not depend on it (bench/results/shared_quota_experiment_baselines.json, time_scale 10).

Run (about 2 minutes of wall time per run at time_scale 3; the static shares drain a long backlog):
    .venv/bin/python bench/shared_quota_experiment.py --seeds 2 --time-scale 3 --configurations 1:whole,4:ledger,2:ledger
    .venv/bin/python bench/shared_quota_experiment.py --seeds 3 --time-scale 10 --configurations 1:whole,2:static,4:static,4:whole \
        --out bench/results/shared_quota_experiment_baselines.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "constructs"), str(ROOT / "lambda")]

from genai_pacer.testing.bench import SAMPLE_PROMPTS, converse_request, error_code, load_prompts, percentiles  # noqa: E402
from genai_pacer.testing.emulator import BedrockEmulator  # noqa: E402
from genai_pacer.testing.experiments import EXPERIMENT_MODEL, quota_plan  # noqa: E402

STRATEGIES = ("static", "whole", "ledger")
#: (processes, strategy) in the issue's table, plus the ledger.
CONFIGURATIONS = ((1, "whole"), (2, "static"), (2, "ledger"), (4, "static"), (4, "whole"), (4, "ledger"))
BUSIEST_SHARE = 0.7
#: Model seconds a charge is kept past the window (the time a request takes to reach the emulator).
EXPIRY_MARGIN_MODEL_SECONDS = 1.0
#: The clock skew the ledger tolerates, model seconds (one machine: one clock).
LEDGER_SKEW_MODEL_SECONDS = 0.5
PACER_THREADS = 400
TABLE = "ledger"
#: moto's DynamoDB server, one request at a time (see the module docstring).
_DYNAMODB_SERVER = """
import sys
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server
server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), False,
                     request_handler=MotoRequestHandler)
print(server.server_port, flush=True)
server.serve_forever()
"""


def start_dynamodb() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-c", _DYNAMODB_SERVER], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}"


def dynamodb_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="local",
                        aws_secret_access_key="local",
                        config=Config(retries={"total_max_attempts": 1}, max_pool_connections=64))


class Timed:
    """A DynamoDB client that times each call (wall milliseconds): the ledger's round trips."""

    def __init__(self, client: Any) -> None:
        self.client, self.calls, self.seconds, self.each = client, 0, 0.0, []
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def timed(**request: Any) -> Any:
            began = time.perf_counter()
            try:
                return method(**request)
            finally:
                spent = time.perf_counter() - began
                with self.lock:
                    self.calls += 1
                    self.seconds += spent
                    self.each.append(spent * 1000)
        return timed


# --- one consumer process ---------------------------------------------------------------------------


def consumer(job: dict[str, Any], out: Any) -> None:
    """A worker process: replay its arrivals through its own pacer; send back per-request results."""
    import boto3
    from pacer_runtime.bedrock import bedrock_client
    from pacer_runtime.ledger import SharedLedger
    from pacer_runtime.quota_pacer import AdmissionRejected, QuotaPacer
    from pacer_runtime.side_by_side import Backoff, BoundedCalls

    out.send("ready")  # imported: the run starts when every process is
    job["start"] = job["epoch"] = out.recv()
    scale, epoch = job["time_scale"], job["epoch"]

    def model_clock() -> float:  # one model-time clock for every process (the same epoch)
        return epoch + (time.time() - epoch) * scale

    ledger, timed = None, Timed(dynamodb_client(job["dynamodb"])) if job["dynamodb"] else None
    if job["strategy"] == "ledger":
        ledger = SharedLedger(TABLE, ledger_id="quota", consumer=f"c{job['index']}", quota_tpm=job["quota_tpm"],
                              floor_tpm=job["floor_tpm"], skew_seconds=LEDGER_SKEW_MODEL_SECONDS,
                              client=timed, clock=model_clock,
                              sleep=lambda seconds: time.sleep(seconds / scale))
    pacer = QuotaPacer(job["tpm"], burndown=job["burndown"], expiry_margin_seconds=EXPIRY_MARGIN_MODEL_SECONDS,
                       poll_seconds=0.25 / scale, clock=model_clock, ledger=ledger, fallback_tpm=job["floor_tpm"],
                       ledger_retry_seconds=5.0)
    session = boto3.Session(aws_access_key_id="local", aws_secret_access_key="local")
    client = bedrock_client(region_name="us-east-1", max_pool_connections=64, max_attempts=1,
                            endpoint_url=job["emulator"], session=session)
    requests, arrivals = job["requests"], job["arrivals"]
    results: list[dict[str, Any]] = [{} for _ in requests]
    backoff = Backoff(base_seconds=1 / scale, cap_seconds=20 / scale, max_attempts=8)

    def finish(index: int, arrived: float, future: Future) -> None:
        outcome = future.result()
        shed = isinstance(outcome.error, AdmissionRejected)
        results[index] = {"error": None if outcome.ok or shed else error_code(outcome.error), "shed": shed,
                          "seconds": (time.time() - arrived) * scale}

    with BoundedCalls(PACER_THREADS, backoff=backoff) as pool:
        for index, due in enumerate(arrivals):  # model seconds after the common start
            wait = job["start"] + due / scale - time.time()
            if wait > 0:
                time.sleep(wait)
            arrived = time.time()
            future = pool.submit(lambda i=index: pacer.converse(client, requests[i]))
            future.add_done_callback(lambda done, i=index, a=arrived: finish(i, a, done))
    stats = pacer.stats()
    out.send({"index": job["index"], "results": results,
              "ledger": {**ledger.counts, "calls": timed.calls, "call_wall_seconds": round(timed.seconds, 3),
                         "call_wall_p50_ms": percentiles(timed.each).p50, "call_wall_p99_ms": percentiles(timed.each).p99}
              if ledger and timed else None,
              "pacer": {"admitted": stats.admitted, "ledger_refusals": stats.ledger_refusals,
                        "ledger_fallbacks": stats.ledger_fallbacks, "ledger_errors": stats.ledger_errors}})
    out.close()


# --- one run -----------------------------------------------------------------------------------------


def workload(prompts: Sequence[Any], rate_per_minute: float, minutes: float, processes: int,
             seed: int) -> list[tuple[float, Any, int]]:
    """(arrival in model seconds, prompt, process) for Poisson arrivals, 70% to process 0."""
    rng = random.Random(seed)
    out, due = [], 0.0
    for _ in range(max(1, round(rate_per_minute * minutes))):
        who = 0 if processes == 1 or rng.random() < BUSIEST_SHARE else 1 + rng.randrange(processes - 1)
        out.append((due, prompts[rng.randrange(len(prompts))], who))
        due += rng.expovariate(rate_per_minute / 60)
    return out


def run(processes: int, strategy: str, arrivals: Sequence[tuple[float, Any, int]], *, plan: dict[str, Any],
        time_scale: float, seed: int, minutes: float) -> dict[str, Any]:
    spec = EXPERIMENT_MODEL
    quota = spec.tpm_quota
    dynamodb, endpoint = (None, "")
    if strategy == "ledger":
        dynamodb, endpoint = start_dynamodb()
        dynamodb_client(endpoint).create_table(
            TableName=TABLE, BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
    context = multiprocessing.get_context("spawn")
    load_before = _load()
    try:
        with BedrockEmulator([spec], seed=seed, time_scale=time_scale) as emulator:
            pipes, workers = [], []
            for index in range(processes):
                mine = [(due, prompt) for due, prompt, who in arrivals if who == index]
                job = {
                    "index": index, "strategy": strategy, "time_scale": time_scale,
                    "arrivals": [due for due, _ in mine],
                    "requests": [converse_request(p, spec.model_id, max_tokens=plan["max_tokens"]) for _, p in mine],
                    "tpm": quota / processes if strategy == "static" else quota, "quota_tpm": quota,
                    "floor_tpm": quota / processes, "burndown": spec.burndown,
                    "emulator": emulator.endpoint_url, "dynamodb": endpoint,
                }
                mine_end, theirs = context.Pipe()
                worker = context.Process(target=consumer, args=(job, theirs), daemon=True)
                worker.start()
                pipes.append(mine_end)
                workers.append(worker)
            for pipe in pipes:
                assert pipe.recv() == "ready"
            start = time.time() + 1.0  # every process builds its pacer and clients, then replays from here
            for pipe in pipes:
                pipe.send(start)
            reports = [pipe.recv() for pipe in pipes]
            for worker in workers:
                worker.join(timeout=60)
            wall = time.time() - start
            return measure(emulator, reports, wall, time_scale, quota, minutes,
                           {"seed": seed, "processes": processes, "strategy": strategy,
                            "load_average": f"{load_before} before, {_load()} after"})
    finally:
        if dynamodb is not None:
            dynamodb.terminate()
            dynamodb.wait(timeout=10)


def measure(emulator: BedrockEmulator, reports: Sequence[dict[str, Any]], wall: float, time_scale: float, quota: float,
            minutes: float, row: dict[str, Any]) -> dict[str, Any]:
    invocations = emulator.invocations
    zero = min((i.started for i in invocations), default=0.0)
    saturated = sum(i.settled for i in invocations if 60 <= i.started - zero < minutes * 60)
    busy_minutes = wall * time_scale / 60
    results = [r for report in reports for r in report["results"]]
    served = [r["seconds"] for r in results if not r["error"] and not r["shed"]]
    busiest = [r["seconds"] for r in next(rep for rep in reports if rep["index"] == 0)["results"]
               if not r["error"] and not r["shed"]]
    row.update({
        "requests": len(results),
        "attempts": len(invocations),
        "throttled_attempts": sum(i.outcome == "throttled" for i in invocations),
        "failed_requests": sum(1 for r in results if r["error"]),
        "shed_requests": sum(1 for r in results if r["shed"]),
        "settled_pct_saturated": round(100 * saturated / ((minutes - 1) * quota), 2),
        "settled_pct_of_quota": round(100 * sum(i.settled for i in invocations) / busy_minutes / quota, 2),
        "busiest_p99_s": percentiles(busiest).p99,
        "p50_s": percentiles(served).p50,
        "p99_s": percentiles(served).p99,
    })
    ledgers = [rep["ledger"] for rep in reports if rep["ledger"]]
    if ledgers:
        calls = sum(rep["pacer"]["admitted"] for rep in reports) or 1
        row["ledger_writes_per_call"] = round(sum(c["writes"] for c in ledgers) / calls, 3)
        row["ledger_reads_per_call"] = round(sum(c["reads"] for c in ledgers) / calls, 3)
        row["ledger_conflicts"] = sum(c["conflicts"] for c in ledgers)
        row["ledger_fallbacks"] = sum(rep["pacer"]["ledger_fallbacks"] for rep in reports)
        row["ledger_call_p50_model_s"] = round(max(c["call_wall_p50_ms"] or 0 for c in ledgers) / 1000 * time_scale, 3)
        row["ledger_call_p99_model_s"] = round(max(c["call_wall_p99_ms"] or 0 for c in ledgers) / 1000 * time_scale, 3)
    return row


def spread(values: Sequence[float | None]) -> dict[str, float | None]:
    known = [v for v in values if v is not None]
    if not known:
        return {"mean": None, "stdev": None, "min": None, "max": None}
    return {"mean": round(statistics.fmean(known), 3), "stdev": round(statistics.stdev(known), 3) if len(known) > 1 else 0.0,
            "min": round(min(known), 3), "max": round(max(known), 3)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="trials per configuration, seeds 0..N-1 (default 3)")
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--load", type=float, default=2.0, help="multiple of the sustainable rate (default 2)")
    parser.add_argument("--minutes", type=float, default=3.0, help="model minutes of arrivals (default 3)")
    parser.add_argument("--configurations", default=",".join(f"{n}:{s}" for n, s in CONFIGURATIONS),
                        help="processes:strategy, comma-separated")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "shared_quota_experiment.json"))
    args = parser.parse_args(argv)
    log: Callable[[str], None] = lambda line: print(line, flush=True)  # noqa: E731
    prompts = load_prompts(str(SAMPLE_PROMPTS))
    plan = quota_plan(prompts, EXPERIMENT_MODEL)
    rate = args.load * plan["sustainable_requests_per_minute"]
    configurations = [(int(n), s) for n, s in (c.split(":") for c in args.configurations.split(","))]
    rows: dict[str, list[dict[str, Any]]] = {}
    began = time.time()
    for seed in range(args.seeds):
        for processes, strategy in configurations:
            arrivals = workload(prompts, rate, args.minutes, processes, seed)
            row = run(processes, strategy, arrivals, plan=plan, time_scale=args.time_scale, seed=seed,
                      minutes=args.minutes)
            rows.setdefault(f"{processes}:{strategy}", []).append(row)
            log(f"[{time.time() - began:5.0f}s] seed {seed} {processes} x {strategy}: {row['settled_pct_saturated']}% "
                f"saturated ({row['settled_pct_of_quota']}% whole run), {row['throttled_attempts']} throttled, "
                f"{row['failed_requests']} failed, {row['shed_requests']} shed, busiest p99 {row['busiest_p99_s']} s, "
                f"p50 {row['p50_s']} s" + (f", {row['ledger_writes_per_call']} ledger writes/call, ledger call p50/p99 {row['ledger_call_p50_model_s']}/{row['ledger_call_p99_model_s']} model s"
                                           if "ledger_writes_per_call" in row else "") + f" (load {row['load_average']})")
    summary = {name: {k: spread([r.get(k) for r in runs]) for k, v in runs[0].items()
                      if isinstance(v, int | float) and k not in ("seed", "processes")}
               for name, runs in rows.items()}
    report = {
        "experiment": "shared_quota",
        "description": (__doc__ or "").split("\n\n")[0],
        "conditions": {"time_scale": args.time_scale, "load": args.load, "arrival_minutes": args.minutes,
                       "busiest_share": BUSIEST_SHARE, "seeds": list(range(args.seeds)), "pacer_threads": PACER_THREADS,
                       "expiry_margin_model_s": EXPIRY_MARGIN_MODEL_SECONDS,
                       "ledger_skew_model_s": LEDGER_SKEW_MODEL_SECONDS, "plan": plan,
                       "machine": f"{platform.machine()}, {os.cpu_count()} CPUs shared with other work"},
        "runs": rows, "summary": summary, "wall_seconds": round(time.time() - began, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    log(f"wrote {out}")
    return 0


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


if __name__ == "__main__":
    threading.excepthook = lambda hook: print(f"thread failed: {hook.exc_value!r}", file=sys.stderr)
    sys.exit(main())
