"""Integration test: BoundedMap and ParallelPrompts answer real prompts, and a burst of prompts whose
max_tokens is the model's maximum throttles on the reservation alone.

Two IntegTest constructs, so integ-runner runs (deploys, asserts, destroys) two test cases:
- Orchestration: a 3-item Map and a 2-branch Parallel with a synthesis step; each execution must
  end SUCCEEDED with the narrowed output shape (answer text, stop reason, token usage).
- ThrottleProvocation: integ_throttle_requests one-word prompts, 40 at a time, each reserving
  input + integ_model_max_tokens of the quota; the model task has no Retry and catches every error,
  so the output lists the error names Step Functions reported. The assertion expects SUCCEEDED (the
  output itself is far above the 4,096 bytes an assertion may return to CloudFormation); `make
  integ` reads the names from the execution and fails the test case unless integ_throttle_error is
  among them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aws_cdk as cdk  # noqa: E402
from aws_cdk import aws_stepfunctions as sfn  # noqa: E402
from aws_cdk import aws_stepfunctions_tasks as tasks  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest, Match  # noqa: E402
from genai_pacer import BoundedMap, ConverseRequest, ParallelPrompts  # noqa: E402
from genai_pacer.models import INVOKE_ACTIONS  # noqa: E402

from integ._support import destroy_on_delete, int_setting, model, new_app  # noqa: E402

#: How long an assertion polls an execution before it fails (a Map of three short answers takes seconds).
WAIT = cdk.Duration.minutes(10)
POLL = cdk.Duration.seconds(15)

#: A JSON string's content (escaped quotes included), for matching answers in an execution's output.
_TEXT = r'"(?:[^"\\]|\\.)+"'
#: Exactly three narrowed Converse answers (non-empty text, a stop reason, token usage), whatever the
#: order of their fields: lookaheads count each field, and a fourth "text" fails the match.
THREE_ANSWERS = (
    r'^\[(?=(?:[\s\S]*?"text"\s*:\s*' + _TEXT + r"){3})"
    r'(?=(?:[\s\S]*?"stopReason"\s*:\s*"\w+"){3})'
    r'(?=(?:[\s\S]*?"outputTokens"\s*:\s*\d+){3})'
    r'(?![\s\S]*?(?:"text"[\s\S]*?){4})[\s\S]*\]$'
)
TICKERS = ["AAPL", "MSFT", "NVDA"]


def succeeded_with(output: Any) -> ExpectedResult:
    return ExpectedResult.object_like({"status": "SUCCEEDED", "output": output})


class OrchestrationStack(cdk.Stack):
    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        bedrock = model(self)
        ask = sfn.JsonPath.string_at
        self.tickers = BoundedMap(
            self,
            "Tickers",
            max_concurrency=3,
            model=bedrock,
            request=ConverseRequest(
                prompt=sfn.JsonPath.format("In one sentence, what does the company {} sell?", ask("$.ticker")),
                max_tokens=60,
            ),
            items_path="$.tickers",
            expected_items=len(TICKERS),
        )
        review = ask("$.review")
        self.digest = ParallelPrompts(
            self,
            "Digest",
            model=bedrock,
            prompts={
                "Summary": ConverseRequest(prompt=sfn.JsonPath.format("Summarize in one sentence: {}", review), max_tokens=60),
                "Sentiment": ConverseRequest(
                    prompt=sfn.JsonPath.format("One word, positive or negative: {}", review), max_tokens=5
                ),
            },
            synthesis=ConverseRequest(
                prompt=sfn.JsonPath.format(
                    "Write a one-sentence digest of: {}", sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.answers"))
                ),
                max_tokens=60,
            ),
        )
        destroy_on_delete(self)


class ThrottleStack(cdk.Stack):
    """A Map whose calls throttle on their reservation: short prompts, max_tokens at the model's maximum."""

    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        bedrock = model(self)
        max_tokens = int_setting(self, "integ_model_max_tokens")
        call = tasks.CallAwsService(
            self,
            "Converse",
            service="bedrockruntime",
            action="converse",
            iam_action=INVOKE_ACTIONS[0],
            iam_resources=[bedrock.invoke_arn(self)],
            parameters=ConverseRequest(prompt="Reply with the single word: ok", max_tokens=max_tokens).parameters(
                bedrock.model_id
            ),
            result_selector={"stopReason.$": "$.StopReason"},
        )
        # No Retry on purpose: the first error of each call is what Step Functions reports.
        answered = sfn.Pass(self, "Answered", parameters={"error": "none"})
        failed = sfn.Pass(self, "Failed", parameters={"error.$": "$.caught.Error"})
        call.add_catch(failed, errors=["States.ALL"], result_path="$.caught")
        self.burst = BoundedMap(
            self,
            "Burst",
            max_concurrency=40,  # the inline Map's most: as many reservations at once as Step Functions allows
            item_processor=call.next(answered),
        )
        for statement in bedrock.policy_statements(self, routed_only=True):  # the Regions a profile routes to
            self.burst.state_machine.add_to_role_policy(statement)
        destroy_on_delete(self)


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    app = new_app(context, outdir)

    stack = OrchestrationStack(app, "IntegOrchestration")
    orchestration = IntegTest(app, "Orchestration", test_cases=[stack], stack_update_workflow=False)
    run = orchestration.assertions.aws_api_call(
        "StepFunctions",
        "startExecution",
        {
            "stateMachineArn": stack.tickers.state_machine.state_machine_arn,
            "input": json.dumps({"tickers": [{"ticker": t} for t in TICKERS]}),
        },
    )
    run.next(
        orchestration.assertions.aws_api_call(
            "StepFunctions", "describeExecution", {"executionArn": run.get_att_string("executionArn")}
        )
        .expect(succeeded_with(Match.string_like_regexp(THREE_ANSWERS)))
        .wait_for_assertions(total_timeout=WAIT, interval=POLL)
    )
    digest = orchestration.assertions.aws_api_call(
        "StepFunctions",
        "startExecution",
        {
            "stateMachineArn": stack.digest.state_machine.state_machine_arn,
            "input": json.dumps({"review": "The kettle boils fast, but the lid broke after a week."}),
        },
    )
    digest.next(
        orchestration.assertions.aws_api_call(
            "StepFunctions", "describeExecution", {"executionArn": digest.get_att_string("executionArn")}
        )
        .expect(
            succeeded_with(
                Match.serialized_json(
                    Match.object_like(
                        {
                            "answers": {"Summary": Match.string_like_regexp(".+"), "Sentiment": Match.string_like_regexp(".+")},
                            "synthesis": Match.object_like(
                                {"text": Match.string_like_regexp(".+"), "stopReason": Match.string_like_regexp(r"^\w+$")}
                            ),
                        }
                    )
                )
            )
        )
        .wait_for_assertions(total_timeout=WAIT, interval=POLL)
    )

    throttle_stack = ThrottleStack(app, "IntegThrottle")
    throttle = IntegTest(app, "ThrottleProvocation", test_cases=[throttle_stack], stack_update_workflow=False)
    requests = int_setting(throttle_stack, "integ_throttle_requests")
    burst = throttle.assertions.aws_api_call(
        "StepFunctions",
        "startExecution",
        {
            "stateMachineArn": throttle_stack.burst.state_machine.state_machine_arn,
            "input": json.dumps({"items": list(range(requests))}),
        },
    )
    # Only the status: DescribeExecution echoes the burst's input and output (about 5 KB and 20 KB at
    # 1,000 prompts), and CloudFormation takes at most 4,096 bytes from the assertion's custom resource
    # ("Response object is too long"). `make integ` reads the error names from the execution itself and
    # fails the test case unless integ_throttle_error is among them (integ/run.py).
    burst.next(
        throttle.assertions.aws_api_call(
            "StepFunctions", "describeExecution", {"executionArn": burst.get_att_string("executionArn")}
        )
        .assert_at_path("status", ExpectedResult.string_like_regexp("^SUCCEEDED$"))  # not exact(): see alarm_exists
        .wait_for_assertions(total_timeout=WAIT, interval=POLL)
    )
    return app


if __name__ == "__main__":
    build_app().synth()
