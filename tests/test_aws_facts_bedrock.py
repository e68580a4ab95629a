"""The Bedrock and Service Quotas facts genai-pacer relies on, read back from botocore's service
models (installed with the dev tools). A drift in the model fails here, next to the constant it
contradicts. Facts only a deploy can confirm are listed in the report, not tested here."""

from __future__ import annotations

import re
from functools import cache

import botocore.loaders
import pytest
from genai_pacer import models
from genai_pacer._internal.runtime_constants import metrics_constants
from genai_pacer.quota import check as quota_check
from genai_pacer.quota import model_quota as quota
from genai_pacer.step_functions import model_tasks


@cache
def service(name: str = "bedrock-runtime") -> dict:
    return botocore.loaders.Loader().load_service_model(name, "service-2")


def shape(service_name: str, name: str) -> dict:
    return service(service_name)["shapes"][name]


def member_shape(service_name: str, structure: str, member: str) -> dict:
    return shape(service_name, shape(service_name, structure)["members"][member]["shape"])


def operation_errors(service_name: str, operation: str) -> set[str]:
    return {error["shape"] for error in service(service_name)["operations"][operation]["errors"]}


# --- Converse, as ConverseRequest writes it -----------------------------------------------------------


def test_converse_inference_config_names_are_the_models():
    """ConverseRequest writes MaxTokens, Temperature, TopP, StopSequences (PascalCase of these)."""
    members = shape("bedrock-runtime", "InferenceConfiguration")["members"]
    assert sorted(members) == ["maxTokens", "stopSequences", "temperature", "topP"]
    written = model_tasks.ConverseRequest(prompt="p", max_tokens=5, temperature=0.5, top_p=0.5,
                                          stop_sequences=["x"]).parameters("m")["InferenceConfig"]
    assert sorted(written) == sorted(name[0].upper() + name[1:] for name in members)


@pytest.mark.parametrize(
    ("member", "constant"),
    [("temperature", model_tasks.TEMPERATURE_RANGE), ("topP", model_tasks.TOP_P_RANGE)],
)
def test_converse_sampling_ranges_are_the_models(member, constant):
    limits = member_shape("bedrock-runtime", "InferenceConfiguration", member)
    assert (limits["min"], limits["max"]) == constant


def test_converse_max_tokens_minimum_is_the_models():
    assert member_shape("bedrock-runtime", "InferenceConfiguration", "maxTokens")["min"] == model_tasks.MIN_MAX_TOKENS


def test_latency_modes_are_the_performance_config_enum():
    latency = member_shape("bedrock-runtime", "PerformanceConfiguration", "latency")
    assert tuple(latency["enum"]) == model_tasks.LATENCY_MODES
    written = model_tasks.ConverseRequest(prompt="p", max_tokens=5, latency="optimized").parameters("m")
    assert "performanceConfig" in shape("bedrock-runtime", "ConverseRequest")["members"]
    assert written["PerformanceConfig"] == {"Latency": "optimized"}


def test_every_converse_field_the_request_writes_exists():
    members = {name[0].upper() + name[1:] for name in shape("bedrock-runtime", "ConverseRequest")["members"]}
    written = model_tasks.ConverseRequest(prompt="p", system="s", max_tokens=5, additional_fields={"top_k": 5},
                                          latency="standard", service_tier="flex").parameters("m")
    assert set(written) <= members, set(written) - members


def test_service_tiers_are_the_service_tier_type_enum_everywhere():
    from genai_pacer import models
    from genai_pacer.quota import model_quota
    from genai_pacer.testing import specs

    enum = tuple(shape("bedrock-runtime", "ServiceTierType")["enum"])
    assert enum == metrics_constants().SERVICE_TIERS == model_tasks.SERVICE_TIERS == specs.SERVICE_TIERS
    # the IAM fence's values (bedrock:ServiceTier holds the tier name) and the quota's tier list
    assert enum == models._SERVICE_TIER_VALUES == model_quota.SERVICE_TIERS
    assert set(metrics_constants().TIER_RANK) == set(enum)  # "served below" ranks every tier
    assert metrics_constants().DEFAULT_TIER in enum


@pytest.mark.parametrize("operation", ["Converse", "ConverseStream"])
def test_converse_takes_the_tier_as_a_service_tier_structure(operation):
    constants = metrics_constants()
    request = shape("bedrock-runtime", service()["operations"][operation]["input"]["shape"])
    assert request["members"][constants.SERVICE_TIER_MEMBER]["shape"] == "ServiceTier"
    assert shape("bedrock-runtime", "ServiceTier")["members"]["type"]["shape"] == "ServiceTierType"
    written = model_tasks.ConverseRequest(prompt="p", max_tokens=5, service_tier="flex").parameters("m")
    assert written["ServiceTier"] == {"Type": "flex"}  # the SDK integration's PascalCase of serviceTier.type


