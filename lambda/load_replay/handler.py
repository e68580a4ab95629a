"""The load replay's one function: plan a run, replay one worker's share of it, summarize it.

The `LoadReplay` state machine (genai_pacer.benchmark.LoadReplay) calls this function three ways, told
apart by the event's "action":

- {"action": "plan", "run": "<execution name>"}: reads the prompts object once, keeps its ETag so
  every worker replays the same file, and returns the run: {"run": {...}, "workers": [0, 1, ...]}.
  A prompts line that cannot be replayed fails alone: it is left out of the cycle and listed (by
  file:line and why, never its text) in the run's `run.json`; a file with no good line fails the plan.
- {"action": "replay", "worker": w, "cursor": k, "part": p, "run": {...}}: replays worker w's share
  from its k-th request until the share is done or the invocation nears its time budget, writes the
  records of this call to `<run prefix>records/worker-<w>-part-<p>.jsonl` and returns the event for
  the next call ({"cursor": where it stopped, "part": p + 1, "done": ...}). One Lambda invocation
  runs at most 15 minutes (MAX_LAMBDA_SECONDS), so a share longer than that continues over several
  calls; the state machine loops until "done". Between requests the call asks Step Functions whether
  the run's execution (the plan's run["execution"]) is still running (StopWatch): once it was stopped,
  the call sends no more and returns "stopped" (Lambda cannot end a running invocation).
  Closed loop (concurrency U): worker w sends requests w, w + U, w + 2U, ... one after another.
  Open loop (rate, W workers): one seeded Poisson schedule for the whole run (replay.arrivals);
  worker w sends requests w, w + W, ... each at its time on the run's shared clock ("start_at",
  epoch seconds set by the plan), with up to in_flight of them in flight, so arrivals keep to the
  schedule whatever the answers' latency. A request's started_s is its arrival, so its e2e_s counts
  any wait for a free slot.
- {"action": "summarize", "run": {...}}: reads every record back and writes the report a local
  `genai-pacer bench` run writes, computed by the same code (pacer_runtime.replay): `bench.json`
  (settings and summary) and `bench.csv` (one row per request), beside the records.

With LoadReplay(ledger=...) the function's environment holds the quota ledger's variables
(QuotaLedger.environment(share)) and every request is admitted by a QuotaPacer on the quota's shared
ledger (pacer_runtime.ledger.SharedLedger) before it is sent: it holds input + maxTokens x burndown
there and settles to its usage after (a throttle, or a call that never left the client, returns the
hold), so a run never holds more than its share's floor plus what the other consumers leave free.
A closed-loop request the ledger cannot admit before the call's time runs low is not sent and is
replayed by the next call; an open-loop arrival is recorded as failed (AdmissionRejected).

Records hold measurements only (times, token counts, attempts, throttles, error codes, the prompt's
id), never prompt or answer text. A throttle, a timeout or any other failed call is a record with
its error code, never a crash. The run's settings come from the LOAD_REPLAY variable (JSON, set by
the construct); the bedrock-runtime and S3 clients are created once, at module scope.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pacer_runtime import bedrock_client
from pacer_runtime.ledger import ENVIRONMENT as LEDGER_ENVIRONMENT
from pacer_runtime.ledger import LedgerError, SharedLedger
from pacer_runtime.prompts import Prompt, PromptError, parse_each
from pacer_runtime.quota_pacer import NEVER_SENT, AdmissionRejected, QuotaPacer, estimate_input_tokens
from pacer_runtime.replay import (
    THROTTLE_CODES,
    AttemptCounter,
    BenchConfig,
    Sample,
    arrivals,
    measure,
    report_document,
    summarize,
    write_csv,
)

#: One invocation runs at most 900 seconds ("Code can run for up to 15 minutes in a single
#: invocation": https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html; the
#: Timeout setting's maximum, https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html).
MAX_LAMBDA_SECONDS = 900
#: What the function keeps after its last request for writing that call's records to S3.
WRITE_SECONDS = 10
#: The report's file names, as a local run's default (`genai-pacer bench --out DIR` writes bench.json, bench.csv).
REPORT_NAME = "bench"
RECORDS = "records/"
RUN_FILE = "run.json"
#: Rejected prompt lines listed in run.json at most (the rest are counted).
REJECTED_SHOWN = 20
#: Seconds between the plan and the open loop's first arrival: the Map starts its workers meanwhile.
START_LEAD_SECONDS = 5.0
#: How long a closed-loop user the quota ledger admits nothing gives up after (genai_pacer.benchmark.
#: load_replay.DEFAULT_ADMISSION_TIMEOUT, the construct's admission_timeout; a test holds them equal).
ADMISSION_TIMEOUT_SECONDS = 900.0
#: A stopped run's replay calls stop sending: each asks Step Functions for its execution's status
#: (DescribeExecution) between requests. That API's refill rate is 10 a second per account and Region where
#: it is lowest ("Quotas related to API action throttling",
#: https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html); a run's checks take at most
#: STOP_CHECKS_PER_SECOND of it (each worker asks every workers / STOP_CHECKS_PER_SECOND s, at least every
#: MIN_STOP_CHECK_SECONDS), the rest stays the account's. LoadReplay(stop_check_interval=...) sets another.
DESCRIBE_EXECUTION_REFILL_PER_SECOND = 10
STOP_CHECKS_PER_SECOND = 2.0
MIN_STOP_CHECK_SECONDS = 10.0
#: An execution still running (ExecutionStatus, botocore's stepfunctions model); any other status ended it.
RUNNING = "RUNNING"
#: Where a worker that gave up writes why, under the run's prefix; the summary lists them (summary["incomplete"]).
INCOMPLETE = "incomplete/"


class ReplayInputError(ValueError):
    """An event or setting the replay cannot act on (Step Functions shows this name as the error)."""


class AdmissionTimeout(RuntimeError):
    """A closed-loop user the quota ledger admitted no request for admission_timeout: the worker gives up,
    which fails the Workers Map and ends the run "Replay incomplete", its summary naming this (Step
    Functions shows this name as the error)."""


@dataclass(frozen=True)
class Settings:
    """The run's settings, from the LOAD_REPLAY variable the construct sets."""

    config: BenchConfig
    prompts_bucket: str
    prompts_key: str
    results_bucket: str
    results_prefix: str
    workers: int  # closed loop: the concurrency; open loop: the workers the schedule is split across
    in_flight: int  # requests a worker holds in flight (1 in a closed loop)
    call_budget_s: float  # seconds one request may take, retries included: no request starts with less left
    request_cap: int
    start_lead_s: float = START_LEAD_SECONDS  # the plan's start_at is this far ahead of the plan
    admission_timeout_s: float = ADMISSION_TIMEOUT_SECONDS  # with a ledger: a user admitted nothing this long gives up
    stop_check_s: float | None = None  # how often a call asks whether its run was stopped; None: stop_check_interval()

    def stop_check_interval(self) -> float:
        """Seconds between one process's DescribeExecution calls: the run's checks within STOP_CHECKS_PER_SECOND."""
        if self.stop_check_s is not None:
            return self.stop_check_s
        return max(MIN_STOP_CHECK_SECONDS, self.workers / STOP_CHECKS_PER_SECOND)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        raw = environ.get("LOAD_REPLAY")
        if not raw:
            raise ReplayInputError("LOAD_REPLAY is not set: the function runs inside genai_pacer.benchmark.LoadReplay")
        values = json.loads(raw)
        # LoadReplay writes every BenchConfig field (dataclasses.asdict) through Stack.to_json_string,
        # which leaves out null values: a field that may be None and is missing here was None, never
        # the field's default (the open loop's concurrency=None would come back as 8 and refuse the run).
        nullable = {field.name: None for field in fields(BenchConfig) if "None" in str(field.type)}
        config = BenchConfig(**{**nullable, **values.pop("config")})
        return cls(config=config, **values)


