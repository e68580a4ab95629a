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
