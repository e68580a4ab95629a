"""PromptExperiment: a live A/B test of prompts and models whose split lives in AWS AppConfig.

The experiment document (variants, shares, salt; the schema `pacer_runtime.experiment` reads) is
a freeform AppConfig configuration with a JSON Schema validator, deployed to its own environment
with a deployment strategy. Changing the split is a new configuration version and an AppConfig
deployment, not a stack deployment, and that deployment rolls back if any guard alarm fires
during it or its bake time: for each variant, its error rate and its p90 latency (published by the
runtime with a Variant dimension) above a limit, counted only in periods with `guard_min_calls` calls.

AppConfig watches those alarms only while a deployment runs and bakes. After the bake time a guard
alarm still acts: an EventBridge rule on the alarm's change to ALARM starts a small Step Functions
workflow (AWS SDK integrations, no Lambda code) that deploys the fallback version, i.e. the same
document with every user on the control variant, with an immediate strategy. AppConfig would roll
back a deployment started while a monitored alarm is in ALARM, so the workflow disables the guard
alarms' actions during that deployment (AppConfig skips alarms whose actions are disabled) and
enables them again when it ends. During a deployment's bake time the rollback comes first and the
fallback follows (the workflow retries while the rollback holds the environment), so a guard alarm
always ends with everyone on the control variant. To restart the experiment, deploy a version with
the split you want. A fallback that cannot start (EventBridge may assume the workflow's role only for
this rule of this account) or that fails raises `fallback_failed_alarm`, with the guards' actions.

Handlers read the document through the AppConfig Lambda extension: `add_to_function(fn)` adds
its layer (for the function's architecture, in any Region, environment-agnostic stacks included),
`environment_variables()` and `grant_evaluate`; `pacer_runtime.experiment.ExperimentSource.from_environment()`
reads those variables. Services outside Lambda read it with the appconfigdata API.

AppConfig watches at most 5 alarms per environment. Up to two variants (4 guard alarms) each guard
is a monitor; with more, the environment monitors one composite alarm that is in ALARM when any
guard is. Assumed, not confirmed by AppConfig's documentation (aws-cdk-lib's Monitor accepts
composite alarms; AppConfig's Monitor type says only "CloudWatch alarm"): if AppConfig refused a
composite, creating the environment would fail at deploy, visibly; two variants never use one.

A new stack's first deployment is not rolled back for want of data. AppConfig rolls a deployment back
when a monitored alarm is in ALARM *or INSUFFICIENT_DATA* during it (`APPCONFIG_ROLLBACK_STATES`), and
CloudWatch creates every alarm in INSUFFICIENT_DATA until its first evaluation (PutMetricAlarm). So the
stack's deployment waits for the guards: a small custom resource (`guards_evaluated`) polls
DescribeAlarms until no guard is INSUFFICIENT_DATA (at most `GUARD_WAIT`), and the deployment depends
on it. After that first evaluation a guard cannot return to INSUFFICIENT_DATA for want of calls: each
guard's expression FILLs missing data with 0 and treats missing data as not breaching, so no traffic
is OK. The custom resource waits again whenever the set of guards changes (a new variant's guards
are new alarms), and later split changes (AppConfig deployments) stay guarded as before. If the wait
fails or times out, the stack goes on (the wait only decides when the deployment starts) and the
deployment may be rolled back: deploy the split again once the guards show OK.

Why not AppConfig's own experiments (AWS::AppConfig::ExperimentDefinition / ExperimentRun): they
assign treatments in the AppConfig agent (sticky per Entity-Id for the life of a run) and show
exposure and allocation, but they run on feature-flag profiles only (flag attribute values, no
JSON Schema validator), a run's treatment weights cannot change while it runs (only the exposure
can grow), runs are billed per hour, the agent must evaluate every request, and they offer no
analysis of the results (AppConfig points to CloudWatch or an analytics tool for that). Here the
split changes in place with a minimal, monotone move of users, assignment runs in process, and
`genai_pacer.experiments.verdict` does the analysis.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_appconfig as appconfig
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from constructs import Construct

from .._internal import nag as _nag
from .._internal.alarms import threshold_alarm
from .._internal.checks import (
    Checks,
    _show,
    duration_in,
    is_token,
    shown,
    token_kind,
    token_of_kind,
    warn,
)
from .._internal.docs import constructor_doc
from .._internal.metrics import variant_metric
from .._internal.runtime_constants import metrics_constants
from .._internal.secure import encrypted_log_group, log_key
from ..models import BedrockModel, as_bedrock_model, tier_fences
from ..step_functions.model_tasks import SERVICE_TIERS, ServiceTier, check_service_tier
from ..step_functions.state_machine import StateMachineOptions, model_state_machine

__all__ = [
    "DOCUMENT_SCHEMA",
    "ExperimentVariant",
    "ManagedPrompt",
    "PromptExperiment",
    "TextPrompt",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_PROMPT_ARN = re.compile(r"^arn:aws[a-z-]*:bedrock:[a-z0-9-]+:\d{12}:prompt/[A-Za-z0-9]{10}$")
_VERSION = re.compile(r"^[1-9]\d{0,4}$")
#: A {{name}} placeholder as the runtime fills it (pacer_runtime.experiment.render_template).
_PLACEHOLDER = re.compile(r"\{\{\s*[A-Za-z0-9_]+\s*\}\}")
#: AppConfig limits: deployment duration and final bake time, minutes.
_MAX_MINUTES = 1440
#: AppConfig watches at most this many alarms per environment (CreateEnvironment Monitors).
MAX_MONITORS = 5
#: AppConfig rolls a deployment back when a monitored alarm is in one of these states during it
#: (https://docs.aws.amazon.com/appconfig/latest/userguide/monitoring-deployments.html), unless the
#: alarm's actions are disabled (same page).
APPCONFIG_ROLLBACK_STATES = ("ALARM", "INSUFFICIENT_DATA")
#: The state CloudWatch gives an alarm it creates, until its first evaluation (botocore cloudwatch
#: 2010-08-01 PutMetricAlarm / PutCompositeAlarm documentation).
CREATED_ALARM_STATE = "INSUFFICIENT_DATA"
#: How long the stack's deployment waits at most for the guards' first evaluation (a metric alarm is
#: evaluated once a period; the guards' period is at least a minute) and how often it looks.
GUARD_WAIT = cdk.Duration.minutes(5)
GUARD_WAIT_POLL_SECONDS = 10
#: DescribeAlarms takes at most 100 AlarmNames per call (botocore cloudwatch AlarmNames, max 100).
DESCRIBE_ALARMS_MAX_NAMES = 100
#: The condition keys EventBridge sets when it assumes a target's role: the ARN of the rule that sent
#: the event and that rule's account
#: (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-conditions.html).
EVENTS_SOURCE_ARN_KEY = "aws:SourceArn"
#: Invocations of a rule's target that failed permanently, per rule of the default bus (AWS/Events,
#: https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-monitoring.html); sent only when not zero.
EVENTS_NAMESPACE = "AWS/Events"
EVENTS_FAILED_INVOCATIONS = "FailedInvocations"
EVENTS_RULE_DIMENSION = "RuleName"
#: The fallback rule's name: this prefix, the stack id's UUID and 8 characters of the construct's address.
#: AWS::StackId is arn:aws:cloudformation:<region>:<account>:stack/<name>/<uuid> (CloudFormation pseudo
#: parameters, https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/pseudo-parameter-reference.html),
#: so the UUID (36 characters) is element 2 after splitting on "/"; a rule name is at most 64 characters of
#: [.-_A-Za-z0-9] (cfn-lint schema AWS::Events::Rule Name).
RULE_NAME_PREFIX = "gp-fallback"
STACK_ID_UUID_INDEX = 2
STACK_UUID_LENGTH = 36
EVENTS_SOURCE_ACCOUNT_KEY = "aws:SourceAccount"
#: Variants per experiment: 2 guards each, and the fallback toggles them all (DisableAlarmActions
#: takes at most 100 names; the composite's rule at most 10,240 characters, about 80 alarm ARNs).
MAX_VARIANTS = 20

#: The experiment document's JSON Schema (draft-04, which AppConfig validators accept). The sum of
#: the shares and the uniqueness of names are beyond JSON Schema: the runtime refuses such a
#: document and keeps its last good one, and this construct refuses it at synth.
DOCUMENT_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "required": ["experiment", "salt", "control", "variants"],
    "additionalProperties": False,
    "properties": {
        "experiment": {"type": "string", "pattern": _NAME.pattern},
        "salt": {"type": "string", "minLength": 1},
        "control": {"type": "string", "pattern": _NAME.pattern},
        "variants": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "required": ["name", "share", "modelId", "prompt"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": _NAME.pattern},
                    "share": {"type": "number", "minimum": 0, "maximum": 100},
                    "modelId": {"type": "string", "minLength": 1},
                    "description": {"type": "string"},
                    "prompt": {
                        "oneOf": [
                            {"type": "object", "required": ["template"], "additionalProperties": False,
                             "properties": {"template": {"type": "string", "minLength": 1}}},
                            {"type": "object", "required": ["promptArn"], "additionalProperties": False,
                             "properties": {"promptArn": {"type": "string", "pattern": "^arn:aws[a-z-]*:bedrock:"}}},
                        ]
                    },
                    "system": {"type": "string", "minLength": 1},
                    "inferenceConfig": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "maxTokens": {"type": "integer", "minimum": 1},
                            "temperature": {"type": "number", "minimum": 0, "maximum": 1},
                            "topP": {"type": "number", "minimum": 0, "maximum": 1},
                            "stopSequences": {"type": "array", "items": {"type": "string", "minLength": 1}},
                        },
                    },
                    "additionalModelRequestFields": {"type": "object"},
                    # Converse's serviceTier as botocore models it: {"type": <ServiceTierType>}
                    "serviceTier": {
                        "type": "object",
                        "required": ["type"],
                        "additionalProperties": False,
                        "properties": {"type": {"type": "string", "enum": list(SERVICE_TIERS)}},
                    },
                },
            },
        },
    },
}


@dataclass(frozen=True)
class TextPrompt:
    """A prompt template held in the experiment document; `{{name}}` placeholders are filled at run time.

    system: an optional system prompt for this variant.
    """

    template: str
    system: str | None = None

    def __post_init__(self) -> None:
        with Checks("TextPrompt") as check:
            if check.text("template", self.template, fix="the user message, with {{variable}} placeholders") \
                    and not is_token(self.template):
                stray = [m for m in re.findall(r"\{\{[^{}]*\}\}", self.template) if not _PLACEHOLDER.fullmatch(m)]
                check.rule(not stray, f"template has {stray}, which the runtime would send to the model as written: "
                           "a placeholder is {{name}} with letters, digits and '_' only", id="template.bad-placeholder")
            check.text("system", self.system, optional=True)


@dataclass(frozen=True)
class ManagedPrompt:
    """A Bedrock Prompt Management prompt version (one variant per prompt: each arm is its own prompt
    or version). Its model settings live in the prompt: Converse refuses inferenceConfig, system and
    additionalModelRequestFields with a prompt ARN, so a variant with a ManagedPrompt sets none.

    prompt_arn: arn:aws:bedrock:<region>:<account>:prompt/<id> (without the version).
    version: the prompt version to call, e.g. "3". A draft is not callable reproducibly, so it is required.
    """

    prompt_arn: str
    version: str

    def __post_init__(self) -> None:
        with Checks("ManagedPrompt") as check:
            if check.text("prompt_arn", self.prompt_arn) and not is_token(self.prompt_arn):
                check.rule(
                    bool(_PROMPT_ARN.match(self.prompt_arn)),
                    f"prompt_arn={self.prompt_arn!r} is not a prompt ARN such as "
                    "'arn:aws:bedrock:us-east-1:111122223333:prompt/PROMPT12AB'; pass the ARN without ':<version>' and "
                    "the version separately",
                    id="prompt_arn.not-prompt-arn",
                )
            if check.text("version", self.version, fix="a published version number such as '3'") and not is_token(self.version):
                check.rule(bool(_VERSION.match(self.version)),
                           f"version={self.version!r} must be a published version number from 1, such as '3' "
                           "(DRAFT is not pinned)", id="version.not-published")

    @property
    def version_arn(self) -> str:
        return f"{self.prompt_arn}:{self.version}"


@dataclass(frozen=True)
class ExperimentVariant:
    """One arm: a model, a prompt and sampling, and its share of users in percent.

    name: 1-64 letters, digits, '.', '_' or '-' (it becomes the Variant metric dimension).
    model: the BedrockModel the variant calls (for a ManagedPrompt, the prompt version's model,
        which the grant needs).
    share: percent of users, 0..100; all variants' shares sum to 100.
    prompt: a TextPrompt or a ManagedPrompt.
    max_tokens / temperature / top_p / stop_sequences: Converse inferenceConfig. Default: unset.
    additional_fields: model-specific fields (additionalModelRequestFields), e.g. {"top_k": 40}.
    service_tier: the Bedrock service tier this variant's calls ask for ("priority", "default",
        "flex" or "reserved", botocore's ServiceTierType), so an A/B test can compare Priority with
        Standard ("default") on the user's path. A deploy-time string flows into the document as is
        (the document's JSON Schema refuses any other value when the configuration is deployed, and
        the runtime refuses it too). Default: unset, i.e. the tier the handler passes to
        `call_variant(service_tier=...)`, else none (served at default). The variant's metrics
        record the tier asked for and the tier that served each call (RequestedTier, ServedTier,
        ServedBelowRequestedTier; `PromptExperiment.metric_served_below_requested_tier`).
    """

    name: str
    model: BedrockModel
    share: float
    prompt: TextPrompt | ManagedPrompt
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop_sequences: Sequence[str] | None = None
    additional_fields: Mapping[str, Any] | None = field(default=None)
    service_tier: ServiceTier | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_bedrock_model(self.model))  # an aws_bedrock_alpha IBedrockInvokable too
        with Checks(f"ExperimentVariant {_show(self.name)}") as check:
            if is_token(self.name):
                check.fail(f"name is a deploy-time {token_kind(self.name)}, but a variant's name is checked at synth "
                           "(the control, the guard alarms, the Variant dimension): pass text", id="name.deploy-time")
            elif check.text("name", self.name, max_length=64):
                check.rule(bool(_NAME.match(self.name)),
                           f"name={self.name!r} may hold letters, digits, '.', '_' and '-' only, starting with a letter "
                           "or digit (it becomes a CloudWatch dimension value)", id="name.characters")
            check.instance("model", self.model, BedrockModel, "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-lite-v1:0')")
            # The document is JSON written at synth: a number token would be its encoding there (-1.9e289)
            at_synth = [n for n in ("share", "max_tokens", "temperature", "top_p") if is_token(getattr(self, n))]
            for name in at_synth:
                check.fail(f"{name} is a deploy-time token; the {'split' if name == 'share' else 'variant'} is written "
                           "into the experiment document at synth: pass a number (change it later with an AppConfig "
                           "deployment, not a stack update)", id=f"{name}.deploy-time-document")
            if "share" not in at_synth:
                check.number("share", self.share, minimum=0, maximum=100, fix="percent of users; all shares sum to 100")
            check.instance("prompt", self.prompt, (TextPrompt, ManagedPrompt), "a TextPrompt(...) or ManagedPrompt(...)")
            if "max_tokens" not in at_synth:
                check.integer("max_tokens", self.max_tokens, minimum=1, maximum=1_000_000, optional=True,
                              fix="size it from the p99 answer (planning.size_max_tokens)")
            for name in ("temperature", "top_p"):
                if name not in at_synth:
                    check.number(name, getattr(self, name), minimum=0, maximum=1, optional=True)
            if isinstance(self.stop_sequences, list | tuple) and any(token_kind(s) == "list" for s in self.stop_sequences):
                check.fail("stop_sequences is a deploy-time list, which the experiment document (JSON written at synth) "
                           "cannot hold: pass a list of strings (each may be a deploy-time string)", id="stop_sequences.deploy-time")
            elif self.stop_sequences is not None and check.each("stop_sequences", self.stop_sequences,
                                                                lambda n, s: check.text(n, s)):
                check.rule(len(self.stop_sequences) <= 2500, f"stop_sequences has {len(self.stop_sequences)} items; "
                           "Converse accepts at most 2,500", id="stop_sequences.too-many")
            if check.instance("additional_fields", self.additional_fields, Mapping, "a dict such as {'top_k': 40}",
                              optional=True):
                try:  # it is written into the JSON document: no NaN (not JSON), no objects JSON cannot hold
                    json.dumps(self.additional_fields, allow_nan=False)
                except (TypeError, ValueError) as error:
                    check.fail(f"additional_fields={self.additional_fields!r:.120} cannot be written into the JSON "
                               f"experiment document ({error}); pass strings, finite numbers, booleans, lists and dicts", id="additional_fields.not-json")
            check_service_tier(check, "service_tier", self.service_tier)
            if isinstance(self.prompt, ManagedPrompt):
                set_ = [n for n in ("max_tokens", "temperature", "top_p", "stop_sequences", "additional_fields")
                        if getattr(self, n) is not None]
                check.rule(not set_, f"{', '.join(set_)} cannot be set with a ManagedPrompt: Converse refuses "
                           "inferenceConfig and additionalModelRequestFields with a prompt ARN; set them in the prompt version", id="prompt.inference-config-with-managed-prompt")

    def document(self) -> dict[str, Any]:
        """This variant as the experiment document holds it."""
        entry: dict[str, Any] = {"name": self.name, "share": self.share, "modelId": self.model.model_id}
        if self.service_tier is not None:  # Converse takes it with a prompt ARN too (only the prompt's settings are refused)
            entry["serviceTier"] = {"type": self.service_tier}
        if isinstance(self.prompt, ManagedPrompt):
            entry["prompt"] = {"promptArn": self.prompt.version_arn}
            return entry
        entry["prompt"] = {"template": self.prompt.template}
        if self.prompt.system:
            entry["system"] = self.prompt.system
        config: dict[str, Any] = {k: v for k, v in (("maxTokens", self.max_tokens), ("temperature", self.temperature),
                                    ("topP", self.top_p)) if v is not None}
        if self.stop_sequences:
            config["stopSequences"] = list(self.stop_sequences)
        if config:
            entry["inferenceConfig"] = config
        if self.additional_fields:
            entry["additionalModelRequestFields"] = dict(self.additional_fields)
        return entry


@constructor_doc
class PromptExperiment(Construct):
    """A live A/B test of prompts and models: the split in AppConfig, guard alarms, a fallback to control.

    variants: required; at least two ExperimentVariants with distinct names, shares summing to 100. A
        treatment with share 0 is warned about (no user reaches it), naming it.
    control: the baseline variant's name; it must have a share above 0. Default: the first variant.
    experiment_name: the Experiment dimension and document name (1-64 letters, digits, '.', '_',
        '-'). Default: the construct id.
    salt: the assignment hash's salt. Default: experiment_name. A new salt reshuffles every user:
        change it only to start a fresh experiment.
    application: an existing AppConfig application. Default: a new one.
    deployment_strategy: how a new split is rolled out. Default: a new strategy that deploys at once
        (every process of the handler should assign under one split; a gradual rollout would mix two
        and fail the sample-ratio check) and then bakes for `bake_time`.
    bake_time: how long AppConfig watches the guard alarms after a deployment (0..24 h). Default:
        10 minutes (three guard periods and a margin).
    max_error_rate_percent: a variant's guard fires above this share of failed calls (0..100).
        Default: 5.
    max_p90_latency: a variant's guard fires when its p90 latency is above this (1 s..15 min).
        Default: 10 seconds.
    guard_min_calls: a period with fewer calls than this never counts as a breach of either guard
        (one failure of two calls is not 50%; one slow call of a small treatment is not its p90).
        Default: 20.
    guard_period / guard_evaluation_periods: each guard fires after this many consecutive breaching
        periods. Default: 1 minute x 3.
    fallback_on_alarm: after the bake time, a guard alarm deploys the fallback version (everyone on
        control). Default: True.
    alarm_actions: actions for every guard alarm (e.g. an SNS topic). Default: none.
    encryption_key / log_retention: for the log groups of the fallback workflow and of the guard wait
        (the function the stack's first deployment waits on). Default: the construct's one KMS key,
        with rotation, retained on delete ($1 a month while it exists, AWS KMS pricing page;
        docs/security.md, "KMS keys"); one month.

    Attributes: `application`, `environment`, `configuration` (the hosted configuration),
    `fallback_version` (CfnHostedConfigurationVersion), `deployment_strategy`, `alarms` (name ->
    Alarm, `<variant>-errors` and `<variant>-p90`), `fallback_state_machine` and `fallback_rule`
    (None without fallback_on_alarm; the rule is named, and `fallback_events_role`, the role EventBridge
    starts the workflow with, trusts events.amazonaws.com only for that rule's ARN in this account),
    `fallback_failed_alarm` (a fallback that could not start or failed; alarm_actions apply; not a guard),
    `document` and `fallback_document` (dicts), `experiment_name`.
    Grants: `grant_evaluate` (read the configuration, invoke every variant's model and prompt).
    `environment_variables()` gives a handler what `ExperimentSource.from_environment()` reads;
    `add_to_function(fn)` does all three for a Lambda function (with the AppConfig extension layer).
    `monitored_alarms` are what AppConfig watches (the guards, or `any_guard_alarm` past 5 alarms).
    `guards_evaluated`: the custom resource the stack's deployment waits on (no guard left
    INSUFFICIENT_DATA); `logs_key`: the key of both log groups.
    `fallback_acknowledgments`: the cdk-nag finding ids acknowledged on the fallback's role (its
    GetDeployment wildcard on this environment's deployments, nothing else).

    Quota (ModelQuota): the experiment itself calls no model; the handler you give it (`add_to_function`,
    `grant_evaluate`) does, and that handler is what a ModelQuota counts, once per model its variants
    call. It holds no RatePlan, so draw its share named after its construct id with `calls=` its cap
    (the function's reserved concurrency, or its event source's maximum concurrency). The split does not
    divide the share: an AppConfig deployment can move every user to one variant without a synth, so
    each variant's model quota counts the handler at its whole cap (a 90/10 split on two models draws the
    handler's full cap from both). Size the share's profile with the largest max_tokens of the variants
    on that model.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        variants: Sequence[ExperimentVariant],
        control: str | None = None,
        experiment_name: str | None = None,
        salt: str | None = None,
        application: appconfig.IApplication | None = None,
        deployment_strategy: appconfig.IDeploymentStrategy | None = None,
        bake_time: cdk.Duration | None = None,
        max_error_rate_percent: float = 5,
        max_p90_latency: cdk.Duration | None = None,
        guard_min_calls: int = 20,
        guard_period: cdk.Duration | None = None,
        guard_evaluation_periods: int = 3,
        fallback_on_alarm: bool = True,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays | None = None,
    ) -> None:
        super().__init__(scope, id)
        bake_time_given = bake_time is not None
        bake_time = bake_time if bake_time is not None else cdk.Duration.minutes(10)
        max_p90_latency = max_p90_latency or cdk.Duration.seconds(10)
        guard_period = guard_period or cdk.Duration.minutes(1)
        experiment_name = experiment_name if experiment_name is not None else id
        with Checks("PromptExperiment", scope=self) as check:
            names: list[str] = []
            if check.each("variants", variants, lambda n, v: check.instance(n, v, ExperimentVariant, "an ExperimentVariant(...)")):
                names = [v.name for v in variants]
                check.rule(len(variants) >= 2, f"variants has {len(variants)}; an experiment needs a control and at least one treatment", id="variants.too-few")
                check.rule(len(variants) <= MAX_VARIANTS,
                           f"variants has {len(variants)}; at most {MAX_VARIANTS} (each has two guard alarms, which the composite "
                           "alarm and the fallback's DisableAlarmActions must list; the Bonferroni level shrinks with each): "
                           "run several experiments", id="variants.too-many")
                duplicates = sorted({n for n in names if names.count(n) > 1})
                check.rule(not duplicates, f"variant names {duplicates} appear more than once; give each variant its own name "
                           "(it is the Variant dimension and the assignment key)", id="variants.duplicate-name")
                total = math.fsum(v.share for v in variants)  # ExperimentVariant refuses token shares
                check.rule(abs(total - 100) <= 1e-6,
                           f"shares sum to {total:g} ({' + '.join(f'{v.name} {v.share:g}' for v in variants)}), not 100; "
                           "adjust them so every user has exactly one variant", id="variants.shares-not-100")
            if token_kind(control) is not None:
                check.fail("control is a deploy-time value, but the control variant's name decides at synth which "
                           "variant the fallback document gives every user: pass one of the variant names", id="control.deploy-time")
            elif control is not None and check.text("control", control) and names:
                check.rule(control in names, f"control={control!r} is not a variant; pass one of {names}", id="control.not-a-variant")
            control = control if control is not None else (names[0] if names else None)
            if names and isinstance(control, str) and control in names:
                control_share = next(v.share for v in variants if v.name == control)
                check.rule(control_share > 0,
                           f"control {control!r} has share 0; the baseline must serve users", id="control.zero-share")
            if check.text("experiment_name", experiment_name, max_length=64):
                check.rule(bool(_NAME.match(experiment_name)),
                           f"experiment_name={experiment_name!r} may hold letters, digits, '.', '_' and '-' only (it is a "
                           "CloudWatch dimension value)", id="experiment_name.characters")
            check.text("salt", salt, optional=True, fix="omit it to use experiment_name")
            check.instance("application", application, appconfig.IApplication, "an appconfig.Application", optional=True)
            check.instance("deployment_strategy", deployment_strategy, appconfig.IDeploymentStrategy,
                           "an appconfig.DeploymentStrategy", optional=True)
            check.duration("bake_time", bake_time, minimum=cdk.Duration.minutes(0), maximum=cdk.Duration.minutes(_MAX_MINUTES),
                           fix="AppConfig bakes 0..1,440 minutes; the guard alarms roll back only during it")
            if token_kind(bake_time) == "Duration":  # AppConfig takes minutes; aws-cdk-lib cannot scale a token
                duration_in(check, "bake_time", bake_time, "minutes", why="AppConfig counts the bake time")
            if bake_time is not None and isinstance(bake_time, cdk.Duration) and not bake_time.is_unresolved():
                check.rule(bake_time.to_seconds(integral=False) % 60 == 0,
                           f"bake_time={bake_time.to_human_string()} is not whole minutes; AppConfig counts bake time in minutes", id="bake_time.not-whole-minutes")
            if deployment_strategy is not None and bake_time_given:
                check.fail("bake_time configures the new deployment strategy and deployment_strategy is given, so it would be "
                           "ignored; set the final bake time on your strategy", id="bake_time.with-deployment-strategy")
            token_of_kind(check, "max_error_rate_percent", max_error_rate_percent, "number",
                          fix="pass CfnParameter(type='Number').value_as_number, or a number such as 5")
            if check.number("max_error_rate_percent", max_error_rate_percent, above=0, maximum=100,
                            fix="the share of failed calls a variant may have, e.g. 5"):
                check.rule(max_error_rate_percent < 100, "max_error_rate_percent=100 can never be exceeded, so the error "
                           "guard would never fire; pass a limit below 100, e.g. 5", id="max_error_rate_percent.never-exceeded")
            check.duration("max_p90_latency", max_p90_latency, minimum=cdk.Duration.seconds(1), maximum=cdk.Duration.minutes(15))
            p90_seconds: Any = None
            if token_kind(max_p90_latency) == "Duration":  # the alarm then compares seconds with the parameter
                p90_seconds = duration_in(check, "max_p90_latency", max_p90_latency, "seconds",
                                          why="the p90 guard compares the latency")
            token_of_kind(check, "guard_min_calls", guard_min_calls, "number",
                          fix="pass CfnParameter(type='Number').value_as_number, or an integer such as 20")
            check.integer("guard_min_calls", guard_min_calls, minimum=1, maximum=1_000_000)
            if token_kind(guard_period) is not None:
                check.fail("guard_period is a deploy-time value, but aws-cdk-lib checks a metric's period at synth and the "
                           "guard window is checked against CloudWatch's limits: pass a Duration such as cdk.Duration.minutes(1)", id="guard_period.deploy-time")
            token_of_kind(check, "guard_evaluation_periods", guard_evaluation_periods, "number",
                          fix="pass CfnParameter(type='Number').value_as_number, or an integer such as 3")
            if check.duration("guard_period", guard_period, minimum=cdk.Duration.minutes(1), maximum=cdk.Duration.days(1),
                              fix="the runtime publishes standard-resolution metrics: one minute or more"):
                # to_seconds() raises on a fraction of a second (61,500 ms): compare as a float
                seconds = guard_period.to_seconds(integral=False)
                check.rule(seconds % 60 == 0,
                           f"guard_period={guard_period.to_human_string()} ({seconds:g} s) must be whole minutes: CloudWatch alarm periods "
                           "above 30 seconds are multiples of 60 s (PutMetricAlarm would refuse it at deploy); pass e.g. "
                           "cdk.Duration.minutes(1)", id="guard_period.not-whole-minutes")
            if check.integer("guard_evaluation_periods", guard_evaluation_periods, minimum=1, maximum=100) \
                    and isinstance(guard_period, cdk.Duration) and not guard_period.is_unresolved():
                window = guard_period.to_seconds(integral=False) * guard_evaluation_periods
                limit = 86_400 if guard_period.to_seconds(integral=False) < 3600 else 604_800
                check.rule(window <= limit,
                           f"guard_period x guard_evaluation_periods = {guard_period.to_human_string()} x "
                           f"{guard_evaluation_periods} is more than CloudWatch's {'1 day' if limit == 86_400 else '7 days'} "
                           "for an alarm's evaluation range (1 day when the period is under an hour): shorten either", id="guard_period.window-too-long")
            check.instance("fallback_on_alarm", fallback_on_alarm, bool, "True or False")
            check.alarm_actions("alarm_actions", alarm_actions)
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
        control = cast(str, control)  # the checks above raised unless a control variant was named or found
        for variant in variants:
            if variant.share == 0 and variant.name != control:
                warn(
                    self,
                    "experiment-variant-without-traffic",
                    f"variant {variant.name!r} has share 0: no user is assigned to it, so it is never called, its "
                    "guards never see a call and the experiment measures nothing about it. Give it a share, or drop "
                    "it until an AppConfig deployment gives it users.",
                )
        window = (guard_period.to_seconds(integral=False) * guard_evaluation_periods
                  if not guard_period.is_unresolved() and token_kind(guard_evaluation_periods) is None else 0)
        if deployment_strategy is None and not bake_time.is_unresolved() and 0 < bake_time.to_seconds(integral=False) < window:
            warn(
                self,
                "experiment-guard-slower-than-bake",
                f"the guards need {guard_evaluation_periods} breaching periods of {guard_period.to_human_string()} but "
                f"bake_time is {bake_time.to_human_string()}: a split change cannot be rolled back before the bake ends "
                "(the fallback still acts afterwards). Raise bake_time or shorten guard_period x guard_evaluation_periods.",
            )
        self.experiment_name = experiment_name
        self.control = control
        self.variants = tuple(variants)
        self.document: dict[str, Any] = {
            "experiment": experiment_name,
            "salt": salt or experiment_name,
            "control": control,
            "variants": [v.document() for v in variants],
        }
        self.fallback_document: dict[str, Any] = {
            **self.document,
            "variants": [{**v.document(), "share": 100 if v.name == control else 0} for v in variants],
        }

        self.application = application or appconfig.Application(
            self, "Application", description=f"genai-pacer experiment {experiment_name}")
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        #: Functions add_to_function wired (construct address -> streaming granted).
        self._wired: dict[str, bool] = {}
        #: The cdk-nag finding ids the fallback's role acknowledges (its GetDeployment wildcard only).
        self.fallback_acknowledgments: list[str] = []
        self._alarm_ids: set[str] = set()
        for variant in variants:
            self._guards(variant, max_error_rate_percent, max_p90_latency, p90_seconds, guard_min_calls, guard_period,
                         guard_evaluation_periods, alarm_actions)
        #: The alarms AppConfig watches: the guards themselves, or one composite of them when there are
        #: more than AppConfig's 5 monitors per environment.
        self.monitored_alarms: list[cloudwatch.IAlarm] = list(self.alarms.values())
        self.any_guard_alarm: cloudwatch.CompositeAlarm | None = None
        if len(self.alarms) > MAX_MONITORS:
            self.any_guard_alarm = cloudwatch.CompositeAlarm(
                self, "AnyGuard",
                alarm_rule=cloudwatch.AlarmRule.any_of(*self.alarms.values()),
                alarm_description=f"Experiment {experiment_name}: any guard alarm of any variant is in ALARM "
                                  f"(AppConfig watches at most {MAX_MONITORS} alarms per environment, so it watches this one)",
            )
            self.monitored_alarms = [self.any_guard_alarm]
        self.environment = appconfig.Environment(
            self, "Environment",
            application=self.application,
            description=f"genai-pacer experiment {experiment_name}: the guard alarms roll back a split change",
            monitors=[appconfig.Monitor.from_cloud_watch_alarm(alarm) for alarm in self.monitored_alarms],
        )
        # The role aws-cdk-lib creates for AppConfig to read the alarms (its id carries a hash suffix). Its
        # trust names appconfig.amazonaws.com without aws:SourceArn / aws:SourceAccount: AppConfig's user
        # guide shows that trust unconditioned and documents no value AppConfig sets for either key, and a
        # condition it does not meet would silently stop every rollback. The role may only read alarms.
        for monitor_role in [c for c in self.environment.node.children if isinstance(c, iam.Role)]:
            cdk.Validations.of(monitor_role).acknowledge(cdk.Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="aws-cdk-lib's AppConfig monitor role: cloudwatch:DescribeAlarms on *, the policy AppConfig "
                       "documents for deployment monitors; it reads alarm states only",
            ))
        self.deployment_strategy = deployment_strategy or appconfig.DeploymentStrategy(
            self, "Strategy",
            description="all at once, then bake while the guard alarms watch",
            rollout_strategy=appconfig.RolloutStrategy.linear(
                growth_factor=100, deployment_duration=cdk.Duration.minutes(0), final_bake_time=bake_time),
        )
        self.configuration = appconfig.HostedConfiguration(
            self, "Configuration",
            application=self.application,
            name=f"{experiment_name}-split",
            description="variants, shares and salt of the experiment (pacer_runtime.experiment reads it)",
            content=appconfig.ConfigurationContent.from_inline_json(json.dumps(self.document, sort_keys=True)),
            validators=[appconfig.JsonSchemaValidator.from_inline(json.dumps(DOCUMENT_SCHEMA))],
            deployment_strategy=self.deployment_strategy,
            deploy_to=[self.environment],
        )
        self.fallback_version = appconfig.CfnHostedConfigurationVersion(
            self, "FallbackVersion",
            application_id=self.application.application_id,
            configuration_profile_id=self.configuration.configuration_profile_id,
            content=json.dumps(self.fallback_document, sort_keys=True),
            content_type="application/json",
            description="everyone on the control variant: what a guard alarm deploys",
        )
        self.fallback_version.node.add_dependency(self._version_resource())  # one new version at a time per profile
        self.logs_key = log_key(self, "LogsKey", encryption_key)
        self.guards_evaluated = self._wait_for_guards(log_retention)
        for deployment in self.configuration.node.children:  # the stack's own deployment of the split
            if isinstance(deployment, appconfig.CfnDeployment):
                deployment.node.add_dependency(self.guards_evaluated)
        self.fallback_state_machine: sfn.StateMachine | None = None
        self.fallback_rule: events.Rule | None = None
        self.fallback_events_role: iam.Role | None = None
        self.fallback_failed_alarm: cloudwatch.Alarm | None = None
        self._alarm_actions = list(alarm_actions)
        if fallback_on_alarm:
            self._fallback(self.logs_key, log_retention)

    # ---- guards ---------------------------------------------------------------------------------

    def metric_latency(self, variant: str, **props: Any) -> cloudwatch.Metric:
        """LatencyMs of one variant's calls (default p90 per minute)."""
        names = metrics_constants()
        return self._metric(variant, names.LATENCY_MS, {"statistic": "p90", **props})

    def metric_errors(self, variant: str, **props: Any) -> cloudwatch.Metric:
        """Failed calls of one variant (CallErrors, Sum)."""
        return self._metric(variant, metrics_constants().CALL_ERRORS, {"statistic": "Sum", **props})

    def metric_served_below_requested_tier(self, variant: str, **props: Any) -> cloudwatch.Metric:
        """Calls of one variant served at a lower service tier than they asked for (ServedBelowRequestedTier:
        1 or 0 per call that named a tier and got one back; default Average, the share, per minute)."""
        return self._metric(variant, metrics_constants().SERVED_BELOW_REQUESTED_TIER, {"statistic": "Average", **props})

    def metric_outcome(self, variant: str, outcome: str, **props: Any) -> cloudwatch.Metric:
        """Outcome events of one variant, by the runtime's outcome name (thumbs_up, escalation, ...)."""
        names = metrics_constants()
        with Checks("PromptExperiment.metric_outcome", scope=self) as check:
            check.rule(outcome in names.OUTCOMES, f"outcome={outcome!r} must be one of {sorted(names.OUTCOMES)}", id="outcome.unknown")
        return self._metric(variant, names.OUTCOMES[outcome], {"statistic": "Sum", **props})

    def _metric(self, variant: str, metric_name: str, props: dict[str, Any]) -> cloudwatch.Metric:
        found = [v for v in self.variants if v.name == variant]
        with Checks("PromptExperiment", scope=self) as check:
            check.rule(bool(found), f"variant={variant!r} is not in experiment {self.experiment_name!r}: "
                       f"{[v.name for v in self.variants]}", id="variant.not-in-experiment")
        return variant_metric(found[0].model.model_id, self.experiment_name, variant, metric_name,
                              **{"period": cdk.Duration.minutes(1), **props})

    def _guards(self, variant: ExperimentVariant, max_error_rate: float, max_p90: cdk.Duration, p90_seconds: Any,
                min_calls: int, period: cdk.Duration, periods: int, actions: Sequence[cloudwatch.IAlarmAction]) -> None:
        """Two gated guards of one variant. Deploy-time values reach the template as references: a
        threshold as the parameter, min_calls inside the expression, and a deploy-time max_p90 (seconds)
        compared in seconds, since CloudFormation cannot scale a parameter to milliseconds."""
        names = metrics_constants()
        min_calls_text = shown(min_calls)  # a deploy-time count as its reference, never its number encoding
        errors = self._metric(variant.name, names.CALL_ERRORS, {"statistic": "Sum", "period": period})
        calls = self._metric(variant.name, names.LATENCY_MS, {"statistic": "SampleCount", "period": period})
        rate = cloudwatch.MathExpression(
            expression=f"IF((FILL(e, 0) + FILL(c, 0)) >= {min_calls_text}, 100 * FILL(e, 0) / (FILL(e, 0) + FILL(c, 0)), 0)",
            using_metrics={"e": errors, "c": calls},
            label=f"{variant.name} error rate (%)",
            period=period,
        )
        ident = re.sub(r"[^A-Za-z0-9]", "", variant.name.title()) or "Variant"
        if ident in self._alarm_ids:  # "a-b" and "ab" would share construct ids
            ident = f"{ident}{len(self._alarm_ids)}"
        self._alarm_ids.add(ident)
        self.alarms[f"{variant.name}-errors"] = threshold_alarm(
            self, f"{ident}ErrorRate", metric=rate, threshold=max_error_rate, periods=periods, actions=actions,
            description=f"Experiment {self.experiment_name}: variant {variant.name} fails more than {shown(max_error_rate)}% of "
                        f"its calls ({periods} periods running, {min_calls_text}+ calls each). During a split deployment "
                        "AppConfig rolls it back; afterwards the fallback sends everyone to the control variant.",
        )
        # Gated like the error rate: a small treatment's one slow call a minute is its whole p90 and would
        # otherwise move everyone to control. p90 and SampleCount are of the same metric and dimensions.
        in_seconds = p90_seconds is not None
        p90 = cloudwatch.MathExpression(
            expression=f"IF(FILL(c, 0) >= {min_calls_text}, FILL(p, 0){' / 1000' if in_seconds else ''}, 0)",
            using_metrics={"p": self._metric(variant.name, names.LATENCY_MS, {"statistic": "p90", "period": period}),
                           "c": calls},
            label=f"{variant.name} p90 latency ({'s' if in_seconds else 'ms'}) of periods with {min_calls_text}+ calls",
            period=period,
        )
        self.alarms[f"{variant.name}-p90"] = threshold_alarm(
            self, f"{ident}P90Latency",
            metric=p90,
            threshold=p90_seconds if in_seconds else max_p90.to_seconds(integral=False) * 1000, periods=periods,
            actions=actions,
            description=f"Experiment {self.experiment_name}: variant {variant.name}'s p90 latency is above "
                        f"{f'{shown(p90_seconds)} seconds' if in_seconds else max_p90.to_human_string()} ({periods} periods running, {min_calls_text}+ calls each). During a split "
                        "deployment AppConfig rolls it back; afterwards the fallback sends everyone to the control variant.",
        )

    def _wait_for_guards(self, log_retention: logs.RetentionDays | None) -> cdk.CustomResource:
        """A custom resource that answers CloudFormation once no guard is INSUFFICIENT_DATA (at most
        GUARD_WAIT): the stack's deployment depends on it, so AppConfig never sees a guard that has
        not been evaluated yet. Its properties list the guards, so a new set of guards waits again."""
        log_group = encrypted_log_group(self, "GuardWaitLogs", key=self.logs_key,
                                        retention=log_retention or logs.RetentionDays.ONE_MONTH)
        role = iam.Role(self, "GuardWaitRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        log_group.grant_write(role)
        # DescribeAlarms on *: the policy AppConfig documents for its own monitor role; read-only.
        describe = iam.Policy(self, "GuardWaitDescribeAlarms", roles=[role], statements=[
            iam.PolicyStatement(actions=["cloudwatch:DescribeAlarms"], resources=["*"])])
        cdk.Validations.of(describe).acknowledge(cdk.Acknowledgment(
            id="AwsSolutions-IAM5[Resource::*]",
            reason="cloudwatch:DescribeAlarms (read-only) to see when the guards were first evaluated; AppConfig's "
                   "documented monitor policy grants the same on *"))
        function = lambda_.Function(
            self, "GuardWait",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.ARM_64,
            handler="index.handler",
            code=lambda_.Code.from_inline(GUARD_WAIT_SOURCE),
            role=role,
            log_group=log_group,
            timeout=GUARD_WAIT.plus(cdk.Duration.minutes(1)),
            memory_size=128,
            environment={"WAIT_SECONDS": str(int(GUARD_WAIT.to_seconds())),
                         "POLL_SECONDS": str(GUARD_WAIT_POLL_SECONDS)},
        )
        function.node.add_dependency(describe)
        return cdk.CustomResource(
            self, "GuardsEvaluated",
            service_token=function.function_arn,
            resource_type="Custom::GenaiPacerGuardsEvaluated",
            # the guards and, past 5 of them, the composite AppConfig watches instead (it too starts
            # INSUFFICIENT_DATA, until its first evaluation)
            properties={"AlarmNames": [alarm.alarm_name for alarm in dict.fromkeys([*self.alarms.values(),
                                                                                  *self.monitored_alarms])]},
            service_timeout=GUARD_WAIT.plus(cdk.Duration.minutes(2)),
        )

    def _version_resource(self) -> cdk.CfnResource:
        version = self.configuration.node.try_find_child("Resource")
        if not isinstance(version, cdk.CfnResource):  # the L2 names its version "Resource"
            raise RuntimeError("aws-cdk-lib's HostedConfiguration layout changed: no version resource found")
        return version

    # ---- fallback after the bake time -------------------------------------------------------------

    def _fallback(self, encryption_key: kms.IKey, log_retention: logs.RetentionDays | None) -> None:
        stack = cdk.Stack.of(self)
        guard_arns = [a.alarm_arn for a in self.alarms.values()]
        toggled = list(self.alarms.values()) + ([self.any_guard_alarm] if self.any_guard_alarm is not None else [])
        alarm_names = [a.alarm_name for a in toggled]
        alarm_arns = [a.alarm_arn for a in toggled]
        immediate = appconfig.DeploymentStrategy(
            self, "FallbackStrategy",
            description="fallback to the control variant: at once, no bake",
            rollout_strategy=appconfig.RolloutStrategy.linear(
                growth_factor=100, deployment_duration=cdk.Duration.minutes(0), final_bake_time=cdk.Duration.minutes(0)),
        )
        app_arn = stack.format_arn(service="appconfig", resource="application", resource_name=self.application.application_id)
        env_arn = f"{app_arn}/environment/{self.environment.environment_id}"
        profile_arn = f"{app_arn}/configurationprofile/{self.configuration.configuration_profile_id}"
        strategy_arn = stack.format_arn(service="appconfig", resource="deploymentstrategy",
                                        resource_name=immediate.deployment_strategy_id)

        def alarm_call(name: str, action: str) -> tasks.CallAwsService:
            call = tasks.CallAwsService(
                self, name, service="cloudwatch", action=action, parameters={"AlarmNames": alarm_names},
                iam_resources=alarm_arns, iam_action=f"cloudwatch:{action[0].upper()}{action[1:]}", result_path=sfn.JsonPath.DISCARD,
            )
            # CloudWatch throttles as CloudWatch.CloudWatchException: one refused call must not leave the
            # guards' actions off (AppConfig would never roll a split change back again).
            call.add_retry(errors=["States.ALL"], interval=cdk.Duration.seconds(2), max_attempts=6, backoff_rate=2,
                           max_delay=cdk.Duration.seconds(30), jitter_strategy=sfn.JitterType.FULL)
            return call

        # The description is built before anything changes: a start without an alarm (by hand, `{}`)
        # must not fail after the guards are disabled (a States.Runtime error escapes every Catch).
        by_alarm = sfn.Pass(self, "Name the alarm", result_path="$.fallback", parameters={
            "description": sfn.JsonPath.format("guard alarm {} fired: everyone to the control variant",
                                               sfn.JsonPath.string_at("$.detail.alarmName")),
            "polls": 0,
        })
        by_hand = sfn.Pass(self, "Started by hand", result_path="$.fallback", parameters={
            "description": "fallback started by hand: everyone to the control variant", "polls": 0,
        })
        disable = alarm_call("Disable guard alarm actions", "disableAlarmActions")
        enable_after = alarm_call("Enable guard alarm actions", "enableAlarmActions")
        enable_on_failure = alarm_call("Enable guard alarm actions after a failure", "enableAlarmActions")
        deploy = tasks.CallAwsService(
            self, "Deploy fallback",
            service="appconfig", action="startDeployment", iam_action="appconfig:StartDeployment",
            iam_resources=[app_arn, env_arn, profile_arn, strategy_arn],
            parameters={
                "ApplicationId": self.application.application_id,
                "EnvironmentId": self.environment.environment_id,
                "ConfigurationProfileId": self.configuration.configuration_profile_id,
                "ConfigurationVersion": self.fallback_version.attr_version_number,
                "DeploymentStrategyId": immediate.deployment_strategy_id,
                "Description.$": "$.fallback.description",
            },
            result_selector={"DeploymentNumber.$": "$.DeploymentNumber"},
            result_path="$.deployment",
        )
        # A deployment (or its rollback) in progress holds the environment: retry until it ends.
        deploy.add_retry(errors=["AppConfig.ConflictException"], interval=cdk.Duration.seconds(30), max_attempts=20,
                         backoff_rate=1.2, max_delay=cdk.Duration.minutes(2), jitter_strategy=sfn.JitterType.FULL)
        deploy.add_retry(errors=["AppConfig.AppConfigException", "AppConfig.InternalServerException"],
                         interval=cdk.Duration.seconds(5), max_attempts=3, backoff_rate=2)
        status = tasks.CallAwsService(
            self, "Read deployment",
            service="appconfig", action="getDeployment", iam_action="appconfig:GetDeployment",
            iam_resources=[f"{env_arn}/deployment/*"],  # the number is known only at run time
            parameters={
                "ApplicationId": self.application.application_id,
                "EnvironmentId": self.environment.environment_id,
                "DeploymentNumber.$": "$.deployment.DeploymentNumber",
            },
            result_selector={"State.$": "$.State"},
            result_path="$.status",
        )
        # A failed status read must not leave the guards' actions disabled (AppConfig would then never roll
        # a split change back): retry it, then re-enable them and fail.
        status.add_retry(errors=["States.ALL"], interval=cdk.Duration.seconds(5), max_attempts=4, backoff_rate=2,
                         jitter_strategy=sfn.JitterType.FULL)
        wait = sfn.Wait(self, "Wait for the deployment", time=sfn.WaitTime.duration(FALLBACK_POLL_INTERVAL))
        count = sfn.Pass(self, "Count a poll", result_path="$.fallback", parameters={
            "description.$": "$.fallback.description",
            "polls.$": "States.MathAdd($.fallback.polls, 1)",
        })
        failed = sfn.Fail(self, "Fallback failed", error="FallbackFailed",
                          cause="the fallback deployment could not start, its state could not be read, it was rolled "
                                "back, or it did not end in time; guard alarm actions were re-enabled")
        deploy.add_catch(enable_on_failure.next(failed), errors=["States.ALL"], result_path="$.error")
        status.add_catch(enable_on_failure, errors=["States.ALL"], result_path="$.error")
        disable.add_catch(enable_on_failure, errors=["States.ALL"], result_path="$.error")
        definition = (
            sfn.Choice(self, "Started by an alarm?")
            .when(sfn.Condition.is_present("$.detail.alarmName"), by_alarm.next(disable))
            .otherwise(by_hand.next(disable))
        )
        disable.next(deploy).next(wait).next(status).next(
            sfn.Choice(self, "Deployment ended?")
            .when(sfn.Condition.string_equals("$.status.State", "COMPLETE"), enable_after)
            # a rolled-back fallback means the split is still served: that is a failure, not an end
            .when(sfn.Condition.or_(*(sfn.Condition.string_equals("$.status.State", s) for s in ("ROLLED_BACK", "REVERTED"))),
                  enable_on_failure)
            .when(sfn.Condition.number_greater_than_equals("$.fallback.polls", FALLBACK_MAX_POLLS), enable_on_failure)
            .otherwise(count.next(wait))
        )
        self.fallback_state_machine = model_state_machine(
            self, definition=definition, models=[],
            options=StateMachineOptions(encryption_key=encryption_key, log_retention=log_retention),
            default_timeout=cdk.Duration.hours(1),
        )
        deployments = _nag.flatten_reference(stack.resolve(f"{env_arn}/deployment/*"))
        policy = self.fallback_state_machine.role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            self.fallback_acknowledgments = _nag.acknowledge_wildcard_resources(
                policy, matches=lambda flat: flat == deployments,
                reason="appconfig:GetDeployment on this environment's deployments: the fallback's deployment number "
                       "is known only when it starts",
            )
        # EventBridge assumes this role only for this rule of this account: the rule's ARN is built from
        # its name (a GetAtt would make the rule and the role depend on each other). The name holds the
        # stack's unique id, so two deployments of one app (stacks renamed per stage) never share it.
        stack_uuid = cdk.Fn.select(STACK_ID_UUID_INDEX, cdk.Fn.split("/", cdk.Aws.STACK_ID))
        rule_name = cdk.Fn.join("-", [RULE_NAME_PREFIX, stack_uuid, self.node.addr[:8]])
        rule_arn = stack.format_arn(service="events", resource="rule", resource_name=rule_name)
        self.fallback_events_role = iam.Role(
            self, "FallbackEventsRole",
            description="EventBridge starts the experiment's fallback workflow from its guard-alarm rule only",
            assumed_by=iam.ServicePrincipal("events.amazonaws.com", conditions={
                "StringEquals": {EVENTS_SOURCE_ACCOUNT_KEY: stack.account},
                "ArnEquals": {EVENTS_SOURCE_ARN_KEY: rule_arn},
            }),
        )
        self.fallback_rule = events.Rule(
            self, "GuardAlarmRule",
            rule_name=rule_name,
            description=f"experiment {self.experiment_name}: a guard alarm in ALARM deploys the fallback (control only)",
            event_pattern=events.EventPattern(
                source=["aws.cloudwatch"],
                detail_type=["CloudWatch Alarm State Change"],
                resources=guard_arns,
                detail={"state": {"value": ["ALARM"]}},
            ),
            targets=[targets.SfnStateMachine(self.fallback_state_machine, retry_attempts=3, role=self.fallback_events_role,
                                             max_event_age=cdk.Duration.hours(1))],
        )
        # A fallback that could not start (EventBridge refused or could not assume the role, or the
        # workflow was throttled past the retries) or that failed would otherwise go unseen.
        failures = cloudwatch.MathExpression(
            expression="FILL(starts, 0) + FILL(runs, 0)",
            using_metrics={
                "starts": cloudwatch.Metric(namespace=EVENTS_NAMESPACE, metric_name=EVENTS_FAILED_INVOCATIONS,
                                            dimensions_map={EVENTS_RULE_DIMENSION: self.fallback_rule.rule_name},
                                            statistic="Sum", period=cdk.Duration.minutes(5)),
                "runs": self.fallback_state_machine.metric_failed(statistic="Sum", period=cdk.Duration.minutes(5)),
            },
            label="fallback starts and runs that failed", period=cdk.Duration.minutes(5),
        )
        self.fallback_failed_alarm = threshold_alarm(
            self, "FallbackFailed", metric=failures, threshold=0, actions=self._alarm_actions,
            description=f"Experiment {self.experiment_name}: the fallback to the control variant could not start or "
                        "failed; the split may still be served. Check the workflow's executions and the rule's target "
                        "role, then deploy the control-only version by hand (start the workflow with {}).",
        )

    # ---- grants and wiring ---------------------------------------------------------------------

    def grant_evaluate(self, grantee: iam.IGrantable, *, streaming: bool = False) -> list[iam.Grant]:
        """Let a handler read the experiment's configuration and invoke every variant's model (and
        managed prompt version), nothing more. streaming=True adds the response-stream actions.

        Where every variant of a model names its service tier at synth, the grantee is denied that
        model's other tiers (BedrockModel.tier_fence), so the handler cannot bill a tier the experiment
        does not test, e.g. Priority for a Flex arm. A variant naming no tier is called at the tier
        the handler passes, so its model is not fenced; a deploy-time tier fences it to the tiers the
        variants name (BedrockModel.tier_fence)."""
        with Checks("PromptExperiment.grant_evaluate", scope=self) as check:
            check.instance("streaming", streaming, bool, "True or False")
        grants = [self._grant_read(grantee)]
        for model in dict.fromkeys(v.model for v in self.variants):
            grants.append(model.grant_invoke(grantee, streaming=streaming))
        scope = grantee if isinstance(grantee, Construct) else self  # the ARNs the grant renders
        for fence in tier_fences(scope, [(v.model, v.service_tier) for v in self.variants], streaming=streaming):
            grantee.grant_principal.add_to_principal_policy(fence)  # no other tier, whatever the handler sends
        prompts = sorted({v.prompt.version_arn for v in self.variants if isinstance(v.prompt, ManagedPrompt)})
        if prompts:
            # Converse with a prompt version ARN renders the prompt: Bedrock's "Prerequisites for running model
            # inference" lists bedrock:RenderPrompt beside InvokeModel for invoking a Prompt management prompt.
            actions = ["bedrock:InvokeModel", "bedrock:RenderPrompt"] + (
                ["bedrock:InvokeModelWithResponseStream"] if streaming else [])
            grants.append(iam.Grant.add_to_principal(grantee=grantee, actions=actions, resource_arns=prompts))
        return grants

    def _grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """appconfig:StartConfigurationSession and GetLatestConfiguration on this profile in this environment only."""
        stack = cdk.Stack.of(self)
        arn = stack.format_arn(
            service="appconfig", resource="application",
            resource_name=f"{self.application.application_id}/environment/{self.environment.environment_id}/"
                          f"configuration/{self.configuration.configuration_profile_id}",
        )
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["appconfig:StartConfigurationSession", "appconfig:GetLatestConfiguration"],
            resource_arns=[arn],
        )

    def environment_variables(self) -> dict[str, str]:
        """What ExperimentSource.from_environment() reads (the AppConfig Lambda extension's path)."""
        return {
            "EXPERIMENT_APPLICATION_ID": self.application.application_id,
            "EXPERIMENT_ENVIRONMENT_ID": self.environment.environment_id,
            "EXPERIMENT_PROFILE_ID": self.configuration.configuration_profile_id,
        }

    def add_to_function(self, function: lambda_.Function, *, streaming: bool = False) -> None:
        """Make `function` a handler that evaluates this experiment: the AppConfig Lambda extension layer
        for its architecture, `environment_variables()` and `grant_evaluate` on its role.

        The layer ARN is AWS's per-Region one (aws-cdk-lib's table): a stack with a concrete Region gets
        it directly, an environment-agnostic stack a CloudFormation mapping resolved at deploy time
        (`Application.get_lambda_layer_version_arn(stack.region)` fails there). The extension polls
        AppConfig every 45 s by default (AWS_APPCONFIG_EXTENSION_POLL_INTERVAL_SECONDS); the handler's
        ExperimentSource reads it from localhost.

        Calling it again for the same function adds nothing (one layer, the same variables and grant),
        except the stream actions when the first call had streaming=False and this one True.
        """
        with Checks("PromptExperiment.add_to_function", scope=self) as check:
            check.instance("function", function, lambda_.Function,
                           "a lambda_.Function (its layers, environment and role are changed)")
            check.instance("streaming", streaming, bool, "True or False")
        previous = self._wired.get(function.node.addr)
        if previous is not None:  # wired already: a second layer construct would clash; add only what is new
            if streaming and not previous:
                self.grant_evaluate(function, streaming=True)
                self._wired[function.node.addr] = True
            return
        self._wired[function.node.addr] = streaming
        arm = function.architecture.name == lambda_.Architecture.ARM_64.name
        function.add_layers(lambda_.LayerVersion.from_layer_version_arn(
            self, f"AppConfigExtension{function.node.addr[:8]}", _extension_layer_arn(cdk.Stack.of(function), arm=arm)))
        for key, value in self.environment_variables().items():
            function.add_environment(key, value)
        self.grant_evaluate(function, streaming=streaming)


