"""ModelQuota on bedrock-mantle's quota model (input_tpm_quota, output_tpm_quota): shares planned with
planning.sustainable_mantle_rate on both quotas, over-allocation of either as a synth error, the props
bedrock-runtime alone has refused by name, the plan file and quota-check, and the pacer's environment."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from genai_pacer import BedrockModel, InvalidPropsError, QuotaLedger, planning
from genai_pacer.observe import TpmQuota
from genai_pacer.quota.model_quota import PACER_MANTLE_ENVIRONMENT, ModelQuota
from genai_pacer.quota_check import check_quota, load_plans, main
from helpers import new_stack
from pacer_runtime.quota_pacer import MANTLE_ENVIRONMENT, QuotaPacer
from test_ledger import dynamodb
from test_quota import synth, warnings_of
from test_quota_check import ServiceQuotas, quota

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger

GPT = BedrockModel.from_id("openai.gpt-oss-120b-1:0")
PROFILE = planning.TokenProfile(input_tokens=2_000, output_tokens=300, max_tokens=500)


def mantle_quota(stack: cdk.Stack | None = None, **props) -> ModelQuota:
    props = {"model": GPT, "input_tpm_quota": 1_000_000, "output_tpm_quota": 60_000, **props}
    return ModelQuota(stack or new_stack(), "Quota", **props)


def test_a_fraction_share_is_that_part_of_both_quotas_planned_by_the_mantle_planner():
    quota = mantle_quota()
    plan = quota.share("Nightly", PROFILE, fraction=0.5, call_seconds=6, executions=2)
    expected = planning.sustainable_mantle_rate(PROFILE, input_tpm_quota=250_000, output_tpm_quota=15_000, call_seconds=6)
    assert plan == expected and plan.limited_by == "output-tpm"  # 15,000 / 300 = 50 a minute, 5 in flight
    share = quota.shares["Nightly"]
    assert (share.tpm, share.output_tpm, share.planned_in_flight) == (500_000, 30_000, 10)
    assert quota.pacer_environment("Nightly") == {"GENAI_PACER_INPUT_TPM": "250000", "GENAI_PACER_OUTPUT_TPM": "15000"}


def test_the_environment_sizes_a_mantle_pacer():
    assert PACER_MANTLE_ENVIRONMENT == MANTLE_ENVIRONMENT
    quota = mantle_quota()
    quota.share("Worker", PROFILE, fraction=0.2, call_seconds=6)
    pacer = QuotaPacer.from_environment(quota.pacer_environment("Worker"))
    assert (pacer.endpoint, pacer.input_tpm, pacer.output_tpm) == ("bedrock-mantle", 200_000, 12_000)


def test_a_calls_share_draws_what_its_calls_draw_on_each_quota():
    quota = mantle_quota()
    quota.share("Chat", PROFILE, calls=4, call_seconds=6)
    share = quota.shares["Chat"]
    # 40 calls a minute: input 2,000 + 500 x 6/60 each, output 300 each
    assert (share.tpm, share.output_tpm) == (pytest.approx(40 * 2_050), 40 * 300)


def test_overdrawing_the_output_quota_fails_synth_naming_it():
    stack = new_stack()
    quota = mantle_quota(stack)
    quota.share("Nightly", PROFILE, fraction=0.9, call_seconds=6)
    quota.share("Chat", PROFILE, calls=4, call_seconds=6)  # 12,000 more output TPM: 66,000 of 60,000
    with pytest.raises(RuntimeError) as error:
        synth(stack)
    message = str(error.value)
    assert "shares.over-allocated" in message or "input TPM" in message
    assert "66,000 output TPM, 110.0% of the 60,000 output TPM allocatable" in message


def test_nearly_allocating_the_output_quota_warns():
    stack = new_stack()
    quota = mantle_quota(stack)
    quota.share("Nightly", PROFILE, fraction=0.8, call_seconds=6)
    quota.share("Chat", PROFILE, calls=2, call_seconds=6)  # 6,000 more output TPM: 90% of it
    synth(stack)
    assert any("84.1% of the allocatable input quota and 90.0% of the output quota (warn_at 90%), leaving 159,000 "
               "input and 6,000 output TPM of headroom" in w for w in warnings_of(stack)), warnings_of(stack)


def test_the_plan_file_and_quota_check_carry_both_quotas(tmp_path, capsys):
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Mantle", env=cdk.Environment(account="111122223333", region="us-east-1"))
    quota = mantle_quota(stack)
    quota.share("Nightly", PROFILE, fraction=0.5, call_seconds=6)
    app.synth()
    (data_file,) = tmp_path.glob("genai-pacer-quota.*.json")
    data = json.loads(data_file.read_text())
    assert (data["endpoint"], data["tpm_quota"], data["output_tpm_quota"], data["daily_tokens"]) == (
        "bedrock-mantle", 1_000_000, 60_000, None)
    assert data["shares"][0]["output_tpm"] == 30_000
    (plan,) = load_plans(tmp_path)
    assert plan.mantle and plan.output_shares == (("Nightly", 30_000),)
    assert main(["--assembly", str(tmp_path), "--offline"]) == 0
    out = capsys.readouterr().out
    assert "bedrock-mantle, 1,000,000 input and 60,000 output tokens per minute (no RPM, no daily quota)" in out
    assert "1 share(s) allocate 30,000 output TPM, 50.0% of the declared 60,000 output tokens per minute" in out
    assert "daily" not in out.split("\n", 2)[2]  # no day is checked: bedrock-mantle lists no daily quota


def test_quota_check_compares_both_quotas_with_the_account(tmp_path):
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Mantle", env=cdk.Environment(account="111122223333", region="us-east-1"))
    mantle_quota(stack).share("Nightly", PROFILE, fraction=0.5, call_seconds=6)
    app.synth()
    (plan,) = load_plans(tmp_path)
    listed = [quota("L-10000001", "Bedrock Mantle input tokens per minute for OpenAI GPT OSS 120B 1", 1_000_000),
              quota("L-10000002", "Bedrock Mantle output tokens per minute for OpenAI GPT OSS 120B 1", 40_000),
              quota("L-10000003", "On-demand InvokeModel tokens per minute for OpenAI GPT OSS 120B 1", 9)]
    quotas = ServiceQuotas()
    for code, value in (("L-10000001", 1_000_000), ("L-10000002", 40_000)):
        quotas.stub.add_response("list_aws_default_service_quotas", {"Quotas": listed}, {"ServiceCode": "bedrock"})
        quotas.applied(code, value)
    result = check_quota(plan, quotas.client)
    quotas.done()
    messages = [(f.level, f.message) for f in result.findings]
    assert messages[0][0] == "ok" and "the declared 1,000,000 input TPM is the account's quota L-10000001" in messages[0][1]
    assert messages[1][0] == "error" and "declares 60,000 output TPM but the account's quota L-10000002" in messages[1][1]
    assert "set output_tpm_quota=40,000" in messages[1][1]


@pytest.mark.parametrize(
    ("props", "rule", "message"),
    [
        ({"output_tpm_quota": None}, "input_tpm_quota.without-output", "input_tpm_quota and output_tpm_quota go together"),
        ({"tpm_quota": 400_000}, "tpm_quota.with-mantle", "tpm_quota with input_tpm_quota/output_tpm_quota"),
        ({"rpm_quota": 100}, "rpm_quota.no-rpm-on-mantle", "that endpoint enforces no requests-per-minute quota"),
        ({"burndown": 5}, "burndown.mantle", "burndown=5 with a bedrock-mantle quota"),
        ({"daily_token_quota": 10**9}, "daily_token_quota.no-day-on-mantle", "the daily token quotas are bedrock-runtime's"),
        ({"cross_model_daily_tokens": 10**9}, "daily_token_quota.no-day-on-mantle", "cross_model_daily_tokens"),
        ({"reserved_input_tpm": 10_000, "reserved_output_tpm": 1_000}, "reserved_input_tpm.mantle",
         "the Reserved tier is planned for bedrock-runtime calls"),
        ({"service_quota_code": "L-A1B2C3D4"}, "service_quota_code.mantle", "quota-check finds both by name"),
        ({"require_shares": True}, "require_shares.mantle", "bedrock-mantle:CreateInference"),
        ({"input_tpm_quota": 0}, "input_tpm_quota", "input_tpm_quota=0 is below the minimum of 1"),
    ],
)
def test_what_a_mantle_quota_cannot_take_is_refused_by_name(props, rule, message):
    with pytest.raises(InvalidPropsError) as error:
        mantle_quota(**props)
    assert message in str(error.value)
    assert f"[ModelQuota.{rule}" in str(error.value)


def test_a_quota_of_neither_model_names_both():
    with pytest.raises(InvalidPropsError, match=r"tpm_quota is required: .* \(or input_tpm_quota and output_tpm_quota for a bedrock-mantle quota"):
        ModelQuota(new_stack(), "Quota", model=GPT)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tpm": 100_000}, "tpm= on a bedrock-mantle quota"),
        ({"fraction": 0.2, "burst_tpm": 300_000}, "burst_tpm on a bedrock-mantle quota"),
        ({"fraction": 0.001}, "fraction=0.001 gives the share 1,000 input tokens per minute, which cannot admit one call"),
        ({"fraction": 0.01}, "fraction=0.01 gives the share 600 output tokens per minute, less than one call at a time"),
        ({"calls": 2, "service_tier": "reserved"}, "this quota has none"),
    ],
)
def test_bad_mantle_shares_are_refused_naming_the_argument(kwargs, message):
    quota = mantle_quota()
    with pytest.raises(InvalidPropsError) as error:
        quota.share("S", PROFILE, call_seconds=6, **kwargs)
    assert message in str(error.value)
    assert not quota.shares


def test_a_dashboard_of_a_mantle_quota_is_refused():
    with pytest.raises(InvalidPropsError, match="EstimatedTPMQuotaUsage"):
        TpmQuota.from_model_quota(mantle_quota())


def test_a_ledger_of_a_mantle_quota_gives_each_share_both_windows_and_no_day(dynamodb):
    from genai_pacer.quota.ledger import LEDGER_DAILY_TOKENS_VARIABLE, LEDGER_OUTPUT_ENVIRONMENT
    from pacer_runtime.ledger import SharedLedger

    stack = new_stack()
    quota = mantle_quota(stack, keep_free=0.1)
    quota.share("Workers", PROFILE, fraction=0.4, call_seconds=6, executions=2)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    env = ledger.environment("Workers")
    assert LEDGER_DAILY_TOKENS_VARIABLE not in env  # bedrock-mantle has no daily quota
    assert [env[name] for name in LEDGER_OUTPUT_ENVIRONMENT] == ["54000", "24000", "54000"]  # quota, floor, burst
    # the minute and the burst cap are tokens resolved at synth (a mantle ledger shares the whole allocatable quota)
    env = {name: ("ledger" if name.endswith("_TABLE") else stack.resolve(value)) for name, value in env.items()}
    pacer = QuotaPacer.from_environment(env, ledger=SharedLedger.from_environment(env, client=dynamodb))
    assert (pacer.input_tpm, pacer.output_tpm, pacer.fallback_tpm) == (900_000, 54_000, 200_000)
    assert pacer.ledger is not None and (pacer.ledger.output_floor_tpm, pacer.ledger.floor_tpm) == (24_000, 400_000)
    with pytest.raises(InvalidPropsError, match="burst_tpm on a share of a bedrock-mantle quota"):
        ledger.environment("Workers", burst_tpm=500_000)


def test_a_runtime_consumer_given_a_mantle_ledger_is_refused():
    from genai_pacer import QueuedInference

    stack = new_stack()
    ledger = QuotaLedger(stack, "Ledger", quota=mantle_quota(stack))
    with pytest.raises(InvalidPropsError, match="keeps a bedrock-mantle quota, and this worker calls bedrock-runtime"):
        QueuedInference(stack, "Queued", model=GPT, max_concurrency=4, ledger=ledger)


def test_a_mantle_and_a_runtime_quota_of_one_model_are_two_quotas():
    """The two endpoints keep separate quotas for the same model: declaring both is not a twin."""
    stack = new_stack()
    mantle_quota(stack).share("A", PROFILE, fraction=0.1, call_seconds=6)
    runtime = ModelQuota(stack, "Runtime", model=GPT, tpm_quota=400_000)
    runtime.share("B", PROFILE, fraction=0.1, call_seconds=6)
    synth(stack)
    assert not [w for w in warnings_of(stack) if "declared-twice" in w or "declare the same quota" in w]


def test_quota_check_takes_a_mantle_quota_on_the_command_line(capsys):
    argv = ["--model-id", "openai.gpt-oss-120b-1:0", "--tpm", "1000000", "--output-tpm", "60000",
            "--share", "nightly=500000/30000", "--share", "chat=300000/35000", "--offline"]
    assert main(argv) == 1  # 65,000 output TPM of 60,000
    out = capsys.readouterr().out
    assert "bedrock-mantle, 1,000,000 input and 60,000 output tokens per minute" in out
    assert "  chat: 300,000 input TPM (30.0%), 35,000 output TPM (58.3%)" in out
    assert "2 share(s) allocate 800,000 input TPM, 80.0%" in out
    assert "ERROR   openai.gpt-oss-120b-1:0 in its Region (bedrock-mantle): 2 share(s) allocate 65,000 output TPM" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--share", "nightly=500000"], "--share 'nightly=500000' with --output-tpm is not NAME=INPUT_TPM/OUTPUT_TPM"),
    (["--rpm", "100"], "--rpm with --output-tpm: a bedrock-mantle quota has no RPM and no daily quota"),
    (["--quota-code", "L-A1B2C3D4"], "--quota-code with --output-tpm"),
])
def test_quota_check_refuses_what_a_mantle_quota_cannot_take(extra, message, capsys):
    argv = ["--model-id", "openai.gpt-oss-120b-1:0", "--tpm", "1000000", "--output-tpm", "60000", "--offline", *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert main(["--output-tpm", "60000", "--offline"]) == 2
    assert "--output-tpm describe a quota given with --model-id and --tpm" in capsys.readouterr().err
