"""Every flag of the CLI says what it does and what it defaults to (issue 23)."""

from __future__ import annotations

import argparse

import pytest
from genai_pacer.testing import cli


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    (commands,) = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def _shown(default: object) -> list[str]:
    """How a default may be written in help text."""
    if isinstance(default, float) and default.is_integer():
        return [str(default), str(int(default))]
    if isinstance(default, int):
        return [str(default), f"{default:,}"]
    return [str(default)]


@pytest.mark.parametrize("command", ["emulator", "bench", "experiments", "quota-check"])
def test_every_flag_has_help_that_names_its_default(command):
    problems = []
    for action in _subparsers()[command]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = action.option_strings[0] if action.option_strings else action.dest
        text = action.help or ""
        if not text.strip():
            problems.append(f"{flag}: no help")
        elif action.required:
            continue
        elif action.default not in (None, False, argparse.SUPPRESS, []) and not any(
            f"default {shown}" in text or f"default: {shown}" in text for shown in _shown(action.default)
        ):
            problems.append(f"{flag}: help does not say its default {action.default!r}: {text!r}")
        elif action.default in (None, False) and "default" not in text:
            problems.append(f"{flag}: help does not say what happens when it is not given: {text!r}")
    assert problems == []


def test_the_bench_report_and_progress_explain_warm_up_and_reservations(tmp_path, capsys):
    import json

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello there", "expected_output_tokens": 12}\n')
    code = cli.main(["bench", "--emulator", "--prompts", str(prompts), "--model-id", "us.amazon.nova-lite-v1:0",
                     "--requests", "2", "--warmup", "1", "--concurrency", "1", "--time-scale", "50",
                     "--out", str(tmp_path / "r")])
    captured = capsys.readouterr()
    assert code == 0
    notes = json.loads(captured.out)["notes"]
    assert "1 warm-up requests ran first and are left out" in " ".join(notes)
    assert any("reserved_pct_of_quota can pass 100 with no throttle" in note for note in notes)
    assert "3/3 requests (warm-up included)" in captured.err


def test_help_shows_every_exported_constructs_defaults_as_code():
    """help(AnswerStore) showed 'answer_ttl = <aws_cdk.Duration object at 0x...>' (issue 23)."""
    import inspect

    import genai_pacer

    unreadable = []
    for name in genai_pacer.__all__:
        exported = getattr(genai_pacer, name)
        if not inspect.isclass(exported):
            continue
        for parameter in inspect.signature(exported.__init__).parameters.values():
            if parameter.default is not inspect.Parameter.empty and " at 0x" in repr(parameter.default):
                unreadable.append(f"{name}({parameter.name}={parameter.default!r})")
    assert unreadable == []
    from genai_pacer import BatchPrecompute

    default = inspect.signature(BatchPrecompute.__init__).parameters["object_expiration"].default
    assert repr(default) == "cdk.Duration.days(30)" and default.build().to_days() == 30


def test_help_of_every_exported_construct_shows_its_own_constructor_doc():
    """help(AnswerStore) showed aws-cdk's "Creates a new construct node" for every constructor (issue 34.15)."""
    import inspect
    import pydoc

    import genai_pacer

    from constructs import Construct

    constructs = [getattr(genai_pacer, name) for name in genai_pacer.__all__
                  if inspect.isclass(getattr(genai_pacer, name)) and issubclass(getattr(genai_pacer, name), Construct)]
    assert len(constructs) >= 18  # the walk found the constructs, not an empty list
    generic, undescribed = {}, []
    for construct in constructs:
        shown = pydoc.render_doc(construct, renderer=pydoc.plaintext)
        constructor = pydoc.render_doc(construct.__init__, renderer=pydoc.plaintext)
        if ("Creates a new construct node" in shown + constructor
                or f"Its props are the keyword arguments, each described in the {construct.__name__} class "
                   "docstring" not in constructor):
            generic[construct.__name__] = constructor
        # what the constructor's docstring points to is there: every prop is named in the class docstring
        undescribed += [f"{construct.__name__}({parameter.name})"
                        for parameter in inspect.signature(construct.__init__).parameters.values()
                        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.name not in construct.__doc__]
    assert generic == {}
    assert undescribed == []
