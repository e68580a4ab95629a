"""Load-replay benchmark: replay representative prompts at production concurrency and report the
percentiles users feel (TTFT, output tokens per second, end-to-end latency), goodput against targets,
throttles and errors as counts, and settled and reserved tokens per minute against the quota.

Works against real Bedrock or the emulator (`BedrockEmulator`): both are a bedrock-runtime client.
Token counts come from the server-reported usage, never from re-tokenizing. End-to-end latency runs
from the first attempt to the last byte, so SDK retries and their backoff are inside it.
"""

from __future__ import annotations

import csv
import json
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.install import MATPLOTLIB_HINT
from .._internal.runtime_constants import prompts_module
from ..quota import planning
from ..stats import percentile
from .emulator import ANSWER_TOKENS_KEY

__all__ = [
    "BenchConfig",
    "BenchReport",
    "Percentiles",
    "Prompt",
    "PromptError",
    "SAMPLE_PROMPTS",
    "Sample",
    "converse_request",
    "error_code",
    "expected_output_tokens",
    "load_prompts",
    "percentile",
    "percentiles",
    "run_benchmark",
    "summarize",
    "write_report",
]

TAIL_MINIMUM = {"p50": 1, "p90": 10, "p99": 100}  # samples below which a percentile is not a measured tail
#: The workload shipped with genai-pacer, what `genai-pacer bench` and `experiments` replay without
#: --prompts: 48 synthetic prompts of four request types (written by bench/make_prompts.py).
SAMPLE_PROMPTS = Path(__file__).with_name("data") / "prompts.jsonl"


if TYPE_CHECKING:
    from pacer_runtime.prompts import Prompt, PromptError, expected_output_tokens
else:
    # One parser for the local bench and the deployed replay (lambda/pacer_runtime/prompts.py),
    # loaded by its path: the bench imports without boto3.
    _prompts = prompts_module()
    Prompt, PromptError, expected_output_tokens = _prompts.Prompt, _prompts.PromptError, _prompts.expected_output_tokens


def load_prompts(path: str | Path) -> list[Prompt]:
    """Read a JSONL workload, one request a line, in either format (see bench/README.md):
    a text line {"prompt": str, "expected_output_tokens": int, "id"?: str, "system"?: str}, or a
    recorded Converse request {"messages": [...], "system"?: [...], "inferenceConfig"?: {...},
    "additionalModelRequestFields"?: {...}, "performanceConfig"?: {...}, "id"?, "expected_output_tokens"?}.
    A bad line raises PromptError (a ValueError) naming path:line, never quoting the prompt."""
    parsed: list[Prompt] = prompts_module().parse_prompts(Path(path).read_text(), str(path))
    return parsed


@dataclass(frozen=True)
class Percentiles:
    n: int
    p50: float | None
    p90: float | None
    p99: float | None
    note: str = ""


def percentiles(values: Sequence[float], *, lower_is_worse: bool = False) -> Percentiles:
    """p50/p90/p99, with a note naming each tail percentile that has too few samples to mean much.

    Percentiles describe the slow tail: for latencies that is the high end; for a rate such as
    output tokens per second (lower_is_worse) p99 is the rate 99% of requests reach or beat.
    """
    if not values:
        return Percentiles(0, None, None, None, "no samples")
    thin = [name for name, minimum in TAIL_MINIMUM.items() if len(values) < minimum]
    note = (
        f"{len(values)} samples: {', '.join(thin)} {'needs' if len(thin) == 1 else 'need'} at least "
        f"{', '.join(str(TAIL_MINIMUM[name]) for name in thin)} samples to describe a tail"
        if thin else ""
    )
    p50, p90, p99 = (round(percentile(values, q), 4) for q in ((50, 10, 1) if lower_is_worse else (50, 90, 99)))
    return Percentiles(len(values), p50, p90, p99, note)


