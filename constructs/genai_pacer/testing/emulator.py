"""A local Bedrock Runtime that real boto3 clients talk to, with Bedrock's quota semantics.

It speaks bedrock-runtime's REST-JSON protocol on loopback: Converse, ConverseStream (binary
event-stream frames with CRCs), InvokeModel and InvokeModelWithResponseStream. Signatures are not
checked, so any dummy credentials work. Per model it charges a tokens-per-minute quota the way
Bedrock does (see `genai_pacer.planning`): at start it reserves input + cache writes + cache reads
+ max_tokens (the model's maximum when max_tokens is unset) and throttles if the one-minute window
cannot hold that; at completion it settles to input + cache writes + output x burndown. An optional
RPM quota counts requests started in the window.

Approximations (documented, so results can be read for what they are):
- Tokens: one per 4 characters of text (`approx_tokens`); answers are 3-letter words plus a space,
  one token each, so re-counting an answer gives its reported output tokens.
- Latency: TTFT = ttft_seconds + prompt tokens / prefill_tokens_per_second, decode at
  output_tokens_per_second, each times a seeded log-normal jitter. Cache reads skip prefill.
- Answer length: the request's `requestMetadata["genai-pacer-answer-tokens"]` if given (the
  benchmark sends its expected output length there), else the model's `answer_tokens`; cut at
  max_tokens with stopReason "max_tokens".
- Prompt caching: text up to the last `cachePoint` block is a prefix; its first use writes the
  cache, later uses within cache_ttl_seconds read it.
- Latency-optimized mode has its own TPM quota; when it is full, the request is served (and charged)
  at standard latency and the response says "standard", without an error. A model without an
  optimized mode serves such requests at standard too.
- time_scale divides every duration the emulator controls (the quota window, TTFT, decode), so
  time_scale=60 runs a one-minute window in one second. Reported metrics stay in model time.
- Deterministic for a seed: each request's jitter derives from the seed, the request body and how
  many times that body was seen, not from arrival order.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from . import eventstream

__all__ = [
    "ANSWER_TOKENS_KEY",
    "BedrockEmulator",
    "EmulatorError",
    "Invocation",
    "LatencyOptimized",
    "ModelSpec",
    "approx_tokens",
]

ANSWER_TOKENS_KEY = "genai-pacer-answer-tokens"
TOKEN_CHARS = 4
WINDOW_SECONDS = 60.0
_WORDS = ("the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was",
          "one", "our", "out", "day", "get", "has", "him", "his", "how", "man", "new", "now", "old",
          "see", "two", "way", "who", "boy", "did", "its", "let", "put", "say", "she", "too", "use")
_PATH = re.compile(r"/model/(?P<model>.+)/(?P<op>converse|converse-stream|invoke|invoke-with-response-stream)")
_STATUS = {
    "ValidationException": 400,
    "AccessDeniedException": 403,
    "ResourceNotFoundException": 404,
    "ModelTimeoutException": 408,
    "ModelErrorException": 424,
    "ModelStreamErrorException": 424,
    "ThrottlingException": 429,
    "ModelNotReadyException": 429,
    "InternalServerException": 500,
    "ServiceUnavailableException": 503,
}


def approx_tokens(text: str) -> int:
    """Token count of a text by the emulator's approximation: one token per 4 characters."""
    return math.ceil(len(text) / TOKEN_CHARS)


@dataclass(frozen=True)
class LatencyOptimized:
    """A model's latency-optimized mode: its own TPM quota and faster serving."""

    tpm_quota: int
    ttft_seconds: float = 0.25
    output_tokens_per_second: float = 120.0


