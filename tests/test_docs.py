"""Every ```python block of README.md and of every page under docs/ runs as written, on its own, as a
reader would paste it.

No string rewriting: each block is compiled and executed unchanged in a fresh namespace. CDK blocks
build their own App and Stack and synthesize (cdk-nag included where the block turns it on); runtime
blocks start the emulator themselves, so nothing reaches AWS. A block that cannot run says why in
an HTML comment on the line before it, `<!-- not-run: reason -->`; those blocks are reported as
skipped with that reason. Every pip install hint in the code names a command the README shows.
"""

from __future__ import annotations

import ast
import re

import pytest
from conftest import ROOT
from helpers import readme_blocks, warning_ids

README = ROOT / "README.md"
#: The front door, one page per capability (docs/<capability>.md, matching the package's folders) and the
#: benchmark's page (bench/README.md).
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]

# Construct sections whose examples still lean on names from other sections (self, rate, model, ...).
# They are rewritten with the issue-8 API; when one runs, strict xfail fails: delete it from here.
PENDING_REWRITE: set[str] = set()


BLOCKS = [block for page in PAGES for block in readme_blocks(page)]
PYTHON = [block for block in BLOCKS if block.language == "python"]


def test_every_fenced_block_names_its_language():
    assert [b.id for b in BLOCKS if not b.language] == []
    assert len(PYTHON) >= 6


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_not_run_marker_gives_a_reason_and_sits_on_a_python_block(page):
    lines = page.read_text().splitlines()
    markers = [n + 1 for n, line in enumerate(lines) if "not-run" in line and line.strip().startswith("<!--")]
    marked = [b for b in readme_blocks(page) if b.not_run is not None]
    assert len(markers) == len(marked), f"{page.name} lines {markers}: a not-run marker must directly precede a block"
    for block in marked:
        assert block.language == "python", f"{block.id}: only python blocks run, so only they take a not-run marker"
        assert len(block.not_run) >= 10, f"{block.id}: say why the block cannot run, e.g. 'needs AWS credentials'"


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No AWS credentials or Region: a block that tried to reach AWS would fail, not call it."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_REGION", "AWS_DEFAULT_REGION", "CDK_OUTDIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(tmp_path)  # anything a block writes lands here


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# Runtime functions that call AWS: a block that uses one must start the emulator and point at it.
NETWORK_CALLS = {"bedrock_client", "client", "converse", "converse_stream", "stream_sentences", "rewrite_follow_up",
                 "run_side_by_side", "call_with_backoff"}


@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=pytest.mark.xfail(strict=True, reason="construct section awaiting its rewrite"))
     if b.heading in PENDING_REWRITE else b for b in PYTHON],
    ids=[b.id for b in PYTHON],
)
def test_python_block_runs_as_written(block, offline):
    if block.not_run is not None:
        pytest.skip(f"{block.page}:{block.line} not-run: {block.not_run}")
    tree = ast.parse(block.code, filename=f"{block.page}:{block.line}")
    imports = _imports(tree)
    calls = {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    if "aws_cdk" in imports:  # self-contained: its own App, synthesized (by app.synth() or the offline runner)
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        assert "synth" in calls or names & {"StateMachineRunner", "snapshot_template"}, (
            f"{block.id}: a CDK example builds its own App and ends with app.synth()"
        )
    called = calls | {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    talks_to_aws = "boto3" in imports or bool(called & NETWORK_CALLS)
    if "genai_pacer.runtime" in imports and talks_to_aws:  # offline: the runtime talks to the emulator the block starts
        assert "genai_pacer.testing" in imports, f"{block.id}: run the runtime example against BedrockEmulator"
    exec(compile(tree, f"{block.page}:{block.line}", "exec"), {"__name__": "__main__"})


def _pip_installs(text: str) -> list[str]:
    """`pip install X` commands by their first target, quotes dropped."""
    return [f"pip install {target}" for target in re.findall(r"pip install ['\"]?([^\s'\"`,)]+)", text)]


def test_every_pip_install_hint_in_the_code_is_a_command_the_readme_shows():
    readme = set(_pip_installs(README.read_text()))  # the front door: where a user installs from
    hints: dict[str, list[str]] = {}
    for path in [*(ROOT / "constructs").rglob("*.py"), *(ROOT / "lambda").rglob("*.py")]:
        for command in _pip_installs(path.read_text()):
            hints.setdefault(command, []).append(str(path.relative_to(ROOT)))
    assert hints, "no install hints found: the check reads nothing"
    missing = {command: paths for command, paths in hints.items() if command not in readme}
    assert not missing, f"install hints the README does not show (make them say what the README says): {missing}"


def test_wheel_names_in_the_readme_carry_the_current_version():
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    named = set(re.findall(r"genai_pacer-([^-\s/]+)-py3-none-any\.whl", README.read_text()))
    assert named == {version}, f"README names wheels of versions {sorted(named)}; pyproject.toml says {version}"


def test_every_warning_id_is_named_on_its_capabilitys_page():
    """docs/errors.md: "Each construct's page names its warnings", so an id `cdk synth` prints can be looked
    up where the construct is documented: a warning of quota/ on docs/quota.md, of models.py on
    docs/models.md; one of a shared helper (_internal/) on any page."""
    everywhere = "\n".join(page.read_text() for page in PAGES)
    ids = warning_ids()
    assert len(ids) >= 40
    missing = {}
    for id, where in ids.items():
        capability = where.split("/")[0].split(".py")[0]
        page = ROOT / "docs" / f"{capability}.md"
        text = page.read_text() if page.exists() else everywhere
        if f"`{id}`" not in text and f"genai-pacer:{id}`" not in text:
            missing[id] = f"{where}, not on {page.name if page.exists() else 'any page'}"
    assert missing == {}


def test_no_file_holds_a_merge_conflicts_markers():
    """A conflict resolved by keeping its markers once shipped a CHANGELOG that read as a broken merge
    (stop 43): no tracked file starts a line with git's conflict markers."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    marker = re.compile(r"^(<<<<<<<|>>>>>>>) ", re.M)
    paths = [ROOT / name for name in filter(None, listed.split("\0"))]
    marked = [str(path.relative_to(ROOT)) for path in paths
              if path.is_file() and path.suffix not in {".png", ".gz", ".zip"}
              and marker.search(path.read_text(errors="replace"))]
    assert marked == []