SETTINGS = Settings.from_environment() if os.environ.get("LOAD_REPLAY") else None
#: One client per process, sized to the requests a worker holds in flight.
BEDROCK = bedrock_client(
    max_pool_connections=max(SETTINGS.in_flight if SETTINGS else 1, 1),
    max_attempts=3,
    read_timeout=60,
)
S3 = boto3.client("s3")
#: One attempt per stop check: a throttled check is retried by the next one, never backed off mid-run.
SFN = boto3.client("stepfunctions", config=Config(retries={"total_max_attempts": 1}))


class StopWatch:
    """Whether the run's execution was stopped (StopExecution), asked of Step Functions at most every
    `interval_s` on `clock`. Lambda cannot end a running invocation, so a replay call asks between its
    requests and sends no more once its run has ended. A check that fails (throttled, not allowed) never
    ends a run: the call goes on as if it were running."""

    def __init__(self, execution: Any, interval_s: float, *, sfn: Any, clock: Callable[[], float]) -> None:
        self.execution = execution if isinstance(execution, str) and execution else None
        self.interval_s, self.sfn, self.clock = interval_s, sfn, clock
        self.checked_at = clock()  # a call's first check is one interval in: workers start at once, checks spread
        self.status: str | None = None

    def stopped(self) -> bool:
        if self.execution is None or self.sfn is None or self.status is not None:
            return self.status is not None
        now = self.clock()
        if now - self.checked_at < self.interval_s:
            return False
        self.checked_at = now
        try:
            status = self.sfn.describe_execution(executionArn=self.execution)["status"]
        except (BotoCoreError, ClientError):
            return False
        if status != RUNNING:
            self.status = status
        return self.status is not None


