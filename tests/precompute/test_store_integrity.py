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

SEQ = int(NOW * 1000) + 30_000  # valid_item's sequence
CONDITION, PUT_ANSWER = "condition", "put_answer"

#: case -> (attributes overridden in valid_item (None removes one), the reason readers log, and who
#: replaces it: the write condition itself (so ScheduledPrecompute's DynamoDB task does too), or only
#: put_answer, which judges the item a failed write returns (DynamoDB has no arithmetic or pattern
#: in a condition: it cannot tell 2.5 from 2, nor a time from a string of the same size and range);
#: ScheduledPrecompute sends such a failed write to put_answer in its "Check stored answer" step.
CORRUPTIONS = {
    "string sequence": ({"sequence": {"S": "99999999999999"}}, "sequence is of type S, not N", CONDITION),
    "sequence 10**38-1": ({"sequence": {"N": str(10**38 - 1)}}, "sequence is beyond now plus 60 s", CONDITION),
    "future generated_at": ({"generated_at": {"S": answers.iso_utc(NOW + 3600)}}, "generated_at is beyond now", CONDITION),
    "answer a number": ({"answer": {"N": "123"}}, "answer is of type N, not S", CONDITION),
    "answer a boolean": ({"answer": {"BOOL": True}}, "answer is of type BOOL, not S", CONDITION),
    "empty answer": ({"answer": {"S": ""}}, "answer is empty", CONDITION),
    "model_id a number": ({"model_id": {"N": "1"}}, "model_id is of type N, not S", CONDITION),
    "input_tokens a string": ({"input_tokens": {"S": "3"}}, "input_tokens is of type S, not N", CONDITION),
    "expires_at a string": ({"expires_at": {"S": "soon"}}, "expires_at is of type S, not N", CONDITION),
    "request_id a number": ({"request_id": {"N": "9"}}, "request_id is of type N, not S", CONDITION),
    "generated_at a number": ({"generated_at": {"N": "1"}}, "generated_at is of type N, not S", CONDITION),
    "no generated_at": ({"generated_at": None}, "generated_at is missing", CONDITION),
    "no answer": ({"answer": None}, "answer is missing", CONDITION),
    "no model_id": ({"model_id": None}, "model_id is missing", CONDITION),
    "no request_id": ({"request_id": None}, "request_id is missing", CONDITION),
    # Every other attribute readers type-check (issue 22 audit: the old condition kept these).
    "output_tokens a string": ({"output_tokens": {"S": "5"}}, "output_tokens is of type S, not N", CONDITION),
    "cache_read_tokens a boolean": ({"cache_read_tokens": {"BOOL": True}}, "cache_read_tokens is of type BOOL, not N", CONDITION),
    "cache_write_tokens a string": ({"cache_write_tokens": {"S": "0"}}, "cache_write_tokens is of type S, not N", CONDITION),
    "stop_reason a number": ({"stop_reason": {"N": "1"}}, "stop_reason is of type N, not S", CONDITION),
    "served_latency a list": ({"served_latency": {"L": []}}, "served_latency is of type L, not S", CONDITION),
    "sent_at a number": ({"sent_at": {"N": "1"}}, "sent_at is of type N, not S", CONDITION),
    "requested_tier a number": ({"requested_tier": {"N": "1"}}, "requested_tier is of type N, not S", CONDITION),
    "served_tier a map": ({"served_tier": {"M": {}}}, "served_tier is of type M, not S", CONDITION),
    "created_at a number": ({"created_at": {"N": "1"}}, "created_at is of type N, not S", CONDITION),
    "created_at instead of generated_at": ({"generated_at": None, "created_at": {"S": answers.iso_utc(NOW)}},
                                           "generated_at is missing", CONDITION),
    "negative input_tokens": ({"input_tokens": {"N": "-1"}}, "input_tokens is not a whole number >= 0", CONDITION),
    "negative output_tokens": ({"output_tokens": {"N": "-5"}}, "output_tokens is not a whole number >= 0", CONDITION),
    "negative cache_write_tokens": ({"cache_write_tokens": {"N": "-1"}}, "cache_write_tokens is not a whole number >= 0",
                                    CONDITION),
    "negative expires_at": ({"expires_at": {"N": "-1"}}, "expires_at is not a whole number >= 0", CONDITION),
    "generated_at too short": ({"generated_at": {"S": "2026"}}, "generated_at is not an ISO-8601 time", CONDITION),
    "generated_at empty": ({"generated_at": {"S": ""}}, "generated_at is not an ISO-8601 time", CONDITION),
    "generated_at before 1970": ({"generated_at": {"S": "1969-12-31T23:59:59.000Z"}}, "generated_at is before 1970", CONDITION),
    # What only put_answer can judge (the Step Functions writer's condition keeps such an item, and its
    # "Check stored answer" step hands the write to put_answer: tests/precompute/test_faults_scheduled_precompute.py).
    "fractional output_tokens": ({"output_tokens": {"N": "2.5"}}, "output_tokens is not a whole number >= 0", PUT_ANSWER),
    "fractional cache_read_tokens": ({"cache_read_tokens": {"N": "0.5"}}, "cache_read_tokens is not a whole number >= 0",
                                     PUT_ANSWER),
    "fractional sequence": ({"sequence": {"N": f"{SEQ}.5"}}, "sequence is not a whole number >= 0", PUT_ANSWER),
    "fractional expires_at": ({"expires_at": {"N": f"{int(NOW) + 3600}.25"}}, "expires_at is not a whole number >= 0",
                              PUT_ANSWER),
    "generated_at not a time": ({"generated_at": {"S": "2026-13-45T99:99:99.000Z"}}, "generated_at is not an ISO-8601 time",
                                PUT_ANSWER),
    "generated_at not in UTC": ({"generated_at": {"S": "2027-01-15T03:00:00.000-05:00"}},
                                "generated_at is not in UTC", PUT_ANSWER),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_an_invalid_item_reads_as_absent_and_the_next_write_repairs_it(ddb, case, capsys):
    overrides, reason, _ = CORRUPTIONS[case]
    ddb.put_item(TableName=TABLE, Item=valid_item(NOW, **overrides))
    before = sum(answers.INVALID_ITEMS.values())
    assert answers.get_answer(ddb, TABLE, "k", now=NOW) is None
    assert sum(answers.INVALID_ITEMS.values()) == before + 1
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"level"' in x]
    assert line["reason"] == "invalid-stored-item" and line["problem"].startswith(reason)
    assert STORED not in json.dumps(line)  # the rule broken, never the item's text
    # A write older than the bad item's sequence (where it has one) still replaces it: the condition
    # treats the item as absent, as the readers do.
    new = answers.Answer(key="k", text="repaired", model_id="m", request_id="queue#r1", sequence=int(NOW * 1000))
    assert answers.put_answer(ddb, TABLE, new, now=NOW) is True
    assert answers.get_answer(ddb, TABLE, "k", now=NOW).text == "repaired"


def _condition_values(sequence: int, request_id: str, now: float) -> dict:
    max_sequence = int(now * 1000) + answers.SEQUENCE_SKEW_MS
    return {**answers._NEWER_THAN_STORED_CONSTANTS, ":seq": {"N": str(sequence)}, ":rid": {"S": request_id},
            ":maxSeq": {"N": str(max_sequence)}, ":maxGen": {"S": answers.iso_utc(max_sequence / 1000)}}


def condition_replaces(ddb, stored: dict, now: float = NOW) -> bool:
    """Whether the write condition alone (as ScheduledPrecompute's DynamoDB task sends it) lets an older
    write replace `stored`."""
    ddb.put_item(TableName=TABLE, Item=stored)
    older = answers.Answer(key="k", text="older", model_id="m", request_id="queue#r1", sequence=int(now * 1000))
    try:
        ddb.put_item(TableName=TABLE, Item=older.to_item(), ConditionExpression=answers._NEWER_THAN_STORED,
                     ExpressionAttributeNames=answers._NEWER_THAN_STORED_NAMES,
                     ExpressionAttributeValues=_condition_values(older.sequence, older.request_id, now))
    except ClientError as error:
        assert error.response["Error"]["Code"] == "ConditionalCheckFailedException"
        return False
    return True


def put_answer_replaces(ddb, stored: dict, now: float = NOW) -> bool:
    ddb.put_item(TableName=TABLE, Item=stored)
    older = answers.Answer(key="k", text="older", model_id="m", request_id="queue#r1", sequence=int(now * 1000))
    written = answers.put_answer(ddb, TABLE, older, now=now)
    assert written == (ddb.get_item(TableName=TABLE, Key={"pk": {"S": "k"}})["Item"]["answer"] == {"S": "older"})
    return written


@pytest.mark.parametrize("case", [None, *sorted(CORRUPTIONS)])
def test_readers_and_writers_apply_one_rule_invalid_iff_an_older_write_replaces_it(ddb, case):
    """For every corruption (and the uncorrupted item, case None): check_item calls it invalid exactly
    when put_answer lets an older write replace it, and the condition alone does whenever it can."""
    overrides, _, by = CORRUPTIONS[case] if case else ({}, None, None)
    stored = valid_item(NOW, **overrides)
    invalid = answers.check_item(stored, now=NOW) is not None
    assert invalid == (case is not None)
    assert put_answer_replaces(ddb, stored) == invalid
    assert condition_replaces(ddb, stored) == (by == CONDITION)


# Every attribute readers check, with values of every kind: valid ones and each way to break one.
_GOOD_STAMP = answers.iso_utc(NOW - 5)
_ATTRIBUTE_VALUES = {
    "answer": [{"S": "text"}, {"S": ""}, {"N": "1"}, {"BOOL": False}],
    "model_id": [{"S": "m"}, {"N": "1"}],
    "request_id": [{"S": "queue#r9"}, {"S": "queue#r0"}, {"N": "9"}],
    "sequence": [{"N": str(SEQ)}, {"N": str(int(NOW * 1000))}, {"N": f"{SEQ}.5"}, {"N": str(10**38 - 1)},
                 {"N": "-1"}, {"S": "1"}],
    "generated_at": [{"S": _GOOD_STAMP}, {"S": _GOOD_STAMP[:23] + "Z"}, {"S": "2026-11-30T01:14:43Z"},
                     {"S": answers.iso_utc(NOW + 3600)}, {"S": "1969-12-31T23:59:59Z"}, {"S": "soon"},
                     {"S": "2026-13-45T99:99:99Z"}, {"S": "2027-01-15T03:00:00-05:00"}, {"N": "1"}],
    "created_at": [{"S": _GOOD_STAMP}, {"S": "2025"}, {"N": "1"}],
    "stop_reason": [{"S": "end_turn"}, {"S": ""}, {"N": "1"}],
    "served_latency": [{"S": "standard"}, {"BOOL": True}],
    "sent_at": [{"S": _GOOD_STAMP}, {"N": "1"}],
    "input_tokens": [{"N": "3"}, {"N": "0"}, {"N": "-3"}, {"N": "3.5"}, {"S": "3"}],
    "output_tokens": [{"N": "7"}, {"N": "-1"}, {"N": "0.1"}, {"L": []}],
    "cache_read_tokens": [{"N": "0"}, {"N": "-2"}, {"S": "0"}],
    "cache_write_tokens": [{"N": "0"}, {"N": "1.5"}, {"NULL": True}],
    "expires_at": [{"N": str(int(NOW) + 3600)}, {"N": "-1"}, {"N": "1.5"}, {"S": "x"}],
}


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _attribute(values: list) -> st.SearchStrategy:
    """Mostly the attribute's first (valid) value; else missing, another valid value or a broken one."""
    return st.sampled_from([values[0]] * 3 * len(values) + values[1:] + [None])


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({name: _attribute(values) for name, values in _ATTRIBUTE_VALUES.items()}))
def test_any_stored_item_is_replaced_by_an_older_write_iff_readers_call_it_invalid(ddb, drawn):
    """The same rule over random items: any mix of missing, valid and broken attributes. A valid item is
    replaced only when the write outranks it (an item without a sequence has no order: anything does)."""
    stored = {"pk": {"S": "k"}, **{name: value for name, value in drawn.items() if value is not None}}
    invalid = answers.check_item(stored, now=NOW) is not None
    # A valid item keeps its key only against an older write: the order readers apply (supersedes).
    older = not invalid and not answers.supersedes(answers.Answer.from_item(stored, now=NOW), "queue#r1", int(NOW * 1000))
    assert put_answer_replaces(ddb, stored) == (invalid or older)


