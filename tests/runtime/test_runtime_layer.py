"""RuntimeLayer: pacer_runtime for a user's own handler, laid out as Lambda loads a Python layer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match, Template
from genai_pacer import InvalidPropsError, RuntimeLayer
from helpers import new_stack, only, template_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def synthesized():
    """A user's stack: their own handler with the layer, synthesized once; returns (template, asset dir)."""
    outdir = tempfile.mkdtemp(prefix="runtime-layer-")
    stack = cdk.Stack(cdk.App(outdir=outdir), "Test", env=cdk.Environment(account="111122223333", region="us-east-1"))
    handler = lambda_.Function(
        stack, "Mine", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
        code=lambda_.Code.from_inline("import pacer_runtime\ndef handler(event, context):\n    return 1\n"),
    )
    handler.add_layers(RuntimeLayer(stack, "PacerRuntime"))
    assembly = stack.node.root.synth()
    template = assembly.get_stack_by_name(stack.stack_name).template
    layer = only(template, "AWS::Lambda::LayerVersion")
    asset_hash = layer["Properties"]["Content"]["S3Key"].removesuffix(".zip")
    manifest = json.loads(Path(outdir, f"{stack.stack_name}.assets.json").read_text())
    return template, Path(outdir, manifest["files"][asset_hash]["source"]["path"])


def test_the_layer_holds_every_runtime_module_where_lambda_puts_python_layers(synthesized):
    _, asset = synthesized
    shipped = sorted(p.name for p in (asset / "python" / "pacer_runtime").glob("*.py"))
    assert shipped == sorted(p.name for p in (ROOT / "lambda" / "pacer_runtime").glob("*.py"))
    assert not list(asset.rglob("__pycache__"))
    assert sorted(p.name for p in asset.iterdir()) == ["python"]  # no handlers, no README


def test_a_handler_imports_the_runtime_from_the_layer_alone(synthesized):
    # Lambda puts /opt/python on sys.path; nothing of the checkout may be importable besides it
    _, asset = synthesized
    code = "import pacer_runtime.experiment, pacer_runtime.retrieval; print(pacer_runtime.__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(asset / 'python')!r}); {code}"],
                            capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(asset / "python" / "pacer_runtime"))


def test_the_function_uses_the_layer_on_the_python_runtimes_it_is_tested_on(synthesized):
    template = Template.from_json(synthesized[0])
    (layer_id,) = template.find_resources("AWS::Lambda::LayerVersion", {
        "Properties": {"CompatibleRuntimes": ["python3.12", "python3.13", "python3.14"],
                       "CompatibleArchitectures": ["x86_64", "arm64"]},
        "DeletionPolicy": Match.absent(),  # aws-cdk-lib's default: a replaced version is deleted
    })
    template.has_resource_properties("AWS::Lambda::Function", {"Layers": [{"Ref": layer_id}]})


def test_the_asset_hash_is_the_same_on_every_synth(tmp_path, monkeypatch):
    """Two synths that each stage the runtime afresh, in a different temporary directory (as on two
    machines, or after the temporary directory was cleaned), give the layer the same S3 key. Staging
    reuses a folder keyed by content, so without a fresh temporary directory per synth both would
    hash the one folder and this could not fail."""

    def key(tempdir: Path) -> str:
        tempdir.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(tempdir))
        stack = new_stack()
        RuntimeLayer(stack, "PacerRuntime")
        staged = [p for p in tempdir.iterdir() if p.name.startswith("genai-pacer-runtime-layer-")]
        assert len(staged) == 1 and (staged[0] / "python" / "pacer_runtime" / "__init__.py").is_file()  # staged here
        return only(template_of(stack).to_json(), "AWS::Lambda::LayerVersion")["Properties"]["Content"]["S3Key"]

    assert key(tmp_path / "first") == key(tmp_path / "second")


def test_architectures_and_removal_policy_are_passed_on():
    stack = new_stack()
    RuntimeLayer(stack, "L", compatible_architectures=[lambda_.Architecture.ARM_64], removal_policy=cdk.RemovalPolicy.RETAIN)
    template_of(stack).has_resource("AWS::Lambda::LayerVersion", {
        "Properties": Match.object_like({"CompatibleArchitectures": ["arm64"]}), "DeletionPolicy": "Retain"})


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"compatible_architectures": []}, "compatible_architectures=[] names no architecture; leave it out for both"),
        ({"compatible_architectures": "arm64"}, "compatible_architectures='arm64' is a str; pass a list"),
        ({"compatible_architectures": [None]}, "compatible_architectures[0] is required: pass lambda_.Architecture"),
        ({"compatible_architectures": ["arm64"]}, "compatible_architectures[0]='arm64' is a str; pass lambda_.Architecture"),
        ({"removal_policy": "DESTROY"}, "removal_policy='DESTROY' is a str; pass cdk.RemovalPolicy.RETAIN or DESTROY"),
        ({"removal_policy": True}, "removal_policy=True is a bool; pass cdk.RemovalPolicy"),
    ],
)
def test_bad_props_are_refused_with_the_fix(props, message):
    with pytest.raises(InvalidPropsError, match=r"^RuntimeLayer at Test/L: ") as error:  # its path, before it is built
        RuntimeLayer(new_stack(), "L", **props)
    assert message in str(error.value)
