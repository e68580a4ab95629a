"""`make integ`: deploy every integration test case, run its assertions, destroy it, write a report.

It follows integ-runner's protocol with the pinned CDK CLI, because @aws-cdk/integ-runner 2.197.10
(the newest on npm) cannot read the schema-55 assemblies aws-cdk-lib 2.275 writes. Per test case of
each app's integ.json: deploy its stacks; deploy its assertion stack without rollback and with an
outputs file; read each `AssertionResults*` output ({"status": "success" | "fail", "message"});
destroy everything, also after a failure. The apps are synthesized in this process with the
snapshots' context, so what is deployed is what the committed snapshot shows.

Before anything is synthesized it checks, with short timeouts and no retries, that credentials, a
Region, a CDK bootstrap and access to the test model exist, and stops with one line saying which
is missing. Usage: `make integ` or `python -m integ.run [-c key=value ...] [integ_<app>.py ...]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

INTEG_DIR = Path(__file__).resolve().parent
ROOT = INTEG_DIR.parent
RESULTS = INTEG_DIR / "results"
OUT = INTEG_DIR / ".out"
#: botocore's instance-metadata lookup waits 1 s and tries once, so a machine without credentials
#: fails in about a second instead of hanging; every AWS call below has the same short budget.
os.environ.setdefault("AWS_METADATA_SERVICE_TIMEOUT", "1")
os.environ.setdefault("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "1")
#: _support.INTEG_CONTEXT_DEFAULTS' values, repeated so the credentials check runs before aws_cdk loads
#: (tests/test_integ.py checks that they agree).
DEFAULT_MODEL_ID = "us.amazon.nova-micro-v1:0"
DEFAULT_THROTTLE_ERROR = "BedrockRuntime.ThrottlingException"


class PreflightError(RuntimeError):
    """What is missing before a deploy can start, and how to provide it."""


def _config() -> Any:
    from botocore.config import Config

    return Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1, "mode": "standard"})


def preflight(model_id: str) -> dict[str, str]:
    """Account, Region and model access, or a PreflightError naming what is missing."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    # AWS_REGION is what the CDK CLI reads first; botocore reads AWS_DEFAULT_REGION and profiles.
    session = boto3.Session(region_name=os.environ.get("AWS_REGION") or None)
    region = session.region_name
    if not region:
        raise PreflightError(
            "no AWS Region: set AWS_REGION (e.g. AWS_REGION=us-east-1 make integ) or a region in your AWS profile"
        )
    if session.get_credentials() is None:
        raise PreflightError(
            "no AWS credentials found (environment, shared files, SSO or instance role): `make integ` deploys "
            "real stacks; configure credentials (aws configure / aws sso login / AWS_PROFILE=...) and run it again. "
            "Offline, `make test` verifies the integration snapshots without credentials."
        )
    config = _config()
    os.environ.setdefault("AWS_REGION", region)  # the CLI deploys where the checks ran
    try:
        identity = session.client("sts", config=config).get_caller_identity()
    except (BotoCoreError, ClientError) as error:
        raise PreflightError(f"the AWS credentials do not work in {region}: {error}") from None
    account = identity["Account"]
    try:
        session.client("ssm", config=config).get_parameter(Name="/cdk-bootstrap/hnb659fds/version")
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ParameterNotFound":
            raise PreflightError(
                f"aws://{account}/{region} is not CDK-bootstrapped: run `npx cdk bootstrap aws://{account}/{region}`"
            ) from None
        raise PreflightError(f"cannot read the CDK bootstrap version in {region}: {error}") from None
    except BotoCoreError as error:
        raise PreflightError(f"cannot reach SSM in {region}: {error}") from None
    try:  # one token of the test model: access granted and the id valid in this Region
        session.client("bedrock-runtime", config=config).converse(
            modelId=model_id,
            messages=[{"role": "user", "content": [{"text": "ok"}]}],
            inferenceConfig={"maxTokens": 1},
        )
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code != "ThrottlingException":
            raise PreflightError(
                f"cannot call {model_id} in {region} ({code}): enable access to the model in the Bedrock console "
                "(Model access) or pass another with -c integ_model_id=..."
            ) from None
    except BotoCoreError as error:
        raise PreflightError(f"cannot reach Bedrock in {region}: {error}") from None
    return {"account": account, "region": region}


