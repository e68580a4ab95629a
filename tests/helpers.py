"""Helpers for reading synthesized templates the way a reviewer would."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Template
from genai_pacer.testing.snapshots import normalize_template


def new_stack(name: str = "Test") -> cdk.Stack:
    return cdk.Stack(cdk.App(), name, env=cdk.Environment(account="111122223333", region="us-east-1"))


def template_of(stack: cdk.Stack) -> Template:
    return Template.from_stack(stack)


def resources(template: dict | Template, type_name: str) -> dict[str, dict]:
    data = template.to_json() if isinstance(template, Template) else template
    return {k: v for k, v in data["Resources"].items() if v["Type"] == type_name}


def only(template: dict | Template, type_name: str) -> dict:
    found = resources(template, type_name)
    assert len(found) == 1, f"expected one {type_name}, found {sorted(found)}"
    return next(iter(found.values()))


def _flatten_tokens(value: Any) -> str:
    """Render a DefinitionString (string or Fn::Join) as JSON text, tokens as placeholders."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        delimiter, parts = value["Fn::Join"]
        return delimiter.join(part if isinstance(part, str) else "TOKEN" for part in parts)
    raise TypeError(f"unexpected definition value {value!r}")


def definition(state_machine: dict) -> dict:
    """The parsed Amazon States Language of a synthesized AWS::StepFunctions::StateMachine."""
    return json.loads(_flatten_tokens(state_machine["Properties"]["DefinitionString"]))


def definition_with_refs(template: dict) -> dict:
    """The only state machine's definition, each Ref in it shown as "<<number Name>>" (outside a JSON
    string: a number at deploy) or "<<text Name>>" (inside one); other intrinsics likewise by their JSON.
    (definition() shows every token as TOKEN, which breaks JSON where a token stands for a number.)"""
    value = only(template, "AWS::StepFunctions::StateMachine")["Properties"]["DefinitionString"]
    if isinstance(value, str):
        return json.loads(value)
    delimiter, parts = value["Fn::Join"]
    text, in_string = "", False
    for part in parts:
        if isinstance(part, str):
            escaped = False
            for char in part:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = not in_string
            text += part + delimiter
            continue
        name = part["Ref"] if set(part) == {"Ref"} else json.dumps(part, sort_keys=True).replace('"', "'")
        text += (f"<<text {name}>>" if in_string else f'"<<number {name}>>"') + delimiter
    return json.loads(text[: len(text) - len(delimiter)] if delimiter else text)


def all_states(asl: dict) -> dict[str, dict]:
    """Every state, nested ones (Parallel branches, Map processors) included, by name."""
    found: dict[str, dict] = {}

    def walk(states: dict) -> None:
        for name, state in states.items():
            found[name] = state
            for branch in state.get("Branches", []):
                walk(branch["States"])
            for key in ("ItemProcessor", "Iterator"):
                if key in state:
                    walk(state[key]["States"])

    walk(asl["States"])
    return found


def policy_statements(template: dict | Template) -> list[dict]:
    statements = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return statements


def normalized(template: dict) -> dict:
    """A template with asset hashes replaced, so a snapshot is the same on every machine: the public
    helper users get (genai_pacer.testing.snapshots), so the two can never drift apart."""
    return normalize_template(template)


NOT_RUN = re.compile(r"^<!--\s*not-run:(?P<reason>.*?)-->$")


@dataclass(frozen=True)
class Block:
    heading: str
    index: int  # 1 for the first block under the heading
    line: int  # of the opening fence
    language: str
    code: str
    not_run: str | None  # the reason, when the block is marked not-run
    page: str = "README.md"  # the file, relative to the repository

    @property
    def id(self) -> str:
        return f"{self.heading} #{self.index}" if self.page == "README.md" else f"{self.page}: {self.heading} #{self.index}"


