"""`genai-pacer quota-check`: check each declared ModelQuota, offline and against the account.

A ModelQuota plans with the TPM quota its author declared, but the account's real value can be
lower (new accounts get reduced quotas) or shared with other applications the app cannot see.
Before deploying, read the plans `cdk synth` wrote into the cloud assembly (or one quota given on
the command line), print each, and check it:

    genai-pacer quota-check                          # every plan in ./cdk.out
    genai-pacer quota-check --assembly cdk.out --region us-east-1 --profile prod
    genai-pacer quota-check --model-id us.amazon.nova-2-lite-v1:0 --tpm 400000 \\
        --share nightly=120000@6 --share chat=200000 --region us-east-1

Offline (no AWS call, so no boto3 or credentials needed): the shares against the declared quota,
the day against the daily token quotas, the constructs synth found calling the model without a
share, and the shares synth found no construct holding. With boto3, credentials and a Region it also compares the plan with Service Quotas; when
any of those is missing (or with --offline) it says the comparison was skipped and why. Each plan's
report starts with what it checks: the plan file, the account, the Region (the stack's, or --region)
and the stage, or that the stack is environment-agnostic.

The quota is found by its code (ModelQuota(service_quota_code=...) or --quota-code) or else by
name (NAME_PREFIXES); a model id is matched to the name's <model> by its words, and an ambiguous
match lists the candidates instead of guessing. Exit status: 0 when every check passes, 1 when a
plan overdraws its quota or the account's, 2 when a plan could not be checked (bad input, no
matching quota, an AWS error once credentials were found). --json prints one JSON object on every
path: {"status": N, "results": [...], "errors": [...]}.

A bedrock-mantle plan (ModelQuota(input_tpm_quota=..., output_tpm_quota=...), or --tpm with
--output-tpm and shares NAME=INPUT_TPM/OUTPUT_TPM) is checked on both of its quotas, offline and
against the account's "Bedrock Mantle input/output tokens per minute for <model>" (found by name);
it has no RPM and no day to check.

A declared requests-per-minute figure (rpm_quota, --rpm) is legacy: Bedrock no longer enforces RPM
on the bedrock-runtime endpoint (planning.RPM_RULE), so it is reported as an INFO finding, offline
and against the account's listed RPM quota if there is one, and never changes the exit status.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._internal.install import BOTO3_HINT
from . import planning

__all__ = [
    "AccountQuota",
    "DeclaredQuota",
    "Finding",
    "QuotaCheck",
    "PLAN_FILE_PREFIX",
    "QuotaCheckError",
    "add_arguments",
    "check_plan",
    "check_quota",
    "find_account_quota",
    "load_plans",
    "main",
    "run",
]

#: The cloud-assembly file each ModelQuota writes its plan to: <prefix><construct unique id>.json
#: (defined here so the command loads without the CDK).
PLAN_FILE_PREFIX = "genai-pacer-quota."
#: Bedrock's Service Quotas service code, as AWS's own Bedrock quota runbook calls it
#: (`aws service-quotas list-service-quotas --service-code bedrock`:
#: https://github.com/aws/agent-toolkit-for-aws/blob/main/skills/core-skills/amazon-bedrock/references/quota-health.md);
#: its form is checked against botocore's ServiceCode pattern in tests/test_aws_facts_bedrock.py.
#: If it were wrong, every lookup would fail with an AWS error naming the plan (exit 2), never pass.
SERVICE_CODE = "bedrock"
#: Prefixes that make a model id a cross-Region profile when matching quota names (models.PROFILE_REGIONS
#: has the Regions and sources; `ca` is recognized here although its Regions are unsourced, since a
#: prefix only chooses between the on-demand and cross-Region quota names).
GEO_PREFIXES = ("us", "us-gov", "eu", "apac", "ca", "jp", "au")
#: How Service Quotas names a model's quotas, by how the model is called (lower case). AWS pages
#: use two wordings: "On-demand InvokeModel tokens per minute for ${model}" and "Cross-Region
#: InvokeModel tokens per minute for ${model}" (https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-runtime.html),
#: "Cross-region model inference tokens per minute for ${Model}"
#: (https://docs.aws.amazon.com/bedrock/latest/userguide/geographic-cross-region-inference.html) and
#: "Global cross-Region model inference tokens per minute for ${Model}"
#: (https://docs.aws.amazon.com/bedrock/latest/userguide/global-cross-region-inference.html, whose
#: English text was not readable here: its translations name it so). Every kind accepts both
#: wordings, so a wrong one costs nothing: a quota that matches none is reported with the
#: candidates and the code to pass (--quota-code), never guessed.
NAME_PREFIXES = {
    "on-demand": ("on-demand invokemodel {unit} per minute for ", "on-demand model inference {unit} per minute for "),
    "cross-region": ("cross-region invokemodel {unit} per minute for ", "cross-region model inference {unit} per minute for "),
    "global": ("global cross-region model inference {unit} per minute for ",
               "global cross-region invokemodel {unit} per minute for "),
}
#: How Service Quotas names a bedrock-mantle quota's two quotas (lower case; planning.MANTLE_QUOTAS_DOC:
#: "Bedrock Mantle input tokens per minute for ${model}" and "Bedrock Mantle output tokens per minute
#: for ${model}", found under Amazon Bedrock by searching for "Bedrock Mantle").
MANTLE_NAME_PREFIXES = {"input": "bedrock mantle input tokens per minute for ",
                        "output": "bedrock mantle output tokens per minute for "}
#: Why quota-check reports a declared RPM as information, never a failure (planning.RPM_DOC).
RPM_LEGACY = planning.RPM_RULE


class QuotaCheckError(Exception):
    """A plan that cannot be checked: the message says why and what to pass."""


class _Skipped(Exception):
    """The Service Quotas comparison cannot run here (no boto3, no credentials, no Region): not an error."""


@dataclass(frozen=True)
class DeclaredQuota:
    """One ModelQuota as the app declares it (read from the cloud assembly or the command line).

    shares: (name, TPM) of each share (what it draws: more than its TPM where synth found its
    holders' own caps allow more calls in flight than its plan); loads: (name, settled tokens per minute, hours a day) of each
    share's day (empty: each share's TPM all day); unshared: what synth found calling the model
    without a share; unheld: the shares synth found no construct holding (still in the allocation);
    table: the plan as ModelQuota printed it; account and region: the stack's (None: environment-agnostic,
    or not given on the command line); stage: the name of the Stage holding the stack ("": the app itself;
    None: not known). tiers: (name, service tier) of each share that names one; reservation: the model's
    Reserved tier reservation (input, output TPM), apart from tpm_quota; reserved: (name, the fraction of
    its calls the reservation holds at its cap, calls a minute that overflow to the on-demand quota) of
    each reserved share, whose entry in `shares` is that overflow's draw.
    """

    model_id: str
    region: str | None
    tpm_quota: float
    rpm_quota: float | None = None
    keep_free: float = 0.0
    shares: tuple[tuple[str, float], ...] = ()
    service_quota_code: str | None = None
    source: str = "command line"
    daily_token_quota: float | None = None
    cross_model_daily_tokens: float | None = None
    other_models_daily_tokens: float = 0.0
    loads: tuple[tuple[str, float, float], ...] = ()
    unshared: tuple[str, ...] = ()
    unheld: tuple[str, ...] = ()
    table: tuple[str, ...] = ()
    account: str | None = None
    stage: str | None = None
    tiers: tuple[tuple[str, str], ...] = ()
    reservation: tuple[float, float] | None = None
    reserved: tuple[tuple[str, float, float], ...] = ()
    #: A bedrock-mantle quota's output tokens per minute (tpm_quota is then its input tokens per minute),
    #: and (name, output TPM drawn) of each share; None and () on bedrock-runtime.
    output_tpm_quota: float | None = None
    output_shares: tuple[tuple[str, float], ...] = ()

    @property
    def allocated_tpm(self) -> float:
        return sum(tpm for _, tpm in self.shares)

    @property
    def mantle(self) -> bool:
        return self.output_tpm_quota is not None

    def day(self) -> planning.DailyPlan:
        loads = self.loads or tuple((name, tpm, 24.0) for name, tpm in self.shares)
        return planning.plan_daily_tokens(
            [planning.DailyLoad(name, per_minute, hours) for name, per_minute, hours in loads],
            tpm_quota=self.tpm_quota, daily_token_quota=self.daily_token_quota,
            cross_model_daily_tokens=self.cross_model_daily_tokens,
            other_models_daily_tokens=self.other_models_daily_tokens)

    def lines(self) -> list[str]:
        """The plan as text: the table ModelQuota wrote, or the quota and shares given here."""
        if self.table:
            return list(self.table)
        quota = self.tpm_quota
        if self.output_tpm_quota is not None:
            output = dict(self.output_shares)
            return [f"{self.model_id} in {self.region or '(no Region given)'}: bedrock-mantle, {quota:,.0f} input and "
                    f"{self.output_tpm_quota:,.0f} output tokens per minute"] + [
                f"  {name}: {tpm:,.0f} input TPM ({tpm / quota:.1%}), {output[name]:,.0f} output TPM "
                f"({output[name] / self.output_tpm_quota:.1%})" for name, tpm in self.shares]
        lines = [f"{self.model_id} in {self.region or '(no Region given)'}: {quota:,.0f} TPM"
                 + ("" if self.rpm_quota is None else f", {self.rpm_quota:,.0f} RPM (legacy)")]
        hours = {name: h for name, _, h in self.loads}
        lines += [f"  {name}: {tpm:,.0f} TPM ({tpm / quota:.1%}), {hours.get(name, 24.0):g} h a day"
                  for name, tpm in self.shares]
        return lines


@dataclass(frozen=True)
class AccountQuota:
    """A Service Quotas value: applied is False when only the AWS default could be read."""

    code: str
    name: str
    value: float
    applied: bool


@dataclass(frozen=True)
class Finding:
    level: str  # "error" (exit 1), "warning", "info" (legacy figures, service tiers: never a failure) or "ok"
    message: str


@dataclass
class QuotaCheck:
    declared: DeclaredQuota
    account: AccountQuota | None = None
    rpm_account: AccountQuota | None = None
    findings: list[Finding] = field(default_factory=list)
    skipped: str | None = None  # why the Service Quotas comparison did not run
    region: str | None = None  # the Region checked: --region, else the plan's

    def environment(self) -> dict[str, Any]:
        """What the plan was checked for: its plan file, account, Region and stage."""
        declared = self.declared
        return {
            "plan": declared.source,
            "account": declared.account,
            "region": self.region or declared.region,
            "stage": declared.stage,
            "environment_agnostic": declared.source != "command line" and None in (declared.account, declared.region),
        }

    def heading(self) -> str:
        """environment() as one line, the first of the plan's report."""
        env, declared = self.environment(), self.declared
        if declared.source == "command line":
            return (f"quota given on the command line: Region {env['region'] or '(not given)'}, "
                    "the account of the credentials used")
        unset = " and ".join(name for name, value in (("account", declared.account), ("Region", declared.region))
                             if value is None)
        parts = [f"environment-agnostic stack ({unset} set only at deploy time)"] if unset else []
        parts += [f"account {declared.account}"] if declared.account else []
        if env["region"]:
            parts.append(f"Region {env['region']}" + (" (--region)" if env["region"] != declared.region else ""))
        parts.append("stage (not recorded: synthesize again)" if declared.stage is None
                     else f"stage {declared.stage}" if declared.stage else "no stage (a stack of the app itself)")
        return f"{declared.source}: {', '.join(parts)}"

    @property
    def failed(self) -> bool:
        return any(f.level == "error" for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment(),
            "declared": asdict(self.declared),
            "plan": self.declared.lines(),
            "account": self.account and asdict(self.account),
            "rpm_account": self.rpm_account and asdict(self.rpm_account),
            "service_quotas": "skipped" if self.skipped else "compared",
            "skipped_because": self.skipped,
            "findings": [asdict(f) for f in self.findings],
        }


