"""Load-replay benchmark: replay representative prompts at production concurrency and report the
percentiles users feel (TTFT, output tokens per second, end-to-end latency), goodput against targets,
throttles and errors as counts, and settled and reserved tokens per minute against the quota.

Works against real Bedrock or the emulator (`BedrockEmulator`): both are a bedrock-runtime client.
Token counts come from the server-reported usage, never from re-tokenizing. End-to-end latency runs
from the first attempt to the last byte, so SDK retries and their backoff are inside it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.install import MATPLOTLIB_HINT
from .._internal.runtime_constants import prompts_module, replay_module
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
    "load_run",
    "percentile",
    "percentiles",
    "replay_report",
    "run_benchmark",
    "summarize",
    "write_report",
]

#: The workload shipped with genai-pacer, what `genai-pacer bench` and `experiments` replay without
#: --prompts: 48 synthetic prompts of four request types (written by bench/make_prompts.py).
SAMPLE_PROMPTS = Path(__file__).with_name("data") / "prompts.jsonl"


if TYPE_CHECKING:
    from pacer_runtime.prompts import Prompt, PromptError, expected_output_tokens
    from pacer_runtime.replay import (
        CSV_FIELDS,
        TAIL_MINIMUM,
        BenchConfig,
        Percentiles,
        Sample,
        error_code,
        percentile,
        percentiles,
        summarize,
    )
else:
    # One parser (lambda/pacer_runtime/prompts.py), and one measurement, summary and percentile
    # arithmetic (replay.py), for the local bench and the deployed replay, loaded by their paths:
    # the bench imports without boto3.
    _prompts, _replay = prompts_module(), replay_module()
    Prompt, PromptError, expected_output_tokens = _prompts.Prompt, _prompts.PromptError, _prompts.expected_output_tokens
    CSV_FIELDS, TAIL_MINIMUM, BenchConfig, Percentiles, Sample = (
        _replay.CSV_FIELDS, _replay.TAIL_MINIMUM, _replay.BenchConfig, _replay.Percentiles, _replay.Sample)
    error_code, percentile, percentiles, summarize = (
        _replay.error_code, _replay.percentile, _replay.percentiles, _replay.summarize)


def load_prompts(path: str | Path) -> list[Prompt]:
    """Read a JSONL workload, one request a line, in either format (see bench/README.md):
    a text line {"prompt": str, "expected_output_tokens": int, "id"?: str, "system"?: str}, or a
    recorded Converse request {"messages": [...], "system"?: [...], "inferenceConfig"?: {...},
    "additionalModelRequestFields"?: {...}, "performanceConfig"?: {...}, "id"?, "expected_output_tokens"?}.
    A bad line raises PromptError (a ValueError) naming path:line, never quoting the prompt."""
    parsed: list[Prompt] = prompts_module().parse_prompts(Path(path).read_text(), str(path))
    return parsed


@dataclass
class BenchReport:
    config: BenchConfig
    samples: list[Sample]
    summary: dict[str, Any] = field(default_factory=dict)


def converse_request(prompt: Prompt, model_id: str, *, max_tokens: int | None = None, latency: str | None = None,
                     answer_hint: bool = True) -> dict[str, Any]:
    """Converse arguments for one workload prompt (text or recorded). max_tokens and latency, when
    given, win over a recorded request's inferenceConfig.maxTokens and performanceConfig; answer_hint
    tells the emulator the expected output length through requestMetadata (real Bedrock only logs
    it), for the prompts that have one."""
    request: dict[str, Any] = prompt.converse_request(
        model_id, max_tokens=max_tokens, latency=latency, answer_hint_key=ANSWER_TOKENS_KEY if answer_hint else None)
    return request


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
    replay = replay_module()
    counter = replay.AttemptCounter.of(client)
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
        request = converse_request(prompt, config.model_id, max_tokens=config.max_tokens, latency=config.latency,
                                   answer_hint=config.answer_hint)
        replay.measure(client, request, sample, streaming=config.streaming, now=now, counter=counter,
                       max_tokens=config.max_tokens or prompt.max_tokens or config.model_max_tokens,
                       burndown=config.burndown, time_scale=config.time_scale)
        samples[index] = sample
        with lock:
            done[0] += 1
            if progress:
                progress(done[0], total, sample)

    if config.concurrency is not None:  # closed loop: the next request starts as one finishes
        with ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="closed-loop") as pool:
            list(pool.map(one, range(total)))
    else:
        per_second = (config.rate_per_minute or 0) / 60  # BenchConfig sets it whenever concurrency is None
        with ThreadPoolExecutor(max_workers=512, thread_name_prefix="open-loop") as pool:
            futures = []
            for index, due in enumerate(replay.arrivals(per_second, total, config.seed)):
                wait = due - now()
                if wait > 0:
                    time.sleep(wait / config.time_scale)
                futures.append(pool.submit(one, index))
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


def write_report(report: BenchReport, outdir: str | Path, name: str = "bench") -> list[Path]:
    """Write <name>.json (config + summary), <name>.csv (one row per request) and, when matplotlib
    is installed, <name>.png (latency distributions). Returns the paths written."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = outdir / f"{name}.json", outdir / f"{name}.csv"
    json_path.write_text(json.dumps(replay_module().report_document(report.config, report.summary), indent=2) + "\n")
    with csv_path.open("w", newline="") as handle:
        replay_module().write_csv(handle, report.samples)
    written = [json_path, csv_path]
    png = _chart(report, outdir / f"{name}.png")
    if png:
        written.append(png)
    return written


