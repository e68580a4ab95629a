"""Answer-store integrity (issues 22.1, 27.1-27.3): claims namespaced per writer, invalid items
replaceable, producer sequences bounded, claims released only by their owner, log-safe errors."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError, ParamValidationError
from moto import mock_aws
from pacer_runtime import answers
from pacer_runtime.structured_log import describe_error

TABLE = "answers"
SECRET = "4111 1111 1111 1111"


@pytest.fixture
def ddb(monkeypatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("dynamodb")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


# --- describe_error: what every handler logs about an error ------------------------------------


def test_describe_error_names_class_code_and_status_never_the_message():
    error = ClientError(
        {"Error": {"Code": "ValidationException", "Message": f"bad input {SECRET}"},
         "ResponseMetadata": {"HTTPStatusCode": 400}},
        "Converse",
    )
    assert describe_error(error) == {"errorClass": "ClientError", "code": "ValidationException", "httpStatus": 400}
    assert describe_error(ValueError(SECRET)) == {"errorClass": "ValueError"}
    validation = ParamValidationError(report=f"Invalid type for parameter messages[0].content[0].text, value: {SECRET}")
    assert describe_error(validation) == {"errorClass": "ParamValidationError"}


def test_describe_error_refuses_a_code_that_is_not_a_name():
    error = ClientError({"Error": {"Code": f"Oops {SECRET}"}, "ResponseMetadata": {"HTTPStatusCode": True}}, "PutItem")
    assert describe_error(error) == {"errorClass": "ClientError", "code": "unrecognized-code"}
    assert SECRET not in repr(describe_error(error))


# --- claims: each writer under its own prefix ----------------------------------------------------


@pytest.mark.parametrize("request_id", ["key#review#1", "precompute-run#Pre", "req#x", "x"])
def test_no_request_id_makes_a_router_key_claim_or_the_run_lock(ddb, request_id):
    owner = answers.claim(ddb, TABLE, request_id, seconds=60, now=1000)
    assert owner is not None
    (item,) = ddb.scan(TableName=TABLE)["Items"]
    assert item["pk"]["S"] == "claim#req#" + request_id
    assert not item["pk"]["S"].startswith(answers.KEY_CLAIM_PREFIX)
    assert not item["pk"]["S"].startswith("claim#precompute-run#")
    assert answers.KEY_CLAIM_PREFIX == "claim#key#"


# --- 22.1: the store is input, not truth ---------------------------------------------------------


def valid_item(now: float, **overrides) -> dict:
    """A stored answer as put_answer writes it, half a minute ahead of `now` (within the skew), so only
    its invalidity, never its order, can let an older write replace it."""
    item = answers.Answer(
        key="k", text=STORED, model_id="m", request_id="queue#r9", sequence=int(now * 1000) + 30_000,
        input_tokens=3, generated_at=answers.iso_utc(now), expires_at=int(now) + 3600,
    ).to_item()
    for name, value in overrides.items():
        if value is None:
            item.pop(name)
        else:
            item[name] = value
    return item


NOW = 1_800_000_000.0  # a fixed clock for the readers and writers below
STORED = "STORED-ANSWER-TEXT"

CORRUPTIONS = {
    "string sequence": ({"sequence": {"S": "99999999999999"}}, "sequence is of type S, not N"),
    "sequence 10**38-1": ({"sequence": {"N": str(10**38 - 1)}}, "sequence is beyond now plus 60 s"),
    "future generated_at": ({"generated_at": {"S": answers.iso_utc(NOW + 3600)}}, "generated_at is beyond now"),
    "answer a number": ({"answer": {"N": "123"}}, "answer is of type N, not S"),
    "answer a boolean": ({"answer": {"BOOL": True}}, "answer is of type BOOL, not S"),
    "empty answer": ({"answer": {"S": ""}}, "answer is empty"),
    "model_id a number": ({"model_id": {"N": "1"}}, "model_id is of type N, not S"),
    "input_tokens a string": ({"input_tokens": {"S": "3"}}, "input_tokens is of type S, not N"),
    "expires_at a string": ({"expires_at": {"S": "soon"}}, "expires_at is of type S, not N"),
    "request_id a number": ({"request_id": {"N": "9"}}, "request_id is of type N, not S"),
    "generated_at a number": ({"generated_at": {"N": "1"}}, "generated_at is of type N, not S"),
    "no generated_at": ({"generated_at": None}, "generated_at is missing"),
    "no answer": ({"answer": None}, "answer is missing"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_an_invalid_item_reads_as_absent_and_the_next_write_repairs_it(ddb, case, capsys):
    overrides, reason = CORRUPTIONS[case]
    ddb.put_item(TableName=TABLE, Item=valid_item(NOW, **overrides))
    before = sum(answers.INVALID_ITEMS.values())
    assert answers.get_answer(ddb, TABLE, "k", now=NOW) is None
    assert sum(answers.INVALID_ITEMS.values()) == before + 1
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["reason"] == "invalid-stored-item" and line["problem"].startswith(reason)
    assert STORED not in json.dumps(line)  # the rule broken, never the item's text
    # A write older than the bad item's sequence (where it has one) still replaces it: the condition
    # treats the item as absent, as the readers do.
    new = answers.Answer(key="k", text="repaired", model_id="m", request_id="queue#r1", sequence=int(NOW * 1000))
    assert answers.put_answer(ddb, TABLE, new, now=NOW) is True
    assert answers.get_answer(ddb, TABLE, "k", now=NOW).text == "repaired"


def test_a_valid_newer_item_is_not_replaced_by_an_older_write(ddb):
    """The control for the test above: the same item, uncorrupted, keeps its key."""
    ddb.put_item(TableName=TABLE, Item=valid_item(NOW))
    assert answers.get_answer(ddb, TABLE, "k", now=NOW).text == STORED
    new = answers.Answer(key="k", text="older", model_id="m", request_id="queue#r1", sequence=int(NOW * 1000))
    assert answers.put_answer(ddb, TABLE, new, now=NOW) is False
    assert answers.get_answer(ddb, TABLE, "k", now=NOW).text == STORED


def test_an_item_valid_when_written_stays_valid_as_time_passes(ddb):
    ddb.put_item(TableName=TABLE, Item=valid_item(NOW))
    assert answers.get_answer(ddb, TABLE, "k", now=NOW + 86_400).text == STORED


@pytest.mark.parametrize("sequence", [-1, int(NOW * 1000) + 60_001, 10**38 - 1, True])
def test_put_answer_refuses_a_sequence_readers_would_call_invalid(ddb, sequence):
    new = answers.Answer(key="k", text="x", model_id="m", request_id="r", sequence=sequence)
    with pytest.raises(ValueError, match="must be a whole number from 0 to now plus 60 s in epoch milliseconds"):
        answers.put_answer(ddb, TABLE, new, now=NOW)
    assert ddb.scan(TableName=TABLE)["Items"] == []


def test_the_write_condition_names_and_values_are_complete_and_literal():
    """ScheduledPrecompute reads the condition, its names and its constant values from answers.py's
    source with ast.literal_eval, and DynamoDB refuses a placeholder that is undefined or unused."""
    import ast
    import re
    from pathlib import Path

    source = Path(answers.__file__).read_text(encoding="utf-8")
    literals = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id.startswith("_NEWER_THAN_STORED")
    }
    condition = literals["_NEWER_THAN_STORED"]
    assert set(re.findall(r"#\w+", condition)) == set(literals["_NEWER_THAN_STORED_NAMES"])
    per_write = {":seq", ":rid", ":maxSeq", ":maxGen"}
    assert set(re.findall(r":\w+", condition)) == set(literals["_NEWER_THAN_STORED_CONSTANTS"]) | per_write
    names = literals["_NEWER_THAN_STORED_NAMES"]
    assert names["#pk"] == answers.PARTITION_KEY and names["#exp"] == answers.TTL_ATTRIBUTE
    written = set(answers.Answer(key="k", text="t", model_id="m", request_id="r", sequence=1, expires_at=1).to_item())
    assert set(names.values()) <= written
    assert len(condition) <= 4096  # DynamoDB's limit on an expression string


# --- 27.2: a producer can't pin a key -----------------------------------------------------------

from test_queued_worker import T0, answer, expect_call, item, log_lines, record, worker  # noqa: E402, F401


def test_a_producer_sequence_beyond_send_time_plus_the_skew_is_refused_and_later_writes_win(worker, capsys):  # noqa: F811
    pinned = record("m-pin", {"key": "k", "prompt": "p", "sequence": 10**38 - 1}, sent=T0)
    just_over = record("m-over", {"key": "k", "prompt": "p", "sequence": T0 + 60_001}, sent=T0)
    assert worker.handler({"Records": [pinned, just_over]}) == {
        "batchItemFailures": [{"itemIdentifier": "m-pin"}, {"itemIdentifier": "m-over"}]
    }
    assert item(worker, "k") is None  # no model call (the stub holds none), nothing stored
    details = [line["detail"] for line in log_lines(capsys)]
    assert details == [
        f"sequence={s} must be from 0 to the message's SentTimestamp plus 60000 ms (epoch milliseconds): "
        "a larger one would outrank every later writer" for s in (10**38 - 1, T0 + 60_001)
    ]
    # At the bound exactly, a producer sequence is accepted ...
    expect_call(worker, "at the bound")
    at_bound = record("m-edge", {"key": "k", "prompt": "p", "sequence": T0 + 60_000}, sent=T0)
    assert worker.handler({"Records": [at_bound]}) == {"batchItemFailures": []}
    # ... and any message sent after that instant (default sequence: its SentTimestamp) replaces it.
    expect_call(worker, "later")
    later = record("m-later", {"key": "k", "prompt": "p"}, sent=T0 + 60_001)
    assert worker.handler({"Records": [later]}) == {"batchItemFailures": []}
    assert (item(worker, "k")["answer"], item(worker, "k")["request_id"]) == ("later", "queue#m-later")


def test_no_producer_request_id_outranks_another_writer_at_an_equal_sequence(worker):  # noqa: F811
    """Without namespacing, requestId "\\uffff" would beat the router's id at the same millisecond."""
    router = answers.Answer(key="k", text="router's", model_id="m", request_id="router#abc", sequence=T0)
    assert answers.put_answer(worker.DDB, "answers", router) is True
    message = record("m-1", {"key": "k", "prompt": "p", "requestId": "\uffff\uffff"}, sent=T0)
    assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}  # superseded: no model call
    assert (item(worker, "k")["answer"], item(worker, "k")["request_id"]) == ("router's", "router#abc")
    assert sorted(answers.WRITER_PREFIXES.values()) == ["batch#", "precompute#", "queue#", "router#"]