# --- declared quotas -------------------------------------------------------------------------------


def load_plans(assembly: str | Path) -> list[DeclaredQuota]:
    """Every ModelQuota plan `cdk synth` wrote into a cloud assembly (nested stages included)."""
    root = Path(assembly)
    if not root.is_dir():
        raise QuotaCheckError(f"{root} is not a cloud assembly directory: run `cdk synth` first, or pass --assembly "
                              "with the directory it wrote (cdk.out by default)")
    plans = []
    for path in sorted(root.rglob(f"{PLAN_FILE_PREFIX}*.json")):
        try:
            data = json.loads(path.read_text())
            shares = data.get("shares", [])
            plans.append(DeclaredQuota(
                model_id=str(data["model_id"]),
                region=_known(data["region"]),
                tpm_quota=float(data["tpm_quota"]),
                rpm_quota=None if data.get("rpm_quota") is None else float(data["rpm_quota"]),
                keep_free=float(data.get("keep_free") or 0),
                # A share's draw: its TPM, or more where its holders' own caps draw more (older plans: the TPM).
                shares=tuple((str(s["name"]), float(s.get("drawn_tpm", s["tpm"]))) for s in shares),
                service_quota_code=data.get("service_quota_code"),
                source=str(path),
                daily_token_quota=None if data.get("daily_token_quota") is None else float(data["daily_token_quota"]),
                cross_model_daily_tokens=(None if data.get("cross_model_daily_tokens") is None
                                          else float(data["cross_model_daily_tokens"])),
                other_models_daily_tokens=float(data.get("other_models_daily_tokens") or 0),
                loads=tuple((str(s["name"]), float(s["daily_tokens"]) / 60 / float(s["hours_per_day"]),
                             float(s["hours_per_day"])) for s in shares if "daily_tokens" in s),
                unshared=tuple(f"{c['kind']} {c['path']} may call the model but holds no share ({c['cap']})"
                               for c in data.get("unshared_consumers", [])),
                unheld=tuple(str(name) for name in data.get("unheld_shares", [])),
                table=tuple(str(line) for line in data.get("table", [])),
                account=_known(data.get("account")),
                stage=None if data.get("stage") is None else str(data["stage"]),
                tiers=tuple((str(s["name"]), str(s["service_tier"])) for s in shares if s.get("service_tier")),
                reservation=None if data.get("reserved_input_tpm") is None else (
                    float(data["reserved_input_tpm"]), float(data["reserved_output_tpm"])),
                reserved=tuple((str(s["name"]), float(s["reserved_fraction"]), float(s["overflow_requests_per_minute"]))
                               for s in shares if "reserved_fraction" in s),
                output_tpm_quota=None if data.get("output_tpm_quota") is None else float(data["output_tpm_quota"]),
                output_shares=tuple((str(s["name"]), float(s["drawn_output_tpm"])) for s in shares
                                    if data.get("output_tpm_quota") is not None),
            ))
        except (ValueError, KeyError, TypeError, ZeroDivisionError) as error:
            raise QuotaCheckError(f"{path}: not a genai-pacer quota plan ({error!r}); synthesize again") from None
    if not plans:
        raise QuotaCheckError(f"{root} holds no quota plan ({PLAN_FILE_PREFIX}*.json): declare a ModelQuota in the app "
                              "and synthesize, or give the quota on the command line (--model-id, --tpm)")
    return plans


