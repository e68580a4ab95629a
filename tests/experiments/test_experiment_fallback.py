"""PromptExperiment's fallback workflow executed offline: the synthesized state machine, run by moto's
interpreter, with AppConfig answered by a fake (moto has no AppConfig deployments) and the guard
alarms held by moto's CloudWatch, whose DisableAlarmActions / EnableAlarmActions the workflow calls.

The fake keeps one environment's deployments the way AppConfig reports them: StartDeployment answers
ConflictException while another deployment (here the rollback of a split change) holds the
environment, a new deployment goes DEPLOYING -> BAKING -> COMPLETE over GetDeployment calls, and the
configuration served afterwards is the deployed version's content. Each call also records whether
the guard alarms' actions were enabled at that moment, read from moto.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import boto3
from genai_pacer import BedrockModel
from genai_pacer.experiments.prompt_experiment import (
    APPCONFIG_ROLLBACK_STATES,
    CREATED_ALARM_STATE,
    FALLBACK_MAX_POLLS,
    GUARD_WAIT_SOURCE,
    ExperimentVariant,
    PromptExperiment,
    TextPrompt,
)
from genai_pacer.testing.sfn import ServiceError, StateMachineRunner

NOVA = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
HAIKU = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
SCALE = 1000  # a 30 s retry interval lasts 30 ms; the 10 s Wait 10 ms
SPLIT, FALLBACK = "1", "2"  # the hosted configuration version numbers, as AppConfig numbers them
ALARM = {"detail-type": "CloudWatch Alarm State Change", "source": "aws.cloudwatch",
         "detail": {"alarmName": "support-treatment-p90", "state": {"value": "ALARM"}}}


def experiment() -> tuple[cdk.Stack, PromptExperiment]:
    stack = cdk.Stack(cdk.App(), "Experiment")
    return stack, PromptExperiment(stack, "Exp", experiment_name="support", variants=[
        ExperimentVariant("control", NOVA, 80, TextPrompt("Answer: {{question}}")),
        ExperimentVariant("treatment", HAIKU, 20, TextPrompt("Answer briefly: {{question}}")),
    ])


def logical_id(construct: Any) -> str:
    element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    stack = cdk.Stack.of(element)
    return str(stack.resolve(stack.get_logical_id(element)))


def runner_for(stack: cdk.Stack, exp: PromptExperiment, **services: Any) -> StateMachineRunner:
    """The runner with the configuration versions numbered as AppConfig would number them."""
    version = exp.configuration.node.find_child("Resource")
    values = {f"{logical_id(version)}.VersionNumber": SPLIT, f"{logical_id(exp.fallback_version)}.VersionNumber": FALLBACK}
    return StateMachineRunner(stack, services=services, values=values, time_scale=SCALE)


def guard_names(runner: StateMachineRunner, exp: PromptExperiment) -> list[str]:
    return [runner.physical_name(alarm) for alarm in exp.alarms.values()]


def create_guards(runner: StateMachineRunner, exp: PromptExperiment) -> None:
    """The guard alarms in moto, actions enabled, under the names the definition uses."""
    cloudwatch = boto3.client("cloudwatch", region_name=runner.template.env.region)
    for name in guard_names(runner, exp):
        cloudwatch.put_metric_alarm(
            AlarmName=name, Namespace="GenAIPacer", MetricName="LatencyMs", Statistic="Sum", Period=60,
            EvaluationPeriods=3, Threshold=1, ComparisonOperator="GreaterThanThreshold", ActionsEnabled=True,
        )


def guard_states(runner: StateMachineRunner, exp: PromptExperiment) -> dict[str, tuple[str, bool]]:
    """Each guard's state and whether its actions are enabled, as AppConfig's monitor reads them."""
    cloudwatch = boto3.client("cloudwatch", region_name=runner.template.env.region)
    alarms = cloudwatch.describe_alarms(AlarmNames=guard_names(runner, exp))["MetricAlarms"]
    return {alarm["AlarmName"]: (alarm["StateValue"], alarm["ActionsEnabled"]) for alarm in alarms}


def set_state(runner: StateMachineRunner, name: str, state: str) -> None:
    boto3.client("cloudwatch", region_name=runner.template.env.region).set_alarm_state(
        AlarmName=name, StateValue=state, StateReason="test")


def actions_enabled(runner: StateMachineRunner, exp: PromptExperiment) -> dict[str, bool]:
    cloudwatch = boto3.client("cloudwatch", region_name=runner.template.env.region)
    alarms = cloudwatch.describe_alarms(AlarmNames=guard_names(runner, exp))["MetricAlarms"]
    return {alarm["AlarmName"]: alarm["ActionsEnabled"] for alarm in alarms}


class FakeAppConfig:
    """One AppConfig environment's deployments, answering the calls the fallback workflow makes.

    versions: hosted configuration version number -> content.
    busy_for: StartDeployment calls answered ConflictException, as while the split change's
        deployment is rolling back (its GetDeployment says ROLLING_BACK, then ROLLED_BACK).
    states: what GetDeployment reports for a new deployment, one state per call, the last one kept.
    read_failures: GetDeployment calls answered InternalServerException first (-1: every call).
    Monitors: a deployment still running or baking when a monitored alarm whose actions are enabled
    is in ALARM or INSUFFICIENT_DATA is rolled back (AppConfig user guide, monitoring deployments);
    `monitored` gives those alarms' states (the guards', read from moto, once bound).
    `bind` gives it, once the runner knows them, the ids of the environment's application,
    environment, configuration profile and fallback strategy (a call naming others gets
    ResourceNotFoundException, as from AppConfig) and `observe`, called at every call for what the
    test records (the guard alarms' actions, read from moto).
    """

    def __init__(self, *, versions: dict[str, Any], busy_for: int = 0,
                 states: tuple[str, ...] = ("DEPLOYING", "BAKING", "COMPLETE"), read_failures: int = 0) -> None:
        self.versions, self.ids, self.observe = versions, {}, lambda: None
        self.monitored: Any = dict
        self.busy_for, self.states, self.read_failures = busy_for, states, read_failures
        self.deployed = SPLIT  # the rollback restores the version before the split change: same content here
        self.deployments: dict[int, dict[str, Any]] = {
            1: {"ConfigurationVersion": SPLIT, "reads": 0, "rolling_back": True},
        }
        self.calls: list[tuple[str, dict[str, Any], Any]] = []

    def _check(self, params: dict[str, Any], *names: str) -> None:
        for name in names:
            if params[name] != self.ids[name]:
                raise ServiceError("ResourceNotFoundException", f"{name} {params[name]} not found", 404)

    def start_deployment(self, **params: Any) -> dict[str, Any]:
        self.calls.append(("StartDeployment", params, self.observe()))
        self._check(params, "ApplicationId", "EnvironmentId", "ConfigurationProfileId", "DeploymentStrategyId")
        if params["ConfigurationVersion"] not in self.versions:
            raise ServiceError("ResourceNotFoundException", f"version {params['ConfigurationVersion']} not found", 404)
        if self.busy_for > 0:
            self.busy_for -= 1
            if self.busy_for == 0:
                self.deployments[1]["rolling_back"] = False
            raise ServiceError("ConflictException", "Deployment 1 is in progress (ROLLING_BACK) for this environment", 409)
        number = max(self.deployments) + 1
        self.deployments[number] = {"ConfigurationVersion": params["ConfigurationVersion"], "reads": 0}
        return {"DeploymentNumber": number, "State": "DEPLOYING", "ApplicationId": params["ApplicationId"],
                "EnvironmentId": params["EnvironmentId"], "ConfigurationVersion": params["ConfigurationVersion"],
                "Description": params.get("Description", "")}

    def get_deployment(self, **params: Any) -> dict[str, Any]:
        self.calls.append(("GetDeployment", params, self.observe()))
        self._check(params, "ApplicationId", "EnvironmentId")
        if self.read_failures:
            self.read_failures -= 1
            raise ServiceError("InternalServerException", "There was an internal failure in the service", 500)
        deployment = self.deployments.get(params["DeploymentNumber"])
        if deployment is None:
            raise ServiceError("ResourceNotFoundException", f"deployment {params['DeploymentNumber']} not found", 404)
        if "rolling_back" in deployment:
            state = "ROLLING_BACK" if deployment["rolling_back"] else "ROLLED_BACK"
        elif "rolled_back_by" in deployment:
            state = "ROLLED_BACK"
        else:
            state = self.states[min(deployment["reads"], len(self.states) - 1)]
            deployment["reads"] += 1
            breached = [name for name, (alarm, enabled) in sorted(self.monitored().items())
                        if enabled and alarm in APPCONFIG_ROLLBACK_STATES]
            if state in ("DEPLOYING", "BAKING") and breached:
                deployment["rolled_back_by"] = breached[0]
                state = "ROLLED_BACK"
            if state == "COMPLETE":
                self.deployed = deployment["ConfigurationVersion"]
        return {"DeploymentNumber": params["DeploymentNumber"], "State": state,
                "ConfigurationVersion": deployment["ConfigurationVersion"]}

    def served(self) -> dict[str, Any]:
        """The configuration the environment's clients receive now."""
        return dict(self.versions[self.deployed])

    def operations(self) -> list[str]:
        return [operation for operation, _, _ in self.calls]


def bind(appconfig: FakeAppConfig, runner: StateMachineRunner, exp: PromptExperiment) -> None:
    appconfig.ids = {
        "ApplicationId": runner.physical_name(exp.application),
        "EnvironmentId": runner.physical_name(exp.environment),
        "ConfigurationProfileId": runner.physical_name(exp.configuration.node.find_child("ConfigurationProfile")),
        "DeploymentStrategyId": runner.physical_name(exp.node.find_child("FallbackStrategy")),
    }
    appconfig.observe = lambda: actions_enabled(runner, exp)
    appconfig.monitored = lambda: guard_states(runner, exp)


def start(stack: cdk.Stack, exp: PromptExperiment, *, cloudwatch: Any = None,
          **behaviour: Any) -> tuple[StateMachineRunner, FakeAppConfig]:
    """A started runner with the AppConfig fake bound to it and the guard alarms in moto (actions on);
    CloudWatch is moto's unless `cloudwatch` is given."""
    appconfig = FakeAppConfig(versions={SPLIT: exp.document, FALLBACK: exp.fallback_document}, **behaviour)
    services = {"appconfig": appconfig, **({"cloudwatch": cloudwatch} if cloudwatch is not None else {})}
    runner = runner_for(stack, exp, **services).start()
    bind(appconfig, runner, exp)
    create_guards(runner, exp)
    return runner, appconfig


def shares(document: dict[str, Any]) -> dict[str, int]:
    return {variant["name"]: variant["share"] for variant in document["variants"]}


@dataclass
class Fallback:
    """One execution of the fallback workflow and what it left behind."""

    run: Any
    appconfig: FakeAppConfig
    runner: StateMachineRunner
    exp: PromptExperiment
    before: dict[str, bool]  # the guards' actions before the run
    after: dict[str, bool]  # and after it

    @property
    def guards_enabled(self) -> bool:
        return self.after == dict.fromkeys(guard_names(self.runner, self.exp), True) and len(self.after) == 4


def run_fallback(event: dict[str, Any] = ALARM, *, cloudwatch: Any = None, environment: str | None = None,
                 **behaviour: Any) -> Fallback:
    """Synthesize an experiment, start its fallback with `event` against the fakes and close the runner.
    environment: an environment id AppConfig does not know (ResourceNotFoundException)."""
    stack, exp = experiment()
    runner, appconfig = start(stack, exp, cloudwatch=cloudwatch, **behaviour)
    if environment is not None:
        appconfig.ids["EnvironmentId"] = environment
    try:
        before = actions_enabled(runner, exp)
        run = runner.run(event)
        after = actions_enabled(runner, exp)
    finally:
        runner.close()
    return Fallback(run, appconfig, runner, exp, before, after)


# ---- the fallback sends everyone to control -----------------------------------------------------


def test_a_guard_alarm_during_a_rollback_waits_for_it_then_deploys_control_only_with_the_alarms_muted():
    fallback = run_fallback(busy_for=2)
    run, appconfig = fallback.run.raise_for_status(), fallback.appconfig
    assert all(fallback.before.values()) and len(fallback.before) == 4

    # Two StartDeployment calls met the rollback in progress and were retried; the third started deployment 2.
    assert run.task_errors() == Counter({"AppConfig.ConflictException": 2})
    assert appconfig.operations() == ["StartDeployment"] * 3 + ["GetDeployment"] * 3
    started = appconfig.calls[2][1]
    assert started["ConfigurationVersion"] == FALLBACK
    assert started["Description"] == "guard alarm support-treatment-p90 fired: everyone to the control variant"
    assert run.output["deployment"] == {"DeploymentNumber": 2} and run.output["status"] == {"State": "COMPLETE"}
    # Everyone on control: the environment serves the fallback document (it served the 80/20 split).
    assert appconfig.versions[SPLIT] == fallback.exp.document and shares(fallback.exp.document) == {"control": 80, "treatment": 20}
    assert shares(appconfig.served()) == {"control": 100, "treatment": 0}
    assert appconfig.served() == fallback.exp.fallback_document
    # The guards' actions were off at every AppConfig call (so AppConfig could not roll the fallback
    # back), and on again at the end.
    assert all(not any(observed.values()) and len(observed) == 4 for _, _, observed in appconfig.calls)
    assert fallback.guards_enabled


def test_a_deployment_whose_state_cannot_be_read_re_enables_the_alarms_and_fails_the_workflow():
    fallback = run_fallback(read_failures=-1)
    run = fallback.run
    assert (run.status, run.error) == ("FAILED", "FallbackFailed")
    # One read and the Retry's 4 attempts, then the Catch.
    assert fallback.appconfig.operations() == ["StartDeployment"] + ["GetDeployment"] * 5
    assert run.task_errors() == Counter({"AppConfig.InternalServerException": 5})
    entered = [event["stateEnteredEventDetails"]["name"] for event in run.history if "stateEnteredEventDetails" in event]
    assert entered[-2:] == ["Enable guard alarm actions after a failure", "Fallback failed"]
    assert fallback.guards_enabled


def test_a_fallback_that_cannot_start_re_enables_the_alarms_at_once_and_fails_the_workflow():
    fallback = run_fallback(environment="deleted-environment")  # AppConfig answers ResourceNotFoundException
    run = fallback.run
    assert (run.status, run.error) == ("FAILED", "FallbackFailed")
    assert fallback.appconfig.operations() == ["StartDeployment"]  # not a conflict: not retried
    assert run.task_errors() == Counter({"AppConfig.ResourceNotFoundException": 1})
    failed = [event["taskFailedEventDetails"] for event in run.history if event.get("type") == "TaskFailed"]
    # the workflow asked for its own environment, which the fake no longer knows
    assert f"EnvironmentId {fallback.runner.physical_name(fallback.exp.environment)} not found" in failed[0]["cause"]
    assert "Service: AppConfig, Status Code: 404" in failed[0]["cause"]
    assert fallback.guards_enabled


# ---- throttles, rollbacks, a start by hand and a deployment that never ends ---------------------


class FlakyCloudWatch:
    """CloudWatch's alarm-action calls on moto's alarms, answering Throttling to the first `throttle`
    EnableAlarmActions calls, as CloudWatch does under a burst of API calls."""

    def __init__(self, region: str, throttle: int) -> None:
        self.region, self.throttle = region, throttle

    def disable_alarm_actions(self, **params: Any) -> dict[str, Any]:
        boto3.client("cloudwatch", region_name=self.region).disable_alarm_actions(**params)
        return {}

    def enable_alarm_actions(self, **params: Any) -> dict[str, Any]:
        if self.throttle:
            self.throttle -= 1
            raise ServiceError("Throttling", "Rate exceeded", 400)
        boto3.client("cloudwatch", region_name=self.region).enable_alarm_actions(**params)
        return {}


def test_a_throttled_enable_call_is_retried_so_the_guards_end_enabled():
    fallback = run_fallback(cloudwatch=FlakyCloudWatch("us-east-1", throttle=1))
    assert fallback.run.task_errors()["CloudWatch.CloudWatchException"] == 1  # Throttling is no modeled CloudWatch error
    assert fallback.guards_enabled
    assert fallback.run.status == "SUCCEEDED"


def test_a_fallback_deployment_that_is_rolled_back_fails_the_workflow():
    fallback = run_fallback(states=("DEPLOYING", "ROLLING_BACK", "ROLLED_BACK"))
    assert shares(fallback.appconfig.served()) == {"control": 80, "treatment": 20}  # the fallback did not take
    assert fallback.guards_enabled
    assert (fallback.run.status, fallback.run.error) == ("FAILED", "FallbackFailed")


def test_a_start_by_hand_without_an_alarm_names_itself_and_deploys_control_only():
    fallback = run_fallback({})  # no detail.alarmName: a States.Runtime error on AWS before the fix
    fallback.run.raise_for_status()
    assert fallback.appconfig.calls[0][1]["Description"] == "fallback started by hand: everyone to the control variant"
    assert shares(fallback.appconfig.served()) == {"control": 100, "treatment": 0}
    assert fallback.guards_enabled


def test_a_deployment_that_never_ends_is_given_up_after_the_last_poll_with_the_alarms_re_enabled():
    fallback = run_fallback(states=("DEPLOYING",))  # stuck
    assert (fallback.run.status, fallback.run.error) == ("FAILED", "FallbackFailed")
    # the first read, then one per poll
    assert fallback.appconfig.operations().count("GetDeployment") == FALLBACK_MAX_POLLS + 1
    assert fallback.guards_enabled


# ---- alarms in INSUFFICIENT_DATA (issue 21.5) ----------------------------------------------------


def started_split(**behaviour: Any) -> tuple[StateMachineRunner, FakeAppConfig, PromptExperiment]:
    """A runner and the fake, with the guards in moto; the caller closes the runner."""
    stack, exp = experiment()
    runner, appconfig = start(stack, exp, **behaviour)
    return runner, appconfig, exp


def deploy_split(appconfig: FakeAppConfig) -> list[str]:
    """The split deployed as the stack deploys it; what GetDeployment reports until it ends."""
    number = appconfig.start_deployment(**{**appconfig.ids, "ConfigurationVersion": SPLIT,
                                           "DeploymentStrategyId": appconfig.ids["DeploymentStrategyId"]})["DeploymentNumber"]
    seen: list[str] = []
    while not seen or seen[-1] not in ("COMPLETE", "ROLLED_BACK"):
        seen.append(appconfig.get_deployment(ApplicationId=appconfig.ids["ApplicationId"],
                                             EnvironmentId=appconfig.ids["EnvironmentId"], DeploymentNumber=number)["State"])
    return seen


def test_the_fake_rolls_back_a_deployment_while_a_guard_is_insufficient_data_as_appconfig_does():
    runner, appconfig, exp = started_split()
    try:
        set_state(runner, guard_names(runner, exp)[0], "INSUFFICIENT_DATA")
        assert deploy_split(appconfig) == ["ROLLED_BACK"]
        set_state(runner, guard_names(runner, exp)[0], "OK")
        assert deploy_split(appconfig) == ["DEPLOYING", "BAKING", "COMPLETE"]
    finally:
        runner.close()


def test_a_guard_in_insufficient_data_does_not_stop_the_fallback_which_mutes_every_guard():
    """A treatment without calls yet (or a guard just created) is INSUFFICIENT_DATA; another guard fires."""
    stack, exp = experiment()
    runner, appconfig = start(stack, exp)
    names = guard_names(runner, exp)
    try:
        set_state(runner, names[0], "INSUFFICIENT_DATA")
        set_state(runner, names[1], "ALARM")
        run = runner.run(ALARM).raise_for_status()
        after = guard_states(runner, exp)
    finally:
        runner.close()
    assert run.output["status"] == {"State": "COMPLETE"}
    assert shares(appconfig.served()) == {"control": 100, "treatment": 0}
    assert all(enabled for _, enabled in after.values()) and after[names[0]][0] == "INSUFFICIENT_DATA"


def guard_wait(runner: StateMachineRunner, monkeypatch: Any, evaluate: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The guard wait's handler (the inline source the stack deploys) run against moto; each of its
    sleeps calls `evaluate(slept)`, standing in for CloudWatch's evaluations. Returns its namespace
    and the answers it sent to CloudFormation."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", runner.template.env.region)
    monkeypatch.setenv("WAIT_SECONDS", "300")
    monkeypatch.setenv("POLL_SECONDS", "10")
    namespace: dict[str, Any] = {}
    exec(compile(GUARD_WAIT_SOURCE, "guard_wait", "exec"), namespace)  # noqa: S102 - the deployed code itself
    now = [0.0]
    sent: list[dict[str, Any]] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds
        evaluate(now[0])

    namespace.update(clock=lambda: now[0], sleep=sleep, send=lambda url, body: sent.append(json.loads(body)))
    return namespace, sent


def event(kind: str, names: list[str]) -> dict[str, Any]:
    return {"RequestType": kind, "ResponseURL": "https://cloudformation-custom-resource-response.example/x",
            "StackId": "stack", "RequestId": "r1", "LogicalResourceId": "ExpGuardsEvaluated",
            "ResourceProperties": {"ServiceToken": "arn", "AlarmNames": names}}


def test_a_new_stacks_deployment_starts_only_once_the_guards_are_evaluated_so_it_is_not_rolled_back(monkeypatch):
    runner, appconfig, exp = started_split()
    names = guard_names(runner, exp)
    try:
        for name in names:  # as CloudWatch creates them
            set_state(runner, name, CREATED_ALARM_STATE)
        assert deploy_split(appconfig) == ["ROLLED_BACK"]  # what the stack's deployment met before the wait

        def evaluate(slept: float) -> None:  # CloudWatch evaluates one guard per 10 s poll; no traffic is OK
            set_state(runner, names[int(slept // 10) - 1], "OK")

        handler, sent = guard_wait(runner, monkeypatch, evaluate)
        handler["handler"](event("Create", names), None)
        assert sent == [{"Status": "SUCCESS", "Reason": "guards evaluated", "PhysicalResourceId": "ExpGuardsEvaluated",
                         "StackId": "stack", "RequestId": "r1", "LogicalResourceId": "ExpGuardsEvaluated",
                         "Data": {"Pending": 0}}]
        assert all(state == "OK" for state, _ in guard_states(runner, exp).values())
        assert deploy_split(appconfig) == ["DEPLOYING", "BAKING", "COMPLETE"]  # the deployment that depends on it
        # later split changes are still guarded: a guard in ALARM rolls one back
        set_state(runner, names[2], "ALARM")
        assert deploy_split(appconfig) == ["ROLLED_BACK"]
    finally:
        runner.close()


def test_the_guard_wait_gives_up_after_its_limit_and_never_fails_the_stack(monkeypatch):
    runner, _, exp = started_split()
    names = guard_names(runner, exp)
    try:
        set_state(runner, names[0], CREATED_ALARM_STATE)
        handler, sent = guard_wait(runner, monkeypatch, lambda slept: None)  # never evaluated
        handler["handler"](event("Update", names), None)
        assert (sent[-1]["Status"], sent[-1]["Data"]) == ("SUCCESS", {"Pending": 1})
        assert handler["clock"]() == 300  # it waited the whole limit, polling every 10 s

        def refused(**_: Any) -> None:
            raise RuntimeError("AccessDenied")

        handler["boto3"] = type("Boto3", (), {"client": staticmethod(lambda _: type("C", (), {"describe_alarms": staticmethod(refused)})())})
        handler["handler"](event("Create", names), None)
        assert (sent[-1]["Status"], sent[-1]["Data"]) == ("SUCCESS", {"Pending": -1, "Error": "RuntimeError"})
        handler["handler"](event("Delete", names), None)  # deleting waits for nothing
        assert (sent[-1]["Status"], sent[-1]["Data"], handler["clock"]()) == ("SUCCESS", {"Pending": 0}, 300)
    finally:
        runner.close()
