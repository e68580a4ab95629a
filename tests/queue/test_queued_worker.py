"""lambda/queued_worker: per-message outcomes, ordered and claimed writes, the time budget, safe logs."""

from __future__ import annotations

import json
import threading
import time

import pytest
from botocore.stub import Stubber
from moto import mock_aws
from pacer_runtime import answers
from queued_worker_harness import (
    CALL_BUDGET,
    MODEL,
    SECRET,
    T0,
    TABLE,
    all_keys,
    answer,
    expect_call,
    item,
    load_worker,
    log_lines,
    record,
    worker_environment,
)


def test_good_batch_stores_each_answer_with_usage_order_and_times(worker, capsys):
    # No maxTokens in the message: the worker sends MAX_OUTPUT_TOKENS, the length its budget covers.
    expect_call(worker, "Great product.", prompt="Summarize review 1", input_tokens=30, output_tokens=4)
    expect_call(worker, "Mixed feelings.", prompt="Summarize review 2")
    result = worker.handler(
        {
            "Records": [
                record("m1", {"key": "review#1", "prompt": "Summarize review 1"}, sent=T0),
                record("m2", {"key": "review#2", "prompt": "Summarize review 2"}, sent=T0 + 5),
            ]
        }
    )
    assert result == {"batchItemFailures": []}
    stored = item(worker, "review#1")
    assert stored["answer"] == "Great product." and stored["model_id"] == MODEL
    assert (stored["input_tokens"], stored["output_tokens"], stored["request_id"]) == ("30", "4", "queue#m1")
    assert (stored["sequence"], stored["stop_reason"], stored["served_latency"]) == (str(T0), "end_turn", "standard")
    assert stored["sent_at"] == "2025-11-29T23:46:40.000+00:00"
    assert stored["generated_at"].endswith("+00:00") and "expires_at" not in stored
    assert item(worker, "review#2")["answer"] == "Mixed feelings."
    assert all_keys(worker) == ["review#1", "review#2"]  # claims released, none left behind
    out = capsys.readouterr().out.splitlines()
    metrics = [json.loads(line) for line in out if '"_aws"' in line]
    assert [m["OutputTokens"] for m in metrics] == [4, 5]
    assert metrics[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"][0] == {"Name": "InputTokens", "Unit": "Count"}


def test_answers_get_the_stores_ttl_when_it_has_one(monkeypatch):
    worker_environment(monkeypatch, ANSWER_TTL_SECONDS="3600")
    with mock_aws():
        module = load_worker()
        with Stubber(module.BEDROCK) as stub:
            stub.add_response("converse", answer("ok"))
            now = T0 / 1000 + 5  # the worker reads the message 5 s after it was sent
            monkeypatch.setattr(module.answers.time, "time", lambda: now)
            assert module.handler({"Records": [record("m1", {"key": "k", "prompt": "p"})]}) == {"batchItemFailures": []}
        assert item(module, "k")["expires_at"] == str(int(now) + 3600)


def test_mixed_batch_reports_exactly_the_malformed_and_the_throttled(worker, capsys):
    expect_call(worker, "first")
    worker.stub.add_client_error("converse", "ThrottlingException", "Too many tokens, please wait", 429)
    expect_call(worker, "last")
    result = worker.handler(
        {
            "Records": [
                record("ok-1", {"key": "a", "prompt": "one"}),
                record("bad-json", "{not json"),
                record("throttled", {"key": "b", "prompt": "two"}),
                record("ok-2", {"key": "c", "prompt": "three"}),
            ]
        }
    )
    assert result == {"batchItemFailures": [{"itemIdentifier": "bad-json"}, {"itemIdentifier": "throttled"}]}
    assert item(worker, "a")["answer"] == "first" and item(worker, "c")["answer"] == "last"
    assert item(worker, "b") is None and item(worker, "claim#req#throttled") is None  # released for the retry
    out = capsys.readouterr().out.splitlines()
    assert {(e["messageId"], e["reason"]) for e in map(json.loads, out) if "level" in e} == {
        ("bad-json", "invalid-message"),
        ("throttled", "throttled"),
    }
    throttles = [e for e in map(json.loads, out) if "_aws" in e and "Throttles" in e]
    assert [(e["Throttles"], e["ModelId"]) for e in throttles] == [(1, MODEL)]  # the dashboard's throttle line


def msg(content) -> dict:
    return {"key": "k", "messages": [{"role": "user", "content": content}]}


#: (body, what the log line's detail must say). Each body carries the secret prompt where it can.
MALFORMED = [
    ("{not json", "body is not JSON"),
    ([1, 2], "body must be a JSON object, not a list"),
    ("\"just a string\"", "body must be a JSON object, not a str"),
    ({"prompt": SECRET}, "key must be a string, not a NoneType"),
    ({"key": 123, "prompt": SECRET}, "key must be a string, not a int"),
    ({"key": " \t\n ", "prompt": SECRET}, "key is empty once whitespace is trimmed"),
    ({"key": "Claim#x", "prompt": SECRET}, "prefix reserved for claims"),
    ({"key": "k", "prompt": SECRET, "inference_config": {}}, "unknown fields ['inference_config']"),
    ({"key": "k"}, "exactly one of prompt"),
    ({"key": "k", "prompt": 42}, "prompt must be a non-empty string, not the number 42"),
    ({"key": "k", "prompt": SECRET, "messages": []}, "exactly one of prompt"),
    ({"key": "k", "messages": SECRET}, "messages must be a non-empty list"),
    ({"key": "k", "messages": {"role": "user"}}, "messages must be a non-empty list"),
    ({"key": "k", "messages": []}, "messages must be a non-empty list"),
    ({"key": "k", "messages": [SECRET]}, "messages[0] must be an object with role and content, not a string"),
    ({"key": "k", "messages": [{"role": "robot", "content": [{"text": SECRET}]}]}, "messages[0].role must be"),
    ({"key": "k", "messages": [{"role": "user", "content": [{"text": SECRET}], "name": "x"}]}, "unknown fields ['name']"),
    (msg(SECRET), "messages[0].content must be a non-empty list of content blocks, not a string"),
    (msg([]), "messages[0].content must be a non-empty list"),
    (msg([SECRET]), "messages[0].content[0] must be an object with exactly one key"),
    (msg([{"text": 5}]), "messages[0].content[0].text must be a non-empty string, not the number 5"),
    (msg([{"text": SECRET, "image": {}}]), "an object with 2 keys"),
    (msg([{"image": SECRET}]), "messages[0].content[0].image must be an object, not a string"),
    ({"key": "k", "prompt": SECRET, "system": 5}, "system must be a non-empty string, not the number 5"),
    ({"key": "k", "prompt": SECRET, "system": [SECRET]}, "system must be a non-empty string, not a list"),
    ({"key": "k", "prompt": SECRET, "system": ""}, "system must be a non-empty string, not an empty string"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": [600]}, "inferenceConfig must be an object"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": 600}, "inferenceConfig must be an object"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": SECRET}, "inferenceConfig must be an object"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": {"top_k": 3}}, "put model-specific parameters"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": {"maxTokens": "600"}}, "maxTokens (a string) must be a positive"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": {"maxTokens": True}}, "maxTokens (a boolean) must be a positive"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": {"maxTokens": 0}}, "maxTokens=0 must be a positive"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": {"maxTokens": 5000}}, "exceeds this worker's max_output_tokens=4096"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": {"temperature": 2}}, "temperature=2 must be a number from 0 to 1"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": {"temperature": "hot"}}, "temperature (a string)"),
    ('{"key": "k", "prompt": "x", "inferenceConfig": {"topP": NaN}}', "topP=nan must be a number from 0 to 1"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": {"stopSequences": "END"}}, "stopSequences must be a list"),
    ({"key": "k", "prompt": SECRET, "inferenceConfig": {"stopSequences": [1]}}, "stopSequences must be a list"),
    ({"key": "k", "prompt": SECRET, "additionalModelRequestFields": SECRET}, "additionalModelRequestFields must be an object"),
    ({"key": "k", "prompt": SECRET, "additionalModelRequestFields": 3}, "additionalModelRequestFields must be an object"),
    ({"key": "k", "prompt": SECRET, "additionalModelRequestFields": [1]}, "additionalModelRequestFields must be an object"),
    ({"key": "k", "prompt": SECRET, "additionalModelRequestFields": True}, "additionalModelRequestFields must be an object"),
    ({"key": "k", "prompt": SECRET, "requestId": 5}, "requestId must be a non-empty string, not a int"),
    ({"key": "k", "prompt": SECRET, "requestId": ""}, "requestId must be a non-empty string, not an empty string"),
    ({"key": "k", "prompt": SECRET, "requestId": None}, "requestId must be a non-empty string"),
    ({"key": "k", "prompt": SECRET, "sequence": "3"}, "sequence must be an integer, not a str"),
    ({"key": "k", "prompt": SECRET, "sequence": True}, "sequence must be an integer, not a bool"),
    ({"key": "k", "prompt": SECRET, "sequence": 1.5}, "sequence must be an integer, not a float"),
    ({"key": "k", "prompt": SECRET, "sequence": -1}, "sequence=-1 must be from 0"),
]


