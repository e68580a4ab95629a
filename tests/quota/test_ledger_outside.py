"""Shares held outside the ledger (issue 25): a QuotaLedger's consumers share the quota's allocatable TPM
less what the shares held outside every ledger of the quota draw, so they never borrow the TPM a plain
QuotaPacer, a function or a Map without ledger= uses. Checked where a user relies on it: the synthesized
GENAI_PACER_LEDGER_* variables of a ledger consumer and the reservation's condition numbers of a
ledger-paced BoundedMap, plus the warnings for what synth cannot count outside the ledger."""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Annotations, Match
from genai_pacer import BedrockModel, BoundedMap, ConverseRequest, ModelQuota, QuotaLedger
from helpers import new_stack, resources, template_of

MODEL = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
QUOTA_TPM = 400_000
OUTSIDE_TPM = 100_000
MAX_TOKENS = 400
PROMPT_TOKENS = 1_000
RESERVED = PROMPT_TOKENS + MAX_TOKENS * 5  # a call's hold in the ledger: prompt + max_tokens x burndown


def quota_with_outside_share(stack: cdk.Stack, *, outside_concurrency=None, outside_hours: float = 24.0, **quota_props):
    """A quota with a share held outside the ledger: a function named after it calls the model, no ledger."""
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=5, **quota_props)
    profile = quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS)
    outside = quota.share("Outside", profile, tpm=OUTSIDE_TPM, call_seconds=4, hours_per_day=outside_hours)
    function = lambda_.Function(
        stack, "Outside", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context):\n    return None\n"),
        reserved_concurrent_executions=outside.max_concurrency if outside_concurrency is None else outside_concurrency)
    MODEL.grant_invoke(function)
    return quota, profile


def function_environment(stack: cdk.Stack, path_part: str) -> dict:
    (function,) = [f for name, f in resources(template_of(stack), "AWS::Lambda::Function").items() if path_part in name]
    return function["Properties"]["Environment"]["Variables"]


def inside_consumer(stack: cdk.Stack, quota: ModelQuota, ledger: QuotaLedger) -> lambda_.Function:
    function = lambda_.Function(
        stack, "Inside", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context):\n    return None\n"),
        reserved_concurrent_executions=4, environment=ledger.environment("Inside"))
    ledger.grant_use(function)
    MODEL.grant_invoke(function)
    return function


