"""Fault injection for the queue worker (issue 22): bad stored items, malformed messages, lone
surrogates, a DynamoDB throttle, model 429/503/timeout. Each case asserts what a user relies on: the
stored answer afterwards, the batch item failures, and how many model calls were paid for."""

from __future__ import annotations

from pacer_runtime import answers
from queued_worker_harness import T0, TABLE, answer, expect_call, item, log_lines, record


def corrupt(worker, **attributes) -> None:
    """Store a bad item under "k" with a sequence newer than any message below (within the skew)."""
    stored = {"pk": {"S": "k"}, "answer": {"S": "old"}, "model_id": {"S": "m"}, "request_id": {"S": "queue#z"},
              "sequence": {"N": str(T0 + 10_000)}, "generated_at": {"S": answers.iso_utc(T0 / 1000)}}
    stored.update(attributes)
    worker.DDB.put_item(TableName=TABLE, Item=stored)


def test_a_corrupted_item_is_repaired_by_one_call_and_never_fails_the_message(worker, capsys):
    for bad in ({"sequence": {"S": "x"}}, {"sequence": {"N": str(10**38 - 1)}}, {"answer": {"N": "123"}},
                {"generated_at": {"S": "9999-01-01T00:00:00+00:00"}},
                # every other attribute readers check, and what only put_answer can judge (issue 22 audit)
                {"output_tokens": {"S": "5"}}, {"stop_reason": {"N": "1"}}, {"sent_at": {"BOOL": True}},
                {"cache_write_tokens": {"N": "-1"}}, {"input_tokens": {"N": "1.5"}},
                {"generated_at": {"S": "2025-13-40T99:99:99Z"}}):
        corrupt(worker, **bad)
        expect_call(worker, "fresh")  # exactly one model call per repair (the stub holds one response)
        message = record("m-1", {"key": "k", "prompt": "p", "requestId": f"r-{len(bad)}-{list(bad)[0]}"})
        assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
        assert (item(worker, "k")["answer"], item(worker, "k")["sequence"]) == ("fresh", str(T0))
        # A redelivery finds the repaired answer: no second call, no failure.
        assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
    problems = [line["problem"] for line in log_lines(capsys) if line.get("reason") == "invalid-stored-item"]
    assert len(problems) == 10 and all("old" not in p for p in problems)


# --- log-safe errors: a card number in the prompt reaches no log line on any path --------------

import json  # noqa: E402

import pytest  # noqa: E402
from botocore.exceptions import ClientError, ReadTimeoutError  # noqa: E402

CARD = "4111 1111 1111 1111"
PROMPT = f"Refund card {CARD} please"


def model_error(code: str, status: int, message: str = f"Malformed input: {PROMPT}") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Converse")


def calls_through(worker, monkeypatch, outcomes: list) -> list:
    """Replace the model call: each call takes the next outcome (an exception is raised, text is answered)."""
    made: list = []
    real = worker.__dict__.setdefault("_real_converse", worker.converse)

    def converse(client, request):
        made.append(request)
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        worker.stub.add_response("converse", answer(outcome))
        return real(client, request)

    monkeypatch.setattr(worker, "converse", converse)
    return made


@pytest.mark.parametrize(
    ("fault", "reason", "code", "status"),
    [
        (model_error("ThrottlingException", 429), "throttled", "ThrottlingException", 429),
        (model_error("ServiceUnavailableException", 503), "model-error", "ServiceUnavailableException", 503),
        (model_error("ValidationException", 400), "model-error", "ValidationException", 400),
        (ReadTimeoutError(endpoint_url=f"https://bedrock-runtime.us-east-1.amazonaws.com/{PROMPT}"),
         "connection-error", None, None),
    ],
    ids=["429", "503", "400", "timeout"],
)
def test_a_model_fault_fails_its_message_alone_logs_no_prompt_and_frees_the_claim(
    worker, monkeypatch, capsys, fault, reason, code, status
):
    made = calls_through(worker, monkeypatch, ["before", fault, "after"])
    records = [record(f"m-{i}", {"key": f"k{i}", "prompt": PROMPT}) for i in range(3)]
    assert worker.handler({"Records": records}) == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert len(made) == 3  # one call each, no hidden retry of the failed one
    assert [item(worker, f"k{i}") and item(worker, f"k{i}")["answer"] for i in range(3)] == ["before", None, "after"]
    assert item(worker, "claim#req#m-1") is None  # the redelivery proceeds at once
    out = capsys.readouterr().out
    assert CARD not in out
    (line,) = [json.loads(x) for x in out.splitlines() if '"level": "ERROR"' in x]
    assert (line["reason"], line.get("code"), line.get("httpStatus")) == (reason, code, status)
    throttle_metric = [x for x in out.splitlines() if '"Throttles"' in x]
    assert bool(throttle_metric) == (reason == "throttled")
    # The redelivery of the failed message: one more call, answered and stored.
    made_before = len(made)
    calls_through(worker, monkeypatch, ["retried"])
    assert worker.handler({"Records": [records[1]]}) == {"batchItemFailures": []}
    assert item(worker, "k1")["answer"] == "retried" and len(made) == made_before