def _known(value: Any) -> str | None:
    """A plan's account or Region, None where the stack leaves it to deploy time ("(the stack's ...)")."""
    return None if value is None or str(value).startswith("(") else str(value)


def check_plan(declared: DeclaredQuota) -> list[Finding]:
    """Every check that needs no AWS call: the shares against the declared quota, the day against the
    daily quotas, the callers holding no share, the shares no caller holds, and the legacy RPM
    (information, never a failure)."""
    where = f"{declared.model_id} in {declared.region or 'its Region'}"
    if declared.output_tpm_quota is not None:
        return _mantle_plan_findings(declared, declared.output_tpm_quota, where)
    findings = []
    if declared.shares:
        findings.append(_allocation(f"{where}: {len(declared.shares)} share(s)", declared.allocated_tpm, "TPM",
                                    declared.tpm_quota, "TPM", declared.keep_free))
    findings += _tier_findings(declared, where)
    day = declared.day()
    findings += [Finding("warning", f"{where}: {warning}") for warning in day.warnings]
    if not day.warnings:
        findings.append(Finding("ok", f"{where}: the day's {day.daily_tokens:,.0f} tokens are {day.fraction:.1%} of the "
                                      f"{day.daily_quota:,.0f} daily token quota"))
    findings += [Finding("warning", f"{where}: {caller}") for caller in declared.unshared]
    findings += [Finding("warning", f"{where}: share {name!r} is held by no construct synth found calling the model; "
                                    "it still counts in the allocation") for name in declared.unheld]
    if declared.rpm_quota is not None:
        findings.append(Finding("info", f"{where}: the plan declares {declared.rpm_quota:,.0f} RPM, which caps its rates "
                                        f"but binds nothing at Bedrock; {RPM_LEGACY}"))
    return findings


