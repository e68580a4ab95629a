"""The cdk-nag matrix (issue 23): every public construct, across its bring-your-own options.

Each construct lists its options (dimensions) and the values a user may choose: the library's
default, a resource of the user's in the same stack ("new"), one imported by name or ARN
("imported", "imported-arn"), or one created in another stack of the app ("other-stack": a
cross-stack reference, which cdk-nag flattens differently). `pairwise` picks a few combinations
that hold every value and every pair of values of two options at least once; each combination
becomes one stack, and all the stacks synthesize in one app (tests/test_nag_matrix.py).

The user's own resources are built nag-clean (TLS-only, rotation, a DLQ, ...). Where a user
resource needs a finding the user accepts (server access logs of a bucket), it is acknowledged
on that resource only, so nothing the library creates is ever covered by it.

A new option or value: add it to the construct's `Matrix` (and to `valid` if some pairs cannot
exist); the generator adds the cases. `python tests/test_nag_matrix.py` prints every finding and
build error of the whole matrix.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_appconfig as appconfig
from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_opensearchserverless as aoss
from aws_cdk import aws_opensearchservice as opensearch
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

ACCOUNT = "111122223333"
REGION = "us-east-1"
ENV = cdk.Environment(account=ACCOUNT, region=REGION)

# --- pairwise -------------------------------------------------------------------------------------


def pairwise(
    dimensions: Mapping[str, Sequence[str]], valid: Callable[[dict[str, str]], bool] = lambda _: True
) -> list[dict[str, str]]:
    """Combinations that hold every value of every option and every pair of values of two options at
    least once. Greedy and deterministic (AETG-style): each step builds candidates, one from each
    uncovered pair of the two options with the most pairs left, filling the other options (most
    values first) with the value that covers the most new pairs; the candidate covering the most
    new pairs is taken.

    `valid` judges a partial combination (it must accept any option missing): a pair it refuses
    (e.g. your own DLQ beside your own queue, which has its own) is not required, and no combination
    holds it.
    """
    names = list(dimensions)
    if len(names) == 1:
        return [{names[0]: x} for x in dimensions[names[0]] if valid({names[0]: x})]
    uncovered = {
        ((a, x), (b, y))
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        for x in dimensions[a]
        for y in dimensions[b]
        if valid({a: x, b: y})
    }
    fill_order = sorted(names, key=lambda n: (-len(dimensions[n]), names.index(n)))

    def rank(pair: tuple[tuple[str, str], tuple[str, str]]) -> tuple[int, ...]:
        (a, x), (b, y) = pair
        return (names.index(a), names.index(b), dimensions[a].index(x), dimensions[b].index(y))

    def complete(seed: dict[str, str]) -> dict[str, str] | None:
        """Fill the options left, best value first, backing up where a choice leaves none valid."""
        rest = [name for name in fill_order if name not in seed]

        def fill(combination: dict[str, str], depth: int) -> dict[str, str] | None:
            if depth == len(rest):
                return combination if valid(combination) else None
            name = rest[depth]
            options = [v for v in dimensions[name] if valid({**combination, name: v})]
            options.sort(
                key=lambda v: (
                    -sum(_pair(names, name, v, other, w) in uncovered for other, w in combination.items()),
                    dimensions[name].index(v),
                )
            )
            for value in options:
                done = fill({**combination, name: value}, depth + 1)
                if done is not None:
                    return done
            return None

        filled = fill(dict(seed), 0)
        return None if filled is None else {name: filled[name] for name in names}

    chosen: list[dict[str, str]] = []
    while uncovered:
        left: dict[tuple[str, str], int] = defaultdict(int)
        for (a, _), (b, _) in uncovered:
            left[(a, b)] += 1
        widest = max(left, key=lambda ab: (left[ab], -names.index(ab[0]), -names.index(ab[1])))
        seeds = sorted((p for p in uncovered if (p[0][0], p[1][0]) == widest), key=rank)
        best: tuple[int, dict[str, str]] | None = None
        for (a, x), (b, y) in seeds:
            candidate = complete({a: x, b: y})
            if candidate is None or not valid(candidate):
                continue
            gain = len(pairs_of(candidate, names) & uncovered)
            if best is None or gain > best[0]:
                best = (gain, candidate)
        if best is None:
            raise ValueError(f"no valid combination holds any of {seeds}")
        chosen.append(best[1])
        uncovered -= pairs_of(best[1], names)
    return chosen


def _pair(names: list[str], a: str, x: str, b: str, y: str) -> tuple[tuple[str, str], tuple[str, str]]:
    return ((a, x), (b, y)) if names.index(a) < names.index(b) else ((b, y), (a, x))


def pairs_of(
    combination: Mapping[str, str], names: Sequence[str] | None = None
) -> frozenset[tuple[tuple[str, str], tuple[str, str]]]:
    """Every pair of (option, value) in a combination, in the options' order; a one-option
    combination counts each value as a pair with itself."""
    items = [(name, combination[name]) for name in (names or list(combination))]
    if len(items) == 1:
        return frozenset({(items[0], items[0])})
    return frozenset(itertools.combinations(items, 2))


# --- the user's own resources ---------------------------------------------------------------------


class Resources:
    """A user's own resources for one case: in its stack, imported, or in its owner stack."""

    def __init__(self, stack: cdk.Stack, owner: Callable[[], cdk.Stack]) -> None:
        self.stack = stack
        self._owner = owner
        self._count = itertools.count()

    def _scope(self, where: str) -> cdk.Stack:
        return self._owner() if where == "other-stack" else self.stack

    def _id(self, kind: str) -> str:
        return f"User{kind}{next(self._count)}"

    def key(self, where: str) -> kms.IKey | None:
        if where in ("none", "default"):
            return None
        if where.startswith("imported"):
            return kms.Key.from_key_arn(
                self.stack, self._id("Key"), f"arn:aws:kms:{REGION}:{self.stack.account}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
            )
        return kms.Key(self._scope(where), self._id("Key"), enable_key_rotation=True)

    def bucket(self, where: str) -> s3.IBucket | None:
        """"kms": SSE-KMS with a key of its own in the stack; "imported-kms": imported by name, so its key is
        given as the construct's <bucket>_key prop (bucket_key)."""
        if where in ("none", "default"):
            return None
        if where in ("imported", "imported-kms"):
            id = self._id("Bucket")
            return s3.Bucket.from_bucket_name(self.stack, id, id.lower())
        if where == "imported-arn":
            id = self._id("Bucket")
            return s3.Bucket.from_bucket_arn(self.stack, id, f"arn:aws:s3:::{id.lower()}")
        key = self.key("new") if where == "kms" else None
        bucket = s3.Bucket(self._scope(where), self._id("Bucket"), enforce_ssl=True, encryption_key=key)
        acknowledge(bucket, "AwsSolutions-S1", "the user's bucket: access logs are the user's choice")
        return bucket

    def bucket_key(self, where: str) -> kms.IKey | None:
        """The key of an "imported-kms" bucket, which the bucket itself does not know."""
        return self.key("imported") if where == "imported-kms" else None

    def queue(self, where: str, *, with_dlq: bool = True) -> sqs.IQueue | None:
        if where in ("none", "default"):
            return None
        if where.startswith("imported"):
            return sqs.Queue.from_queue_arn(self.stack, self._id("Queue"), f"arn:aws:sqs:{REGION}:{self.stack.account}:users-queue")
        scope = self._scope(where)
        dlq = None
        if with_dlq:
            dead = sqs.Queue(scope, self._id("Dlq"), enforce_ssl=True, retention_period=cdk.Duration.days(14))
            acknowledge(dead, "AwsSolutions-SQS3", "the user's dead-letter queue has no DLQ of its own")
            dlq = sqs.DeadLetterQueue(queue=dead, max_receive_count=3)
        queue = sqs.Queue(
            scope, self._id("Queue"), enforce_ssl=True, visibility_timeout=cdk.Duration.hours(2), dead_letter_queue=dlq
        )
        if not with_dlq:
            acknowledge(queue, "AwsSolutions-SQS3", "the user's dead-letter queue has no DLQ of its own")
        return queue

    def table(self, where: str) -> dynamodb.ITable | None:
        if where in ("none", "default"):
            return None
        if where == "imported":
            return dynamodb.Table.from_table_name(self.stack, self._id("Table"), "users-answers")
        if where == "imported-arn":
            return dynamodb.Table.from_table_arn(
                self.stack, self._id("Table"), f"arn:aws:dynamodb:{REGION}:{self.stack.account}:table/users-answers"
            )
        return dynamodb.Table(
            self._scope(where),
            self._id("Table"),
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute="expires_at",
        )

    def log_group(self, where: str) -> logs.ILogGroup | None:
        if where in ("none", "default"):
            return None
        if where == "imported":
            return logs.LogGroup.from_log_group_name(self.stack, self._id("Logs"), "/users/own-logs")
        if where == "imported-arn":
            return logs.LogGroup.from_log_group_arn(
                self.stack, self._id("Logs"), f"arn:aws:logs:{REGION}:{self.stack.account}:log-group:/users/own-logs:*"
            )
        return logs.LogGroup(self._scope(where), self._id("Logs"), retention=logs.RetentionDays.ONE_MONTH)

    def role(self, where: str, service: str) -> iam.IRole | None:
        if where in ("none", "default"):
            return None
        if where.startswith("imported"):
            return iam.Role.from_role_arn(self.stack, self._id("Role"), f"arn:aws:iam::{self.stack.account}:role/users-role")
        return iam.Role(self._scope(where), self._id("Role"), assumed_by=iam.ServicePrincipal(service))

    def function(self, where: str) -> lambda_.IFunction | None:
        if where in ("none", "default"):
            return None
        if where.startswith("imported"):
            return lambda_.Function.from_function_arn(
                self.stack, self._id("Function"), f"arn:aws:lambda:{REGION}:{self.stack.account}:function:users-handler"
            )
        scope = self._scope(where)
        role = iam.Role(scope, self._id("FunctionRole"), assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        return lambda_.Function(
            scope,
            self._id("Function"),
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="index.handler",
            code=lambda_.Code.from_inline("def handler(event, context):\n    return event\n"),
            role=role,
        )

    def model(self, kind: str) -> Any:
        return model(kind, self.stack.account)

    def topic(self) -> sns.ITopic:
        return sns.Topic(self.stack, self._id("Topic"), enforce_ssl=True, master_key=self.key("new"))


def acknowledge(construct: Any, finding: str, reason: str) -> None:
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=finding, reason=reason))


