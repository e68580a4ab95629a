"""Secure defaults shared by every construct: encrypted log groups and audited state machines.

Kept in one place so each construct passes cdk-nag AwsSolutions the same way, and an
acknowledgment of an unavoidable finding is written once, with its reason.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn

from constructs import Construct

from ._internal.assets import handler_code
from ._internal.checks import Checks, in_unit, token_kind
from .models import BedrockModel

# The actions aws-cdk-lib grants for tracing and logging; AWS offers no narrower resource for them.
XRAY_ACTIONS = ("xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules", "xray:GetSamplingTargets")
LOG_DELIVERY_ACTIONS = (
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
)
#: The longest an EXPRESS execution runs (Step Functions developer guide, "Choosing workflow type":
#: maximum duration 5 minutes).
EXPRESS_LIMIT = cdk.Duration.minutes(5)
#: The longest a STANDARD execution runs (same page: 1 year).
STANDARD_LIMIT = cdk.Duration.days(365)
#: LoggingConfiguration.Level values (CloudFormation schema AWS::StepFunctions::StateMachine).
LOG_LEVELS = (sfn.LogLevel.ALL, sfn.LogLevel.ERROR, sfn.LogLevel.FATAL, sfn.LogLevel.OFF)

WILDCARD_REASON = (
    "X-Ray PutTraceSegments/PutTelemetryRecords/GetSampling* and CloudWatch Logs vended-delivery "
    "actions (logs:CreateLogDelivery and related) support no resource-level permissions"
)


#: Whether a key genai-pacer creates outlives the stack: RETAIN. Every log group it encrypts is retained
#: too (logs are evidence), and CloudWatch Logs decrypts a group's events with the key they were written
#: under for as long as they are stored (botocore's logs model, AssociateKmsKey and CreateLogGroup: "This
#: association is stored as long as the data encrypted with the KMS key is still within CloudWatch Logs";
#: a deleted key leaves them "unencryptable and unusable"). A key removed with the stack would leave the
#: kept logs unreadable; a key pending deletion cannot be used at all (kms ScheduleKeyDeletion).
#: What it costs: KEY_MONTHLY_PRICE_USD a month per key until you schedule its deletion (README, Security,
#: "KMS keys": how to do that once the kept logs have expired).
KEY_REMOVAL_POLICY = cdk.RemovalPolicy.RETAIN
#: What a customer managed KMS key costs a month while it exists, in US dollars (AWS KMS pricing page,
#: https://aws.amazon.com/kms/pricing/, "Key Storage", stored copy read 2026-12-04: "Each AWS KMS key
#: that you create in KMS costs $1/month"; "There is no charge for customer managed KMS keys that are
#: scheduled for deletion"; with automatic rotation, on for every key genai-pacer creates, the page
#: charges for each backing key a rotation generates too). Hence one key per construct, not one per log
#: group. API requests are billed apart (20,000 a month free, the same page).
KEY_MONTHLY_PRICE_USD = 1.0

#: The one key each construct created, whatever call asked for it first.
_CONSTRUCT_KEYS: weakref.WeakKeyDictionary[Construct, kms.Key] = weakref.WeakKeyDictionary()
#: The keys whose policy already lets CloudWatch Logs use them.
_LOGS_ALLOWED: weakref.WeakSet[kms.Key] = weakref.WeakSet()


def construct_key(scope: Construct, id: str, *, description: str) -> kms.Key:
    """The one KMS key of a genai-pacer construct (`scope`), shared by all its log groups and by the data
    it encrypts with a customer managed key: created at the first call, with rotation and
    KEY_REMOVAL_POLICY, and returned by every later call (`id` and `description` are those of the first
    call, so the key a construct had before keeps its logical id)."""
    key = _CONSTRUCT_KEYS.get(scope)
    if key is None:
        key = kms.Key(
            scope,
            id,
            enable_key_rotation=True,
            description=description,
            removal_policy=KEY_REMOVAL_POLICY,
        )
        _CONSTRUCT_KEYS[scope] = key
    return key


#: The encryption context key CloudWatch Logs sends with the ARN of the log group it encrypts for
#: (CloudWatch Logs user guide, "Encrypt log data in CloudWatch Logs using AWS Key Management Service").
LOGS_ARN_CONTEXT_KEY = "kms:EncryptionContext:aws:logs:arn"


def logs_key_condition(stack: cdk.Stack) -> str:
    """The log group ARNs a construct's key serves: every log group of the stack's account and Region."""
    return stack.format_arn(
        service="logs",
        resource="log-group",
        resource_name="*",
        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
    )


def log_key(scope: Construct, id: str, key: kms.IKey | None) -> kms.IKey:
    """The KMS key for a construct's logs: the user's (`key`, used as given: its policy is yours), else
    the construct's one key (`construct_key`) with a policy that lets CloudWatch Logs use it.

    The statement is added once per key, whatever number of log groups use it. Its condition covers the
    log groups of this account and Region (`logs_key_condition`), not each group's ARN: a group's name is
    generated by CloudFormation, so its ARN is known only once the group exists, and naming it in the
    policy of the key the group is created with would be a circular dependency; fixed names instead would
    make a redeploy after `cdk destroy` fail on the retained group of the same name.
    """
    if key is not None:
        return key
    created = construct_key(scope, id, description=f"genai-pacer: encrypts logs of {scope.node.path}")
    if created not in _LOGS_ALLOWED:
        _LOGS_ALLOWED.add(created)
        stack = cdk.Stack.of(scope)
        # CloudWatch Logs may use the key only for log groups of this account and Region.
        created.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=[
                    "kms:Encrypt*",
                    "kms:Decrypt*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:Describe*",
                ],
                resources=["*"],
                conditions={"ArnLike": {LOGS_ARN_CONTEXT_KEY: logs_key_condition(stack)}},
            )
        )
    return created


def encrypted_log_group(
    scope: Construct,
    id: str,
    *,
    key: kms.IKey,
    retention: logs.RetentionDays,
    log_group_name: str | None = None,
) -> logs.LogGroup:
    """A log group encrypted with `key`, kept on stack deletion (logs are evidence)."""
    return logs.LogGroup(
        scope,
        id,
        log_group_name=log_group_name,
        encryption_key=key,
        retention=retention,
        removal_policy=cdk.RemovalPolicy.RETAIN,
    )


@dataclass(frozen=True)
class StateMachineOptions:
    """How a genai-pacer construct builds its state machine.

    log_level: which execution events are logged. Default: ALL, what cdk-nag's AwsSolutions-SF1
        requires. A lower level (ERROR, FATAL, OFF) is yours to choose and fails SF1 as your own
        finding (the library does not acknowledge it); OFF creates no log group.
    log_group: where the state machine logs. Default: a new log group encrypted with
        `encryption_key`, kept when the stack is deleted.
    encryption_key: KMS key for the new log group (not with log_group). Default: the construct's one
        KMS key, shared by all its log groups, with rotation, retained on delete ($1 a month while it
        exists, AWS KMS pricing page; README, Security, "KMS keys").
    log_retention: retention of the new log group (not with log_group). Default: one month.
    log_execution_data: include every state's input and output in the logs. True writes prompts,
        the inputs they are built from and the model's answers to CloudWatch Logs, kept for the
        log group's retention. Default: False (events name states and errors only), since prompts
        may carry personal data.
    role: an existing role for the state machine; the model tasks add their grants to it. Default:
        a new role allowed to invoke only the configured models.
    state_machine_name: 1-80 characters. Default: generated by CloudFormation.
    state_machine_type: Default: STANDARD (exactly-once, runs up to a year; model calls can be slow).
        EXPRESS runs at most 5 minutes, at least once.
    timeout: Default: chosen by each construct; at most 5 minutes for EXPRESS.
    """

    log_group: logs.ILogGroup | None = None
    encryption_key: kms.IKey | None = None
    log_retention: logs.RetentionDays | None = None
    log_execution_data: bool = False
    role: iam.IRole | None = None
    state_machine_name: str | None = None
    state_machine_type: sfn.StateMachineType = sfn.StateMachineType.STANDARD
    timeout: cdk.Duration | None = None
    log_level: sfn.LogLevel = sfn.LogLevel.ALL

    def __post_init__(self) -> None:
        with Checks("StateMachineOptions") as check:
            # Both decide at synth what is built (a log group or none; the timeout limit and the type
            # aws-cdk-lib takes as an enum), so neither can wait for deploy time.
            for name, why in (
                ("log_level", "the level decides at synth whether a log group is created; pass an sfn.LogLevel"),
                ("state_machine_type", "the type decides at synth the longest timeout and how a run is started; "
                 "pass sfn.StateMachineType.STANDARD or EXPRESS"),
            ):
                kind = token_kind(getattr(self, name))
                if kind is not None:
                    check.fail(f"{name} is a deploy-time {kind}, but {why}")
            if check.one_of("log_level", self.log_level, LOG_LEVELS) and self.log_level == sfn.LogLevel.OFF:
                for name in ("log_group", "encryption_key", "log_retention"):
                    check.rule(
                        getattr(self, name) is None,
                        f"{name} configures logging and log_level is OFF, so it would be ignored; drop it or "
                        "choose a log level",
                    )
                check.rule(
                    self.log_execution_data is not True,
                    "log_execution_data=True with log_level OFF logs nothing; drop it or choose a log level",
                )
            check.instance("log_group", self.log_group, logs.ILogGroup, "a logs.LogGroup", optional=True)
            check.instance("encryption_key", self.encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("log_retention", self.log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
            check.instance("log_execution_data", self.log_execution_data, bool, "True or False")
            check.instance("role", self.role, iam.IRole, "an iam.Role", optional=True)
            if self.log_group is not None:
                for name in ("encryption_key", "log_retention"):
                    check.rule(
                        getattr(self, name) is None,
                        f"{name} configures a new log group and log_group is given, so it would be ignored; set it "
                        "on your log group instead",
                    )
            if check.text("state_machine_name", self.state_machine_name, optional=True, max_length=80):
                check.rule(
                    not any(c in str(self.state_machine_name) for c in ' <>{}[]?*"#%\\^|~`$&,;:/'),
                    f"state_machine_name={self.state_machine_name!r} may hold letters, digits, - and _ only",
                )
            express = self.state_machine_type == sfn.StateMachineType.EXPRESS
            if check.one_of(
                "state_machine_type", self.state_machine_type, (sfn.StateMachineType.STANDARD, sfn.StateMachineType.EXPRESS)
            ) and in_unit(check, "timeout", self.timeout, "seconds", why="a state machine's TimeoutSeconds is"):
                check.duration(
                    "timeout",
                    self.timeout,
                    minimum=cdk.Duration.seconds(1),
                    maximum=EXPRESS_LIMIT if express else STANDARD_LIMIT,
                    optional=True,
                    fix="an EXPRESS workflow runs at most 5 minutes; use STANDARD for longer runs"
                    if express
                    else "a STANDARD workflow runs at most a year",
                )


def model_state_machine(
    scope: Construct,
    *,
    definition: sfn.IChainable,
    models: Iterable[BedrockModel],
    options: StateMachineOptions,
    default_timeout: cdk.Duration,
) -> sfn.StateMachine:
    """A state machine that logs to an encrypted group (ALL events unless options lower it), traces
    with X-Ray, and may invoke only `models`.

    The model tasks grant their invoke ARN themselves; an inference profile also needs the
    foundation models it routes to, which are added here. The X-Ray and log-delivery actions accept
    no resource but `*`: they go in a policy of their own, and only that policy's finding is
    acknowledged, so a wildcard the user adds to the role still fails cdk-nag.
    """
    timeout = options.timeout or default_timeout
    if options.state_machine_type == sfn.StateMachineType.EXPRESS and options.timeout is None:
        timeout = EXPRESS_LIMIT
    machine = sfn.StateMachine(
        scope,
        "StateMachine",
        definition_body=sfn.DefinitionBody.from_chainable(definition),
        state_machine_name=options.state_machine_name,
        state_machine_type=options.state_machine_type,
        timeout=timeout,
        role=options.role,
    )
    _CONFIGURED_TIMEOUTS[machine] = timeout
    cfn = cast(sfn.CfnStateMachine, machine.node.default_child)
    cfn.tracing_configuration = sfn.CfnStateMachine.TracingConfigurationProperty(enabled=True)
    statements = [iam.PolicyStatement(actions=list(XRAY_ACTIONS), resources=["*"])]
    if options.log_level == sfn.LogLevel.OFF:
        cfn.logging_configuration = sfn.CfnStateMachine.LoggingConfigurationProperty(level=options.log_level.value)
    else:
        log_group = options.log_group or encrypted_log_group(
            scope,
            "Logs",
            key=log_key(scope, "LogsKey", options.encryption_key),
            retention=options.log_retention or logs.RetentionDays.ONE_MONTH,
        )
        cfn.logging_configuration = sfn.CfnStateMachine.LoggingConfigurationProperty(
            level=options.log_level.value,
            include_execution_data=options.log_execution_data,
            destinations=[
                sfn.CfnStateMachine.LogDestinationProperty(
                    cloud_watch_logs_log_group=sfn.CfnStateMachine.CloudWatchLogsLogGroupProperty(
                        log_group_arn=log_group.log_group_arn
                    )
                )
            ],
        )
        statements.append(iam.PolicyStatement(actions=list(LOG_DELIVERY_ACTIONS), resources=["*"]))
    wildcard_policy = iam.Policy(scope, "TracingAndLogDelivery", statements=statements)
    machine.role.attach_inline_policy(wildcard_policy)
    cfn.node.add_dependency(wildcard_policy)  # logging is checked when the state machine is created
    cdk.Validations.of(wildcard_policy).acknowledge(
        cdk.Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=WILDCARD_REASON)
    )
    for model in dict.fromkeys(models):
        for statement in model.policy_statements(scope, routed_only=True):
            machine.add_to_role_policy(statement)
    return machine


#: The timeout each state machine built here was given, for constructs that wait on one.
_CONFIGURED_TIMEOUTS: weakref.WeakKeyDictionary[sfn.StateMachine, cdk.Duration] = weakref.WeakKeyDictionary()


def configured_timeout(machine: sfn.StateMachine) -> cdk.Duration | None:
    """The timeout of a state machine a genai-pacer construct built; None for any other machine."""
    return _CONFIGURED_TIMEOUTS.get(machine)


def handler_function(
    scope: Construct,
    id: str,
    *,
    handler: str,
    environment: dict[str, str],
    timeout: cdk.Duration,
    memory_size: int = 256,
    encryption_key: kms.IKey | None = None,
    log_retention: logs.RetentionDays | None = None,
    reserved_concurrency: int | None = None,
) -> lambda_.Function:
    """A genai-pacer handler as a Lambda function: Python 3.14 on arm64, its own log group encrypted with
    `encryption_key` or the construct's one key (`log_key`), and an explicit role with inline grants only
    (the default role would attach the AWS managed AWSLambdaBasicExecutionRole policy, cdk-nag IAM4, and
    allow writing to any log group)."""
    log_group = encrypted_log_group(
        scope,
        f"{id}Logs",
        key=log_key(scope, f"{id}LogsKey", encryption_key),
        retention=log_retention or logs.RetentionDays.ONE_MONTH,
    )
    role = iam.Role(scope, f"{id}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    log_group.grant_write(role)
    return lambda_.Function(
        scope,
        id,
        runtime=lambda_.Runtime.PYTHON_3_14,
        architecture=lambda_.Architecture.ARM_64,
        handler=handler,
        code=handler_code(),
        role=role,
        log_group=log_group,
        timeout=timeout,
        memory_size=memory_size,
        environment=environment,
        reserved_concurrent_executions=reserved_concurrency,
    )
