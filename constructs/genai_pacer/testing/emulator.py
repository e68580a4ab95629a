"""A local Bedrock Runtime that real boto3 clients talk to, with Bedrock's quota semantics.

It speaks bedrock-runtime's REST-JSON protocol on loopback: Converse, ConverseStream (binary
event-stream frames with CRCs), InvokeModel and InvokeModelWithResponseStream (native bodies of
Anthropic Messages, Amazon Nova and Meta Llama, see `native`), and CountTokens. Every other
bedrock-runtime operation gets a 501 NotEmulatedException naming it. Signatures are not checked, so
any dummy credentials work. Requests are validated as Bedrock validates them (`validation`), so a
client that skips botocore's checks (Step Functions, raw HTTP) meets the same 400s.

A model is reached by its id, its foundation-model ARN, an inference-profile ARN or an application
inference profile ARN listed in its ModelSpec. Per model it charges a tokens-per-minute quota in
two steps (see `genai_pacer.planning` and `quota`): at the start a reservation of input + cache
writes + cache reads + max_tokens (the model's maximum when unset), throttled if the quota cannot
hold it; at completion a settlement of input + cache writes + output x burndown. The window
(sliding, clock minute or token bucket) and whether burndown applies to the reservation are a
`QuotaModel`. An optional RPM quota counts requests.

Approximations (documented, so results can be read for what they are):
- Tokens: one per 4 characters of text (`approx_tokens`); answers are 3-letter words plus a space,
  one token each, so re-counting an answer gives its reported output tokens. CountTokens answers
  with the same count.
- Latency: TTFT = ttft_seconds + prompt tokens / prefill_tokens_per_second, decode at
  output_tokens_per_second, each times a seeded log-normal jitter. Cache reads skip prefill. A
  service tier may have its own figures (`TierLatency`); tiers share the model's quota.
- Answer length: the request's `requestMetadata["genai-pacer-answer-tokens"]` if given (the
  benchmark sends its expected output length there), else the model's `answer_tokens`; cut at
  max_tokens with the family's stop reason (max_tokens, or length for Llama).
- Prompt caching: text up to the last `cachePoint` block (Anthropic: through the last block with
  `cache_control`) is a prefix; its first use writes the cache, later uses within
  cache_ttl_seconds read it.
- Latency-optimized mode has its own TPM quota; when it is full, the request is served (and charged)
  at standard latency and the response says "standard", without an error. A model without an
  optimized mode serves such requests at standard too.
- Service tiers (ModelSpec documents each rule and which are assumptions): priority, default and
  flex share the model's on-demand quota; `reserved` is charged to the model's own input and output
  tokens-per-minute reservation and overflows to the on-demand quota, served as `default`, when that
  is full. The tier that served a call is echoed where botocore's model puts it (Converse: the
  response's and the stream metadata's `serviceTier`; InvokeModel*: the X-Amzn-Bedrock-Service-Tier
  header), absent when the call named none. Assumed: a tier the ModelSpec does not list, and
  `reserved` without a reservation, are ValidationExceptions; with ModelSpec.serving_slots, calls
  wait for a slot Priority first and Flex last.
- time_scale divides every duration the emulator controls (the quota window, TTFT, decode), so
  time_scale=60 runs a one-minute window in one second. Reported metrics stay in model time. A
  ManualClock (clock=) replaces wall time altogether: model time then moves only when a test
  advances it, so figures and orderings are exact.
- Deterministic for a seed: each request's jitter derives from the seed, the request body and how
  many times that body was seen, not from arrival order.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .._internal.checks import Checks
from .._internal.install import missing
from . import _servicemodel, eventstream, native, responses
from . import validation as v
from ._http import Response, Server
from .clock import Clock, ManualClock, WallClock
from .quota import Charge, Ledger, QuotaModel
from .records import Invocation, InvocationTotals, Tally
from .slots import ServingSlots
from .specs import (
    ANSWER_TOKENS_KEY,
    DEFAULT_TIER,
    EmulatorError,
    LatencyOptimized,
    ModelSpec,
    TierLatency,
    approx_tokens,
)

__all__ = [
    "ANSWER_TOKENS_KEY",
    "EMULATED_OPERATIONS",
    "QUOTA_POOLS",
    "BedrockEmulator",
    "Clock",
    "EmulatorError",
    "Invocation",
    "InvocationTotals",
    "LatencyOptimized",
    "ManualClock",
    "ModelSpec",
    "QuotaModel",
    "TierLatency",
    "WallClock",
    "approx_tokens",
]

EMULATED_OPERATIONS = tuple(v.OPERATIONS.values())
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024  # above InvokeModel's 25,000,000-byte body limit, which Bedrock answers itself
INVOKE_BODY_LIMIT = 25_000_000
_WORDS = ("the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was",
          "one", "our", "out", "day", "get", "has", "him", "his", "how", "man", "new", "now", "old",
          "see", "two", "way", "who", "boy", "did", "its", "let", "put", "say", "she", "too", "use")
#: A model's quotas: the on-demand pool (priority, default, flex; on bedrock-mantle its input tokens
#: per minute), the latency-optimized mode's own, the Reserved tier reservation's input and output
#: budgets, the bedrock-runtime daily token quota and the bedrock-mantle output tokens per minute.
QUOTA_POOLS = ("standard", "optimized", "reserved-input", "reserved-output", "daily", "output")
_PATH = re.compile(r"/model/(?P<model>.+)/(?P<op>converse|converse-stream|invoke|invoke-with-response-stream|count-tokens)")


@dataclass
class _Fault:
    error_type: str
    status: int
    stream_member: str | None  # the event union member an in-stream fault is sent as
    model_id: str | None
    operations: tuple[str, ...]  # the emulated operations botocore's model lets return it (in this mode)
    after_tokens: int | None
    message: str

    def error(self) -> EmulatorError:
        return EmulatorError(self.error_type, self.message, self.status)


DEFAULT_MODEL = ModelSpec("us.amazon.nova-lite-v1:0", context_window=300_000)


@dataclass
class _Hold:
    """What an admitted request holds until it settles: the tier and latency that serve it, and its
    charges, each with what it settles to ("quota": input + cache writes + output x burndown, "day":
    the same on the daily token quota, "input": input + cache writes, "output": output)."""

    tier: str | None
    latency: str
    charges: list[tuple[Ledger, Charge, str]]
    reserved: int  # tokens reserved at the start, over all charges
    output: Ledger | None = None  # bedrock-mantle's output tokens per minute, counted as generated

    @property
    def from_reservation(self) -> bool:
        return self.tier == "reserved"


class BedrockEmulator:
    """Start with `with BedrockEmulator([ModelSpec(...)]) as bedrock:` and point clients at
    `bedrock.endpoint_url` (or use `bedrock.client()`). Without models it serves DEFAULT_MODEL.

    quota: the quota algorithm (QuotaModel). Default: a sliding one-minute window keyed by request
        start, max_tokens reserved without burndown (the reference notes' reading).
    connection_setup_seconds: delays the first request on each new connection, standing in for the
        TLS handshake a real endpoint costs (loopback HTTP has none). Default: 0.
    connection_timeout_seconds: wall seconds a connection may sit idle (or half-open) before its
        thread lets it go. Default: 60.
    max_body_bytes: larger request bodies get a 413 without being read. Default: 32 MiB.
    max_invocations: how many records `invocations` keeps (the oldest are dropped); `totals` counts
        every request regardless. Default: 100,000.
    clock: the model time the emulator runs on (quota windows, latencies, queue waits): a
        ManualClock for exact, machine-independent figures in tests. Default: a WallClock at
        time_scale (time_scale applies to the wall clock only, so give one or the other).
    """

    def __init__(
        self,
        models: Iterable[ModelSpec] = (),
        *,
        seed: int = 0,
        time_scale: float = 1.0,
        host: str = "127.0.0.1",
        port: int = 0,
        connection_setup_seconds: float = 0.0,
        quota: QuotaModel | None = None,
        connection_timeout_seconds: float = 60.0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_invocations: int = 100_000,
        clock: Clock | None = None,
    ):
        specs = list(models) or [DEFAULT_MODEL]
        with Checks("BedrockEmulator") as check:
            check.number("time_scale", time_scale, above=0, fix="60 runs a one-minute quota window in 1 s")
            check.number("connection_setup_seconds", connection_setup_seconds, minimum=0)
            check.number("connection_timeout_seconds", connection_timeout_seconds, above=0,
                         fix="wall seconds an idle connection is kept")
            for name, value in (("max_body_bytes", max_body_bytes), ("max_invocations", max_invocations)):
                if check.instance(name, value, int, "a whole number"):
                    check.number(name, value, minimum=1)
            quota_ok = quota is None or check.instance("quota", quota, QuotaModel, "QuotaModel(window=..., endpoint=...)")
            if clock is not None:
                check.rule(all(callable(getattr(clock, m, None)) for m in ("now", "sleep", "wall_seconds")),
                           f"clock={clock!r} is not a clock: pass ManualClock(...) or WallClock(time_scale)", id="clock.type")
                check.rule(time_scale == 1.0, f"time_scale={time_scale!r} and clock= were both given: time_scale "
                           "sets the default wall clock, so give one or the other", id="time_scale.with-clock")
            for i, spec in enumerate(specs):
                if check.instance(f"models[{i}]", spec, ModelSpec, "ModelSpec(model_id, ...)") and quota_ok:
                    _check_endpoint(check, spec, quota or QuotaModel())
            ids = [str(getattr(spec, "model_id", "")) for spec in specs]
            check.rule(len(set(ids)) == len(ids), f"models has duplicate model ids {sorted({i for i in ids if ids.count(i) > 1})}; "
                       "give each ModelSpec its own id", id="models.duplicate-id")
        self.models = {spec.model_id: spec for spec in specs}
        self.seed, self.time_scale, self._address = seed, time_scale, (host, port)
        self.connection_setup_seconds = connection_setup_seconds
        self.connection_timeout_seconds = connection_timeout_seconds
        self.max_body_bytes = max_body_bytes
        self.quota = quota or QuotaModel()
        self.clock: Clock = clock or WallClock(time_scale)
        self._lock = threading.Lock()
        self._ledgers: dict[tuple[str, str], Ledger] = {}
        self._slots: dict[str, ServingSlots] = {}
        for spec in self.models.values():
            self._ledgers[(spec.model_id, "standard")] = self.quota.ledger(spec.tpm_quota, spec.rpm_quota)
            if self.quota.mantle:
                assert spec.output_tpm_quota is not None
                self._ledgers[(spec.model_id, "output")] = self.quota.ledger(spec.output_tpm_quota, None)
            else:
                self._ledgers[(spec.model_id, "daily")] = self.quota.daily_ledger(spec.daily_quota)
            if spec.latency_optimized:
                self._ledgers[(spec.model_id, "optimized")] = self.quota.ledger(spec.latency_optimized.tpm_quota, None)
            if spec.has_reservation:
                assert spec.reserved_input_tpm is not None and spec.reserved_output_tpm is not None
                self._ledgers[(spec.model_id, "reserved-input")] = self.quota.ledger(spec.reserved_input_tpm, None)
                self._ledgers[(spec.model_id, "reserved-output")] = self.quota.ledger(spec.reserved_output_tpm, None)
            if spec.serving_slots is not None:
                self._slots[spec.model_id] = ServingSlots(spec.serving_slots, self.clock)
        self._cache: dict[tuple[str, str], float] = {}
        self._seen: dict[str, int] = {}
        self._faults: deque[_Fault] = deque()
        self._invocations: deque[Invocation] = deque(maxlen=max_invocations)
        self._tally = Tally()
        self._connections = 0
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> BedrockEmulator:
        if self._server is None:
            self._server = Server(self._address, self._dispatch, connection_timeout=self.connection_timeout_seconds,
                                  max_body_bytes=self.max_body_bytes, on_connection=self._on_connection)
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                            name="bedrock-emulator", daemon=True)  # stop() waits one poll
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> BedrockEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the emulator is not running: call start() or use it as a context manager")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def client(self, **config: Any) -> Any:
        """A boto3 bedrock-runtime client for this emulator (dummy credentials); config goes to
        botocore's Config (max_pool_connections, retries, parameter_validation, ...)."""
        try:
            import boto3
            from botocore.config import Config
        except ModuleNotFoundError as error:
            raise missing("BedrockEmulator.client() (a boto3 client; the emulator itself needs only the "
                          "standard library, so any HTTP client can use endpoint_url)", "boto3", error) from error
        return boto3.client(
            "bedrock-runtime",
            region_name="us-east-1",
            endpoint_url=self.endpoint_url,
            aws_access_key_id="emulator",
            aws_secret_access_key="emulator",
            config=Config(**config),
        )

    # ---- control and inspection --------------------------------------------------------------
    def fail_next(
        self,
        error_type: str = "ServiceUnavailableException",
        *,
        model_id: str | None = None,
        operation: str | None = None,
        after_tokens: int | None = None,
        count: int = 1,
        message: str = "injected by the emulator",
    ) -> None:
        """Make the next `count` requests that can return error_type fail with it.

        Only errors botocore's bedrock-runtime model lists for an operation can be injected into it;
        with after_tokens, a streaming request fails inside its stream after that many tokens, and
        only the exceptions its event union carries are allowed. A fault waits for the first request
        it fits (its model_id, its operation, a stream when after_tokens is set).
        """
        service = _servicemodel.load()
        if service is None:
            raise missing("BedrockEmulator.fail_next (it checks error types against botocore's bedrock-runtime "
                          "service model)", "botocore", ModuleNotFoundError(name="botocore"))
        streamed = after_tokens is not None

        def allowed(name: str) -> Iterable[str]:
            op = service.operations[name]
            return (op.stream_errors or {}) if streamed else op.errors

        where = " inside its stream (after_tokens)" if streamed else ""
        with Checks("fail_next") as check:
            if model_id is not None:
                check.rule(self._resolve(model_id) is not None,
                           f"model_id={model_id!r} is not a model this emulator serves ({', '.join(self.models)})", id="model_id.not-served")
            if operation is not None:
                check.one_of("operation", operation, EMULATED_OPERATIONS)
            if streamed and check.instance("after_tokens", after_tokens, int, "a whole number of tokens or None"):
                check.number("after_tokens", after_tokens, minimum=0)
            if check.instance("count", count, int, "a whole number"):
                check.number("count", count, minimum=1)
            check.text("message", message)
            candidates = [operation] if operation in EMULATED_OPERATIONS else list(EMULATED_OPERATIONS)
            targets = tuple(name for name in candidates if error_type in allowed(name))
            if not targets:
                listed = "; ".join(f"{name}: {', '.join(sorted(allowed(name))) or 'none'}" for name in candidates)
                check.fail(f"error_type={error_type!r} is not an error botocore's model lets "
                           f"{operation or 'any emulated operation'} return{where}; allowed{where}: {listed}", id="error_type.not-in-botocore-model")
        spec = self._resolve(model_id) if model_id else None
        stream_member = service.operations[targets[0]].stream_errors or {}
        fault = _Fault(
            error_type=error_type,
            status=service.statuses.get(error_type, 500),
            stream_member=stream_member.get(error_type) if streamed else None,
            model_id=spec.model_id if spec else None,
            operations=targets,
            after_tokens=after_tokens,
            message=message,
        )
        with self._lock:
            self._faults.extend(fault for _ in range(count))

    @property
    def invocations(self) -> list[Invocation]:
        """The most recent max_invocations requests, oldest first."""
        with self._lock:
            return list(self._invocations)

    @property
    def totals(self) -> InvocationTotals:
        """Counts and token sums over every request so far (completed ones; in_flight says how many are not)."""
        with self._lock:
            return self._tally.snapshot()

    @property
    def connections_opened(self) -> int:
        """TCP connections accepted so far: a client whose pool is too small opens many."""
        return self._connections

    def quota_used(self, model_id: str, pool: str = "standard") -> float:
        """Tokens a quota of the model holds right now (reservations of requests in flight included).

        pool (QUOTA_POOLS): "standard", the on-demand pool priority, default and flex share (on
        bedrock-mantle, its input tokens per minute); "optimized", the latency-optimized mode's;
        "reserved-input" and "reserved-output", the Reserved tier reservation's budgets; "daily",
        the bedrock-runtime daily token quota's day so far; "output", bedrock-mantle's output tokens
        generated in the window.
        """
        key = (model_id, pool)
        if key not in self._ledgers:
            with Checks("quota_used") as check:
                check.one_of("pool", pool, QUOTA_POOLS)
                check.rule(model_id in self.models, f"model_id={model_id!r} is not a model this emulator serves "
                           f"({', '.join(self.models)})", id="model_id.not-served-quota")
                check.fail(f"{model_id} has no {pool!r} quota (no latency-optimized mode or reservation in its ModelSpec; "
                           f"'daily' is a bedrock-runtime quota and 'output' a bedrock-mantle one, and this emulator "
                           f"charges {self.quota.endpoint}'s)", id="pool.no-such-quota")
        with self._lock:
            return self._ledgers[key].used(self.model_seconds())

    def queued(self, model_id: str) -> int:
        """Calls waiting for one of the model's serving slots right now (0 without ModelSpec.serving_slots)."""
        slots = self._slots.get(model_id)
        return slots.waiting if slots else 0

    def model_seconds(self) -> float:
        """Model time since start: wall time x time_scale, or the ManualClock's time."""
        return self.clock.now()

    # ---- internals ---------------------------------------------------------------------------
    def _resolve(self, identifier: str) -> ModelSpec | None:
        """The model an identifier reaches: its id first, then every other accepted form."""
        return self.models.get(identifier) or next((s for s in self.models.values() if s.answers(identifier)), None)

    def _sleep(self, model_seconds: float) -> None:
        if model_seconds > 0:
            self.clock.sleep(model_seconds)

    def _on_connection(self) -> None:
        with self._lock:
            self._connections += 1
        time.sleep(self.connection_setup_seconds)  # once per connection, like a handshake

    def _take_fault(self, req: v.Request) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.model_id in (None, req.spec.model_id) and req.operation in fault.operations:
                    self._faults.remove(fault)
                    return fault
        return None

    def _rng(self, operation: str, model_id: str, raw: bytes) -> random.Random:
        digest = hashlib.sha256(f"{operation}|{model_id}|".encode() + raw).hexdigest()
        with self._lock:
            seen = self._seen[digest] = self._seen.get(digest, 0) + 1
        return random.Random(f"{self.seed}|{digest}|{seen}")

    def _cache_tokens(self, model_id: str, prefix: str, ttl: float) -> tuple[int, int]:
        """(cache reads, cache writes) for a cached prefix."""
        if not prefix:
            return 0, 0
        key, now = (model_id, hashlib.sha256(prefix.encode()).hexdigest()), self.model_seconds()
        with self._lock:
            hit = self._cache.get(key, -math.inf) > now - ttl
            self._cache[key] = now
        tokens = approx_tokens(prefix)
        return (tokens, 0) if hit else (0, tokens)

    def _admit(self, req: v.Request, prompt_tokens: int, charged_input: int) -> _Hold:
        """Charge the quota the call's tier uses, or throttle it.

        `reserved` first tries the reservation (charged_input on the input budget, max_tokens on the
        output budget) and overflows to the on-demand pool as `default`; then, as for every tier,
        the optimized quota if asked and available, else the on-demand pool (prompt + max_tokens).
        """
        spec = req.spec
        model_id = spec.model_id
        with self._lock:
            now = self.model_seconds()
            if req.service_tier == "reserved":
                held = self._reserve_all(now, [((model_id, "reserved-input"), charged_input, "input"),
                                               ((model_id, "reserved-output"), req.max_tokens, "output")])
                if held is not None:
                    return _Hold("reserved", "standard", held, charged_input + req.max_tokens)
            tier = DEFAULT_TIER if req.service_tier == "reserved" else req.service_tier  # the overflow is served at default
            if self.quota.mantle:
                return self._admit_mantle(tier, model_id, charged_input + req.max_tokens, now)
            tokens = self.quota.reservation(prompt_tokens, req.max_tokens, spec.burndown)
            daily = self._ledgers[(model_id, "daily")]
            if req.latency == "optimized" and (model_id, "optimized") in self._ledgers:
                held = self._reserve_all(now, [((model_id, "optimized"), tokens, "quota"), ((model_id, "daily"), tokens, "day")])
                if held is not None:
                    return _Hold(tier, "optimized", held, tokens)
            ledger = self._ledgers[(model_id, "standard")]
            charge = ledger.reserve(tokens, now)
            day = daily.reserve(tokens, now) if not isinstance(charge, str) else charge
            if isinstance(day, str) and not isinstance(charge, str):
                ledger.settle(charge, 0, now)  # the minute had room but the day did not: release it
                charge = DAILY_THROTTLE
        if isinstance(charge, str) or isinstance(day, str):
            raise EmulatorError("ThrottlingException", f"Too many {charge}, please wait before trying again.")
        return _Hold(tier, "standard", [(ledger, charge, "quota"), (daily, day, "day")], tokens)

    def _admit_mantle(self, tier: str | None, model_id: str, tokens: int, now: float) -> _Hold:
        """bedrock-mantle: input + cache writes + max_tokens against the input tokens per minute, and
        no new call while the output tokens per minute are spent (quota.MANTLE_QUOTAS_DOC); call
        with the lock held."""
        output = self._ledgers[(model_id, "output")]
        if output.full(now):
            raise EmulatorError("ThrottlingException", f"Too many {MANTLE_OUTPUT_THROTTLE}, please wait before trying again.")
        ledger = self._ledgers[(model_id, "standard")]
        charge = ledger.reserve(tokens, now)
        if isinstance(charge, str):
            raise EmulatorError("ThrottlingException", f"Too many {MANTLE_INPUT_THROTTLE}, please wait before trying again.")
        return _Hold(tier, "standard", [(ledger, charge, "input")], tokens, output=output)

    def _reserve_all(self, now: float, asks: list[tuple[tuple[str, str], int, str]]) -> list[tuple[Ledger, Charge, str]] | None:
        """Reserve on every ledger or on none (a partial hold is released); call with the lock held."""
        held: list[tuple[Ledger, Charge, str]] = []
        for key, tokens, kind in asks:
            ledger = self._ledgers[key]
            charge = ledger.reserve(tokens, now)
            if isinstance(charge, str):
                for taken, taken_charge, _ in held:
                    taken.settle(taken_charge, 0, now)
                return None
            held.append((ledger, charge, kind))
        return held

    def _record(self, record: Invocation) -> None:
        with self._lock:
            if len(self._invocations) == self._invocations.maxlen:
                self._tally.forgotten += 1
            self._invocations.append(record)
            self._tally.requests += 1

    def _complete(self, record: Invocation, outcome: str | None = None, message: str = "") -> None:
        """Set the outcome (if still in flight) and add the record to the totals, once."""
        with self._lock:
            if record.outcome == "in-flight" and outcome:
                record.outcome, record.message = outcome, message
            if not record.counted:
                record.counted = True
                self._tally.add(record)

    def _dispatch(self, method: str, path: str, raw: bytes, headers: dict[str, str], out: Response) -> None:
        """Route one HTTP request: an emulated operation, another bedrock-runtime operation, or nothing."""
        route = path.split("?", 1)[0]
        match = _PATH.fullmatch(route)
        if match and method == "POST":
            self._handle(v.OPERATIONS[match["op"]], unquote(match["model"]), raw, headers, out)
            return
        service = _servicemodel.load()
        name = service.operation_at(method, route) if service else None
        serves = f"BedrockEmulator serves {', '.join(EMULATED_OPERATIONS)}"
        if name:
            out.error(EmulatorError("NotEmulatedException", f"{name} is not emulated: {serves}."))
        else:
            out.error(EmulatorError("UnknownOperationException", f"no bedrock-runtime operation at {method} {route}; {serves}."))

    def _handle(self, operation: str, model_path: str, raw: bytes, headers: dict[str, str], out: Response) -> None:
        """Serve one request onto `out`; every failure becomes the service's error shape."""
        record = Invocation(model_id=model_path, operation=operation, started=self.model_seconds(),
                            request_id=out.request_id)
        self._record(record)
        try:
            req = self._parse(operation, model_path, raw, headers)
            record.model_id, record.requested_latency, record.max_tokens, record.service_tier = (
                req.spec.model_id, req.latency, req.max_tokens, req.service_tier)
            fault = self._take_fault(req)
            if fault and fault.after_tokens is None:
                raise fault.error()
            if operation == "CountTokens":
                record.input_tokens = approx_tokens(req.prompt)
                self._complete(record, "ok")
                out.json(200, {"inputTokens": record.input_tokens})
                return
            self._serve(req, raw, record, out, fault)
        except EmulatorError as error:
            self._complete(record, "throttled" if error.error_type == "ThrottlingException" else error.error_type,
                           error.message)
            out.error(error)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self._complete(record, "client-disconnected")
            raise
        except Exception as error:  # a bug here still answers in the service's shape, never a dropped socket
            self._complete(record, "InternalServerException", repr(error))
            out.error(EmulatorError("InternalServerException", f"emulator error: {error!r}"))

    def _parse(self, operation: str, model_path: str, raw: bytes, headers: dict[str, str]) -> v.Request:
        spec = self._resolve(model_path)
        if spec is None:
            raise v.invalid(f"{v.INVALID_MODEL} (BedrockEmulator serves {', '.join(self.models)}: by id, "
                            "foundation-model ARN, inference-profile ARN, or an application inference profile "
                            "ARN listed in ModelSpec.application_profiles)")
        if operation.startswith("InvokeModel") and len(raw) > INVOKE_BODY_LIMIT:
            raise v.invalid("1 validation error detected: Value at 'body' failed to satisfy constraint: "
                            f"Member must have length less than or equal to {INVOKE_BODY_LIMIT}")
        body = v.json_object(raw)
        if operation.startswith("Converse"):
            return v.converse(operation, spec, body)
        if operation.startswith("InvokeModel"):
            return native.read(operation, spec, body, headers)
        return native.count_tokens_request(spec, body)

    def _serve(self, req: v.Request, raw: bytes, record: Invocation, out: Response, fault: _Fault | None) -> None:
        spec = req.spec
        cache_read, cache_write = self._cache_tokens(spec.model_id, req.cached_prefix, spec.cache_ttl_seconds)
        input_tokens = max(approx_tokens(req.prompt) - cache_read - cache_write, 0)
        record.input_tokens, record.cache_read_tokens, record.cache_write_tokens = input_tokens, cache_read, cache_write
        prompt_tokens = input_tokens + cache_write + cache_read
        record.reserved = (input_tokens + cache_write + req.max_tokens if self.quota.mantle  # what a throttle refused
                           else self.quota.reservation(prompt_tokens, req.max_tokens, spec.burndown))
        hold = self._admit(req, prompt_tokens, input_tokens + cache_write)
        record.reserved, record.served_latency, record.served_tier = hold.reserved, hold.latency, hold.tier
        wanted = req.answer_hint or (
            spec.answer_tokens(req.prompt) if callable(spec.answer_tokens) else spec.answer_tokens
        )
        output_tokens = min(max(int(wanted), 1), req.max_tokens)
        cut = wanted > req.max_tokens
        rng = self._rng(_PATH_SEGMENT[req.operation], spec.model_id, raw)
        ttft_base, prefill, decode = spec.speed(hold.tier)
        fast = spec.latency_optimized if hold.latency == "optimized" else None
        ttft = ((fast.ttft_seconds if fast else ttft_base)
                + (input_tokens + cache_write) / prefill) * _jitter(rng, spec.jitter)
        otps = (fast.output_tokens_per_second if fast else decode) * _jitter(rng, spec.jitter)
        words = [rng.choice(_WORDS) + " " for _ in range(output_tokens)]
        settled = False
        slots = None if hold.from_reservation else self._slots.get(spec.model_id)
        holding: ServingSlots | None = None  # the slots a serving slot was taken from
        metered = 0  # output tokens counted on bedrock-mantle's output quota so far

        def meter(generated: int) -> None:
            """Count output tokens on the output quota as they are generated (bedrock-mantle only)."""
            nonlocal metered
            if hold.output is not None and generated > metered:
                with self._lock:
                    hold.output.count(generated - metered, self.model_seconds())
                metered = generated

        def settle(nothing: bool = False) -> None:
            """Free the serving slot and charge what was generated, once: before the last byte goes
            out, on a disconnect, or nothing when the call never reached a serving slot."""
            nonlocal settled
            if not settled:
                settled = True
                if holding is not None:
                    holding.release()  # before the record completes, so a completed call holds no slot
                if not nothing:
                    meter(record.output_tokens)
                quota = input_tokens + cache_write + record.output_tokens * spec.burndown
                owed = {"quota": quota, "day": quota, "input": input_tokens + cache_write, "output": record.output_tokens}
                amounts = [(ledger, charge, 0 if nothing else owed[kind]) for ledger, charge, kind in hold.charges]
                record.settled = sum(amount for (_, _, amount), (_, _, kind) in zip(amounts, hold.charges, strict=True)
                                     if kind != "day")  # the day's charge repeats the minute's
                with self._lock:
                    for ledger, charge, amount in amounts:
                        ledger.settle(charge, amount, self.model_seconds())
                self._complete(record, "client-disconnected")  # the outcome is already set unless the client left

        waited = 0.0
        if slots is not None:
            arrived = self.model_seconds()
            if not slots.acquire(hold.tier, spec.max_queue_seconds):
                refusal = EmulatorError("ThrottlingException", "Too many requests, please wait before trying again.")
                record.queued_ms = round((self.model_seconds() - arrived) * 1000)
                record.outcome, record.message = "throttled", refusal.message
                settle(nothing=True)  # it was never served: its charges are released
                raise refusal
            holding, waited = slots, self.model_seconds() - arrived
            record.queued_ms = round(waited * 1000)
        try:
            if req.streaming:
                self._stream(req, out, words, ttft, otps, cut, record, fault, settle, waited, meter)
            else:
                self._sleep(ttft + output_tokens / otps)
                record.output_tokens, record.outcome = output_tokens, "ok"
                record.latency_ms = round((waited + ttft + output_tokens / otps) * 1000)
                settle()
                out.json(200, responses.body(req, "".join(words), record, cut), responses.headers(req, record))
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            raise  # settled below as client-disconnected
        except Exception as error:
            if record.outcome == "in-flight":
                record.outcome, record.message = "InternalServerException", repr(error)
            raise
        finally:  # whatever was generated is charged, even if the client went away mid-stream
            settle()

    def _stream(self, req: v.Request, out: Response, words: list[str], ttft: float, otps: float, cut: bool,
                record: Invocation, fault: _Fault | None, settle: Callable[[], None], waited: float,
                meter: Callable[[int], None]) -> None:
        """Send the answer as event-stream frames paced at the decode rate (record.output_tokens
        counts what was sent; the reported times include `waited`, the wait for a serving slot)."""
        dialect = responses.stream_for(req)
        out.start_stream(responses.headers(req, record))
        begin = self.model_seconds()
        self._sleep(ttft)
        record.ttft_ms = round((self.model_seconds() - begin + waited) * 1000)
        out.chunk(dialect.start(record))
        sent = 0
        limit = len(words) if not fault else min(fault.after_tokens or 0, len(words))
        pace = 0.05 * self.time_scale  # look at the clock at least every 50 ms of wall time
        while sent < limit:
            due = min(limit, 1 + int((self.model_seconds() - begin - ttft) * otps))
            if due > sent:
                record.output_tokens = due
                meter(due)
                out.chunk(dialect.delta("".join(words[sent:due]), record))
                sent = due
            if sent < limit:
                self._sleep(min(max((sent + 1) / otps + ttft - (self.model_seconds() - begin), 0), pace))
        if fault:
            record.outcome, record.message = fault.error_type, fault.message
            settle()
            out.chunk(eventstream.exception(fault.stream_member or fault.error().stream_type, fault.message))
        else:
            record.latency_ms, record.outcome = round((self.model_seconds() - begin + waited) * 1000), "ok"
            settle()
            out.chunk(dialect.stop(record, cut))
        out.end_stream()


_PATH_SEGMENT = {name: segment for segment, name in v.OPERATIONS.items()}
#: What the emulator's throttle messages say ran out. Bedrock's own wording for these quotas is not
#: documented; the emulator's error is ThrottlingException (429) with "Too many <this>, ...".
DAILY_THROTTLE = "tokens per day"
MANTLE_INPUT_THROTTLE = "input tokens"
MANTLE_OUTPUT_THROTTLE = "output tokens"


def _check_endpoint(check: Checks, spec: ModelSpec, quota: QuotaModel) -> None:
    """Refuse a ModelSpec whose quotas the emulator's quota model would not charge."""
    where = f"ModelSpec {spec.model_id!r}"
    if quota.mantle:
        check.rule(spec.output_tpm_quota is not None, f"{where} has no output_tpm_quota: QuotaModel(endpoint="
                   "'bedrock-mantle') charges separate input (tpm_quota) and output tokens per minute; give "
                   "output_tpm_quota", id="output_tpm_quota.missing-mantle")
        check.rule(spec.rpm_quota is None, f"{where} has rpm_quota={spec.rpm_quota!r}, but the bedrock-mantle endpoint "
                   "applies no requests-per-minute quota; drop it", id="rpm_quota.mantle")
        check.rule(spec.daily_token_quota is None, f"{where} has daily_token_quota={spec.daily_token_quota!r}, a "
                   "bedrock-runtime quota; bedrock-mantle has input and output tokens per minute only; drop it",
                   id="daily_token_quota.mantle")
    else:
        check.rule(spec.output_tpm_quota is None, f"{where} has output_tpm_quota={spec.output_tpm_quota!r}, a "
                   "bedrock-mantle quota, but the emulator charges bedrock-runtime's combined tokens per minute: "
                   "pass quota=QuotaModel(endpoint='bedrock-mantle') or drop it", id="output_tpm_quota.runtime")


def _jitter(rng: random.Random, sigma: float) -> float:
    return math.exp(rng.gauss(0, sigma)) if sigma else 1.0


