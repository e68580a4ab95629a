"""Snapshots of the integration test apps: synthesized in one process, compared, and (only on request) written.

integ-runner's own snapshot mode cannot read these apps today: @aws-cdk/integ-runner 2.197.10 (the
newest on npm) reads cloud assembly schema 53 at most, and aws-cdk-lib 2.275 writes schema 55
("AssemblyVersionMismatch"). This module does what its snapshot mode does, in-process:

- synthesize each `integ/integ_*.py` app with the context integ-runner synthesizes with (the
  recommended feature flags, here cdk.json's, a superset of integ-runner's list; no version
  reporting, no path or asset metadata);
- compare every template, the assertion stacks' included (integ-runner compares the test case
  stacks only; the assertions are compared here so a changed assertion shows in review), with `integ/<app>.py.snapshot/`, asset hashes
  normalized (integ-runner's default: diffAssets false), and the test cases of integ.json;
- write snapshots only from `python -m integ.snapshots --update` (`make integ-update`).

The snapshot layout is integ-runner's (`<file>.snapshot/` with manifest.json, integ.json and the
templates), with two normalizations so a snapshot changes only when a deployed resource or an
assertion does: asset hashes are replaced by labels naming the asset, and the assertion custom
resources' `salt` (the synth time) by a constant. A snapshot is for review and comparison, never
for deploying (the test cases disable integ-runner's update workflow, which would deploy it).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import json
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

INTEG_DIR = Path(__file__).resolve().parent
ROOT = INTEG_DIR.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The feature flags: the reference app's (cdk.json, what `cdk init` gives with the pinned CLI), a
#: superset of integ-runner 2.197.10's recommended-feature-flags.json (the 81 it lists, same values).
FEATURE_FLAGS = ROOT / "cdk.json"
#: What integ-runner's engine passes besides the flags (toolkit synth: versionReporting, pathMetadata
#: and assetMetadata all false).
RUNNER_CONTEXT: dict[str, Any] = {
    "aws:cdk:version-reporting": False,
    "aws:cdk:enable-path-metadata": False,
    "aws:cdk:enable-asset-metadata": False,
}
#: Files a snapshot keeps. Left out: tree.json (nothing compares it), the asset manifests (the
#: templates and manifest.json name each asset by a label instead of its hash) and asset contents.
KEPT = ("manifest.json", "integ.json", "cdk.out")
KEPT_SUFFIXES = (".template.json",)
SALT = "<synth time>"


def apps() -> list[Path]:
    """Every integration test app, as integ-runner's Python preset finds them (^integ_.*\\.py$)."""
    return sorted(INTEG_DIR.glob("integ_*.py"))


def snapshot_dir(app: Path) -> Path:
    return app.with_name(app.name + ".snapshot")


def synth_context(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**json.loads(FEATURE_FLAGS.read_text())["context"], **RUNNER_CONTEXT, **(extra or {})}


def load(app: Path) -> ModuleType:
    """The app's module: imported by name when it is one of ours, else (a scratch copy) from its path."""
    if app.parent == INTEG_DIR:
        return importlib.import_module(f"integ.{app.stem}")
    spec = importlib.util.spec_from_file_location(f"integ_scratch_{app.stem}_{abs(hash(app))}", app)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synth(app: Path, outdir: Path, context: dict[str, Any] | None = None) -> Path:
    """Synthesize one app into outdir with integ-runner's context (plus `context`)."""
    load(app).build_app(context=synth_context(context), outdir=str(outdir)).synth()
    return outdir


def _kept(path: Path) -> bool:
    return path.is_file() and (path.name in KEPT or path.name.endswith(KEPT_SUFFIXES))


def unsalted(template: dict[str, Any]) -> dict[str, Any]:
    """The template with the assertion custom resources' `salt` (the synth time, which makes every
    deploy re-run the assertions) replaced by a constant: the snapshot records what is asserted, not when."""
    for resource in template.get("Resources", {}).values():
        properties = resource.get("Properties")
        custom = str(resource.get("Type", "")).startswith("Custom::DeployAssert")
        if custom and isinstance(properties, dict) and "salt" in properties:
            properties["salt"] = SALT
    return template