def _mantle_plan_findings(declared: DeclaredQuota, output_quota: float, where: str) -> list[Finding]:
    """A bedrock-mantle plan's offline checks: its shares against the input and the output quota (it has
    no RPM and no daily quota, and synth finds no callers of it)."""
    findings = []
    for kind, quota, shares in (("input", declared.tpm_quota, declared.shares),
                                ("output", output_quota, declared.output_shares)):
        if not shares:
            continue
        findings.append(_allocation(f"{where} (bedrock-mantle): {len(shares)} share(s)", sum(tpm for _, tpm in shares),
                                    f"{kind} TPM", quota, f"{kind} tokens per minute", declared.keep_free))
    return findings


def _allocation(shares: str, allocated: float, unit: str, quota: float, quota_unit: str, keep_free: float) -> Finding:
    """What `shares` allocate of one declared quota: an error when together they overdraw it."""
    allocatable = quota * (1 - keep_free)
    over = allocated > allocatable * (1 + 1e-9)
    return Finding(
        "error" if over else "ok",
        f"{shares} allocate {allocated:,.0f} {unit}, {allocated / allocatable:.1%} of the declared {quota:,.0f} {quota_unit}"
        + (f" less {keep_free:.0%} kept free" if keep_free else "")
        + ("; together they overdraw it and Bedrock throttles them: lower the shares or raise the quota" if over else ""))


def _tier_findings(declared: DeclaredQuota, where: str) -> list[Finding]:
    """The shares' service tiers, where any names one: which draw on the on-demand quota (priority, default
    and flex share it, as shares naming no tier do) and what each reserved share's part of the reservation
    holds, with the calls that overflow to the on-demand quota (counted in its share's TPM)."""
    if not declared.tiers:
        return []
    tier_of = dict(declared.tiers)
    on_demand = [f"{name!r} {tier_of.get(name, 'none (default)')}" for name, _ in declared.shares
                 if tier_of.get(name) != "reserved"]
    reserved = [f"{name!r} reserved" for name, tier in declared.tiers if tier == "reserved"]
    findings = [Finding("info", f"{where}: service tiers: " + "; ".join(
        ([f"{', '.join(on_demand)} on the on-demand quota"] if on_demand else [])
        + ([f"{', '.join(reserved)} on the Reserved tier reservation"] if reserved else [])))]
    reservation = ("" if declared.reservation is None else
                   f" ({declared.reservation[0]:,.0f} input and {declared.reservation[1]:,.0f} output TPM in all)")
    for name, held, overflow in declared.reserved:
        if overflow > 0:
            findings.append(Finding(
                "warning", f"{where}: share {name!r} asks for the Reserved tier, and its part of the reservation"
                           f"{reservation} holds {held:.0%} of its calls at its cap: {overflow:,.2f} calls a minute "
                           "overflow to the on-demand quota, served at default (counted in its TPM above); raise the "
                           "reservation or lower the share's calls"))
        else:
            findings.append(Finding("ok", f"{where}: share {name!r} asks for the Reserved tier, and its part of the "
                                          f"reservation{reservation} holds all its calls at its cap"))
    return findings