@dataclass
class Sample:
    """One request. Times are seconds (model seconds against a time-scaled emulator)."""

    index: int
    prompt_id: str
    warmup: bool
    started_s: float
    e2e_s: float = 0.0
    ttft_s: float | None = None
    otps: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    attempts: int = 0
    throttles: int = 0
    error: str | None = None
    served_latency: str | None = None
    reserved: int = 0
    settled: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class BenchConfig:
    """What to replay and how.

    Exactly one of concurrency (closed loop: that many requests always in flight) or
    rate_per_minute (open loop: Poisson arrivals, seeded) sets the load. max_tokens None leaves it
    unset; then reserved tokens are counted at model_max_tokens, which is what Bedrock reserves.
    time_scale converts wall time to model time against an emulator started with the same factor.
    warmup: requests sent first and left out of the summary, so connection set-up does not count
    against the percentiles. Default: 8, the CLI's --warmup default.
    """

    model_id: str
    requests: int = 100
    concurrency: int | None = 8
    rate_per_minute: float | None = None
    streaming: bool = True
    warmup: int = 8
    max_tokens: int | None = None
    model_max_tokens: int = 8_192
    latency: str | None = None
    burndown: float = 1.0
    tpm_quota: float | None = None
    ttft_target_s: float | None = None
    otps_target: float | None = None
    e2e_target_s: float | None = None
    time_scale: float = 1.0
    seed: int = 0
    answer_hint: bool = True  # send each prompt's expected length in requestMetadata (the emulator uses it)

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate_per_minute is None):
            raise ValueError("set exactly one of concurrency (closed loop) or rate_per_minute (open loop)")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency!r} must be >= 1")
        if self.rate_per_minute is not None and self.rate_per_minute <= 0:
            raise ValueError(f"rate_per_minute={self.rate_per_minute!r} must be > 0")
        if self.requests < 1 or self.warmup < 0:
            raise ValueError(f"requests={self.requests!r} must be >= 1 and warmup={self.warmup!r} >= 0")
        if self.time_scale <= 0:
            raise ValueError(f"time_scale={self.time_scale!r} must be > 0")


@dataclass
class BenchReport:
    config: BenchConfig
    samples: list[Sample]
    summary: dict[str, Any] = field(default_factory=dict)


def summarize(samples: Sequence[Sample], config: BenchConfig) -> dict[str, Any]:
    """The report's figures from measured samples (warm-up excluded); pure arithmetic, tested alone."""
    measured = [s for s in samples if not s.warmup]
    ok = [s for s in measured if s.ok]
    if measured:
        begin = min(s.started_s for s in measured)
        end = max(s.started_s + s.e2e_s for s in measured)
        minutes = max(end - begin, 1e-9) / 60
    else:
        minutes = 0.0

    def good(sample: Sample) -> bool:
        return sample.ok and all([
            config.ttft_target_s is None or (sample.ttft_s is not None and sample.ttft_s <= config.ttft_target_s),
            config.otps_target is None or (sample.otps is not None and sample.otps >= config.otps_target),
            config.e2e_target_s is None or sample.e2e_s <= config.e2e_target_s,
        ])

    def per_minute(total: float) -> float | None:
        return round(total / minutes, 1) if minutes else None

    settled_tpm = per_minute(sum(s.settled for s in measured))
    reserved_tpm = per_minute(sum(s.reserved for s in measured))
    quota = config.tpm_quota
    goodput = sum(good(s) for s in measured)
    errors: dict[str, int] = {}
    for sample in measured:
        if sample.error:
            errors[sample.error] = errors.get(sample.error, 0) + 1
    return {
        "requests": len(measured),
        "succeeded": len(ok),
        "failed": len(measured) - len(ok),
        "errors": errors,
        "throttles": sum(s.throttles for s in measured),
        "attempts": sum(s.attempts for s in measured),
        "duration_s": round(minutes * 60, 3),
        "ttft_s": asdict(percentiles([s.ttft_s for s in ok if s.ttft_s is not None])),
        "otps": asdict(percentiles([s.otps for s in ok if s.otps is not None], lower_is_worse=True)),
        "e2e_s": asdict(percentiles([s.e2e_s for s in ok])),
        "output_tokens": asdict(percentiles([s.output_tokens for s in ok])),
        "goodput": {
            "requests": goodput,
            "fraction": round(goodput / len(measured), 4) if measured else None,
            "per_minute": per_minute(goodput),
            "targets": {"ttft_s": config.ttft_target_s, "otps": config.otps_target, "e2e_s": config.e2e_target_s},
        },
        "tpm": {
            "settled": settled_tpm,
            "reserved": reserved_tpm,
            "quota": quota,
            "settled_pct_of_quota": round(100 * settled_tpm / quota, 1) if quota and settled_tpm is not None else None,
            "reserved_pct_of_quota": round(100 * reserved_tpm / quota, 1) if quota and reserved_tpm is not None else None,
        },
        "served_latency": {mode: sum(s.served_latency == mode for s in ok) for mode in ("standard", "optimized")},
        "notes": [
            "times in seconds of model time (wall time x time_scale)" if config.time_scale != 1 else "times in seconds",
            "otps percentiles describe the slow tail: p90 is the rate 90% of requests reach or beat",
            "e2e_s runs from the first attempt to the last byte, SDK retries and backoff included",
            f"requests counts the measured requests; {config.warmup} warm-up requests ran first and are left out",
            "tpm.reserved is input + max_tokens per call, what a call holds while it runs; the unused part is "
            "returned when it ends, so reserved_pct_of_quota can pass 100 with no throttle: "
            "settled_pct_of_quota is what the quota was charged",
        ],
    }