# --- 27 mutation gaps: release honours the owner; supersedes agrees with the condition -----------


def test_release_never_deletes_a_claim_someone_took_over_after_expiry(ddb):
    first = answers.claim(ddb, TABLE, "r", seconds=10, now=1000)
    assert answers.claim(ddb, TABLE, "r", seconds=10, now=1005) is None  # still held
    second = answers.claim(ddb, TABLE, "r", seconds=10, now=1011)  # the first expired: taken over
    assert first and second and first != second
    assert answers.release(ddb, TABLE, "r", first) is False  # the late first caller releases nothing
    (claim,) = ddb.scan(TableName=TABLE)["Items"]
    assert claim["owner"]["S"] == second
    assert answers.claim(ddb, TABLE, "r", seconds=10, now=1012) is None  # the second still holds it
    assert answers.release(ddb, TABLE, "r", second) is True
    assert ddb.scan(TableName=TABLE)["Items"] == []


@pytest.mark.parametrize(
    ("stored_id", "new_id", "stored_seq", "new_seq"),
    [
        ("queue#a", "queue#b", 5_000, 5_000),
        ("queue#b", "queue#a", 5_000, 5_000),
        ("queue#a", "queue#a", 5_000, 5_000),
        ("router#a", "queue#z", 5_000, 5_000),
        ("queue#z", "router#a", 5_000, 5_000),
        ("queue#a", "queue#b", 5_001, 5_000),
        ("queue#b", "queue#a", 4_999, 5_000),
    ],
)
def test_supersedes_agrees_with_the_write_condition(ddb, stored_id, new_id, stored_seq, new_seq):
    """The worker skips a message when supersedes() says so; if it disagreed with put_answer's condition
    at equal sequences, a message would be dropped unanswered (or a model call paid for nothing).
    (One deliberate difference: the same request id at a newer sequence is a producer's retry, a
    duplicate for supersedes; tests/test_queued_worker.py covers it.)"""
    stored = answers.Answer(key="k", text="stored", model_id="m", request_id=stored_id, sequence=stored_seq)
    assert answers.put_answer(ddb, TABLE, stored) is True
    read = answers.get_answer(ddb, TABLE, "k")
    skipped = answers.supersedes(read, new_id, new_seq)
    new = answers.Answer(key="k", text="new", model_id="m", request_id=new_id, sequence=new_seq)
    written = answers.put_answer(ddb, TABLE, new)
    assert skipped == (not written)
    # The order is the documented one: higher sequence, then higher (or same) request id, wins.
    assert skipped == ((stored_seq, stored_id) >= (new_seq, new_id))