def test_a_repair_never_overwrites_a_valid_answer_written_since_the_invalid_item_was_returned(ddb, monkeypatch):
    """put_answer replaces what no condition can judge only while the key still holds that exact item: a
    valid newer answer another writer stores in between is kept (and this write reports superseded)."""
    overrides, _, _ = CORRUPTIONS["fractional output_tokens"]
    ddb.put_item(TableName=TABLE, Item=valid_item(NOW, **overrides))
    real_put, puts = ddb.put_item, []

    def put_item(**kwargs):
        puts.append(kwargs["ConditionExpression"])
        if len(puts) == 2:  # the repair: another writer got there first with a valid, newer answer
            newer = answers.Answer(key="k", text="newer", model_id="m", request_id="router#x", sequence=SEQ + 1,
                                   generated_at=answers.iso_utc(NOW))
            real_put(TableName=TABLE, Item=newer.to_item())
        return real_put(**kwargs)

    monkeypatch.setattr(ddb, "put_item", put_item)
    older = answers.Answer(key="k", text="older", model_id="m", request_id="queue#r1", sequence=int(NOW * 1000))
    assert answers.put_answer(ddb, TABLE, older, now=NOW) is False
    assert answers.get_answer(ddb, TABLE, "k", now=NOW).text == "newer"
    # the write, the repair (refused: the item changed), the write again (refused: a valid newer answer)
    assert [c == answers._NEWER_THAN_STORED for c in puts] == [True, False, True]


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
    # The condition names every attribute readers check, and nothing else.
    assert set(names.values()) == {answers.PARTITION_KEY, *answers._REQUIRED, *answers._OPTIONAL}
    constants = literals["_NEWER_THAN_STORED_CONSTANTS"]
    assert (constants[":minGen"]["S"], constants[":minGenSize"]["N"], constants[":maxGenSize"]["N"]) == (
        answers.MIN_STAMP, str(answers.MIN_STAMP_CHARS), str(answers.MAX_STAMP_CHARS))