def inside_ledger(stack, quota, profile) -> QuotaLedger:
    """The "Inside" share (half the quota), the quota's ledger and the function consuming it."""
    quota.share("Inside", profile, fraction=0.5, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    inside_consumer(stack, quota, ledger)
    return ledger


def test_a_ledger_consumer_shares_the_quota_less_the_share_held_outside_the_ledger():
    stack = new_stack()
    quota, profile = quota_with_outside_share(stack)
    ledger = inside_ledger(stack, quota, profile)
    variables = function_environment(stack, "Inside")
    # Before: the whole allocatable 400,000 TPM, so the ledger's consumers borrowed the outside share's TPM
    assert variables["GENAI_PACER_LEDGER_QUOTA_TPM"] == str(QUOTA_TPM - OUTSIDE_TPM)
    assert variables["GENAI_PACER_LEDGER_BURST_TPM"] == str(QUOTA_TPM - OUTSIDE_TPM)  # default burst: all it shares
    assert variables["GENAI_PACER_LEDGER_FLOOR_TPM"] == "200000"
    assert ledger.outside_shares() == {"Outside": OUTSIDE_TPM}
    assert ledger.shared_tpm() == QUOTA_TPM - OUTSIDE_TPM


def test_a_burst_cap_above_what_the_outside_shares_leave_is_capped_at_it():
    stack = new_stack()
    quota, profile = quota_with_outside_share(stack)
    quota.share("Inside", profile, fraction=0.5, call_seconds=4, burst_tpm=350_000)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    inside_consumer(stack, quota, ledger)
    # the runtime takes floor <= burst <= quota: the burst beyond what the ledger shares is what it shares
    assert function_environment(stack, "Inside")["GENAI_PACER_LEDGER_BURST_TPM"] == str(QUOTA_TPM - OUTSIDE_TPM)


def test_a_share_held_by_no_construct_counts_outside_unless_a_ledger_consumer_got_its_variables():
    stack = new_stack()
    quota, profile = quota_with_outside_share(stack)
    quota.share("Inside", profile, fraction=0.25, call_seconds=4)
    quota.share("Elsewhere", profile, tpm=50_000, call_seconds=4)  # some process outside the app may draw it
    quota.share("Remote", profile, tpm=30_000, call_seconds=4)  # a process outside the app, through the ledger
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    inside_consumer(stack, quota, ledger)
    ledger.environment("Remote")
    assert function_environment(stack, "Inside")["GENAI_PACER_LEDGER_QUOTA_TPM"] == str(QUOTA_TPM - OUTSIDE_TPM - 50_000)


def map_states(stack: cdk.Stack) -> dict:
    (machine,) = resources(template_of(stack), "AWS::StepFunctions::StateMachine").values()
    body = machine["Properties"]["DefinitionString"]
    text = body if isinstance(body, str) else "".join(p if isinstance(p, str) else "X" for p in body["Fn::Join"][1])
    return json.loads(text)["States"]["Map"]["ItemProcessor"]["States"]


def test_a_ledger_paced_maps_reservation_leaves_the_outside_shares_tpm_free():
    stack = new_stack()
    quota, profile = quota_with_outside_share(stack)
    plan = quota.share("Summaries", profile, fraction=0.5, call_seconds=4, burst_tpm=350_000)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))
    values = map_states(stack)["InvokeModel reserve"]["Parameters"]["ExpressionAttributeValues"]
    # admitted while the window holds Q - r and its own holds min(burst, Q) - r: Q leaves the outside share free
    assert values[":total"] == {"N": str(QUOTA_TPM - OUTSIDE_TPM - RESERVED)}
    assert values[":mine"] == {"N": str(QUOTA_TPM - OUTSIDE_TPM - RESERVED)}


def test_every_share_in_the_ledger_leaves_the_whole_allocatable_quota_to_share():
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=5, keep_free=0.1)
    profile = quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS)
    inside_ledger(stack, quota, profile)
    assert function_environment(stack, "Inside")["GENAI_PACER_LEDGER_QUOTA_TPM"] == "360000"


def warnings_of(stack: cdk.Stack) -> list[str]:
    return [str(m.entry.data) for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())]


def test_an_outside_holder_whose_cap_is_deploy_time_is_warned_naming_the_share_and_the_fix():
    stack = new_stack()
    cap = cdk.CfnParameter(stack, "OutsideConcurrency", type="Number", default=2)
    quota, profile = quota_with_outside_share(stack, outside_concurrency=cap.value_as_number)
    inside_ledger(stack, quota, profile)
    warned = [w for w in warnings_of(stack) if "ledger-outside-deploy-time-cap" in w]
    assert len(warned) == 1, warnings_of(stack)
    assert "share 'Outside'" in warned[0] and "move it into the ledger" in warned[0] and "burst_tpm" in warned[0]
    # its share's TPM is still left free: the plan counts it at its share
    assert function_environment(stack, "Inside")["GENAI_PACER_LEDGER_QUOTA_TPM"] == str(QUOTA_TPM - OUTSIDE_TPM)


def test_a_caller_outside_the_ledger_holding_no_share_is_warned():
    stack = new_stack()
    quota, profile = quota_with_outside_share(stack)
    inside_ledger(stack, quota, profile)
    MODEL.grant_invoke(iam.Role(stack, "Stray", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    warned = [w for w in warnings_of(stack) if "ledger-outside-unshared" in w]
    assert len(warned) == 1 and "Stray" in warned[0] and "holds no share" in warned[0], warnings_of(stack)


def test_outside_shares_that_take_the_whole_quota_are_refused_naming_them():
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=5)
    profile = quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS)
    quota.share("Everything", profile, fraction=1.0, call_seconds=4)  # held by no ledger consumer: outside
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    ledger.consumer_variables("Extra", 0.0)  # a consumer of the ledger with no floor: nothing left to share
    try:
        template_of(stack)
    except Exception as error:  # aws-cdk-lib's validation error, with every problem
        message = str(error)
    else:
        raise AssertionError("synth passed")
    assert "ledger.outside-shares-leave-nothing" in message or "leaving the ledger's consumers nothing" in message
    assert "'Everything' (400,000 TPM)" in message and "move them into the ledger" in message


