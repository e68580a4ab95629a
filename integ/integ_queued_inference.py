"""Integration test: QueuedInference answers a good message into DynamoDB and dead-letters a malformed one.

One test case. Assertions, as a producer and an operator would check:
- a well-formed message ({"key", "prompt", "inferenceConfig"}) is answered: its item appears in
  the answer table under the normalized key with a non-empty answer;
- a malformed message (not JSON) fails alone and, after its one delivery (max_receive_count=1),
  is in the dead-letter queue with its body unchanged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aws_cdk as cdk  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest, Match  # noqa: E402
from genai_pacer import QueuedInference  # noqa: E402

from integ._support import destroy_on_delete, grant_assertions_keys, model, new_app  # noqa: E402

WAIT = cdk.Duration.minutes(10)
POLL = cdk.Duration.seconds(20)
GOOD_KEY = "integ#good"  # already normalized (lower case, no extra spaces): the table holds it as sent
MALFORMED = "this is not JSON"


class QueuedInferenceStack(cdk.Stack):
    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        self.inference = QueuedInference(
            self,
            "Worker",
            model=model(self),
            max_concurrency=2,  # the event source's least
            batch_size=1,
            max_receive_count=1,  # a malformed message reaches the DLQ after one delivery, not three
            max_output_tokens=100,  # keeps the derived function timeout (and the visibility timeout) short
        )
        destroy_on_delete(self)


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    app = new_app(context, outdir)
    stack = QueuedInferenceStack(app, "IntegQueuedInference")
    integ = IntegTest(app, "QueuedInference", test_cases=[stack], stack_update_workflow=False)
    inference = stack.inference
    assert inference.dead_letter_queue is not None
    good = integ.assertions.aws_api_call(
        "SQS",
        "sendMessage",
        {
            "QueueUrl": inference.queue.queue_url,
            "MessageBody": json.dumps(
                {"key": GOOD_KEY, "prompt": "Say hello in one word.", "inferenceConfig": {"maxTokens": 20}}
            ),
        },
    )
    bad = integ.assertions.aws_api_call(
        "SQS", "sendMessage", {"QueueUrl": inference.queue.queue_url, "MessageBody": MALFORMED}
    )
    answered = (
        integ.assertions.aws_api_call(
            "DynamoDB", "getItem", {"TableName": inference.table.table_name, "Key": {"pk": {"S": GOOD_KEY}}}
        )
        .expect(
            ExpectedResult.object_like(
                {"Item": Match.object_like({"pk": {"S": GOOD_KEY}, "answer": {"S": Match.string_like_regexp(".+")}})}
            )
        )
        .wait_for_assertions(total_timeout=WAIT, interval=POLL)
    )
    dead_lettered = (
        integ.assertions.aws_api_call(
            "SQS",
            "receiveMessage",
            # VisibilityTimeout 0: a poll that sees the message leaves it visible for the next poll
            {"QueueUrl": inference.dead_letter_queue.queue_url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 0},
        )
        .expect(ExpectedResult.object_like({"Messages": Match.array_with([Match.object_like({"Body": MALFORMED})])}))
        .wait_for_assertions(total_timeout=WAIT, interval=POLL)
    )
    good.next(bad).next(answered).next(dead_lettered)
    grant_assertions_keys([good, bad, answered, dead_lettered], stack)
    return app


if __name__ == "__main__":
    build_app().synth()
