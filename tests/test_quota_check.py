"""quota-check against a stubbed Service Quotas client (botocore Stubber): finding the model's quota,
comparing it with the declared plan and its shares, and the command's output and exit status."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import aws_cdk as cdk
import boto3
import pytest
from botocore.stub import Stubber
from genai_pacer import BedrockModel, planning
from genai_pacer.quota import ModelQuota
from genai_pacer.quota_check import (
    DeclaredQuota,
    QuotaCheckError,
    add_arguments,
    check_quota,
    find_account_quota,
    load_plans,
    main,
)
from genai_pacer.quota_check import run as run_check

HAIKU_PROFILE = "us.anthropic.claude-3-5-haiku-20241022-v1:0"


def quota(code: str, name: str, value: float = 0) -> dict:
    return {"ServiceCode": "bedrock", "QuotaCode": code, "QuotaName": name, "Value": value}


# Bedrock's quota names as Service Quotas lists them (codes made up), over two pages.
PAGE_ONE = [
    quota("L-00000001", "On-demand InvokeModel tokens per minute for Anthropic Claude 3.5 Haiku", 400_000),
    quota("L-00000002", "Cross-Region InvokeModel tokens per minute for Anthropic Claude 3.5 Haiku", 800_000),
    quota("L-00000003", "Cross-Region InvokeModel requests per minute for Anthropic Claude 3.5 Haiku", 2_000),
]
PAGE_TWO = [
    quota("L-00000004", "Cross-Region InvokeModel tokens per minute for Anthropic Claude 3.5 Sonnet", 800_000),
    quota("L-00000005", "Cross-Region InvokeModel tokens per minute for Anthropic Claude 3.5 Sonnet V2", 800_000),
    quota("L-00000006", "On-demand InvokeModel tokens per minute for Amazon Nova Lite", 2_000_000),
    quota("L-00000007", "Model invocation max tokens per day for Anthropic Claude 3.5 Haiku", 1_152_000_000),
]


class ServiceQuotas:
    """A real service-quotas client with its responses stubbed."""

    def __init__(self) -> None:
        self.client = boto3.client("service-quotas", region_name="us-east-1", aws_access_key_id="x",
                                   aws_secret_access_key="x")
        self.stub = Stubber(self.client)
        self.stub.activate()

    def defaults(self) -> ServiceQuotas:
        self.stub.add_response("list_aws_default_service_quotas", {"Quotas": PAGE_ONE, "NextToken": "page-2"},
                               {"ServiceCode": "bedrock"})
        self.stub.add_response("list_aws_default_service_quotas", {"Quotas": PAGE_TWO},
                               {"ServiceCode": "bedrock", "NextToken": "page-2"})
        return self

    def applied(self, code: str, value: float, name: str = "a quota") -> ServiceQuotas:
        self.stub.add_response("get_service_quota", {"Quota": quota(code, name, value)},
                               {"ServiceCode": "bedrock", "QuotaCode": code})
        return self

    def never_changed(self, code: str, default: float) -> ServiceQuotas:
        self.stub.add_client_error("get_service_quota", "NoSuchResourceException", "no applied value",
                                   expected_params={"ServiceCode": "bedrock", "QuotaCode": code})
        self.stub.add_response("get_aws_default_service_quota", {"Quota": quota(code, "default", default)},
                               {"ServiceCode": "bedrock", "QuotaCode": code})
        return self

    def done(self) -> None:
        self.stub.assert_no_pending_responses()


# --- finding the account's quota -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_id", "code"),
    [
        (HAIKU_PROFILE, "L-00000002"),  # a geographic profile: the cross-Region quota
        ("anthropic.claude-3-5-haiku-20241022-v1:0", "L-00000001"),  # on demand
        ("us.anthropic.claude-3-5-sonnet-20240620-v1:0", "L-00000004"),
        ("us.anthropic.claude-3-5-sonnet-20241022-v2:0", "L-00000005"),  # V2 is its own quota
        ("amazon.nova-lite-v1:0", "L-00000006"),
        ("arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0", "L-00000006"),
    ],
)
def test_a_models_tpm_quota_is_found_by_its_name(model_id, code):
    quotas = ServiceQuotas().defaults().applied(code, 123_000)
    found = find_account_quota(quotas.client, model_id)
    assert (found.code, found.value, found.applied) == (code, 123_000, True)
    quotas.done()


def test_the_rpm_quota_is_found_with_unit_requests():
    quotas = ServiceQuotas().defaults().applied("L-00000003", 2_000)
    assert find_account_quota(quotas.client, HAIKU_PROFILE, unit="requests").code == "L-00000003"


def test_a_quota_never_changed_reads_the_aws_default():
    quotas = ServiceQuotas().never_changed("L-00000002", 800_000)
    found = find_account_quota(quotas.client, HAIKU_PROFILE, code="L-00000002")
    assert (found.value, found.applied) == (800_000, False)
    quotas.done()


@pytest.mark.parametrize(
    ("model_id", "message"),
    [
        ("us.meta.llama3-2-1b-instruct-v1:0", "no Bedrock quotas named like 'cross-region invokemodel tokens per minute "
                                              "for '<model> match us.meta.llama3-2-1b-instruct-v1:0 (none): pass the code"),
        ("global.anthropic.claude-3-5-haiku-20241022-v1:0", "no Bedrock quotas named like 'global cross-region"),
    ],
)
def test_an_unmatched_model_asks_for_the_quota_code(model_id, message):
    quotas = ServiceQuotas().defaults()
    with pytest.raises(QuotaCheckError) as error:
        find_account_quota(quotas.client, model_id)
    assert message in str(error.value)


def test_an_ambiguous_match_lists_the_candidates_instead_of_guessing():
    quotas = ServiceQuotas()
    twins = [quota("L-1", "On-demand InvokeModel tokens per minute for Amazon Nova Lite", 1),
             quota("L-2", "On-demand InvokeModel tokens per minute for Amazon Nova Lite Extended", 1)]
    twins[0]["QuotaName"] = "On-demand InvokeModel tokens per minute for Amazon Nova Lite Preview"
    quotas.stub.add_response("list_aws_default_service_quotas", {"Quotas": twins}, {"ServiceCode": "bedrock"})
    with pytest.raises(QuotaCheckError, match=r"2 Bedrock quotas .* \(L-1 .*; L-2 .*\): pass the code"):
        find_account_quota(quotas.client, "amazon.nova-lite-v1:0")


# --- comparing ---------------------------------------------------------------------------------------


def declared(tpm: float, shares=(), **props) -> DeclaredQuota:
    return DeclaredQuota(HAIKU_PROFILE, "us-east-1", tpm, shares=tuple(shares), service_quota_code="L-00000002", **props)


def test_a_plan_above_the_accounts_quota_is_an_error_with_the_value_to_use():
    quotas = ServiceQuotas().applied("L-00000002", 200_000, "Cross-Region InvokeModel tokens per minute for X")
    result = check_quota(declared(400_000, [("nightly", 120_000)]), quotas.client)
    assert result.failed
    first, shares = result.findings
    assert first.level == "error"
    assert ("the plan declares 400,000 TPM but the account's quota L-00000002 (Cross-Region InvokeModel tokens per "
            "minute for X) is 200,000 (applied): every share is 2.00x too large") in first.message
    assert "Set tpm_quota=200,000" in first.message
    assert (shares.level, "120,000 TPM, 60.0% of the account's 200,000") == ("ok", shares.message.split("allocate ")[1])


def test_a_plan_below_the_accounts_quota_warns_that_other_apps_may_use_the_rest():
    quotas = ServiceQuotas().applied("L-00000002", 800_000)
    result = check_quota(declared(400_000), quotas.client)
    assert not result.failed
    assert result.findings[0].level == "warning"
    assert "the account allows 800,000 TPM" in result.findings[0].message
    assert "ModelQuota cannot see them" in result.findings[0].message


def test_shares_that_exceed_the_accounts_quota_fail_even_when_the_declared_quota_matches():
    quotas = ServiceQuotas().applied("L-00000002", 400_000)
    result = check_quota(declared(400_000, [("a", 300_000), ("b", 100_000)], keep_free=0.2), quotas.client)
    assert [f.level for f in result.findings] == ["ok", "error"]
    assert "allocate 400,000 TPM, 100.0% of the account's 400,000 (20% kept free); lower the shares" in result.findings[1].message


def test_a_declared_rpm_is_compared_too():
    quotas = ServiceQuotas().applied("L-00000002", 400_000).defaults().applied("L-00000003", 100)
    result = check_quota(declared(400_000, rpm_quota=200), quotas.client)
    assert result.failed
    assert "declares 200 RPM but the account's quota L-00000003 is 100; set rpm_quota=100" in result.findings[-1].message


# --- the command -------------------------------------------------------------------------------------


def run(argv: list[str], quotas: ServiceQuotas) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    regions: list[str | None] = []

    def factory(region):
        regions.append(region)
        return quotas.client

    status = run_check(parser.parse_args(argv), client_factory=factory, out=out, err=err)
    return status, out.getvalue(), err.getvalue() + (f"\nregions={regions}" if regions else "")


@pytest.fixture(scope="module")
def assembly(tmp_path_factory) -> Path:
    """A synthesized app with one quota and two shares."""
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(app, "Orchestration", env=cdk.Environment(account="111122223333", region="eu-west-1"))
    model = ModelQuota(stack, "Haiku", model=BedrockModel.from_id(HAIKU_PROFILE), tpm_quota=400_000, burndown=5)
    profile = model.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)
    model.share("Digest", profile, calls=3, call_seconds=6)
    model.share("Nightly", profile, fraction=0.3, call_seconds=6)
    app.synth()
    return outdir


def test_load_plans_reads_what_synth_wrote(assembly):
    (plan,) = load_plans(assembly)
    assert (plan.model_id, plan.region, plan.tpm_quota, plan.shares) == (
        HAIKU_PROFILE, "eu-west-1", 400_000, (("Digest", 120_000), ("Nightly", 120_000)))


def test_the_command_checks_each_synthesized_plan_in_its_region(assembly):
    quotas = ServiceQuotas().defaults().applied("L-00000002", 300_000)
    status, out, err = run(["--assembly", str(assembly)], quotas)
    assert status == 1
    assert out.splitlines()[0].startswith("ERROR   us.anthropic.claude-3-5-haiku-20241022-v1:0 in eu-west-1: the plan "
                                          "declares 400,000 TPM but the account's quota L-00000002")
    assert out.splitlines()[1].startswith("OK      ") and "240,000 TPM, 80.0% of the account's 300,000" in out
    assert "regions=['eu-west-1']" in err


def test_the_command_takes_a_quota_on_the_command_line_and_prints_json():
    quotas = ServiceQuotas().applied("L-00000002", 400_000)
    status, out, _ = run(["--model-id", HAIKU_PROFILE, "--tpm", "400000", "--share", "chat=200000",
                          "--share", "nightly=100000", "--quota-code", "L-00000002", "--region", "us-west-2",
                          "--json"], quotas)
    assert status == 0
    (result,) = json.loads(out)
    assert result["account"] == {"code": "L-00000002", "name": "a quota", "value": 400_000, "applied": True}
    assert [f["level"] for f in result["findings"]] == ["ok", "ok"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-id", HAIKU_PROFILE], "--model-id and --tpm go together"),
        (["--tpm", "1000"], "--model-id and --tpm go together"),
        (["--share", "a=1", "--assembly", "."], "--share, --rpm and --quota-code describe a quota given with --model-id"),
        (["--assembly", "/nonexistent/cdk.out"], "/nonexistent/cdk.out is not a cloud assembly directory: run `cdk synth`"),
        (["--model-id", HAIKU_PROFILE, "--tpm", "1000"], "is given without a Region; pass --region"),
    ],
)
def test_input_errors_exit_2_with_one_line(argv, message):
    status, out, err = run(argv, ServiceQuotas())
    assert status == 2 and out == ""
    assert message in err


def test_an_assembly_without_plans_exits_2(tmp_path):
    status, _, err = run(["--assembly", str(tmp_path)], ServiceQuotas())
    assert status == 2 and "holds no quota plan (genai-pacer-quota.*.json)" in err


def test_an_aws_error_names_the_plan_and_exits_2(assembly):
    quotas = ServiceQuotas()
    quotas.stub.add_client_error("list_aws_default_service_quotas", "AccessDeniedException", "not allowed")
    status, _, err = run(["--assembly", str(assembly)], quotas)
    assert status == 2
    assert "us.anthropic.claude-3-5-haiku-20241022-v1:0 in eu-west-1: cannot read Service Quotas: An error occurred " \
           "(AccessDeniedException)" in err


@pytest.mark.parametrize("share", ["nightly", "=5", "a=0", "a=-1", "a=nan", "a=lots"])
def test_a_malformed_share_is_an_argument_error(share, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--model-id", HAIKU_PROFILE, "--tpm", "1", "--share", share])
    assert exit_.value.code == 2
    assert "is not NAME=TPM with a positive TPM" in capsys.readouterr().err


def test_main_runs_with_an_injected_client():
    quotas = ServiceQuotas().applied("L-00000002", 400_000)
    assert main(["--model-id", HAIKU_PROFILE, "--tpm", "400000", "--quota-code", "L-00000002", "--region", "us-east-1"],
                client_factory=lambda region: quotas.client) == 0


def test_the_planner_and_the_plan_agree_on_share_tpm(assembly):
    """The TPM quota-check compares is the share planning derives (fixed width: plan_tpm at the cap)."""
    (plan,) = load_plans(assembly)
    profile = planning.TokenProfile(2_500, 300, 440, 5)
    expected = planning.plan_tpm(profile, requests_per_minute=30, headroom=0, call_seconds=6).required_tpm
    assert dict(plan.shares)["Digest"] == expected


def test_a_plan_from_an_environment_agnostic_stack_needs_a_region(tmp_path):
    plan = {"model_id": HAIKU_PROFILE, "region": "(the stack's deploy-time Region)", "tpm_quota": 400_000, "shares": []}
    (tmp_path / "genai-pacer-quota.AgnosticHaiku1234.json").write_text(json.dumps(plan))
    assert load_plans(tmp_path)[0].region is None
    status, _, err = run(["--assembly", str(tmp_path)], ServiceQuotas())
    assert status == 2 and "is in an environment-agnostic stack; pass --region" in err


def test_a_file_that_is_not_a_plan_is_named(tmp_path):
    (tmp_path / "genai-pacer-quota.Broken.json").write_text('{"model_id": "x"}')
    with pytest.raises(QuotaCheckError, match=r"genai-pacer-quota.Broken.json: not a genai-pacer quota plan"):
        load_plans(tmp_path)


def test_the_genai_pacer_command_runs_quota_check(capsys):
    from genai_pacer.testing.cli import main as cli_main

    assert cli_main(["quota-check", "--assembly", "/nonexistent/cdk.out"]) == 2
    assert "is not a cloud assembly directory: run `cdk synth` first" in capsys.readouterr().err
