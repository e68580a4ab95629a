"""StateMachineRunner: execute a synthesized state machine offline and read what happened."""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..._internal.checks import Checks
from ..._internal.install import MOTO_HINT
from ..emulator import BedrockEmulator, Invocation
from ._batch import BatchJob, BatchJobSimulator
from ._definition import ExecutablePlan, Integration, LambdaTask, _states, executable_copy
from ._errors import OfflineExecutionError
from ._lambda import (
    LambdaFunction,
    LambdaInvoker,
    find_function,
    function_environment,
    function_name_of,
    template_functions,
)
from ._template import BUCKET_TYPES, TABLE_TYPES, Environment, StateMachineSpec, Template, load_template

TERMINAL = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
#: moto's interpreter logs every failed state at ERROR with the repr of its whole subtree (tens of KB for
#: one failed run); the runner keeps those records (run.moto_log) instead of passing them on.
MOTO_LOGGER = "moto.stepfunctions.parser"
#: The variable that points an SDK client of one service at another endpoint: AWS_ENDPOINT_URL_<SERVICE ID>,
#: the service id upper-cased with spaces as underscores ("Bedrock Runtime"); boto3 reads it when a
#: client is created (https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html).
BEDROCK_ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"
#: How much of a run's failure a message shows: the cause's first characters, the last states entered.
CAUSE_CHARS = 600
STATES_SHOWN = 5


@dataclass
class Execution:
    """The outcome of one offline execution, and the model calls it made.

    invocations are the emulator's records of the calls made during this execution (throttled and
    failed ones included), so a test can count attempts; history is Step Functions' event history
    (child executions of a distributed Map keep their own, which moto does not expose).
    """

    state_machine: str
    execution_arn: str
    status: str
    output: Any
    error: str | None
    cause: str | None
    history: list[dict[str, Any]]
    invocations: list[Invocation]
    batch_jobs: list[BatchJob] = field(default_factory=list)
    wall_seconds: float = 0.0
    moto_log: list[str] = field(default_factory=list)
    lambda_calls: list[str] = field(default_factory=list)

    def __repr__(self) -> str:  # the history and the records stay out of assertion messages
        where = f" in {self.failed_state!r}" if self.failed_state else ""
        error = f": {self.error}" if self.error else ""
        return (f"<Execution {self.state_machine} {self.status}{where}{error}, {len(self.history)} events, "
                f"{self.model_calls} model calls>")

    @property
    def succeeded(self) -> bool:
        return self.status == "SUCCEEDED"

    @property
    def model_calls(self) -> int:
        """Every model call the emulator received, retries included."""
        return len(self.invocations)

    @property
    def throttled(self) -> int:
        """Calls the emulator refused for quota (each one a ThrottlingException the Retry saw)."""
        return sum(1 for invocation in self.invocations if invocation.outcome == "throttled")

    @property
    def outcomes(self) -> collections.Counter[str]:
        """How the model calls ended: ok, throttled, or the error type."""
        return collections.Counter(invocation.outcome for invocation in self.invocations)

    @property
    def retries(self) -> int:
        """Task attempts the definition's Retry started after a failure (each retry schedules the task
        again within one entry into its state). Children of a distributed Map keep their own history,
        which this does not see: count their calls with `invocations`."""
        scheduled = sum(1 for event in self.history if event.get("type") == "TaskScheduled")
        entered = sum(1 for event in self.history if event.get("type") == "TaskStateEntered")
        return scheduled - entered

    @property
    def states_entered(self) -> list[str]:
        """Names of the states entered, in order (inline Map iterations included)."""
        return [event["stateEnteredEventDetails"]["name"] for event in self.history
                if event.get("type", "").endswith("StateEntered") and "stateEnteredEventDetails" in event]

    @property
    def failed_state(self) -> str | None:
        """The state the execution failed in: the last one entered and never left (a Fail state, a Task
        without a matching Catch, a Map around a failed iteration, the innermost shown as `Map > Task`)."""
        if self.status == "SUCCEEDED":
            return None
        open_states: list[str] = []
        for event in self.history:
            kind = event.get("type", "")
            if kind.endswith("StateEntered") and "stateEnteredEventDetails" in event:
                open_states.append(event["stateEnteredEventDetails"]["name"])
            elif kind.endswith("StateExited") and "stateExitedEventDetails" in event:
                name = event["stateExitedEventDetails"]["name"]
                if name in open_states:
                    del open_states[len(open_states) - 1 - open_states[::-1].index(name)]
        return " > ".join(dict.fromkeys(open_states)) or None

    def task_errors(self) -> collections.Counter[str]:
        """Error names of the failed task attempts in the history (retried ones included)."""
        return collections.Counter(
            event["taskFailedEventDetails"].get("error")
            for event in self.history
            if event.get("type") == "TaskFailed" and "taskFailedEventDetails" in event
        )

    def raise_for_status(self) -> Execution:
        """Return self if the execution succeeded; else raise AssertionError naming the state it failed
        in, the error and the cause (shortened), in a few lines; `failure()` is the same text."""
        if not self.succeeded:
            raise AssertionError(self.failure())
        return self

    def failure(self) -> str:
        """A few lines on how the execution ended: state, error, cause (its first CAUSE_CHARS
        characters), the last states entered and the model calls. The whole cause is `cause`, the
        history `history`, moto's log of the run `moto_log`."""
        where = f" in state {self.failed_state!r}" if self.failed_state else ""
        lines = [f"{self.state_machine} ended {self.status}{where}: {self.error or 'no error name'}"]
        if self.cause:
            lines.append(f"cause: {_shorten_cause(self.cause)}")
        entered = self.states_entered
        if entered:
            shown = " -> ".join(entered[-STATES_SHOWN:])
            lines.append(f"states entered: {'... -> ' if len(entered) > STATES_SHOWN else ''}{shown}")
        lines.append(f"model calls: {dict(self.outcomes)}; Lambda calls: {len(self.lambda_calls)}; "
                     f"moto's log of the run: run.moto_log ({len(self.moto_log)} records)")
        return "\n".join(lines)