class _AttemptCounter:
    """Counts each HTTP attempt and each throttle inside the SDK's own retries, per thread."""

    def __init__(self, client: Any):
        self.local = threading.local()
        client.meta.events.register("needs-retry.bedrock-runtime", self._on_attempt)

    @classmethod
    def of(cls, client: Any) -> _AttemptCounter:
        """One counter per client, however many benchmarks run on it."""
        if not hasattr(client, "_genai_pacer_attempts"):
            client._genai_pacer_attempts = cls(client)
        return client._genai_pacer_attempts

    def _on_attempt(self, response: Any = None, caught_exception: Any = None, **_: Any) -> None:
        self.local.attempts = getattr(self.local, "attempts", 0) + 1
        parsed = response[1] if response else {}
        code = (parsed or {}).get("Error", {}).get("Code", "")
        if code in ("ThrottlingException", "TooManyRequestsException", "ServiceQuotaExceededException"):
            self.local.throttles = getattr(self.local, "throttles", 0) + 1

    def take(self) -> tuple[int, int]:
        attempts, throttles = getattr(self.local, "attempts", 0), getattr(self.local, "throttles", 0)
        self.local.attempts = self.local.throttles = 0
        return attempts, throttles


def converse_request(prompt: Prompt, model_id: str, *, max_tokens: int | None = None, latency: str | None = None,
                     answer_hint: bool = True) -> dict[str, Any]:
    """Converse arguments for one workload prompt (text or recorded). max_tokens and latency, when
    given, win over a recorded request's inferenceConfig.maxTokens and performanceConfig; answer_hint
    tells the emulator the expected output length through requestMetadata (real Bedrock only logs
    it), for the prompts that have one."""
    request: dict[str, Any] = prompt.converse_request(
        model_id, max_tokens=max_tokens, latency=latency, answer_hint_key=ANSWER_TOKENS_KEY if answer_hint else None)
    return request


def error_code(error: BaseException | None) -> str:
    """The service's error code (ThrottlingException), or the exception's class name."""
    response = getattr(error, "response", None)
    if isinstance(response, dict) and response.get("Error", {}).get("Code"):
        return response["Error"]["Code"]
    return type(error).__name__


def run_benchmark(
    client: Any,
    prompts: Sequence[Prompt],
    config: BenchConfig,
    *,
    progress: Callable[[int, int, Sample], None] | None = None,
) -> BenchReport:
    """Replay prompts (cycled) for config.warmup + config.requests requests on a shared client.

    Size the client's max_pool_connections to the concurrency. progress(done, total, sample) is
    called after each request.
    """
    from genai_pacer.runtime import converse, converse_stream

    call = converse_stream if config.streaming else converse
    counter = _AttemptCounter.of(client)
    total = config.warmup + config.requests
    samples: list[Sample | None] = [None] * total
    lock, done = threading.Lock(), [0]
    clock_zero = time.perf_counter()

    def now() -> float:
        return (time.perf_counter() - clock_zero) * config.time_scale

    def one(index: int) -> None:
        prompt = prompts[index % len(prompts)]
        sample = Sample(index, prompt.id, index < config.warmup, now())
        counter.take()
        try:
            result = call(client, converse_request(prompt, config.model_id, max_tokens=config.max_tokens,
                                                   latency=config.latency, answer_hint=config.answer_hint))
        except Exception as error:  # counted and reported, never hidden in latency
            sample.error = error_code(error)
        else:
            sample.input_tokens, sample.output_tokens = result.input_tokens, result.output_tokens
            sample.cache_read_tokens, sample.cache_write_tokens = result.cache_read_tokens, result.cache_write_tokens
            sample.served_latency = result.served_latency
            if result.first_token_ms is not None:
                sample.ttft_s = round(result.first_token_ms / 1000 * config.time_scale, 4)
            if result.output_tokens_per_second is not None:
                sample.otps = round(result.output_tokens_per_second / config.time_scale, 2)
            charge = planning.TokenProfile(  # the quota arithmetic the planner uses, on server-reported usage
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                max_tokens=max(config.max_tokens or prompt.max_tokens or config.model_max_tokens, result.output_tokens),
                burndown=config.burndown,
                cache_write_tokens=result.cache_write_tokens,
                cache_read_tokens=result.cache_read_tokens,
            )
            sample.reserved, sample.settled = charge.reserved, charge.settled
        sample.e2e_s = round(now() - sample.started_s, 4)
        sample.attempts, sample.throttles = counter.take()
        samples[index] = sample
        with lock:
            done[0] += 1
            if progress:
                progress(done[0], total, sample)

    if config.concurrency is not None:  # closed loop: the next request starts as one finishes
        with ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="closed-loop") as pool:
            list(pool.map(one, range(total)))
    else:
        rng = random.Random(config.seed)
        per_second = (config.rate_per_minute or 0) / 60  # BenchConfig sets it whenever concurrency is None
        with ThreadPoolExecutor(max_workers=512, thread_name_prefix="open-loop") as pool:
            due = 0.0
            futures = []
            for index in range(total):
                wait = due - now()
                if wait > 0:
                    time.sleep(wait / config.time_scale)
                futures.append(pool.submit(one, index))
                due += rng.expovariate(per_second)
            for future in futures:
                future.result()
    finished = [s for s in samples if s is not None]
    return BenchReport(config, finished, summarize(finished, config))


