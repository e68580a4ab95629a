"""Integration test: a LoadReplay run of 20 requests at 4 virtual users against the integ model (Amazon
Nova Micro by default) from the test Region, its report computed and written beside the records.

One IntegTest (LoadReplay): the assertions upload a prompts object of recorded Converse requests and
one text line, start a run, and wait for the execution to end SUCCEEDED with a summary of 20 measured
requests, none failed (the Summarize step's output; the report itself is in the results bucket, which
is emptied and deleted with the stack). Read it before the destroy with `genai-pacer bench report`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aws_cdk as cdk  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest, Match  # noqa: E402
from genai_pacer import LoadReplay, planning  # noqa: E402

from integ._support import destroy_on_delete, model, new_app, scratch_bucket  # noqa: E402

WAIT = cdk.Duration.minutes(15)
POLL = cdk.Duration.seconds(20)
PROMPTS_KEY = "prompts/recorded.jsonl"
REQUESTS, USERS = 20, 4
#: The execution's output holds Summarize's result ({"report", "requests", "succeeded", "failed",
#: "throttles"}): all 20 measured, all answered, in whatever order the fields come.
SUMMARY = "^" + "".join(rf'(?=[\s\S]*"{name}"\s*:\s*{value}[,}}])'
                  for name, value in (("requests", REQUESTS), ("succeeded", REQUESTS), ("failed", 0)))
#: Three recorded Converse requests (one multi-turn, one with a system prompt) and one text line.
PROMPTS = [
    {"id": "billing", "system": [{"text": "You answer billing questions in one sentence."}],
     "messages": [{"role": "user", "content": [{"text": "Why was I charged twice?"}]}],
     "inferenceConfig": {"maxTokens": 80, "temperature": 0.2}},
    {"id": "follow-up", "messages": [
        {"role": "user", "content": [{"text": "Name a prime number."}]},
        {"role": "assistant", "content": [{"text": "7"}]},
        {"role": "user", "content": [{"text": "And the next one?"}]}], "inferenceConfig": {"maxTokens": 20}},
    {"id": "summary", "messages": [{"role": "user", "content": [{"text": "Summarize in one sentence: the kettle "
                                                                         "boils fast, but the lid broke."}]}],
     "inferenceConfig": {"maxTokens": 60}},
    {"id": "tag", "prompt": "One word, positive or negative: great battery life", "expected_output_tokens": 3},
]


class LoadReplayStack(cdk.Stack):
    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        self.prompts = scratch_bucket(self, "Prompts")
        self.replay = LoadReplay(
            self,
            "Replay",
            model=model(self),
            prompts_bucket=self.prompts,
            prompts_key=PROMPTS_KEY,
            concurrency=USERS,
            requests=REQUESTS,
            warmup=0,
            profile=planning.TokenProfile(input_tokens=40, output_tokens=40, max_tokens=80),
            results_bucket=scratch_bucket(self, "Results"),
            retention=cdk.Duration.days(1),
            request_cap=REQUESTS,
        )
        destroy_on_delete(self)


def build_app(context: dict | None = None, outdir: str | None = None) -> cdk.App:
    app = new_app(context, outdir)
    stack = LoadReplayStack(app, "IntegLoadReplay")
    test = IntegTest(app, "LoadReplay", test_cases=[stack], stack_update_workflow=False)
    upload = test.assertions.aws_api_call("S3", "putObject", {
        "Bucket": stack.prompts.bucket_name, "Key": PROMPTS_KEY,
        "Body": "".join(json.dumps(line) + "\n" for line in PROMPTS),
    })
    run = test.assertions.aws_api_call(
        "StepFunctions", "startExecution", {"stateMachineArn": stack.replay.state_machine.state_machine_arn})
    upload.next(run)
    run.next(
        test.assertions.aws_api_call("StepFunctions", "describeExecution", {"executionArn": run.get_att_string("executionArn")})
        .expect(ExpectedResult.object_like({
            "status": "SUCCEEDED",
            # Summarize's result: {"report": "s3://...", "requests": 20, "succeeded": 20, "failed": 0, "throttles": n}
            "output": Match.string_like_regexp(SUMMARY),
        }))
        .wait_for_assertions(total_timeout=WAIT, interval=POLL)
    )
    return app


if __name__ == "__main__":
    build_app().synth()
