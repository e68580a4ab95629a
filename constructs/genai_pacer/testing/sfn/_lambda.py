"""Lambda tasks offline: genai-pacer's own handlers called in this process, your functions through
`functions=`.

moto would run a Lambda function in Docker, which this test bed does not use. A function whose code
is genai-pacer's handler asset (the asset hash in the template is the fingerprint of the handler
directory this genai-pacer ships, and its Handler names a module there) is called in this process
instead: with the function's environment variables from the template (references resolved as the
runner resolves every other: a table's Ref is the name of the table the runner created in moto), a
context object, and boto3 clients that reach the same moto backend as the state machine. Any other
function runs only when the user maps it to a callable with `functions=`.

What Step Functions makes of the call is moto's code (state_task_lambda / state_task_service_lambda):
the ARN-as-Resource form returns the function's value, `lambda:invoke` the Invoke response; a raised
exception fails the Task with the exception's type name as Error. This module gives moto the
response Lambda gives, shaped by the facts below.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import re
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._errors import OfflineExecutionError
from ._template import Template

# ---- AWS facts ---------------------------------------------------------------------------------------

#: Invoke's StatusCode for a synchronous (RequestResponse) call, whether or not the function raised
#: (botocore lambda 2015-03-31 model, Invoke output StatusCode: "For the RequestResponse invocation type,
#: this status code is 200"; https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html).
INVOKE_STATUS_CODE = 200
#: The version an unqualified call runs, in Invoke's ExecutedVersion and the X-Amz-Executed-Version header.
EXECUTED_VERSION = "$LATEST"
#: The Task result of the optimized `arn:aws:states:::lambda:invoke` integration: Invoke's response with
#: Payload parsed from JSON, plus the SDK's metadata; `Payload` is the function's return value
#: (https://docs.aws.amazon.com/step-functions/latest/dg/tutorial-get-started-configure-output.html shows
#: ExecutedVersion, Payload, SdkHttpMetadata {AllHttpHeaders, HttpHeaders, HttpStatusCode},
#: SdkResponseMetadata {RequestId}, StatusCode). The ARN-as-Resource form returns the Payload alone.
INVOKE_RESULT_MEMBERS = ("ExecutedVersion", "Payload", "SdkHttpMetadata", "SdkResponseMetadata", "StatusCode")
#: Invoke's FunctionError when the handler raised ("If present, indicates that an error occurred during
#: function execution. Details about the error are included in the response payload": botocore lambda model).
FUNCTION_ERROR = "Unhandled"
#: The error object Lambda's Python runtime returns for a raised exception: errorType is the exception
#: class's __name__ (aws/aws-lambda-python-runtime-interface-client, awslambdaric/bootstrap.py make_error).
#: Step Functions fails the Task with Error = errorType and Cause = this object as JSON, so a Catch on
#: the exception's name matches (https://docs.aws.amazon.com/step-functions/latest/dg/tutorial-handling-error-conditions.html;
#: the history recorded against AWS in localstack's tests/aws/services/stepfunctions/v2/error_handling/
#: test_task_service_lambda.snapshot.json, test_raise_exception: "error": "Exception"). `Lambda.Unknown` is
#: what a failure without such an object gets (out of memory, a function timeout:
#: https://docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html); offline no
#: function runs out of memory or time, so no task fails with it.
ERROR_OBJECT_FIELDS = ("errorMessage", "errorType", "requestId", "stackTrace")
#: A function's timeout and memory when the template gives none (botocore lambda model, CreateFunction:
#: Timeout "The default is 3 seconds", MemorySize "The default value is 128 MB").
DEFAULT_TIMEOUT_SECONDS = 3
DEFAULT_MEMORY_MB = 128
#: Variables Lambda sets in every function's environment that the handlers may read
#: (https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime).
RUNTIME_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_LAMBDA_FUNCTION_NAME",
                     "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION")

_FUNCTION_TYPE = "AWS::Lambda::Function"
_HASH = re.compile(r"\b[0-9a-f]{64}\b")


# ---- the template's functions --------------------------------------------------------------------------


@dataclass
class LambdaFunction:
    """An AWS::Lambda::Function of the template and how the runner runs it."""

    logical_id: str
    path: str | None  # the construct path of the function (its L1's path without /Resource)
    name: str  # what its Ref resolves to offline
    arn: str
    handler: str | None  # "module.function" as in the template
    library: bool  # its code is genai-pacer's handler asset and its Handler a module there
    library_handler_elsewhere: bool = False  # Handler names a genai-pacer module, but the code is another asset
    timeout: int = DEFAULT_TIMEOUT_SECONDS
    memory: int = DEFAULT_MEMORY_MB
    properties: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        where = f", {self.path}" if self.path else ""
        return f"{self.logical_id} ({self.name}{where})"

    def keys(self) -> set[str]:
        """What a `functions=` key may name it by."""
        keys = {self.logical_id, self.name, self.arn}
        if self.path:
            keys.add(self.path)
        return keys

    def matches(self, key: str) -> bool:
        key = key.strip("/")
        return key in self.keys() or bool(self.path and self.path.endswith("/" + key))


@functools.cache
def library_fingerprint() -> str:
    """The asset hash aws-cdk-lib gives genai-pacer's handler directory (what its S3Key is named after)."""
    from ..._internal.assets import handler_fingerprint

    return handler_fingerprint()