def test_the_write_condition_fits_dynamodbs_expression_limits():
    """ServiceQuotas.html, "Expression parameters": an expression string of at most 4 KB, and at most
    300 operators or functions (a comparator, AND/OR/NOT, BETWEEN, IN and each function count one)."""
    import re

    condition = answers._NEWER_THAN_STORED
    assert len(condition.encode()) <= 4096
    operators = re.findall(r"\b(?:AND|OR|NOT|BETWEEN|IN)\b|<>|<=|>=|=|<|>|\b(?:attribute_exists|attribute_not_exists|"
                           r"attribute_type|begins_with|contains|size)\(", condition)
    # a BETWEEN's own AND is part of it, not a logical operator: counting it too only overestimates
    assert len(operators) <= 300, len(operators)
    # put_answer's repair condition (one comparison or function per known attribute, joined by AND)
    repair, _, _ = answers._unchanged(valid_item(NOW))
    assert len(repair.encode()) <= 4096 and len(re.findall(r"\bAND\b|=|attribute_not_exists\(", repair)) <= 300


# --- 27.2: a producer can't pin a key -----------------------------------------------------------

from queued_worker_harness import T0, expect_call, item, log_lines, record  # noqa: E402


def test_a_producer_sequence_beyond_send_time_plus_the_skew_is_refused_and_later_writes_win(worker, capsys):
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


