"""`genai-pacer` command: run the emulator, the benchmark and the experiments from a shell.

    genai-pacer emulator --port 8765 --model-id us.amazon.nova-lite-v1:0 --tpm 400000
    genai-pacer bench --prompts prompts.jsonl --model-id MODEL --emulator --concurrency 8 --out results/
    genai-pacer bench --prompts prompts.jsonl --model-id MODEL --region us-east-1 ...   (real Bedrock)
    genai-pacer experiments --prompts prompts.jsonl --out results/
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .emulator import BedrockEmulator, LatencyOptimized, ModelSpec

DEFAULT_TPM = 400_000


def _model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("emulated model")
    group.add_argument("--tpm", type=int, default=None, help=f"TPM quota (default {DEFAULT_TPM})")
    group.add_argument("--rpm", type=int, default=None, help="RPM quota (default: none)")
    group.add_argument("--burndown", type=float, default=1.0, help="quota tokens per output token (default 1)")
    group.add_argument("--max-output-tokens", type=int, default=8_192, help="reserved when max_tokens is unset")
    group.add_argument("--ttft", type=float, default=0.5, help="base time to first token, seconds")
    group.add_argument("--prefill-tps", type=float, default=8_000, help="prompt tokens read per second")
    group.add_argument("--otps", type=float, default=60, help="output tokens per second")
    group.add_argument("--jitter", type=float, default=0.1, help="log-normal sigma of TTFT and OTPS")
    group.add_argument("--answer-tokens", type=int, default=300, help="answer length when a request gives none")
    group.add_argument("--optimized-tpm", type=int, default=None, help="enable latency-optimized mode with this TPM")
    group.add_argument("--time-scale", type=float, default=1.0, help="run the quota window and latencies N x faster")
    group.add_argument("--seed", type=int, default=0)


def _spec(args: argparse.Namespace) -> ModelSpec:
    return ModelSpec(
        args.model_id,
        tpm_quota=args.tpm or DEFAULT_TPM,
        rpm_quota=args.rpm,
        burndown=args.burndown,
        max_output_tokens=args.max_output_tokens,
        ttft_seconds=args.ttft,
        prefill_tokens_per_second=args.prefill_tps,
        output_tokens_per_second=args.otps,
        jitter=args.jitter,
        answer_tokens=args.answer_tokens,
        latency_optimized=LatencyOptimized(args.optimized_tpm) if args.optimized_tpm else None,
    )


def _emulator(args: argparse.Namespace) -> int:
    with BedrockEmulator([_spec(args)], seed=args.seed, time_scale=args.time_scale, port=args.port) as emulator:
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
    from genai_pacer.runtime import bedrock_client

    from .bench import BenchConfig, load_prompts, progress_printer, run_benchmark, write_report

    prompts = load_prompts(args.prompts)
    config = BenchConfig(
        model_id=args.model_id,
        requests=args.requests,
        concurrency=None if args.rate else args.concurrency,
        rate_per_minute=args.rate,
        streaming=not args.no_stream,
        warmup=args.warmup,
        max_tokens=args.max_tokens,
        model_max_tokens=args.max_output_tokens,
        latency=args.latency,
        burndown=args.burndown,
        tpm_quota=args.tpm or (DEFAULT_TPM if args.emulator else None),
        ttft_target_s=args.ttft_target,
        otps_target=args.otps_target,
        e2e_target_s=args.e2e_target,
        time_scale=args.time_scale,  # the emulator's factor, so reported times are model seconds
        seed=args.seed,
    )
    pool = config.concurrency or 64
    with ExitStack() as stack:
        if args.emulator:
            emulator = stack.enter_context(BedrockEmulator([_spec(args)], seed=args.seed, time_scale=args.time_scale))
            client = emulator.client(max_pool_connections=pool, retries={"total_max_attempts": args.max_attempts})
            target = f"the emulator ({emulator.endpoint_url}, time scale {args.time_scale:g})"
        else:
            import boto3

            session = boto3.session.Session(region_name=args.region)
            if args.endpoint_url and session.get_credentials() is None:  # a local emulator checks no signature
                session = boto3.session.Session(aws_access_key_id="emulator", aws_secret_access_key="emulator",
                                                region_name=args.region or "us-east-1")
            client = bedrock_client(max_pool_connections=pool, max_attempts=args.max_attempts,
                                    endpoint_url=args.endpoint_url, session=session)
            target = args.endpoint_url or f"Bedrock in {client.meta.region_name}"
        print(f"benchmark: {len(prompts)} prompts against {target}", file=sys.stderr)
        report = run_benchmark(client, prompts, config, progress=progress_printer())
    paths = write_report(report, args.out, args.name)
    print(json.dumps(report.summary, indent=2))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def _experiments(args: argparse.Namespace) -> int:
    from .bench import load_prompts
    from .experiments import pool_experiment, quota_experiment, side_by_side_experiment

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    if args.which in ("quota", "all"):
        results["quota"] = quota_experiment(load_prompts(args.prompts), time_scale=args.time_scale,
                                            arrival_minutes=args.arrival_minutes, seed=args.seed, log=log)
        (out / "quota_experiment.json").write_text(json.dumps(results["quota"], indent=2) + "\n")
    if args.which in ("side-by-side", "all"):
        results["side_by_side"] = side_by_side_experiment(log=log)
        (out / "side_by_side_experiment.json").write_text(json.dumps(results["side_by_side"], indent=2) + "\n")
    if args.which in ("pool", "all"):
        results["pool"] = pool_experiment(seed=args.seed, log=log)
        (out / "pool_experiment.json").write_text(json.dumps(results["pool"], indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="genai-pacer", description=__doc__.split("\n\n")[0])
    commands = root.add_subparsers(dest="command", required=True)

    emulator = commands.add_parser("emulator", help="serve a Bedrock Runtime emulator on loopback")
    emulator.add_argument("--model-id", default="us.amazon.nova-lite-v1:0")
    emulator.add_argument("--port", type=int, default=8765)
    _model_args(emulator)
    emulator.set_defaults(run=_emulator)

    bench = commands.add_parser("bench", help="replay a JSONL workload and report latency percentiles")
    bench.add_argument("--prompts", required=True, help='JSONL: {"prompt": ..., "expected_output_tokens": N}')
    bench.add_argument("--model-id", required=True)
    target = bench.add_mutually_exclusive_group()
    target.add_argument("--emulator", action="store_true", help="start an emulator in-process and use it")
    target.add_argument("--endpoint-url", help="a running emulator (or any bedrock-runtime endpoint)")
    bench.add_argument("--region", help="AWS Region for real Bedrock")
    load = bench.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, default=8, help="closed loop: requests in flight (default 8)")
    load.add_argument("--rate", type=float, help="open loop: Poisson arrivals per minute")
    bench.add_argument("--requests", type=int, default=200)
    bench.add_argument("--warmup", type=int, default=8)
    bench.add_argument("--no-stream", action="store_true", help="call Converse instead of ConverseStream")
    bench.add_argument("--max-tokens", type=int, default=None)
    bench.add_argument("--latency", choices=["standard", "optimized"], default=None)
    bench.add_argument("--max-attempts", type=int, default=4, help="SDK attempts per request, first call included")
    bench.add_argument("--ttft-target", type=float, help="goodput: TTFT at most this many seconds")
    bench.add_argument("--otps-target", type=float, help="goodput: at least this many output tokens per second")
    bench.add_argument("--e2e-target", type=float, help="goodput: end-to-end latency at most this many seconds")
    bench.add_argument("--out", default="bench-results")
    bench.add_argument("--name", default="bench", help="file name stem of the report")
    _model_args(bench)
    bench.set_defaults(run=_bench)

    experiments = commands.add_parser("experiments", help="quota and connection-pool experiments on the emulator")
    experiments.add_argument("--prompts", required=True)
    experiments.add_argument("--which", choices=["quota", "side-by-side", "pool", "all"], default="all")
    experiments.add_argument("--time-scale", type=float, default=4.0)
    experiments.add_argument("--arrival-minutes", type=float, default=1.0)
    experiments.add_argument("--seed", type=int, default=0)
    experiments.add_argument("--out", default="bench-results")
    experiments.set_defaults(run=_experiments)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except ValueError as error:  # bad input: one clear line, not a traceback
        print(f"genai-pacer {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