@functools.cache
def _library_modules() -> frozenset[str]:
    """Top-level modules of the handler directory (pacer_runtime, scheduled_precompute, ...)."""
    from ..._internal.assets import LAMBDA_DIR

    return frozenset(
        entry.stem if entry.suffix == ".py" else entry.name
        for entry in LAMBDA_DIR.iterdir()
        if (entry.is_dir() and (entry / "__init__.py").is_file()) or entry.suffix == ".py"
    )


def _handler_module(handler: str | None) -> tuple[str, str] | None:
    """("scheduled_precompute.handler", "handler") for "scheduled_precompute.handler.handler" (or the
    path form "scheduled_precompute/handler.handler"), when the module is one of genai-pacer's handlers."""
    if not handler or "." not in handler:
        return None
    module, _, attribute = handler.replace("/", ".").rpartition(".")
    if not module or module.split(".")[0] not in _library_modules():
        return None
    return module, attribute


def template_functions(template: Template) -> list[LambdaFunction]:
    """The template's functions, each marked library or not by its code's asset hash and Handler."""
    found = []
    for logical_id, resource in template.of_type(_FUNCTION_TYPE).items():
        props = resource.get("Properties") or {}
        handler = props.get("Handler") if isinstance(props.get("Handler"), str) else None
        names_library_module = _handler_module(handler) is not None
        hashes = set(_HASH.findall(json.dumps(props.get("Code"))))
        hashes.update(_HASH.findall(str((resource.get("Metadata") or {}).get("aws:asset:path") or "")))
        library = names_library_module and library_fingerprint() in hashes  # jsii starts only for such a function
        path = (resource.get("Metadata") or {}).get("aws:cdk:path") or template.paths.get(logical_id)
        if isinstance(path, str) and path.endswith("/Resource"):
            path = path[: -len("/Resource")]
        try:
            name, arn = template.physical_name(logical_id), template.arn(logical_id)
        except OfflineExecutionError:  # a FunctionName the runner cannot resolve: no Task can name it offline
            continue
        found.append(LambdaFunction(
            logical_id=logical_id,
            path=path if isinstance(path, str) else None,
            name=name,
            arn=arn,
            handler=handler,
            library=library,
            library_handler_elsewhere=names_library_module and not library,
            timeout=_integer(props.get("Timeout"), DEFAULT_TIMEOUT_SECONDS),
            memory=_integer(props.get("MemorySize"), DEFAULT_MEMORY_MB),
            properties=props,
        ))
    return found


def _integer(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def function_name_of(reference: str) -> str:
    """The function name in a FunctionName or Resource: a name, a partial ARN (123456789012:function:f)
    or an ARN, with or without a version or alias qualifier."""
    if ":function:" in reference:
        return reference.split(":function:", 1)[1].split(":", 1)[0]
    return reference.split(":", 1)[0]


def find_function(reference: str, functions: list[LambdaFunction]) -> LambdaFunction | None:
    name = function_name_of(reference)
    return next((function for function in functions if function.name == name), None)


# ---- calling a function ---------------------------------------------------------------------------------


class LambdaContext:
    """The context object a Python handler receives: the attributes and the method Lambda's has
    (https://docs.aws.amazon.com/lambda/latest/dg/python-context.html). The remaining time counts
    down in real time from the function's timeout, as the handler's own code runs in real time."""

    def __init__(self, function: LambdaFunction, request_id: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.function_name = function.name
        self.function_version = EXECUTED_VERSION
        self.invoked_function_arn = function.arn
        self.memory_limit_in_mb = str(function.memory)
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{function.name}"
        self.log_stream_name = f"offline/[{EXECUTED_VERSION}]{request_id}"
        self._clock = clock
        self._deadline = clock() + function.timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - self._clock()) * 1000))


def error_object(error: BaseException, request_id: str) -> dict[str, Any]:
    """What Lambda's Python runtime returns as the payload of a raised exception."""
    frames = list(traceback.extract_tb(error.__traceback__))
    while frames and (frames[0].filename == __file__ or _importing(frames[0].filename)):
        del frames[0]  # the runner's own frames and the import machinery are not the function's
    return {
        "errorMessage": str(error),
        "errorType": type(error).__name__,
        "requestId": request_id,
        "stackTrace": traceback.format_list(frames),
    }


def _importing(filename: str) -> bool:
    return filename.startswith("<frozen") or f"{os.sep}importlib{os.sep}" in filename


