"""quota-check against a stubbed Service Quotas client (botocore Stubber): finding the model's quota,
comparing it with the declared plan and its shares, and the command's output and exit status."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import aws_cdk as cdk
import boto3
import pytest
from botocore.stub import Stubber
from genai_pacer import AnswerRouter, AnswerStore, BedrockModel, BoundedMap, ConverseRequest, planning
from genai_pacer.quota import ModelQuota
from genai_pacer.quota_check import (
    DeclaredQuota,
    QuotaCheckError,
    add_arguments,
    check_plan,
    check_quota,
    find_account_quota,
    load_plans,
    main,
)
from genai_pacer.quota_check import run as run_check

HAIKU_PROFILE = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
NOVA_2_LITE = "us.amazon.nova-2-lite-v1:0"


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
                                              "for ' or 'cross-region model inference tokens per minute for ' + <model> "
                                              "match us.meta.llama3-2-1b-instruct-v1:0 (none): pass the code"),
        ("global.anthropic.claude-3-5-haiku-20241022-v1:0",
         "no Bedrock quotas named like 'global cross-region model inference tokens per minute for '"),
    ],
)
def test_an_unmatched_model_asks_for_the_quota_code(model_id, message):
    quotas = ServiceQuotas().defaults()
    with pytest.raises(QuotaCheckError) as error:
        find_account_quota(quotas.client, model_id)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("model_id", "name"),
    [
        # the global profile's quota as the user guide's global cross-Region page names it
        ("global.anthropic.claude-sonnet-4-5-20250929-v1:0",
         "Global cross-Region model inference tokens per minute for Anthropic Claude Sonnet 4.5"),
        # the "model inference" wording newer models are listed with
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0",
         "Cross-region model inference tokens per minute for Anthropic Claude Sonnet 4.5"),
    ],
)
def test_both_wordings_of_a_quota_name_are_matched(model_id, name):
    quotas = ServiceQuotas()
    listed = [quota("L-9", name, 1), quota("L-8", name.replace("tokens per minute", "tokens per day"), 1),
              quota("L-7", name.replace("tokens", "requests"), 1)]
    quotas.stub.add_response("list_aws_default_service_quotas", {"Quotas": listed}, {"ServiceCode": "bedrock"})
    quotas.applied("L-9", 2_000_000)
    assert find_account_quota(quotas.client, model_id).code == "L-9"


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


ENGLISH_RUNTIME_QUOTAS = "https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-runtime.html"


def test_a_declared_rpm_above_the_accounts_is_information_not_a_failure():
    """Bedrock no longer enforces RPM on bedrock-runtime (the English quotas page lists token quotas
    only): a declared RPM above the account's listed RPM quota is reported as legacy, never an error
    (c7d083c, following a machine translation, made it an error again)."""
    quotas = ServiceQuotas().applied("L-00000002", 400_000).defaults().applied(
        "L-00000003", 100, "Cross-Region InvokeModel requests per minute for Anthropic Claude 3.5 Haiku")
    result = check_quota(declared(400_000, rpm_quota=200), quotas.client)
    quotas.done()
    assert not result.failed
    assert [f.level for f in result.findings] == ["ok", "info"]
    message = result.findings[-1].message
    assert ("the plan declares 200 RPM and the account still lists L-00000003 (Cross-Region InvokeModel requests per "
            "minute for Anthropic Claude 3.5 Haiku) at 100; not a failure: RPM is legacy: Bedrock no longer enforces "
            "requests-per-minute quotas on the bedrock-runtime endpoint") in message
    assert f"({ENGLISH_RUNTIME_QUOTAS})" in message and "/ko_kr/" not in message
    assert result.rpm_account is not None and result.rpm_account.value == 100


def test_an_account_that_lists_no_rpm_quota_is_information_too():
    """Once Service Quotas lists no RPM quota for the model (nothing to compare a legacy figure with),
    quota-check says so as information, not as a warning that something could not be checked."""
    quotas = ServiceQuotas().applied("L-00000002", 400_000)
    tokens_only = [q for q in PAGE_ONE + PAGE_TWO if "requests per minute" not in q["QuotaName"]]
    quotas.stub.add_response("list_aws_default_service_quotas", {"Quotas": tokens_only}, {"ServiceCode": "bedrock"})
    result = check_quota(declared(400_000, rpm_quota=200), quotas.client)
    quotas.done()
    assert not result.failed and result.rpm_account is None
    assert result.findings[-1].level == "info"
    assert "the declared legacy RPM was not compared with the account (no Bedrock quotas named like 'cross-region " \
           "invokemodel requests per minute for '" in result.findings[-1].message
    assert "not a failure: RPM is legacy" in result.findings[-1].message


def test_offline_a_declared_rpm_is_reported_as_legacy():
    """The offline check names a declared RPM legacy (c7d083c dropped the finding)."""
    findings = check_plan(declared(400_000, [("a", 100_000)], rpm_quota=200))
    rpm = [f for f in findings if "RPM" in f.message]
    assert [f.level for f in rpm] == ["info"]
    assert ("us.anthropic.claude-3-5-haiku-20241022-v1:0 in us-east-1: the plan declares 200 RPM, which caps its rates "
            "but binds nothing at Bedrock; RPM is legacy") in rpm[0].message
    assert ENGLISH_RUNTIME_QUOTAS in rpm[0].message
    assert not [f for f in check_plan(declared(400_000, [("a", 100_000)])) if "RPM" in f.message]


def test_the_command_exits_0_for_an_rpm_above_the_accounts_and_prints_it_as_legacy():
    """What a CI gate sees: exit 0, the plan line marks the RPM legacy, and INFO lines (not ERROR) say why."""
    quotas = ServiceQuotas().applied("L-00000002", 400_000).defaults().applied("L-00000003", 100)
    status, out, _ = run(["--model-id", HAIKU_PROFILE, "--tpm", "400000", "--rpm", "5000", "--quota-code",
                          "L-00000002", "--region", "us-east-1"], quotas)
    assert status == 0
    lines = out.splitlines()
    assert lines[1] == f"{HAIKU_PROFILE} in us-east-1: 400,000 TPM, 5,000 RPM (legacy)"  # after the heading
    info = [line for line in lines if line.startswith("INFO    ")]
    assert len(info) == 2 and all("RPM is legacy" in line for line in info)
    assert not [line for line in lines if line.startswith(("ERROR", "WARNING"))]


def test_the_rpm_option_is_documented_as_legacy():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert "a legacy requests-per-minute figure, reported for information; bedrock-runtime no longer enforces RPM" \
        in " ".join(parser.format_help().split())


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
    lines = out.splitlines()
    assert lines[0].endswith(": account 111122223333, Region eu-west-1, no stage (a stack of the app itself)")
    assert lines[1].startswith("us.anthropic.claude-3-5-haiku-20241022-v1:0 in eu-west-1: 400,000 TPM")  # then the plan
    errors = [line for line in lines if line.startswith("ERROR   ")]
    assert errors == [line for line in lines if "the plan declares 400,000 TPM but the account's quota L-00000002" in line]
    assert any(line.startswith("OK      ") and "240,000 TPM, 80.0% of the account's 300,000" in line for line in lines)
    assert "SKIPPED" not in out and "regions=['eu-west-1']" in err


def test_the_command_takes_a_quota_on_the_command_line_and_prints_json():
    quotas = ServiceQuotas().applied("L-00000002", 400_000)
    status, out, _ = run(["--model-id", HAIKU_PROFILE, "--tpm", "400000", "--share", "chat=200000",
                          "--share", "nightly=100000", "--quota-code", "L-00000002", "--region", "us-west-2",
                          "--json"], quotas)
    assert status == 0
    report = json.loads(out)
    (result,) = report["results"]
    assert (report["status"], report["errors"], result["service_quotas"]) == (0, [], "compared")
    assert result["account"] == {"code": "L-00000002", "name": "a quota", "value": 400_000, "applied": True}
    # offline: the shares and the day; then the account: the quota and the shares
    assert [f["level"] for f in result["findings"]] == ["ok", "ok", "ok", "ok"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-id", HAIKU_PROFILE], "--model-id and --tpm go together"),
        (["--tpm", "1000"], "--model-id and --tpm go together"),
        (["--share", "a=1", "--assembly", "."], "--share, --rpm, --daily-token-quota, --quota-code and --output-tpm "
                                                 "describe a quota given with --model-id"),
        (["--assembly", "/nonexistent/cdk.out"], "/nonexistent/cdk.out is not a cloud assembly directory: run `cdk synth`"),
        (["--model-id", HAIKU_PROFILE, "--tpm", "lots"], "--tpm 'lots' is not a number > 0"),
        (["--model-id", HAIKU_PROFILE, "--tpm", "1000", "--rpm", "0"], "--rpm '0' is not a number > 0"),
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


@pytest.mark.parametrize("share", ["nightly", "=5", "a=0", "a=-1", "a=nan", "a=lots", "a=5@0", "a=5@25", "a=5@x"])
def test_a_malformed_share_is_an_input_error(share, capsys):
    assert main(["--model-id", HAIKU_PROFILE, "--tpm", "1", "--share", share, "--offline"]) == 2
    assert "is not NAME=TPM with a positive TPM (optionally @HOURS a day, 0..24)" in capsys.readouterr().err


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
    status, out, _ = run(["--assembly", str(tmp_path)], ServiceQuotas())
    assert status == 0  # the offline checks pass; only the comparison needs the Region
    assert "SKIPPED the Service Quotas comparison: us.anthropic.claude-3-5-haiku-20241022-v1:0 is in an " \
           "environment-agnostic stack; pass --region to compare it with Service Quotas" in out


@pytest.fixture(scope="module")
def staged_assembly(tmp_path_factory) -> Path:
    """One quota in a stack of the stage Prod with an account and Region, one in an environment-agnostic stack."""
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = cdk.App(outdir=str(outdir))
    prod = cdk.Stage(app, "Prod", env=cdk.Environment(account="444455556666", region="eu-central-1"))
    for stack in (cdk.Stack(prod, "Orchestration"), cdk.Stack(app, "Agnostic")):
        ModelQuota(stack, "Haiku", model=BedrockModel.from_id(HAIKU_PROFILE), tpm_quota=400_000)
    app.synth()
    return outdir


def test_each_plans_report_starts_with_the_account_region_and_stage_it_checks(staged_assembly):
    status, out, _ = run(["--assembly", str(staged_assembly), "--offline"], ServiceQuotas())
    assert status == 0
    headings = [line for line in out.splitlines() if "genai-pacer-quota." in line]
    assert out.splitlines()[0] == headings[0]  # the first line of the output
    assert [heading.split(": ", 1)[1] for heading in headings] == [
        "account 444455556666, Region eu-central-1, stage Prod",
        "environment-agnostic stack (account and Region set only at deploy time), no stage (a stack of the app "
        "itself)",
    ]
    assert headings[0].startswith(str(staged_assembly / "assembly-Prod" / "genai-pacer-quota."))
    # --region checks an environment-agnostic plan in that Region, and says where the Region came from
    _, out, _ = run(["--assembly", str(staged_assembly), "--offline", "--region", "us-east-1"], ServiceQuotas())
    assert "environment-agnostic stack (account and Region set only at deploy time), Region us-east-1 (--region), " \
           "no stage" in out


def test_json_names_the_account_region_and_stage_of_each_plan(staged_assembly):
    status, out, _ = run(["--assembly", str(staged_assembly), "--offline", "--json"], ServiceQuotas())
    prod, agnostic = (result["environment"] for result in json.loads(out)["results"])
    assert {k: prod[k] for k in ("account", "region", "stage", "environment_agnostic")} == {
        "account": "444455556666", "region": "eu-central-1", "stage": "Prod", "environment_agnostic": False}
    assert {k: agnostic[k] for k in ("account", "region", "stage", "environment_agnostic")} == {
        "account": None, "region": None, "stage": "", "environment_agnostic": True}
    assert prod["plan"].endswith(".json") and status == 0
    # a quota given on the command line: the Region given, the account is the credentials'
    _, out, _ = run(["--model-id", HAIKU_PROFILE, "--tpm", "1000", "--region", "us-west-2", "--offline"], ServiceQuotas())
    assert out.splitlines()[0] == "quota given on the command line: Region us-west-2, the account of the credentials used"


def test_a_file_that_is_not_a_plan_is_named(tmp_path):
    (tmp_path / "genai-pacer-quota.Broken.json").write_text('{"model_id": "x"}')
    with pytest.raises(QuotaCheckError, match=r"genai-pacer-quota.Broken.json: not a genai-pacer quota plan"):
        load_plans(tmp_path)


def test_the_genai_pacer_command_runs_quota_check(capsys):
    from genai_pacer.testing.cli import main as cli_main

    assert cli_main(["quota-check", "--assembly", "/nonexistent/cdk.out"]) == 2
    assert "is not a cloud assembly directory: run `cdk synth` first" in capsys.readouterr().err


# --- offline: no boto3, no credentials -------------------------------------------------------------


OVERDRAWN = ["--model-id", HAIKU_PROFILE, "--tpm", "1000000", "--share", "a=300000", "--share", "b=800000",
             "--region", "us-east-1"]


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """A machine with boto3 but no AWS credentials anywhere botocore looks."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_without_credentials_the_plan_is_printed_checked_and_flagged_110_percent(no_credentials, capsys):
    assert main(OVERDRAWN) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[:4] == [
        "quota given on the command line: Region us-east-1, the account of the credentials used",
        f"{HAIKU_PROFILE} in us-east-1: 1,000,000 TPM",
        "  a: 300,000 TPM (30.0%), 24 h a day",
        "  b: 800,000 TPM (80.0%), 24 h a day",
    ]
    assert (f"ERROR   {HAIKU_PROFILE} in us-east-1: 2 share(s) allocate 1,100,000 TPM, 110.0% of the declared 1,000,000 "
            "TPM; together they overdraw it and Bedrock throttles them") in out
    assert "SKIPPED the Service Quotas comparison: no AWS credentials were found" in out


