"""Fault injection for the queue worker (issue 22): bad stored items, malformed messages, lone
surrogates, a DynamoDB throttle, model 429/503/timeout. Each case asserts what a user relies on: the
stored answer afterwards, the batch item failures, and how many model calls were paid for."""

from __future__ import annotations

from pacer_runtime import answers
from test_queued_worker import T0, TABLE, answer, expect_call, item, log_lines, record, worker  # noqa: F401


def corrupt(worker, **attributes) -> None:  # noqa: F811
    """Store a bad item under "k" with a sequence newer than any message below (within the skew)."""
    stored = {"pk": {"S": "k"}, "answer": {"S": "old"}, "model_id": {"S": "m"}, "request_id": {"S": "queue#z"},
              "sequence": {"N": str(T0 + 10_000)}, "generated_at": {"S": answers.iso_utc(T0 / 1000)}}
    stored.update(attributes)
    worker.DDB.put_item(TableName=TABLE, Item=stored)


def test_a_corrupted_item_is_repaired_by_one_call_and_never_fails_the_message(worker, capsys):  # noqa: F811
    for bad in ({"sequence": {"S": "x"}}, {"sequence": {"N": str(10**38 - 1)}}, {"answer": {"N": "123"}},
                {"generated_at": {"S": "9999-01-01T00:00:00+00:00"}}):
        corrupt(worker, **bad)
        expect_call(worker, "fresh")  # exactly one model call per repair (the stub holds one response)
        message = record("m-1", {"key": "k", "prompt": "p", "requestId": f"r-{len(bad)}-{list(bad)[0]}"})
        assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
        assert (item(worker, "k")["answer"], item(worker, "k")["sequence"]) == ("fresh", str(T0))
        # A redelivery finds the repaired answer: no second call, no failure.
        assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
    problems = [line["problem"] for line in log_lines(capsys) if line.get("reason") == "invalid-stored-item"]
    assert len(problems) == 4 and all("old" not in p for p in problems)
