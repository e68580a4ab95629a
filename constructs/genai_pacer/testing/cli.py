"""The test bed's `genai-pacer` commands: run the emulator, the benchmark and the experiments from a shell.

    genai-pacer emulator --port 8765 --model-id us.amazon.nova-lite-v1:0 --tpm 400000
    genai-pacer bench --model-id MODEL --emulator --concurrency 8 --out results/   (the shipped sample prompts)
    genai-pacer bench --prompts prompts.jsonl --model-id MODEL --region us-east-1 ...   (real Bedrock)
    genai-pacer experiments --prompts prompts.jsonl --out results/

`register` adds them to the command line's root (genai_pacer.cli, through the entry point `testing` of
the group genai_pacer.commands); the other commands register where their capability lives (quota-check:
genai_pacer.quota.check). `main` and `parser` are the root's, so `python -m genai_pacer.testing.cli` and
the console script's former target, genai_pacer.testing.cli:main, keep working.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ..cli import CommandFailed, main, parser
from .emulator import BedrockEmulator, LatencyOptimized, ModelSpec

__all__ = ["InputError", "NothingSucceeded", "main", "parser", "register"]

DEFAULT_TPM = 400_000
# Flags that shape the in-process emulator only (--emulator); with a real endpoint they would be
# silently ignored, so they are refused there. Defaults apply when they are not given.
EMULATOR_ONLY = {
    "rpm": None,
    "ttft": 0.5,
    "prefill_tps": 8_000.0,
    "otps": 60.0,
    "jitter": 0.1,
    "answer_tokens": 300,
    "optimized_tpm": None,
}


def _number(kind: Callable[[str], Any], *, minimum: float | None = None, above: float | None = None,
            maximum: float | None = None) -> Callable[[str], Any]:
    """An argparse type: a finite number of `kind` within the given bounds, or a message saying which."""
    bounds = [f">= {minimum:g}" if minimum is not None else "", f"> {above:g}" if above is not None else "",
              f"<= {maximum:g}" if maximum is not None else ""]
    wanted = f"{'an integer' if kind is int else 'a number'} {' and '.join(b for b in bounds if b)}".strip()

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if (not math.isfinite(value) or (minimum is not None and value < minimum)
                or (above is not None and value <= above) or (maximum is not None and value > maximum)):
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value

    return parse


PROMPTS_HELP = ('JSONL, one request a line: a text line {"prompt": ..., "expected_output_tokens": N, "id"?, "system"?} '
                'or a recorded Converse request {"messages": [...], "system"?, "inferenceConfig"?, '
                '"additionalModelRequestFields"?, "performanceConfig"?, "id"?, "expected_output_tokens"?} '
                '(no modelId: --model-id decides; --max-tokens and --latency win over the recording\'s; '
                'format: bench/README.md) '
                '(default: the 48 synthetic prompts shipped with genai-pacer, genai_pacer/testing/data/prompts.jsonl)')
COUNT = _number(int, minimum=1)
POSITIVE = _number(float, above=0)


def _model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("emulated model")
    group.add_argument("--tpm", type=COUNT, default=None,
                       help=f"TPM quota (default {DEFAULT_TPM:,} with --emulator and in the emulator command; "
                       "none for bench against another endpoint). "
                       "The report's reserved_pct_of_quota counts each request at input + max_tokens while it "
                       "runs, which Bedrock returns when it ends, so it can pass 100 with no throttle; "
                       "settled_pct_of_quota is what the quota was charged")
    group.add_argument("--rpm", type=COUNT, default=None, help="RPM quota (default: none)")
    group.add_argument("--burndown", type=_number(float, minimum=1), default=1.0,
                       help="quota tokens per output token (default 1)")
    group.add_argument("--max-output-tokens", type=COUNT, default=8_192,
                       help="the model's output limit, reserved when a request sets no max_tokens (default 8192)")
    group.add_argument("--ttft", type=_number(float, minimum=0), help="base time to first token, seconds (default 0.5)")
    group.add_argument("--prefill-tps", type=POSITIVE, help="prompt tokens read per second (default 8000)")
    group.add_argument("--otps", type=POSITIVE, help="output tokens per second (default 60)")
    group.add_argument("--jitter", type=_number(float, minimum=0), help="log-normal sigma of TTFT and OTPS (default 0.1)")
    group.add_argument("--answer-tokens", type=COUNT, help="answer length when a request gives none (default 300)")
    group.add_argument("--optimized-tpm", type=COUNT, help="enable latency-optimized mode with this TPM (default: off)")
    group.add_argument("--time-scale", type=POSITIVE, default=None,
                       help="run the quota window and latencies N x faster (default 1)")
    group.add_argument("--seed", type=int, default=0, help="seed of the emulated latencies and answers (default 0)")


def _model(args: argparse.Namespace, name: str) -> Any:
    value = getattr(args, name)
    return EMULATOR_ONLY[name] if value is None else value


def _spec(args: argparse.Namespace) -> ModelSpec:
    optimized_tpm = _model(args, "optimized_tpm")
    return ModelSpec(
        args.model_id,
        tpm_quota=DEFAULT_TPM if args.tpm is None else args.tpm,
        rpm_quota=_model(args, "rpm"),
        burndown=args.burndown,
        max_output_tokens=args.max_output_tokens,
        ttft_seconds=_model(args, "ttft"),
        prefill_tokens_per_second=_model(args, "prefill_tps"),
        output_tokens_per_second=_model(args, "otps"),
        jitter=_model(args, "jitter"),
        answer_tokens=_model(args, "answer_tokens"),
        latency_optimized=None if optimized_tpm is None else LatencyOptimized(optimized_tpm),
    )


def _time_scale(args: argparse.Namespace) -> float:
    return 1.0 if args.time_scale is None else args.time_scale


class InputError(ValueError):
    """A problem with the command line or its files: reported as one line, exit status 2."""


class NothingSucceeded(CommandFailed):
    """The run finished but no measured request succeeded: exit status 1."""


def _bedrock_session(args: argparse.Namespace) -> Any:
    """A boto3 session for real Bedrock, checked before the run starts: a Region and credentials."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        session = boto3.session.Session(region_name=args.region)
        credentials = session.get_credentials()
    except BotoCoreError as error:  # e.g. AWS_PROFILE names a profile that does not exist
        raise InputError(f"cannot set up AWS credentials for real Bedrock: {error}") from None
    if args.endpoint_url:  # a separately started emulator checks no signature: any credentials and Region do
        if credentials is None or session.region_name is None:
            session = boto3.session.Session(
                aws_access_key_id=credentials.access_key if credentials else "emulator",
                aws_secret_access_key=credentials.secret_key if credentials else "emulator",
                aws_session_token=credentials.token if credentials else None,
                region_name=session.region_name or "us-east-1",
            )
        return session
    if session.region_name is None:
        raise InputError("real Bedrock needs a Region: pass --region (e.g. --region us-east-1) or set AWS_REGION; "
                         "use --emulator to run offline")
    if credentials is None:
        raise InputError(
            "no AWS credentials found for real Bedrock (botocore looked in the environment, the shared "
            "credentials and config files, SSO and instance roles): configure them (aws configure, "
            "AWS_PROFILE=...) or run offline with --emulator"
        )
    return session