@dataclass(frozen=True)
class ModelSpec:
    """How one emulated model charges its quota and how fast it answers.

    answer_tokens is the default answer length, or a function of the prompt text returning it.
    max_output_tokens is what Bedrock reserves when a request leaves max_tokens unset.
    """

    model_id: str
    tpm_quota: int = 400_000
    rpm_quota: int | None = None
    burndown: float = 1.0
    max_output_tokens: int = 8_192
    ttft_seconds: float = 0.5
    prefill_tokens_per_second: float = 8_000.0
    output_tokens_per_second: float = 60.0
    jitter: float = 0.1
    answer_tokens: int | Callable[[str], int] = 300
    latency_optimized: LatencyOptimized | None = None
    cache_ttl_seconds: float = 300.0

    def __post_init__(self) -> None:
        problems = [
            f"{name}={getattr(self, name)!r} must be > 0"
            for name in ("tpm_quota", "max_output_tokens", "ttft_seconds", "prefill_tokens_per_second",
                         "output_tokens_per_second", "cache_ttl_seconds")
            if not getattr(self, name) > 0
        ]
        if self.rpm_quota is not None and self.rpm_quota < 1:
            problems.append(f"rpm_quota={self.rpm_quota!r} must be >= 1 or None (no RPM quota)")
        if self.burndown < 1:
            problems.append(f"burndown={self.burndown!r} must be >= 1")
        if self.jitter < 0:
            problems.append(f"jitter={self.jitter!r} must be >= 0")
        if isinstance(self.answer_tokens, int) and self.answer_tokens < 1:
            problems.append(f"answer_tokens={self.answer_tokens!r} must be >= 1")
        if problems:
            raise ValueError(f"ModelSpec {self.model_id!r}: " + "; ".join(problems))


@dataclass
class Invocation:
    """One request as the emulator saw it; throttled and failed requests are recorded too.

    It is listed from the moment the request arrives and complete (outcome, settlement) before the
    client receives the last byte of its response. started is in model seconds since the emulator
    started. reserved is what the request asked the
    quota for; settled is what it finally consumed (0 when throttled).
    """

    model_id: str
    operation: str
    started: float
    outcome: str = "in-flight"  # then "ok", "throttled", "client-disconnected" or the error type that ended it
    requested_latency: str = "standard"
    served_latency: str = "standard"
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    max_tokens: int = 0
    reserved: int = 0
    settled: float = 0.0
    ttft_ms: float | None = None
    latency_ms: float | None = None


class EmulatorError(Exception):
    """An error the service would return; type is the modeled exception name."""

    def __init__(self, error_type: str, message: str):
        super().__init__(f"{error_type}: {message}")
        self.error_type, self.message = error_type, message

    @property
    def status(self) -> int:
        return _STATUS.get(self.error_type, 400)

    @property
    def stream_type(self) -> str:
        """The camelCase name an in-stream exception carries (throttlingException)."""
        return self.error_type[0].lower() + self.error_type[1:]


@dataclass
class _Charge:
    started: float
    tokens: float
    expired: bool = False


class _Window:
    """One quota: charges keyed by request start, forgotten one window later.

    A request holds its reservation until it settles; only charges that started inside the window
    count, which is the accounting `planning.sustainable_rate` assumes.
    """

    def __init__(self, tpm: int, rpm: int | None, window_seconds: float, clock: Callable[[], float]):
        self.tpm, self.rpm, self.window, self.clock = tpm, rpm, window_seconds, clock
        self.charges: deque[_Charge] = deque()
        self.total = 0.0

    def _expire(self, now: float) -> None:
        while self.charges and self.charges[0].started <= now - self.window:
            charge = self.charges.popleft()
            charge.expired = True
            self.total -= charge.tokens

    def reserve(self, tokens: int) -> _Charge | str:
        """The charge, or why the request is throttled ("tokens" or "requests")."""
        now = self.clock()
        self._expire(now)
        if self.total + tokens > self.tpm:
            return "tokens"
        if self.rpm is not None and len(self.charges) + 1 > self.rpm:
            return "requests"
        charge = _Charge(now, float(tokens))
        self.charges.append(charge)
        self.total += tokens
        return charge

    def settle(self, charge: _Charge, tokens: float) -> None:
        if not charge.expired:  # still counted in the window
            self.total += tokens - charge.tokens
        charge.tokens = tokens

    def used(self) -> float:
        self._expire(self.clock())
        return self.total