def model(kind: str, account: str = ACCOUNT) -> Any:
    from genai_pacer import BedrockModel

    return {
        "foundation": lambda: BedrockModel.foundation("amazon.nova-lite-v1:0"),
        "us-profile": lambda: BedrockModel.from_id("us.anthropic.claude-haiku-4-5-20251001-v1:0"),
        "global-profile": lambda: BedrockModel.from_id("global.anthropic.claude-sonnet-4-20250514-v1:0"),
        "app-profile": lambda: BedrockModel.application_inference_profile(
            f"arn:aws:bedrock:{REGION}:{account}:application-inference-profile/abc123def456",
            copies="us.amazon.nova-lite-v1:0",
        ),
    }[kind]()


MODELS = ("foundation", "us-profile", "global-profile", "app-profile")
KEYS = ("none", "new", "imported", "other-stack")
KEYS3 = ("none", "new", "imported")  # other-stack keys: AnswerStore, LlmEndpoint, ModelInvocationLogging
MODELS3 = ("foundation", "global-profile", "app-profile")  # every kind: BoundedMap, QueuedInference
WHERE = ("default", "new", "imported", "other-stack")


def converse(prompt_path: str = "$.prompt") -> Any:
    from genai_pacer import ConverseRequest

    return ConverseRequest(prompt=sfn.JsonPath.string_at(prompt_path), max_tokens=300)


