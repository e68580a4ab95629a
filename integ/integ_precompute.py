"""Integration test: pre-computation writes answers to the AnswerStore, and batch loading refuses a run
below the job minimum with the numbers.

One test case (the three constructs share one AnswerStore, as in a user's stack):
- ScheduledPrecompute: a run started as its schedule would start it (the schedule itself is set for
  1 January, so it never fires during the test) ends SUCCEEDED, and each key's answer is in the table;
- AnswerRouter: invoked with a stored key, it answers from the store (source "store", reason
  "hit"), with no model call;
- BatchPrecompute: a run of two items (below the model's minimum of 100 records per batch job)
  ends FAILED with BatchPrecompute.TooFewRecords before any job is submitted, its cause naming the
  numbers. A full batch job is left out on purpose: jobs wait in Bedrock's queue for minutes to
  hours, longer than an assertion can wait, and need at least 100 records.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aws_cdk as cdk  # noqa: E402
from aws_cdk import aws_scheduler as scheduler  # noqa: E402
from aws_cdk import aws_stepfunctions as sfn  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest, Match  # noqa: E402
from genai_pacer import AnswerStore, ConverseRequest  # noqa: E402
from genai_pacer.precompute.batch import BatchPrecompute  # noqa: E402
from genai_pacer.precompute.router import AnswerRouter  # noqa: E402
from genai_pacer.precompute.scheduled import ScheduledPrecompute  # noqa: E402

from integ._support import destroy_on_delete, grant_assertions_keys, model, new_app, scratch_bucket  # noqa: E402

WAIT = cdk.Duration.minutes(10)
POLL = cdk.Duration.seconds(15)
ITEMS = [{"key": "integ-note#aapl", "ticker": "AAPL"}, {"key": "integ-note#msft", "ticker": "MSFT"}]


class PrecomputeStack(cdk.Stack):
    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        bedrock = model(self)
        self.store = AnswerStore(self, "Answers", answer_ttl=cdk.Duration.days(1))
        self.scheduled = ScheduledPrecompute(
            self,
            "Notes",
            answer_store=self.store,
            model=bedrock,
            request=ConverseRequest(
                prompt=sfn.JsonPath.format("In one sentence, what does {} sell?", sfn.JsonPath.string_at("$.item.ticker")),
                max_tokens=60,
            ),
            max_concurrency=2,
            schedule=scheduler.ScheduleExpression.cron(
                minute="0", hour="6", day="1", month="1", time_zone=cdk.TimeZone.ETC_UTC
            ),
            items=ITEMS,
        )
        self.batch = BatchPrecompute(
            self,
            "Batch",
            model=bedrock,
            answer_store=self.store,
            max_tokens=60,
            # Buckets the stack empties on delete (the construct's own keep their objects, by design).
            input_bucket=scratch_bucket(self, "BatchInput"),
            output_bucket=scratch_bucket(self, "BatchOutput"),
            max_concurrent_jobs=1,
        )
        self.router = AnswerRouter(
            self, "Router", answer_store=self.store, model=bedrock, max_output_tokens=60, function_url=False
        )
        destroy_on_delete(self)


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    app = new_app(context, outdir)
    stack = PrecomputeStack(app, "IntegPrecompute")
    integ = IntegTest(app, "Precompute", test_cases=[stack], stack_update_workflow=False)
    assertions = integ.assertions

    run = assertions.aws_api_call(
        "StepFunctions",
        "startExecution",
        {"stateMachineArn": stack.scheduled.state_machine.state_machine_arn, "input": json.dumps({"items": ITEMS})},
    )
    done = (
        assertions.aws_api_call("StepFunctions", "describeExecution", {"executionArn": run.get_att_string("executionArn")})
        .expect(ExpectedResult.object_like({"status": "SUCCEEDED"}))
        .wait_for_assertions(total_timeout=WAIT, interval=POLL)
    )
    chain = run.next(done)
    calls = [run, done]
    for item in ITEMS:
        stored = assertions.aws_api_call(
            "DynamoDB", "getItem", {"TableName": stack.store.table.table_name, "Key": {"pk": {"S": item["key"]}}}
        ).expect(
            ExpectedResult.object_like(
                {"Item": Match.object_like({"pk": {"S": item["key"]}, "answer": {"S": Match.string_like_regexp(".+")}})}
            )
        )
        chain = chain.next(stored)
        calls.append(stored)
    # The router serves a pre-computed key from the store, with no model call.
    served = assertions.invoke_function(
        function_name=stack.router.function.function_name,
        payload=json.dumps({"key": ITEMS[0]["key"]}),
    ).expect(
        ExpectedResult.object_like(
            {
                "Payload": Match.serialized_json(
                    Match.object_like({"statusCode": 200, "source": "store", "reason": "hit", "key": ITEMS[0]["key"]})
                )
            }
        )
    )
    chain.next(served)

    batch = assertions.aws_api_call(
        "StepFunctions",
        "startExecution",
        {
            "stateMachineArn": stack.batch.state_machine.state_machine_arn,
            "input": json.dumps({"items": [{"key": f"integ-batch#{n}", "prompt": f"Say {n}."} for n in (1, 2)]}),
        },
    )
    refused = (
        assertions.aws_api_call("StepFunctions", "describeExecution", {"executionArn": batch.get_att_string("executionArn")})
        .expect(
            ExpectedResult.object_like(
                {
                    "status": "FAILED",
                    "error": "BatchPrecompute.TooFewRecords",
                    "cause": Match.string_like_regexp(r"^2 records to answer .*below the minimum of 100"),
                }
            )
        )
        .wait_for_assertions(total_timeout=WAIT, interval=POLL)
    )
    batch.next(refused)
    grant_assertions_keys([*calls, batch, refused], stack)
    return app


if __name__ == "__main__":
    build_app().synth()