def ledger_pacer(settings: Settings, environ: Mapping[str, str] = os.environ, **options: Any) -> QuotaPacer | None:
    """With LoadReplay(ledger=...): the pacer every request of this process is admitted through, on the
    quota's shared ledger (the variables QuotaLedger.environment(share) sets). While the ledger cannot
    be used, the process falls back to its part of the run's floor: the floor over the run's workers."""
    if not environ.get(LEDGER_ENVIRONMENT[0]):
        return None
    ledger = options.pop("ledger", None) or SharedLedger.from_environment(environ)
    fallback = max(ledger.floor_tpm / max(settings.workers, 1), 1.0)
    return QuotaPacer.from_environment(environ, ledger=ledger, fallback_tpm=fallback, **options)


PACER = ledger_pacer(SETTINGS) if SETTINGS else None
#: The error code of a never-sent call (pacer_runtime.replay.error_code names it by its class).
_NEVER_SENT_CODES = frozenset(cls.__name__ for cls in NEVER_SENT)
_PROMPTS: dict[tuple[str, str, str], tuple[list[Prompt], list[str]]] = {}


def handler(event: Any, context: Any) -> dict[str, Any]:
    if SETTINGS is None:
        raise ReplayInputError("LOAD_REPLAY is not set: the function runs inside genai_pacer.benchmark.LoadReplay")
    if not isinstance(event, dict) or event.get("action") not in ("plan", "replay", "summarize"):
        raise ReplayInputError("the event is {'action': 'plan' | 'replay' | 'summarize', ...}")
    if event["action"] == "plan":
        return plan(event, SETTINGS, s3=S3)
    if event["action"] == "summarize":
        return summarize_run(event, SETTINGS, s3=S3)
    return replay_share(event, SETTINGS, client=BEDROCK, s3=S3, pacer=PACER, sfn=SFN,
                        remaining_s=lambda: context.get_remaining_time_in_millis() / 1000)


# ---- the plan --------------------------------------------------------------------------------------


def plan(event: Mapping[str, Any], settings: Settings, *, s3: Any, clock: Callable[[], float] = time.time) -> dict[str, Any]:
    run_id = event.get("run")
    if not isinstance(run_id, str) or not run_id or "/" in run_id:
        raise ReplayInputError(f"the plan's event needs 'run', the execution's name (no '/'), not {type(run_id).__name__}")
    config = settings.config
    total = config.warmup + config.requests
    if total > settings.request_cap:
        raise ReplayInputError(f"warm-up + requests = {total} is above the run's request cap ({settings.request_cap})")
    head = s3.head_object(Bucket=settings.prompts_bucket, Key=settings.prompts_key)
    etag = head["ETag"]
    prompts, rejected = _prompts(s3, settings, etag)
    prefix = f"{settings.results_prefix}{run_id}/"
    run = {"id": run_id, "prefix": prefix, "etag": etag, "start_at": round(clock() + settings.start_lead_s, 3)}
    if isinstance(event.get("execution"), str):  # the execution's ARN: each replay call asks whether it was stopped
        run["execution"] = event["execution"]
    document = {
        "config": asdict(config),
        "run": {**run, "prompts": f"s3://{settings.prompts_bucket}/{settings.prompts_key}", "prompt_lines": len(prompts),
                "rejected_lines": len(rejected), "rejected": rejected[:REJECTED_SHOWN],
                "workers": settings.workers, "in_flight": settings.in_flight},
    }
    s3.put_object(Bucket=settings.results_bucket, Key=prefix + RUN_FILE, Body=json.dumps(document, indent=2).encode(),
                  ContentType="application/json")
    return {"run": run, "workers": list(range(settings.workers))}