def write_snapshot(assembly: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    labels = asset_labels(assembly)
    for path in sorted(assembly.iterdir()):
        if _kept(path):
            text = path.read_text()
            if path.suffix == ".json":  # stable, reviewable diffs
                data = json.loads(text)
                if path.name.endswith(".template.json"):
                    data = unsalted(data)
                text = json.dumps(canonical(data, labels), indent=1, sort_keys=True) + "\n"
            (target / path.name).write_text(text)


def asset_labels(assembly: Path) -> dict[str, str]:
    """Asset hash -> a stable label naming the asset (its display name). Hashes differ between machines
    and, for the assertion stacks' templates, between any two syntheses (the salt); a label does not."""
    labels: dict[str, str] = {}
    for manifest in sorted(assembly.glob("*.assets.json")):
        data = json.loads(manifest.read_text())
        for kind in ("files", "dockerImages"):
            for digest, asset in data.get(kind, {}).items():
                labels[digest] = f"<asset: {asset.get('displayName') or asset.get('source', {}).get('path', '?')}>"
    return labels


def canonical(template: Any, labels: Mapping[str, str]) -> Any:
    """The template with every asset hash replaced by its label (integ-runner compares with asset
    hashes normalized too, unless a test case sets diffAssets)."""
    ordered = sorted(labels, key=len, reverse=True)

    def sub(value: Any) -> Any:
        if isinstance(value, dict):
            return {sub(k): sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        if isinstance(value, str):
            for digest in ordered:
                if digest in value:
                    value = value.replace(digest, labels[digest])
        return value

    return sub(template)


def test_cases(assembly: Path) -> dict[str, Any]:
    """integ.json's test cases: name -> stacks, assertion stack and options (what integ-runner deploys)."""
    manifest = assembly / "integ.json"
    if not manifest.exists():
        return {}
    return dict(json.loads(manifest.read_text()).get("testCases", {}))


def templates(assembly: Path) -> dict[str, dict[str, Any]]:
    labels = asset_labels(assembly)  # none in a snapshot: it holds the labels already
    return {
        path.name.removesuffix(".template.json"): canonical(unsalted(json.loads(path.read_text())), labels)
        for path in sorted(assembly.glob("*.template.json"))
    }


def _diff(name: str, expected: Any, actual: Any, limit: int = 60) -> str:
    lines = list(
        difflib.unified_diff(
            json.dumps(expected, indent=1, sort_keys=True).splitlines(),
            json.dumps(actual, indent=1, sort_keys=True).splitlines(),
            f"snapshot/{name}",
            f"synthesized/{name}",
            lineterm="",
            n=2,
        )
    )
    more = f"\n... {len(lines) - limit} more diff lines" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def compare(snapshot: Path, assembly: Path) -> list[str]:
    """What differs between a committed snapshot and a fresh synthesis; [] when they agree. Never writes."""
    if not snapshot.is_dir():
        return [f"{snapshot.name} does not exist: run `make integ-update` and review the new snapshot"]
    problems = []
    expected_cases, actual_cases = test_cases(snapshot), test_cases(assembly)
    if expected_cases != actual_cases:
        problems.append("integ.json test cases differ:\n" + _diff("integ.json", expected_cases, actual_cases))
    expected, actual = templates(snapshot), templates(assembly)
    for name in sorted(expected.keys() - actual.keys()):
        problems.append(f"{name} exists in the snapshot but not in the synthesized app")
    for name in sorted(actual.keys() - expected.keys()):
        problems.append(f"{name} is synthesized but not in the snapshot")
    for name in sorted(expected.keys() & actual.keys()):
        if expected[name] != actual[name]:
            problems.append(f"{name} changed:\n" + _diff(f"{name}.template.json", expected[name], actual[name]))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the snapshots of the apps given (default: all)")
    parser.add_argument("apps", nargs="*", help="integ_*.py files (default: every app in integ/)")
    args = parser.parse_args(argv)
    chosen = [Path(a).resolve() for a in args.apps] or apps()
    failed = 0
    for app in chosen:
        with tempfile.TemporaryDirectory(prefix="integ-synth-") as tmp:
            assembly = synth(app, Path(tmp))
            if args.update:
                write_snapshot(assembly, snapshot_dir(app))
                print(f"wrote {snapshot_dir(app).relative_to(ROOT)}")
                continue
            problems = compare(snapshot_dir(app), assembly)
            print(f"{'CHANGED' if problems else 'UNCHANGED':10} {app.name}")
            for problem in problems:
                print("    " + problem.replace("\n", "\n    "))
            failed += bool(problems)
    if failed:
        print(f"{failed} snapshot(s) differ; if the change is intended, run `make integ-update` and commit the diff")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
