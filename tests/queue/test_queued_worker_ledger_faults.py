"""The shared ledger's edge cases for the queue worker (issue 25's done-criteria: a consumer that dies
holding tokens, skewed clocks, a malformed item; a throttled ledger is in test_queued_worker_ledger),
with the worker as Lambda runs it against moto's DynamoDB and SQS, the model stubbed. Each "process" is
the handler module imported afresh (its own SharedLedger and client), on the ledger's clock each test
sets, so nothing waits for the wall clock."""

from __future__ import annotations

import json
import math
import time

import boto3
from botocore.stub import Stubber
from pacer_runtime.ledger import LedgerHold, LedgerView, SharedLedger
from queued_worker_harness import MODEL, answer, import_worker, item, log_lines, record
from test_queued_worker_ledger import BURNDOWN, HOLD, LEDGER_TABLE, QUOTA, body, shared

__all__ = ["shared"]  # the fixture, shared with test_queued_worker_ledger

WINDOW_END = 1 + 60 + 1  # a slot's second + Bedrock's window + the ledger's skew (1 s, QuotaLedger's default)


def other_process(consumer: str, clock, **options) -> SharedLedger:
    return SharedLedger(LEDGER_TABLE, ledger_id=MODEL, consumer=consumer, quota_tpm=QUOTA, client=boto3.client("dynamodb"),
                        clock=clock, **options)


def fresh_worker(clock):
    """Another process of the worker (a new Lambda execution environment), on `clock`."""
    worker = import_worker()
    worker.LEDGER.clock = clock
    return worker


def answered(worker, message_id: str, key: str, sends: list, monkeypatch, **usage) -> dict:
    monkeypatch.setattr(worker.SQS, "send_message", lambda **request: sends.append(request) or {"MessageId": "again"})
    with Stubber(worker.BEDROCK) as stub:
        if usage:
            stub.add_response("converse", answer("ok", **usage))
        result = worker.handler({"Records": [record(message_id, body(key))]})
        stub.assert_no_pending_responses()
    return result


def test_a_worker_process_that_dies_holding_tokens_holds_them_only_until_their_window_passes(shared, monkeypatch):
    """One worker process reserves a call and dies before it settles (its Lambda timed out): the hold
    counts until its second + the window + the skew, then the next process's write removes it."""
    start = float(math.floor(time.time()))
    dead = other_process("Queued", lambda: start, floor_tpm=600)  # the same consumer: another process of it
    assert isinstance(dead.try_reserve(900), LedgerHold)  # and then it dies: never settled, never released
    sends: list = []
    # 900 + HOLD > 1,000 while the dead hold is in the window: the message waits in the queue, no model call
    assert 900 + HOLD > QUOTA
    within = fresh_worker(lambda: start + WINDOW_END - 0.1)
    assert answered(within, "m1", "review#1", sends, monkeypatch) == {"batchItemFailures": []}
    assert len(sends) == 1 and item(within, "review#1") is None
    after = fresh_worker(lambda: start + WINDOW_END + 0.1)
    assert answered(after, "m1-again", "review#1", sends, monkeypatch, input_tokens=20, output_tokens=5) == {
        "batchItemFailures": []}
    assert item(after, "review#1")["answer"] == "ok"
    after.LEDGER.flush()  # the settlement's return is written with the process's next write: now
    view = after.LEDGER.view(refresh=True)
    assert view.problems == [] and view.held == view.consumers["Queued"] == 20 + 5 * BURNDOWN  # input + output x burndown
    assert all(start_ > start for start_, _, _ in view.slots.values())  # the dead process's slot is gone


def test_a_worker_clock_ahead_within_the_skew_frees_nothing_early(shared, monkeypatch):
    start = float(math.floor(time.time()))
    other = other_process("Other", lambda: start)
    assert isinstance(other.try_reserve(600), LedgerHold)
    sends: list = []
    # 0.5 s ahead of the others when their slot's window ends: still held, so 600 + HOLD does not fit
    assert 600 + HOLD > QUOTA
    ahead = fresh_worker(lambda: start + 61.5)
    assert answered(ahead, "m1", "review#1", sends, monkeypatch) == {"batchItemFailures": []}
    assert len(sends) == 1 and LedgerView.parse(_item()).held == 600


def test_a_worker_clock_behind_the_others_writes_into_their_newest_second(shared, monkeypatch):
    """A worker five seconds behind another process adopts that process's second for its hold (within
    10 x the skew): its hold then leaves the window with the others', never before them."""
    start = float(math.floor(time.time()))
    other = other_process("Other", lambda: start)
    assert isinstance(other.try_reserve(100), LedgerHold)
    behind = fresh_worker(lambda: start - 5)
    sends: list = []
    assert answered(behind, "m1", "review#1", sends, monkeypatch, input_tokens=20, output_tokens=5) == {
        "batchItemFailures": []}
    view = LedgerView.parse(_item())
    assert view.problems == [] and sends == []
    assert {(when, consumer) for when, consumer, _ in view.slots.values()} == {(start, "Other"), (start, "Queued")}


def test_a_malformed_item_is_repaired_by_the_worker_and_the_message_answered(shared, monkeypatch, capsys):
    start = float(math.floor(time.time()))
    other = other_process("Other", lambda: start)
    assert isinstance(other.try_reserve(300), LedgerHold)
    boto3.client("dynamodb").update_item(
        TableName=LEDGER_TABLE, Key={"pk": {"S": "quota#" + MODEL}}, UpdateExpression="SET #h = :bad, #x = :x",
        ExpressionAttributeNames={"#h": "held", "#x": "mystery"},
        ExpressionAttributeValues={":bad": {"S": "lots"}, ":x": {"N": "1"}})
    worker = fresh_worker(lambda: start + 1)
    sends: list = []
    assert answered(worker, "m1", "review#1", sends, monkeypatch, input_tokens=20, output_tokens=5) == {
        "batchItemFailures": []}
    assert item(worker, "review#1")["answer"] == "ok" and sends == []
    assert worker.LEDGER.counts["repairs"] == 1
    raw = _item()
    view = LedgerView.parse(raw)
    assert view.problems == [] and "mystery" not in raw
    assert view.held == 300 + 20 + 5 * BURNDOWN and view.consumers == {"Other": 300, "Queued": 20 + 5 * BURNDOWN}
    logged = [line for line in log_lines(capsys) if "repaired" in json.dumps(line)]
    assert logged and "held is not a finite number" in json.dumps(logged[0])


def _item() -> dict:
    return boto3.client("dynamodb").get_item(TableName=LEDGER_TABLE, Key={"pk": {"S": "quota#" + MODEL}},
                                             ConsistentRead=True)["Item"]
