"""The answer store's AWS facts, checked against machine-readable sources shipped in the venv:
botocore's service models (dynamodb 2012-08-10, sqs 2012-11-05) and cfn-lint's IAM policy data
(cfnlint/data/AdditionalSpecs/Policies.json). Facts only documents state (kms:ViaService and its
DynamoDB value, which KMS actions DynamoDB calls) are sourced beside their constants in precompute/store.py
and _internal/tables.py."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import botocore
import cfnlint
import pytest
from genai_pacer.precompute import store as answer_store
from pacer_runtime import answers

BOTOCORE_DATA = Path(botocore.__file__).parent / "data"
POLICIES = Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "Policies.json"


def model(service: str, version: str) -> dict:
    return json.loads(gzip.decompress((BOTOCORE_DATA / service / version / "service-2.json.gz").read_bytes()))


@pytest.mark.parametrize(
    "action",
    sorted(set(answer_store._READ_ACTIONS + answer_store._PUT_ACTIONS + answer_store._WRITE_ACTIONS
               + answer_store._KEY_READ_ACTIONS + answer_store._KEY_WRITE_ACTIONS)),
)
def test_every_granted_action_exists_and_names_no_wildcard(action):
    service, name = action.split(":")
    assert "*" not in name  # issue 27: no kms:ReEncrypt* / kms:GenerateDataKey* family grants
    assert name.lower() in json.loads(POLICIES.read_text())[service]["Actions"], action


def test_no_grant_to_the_router_deletes():
    assert "dynamodb:DeleteItem" not in answer_store._PUT_ACTIONS + answer_store._READ_ACTIONS
    assert "dynamodb:DeleteItem" in answer_store._WRITE_ACTIONS  # the worker releases its claims


def test_sqs_sent_timestamp_is_epoch_milliseconds_the_unit_of_a_sequence():
    sqs = model("sqs", "2012-11-05")
    assert "SentTimestamp" in sqs["shapes"]["MessageSystemAttributeName"]["enum"]
    doc = sqs["shapes"]["Message"]["members"]["Attributes"]["documentation"]
    assert re.search(r"SentTimestamp</code> are each returned as an integer representing the .*epoch time</a> in milliseconds", doc)
    assert answers.SEQUENCE_SKEW_MS == answers.CLOCK_SKEW_SECONDS * 1000


def test_the_condition_failure_code_answers_checks_is_a_put_and_delete_error():
    operations = model("dynamodb", "2012-08-10")["operations"]
    for operation in ("PutItem", "DeleteItem"):
        assert "ConditionalCheckFailedException" in [e["shape"] for e in operations[operation]["errors"]]


def test_attribute_type_names_in_the_write_condition_are_attribute_value_types():
    members = set(model("dynamodb", "2012-08-10")["shapes"]["AttributeValue"]["members"])
    assert members >= {"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"}
    for name, value in answers._NEWER_THAN_STORED_CONSTANTS.items():
        if name.startswith(":type"):
            assert value["S"] in members