#: The pinned CLI (package.json), which reads schema 55; `cdk` on PATH otherwise.
CDK = str(ROOT / "node_modules" / ".bin" / "cdk") if (ROOT / "node_modules" / ".bin" / "cdk").exists() else "cdk"


def cdk(*args: str, log: Path) -> tuple[int, float]:
    """Run the pinned CDK CLI; its output goes to `log`. Returns (exit code, seconds)."""
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"\n$ cdk {' '.join(args)}\n")
        out.flush()
        code = subprocess.run(
            [CDK, *args, "--no-notices", *(["--require-approval", "never"] if args[0] == "deploy" else [])],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False,
        ).returncode
    return code, round(time.monotonic() - started, 1)


def assertion_results(outputs: Path, stack_name: str) -> dict[str, dict[str, Any]]:
    if not outputs.exists():
        return {}
    values = json.loads(outputs.read_text()).get(stack_name, {})
    return {
        key: json.loads(value.replace("\n", "\\n"))
        for key, value in values.items()
        if key.startswith("AssertionResults")
    }


def throttle_errors(stack_name: str) -> list[str]:
    """The error names the throttle burst's executions reported, read before the stack is destroyed."""
    import boto3

    config = _config()
    cfn = boto3.client("cloudformation", config=config)
    sfn = boto3.client("stepfunctions", config=config)
    names: set[str] = set()
    for resource in cfn.describe_stack_resources(StackName=stack_name)["StackResources"]:
        if resource["ResourceType"] != "AWS::StepFunctions::StateMachine":
            continue
        for execution in sfn.list_executions(stateMachineArn=resource["PhysicalResourceId"])["executions"]:
            output = sfn.describe_execution(executionArn=execution["executionArn"]).get("output")
            for outcome in json.loads(output or "[]"):
                if isinstance(outcome, dict) and outcome.get("error") not in (None, "none"):
                    names.add(str(outcome["error"]))
    return sorted(names)


def run_case(
    name: str, case: dict[str, Any], assembly: Path, log: Path, expected_throttle: str = ""
) -> dict[str, Any]:
    result: dict[str, Any] = {"test_case": name, "deploy_seconds": {}, "assertions": {}}
    stacks = list(case["stacks"])
    assertion_stack = case.get("assertionStack")
    everything = [*stacks, *([assertion_stack] if assertion_stack else [])]
    try:
        code, seconds = cdk("deploy", "--app", str(assembly), *stacks, log=log)
        result["deploy_seconds"].update({stack: seconds for stack in stacks} if len(stacks) == 1 else {"+".join(stacks): seconds})
        if code != 0:
            result["error"] = f"deploy of {', '.join(stacks)} failed (see {log.relative_to(ROOT)})"
            return result
        if assertion_stack:
            outputs = assembly / f"{name.replace('/', '-')}-outputs.json"
            code, seconds = cdk(
                "deploy", "--app", str(assembly), assertion_stack, "--no-rollback", "--outputs-file", str(outputs), log=log
            )
            result["deploy_seconds"][assertion_stack] = seconds
            result["assertions"] = assertion_results(outputs, case["assertionStackName"])
            if code != 0 and not result["assertions"]:
                result["error"] = f"assertion stack {assertion_stack} failed (see {log.relative_to(ROOT)})"
        if name.startswith("ThrottleProvocation"):
            # The assertion can only expect SUCCEEDED (the execution's output is far above the 4,096
            # bytes a custom resource returns); the expected error name is checked here.
            result["throttle_expected"] = expected_throttle
            try:
                result["throttle_errors"] = throttle_errors(stacks[0])
            except Exception as error:  # the report says why the names are missing; destroy still runs
                result["throttle_errors_error"] = f"{type(error).__name__}: {error}"
        return result
    finally:
        code, seconds = cdk("destroy", "--app", str(assembly), "--force", *everything, log=log)
        result["destroy"] = {"ok": code == 0, "seconds": seconds}


