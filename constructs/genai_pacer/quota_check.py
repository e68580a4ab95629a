"""`genai-pacer quota-check`: compare each declared ModelQuota with the account's Service Quotas value.

A ModelQuota plans with the TPM quota its author declared, but the account's real value can be
lower (new accounts get reduced quotas) or shared with other applications the app cannot see.
Before deploying, read the plans `cdk synth` wrote into the cloud assembly (or one quota given on
the command line) and compare each with Service Quotas in its Region:

    genai-pacer quota-check                          # every plan in ./cdk.out
    genai-pacer quota-check --assembly cdk.out --region us-east-1 --profile prod
    genai-pacer quota-check --model-id us.anthropic.claude-3-5-haiku-20241022-v1:0 --tpm 400000 \\
        --share nightly=120000 --share chat=200000 --region us-east-1

The quota is found by its code (ModelQuota(service_quota_code=...) or --quota-code) or else by
name: Bedrock names them "On-demand InvokeModel tokens per minute for <model>" and "Cross-Region
InvokeModel tokens per minute for <model>"; a model id is matched to <model> by its words, and an
ambiguous match lists the candidates instead of guessing. Exit status: 0 when every plan fits the
account, 1 when a declared quota or its shares exceed the account's value, 2 when a plan could not
be checked (bad input, no matching quota, an AWS error).
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

from ._install import BOTO3_HINT

__all__ = [
    "AccountQuota",
    "DeclaredQuota",
    "Finding",
    "QuotaCheck",
    "PLAN_FILE_PREFIX",
    "QuotaCheckError",
    "add_arguments",
    "check_quota",
    "find_account_quota",
    "load_plans",
    "main",
    "run",
]

#: The cloud-assembly file each ModelQuota writes its plan to: <prefix><construct unique id>.json
#: (defined here so the command loads without the CDK).
PLAN_FILE_PREFIX = "genai-pacer-quota."
SERVICE_CODE = "bedrock"
GEO_PREFIXES = ("us", "us-gov", "eu", "apac", "ca", "jp", "au")
#: How Bedrock names a model's quotas, by how the model is called (the global profile's wording is
#: unconfirmed: a quota that does not match is reported with the candidates, never guessed).
NAME_PREFIXES = {
    "on-demand": "on-demand invokemodel {unit} per minute for ",
    "cross-region": "cross-region invokemodel {unit} per minute for ",
    "global": "global cross-region invokemodel {unit} per minute for ",
}


class QuotaCheckError(Exception):
    """A plan that cannot be checked: the message says why and what to pass."""


@dataclass(frozen=True)
class DeclaredQuota:
    """One ModelQuota as the app declares it (read from the cloud assembly or the command line)."""

    model_id: str
    region: str | None
    tpm_quota: float
    rpm_quota: float | None = None
    keep_free: float = 0.0
    shares: tuple[tuple[str, float], ...] = ()
    service_quota_code: str | None = None
    source: str = "command line"

    @property
    def allocated_tpm(self) -> float:
        return sum(tpm for _, tpm in self.shares)


@dataclass(frozen=True)
class AccountQuota:
    """A Service Quotas value: applied is False when only the AWS default could be read."""

    code: str
    name: str
    value: float
    applied: bool


@dataclass(frozen=True)
class Finding:
    level: str  # "error", "warning" or "ok"
    message: str


@dataclass
class QuotaCheck:
    declared: DeclaredQuota
    account: AccountQuota | None = None
    rpm_account: AccountQuota | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(f.level == "error" for f in self.findings)


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
            plans.append(DeclaredQuota(
                model_id=str(data["model_id"]),
                region=None if str(data["region"]).startswith("(") else str(data["region"]),
                tpm_quota=float(data["tpm_quota"]),
                rpm_quota=None if data.get("rpm_quota") is None else float(data["rpm_quota"]),
                keep_free=float(data.get("keep_free") or 0),
                shares=tuple((str(s["name"]), float(s["tpm"])) for s in data.get("shares", [])),
                service_quota_code=data.get("service_quota_code"),
                source=str(path),
            ))
        except (ValueError, KeyError, TypeError) as error:
            raise QuotaCheckError(f"{path}: not a genai-pacer quota plan ({error!r}); synthesize again") from None
    if not plans:
        raise QuotaCheckError(f"{root} holds no quota plan ({PLAN_FILE_PREFIX}*.json): declare a ModelQuota in the app "
                              "and synthesize, or give the quota on the command line (--model-id, --tpm)")
    return plans


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
    prefix = NAME_PREFIXES[kind].format(unit=unit)
    named = [q for q in quotas if str(q.get("QuotaName", "")).lower().startswith(prefix)]
    covering = [q for q in named if words <= _words(q["QuotaName"][len(prefix):])]
    exact = [q for q in covering if not (_words(q["QuotaName"][len(prefix):]) - words - {provider})]
    return exact or covering


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
            wanted = NAME_PREFIXES[kind].format(unit=unit)
            listed = "; ".join(f"{q['QuotaCode']} {q['QuotaName']!r}" for q in matches[:10]) or "none"
            raise QuotaCheckError(
                f"{'no' if not matches else len(matches)} Bedrock quota{'s' if len(matches) != 1 else ''} named like "
                f"{wanted!r}<model> match{'es' if len(matches) == 1 else ''} {model_id} ({listed}): pass the code "
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


def check_quota(declared: DeclaredQuota, client: Any) -> QuotaCheck:
    """Compare one declared quota (and its shares) with the account's value; findings say what to do."""
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
            result.findings.append(Finding("warning", f"{where}: the declared RPM quota could not be checked: {error}"))
        else:
            if declared.rpm_quota > rpm.value:
                result.findings.append(Finding(
                    "error", f"{where}: the plan declares {declared.rpm_quota:,.0f} RPM but the account's quota "
                             f"{rpm.code} is {rpm.value:,.0f}; set rpm_quota={rpm.value:,.0f}"))
    return result