def state_machine_options(choice: str, r: Resources, *, express: bool = False) -> Any:
    """The StateMachineOptions a user may give: their own log group, key or role."""
    from genai_pacer import StateMachineOptions

    kind = sfn.StateMachineType.EXPRESS if express or choice == "express" else sfn.StateMachineType.STANDARD
    if choice in ("default", "express"):
        return StateMachineOptions(state_machine_type=kind) if kind == sfn.StateMachineType.EXPRESS else None
    where = choice.split(":", 1)[1]
    if choice.startswith("log-group"):
        return StateMachineOptions(log_group=r.log_group(where), state_machine_type=kind)
    if choice.startswith("key"):
        return StateMachineOptions(encryption_key=r.key(where), state_machine_type=kind)
    if choice.startswith("role"):
        return StateMachineOptions(role=r.role(where, "states.amazonaws.com"), state_machine_type=kind)
    raise ValueError(choice)


SM_OPTIONS = ("default", "log-group:new", "key:imported", "role:new", "role:imported")


def store(choice: str, r: Resources, scope: Any) -> Any:
    """An AnswerStore as a user shares it: the default, on their own table, or with their own key."""
    from genai_pacer import AnswerStore

    if choice == "none":
        return None
    if choice == "default":
        return AnswerStore(scope, "Store")
    if choice.startswith("table:"):
        return AnswerStore(scope, "Store", table=r.table(choice.split(":", 1)[1]))
    if choice.startswith("key:"):
        return AnswerStore(scope, "Store", encryption_key=r.key(choice.split(":", 1)[1]))
    raise ValueError(choice)


STORES = ("default", "table:new", "table:imported", "key:imported")
STORES3 = ("default", "table:imported", "key:imported")


# --- the constructs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Matrix:
    """One construct's options, which combinations are valid, and how to build one."""

    construct: str
    dimensions: Mapping[str, Sequence[str]]
    build: Callable[[cdk.Stack, dict[str, str], Resources], Any]
    valid: Callable[[dict[str, str]], bool] = field(default=lambda _: True)

    def combinations(self) -> list[dict[str, str]]:
        return pairwise(self.dimensions, self.valid)


