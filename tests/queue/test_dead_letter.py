"""What reaches the queue worker's dead-letter queue (issue 22): only the message that fails on every
delivery. A moto SQS queue with a redrive policy (maxReceiveCount 2) feeds the worker as Lambda's event
source mapping does with ReportBatchItemFailures: the messages of a batch that the handler does not
report are deleted, the reported ones become visible again, and SQS moves a message that was received
maxReceiveCount times to the DLQ."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError
from queued_worker_harness import TABLE, answer, item

MAX_RECEIVE_COUNT = 2


@pytest.fixture
def queues(worker):  # worker: its mock_aws is active
    sqs = boto3.client("sqs")
    dlq_url = sqs.create_queue(QueueName="worker-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName="worker", Attributes={
        "VisibilityTimeout": "0",  # a reported failure is visible again at once (the redelivery under test)
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}),
    })["QueueUrl"]
    return sqs, url, dlq_url


def lambda_records(sqs, url: str) -> list[dict]:
    """One receive, as the event source mapping turns it into an event's Records."""
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])
    return [{"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
             "attributes": m["Attributes"], "messageAttributes": {}, "eventSource": "aws:sqs"} for m in received]


def drain(worker, sqs, url: str, *, rounds: int = 20) -> list[list[str]]:
    """Deliver until the queue is empty; returns each round's failed message ids."""
    failures = []
    for _ in range(rounds):
        records = lambda_records(sqs, url)
        if not records:
            return failures
        result = worker.handler({"Records": records})
        failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
        failures.append(sorted(failed))
        for record in records:
            if record["messageId"] not in failed:  # ReportBatchItemFailures: the rest of the batch is deleted
                sqs.delete_message(QueueUrl=url, ReceiptHandle=record["receiptHandle"])
    raise AssertionError(f"the queue still held messages after {rounds} deliveries")


def model(worker, monkeypatch, outcomes: dict[str, list]) -> list[str]:
    """Replace the model call: a prompt's calls take its outcomes in turn (an exception is raised, text is
    answered through the real client and its Stubber). Returns the prompts of every call made."""
    made: list[str] = []
    real = worker.converse

    def converse(client, request):
        prompt = request["messages"][0]["content"][0]["text"]
        made.append(prompt)
        outcome = outcomes[prompt].pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        worker.stub.add_response("converse", answer(outcome))
        return real(client, request)

    monkeypatch.setattr(worker, "converse", converse)
    return made


def throttle() -> ClientError:
    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"},
                        "ResponseMetadata": {"HTTPStatusCode": 429}}, "Converse")


def test_only_the_message_that_fails_on_every_delivery_reaches_the_dlq(worker, queues, monkeypatch, capsys):
    sqs, url, dlq_url = queues
    made = model(worker, monkeypatch, {
        "good 1": ["answer 1"], "good 2": ["answer 2"],
        "flaky": [throttle(), "answer after a throttle"],  # fails once, answered on its redelivery
        "always throttled": [throttle()] * MAX_RECEIVE_COUNT,
    })
    bodies = {
        "good-1": {"key": "k1", "prompt": "good 1"},
        "poison": {"key": "k-poison", "prompt": "p", "colour": "a field the worker does not know"},
        "flaky": {"key": "k-flaky", "prompt": "flaky"},
        "good-2": {"key": "k2", "prompt": "good 2"},
        "throttled": {"key": "k-throttled", "prompt": "always throttled"},
    }
    sent = {name: sqs.send_message(QueueUrl=url, MessageBody=json.dumps(body))["MessageId"] for name, body in bodies.items()}

    rounds = drain(worker, sqs, url)

    dead = sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])
    assert sorted(m["MessageId"] for m in dead) == sorted([sent["poison"], sent["throttled"]])
    assert {json.loads(m["Body"])["key"] for m in dead} == {"k-poison", "k-throttled"}  # the bodies as sent
    assert all(int(m["Attributes"]["ApproximateReceiveCount"]) >= MAX_RECEIVE_COUNT for m in dead)
    # The others are stored, each after exactly the calls it needed; nothing else lost, nothing left.
    assert {k: item(worker, k)["answer"] for k in ("k1", "k2", "k-flaky")} == {
        "k1": "answer 1", "k2": "answer 2", "k-flaky": "answer after a throttle"}
    assert item(worker, "k-poison") is None and item(worker, "k-throttled") is None
    assert sorted(made) == sorted(["good 1", "good 2", "flaky", "flaky"] + ["always throttled"] * MAX_RECEIVE_COUNT)
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                                 "ApproximateNumberOfMessagesNotVisible"])["Attributes"] == {
        "ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}
    assert rounds[0] == sorted([sent["poison"], sent["flaky"], sent["throttled"]])  # the first delivery's failures
    assert not [i for i in worker.DDB.scan(TableName=TABLE)["Items"] if i["pk"]["S"].startswith("claim#")]  # all released
    reasons = {json.loads(line)["reason"] for line in capsys.readouterr().out.splitlines() if '"level": "ERROR"' in line}
    assert reasons == {"invalid-message", "throttled"}


def test_a_duplicate_delivery_is_answered_once_and_never_dead_lettered(worker, queues, monkeypatch):
    sqs, url, dlq_url = queues
    made = model(worker, monkeypatch, {"same": ["once"]})
    for _ in range(2):  # a producer's retry: the same requestId sent twice
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"key": "k", "prompt": "same", "requestId": "r-1"}))
    drain(worker, sqs, url)
    assert made == ["same"] and item(worker, "k")["answer"] == "once"
    assert sqs.receive_message(QueueUrl=dlq_url).get("Messages", []) == []