def _prompts(s3: Any, settings: Settings, etag: str) -> tuple[list[Prompt], list[str]]:
    """The good prompts of the run's file (the version with this ETag) and why each bad line was refused."""
    cache_key = (settings.prompts_bucket, settings.prompts_key, etag)
    if cache_key not in _PROMPTS:
        body = s3.get_object(Bucket=settings.prompts_bucket, Key=settings.prompts_key, IfMatch=etag)["Body"].read()
        source = f"s3://{settings.prompts_bucket}/{settings.prompts_key}"
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PromptError(f"{source}: not UTF-8 text ({error.reason} at byte {error.start})") from None
        parsed = parse_each(text, source)
        good = [item for item in parsed if isinstance(item, Prompt)]
        bad = [str(item) for item in parsed if isinstance(item, PromptError)]
        if not good:
            raise PromptError(f"{source}: no prompt to replay ({len(bad)} lines refused{': ' + bad[0] if bad else ''})")
        _PROMPTS.clear()
        _PROMPTS[cache_key] = (good, bad)
    return _PROMPTS[cache_key]


# ---- one worker's share -------------------------------------------------------------------------------


def share(worker: int, workers: int, total: int) -> list[int]:
    """The request indices worker `worker` of `workers` sends, in order."""
    return list(range(worker, total, workers))