@pytest.mark.parametrize("operation", ["Converse", "ConverseStream"])
def test_converse_returns_the_tier_that_served_it(operation):
    constants = metrics_constants()
    output = service()["operations"][operation]["output"]["shape"]
    holder = output if operation == "Converse" else "ConverseStreamMetadataEvent"
    assert shape("bedrock-runtime", holder)["members"][constants.SERVICE_TIER_MEMBER]["shape"] == "ServiceTier"


@pytest.mark.parametrize("operation", ["InvokeModel", "InvokeModelWithResponseStream"])
def test_invoke_model_takes_and_returns_the_tier_in_a_header(operation):
    constants = metrics_constants()
    for side in ("input", "output"):
        member = shape("bedrock-runtime", service()["operations"][operation][side]["shape"])["members"]["serviceTier"]
        assert (member["location"], member["locationName"], member["shape"]) == (
            "header", constants.SERVICE_TIER_HEADER, "ServiceTierType")


# --- which errors are retried ------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["Converse", "InvokeModel"])
def test_every_retried_error_is_an_error_of_the_call(operation):
    """A retried name that the API never returns would retry nothing; one of each is checked."""
    assert set(model_tasks.RETRIED_BEDROCK_ERRORS) <= operation_errors("bedrock-runtime", operation)


@pytest.mark.parametrize("operation", ["Converse", "InvokeModel"])
def test_errors_that_never_succeed_on_retry_are_not_retried(operation):
    never = {"AccessDeniedException", "ValidationException", "ResourceNotFoundException", "ModelErrorException"}
    assert never <= operation_errors("bedrock-runtime", operation)
    assert not never & set(model_tasks.RETRIED_BEDROCK_ERRORS)


def test_the_default_retry_covers_both_integration_spellings():
    """The SDK integration's BedrockRuntime.<Error> is documented; the optimized integration's prefix
    is not, so both are retried (a wrong guess then costs nothing)."""
    for error in model_tasks.RETRIED_BEDROCK_ERRORS:
        assert {f"BedrockRuntime.{error}", f"Bedrock.{error}"} <= set(model_tasks.DEFAULT_RETRY_ERRORS)
    assert service("bedrock-runtime")["metadata"]["serviceId"].replace(" ", "") == "BedrockRuntime"


def test_a_converse_task_raises_the_errors_the_retry_check_names():
    """model_tasks refuses a Retry no Converse error can match (issue 35.6): the names it counts on are
    Converse's errors, under the prefix Step Functions derives from the service id."""
    assert set(model_tasks.CONVERSE_ERRORS) == operation_errors("bedrock-runtime", "Converse")
    service_id = service("bedrock-runtime")["metadata"]["serviceId"]
    assert service_id.replace(" ", "") + "." == model_tasks.CONVERSE_ERROR_PREFIX
    assert set(model_tasks.RETRIED_BEDROCK_ERRORS) <= set(model_tasks.CONVERSE_ERRORS)


# --- IAM: the actions a call needs --------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["Converse", "InvokeModel"])
def test_converse_and_invoke_model_need_the_invoke_action(operation):
    documentation = service("bedrock-runtime")["operations"][operation]["documentation"]
    assert f"requires permission for the <code>{models.INVOKE_ACTIONS[0]}</code> action" in documentation


def test_the_stream_actions_name_existing_operations():
    operations = service("bedrock-runtime")["operations"]
    for action in models.STREAM_ACTIONS:
        assert action.removeprefix("bedrock:") in operations
    assert service("bedrock-runtime")["metadata"]["signingName"] == models.INVOKE_ACTIONS[0].split(":")[0]


# --- Service Quotas, as quota-check and ModelQuota use it ---------------------------------------------


def test_the_quota_code_rule_is_the_apis_pattern():
    assert shape("service-quotas", "QuotaCode")["pattern"] == quota.QUOTA_CODE.pattern


def test_bedrocks_service_code_fits_the_apis_pattern():
    assert re.fullmatch(shape("service-quotas", "ServiceCode")["pattern"], quota_check.SERVICE_CODE)


def test_quota_check_reads_the_fields_service_quotas_returns():
    """find_account_quota reads QuotaCode, QuotaName and Value from ListAWSDefaultServiceQuotas and
    GetServiceQuota; a renamed field would make every quota unmatched."""
    members = shape("service-quotas", "ServiceQuota")["members"]
    assert {"QuotaCode", "QuotaName", "Value"} <= set(members)
    sq = service("service-quotas")["operations"]
    assert {"ListAWSDefaultServiceQuotas", "GetServiceQuota", "GetAWSDefaultServiceQuota"} <= set(sq)
