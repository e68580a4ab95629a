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
- unbounded: no pacer at all, each call sent on arrival (throttles retried with the same backoff):
  the latency a pacer is measured against at light load (--load 0.5).

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

A BoundedMap beside the processes (--map-items K, ledger configurations): the main process builds a
stack (ModelQuota, QuotaLedger, BoundedMap(ledger=...) on a share of MAP_SHARE_FRACTION of the
quota) and executes it with StateMachineRunner against the run's emulator, K prompts from the
common start; the processes reach the runner's DynamoDB table through a moto server thread and
split the rest of the quota as their floors (see MapBeside).

The simulation (--simulate; no processes, no emulator): --consumers consumers of one quota item,
each the real SharedLedger against moto's DynamoDB backend in this process on the simulation's
clock, its quota admitting --calls-per-minute calls, --load times that arriving (see simulate()). It reports ledger writes per second,
conditional-write conflicts, the quota used, and what DynamoDB would charge one item: its size
against the 400 KB item limit and write units per second against a partition's 1,000
(bench/results/shared_quota_simulation.json, the same layout).

Run (about 2 minutes of wall time per run at time_scale 3; the static shares drain a long backlog):
    .venv/bin/python bench/shared_quota_experiment.py --seeds 2 --time-scale 3 --configurations 1:whole,4:ledger,2:ledger
    .venv/bin/python bench/shared_quota_experiment.py --seeds 3 --time-scale 10 --configurations 1:whole,2:static,4:static,4:whole \
        --out bench/results/shared_quota_experiment_baselines.json
    .venv/bin/python bench/shared_quota_experiment.py --seeds 3 --time-scale 3 --load 0.5 \
        --configurations 4:unbounded,4:ledger,4:static --out bench/results/shared_quota_experiment_half_load.json
    .venv/bin/python bench/shared_quota_experiment.py --seeds 3 --time-scale 3 --configurations 1:whole,16:ledger \
        --out bench/results/shared_quota_experiment_16.json   # 12 min
    .venv/bin/python bench/shared_quota_experiment.py --seeds 2 --time-scale 3 --configurations 4:ledger --map-items 60 \
        --out bench/results/shared_quota_experiment_map.json
    .venv/bin/python bench/shared_quota_experiment.py --simulate --seeds 2 --consumers 100    # 7-13 min
    .venv/bin/python bench/shared_quota_experiment.py --simulate --seeds 2 --consumers 1000 --minutes 2 \
        --out bench/results/shared_quota_simulation_1000.json   # 4-7 min a seed
    .venv/bin/python bench/shared_quota_experiment.py --simulate --seeds 2 --consumers 100,1000 --load 0.5 \
        --out bench/results/shared_quota_simulation_half_load.json
    (the wall times are on the shared 2-core machine, whose load the rows record)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import multiprocessing
import os
import platform
import random
import re
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
from pacer_runtime.ledger import HOT_PARTITION_WRITE_UNITS  # noqa: E402