def replay_share(event: Mapping[str, Any], settings: Settings, *, client: Any, s3: Any,
                 remaining_s: Callable[[], float], clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 perf: Callable[[], float] = time.perf_counter, pacer: QuotaPacer | None = None,
                 sfn: Any = None) -> dict[str, Any]:
    """Replay worker event["worker"]'s share from event["cursor"]; the event of the next call.

    clock (epoch seconds, the run's shared clock), sleep and perf (the measurement's own clock) are
    the process's; a test passes its own. pacer: with LoadReplay(ledger=...), each request is admitted
    by it (the quota's shared ledger) before it is sent and settled with its usage after. sfn: a Step
    Functions client, asked between requests whether the run's execution (run["execution"]) was stopped:
    once it was, the call sends no more, writes what it recorded and returns "stopped"."""
    worker, cursor, part, run = _replay_event(event, settings)
    called_at = clock()
    watch = StopWatch(run.get("execution"), settings.stop_check_interval(), sfn=sfn, clock=clock)
    config = settings.config
    prompts, _ = _prompts(s3, settings, run["etag"])
    indices = share(worker, settings.workers, config.warmup + config.requests)
    start_at = float(run["start_at"])
    counter = AttemptCounter.of(client)
    samples: list[Sample] = []
    lock = threading.Lock()

    def now() -> float:
        return clock() - start_at

    def send(index: int, sample: Sample) -> None:
        prompt = prompts[index % len(prompts)]
        counter.take()
        request = prompt.converse_request(config.model_id, max_tokens=config.max_tokens, latency=config.latency)
        max_tokens = config.max_tokens or prompt.max_tokens or config.model_max_tokens
        ticket = None
        if pacer is not None:  # raises AdmissionRejected when the ledger has no room before the call's time runs low
            ticket = pacer.admit(pacer.reservation(pacer.estimate_input_tokens(request), max_tokens),
                                 max_wait_seconds=max(remaining_s() - settings.call_budget_s - WRITE_SECONDS, 0.0))
            ticket.text_estimate = estimate_input_tokens(request, chars_per_token=pacer.chars_per_token)
        measure(client, request, sample, streaming=config.streaming, now=now, counter=counter,
                max_tokens=max_tokens, burndown=config.burndown, clock=perf)
        if ticket is not None:
            end_ticket(ticket, sample)
        with lock:
            samples.append(sample)

    def send_or_shed(index: int, sample: Sample) -> None:
        """The open loop's arrival: one the ledger cannot admit in time is recorded as failed, never sent."""
        try:
            send(index, sample)
        except AdmissionRejected as rejected:
            sample.error, sample.e2e_s = type(rejected).__name__, round(now() - sample.started_s, 4)
            with lock:
                samples.append(sample)

    def room_for(wait_s: float = 0.0) -> bool:
        return remaining_s() - wait_s >= settings.call_budget_s + WRITE_SECONDS

    position, refused = cursor, False
    if config.concurrency is not None:  # closed loop: one request after another, all users from start_at
        while position < len(indices):
            wait = max(-now(), 0.0)  # before start_at (the plan's lead): every user starts at once
            if not room_for(wait) or watch.stopped():
                break
            if wait > 0:
                sleep(wait)
            index = indices[position]
            try:
                send(index, Sample(index, prompts[index % len(prompts)].id, index < config.warmup, now()))
            except AdmissionRejected:
                refused = True
                break  # not sent: the next call replays it, once the ledger has room
            position += 1
    else:  # open loop: each request at its arrival, up to in_flight at once
        schedule = arrivals((config.rate_per_minute or 0) / 60, config.warmup + config.requests, config.seed)
        futures = []
        with ThreadPoolExecutor(max_workers=settings.in_flight, thread_name_prefix=f"worker-{worker}") as pool:
            while position < len(indices):
                index = indices[position]
                wait = schedule[index] - now()
                if not room_for(max(wait, 0.0)) or watch.stopped():
                    break
                if wait > 0:
                    sleep(wait)
                sample = Sample(index, prompts[index % len(prompts)].id, index < config.warmup, round(now(), 4))
                futures.append(pool.submit(send_or_shed, index, sample))
                position += 1
        for future in futures:
            future.result()  # measure() records a failed call; anything else is a bug to surface
    if pacer is not None and pacer.ledger is not None:
        # The ledger carries each settlement's return to this process's next reservation (pacer_runtime.ledger,
        # "Deferred returns"); this invocation's calls end here and the process may stay frozen: one write
        # gives them back now. Should it fail, the holds leave with their window, never sooner than Bedrock's.
        with contextlib.suppress(LedgerError):
            pacer.ledger.flush()
    if samples:
        samples.sort(key=lambda s: s.index)
        body = "".join(json.dumps(asdict(sample)) + "\n" for sample in samples)
        s3.put_object(Bucket=settings.results_bucket, Key=f"{run['prefix']}{RECORDS}worker-{worker:05d}-part-{part:05d}.jsonl",
                      Body=body.encode(), ContentType="application/x-ndjson")
    following = {"action": "replay", "worker": worker, "cursor": position, "part": part + 1, "run": run,
                 "records": len(samples), "done": position >= len(indices)}
    if watch.status is not None:  # the run ended (StopExecution): nothing reads this event, but a log does
        following["stopped"] = watch.status
        return following
    if refused and position == cursor:  # the ledger admitted nothing this call: since when, across calls
        stalled_since = _stalled_since(event, called_at)
        waited = clock() - stalled_since
        if waited >= settings.admission_timeout_s:
            give_up(s3, settings, run, worker, AdmissionTimeout(
                f"worker {worker}: the quota ledger admitted none of its requests for {waited:,.0f} s (admission_timeout "
                f"{settings.admission_timeout_s:,.0f} s; request {indices[position]} waits): the quota is held by others "
                "beyond the run's floor, or the run's own holds are not returned; read the ledger's metrics"))
        following["stalled_since"] = stalled_since
    return following


def _stalled_since(event: Mapping[str, Any], called_at: float) -> float:
    since = event.get("stalled_since")
    return float(since) if isinstance(since, int | float) and not isinstance(since, bool) else called_at