def test_a_store_throttle_is_named_as_the_stores_and_the_answer_comes_on_redelivery(worker, monkeypatch, capsys):
    real_put = worker.DDB.put_item
    throttled = []

    def put_item(**kwargs):
        if not kwargs["Item"]["pk"]["S"].startswith("claim#") and not throttled:
            throttled.append(kwargs["Item"]["pk"]["S"])
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": PROMPT},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "PutItem")
        return real_put(**kwargs)

    monkeypatch.setattr(worker.DDB, "put_item", put_item)
    expect_call(worker, "lost once")
    message = record("m-1", {"key": "k", "prompt": PROMPT})
    assert worker.handler({"Records": [message]}) == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert item(worker, "k") is None and item(worker, "claim#req#m-1") is None
    out = capsys.readouterr().out
    assert CARD not in out and '"Throttles"' not in out  # not the model's quota
    (line,) = [json.loads(x) for x in out.splitlines() if '"level": "ERROR"' in x]
    assert (line["reason"], line["code"]) == ("store-throttled", "ProvisionedThroughputExceededException")
    expect_call(worker, "stored")
    assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
    assert item(worker, "k")["answer"] == "stored"


def test_parameter_validation_and_unexpected_errors_log_no_prompt(worker, monkeypatch, capsys):
    def explode(client, request):
        raise RuntimeError(f"bug while handling {request['messages'][0]['content'][0]['text']}")

    guard = [{"role": "user", "content": [{"guardContent": {"text": {"text": PROMPT, "qualifiers": PROMPT}}}]}]
    bad_param = record("m-param", {"key": "k1", "messages": guard})
    expect_call(worker, "neighbour")  # botocore validates before any call; the neighbour then takes this answer
    result = worker.handler({"Records": [bad_param, record("ok", {"key": "n", "prompt": "p"})]})
    monkeypatch.setattr(worker, "converse", explode)
    result["batchItemFailures"] += worker.handler({"Records": [record("m-bug", {"key": "k2", "prompt": PROMPT})]})[
        "batchItemFailures"]
    assert {f["itemIdentifier"] for f in result["batchItemFailures"]} == {"m-bug", "m-param"}
    out = capsys.readouterr().out
    assert CARD not in out
    lines = {x["messageId"]: x for x in (json.loads(y) for y in out.splitlines()) if x.get("level") == "ERROR"}
    assert lines["m-bug"]["reason"] == "unexpected" and lines["m-bug"]["errorClass"] == "RuntimeError"
    assert (lines["m-param"]["reason"], lines["m-param"]["errorClass"]) == ("invalid-message", "ParamValidationError")
    assert item(worker, "n")["answer"] == "neighbour"


# --- malformed messages and lone surrogates: each fails alone, with its reason -----------------

DEEP = '{"key": "k", "prompt": ' + "[" * 100_000 + "]" * 100_000 + "}"

MALFORMED = [
    ('{"key": "k", "prompt": "\\ud800 cut emoji"}', "body.prompt is not valid Unicode"),
    ('{"key": "k\\udc00", "prompt": "p"}', "is not valid Unicode"),
    ('{"key": "k", "prompt": "p", "requestId": "r\\ud83d"}', "is not valid Unicode"),
    ('{"key": "k", "messages": [{"role": "user", "content": [{"text": "\\ud800"}]}]}',
     "body.messages[0].content[0].text is not valid Unicode"),
    ('{"key": "k", "prompt": "p", "\\ud800": 1}', "unknown fields ['(not valid Unicode)']"),
    (DEEP, "body is JSON nested too deep to read"),
    ('{"key": "k", "prompt": "p"', "body is not JSON"),
    ("[1, 2]", "body must be a JSON object, not a list"),
]


def test_malformed_bodies_and_lone_surrogates_fail_alone_with_their_reason(worker, capsys):
    expect_call(worker, "good")
    records = [record(f"bad-{i}", body) for i, (body, _) in enumerate(MALFORMED)]
    records.insert(3, record("good", {"key": "g", "prompt": "p"}))
    result = worker.handler({"Records": records})
    assert result == {"batchItemFailures": [{"itemIdentifier": f"bad-{i}"} for i in range(len(MALFORMED))]}
    assert item(worker, "g")["answer"] == "good"  # the one model call (the stub held one response)
    lines = {x["messageId"]: x for x in log_lines(capsys) if x.get("level") == "ERROR"}
    for i, (_, detail) in enumerate(MALFORMED):
        assert lines[f"bad-{i}"]["reason"] == "invalid-message" and detail in lines[f"bad-{i}"]["detail"], (i, lines[f"bad-{i}"])


def test_records_that_are_not_sqs_records_fail_alone(worker, capsys):
    expect_call(worker, "good")
    records = [{"messageId": "no-body"}, {"messageId": "bytes", "body": 5}, record("good", {"key": "g", "prompt": "p"})]
    assert worker.handler({"Records": records}) == {
        "batchItemFailures": [{"itemIdentifier": "no-body"}, {"itemIdentifier": "bytes"}]}
    assert item(worker, "g")["answer"] == "good"
    reasons = {x["messageId"]: x["reason"] for x in log_lines(capsys) if x.get("level") == "ERROR"}
    assert reasons == {"no-body": "invalid-message", "bytes": "invalid-message"}