def test_no_producer_request_id_outranks_another_writer_at_an_equal_sequence(worker):
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
    duplicate for supersedes; tests/queue/test_queued_worker.py covers it.)"""
    stored = answers.Answer(key="k", text="stored", model_id="m", request_id=stored_id, sequence=stored_seq)
    assert answers.put_answer(ddb, TABLE, stored) is True
    read = answers.get_answer(ddb, TABLE, "k")
    skipped = answers.supersedes(read, new_id, new_seq)
    new = answers.Answer(key="k", text="new", model_id="m", request_id=new_id, sequence=new_seq)
    written = answers.put_answer(ddb, TABLE, new)
    assert skipped == (not written)
    # The order is the documented one: higher sequence, then higher (or same) request id, wins.
    assert skipped == ((stored_seq, stored_id) >= (new_seq, new_id))


def test_the_worker_answers_a_message_that_outranks_the_stored_answer_at_an_equal_sequence(worker):
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


def test_the_worker_writes_only_queue_ids_and_request_claims(worker):
    expect_call(worker, "a")
    assert worker.handler({"Records": [record("m-1", {"key": "k", "prompt": "p", "requestId": "router#x"})]}) == {
        "batchItemFailures": []}
    assert item(worker, "k")["request_id"] == "queue#router#x"  # a producer cannot pose as the router
    answers.claim(worker.DDB, "answers", "router#x", seconds=60)
    assert [i["pk"]["S"] for i in worker.DDB.scan(TableName="answers")["Items"] if i["pk"]["S"].startswith("claim#")] == [
        "claim#req#router#x"]


# --- a store item corrupted mid-run, while worker and router write the key from real threads --------

import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402


class FakeBedrock:
    """A Converse stand-in both handlers share: answers at once, thread-safe, counts calls."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def converse(self, **request):
        with self._lock:
            self.calls += 1
        return {"output": {"message": {"role": "assistant", "content": [{"text": f"answer {uuid.uuid4().hex[:8]}"}]}},
                "stopReason": "end_turn", "usage": {"inputTokens": 10, "outputTokens": 4}, "metrics": {"latencyMs": 5}}


