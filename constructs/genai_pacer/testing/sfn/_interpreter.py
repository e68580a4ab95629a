r"""Patches to moto's Step Functions interpreter (a port of LocalStack's), active while a runner is.

What each patch does and why:
- Service integrations: `bedrock:invokeModel` (moto forwards it to the boto3 `bedrock` control-plane
  client, which has no such operation) and `aws-sdk:bedrockruntime:*` (moto fails with "Unknown
  service: 'bedrockruntime'") go to the BedrockEmulator; `aws-sdk:bedrock:*ModelInvocationJob` to the
  BatchJobSimulator. Parameters and results are converted between Step Functions' PascalCase and the
  API's names, and errors are named as AWS names them (BedrockRuntime.ThrottlingException,
  Bedrock.ThrottlingException), so a definition's Retry and Catch match as they do on AWS.
- User fakes: `aws-sdk:<service>:*` tasks of a service given in the runner's `services` go to the
  user's object (method = botocore's snake_case operation name, API-shaped parameters checked
  against botocore's model), and the errors it raises are named `<Service>.<Name>Exception` as Step
  Functions names them (AppConfig.ConflictException). Other aws-sdk services are left to moto.
- Clock: retry waits and Wait states sleep 1/time_scale of their time. ASL intervals are whole
  seconds, so scaling the definition cannot go below one second; scaling the interpreter's clock
  keeps the backoff, the MaxDelaySeconds cap and the jitter exactly as defined, on the same clock as
  the emulator's quota window.
- JSONPath: moto returns a list for a definite path through an index ($.Output.Message.Content[0].Text);
  Step Functions returns the value. A filter applied to an object ($[?(@.ServiceTier)]) tests the object
  itself and keeps it whole when it matches, as Jayway JsonPath's PredicatePathToken does (AWS's
  evaluator); jsonpath_ng filters the object's member values instead. A path with a filter is indefinite,
  and "indefinite paths always return a list" (Jayway JsonPath's README), one match included, where moto
  unwraps a single match that is not an array element.
- Lambda: `lambda:invoke` and function-ARN tasks go to the runner's LambdaInvoker (genai-pacer's own
  handlers called in this process, the user's `functions=` callables) instead of moto's Lambda, which
  would need Docker. moto's own code still turns the response into the Task result or failure.
- Distributed Map: JSONL item readers, ItemBatcher, the tolerated-failure threshold (moto parses it
  but lets every failed item pass) and ResultWriter files (moto writes an empty manifest). A Map Run
  whose execution is stopped (StopExecution) is ABORTED (MapRunAborted, then MapStateAborted where moto
  adds MapStateSucceeded), its running children too, and the execution ends ABORTED: the children a
  stop ended are not failures (the threshold would have failed the execution, FAILED, which a stop
  never is), and moto would report the Map Run SUCCEEDED. The
  statuses are botocore's stepfunctions model's: ExecutionStatus and MapRunStatus both have ABORTED,
  and MapRunExecutionCounts.aborted counts the children that "were running, but were either stopped
  by the user or by Step Functions because the Map Run failed" (STOPPED_BY_USER below).
- DynamoDB: "Individual write operations such as UpdateItem are atomic and always operate on the most
  recent version of the item, regardless of concurrency" (DynamoDB developer guide,
  BestPractices_ImplementingVersionControl.html); moto evaluates a condition, creates a missing item and
  applies each action in Python with no lock, so a Map's iterations writing one item (the shared quota
  ledger's) lose updates. The runner runs moto's item writes and reads one at a time.
- Intrinsic functions: moto parses an intrinsic from the definition's JSON text undecoded, so the JSON
  escape of a literal's backslash (`'today\\'s'` in JSON for `'today\'s'`) ends the literal early, ANTLR
  prints "mismatched input" and the rest of the function is dropped. The patched parser decodes the JSON
  first, as AWS reads the definition, raises on a syntax error instead of printing it, and applies Step
  Functions' four escapes (\' \{ \} \\); States.Format fills only unescaped {} (`_definition` refuses,
  naming the state, what is still not parseable).
"""

from __future__ import annotations