def test_without_boto3_the_offline_checks_still_run_and_json_says_why(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` now fails as on a machine without it
    assert main([*OVERDRAWN, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (result,) = report["results"]
    assert (report["status"], result["service_quotas"], result["account"]) == (1, "skipped", None)
    assert result["skipped_because"].startswith("boto3 is not installed (pip install boto3")
    assert result["findings"][0]["level"] == "error" and "110.0% of the declared" in result["findings"][0]["message"]
    assert result["plan"][0] == f"{HAIKU_PROFILE} in us-east-1: 1,000,000 TPM"


def test_offline_a_plan_that_fits_exits_0(no_credentials, capsys):
    assert main(["--model-id", HAIKU_PROFILE, "--tpm", "1000000", "--share", "a=300000", "--offline"]) == 0
    out = capsys.readouterr().out
    assert "OK      " in out and "SKIPPED the Service Quotas comparison: --offline" in out


def test_offline_the_day_is_checked_against_the_daily_quota(capsys):
    """300,000 TPM for 6 h and 300,000 for 18 h settle at most 432 million tokens: over a 400 million daily quota."""
    argv = ["--model-id", HAIKU_PROFILE, "--tpm", "1000000", "--share", "night=300000@6", "--share", "day=300000@18",
            "--daily-token-quota", "400000000", "--offline"]
    assert main(argv) == 0  # a day past the quota is a warning, as at synth
    out = capsys.readouterr().out
    assert "WARNING" in out and "settle 432,000,000 tokens, 108.0% of the model's daily quota of 400,000,000" in out
    assert "  night: 300,000 TPM (30.0%), 6 h a day" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--tpm", "1000", "--json"],  # an input error
        ["--assembly", "/nonexistent/cdk.out", "--json"],
        ["--model-id", HAIKU_PROFILE, "--tpm", "1000", "--share", "x", "--json"],
    ],
)
def test_json_is_one_object_on_every_error_path(argv, capsys):
    assert main(argv) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == 2 and report["results"] == [] and len(report["errors"]) == 1


def test_an_argument_error_with_json_is_json_too(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--no-such-flag", "--json"])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["status"] == 2 and "unrecognized arguments: --no-such-flag" in report["errors"][0]


def test_what_synth_found_calling_the_model_without_a_share_is_reported(tmp_path, capsys):
    plan = {"model_id": HAIKU_PROFILE, "region": "us-east-1", "tpm_quota": 400_000, "shares": [],
            "unshared_consumers": [{"path": "Stack/Router", "kind": "AnswerRouter", "share": None, "calls_in_flight": None,
                                    "cap": "its function has no reserved concurrency", "max_tokens": None}],
            "table": ["the plan's table"]}
    (tmp_path / "genai-pacer-quota.StackQuota1234.json").write_text(json.dumps(plan))
    assert main(["--assembly", str(tmp_path), "--offline"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] == "the plan's table"
    assert ("WARNING " + f"{HAIKU_PROFILE} in us-east-1: AnswerRouter Stack/Router may call the model but holds no share "
            "(its function has no reserved concurrency)") in out


def test_a_holder_drawing_beyond_its_share_counts_as_synth_found_it(tmp_path, capsys):
    """The plan file of an app whose shares allocate 94.4% but whose router, holding a share of 2 calls
    by name, is built with reserved_concurrency=5: quota-check reads what synth counted (950,000 TPM)."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Shared", env=cdk.Environment(account="111122223333", region="us-east-1"))
    model = BedrockModel.from_id(HAIKU_PROFILE)
    quota = ModelQuota(stack, "Haiku", model=model, tpm_quota=1_000_000, burndown=5, keep_free=0.1)
    profile = quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)
    BoundedMap(stack, "Nightly", model=model, request=ConverseRequest(prompt="x", max_tokens=440),
               max_concurrency=quota.share("Nightly", profile, fraction=0.75, call_seconds=6))
    quota.share("Router", profile, fraction=0.1, call_seconds=6)
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=model, reserved_concurrency=5)
    with pytest.raises(RuntimeError, match="the shares draw 950,000 TPM"):
        app.synth()  # the plan is written before validation fails
    (plan,) = load_plans(tmp_path)
    assert dict(plan.shares) == {"Nightly": 750_000, "Router": 200_000}
    assert main(["--assembly", str(tmp_path), "--offline"]) == 1
    assert ("2 share(s) allocate 950,000 TPM, 105.6% of the declared 1,000,000 TPM less 10% kept free; together they "
            "overdraw it") in capsys.readouterr().out


def test_a_share_synth_found_no_construct_holding_is_reported(tmp_path, capsys):
    plan = {"model_id": HAIKU_PROFILE, "region": "us-east-1", "tpm_quota": 400_000,
            "shares": [{"name": "Spare", "tpm": 80_000}], "unheld_shares": ["Spare"], "table": ["the plan's table"]}
    (tmp_path / "genai-pacer-quota.StackQuota1234.json").write_text(json.dumps(plan))
    assert main(["--assembly", str(tmp_path), "--offline"]) == 0
    assert (f"WARNING {HAIKU_PROFILE} in us-east-1: share 'Spare' is held by no construct synth found calling the "
            "model; it still counts in the allocation") in capsys.readouterr().out


def test_the_plan_file_carries_the_day_quota_check_reads(assembly):
    (plan,) = load_plans(assembly)
    assert plan.day().daily_quota == 400_000 * 1_440
    assert [name for name, _, _ in plan.loads] == ["Digest", "Nightly"]
    assert plan.day().daily_tokens == pytest.approx(2 * 30 * 4_000 * 1_440)  # 3 calls of 6 s each, all day


def test_the_genai_pacer_command_runs_offline_with_json(capsys):
    from genai_pacer.testing.cli import main as cli_main

    assert cli_main(["quota-check", *OVERDRAWN, "--offline", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == 1 and report["results"][0]["skipped_because"] == "--offline"


@pytest.mark.parametrize(
    "argv",
    [["quota-check", "--no-such-flag", "--json"], ["quota-check", "--json", "--tpm"]],
    ids=["unknown-flag", "missing-value"],
)
def test_the_genai_pacer_command_reports_argument_errors_as_json_too(argv, capsys):
    from genai_pacer.testing.cli import main as cli_main

    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    assert exit_.value.code == 2
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == 2 and report["results"] == [] and report["errors"][0].startswith("genai-pacer quota-check: ")


def test_without_json_an_argument_error_stays_argparses(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--no-such-flag"])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "unrecognized arguments: --no-such-flag" in captured.err


def tiered_plan(tmp_path: Path, *, reservation: tuple[int, int]) -> Path:
    """A synthesized plan whose shares ask for Priority, Flex, no tier and the Reserved tier."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Tiers", env=cdk.Environment(account="111122223333", region="us-east-1"))
    quota = ModelQuota(stack, "Nova", model=BedrockModel.from_id(NOVA_2_LITE), tpm_quota=400_000, require_shares=False,
                       reserved_input_tpm=reservation[0], reserved_output_tpm=reservation[1])
    profile = quota.profile(input_tokens=2_000, output_tokens=300, max_tokens=500)
    quota.share("Chat", profile, call_seconds=6, fraction=0.3, service_tier="priority")
    quota.share("Nightly", profile, call_seconds=6, fraction=0.2, service_tier="flex")
    quota.share("Plain", profile, call_seconds=6, fraction=0.1)
    quota.share("Batch", profile, call_seconds=6, calls=4, service_tier="reserved")
    app.synth()
    return tmp_path


def test_the_tiers_are_printed_with_what_the_reservation_holds_and_what_overflows(tmp_path, capsys):
    """Issue 37.4: which shares share the on-demand quota and which the reservation, and the calls a reserved
    share sends to the on-demand quota when its part of the reservation is too small (a warning: they run
    at default, slower than asked, and are counted in the allocation, so the exit status stays 0)."""
    assert main(["--assembly", str(tiered_plan(tmp_path, reservation=(20_000, 3_000))), "--offline"]) == 0
    lines = capsys.readouterr().out.splitlines()
    where = f"{NOVA_2_LITE} in us-east-1"
    assert f"INFO    {where}: service tiers: 'Chat' priority, 'Nightly' flex, 'Plain' none (default) on the on-demand " \
           "quota; 'Batch' reserved on the Reserved tier reservation" in lines
    (overflow,) = [line for line in lines if "asks for the Reserved tier" in line]
    assert overflow.startswith(f"WARNING {where}: share 'Batch' asks for the Reserved tier, and its part of the "
                               "reservation (20,000 input and 3,000 output TPM in all) holds 23% of its calls at its cap: ")
    assert overflow.endswith("calls a minute overflow to the on-demand quota, served at default (counted in its TPM "
                             "above); raise the reservation or lower the share's calls")
    (plan,) = load_plans(tmp_path)
    assert plan.tiers == (("Chat", "priority"), ("Nightly", "flex"), ("Batch", "reserved"))
    assert plan.reservation == (20_000, 3_000) and [name for name, _, _ in plan.reserved] == ["Batch"]


def test_a_reservation_that_holds_every_call_is_ok_and_json_carries_the_tiers(tmp_path, capsys):
    assert main(["--assembly", str(tiered_plan(tmp_path, reservation=(200_000, 30_000))), "--offline", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert {"level": "ok", "message": f"{NOVA_2_LITE} in us-east-1: share 'Batch' asks for the Reserved tier, and its "
            "part of the reservation (200,000 input and 30,000 output TPM in all) holds all its calls at its cap"} \
        in result["findings"]
    declared = result["declared"]
    assert declared["tiers"] == [["Chat", "priority"], ["Nightly", "flex"], ["Batch", "reserved"]]
    assert declared["reservation"] == [200_000, 30_000] and declared["reserved"] == [["Batch", 1.0, 0.0]]


def test_a_plan_naming_no_tier_prints_no_tier_line(assembly):
    (plan,) = load_plans(assembly)
    assert plan.tiers == () and not [f for f in check_plan(plan) if "tier" in f.message]