def test_the_worker_answers_a_message_that_outranks_the_stored_answer_at_an_equal_sequence(worker):  # noqa: F811
    older = answers.Answer(key="k", text="a's", model_id="m", request_id="queue#a", sequence=T0)
    assert answers.put_answer(worker.DDB, "answers", older) is True
    expect_call(worker, "b's")
    assert worker.handler({"Records": [record("m-b", {"key": "k", "prompt": "p", "requestId": "b"}, sent=T0)]}) == {
        "batchItemFailures": []
    }
    assert item(worker, "k")["answer"] == "b's"
    # And the reverse: an id that sorts lower at the same sequence is skipped without a model call.
    assert worker.handler({"Records": [record("m-0", {"key": "k", "prompt": "p", "requestId": "0"}, sent=T0)]}) == {
        "batchItemFailures": []
    }
    assert item(worker, "k")["answer"] == "b's"


def test_a_claim_prefix_of_its_own_is_accepted_and_the_routers_is_refused(ddb):
    owner = answers.claim(ddb, TABLE, "Pre", seconds=60, now=1000, prefix="claim#precompute-run#")
    assert [i["pk"]["S"] for i in ddb.scan(TableName=TABLE)["Items"]] == ["claim#precompute-run#Pre"]
    assert answers.release(ddb, TABLE, "Pre", owner, prefix="claim#precompute-run#") is True
    for prefix in ("claim#key#", "claim#", "answers#"):
        with pytest.raises(ValueError, match="must start with 'claim#' plus a kind of its own"):
            answers.claim(ddb, TABLE, "x", seconds=60, prefix=prefix)


# --- 27.3: who may write which keys (the rules the code can enforce) ------------------------------


@pytest.mark.parametrize("key", ["claim#key#review#1", "CLAIM#req#r", " Claim#precompute-run#Pre", "claim#x"])
def test_no_answer_key_lands_on_a_claim_whatever_its_case(key):
    with pytest.raises(answers.InvalidKeyError, match="the prefix reserved for claims"):
        answers.check_key(key)


def test_the_worker_writes_only_queue_ids_and_request_claims(worker):  # noqa: F811
    expect_call(worker, "a")
    assert worker.handler({"Records": [record("m-1", {"key": "k", "prompt": "p", "requestId": "router#x"})]}) == {
        "batchItemFailures": []}
    assert item(worker, "k")["request_id"] == "queue#router#x"  # a producer cannot pose as the router
    answers.claim(worker.DDB, "answers", "router#x", seconds=60)
    assert [i["pk"]["S"] for i in worker.DDB.scan(TableName="answers")["Items"] if i["pk"]["S"].startswith("claim#")] == [
        "claim#req#router#x"]
