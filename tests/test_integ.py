"""The integration test apps offline: every app synthesized in this process matches its committed
snapshot, the snapshots hold the assertions and keep nothing after delete, a broken assertion fails
the comparison, and `make integ` without credentials stops at once with a clear message."""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from integ import _sdk_check, _support, snapshots  # noqa: E402

APPS = snapshots.apps()
IDS = [app.stem for app in APPS]


@pytest.fixture(scope="module")
def assemblies(tmp_path_factory) -> dict[str, Path]:
    """Every integration test app synthesized once per test session, in one process, with integ-runner's
    context. Under pytest-xdist the first worker synthesizes into the session's shared temporary
    directory while holding a lock; the others wait for it and read the same assemblies."""
    session_root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's base is <session root>/popen-gwN
        session_root = session_root.parent
    shared = session_root / "integ-assemblies"
    shared.mkdir(exist_ok=True)
    with (shared / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (shared / ".done").exists():
                for app in APPS:
                    if (shared / app.stem).exists():
                        shutil.rmtree(shared / app.stem)
                    snapshots.synth(app, shared / app.stem)
                (shared / ".done").touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return {app.stem: shared / app.stem for app in APPS}


def _digest(directory: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            sha.update(path.name.encode() + path.read_bytes())
    return sha.hexdigest()


def test_every_family_has_an_app():
    assert IDS == [
        "integ_endpoint_scaling",
        "integ_experiment",
        "integ_load_replay",
        "integ_observability",
        "integ_orchestration",
        "integ_precompute",
        "integ_queued_inference",
        "integ_retrieval",
    ]


@pytest.mark.parametrize("app", APPS, ids=IDS)
def test_snapshot_matches_synthesis(app, assemblies):
    snapshot = snapshots.snapshot_dir(app)
    before = _digest(snapshot)
    problems = snapshots.compare(snapshot, assemblies[app.stem])
    assert problems == [], (
        "\n".join(problems) + "\nIf the change is intended: `make integ-update`, review `git diff integ/`, commit."
    )
    assert _digest(snapshot) == before  # comparing never rewrites a snapshot


@pytest.mark.parametrize("app", APPS, ids=IDS)
def test_snapshot_holds_the_assertions(app):
    snapshot = snapshots.snapshot_dir(app)
    cases = snapshots.test_cases(snapshot)
    assert cases, f"{snapshot.name}/integ.json has no test cases"
    for name, case in cases.items():
        assert case.get("stackUpdateWorkflow") is False, f"{name}: the update workflow would deploy twice"
        template = json.loads((snapshot / f"{case['assertionStackName']}.template.json").read_text())
        calls = [r for r in template["Resources"].values() if r["Type"].startswith("Custom::DeployAssert@SdkCall")]
        expectations = [c for c in calls if "expected" in c["Properties"]]
        results = [k for k in template.get("Outputs", {}) if k.startswith("AssertionResults")]
        assert expectations, f"{name}: no API call with an expected result"
        assert len(results) == len(expectations), f"{name}: every expectation reports a result output"


@pytest.mark.parametrize("app", APPS, ids=IDS)
def test_snapshot_keeps_nothing_after_delete(app):
    """Tables, queues, keys, buckets and log groups the library retains by design are deleted here."""
    for path in sorted(snapshots.snapshot_dir(app).glob("*.template.json")):
        assert _support.retained_resources(json.loads(path.read_text())) == [], path.name


def test_the_throttle_test_case_passes_only_with_the_configured_error_name():
    """The assertion can only expect SUCCEEDED (the burst's output is far above the 4,096 bytes a custom
    resource returns), so `make integ` checks the name: the same run without it is a FAIL."""
    from integ import run

    assert _support.INTEG_CONTEXT_DEFAULTS["integ_throttle_error"][0] == run.DEFAULT_THROTTLE_ERROR
    assert _support.INTEG_CONTEXT_DEFAULTS["integ_model_id"][0] == run.DEFAULT_MODEL_ID
    seen = {
        "test_case": "ThrottleProvocation/DefaultTest",
        "deploy_seconds": {},
        "assertions": {"AssertionResultsA": {"status": "success"}},
        "throttle_expected": "BedrockRuntime.ThrottlingException",
        "throttle_errors": ["BedrockRuntime.ThrottlingException", "none"],
        "destroy": {"ok": True, "seconds": 1.0},
    }
    other = {**seen, "throttle_errors": ["States.TaskFailed"]}
    assert run.passed(seen) and not run.passed(other) and not run.passed({**seen, "throttle_errors": []})
    text = run.report({"account": "111122223333", "region": "us-east-1"}, "m", [other], [])
    assert "| ThrottleProvocation/DefaultTest | FAIL |" in text
    assert "- ThrottleProvocation/DefaultTest failed: expected the throttle error name BedrockRuntime.ThrottlingException" in text


def test_a_broken_assertion_fails_the_comparison(tmp_path):
    """A scratch copy whose Map assertion expects FAILED instead of SUCCEEDED no longer matches."""
    source = ROOT / "integ" / "integ_orchestration.py"
    text = source.read_text()
    broken = text.replace('{"status": "SUCCEEDED", "output": output}', '{"status": "FAILED", "output": output}')
    assert broken != text
    scratch = tmp_path / source.name
    scratch.write_text(broken)
    assembly = snapshots.synth(scratch, tmp_path / "out")
    problems = snapshots.compare(snapshots.snapshot_dir(source), assembly)
    assert problems and all("DeployAssert" in p for p in problems), problems
    assert any("FAILED" in p and "SUCCEEDED" in p for p in problems), problems  # the diff shows the change


def test_a_missing_snapshot_is_reported_not_created(tmp_path, assemblies):
    missing = tmp_path / "integ_new.py.snapshot"
    problems = snapshots.compare(missing, assemblies["integ_observability"])
    assert problems == ["integ_new.py.snapshot does not exist: run `make integ-update` and review the new snapshot"]
    assert not missing.exists()


def test_make_integ_without_credentials_stops_with_a_clear_message(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_EC2_METADATA_DISABLED="true",  # no network call at all
        AWS_REGION="us-east-1",
    )
    out = ROOT / "integ" / ".out"
    before = sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*")) if out.exists() else []
    make = shutil.which("make")
    command = [make, "--no-print-directory", "integ"] if make else [sys.executable, "-m", "integ.run"]
    # The timeout only stops a hang; the check itself returns before anything is synthesized.
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "make integ: no AWS credentials found" in done.stderr, done.stderr
    after = sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*")) if out.exists() else []
    assert after == before  # it stopped before synthesizing anything


def test_make_integ_without_a_region_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    done = subprocess.run(
        [sys.executable, "-m", "integ.run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.startswith("make integ: no AWS Region: set AWS_REGION"), done.stderr


@pytest.mark.parametrize("app", APPS, ids=IDS)
def test_snapshot_is_exactly_what_integ_update_writes(app, assemblies, tmp_path):
    """No hand edits and no machine-specific bytes: the committed snapshot equals a fresh write."""
    fresh = tmp_path / "snapshot"
    snapshots.write_snapshot(assemblies[app.stem], fresh)
    committed = snapshots.snapshot_dir(app)
    names = sorted(p.name for p in committed.iterdir())
    assert names == sorted(p.name for p in fresh.iterdir())
    for name in names:
        assert (committed / name).read_text() == (fresh / name).read_text(), f"{committed.name}/{name}"


def test_assertion_results_are_read_as_integ_runner_reads_them(tmp_path):
    from integ import run

    outputs = tmp_path / "outputs.json"
    outputs.write_text(
        json.dumps(
            {
                "QueuedDeployAssert": {
                    "AssertionResultsAwsApiCallSQSreceive": '{"status":"fail","message":"Expected Body\nto match"}',
                    "AssertionResultsAwsApiCallDynamoDBgetItem": '{"status":"success"}',
                    "SomethingElse": "ignored",
                }
            }
        )
    )
    results = run.assertion_results(outputs, "QueuedDeployAssert")
    assert results == {
        "AssertionResultsAwsApiCallSQSreceive": {"status": "fail", "message": "Expected Body\nto match"},
        "AssertionResultsAwsApiCallDynamoDBgetItem": {"status": "success"},
    }
    assert run.assertion_results(tmp_path / "missing.json", "QueuedDeployAssert") == {}


def test_the_report_names_failures_durations_and_the_throttle_error():
    from integ import run

    ok = {
        "test_case": "ThrottleProvocation/DefaultTest",
        "deploy_seconds": {"IntegThrottle": 95.2, "ThrottleProvocation/DefaultTest/DeployAssert": 140.0},
        "assertions": {"AssertionResultsA": {"status": "success"}},
        "throttle_expected": "BedrockRuntime.ThrottlingException",
        "throttle_errors": ["BedrockRuntime.ThrottlingException"],
        "destroy": {"ok": True, "seconds": 60.1},
    }
    failed = {
        "test_case": "QueuedInference/DefaultTest",
        "deploy_seconds": {"IntegQueuedInference": 80.0},
        "assertions": {"AssertionResultsB": {"status": "fail", "message": "Missing key 'Item'"}},
        "destroy": {"ok": False, "seconds": 12.0},
    }
    assert run.passed(ok) and not run.passed(failed)
    assert not run.passed({**ok, "assertions": {}})  # a test case without assertion results proves nothing
    text = run.report({"account": "111122223333", "region": "us-east-1"}, "us.amazon.nova-micro-v1:0", [ok, failed], [])
    assert "| ThrottleProvocation/DefaultTest | PASS | IntegThrottle: 95.2, ThrottleProvocation/DefaultTest/DeployAssert: 140.0 | 1/1 | yes (60.1 s) |" in text
    assert "| QueuedInference/DefaultTest | FAIL | IntegQueuedInference: 80.0 | 0/1 | NO: delete the stacks by hand (12.0 s) |" in text
    assert "- QueuedInference/DefaultTest AssertionResultsB failed: Missing key 'Item'" in text
    assert "- ThrottleProvocation/DefaultTest passed: AssertionResultsA" in text
    assert "- Throttle error name Step Functions reported: BedrockRuntime.ThrottlingException" in text


def _string_like_patterns(app: str) -> list[str]:
    """Every Match.string_like_regexp pattern of an app's committed assertions."""
    found: list[str] = []

    def walk(value):
        if isinstance(value, dict):
            for key, inner in value.items():
                if key == "$StringLike":
                    found.append(inner)
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    for path in sorted(snapshots.snapshot_dir(ROOT / "integ" / app).glob("*.template.json")):
        for resource in json.loads(path.read_text())["Resources"].values():
            expected = resource.get("Properties", {}).get("expected")
            if isinstance(expected, str):
                walk(json.loads(expected))
    return found


_ANSWER = '{"usage":{"outputTokens":9,"inputTokens":14},"stopReason":"end_turn","text":"Apple sells \\"iPhones\\"."}'
_NO_TEXT = _ANSWER.replace('"text":"Apple sells \\"iPhones\\"."', '"text":""')
_CAUSE = "2 records to answer (2 items, 0 rejected) is below the minimum of 100 records per job"


@pytest.mark.parametrize(
    ("app", "needle", "accepted", "refused"),
    [
        ("integ_orchestration.py", "outputTokens", f"[{_ANSWER},{_ANSWER},{_ANSWER}]", f"[{_ANSWER},{_ANSWER}]"),
        ("integ_orchestration.py", "outputTokens", f"[{_ANSWER},{_ANSWER},{_ANSWER}]", f"[{_ANSWER},{_ANSWER},{_ANSWER},{_ANSWER}]"),
        ("integ_orchestration.py", "outputTokens", f"[{_ANSWER},{_ANSWER},{_ANSWER}]", f"[{_ANSWER},{_ANSWER},{_NO_TEXT}]"),
        ("integ_orchestration.py", "^SUCCEEDED", "SUCCEEDED", "NOT_SUCCEEDED"),
        ("integ_observability.py", "^TimeToFirstToken", "TimeToFirstToken", "TimeToFirstTokens"),
        ("integ_precompute.py", "minimum", _CAUSE, "3 records to answer is below the minimum of 100"),
    ],
)
def test_regexp_assertions_accept_a_real_shape_and_refuse_a_wrong_one(app, needle, accepted, refused):
    """The patterns run in the assertion handler as JavaScript RegExp(pattern, "gm"); run them the same way."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (make installs it into node_modules)")
    [pattern] = [p for p in _string_like_patterns(app) if needle in p]
    script = "const [p, a, r] = JSON.parse(process.argv[1]); console.log(JSON.stringify([new RegExp(p, 'gm').test(a), new RegExp(p, 'gm').test(r)]))"
    done = subprocess.run([node, "-e", script, json.dumps([pattern, accepted, refused])], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [True, False]


# --- the assertions' API calls against botocore's models, IAM and CloudFormation's limits ------------------


def _snapshot_stacks(app: str) -> dict[str, dict]:
    """Stack name -> template of an app's committed snapshot."""
    return {
        path.name.removesuffix(".template.json"): json.loads(path.read_text())
        for path in sorted(snapshots.snapshot_dir(ROOT / "integ" / app).glob("*.template.json"))
    }


def test_every_assertion_call_fits_the_aws_models_iam_and_cloudformation():
    """Each SdkCall assertion of every committed snapshot: service and operation as the handler's SDK v3
    resolves them, parameters through botocore's validator, expected / actualPath / outputPaths through
    the output shape, the calling role's IAM action, and a response CloudFormation accepts."""
    calls, problems = 0, []
    for app in APPS:
        stacks = _snapshot_stacks(app.name)
        for name, template in stacks.items():
            calls += len(_sdk_check.sdk_calls(template))
            problems += _sdk_check.check_template(template, f"{app.stem}/{name}", stacks)
    assert calls >= 38, calls  # the check saw the assertions (38 when written)
    assert problems == [], "\n".join(problems)


def _scratch(app: str, stack_prefix: str, api: str, change) -> tuple[dict, dict[str, dict]]:
    """A copy of one committed assertion template with `change(properties)` applied to its first `api` call."""
    stacks = copy.deepcopy(_snapshot_stacks(app))
    [name] = [n for n in stacks if n.startswith(stack_prefix)]
    template = stacks[name]
    [first, *_] = [r for r in template["Resources"].values() if r.get("Properties", {}).get("api") == api]
    change(first["Properties"])
    return template, stacks


def _rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


def _drop_policy(template: dict, action: str) -> None:
    for resource in template["Resources"].values():
        for policy in resource.get("Properties", {}).get("Policies") or []:
            statements = policy["PolicyDocument"]["Statement"]
            statements[:] = [s for s in statements if action not in json.dumps(s.get("Action"))]


_QUEUED = ("integ_queued_inference.py", "QueuedInference")
_PRECOMPUTE = ("integ_precompute.py", "Precompute")


@pytest.mark.parametrize(
    ("where", "api", "change", "found"),
    [
        (_QUEUED, "sendMessage", lambda p: p.update(api="sendMessages"), "has no SendMessagesCommand"),
        (_QUEUED, "sendMessage", lambda p: p.update(api="SendMessageCommand"), None),  # the v3 command name works
        (_QUEUED, "sendMessage", lambda p: p.update(service="SimpleQueue"), "no AWS service has the SDK v3 client @aws-sdk/client-simplequeue"),
        (_QUEUED, "sendMessage", lambda p: p.update(service="@aws-sdk/client-sqs"), None),
        (_QUEUED, "sendMessage", lambda p: _rename(p["parameters"], "MessageBody", "Body"), 'Unknown parameter in input: "Body"'),
        (_QUEUED, "sendMessage", lambda p: p["parameters"].pop("QueueUrl"), 'Missing required parameter in input: "QueueUrl"'),
        (_QUEUED, "receiveMessage", lambda p: p["parameters"].update(MaxNumberOfMessages='"ten"'), "Invalid type for parameter MaxNumberOfMessages"),
        (_QUEUED, "receiveMessage", lambda p: p.update(expected=p["expected"].replace('"Body"', '"MessageBody"')), "'MessageBody' is not a member of Message"),
        (_QUEUED, "getItem", lambda p: p.update(expected=p["expected"].replace('"Item"', '"Items"')), "did you mean 'Item'"),
        (_PRECOMPUTE, "startExecution", lambda p: p.update(outputPaths=["executionARN"]), "outputPaths 'executionARN'"),
        (_PRECOMPUTE, "describeExecution", lambda p: p.update(expected=p["expected"].replace('"status":"', '"status":"NOT_')), "is not a value of ExecutionStatus"),
        (_PRECOMPUTE, "describeExecution", lambda p: p.update(expected='{"$Exact":"SUCCEEDED"}'), "$Exact is compared as a literal object"),
        (_PRECOMPUTE, "describeExecution", lambda p: p.update(flattenResponse="true"), "the expected result is compared with nothing"),
        (
            ("integ_experiment.py", "Experiment"),
            "startConfigurationSession",
            lambda p: p.update(outputPaths=["InitialToken"]),
            "not among",  # getLatestConfiguration reads ...apiCallResponse.InitialConfigurationToken
        ),
    ],
    ids=[
        "unknown-operation", "v3-command-name", "unknown-service", "v3-package-name", "unknown-parameter",
        "missing-required", "wrong-type", "expected-member", "expected-member-hint", "output-path",
        "enum-value", "exact-matcher", "flattened-without-path", "get-att-outside-output-paths",
    ],
)
def test_a_wrong_call_in_a_scratch_template_is_found(where, api, change, found):
    """Each deliberate mistake the deploy would find first is named by the offline check; the two
    spellings the handler also accepts (the v3 command name, the v3 package name) pass."""
    app, prefix = where
    template, stacks = _scratch(app, prefix, api, change)
    problems = _sdk_check.check_template(template, "scratch", stacks)
    if found is None:
        assert problems == [], problems
    else:
        assert any(found in p for p in problems), problems


def test_a_call_its_role_does_not_allow_is_found():
    template, stacks = _scratch(*_QUEUED, "getItem", lambda p: None)
    _drop_policy(template, "dynamodb:GetItem")
    problems = _sdk_check.check_template(template, "scratch", stacks)
    assert any("does not allow dynamodb:GetItem" in p for p in problems), problems
    lambda_invoke, precompute = _scratch(*_PRECOMPUTE, "invoke", lambda p: None)
    _drop_policy(lambda_invoke, "lambda:InvokeFunction")  # Invoke needs lambda:InvokeFunction, not lambda:Invoke
    problems = _sdk_check.check_template(lambda_invoke, "scratch", precompute)
    assert any("does not allow lambda:InvokeFunction" in p for p in problems), problems


def test_a_response_above_cloudformations_limit_is_found():
    """The committed throttle assertion reads only `status`; unfiltered, DescribeExecution would echo
    the burst's 1,000-item input, above the 4,096 bytes a custom resource may return."""
    def unfiltered(p):
        for key in ("outputPaths", "actualPath"):
            p.pop(key)
        p.update(flattenResponse="false")

    template, stacks = _scratch("integ_orchestration.py", "ThrottleProvocation", "describeExecution", unfiltered)
    problems = _sdk_check.check_template(template, "scratch", stacks)
    assert any("Response object is too long" in p and "the execution's input echoed" in p for p in problems), problems


def test_the_handler_decodes_the_matchers_the_checks_accept():
    """Read from the installed integ-tests-alpha bundle, not assumed: a release that decodes $Exact
    would show here (and ExpectedResult.exact would become usable)."""
    assert _sdk_check.handler_matchers() == {"$ArrayWith", "$ObjectLike", "$SerializedJson", "$StringLike"}
