"""AWS facts the code relies on that no other test checked by machine (issue 21 §4), read back from
the botocore service models the dev tools install (no network): the SyncExecutionUrl handler's
throttle codes and input limit (stepfunctions StartSyncExecution), ScheduledPrecompute's DynamoDB
error names (dynamodb PutItem / DeleteItem) and the Lambda throttle its "Check stored answer" step
retries (lambda Invoke), EventBridge Scheduler's Target.Input size and
RetryPolicy ranges (scheduler), LlmEndpoint's note on CreateEndpointConfig's KmsKeyId
(sagemaker, against aws-cdk-lib's conflicting CfnEndpointConfig documentation), and the KMS actions
granted on an SSE-KMS bucket's key (s3 CreateMultipartUpload) with BatchPrecompute's
s3EncryptionKeyId (bedrock).

The models come from the one botocore session integ/_sdk_check.py already uses. Each check is a
small function applied both to the constant and to a wrong value (a misspelt name, another
reading of a limit), so the test shows the check would reject the constant if it were wrong.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import botocore
import pytest
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_scheduler as scheduler
from aws_cdk.assertions import Template
from botocore.retries.standard import ThrottledRetryableChecker
from genai_pacer import AnswerStore, BedrockModel, ConverseRequest, _s3, precompute
from genai_pacer.endpoints import llm_endpoint
from helpers import all_states, definition, new_stack, only

from integ import _sdk_check


def service(name: str) -> Any:
    """A botocore ServiceModel, from the session integ/_sdk_check.py reads its models with."""
    return _sdk_check._session().get_service_model(name)


def _flat(text: str | None) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", text or "").split())


def error_names(service_name: str, operation: str) -> set[str]:
    return {shape.name for shape in service(service_name).operation_model(operation).error_shapes}


# --- 1. SyncExecutionUrl's handler (lambda/sync_execution/handler.py) -------------------------------


@pytest.fixture(scope="module")
def sync_handler():
    patch = pytest.MonkeyPatch()
    for name, value in {"STATE_MACHINE_ARN": "arn:aws:states:us-east-1:111122223333:stateMachine:m",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x",
                        "AWS_SECRET_ACCESS_KEY": "x"}.items():
        patch.setenv(name, value)
    sys.modules.pop("sync_execution.handler", None)
    yield importlib.import_module("sync_execution.handler")
    sys.modules.pop("sync_execution.handler", None)
    patch.undo()


#: botocore's own list of generic throttling codes (botocore/retries/standard.py, the standard retry
#: mode's ThrottledRetryableChecker): codes any AWS JSON service may answer with, modelled or not.
GENERIC_THROTTLE_CODES = frozenset(ThrottledRetryableChecker._THROTTLED_ERROR_CODES)


def throttle_code_source(code: str) -> str | None:
    """Why `code` is a StartSyncExecution throttle: a modelled error of the operation whose name says
    throttling, or a generic AWS throttling code; None when neither source knows it."""
    if code in error_names("stepfunctions", "StartSyncExecution") and "Throttl" in code:
        return "StartSyncExecution error shape"
    if code in GENERIC_THROTTLE_CODES:
        return "generic AWS throttling code (botocore standard retry mode)"
    return None


def test_each_throttle_code_is_a_modelled_or_generic_throttle(sync_handler):
    sources = {code: throttle_code_source(code) for code in sync_handler.THROTTLE_CODES}
    assert sources == {
        "KmsThrottlingException": "StartSyncExecution error shape",
        "ThrottlingException": "generic AWS throttling code (botocore standard retry mode)",
    }
    # the stepfunctions model documents KmsThrottlingException as KMS throttling a call Step
    # Functions makes for the caller, i.e. a refusal before the execution runs
    shape = service("stepfunctions").shape_for("KmsThrottlingException")
    assert "Received when KMS returns ThrottlingException for a KMS call that Step Functions makes" in _flat(shape.documentation)


@pytest.mark.parametrize("wrong", ["KMSThrottlingException", "ThrottlingExceptions", "Throttled", "ExecutionLimitExceeded"])
def test_a_misspelt_or_non_throttle_code_is_rejected(wrong):
    assert throttle_code_source(wrong) is None


def test_the_handler_treats_a_throttle_as_a_client_error_as_botocore_models_it(sync_handler):
    """The handler retries a throttle only below HTTP 500: botocore's legacy retry table gives
    ThrottlingException HTTP 400 (data/_retry.json)."""
    table = json.loads((Path(botocore.__file__).parent / "data" / "_retry.json").read_text())
    response = table["definitions"]["throttling_exception"]["applies_when"]["response"]
    assert (response["service_error_code"], response["http_status_code"]) == ("ThrottlingException", 400)


def start_sync_input_max() -> int:
    member = service("stepfunctions").operation_model("StartSyncExecution").input_shape.members["input"]
    return member.metadata["max"]


def test_the_input_limit_is_start_sync_executions(sync_handler):
    assert start_sync_input_max() == sync_handler.INPUT_LIMIT_BYTES == 262_144
    doc = service("stepfunctions").operation_model("StartSyncExecution").input_shape.members["input"].documentation
    assert "expressed as bytes in UTF-8 encoding" in doc  # what the handler measures (len of the encoded body)
    assert start_sync_input_max() != 256_000  # a decimal reading of "256 KB" would be wrong here


# --- 2. ScheduledPrecompute's DynamoDB error names (constructs/genai_pacer/precompute/scheduled.py) ---

#: The optimized integration's task resources and the API operations they call.
OPTIMIZED_DYNAMODB = {"putItem": "PutItem", "deleteItem": "DeleteItem", "updateItem": "UpdateItem", "getItem": "GetItem"}


def dynamodb_error_problem(name: str, operation: str) -> str | None:
    """None when `name` is how Step Functions' optimized DynamoDB integration names one of the
    operation's modelled errors: the `DynamoDB.` prefix (precompute.DYNAMODB_ERROR_PREFIX, from the
    Step Functions guide's connect-ddb page) and the model's name, or that name with the Exception
    suffix it lacks (precompute._step_functions_names retries both spellings)."""
    if not name.startswith("DynamoDB."):
        return f"{name}: not the optimized integration's DynamoDB. prefix"
    base = name.removeprefix("DynamoDB.")
    modelled = error_names("dynamodb", operation)
    if base in modelled or (base.endswith("Exception") and base.removesuffix("Exception") in modelled
                            and not base.removesuffix("Exception").endswith("Exception")):
        return None
    return f"{name}: {operation} has no error {base!r} (modelled: {sorted(modelled)})"


def test_the_transient_error_constants_are_putitem_and_deleteitem_errors():
    assert precompute.DYNAMODB_ERROR_PREFIX == "DynamoDB."
    for operation in ("PutItem", "DeleteItem"):
        assert set(precompute.DYNAMODB_TRANSIENT_ERRORS) <= error_names("dynamodb", operation), operation
        assert precompute.CONDITIONAL_CHECK_FAILED.removeprefix("DynamoDB.") in error_names("dynamodb", operation)
    for name in precompute.DYNAMODB_RETRY_ERRORS:
        assert dynamodb_error_problem(name, "PutItem") is None


def test_the_ledgers_dynamodb_tasks_retry_and_catch_updateitem_errors():
    """The shared quota ledger's reserve, settle and release are UpdateItem tasks (step_functions.ledger_steps)."""
    from genai_pacer.step_functions import ledger_steps

    assert ledger_steps.CONDITIONAL_CHECK_FAILED.removeprefix("DynamoDB.") in error_names("dynamodb", "UpdateItem")
    assert set(ledger_steps.DYNAMODB_RETRY_ERRORS) == set(precompute.DYNAMODB_RETRY_ERRORS)
    for name in (ledger_steps.CONDITIONAL_CHECK_FAILED, *ledger_steps.DYNAMODB_RETRY_ERRORS):
        assert dynamodb_error_problem(name, "UpdateItem") is None


