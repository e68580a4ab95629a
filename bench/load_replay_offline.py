"""A LoadReplay run executed offline: the deployable load replay's state machine (plan, a Distributed Map
of 20 virtual users continuing their shares, the summary) run by StateMachineRunner, its function in this
process against the Bedrock emulator (its default model: TTFT 0.5 s + prefill, 60 output tokens a second,
10% jitter, in real time: a deployed run's function measures wall time, so the emulator runs at time scale
1 and the report's seconds are the emulator's) and moto's S3, then rendered with `genai-pacer bench
report`'s code.

What it shows is the report a deployed run gives (docs/benchmark.md) and that the pieces fit; the figures
are the emulator's assumptions, not Bedrock's. The runner calls the in-process function one call at a
time, so the users do not contend here as they do in a deployed run (about 4 minutes for the defaults).

    .venv/bin/python bench/load_replay_offline.py --out bench/results
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from genai_pacer import BedrockModel, LoadReplay, planning
from genai_pacer.testing import BedrockEmulator, ModelSpec
from genai_pacer.testing.bench import SAMPLE_PROMPTS, replay_report
from genai_pacer.testing.sfn import StateMachineRunner

MODEL = "us.amazon.nova-micro-v1:0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results", help="directory of the report (default bench/results)")
    parser.add_argument("--requests", type=int, default=100, help="measured requests (default 100)")
    parser.add_argument("--users", type=int, default=10, help="virtual users (default 10)")
    parser.add_argument("--max-tokens", type=int, default=120, help="maxTokens of every request (default 120)")
    args = parser.parse_args(argv)
    stack = cdk.Stack(cdk.App(), "Offline", env=cdk.Environment(account="111122223333", region="us-east-1"))
    prompts = s3.Bucket(stack, "Prompts", enforce_ssl=True)
    replay = LoadReplay(stack, "Replay", model=BedrockModel.from_id(MODEL), prompts_bucket=prompts,
                        prompts_key="prompts.jsonl", concurrency=args.users, requests=args.requests, warmup=args.users,
                        max_tokens=args.max_tokens,
                        profile=planning.TokenProfile(input_tokens=1_100, output_tokens=args.max_tokens,
                                                      max_tokens=args.max_tokens))
    with BedrockEmulator([ModelSpec(MODEL, tpm_quota=2_000_000)], time_scale=1) as bedrock, \
            StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(prompts), Key="prompts.jsonl", Body=SAMPLE_PROMPTS.read_bytes())
        runner.run({}, name="offline", timeout=1_800).raise_for_status()  # real time: about 4 minutes
        folder = f"s3://{runner.physical_name(replay.results_bucket)}/load-replay/offline/"
        report, written = replay_report(folder, Path(args.out), "load-replay-offline", s3=runner.s3)
    print(json.dumps(report.summary, indent=2))
    print("wrote " + ", ".join(str(path) for path in written), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