import datetime
import functools
import gzip
import itertools
import json
import os
import re
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore import xform_name
from botocore.exceptions import BotoCoreError, ClientError
from botocore.model import Shape, StructureShape
from botocore.session import get_session
from botocore.validate import ParamValidator
from jsonpath_ng.ext.filter import Filter
from jsonpath_ng.jsonpath import DatumInContext
from moto.stepfunctions.parser.api import (
    HistoryEventType,
    MapRunFailedEventDetails,
    MapRunStatus,
    TaskFailedEventDetails,
)
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.intrinsic.argument.argument import ArgumentLiteral
from moto.stepfunctions.parser.asl.component.intrinsic.function.statesfunction.generic.string_format import (
    StringFormat,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader import item_reader_decl
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval.resource_output_transformer.transformer import (
    ResourceOutputTransformer,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.reader_config.input_type import (
    InputType,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.distributed_iteration_component import (
    DistributedIterationComponent,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor.distributed_item_processor_worker import (
    DistributedItemProcessorWorker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.result_writer.resource_eval.resource_eval_s3 import (
    ResourceEvalS3 as ResultWriterS3,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
    lambda_eval_utils,
    state_task_factory,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk import (
    StateTaskServiceAwsSdk,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (
    StateTaskServiceCallback,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails as _EventDetails
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.asl.eval.program_state import (
    ProgramEnded,
    ProgramError,
    ProgramStopped,
    ProgramTimedOut,
)
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.intrinsic import preprocessor as intrinsic_preprocessor
from moto.stepfunctions.parser.asl.parse.intrinsic.intrinsic_parser import IntrinsicParser
from moto.stepfunctions.parser.asl.utils import json_path
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
from moto.stepfunctions.parser.backend.execution import Execution as _ParserExecution

from ._batch import BatchJobSimulator, ServiceError
from ._casing import ParameterError, operation_model, to_api, to_sfn
from ._definition import MapSettings

EventDetails: Any = _EventDetails  # a total TypedDict in moto's stubs; events carry one member

# Step Functions' name for each service in error names (BedrockRuntime.ThrottlingException). The
# same names error_prefix() derives from botocore's serviceId; kept literal because they route calls.
ERROR_PREFIX = {"bedrockruntime": "BedrockRuntime", "bedrock": "Bedrock"}


@dataclass
class JobResult:
    """One child execution of a distributed Map, as the ResultWriter reports it."""

    index: int
    input: Any
    output: Any = None
    status: str = "SUCCEEDED"
    error: str | None = None
    cause: str | None = None
    started: datetime.datetime = field(default_factory=lambda: datetime.datetime.now(datetime.UTC))
    stopped: datetime.datetime | None = None


@dataclass
class Runtime:
    """What the patched interpreter reaches while a runner is active."""

    bedrock: Any  # a boto3 bedrock-runtime client pointed at the emulator
    s3: Callable[[], Any]  # a boto3 S3 client factory (moto's S3 while the runner is active)
    region: str
    account: str
    time_scale: float = 1.0
    batch: BatchJobSimulator | None = None
    services: dict[str, Any] = field(default_factory=dict)  # aws-sdk service name -> the user's fake
    lambdas: Any = None  # a LambdaInvoker: serves the Lambda tasks
    fake_errors: list[str] = field(default_factory=list)  # the fakes' own bugs, reported after the run
    maps: dict[str, MapSettings] = field(default_factory=dict)  # of the state machine being run
    map_runs: dict[str, dict[int, JobResult]] = field(default_factory=dict)
    map_run_settings: dict[str, MapSettings] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)  # the executions whose interpreter thread has finished
    lock: threading.Lock = field(default_factory=threading.Lock)


_ACTIVE: Runtime | None = None
_INSTALL_LOCK = threading.Lock()
_ORIGINALS: list[tuple[Any, str, Any, Any]] = []  # owner, name, callable original, own attribute
_local = threading.local()


def active() -> Runtime:
    if _ACTIVE is None:  # only reachable if moto runs a state machine after the runner closed
        raise RuntimeError("no StateMachineRunner is active; run state machines through StateMachineRunner.run")
    return _ACTIVE


# ---- service integrations ----------------------------------------------------------------------


def _failure(env: Any, state: Any, error: str, cause: str) -> FailureEvent:
    return FailureEvent(
        env=env,
        error_name=CustomErrorName(error_name=error),
        event_type=HistoryEventType.TaskFailed,
        event_details=EventDetails(
            taskFailedEventDetails=TaskFailedEventDetails(
                resource=state._get_sfn_resource(),
                resourceType=state._get_sfn_resource_type(),
                error=error,
                cause=cause,
            )
        ),
    )


def _service_failure(env: Any, state: Any, prefix: str, ex: Exception, *, api: str | None = None) -> FailureEvent | None:
    """The failure AWS reports for a service error: <Prefix>.<Code>, cause with status and request id.
    api: the aws-sdk service of a user's fake; its error names follow error_name() (codes the service's
    model does not declare become the SDK's base exception), and the cause names `prefix` itself."""
    fake = api is not None
    if isinstance(ex, ClientError):
        code = ex.response.get("Error", {}).get("Code") or "Unknown"
        message = ex.response.get("Error", {}).get("Message") or str(ex)
        meta = ex.response.get("ResponseMetadata", {})
        status, request_id = meta.get("HTTPStatusCode"), meta.get("RequestId", "")
    elif isinstance(ex, ServiceError):
        code, message, status, request_id = ex.code, ex.message, ex.status, str(uuid.uuid4())
    elif isinstance(ex, BotoCoreError) and not fake:  # the emulator is not running, or a read timed out
        code, message, status, request_id = "SdkClientException", f"{ex} (is the BedrockEmulator running?)", None, ""
    else:
        return None
    if api is not None:
        error = error_name(api, code)
        detail = "" if error != f"{prefix}.{prefix}Exception" else f", Error Code: {code}"
        cause = f"{message} (Service: {prefix}, Status Code: {status}{detail}, Request ID: {request_id})"
        return _failure(env, state, error, cause)
    name = code if code.endswith("Exception") else f"{code}Exception"
    service = "BedrockRuntime" if prefix == "Bedrock" and not isinstance(ex, ServiceError) else prefix
    cause = f"{message} (Service: {service}, Status Code: {status}, Request ID: {request_id})"
    return _failure(env, state, f"{prefix}.{name}", cause)


def _call_runtime(action: str, params: dict[str, Any], where: str) -> dict[str, Any]:
    """A bedrock-runtime operation on the emulator, PascalCase in and out."""
    model = operation_model("bedrock-runtime", action)
    api_params = to_api(params, model.input_shape, where)
    response = getattr(active().bedrock, xform_name(model.name))(**api_params)
    return to_sfn(response, model.output_shape)


def _call_batch(action: str, params: dict[str, Any], where: str) -> dict[str, Any]:
    runtime = active()
    if runtime.batch is None:
        raise RuntimeError(
            f"{where} calls bedrock:{action}, but the runner simulates no batch jobs: pass "
            "batch_jobs=BatchJobSimulator(respond=...) to StateMachineRunner"
        )
    model = operation_model("bedrock", action)
    api_params = to_api(params, model.input_shape, where)
    response = runtime.batch.call(model.name, api_params, s3=runtime.s3(), region=runtime.region,
                                  account=runtime.account)
    return to_sfn(response, model.output_shape)


# ---- user fakes for other aws-sdk services -------------------------------------------------------

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]*[a-z0-9]+|[A-Z0-9]+")


def error_prefix_for(service_id: str) -> str:
    """Step Functions' service name in aws-sdk error names, from botocore's serviceId: each word
    capitalized, the rest lower-cased ('ACM PCA' -> AcmPca, 'DynamoDB' -> DynamoDb, 'SFN' -> Sfn,
    'AppConfig' -> AppConfig, 'Bedrock Runtime' -> BedrockRuntime), as the AWS SDK for Java 2.x
    names its clients and the Step Functions guide's examples show (AcmPca.ResourceNotFoundException)."""
    words = _WORD.findall(service_id)
    return "".join(word[:1].upper() + word[1:].lower() for word in words)


#: A botocore model file that begins with its metadata: {"version":"2.0","metadata":{...
_MODEL_HEAD = re.compile(r'\s*\{\s*(?:"version"\s*:\s*"[^"\\]*"\s*,\s*)?"metadata"\s*:\s*')
_MODEL_HEAD_BYTES = 16_384


def _model_metadata_from_head(session: Any, name: str) -> dict[str, Any] | None:
    """The metadata of the service model the session's loader would load (the same search paths, file
    names and order as botocore.loaders), read from the head of its file; None where it cannot be."""
    loader = session.get_component("data_loader")
    try:
        version = loader.determine_latest_version(name, "service-2")
        for base in loader.search_paths:
            for suffix, opener in ((".json", open), (".json.gz", gzip.open)):
                path = os.path.join(base, name, version, "service-2" + suffix)
                if os.path.isfile(path):
                    with opener(path, "rb") as model:
                        head = model.read(_MODEL_HEAD_BYTES).decode("utf-8", "replace")
                    found = _MODEL_HEAD.match(head)
                    metadata = json.JSONDecoder().raw_decode(head, found.end())[0] if found else None
                    return metadata if isinstance(metadata, dict) else None
    except (OSError, ValueError, BotoCoreError):  # ValueError: the head ends inside the metadata
        return None
    return None


def _service_id(session: Any, name: str) -> str:
    metadata = _model_metadata_from_head(session, name)
    if metadata is None:
        metadata = session.get_service_model(name).metadata
    return metadata.get("serviceId") or name


@functools.cache
def _sdk_index() -> dict[str, str]:
    """aws-sdk service name (the lower-cased SDK client name: sfn, acmpca, cloudwatchlogs) -> botocore's.
    Every model's serviceId is read from its file's head, not its loaded model: loading all 445 of
    botocore 1.44's models took 2.8 s alone and 6 s in a test run, on the first fake of a service
    whose aws-sdk name is not botocore's (sfn, cloudwatchlogs) or of an unknown name; the heads take
    about 0.03 s."""
    session = get_session()
    index: dict[str, str] = {}
    for name in session.get_available_services():
        index.setdefault(error_prefix_for(_service_id(session, name)).lower(), name)
    return index


@functools.cache
def boto_service_for(api: str) -> str | None:
    """botocore's name for the service an `aws-sdk:<api>:*` Resource calls, or None if there is none."""
    session = get_session()
    for name in session.get_available_services():  # the common case without loading every model
        if name.replace("-", "") == api:
            service_id = session.get_service_model(name).metadata.get("serviceId") or name
            if error_prefix_for(service_id).lower() == api:
                return name
    return _sdk_index().get(api)


def sdk_name_for(boto_service: str) -> str | None:
    """The aws-sdk name of a botocore service ('stepfunctions' -> 'sfn'), for hints."""
    try:
        service_id = get_session().get_service_model(boto_service).metadata.get("serviceId") or boto_service
    except Exception:  # not a botocore service either
        return None
    return error_prefix_for(service_id).lower()


def error_prefix(api: str) -> str:
    """`AppConfig` for `aws-sdk:appconfig:*`: the first part of the error names of its tasks."""
    if api in ERROR_PREFIX:
        return ERROR_PREFIX[api]
    boto = boto_service_for(api)
    if boto is None:
        return api
    return error_prefix_for(get_session().get_service_model(boto).metadata.get("serviceId") or boto)


@functools.cache
def _modeled_errors(boto_service: str) -> dict[str, str]:
    """Error code (as on the wire) or shape name -> the error shape's name, for one service."""
    codes: dict[str, str] = {}
    for shape in get_session().get_service_model(boto_service).error_shapes:
        codes.setdefault(shape.name, shape.name)
        codes.setdefault((shape.metadata.get("error") or {}).get("code") or shape.name, shape.name)
    return codes


def error_name(api: str, code: str) -> str:
    """The Error of a failed `aws-sdk:<api>:*` task whose service answered `code`: `<Prefix>.<Shape>`
    with an Exception suffix for an error the service's model declares (AppConfig.ConflictException,
    S3.NoSuchKeyException), else the SDK's base exception, `<Prefix>.<Prefix>Exception`
    (CloudWatch.CloudWatchException for Throttling, S3.S3Exception for SlowDown)."""
    prefix = error_prefix(api)
    boto = boto_service_for(api)
    shape = _modeled_errors(boto).get(code) if boto is not None else None
    if shape is None:
        return f"{prefix}.{prefix}Exception"
    return f"{prefix}.{shape if shape.endswith('Exception') else shape + 'Exception'}"


def fake_method(fake: Any, api: str, action: str) -> tuple[str, Any]:
    """(operation name, the fake's bound method or None) for `aws-sdk:<api>:<action>`."""
    boto = boto_service_for(api)
    if boto is None:
        raise ParameterError(f"aws-sdk:{api} is no service botocore knows")
    model = operation_model(boto, action)
    method = getattr(fake, xform_name(model.name), None)
    return model.name, method if callable(method) else None


def missing_method_message(api: str, fake: Any, operation: str, where: str) -> str:
    method = xform_name(operation)
    return (
        f"{where} calls {api}:{operation}, and the fake given as services[{api!r}] ({type(fake).__name__}) has no "
        f"method {method}: add `def {method}(self, **params)` that takes the {operation} request's members "
        f"(botocore's names) and returns a dict shaped like its response, or raises "
        f"ServiceError('<Code>', '<message>') for an error"
    )


def _unknown_members(value: Any, shape: Shape | None, where: str) -> list[str]:
    """Keys of a fake's response that the operation's output shape does not have (misspelt, wrong case)."""
    if shape is None or getattr(shape, "is_document_type", False):
        return []
    if isinstance(shape, StructureShape) and isinstance(value, dict):
        found = []
        for key, item in value.items():
            if key == "ResponseMetadata":
                continue
            if key not in shape.members:
                close = [m for m in shape.members if m.lower() == str(key).lower()]
                found.append(f"{where}.{key}" + (f" (write {close[0]!r})" if close else ""))
            else:
                found.extend(_unknown_members(item, shape.members[key], f"{where}.{key}"))
        return found
    if shape.type_name == "list" and isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _unknown_members(item, shape.member, f"{where}[{i}]")]
    if shape.type_name == "map" and isinstance(value, dict):
        return [p for k, item in value.items() for p in _unknown_members(item, shape.value, f"{where}.{k}")]
    return []


class FakeError(Exception):
    """A user's fake misbehaved (a bug in the test, not an outcome of the state machine)."""


def _call_fake(api: str, fake: Any, action: str, params: dict[str, Any], where: str) -> Any:
    """An operation on the user's fake: PascalCase parameters -> the API's, checked against botocore's
    model as the service would check them; the response checked and converted back to PascalCase."""
    runtime = active()
    boto = boto_service_for(api)
    if boto is None:  # refused when the runner was built; kept for a template changed since
        raise ParameterError(f"{where}: aws-sdk:{api} is no service botocore knows")
    model = operation_model(boto, action)
    api_params = to_api(params, model.input_shape, where)
    if model.input_shape is not None:
        report = ParamValidator().validate(api_params, model.input_shape)
        if report.has_errors():
            raise ParameterError(
                f"{where} for {api}:{model.name} do not fit the API, so AWS would refuse the call: "
                f"{report.generate_report()}"
            )
    method = getattr(fake, xform_name(model.name), None)
    if not callable(method):
        message = missing_method_message(api, fake, model.name, where)
        runtime.fake_errors.append(message)
        raise FakeError(message)
    try:
        response = method(**api_params)
    except (ServiceError, ClientError):
        raise
    except Exception as error:
        message = (
            f"the fake given as services[{api!r}] raised {type(error).__name__}: {error} in {xform_name(model.name)} "
            f"({where}); raise ServiceError('<Code>', '<message>') to answer with a service error\n"
            + "".join(traceback.format_exception(error)[-6:])
        )
        runtime.fake_errors.append(message)
        raise FakeError(message) from error
    response = {} if response is None else response
    problems = (
        [f"it returned {type(response).__name__}, not a dict"] if not isinstance(response, dict)
        else _unknown_members(response, model.output_shape, model.name)
    )
    if problems:
        message = (
            f"the fake given as services[{api!r}] answered {api}:{model.name} with what the API never returns: "
            f"{'; '.join(problems)}; return the response members under botocore's names (e.g. "
            f"{sorted(model.output_shape.members)[:6] if model.output_shape else []})"
        )
        runtime.fake_errors.append(message)
        raise FakeError(message)
    return to_sfn(response, model.output_shape)


class AwsSdkTask(StateTaskServiceAwsSdk):
    """aws-sdk:* tasks: Bedrock ones served offline, those of `services` by the user's fakes, every other
    service left to moto."""

    def _bedrock_api(self) -> str | None:
        api = self.resource.api_name
        return api if api in ERROR_PREFIX else None

    def _fake(self) -> Any:
        runtime = _ACTIVE
        return runtime.services.get(self.resource.api_name) if runtime is not None else None

    def _eval_service_task(self, env, resource_runtime_part, normalised_parameters, state_credentials):
        where = f"state {self.name!r} Parameters"
        fake = self._fake()
        if fake is not None:
            api = self.resource.api_name
            env.stack.append(_call_fake(api, fake, self.resource.api_action, normalised_parameters, where))
            return
        api = self._bedrock_api()
        if api is None:
            return super()._eval_service_task(
                env=env,
                resource_runtime_part=resource_runtime_part,
                normalised_parameters=normalised_parameters,
                state_credentials=state_credentials,
            )
        call = _call_runtime if api == "bedrockruntime" else _call_batch
        env.stack.append(call(self.resource.api_action, normalised_parameters, where))

    def _from_error(self, env, ex):
        if self._fake() is not None:
            api = self.resource.api_name
            failure = _service_failure(env, self, error_prefix(api), ex, api=api)
            return failure or super()._from_error(env=env, ex=ex)
        api = self._bedrock_api()
        failure = _service_failure(env, self, ERROR_PREFIX[api], ex) if api else None
        return failure or super()._from_error(env=env, ex=ex)


class BedrockInvokeModelTask(StateTaskServiceCallback):
    """The optimized `arn:aws:states:::bedrock:invokeModel` integration: Body as JSON in, parsed out."""

    def __init__(self):
        super().__init__(supported_integration_patterns=set())

    def _validate_service_integration_is_supported(self):
        """Checked before the definition reaches moto (see _definition)."""

    def _eval_service_task(self, env, resource_runtime_part, normalised_parameters, state_credentials):
        params = dict(normalised_parameters)
        where = f"state {self.name!r} Parameters"
        body, source = params.pop("Body", None), params.pop("Input", None)
        if (body is None) == (source is None):
            raise ServiceError("ValidationException", "Specify exactly one of Body and Input")
        if source is not None:
            body = _read_s3_uri((source or {}).get("S3Uri"))
        model = operation_model("bedrock-runtime", "InvokeModel")
        api_params = to_api(params, model.input_shape, where)
        api_params["body"] = to_api(body, model.input_shape.members["body"], where)
        api_params.setdefault("contentType", "application/json")
        api_params.setdefault("accept", "application/json")
        response = active().bedrock.invoke_model(**api_params)
        raw = response["body"].read()
        content_type = response.get("contentType", "application/json")
        try:
            parsed: Any = json.loads(raw)
        except ValueError:
            parsed = raw.decode("utf-8", errors="replace")
        env.stack.append({"Body": parsed, "ContentType": content_type})

    def _from_error(self, env, ex):
        return _service_failure(env, self, "Bedrock", ex) or super()._from_error(env=env, ex=ex)


def _read_s3_uri(uri: Any) -> bytes:
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise ServiceError("ValidationException", f"Input.S3Uri {uri!r} is not an s3:// URI")
    bucket, _, key = uri[5:].partition("/")
    try:
        return active().s3().get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        raise ServiceError("ValidationException", f"cannot read Input.S3Uri {uri}: {error}") from None


def _state_task_service_for(service_name: str):
    if service_name == "bedrock":
        return BedrockInvokeModelTask()
    if service_name == "aws-sdk":
        return AwsSdkTask()
    return _original(state_task_factory, "state_task_service_for")(service_name=service_name)


# ---- Lambda ------------------------------------------------------------------------------------


def _execute_lambda(env, parameters, region, state_credentials) -> None:
    """moto's execute_lambda_function_integration with the runner's LambdaInvoker in place of the
    Lambda service: an error payload raises what moto turns into the Task failure (Error = errorType)."""
    runtime = active()
    if runtime.lambdas is None:  # the runner always sets one; kept for a Runtime built elsewhere
        raise RuntimeError("this runner serves no Lambda tasks")
    response = runtime.lambdas.invoke(parameters)
    if response.get("FunctionError"):
        payload = json.dumps(response["Payload"], separators=(",", ":"))
        raise lambda_eval_utils.LambdaFunctionErrorException(response["FunctionError"], payload)
    env.stack.append(response)


# ---- clock -------------------------------------------------------------------------------------


class _ScaledTime:
    """The case's clock: stands in for the `time` module in moto's retrier and waits for moto's Wait
    states, both 1/time_scale of the interval. Every wait of an execution goes through `wait`, so a test
    that moves the case's time while a state machine waits patches that one method."""

    def sleep(self, seconds: float) -> None:
        self.wait(seconds)

    def wait(self, seconds: float, env: Any = None) -> None:
        """Wait `seconds` of the case's time; a Wait state's (env given) ends early when its execution stops."""
        scale = _ACTIVE.time_scale if _ACTIVE else 1.0
        if env is None:
            time.sleep(max(seconds, 0) / scale)
            return
        deadline = time.monotonic() + max(seconds, 0) / scale
        while env.is_running():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            env.program_state_event.wait(remaining)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _wait_interval(self, env, wait_seconds) -> None:
    _ScaledTime().wait(wait_seconds, env)


# ---- JSONPath ----------------------------------------------------------------------------------

_INDEFINITE = re.compile(r"\.\.|\*|\?\(|\[[^\]]*[:,][^\]]*\]")


def _extract_json(path: str, data: Any) -> Any:
    """A definite path (no wildcard, filter, slice, union or deep scan) selects one value, as on AWS;
    a path with a filter selects a list, [] when it matches nothing (moto raises), and a filter on an
    object tests the object itself (_filter_find)."""
    if _INDEFINITE.search(path) is None:
        matches = json_path.parse(path).find(data)
        if not matches:
            raise json_path.NoSuchJsonPathError(json_path=path, data=data)
        return matches[0].value
    if "?(" in path:
        return [match.value for match in json_path.parse(path).find(data)]
    try:
        return _original(json_path, "extract_json")(path, data)
    except json_path.NoSuchJsonPathError:
        if "?(" in path:  # AWS (Jayway JsonPath) answers a filter that matches nothing with []
            return []
        raise



def _filter_find(self: Filter, datum: Any) -> list[Any]:
    """jsonpath_ng's Filter.find, but an object is tested as a whole and kept when it matches: Jayway
    JsonPath's PredicatePathToken.evaluate accepts a map model itself (`if (jsonProvider.isMap(model)) {
    if (accept(model, ...)) ... next().evaluate(currentPath, op, model, ctx)`), so
    $[?(@.ServiceTier)].ServiceTier.Type is the response's served tier, or [] when it names none.
    jsonpath_ng would test the object's member values instead. Arrays are filtered as before."""
    datum = DatumInContext.wrap(datum)
    if isinstance(datum.value, dict):
        return [datum] if all(expression.find(datum) for expression in self.expressions) else []
    return _original(Filter, "find")(self, datum)

# ---- intrinsic functions -----------------------------------------------------------------------

#: The characters a backslash escapes in an intrinsic function's string literal, and only these: \' is ',
#: \{ is {, \} is }, \\ is \ (Step Functions developer guide, "Intrinsic functions for JSONPath states",
#: "Reserved characters in intrinsic functions": https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html).
#: aws-cdk-lib's JsonPath.format writes them so (a template's ' { } \ escaped); States.Format fills only an
#: unescaped {} (aws/aws-cdk pull 29267).
INTRINSIC_ESCAPES = frozenset("'{}\\")
_LITERAL_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


class IntrinsicSyntaxError(ValueError):
    """An intrinsic function moto's grammar cannot parse (it would print the error and drop the rest)."""


def decoded_intrinsic(raw: str) -> str:
    """The intrinsic as AWS reads it: moto passes the text between the definition's JSON quotes, undecoded."""
    try:
        value = json.loads(f'"{raw}"')
    except ValueError:
        return raw
    return value if isinstance(value, str) else raw


def parse_intrinsic(expression: str) -> tuple[Any, Any]:
    """moto's IntrinsicParser.parse on the decoded expression, raising IntrinsicSyntaxError on what ANTLR
    would only print ("mismatched input ...") before returning a function with the rest dropped."""
    from antlr4 import CommonTokenStream, InputStream
    from antlr4.error.ErrorListener import ErrorListener
    from moto.stepfunctions.parser.asl.antlr.runtime.ASLIntrinsicLexer import ASLIntrinsicLexer
    from moto.stepfunctions.parser.asl.antlr.runtime.ASLIntrinsicParser import ASLIntrinsicParser

    errors: list[str] = []

    class _Collect(ErrorListener):
        def syntaxError(self, recognizer, offending_symbol, line, column, msg, e):  # noqa: N802 (ANTLR's name)
            errors.append(f"column {column + 1}: {msg}")

    lexer = ASLIntrinsicLexer(InputStream(expression))
    parser = ASLIntrinsicParser(CommonTokenStream(lexer))
    for recognizer in (lexer, parser):
        recognizer.removeErrorListeners()
        recognizer.addErrorListener(_Collect())
    tree = parser.func_decl()
    if errors:
        raise IntrinsicSyntaxError(f"{expression!r} does not parse ({'; '.join(errors)})")
    return intrinsic_preprocessor.Preprocessor().visit(tree), tree


def _parse_intrinsic_raw(src: str) -> tuple[Any, Any]:
    return parse_intrinsic(decoded_intrinsic(src))


#: Distinct definitions whose ANTLR parse trees are kept (a runner's state machines, a test file's variants).
_DEFINITION_TREES = 64


@functools.lru_cache(maxsize=_DEFINITION_TREES)
def _definition_tree(definition: str) -> Any:
    """The first half of moto's AmazonStateLanguageParser.parse: the ANTLR parse of a definition, raising
    ASLParserException on a syntax error (an error is not kept). moto parses a definition at
    create_state_machine (to validate it) and again at every execution: ANTLR was about three quarters of
    each parse, some 0.26 s for a ledger-paced Map, twice per run. The tree is only read afterwards."""
    from antlr4 import CommonTokenStream, InputStream
    from moto.stepfunctions.parser.asl.antlr.runtime.ASLLexer import ASLLexer
    from moto.stepfunctions.parser.asl.antlr.runtime.ASLParser import ASLParser
    from moto.stepfunctions.parser.asl.parse.asl_parser import ASLParserException, SyntaxErrorListener

    listener = SyntaxErrorListener()
    parser = ASLParser(CommonTokenStream(ASLLexer(InputStream(definition))))
    parser.removeErrorListeners()
    parser.addErrorListener(listener)
    tree = parser.state_machine()
    if listener.errors:
        raise ASLParserException(errors=listener.errors)
    return tree


def _parse_definition(definition: str) -> tuple[Any, Any]:
    """AmazonStateLanguageParser.parse with the parse tree kept per definition: the evaluation components
    are built anew from it each time (moto's Preprocessor, with this module's patches of the intrinsics),
    so no execution shares another's."""
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    tree = _definition_tree(definition)
    return Preprocessor().visit(tree), tree


def unescaped_literal(escaped: str) -> str:
    """A string literal's value: Step Functions' four escapes applied (others are refused by `_definition`)."""
    return _LITERAL_ESCAPE.sub(lambda m: m[1] if m[1] in INTRINSIC_ESCAPES else m[0], escaped)


def _func_arg_string(self, ctx) -> ArgumentLiteral:
    escaped = ctx.STRING().getText()[1:-1]
    literal = ArgumentLiteral(definition_value=unescaped_literal(escaped))
    literal.genai_pacer_escaped = escaped  # type: ignore[attr-defined]  # States.Format tells {} from \{\} by it
    return literal


def aws_format(template: str, values: list[str]) -> str:
    """States.Format on a literal template as Step Functions fills it: each unescaped {} takes the next value."""
    out: list[str] = []
    remaining = iter(values)
    used = 0
    i = 0
    while i < len(template):
        char = template[i]
        if char == "\\" and i + 1 < len(template):
            out.append(template[i + 1] if template[i + 1] in INTRINSIC_ESCAPES else template[i : i + 2])
            i += 2
        elif template.startswith("{}", i):
            value = next(remaining, None)
            if value is None:
                raise ValueError(f"States.Format: the template has more {{}} than the {len(values)} value(s) given")
            out.append(value)
            used += 1
            i += 2
        else:
            out.append(char)
            i += 1
    if used != len(values):
        raise ValueError(f"States.Format: {len(values)} value(s) given for {used} {{}} in the template")
    return "".join(out)


def _string_format(self, env) -> None:
    template = self.argument_list.arguments[0]
    escaped = getattr(template, "genai_pacer_escaped", None)
    if escaped is None:  # a template read from the input: moto's own evaluation
        _original(StringFormat, "_eval_body")(self, env)
        return
    self.argument_list.eval(env=env)
    args = env.stack.pop()
    env.stack.append(aws_format(escaped, [StringFormat._to_str_repr(value) for value in args[1:]]))


# ---- distributed Map ---------------------------------------------------------------------------


def _input_type_init(self, input_type: str) -> None:
    if input_type == "JSONL":
        self.input_type_value = "JSONL"  # moto's enum has CSV and JSON only
    else:
        _original(InputType, "__init__")(self, input_type)


class JsonLinesTransformer(ResourceOutputTransformer):
    """Reads a JSON Lines object as the item list, one item per non-empty line."""

    def _eval_body(self, env) -> None:
        reader_config = env.stack.pop()
        text = env.stack.pop()
        items = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except ValueError:
                raise FailureEventException(_map_run_failure(
                    env, StatesErrorName(typ=StatesErrorNameType.StatesItemReaderFailed),
                    f"line {number} of the JSONL items object is not JSON: {line[:200]!r}",
                )) from None
        env.stack.append(items[: reader_config["MaxItemsValue"]])


def _transformer_for(input_type):
    if input_type.input_type_value == "JSONL":
        return JsonLinesTransformer()
    return _original(item_reader_decl, "resource_output_transformer_for")(input_type=input_type)


def _map_run_failure(env: Any, error_name: Any, cause: str) -> FailureEvent:
    return FailureEvent(
        env=env,
        error_name=error_name,
        event_type=HistoryEventType.MapRunFailed,
        event_details=EventDetails(
            mapRunFailedEventDetails=MapRunFailedEventDetails(error=error_name.error_name, cause=cause)
        ),
    )


def _batches(items: list[Any], settings: MapSettings) -> list[Any]:
    batcher = settings.item_batcher
    assert batcher is not None
    batches: list[list[Any]] = []
    size = 0
    for item in items:
        item_size = len(json.dumps(item).encode())
        full = batches and (
            (batcher.max_items and len(batches[-1]) >= batcher.max_items)
            or (batcher.max_bytes and size + item_size > batcher.max_bytes)
        )
        if not batches or full:
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += item_size
    wrap = {"BatchInput": batcher.batch_input} if batcher.batch_input is not None else {}
    return [{**wrap, "Items": batch} for batch in batches]


#: botocore's stepfunctions model (service-2.json): the status of an execution StopExecution ended
#: (ExecutionStatus) and of its Map Runs (MapRunStatus).
STOPPED_BY_USER = "ABORTED"
#: The history event of a Map Run whose execution was stopped (HistoryEventType, same model).
MAP_RUN_ABORTED = "MapRunAborted"
#: The history event that closes the Map state of a stopped execution (HistoryEventType, same model),
#: where moto, which evaluates the state to its end, adds MapStateSucceeded (or MapStateFailed).
MAP_STATE_ABORTED = "MapStateAborted"


def _stopped(env: Any) -> bool:
    """Whether the execution `env` runs in was stopped (StopExecution: moto's ProgramStopped)."""
    return isinstance(env.program_state(), ProgramStopped)


def _distributed_eval_body(self, env) -> None:
    """moto's Map Run, reporting a stopped execution's Map Run as ABORTED (its event, and DescribeMapRun's
    status) rather than SUCCEEDED or FAILED."""
    record = env.stack[-1].map_run_record
    set_stop = record.set_stop

    def stop_record(status):
        set_stop(MapRunStatus(STOPPED_BY_USER) if _stopped(env) else status)

    record.set_stop = stop_record
    outer, _local.map_run_env = getattr(_local, "map_run_env", None), env
    try:
        _original(DistributedIterationComponent, "_eval_body")(self, env)
    finally:
        _local.map_run_env = outer
        # The Map state's own closing event, which moto adds on this thread right after (StateMap._eval_execution).
        _local.map_state_stopped = _stopped(env)
        del record.set_stop  # back to the class's own


def _add_event(self, context, event_type, event_details=None, *args, **kwargs):
    """The Map Run's closing event of a stopped execution is MapRunAborted, and its Map state's MapStateAborted
    (set on the thread that evaluates the Map state, by _distributed_eval_body)."""
    env = getattr(_local, "map_run_env", None)
    if env is not None and _stopped(env) and event_type in (HistoryEventType.MapRunSucceeded,
                                                             HistoryEventType.MapRunFailed):
        event_type, event_details = HistoryEventType(MAP_RUN_ABORTED), None
    elif event_type in (HistoryEventType.MapStateSucceeded, HistoryEventType.MapStateFailed) and \
            getattr(_local, "map_state_stopped", False):
        _local.map_state_stopped = False
        event_type, event_details = HistoryEventType(MAP_STATE_ABORTED), None
    return _original(EventManager, "add_event")(self, context, event_type, event_details, *args, **kwargs)


def _stop(self, stop_date, error, cause) -> None:
    """StopExecution: the execution is ABORTED as the call returns (DescribeExecution says so at once, so a
    running task that asks sees it), where moto said RUNNING until its interpreter unwound the running
    states. StateMachineRunner.run waits for that too (Runtime.ended)."""
    _original(_ParserExecution, "stop")(self, stop_date=stop_date, error=error, cause=cause)
    if self.exec_status is not None and self.exec_status.value == "RUNNING":
        self.exec_status, self.stop_date = type(self.exec_status)(STOPPED_BY_USER), stop_date


def _terminated(self) -> None:
    _original(BaseExecutionWorkerCommunication, "terminated")(self)
    runtime = _ACTIVE
    if runtime is not None:
        with runtime.lock:
            runtime.ended.add(self.execution.exec_arn)


def _map_run(self, env, eval_input) -> None:
    runtime = active()
    settings = runtime.maps.get(eval_input.state_name) or MapSettings(distributed=True)
    items = env.stack.pop()
    if settings.item_batcher is not None:
        items = _batches(items, settings)
    env.stack.append(items)
    arn = eval_input.map_run_record.map_run_arn
    with runtime.lock:
        runtime.map_runs[arn], runtime.map_run_settings[arn] = {}, settings
    _original(DistributedIterationComponent, "_map_run")(self, env, eval_input)
    outputs = env.stack.pop()
    with runtime.lock:
        results = dict(runtime.map_runs[arn])
    failed = sum(result.status != "SUCCEEDED" for result in results.values())
    if failed and not _stopped(env) and _exceeds(failed, len(items), settings):
        first = min((r for r in results.values() if r.status != "SUCCEEDED"), key=lambda r: r.index)
        raise FailureEventException(_map_run_failure(
            env, StatesErrorName(typ=StatesErrorNameType.StatesExceedToleratedFailureThreshold),
            f"The specified tolerated failure threshold was exceeded: {failed} of {len(items)} items failed "
            f"(first: item {first.index}, {first.error}: {first.cause})",
        ))
    if not settings.exports_results:
        # Without an export the output is COMPACT (or the WriterConfig's transformation): the children's
        # outputs, a failed child's whole result in its place (moto would put null there).
        transformation = settings.writer_config.transformation if settings.writer_config else "COMPACT"
        outputs = _transform([results[i] for i in sorted(results)], transformation, eval_input.map_run_record)
    env.stack.append(outputs)


def _exceeds(failed: int, total: int, settings: MapSettings) -> bool:
    """Step Functions fails the Map Run past either threshold given; with none given, on any failure."""
    count, percentage = settings.tolerated_failure_count, settings.tolerated_failure_percentage
    if count is None and percentage is None:
        return failed > 0
    over_count = count is not None and failed > count
    over_percentage = percentage is not None and failed * 100.0 / max(total, 1) > percentage
    return over_count or over_percentage


def _eval_input(self, env_frame) -> None:
    _original(DistributedItemProcessorWorker, "_eval_input")(self, env_frame)
    _local.child_input = env_frame.states.get_input()


def _eval_job(self, env, job) -> None:
    runtime = active()
    _local.child_input = job.job_input
    result = JobResult(index=job.job_index, input=job.job_input)
    _original(DistributedItemProcessorWorker, "_eval_job")(self, env, job)
    result.input, result.stopped = _local.child_input, datetime.datetime.now(datetime.UTC)
    state = env.program_state()
    if isinstance(state, ProgramEnded):
        result.output = job.job_output
    elif isinstance(state, ProgramError):
        details = state.error or {}
        result.status, result.error, result.cause = "FAILED", details.get("error"), details.get("cause")
    elif isinstance(state, ProgramTimedOut):
        result.status, result.error, result.cause = "TIMED_OUT", "States.Timeout", "the child execution timed out"
    elif isinstance(state, ProgramStopped):
        result.status, result.error, result.cause = "ABORTED", state.error, state.cause
    else:
        result.status, result.error, result.cause = "FAILED", "States.Runtime", "the child execution did not end"
    arn = self._map_run_record.map_run_arn
    with runtime.lock:
        runtime.map_runs.setdefault(arn, {})[job.job_index] = result


def _metadata(result: JobResult, record: Any) -> dict[str, Any]:
    name = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{record.map_run_arn}/{result.index}"))
    entry: dict[str, Any] = {
        "ExecutionArn": f"{record.map_state_machine_arn.replace(':stateMachine:', ':execution:')}:{name}",
        "Name": name,
        "StateMachineArn": record.map_state_machine_arn,
        "Status": result.status,
        "Input": json.dumps(result.input),
        "InputDetails": {"Included": True},
        "StartDate": result.started.isoformat(),
        "StopDate": (result.stopped or result.started).isoformat(),
        "RedriveCount": 0,
    }
    if result.status == "SUCCEEDED":
        entry.update({"Output": json.dumps(result.output), "OutputDetails": {"Included": True}})
    else:
        entry.update({"Error": result.error, "Cause": result.cause})
    return entry


def _transform(results: list[JobResult], transformation: str, record: Any) -> list[Any]:
    """Result entries as a WriterConfig Transformation shapes them; failed ones always whole."""
    out: list[Any] = []
    for result in results:
        if transformation == "NONE" or result.status != "SUCCEEDED":
            out.append(_metadata(result, record))
        elif transformation == "FLATTEN" and isinstance(result.output, list):
            out.extend(result.output)
        else:
            out.append(result.output)
    return out


def _handle_put_object(env, resource_runtime_part, state_credentials) -> None:
    """Write the Map Run's results the way Step Functions exports them: one file per status and a manifest."""
    runtime = active()
    parameters = env.stack.pop()
    env.stack.pop()  # the outputs; the per-item results below carry inputs and errors too
    record = env.map_run_record_pool_manager.get_all()[-1]
    with runtime.lock:
        results = dict(runtime.map_runs.get(record.map_run_arn, {}))
        writer = runtime.map_run_settings[record.map_run_arn].writer_config
    transformation = writer.transformation if writer else "NONE"
    bucket, prefix = parameters["Bucket"], parameters.get("Prefix") or ""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    base = f"{prefix}{record.map_run_arn.split(':')[-1]}/"
    s3 = runtime.s3()
    files: dict[str, list[dict[str, Any]]] = {"FAILED": [], "PENDING": [], "SUCCEEDED": []}
    ordered = [results[i] for i in sorted(results)]
    for status, group in itertools.groupby(
        sorted(ordered, key=lambda r: r.status == "SUCCEEDED"), key=lambda r: r.status == "SUCCEEDED"
    ):
        entries = _transform(list(group), transformation, record)
        label = "SUCCEEDED" if status else "FAILED"
        body = json.dumps(entries).encode()
        key = f"{base}{label}_0.json"
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        files[label].append({"Key": key, "Size": len(body)})
    manifest = {"DestinationBucket": bucket, "MapRunArn": record.map_run_arn, "ResultFiles": files}
    s3.put_object(Bucket=bucket, Key=f"{base}manifest.json", Body=json.dumps(manifest, indent=2).encode())
    env.stack.append({
        "MapRunArn": record.map_run_arn,
        "ResultWriterDetails": {"Bucket": bucket, "Key": f"{base}manifest.json"},
    })


# ---- DynamoDB ----------------------------------------------------------------------------------

#: moto's DynamoDB backend operations on one item, run one at a time while a runner is active.
_DYNAMODB_ITEM_OPERATIONS = ("get_item", "put_item", "update_item", "delete_item")
_DYNAMODB_LOCK = threading.RLock()


def _atomic(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def operation(*args: Any, **kwargs: Any) -> Any:
        with _DYNAMODB_LOCK:
            return original(*args, **kwargs)

    return operation


# ---- installation ------------------------------------------------------------------------------


_INHERITED = object()  # the patched class had no attribute of its own: delete the patch on uninstall


def _original(owner: Any, name: str) -> Any:
    for patched_owner, patched_name, original, _own in _ORIGINALS:
        if patched_owner is owner and patched_name == name:
            return original
    return getattr(owner, name)


def _set(owner: Any, name: str, value: Any) -> None:
    if isinstance(owner, type):
        own = owner.__dict__.get(name, _INHERITED)
        callable_original = getattr(owner, name) if own is _INHERITED or isinstance(own, staticmethod) else own
    else:
        own = callable_original = getattr(owner, name)
    _ORIGINALS.append((owner, name, callable_original, own))
    setattr(owner, name, value)


def _json_path_users() -> list[Any]:
    import sys

    original = json_path.extract_json
    return [
        module for name, module in list(sys.modules.items())
        if name.startswith("moto.stepfunctions.parser") and getattr(module, "extract_json", None) is original
    ]


def install(runtime: Runtime) -> None:
    """Activate the patches for `runtime`; one runner at a time per process."""
    global _ACTIVE
    with _INSTALL_LOCK:
        if _ACTIVE is not None:
            raise RuntimeError(
                "another StateMachineRunner is active in this process; close it first (use one runner per test, "
                "as a context manager)"
            )
        _ACTIVE = runtime
        _set(state_task_factory, "state_task_service_for", _state_task_service_for)
        _set(retrier_decl, "time", _ScaledTime())
        _set(lambda_eval_utils, "execute_lambda_function_integration", _execute_lambda)
        _set(WaitFunction, "_wait_interval", _wait_interval)
        _set(InputType, "__init__", _input_type_init)
        _set(item_reader_decl, "resource_output_transformer_for", _transformer_for)
        _set(DistributedIterationComponent, "_map_run", _map_run)
        _set(DistributedIterationComponent, "_eval_body", _distributed_eval_body)
        _set(EventManager, "add_event", _add_event)
        _set(_ParserExecution, "stop", _stop)
        _set(BaseExecutionWorkerCommunication, "terminated", _terminated)
        _set(DistributedItemProcessorWorker, "_eval_job", _eval_job)
        _set(DistributedItemProcessorWorker, "_eval_input", _eval_input)
        _set(ResultWriterS3, "_handle_put_object", staticmethod(_handle_put_object))
        _set(IntrinsicParser, "parse", staticmethod(_parse_intrinsic_raw))
        _set(AmazonStateLanguageParser, "parse", staticmethod(_parse_definition))
        _set(intrinsic_preprocessor.Preprocessor, "visitFunc_arg_string", _func_arg_string)
        _set(StringFormat, "_eval_body", _string_format)
        for module in [*_json_path_users(), json_path]:
            _set(module, "extract_json", _extract_json)
        _set(Filter, "find", _filter_find)
        from moto.dynamodb.models import DynamoDBBackend

        for name in _DYNAMODB_ITEM_OPERATIONS:
            _set(DynamoDBBackend, name, _atomic(getattr(DynamoDBBackend, name)))


def uninstall() -> None:
    global _ACTIVE
    with _INSTALL_LOCK:
        while _ORIGINALS:
            owner, name, _original_callable, own = _ORIGINALS.pop()
            if own is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, own)
        _ACTIVE = None