def give_up(s3: Any, settings: Settings, run: Mapping[str, Any], worker: int, error: Exception) -> None:
    """Write why worker `worker` gives up where the summary reads it (<run prefix>incomplete/), then raise
    `error`: the worker's child execution fails with its name, the Workers Map with it, and the summary
    step that follows lists the reason in the report (summary["incomplete"])."""
    reason = {"worker": worker, "error": type(error).__name__, "cause": str(error)}
    s3.put_object(Bucket=settings.results_bucket, Key=f"{run['prefix']}{INCOMPLETE}worker-{worker:05d}.json",
                  Body=json.dumps(reason).encode(), ContentType="application/json")
    raise error


def end_ticket(ticket: Any, sample: Sample) -> None:
    """Settle a request's hold with its usage, as QuotaPacer.converse does: a throttle returns it (Bedrock
    charged nothing), a call that never left the client too; an answer without usage, or any other error
    (Bedrock may have charged it), keeps the hold until the window forgets it."""
    if sample.ok and sample.input_tokens + sample.cache_write_tokens + sample.cache_read_tokens > 0:
        ticket.settle(input_tokens=sample.input_tokens, output_tokens=sample.output_tokens,
                      cache_write_tokens=sample.cache_write_tokens, cache_read_tokens=sample.cache_read_tokens)
    elif sample.error in THROTTLE_CODES:
        ticket.throttled()
    elif sample.error in _NEVER_SENT_CODES:
        ticket.release()


def _replay_event(event: Mapping[str, Any], settings: Settings) -> tuple[int, int, int, dict[str, Any]]:
    values: list[int] = []
    for name in ("worker", "cursor", "part"):
        value = event.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ReplayInputError(f"a replay event needs a whole number >= 0 for {name}, not {value!r}")
        values.append(value)
    worker, cursor, part = values
    run = event.get("run")
    if not isinstance(run, dict) or not all(key in run for key in ("prefix", "etag", "start_at")):
        raise ReplayInputError("a replay event needs the plan's run (prefix, etag, start_at)")
    if worker >= settings.workers:
        raise ReplayInputError(f"worker {worker} is not one of the run's {settings.workers} workers")
    return worker, cursor, part, run


# ---- the summary --------------------------------------------------------------------------------------


def read_records(s3: Any, bucket: str, prefix: str) -> list[Sample]:
    """Every record written under prefix + records/, in request order."""
    samples: list[Sample] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + RECORDS):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode("utf-8")
            samples.extend(Sample(**json.loads(line)) for line in body.splitlines() if line.strip())
    return sorted(samples, key=lambda s: s.index)


def read_incomplete(s3: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """Why each worker that gave up did (give_up), in worker order."""
    reasons: list[dict[str, Any]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + INCOMPLETE):
        for item in page.get("Contents", []):
            reasons.append(json.loads(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()))
    return sorted(reasons, key=lambda reason: reason["worker"])


def summarize_run(event: Mapping[str, Any], settings: Settings, *, s3: Any) -> dict[str, Any]:
    run = event.get("run")
    if not isinstance(run, dict) or not isinstance(run.get("prefix"), str):
        raise ReplayInputError("a summarize event needs the plan's run (its prefix)")
    prefix = run["prefix"]
    samples = read_records(s3, settings.results_bucket, prefix)
    summary = summarize(samples, settings.config)
    reasons = read_incomplete(s3, settings.results_bucket, prefix)
    if reasons:  # why the run ended before its last request: the workers that gave up, by name
        summary["incomplete"] = reasons
    s3.put_object(Bucket=settings.results_bucket, Key=f"{prefix}{REPORT_NAME}.json",
                  Body=(json.dumps(report_document(settings.config, summary), indent=2) + "\n").encode(),
                  ContentType="application/json")
    buffer = io.StringIO(newline="")
    write_csv(buffer, samples)
    s3.put_object(Bucket=settings.results_bucket, Key=f"{prefix}{REPORT_NAME}.csv", Body=buffer.getvalue().encode(),
                  ContentType="text/csv")
    return {"report": f"s3://{settings.results_bucket}/{prefix}{REPORT_NAME}.json", "requests": summary["requests"],
            "succeeded": summary["succeeded"], "failed": summary["failed"], "throttles": summary["throttles"]}