def test_each_malformed_shape_fails_alone_with_its_reason_and_never_the_prompt(worker, capsys):
    """Every bad message sits among good ones: only the bad ones fail, each logs why, none logs the prompt."""
    for text in ("first", "middle", "last"):
        expect_call(worker, text)
    bad = [record(f"bad-{i}", body) for i, (body, _) in enumerate(MALFORMED)]
    bad.append(record("unordered", {"key": "k", "prompt": SECRET}, sent=None))
    half = len(bad) // 2
    records = [
        record("good-1", {"key": "g1", "prompt": "p"}),
        *bad[:half],
        record("good-2", {"key": "g2", "prompt": "p"}),
        *bad[half:],
        record("good-3", {"key": "g3", "prompt": "p"}),
    ]
    result = worker.handler({"Records": records})

    assert result == {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in bad]}
    assert [item(worker, k)["answer"] for k in ("g1", "g2", "g3")] == ["first", "middle", "last"]
    out = capsys.readouterr().out
    assert SECRET not in out
    details = {e["messageId"]: e for e in (json.loads(line) for line in out.splitlines()) if e.get("level") == "ERROR"}
    expected = [(f"bad-{i}", detail) for i, (_, detail) in enumerate(MALFORMED)]
    expected.append(("unordered", "no SentTimestamp attribute and the body no sequence"))
    wrong = [
        (message_id, want, details.get(message_id, {}).get("detail"))
        for message_id, want in expected
        if details.get(message_id, {}).get("reason") != "invalid-message" or want not in details[message_id]["detail"]
    ]
    assert wrong == []