@pytest.mark.parametrize(
    "wrong",
    [
        "DynamoDb.ThrottlingException",  # the SDK integration's prefix, not the optimized one's
        "DynamoDB.RequestLimitExceed",  # misspelt
        "DynamoDB.ThrottlingExceptionException",
        "DynamoDB.ConditionCheckFailedException",
        "ThrottlingException",  # no prefix
    ],
)
def test_a_wrong_dynamodb_error_name_is_rejected(wrong):
    assert dynamodb_error_problem(wrong, "PutItem") is not None


def test_every_dynamodb_task_of_a_synthesized_run_names_its_operations_errors():
    """What the state machine really says: each optimized DynamoDB task's Retry and Catch names are
    errors of the operation that task calls."""
    stack = new_stack()
    precompute.ScheduledPrecompute(
        stack, "Pre", answer_store=AnswerStore(stack, "Store"), model=BedrockModel.from_id("amazon.nova-lite-v1:0"),
        request=ConverseRequest(prompt="p", max_tokens=16), max_concurrency=2,
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6", time_zone=cdk.TimeZone.EUROPE_LONDON),
        items=[{"key": "k#1"}],
    )
    states = all_states(definition(only(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine")))
    checked: dict[str, str] = {}
    for state_name, state in states.items():
        resource = json.dumps(state.get("Resource", ""))
        match = re.search(r":states:::dynamodb:(\w+)", resource)
        if state.get("Type") != "Task" or not match:
            continue
        operation = OPTIMIZED_DYNAMODB[match.group(1)]
        names = [n for rule in state.get("Retry", []) + state.get("Catch", []) for n in rule["ErrorEquals"]
                 if n.startswith("DynamoD")]
        assert names, state_name
        assert [p for p in (dynamodb_error_problem(n, operation) for n in names) if p] == [], state_name
        checked[state_name] = operation
    assert set(checked.values()) == {"PutItem", "DeleteItem"}, checked  # the lock, each answer, the release


def lambda_error_problem(name: str) -> str | None:
    """None when `name` is how Step Functions names a modelled error of Lambda's Invoke: the `Lambda.`
    prefix (the Step Functions guide's bp-lambda-serviceexception page, cited at
    precompute.LAMBDA_THROTTLED) and the model's name."""
    if not name.startswith("Lambda."):
        return f"{name}: not Step Functions' Lambda. prefix"
    base = name.removeprefix("Lambda.")
    modelled = error_names("lambda", "Invoke")
    return None if base in modelled else f"{name}: Invoke has no error {base!r}"


def test_the_lambda_throttle_the_second_look_retries_is_an_invoke_error():
    assert lambda_error_problem(precompute.LAMBDA_THROTTLED) is None
    # the model's own words for it: a throttle, which a retry after a wait can clear
    assert "throughput limit was exceeded" in _flat(service("lambda").shape_for("TooManyRequestsException").documentation)
    for wrong in ("Lambda.TooManyRequestException", "Lambda.ThrottlingException", "TooManyRequestsException",
                  "Lambda.Throttled"):
        assert lambda_error_problem(wrong) is not None, wrong


# --- 3. EventBridge Scheduler: the target Input size and RetryPolicy (precompute/scheduled.py) ---------


def scheduler_input_kb() -> int:
    """The Target.Input limit as the scheduler model documents it (its shape has no max)."""
    doc = service("scheduler").shape_for("Target").members["Input"].documentation
    (kb,) = re.findall(r"maximum size of the <code>Input</code> field is (\d+) KB", doc)
    return int(kb)


def fits_the_run_input(limit: int) -> bool:
    """A limit an input may use when Scheduler's "KB" may be 1,000 or 1,024 bytes and StartExecution
    takes at most its model's max: it must fit the smaller reading and Step Functions."""
    start_max = service("stepfunctions").operation_model("StartExecution").input_shape.members["input"].metadata["max"]
    return 0 < limit <= min(scheduler_input_kb() * 1000, scheduler_input_kb() * 1024, start_max)


def test_the_inline_input_limit_is_schedulers_documented_size_read_in_decimal():
    assert "max" not in service("scheduler").shape_for("TargetInput").metadata  # only the documentation states it
    assert scheduler_input_kb() == 256
    assert scheduler_input_kb() * 1000 == precompute.MAX_INLINE_INPUT_BYTES
    assert fits_the_run_input(precompute.MAX_INLINE_INPUT_BYTES)


@pytest.mark.parametrize("wrong", [262_144, 256 * 1024 + 1, 300_000, 0])
def test_a_limit_past_the_smaller_reading_is_rejected(wrong):
    assert not fits_the_run_input(wrong)


def test_the_schedule_retry_ranges_are_the_models():
    members = service("scheduler").shape_for("RetryPolicy").members
    attempts, age = members["MaximumRetryAttempts"].metadata, members["MaximumEventAgeInSeconds"].metadata
    assert (attempts["min"], attempts["max"]) == (0, precompute.MAX_SCHEDULE_RETRIES)
    assert (age["min"], age["max"]) == (precompute.MIN_SCHEDULE_EVENT_AGE_SECONDS, precompute.MAX_SCHEDULE_EVENT_AGE_SECONDS)


# --- 4. LlmEndpoint's KMS local-storage note (constructs/genai_pacer/endpoints/llm_endpoint.py) -----


def kms_key_id_doc() -> str:
    return _flat(service("sagemaker").operation_model("CreateEndpointConfig").input_shape.members["KmsKeyId"].documentation)


def cdk_kms_key_id_doc() -> str:
    return _flat(inspect.getdoc(sagemaker.CfnEndpointConfigProps.kms_key_id))


def test_the_local_storage_note_is_the_api_models_words():
    assert llm_endpoint.KMS_KEY_LOCAL_STORAGE_NOTE in kms_key_id_doc()
    # the API model says the key does not cover local storage, not that the call fails: the reason
    # LlmEndpoint warns instead of refusing (issue 21.6)
    assert "the KmsKeyId parameter does not encrypt instance local storage" in kms_key_id_doc()
    assert "fails" not in kms_key_id_doc()


@pytest.mark.parametrize("wrong", ["does not encrypt local instance storage", "encrypts instance local storage",
                                   "does not encrypt the instance storage volume"])
def test_a_reworded_note_is_not_in_the_model(wrong):
    assert wrong not in kms_key_id_doc()


def test_aws_cdk_lib_still_documents_the_conflicting_claim_the_warning_cites():
    """LlmEndpoint's warning says aws-cdk-lib's documentation claims CreateEndpointConfig fails with a
    key on such types; when aws-cdk-lib drops that claim, this fails and the warning should too."""
    assert "If you specify a value for KmsKeyId when using any nitro-based instances with local storage, the call " \
           "to CreateEndpointConfig fails" in cdk_kms_key_id_doc().replace("``", "")
    assert llm_endpoint.KMS_KEY_LOCAL_STORAGE_NOTE not in cdk_kms_key_id_doc()


# --- 5. The KMS actions of an SSE-KMS bucket's readers and writers (constructs/genai_pacer/_s3.py) ----


def multipart_kms_actions() -> set[str]:
    """The kms: actions S3's general-purpose bucket permissions for CreateMultipartUpload name."""
    doc = service("s3").operation_model("CreateMultipartUpload").documentation
    part = doc[doc.index("General purpose bucket permissions"):doc.index("Directory bucket permissions")]
    return set(re.findall(r"<code>(kms:[A-Za-z*]+)</code>", part))


@pytest.mark.parametrize(("actions", "documented"), [
    (_s3.KMS_WRITE_ACTIONS, True),
    (_s3.KMS_READ_ACTIONS, True),
    (("kms:GenerateDataKey*", "kms:Decrypt"), False),  # the wildcard family is not what S3 names
    (("kms:Encrypt", "kms:GenerateDataKey"), False),
])
def test_the_bucket_key_actions_are_those_s3_names_for_a_multipart_upload(actions, documented):
    """A writer gets exactly what a multipart upload needs (which covers a single PutObject); a reader
    its Decrypt. Checked against botocore's s3 model, the text of the S3 API reference."""
    assert (set(actions) <= multipart_kms_actions()) is documented
    assert multipart_kms_actions() == set(_s3.KMS_WRITE_ACTIONS)


def test_a_key_arn_is_what_a_batch_jobs_s3_encryption_key_id_takes():
    """BatchPrecompute sends the output bucket's key ARN as s3EncryptionKeyId."""
    member = service("bedrock").shape_for("ModelInvocationJobS3OutputDataConfig").members["s3EncryptionKeyId"]
    assert "key that encrypts the S3 location of the output data" in _flat(member.documentation)
    pattern = re.compile(rf"^(?:{member.metadata['pattern']})$")
    assert pattern.match("arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab")
    assert not pattern.match("arn:aws:s3:::not-a-key")