def _emulator(args: argparse.Namespace) -> int:
    with BedrockEmulator([_spec(args)], seed=args.seed, time_scale=_time_scale(args), port=args.port) as emulator:
        print(f"Bedrock Runtime emulator for {args.model_id} at {emulator.endpoint_url} (Ctrl-C stops it)", flush=True)
        print(f"  boto3.client('bedrock-runtime', endpoint_url='{emulator.endpoint_url}', region_name='us-east-1', "
              "aws_access_key_id='x', aws_secret_access_key='x')", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print(f"stopped after {len(emulator.invocations)} requests", flush=True)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from .bench import (
        SAMPLE_PROMPTS,
        BenchConfig,
        load_prompts,
        progress_printer,
        run_benchmark,
        write_report,
    )

    if args.model_id is None:  # not argparse's required=: `bench report` takes none
        raise InputError("the following arguments are required: --model-id")
    if not args.emulator:
        given = [f"--{name.replace('_', '-')}" for name in EMULATOR_ONLY if getattr(args, name) is not None]
        if given:
            raise InputError(f"{', '.join(given)}: only for the in-process emulator (--emulator); leave "
                             f"{'it' if len(given) == 1 else 'them'} out for {args.endpoint_url or 'real Bedrock'}")
        if args.time_scale is not None and not args.endpoint_url:
            raise InputError("--time-scale converts an emulator's time; real Bedrock runs in real time (leave it out)")
    elif args.region:
        raise InputError("--region is for real Bedrock; --emulator runs locally (leave one out)")
    prompts = load_prompts(args.prompts or SAMPLE_PROMPTS)
    config = BenchConfig(
        model_id=args.model_id,
        requests=args.requests,
        concurrency=None if args.rate is not None else args.concurrency,
        rate_per_minute=args.rate,
        streaming=not args.no_stream,
        warmup=args.warmup,
        max_tokens=args.max_tokens,
        model_max_tokens=args.max_output_tokens,
        latency=args.latency,
        burndown=args.burndown,
        tpm_quota=args.tpm if args.tpm is not None else (DEFAULT_TPM if args.emulator else None),
        ttft_target_s=args.ttft_target,
        otps_target=args.otps_target,
        e2e_target_s=args.e2e_target,
        time_scale=_time_scale(args),  # the emulator's factor, so reported times are model seconds
        seed=args.seed,
    )
    session = None if args.emulator else _bedrock_session(args)  # no Region or credentials: stop before any call
    Path(args.out).mkdir(parents=True, exist_ok=True)  # before the run, so an unwritable --out costs nothing
    pool = config.concurrency or 64
    with ExitStack() as stack:
        if args.emulator:
            emulator = stack.enter_context(BedrockEmulator([_spec(args)], seed=args.seed, time_scale=config.time_scale))
            client = emulator.client(max_pool_connections=pool, retries={"total_max_attempts": args.max_attempts})
            target = f"the emulator ({emulator.endpoint_url}, time scale {config.time_scale:g})"
        else:
            from genai_pacer.runtime import bedrock_client

            client = bedrock_client(max_pool_connections=pool, max_attempts=args.max_attempts,
                                    endpoint_url=args.endpoint_url, session=session)
            target = args.endpoint_url or f"Bedrock in {client.meta.region_name}"
        source = args.prompts or f"the sample shipped with genai-pacer, {SAMPLE_PROMPTS}; pass --prompts to replay yours"
        print(f"benchmark: {len(prompts)} prompts ({source}) against {target}", file=sys.stderr)
        report = run_benchmark(client, prompts, config, progress=progress_printer())
    paths = write_report(report, args.out, args.name)
    print(json.dumps(report.summary, indent=2))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    if report.summary["succeeded"] == 0:
        errors = ", ".join(f"{code} x{count}" for code, count in report.summary["errors"].items())
        raise NothingSucceeded(f"none of the {report.summary['requests']} requests succeeded ({errors}); "
                               f"the report is in {args.out}")
    return 0


def _bench_report(args: argparse.Namespace) -> int:
    from .bench import replay_report

    s3 = None
    if args.region:
        import boto3

        s3 = boto3.client("s3", region_name=args.region)
    report, paths = replay_report(args.uri, args.out, args.name, s3=s3)
    print(json.dumps(report.summary, indent=2))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def _bench_compare(args: argparse.Namespace) -> int:
    from .bench import load_run
    from .experiments import compare_runs

    s3 = None
    if args.region:
        import boto3

        s3 = boto3.client("s3", region_name=args.region)
    before = [load_run(source, s3=s3).summary for source in args.before]
    after = [load_run(source, s3=s3).summary for source in args.after]
    result = compare_runs(before, after)
    print(json.dumps(result, indent=2))
    for metric, row in result["metrics"].items():
        if row["difference"] is not None:
            verdict = "differs" if row["differs"] else "within the spread"
            print(f"{metric}: {row['before']['mean']} -> {row['after']['mean']} ({row['difference']:+g}): {verdict}",
                  file=sys.stderr)
    return 0


def _experiments(args: argparse.Namespace) -> int:
    from .bench import SAMPLE_PROMPTS, load_prompts
    from .experiments import pool_experiment, quota_experiment, side_by_side_experiment, write_summary

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    if args.which in ("quota", "all"):
        results["quota"] = quota_experiment(load_prompts(args.prompts or SAMPLE_PROMPTS), time_scale=args.time_scale,
                                            arrival_minutes=args.arrival_minutes, seed=args.seed,
                                            trials=args.trials, e2e_target_seconds=args.e2e_target, log=log)
        (out / "quota_experiment.json").write_text(json.dumps(results["quota"], indent=2) + "\n")
    if args.which in ("side-by-side", "all"):
        results["side_by_side"] = side_by_side_experiment(seed=args.seed, trials=args.trials, log=log)
        (out / "side_by_side_experiment.json").write_text(json.dumps(results["side_by_side"], indent=2) + "\n")
    if args.which in ("pool", "all"):
        results["pool"] = pool_experiment(seed=args.seed, trials=args.trials, log=log)
        (out / "pool_experiment.json").write_text(json.dumps(results["pool"], indent=2) + "\n")
    write_summary(out)  # experiments.md: the tables, rebuilt from every report in out/
    print(json.dumps(results, indent=2))
    return 0


def register(commands: Any) -> None:
    """Add emulator, bench and experiments to the root's subparsers (`commands`)."""
    emulator = commands.add_parser("emulator", help="serve a Bedrock Runtime emulator on loopback")
    emulator.add_argument("--model-id", default="us.amazon.nova-lite-v1:0",
                          help="the model id the emulator serves (default us.amazon.nova-lite-v1:0)")
    emulator.add_argument("--port", type=_number(int, minimum=0, maximum=65_535), default=8765,
                          help="loopback port (default 8765; 0 picks a free one)")
    _model_args(emulator)
    emulator.set_defaults(run=_emulator)

    bench = commands.add_parser("bench", help="replay a JSONL workload and report latency percentiles")
    bench.add_argument("--prompts", help=PROMPTS_HELP)
    bench.add_argument("--model-id", help="model or inference profile id to call (required to run a benchmark; "
                       "no default)")
    target = bench.add_mutually_exclusive_group()
    target.add_argument("--emulator", action="store_true", help="start an emulator in-process and use it (default: off)")
    target.add_argument("--endpoint-url",
                        help="a running emulator (or any bedrock-runtime endpoint); default: real Bedrock in --region")
    bench.add_argument("--region", help="AWS Region for real Bedrock (default: your AWS configuration's)")
    load = bench.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=COUNT, default=8, help="closed loop: requests in flight (default 8)")
    load.add_argument("--rate", type=POSITIVE,
                      help="open loop: Poisson arrivals per minute, seeded by --seed (default: the closed loop)")
    bench.add_argument("--requests", type=COUNT, default=200,
                       help="measured requests (default 200); the progress bar counts --warmup ones too")
    bench.add_argument("--warmup", type=_number(int, minimum=0), default=8,
                       help="requests sent first and left out of the report, to open connections (default 8)")
    bench.add_argument("--no-stream", action="store_true",
                       help="call Converse instead of ConverseStream (default: stream, which gives TTFT and OTPS)")
    bench.add_argument("--max-tokens", type=COUNT, default=None,
                       help="maxTokens of every request (default: unset, so the model's limit is reserved)")
    bench.add_argument("--latency", choices=["standard", "optimized"], default=None,
                       help="performanceConfig latency (default: unset, which Bedrock serves as standard)")
    bench.add_argument("--max-attempts", type=COUNT, default=4,
                       help="SDK attempts per request, first call included (default 4; 1 disables retries)")
    bench.add_argument("--ttft-target", type=POSITIVE, help="goodput: TTFT at most this many seconds (default: none)")
    bench.add_argument("--otps-target", type=POSITIVE,
                       help="goodput: at least this many output tokens per second (default: none)")
    bench.add_argument("--e2e-target", type=POSITIVE,
                       help="goodput: end-to-end latency at most this many seconds (default: none)")
    bench.add_argument("--out", default="bench-results", help="directory of the reports (default bench-results)")
    bench.add_argument("--name", default="bench", help="file name stem of the report (default bench)")
    _model_args(bench)
    bench.set_defaults(run=_bench)
    reports = bench.add_subparsers(dest="bench_command", metavar="{report,compare}",
                                   help="report: a deployed run's report; compare: runs before and after a change "
                                   "(default: none, run a benchmark)")
    report = reports.add_parser(
        "report", help="render a deployed LoadReplay run's report (JSON, CSV, chart) as a local run's")
    report.add_argument("uri", help="the run's folder: s3://<bucket>/<results_prefix><execution name>/")
    report.add_argument("--out", default="bench-results", help="directory of the reports (default bench-results)")
    report.add_argument("--name", default="bench", help="file name stem of the report (default bench)")
    report.add_argument("--region", help="the bucket's Region (default: your AWS configuration's)")
    report.set_defaults(run=_bench_report)
    compare = reports.add_parser(
        "compare", help="compare runs before and after a change; a difference only beyond the spread")
    compare.add_argument("--before", nargs="+", required=True,
                         help="two or more runs before the change: s3:// run folders or local <name>.json reports")
    compare.add_argument("--after", nargs="+", required=True, help="two or more runs after it, the same way")
    compare.add_argument("--region", help="the buckets' Region (default: your AWS configuration's)")
    compare.set_defaults(run=_bench_compare)

    experiments = commands.add_parser("experiments", help="quota and connection-pool experiments on the emulator")
    experiments.add_argument("--prompts", help=PROMPTS_HELP)
    experiments.add_argument("--which", choices=["quota", "side-by-side", "pool", "all"], default="all",
                             help="which experiment to run (default all)")
    experiments.add_argument("--time-scale", type=POSITIVE, default=4.0,
                             help="run the quota window and latencies N x faster (default 4)")
    experiments.add_argument("--arrival-minutes", type=POSITIVE, default=1.0,
                             help="quota experiment: minutes of model time over which requests arrive (default 1)")
    experiments.add_argument("--seed", type=int, default=0, help="the first trial's seed; trial i uses seed + i (default 0)")
    experiments.add_argument("--trials", type=_number(int, minimum=2), default=5,
                             help="trials per experiment, for the mean and spread (default 5, at least 2)")
    experiments.add_argument("--e2e-target", type=POSITIVE, default=10.0,
                             help="quota experiment goodput: answered within this many seconds of arrival (default 10)")
    experiments.add_argument("--out", default="bench-results", help="directory of the reports (default bench-results)")
    experiments.set_defaults(run=_experiments)


if __name__ == "__main__":
    sys.exit(main())