class LambdaContext:
    def __init__(self, seconds: float = 60.0) -> None:
        self.aws_request_id = uuid.uuid4().hex
        self._ends = time.time() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self._ends - time.time()) * 1000)


#: The key both handlers write: the router serves it from its PROMPTS pattern "k#{n}".
SHARED_KEY = "k#1"
#: Corruptions of every kind: some the condition replaces, some only put_answer's second look.
MID_RUN = ["string sequence", "answer a boolean", "output_tokens a string", "negative input_tokens",
           "fractional output_tokens", "generated_at not a time", "generated_at not in UTC", "future generated_at"]


@pytest.fixture
def handlers(monkeypatch):
    """The queue worker and the router, loaded in one process against one moto table, with a shared fake model."""
    import importlib.util
    import sys
    from pathlib import Path

    from moto.dynamodb.responses import DynamoHandler

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "MODEL_ID": "amazon.nova-lite-v1:0", "ANSWER_TABLE": TABLE, "ANSWER_TTL_SECONDS": "", "MAX_AGE_SECONDS": "3600",
        "WRITE_BACK": "true", "MAX_OUTPUT_TOKENS": "400", "COALESCE_WAIT_SECONDS": "5", "CALL_BUDGET_SECONDS": "30",
        "BEDROCK_MAX_ATTEMPTS": "1", "PROMPTS": json.dumps([{"key": "k#{n}", "prompt": "Answer {n}."}]),
    }.items():
        monkeypatch.setenv(name, value)
    # DynamoDB applies a conditional write atomically per item; moto reads, checks and writes in separate
    # Python steps, which threads could interleave. One lock around moto's writes restores the guarantee.
    lock = threading.Lock()
    for operation in ("put_item", "delete_item"):
        original = getattr(DynamoHandler, operation)

        def atomic(self, *args, _original=original, **kwargs):
            with lock:
                return _original(self, *args, **kwargs)

        monkeypatch.setattr(DynamoHandler, operation, atomic)
    root = Path(__file__).resolve().parents[2] / "lambda"
    with mock_aws():
        boto3.client("dynamodb").create_table(
            TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        modules = []
        for name, path in (("worker", root / "queued_worker" / "handler.py"), ("router", root / "answer_router" / "handler.py")):
            spec = importlib.util.spec_from_file_location(f"integrity_{name}_{uuid.uuid4().hex[:6]}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
            spec.loader.exec_module(module)
            modules.append(module)
        model = FakeBedrock()
        for module in modules:
            module.BEDROCK = model
        yield (*modules, model)


def corrupt_shared_key(ddb, case: str) -> None:
    """Overwrite the key with a corrupted item whose sequence is newer than any write for 30 s: only its
    invalidity, never its order, lets a concurrent write replace it."""
    overrides, _, _ = CORRUPTIONS[case]
    item = valid_item(time.time(), **overrides)
    item["pk"] = {"S": SHARED_KEY}
    ddb.put_item(TableName=TABLE, Item=item)


def stored_item(ddb) -> dict | None:
    return ddb.get_item(TableName=TABLE, Key={"pk": {"S": SHARED_KEY}}, ConsistentRead=True).get("Item")


def test_an_item_corrupted_mid_run_is_repaired_by_the_next_write_of_concurrent_writers(handlers):
    queue_worker, router, model = handlers
    stop = threading.Event()
    problems: list[str] = []

    def work(n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            message = {"messageId": f"w{n}-{i}", "body": json.dumps({"key": SHARED_KEY, "prompt": "p"}),
                       "attributes": {"SentTimestamp": str(int(time.time() * 1000)), "ApproximateReceiveCount": "1"}}
            result = queue_worker.handler({"Records": [message]}, LambdaContext())
            if result["batchItemFailures"]:
                problems.append(f"worker {message['messageId']} failed")
            time.sleep(0.005)

    def route() -> None:
        while not stop.is_set():
            result = router.handler({"key": SHARED_KEY}, LambdaContext())
            # 503 AnswerPending is the coalescing's documented answer when another writer's paid call
            # outlasts the wait, which only the machine's load decides; a failure is anything else.
            if result.get("statusCode") != 200 and result.get("error") != "AnswerPending":
                problems.append(f"router answered {result.get('statusCode')}: {result.get('error')}")
            time.sleep(0.005)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(2)] + [threading.Thread(target=route) for _ in range(2)]
    for thread in threads:
        thread.start()
    repaired_by = []
    try:
        for case in MID_RUN:
            corrupt_shared_key(queue_worker.DDB, case)
            deadline = time.time() + 20
            while True:  # the writers running meanwhile repair it, whatever they are doing
                found = stored_item(queue_worker.DDB)
                if found is not None and answers.check_item(found) is None:
                    repaired_by.append((case, found["request_id"]["S"].split("#")[0]))
                    break
                assert time.time() < deadline, f"{case}: still invalid after 20 s of concurrent writes"
                time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert problems == []  # no handler failed or answered an error while the item was corrupt
    assert [case for case, _ in repaired_by] == MID_RUN
    assert {writer for _, writer in repaired_by} <= {"queue", "router"}

    # Then, with no one else writing: one more corruption, and the very next write (one worker message,
    # older by its sequence than the corrupt item) repairs it with one model call.
    corrupt_shared_key(queue_worker.DDB, "fractional output_tokens")
    calls = model.calls
    message = {"messageId": "last", "body": json.dumps({"key": SHARED_KEY, "prompt": "p"}),
               "attributes": {"SentTimestamp": str(int(time.time() * 1000)), "ApproximateReceiveCount": "1"}}
    assert queue_worker.handler({"Records": [message]}, LambdaContext()) == {"batchItemFailures": []}
    last = stored_item(queue_worker.DDB)
    assert answers.check_item(last) is None and last["request_id"]["S"] == "queue#last" and model.calls == calls + 1


# --- "logged and counted": the InvalidStoredItems metric ---------------------------------------------


def emf_records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def test_an_invalid_item_is_counted_as_a_cloudwatch_metric_by_the_reader_and_the_repairing_writer(ddb, capsys, monkeypatch):
    from pacer_runtime import metrics

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "router-fn")
    overrides, reason, _ = CORRUPTIONS["fractional output_tokens"]
    ddb.put_item(TableName=TABLE, Item=valid_item(NOW, **overrides))
    assert answers.get_answer(ddb, TABLE, "k", now=NOW) is None
    new = answers.Answer(key="k", text="repaired", model_id="m", request_id="queue#r1", sequence=int(NOW * 1000))
    assert answers.put_answer(ddb, TABLE, new, now=NOW) is True

    read, write = emf_records(capsys.readouterr().out)
    for line, met_by in ((read, "read"), (write, "write")):
        (directive,) = line["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == metrics.NAMESPACE == "GenaiPacer"
        assert directive["Metrics"] == [{"Name": "InvalidStoredItems", "Unit": "Count"}]
        assert directive["Dimensions"] == [["FunctionName"]] and line["FunctionName"] == "router-fn"
        assert line["InvalidStoredItems"] == 1 and line["MetBy"] == met_by
        assert line["InvalidItemRule"].startswith(reason) and STORED not in json.dumps(line)  # the rule, never the text
    assert metrics.INVALID_STORED_ITEMS == "InvalidStoredItems"
