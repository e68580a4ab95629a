"""A user's view: build the wheel with `make dist`, pip install it into a fresh environment outside the
repository as the README's "Use it in your app" says, run that section's example there (cdk-nag on),
find the handler asset, type-check against the installed package, run the emulator without boto3, and
the benchmark on the prompts the wheel ships."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from helpers import readme_blocks

ROOT = Path(__file__).resolve().parents[1]


COMPOSED_APP = textwrap.dedent(
    """
    import aws_cdk as cdk
    from aws_cdk import aws_opensearchserverless as aoss
    from aws_cdk import aws_scheduler as scheduler
    from aws_cdk import aws_stepfunctions as sfn
    from cdk_nag import AwsSolutionsChecks
    from genai_pacer import (AnswerRouter, AnswerStore, BatchPrecompute, BedrockModel, ConverseRequest,
                             EndpointScaling, ExperimentVariant, HybridSearchPipeline, ModelQuota, PeakWindow,
                             PromptExperiment, RuntimeLayer, ScheduledPrecompute, TextPrompt, VectorIndexSettings)

    app = cdk.App()
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "Composed", env=cdk.Environment(account="111122223333", region="us-east-1"))
    model = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
    quota = ModelQuota(stack, "Quota", model=model, tpm_quota=400_000)
    profile = quota.profile(input_tokens=800, output_tokens=300, max_tokens=400)
    store = AnswerStore(stack, "Store")
    ScheduledPrecompute(
        stack, "Notes", answer_store=store, model=model,
        request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.item.prompt"), max_tokens=400),
        max_concurrency=quota.share("Notes", profile, fraction=0.5, call_seconds=5),
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6", time_zone=cdk.TimeZone.EUROPE_BERLIN),
        items=[{"key": "note#a", "prompt": "a"}, {"key": "note#b", "prompt": "b"}],
    )
    BatchPrecompute(stack, "Batch", model=model, answer_store=store, max_tokens=400)
    AnswerRouter(stack, "Router", answer_store=store, model=model)
    EndpointScaling(stack, "Scaling", endpoint="my-llm-endpoint", target_concurrency=6.4, max_capacity=8,
                    peaks=[PeakWindow(capacity=4, start="08:00", end="11:00", days="MON-FRI", time_zone="Europe/Berlin")])
    PromptExperiment(stack, "Experiment", experiment_name="support", variants=[
        ExperimentVariant("control", model, 90, TextPrompt("Answer: {{question}}"), max_tokens=400),
        ExperimentVariant("brief", model, 10, TextPrompt("Answer briefly: {{question}}"), max_tokens=200),
    ])
    RuntimeLayer(stack, "PacerRuntime")
    rules = '{"ResourceType": "collection", "Resource": ["collection/docs"]}'
    encryption = aoss.CfnSecurityPolicy(stack, "Encryption", name="docs-enc", type="encryption",
                                        policy='{"Rules": [' + rules + '], "AWSOwnedKey": true}')
    network = aoss.CfnSecurityPolicy(stack, "Network", name="docs-net", type="network",
                                     policy='[{"Rules": [' + rules + '], "AllowFromPublic": true}]')
    collection = aoss.CfnCollection(stack, "Collection", name="docs", type="VECTORSEARCH")
    collection.node.add_dependency(encryption, network)
    index = VectorIndexSettings(stack, "Index", collection=collection, index_name="chunks", dimension=256)
    pipeline = HybridSearchPipeline(stack, "Hybrid", collection=collection, pipeline_name="chunks-hybrid",
                                    weights=(0.3, 0.7))
    pipeline.resource.node.add_dependency(index.resource)
    app.synth()
    """
)


def run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def pinned(requirement: str, requirements: str = "requirements.txt") -> str:
    """The version the repository pins, so the consumer gets what the reference app is tested with."""
    (line,) = [line for line in (ROOT / requirements).read_text().splitlines() if line.startswith(f"{requirement}==")]
    return line


@pytest.mark.consumer
def test_installed_wheel_runs_the_readme_app_with_the_worker_asset_and_types(tmp_path):
    # make dist, as the README says (outside make's own environment, so no jobserver or level leaks in)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    run("make", "-s", "dist", f"DIST={tmp_path / 'dist'}", cwd=ROOT, env=env)
    (wheel,) = (tmp_path / "dist").glob("genai_pacer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "genai_pacer/_lambda/queued_worker/handler.py" in names
    assert "genai_pacer/_lambda/pacer_runtime/bedrock.py" in names
    assert {"genai_pacer/py.typed", "genai_pacer/runtime.pyi", "genai_pacer/testing/data/prompts.jsonl"} <= set(names)
    assert any(re.fullmatch(r"genai_pacer-[^/]+\.dist-info/licenses/LICENSE", name) for name in names)
    assert not any("__pycache__" in name or name.startswith(("tests/", "stacks/", "genai_pacer/_wheel/"))
                   for name in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = re.findall(r"^Requires-Dist: (\S+)", metadata, re.M)
    assert not any(r.startswith("cdk-nag") for r in requires), requires  # cdk-nag is the user's choice

    consumer = tmp_path / "consumer"
    consumer.mkdir()
    run(sys.executable, "-m", "venv", str(consumer / ".venv"), cwd=consumer)
    python = consumer / ".venv" / "bin" / "python"
    # --no-compile: bytecode compilation of aws-cdk-lib is most of the install time and not under test
    run(str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check",
        str(wheel), pinned("cdk-nag"), cwd=consumer, env=env)

    # every example of "Use it in your app", as written; CDK_OUTDIR is how `cdk synth` runs an app
    example, *others = [b for b in readme_blocks(ROOT / "README.md") if b.heading == "Use it in your app" and b.language == "python"]
    (consumer / "app.py").write_text(example.code)
    run(str(python), "app.py", cwd=consumer, env={**env, "CDK_OUTDIR": str(consumer / "out")})
    for other in others:  # acknowledging one's own nag finding; a snapshot test of one's own stack
        (consumer / f"example_{other.index}.py").write_text(other.code)
        run(str(python), f"example_{other.index}.py", cwd=consumer, env={**env, "CDK_OUTDIR": str(consumer / f"out{other.index}")})

    (template_path,) = (consumer / "out").glob("*.template.json")
    template = json.loads(template_path.read_text())
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    (worker,) = functions
    assert worker["Properties"]["Handler"] == "queued_worker.handler.handler"
    asset_hash = worker["Properties"]["Code"]["S3Key"].removesuffix(".zip")
    manifest = json.loads(template_path.with_name(template_path.name.replace(".template.json", ".assets.json")).read_text())
    asset_dir = consumer / "out" / manifest["files"][asset_hash]["source"]["path"]
    assert (asset_dir / "queued_worker" / "handler.py").is_file()
    assert (asset_dir / "pacer_runtime" / "bedrock.py").is_file()

    # the later capabilities composed from the installed wheel, cdk-nag on: pre-computation on one
    # store, endpoint scaling of an existing endpoint, the quota every consumer draws from, an A/B
    # experiment, the runtime layer, and a search pipeline on a vector index
    (consumer / "composed.py").write_text(COMPOSED_APP)
    run(str(python), "composed.py", cwd=consumer, env={**env, "CDK_OUTDIR": str(consumer / "composed")})
    composed = json.loads((consumer / "composed" / "Composed.template.json").read_text())
    handlers = sorted(r["Properties"]["Handler"] for r in composed["Resources"].values()
                      if r["Type"] == "AWS::Lambda::Function" and "Handler" in r["Properties"]
                      and not r["Properties"]["Handler"].startswith("index."))
    assert {"answer_router.handler.handler", "scheduled_precompute.handler.handler"} <= set(handlers), handlers
    assert any(h.startswith("batch_precompute.") for h in handlers), handlers
    types = {r["Type"] for r in composed["Resources"].values()}
    assert "AWS::ApplicationAutoScaling::ScalableTarget" in types
    assert {"AWS::AppConfig::Application", "AWS::AppConfig::ConfigurationProfile", "AWS::OpenSearchServerless::Index",
            "AWS::Lambda::LayerVersion"} <= types, types
    assert any(h.startswith("search_pipeline.") for h in handlers), handlers
    (layer,) = [r for r in composed["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    assets = json.loads((consumer / "composed" / "Composed.assets.json").read_text())["files"]
    layer_dir = consumer / "composed" / assets[layer["Properties"]["Content"]["S3Key"].removesuffix(".zip")]["source"]["path"]
    assert (layer_dir / "python" / "pacer_runtime" / "experiment.py").is_file()  # staged from the installed wheel

    # every lazy export loads from the installed wheel (runtime needs boto3: checked at the end)
    # with only aws-cdk-lib and constructs, as the README says: star-import included
    run(str(python), "-c", "from genai_pacer import *\nimport genai_pacer\nfor name in genai_pacer.__all__: "
        "getattr(genai_pacer, name)\nassert 'runtime' not in genai_pacer.__all__", cwd=consumer, env=env)

    # an editor or type checker of the installed package sees real signatures (runtime.pyi, py.typed)
    (consumer / "typed.py").write_text(textwrap.dedent(
        """
        from genai_pacer import BedrockModel
        from genai_pacer.runtime import converse
        reveal_type(converse)
        reveal_type(BedrockModel.from_id)
        from genai_pacer import BoundedMapp
        """
    ))
    (consumer / "mypy.ini").write_text("[mypy]\n[mypy-aws_cdk.*,constructs.*,jsii.*]\nfollow_imports = skip\n")
    mypy = subprocess.run([str(Path(sys.executable).with_name("mypy")), "--python-executable", str(python),
                           "--no-incremental", "typed.py"], cwd=consumer, capture_output=True, text=True, env=env)
    # the real result type from the installed runtime, not Any (whichever of its files defines it)
    assert re.search(r"-> genai_pacer\._lambda\.pacer_runtime\.\w+\.ConverseResult\"", mypy.stdout), mypy.stdout + mypy.stderr
    assert "-> genai_pacer.models.BedrockModel" in mypy.stdout, mypy.stdout
    assert 'Module "genai_pacer" has no attribute "BoundedMapp"' in mypy.stdout, mypy.stdout

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
    assert missing.returncode == 1 and "pip install boto3" in missing.stderr, missing.stderr

    # With boto3 (the bench extra's client), the README's emulator bench runs with no prompts file of
    # one's own: it replays the sample installed with the wheel (a tiny run: 3 requests, time scale 200).
    run(str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check",
        pinned("boto3", "requirements-dev.txt"), cwd=consumer, env=env)
    bench = run(str(consumer / ".venv" / "bin" / "genai-pacer"), "bench", "--emulator", "--model-id", "m",
                "--requests", "3", "--warmup", "0", "--concurrency", "3", "--time-scale", "200", "--out", "results",
                cwd=consumer, env=env)
    assert json.loads(bench.stdout)["succeeded"] == 3, bench.stdout
    assert re.search(r"48 prompts \(the sample shipped with genai-pacer, \S+/\.venv/lib/python[\d.]+/site-packages/"
                     r"genai_pacer/testing/data/prompts\.jsonl;", bench.stderr), bench.stderr
