"""A user's view: pip install the wheel into a fresh environment outside the repository, compose
genai-pacer constructs in their own stack, synthesize, and find the handler asset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CONSUMER_APP = textwrap.dedent(
    """
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn
    from genai_pacer import BedrockModel, BoundedMap, QueuedInference, planning

    app = cdk.App(outdir="out")
    stack = cdk.Stack(app, "ConsumerStack")
    model = BedrockModel.from_id("amazon.nova-lite-v1:0")
    profile = planning.TokenProfile(input_tokens=800, output_tokens=200, max_tokens=256)
    rate = planning.sustainable_rate(profile, tpm_quota=200_000, call_seconds=4)
    QueuedInference(stack, "Inference", model=model, max_concurrency=rate.max_concurrency)
    BoundedMap(stack, "Fanout", max_concurrency=min(rate.max_concurrency, 40), model=model,
               body={"messages": [{"role": "user", "content": [{"text": sfn.JsonPath.string_at("$.q")}]}]})
    app.synth()
    """
)


def run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.consumer
def test_installed_wheel_synthesizes_a_consumer_stack_with_the_worker_asset(tmp_path):
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), cwd=ROOT)
    (wheel,) = dist.glob("genai_pacer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "genai_pacer/_lambda/queued_worker/handler.py" in names
    assert "genai_pacer/_lambda/pacer_runtime/bedrock.py" in names
    assert not any("__pycache__" in name or name.startswith(("tests/", "stacks/")) for name in names)

    consumer = tmp_path / "consumer"
    consumer.mkdir()
    run(sys.executable, "-m", "venv", str(consumer / ".venv"), cwd=consumer)
    python = consumer / ".venv" / "bin" / "python"
    run(
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        str(wheel),
        cwd=consumer,
    )
    (consumer / "app.py").write_text(CONSUMER_APP)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run(str(python), "app.py", cwd=consumer, env=env)

    template = json.loads((consumer / "out" / "ConsumerStack.template.json").read_text())
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    (worker,) = functions
    assert worker["Properties"]["Handler"] == "queued_worker.handler.handler"
    asset_hash = worker["Properties"]["Code"]["S3Key"].removesuffix(".zip")
    manifest = json.loads((consumer / "out" / "ConsumerStack.assets.json").read_text())
    asset_dir = consumer / "out" / manifest["files"][asset_hash]["source"]["path"]
    assert (asset_dir / "queued_worker" / "handler.py").is_file()
    assert (asset_dir / "pacer_runtime" / "bedrock.py").is_file()
    assert any(r["Type"] == "AWS::StepFunctions::StateMachine" for r in template["Resources"].values())

    # The emulator needs only the standard library: without boto3 in the venv, it serves a raw POST,
    # and the console script is installed.
    emulator_check = textwrap.dedent(
        """
        import json, urllib.request
        from genai_pacer.testing import BedrockEmulator, ModelSpec
        with BedrockEmulator([ModelSpec("m", ttft_seconds=0.1)], time_scale=100) as emulator:
            body = {"messages": [{"role": "user", "content": [{"text": "hi"}]}], "inferenceConfig": {"maxTokens": 5}}
            request = urllib.request.Request(emulator.endpoint_url + "/model/m/converse", data=json.dumps(body).encode())
            print(json.loads(urllib.request.urlopen(request).read())["usage"]["outputTokens"])
        """
    )
    assert run(str(python), "-c", emulator_check, cwd=consumer, env=env).stdout.strip() == "5"
    assert "bench" in run(str(consumer / ".venv" / "bin" / "genai-pacer"), "--help", cwd=consumer, env=env).stdout
    missing = subprocess.run([str(python), "-c", "import genai_pacer.runtime"], cwd=consumer, env=env,
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "pip install 'genai-pacer[bench]'" in missing.stderr
