"""The AWS facts the router's handler and key claims rely on, checked against botocore's service models."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import botocore
import pytest
from pacer_runtime import key_claims

DATA = Path(botocore.__file__).parent / "data"


def service_model(service: str) -> dict:
    (path,) = sorted((DATA / service).glob("*/service-2.json*"))[-1:]
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(raw)


def exceptions(service: str) -> dict[str, dict]:
    return {name: shape.get("error", {}) for name, shape in service_model(service)["shapes"].items() if shape.get("exception")}


@pytest.fixture(scope="module")
def handler(monkeypatch_module):
    sys.modules.pop("answer_router.handler", None)
    import importlib

    return importlib.import_module("answer_router.handler")


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    for name, value in {"AWS_DEFAULT_REGION": "us-east-1", "MODEL_ID": "m", "ANSWER_TABLE": "t",
                        "MAX_AGE_SECONDS": "60", "MAX_OUTPUT_TOKENS": "10"}.items():
        mp.setenv(name, value)
    yield mp
    mp.undo()


def test_the_store_throttle_codes_are_dynamodb_errors(handler):
    assert set(exceptions("dynamodb")) >= handler.STORE_THROTTLE_CODES
    assert key_claims.CONDITION_FAILED in exceptions("dynamodb")


def test_the_model_codes_are_bedrock_runtime_errors_with_the_statuses_the_router_assumes(handler):
    errors = exceptions("bedrock-runtime")
    assert {code: errors[code]["httpStatusCode"] for code in handler.MODEL_UNAVAILABLE_CODES} == {
        "ServiceUnavailableException": 503, "ModelNotReadyException": 429, "InternalServerException": 500}
    assert {code: errors[code]["httpStatusCode"] for code in handler.MODEL_TIMEOUT_CODES} == {"ModelTimeoutException": 408}


def test_put_item_can_return_the_replaced_item():
    model = service_model("dynamodb")
    assert "ReturnValues" in model["shapes"][model["operations"]["PutItem"]["input"]["shape"]]["members"]
    assert "ALL_OLD" in model["shapes"]["ReturnValue"]["enum"]


def test_the_claim_prefix_fits_dynamodbs_key_limit():
    from pacer_runtime import answers

    assert key_claims.KEY_CLAIM_PREFIX == answers.KEY_CLAIM_PREFIX == "claim#key#"
    assert len(key_claims.claim_pk("x" * answers.MAX_KEY_BYTES).encode()) <= answers.MAX_KEY_BYTES