@dataclass
class _Fault:
    error_type: str
    model_id: str | None
    after_tokens: int | None
    message: str


@dataclass
class _Request:
    """What the emulator needs from a request, whichever operation carried it."""

    operation: str
    spec: ModelSpec
    prompt: str
    cached_prefix: str
    max_tokens: int
    latency: str
    answer_hint: int | None

    @property
    def streaming(self) -> bool:
        return self.operation in ("converse-stream", "invoke-with-response-stream")

    @property
    def anthropic_body(self) -> bool:
        return self.operation.startswith("invoke") and "anthropic" in self.spec.model_id


DEFAULT_MODEL = ModelSpec("us.amazon.nova-lite-v1:0")


class BedrockEmulator:
    """Start with `with BedrockEmulator([ModelSpec(...)]) as bedrock:` and point clients at
    `bedrock.endpoint_url` (or use `bedrock.client()`). Without models it serves DEFAULT_MODEL."""

    def __init__(
        self,
        models: Iterable[ModelSpec] = (),
        *,
        seed: int = 0,
        time_scale: float = 1.0,
        host: str = "127.0.0.1",
        port: int = 0,
        connection_setup_seconds: float = 0.0,
    ):
        """connection_setup_seconds delays the first request on each new connection, standing in for
        the TLS handshake a real endpoint costs (loopback HTTP has none)."""
        if time_scale <= 0:
            raise ValueError(f"time_scale={time_scale!r} must be > 0 (60 runs a one-minute quota window in 1 s)")
        self.models = {spec.model_id: spec for spec in models} or {DEFAULT_MODEL.model_id: DEFAULT_MODEL}
        if connection_setup_seconds < 0:
            raise ValueError(f"connection_setup_seconds={connection_setup_seconds!r} must be >= 0")
        self.seed, self.time_scale, self._address = seed, time_scale, (host, port)
        self.connection_setup_seconds = connection_setup_seconds
        self._lock = threading.Lock()
        self._started_at = time.monotonic()
        self._windows: dict[tuple[str, str], _Window] = {}
        for spec in self.models.values():
            self._add_windows(spec)
        self._cache: dict[tuple[str, str], float] = {}
        self._seen: dict[str, int] = {}
        self._faults: deque[_Fault] = deque()
        self._invocations: list[Invocation] = []
        self._connections = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> BedrockEmulator:
        if self._server is None:
            self._server = _Server(self._address, self)
            self._thread = threading.Thread(target=self._server.serve_forever, name="bedrock-emulator", daemon=True)
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
        return f"http://{host}:{port}"

    def client(self, **config: Any):
        """A boto3 bedrock-runtime client for this emulator (dummy credentials); config goes to
        botocore's Config (max_pool_connections, retries, ...)."""
        import boto3
        from botocore.config import Config

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
        after_tokens: int | None = None,
        count: int = 1,
        message: str = "injected by the emulator",
    ) -> None:
        """Make the next `count` requests fail with error_type. after_tokens makes a streaming request
        fail inside the stream after that many tokens (an in-stream exception event)."""
        if error_type not in _STATUS:
            raise ValueError(f"error_type={error_type!r} is not one of {sorted(_STATUS)}")
        with self._lock:
            self._faults.extend(_Fault(error_type, model_id, after_tokens, message) for _ in range(count))

    @property
    def invocations(self) -> list[Invocation]:
        with self._lock:
            return list(self._invocations)

    @property
    def connections_opened(self) -> int:
        """TCP connections accepted so far: a client whose pool is too small opens many."""
        return self._connections

    def quota_used(self, model_id: str, latency: str = "standard") -> float:
        """Tokens charged in the current window (reservations of requests in flight included)."""
        with self._lock:
            return self._windows[(model_id, latency)].used()

    def model_seconds(self) -> float:
        """Model time since start: wall time x time_scale."""
        return (time.monotonic() - self._started_at) * self.time_scale

    # ---- internals ---------------------------------------------------------------------------
    def _add_windows(self, spec: ModelSpec) -> None:
        window = WINDOW_SECONDS / self.time_scale
        self._windows[(spec.model_id, "standard")] = _Window(spec.tpm_quota, spec.rpm_quota, window, time.monotonic)
        if spec.latency_optimized:
            self._windows[(spec.model_id, "optimized")] = _Window(
                spec.latency_optimized.tpm_quota, None, window, time.monotonic
            )

    def _sleep(self, model_seconds: float) -> None:
        if model_seconds > 0:
            time.sleep(model_seconds / self.time_scale)

    def _count_connection(self) -> None:
        with self._lock:
            self._connections += 1

    def _take_fault(self, model_id: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.model_id in (None, model_id):
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

    def _admit(self, req: _Request, reserved: int) -> tuple[str, _Window, _Charge]:
        """Reserve on the optimized quota if asked and available, else on the standard quota."""
        model_id = req.spec.model_id
        with self._lock:
            if req.latency == "optimized" and (model_id, "optimized") in self._windows:
                window = self._windows[(model_id, "optimized")]
                charge = window.reserve(reserved)
                if not isinstance(charge, str):
                    return "optimized", window, charge
            window = self._windows[(model_id, "standard")]
            charge = window.reserve(reserved)
        if isinstance(charge, str):
            raise EmulatorError("ThrottlingException", f"Too many {charge}, please wait before trying again.")
        return "standard", window, charge

    def _settle(self, window: _Window, charge: _Charge, tokens: float) -> None:
        with self._lock:
            window.settle(charge, tokens)

    def _record(self, invocation: Invocation) -> None:
        with self._lock:
            self._invocations.append(invocation)

    def handle(self, operation: str, model_path: str, raw: bytes, headers: dict[str, str], out: _Response) -> None:
        """Serve one request onto `out`; every failure becomes the service's error shape."""
        record = Invocation(model_id=unquote(model_path), operation=operation, started=self.model_seconds())
        self._record(record)
        try:
            req = self._parse(operation, record.model_id, raw, headers)
            record.model_id, record.requested_latency, record.max_tokens = (
                req.spec.model_id, req.latency, req.max_tokens)
            fault = self._take_fault(req.spec.model_id)
            if fault and (fault.after_tokens is None or not req.streaming):
                raise EmulatorError(fault.error_type, fault.message)
            self._serve(req, raw, record, out, fault)
        except EmulatorError as error:
            record.outcome = "throttled" if error.error_type == "ThrottlingException" else error.error_type
            out.error(error)
        except (BrokenPipeError, ConnectionResetError):
            record.outcome = "client-disconnected"
            raise
        except Exception as error:  # a bug here still answers in the service's shape, never a dropped socket
            record.outcome = "InternalServerException"
            out.error(EmulatorError("InternalServerException", f"emulator error: {error!r}"))

    def _serve(self, req: _Request, raw: bytes, record: Invocation, out: _Response, fault: _Fault | None) -> None:
        spec = req.spec
        cache_read, cache_write = self._cache_tokens(spec.model_id, req.cached_prefix, spec.cache_ttl_seconds)
        input_tokens = max(approx_tokens(req.prompt) - cache_read - cache_write, 0)
        reserved = input_tokens + cache_write + cache_read + req.max_tokens
        record.input_tokens, record.cache_read_tokens, record.cache_write_tokens = input_tokens, cache_read, cache_write
        record.reserved = reserved
        served, window, charge = self._admit(req, reserved)
        record.served_latency = served
        wanted = req.answer_hint or (
            spec.answer_tokens(req.prompt) if callable(spec.answer_tokens) else spec.answer_tokens
        )
        output_tokens = min(max(int(wanted), 1), req.max_tokens)
        stop_reason = "max_tokens" if wanted > req.max_tokens else "end_turn"
        rng = self._rng(req.operation, spec.model_id, raw)
        fast = spec.latency_optimized if served == "optimized" else None
        ttft = ((fast.ttft_seconds if fast else spec.ttft_seconds)
                + (input_tokens + cache_write) / spec.prefill_tokens_per_second) * _jitter(rng, spec.jitter)
        otps = (fast.output_tokens_per_second if fast else spec.output_tokens_per_second) * _jitter(rng, spec.jitter)
        words = [rng.choice(_WORDS) + " " for _ in range(output_tokens)]
        settled = False

        def settle() -> None:
            """Charge what was generated, once: before the last byte goes out, or on a disconnect."""
            nonlocal settled
            if not settled:
                settled = True
                record.settled = input_tokens + cache_write + record.output_tokens * spec.burndown
                self._settle(window, charge, record.settled)

        try:
            if req.streaming:
                self._stream(req, out, words, ttft, otps, stop_reason, record, fault, served, settle)
            else:
                self._sleep(ttft + output_tokens / otps)
                record.output_tokens, record.outcome = output_tokens, "ok"
                record.latency_ms = round((ttft + output_tokens / otps) * 1000)
                settle()
                out.json(200, _body(req, "".join(words), record, stop_reason), _invoke_headers(req, record))
        finally:  # whatever was generated is charged, even if the client went away mid-stream
            settle()

    def _stream(self, req, out, words, ttft, otps, stop_reason, record, fault, served, settle) -> None:
        """Send the answer as event-stream frames paced at the decode rate (record.output_tokens
        counts what was sent)."""
        dialect = _ConverseStream() if req.operation == "converse-stream" else _InvokeStream(req)
        content_type = {"X-Amzn-Bedrock-PerformanceConfig-Latency": served}
        if req.operation == "invoke-with-response-stream":
            content_type["X-Amzn-Bedrock-Content-Type"] = "application/json"
        out.start_stream(content_type)
        begin = self.model_seconds()
        self._sleep(ttft)
        record.ttft_ms = round((self.model_seconds() - begin) * 1000)
        out.chunk(dialect.start(record))
        sent = 0
        limit = len(words) if not fault else min(fault.after_tokens or 0, len(words))
        while sent < limit:
            due = min(limit, 1 + int((self.model_seconds() - begin - ttft) * otps))
            if due > sent:
                out.chunk(dialect.delta("".join(words[sent:due])))
                sent = record.output_tokens = due
            if sent < limit:
                time.sleep(min(max((sent + 1) / otps + ttft - (self.model_seconds() - begin), 0) / self.time_scale, 0.05))
        if fault:
            record.outcome = fault.error_type
            settle()
            out.chunk(eventstream.exception(EmulatorError(fault.error_type, fault.message).stream_type, fault.message))
        else:
            record.latency_ms, record.outcome = round((self.model_seconds() - begin) * 1000), "ok"
            settle()
            out.chunk(dialect.stop(record, stop_reason))
        out.end_stream()

    def _parse(self, operation: str, model_path: str, raw: bytes, headers: dict[str, str]) -> _Request:
        spec = self.models.get(model_path) or self.models.get(model_path.rsplit("/", 1)[-1])
        if spec is None:
            raise EmulatorError("ValidationException", "The provided model identifier is invalid.")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise EmulatorError("ValidationException", "Malformed input request, please reformat your input and try again.") from None
        if not isinstance(body, dict):
            raise EmulatorError("ValidationException", "Malformed input request: the body must be a JSON object.")
        if operation.startswith("converse"):
            return _parse_converse(operation, spec, body)
        return _parse_invoke(operation, spec, body, headers)


def _jitter(rng: random.Random, sigma: float) -> float:
    return math.exp(rng.gauss(0, sigma)) if sigma else 1.0


def _texts(value: Any) -> Iterator[str]:
    """Every text a request carries (Converse blocks, native bodies), in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in ("text", "content", "prompt", "inputText", "system") or isinstance(item, list | dict):
                yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def _cached_prefix(blocks: list[Any]) -> str:
    """The text before the last cachePoint block of system + messages content."""
    prefix, seen = [], []
    for block in blocks:
        if isinstance(block, dict) and "cachePoint" in block:
            prefix = list(seen)
        else:
            seen.extend(_texts(block))
    return "".join(prefix)


def _answer_hint(metadata: Any) -> int | None:
    if not isinstance(metadata, dict) or ANSWER_TOKENS_KEY not in metadata:
        return None
    try:
        return max(int(metadata[ANSWER_TOKENS_KEY]), 1)
    except (TypeError, ValueError):
        raise EmulatorError(
            "ValidationException", f"requestMetadata {ANSWER_TOKENS_KEY} must be a whole number of tokens"
        ) from None


def _checked_max_tokens(spec: ModelSpec, value: Any, name: str) -> int:
    if value is None:
        return spec.max_output_tokens  # Bedrock reserves the model's maximum
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise EmulatorError("ValidationException", f"{name} must be a positive integer, got {value!r}")
    if value > spec.max_output_tokens:
        raise EmulatorError(
            "ValidationException",
            f"{name} {value} exceeds the model's maximum output of {spec.max_output_tokens} tokens",
        )
    return value


def _parse_converse(operation: str, spec: ModelSpec, body: dict[str, Any]) -> _Request:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise EmulatorError("ValidationException", "A conversation must start with a user message.")
    blocks = list(body.get("system") or [])
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise EmulatorError("ValidationException", "Each message needs a role of user or assistant.")
        blocks.extend(message.get("content") or [])
    latency = (body.get("performanceConfig") or {}).get("latency", "standard")
    if latency not in ("standard", "optimized"):
        raise EmulatorError("ValidationException", f"performanceConfig.latency {latency!r} is not standard or optimized")
    return _Request(
        operation=operation,
        spec=spec,
        prompt="".join(_texts(blocks)),
        cached_prefix=_cached_prefix(blocks),
        max_tokens=_checked_max_tokens(spec, (body.get("inferenceConfig") or {}).get("maxTokens"), "maxTokens"),
        latency=latency,
        answer_hint=_answer_hint(body.get("requestMetadata")),
    )


def _parse_invoke(operation: str, spec: ModelSpec, body: dict[str, Any], headers: dict[str, str]) -> _Request:
    """Native bodies: Anthropic Messages (max_tokens), Nova (inferenceConfig.maxTokens or
    max_new_tokens) and others (maxTokens, max_gen_len, textGenerationConfig.maxTokenCount)."""
    anthropic = "anthropic" in spec.model_id
    if anthropic and "max_tokens" not in body:
        raise EmulatorError("ValidationException", "Malformed input request: #: required key [max_tokens] not found")
    nested = body.get("inferenceConfig") or body.get("textGenerationConfig") or {}
    candidates = [body.get("max_tokens"), body.get("maxTokens"), body.get("max_gen_len"),
                  nested.get("maxTokens"), nested.get("max_new_tokens"), nested.get("maxTokenCount")]
    max_tokens = next((value for value in candidates if value is not None), None)
    latency = headers.get("x-amzn-bedrock-performanceconfig-latency", "standard")
    if latency not in ("standard", "optimized"):
        raise EmulatorError("ValidationException", f"performanceConfigLatency {latency!r} is not standard or optimized")
    try:
        metadata = json.loads(headers.get("x-amzn-bedrock-request-metadata") or "{}")
    except ValueError:
        metadata = {}
    blocks = list(body.get("system") if isinstance(body.get("system"), list) else [body.get("system") or ""])
    blocks.extend(body.get("messages") or [body.get("prompt") or body.get("inputText") or ""])
    return _Request(
        operation=operation,
        spec=spec,
        prompt="".join(_texts(blocks)),
        cached_prefix=_cached_prefix(blocks),
        max_tokens=_checked_max_tokens(spec, max_tokens, "max_tokens"),
        latency=latency,
        answer_hint=_answer_hint(metadata),
    )


def _usage(record: Invocation) -> dict[str, int]:
    return {
        "inputTokens": record.input_tokens,
        "outputTokens": record.output_tokens,
        "totalTokens": record.input_tokens + record.output_tokens + record.cache_read_tokens + record.cache_write_tokens,
        "cacheReadInputTokens": record.cache_read_tokens,
        "cacheWriteInputTokens": record.cache_write_tokens,
    }


def _anthropic_usage(record: Invocation) -> dict[str, int]:
    return {
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cache_creation_input_tokens": record.cache_write_tokens,
        "cache_read_input_tokens": record.cache_read_tokens,
    }


def _body(req: _Request, text: str, record: Invocation, stop_reason: str) -> dict[str, Any]:
    if req.operation == "converse":
        return {
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": stop_reason,
            "usage": _usage(record),
            "metrics": {"latencyMs": record.latency_ms},
            "performanceConfig": {"latency": record.served_latency},
        }
    if req.anthropic_body:
        return {
            "id": f"msg_emu_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": req.spec.model_id,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": _anthropic_usage(record),
        }
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": stop_reason,
        "usage": {k: v for k, v in _usage(record).items() if not k.startswith("cache")}
        | {"cacheReadInputTokenCount": record.cache_read_tokens, "cacheWriteInputTokenCount": record.cache_write_tokens},
    }


def _invoke_headers(req: _Request, record: Invocation) -> dict[str, str]:
    headers = {"X-Amzn-Bedrock-PerformanceConfig-Latency": record.served_latency}
    if req.operation == "invoke":
        headers |= {
            "X-Amzn-Bedrock-Input-Token-Count": str(record.input_tokens),
            "X-Amzn-Bedrock-Output-Token-Count": str(record.output_tokens),
            "X-Amzn-Bedrock-Invocation-Latency": str(record.latency_ms),
        }
    return headers


class _ConverseStream:
    """ConverseStream's events: messageStart, contentBlockDelta..., contentBlockStop, messageStop, metadata."""

    def start(self, record: Invocation) -> bytes:
        return eventstream.event("messageStart", {"role": "assistant"})

    def delta(self, text: str) -> bytes:
        return eventstream.event("contentBlockDelta", {"delta": {"text": text}, "contentBlockIndex": 0})

    def stop(self, record: Invocation, stop_reason: str) -> bytes:
        return b"".join([
            eventstream.event("contentBlockStop", {"contentBlockIndex": 0}),
            eventstream.event("messageStop", {"stopReason": stop_reason}),
            eventstream.event("metadata", {
                "usage": _usage(record),
                "metrics": {"latencyMs": record.latency_ms},
                "performanceConfig": {"latency": record.served_latency},
            }),
        ])


class _InvokeStream:
    """InvokeModelWithResponseStream: `chunk` events whose bytes are the model's native stream
    events; the last carries amazon-bedrock-invocationMetrics as Bedrock adds it."""

    def __init__(self, req: _Request):
        self.anthropic = req.anthropic_body

    @staticmethod
    def _chunk(payload: dict[str, Any]) -> bytes:
        raw = json.dumps(payload, separators=(",", ":")).encode()
        return eventstream.event("chunk", {"bytes": base64.b64encode(raw).decode()})

    def start(self, record: Invocation) -> bytes:
        if self.anthropic:
            return self._chunk({"type": "message_start", "message": {
                "role": "assistant", "type": "message", "content": [], "usage": _anthropic_usage(record)}}) + \
                self._chunk({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        return self._chunk({"messageStart": {"role": "assistant"}})

    def delta(self, text: str) -> bytes:
        if self.anthropic:
            return self._chunk({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
        return self._chunk({"contentBlockDelta": {"delta": {"text": text}, "contentBlockIndex": 0}})

    def stop(self, record: Invocation, stop_reason: str) -> bytes:
        metrics = {
            "inputTokenCount": record.input_tokens,
            "outputTokenCount": record.output_tokens,
            "invocationLatency": record.latency_ms,
            "firstByteLatency": record.ttft_ms,
        }
        if self.anthropic:
            return b"".join([
                self._chunk({"type": "content_block_stop", "index": 0}),
                self._chunk({"type": "message_delta", "delta": {"stop_reason": stop_reason},
                             "usage": {"output_tokens": record.output_tokens}}),
                self._chunk({"type": "message_stop", "amazon-bedrock-invocationMetrics": metrics}),
            ])
        return b"".join([
            self._chunk({"contentBlockStop": {"contentBlockIndex": 0}}),
            self._chunk({"messageStop": {"stopReason": stop_reason}}),
            self._chunk({"metadata": {"usage": _usage(record)}, "amazon-bedrock-invocationMetrics": metrics}),
        ])


class _Response:
    """Writes one HTTP/1.1 response: a JSON body, an error, or a chunked event stream."""

    def __init__(self, handler: BaseHTTPRequestHandler):
        self.handler = handler
        self.request_id = str(uuid.uuid4())
        self.streaming = False

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.handler.send_response(status)
        self.handler.send_header("x-amzn-RequestId", self.request_id)
        for name, value in headers.items():
            self.handler.send_header(name, value)
        self.handler.end_headers()

    def json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self._head(status, {"Content-Type": "application/json", "Content-Length": str(len(raw))} | (headers or {}))
        self.handler.wfile.write(raw)

    def error(self, error: EmulatorError) -> None:
        if self.streaming:  # headers already sent: end the stream with the exception
            self.chunk(eventstream.exception(error.stream_type, error.message))
            self.end_stream()
            return
        # The header's form as Bedrock sends it; botocore keeps the part before the colon.
        self.json(error.status, {"message": error.message},
                  {"x-amzn-ErrorType": f"{error.error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"})

    def start_stream(self, headers: dict[str, str]) -> None:
        self.streaming = True
        self._head(200, {"Content-Type": "application/vnd.amazon.eventstream", "Transfer-Encoding": "chunked"} | headers)

    def chunk(self, data: bytes) -> None:
        self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.handler.wfile.flush()

    def end_stream(self) -> None:
        self.handler.wfile.write(b"0\r\n\r\n")
        self.handler.wfile.flush()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so a client's connection pool is what it seems
    server_version = "genai-pacer-bedrock-emulator"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: BedrockEmulator.invocations records what each request did."""

    def handle(self) -> None:
        time.sleep(self.server.emulator.connection_setup_seconds)  # once per connection, like a handshake
        super().handle()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        match = _PATH.fullmatch(self.path.split("?", 1)[0])
        out = _Response(self)
        try:
            if match is None:
                out.json(404, {"message": f"no bedrock-runtime operation at {self.path}"},
                         {"x-amzn-ErrorType": "UnknownOperationException"})
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            self.server.emulator.handle(match["op"], match["model"], raw, headers, out)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away; its charge was settled already


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # many clients connect at once in a load test

    def __init__(self, address: tuple[str, int], emulator: BedrockEmulator):
        super().__init__(address, _Handler)
        self.emulator = emulator

    def process_request(self, request: Any, client_address: Any) -> None:
        self.emulator._count_connection()
        super().process_request(request, client_address)