def progress_printer(stream: Any = None, width: int = 30) -> Callable[[int, int, Sample], None]:
    """A progress bar on stderr: redrawn in place on a terminal, one line per 10% otherwise."""
    stream = stream or sys.stderr
    counts = {"throttles": 0, "errors": 0}
    tty = getattr(stream, "isatty", lambda: False)()

    def show(done: int, total: int, sample: Sample) -> None:
        counts["throttles"] += sample.throttles
        counts["errors"] += 0 if sample.ok else 1
        filled = width * done // total
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} requests (warm-up included), "
                f"{counts['throttles']} throttles, {counts['errors']} failed")
        if tty:
            stream.write("\r" + line + ("\n" if done == total else ""))
        elif done == total or done * 10 // total != (done - 1) * 10 // total:
            stream.write(line + "\n")
        stream.flush()

    return show


CSV_FIELDS = list(Sample.__dataclass_fields__)


def write_report(report: BenchReport, outdir: str | Path, name: str = "bench") -> list[Path]:
    """Write <name>.json (config + summary), <name>.csv (one row per request) and, when matplotlib
    is installed, <name>.png (latency distributions). Returns the paths written."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = outdir / f"{name}.json", outdir / f"{name}.csv"
    json_path.write_text(json.dumps({"config": asdict(report.config), "summary": report.summary}, indent=2) + "\n")
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for sample in report.samples:
            writer.writerow(asdict(sample))
    written = [json_path, csv_path]
    png = _chart(report, outdir / f"{name}.png")
    if png:
        written.append(png)
    return written


def _chart(report: BenchReport, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no PNG chart ({MATPLOTLIB_HINT})", file=sys.stderr)
        return None
    ok = [s for s in report.samples if s.ok and not s.warmup]
    panels = [("TTFT (s)", [s.ttft_s for s in ok if s.ttft_s is not None], "ttft_s"),
              ("output tokens / s", [s.otps for s in ok if s.otps is not None], "otps"),
              ("end-to-end latency (s)", [s.e2e_s for s in ok], "e2e_s")]
    figure, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for axis, (label, values, key) in zip(axes, panels, strict=True):
        axis.set_xlabel(label)
        if not values:
            axis.text(0.5, 0.5, "not measured\n(non-streaming calls have no TTFT)", ha="center", va="center",
                      transform=axis.transAxes)
            continue
        ordered = sorted(values)
        axis.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))])
        axis.set_ylabel("fraction of requests")
        for q in ("p50", "p90", "p99"):
            value = report.summary[key][q]
            if value is not None:
                axis.axvline(value, linestyle=":", color="grey")
                axis.annotate(q, (value, 0.05), rotation=90, fontsize=8)
        axis.grid(alpha=0.3)
    s = report.summary
    load = (f"concurrency {report.config.concurrency}" if report.config.concurrency
            else f"{report.config.rate_per_minute:g} requests/min (Poisson)")
    figure.suptitle(
        f"{report.config.model_id}, {'streaming' if report.config.streaming else 'non-streaming'}, {load}: "
        f"{s['succeeded']}/{s['requests']} ok, {s['throttles']} throttles, {s['failed']} failed",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