def test_an_unexpected_exception_fails_only_its_record_and_releases_the_claim(worker, monkeypatch, capsys):
    real_converse = worker.converse

    def converse(client, request):
        if request["messages"][0]["content"][0]["text"] == "explode":
            return {}["missing"]  # a KeyError, as a bug in the code would raise
        return real_converse(client, request)

    monkeypatch.setattr(worker, "converse", converse)
    expect_call(worker, "fine")
    expect_call(worker, "fine too")
    result = worker.handler(
        {
            "Records": [
                record("m1", {"key": "a", "prompt": "p"}),
                record("boom", {"key": "b", "prompt": "explode"}),
                record("m3", {"key": "c", "prompt": "p"}),
            ]
        }
    )
    assert result == {"batchItemFailures": [{"itemIdentifier": "boom"}]}
    (line,) = [e for e in log_lines(capsys) if e["level"] == "ERROR"]
    assert (line["messageId"], line["reason"], line["errorClass"]) == ("boom", "unexpected", "KeyError")
    assert line["where"].startswith("test_queued_worker.py:")
    assert item(worker, "claim#req#boom") is None  # the redelivery need not wait for the claim to expire
    assert item(worker, "a")["answer"] == "fine" and item(worker, "c")["answer"] == "fine too"


def test_an_older_request_never_replaces_a_newer_answer(worker, capsys):
    expect_call(worker, "v1")
    expect_call(worker, "v2")
    r1 = record("m-1", {"key": "k", "prompt": "p", "requestId": "r1"}, sent=T0)
    r2 = record("m-2", {"key": "k", "prompt": "p", "requestId": "r2"}, sent=T0 + 1_000)
    r0 = record("m-0", {"key": "k", "prompt": "p", "requestId": "r0"}, sent=T0 - 1_000)
    for batch in ([r1], [r2], [r1], [r0]):  # r1 redelivered, then r0 arriving late for the first time
        assert worker.handler({"Records": batch}) == {"batchItemFailures": []}
    # r1 and r0 made no model call (the stub holds only two responses) and left r2 in place.
    assert (item(worker, "k")["answer"], item(worker, "k")["request_id"]) == ("v2", "queue#r2")
    assert [e["message"] for e in log_lines(capsys)] == ["superseded by a newer answer"] * 2