# --- the account's quota ---------------------------------------------------------------------------


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if w}


def _model_words(model_id: str) -> tuple[str, set[str], str]:
    """(how the model is called, the words naming it, its provider) from a model or profile id."""
    name = model_id.rsplit("/", 1)[-1]  # an ARN's resource name
    prefix, _, rest = name.partition(".")
    kind = "on-demand"
    if prefix == "global":
        kind, name = "global", rest
    elif prefix in GEO_PREFIXES:
        kind, name = "cross-region", rest
    provider, _, model = name.partition(".")
    model = re.sub(r":\d+$", "", model)  # ":0"
    version = re.search(r"-v(\d+)$", model)
    model = re.sub(r"(-\d{8})?(-v\d+)?$", "", model)  # "-20241022-v1"
    words = _words(model)
    if version and int(version.group(1)) > 1:  # "Claude 3.5 Sonnet V2" is another quota than "Claude 3.5 Sonnet"
        words.add(f"v{version.group(1)}")
    return kind, words, provider


def _match(quotas: Iterable[dict[str, Any]], model_id: str, unit: str) -> list[dict[str, Any]]:
    """The quotas whose name is this model's TPM (unit "tokens") or RPM ("requests") quota."""
    kind, words, provider = _model_words(model_id)
    prefixes = [prefix.format(unit=unit) for prefix in NAME_PREFIXES[kind]]
    named = [(q, len(p)) for q in quotas for p in prefixes if str(q.get("QuotaName", "")).lower().startswith(p)]
    covering = [(q, n) for q, n in named if words <= _words(q["QuotaName"][n:])]
    exact = [q for q, n in covering if not (_words(q["QuotaName"][n:]) - words - {provider})]
    return exact or [q for q, _ in covering]


def find_account_quota(client: Any, model_id: str, *, code: str | None = None, unit: str = "tokens") -> AccountQuota:
    """The account's value of a model's TPM (or RPM) quota in the client's Region.

    By code when given; else by name among Bedrock's quotas. The applied value when Service Quotas
    has one, else the AWS default (a quota never changed may have no applied value).
    """
    if code is None:
        defaults = [q for page in client.get_paginator("list_aws_default_service_quotas").paginate(ServiceCode=SERVICE_CODE)
                    for q in page.get("Quotas", [])]
        matches = _match(defaults, model_id, unit)
        kind = _model_words(model_id)[0]
        if len(matches) != 1:
            wanted = " or ".join(repr(prefix.format(unit=unit)) for prefix in NAME_PREFIXES[kind])
            listed = "; ".join(f"{q['QuotaCode']} {q['QuotaName']!r}" for q in matches[:10]) or "none"
            raise QuotaCheckError(
                f"{'no' if not matches else len(matches)} Bedrock quota{'s' if len(matches) != 1 else ''} named like "
                f"{wanted} + <model> match{'es' if len(matches) == 1 else ''} {model_id} ({listed}): pass the code "
                "(ModelQuota(service_quota_code=...) or --quota-code), from `aws service-quotas list-service-quotas "
                "--service-code bedrock`")
        code = str(matches[0]["QuotaCode"])
    try:
        quota = client.get_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=code)["Quota"]
        applied = True
    except client.exceptions.NoSuchResourceException:
        quota = client.get_aws_default_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=code)["Quota"]
        applied = False
    if quota.get("Value") is None:
        reason = (quota.get("ErrorReason") or {}).get("ErrorMessage", "Service Quotas returned no value")
        raise QuotaCheckError(f"quota {code} ({quota.get('QuotaName', '?')}) has no value: {reason}")
    return AccountQuota(code, str(quota.get("QuotaName", code)), float(quota["Value"]), applied)


def find_mantle_quota(client: Any, model_id: str, kind: str) -> AccountQuota:
    """The account's value of a model's bedrock-mantle input or output (`kind`) tokens-per-minute quota,
    found by its name (MANTLE_NAME_PREFIXES) among Bedrock's quotas."""
    prefix = MANTLE_NAME_PREFIXES[kind]
    defaults = [q for page in client.get_paginator("list_aws_default_service_quotas").paginate(ServiceCode=SERVICE_CODE)
                for q in page.get("Quotas", [])]
    _, words, provider = _model_words(model_id)
    named = [q for q in defaults if str(q.get("QuotaName", "")).lower().startswith(prefix)]
    covering = [q for q in named if words <= _words(q["QuotaName"][len(prefix):])]
    matches = [q for q in covering if not (_words(q["QuotaName"][len(prefix):]) - words - {provider})] or covering
    if len(matches) != 1:
        listed = "; ".join(f"{q['QuotaCode']} {q['QuotaName']!r}" for q in (matches or named)[:10]) or "none"
        raise QuotaCheckError(f"{'no' if not matches else len(matches)} Bedrock quota(s) named like {prefix!r} + <model> "
                              f"match {model_id} ({listed}): compare it yourself with `aws service-quotas "
                              "list-service-quotas --service-code bedrock`")
    return find_account_quota(client, model_id, code=str(matches[0]["QuotaCode"]))