def readme_blocks(readme: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with the heading it sits under and its not-run reason."""
    text = readme.read_text()
    page = f"{readme.parent.name}/{readme.name}" if readme.parent.name in ("docs", "bench") else readme.name
    blocks: list[Block] = []
    heading, counts = "(top)", {}
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        line = lines[number]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("```"):
            start, language = number, line[3:].strip()
            end = next((n for n in range(start + 1, len(lines)) if lines[n].startswith("```")), None)
            assert end is not None, f"{page}:{start + 1}: a ``` fence is never closed"
            before = next((lines[n].strip() for n in range(start - 1, -1, -1) if lines[n].strip()), "")
            marker = NOT_RUN.match(before)
            counts[heading] = counts.get(heading, 0) + 1
            blocks.append(Block(heading, counts[heading], start + 1, language, "\n".join(lines[start + 1:end]) + "\n",
                                marker.group("reason").strip() if marker else None, page))
            number = end
        number += 1
    return blocks


def token_of(stack: cdk.Stack, kind: str, name: str = "Param") -> Any:
    """A CfnParameter `name` as the kind of deploy-time value a user would pass: "number", "string",
    "duration" (cdk.Duration.seconds of a number) or anything else for a list."""
    if kind == "number":
        return cdk.CfnParameter(stack, name, type="Number").value_as_number
    if kind == "string":
        return cdk.CfnParameter(stack, name).value_as_string
    if kind == "duration":
        return cdk.Duration.seconds(cdk.CfnParameter(stack, name, type="Number").value_as_number)
    return cdk.CfnParameter(stack, name, type="CommaDelimitedList").value_as_list


def kms_statements(template: dict | Template) -> dict[str, list[dict]]:
    """Every IAM policy statement that grants a kms: action, by the logical id of its AWS::IAM::Policy."""
    found: dict[str, list[dict]] = {}
    for logical_id, policy in resources(template, "AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if any(action.startswith("kms:") for action in actions):
                found.setdefault(logical_id, []).append(statement)
    return found


#: How aws-cdk-lib encodes a number token (about -1.888e+289), as text shows it.
ENCODED_NUMBER = re.compile(r"e\+2\d\d|-1\.88815")


def holds_ref(value: Any, name: str = "Param") -> bool:
    """The CfnParameter `name` is in `value`: a Ref to it, at any depth (in an Fn::Join, a list...)."""
    if isinstance(value, dict):
        return value == {"Ref": name} or any(holds_ref(v, name) for v in value.values())
    if isinstance(value, list):
        return any(holds_ref(v, name) for v in value)
    return False


def names_prop(prop: str, problems: list[str]) -> list[str]:
    """The problems of an InvalidPropsError that name `prop` (as "prop ...", "prop=...", "prop[...", "prop:")."""
    return [p for p in problems if p.startswith((f"{prop} ", f"{prop}=", f"{prop}[", f"{prop}:"))]


def refused(build: Any) -> list[str]:
    """The problems of the InvalidPropsError that build() raises (fails the test when it raises none)."""
    import pytest
    from genai_pacer import InvalidPropsError

    with pytest.raises(InvalidPropsError) as raised:
        build()
    return raised.value.problems


def check_token_case(table: dict[str, tuple[Any, ...]], name: str, prop: str, kind: str) -> None:
    """One case of a token table, name -> (the class or method, its props, build(stack, **{prop: value}),
    (prop, kind) -> where(template) the values that must each hold the parameter): given a `kind` token,
    the prop reaches every such value as a Ref to it, or, where the table names none, synth refuses it
    naming the prop; never a token's number encoding in the template or the message."""
    _, _, build, passes = table[name]
    stack = new_stack()
    where = passes.get((prop, kind))
    if where is None:
        problems = refused(lambda: (build(stack, **{prop: token_of(stack, kind)}), Template.from_stack(stack)))
        assert names_prop(prop, problems), problems
        assert not ENCODED_NUMBER.search(str(problems)), problems
        return
    build(stack, **{prop: token_of(stack, kind)})
    template = Template.from_stack(stack).to_json()
    values = where(template)
    assert values and all(holds_ref(v) for v in values), json.dumps(values)[:2000]
    text = json.dumps(template["Resources"])
    found = ENCODED_NUMBER.search(text)
    assert not found, text[max(0, found.start() - 300):][:400] if found else ""


def warning_ids() -> dict[str, str]:
    """Every warning id the package emits, `genai-pacer:` dropped, with where: warn(scope, "<id>", ...),
    warn_above_reservable_concurrency, fit_concurrency's "<prop>-clamped" (kebab-case) for each prop it clamps,
    and the annotations modules not yet on warn() add by hand."""
    import genai_pacer

    package = Path(genai_pacer.__file__).parent
    found: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        tree = ast.parse(path.read_text())
        constants = {target.id: node.value.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                     and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                     for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            ids: list[object] = []
            if name == "warn" and len(node.args) >= 2:
                ids = [node.args[1]]
            elif name == "warn_above_reservable_concurrency":
                ids = ["reserved-concurrency-quota"]
            elif name == "fit_concurrency" and isinstance(node.args[2], ast.Constant):  # no maximum, no clamp
                maximum = next((k.value for k in node.keywords if k.arg == "maximum"), None)
                if not (isinstance(maximum, ast.Constant) and maximum.value is None):
                    ids = [f"{node.args[2].value.replace('_', '-')}-clamped"]
            elif name == "add_warning_v2" and node.args:
                ids = [node.args[0]]
            for id in ids:
                if isinstance(id, ast.Constant):
                    id = id.value
                elif isinstance(id, ast.Name):
                    id = constants.get(id.id)
                if isinstance(id, str):
                    found.setdefault(id.removeprefix("genai-pacer:"), f"{relative}:{node.lineno}")
    return found