def test_a_write_that_lost_the_race_keeps_the_newer_answer(worker):
    """r1's model call was still running when r2's answer landed: put_answer declines r1."""
    def put(request_id: str, sequence: int) -> bool:
        return answers.put_answer(
            worker.DDB, TABLE,
            answers.Answer(key="k", text=request_id, model_id=MODEL, request_id=request_id, sequence=sequence),
        )

    assert put("r2", 2_000) is True
    assert put("r1", 1_000) is False
    assert put("r0", 2_000) is False  # same order: the higher request id wins, whatever arrives last
    assert put("r3", 2_000) is True
    assert item(worker, "k")["request_id"] == "r3"


def test_a_producer_sequence_takes_precedence_over_send_time(worker):
    expect_call(worker, "event 7")
    first = record("m-1", {"key": "k", "prompt": "p", "sequence": 7}, sent=T0)
    # Sent later but describes an earlier event: skipped without a model call.
    later = record("m-2", {"key": "k", "prompt": "p", "sequence": 5}, sent=T0 + 9_000)
    for message in (first, later):
        assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
    assert (item(worker, "k")["answer"], item(worker, "k")["sequence"]) == ("event 7", "7")


def test_a_producer_retry_with_the_same_request_id_is_a_duplicate(worker):
    expect_call(worker, "once")
    for message_id, sent in (("m-1", T0), ("m-9", T0 + 50)):
        batch = {"Records": [record(message_id, {"key": "k", "prompt": "p", "requestId": "r1"}, sent=sent)]}
        assert worker.handler(batch) == {"batchItemFailures": []}
    assert item(worker, "k")["request_id"] == "queue#r1"


def test_a_legacy_answer_without_a_sequence_is_replaced(worker):
    worker.DDB.put_item(
        TableName=TABLE,
        Item={"pk": {"S": "k"}, "answer": {"S": "old"}, "request_id": {"S": "z"}, "created_at": {"S": "2025"}},
    )
    expect_call(worker, "new")
    assert worker.handler({"Records": [record("m-1", {"key": "k", "prompt": "p"})]}) == {"batchItemFailures": []}
    assert item(worker, "k")["answer"] == "new"


def test_keys_are_normalized_and_counted_in_utf8_bytes(worker, capsys):
    expect_call(worker, "normalized")
    expect_call(worker, "longest")
    longest = "€" * 682 + "ab"  # 2,048 bytes in 684 characters
    result = worker.handler(
        {
            "Records": [
                record("m-1", {"key": "  Review#1\tGreat  ", "prompt": "p"}),
                record("too-long", {"key": "€" * 683, "prompt": "p"}),  # 2,049 bytes, only 683 characters
                record("m-3", {"key": longest, "prompt": "p"}),
            ]
        }
    )
    assert result == {"batchItemFailures": [{"itemIdentifier": "too-long"}]}
    assert item(worker, "review#1 great")["answer"] == "normalized"
    assert item(worker, longest)["answer"] == "longest"
    (line,) = log_lines(capsys)
    assert "key is 2049 UTF-8 bytes once normalized; DynamoDB's partition key limit is 2048" in line["detail"]