def _check_mantle_quota(declared: DeclaredQuota, output_quota: float, client: Any) -> QuotaCheck:
    """A bedrock-mantle plan against the account's input and output quotas."""
    result = QuotaCheck(declared)
    where = f"{declared.model_id} in {declared.region or 'the client Region'} (bedrock-mantle)"
    for kind, quota, shares in (("input", declared.tpm_quota, declared.shares),
                                ("output", output_quota, declared.output_shares)):
        account = find_mantle_quota(client, declared.model_id, kind)
        if kind == "input":
            result.account = account
        source = "applied" if account.applied else "AWS default; no applied value"
        prop = f"{kind}_tpm_quota"
        if quota > account.value:
            result.findings.append(Finding(
                "error", f"{where}: the plan declares {quota:,.0f} {kind} TPM but the account's quota {account.code} "
                         f"({account.name}) is {account.value:,.0f} ({source}): set {prop}={account.value:,.0f} or "
                         "request an increase in Service Quotas first"))
        else:
            result.findings.append(Finding(
                "ok" if quota == account.value else "warning",
                f"{where}: the declared {quota:,.0f} {kind} TPM " + ("is the account's quota" if quota == account.value
                                                                     else f"is below the account's {account.value:,.0f}")
                + f" {account.code} ({source})"))
        allocated = sum(tpm for _, tpm in shares)
        if shares and allocated > account.value * (1 - declared.keep_free) + 1e-6:
            result.findings.append(Finding("error", f"{where}: the shares allocate {allocated:,.0f} {kind} TPM, more than "
                                                    f"the account's {account.value:,.0f}; lower the shares"))
    return result


def check_quota(declared: DeclaredQuota, client: Any) -> QuotaCheck:
    """Compare one declared quota (and its shares) with the account's value; findings say what to do."""
    if declared.output_tpm_quota is not None:
        return _check_mantle_quota(declared, declared.output_tpm_quota, client)
    result = QuotaCheck(declared)
    account = result.account = find_account_quota(client, declared.model_id, code=declared.service_quota_code)
    where = f"{declared.model_id} in {declared.region or 'the client Region'}"
    source = "applied" if account.applied else "AWS default; no applied value"
    if declared.tpm_quota > account.value:
        result.findings.append(Finding(
            "error",
            f"{where}: the plan declares {declared.tpm_quota:,.0f} TPM but the account's quota {account.code} "
            f"({account.name}) is {account.value:,.0f} ({source}): every share is {declared.tpm_quota / account.value:.2f}x "
            f"too large and the consumers will throttle. Set tpm_quota={account.value:,.0f} (the shares shrink with it) "
            "or request an increase in Service Quotas first"))
    elif declared.tpm_quota < account.value:
        result.findings.append(Finding(
            "warning",
            f"{where}: the account allows {account.value:,.0f} TPM ({account.code}, {source}); the plan declares "
            f"{declared.tpm_quota:,.0f}. Fine if other applications in this account and Region use the rest (ModelQuota "
            "cannot see them); otherwise raise tpm_quota to use it"))
    else:
        result.findings.append(Finding("ok", f"{where}: the declared {declared.tpm_quota:,.0f} TPM is the account's "
                                             f"quota {account.code} ({source})"))
    if declared.shares:
        allocated = declared.allocated_tpm
        level = "error" if allocated > account.value * (1 - declared.keep_free) + 1e-6 else "ok"
        result.findings.append(Finding(
            level,
            f"{where}: {len(declared.shares)} share(s) allocate {allocated:,.0f} TPM, {allocated / account.value:.1%} of "
            f"the account's {account.value:,.0f}"
            + (f" ({declared.keep_free:.0%} kept free)" if declared.keep_free else "")
            + ("; lower the shares to fit the account's quota" if level == "error" else "")))
    if declared.rpm_quota is not None:
        try:
            rpm = result.rpm_account = find_account_quota(client, declared.model_id, unit="requests")
        except QuotaCheckError as error:
            # Expected once Service Quotas lists no RPM quota for the model: the figure is legacy anyway.
            result.findings.append(Finding("info", f"{where}: the declared legacy RPM was not compared with the "
                                                   f"account ({error}); not a failure: {RPM_LEGACY}"))
        else:
            if declared.rpm_quota > rpm.value:
                result.findings.append(Finding(
                    "info", f"{where}: the plan declares {declared.rpm_quota:,.0f} RPM and the account still lists "
                            f"{rpm.code} ({rpm.name}) at {rpm.value:,.0f}; not a failure: {RPM_LEGACY}. Set "
                            f"rpm_quota={rpm.value:,.0f} if your own tooling tracks that figure, or None"))
    return result


# --- the command -----------------------------------------------------------------------------------