STRATEGIES = ("static", "whole", "ledger", "unbounded")
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
    from pacer_runtime.bedrock import bedrock_client, converse
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
        ledger = SharedLedger(job["table"], ledger_id=job["ledger_id"], consumer=f"c{job['index']}", quota_tpm=job["quota_tpm"],
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
            future = pool.submit(lambda i=index: converse(client, requests[i]) if job["strategy"] == "unbounded"
                                 else pacer.converse(client, requests[i]))
            future.add_done_callback(lambda done, i=index, a=arrived: finish(i, a, done))
    stats = pacer.stats()
    out.send({"index": job["index"], "results": results,
              "ledger": {**ledger.counts, "calls": timed.calls, "call_wall_seconds": round(timed.seconds, 3),
                         "call_wall_p50_ms": percentiles(timed.each).p50, "call_wall_p99_ms": percentiles(timed.each).p99}
              if ledger and timed else None,
              "pacer": {"admitted": stats.admitted, "ledger_refusals": stats.ledger_refusals,
                        "ledger_fallbacks": stats.ledger_fallbacks, "ledger_errors": stats.ledger_errors}})
    out.close()


# --- a BoundedMap beside the worker processes (--map-items) ------------------------------------------

#: The BoundedMap's share of the quota: its floor, and the MaxConcurrency its share plans (2 here) is its
#: deploy-time cap; the worker processes split the rest of the quota evenly as their floors.
MAP_SHARE_FRACTION = 0.25
MAP_SHARE = "Batch"


class _ModelTime:
    """Stands in for the `datetime` module where moto's interpreter stamps a state's EnteredTime: the
    model-time clock every worker process uses, so the Map's slots are named in the same seconds."""

    timezone = datetime.timezone

    def __init__(self, clock: Callable[[], float]) -> None:
        outer = clock

        class _Datetime(datetime.datetime):
            @classmethod
            def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
                return datetime.datetime.fromtimestamp(outer(), tz)

        self.datetime = _Datetime


class MapBeside:
    """A BoundedMap taking part in the ledger (ledger=QuotaLedger), executed offline by
    StateMachineRunner in this process against the run's emulator, its ledger the runner's moto
    DynamoDB table, which the worker processes reach through a moto server thread on the same
    backend. moto applies an UpdateItem without a lock, so every DynamoDB item operation of this
    process (the server's one request at a time, the interpreter's Map iterations) holds one lock:
    each applies atomically, as DynamoDB's do."""

    def __init__(self, emulator: BedrockEmulator, plan: dict[str, Any], items: Sequence[str]) -> None:
        import aws_cdk as cdk
        from aws_cdk import aws_stepfunctions as sfn
        from genai_pacer import BedrockModel, BoundedMap, ConverseRequest, ModelQuota, QuotaLedger
        from genai_pacer.testing import StateMachineRunner

        spec = EXPERIMENT_MODEL
        self.stack = cdk.Stack(cdk.App(), "SharedQuotaBench")
        model = BedrockModel.from_id(spec.model_id)
        quota = ModelQuota(self.stack, "Quota", model=model, tpm_quota=spec.tpm_quota, burndown=spec.burndown)
        profile = quota.profile(input_tokens=round(plan["mean_input_tokens"]), output_tokens=round(plan["mean_output_tokens"]),
                                max_tokens=plan["max_tokens"])
        share = quota.share(MAP_SHARE, profile, fraction=MAP_SHARE_FRACTION, call_seconds=plan["call_seconds"])
        self.ledger = QuotaLedger(self.stack, "Ledger", quota=quota)
        BoundedMap(self.stack, MAP_SHARE, max_concurrency=share, model=model, ledger=self.ledger,
                   request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=plan["max_tokens"]))
        self.max_concurrency = share.max_concurrency
        self.items = [{"prompt": text} for text in items]
        self.runner = StateMachineRunner(self.stack, bedrock=emulator)
        self.execution: Any = None
        self.failure: BaseException | None = None

    def __enter__(self) -> MapBeside:
        from moto.dynamodb.models import DynamoDBBackend
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        lock = threading.RLock()
        self._originals = {name: getattr(DynamoDBBackend, name) for name in ("update_item", "get_item")}
        for name, original in self._originals.items():
            def locked(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                with lock:
                    return _original(*args, **kwargs)
            setattr(DynamoDBBackend, name, locked)
        self.runner.start()
        self.table, self.ledger_id, self.quota_tpm = (self.runner.physical_name(self.ledger.table), self.ledger.ledger_id,
                                                      self.ledger.quota_tpm)
        class Quiet(MotoRequestHandler):
            def log_request(self, *args: Any) -> None:
                """No access log: one line per ledger call would drown the run's own output."""

        self.server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), False,
                                  request_handler=Quiet)
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="ledger-server").start()
        return self

    def start(self, clock: Callable[[], float], at: float) -> threading.Thread:
        """Start the execution at wall time `at`, its EnteredTime on the workers' model clock."""
        from moto.stepfunctions.parser.asl.component.state import state

        self._state_module, self._datetime = state, state.datetime
        state.datetime = _ModelTime(clock)  # type: ignore[assignment]

        def execute() -> None:
            time.sleep(max(0.0, at - time.time()))
            try:
                self.execution = self.runner.run({"items": self.items}, timeout=3_600)
            except BaseException as error:  # reported in the row, never lost in a thread
                self.failure = error
        thread = threading.Thread(target=execute, daemon=True, name="bounded-map")
        thread.start()
        return thread

    def figures(self, time_scale: float) -> dict[str, Any]:
        """The Map's own figures, from its history (the runner's invocations are every call the emulator
        served meanwhile, the processes' included): model calls scheduled, throttles, ledger refusals."""
        run = self.execution
        history = run.history if run is not None else []
        scheduled = [e["taskScheduledEventDetails"] for e in history if "taskScheduledEventDetails" in e]
        failed = [e["taskFailedEventDetails"].get("error", "") for e in history if "taskFailedEventDetails" in e]
        return {"map_items": len(self.items), "map_max_concurrency": self.max_concurrency,
                "map_succeeded": bool(run is not None and run.succeeded),
                "map_error": repr(self.failure) if self.failure else (run.error if run is not None else None),
                "map_model_calls": sum("bedrock" in d.get("resourceType", "").lower() for d in scheduled),
                "map_throttled_attempts": sum("throttl" in error.lower() for error in failed),
                "map_ledger_refusals": sum(error == "DynamoDB.ConditionalCheckFailedException" for error in failed),
                "map_seconds": round(run.wall_seconds * time_scale, 1) if run is not None else None}

    def __exit__(self, *exc: object) -> None:
        from moto.dynamodb.models import DynamoDBBackend

        self.server.shutdown()
        self.runner.close()
        if getattr(self, "_state_module", None) is not None:
            self._state_module.datetime = self._datetime
        for name, original in self._originals.items():
            setattr(DynamoDBBackend, name, original)


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
        time_scale: float, seed: int, minutes: float, map_items: Sequence[str] = ()) -> dict[str, Any]:
    """One run; with map_items (a ledger run), a BoundedMap on the same ledger runs those prompts from the
    common start, its share MAP_SHARE_FRACTION of the quota and the processes' floors the rest."""
    spec = EXPERIMENT_MODEL
    quota = spec.tpm_quota
    dynamodb, endpoint, table, ledger_id = None, "", TABLE, "quota"
    if strategy == "ledger" and not map_items:
        dynamodb, endpoint = start_dynamodb()
        dynamodb_client(endpoint).create_table(
            TableName=TABLE, BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
    context = multiprocessing.get_context("spawn")
    load_before = _load()
    try:
        with contextlib.ExitStack() as stack:
            emulator = stack.enter_context(BedrockEmulator([spec], seed=seed, time_scale=time_scale))
            beside = stack.enter_context(MapBeside(emulator, plan, map_items)) if map_items else None
            floors = quota * (1 - MAP_SHARE_FRACTION) if beside else quota
            if beside is not None:
                endpoint, table, ledger_id, quota_tpm = beside.endpoint, beside.table, beside.ledger_id, beside.quota_tpm
                assert quota_tpm == quota, "the ledger's allocatable quota is the emulator's (keep_free=0)"
            pipes, workers = [], []
            for index in range(processes):
                mine = [(due, prompt) for due, prompt, who in arrivals if who == index]
                job = {
                    "index": index, "strategy": strategy, "time_scale": time_scale,
                    "arrivals": [due for due, _ in mine],
                    "requests": [converse_request(p, spec.model_id, max_tokens=plan["max_tokens"]) for _, p in mine],
                    "tpm": quota / processes if strategy == "static" else quota, "quota_tpm": quota,
                    "floor_tpm": floors / processes, "burndown": spec.burndown,
                    "emulator": emulator.endpoint_url, "dynamodb": endpoint, "table": table, "ledger_id": ledger_id,
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
            executing = (beside.start(lambda: start + (time.time() - start) * time_scale, start)
                         if beside is not None else None)
            reports = [pipe.recv() for pipe in pipes]
            for worker in workers:
                worker.join(timeout=60)
            if executing is not None:
                executing.join()
            wall = time.time() - start
            row = measure(emulator, reports, wall, time_scale, quota, minutes,
                          {"seed": seed, "processes": processes, "strategy": strategy + ("+map" if beside else ""),
                           "load_average": f"{load_before} before, {_load()} after"})
            if beside is not None:
                row.update(beside.figures(time_scale))
            return row
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


# --- the simulation (--simulate): where one ledger item stops scaling -----------------------------------

#: DynamoDB's maximum item size, 400 KB of attribute names and values, 1 KB = 1,024 bytes (developer
#: guide, Constraints: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html#limits-items).
MAX_ITEM_BYTES = 400 * 1024
#: How an item's size is counted: a string is its name's UTF-8 bytes + its UTF-8 bytes; a number is
#: its name's bytes + 1 byte per two significant digits + 1 byte (leading and trailing zeroes trimmed).
ITEM_SIZE_DOC = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html"
#: One write unit per 1 KB written, rounded up; an UpdateItem is charged on the larger of the item
#: before and after the update (developer guide, read-write-operations.html#write-operation-consumption).
WRITE_UNIT_BYTES = 1024
WRITE_UNITS_DOC = ("https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/"
                   "read-write-operations.html#write-operation-consumption")
#: One read unit per 4 KB of a strongly consistent read, rounded up (the same page, read operations).
READ_UNIT_BYTES = 4096
#: "each individual partition is limited to 1,000 write units per second and 3,000 read units per
#: second" (developer guide, warm-throughput-scenarios.html): one item is one partition.
HOT_PARTITION_READ_UNITS = 3_000
#: The simulation's start: a fixed UTC second, so slot names (and so item sizes) repeat exactly.
SIMULATION_EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SIMULATED_CONSUMERS = (100, 1_000)
SIMULATED_CALLS_PER_MINUTE = (1_000,)


def attribute_bytes(name: str, value: dict[str, Any]) -> int:
    """One attribute's size as DynamoDB counts it (ITEM_SIZE_DOC), for the S and N values the ledger writes."""
    size = len(name.encode())
    if "S" in value:
        return size + len(value["S"].encode())
    digits = value["N"].lstrip("-").replace(".", "").strip("0") or "0"
    return size + math.ceil(len(digits) / 2) + 1


def item_bytes(item: dict[str, Any] | None) -> int:
    return sum(attribute_bytes(name, value) for name, value in (item or {}).items())


class SimulatedDynamoDB:
    """A DynamoDB client for SharedLedger over moto's DynamoDB backend in this process, with no HTTP and
    no threads: moto evaluates each UpdateItem's condition and update as in the test suite, one call at
    a time on the simulation's clock. It counts what DynamoDB would charge (write units on the larger
    of the item before and after, read units per 4 KB) per simulated second; it never throttles, so the
    seconds above a partition's limits are what the design asks of one item, not what it would get."""

    def __init__(self, clock: Callable[[], float]) -> None:
        from moto.dynamodb.models import DynamoDBBackend

        self.clock = clock
        self.backend = DynamoDBBackend("us-east-1", "123456789012")
        self.backend.create_table(TABLE, schema=[{"AttributeName": "pk", "KeyType": "HASH"}], throughput=None,
                                  attr=[{"AttributeName": "pk", "AttributeType": "S"}], global_indexes=None,
                                  indexes=None, streams=None, billing_mode="PAY_PER_REQUEST", sse_specification=None,
                                  tags=[], deletion_protection_enabled=False, warm_throughput=None)
        self.writes: dict[int, int] = {}
        self.write_units: dict[int, int] = {}
        self.read_units: dict[int, int] = {}
        self.conditional_failures = 0
        self.largest_item = 0
        #: the largest item's bytes by attribute family (ATTRIBUTE_FAMILIES), and how many attributes each
        self.largest_item_bytes: dict[str, int] = {}
        self.largest_item_attributes: dict[str, int] = {}
        #: failed conditions by the clause that failed (CONFLICT_CAUSES)
        self.failures_by_cause: dict[str, int] = {}
        self._items: dict[str, tuple[dict[str, Any], int]] = {}  # the item as last written, and its bytes

    def _item(self, key: dict[str, Any]) -> dict[str, Any] | None:
        cached = self._items.get(key["pk"]["S"])
        return dict(cached[0]) if cached is not None else None

    def _size(self, key: dict[str, Any]) -> int:
        cached = self._items.get(key["pk"]["S"])
        return cached[1] if cached is not None else 0

    def _charge(self, counter: dict[int, int], units: int, *, write: bool) -> None:
        second = int(self.clock() - SIMULATION_EPOCH)
        counter[second] = counter.get(second, 0) + units
        if write:
            self.writes[second] = self.writes.get(second, 0) + 1

    def update_item(self, **request: Any) -> dict[str, Any]:
        from botocore.exceptions import ClientError
        from moto.dynamodb.exceptions import ConditionalCheckFailed

        before = self._item(request["Key"])
        before_bytes = self._size(request["Key"])
        try:
            updated = self.backend.update_item(
                request["TableName"], request["Key"], request["UpdateExpression"],
                request.get("ExpressionAttributeNames", {}), request.get("ExpressionAttributeValues", {}),
                condition_expression=request.get("ConditionExpression"),
                return_values_on_condition_check_failure=request.get("ReturnValuesOnConditionCheckFailure"))
        except ConditionalCheckFailed:
            self.conditional_failures += 1
            cause = conflict_cause(request, before or {})
            self.failures_by_cause[cause] = self.failures_by_cause.get(cause, 0) + 1
            # ASSUMPTION, not found on an AWS page: a failed conditional write is charged as a write of the
            # item as it was (it counts only in the write-unit figures; conflicts are counted apart)
            self._charge(self.write_units, max(1, math.ceil(before_bytes / WRITE_UNIT_BYTES)), write=True)
            raise ClientError({"Error": {"Code": "ConditionalCheckFailedException",
                                         "Message": "The conditional request failed"}, "Item": before},
                              "UpdateItem") from None
        after = updated.to_json()["Attributes"]
        after_bytes = item_bytes(after)
        self._items[request["Key"]["pk"]["S"]] = (after, after_bytes)
        if after_bytes > self.largest_item:
            self.largest_item = after_bytes
            self.largest_item_bytes, self.largest_item_attributes = {}, {}
            for name, value in after.items():
                family = attribute_family(name)
                self.largest_item_bytes[family] = self.largest_item_bytes.get(family, 0) + attribute_bytes(name, value)
                self.largest_item_attributes[family] = self.largest_item_attributes.get(family, 0) + 1
        self._charge(self.write_units, max(1, math.ceil(max(before_bytes, after_bytes) / WRITE_UNIT_BYTES)), write=True)
        return {"Attributes": dict(after)}

    def get_item(self, **request: Any) -> dict[str, Any]:
        item = self._item(request["Key"])
        self._charge(self.read_units, max(1, math.ceil(self._size(request["Key"]) / READ_UNIT_BYTES)), write=False)
        return {"Item": item} if item is not None else {}


#: The quota item's attribute families (pacer_runtime.ledger's docstring, "The item"), by name prefix.
ATTRIBUTE_FAMILIES = (("s#", "slots"), ("o#", "output slots"), ("h#", "consumers (h#)"),
                      ("oh#", "output consumers (oh#)"), ("w#", "wants (w#)"), ("d#", "days (d#)"))


def attribute_family(name: str) -> str:
    """Which part of the ledger's item an attribute is (ATTRIBUTE_FAMILIES; the rest are fixed attributes)."""
    for prefix, family in sorted(ATTRIBUTE_FAMILIES, key=lambda pair: -len(pair[0])):
        if name.startswith(prefix):
            return family
    return "fixed (pk, held, wanted, expires_at...)"


def conflict_cause(request: dict[str, Any], item: dict[str, Any]) -> str:
    """Which clause of a failed ConditionExpression failed on `item` (the item before the write), by the
    ledger's placeholders: a pinned expired slot (#e, #f: another writer removed or changed it), a pinned
    consumer attribute (#p, #g: one removed with its last slot), the want pins (#wanted, #wanted_by, #pw),
    a carried return's slot gone (attribute_exists), or else a ceiling (the window, the consumer's, the day)."""
    condition = request.get("ConditionExpression") or ""
    names, values = request.get("ExpressionAttributeNames", {}), request.get("ExpressionAttributeValues", {})
    failed = {placeholder[1:].rstrip("0123456789") for placeholder, value in re.findall(r"(#\w+) = (:\w+)", condition)
              if item.get(names[placeholder]) != values[value]}
    for kinds, cause in (({"e", "f"}, "an expired slot another writer removed"),  # its consumer's pin fails with it
                         ({"p", "g"}, "a consumer attribute pinned for removal"), ({"a"}, "a repair's pin")):
        if failed & kinds:
            return cause
    if failed:
        return "a want or priority pin"
    if "attribute_not_exists(#wanted)" in condition and names.get("#wanted") in item:
        return "a want or priority pin"
    for placeholder in re.findall(r"attribute_exists\((#\w+)\)", condition):
        if names[placeholder] not in item:
            return "a carried return's slot gone"
    return "a ceiling (the window, the consumer's or the day's)"


def simulate(consumers: int, calls_per_minute: float, *, plan: dict[str, Any], load: float, minutes: float,
             seed: int) -> dict[str, Any]:
    """A deterministic event simulation of the ledger protocol's writes: `consumers` SharedLedger
    consumers (the real code) on one quota item sized so that `calls_per_minute` calls go through it (the
    quota: settled tokens x calls_per_minute, the settlement binding), Poisson arrivals of `load` x that
    with 70% to consumer 0, each call reserving what QuotaPacer holds for the plan's mean call, lasting
    the plan's call_seconds and settling to the plan's settled tokens. Each consumer asks the ledger for one call at a time, in arrival order (the
    pacer's head waiter); a refusal waits its retry_in. Writes are instantaneous and in time order, so
    a conflict is a write decided on a view older than another consumer's write (what DynamoDB's
    round trips add to it is not modelled)."""
    import heapq

    from pacer_runtime.ledger import SharedLedger
    from pacer_runtime.quota_pacer import QuotaPacer

    load_before = _load()
    quota = plan["settled_per_request"] * calls_per_minute
    # what QuotaPacer holds for the plan's mean call (prompt + max_tokens x burndown), and what it settles to
    reserve = QuotaPacer(quota, burndown=EXPERIMENT_MODEL.burndown).reservation(round(plan["mean_input_tokens"]),
                                                                                  plan["max_tokens"])
    settle, call_seconds = plan["settled_per_request"], plan["call_seconds"]
    now = [SIMULATION_EPOCH]
    table = SimulatedDynamoDB(lambda: now[0])
    ledgers = [SharedLedger(TABLE, ledger_id="quota", consumer=f"c{i}", quota_tpm=quota, floor_tpm=quota / consumers,
                            skew_seconds=LEDGER_SKEW_MODEL_SECONDS, client=table, clock=lambda: now[0],
                            sleep=lambda seconds: None, rng=random.Random(seed * 1_000_003 + i))
               for i in range(consumers)]
    arrivals = workload([None], calls_per_minute * load, minutes, consumers, seed)
    events: list[tuple[float, int, str, int, Any]] = []
    order = 0

    def push(when: float, kind: str, who: int, payload: Any = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (when, order, kind, who, payload))

    for due, _, who in arrivals:
        push(SIMULATION_EPOCH + due, "arrive", who, due)
    waiting: list[list[float]] = [[] for _ in range(consumers)]  # arrival times, oldest first
    asking = [False] * consumers  # a retry is scheduled for the consumer's head waiter
    started: list[tuple[float, float]] = []  # (arrival, start) of each admitted call, seconds from the epoch
    settled_saturated = 0.0
    held_peak = 0.0
    end = minutes * 60

    def ask(who: int) -> None:
        nonlocal held_peak
        while waiting[who]:
            decision = ledgers[who].try_reserve(reserve)
            if not hasattr(decision, "slot"):  # a refusal: the head waits, the others behind it
                asking[who] = True
                push(now[0] + max(decision.retry_in, 1e-3), "retry", who)
                return
            arrived = waiting[who].pop(0)
            started.append((arrived, now[0] - SIMULATION_EPOCH))
            held_peak = max(held_peak, ledgers[who].view().held)
            push(now[0] + call_seconds, "settle", who, decision)

    while events:
        when, _, kind, who, payload = heapq.heappop(events)
        now[0] = when
        if kind == "arrive":
            waiting[who].append(payload)
            if not asking[who]:
                ask(who)
        elif kind == "retry":
            asking[who] = False
            ask(who)
        else:
            ledgers[who].settle(payload, settle)
            if 60 <= payload.started - SIMULATION_EPOCH < end:
                settled_saturated += settle
    counts = {k: sum(ledger.counts[k] for ledger in ledgers) for k in ledgers[0].counts}
    busiest_calls = sum(1 for _, _, who in arrivals if who == 0)
    busy = [s for s in table.writes if 60 <= s < end] or [0]
    waits = [start - arrived for arrived, start in started]
    return {
        "seed": seed, "consumers": consumers, "calls_per_minute": calls_per_minute, "load": load,
        "quota_tpm": round(quota), "reserved_per_call": reserve, "settled_per_call": settle, "calls": len(started), "requests": len(arrivals),
        "settled_pct_saturated": round(100 * settled_saturated / ((minutes - 1) * quota), 2),
        "held_peak_pct_of_quota": round(100 * held_peak / quota, 2),
        "ledger_writes_per_call": round(counts["writes"] / max(len(started), 1), 3),
        "ledger_reads_per_call": round(counts["reads"] / max(len(started), 1), 3),
        "ledger_conflicts": counts["conflicts"],
        "busiest_writes_per_call": round(ledgers[0].counts["writes"] / max(busiest_calls, 1), 3),
        "others_writes_per_call": round((counts["writes"] - ledgers[0].counts["writes"])
                                        / max(len(arrivals) - busiest_calls, 1), 3),
        "ledger_counts": counts,
        "conflicts_per_call": round(counts["conflicts"] / max(len(started), 1), 3),
        "conditional_check_failures": table.conditional_failures,
        "ledger_writes_per_second": round(statistics.fmean(table.writes.get(s, 0) for s in busy), 2),
        "ledger_writes_per_second_max": max(table.writes.get(s, 0) for s in busy),
        "write_units_per_second": round(statistics.fmean(table.write_units.get(s, 0) for s in busy), 1),
        "write_units_per_second_max": max(table.write_units.get(s, 0) for s in busy),
        "seconds_over_partition_write_limit": sum(1 for s in busy if table.write_units.get(s, 0) > HOT_PARTITION_WRITE_UNITS),
        "read_units_per_second_max": max(table.read_units.get(s, 0) for s in busy),
        "largest_item_kb": round(table.largest_item / 1024, 1),
        # where the bytes and the writes go (docs/quota.md, "Where one item stops scaling")
        "largest_item_bytes_by_family": dict(sorted(table.largest_item_bytes.items())),
        "largest_item_attributes_by_family": dict(sorted(table.largest_item_attributes.items())),
        "writes_per_call_by_kind": {kind: round(n / max(len(started), 1), 3) for kind, n in (
            ("reservations", counts["reserved"]), ("failed conditions", table.conditional_failures),
            ("returns written alone", counts["flushes"]), ("wants", counts["wants"]),
            ("other", counts["writes"] - counts["reserved"] - table.conditional_failures - counts["flushes"]
             - counts["wants"]))},
        "failed_conditions_by_cause": dict(sorted(table.failures_by_cause.items())),
        "p50_wait_s": percentiles(waits).p50,
        "p99_wait_s": percentiles(waits).p99,
        "load_average": f"{load_before} before, {_load()} after",
    }


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
                        help=f"processes:strategy, comma-separated; strategies: {', '.join(STRATEGIES)}")
    parser.add_argument("--map-items", type=int, default=0,
                        help="ledger runs: a BoundedMap on the same ledger runs this many prompts beside the processes "
                             "(executed by StateMachineRunner; default 0, none)")
    parser.add_argument("--simulate", action="store_true",
                        help="run the event simulation of the ledger's writes instead of processes (no emulator)")
    parser.add_argument("--consumers", default=",".join(map(str, SIMULATED_CONSUMERS)),
                        help="--simulate: numbers of consumers, comma-separated (default 100,1000)")
    parser.add_argument("--calls-per-minute", default=",".join(f"{c:g}" for c in SIMULATED_CALLS_PER_MINUTE),
                        help="--simulate: calls a minute the quota admits, comma-separated (default 1000); "
                             "--load times that arrive")
    parser.add_argument("--out", default=None, help="the results JSON (default bench/results/shared_quota_experiment.json, "
                        "or shared_quota_simulation.json with --simulate)")
    args = parser.parse_args(argv)
    log: Callable[[str], None] = lambda line: print(line, flush=True)  # noqa: E731
    prompts = load_prompts(str(SAMPLE_PROMPTS))
    plan = quota_plan(prompts, EXPERIMENT_MODEL)
    rows: dict[str, list[dict[str, Any]]] = {}
    began = time.time()
    if args.simulate:
        sizes = [(int(n), float(c)) for n in args.consumers.split(",") for c in args.calls_per_minute.split(",")]
        for seed in range(args.seeds):
            for consumers, calls in sizes:
                row = simulate(consumers, calls, plan=plan, load=args.load, minutes=args.minutes, seed=seed)
                rows.setdefault(f"{consumers}:{calls:g}", []).append(row)
                log(f"[{time.time() - began:5.0f}s] seed {seed} {consumers} consumers, a quota of {calls:g} calls/min at "
                    f"{args.load:g}x: "
                    f"{row['settled_pct_saturated']}% of the quota, {row['ledger_writes_per_second']} writes/s "
                    f"(max {row['ledger_writes_per_second_max']}), {row['ledger_conflicts']} conflicts, "
                    f"{row['write_units_per_second']} write units/s (max {row['write_units_per_second_max']}, "
                    f"{row['seconds_over_partition_write_limit']} s over {HOT_PARTITION_WRITE_UNITS:,}), "
                    f"item up to {row['largest_item_kb']} KB, {row['ledger_writes_per_call']} writes/call "
                    f"(load {row['load_average']})")
    else:
        configurations = parse_configurations(args.configurations)
        if args.map_items < 0 or (args.map_items and any(s != "ledger" for _, s in configurations)):
            raise SystemExit(f"--map-items={args.map_items}: a BoundedMap takes part through the ledger, so it runs "
                             "beside ledger configurations only (N:ledger), with a whole number of items >= 1")
        rate = args.load * plan["sustainable_requests_per_minute"]
        for seed in range(args.seeds):
            for processes, strategy in configurations:
                arrivals = workload(prompts, rate, args.minutes, processes, seed)
                row = run(processes, strategy, arrivals, plan=plan, time_scale=args.time_scale, seed=seed,
                          minutes=args.minutes, map_items=map_prompts(prompts, args.map_items, seed))
                rows.setdefault(f"{processes}:{row['strategy']}", []).append(row)
                log(f"[{time.time() - began:5.0f}s] seed {seed} {processes} x {strategy}: {row['settled_pct_saturated']}% "
                    f"saturated ({row['settled_pct_of_quota']}% whole run), {row['throttled_attempts']} throttled, "
                    f"{row['failed_requests']} failed, {row['shed_requests']} shed, busiest p99 {row['busiest_p99_s']} s, "
                    f"p50 {row['p50_s']} s" + (f", {row['ledger_writes_per_call']} ledger writes/call, ledger call p50/p99 {row['ledger_call_p50_model_s']}/{row['ledger_call_p99_model_s']} model s"
                                               if "ledger_writes_per_call" in row else "")
                    + (f"; the Map's {row['map_items']} items: {row['map_model_calls']} calls, {row['map_throttled_attempts']} "
                       f"throttled, {row['map_seconds']} s, succeeded {row['map_succeeded']} {row['map_error'] or ''}"
                       if "map_items" in row else "") + f" (load {row['load_average']})")
    summary = {name: {k: spread([r.get(k) for r in runs]) for k, v in runs[0].items()
                      if isinstance(v, int | float) and k not in ("seed", "processes", "consumers")}
               for name, runs in rows.items()}
    conditions: dict[str, Any] = {
        "load": args.load, "arrival_minutes": args.minutes, "busiest_share": BUSIEST_SHARE,
        "seeds": list(range(args.seeds)), "ledger_skew_model_s": LEDGER_SKEW_MODEL_SECONDS, "plan": plan,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs shared with other work",
    }
    if args.simulate:
        conditions.update({"simulated": True, "epoch": SIMULATION_EPOCH, "max_item_bytes": MAX_ITEM_BYTES,
                           "partition_write_units_per_second": HOT_PARTITION_WRITE_UNITS,
                           "partition_read_units_per_second": HOT_PARTITION_READ_UNITS,
                           "sources": [ITEM_SIZE_DOC, WRITE_UNITS_DOC]})
    else:
        conditions.update({"time_scale": args.time_scale, "pacer_threads": PACER_THREADS,
                           "expiry_margin_model_s": EXPIRY_MARGIN_MODEL_SECONDS, "map_items": args.map_items,
                           "map_share_fraction": MAP_SHARE_FRACTION if args.map_items else None})
    report = {
        "experiment": "shared_quota_simulation" if args.simulate else "shared_quota",
        "description": (simulate.__doc__ or "").split(".")[0] if args.simulate else (__doc__ or "").split("\n\n")[0],
        "conditions": conditions, "runs": rows, "summary": summary, "wall_seconds": round(time.time() - began, 1),
    }
    default = "shared_quota_simulation.json" if args.simulate else "shared_quota_experiment.json"
    out = Path(args.out or ROOT / "bench" / "results" / default)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    log(f"wrote {out}")
    return 0


def map_prompts(prompts: Sequence[Any], count: int, seed: int) -> list[str]:
    """The BoundedMap's items: `count` prompt texts of the workload, drawn by the seed."""
    rng = random.Random(f"map-{seed}")
    picked = [prompts[rng.randrange(len(prompts))] for _ in range(count)]
    return [converse_request(p, EXPERIMENT_MODEL.model_id)["messages"][0]["content"][0]["text"] for p in picked]


def parse_configurations(text: str) -> list[tuple[int, str]]:
    """"4:ledger,16:ledger" -> [(4, "ledger"), (16, "ledger")]; anything else is refused by name."""
    out = []
    for part in text.split(","):
        processes, _, strategy = part.strip().partition(":")
        if not processes.isdigit() or int(processes) < 1 or strategy not in STRATEGIES:
            raise SystemExit(f"--configurations: {part!r} is not processes:strategy with processes >= 1 and a strategy "
                             f"of {', '.join(STRATEGIES)}")
        out.append((int(processes), strategy))
    return out


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


if __name__ == "__main__":
    threading.excepthook = lambda hook: print(f"thread failed: {hook.exc_value!r}", file=sys.stderr)
    sys.exit(main())
