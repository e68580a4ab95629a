"""The queue worker in the quota's shared ledger (QueuedInference(ledger=...), issue 25): a call holds
its reservation in the ledger item and settles it to the real usage; a refused message waits in the
queue as a new delayed message (never toward the DLQ's receive limit) without a model call; a failed
call returns its hold; a throttled ledger falls back to the process's part of the floor, with the
LedgerFallbacks metric. Against moto's DynamoDB and SQS, one thread (moto's UpdateItem is not atomic
across threads), the model stubbed."""

from __future__ import annotations

import base64
import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from pacer_runtime.ledger import ENVIRONMENT as LEDGER_ENVIRONMENT
from pacer_runtime.ledger import SharedLedger
from queued_worker_harness import (
    MODEL,
    T0,
    answer,
    create_table,
    import_worker,
    item,
    log_lines,
    record,
    worker_environment,
)

LEDGER_TABLE = "ledger"
QUOTA, FLOOR, PROCESSES, BURNDOWN = 1_000, 600, 2, 5
PROMPT = "hello"  # 5 characters: 2 estimated input tokens
MAX_TOKENS = 100
HOLD = 2 + MAX_TOKENS * BURNDOWN  # what the worker reserves: input + maxTokens x burndown = 502


def create_ledger_table() -> None:
    boto3.client("dynamodb").create_table(
        TableName=LEDGER_TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def start(monkeypatch, *, floor: int = FLOOR):
    """The worker as QueuedInference(ledger=...) configures it (a share of `floor` TPM, 2 processes)."""
    ledger_env = dict(zip(LEDGER_ENVIRONMENT, (LEDGER_TABLE, MODEL, "Queued", str(QUOTA), str(floor), str(QUOTA), "1",
                                              str(QUOTA * 1_440)),
                          strict=True))
    worker_environment(monkeypatch, **ledger_env, GENAI_PACER_BURNDOWN=str(BURNDOWN), MAX_CONCURRENCY=str(PROCESSES))
    create_table()
    create_ledger_table()
    queue_url = boto3.client("sqs").create_queue(QueueName="prompts")["QueueUrl"]
    monkeypatch.setenv("QUEUE_URL", queue_url)
    module = import_worker()
    module.LEDGER.sleep = lambda seconds: None  # the ledger's DynamoDB backoff, when a test throttles it
    return module, queue_url


@pytest.fixture
def shared(monkeypatch):
    with mock_aws():
        module, queue_url = start(monkeypatch)
        with Stubber(module.BEDROCK) as stub:
            module.stub, module.queue_url = stub, queue_url
            yield module
            stub.assert_no_pending_responses()


@pytest.fixture
def unfloored(monkeypatch):
    with mock_aws():
        module, queue_url = start(monkeypatch, floor=0)
        with Stubber(module.BEDROCK) as stub:
            module.stub, module.queue_url = stub, queue_url
            yield module
            stub.assert_no_pending_responses()


def body(key: str = "review#1", **extra) -> dict:
    return {"key": key, "prompt": PROMPT, "inferenceConfig": {"maxTokens": MAX_TOKENS}, **extra}


def ledger_item(worker) -> dict:
    found = worker.LEDGER.view(refresh=True)
    return {"held": found.held, **{f"h#{c}": v for c, v in found.consumers.items()}}


def other_consumer(tokens: int) -> None:
    """Another process of the quota holding `tokens` in the same ledger."""
    other = SharedLedger(LEDGER_TABLE, ledger_id=MODEL, consumer="Other", quota_tpm=QUOTA, client=boto3.client("dynamodb"))
    assert other.try_reserve(tokens).tokens == tokens


def sent_back(worker) -> list[dict]:
    """Messages in the queue, delays ignored (moto holds a delayed message until its delay passes)."""
    attributes = boto3.client("sqs").get_queue_attributes(QueueUrl=worker.queue_url, AttributeNames=["All"])["Attributes"]
    return attributes


def test_a_call_holds_its_reservation_and_settles_to_the_real_usage(shared):
    shared.stub.add_response("converse", answer("ok", input_tokens=20, output_tokens=5))
    assert shared.handler({"Records": [record("m1", body())]}) == {"batchItemFailures": []}
    # the return is carried to this process's next write (pacer_runtime.ledger, "Deferred returns")
    assert ledger_item(shared) == {"held": 502, "h#Queued": 502}
    assert shared.LEDGER.deferred_tokens == 502 - (20 + 5 * BURNDOWN)
    shared.LEDGER.flush()
    # input + output x burndown; the reservation of 502 is gone
    assert ledger_item(shared) == {"held": 20 + 5 * BURNDOWN, "h#Queued": 20 + 5 * BURNDOWN}
    assert item(shared, "review#1")["answer"] == "ok"


def test_cache_writes_count_and_cache_reads_are_free_in_the_settlement(shared):
    response = answer("ok", input_tokens=20, output_tokens=5)
    response["usage"].update(cacheReadInputTokens=1_000, cacheWriteInputTokens=30)
    shared.stub.add_response("converse", response)
    shared.handler({"Records": [record("m1", body())]})
    shared.LEDGER.flush()  # the return, carried to the next write (deferred returns), written now
    assert ledger_item(shared)["h#Queued"] == 20 + 30 + 5 * BURNDOWN


def test_a_refused_message_waits_in_the_queue_as_a_new_message_without_a_model_call(shared, capsys, monkeypatch):
    other_consumer(900)  # 900 + 502 > 1,000: the window cannot hold the call now
    sends = []
    real_send = shared.SQS.send_message
    monkeypatch.setattr(shared.SQS, "send_message", lambda **request: sends.append(request) or real_send(**request))
    binary = base64.b64encode(b"\x00\x01").decode()
    first = record("m1", body()) | {"messageAttributes": {
        "trace": {"stringValue": "abc", "dataType": "String"},
        "blob": {"binaryValue": binary, "dataType": "Binary"},
    }}
    # The delivery is done (deleted), not a failure: its receive count cannot reach the DLQ.
    assert shared.handler({"Records": [first, record("m2", body("review#2"))]}) == {"batchItemFailures": []}
    assert len(sends) == 2
    resent = json.loads(sends[0]["MessageBody"])
    assert resent == {**body(), "requestId": "m1", "sequence": T0}  # the request's identity rides along
    assert sends[0]["MessageAttributes"] == {"trace": {"DataType": "String", "StringValue": "abc"},
                                             "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}
    # the ledger's estimate of when the other consumer's slot leaves the window (60 s + 1 s slot + 1 s skew)
    assert 1 <= sends[0]["DelaySeconds"] <= 62 and sends[1]["DelaySeconds"] == sends[0]["DelaySeconds"]
    assert sent_back(shared)["ApproximateNumberOfMessagesDelayed"] == "2"
    waits = [line for line in log_lines(capsys) if line.get("reason") == "ledger-wait"]
    assert [w["messageId"] for w in waits] == ["m1", "m2"] and all(w["resentAs"] for w in waits)
    assert ledger_item(shared) == {"held": 900, "h#Other": 900}  # nothing held for the refused calls
    assert item(shared, "review#1") is None and item(shared, "answer-claim#m1") is None


def test_the_message_sent_back_is_answered_under_the_original_request(shared, monkeypatch):
    other_consumer(900)
    sends = []
    monkeypatch.setattr(shared.SQS, "send_message", lambda **request: sends.append(request) or {"MessageId": "m1-again"})
    shared.handler({"Records": [record("m1", body())]})
    shared.LEDGER.client.delete_item(TableName=LEDGER_TABLE, Key=shared.LEDGER.key)  # the other hold left the window
    # Its next delivery: a new message id and a later SentTimestamp, in a fresh process.
    worker = import_worker()
    with Stubber(worker.BEDROCK) as stub:
        stub.add_response("converse", answer("ok"))
        later = record("m1-again", sends[0]["MessageBody"], sent=T0 + 30_000)
        assert worker.handler({"Records": [later]}) == {"batchItemFailures": []}
    stored = item(worker, "review#1")
    assert (stored["answer"], stored["request_id"], stored["sequence"]) == ("ok", "queue#m1", str(T0))


def test_a_throttled_call_returns_its_hold_at_once(shared):
    shared.stub.add_client_error("converse", service_error_code="ThrottlingException", http_status_code=429)
    assert shared.handler({"Records": [record("m1", body())]}) == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    assert ledger_item(shared) == {"held": 0, "h#Queued": 0}


def test_a_call_bedrock_may_have_charged_keeps_its_hold(shared):
    shared.stub.add_client_error("converse", service_error_code="InternalServerException", http_status_code=500)
    assert shared.handler({"Records": [record("m1", body())]}) == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    assert ledger_item(shared) == {"held": HOLD, "h#Queued": HOLD}  # until its window passes


def throttle_ledger(worker, calls: int) -> Stubber:
    """DynamoDB throttles the ledger's next `calls` calls (each retried LEDGER_DYNAMODB_RETRIES times)."""
    stub = Stubber(worker.LEDGER.client)
    for _ in range(calls * (worker.LEDGER_DYNAMODB_RETRIES + 1)):
        stub.add_client_error("get_item", service_error_code="ProvisionedThroughputExceededException", http_status_code=400)
    stub.activate()
    return stub


def test_a_throttled_ledger_falls_back_to_the_processs_part_of_the_floor_with_the_metric(shared, capsys, monkeypatch):
    assert shared.FALLBACK_TPM == FLOOR / PROCESSES  # 300: one call of 502 never fits; a smaller one does
    stub = throttle_ledger(shared, calls=1)
    sends = []
    monkeypatch.setattr(shared.SQS, "send_message", lambda **request: sends.append(request) or {"MessageId": "x"})
    small = {**body(), "inferenceConfig": {"maxTokens": 55}}  # 2 + 275 = 277 tokens
    shared.stub.add_response("converse", answer("ok", input_tokens=20, output_tokens=5))
    records = [record("m1", small), record("m2", {**small, "key": "review#2"}), record("m3", body("review#3"))]
    assert shared.handler({"Records": records}) == {"batchItemFailures": []}
    stub.assert_no_pending_responses()  # asked once, then on the fallback without asking again
    stub.deactivate()
    assert item(shared, "review#1")["answer"] == "ok"  # admitted on the fallback
    # m2: 45 settled + 277 > 300 -> waits; m3: 502 > the part of the floor -> waits
    assert [json.loads(s["MessageBody"])["requestId"] for s in sends] == ["m2", "m3"]
    lines = capsys.readouterr().out.splitlines()
    (metric,) = [json.loads(line) for line in lines if "LedgerFallbacks" in line]
    assert metric["LedgerFallbacks"] == 1 and metric["LedgerId"] == MODEL
    assert metric["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [{"Name": "LedgerFallbacks", "Unit": "Count"}]
    assert metric["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["LedgerId"]]  # outside Lambda: by LedgerId only
    assert any('"reason": "ledger-fallback"' in line for line in lines)


def test_without_a_floor_a_throttled_ledger_lets_messages_wait_never_unbounded(unfloored, monkeypatch):
    assert unfloored.FALLBACK is None
    stub = throttle_ledger(unfloored, calls=1)
    sends = []
    monkeypatch.setattr(unfloored.SQS, "send_message", lambda **request: sends.append(request) or {"MessageId": "x"})
    assert unfloored.handler({"Records": [record("m1", body())]}) == {"batchItemFailures": []}
    stub.deactivate()
    assert [s["DelaySeconds"] for s in sends] == [unfloored.LEDGER_RETRY_SECONDS]  # no model call (no stubbed answer)


def test_a_call_the_worker_could_never_hold_is_refused_as_a_bad_message(shared, capsys):
    huge = {**body(), "inferenceConfig": {"maxTokens": 400}}  # 2 + 2,000 > the burst cap of 1,000
    assert shared.handler({"Records": [record("m1", huge)]}) == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    (line,) = [line for line in log_lines(capsys) if line.get("reason") == "invalid-message"]
    assert "more than this worker may hold in the shared ledger" in line["detail"]


def test_the_worker_reads_the_variables_the_construct_sets(shared):
    from genai_pacer.queue.inference import LEDGER_SECONDS, PROCESSES_VARIABLE, QUEUE_URL_VARIABLE

    assert (shared.QUEUE_URL_VARIABLE, shared.PROCESSES_VARIABLE, shared.LEDGER_SECONDS) == (
        QUEUE_URL_VARIABLE, PROCESSES_VARIABLE, LEDGER_SECONDS)
    # the ledger's work joins the time each message needs
    assert shared.RECORD_BUDGET_MS == (shared.CALL_BUDGET_SECONDS + shared.STORE_SECONDS + LEDGER_SECONDS) * 1000