def invoke_response(payload: Any, request_id: str) -> dict[str, Any]:
    """Invoke's response as the optimized integration returns it (see INVOKE_RESULT_MEMBERS)."""
    headers = {"Content-Type": "application/json", "X-Amz-Executed-Version": EXECUTED_VERSION,
               "x-amzn-RequestId": request_id}
    return {
        "ExecutedVersion": EXECUTED_VERSION,
        "Payload": payload,
        "SdkHttpMetadata": {
            "AllHttpHeaders": {name: [value] for name, value in headers.items()},
            "HttpHeaders": headers,
            "HttpStatusCode": INVOKE_STATUS_CODE,
        },
        "SdkResponseMetadata": {"RequestId": request_id},
        "StatusCode": INVOKE_STATUS_CODE,
    }


#: The handlers' shared library: read no setting at import, and genai_pacer.runtime is the same module,
#: so it is never imported a second time.
SHARED_PACKAGE = "pacer_runtime"

# Calls of genai-pacer's handlers change process-wide state (os.environ, sys.modules, sys.path) for
# their duration, so they run one at a time.
_IN_PROCESS = threading.Lock()


@contextlib.contextmanager
def _environment(variables: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _fresh_package(package: str) -> Iterator[None]:
    """The handler's package imported anew (a cold start: module-level settings read this function's
    environment), the modules of that name the process had put back afterwards. pacer_runtime, which
    reads no setting at import, is shared."""
    from ..._internal.assets import LAMBDA_DIR

    def ours(name: str) -> bool:
        return name == package or name.startswith(package + ".")

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    added = str(LAMBDA_DIR) not in sys.path
    if added:
        sys.path.append(str(LAMBDA_DIR))
    try:
        yield
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(str(LAMBDA_DIR))


def call_library_handler(function: LambdaFunction, environment: Mapping[str, str], event: Any, context: Any) -> Any:
    """Import the function's handler module under its environment and call the handler."""
    located = _handler_module(function.handler)
    if located is None:  # refused before the run; kept for a template changed since
        raise OfflineExecutionError(f"{function.describe()}: Handler {function.handler!r} is no genai-pacer handler")
    module_name, attribute = located
    package = module_name.split(".")[0]
    fresh = _fresh_package(package) if package != SHARED_PACKAGE else contextlib.nullcontext()
    with _IN_PROCESS, _environment(environment), fresh:
        handler = getattr(importlib.import_module(module_name), attribute)
        return handler(event, context)


class FunctionBug(Exception):
    """A callable given in `functions=` (or a handler) answered with what Lambda could not return."""


@dataclass
class LambdaInvoker:
    """Serves the Lambda tasks of a run: moto's interpreter hands it Invoke's parameters."""

    functions: list[LambdaFunction]
    callables: dict[str, Callable[..., Any]]  # logical id -> the user's callable
    environments: dict[str, dict[str, str]]  # logical id -> the environment of a library function
    problems: list[str] = field(default_factory=list)  # callables' bugs, reported after the run
    calls: list[str] = field(default_factory=list)  # logical ids, in call order

    def invoke(self, parameters: Mapping[str, Any]) -> dict[str, Any]:
        reference = str(parameters.get("FunctionName") or "")
        function = find_function(reference, self.functions)
        if function is None or (function.logical_id not in self.callables and function.logical_id not in self.environments):
            # refused before the run; reachable only for a name the run computed
            raise OfflineExecutionError(f"no function the runner can run is named {reference!r}")
        raw = parameters.get("Payload")
        event = json.loads(raw) if raw else {}
        request_id = str(uuid.uuid4())
        context = LambdaContext(function, request_id)
        self.calls.append(function.logical_id)
        try:
            if function.logical_id in self.callables:
                result = self.callables[function.logical_id](event, context)
            else:
                result = call_library_handler(function, self.environments[function.logical_id], event, context)
        except Exception as error:  # the function raised: Lambda answers with the error object
            return {"StatusCode": INVOKE_STATUS_CODE, "FunctionError": FUNCTION_ERROR,
                    "ExecutedVersion": EXECUTED_VERSION, "Payload": error_object(error, request_id)}
        try:
            payload = json.loads(json.dumps(result))
        except (TypeError, ValueError) as error:
            origin = "the callable given in functions=" if function.logical_id in self.callables else "the handler"
            message = (f"{origin} for {function.describe()} returned {type(result).__name__}, which is not JSON "
                       f"({error}); Lambda returns JSON only")
            self.problems.append(message)
            raise FunctionBug(message) from None
        return invoke_response(payload, request_id)


def runtime_environment(function: LambdaFunction, region: str) -> dict[str, str]:
    values = (region, region, function.name, str(function.memory), EXECUTED_VERSION)
    return dict(zip(RUNTIME_VARIABLES, values, strict=True))


def function_environment(template: Template, function: LambdaFunction) -> dict[str, str]:
    """The function's Environment.Variables, resolved offline, and the variables Lambda defines."""
    variables = ((function.properties.get("Environment") or {}).get("Variables")) or {}
    resolved = template.resolve(variables, where=f"the environment of function {function.describe()}")
    return {**{name: _text(value) for name, value in resolved.items()},
            **runtime_environment(function, template.env.region)}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
