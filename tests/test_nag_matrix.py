"""cdk-nag 3 finds nothing on what genai-pacer creates, in any combination of bring-your-own options (issue 23).

Every public construct is synthesized under AwsSolutionsChecks across its options (the library's
default, your resource in the same stack, imported by name or ARN, or in another stack; a weights
prefix or an archive key; ...), covering every value and every pair of values of two options at
least once (tests/nag_matrix_cases.py). All cases are stacks of ONE app, synthesized once; the
validation report's findings are mapped back to cases by stack name. A user's own wildcard, added
to a library role or on a user's own bucket, still fails: the library acknowledges only its own.

A case that finds a real finding on a library resource is marked xfail(strict=True) with the
finding and the file that should fix it, so the fix flips it.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
import nag_matrix_cases as m
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

CASES = m.cases()

#: Findings on library resources, known and left to the construct's owner: (construct, which cases,
#: the finding and the file that should fix it). Each marks its cases xfail(strict=True), so a fix flips
#: them. Empty: every case is clean.
KNOWN: list[tuple[str, Callable[[dict[str, str]], bool], str]] = []


def known(case: m.Case) -> list[str]:
    options = dict(case.options)
    return [reason for construct, applies, reason in KNOWN if construct == case.construct and applies(options)]


@dataclass
class Outcome:
    """What the one synth found, per stack name."""

    findings: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, str] = field(default_factory=dict)
    synth_error: str | None = None
    build_seconds: float = 0.0
    seconds: float = 0.0


def _named_cases(app: cdk.App) -> None:
    """The issue's example, and a user's own wildcards, which must still fail (stacks UserWildcard-*)."""
    from aws_cdk import aws_scheduler as scheduler
    from genai_pacer import (
        AnswerStore,
        BatchPrecompute,
        BoundedDistributedMap,
        BoundedMap,
        LlmEndpoint,
        QueuedInference,
        ScheduledPrecompute,
        StateMachineOptions,
    )

    stack = cdk.Stack(app, "UserWildcard-Role", env=cdk.Environment(account="999999999901", region=m.REGION))
    endpoint = LlmEndpoint(
        stack,
        "Llm",
        instance_type="ml.g5.2xlarge",
        image_uri=m.IMAGE,
        model_data_bucket=s3.Bucket.from_bucket_name(stack, "Weights", "users-weights"),
        model_data_key="mistral-7b/",
    )
    endpoint.role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=["*"]))
    queued = QueuedInference(stack, "Queued", model=m.model("foundation", stack.account), max_concurrency=4)
    queued.function.add_to_role_policy(iam.PolicyStatement(actions=["dynamodb:GetItem"], resources=["*"]))

    stack = cdk.Stack(app, "Issue23-Example", env=cdk.Environment(account="999999999903", region=m.REGION))
    LlmEndpoint(  # the issue's example, as written there
        stack,
        "Llm",
        instance_type="ml.g5.2xlarge",
        image_uri=m.IMAGE,
        model_data_bucket=s3.Bucket(stack, "Weights", enforce_ssl=True),
        model_data_key="mistral-7b/",
    )

    # The user's own role, given to the library, with the user's own wildcards beside the library's grants:
    # an object wildcard on another bucket of theirs, and an s3:::bucket/* (the shape the library's
    # item-reader grant has).
    stack = cdk.Stack(app, "UserWildcard-OwnRole", env=cdk.Environment(account="999999999904", region=m.REGION))
    r = m.Resources(stack, lambda: stack)
    items = r.bucket("new")
    for name, build in (
        ("Precompute", lambda options: ScheduledPrecompute(
            stack, "Precompute", answer_store=AnswerStore(stack, "Store"), model=m.model("foundation", stack.account),
            request=m.converse("$.item.ticker"), max_concurrency=4, items_bucket=items, items_key="k/items.jsonl",
            schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6"), state_machine_options=options)),
        ("Map", lambda options: BoundedMap(
            stack, "Map", max_concurrency=4, model=m.model("foundation", stack.account), request=m.converse(),
            state_machine_options=options)),
    ):
        role = iam.Role(stack, f"{name}Role", assumed_by=iam.ServicePrincipal("states.amazonaws.com"))
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::users-archive/*"]))
        role.add_to_policy(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=["*"]))
        build(StateMachineOptions(role=role))

    # The library's own state machine roles, with the user's own object wildcard on another bucket added.
    stack = cdk.Stack(app, "UserWildcard-S3", env=cdk.Environment(account="999999999905", region=m.REGION))
    r = m.Resources(stack, lambda: stack)
    items = r.bucket("new")
    machines = {
        "Precompute": ScheduledPrecompute(
            stack, "Precompute", answer_store=AnswerStore(stack, "Store"), model=m.model("foundation", stack.account),
            request=m.converse("$.item.ticker"), max_concurrency=4, items_bucket=items, items_key="k/items.jsonl",
            schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6")).state_machine,
        "DistMap": BoundedDistributedMap(
            stack, "DistMap", max_concurrency=4, model=m.model("foundation", stack.account), request=m.converse(),
            items_bucket=items, items_key="items.jsonl").state_machine,
    }
    for machine in machines.values():
        machine.add_to_role_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::users-archive/*"]))
    # ... and wildcards of the very shapes the library acknowledges on its own roles (a prefix's objects,
    # batch jobs, log streams), so an acknowledgment that matched by shape instead of by its own ARN fails here.
    batch = BatchPrecompute(stack, "Batch", model=m.model("foundation", stack.account), max_tokens=300)
    batch.prepare_function.add_to_role_policy(
        iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::users-archive/items/*"])
    )
    batch.job_events_function.add_to_role_policy(iam.PolicyStatement(
        actions=["bedrock:GetModelInvocationJob"],
        resources=[f"arn:aws:bedrock:us-west-2:{stack.account}:model-invocation-job/*"],
    ))
    llm = LlmEndpoint(stack, "Llm", instance_type="ml.g5.2xlarge", image_uri=m.IMAGE, model_data_bucket=items,
                      model_data_key="mistral-7b/")
    llm.role.add_to_principal_policy(iam.PolicyStatement(
        actions=["logs:PutLogEvents"],
        resources=[f"arn:aws:logs:{m.REGION}:{stack.account}:log-group:/users/other:log-stream:*"],
    ))

    stack = cdk.Stack(app, "UserWildcard-Bucket", env=cdk.Environment(account="999999999902", region=m.REGION))
    weights = s3.Bucket(stack, "Weights")  # no enforce_ssl, no access logs: the user's own findings
    LlmEndpoint(
        stack, "Llm", instance_type="ml.g5.2xlarge", image_uri=m.IMAGE, model_data_bucket=weights, model_data_key="model.tar.gz"
    )


def synthesize(
    cases: list[m.Case], outdir: Path, *, named: bool = True, context: dict[str, object] | None = None
) -> Outcome:
    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations

    started = time.perf_counter()
    outcome = Outcome()
    app = cdk.App(outdir=str(outdir), context=context)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    for number, case in enumerate(cases):
        try:
            m.build_case(app, case, number)
        except Exception:  # a combination the library refuses or cannot build: reported per case
            outcome.errors[case.stack_name] = traceback.format_exc(limit=3)
            app.node.try_remove_child(case.stack_name)
            app.node.try_remove_child(f"{case.stack_name}-Owner")
    if named:
        _named_cases(app)
    outcome.build_seconds = time.perf_counter() - started
    try:
        app.synth()
    except RuntimeError as error:
        if not (outdir / "validation-report.json").exists():  # not cdk-nag's ValidationFailed
            outcome.synth_error = str(error)
    for line in nag_violations(outdir):
        rule, _, path = line.partition(" at ")
        stack = path.split("/", 1)[0].removesuffix("-Owner")
        outcome.findings[stack].append(line)
    outcome.seconds = time.perf_counter() - started
    return outcome


#: The cases are synthesized as one app per construct, and the named cases as one more, each when a test
#: first needs it, once per worker (session scope: a module-scoped fixture is torn down whenever the worker
#: runs another module's test in between). With one app for everything, every xdist worker synthesized
#: all of it (about 60 s each on 2 cores, the same work twice); a construct's cases are consecutive, so
#: xdist mostly sends them to one worker. (Pinning parts to workers with xdist_group and --dist loadgroup
#: does nothing under pytest 9: xdist 3.8 renames item._nodeid, which pytest 9 no longer reads.)
NAMED_PART = "named"
#: The cases given an imported role (iam.Role.from_role_arn), synthesized once more in an app with cdk.json's
#: feature flags, the ones `cdk init` writes: under @aws-cdk/aws-iam:importedRoleStackSafeDefaultPolicyName the
#: imported role's policy is not named `Policy`, and the library must still find it to acknowledge its own
#: grants there (trial finding F1).
FLAGGED_PART = "flagged"


def imported_role(case: m.Case) -> bool:
    options = dict(case.options)
    return options.get("state_machine_options") == "role:imported" or options.get("role") == "imported"


FLAGGED = [case for case in CASES if imported_role(case)]


def feature_flags() -> dict[str, object]:
    import json

    return json.loads((Path(__file__).resolve().parents[1] / "cdk.json").read_text())["context"]


@pytest.fixture(scope="session")
def outcomes(tmp_path_factory) -> Callable[[str], Outcome]:
    synthesized: dict[str, Outcome] = {}

    def part(construct: str) -> Outcome:
        if construct not in synthesized:
            flagged = construct == FLAGGED_PART
            cases = FLAGGED if flagged else [case for case in CASES if case.construct == construct]
            synthesized[construct] = synthesize(
                cases, tmp_path_factory.mktemp(f"nag-matrix-{construct}"), named=construct == NAMED_PART,
                context=feature_flags() if flagged else None,
            )
        return synthesized[construct]

    return part


@pytest.fixture(scope="session")
def outcome(outcomes) -> Outcome:
    """The named cases (the issue's example and the user's own wildcards)."""
    return outcomes(NAMED_PART)


#: One synth of every case takes about 90 s of CPU: `make test` runs these tests, `make test-fast` skips them.
SLOW = pytest.mark.slow


def _param(case: m.Case):
    reasons = known(case)
    marks = [pytest.mark.xfail(strict=True, reason=" AND ".join(reasons))] if reasons else []
    return pytest.param(case, id=case.id, marks=marks)


@SLOW
@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_the_library_creates_no_finding(outcomes, case):
    outcome = outcomes(case.construct)
    assert outcome.synth_error is None, outcome.synth_error
    assert case.stack_name not in outcome.errors, outcome.errors.get(case.stack_name)
    assert outcome.findings.get(case.stack_name, []) == []


@SLOW
@pytest.mark.parametrize("case", [_param(c) for c in FLAGGED])
def test_an_imported_role_creates_no_finding_under_cdk_inits_feature_flags(outcomes, case):
    assert FLAGGED_PART not in {c.construct for c in CASES}
    outcome = outcomes(FLAGGED_PART)
    assert outcome.synth_error is None, outcome.synth_error
    assert case.stack_name not in outcome.errors, outcome.errors.get(case.stack_name)
    # @aws-cdk/core:annotationsInValidationReport (also in cdk.json) copies every warning into the report as an
    # "Annotation::<id>" entry; the warnings a case is meant to have are asserted where they are made.
    findings = [f for f in outcome.findings.get(case.stack_name, []) if not f.startswith("Annotation::")]
    assert findings == []


def test_the_feature_flag_that_renames_an_imported_roles_policy_is_in_cdk_json():
    from genai_pacer._internal.nag import IMPORTED_ROLE_STACK_SAFE_POLICY_NAME_FLAG

    assert feature_flags()[IMPORTED_ROLE_STACK_SAFE_POLICY_NAME_FLAG] is True
    assert len(FLAGGED) >= 20  # every construct taking StateMachineOptions, with an imported role


@SLOW
def test_the_issues_example_leaves_only_the_users_own_finding(outcome):
    """LlmEndpoint with a same-stack bucket and the prefix "mistral-7b/": nothing on the execution role;
    the bucket's missing access logs are the user's own finding (S1)."""
    assert outcome.findings["Issue23-Example"] == ["AwsSolutions-S1 at Issue23-Example/Weights/Resource"]


@SLOW
def test_a_users_own_wildcard_on_a_library_role_still_fails(outcome):
    assert sorted(outcome.findings["UserWildcard-Role"]) == [
        "AwsSolutions-IAM5[Resource::*] at UserWildcard-Role/Llm/ExecutionRole/DefaultPolicy/Resource",
        "AwsSolutions-IAM5[Resource::*] at UserWildcard-Role/Queued/WorkerRole/DefaultPolicy/Resource",
    ]


@SLOW
@pytest.mark.parametrize(
    "construct",
    ["Precompute", "Map"],
)
def test_a_users_own_wildcards_on_the_role_they_pass_still_fail(outcome, construct):
    assert sorted(f for f in outcome.findings["UserWildcard-OwnRole"] if f"/{construct}Role/" in f) == [
        f"AwsSolutions-IAM5[Resource::*] at UserWildcard-OwnRole/{construct}Role/DefaultPolicy/Resource",
        f"AwsSolutions-IAM5[Resource::arn:aws:s3:::users-archive/*] at UserWildcard-OwnRole/{construct}Role/DefaultPolicy/Resource",
    ]


@SLOW
def test_a_users_own_wildcards_shaped_like_the_librarys_still_fail(outcome):
    """Object, job and log-stream wildcards the user adds to library roles, in the shapes the library
    acknowledges for its own grants: each is still reported, and nothing else in that stack."""
    at = "UserWildcard-S3"
    assert sorted(outcome.findings[at]) == [
        f"AwsSolutions-IAM5[Resource::arn:aws:bedrock:us-west-2:999999999905:model-invocation-job/*] at {at}/Batch/"
        "JobEventsRole/DefaultPolicy/Resource",
        f"AwsSolutions-IAM5[Resource::arn:aws:logs:us-east-1:999999999905:log-group:/users/other:log-stream:*] at {at}/"
        "Llm/ExecutionRole/DefaultPolicy/Resource",
        f"AwsSolutions-IAM5[Resource::arn:aws:s3:::users-archive/*] at {at}/DistMap/StateMachine/Role/DefaultPolicy/Resource",
        f"AwsSolutions-IAM5[Resource::arn:aws:s3:::users-archive/*] at {at}/Precompute/StateMachine/Role/DefaultPolicy/"
        "Resource",
        f"AwsSolutions-IAM5[Resource::arn:aws:s3:::users-archive/items/*] at {at}/Batch/PrepareRole/DefaultPolicy/Resource",
    ]


@SLOW
def test_a_users_own_bucket_without_tls_still_fails(outcome):
    assert sorted(outcome.findings["UserWildcard-Bucket"]) == [
        "AwsSolutions-S1 at UserWildcard-Bucket/Weights/Resource",
        "AwsSolutions-S10 at UserWildcard-Bucket/Weights/Resource",
    ]


# --- the matrix itself -------------------------------------------------------------------------------


def test_every_public_construct_is_in_the_matrix():
    import genai_pacer

    import constructs

    built = {name for name in genai_pacer.__all__ if isinstance(getattr(genai_pacer, name), type)
             and issubclass(getattr(genai_pacer, name), constructs.Construct)}
    assert built == {matrix.construct for matrix in m.MATRICES}


@pytest.mark.parametrize("matrix", m.MATRICES, ids=lambda matrix: matrix.construct)
def test_the_cases_hold_every_valid_pair_of_options(matrix):
    combinations = matrix.combinations()
    names = list(matrix.dimensions)
    held = set().union(*(m.pairs_of(c, names) for c in combinations))
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for x in matrix.dimensions[a]:
                for y in matrix.dimensions[b]:
                    assert ((a, x), (b, y)) in held or not matrix.valid({a: x, b: y}), (a, x, b, y)
    assert all(matrix.valid(c) for c in combinations)
    assert combinations == matrix.combinations()  # deterministic: the same stacks on every run


def test_pairwise_is_far_smaller_than_the_product():
    dims = {f"o{i}": ("a", "b", "c") for i in range(6)}
    combinations = m.pairwise(dims)
    assert len(combinations) <= 15 < 3**6
    assert len(set().union(*(m.pairs_of(c) for c in combinations))) == 15 * 9


def report(outcome: Outcome) -> str:
    """A readable summary (python tests/test_nag_matrix.py prints it)."""
    lines = [f"{len(CASES)} cases: built in {outcome.build_seconds:.1f} s, built and synthesized in {outcome.seconds:.1f} s"]
    for name, error in outcome.errors.items():
        lines.append(f"ERROR {name}: {error.strip().splitlines()[-1]}")
    for name, findings in sorted(outcome.findings.items()):
        for finding in findings:
            lines.append(f"FINDING {name}: {finding}")
    if outcome.synth_error:
        lines.append(f"SYNTH {outcome.synth_error}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys
    import tempfile

    sys.path[:0] = [str(Path(__file__).parent)]
    import conftest  # noqa: F401  (PATH and sys.path as the tests have them)

    with contextlib.redirect_stdout(sys.stderr):
        result = synthesize(CASES, Path(tempfile.mkdtemp()))
    print(report(result))