# --- the command -----------------------------------------------------------------------------------


def _share(text: str) -> tuple[str, float]:
    name, sep, value = text.rpartition("=")
    try:
        tpm = float(value)
    except ValueError:
        tpm = math.nan
    if not sep or not name or not math.isfinite(tpm) or tpm <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=TPM with a positive TPM, e.g. nightly=120000")
    return name, tpm


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The quota-check options, for `genai-pacer quota-check` or a parser of your own."""
    parser.add_argument("--assembly", default="cdk.out", help="the cloud assembly `cdk synth` wrote (default cdk.out)")
    parser.add_argument("--region", help="the Region to read (default: each plan's stack Region)")
    parser.add_argument("--profile", help="the AWS profile to read Service Quotas with")
    given = parser.add_argument_group("a quota given here instead of a synthesized plan")
    given.add_argument("--model-id", help="the model or inference profile id")
    given.add_argument("--tpm", type=_positive, help="the declared tokens-per-minute quota")
    given.add_argument("--rpm", type=_positive, help="the declared requests-per-minute quota")
    given.add_argument("--share", type=_share, action="append", default=[], metavar="NAME=TPM",
                       help="a consumer's share (repeat for each)")
    given.add_argument("--quota-code", help="the Service Quotas code (L-...) instead of matching by name")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _service_quotas(region: str | None, profile: str | None) -> Any:
    try:
        import boto3
    except ModuleNotFoundError as error:
        raise ImportError(f"genai-pacer quota-check reads Service Quotas with boto3: {BOTO3_HINT}") from error
    return boto3.Session(profile_name=profile, region_name=region).client("service-quotas")


def run(args: argparse.Namespace, *, client_factory: Callable[[str | None], Any] | None = None,
        out: Any = None, err: Any = None) -> int:
    """Check every plan; print the findings; 0 all fit, 1 one exceeds the account, 2 one could not be checked."""
    out, err = out or sys.stdout, err or sys.stderr
    prog = "genai-pacer quota-check"
    factory = client_factory or (lambda region: _service_quotas(region, args.profile))
    try:
        if args.model_id or args.tpm is not None:
            if not (args.model_id and args.tpm is not None):
                raise QuotaCheckError("--model-id and --tpm go together: the quota to check and its declared TPM")
            plans = [DeclaredQuota(args.model_id, args.region, args.tpm, args.rpm, 0.0, tuple(args.share),
                                   args.quota_code)]
        else:
            if args.share or args.quota_code or args.rpm is not None:
                raise QuotaCheckError("--share, --rpm and --quota-code describe a quota given with --model-id and --tpm")
            plans = load_plans(args.assembly)
    except QuotaCheckError as error:
        print(f"{prog}: {error}", file=err)
        return 2
    results, status = [], 0
    for plan in plans:
        region = args.region or plan.region
        if region is None:
            where = "is given without a Region" if plan.source == "command line" else "is in an environment-agnostic stack"
            print(f"{prog}: {plan.source}: {plan.model_id} {where}; pass --region", file=err)
            status = 2
            continue
        try:
            result = check_quota(plan, factory(region))
        except QuotaCheckError as error:
            print(f"{prog}: {plan.source}: {plan.model_id} in {region}: {error}", file=err)
            status = 2
            continue
        except ImportError as error:
            print(f"{prog}: {error}", file=err)
            return 2
        except Exception as error:  # credentials, access denied, throttling: say which plan and why
            print(f"{prog}: {plan.source}: {plan.model_id} in {region}: cannot read Service Quotas: {error}", file=err)
            status = 2
            continue
        results.append(result)
        if result.failed and status == 0:
            status = 1
        if not args.json:
            for finding in result.findings:
                print(f"{finding.level.upper():7} {finding.message}", file=out)
    if args.json:
        print(json.dumps([{"declared": asdict(r.declared), "account": r.account and asdict(r.account),
                           "findings": [asdict(f) for f in r.findings]} for r in results], indent=2), file=out)
    return status


def main(argv: Sequence[str] | None = None, *, client_factory: Callable[[str | None], Any] | None = None) -> int:
    """`python -m genai_pacer.quota_check`; the genai-pacer CLI wires the same options as `quota-check`."""
    parser = argparse.ArgumentParser(prog="genai-pacer quota-check", description=(__doc__ or "").split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv), client_factory=client_factory)


if __name__ == "__main__":
    sys.exit(main())