def _share(text: str) -> tuple[str, float, float]:
    """NAME=TPM or NAME=TPM@HOURS."""
    name, sep, value = text.rpartition("=")
    amount, at, hours_text = value.partition("@")
    try:
        tpm, hours = float(amount), float(hours_text) if at else 24.0
    except ValueError:
        tpm, hours = math.nan, math.nan
    if not sep or not name or not math.isfinite(tpm) or tpm <= 0 or not 0 < hours <= 24:
        raise QuotaCheckError(f"--share {text!r} is not NAME=TPM with a positive TPM (optionally @HOURS a day, 0..24), "
                              "e.g. nightly=120000@6")
    return name, tpm, hours


def _positive(name: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise QuotaCheckError(f"{name} {text!r} is not a number > 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The quota-check options, for `genai-pacer quota-check` or a parser of your own."""
    parser.add_argument("--assembly", default="cdk.out", metavar="DIR",
                        help="the cloud assembly `cdk synth` wrote, searched for every ModelQuota plan (default: cdk.out)")
    parser.add_argument("--region", help="the Region whose Service Quotas are read (default: each plan's stack Region)")
    parser.add_argument("--profile", help="the AWS profile to read Service Quotas with (default: boto3's default chain)")
    parser.add_argument("--offline", action="store_true",
                        help="run only the checks that need no AWS call (default: also compare with Service Quotas "
                             "when boto3, credentials and a Region are there)")
    given = parser.add_argument_group("a quota given here instead of a synthesized plan")
    given.add_argument("--model-id", help="the model or inference profile id (default: none; read the assembly)")
    given.add_argument("--tpm", metavar="TPM", help="the declared tokens-per-minute quota (default: none; required "
                                                    "with --model-id)")
    given.add_argument("--rpm", metavar="RPM", help="a legacy requests-per-minute figure, reported for information; "
                                                    "bedrock-runtime no longer enforces RPM (default: none)")
    given.add_argument("--share", action="append", default=[], metavar="NAME=TPM[@HOURS]",
                       help="a consumer's share and the hours a day it runs, repeated for each "
                            "(default: none; hours default to 24)")
    given.add_argument("--daily-token-quota", metavar="TOKENS",
                       help="the model's daily token quota (default: TPM x 1,440, the AWS default)")
    given.add_argument("--quota-code", help="the Service Quotas code (L-...) instead of matching by name "
                                            "(default: match the model's quota by name)")
    given.add_argument("--output-tpm", metavar="TPM",
                       help="a bedrock-mantle quota's output tokens per minute: --tpm is then its input tokens per "
                            "minute and each --share is NAME=INPUT_TPM/OUTPUT_TPM (default: none, a bedrock-runtime "
                            "quota)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object, {"status", "results", "errors"}, on every path (default: text)')
    report_argument_errors_as_json(parser)


def report_argument_errors_as_json(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> None:
    """With --json among the arguments the parser reads, an argument error is the JSON object too
    (status 2), also for arguments it does not know. add_arguments installs this on its parser, so
    `genai-pacer quota-check ... --json` behaves as `python -m genai_pacer.quota_check ... --json`.
    `argv`: the arguments, when known before parsing; otherwise those each parse is given."""
    seen: list[str] = list(argv or [])
    parse_known_args = parser.parse_known_args
    fail = parser.error

    def parse(args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None) -> Any:
        seen[:] = list(sys.argv[1:] if args is None else args)
        parsed, extras = parse_known_args(args, namespace)
        if extras:  # a subcommand's parser reports its own unknown arguments, as JSON when asked
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(message: str) -> Any:
        if "--json" not in seen:
            return fail(message)
        print(json.dumps({"status": 2, "results": [], "errors": [f"{parser.prog}: {message}"]}, indent=2))
        return parser.exit(2, f"{parser.prog}: error: {message}\n")

    parser.parse_known_args = parse  # type: ignore[method-assign, assignment]
    parser.error = error  # type: ignore[method-assign]


def _service_quotas(region: str | None, profile: str | None) -> Any:
    """A Service Quotas client, or _Skipped when this machine cannot read Service Quotas."""
    try:
        import boto3
        from botocore.exceptions import ProfileNotFound
    except ModuleNotFoundError:
        raise _Skipped(f"boto3 is not installed ({BOTO3_HINT})") from None
    try:
        session = boto3.Session(profile_name=profile, region_name=region)
    except ProfileNotFound as error:
        raise QuotaCheckError(f"--profile: {error}") from None
    if session.get_credentials() is None:
        raise _Skipped("no AWS credentials were found (environment, shared files, SSO, instance role); configure "
                       "them or pass --offline")
    return session.client("service-quotas")


def _declared(args: argparse.Namespace) -> list[DeclaredQuota]:
    if args.model_id or args.tpm is not None:
        if not (args.model_id and args.tpm is not None):
            raise QuotaCheckError("--model-id and --tpm go together: the quota to check and its declared TPM")
        if args.output_tpm is not None:
            return [_declared_mantle(args)]
        shares = [_share(text) for text in args.share]
        return [DeclaredQuota(
            args.model_id, args.region, _positive("--tpm", args.tpm) or 0.0, _positive("--rpm", args.rpm), 0.0,
            tuple((name, tpm) for name, tpm, _ in shares), args.quota_code,
            daily_token_quota=_positive("--daily-token-quota", args.daily_token_quota),
            loads=tuple(shares))]
    if args.share or args.quota_code or args.rpm is not None or args.daily_token_quota is not None \
            or args.output_tpm is not None:
        raise QuotaCheckError("--share, --rpm, --daily-token-quota, --quota-code and --output-tpm describe a quota given "
                              "with --model-id and --tpm")
    return load_plans(args.assembly)


def _declared_mantle(args: argparse.Namespace) -> DeclaredQuota:
    """A bedrock-mantle quota given on the command line: --tpm its input, --output-tpm its output tokens
    per minute, each --share NAME=INPUT_TPM/OUTPUT_TPM; what bedrock-runtime alone has is refused."""
    extra = [flag for flag, value in (("--rpm", args.rpm), ("--daily-token-quota", args.daily_token_quota),
                                      ("--quota-code", args.quota_code)) if value is not None]
    if extra:
        raise QuotaCheckError(f"{', '.join(extra)} with --output-tpm: a bedrock-mantle quota has no RPM and no daily "
                              "quota, and its two quotas are found by name ('Bedrock Mantle input/output tokens per "
                              f"minute for <model>', {planning.MANTLE_QUOTAS_DOC})")
    shares = []
    for text in args.share:
        name, sep, value = text.rpartition("=")
        parts = value.split("/")
        try:
            amounts = [float(part) for part in parts] if len(parts) == 2 else []
        except ValueError:
            amounts = []
        if not sep or not name or len(amounts) != 2 or not all(math.isfinite(a) and a > 0 for a in amounts):
            raise QuotaCheckError(f"--share {text!r} with --output-tpm is not NAME=INPUT_TPM/OUTPUT_TPM with positive "
                                  "figures, e.g. nightly=500000/30000")
        shares.append((name, amounts[0], amounts[1]))
    return DeclaredQuota(args.model_id, args.region, _positive("--tpm", args.tpm) or 0.0,
                         shares=tuple((name, tpm) for name, tpm, _ in shares),
                         output_tpm_quota=_positive("--output-tpm", args.output_tpm),
                         output_shares=tuple((name, out) for name, _, out in shares))


def run(args: argparse.Namespace, *, client_factory: Callable[[str | None], Any] | None = None,
        out: Any = None, err: Any = None) -> int:
    """Print and check every plan; 0 all pass, 1 one overdraws a quota, 2 one could not be checked."""
    out, err = out or sys.stdout, err or sys.stderr
    prog = "genai-pacer quota-check"
    factory = client_factory or (lambda region: _service_quotas(region, args.profile))
    errors: list[str] = []
    results: list[QuotaCheck] = []

    def fail(message: str) -> None:
        errors.append(f"{prog}: {message}")
        print(f"{prog}: {message}", file=err)

    try:
        plans = _declared(args)
    except QuotaCheckError as error:
        plans = []
        fail(str(error))
    for plan in plans:
        region = args.region or plan.region
        result = QuotaCheck(plan, findings=check_plan(plan), region=region)
        if args.offline:
            result.skipped = "--offline"
        elif region is None:
            where = "is given without a Region" if plan.source == "command line" else "is in an environment-agnostic stack"
            result.skipped = f"{plan.model_id} {where}; pass --region to compare it with Service Quotas"
        else:
            try:
                compared = check_quota(plan, factory(region))
            except _Skipped as reason:
                result.skipped = str(reason)
            except QuotaCheckError as error:
                fail(f"{plan.source}: {plan.model_id} in {region}: {error}")
            except Exception as error:  # access denied, throttling, an endpoint: say which plan and why
                fail(f"{plan.source}: {plan.model_id} in {region}: cannot read Service Quotas: {error}")
            else:
                result.account, result.rpm_account = compared.account, compared.rpm_account
                result.findings += compared.findings
        results.append(result)
        if not args.json:
            print(result.heading(), file=out)
            for line in plan.lines():
                print(line, file=out)
            for finding in result.findings:
                print(f"{finding.level.upper():7} {finding.message}", file=out)
            if result.skipped:
                print(f"SKIPPED the Service Quotas comparison: {result.skipped}", file=out)
    status = 2 if errors else 1 if any(r.failed for r in results) else 0
    if args.json:
        print(json.dumps({"status": status, "results": [r.as_dict() for r in results], "errors": errors}, indent=2),
              file=out)
    return status


def register(commands: Any) -> None:
    """Add `quota-check` to the genai-pacer command line's subparsers (`commands`; genai_pacer.cli loads
    this through the entry point `quota` of the group genai_pacer.commands)."""
    check = commands.add_parser("quota-check", help="compare declared ModelQuota plans with the account's quotas")
    add_arguments(check)
    check.set_defaults(run=run)


def main(argv: Sequence[str] | None = None, *, client_factory: Callable[[str | None], Any] | None = None) -> int:
    """`python -m genai_pacer.quota_check`; the genai-pacer CLI wires the same options as `quota-check`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="genai-pacer quota-check", description=(__doc__ or "").split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv), client_factory=client_factory)


if __name__ == "__main__":
    sys.exit(main())