#: How often the fallback reads its deployment, and how many reads before it gives up (10 minutes: an
#: immediate, unbaked deployment ends in seconds; a workflow that polls forever would end at its
#: timeout, which no Catch sees, with the guards' actions still off).
FALLBACK_POLL_INTERVAL = cdk.Duration.seconds(10)
FALLBACK_MAX_POLLS = 60

_LAYER_COLUMNS = {False: "x8664", True: "arm64"}


def _extension_layer_table() -> dict[str, dict[str, str]]:
    """Region -> {x8664, arm64} -> the AppConfig Lambda extension layer ARN, from aws-cdk-lib's own table."""
    from aws_cdk import region_info

    table: dict[str, dict[str, str]] = {}
    for region in region_info.RegionInfo.regions:
        row = {}
        for arm, column in _LAYER_COLUMNS.items():
            platform = appconfig.Platform.ARM_64 if arm else appconfig.Platform.X86_64
            try:
                arn = appconfig.Application.get_lambda_layer_version_arn(region.name, platform=platform)
            except RuntimeError:  # no layer published for this Region and platform
                continue
            if arn:
                row[column] = arn
        if len(row) == len(_LAYER_COLUMNS):
            table[region.name] = row
    return table


def _extension_layer_arn(stack: cdk.Stack, *, arm: bool) -> str:
    column = _LAYER_COLUMNS[arm]
    if not cdk.Token.is_unresolved(stack.region):
        try:
            arn = appconfig.Application.get_lambda_layer_version_arn(
                stack.region, platform=appconfig.Platform.ARM_64 if arm else appconfig.Platform.X86_64)
        except RuntimeError:
            arn = None
        with Checks("PromptExperiment.add_to_function") as check:
            check.rule(bool(arn),
                       f"the stack's region={stack.region!r} has no AppConfig Lambda extension layer for "
                       f"{'arm64' if arm else 'x86_64'} in aws-cdk-lib's table; add the layer yourself "
                       "(https://docs.aws.amazon.com/appconfig/latest/userguide/appconfig-integration-lambda-extensions-versions.html) "
                       "with environment_variables() and grant_evaluate()", id="region.no-appconfig-layer")
        return cast(str, arn)  # the check above raised unless the table has a layer
    mapping = stack.node.try_find_child("GenaiPacerAppConfigExtensionLayers")
    if not isinstance(mapping, cdk.CfnMapping):
        mapping = cdk.CfnMapping(stack, "GenaiPacerAppConfigExtensionLayers", mapping=_extension_layer_table())
    return mapping.find_in_map(cdk.Aws.REGION, column)