def test_request_ids_fit_the_claim_key(worker, capsys):
    limit = answers.MAX_REQUEST_ID_BYTES
    assert limit == 2048 - len("claim#req#")
    expect_call(worker, "fits")
    result = worker.handler(
        {
            "Records": [
                record("fits", {"key": "a", "prompt": "p", "requestId": "x" * limit}),
                record("over", {"key": "b", "prompt": "p", "requestId": "é" * (limit // 2 + 1)}),
            ]
        }
    )
    assert result == {"batchItemFailures": [{"itemIdentifier": "over"}]}
    assert f"at most {limit} fit in a claim key" in log_lines(capsys)[0]["detail"]


def test_a_param_validation_error_logs_paths_never_the_prompt(worker, capsys):
    body = msg([{"guardContent": {"text": {"text": SECRET, "qualifiers": SECRET}}}])
    expect_call(worker, "neighbour")
    result = worker.handler({"Records": [record("bad", body), record("ok", {"key": "n", "prompt": "p"})]})
    assert result == {"batchItemFailures": [{"itemIdentifier": "bad"}]}
    out = capsys.readouterr().out
    assert SECRET not in out
    (line,) = [json.loads(x) for x in out.splitlines() if '"ERROR"' in x]
    assert (line["reason"], line["errorClass"]) == ("invalid-message", "ParamValidationError")
    assert line["problems"] == [
        "Invalid type for parameter messages[0].content[0].guardContent.text.qualifiers"
    ]
    assert item(worker, "claim#req#bad") is None


def test_param_problems_cover_every_botocore_report_form(worker):
    from botocore.exceptions import ParamValidationError

    report = "\n".join(
        [
            'Missing required parameter in messages[0]: "role"',
            f'Unknown parameter in inferenceConfig: "{SECRET}", must be one of: maxTokens',
            "Invalid length for parameter messages[0].content[0].text, value: 0, valid min length: 1",
            "Invalid value for parameter inferenceConfig.maxTokens, value: 0, valid min value: 1",
            "Invalid number of parameters set for tagged union structure messages[0].content[0]. Can only set one of the following keys: text, image.",
            f"Invalid type for document parameter additionalModelRequestFields.x, value: {SECRET}, type: <class 'set'>",
            f"something new: {SECRET}",
        ]
    )
    assert worker.param_problems(ParamValidationError(report=report)) == [
        "Missing required parameter in messages[0].role",
        f"Unknown parameter in inferenceConfig.{SECRET}",  # a field name (<= 64 characters), not a value
        "Invalid length for parameter messages[0].content[0].text",
        "Invalid value for parameter inferenceConfig.maxTokens",
        "Invalid number of parameters set for tagged union structure messages[0].content[0]",
        "Invalid type for document parameter additionalModelRequestFields.x",
        "unrecognized problem",
    ]


class ModelHeldOpen:
    """A Converse client whose first call blocks until released, counting every call."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.lock = threading.Lock()

    def converse(self, **request):
        with self.lock:
            self.calls += 1
        self.release.wait(timeout=10)
        return answer("the one answer")


@pytest.fixture
def atomic_moto(monkeypatch):
    """DynamoDB applies a conditional write atomically; moto's in-memory backend does not lock, so
    the test supplies that guarantee with one lock around each item operation."""
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()
    for name in ("put_item", "get_item", "delete_item", "update_item"):
        original = getattr(DynamoDBBackend, name)

        def locked(self, *args, _original=original, **kwargs):
            with lock:
                return _original(self, *args, **kwargs)

        monkeypatch.setattr(DynamoDBBackend, name, locked)


def test_concurrent_deliveries_of_one_message_make_one_model_call(worker, monkeypatch, atomic_moto, capsys):
    model = ModelHeldOpen()
    monkeypatch.setattr(worker, "BEDROCK", model)
    message = record("m-1", {"key": "k", "prompt": "p"})
    results: list[dict] = []
    finished = threading.Semaphore(0)

    def deliver() -> None:
        results.append(worker.handler({"Records": [message]}))
        finished.release()

    threads = [threading.Thread(target=deliver) for _ in range(3)]
    for thread in threads:
        thread.start()
    # Two deliveries must finish while the first call is still held open: they found its claim.
    # Without claims all three would wait in the model and these acquires would time out.
    done_early = [finished.acquire(timeout=10) for _ in range(2)]
    model.release.set()
    for thread in threads:
        thread.join(timeout=10)

    assert done_early == [True, True]
    assert model.calls == 1
    assert sorted(len(r["batchItemFailures"]) for r in results) == [0, 1, 1]  # the two come back later
    assert item(worker, "k")["answer"] == "the one answer"
    assert all_keys(worker) == ["k"]
    in_progress = [e for e in log_lines(capsys) if e.get("reason") == "in-progress"]
    assert len(in_progress) == 2
    # When they come back they find the answer and make no call.
    assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
    assert model.calls == 1


def test_an_unexpired_claim_defers_and_an_expired_one_is_taken_over(worker):
    assert answers.claim(worker.DDB, TABLE, "m-1", seconds=300) is not None  # another invocation, still running
    message = record("m-1", {"key": "k", "prompt": "p"})
    assert worker.handler({"Records": [message]}) == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    # A crashed invocation's claim: expired, so it blocks nothing.
    worker.DDB.update_item(
        TableName=TABLE,
        Key={"pk": {"S": "claim#req#m-1"}},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": {"N": "1000"}},
    )
    expect_call(worker, "taken over")
    assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
    assert item(worker, "k")["answer"] == "taken over" and item(worker, "claim#req#m-1") is None


def test_a_claimed_duplicate_is_skipped_once_the_answer_is_stored(worker):
    expect_call(worker, "done")
    message = record("m-1", {"key": "k", "prompt": "p"})
    worker.handler({"Records": [message]})
    owner = answers.claim(worker.DDB, TABLE, "m-1", seconds=300)  # e.g. a slow release elsewhere
    assert owner is not None
    assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}


class DuplicateDuringTheCall:
    """A model whose call lasts `call_seconds` of a fake clock and, halfway through, sees SQS deliver the
    same message again (the visibility timeout ran out, or the poller retried the batch)."""

    def __init__(self, worker, message: dict, call_seconds: float) -> None:
        self.worker, self.message, self.call_seconds = worker, message, call_seconds
        self.now = time.time() - 600  # well in the past: whatever the store's bounds on future times
        self.calls = 0
        self.duplicate_result: dict | None = None

    def time(self) -> float:
        return self.now

    def converse(self, **request):
        self.calls += 1
        self.now += self.call_seconds / 2
        if self.duplicate_result is None:
            self.duplicate_result = {}
            self.duplicate_result = self.worker.handler({"Records": [self.message]})
        self.now += self.call_seconds / 2
        return answer(f"answer {self.calls}")


def test_a_claim_lasts_the_whole_call_so_a_duplicate_delivery_mid_call_pays_nothing(worker, monkeypatch):
    """The claim must outlive the slowest call (CALL_BUDGET_SECONDS) plus the DynamoDB work: one that
    lasted only STORE_SECONDS would have expired 30 s into this 40 s call, and the duplicate would pay again."""
    message = record("m-1", {"key": "k", "prompt": "p"})
    model = DuplicateDuringTheCall(worker, message, call_seconds=40)  # within the 60 s call budget
    monkeypatch.setattr(worker, "BEDROCK", model)
    monkeypatch.setattr(worker.answers, "time", model)  # the store's clock: claims and their expiry

    assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
    assert model.calls == 1
    assert model.duplicate_result == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}  # comes back later
    assert item(worker, "k")["answer"] == "answer 1" and item(worker, "claim#req#m-1") is None


def test_claims_expire_after_the_call_budget(worker):
    assert answers.claim(worker.DDB, TABLE, "r", seconds=62, now=1_000.5) is not None
    assert item(worker, "claim#req#r")["expires_at"] == "1063"
    assert answers.claim(worker.DDB, TABLE, "r", seconds=62, now=1_063.9) is None
    assert answers.claim(worker.DDB, TABLE, "r", seconds=62, now=1_064.0) is not None
    with pytest.raises(ValueError, match="seconds=0 must be a positive number"):
        answers.claim(worker.DDB, TABLE, "r", seconds=0)


class Clock:
    """A Lambda context whose remaining time a fake model spends."""

    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class SlowModel:
    def __init__(self, clock: Clock, call_ms: int) -> None:
        self.clock, self.call_ms, self.calls = clock, call_ms, 0

    def converse(self, **request):
        self.calls += 1
        self.clock.remaining_ms -= self.call_ms
        return answer(f"answer {self.calls}")


def test_the_worker_stops_when_the_remaining_time_cannot_cover_another_call(worker, monkeypatch, capsys):
    needed_ms = (CALL_BUDGET + worker.STORE_SECONDS) * 1000  # 62 s: one worst-case call and its writes
    clock = Clock(remaining_ms=200_000)
    model = SlowModel(clock, call_ms=60_000)
    monkeypatch.setattr(worker, "BEDROCK", model)
    records = [record(f"m{i}", {"key": f"k{i}", "prompt": "p"}) for i in range(1, 6)]

    result = worker.handler({"Records": records}, clock)

    # 200 s, 140 s and 80 s each cover 62 s; at 20 s the last two are returned untouched.
    assert model.calls == 3
    assert result == {"batchItemFailures": [{"itemIdentifier": "m4"}, {"itemIdentifier": "m5"}]}
    assert [item(worker, f"k{i}") is not None for i in range(1, 6)] == [True, True, True, False, False]
    (line,) = [e for e in log_lines(capsys) if e.get("reason") == "time-budget"]
    assert (line["remainingMs"], line["neededMs"], line["messageIds"]) == (20_000, needed_ms, ["m4", "m5"])
    assert all_keys(worker) == ["k1", "k2", "k3"]  # nothing claimed for the returned messages


def test_clients_are_low_level_and_created_once_per_process(worker):
    client = worker.BEDROCK
    expect_call(worker, "one")
    expect_call(worker, "two")
    worker.handler({"Records": [record("m1", {"key": "x", "prompt": "p"})]})
    worker.handler({"Records": [record("m2", {"key": "y", "prompt": "p"})]})
    assert worker.BEDROCK is client
    assert sorted(worker.created_clients) == ["bedrock-runtime", "dynamodb"]
    assert not hasattr(worker, "TABLE")  # no boto3.resource: it costs ~100 ms of cold start
    assert worker.BEDROCK.meta.config.max_pool_connections == 2
    assert worker.BEDROCK.meta.config.read_timeout == 30
    assert worker.DDB.meta.config.retries == {"total_max_attempts": 3, "mode": "standard"}


def test_unmodified_worker_against_the_emulator_stores_answers_and_returns_throttles(monkeypatch):
    """The real worker module and a real boto3 client, pointed at the emulator through the standard
    AWS_ENDPOINT_URL_BEDROCK_RUNTIME variable: no stubs on the model side."""
    from genai_pacer.testing import BedrockEmulator, ModelSpec

    spec = ModelSpec(MODEL, burndown=5, tpm_quota=3_000, max_output_tokens=4_096)
    with BedrockEmulator([spec], time_scale=50) as emulator:
        worker_environment(monkeypatch, AWS_ENDPOINT_URL_BEDROCK_RUNTIME=emulator.endpoint_url)
        with mock_aws():
            worker = load_worker()
            small = {"maxTokens": 200}
            result = worker.handler({"Records": [
                record("m-1", {"key": "review#1", "prompt": "Summarize: great battery", "inferenceConfig": small}),
                # Reserves 1 + 4,000 tokens: more than the 3,000-token quota can ever hold.
                record("m-2", {"key": "review#2", "prompt": "Summarize it", "inferenceConfig": {"maxTokens": 4_000}}),
            ]})
            stored = item(worker, "review#1")
    assert result == {"batchItemFailures": [{"itemIdentifier": "m-2"}]}  # back to the queue, then the DLQ
    # The emulator's default 300-token answer, cut at the message's maxTokens; 24 characters = 6 tokens.
    assert (stored["output_tokens"], stored["stop_reason"], stored["input_tokens"]) == ("200", "max_tokens", "6")
    assert stored["served_latency"] == "standard" and len(stored["answer"]) == 200 * 4
    assert [i.outcome for i in emulator.invocations] == ["ok", "throttled"]