def passed(result: dict[str, Any]) -> bool:
    """Every assertion succeeded, the stacks were destroyed, and a throttle test case saw the expected name."""
    throttle_ok = "throttle_expected" not in result or result["throttle_expected"] in result.get("throttle_errors", [])
    return (
        "error" not in result
        and bool(result["assertions"])
        and all(a.get("status") == "success" for a in result["assertions"].values())
        and result.get("destroy", {}).get("ok", False)
        and throttle_ok
    )


def report(environment: dict[str, str], model_id: str, results: list[dict[str, Any]], notes: list[str]) -> str:
    lines = [
        f"# make integ report ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"Account {environment['account']}, Region {environment['region']}, model {model_id}.",
        "",
        "| test case | result | deploy seconds (stack: s) | assertions passed | destroyed |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        assertions = r["assertions"]
        ok = sum(1 for a in assertions.values() if a.get("status") == "success")
        deploys = ", ".join(f"{stack}: {s}" for stack, s in r["deploy_seconds"].items())
        destroy = r.get("destroy", {})
        lines.append(
            f"| {r['test_case']} | {'PASS' if passed(r) else 'FAIL'} | {deploys} | {ok}/{len(assertions)} | "
            f"{'yes' if destroy.get('ok') else 'NO: delete the stacks by hand'} ({destroy.get('seconds', '-')} s) |"
        )
    lines.append("")
    for r in results:
        passed_ids = [key for key, value in r["assertions"].items() if value.get("status") == "success"]
        if passed_ids:
            lines.append(f"- {r['test_case']} passed: {', '.join(passed_ids)}")
        for key, value in r["assertions"].items():
            if value.get("status") != "success":
                lines.append(f"- {r['test_case']} {key} failed: {value.get('message', '')[:2000]}")
        if "error" in r:
            lines.append(f"- {r['test_case']}: {r['error']}")
        if "throttle_errors" in r:
            names = ", ".join(r["throttle_errors"]) or "none (no call was throttled: raise integ_throttle_requests)"
            lines.append(f"- Throttle error name Step Functions reported: {names}")
            expected = r.get("throttle_expected")
            if expected and expected not in r["throttle_errors"]:
                lines.append(
                    f"- {r['test_case']} failed: expected the throttle error name {expected} among those reported "
                    "(set -c integ_throttle_error=<the name reported> if Step Functions names it differently)"
                )
        if "throttle_errors_error" in r:
            lines.append(f"- Throttle error names could not be read: {r['throttle_errors_error']}")
    lines.extend(f"- {note}" for note in notes)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Deploy, assert and destroy every integration test case.")
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("apps", nargs="*", help="integ_*.py files (default: all)")
    args = parser.parse_args(argv)
    context = dict(item.split("=", 1) for item in args.context)
    model_id = context.get("integ_model_id", DEFAULT_MODEL_ID)
    expected_throttle = context.get("integ_throttle_error", DEFAULT_THROTTLE_ERROR)
    try:
        environment = preflight(model_id)
    except PreflightError as error:
        print(f"make integ: {error}", file=sys.stderr)
        return 2

    from integ import snapshots  # synthesis starts here, after the credentials check

    RESULTS.mkdir(exist_ok=True)
    log = RESULTS / "cdk.log"
    log.write_text("")
    chosen = [Path(a).resolve() for a in args.apps] or snapshots.apps()
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    for app in chosen:
        assembly = OUT / app.stem
        if assembly.exists():
            import shutil

            shutil.rmtree(assembly)
        snapshots.synth(app, assembly, context)
        if snapshots.compare(snapshots.snapshot_dir(app), assembly):
            notes.append(f"{app.name} differs from its committed snapshot (context given, or an uncommitted change)")
        for name, case in snapshots.test_cases(assembly).items():
            print(f"{name}: deploying {', '.join(case['stacks'])}", flush=True)
            result = run_case(name, case, assembly, log, expected_throttle)
            results.append(result)
            print(f"{name}: {'PASS' if passed(result) else 'FAIL'}", flush=True)
    text = report(environment, model_id, results, notes)
    (RESULTS / "report.md").write_text(text)
    (RESULTS / "report.json").write_text(json.dumps({"environment": environment, "results": results}, indent=1) + "\n")
    print(text)
    return 0 if results and all(passed(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