def test_a_maps_call_that_holds_more_than_the_outside_shares_leave_is_refused_at_synth():
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=100_000, burndown=5)
    small = quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS)
    quota.share("Elsewhere", small, tpm=95_000, call_seconds=4)  # held by nobody in the ledger: outside
    plan = quota.share("Summaries", small, tpm=4_000, call_seconds=60)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    # r = 1,000 + 1,000 x 5 = 6,000 tokens: within the 100,000 allocatable, above the 5,000 the outside share leaves
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=1_000))
    try:
        template_of(stack)
    except Exception as error:
        message = str(error)
    else:
        raise AssertionError("synth passed")
    assert "reserves 6,000 tokens a call" in message and "5,000 TPM" in message and "'Elsewhere'" in message


# --- the day -------------------------------------------------------------------------------------


def synth_error(stack: cdk.Stack) -> str:
    try:
        template_of(stack)
    except Exception as error:  # aws-cdk-lib's validation error, with every problem
        return str(error)
    raise AssertionError("synth passed")


def test_the_day_a_ledger_consumer_and_a_maps_reservations_share_leaves_the_outside_shares_day_free():
    """The default day is the TPM quota x 1,440: the ledger's is what it shares a minute x 1,440."""
    stack = new_stack()
    quota, profile = quota_with_outside_share(stack)
    quota.share("Inside", profile, fraction=0.25, call_seconds=4)
    plan = quota.share("Summaries", profile, fraction=0.25, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    inside_consumer(stack, quota, ledger)
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))
    day = (QUOTA_TPM - OUTSIDE_TPM) * 1_440  # 432,000,000; before: the whole 576,000,000
    assert function_environment(stack, "Inside")["GENAI_PACER_LEDGER_DAILY_TOKENS"] == str(day)
    states = map_states(stack)
    # the reservation and the want are admitted while the day holds r
    assert states["InvokeModel reserve"]["Parameters"]["ExpressionAttributeValues"][":day"] == {"N": str(day - RESERVED)}
    assert states["InvokeModel ledger want"]["Parameters"]["ExpressionAttributeValues"][":day"] == {"N": str(day - RESERVED)}
    assert ledger.shared_daily_tokens() == day and ledger.daily_tokens == QUOTA_TPM * 1_440


def test_a_daily_token_quota_leaves_the_outside_shares_their_tpm_for_their_hours_a_day():
    stack = new_stack()
    quota, profile = quota_with_outside_share(stack, outside_hours=2, daily_token_quota=200_000_000, keep_free=0.1)
    inside_ledger(stack, quota, profile)
    # 200,000,000 x 0.9 less the outside share's 100,000 TPM for 2 hours
    assert function_environment(stack, "Inside")["GENAI_PACER_LEDGER_DAILY_TOKENS"] == str(180_000_000 - 12_000_000)


def test_outside_shares_that_take_the_whole_day_are_refused_naming_them():
    stack = new_stack()
    quota, profile = quota_with_outside_share(stack, daily_token_quota=100_000_000)  # < 100,000 TPM x 1,440
    inside_ledger(stack, quota, profile)
    message = synth_error(stack)
    assert "'Outside' (100,000 TPM)" in message and "leaving the ledger's consumers no day" in message, message
    assert "hours_per_day" in message and "daily_token_quota" in message


def test_a_maps_call_that_holds_more_than_the_outside_shares_leave_of_the_day_is_refused_at_synth():
    stack = new_stack()
    # the outside share draws 100,000 TPM for 36 seconds a day: 60,000 of the 62,000, leaving 2,000 to the ledger
    quota, profile = quota_with_outside_share(stack, outside_hours=0.01, daily_token_quota=62_000)
    plan = quota.share("Summaries", profile, fraction=0.5, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))
    message = synth_error(stack)
    assert f"reserves {RESERVED:,} tokens a call" in message and "more than the 2,000 tokens a day" in message, message
    assert "'Outside'" in message
