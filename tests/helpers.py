"""Helpers for reading synthesized templates the way a reviewer would."""

from __future__ import annotations

import json
import re
from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Template

ASSET_HASH = re.compile(r"[0-9a-f]{64}")


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
    """A template with asset hashes replaced, so a snapshot is the same on every machine."""
    return json.loads(ASSET_HASH.sub("ASSET_HASH", json.dumps(template, sort_keys=True)))
