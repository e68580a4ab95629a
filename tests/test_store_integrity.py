"""Answer-store integrity (issues 22.1, 27.1-27.3): claims namespaced per writer, invalid items
replaceable, producer sequences bounded, claims released only by their owner, log-safe errors."""

from __future__ import annotations

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