def _answer_store(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import AnswerStore

    ttls: dict[str, dict[str, Any]] = {
        "default": {},
        "none": {"answer_ttl": None},
        "7-days": {"answer_ttl": cdk.Duration.days(7)},
    }
    ttl = ttls[o["answer_ttl"]]
    return AnswerStore(stack, "Store", table=r.table(o["table"]), encryption_key=r.key(o["encryption_key"]), **ttl)


def _answer_router(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import AnswerRouter

    return AnswerRouter(
        stack,
        "Router",
        answer_store=store(o["answer_store"], r, stack),
        model=r.model(o["model"]),
        encryption_key=r.key(o["encryption_key"]),
        function_url=o["function_url"] == "on",
        reserved_concurrency={"none": None, "4": 4}[o["reserved_concurrency"]],
        write_back=o["write_back"] == "on",
    )


def _queued_inference(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import QueuedInference, planning

    if o["max_concurrency"] == "plan":
        profile = planning.TokenProfile(input_tokens=1_500, output_tokens=250, max_tokens=385, burndown=5)
        concurrency: Any = planning.sustainable_rate(profile, tpm_quota=200_000, call_seconds=5)
    else:
        concurrency = 4
    target, _, keys = o["queue_keys"].partition(":")
    model = r.model(o["model"])
    ledger = None
    if o.get("ledger", "none") != "none":  # the quota's shared ledger: a default table, or one with the user's key
        from genai_pacer import ModelQuota, QuotaLedger

        quota = ModelQuota(stack, "Quota", model=model, tpm_quota=400_000, burndown=5)
        ledger = QuotaLedger(stack, "Ledger", quota=quota, encryption_key=r.key("new") if o["ledger"] == "kms" else None)
    return QueuedInference(
        stack,
        "Queued",
        model=model,
        max_concurrency=concurrency,
        queue=r.queue(o["queue"]),
        dead_letter_queue=r.queue(o["dead_letter_queue"], with_dlq=False),
        queue_encryption_key=r.key(keys if target in ("queue", "both") else "none"),
        dead_letter_queue_encryption_key=r.key(keys if target in ("dlq", "both") else "none"),
        encryption_key=r.key(o["encryption_key"]),
        answer_store=store(o["answer_store"], r, stack),
        ledger=ledger,
    )


def _queued_valid(o: dict[str, str]) -> bool:
    """Your own queue brings its own DLQ and encryption; your own DLQ brings its own encryption."""
    own_queue = o.get("queue", "default") != "default"
    own_dlq = o.get("dead_letter_queue", "default") != "default"
    keys = o.get("queue_keys", "none")
    return not (own_queue and (own_dlq or keys != "none")) and not (own_dlq and keys.startswith(("dlq", "both")))


def _scheduled_precompute(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import ScheduledPrecompute

    items: dict[str, Any]
    if o["items"] == "inline":
        items = {"items": [{"key": f"ticker#{t}", "ticker": t} for t in ("AAPL", "AMZN")]}
    else:
        where = o["items"].split(":", 1)[1]
        items = {"items_bucket": r.bucket(where), "items_key": "tickers/items.jsonl", "items_bucket_key": r.bucket_key(where)}
    model = r.model(o["model"])
    ledger, plan = _ledger_share(stack, model, o.get("ledger", "none"), r, "Precompute")
    return ScheduledPrecompute(
        stack,
        "Precompute",
        answer_store=store(o["answer_store"], r, stack),
        model=model,
        ledger=ledger,
        request=converse("$.item.ticker"),
        max_concurrency=plan or 4,
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6", time_zone=cdk.TimeZone.AMERICA_NEW_YORK),
        dead_letter_queue=r.queue(o["dead_letter_queue"], with_dlq=False),
        state_machine_options=state_machine_options(o["state_machine_options"], r),
        **items,
    )


def _batch_precompute(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import BatchPrecompute, BoundedMap

    fallback = None
    if o["on_demand_fallback"] == "state-machine":
        fallback = BoundedMap(stack, "Fallback", max_concurrency=2, model=r.model("foundation"), request=converse()).state_machine
    invoke = o["invocation_type"] == "InvokeModel"
    which, _, where = o["buckets"].partition(":")
    return BatchPrecompute(
        stack,
        "Batch",
        model=r.model(o["model"]),
        answer_store=store(o["answer_store"], r, stack) if o["answer_store"] != "default" else None,
        max_tokens=None if invoke else 300,
        invocation_type=o["invocation_type"],  # type: ignore[arg-type]
        input_bucket=r.bucket(where if which in ("input", "both") else "default"),
        output_bucket=r.bucket(where if which in ("output", "both") else "default"),
        items_bucket=r.bucket(o["items_bucket"]),
        input_bucket_key=r.bucket_key(where if which in ("input", "both") else "default"),
        output_bucket_key=r.bucket_key(where if which in ("output", "both") else "default"),
        items_bucket_key=r.bucket_key(o["items_bucket"]),
        encryption_key=r.key(o["encryption_key"]),
        access_logs_bucket=r.bucket(o["access_logs_bucket"]),
        encryption_key_for_logs=r.key(o["encryption_key_for_logs"]),
        on_demand_fallback=fallback,
        state_machine_options=state_machine_options(o["state_machine_options"], r),
    )


def _batch_valid(o: dict[str, str]) -> bool:
    """With both buckets your own, no new bucket takes a key or access logs."""
    both_own = o.get("buckets", "default").startswith("both:")
    return not (both_own and (o.get("encryption_key", "none") != "none" or o.get("access_logs_bucket", "default") != "default"))


def _bounded_map(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import BoundedMap, NativeRequest, StateMachineOptions, planning

    if o["max_concurrency"] == "plan":
        profile = planning.TokenProfile(input_tokens=2_500, output_tokens=300, max_tokens=440, burndown=5)
        concurrency: Any = planning.sustainable_rate(profile, tpm_quota=400_000, call_seconds=6)
    else:
        concurrency = 4
    call: dict[str, Any]
    if o["request"] == "item-processor":  # the user's own chain: a Bedrock task of aws-cdk-lib
        foundation = bedrock.FoundationModel.from_foundation_model_id(
            stack, "UserModel", bedrock.FoundationModelIdentifier.AMAZON_NOVA_LITE_V1_0
        )
        body = sfn.TaskInput.from_object({"messages": [{"role": "user", "content": [{"text": sfn.JsonPath.string_at("$.prompt")}]}]})
        call = {"item_processor": tasks.BedrockInvokeModel(stack, "UserTask", model=foundation, body=body)}
    else:
        request = {
            "converse": converse(),
            "native": NativeRequest({"prompt": sfn.JsonPath.string_at("$.prompt"), "max_gen_len": 200}),
        }[o["request"]]
        call = {"model": r.model(o["model"]), "request": request}
    if o.get("ledger", "none") != "none":  # the quota's shared ledger: the Map holds a share, reserves and settles
        from genai_pacer import ModelQuota, QuotaLedger

        quota = ModelQuota(stack, "Quota", model=call["model"], tpm_quota=400_000, burndown=5)
        share = quota.share("Map", quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=300),
                            fraction=0.5, call_seconds=6)
        concurrency = share if o["max_concurrency"] == "plan" else concurrency
        call["ledger"] = QuotaLedger(stack, "Ledger", quota=quota,
                                     encryption_key=r.key("new") if o["ledger"] == "kms" else None)
    options = StateMachineOptions(
        log_group=r.log_group(o["log_group"]),
        encryption_key=r.key(o["log_key"]),
        role=r.role(o["role"], "states.amazonaws.com"),
        state_machine_type=getattr(sfn.StateMachineType, o["type"]),
    )
    return BoundedMap(stack, "Map", max_concurrency=concurrency, state_machine_options=options, **call)


def _ledger_share(stack: cdk.Stack, model: Any, kind: str, r: Resources, share: str) -> tuple[Any, Any]:
    """The quota's shared ledger ("default" table or one with the user's "kms" key) and the plan of a share
    drawn under `share` (the consumer's construct id); (None, None) for "none"."""
    if kind == "none":
        return None, None
    from genai_pacer import ModelQuota, QuotaLedger

    quota = ModelQuota(stack, "Quota", model=model, tpm_quota=400_000, burndown=5)
    plan = quota.share(share, quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=300),
                       fraction=0.5, call_seconds=6)
    return QuotaLedger(stack, "Ledger", quota=quota, encryption_key=r.key("new") if kind == "kms" else None), plan


def _bounded_distributed_map(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import BoundedDistributedMap

    model = r.model(o["model"])
    ledger, plan = _ledger_share(stack, model, o.get("ledger", "none"), r, "DistMap")
    return BoundedDistributedMap(
        stack,
        "DistMap",
        max_concurrency=plan or 8,
        ledger=ledger,
        model=model,
        request=converse(),
        items_bucket=r.bucket(o["items_bucket"]),  # type: ignore[arg-type]
        items_key=o["items_key"],
        items_format="json" if o["items_key"].endswith(".json") else "jsonl",
        results_bucket=r.bucket(o["results_bucket"]),
        items_bucket_key=r.bucket_key(o["items_bucket"]),
        results_bucket_key=r.bucket_key(o["results_bucket"]),
        child_execution_type=getattr(sfn.StateMachineType, o["child_execution_type"]),
        state_machine_options=state_machine_options(o["state_machine_options"], r),
    )


def _load_replay(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import LoadReplay, ModelQuota, planning

    model = r.model(o["model"])
    profile = planning.TokenProfile(input_tokens=1_000, output_tokens=200, max_tokens=400)
    share = ledger = None
    if o["share"] in ("quota", "ledger"):
        quota = ModelQuota(stack, "Quota", model=model, tpm_quota=1_000_000)
        share = quota.share("Replay", profile, call_seconds=6, fraction=0.5)
        if o["share"] == "ledger":  # the run as a process consumer of the quota's shared ledger
            from genai_pacer import QuotaLedger

            ledger = QuotaLedger(stack, "Ledger", quota=quota)
    results = r.bucket(o["results_bucket"])
    load = {"concurrency": 4} if o["loop"] == "closed" else {"rate_per_minute": 30}
    return LoadReplay(
        stack,
        "Replay",
        model=model,
        prompts_bucket=r.bucket(o["prompts_bucket"]),  # type: ignore[arg-type]
        prompts_key="prompts/recorded.jsonl",
        prompts_bucket_key=r.bucket_key(o["prompts_bucket"]),
        requests=100,
        profile=profile,
        api=o["api"],  # type: ignore[arg-type]
        share=share,
        ledger=ledger,
        results_bucket=results,
        results_bucket_key=r.bucket_key(o["results_bucket"]),
        retention=None if o["results_bucket"].startswith("imported") else cdk.Duration.days(7),
        encryption_key=r.key(o["encryption_key"]) if results is None else None,
        encryption_key_for_logs=r.key(o["encryption_key_for_logs"]),
        state_machine_options=state_machine_options(o["state_machine_options"], r),
        **load,
    )


def _parallel_prompts(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import ParallelPrompts

    synthesis: dict[str, Any] = {
        "none": {},
        "same-model": {"synthesis": converse("$.answers.A")},
        "other-model": {"synthesis": converse("$.answers.A"), "synthesis_model": r.model("us-profile")},
    }[o["synthesis"]]
    model = r.model(o["model"])
    ledger = None
    if o.get("ledger", "none") != "none":  # a share drawn under the construct's id, of the two branches' calls
        from genai_pacer import ModelQuota, QuotaLedger

        quota = ModelQuota(stack, "Quota", model=model, tpm_quota=400_000, burndown=5)
        quota.share("Parallel", quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=300), calls=2,
                    call_seconds=6)
        ledger = QuotaLedger(stack, "Ledger", quota=quota, encryption_key=r.key("new") if o["ledger"] == "kms" else None)
    return ParallelPrompts(
        stack,
        "Parallel",
        model=model,
        ledger=ledger,
        prompts={"A": converse(), "B": converse()},
        state_machine_options=state_machine_options(o["state_machine_options"], r, express=o["type"] == "EXPRESS"),
        **synthesis,
    )


def _sync_execution_url(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import BoundedMap, ParallelPrompts, SyncExecutionUrl

    options = state_machine_options(o["state_machine_options"], r, express=True)
    if o["state_machine"] == "ParallelPrompts":
        machine = ParallelPrompts(
            stack, "Parallel", model=r.model("foundation"), prompts={"A": converse()}, state_machine_options=options
        ).state_machine
    else:
        machine = BoundedMap(
            stack, "Map", max_concurrency=2, model=r.model("foundation"), request=converse(), state_machine_options=options
        ).state_machine
    url = SyncExecutionUrl(
        stack,
        "Url",
        state_machine=machine,
        encryption_key=r.key(o["encryption_key"]),
        log_retention={"default": None, "one-week": logs.RetentionDays.ONE_WEEK}[o["log_retention"]],
        max_concurrent_executions={"none": None, "10": 10}[o["max_concurrent_executions"]],
    )
    url.grant_invoke_url(r.role("new", "ecs-tasks.amazonaws.com"))  # type: ignore[arg-type]
    return url


IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04"


def _llm_endpoint(stack: cdk.Stack, o: dict[str, str], r: Resources, scope: Any = None) -> Any:
    from genai_pacer import InferenceComponentOptions, LlmEndpoint

    image: dict[str, Any] = {"image_uri": IMAGE}
    if o["image_repository"] == "new":
        repository = ecr.Repository(stack, "UserRepository", image_scan_on_push=True)
        image = {"image_uri": repository.repository_uri_for_tag("v1"), "image_repository": repository}
    elif o["image_repository"] == "imported":
        image = {
            "image_uri": f"{stack.account}.dkr.ecr.{REGION}.amazonaws.com/users-tgi:v1",
            "image_repository": ecr.Repository.from_repository_name(stack, "UserRepository", "users-tgi"),
        }
    component = None
    if o.get("inference_component", "none") != "none":
        component = InferenceComponentOptions(
            min_memory_mb=24_576, max_instances=2, min_instances=0 if o["inference_component"] == "scale-to-zero" else 1
        )
    return LlmEndpoint(
        scope or stack,
        "Llm",
        instance_type=o.get("instance_type", "ml.g5.2xlarge"),
        model_data_bucket=r.bucket(o["model_data_bucket"]),  # type: ignore[arg-type]
        model_data_bucket_key=r.bucket_key(o["model_data_bucket"]),
        model_data_key=o["model_data_key"],
        volume_encryption_key=r.key(o.get("volume_encryption_key", "none")),
        inference_component=component,
        environment={"SM_NUM_GPUS": "1"},
        **image,
    )


def _endpoint_scaling(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import EndpointScaling, PeakWindow

    props: dict[str, Any] = {}
    if o["endpoint"] == "name":
        endpoint: Any = "users-endpoint"
    else:
        endpoint = _llm_endpoint(
            stack,
            {
                "image_repository": "default",
                "model_data_bucket": "imported",
                "model_data_key": "mistral-7b/",
                "inference_component": {"llm": "none", "llm-component": "component", "llm-zero": "scale-to-zero"}[
                    o["endpoint"]
                ],
            },
            r,
        )
    if o["peaks"] == "one":
        props["peaks"] = [PeakWindow(capacity=4, start="08:00", end="11:00", days="MON-FRI", time_zone="Europe/Berlin")]
        props["lead_time"] = cdk.Duration.minutes(20)
        if o["endpoint"] == "name":
            props["model_load_time"] = cdk.Duration.minutes(15)
    if o["alarm_actions"] == "topic":
        props["alarm_actions"] = [cw_actions.SnsAction(r.topic())]
    return EndpointScaling(
        stack,
        "Scaling",
        endpoint=endpoint,
        target_concurrency=4,
        max_capacity=8,
        scale_to_zero=o["endpoint"] == "llm-zero",
        **props,
    )


def _invocation_logging(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import ModelInvocationLogging

    return ModelInvocationLogging(
        stack,
        "InvocationLogs",
        cloudwatch_logs=o["cloudwatch_logs"] == "on",
        log_group=r.log_group(o["log_group"]),
        s3_delivery=o["s3_delivery"] == "on",
        bucket=r.bucket(o["bucket"]),
        bucket_key=r.bucket_key(o["bucket"]),
        encryption_key=r.key(o["encryption_key"]),
        server_access_logs_bucket=r.bucket(o["server_access_logs_bucket"]),
    )


def _invocation_logging_valid(o: dict[str, str]) -> bool:
    """Logs go somewhere; a log group only with CloudWatch Logs; access logs only for a new bucket;
    a key only when the construct creates a log group or a bucket for it."""
    cloudwatch = o.get("cloudwatch_logs", "on") == "on"
    s3_on = o.get("s3_delivery", "on") == "on"
    if not cloudwatch and ("s3_delivery" in o and not s3_on or o.get("log_group", "default") != "default"):
        return False
    own_access_logs = o.get("server_access_logs_bucket", "default") != "default"
    if own_access_logs and ("s3_delivery" in o and not s3_on or o.get("bucket", "default") != "default"):
        return False
    if o.get("encryption_key", "none") != "none" and all(k in o for k in ("cloudwatch_logs", "log_group", "s3_delivery", "bucket")):
        new_log_group = cloudwatch and o["log_group"] == "default"
        new_bucket = s3_on and o["bucket"] == "default"
        return new_log_group or new_bucket
    return True


def _latency_dashboard(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import (
        BoundedMap,
        LatencyDashboard,
        QueuedInference,
        SyncExecutionUrl,
        TpmQuota,
        WatchedModel,
    )

    watched: Any = r.model(o["model"])
    if o["quota"] == "tpm":
        watched = WatchedModel(watched, quota=TpmQuota(tpm_quota=400_000, alarm_fraction=0.8), burndown=5)
    actions = [cw_actions.SnsAction(r.topic())] if o["alarm_actions"] == "topic" else []
    dashboard = LatencyDashboard(stack, "Dashboard", models=[watched], alarm_actions=actions)
    if o["add"] == "queued":
        dashboard.add_queued_inference(QueuedInference(stack, "Queued", model=r.model(o["model"]), max_concurrency=4))
    elif o["add"] == "state-machine":
        dashboard.add_state_machine(BoundedMap(stack, "Map", max_concurrency=2, model=r.model(o["model"]), request=converse()))
    elif o["add"] == "sync-url":
        from genai_pacer import ParallelPrompts, StateMachineOptions

        machine = ParallelPrompts(
            stack,
            "Parallel",
            model=r.model(o["model"]),
            prompts={"A": converse()},
            state_machine_options=StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS),
        )
        dashboard.add_sync_execution_url(SyncExecutionUrl(stack, "Url", state_machine=machine.state_machine))
    elif o["add"] == "endpoint":
        dashboard.add_endpoint(
            _llm_endpoint(stack, {"image_repository": "default", "model_data_bucket": "imported", "model_data_key": "m/"}, r)
        )
    return dashboard


def _model_quota(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import BoundedMap, ModelQuota, QueuedInference

    chosen = r.model(o["model"])
    quota = ModelQuota(
        stack,
        "Quota",
        model=chosen,
        tpm_quota=400_000,
        burndown=5,
        require_shares=o["require_shares"] == "on",
        service_quota_code={"none": None, "code": "L-12345678"}[o["service_quota_code"]],
    )
    profile = quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)
    if o["consumer"] in ("map", "both"):
        BoundedMap(
            stack,
            "Map",
            max_concurrency=quota.share("Map", profile, fraction=0.3, call_seconds=6),
            model=chosen,
            request=converse(),
        )
    if o["consumer"] in ("queued", "both"):
        QueuedInference(
            stack,
            "Queued",
            model=chosen,
            max_concurrency=quota.share("Queued", profile, fraction=0.5, call_seconds=6),
            max_output_tokens=440,
        )
    return quota


def _quota_ledger(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import ModelQuota, QuotaLedger

    quota = ModelQuota(stack, "Quota", model=r.model(o["model"]), tpm_quota=400_000, burndown=5)
    quota.share("Worker", quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=440), fraction=0.5,
                call_seconds=6)
    ledger = QuotaLedger(stack, "Ledger", quota=quota, table=r.table(o["table"]), encryption_key=r.key(o["encryption_key"]))
    if o["grant"] != "none":
        getattr(ledger, f"grant_{o['grant']}")(iam.Role(stack, "UserWorker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    return ledger


def _prompt_experiment(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import ExperimentVariant, ManagedPrompt, PromptExperiment, TextPrompt

    first = r.model("us-profile")
    second = r.model(o["treatment_model"])
    application = {
        "default": None,
        "new": lambda: appconfig.Application(stack, "UserApplication"),
        "imported": lambda: appconfig.Application.from_application_id(stack, "UserApplication", "abc1234"),
    }[o["application"]]
    strategy = {
        "default": None,
        "new": lambda: appconfig.DeploymentStrategy(
            stack, "UserStrategy", rollout_strategy=appconfig.RolloutStrategy.CANARY_10_PERCENT_20_MINUTES
        ),
        "imported": lambda: appconfig.DeploymentStrategy.from_deployment_strategy_id(
            stack, "UserStrategy", appconfig.DeploymentStrategyId.ALL_AT_ONCE
        ),
    }[o["deployment_strategy"]]
    experiment = PromptExperiment(
        stack,
        "Experiment",
        experiment_name="support-answer",
        variants=[
            ExperimentVariant("control", first, 90, TextPrompt("Answer: {{question}}"), max_tokens=400),
            ExperimentVariant("treatment", second, 10, TextPrompt("Steps, then: {{question}}"), max_tokens=400)
            if o["treatment_prompt"] == "text"
            else ExperimentVariant(
                "treatment", second, 10, ManagedPrompt(f"arn:aws:bedrock:{REGION}:{stack.account}:prompt/PROMPT12AB", "3")
            ),
        ],
        application=application() if application else None,
        deployment_strategy=strategy() if strategy else None,
        encryption_key=r.key(o["encryption_key"]),
        fallback_on_alarm=o["fallback_on_alarm"] == "on",
    )
    handler = r.function(o["function"])
    if handler is not None:
        experiment.add_to_function(handler)  # type: ignore[arg-type]
    return experiment


def _search_target(stack: cdk.Stack, target: str) -> dict[str, Any]:
    if target == "collection":
        encryption = aoss.CfnSecurityPolicy(
            stack,
            "Encryption",
            name="docs-enc",
            type="encryption",
            policy='{"Rules": [{"ResourceType": "collection", "Resource": ["collection/docs"]}], "AWSOwnedKey": true}',
        )
        collection = aoss.CfnCollection(stack, "Collection", name="docs", type="VECTORSEARCH")
        collection.add_dependency(encryption)
        return {"collection": collection}
    endpoint = "https://search-docs-abc.us-east-1.es.amazonaws.com"
    if target == "domain-imported":
        return {"domain": opensearch.Domain.from_domain_endpoint(stack, "UserDomain", endpoint)}
    raise ValueError(target)


def _hybrid_search_pipeline(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import HybridSearchPipeline

    return HybridSearchPipeline(
        stack,
        "Hybrid",
        pipeline_name="chunks-hybrid",
        weights=(0.3, 0.7),
        encryption_key=r.key(o["encryption_key"]),
        log_retention={"default": None, "one-week": logs.RetentionDays.ONE_WEEK}[o["log_retention"]],
        **_search_target(stack, o["target"]),
    )


def _vector_index_settings(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import VectorIndexSettings

    return VectorIndexSettings(
        stack,
        "Index",
        index_name="chunks",
        dimension=1024,
        engine=o["engine"],
        encryption_key=r.key(o["encryption_key"]),
        metadata_fields={"tenant": "keyword"},
        **_search_target(stack, o["target"]),
    )


def _runtime_layer(stack: cdk.Stack, o: dict[str, str], r: Resources) -> Any:
    from genai_pacer import RuntimeLayer

    layer = RuntimeLayer(
        stack,
        "Layer",
        compatible_architectures={"default": None, "arm64": [lambda_.Architecture.ARM_64]}[o["architectures"]],
    )
    handler = r.function(o["function"])
    if isinstance(handler, lambda_.Function):
        handler.add_layers(layer)
    return layer


MATRICES: tuple[Matrix, ...] = (
    Matrix(
        "AnswerStore",
        {"table": WHERE + ("imported-arn",), "encryption_key": KEYS, "answer_ttl": ("default", "none")},
        _answer_store,
        valid=lambda o: o.get("table", "default") == "default" or o.get("encryption_key", "none") == "none",
    ),
    Matrix(
        "AnswerRouter",
        {
            "answer_store": STORES,
            "model": MODELS3,
            "encryption_key": KEYS3,
            "function_url": ("on", "off"),
            "reserved_concurrency": ("none", "4"),
            "write_back": ("on", "off"),
        },
        _answer_router,
    ),
    Matrix(
        "QueuedInference",
        {
            "queue": WHERE,
            "dead_letter_queue": ("default", "new", "imported"),
            "queue_keys": ("none", "queue:new", "dlq:imported", "both:new"),
            "encryption_key": KEYS3,
            "answer_store": STORES,
            "model": MODELS3,
            "max_concurrency": ("int", "plan"),
            "ledger": ("none", "default", "kms"),
        },
        _queued_inference,
        valid=_queued_valid,
    ),
    Matrix(
        "ScheduledPrecompute",
        {
            "items": ("inline", "bucket:new", "bucket:imported", "bucket:other-stack", "bucket:kms", "bucket:imported-kms"),
            "dead_letter_queue": ("none", "new", "imported", "other-stack"),
            "state_machine_options": SM_OPTIONS,
            "answer_store": STORES3,
            "model": MODELS3,
            "ledger": ("none", "default", "kms"),
        },
        _scheduled_precompute,
    ),
    Matrix(
        "BatchPrecompute",
        {
            "buckets": ("default", "input:new", "output:imported-arn", "both:imported", "both:other-stack", "both:imported-kms"),
            "items_bucket": ("default", "new", "imported", "imported-kms"),
            "access_logs_bucket": ("default", "new", "imported"),
            "encryption_key": KEYS3,
            "encryption_key_for_logs": KEYS3,
            "answer_store": STORES3,
            "on_demand_fallback": ("none", "state-machine"),
            "invocation_type": ("Converse", "InvokeModel"),
            "model": ("foundation", "global-profile"),
            "state_machine_options": SM_OPTIONS,
        },
        _batch_precompute,
        valid=_batch_valid,
    ),
    Matrix(
        "BoundedMap",
        {
            "model": MODELS,
            "log_group": WHERE + ("imported-arn",),
            "log_key": KEYS3,
            "role": ("default", "new", "imported"),
            "max_concurrency": ("int", "plan"),
            "request": ("converse", "native", "item-processor"),
            "type": ("STANDARD", "EXPRESS"),
            "ledger": ("none", "default", "kms"),
        },
        _bounded_map,
        valid=lambda o: (o.get("log_group", "default") == "default" or o.get("log_key", "none") == "none")
        and (o.get("ledger", "none") == "none" or o.get("request", "converse") == "converse"),
    ),
    Matrix(
        "BoundedDistributedMap",
        {
            "items_bucket": ("new", "imported", "imported-arn", "other-stack", "kms", "imported-kms"),
            "items_key": ("items.jsonl", "catalog/2026/items.json"),
            "results_bucket": ("default", "new", "imported", "imported-kms"),
            "child_execution_type": ("STANDARD", "EXPRESS"),
            "model": MODELS3,
            "state_machine_options": SM_OPTIONS,
            "ledger": ("none", "default", "kms"),
        },
        _bounded_distributed_map,
    ),
    Matrix(
        "ParallelPrompts",
        {
            "model": MODELS3,
            "synthesis": ("none", "same-model", "other-model"),
            "ledger": ("none", "default", "kms"),
            "state_machine_options": SM_OPTIONS,
            "type": ("STANDARD", "EXPRESS"),
        },
        _parallel_prompts,
    ),
    Matrix(
        "SyncExecutionUrl",
        {
            "state_machine": ("ParallelPrompts", "BoundedMap"),
            "encryption_key": KEYS3,
            "log_retention": ("default", "one-week"),
            "max_concurrent_executions": ("none", "10"),
            "state_machine_options": SM_OPTIONS,
        },
        _sync_execution_url,
    ),
    Matrix(
        "LlmEndpoint",
        {
            "model_data_bucket": ("new", "imported", "imported-arn", "other-stack", "imported-kms"),
            "model_data_key": ("mistral-7b/", "model.tar.gz", "weights/v1/model.tar.gz", "org/mistral-7b/"),
            "image_repository": ("default", "new", "imported"),
            "volume_encryption_key": KEYS,
            "instance_type": ("ml.g5.2xlarge", "ml.p3.2xlarge"),
            "inference_component": ("none", "component"),
        },
        _llm_endpoint,
    ),
    Matrix(
        "EndpointScaling",
        {
            "endpoint": ("llm", "llm-component", "llm-zero", "name"),
            "peaks": ("none", "one"),
            "alarm_actions": ("none", "topic"),
        },
        _endpoint_scaling,
    ),
    Matrix(
        "ModelInvocationLogging",
        {
            "cloudwatch_logs": ("on", "off"),
            "log_group": ("default", "new", "imported"),
            "s3_delivery": ("off", "on"),
            "bucket": ("default", "new", "imported-arn", "other-stack", "kms", "imported-kms"),
            "encryption_key": KEYS,
            "server_access_logs_bucket": ("default", "new"),
        },
        _invocation_logging,
        valid=_invocation_logging_valid,
    ),
    Matrix(
        "LatencyDashboard",
        {
            "model": ("foundation", "app-profile"),
            "quota": ("none", "tpm"),
            "alarm_actions": ("none", "topic"),
            "add": ("none", "queued", "state-machine", "sync-url", "endpoint"),
        },
        _latency_dashboard,
    ),
    Matrix(
        "ModelQuota",
        {
            "model": MODELS3,
            "require_shares": ("off", "on"),
            "service_quota_code": ("none", "code"),
            "consumer": ("none", "map", "queued", "both"),
        },
        _model_quota,
        valid=lambda o: not (o.get("require_shares") == "on" and o.get("consumer") == "none"),
    ),
    Matrix(
        "QuotaLedger",
        {"table": WHERE + ("imported-arn",), "encryption_key": KEYS, "model": MODELS3, "grant": ("none", "use", "read")},
        _quota_ledger,
        valid=lambda o: o.get("table", "default") == "default" or o.get("encryption_key", "none") == "none",
    ),
    Matrix(
        "PromptExperiment",
        {
            "application": ("default", "new", "imported"),
            "deployment_strategy": ("default", "new", "imported"),
            "encryption_key": KEYS3,
            "fallback_on_alarm": ("on", "off"),
            "treatment_model": MODELS3,
            "treatment_prompt": ("text", "managed"),
            "function": ("none", "new", "other-stack"),
        },
        _prompt_experiment,
    ),
    Matrix(
        "HybridSearchPipeline",
        {"target": ("collection", "domain-imported"), "encryption_key": KEYS, "log_retention": ("default", "one-week")},
        _hybrid_search_pipeline,
    ),
    Matrix(
        "VectorIndexSettings",
        {"target": ("collection", "domain-imported"), "encryption_key": KEYS, "engine": ("faiss", "lucene")},
        _vector_index_settings,
        # the key configures the domain handler's log group; a collection's index has no function
        valid=lambda o: not (o.get("target") == "collection" and o.get("encryption_key", "none") != "none"),
    ),
    Matrix(
        "LoadReplay",
        {
            "model": MODELS3,
            "prompts_bucket": ("imported", "new", "kms", "imported-kms", "other-stack"),
            "results_bucket": ("default", "new", "imported", "imported-kms"),
            "encryption_key": KEYS3,
            "loop": ("closed", "open"),
            "api": ("ConverseStream", "Converse"),
            "share": ("none", "quota", "ledger"),
            "encryption_key_for_logs": KEYS3,
            "state_machine_options": SM_OPTIONS,
        },
        _load_replay,
        # the key is the new results bucket's: with your own bucket it is refused as ignored
        valid=lambda o: o.get("results_bucket", "default") == "default" or o.get("encryption_key", "none") == "none",
    ),
    Matrix(
        "RuntimeLayer",
        {"architectures": ("default", "arm64"), "function": ("none", "new")},
        _runtime_layer,
    ),
)


@dataclass(frozen=True)
class Case:
    """One stack of the matrix: a construct with one combination of options."""

    construct: str
    index: int
    options: tuple[tuple[str, str], ...]

    @property
    def stack_name(self) -> str:
        return f"{self.construct}-{self.index}"

    @property
    def id(self) -> str:
        return f"{self.stack_name}[" + ",".join(f"{k}={v}" for k, v in self.options) + "]"


def cases() -> list[Case]:
    out = []
    for matrix in MATRICES:
        for index, combination in enumerate(matrix.combinations()):
            out.append(Case(matrix.construct, index, tuple(combination.items())))
    return out


MATRIX_BY_NAME = {m.construct: m for m in MATRICES}


def build_case(app: cdk.App, case: Case, number: int) -> Any:
    """The case's stack (and its owner stack, made when an option asks for one); returns the construct."""
    # Each case in an account of its own: account-wide checks (one invocation logging configuration
    # per account and Region, a ModelQuota counting every caller of its model) see one case only.
    env = cdk.Environment(account=str(100_000_000_000 + number), region=REGION)
    stack = cdk.Stack(app, case.stack_name, env=env)
    cdk.CfnWaitConditionHandle(stack, "NotEmpty")  # a ModelQuota alone creates no resource; CloudFormation needs one
    owners: list[cdk.Stack] = []

    def owner() -> cdk.Stack:
        if not owners:
            owners.append(cdk.Stack(app, f"{case.stack_name}-Owner", env=env))
        return owners[0]

    return MATRIX_BY_NAME[case.construct].build(stack, dict(case.options), Resources(stack, owner))