#: The guard wait's handler (inline: it needs only boto3 and the standard library). It answers
#: CloudFormation SUCCESS in every case: the wait decides only when the deployment starts, and a failed
#: stack would cost more than a deployment rolled back for want of data (which it logs by error type).
GUARD_WAIT_SOURCE = f"""
import json, os, time, urllib.request
import boto3

PENDING_STATE = {CREATED_ALARM_STATE!r}
MAX_NAMES = {DESCRIBE_ALARMS_MAX_NAMES}


def pending(cloudwatch, names):
    states = {{}}
    for start in range(0, len(names), MAX_NAMES):
        page = cloudwatch.describe_alarms(AlarmNames=names[start:start + MAX_NAMES],
                                          AlarmTypes=["MetricAlarm", "CompositeAlarm"])
        for alarm in page.get("MetricAlarms", []) + page.get("CompositeAlarms", []):
            states[alarm["AlarmName"]] = alarm["StateValue"]
    return sorted(name for name in names if states.get(name, PENDING_STATE) == PENDING_STATE)


clock, sleep = time.monotonic, time.sleep


def wait(names):
    cloudwatch = boto3.client("cloudwatch")
    deadline = clock() + float(os.environ.get("WAIT_SECONDS", "300"))
    while True:
        waiting = pending(cloudwatch, names)
        if not waiting or clock() >= deadline:
            return waiting
        sleep(float(os.environ.get("POLL_SECONDS", "10")))


def send(url, body):
    request = urllib.request.Request(url, data=body, method="PUT", headers={{"Content-Type": ""}})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def handler(event, context):
    data = {{"Pending": 0}}
    try:
        if event.get("RequestType") in ("Create", "Update"):
            names = [str(name) for name in (event.get("ResourceProperties") or {{}}).get("AlarmNames") or []]
            waiting = wait(names)
            data = {{"Pending": len(waiting)}}
            if waiting:
                print(json.dumps({{"event": "guards-not-evaluated", "pending": len(waiting)}}))
    except Exception as error:
        data = {{"Pending": -1, "Error": type(error).__name__}}
        print(json.dumps({{"event": "guard-wait-failed", "error": type(error).__name__}}))
    body = {{
        "Status": "SUCCESS",
        "Reason": "guards evaluated" if data["Pending"] == 0 else "guards not all evaluated; see the function's log",
        "PhysicalResourceId": event.get("PhysicalResourceId") or event.get("LogicalResourceId") or "guards",
        "StackId": event.get("StackId"), "RequestId": event.get("RequestId"),
        "LogicalResourceId": event.get("LogicalResourceId"), "Data": data,
    }}
    send(event["ResponseURL"], json.dumps(body).encode())
    return body
"""
