"""The integration test apps offline: every app synthesized in this process matches its committed
snapshot, the snapshots hold the assertions and keep nothing after delete, a broken assertion fails
the comparison, and `make integ` without credentials stops at once with a clear message."""

from __future__ import annotations

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

from integ import _support, snapshots  # noqa: E402

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


def test_the_throttle_assertion_expects_the_configured_error_name():
    template = json.loads(
        next(snapshots.snapshot_dir(ROOT / "integ" / "integ_orchestration.py").glob("ThrottleProvocation*.template.json")).read_text()
    )
    expected = [json.dumps(r["Properties"].get("expected")) for r in template["Resources"].values() if "expected" in r.get("Properties", {})]
    assert any("BedrockRuntime\\\\\\\\.ThrottlingException" in e for e in expected), expected


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
_BURST_OK = '[{"error":"none"},{"error":"BedrockRuntime.ThrottlingException"}]'
_CAUSE = "2 records to answer (2 items, 0 rejected) is below the minimum of 100 records per job"


@pytest.mark.parametrize(
    ("app", "needle", "accepted", "refused"),
    [
        ("integ_orchestration.py", "outputTokens", f"[{_ANSWER},{_ANSWER},{_ANSWER}]", f"[{_ANSWER},{_ANSWER}]"),
        ("integ_orchestration.py", "outputTokens", f"[{_ANSWER},{_ANSWER},{_ANSWER}]", f"[{_ANSWER},{_ANSWER},{_ANSWER},{_ANSWER}]"),
        ("integ_orchestration.py", "outputTokens", f"[{_ANSWER},{_ANSWER},{_ANSWER}]", f"[{_ANSWER},{_ANSWER},{_NO_TEXT}]"),
        ("integ_orchestration.py", "Throttling", _BURST_OK, '[{"error":"none"},{"error":"States.TaskFailed"}]'),
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