#: Where a deployed run (genai_pacer.benchmark.LoadReplay) keeps its files under the run's prefix
#: (lambda/load_replay/handler.py: RECORDS, RUN_FILE, REPORT_NAME; a test holds them equal).
RUN_RECORDS, RUN_FILE, RUN_REPORT = "records/", "run.json", "bench.json"


def replay_report(uri: str, outdir: str | Path, name: str = "bench", *, s3: Any = None) -> tuple[BenchReport, list[Path]]:
    """Render a deployed LoadReplay run's report into outdir exactly as a local run's (write_report:
    <name>.json, <name>.csv, and the PNG chart when matplotlib is installed), from the run's folder
    `s3://<bucket>/<results_prefix><execution name>/`. The summary is the run's own (bench.json) when
    its summary step ran, else it is computed from the per-request records by the same code
    (replay.summarize), so a run stopped before its last step reports what it recorded.
    s3: a boto3 S3 client. Default: boto3.client("s3") with your AWS configuration."""
    _s3_location(uri)  # a run's folder in S3, nothing else
    report = load_run(uri, s3=s3)
    return report, write_report(report, outdir, name)


def load_run(source: str | Path, *, s3: Any = None) -> BenchReport:
    """A run's settings, records and summary: a deployed run's S3 folder (s3://..., as replay_report
    reads it) or a local report's JSON file (<name>.json, with <name>.csv beside it when present)."""
    if isinstance(source, str) and source.startswith("s3://"):
        return _load_deployed(source, s3)
    path = Path(source)
    document = json.loads(path.read_text())
    if not isinstance(document, dict) or "config" not in document or "summary" not in document:
        raise PromptError(f"{path}: not a benchmark report (a <name>.json with 'config' and 'summary')")
    samples: list[Sample] = []
    table = path.with_suffix(".csv")
    if table.is_file():
        import csv

        with table.open(newline="") as handle:
            samples = [_sample_from_row(row) for row in csv.DictReader(handle)]
    return BenchReport(BenchConfig(**document["config"]), samples, document["summary"])


def _sample_from_row(row: dict[str, str]) -> Sample:
    values: dict[str, Any] = {}
    for name, field_type in ((f.name, str(f.type)) for f in Sample.__dataclass_fields__.values()):
        text = row.get(name, "")
        if text == "":
            continue
        if "bool" in field_type:
            values[name] = text == "True"
        elif field_type.startswith("int") or field_type == "int":
            values[name] = int(text)
        elif "float" in field_type:
            values[name] = float(text)
        else:
            values[name] = text
    return Sample(**values)


def _load_deployed(uri: str, s3: Any) -> BenchReport:
    bucket, prefix = _s3_location(uri)
    if s3 is None:
        import boto3

        s3 = boto3.client("s3")
    found = _s3_json(s3, bucket, prefix + RUN_REPORT) or _s3_json(s3, bucket, prefix + RUN_FILE)
    if found is None:
        raise PromptError(f"{uri}: no LoadReplay run here (neither {RUN_REPORT} nor {RUN_FILE}); give the run's "
                          "folder, s3://<bucket>/<results_prefix><execution name>/")
    config = BenchConfig(**found["config"])
    samples: list[Sample] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + RUN_RECORDS):
        for item in page.get("Contents", []):
            text = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode("utf-8")
            samples.extend(Sample(**json.loads(line)) for line in text.splitlines() if line.strip())
    samples.sort(key=lambda sample: sample.index)
    return BenchReport(config, samples, found.get("summary") or summarize(samples, config))


def _s3_location(uri: str) -> tuple[str, str]:
    if not isinstance(uri, str) or not uri.startswith("s3://") or "/" not in uri[5:].strip("/"):
        raise PromptError(f"{uri!r} is not a run's folder: pass s3://<bucket>/<results_prefix><execution name>/")
    bucket, _, prefix = uri[5:].partition("/")
    return bucket, prefix.rstrip("/") + "/"


def _s3_json(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    from botocore.exceptions import ClientError

    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise
    document: dict[str, Any] = json.loads(body)
    return document


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