class StateMachineRunner:
    """Executes the state machines of a synthesized stack in moto's Step Functions interpreter, with
    Bedrock served by a BedrockEmulator and S3 and DynamoDB by moto.

    source: a cdk.Stack, a template dict, or the path of a synthesized template.
    bedrock: the running BedrockEmulator that serves bedrock:invokeModel and aws-sdk:bedrockruntime:*
        tasks (its quota throttles them; emulator.fail_next injects errors). Default: none; a model
        task then fails with a States.Runtime error saying so.
    batch_jobs: serves aws-sdk:bedrock:*ModelInvocationJob tasks. Default: none (such a task fails).
    services: your own fakes for aws-sdk services moto lacks (AppConfig deployments) or that a test
        wants to control, by the service name in the Resource ARN (`arn:aws:states:::aws-sdk:appconfig:
        startDeployment` -> "appconfig"). A fake's methods are botocore's snake_case operation names
        (start_deployment); each gets the API's parameters (Step Functions' PascalCase converted and
        checked against botocore's model) and returns the response as a dict under botocore's member
        names, or raises ServiceError("ConflictException", "...") (or a botocore ClientError), which
        fails the task with the name Step Functions gives it, so the definition's Retry and Catch
        match: `<Service>.<Error>Exception` for an error the service's botocore model declares
        (AppConfig.ConflictException), the SDK's base exception for any other code
        (CloudWatch.CloudWatchException for Throttling). A state machine calling an operation its fake lacks is
        refused before it starts; a fake that raises anything else, or answers with members the API
        does not have, fails the run with OfflineExecutionError. Bedrock is served by `bedrock` and
        `batch_jobs`. Default: none (every other aws-sdk service goes to moto).
    time_scale: retry waits and Wait states last 1/time_scale of their time. Default: the emulator's
        time_scale, so retries, the quota window and model latency share one clock.
    values: what a Ref, Fn::GetAtt ("LogicalId.Attribute"), parameter or Fn::ImportValue resolves to,
        where the runner's fake value does not suit. Default: none.
    region / account: the pseudo parameters. Default: the stack's own when concrete, else us-east-1 and
        moto's account 123456789012.
    functions: callables that stand in for Lambda functions, keyed by the function's logical id,
        construct path (or its end, "Orders/Enrich"), name or ARN: `handler(event, context)` returns what
        the function returns, or raises (the Task then fails with the exception's class name as Error,
        as Lambda reports a raised exception, so Retry and Catch match it). genai-pacer's own functions
        need no entry: the runner recognizes their code (the handler asset this genai-pacer ships) and
        calls their handlers in this process, with the function's environment from the template and
        boto3 clients that reach this runner's moto. An entry replaces one of them too (to inject a
        fault). Default: none; a Task invoking any other function is refused before the run.
    debug: let moto's interpreter log reach Python logging as it does without the runner (tens of KB
        per failed run, the repr of every failing state). Default: False; the records of each run are
        in `Execution.moto_log` either way.

    The interpreter's own work (a few milliseconds per state, more on a loaded machine) runs in real
    time. Pick a time_scale at which a model call still lasts far longer than that (a 4-second call
    lasts 200 ms at 20x, 67 ms at 60x), or calls finish before the next ones start and a Map throttles
    less than it would on AWS. Task TimeoutSeconds and HeartbeatSeconds are real seconds offline.

    Use it as a context manager: it starts moto (`mock_aws` with state machine execution on), creates
    the template's S3 buckets and DynamoDB tables there, and patches the interpreter until it closes.
    Put test data with `runner.s3` / `runner.dynamodb` (boto3 clients inside the mock).
    """

    def __init__(
        self,
        source: Any,
        *,
        bedrock: Any = None,
        batch_jobs: BatchJobSimulator | None = None,
        services: Mapping[str, Any] | None = None,
        time_scale: float | None = None,
        values: Mapping[str, Any] | None = None,
        region: str | None = None,
        account: str | None = None,
        functions: Mapping[Any, Callable[..., Any]] | None = None,
        debug: bool = False,
    ) -> None:
        with Checks("StateMachineRunner") as check:
            check.instance("bedrock", bedrock, BedrockEmulator, "a running BedrockEmulator([ModelSpec(...)])", optional=True)
            check.instance("batch_jobs", batch_jobs, BatchJobSimulator, "BatchJobSimulator(respond=...)", optional=True)
            check.number("time_scale", time_scale, above=0, optional=True,
                         fix="60 runs a 2-second retry wait in 33 ms; the default is the emulator's time_scale")
            check.instance("values", values, Mapping, "a dict of logical id (or 'Id.Attribute') -> value", optional=True)
            if check.instance("services", services, Mapping, 'a dict of aws-sdk service name -> fake, e.g. '
                              '{"appconfig": FakeAppConfig()}', optional=True):
                _check_services(check, services or {})
            check.text("region", region, optional=True, fix="an AWS Region such as 'us-east-1'")
            if check.text("account", account, optional=True):
                check.rule(str(account).isdigit() and len(str(account)) == 12,
                           f"account={account!r} is not a 12-digit AWS account id; moto refuses ARNs with any other", id="account.not-account-id")
            check.instance("functions", functions, Mapping,
                           "a dict of function logical id (or construct path) -> handler(event, context)", optional=True)
            check.instance("debug", debug, bool, "True or False")
        body, found, paths = load_template(source)
        scale = time_scale if time_scale is not None else (bedrock.time_scale if bedrock is not None else 1.0)
        env = Environment(
            region=region or found.get("region") or "us-east-1",
            account=account or found.get("account") or "123456789012",
            stack_name=found.get("stack_name") or "Stack",
        )
        self.template = Template(body=body, env=env, values=dict(values or {}), paths=paths)
        self.bedrock, self.batch_jobs, self.time_scale = bedrock, batch_jobs, float(scale)
        self._specs = self.template.state_machines()
        if not self._specs:
            raise OfflineExecutionError("the template has no AWS::StepFunctions::StateMachine to run")
        self.services: dict[str, Any] = dict(services or {})
        if self.services:
            called = self._sdk_services()
            with Checks("StateMachineRunner") as check:
                for api in self.services:
                    check.rule(api in called, (
                        f"services[{api!r}]: no state machine of this template calls aws-sdk:{api}:*, so the fake would "
                        f"never answer; the aws-sdk services its state machines call are "
                        f"{', '.join(sorted(called)) or 'none'}"), id="services.never-called")
        self.debug = debug
        self._functions = self._lambda_functions()
        self._callables = self._map_functions(functions or {})
        self._plans: dict[str, ExecutablePlan] = {}
        self._arns: dict[str, str] = {}
        self._mock: Any = None
        self._log: _MotoLog | None = None

    # ---- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> StateMachineRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> StateMachineRunner:
        if self._mock is not None:
            return self
        try:
            import boto3
            from moto import mock_aws
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"StateMachineRunner needs moto with Step Functions support and boto3: {MOTO_HINT}"
            ) from error
        try:
            from . import _interpreter
        except (ImportError, AttributeError) as error:  # moto moved an internal the runner patches
            from importlib.metadata import version

            raise ImportError(
                f"StateMachineRunner patches moto's Step Functions interpreter and was built against moto 5.2.x; "
                f"moto {version('moto')} is installed and lacks what it patches ({error}). Install moto[stepfunctions]==5.2.5"
            ) from error

        self._mock = mock_aws(config={"stepfunctions": {"execute_state_machine": True}})
        self._mock.start()
        try:
            region = self.template.env.region
            self._boto3 = boto3
            self.sfn = boto3.client("stepfunctions", region_name=region)
            self.s3 = boto3.client("s3", region_name=region)
            self.dynamodb = boto3.client("dynamodb", region_name=region)
            bedrock_client = None
            if self.bedrock is not None:
                try:
                    _ = self.bedrock.endpoint_url  # raises while the emulator is stopped
                except RuntimeError:
                    raise RuntimeError(
                        "the BedrockEmulator is not running: start it before the runner, e.g. "
                        "`with BedrockEmulator([...]) as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:`"
                    ) from None
                bedrock_client = self.bedrock.client(
                    retries={"total_max_attempts": 1},  # only the definition's Retry retries, as on AWS
                    parameter_validation=False,  # Step Functions sends parameters unvalidated
                    max_pool_connections=1024,  # a distributed Map runs up to MaxConcurrency calls at once
                    connect_timeout=10,
                    read_timeout=120,
                )
            self._lambdas = LambdaInvoker(functions=self._functions, callables=self._callables, environments={})
            self._runtime = _interpreter.Runtime(
                bedrock=bedrock_client or _NoEmulator(),
                s3=lambda: boto3.client("s3", region_name=region),
                region=region,
                account=self.template.env.account,
                time_scale=self.time_scale,
                batch=self.batch_jobs,
                services=self.services,
                lambdas=self._lambdas,
            )
            self._log = _MotoLog(propagate=self.debug)
            _interpreter.install(self._runtime)
            self._create_resources()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._mock is None:
            return
        from . import _interpreter

        for arn in self._arns.values():  # stop what still runs, so no worker outlives the patches
            with contextlib.suppress(Exception):  # closing must not hide the test's own failure
                for item in self.sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
                    self.sfn.stop_execution(executionArn=item["executionArn"])
        if _interpreter._ACTIVE is not None and _interpreter._ACTIVE is getattr(self, "_runtime", None):
            _interpreter.uninstall()
        if self._log is not None:
            self._log.close()
            self._log = None
        self._mock.stop()
        self._mock = None
        self._arns.clear()

    # ---- inspection ----------------------------------------------------------------------------
    @property
    def state_machines(self) -> list[StateMachineSpec]:
        """The template's state machines (logical id, construct path, resolved definition)."""
        return list(self._specs)

    def physical_name(self, resource: Any) -> str:
        """The name a template resource has offline (what its Ref resolves to): a bucket's name, a
        table's name. resource: a logical id, or the construct (s3.Bucket, dynamodb.Table, its L1)."""
        logical_id = _logical_id(resource)
        if logical_id not in self.template.resources:
            raise OfflineExecutionError(f"{logical_id!r} is no resource of this template")
        return self.template.physical_name(logical_id)

    def definition(self, state_machine: Any = None) -> dict[str, Any]:
        """The definition as executed offline (tokens resolved, interpreter limits worked around)."""
        return self._plan(self.select(state_machine)).definition

    def select(self, state_machine: Any = None) -> StateMachineSpec:
        """Find a state machine by logical id, construct path (or its end), or the construct itself;
        None picks the only one."""
        if state_machine is None:
            if len(self._specs) == 1:
                return self._specs[0]
            raise OfflineExecutionError(
                f"the template has {len(self._specs)} state machines; pass state_machine= one of: "
                + ", ".join(spec.describe() for spec in self._specs)
            )
        wanted = _construct_path(state_machine)
        for spec in self._specs:
            if wanted == spec.logical_id:
                return spec
        matches = [
            spec for spec in self._specs
            if spec.path and any(
                spec.path == candidate or spec.path.endswith("/" + candidate)
                for candidate in (wanted, f"{wanted}/Resource")
            )
        ]
        if not matches:  # a construct that holds the state machine, e.g. a BoundedMap
            matches = [spec for spec in self._specs if spec.path and f"/{wanted}/" in f"/{spec.path}"]
        if len(matches) == 1:
            return matches[0]
        raise OfflineExecutionError(
            f"state_machine={wanted!r} matches {len(matches)} state machines; use a logical id or a full construct "
            "path, one of: " + ", ".join(spec.describe() for spec in self._specs)
        )

    # ---- execution -----------------------------------------------------------------------------
    def run(
        self,
        input: Any = None,
        *,
        state_machine: Any = None,
        timeout: float = 120.0,
        name: str | None = None,
    ) -> Execution:
        """Start `state_machine` with `input` (JSON-serializable; default {}) and wait for it to end.

        timeout is in real seconds: past it the execution is stopped and TimeoutError raised with
        the last events of its history.
        """
        if self._mock is None:
            raise RuntimeError("the runner is not started: use `with StateMachineRunner(...) as runner:`")
        with Checks("StateMachineRunner.run") as check:
            check.number("timeout", timeout, above=0, fix="real seconds to wait for the execution to end")
            check.text("name", name, optional=True)
            try:
                payload = json.dumps({} if input is None else input)
            except (TypeError, ValueError) as error:
                check.fail(f"input is not JSON ({error}); pass what json.dumps accepts, as Step Functions takes JSON", id="input.not-json")
        from . import _interpreter

        spec = self.select(state_machine)
        plan = self._plan(spec)
        model_tasks = sorted(
            name for name, integration in plan.integrations.items()
            if integration.api == "bedrockruntime" or (integration.service == "bedrock" and integration.action == "invokeModel")
        )
        if model_tasks and self.bedrock is None:
            raise OfflineExecutionError(
                f"{spec.logical_id} calls a model in {', '.join(model_tasks)}, and the runner has no emulator to serve "
                "it: pass bedrock=BedrockEmulator([ModelSpec(<model id>)]) (started with `with`)"
            )
        self._check_fakes(spec, plan)
        self._check_lambdas(spec, plan)
        arn = self._create(spec, plan)
        runtime = _interpreter.active()
        fake_errors_before = len(runtime.fake_errors)
        lambda_problems_before, lambda_calls_before = len(self._lambdas.problems), len(self._lambdas.calls)
        log_before = self._log.count if self._log is not None else 0
        runtime.maps = plan.maps
        runtime.map_runs.clear()
        runtime.map_run_settings.clear()
        calls_before = self.bedrock.invocations if self.bedrock is not None else []
        jobs_before = len(self.batch_jobs.jobs) if self.batch_jobs is not None else 0
        began = time.monotonic()
        execution_arn = self.sfn.start_execution(
            stateMachineArn=arn,
            name=name or uuid.uuid4().hex,
            input=payload,
        )["executionArn"]
        described = self.sfn.describe_execution(executionArn=execution_arn)
        # A stopped execution is ABORTED at once, as on AWS; its interpreter still unwinds the states that ran
        # (their calls end, the history closes): the run is over when that thread is.
        while described["status"] not in TERMINAL or execution_arn not in runtime.ended:
            if time.monotonic() - began > timeout:
                self.sfn.stop_execution(executionArn=execution_arn, error="Runner.Timeout")
                tail = self._history(execution_arn)[-5:]
                raise TimeoutError(
                    f"{spec.describe()} still ran after {timeout} s (real time) and was stopped; raise timeout= or "
                    f"time_scale=. Last events: {json.dumps(tail, default=str)[:2000]}"
                )
            time.sleep(0.02)
            described = self.sfn.describe_execution(executionArn=execution_arn)
        wall = time.monotonic() - began
        fake_errors = runtime.fake_errors[fake_errors_before:]
        if fake_errors:
            raise OfflineExecutionError(
                f"{spec.describe()} ended {described['status']}, but a fake of `services` misbehaved, so the outcome "
                "says nothing about the state machine:\n" + "\n".join(f"- {message}" for message in fake_errors)
            )
        lambda_problems = self._lambdas.problems[lambda_problems_before:]
        if lambda_problems:
            raise OfflineExecutionError(
                f"{spec.describe()} ended {described['status']}, but a function misbehaved, so the outcome says "
                "nothing about the state machine:\n" + "\n".join(f"- {message}" for message in lambda_problems)
            )
        output = described.get("output")
        return Execution(
            state_machine=spec.logical_id,
            execution_arn=execution_arn,
            status=described["status"],
            output=json.loads(output) if output else None,
            error=described.get("error"),
            cause=described.get("cause"),
            history=self._history(execution_arn),
            invocations=_new_records(calls_before, self.bedrock.invocations) if self.bedrock is not None else [],
            batch_jobs=self.batch_jobs.jobs[jobs_before:] if self.batch_jobs is not None else [],
            wall_seconds=wall,
            moto_log=self._log.since(log_before) if self._log is not None else [],
            lambda_calls=self._lambdas.calls[lambda_calls_before:],
        )

    # ---- internals -----------------------------------------------------------------------------
    def _sdk_services(self) -> dict[str, list[str]]:
        """aws-sdk service name -> the Task states (of any state machine) that call it."""
        called: dict[str, list[str]] = {}
        for spec in self._specs:
            for name, state in _states(spec.definition):
                resource = state.get("Resource") if state.get("Type") == "Task" else None
                integration = Integration.parse(resource) if isinstance(resource, str) else None
                if integration is not None and integration.service == "aws-sdk":
                    called.setdefault(integration.api, []).append(name)
        return called

    def _check_fakes(self, spec: StateMachineSpec, plan: ExecutablePlan) -> None:
        """Refuse before the start a call no fake answers: at run time a Catch on States.ALL would hide it."""
        from ._casing import ParameterError
        from ._interpreter import fake_method, missing_method_message

        problems = []
        for name, integration in sorted(plan.integrations.items()):
            fake = self.services.get(integration.api) if integration.service == "aws-sdk" else None
            if fake is None:
                continue
            if integration.pattern:
                problems.append(f"Task {name!r} calls {integration.api}:{integration.action}.{integration.pattern}; "
                                "a fake answers request-response calls only")
                continue
            try:
                operation, method = fake_method(fake, integration.api, integration.action)
            except ParameterError as error:
                problems.append(f"Task {name!r}: {error} (AWS rejects this definition)")
                continue
            if method is None:
                problems.append(missing_method_message(integration.api, fake, operation, f"Task {name!r}"))
        if problems:
            raise OfflineExecutionError(
                f"{spec.describe()} cannot run against the given services:\n" + "\n".join(f"- {p}" for p in problems)
            )

    def _lambda_tasks(self) -> list[LambdaTask]:
        tasks: list[LambdaTask] = []
        for spec in self._specs:
            for name, state in _states(spec.definition):
                found = LambdaTask.parse(name, state) if state.get("Type") == "Task" else None
                if found is not None:
                    tasks.append(found)
        return tasks

    def _lambda_functions(self) -> list[LambdaFunction]:
        """The template's functions, and one stand-in for each function a Task names that the template
        does not hold (an imported one), which only `functions=` can serve."""
        functions = template_functions(self.template) if self.template.of_type("AWS::Lambda::Function") else []
        for task in self._lambda_tasks():
            if task.function is not None and find_function(task.function, functions) is None:
                name = function_name_of(task.function)
                env = self.template.env
                arn = task.function if task.function.startswith("arn:") else (
                    f"arn:{env.partition}:lambda:{env.region}:{env.account}:function:{name}")
                functions.append(LambdaFunction(logical_id=name, path=None, name=name, arn=arn, handler=None,
                                                library=False))
        return functions

    def _map_functions(self, functions: Mapping[Any, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
        """functions= keyed by logical id; each key names exactly one function a state machine invokes."""
        invoked = {found.logical_id for task in self._lambda_tasks() if task.function is not None
                   for found in [find_function(task.function, self._functions)] if found is not None}
        candidates = [function for function in self._functions if function.logical_id in invoked]
        listing = ", ".join(function.describe() for function in candidates) or "none"
        mapped: dict[str, Callable[..., Any]] = {}
        with Checks("StateMachineRunner") as check:
            for key, handler in functions.items():
                try:
                    wanted = key if isinstance(key, str) else _construct_path(key)
                except TypeError:
                    check.fail(f"functions key {key!r} is {check_kind(key)}; key each handler by the function's logical "
                               "id, construct path, name or ARN", id="functions.key-type")
                    continue
                if not callable(handler):
                    check.fail(f"functions[{wanted!r}] is {check_kind(handler)}; pass handler(event, context), e.g. "
                               "your function's handler itself", id="functions.not-handler")
                    continue
                matches = [function for function in candidates if function.matches(wanted)]
                if len(matches) != 1:
                    check.fail(f"functions[{wanted!r}] matches {len(matches)} of the Lambda functions the state machines "
                               f"invoke; name one by logical id, construct path, name or ARN: {listing}", id="functions.ambiguous")
                    continue
                mapped[matches[0].logical_id] = handler
        return mapped

    def _check_lambdas(self, spec: StateMachineSpec, plan: ExecutablePlan) -> None:
        """Every Lambda task served (a genai-pacer handler or a `functions=` callable), the environment of
        each genai-pacer function resolved, before the run: at run time a Catch on States.ALL would hide
        what is missing."""
        problems = []
        for name, task in sorted(plan.lambdas.items()):
            if task.function is None:
                problems.append(f"Task {name!r} invokes AWS Lambda with a FunctionName chosen at run time (a path); "
                                "the runner finds each function before the run: write the FunctionName in the definition")
                continue
            function = find_function(task.function, self._functions)
            if function is None:  # every named function has a stand-in; kept for a template changed since
                problems.append(f"Task {name!r} invokes AWS Lambda ({task.function}), which the runner cannot find")
                continue
            if function.logical_id in self._callables:
                continue
            if function.library:
                environment = function_environment(self.template, function)
                if self.bedrock is not None:  # the handler's own bedrock-runtime client calls the emulator
                    environment[BEDROCK_ENDPOINT_VARIABLE] = self.bedrock.endpoint_url
                self._lambdas.environments[function.logical_id] = environment
                continue
            elsewhere = (
                f" Its Handler {function.handler!r} is a genai-pacer handler, but its code is not the handler asset of "
                "the genai-pacer installed here (synthesized with another version?): synthesize it with this one."
                if function.library_handler_elsewhere else ""
            )
            problems.append(
                f"Task {name!r} invokes AWS Lambda function {function.describe()}, whose code is not one of genai-pacer's "
                f"handlers; moto would run it in Docker, which this offline test bed does not use.{elsewhere} Pass "
                f"functions={{{function.logical_id!r}: handler}} to StateMachineRunner, handler(event, context) returning "
                "what the function returns (your handler itself, or a stub)"
            )
        if problems:
            raise OfflineExecutionError(
                f"state machine {spec.describe()} cannot be executed offline:\n" + "\n".join(f"- {p}" for p in problems)
            )

    def _plan(self, spec: StateMachineSpec) -> ExecutablePlan:
        if spec.logical_id not in self._plans:
            self._plans[spec.logical_id] = executable_copy(spec.definition, where=f"state machine {spec.describe()}")
        return self._plans[spec.logical_id]

    def _create(self, spec: StateMachineSpec, plan: ExecutablePlan) -> str:
        if spec.logical_id in self._arns:
            return self._arns[spec.logical_id]
        from botocore.exceptions import ClientError

        try:
            arn = self.sfn.create_state_machine(
                name=spec.name, definition=json.dumps(plan.definition), roleArn=spec.role_arn, type=spec.type
            )["stateMachineArn"]
        except ClientError as error:
            raise OfflineExecutionError(
                f"moto's interpreter rejects the definition of state machine {spec.describe()}: "
                f"{error.response['Error'].get('Message', error)}"
            ) from None
        self._arns[spec.logical_id] = arn
        return arn

    def _history(self, execution_arn: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"executionArn": execution_arn, "maxResults": 1000}
        while True:
            page = self.sfn.get_execution_history(**kwargs)
            events.extend(page["events"])
            if not page.get("nextToken"):
                return events
            kwargs["nextToken"] = page["nextToken"]

    def _create_resources(self) -> None:
        """The template's buckets and tables, in moto, under the names the definitions use."""
        region = self.template.env.region
        for logical_id in self.template.of_type(*BUCKET_TYPES):
            name = self.template.physical_name(logical_id)
            kwargs: dict[str, Any] = {"Bucket": name}
            if region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
            self.s3.create_bucket(**kwargs)
        for logical_id, resource in self.template.of_type(*TABLE_TYPES).items():
            props = self.template.resolve(resource.get("Properties") or {}, where=logical_id)
            table: dict[str, Any] = {
                "TableName": self.template.physical_name(logical_id),
                "KeySchema": props["KeySchema"],
                "AttributeDefinitions": props["AttributeDefinitions"],
                "BillingMode": "PAY_PER_REQUEST",
            }
            indexes = [
                {key: index[key] for key in ("IndexName", "KeySchema", "Projection") if key in index}
                for index in props.get("GlobalSecondaryIndexes") or []
            ]
            if indexes:
                table["GlobalSecondaryIndexes"] = indexes
            local = [
                {key: index[key] for key in ("IndexName", "KeySchema", "Projection") if key in index}
                for index in props.get("LocalSecondaryIndexes") or []
            ]
            if local:
                table["LocalSecondaryIndexes"] = local
            self.dynamodb.create_table(**table)


class _MotoLog(logging.Handler):
    """Keeps the records of moto's interpreter (the last MAX of them, each cut to CHARS) while a runner
    is started, and stops them reaching the root logger unless `propagate`."""

    MAX, CHARS = 500, 4_000

    def __init__(self, *, propagate: bool) -> None:
        super().__init__(logging.WARNING)
        self.records: collections.deque[tuple[int, str]] = collections.deque(maxlen=self.MAX)
        self.count = 0
        self._lock_records = threading.Lock()
        self._logger = logging.getLogger(MOTO_LOGGER)
        self._propagate = self._logger.propagate
        self._logger.addHandler(self)
        self._logger.propagate = propagate

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.levelname} {record.name}: {record.getMessage()}"
        except Exception:  # a record whose arguments do not format: keep the template
            text = f"{record.levelname} {record.name}: {record.msg}"
        if len(text) > self.CHARS:
            text = text[: self.CHARS] + f"... [{len(text) - self.CHARS} more characters]"
        with self._lock_records:
            self.count += 1
            self.records.append((self.count, text))

    def since(self, count: int) -> list[str]:
        with self._lock_records:
            return [text for index, text in self.records if index > count]

    def close(self) -> None:
        self._logger.removeHandler(self)
        self._logger.propagate = self._propagate
        super().close()


def _shorten_cause(cause: str) -> str:
    """A cause in one line of at most CAUSE_CHARS characters; a Lambda error object as its type, message
    and the last frame of its stack."""
    with contextlib.suppress(ValueError, TypeError, AttributeError, IndexError):
        error = json.loads(cause)
        if isinstance(error, dict) and "errorType" in error and "errorMessage" in error:
            frames = error.get("stackTrace") or []
            lines = str(frames[-1]).splitlines() if frames else []  # File ..., line N, in f / the code / ^^^^
            last = " ".join(" ".join(line.split()) for line in lines if line.strip().strip("^~"))
            cause = f"{error['errorType']}: {error['errorMessage']}" + (f" (at {last})" if last else "")
    text = " ".join(cause.split())
    return text if len(text) <= CAUSE_CHARS else f"{text[:CAUSE_CHARS]}... [{len(text) - CAUSE_CHARS} more characters in run.cause]"


class _NoEmulator:
    """Stands in for the emulator client when the runner has none, so a model task says what is missing."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            "this state machine calls Bedrock, but the runner has no emulator: pass "
            "bedrock=BedrockEmulator([...]) (running) to StateMachineRunner"
        )


_NOT_FAKES = (str, bytes, bytearray, int, float, bool, list, tuple, set, frozenset, dict)


def _check_services(check: Checks, services: Mapping[str, Any]) -> None:
    """Each key an aws-sdk service (not Bedrock, which bedrock= and batch_jobs= serve), each value an
    object with at least one method named after an operation of that service."""
    from botocore import xform_name
    from botocore.session import get_session

    from ._interpreter import ERROR_PREFIX, boto_service_for, sdk_name_for

    for api, fake in services.items():
        name = f"services[{api!r}]"
        if not isinstance(api, str) or not api:
            check.fail(f"services key {api!r} is {check_kind(api)}; key each fake by the aws-sdk service name of "
                       "its Resource ARN (arn:aws:states:::aws-sdk:appconfig:startDeployment -> 'appconfig')", id="services.key-type")
            continue
        if api in ERROR_PREFIX:
            check.fail(f"{name}: Bedrock is served by the runner itself; pass bedrock=BedrockEmulator([...]) for "
                       "bedrockruntime and batch_jobs=BatchJobSimulator(...) for bedrock batch jobs", id="services.bedrock")
            continue
        boto = boto_service_for(api)
        if boto is None:
            hint = sdk_name_for(api)
            fix = f"write {hint!r} (the aws-sdk name, as in the Resource ARN)" if hint else (
                "write the service name of the Resource ARN arn:aws:states:::aws-sdk:<service>:<action>, e.g. 'appconfig'")
            check.fail(f"{name}: {api!r} is not an AWS SDK service Step Functions can call; {fix}", id="services.unknown-service")
            continue
        if fake is None or isinstance(fake, _NOT_FAKES):
            check.fail(f"{name}={fake!r:.60} is {check_kind(fake)}; pass an object whose methods are {api}'s operations "
                       "in snake_case (def start_deployment(self, **params) -> dict)", id="services.not-fake")
            continue
        if isinstance(fake, type):
            check.fail(f"{name}={fake.__name__} is a class; pass an instance, {fake.__name__}(), so the fake keeps "
                       "its state between calls", id="services.class-not-instance")
            continue
        operations = {xform_name(op): op for op in get_session().get_service_model(boto).operation_names}
        methods = [m for m in dir(fake) if not m.startswith("_") and callable(getattr(fake, m, None))]
        misnamed = {m: snake for m in methods if m not in operations
                    for snake in operations if snake.replace("_", "") == m.replace("_", "").lower()}
        for method, snake in misnamed.items():
            check.fail(f"{name}.{method}: name the method {snake} (botocore's snake_case name of {operations[snake]}); "
                       "the runner calls that name", id="services.misnamed-method")
        if not misnamed and not any(m in operations for m in methods):
            check.fail(f"{name} ({type(fake).__name__}) has no method named after an operation of {api}; name them by "
                       f"botocore's snake_case names, e.g. {', '.join(sorted(operations)[:3])}", id="services.no-operation")


def check_kind(value: Any) -> str:
    from ..._internal.checks import kind_of

    return "None" if value is None else kind_of(value)


def _new_records(before: list[Invocation], after: list[Invocation]) -> list[Invocation]:
    """The emulator's records added since `before`: a slice, unless its bounded history dropped some."""
    if not before or (len(after) >= len(before) and after[len(before) - 1] is before[-1]):
        return after[len(before):]
    seen = {id(record) for record in before}  # `before` keeps these objects alive, so ids stay unique
    return [record for record in after if id(record) not in seen]


def _logical_id(resource: Any) -> str:
    if isinstance(resource, str):
        return resource
    node = getattr(resource, "node", None)
    if node is None:
        raise TypeError(f"resource={resource!r}: pass a logical id or a construct of the stack")
    import aws_cdk as cdk

    element = resource if isinstance(resource, cdk.CfnElement) else node.default_child
    if not isinstance(element, cdk.CfnElement):
        raise TypeError(f"{node.path} has no CloudFormation resource of its own; pass the construct that has one")
    stack = cdk.Stack.of(element)
    return str(stack.resolve(stack.get_logical_id(element)))


def _construct_path(state_machine: Any) -> str:
    """A logical id or path as given, or the path of a construct (an sfn.StateMachine or its L1)."""
    if isinstance(state_machine, str):
        return state_machine.strip("/")
    node = getattr(state_machine, "node", None)
    if node is not None:
        return str(node.path)
    raise TypeError(
        f"state_machine={state_machine!r}: pass a logical id, a construct path or the StateMachine construct"
    )
