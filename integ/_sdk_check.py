"""The assertions' AWS API calls checked offline against botocore's service models and IAM's action list.

No deploy can run here, and an IntegTest assertion's call is only made by its provider Lambda in the
account: a wrong service or operation name, a misspelled parameter (the AWS SDK for JavaScript v3
drops members it does not know, silently), an expected field the response never has, or a policy
that does not allow the call would each surface first as a failed or hanging `make integ`. This
module reads the synthesized assertion templates the way the deployed handler reads them:

- `service` / `api` are mapped as integ-tests-alpha's handler maps them (the same code as aws-cdk-lib's
  `custom-resources/lib/helpers-internal`: lower-case, strip `@aws-sdk/client-`, the v2 -> v3 name
  table; the command `<Api>Command` looked up case-insensitively in `@aws-sdk/client-<v3 name>`), and
  the v3 client name is matched to the botocore model whose serviceId gives that package name;
- `parameters` are decoded as the handler decodes them (each value JSON-parsed), CloudFormation
  intrinsics (Ref, Fn::GetAtt, Fn::GetStackOutput, ...) replaced by a placeholder of the member's
  type, and validated with botocore's ParamValidator (names, required members, types, minimums);
- `expected` (the $ObjectLike / $ArrayWith / $StringLike / $SerializedJson matchers), `actualPath`,
  `outputPaths` and every `Fn::GetAtt` of `apiCallResponse.<path>` are walked through the operation's
  output shape (enum literals included);
- the role of the Lambda that makes each call (the provider, or for `wait_for_assertions` the waiter's
  isComplete function) must allow the IAM action of the operation, an action IAM knows (cfn-lint's copy
  of the Service Authorization Reference). The provider starting a waiter needs states:StartExecution.

What this cannot see: whether the Lambda runtime's bundled SDK v3 is new enough for the operation,
resource-level conditions, data access policies (OpenSearch Serverless), and the values the calls
return in the account.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import json
import re
import tarfile
from pathlib import Path
from typing import Any

SDK_CALL = "Custom::DeployAssert@SdkCall"
#: IAM actions whose name is not the operation's: (IAM prefix, operation) -> action. Add an entry when
#: the check says IAM knows no action named after an operation (the Service Authorization Reference
#: names the right one).
IAM_ACTIONS: dict[tuple[str, str], str] = {("lambda", "Invoke"): "InvokeFunction"}
#: What an intrinsic inside a JSON string becomes; as a whole value it becomes a typed placeholder.
TOKEN_TEXT = "${Token}"
_SENTINEL = "\u0000cfn-token\u0000"


@functools.cache
def sdk_tables() -> tuple[dict[str, str], dict[str, Any]]:
    """(v2 -> v3 client names, v3 metadata with IAM prefixes) as the installed aws-cdk-lib ships them."""
    import aws_cdk._jsii as jsii_dir

    [tarball] = sorted(Path(jsii_dir.__file__).parent.glob("aws-cdk-lib@*.jsii.tgz"))
    base = "package/custom-resources/lib/helpers-internal/"
    wanted = {base + "sdk-v2-to-v3.json": "", base + "sdk-v3-metadata.json": ""}
    with tarfile.open(tarball) as archive:
        for member in archive:
            if member.name in wanted:
                extracted = archive.extractfile(member)
                assert extracted is not None
                wanted[member.name] = extracted.read().decode()
                if all(wanted.values()):
                    break
    return json.loads(wanted[base + "sdk-v2-to-v3.json"]), json.loads(wanted[base + "sdk-v3-metadata.json"])


@functools.cache
def handler_matchers() -> frozenset[str]:
    """The `$Matcher` names the deployed assertion handler decodes (its getMatcher switch), read from
    the installed integ-tests-alpha's bundle. Any other `$Name` (ExpectedResult.exact's `$Exact`, in
    2.275) is compared as a literal object and never matches."""
    import aws_cdk.integ_tests_alpha._jsii as jsii_dir

    [tarball] = sorted(Path(jsii_dir.__file__).parent.glob("integ-tests-alpha@*.jsii.tgz"))
    with tarfile.open(tarball) as archive:
        member = archive.extractfile("package/lib/assertions/providers/lambda-handler.bundle/index.js")
        assert member is not None
        source = member.read().decode()
    start = source.index("getMatcher() {")
    return frozenset(re.findall(r'case "(\$\w+)"', source[start : source.index("default:", start)]))


@functools.cache
def iam_actions() -> dict[str, set[str]]:
    """IAM prefix -> its action names, lower case (cfn-lint's copy of the Service Authorization Reference)."""
    import cfnlint

    path = Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "Policies.json"
    return {prefix: set(entry.get("Actions", {})) for prefix, entry in json.loads(path.read_text()).items()}


@functools.cache
def _session() -> Any:
    import botocore.session

    return botocore.session.get_session()


def v3_name(service: str) -> str:
    """The handler's normalizeServiceName: the `@aws-sdk/client-<name>` package the call loads."""
    name = service.lower().removeprefix("@aws-sdk/client-")
    return sdk_tables()[0].get(name, name)


def v3_action(v3: str, api: str) -> str:
    """The handler's normalizeActionName: the command is `<this>Command`."""
    if api[:1].lower() == api[:1]:
        return api[:1].upper() + api[1:]
    if api in sdk_tables()[1].get(v3, {}).get("commands", []):
        return api
    return api.removesuffix("Command")


def _package_of(service_id: str) -> str:
    """SDK v3's package name for a serviceId: lower case, spaces as hyphens ("Application Auto Scaling")."""
    return service_id.lower().replace(" ", "-")


@functools.cache
def botocore_model(v3: str) -> Any:
    """The botocore service model whose serviceId is the v3 client's, or None. Candidates are the
    botocore names equal to the v3 name or to a v2 name mapped to it, ignoring hyphens; the serviceId
    decides."""
    v2_names = [v2 for v2, target in sdk_tables()[0].items() if target == v3]
    wanted = {re.sub("[^a-z0-9]", "", n) for n in (v3, *v2_names)}
    for name in _session().get_available_services():
        if re.sub("[^a-z0-9]", "", name) in wanted:
            model = _session().get_service_model(name)
            if _package_of(model.service_id) == v3:
                return model
    return None


def iam_action(v3: str, operation: str) -> str:
    prefix = sdk_tables()[1].get(v3, {}).get("iamPrefix", v3)
    return f"{prefix}:{IAM_ACTIONS.get((prefix, operation), operation)}"


# --- intrinsics -------------------------------------------------------------------------------------


def _is_intrinsic(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref"))


def _inside_string(text: str) -> bool:
    """Whether JSON text ends inside a string literal (an odd number of unescaped quotes)."""
    return len(re.findall(r'(?<!\\)(?:\\\\)*"', text)) % 2 == 1


def render(value: Any) -> str:
    """A property CloudFormation resolves to JSON text: Fn::Join concatenated, each intrinsic replaced by
    TOKEN_TEXT inside a string literal and by a sentinel string elsewhere (typed after parsing)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        text = ""
        for index, part in enumerate(parts):
            if index:
                text += separator
            if isinstance(part, str):
                text += part
            else:
                text += TOKEN_TEXT if _inside_string(text) else json.dumps(_SENTINEL)
        return text
    return json.dumps(_SENTINEL)


def decode(value: Any) -> Any:
    """The handler's decodeValue: JSON.parse of the resolved text (left as text when it is not JSON)."""
    text = render(value)
    try:
        return json.loads(text)
    except ValueError:
        return text


def _placeholder(shape: Any) -> Any:
    import datetime

    kind = shape.type_name
    if kind in ("integer", "long"):
        return max(1, shape.metadata.get("min", 1))
    if kind in ("float", "double"):
        return 1.0
    if kind == "boolean":
        return True
    if kind == "timestamp":
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    if kind == "blob":
        return TOKEN_TEXT.encode()
    if kind == "list":
        return [_placeholder(shape.member)] * max(1, shape.metadata.get("min", 1))
    if kind in ("map", "structure"):
        return {}
    return TOKEN_TEXT


def typed(value: Any, shape: Any) -> Any:
    """The decoded value with each whole-value sentinel replaced by a placeholder of its member's type."""
    if value == _SENTINEL:
        return _placeholder(shape) if shape is not None else TOKEN_TEXT
    if shape is None:
        return value
    if isinstance(value, dict) and shape.type_name == "structure":
        return {k: typed(v, shape.members.get(k)) for k, v in value.items()}
    if isinstance(value, dict) and shape.type_name == "map":
        return {k: typed(v, shape.value) for k, v in value.items()}
    if isinstance(value, list) and shape.type_name == "list":
        return [typed(v, shape.member) for v in value]
    return value


# --- output shapes ----------------------------------------------------------------------------------

_STRINGY = ("string", "blob", "timestamp")  # the handler turns blobs and streams into strings


def path_problem(shape: Any, path: str) -> str | None:
    """Why `path` (dot-separated, as the handler's flatten() writes keys) is not in the output, or None.
    A string member may hold JSON (the handler explodes it), so the rest of the path is not checked."""
    for index, segment in enumerate(path.split(".")):
        kind = shape.type_name
        if kind == "structure":
            if segment not in shape.members:
                close = difflib.get_close_matches(segment, list(shape.members), n=1, cutoff=0.5)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                return f"{segment!r} is not a member of {shape.name}{hint}; members: {', '.join(shape.members)}"
            shape = shape.members[segment]
        elif kind == "list":
            if not segment.isdigit():
                return f"{segment!r} indexes the list {shape.name}: use a number (e.g. 0)"
            shape = shape.member
        elif kind == "map":
            shape = shape.value
        elif kind in _STRINGY:
            return None
        else:
            rest = ".".join(path.split(".")[index:])
            return f"{shape.name} is a {kind}: the path cannot go on with {rest!r}"
    return None


def _shape_at(shape: Any, path: str) -> Any:
    for segment in path.split("."):
        if shape.type_name == "structure":
            shape = shape.members[segment]
        elif shape.type_name == "list":
            shape = shape.member
        elif shape.type_name == "map":
            shape = shape.value
        else:
            return None
    return shape


def matcher_problems(pattern: Any, shape: Any, where: str) -> list[str]:
    """Where an `expected` pattern cannot match the output shape (a field the response never has,
    a literal of the wrong type or outside the member's enum)."""
    if isinstance(pattern, dict) and len(pattern) == 1 and next(iter(pattern)).startswith("$"):
        name = next(iter(pattern))
        if name not in handler_matchers():
            return [
                f"{where}: the deployed assertion handler decodes only {', '.join(sorted(handler_matchers()))}; "
                f"{name} is compared as a literal object and never matches (ExpectedResult.exact writes $Exact: "
                "use ExpectedResult.string_like_regexp('^...$') or object_like instead)"
            ]
    if shape is None:  # inside a JSON string or past a path the model cannot follow: only the matchers
        inner = pattern.values() if isinstance(pattern, dict) else pattern if isinstance(pattern, list) else []
        return [p for value in inner for p in matcher_problems(value, None, where)]
    kind = shape.type_name
    if isinstance(pattern, dict) and len(pattern) == 1 and next(iter(pattern)).startswith("$"):
        [(name, inner)] = pattern.items()
        if name in ("$StringLike", "$SerializedJson"):
            if kind not in _STRINGY:
                return [f"{where}: {name} needs a string, but {shape.name} is a {kind}"]
            return matcher_problems(inner, None, f"{where}{{{name}}}") if name == "$SerializedJson" else []
        if name == "$ArrayWith":
            if kind != "list":
                return [f"{where}: $ArrayWith needs a list, but {shape.name} is a {kind}"]
            return [p for i, item in enumerate(inner) for p in matcher_problems(item, shape.member, f"{where}[{i}]")]
        return matcher_problems(inner, shape, where)  # $ObjectLike: its keys are checked like a literal's
    if isinstance(pattern, dict):
        if kind == "map":
            return [p for k, v in pattern.items() for p in matcher_problems(v, shape.value, f"{where}.{k}")]
        if kind != "structure":
            return [f"{where}: an object cannot match {shape.name}, a {kind}"]
        problems = []
        for key, value in pattern.items():
            if key not in shape.members:
                close = difflib.get_close_matches(key, list(shape.members), n=1, cutoff=0.5)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(
                    f"{where}: {key!r} is not a member of {shape.name}{hint}; members: {', '.join(shape.members)}"
                )
            else:
                problems.extend(matcher_problems(value, shape.members[key], f"{where}.{key}"))
        return problems
    if isinstance(pattern, list):
        if kind != "list":
            return [f"{where}: a list cannot match {shape.name}, a {kind}"]
        return [p for i, item in enumerate(pattern) for p in matcher_problems(item, shape.member, f"{where}[{i}]")]
    if isinstance(pattern, bool):
        return [] if kind == "boolean" else [f"{where}: {pattern!r} cannot equal {shape.name}, a {kind}"]
    if isinstance(pattern, int | float):
        numeric = ("integer", "long", "float", "double")
        return [] if kind in numeric else [f"{where}: {pattern!r} cannot equal {shape.name}, a {kind}"]
    if isinstance(pattern, str):
        if kind not in _STRINGY:
            return [f"{where}: {pattern!r} cannot equal {shape.name}, a {kind}"]
        if shape.enum and TOKEN_TEXT not in pattern and pattern not in shape.enum:
            return [f"{where}: {pattern!r} is not a value of {shape.name} ({', '.join(shape.enum)})"]
    return []


# --- IAM ----------------------------------------------------------------------------------------------


def _role_of_function(resources: dict[str, Any], function_id: str) -> str | None:
    role = resources.get(function_id, {}).get("Properties", {}).get("Role")
    if isinstance(role, dict) and "Fn::GetAtt" in role:
        return str(role["Fn::GetAtt"][0])
    return None


def _function_of_token(token: Any) -> str | None:
    if isinstance(token, dict) and "Fn::GetAtt" in token and token["Fn::GetAtt"][1] == "Arn":
        return str(token["Fn::GetAtt"][0])
    return None


def _waiter_function(resources: dict[str, Any], state_machine: Any) -> str | None:
    """The isComplete function a waiter state machine (a Ref) polls with."""
    if not (isinstance(state_machine, dict) and "Ref" in state_machine):
        return None
    definition = resources.get(state_machine["Ref"], {}).get("Properties", {}).get("DefinitionString", {})
    parts = definition.get("Fn::Join", ["", []])[1] if isinstance(definition, dict) else []
    for part in parts:
        function = _function_of_token(part)
        if function and resources.get(function, {}).get("Properties", {}).get("Handler") == "index.isComplete":
            return function
    return None


def allowed_actions(resources: dict[str, Any], role_id: str) -> list[str]:
    """Every action an Allow statement of the role's inline policies, or of an AWS::IAM::Policy
    attached to it, names."""
    documents = [p["PolicyDocument"] for p in resources.get(role_id, {}).get("Properties", {}).get("Policies") or []]
    for resource in resources.values():
        if resource.get("Type") == "AWS::IAM::Policy" and {"Ref": role_id} in resource["Properties"].get("Roles", []):
            documents.append(resource["Properties"]["PolicyDocument"])
    actions: list[str] = []
    for document in documents:
        for statement in document.get("Statement", []):
            if statement.get("Effect") == "Allow":
                action = statement.get("Action", [])
                actions.extend([action] if isinstance(action, str) else action)
    return actions


def allows(actions: list[str], action: str) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in actions)


# --- response size ----------------------------------------------------------------------------------

#: CloudFormation refuses a custom resource response body above 4,096 bytes ("Response object is too
#: long"); the assertion handler sends the whole API response in it unless outputPaths filter it.
RESPONSE_LIMIT = 4096


def _resolve_output(value: Any, stacks: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], str] | None:
    """The (resources, logical id) a Fn::GetStackOutput of a test stack's Ref output names, or None."""
    if not (isinstance(value, dict) and "Fn::GetStackOutput" in value):
        return None
    spec = value["Fn::GetStackOutput"]
    stack = stacks.get(str(spec.get("StackName")))
    output = (stack or {}).get("Outputs", {}).get(str(spec.get("OutputName")), {}).get("Value")
    if stack is None or not (isinstance(output, dict) and "Ref" in output):
        return None
    return stack.get("Resources", {}), str(output["Ref"])


def _tokens(value: Any) -> list[Any]:
    """The intrinsics a property joins (an Fn::Join's parts that are not text), or the value itself."""
    if isinstance(value, dict) and "Fn::Join" in value:
        return [part for part in value["Fn::Join"][1] if not isinstance(part, str)]
    return [value] if _is_intrinsic(value) else []


def _rendered(value: Any) -> Any:
    """A resource property with its intrinsics replaced by TOKEN_TEXT (a real value is at least as long)."""
    if isinstance(value, dict) and ("Fn::Join" in value or _is_intrinsic(value)):
        return render(value).replace(json.dumps(_SENTINEL), TOKEN_TEXT)
    if isinstance(value, dict):
        return {k: _rendered(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rendered(v) for v in value]
    return value


def response_floor(
    props: dict[str, Any], service: str, operation: str, resources: dict[str, Any], stacks: dict[str, dict[str, Any]]
) -> tuple[int, list[str]]:
    """The fewest bytes the CloudFormation response of an unfiltered call must hold: the response
    envelope plus what the synthesized templates say the API returns (an execution's input, each
    named alarm's definition, a dashboard's body). Other responses count only the envelope."""
    envelope = {
        "Status": "SUCCESS", "Reason": "OK", "PhysicalResourceId": "x" * 40, "LogicalResourceId": "x" * 40,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/" + "x" * 20 + "/" + "x" * 36,
        "RequestId": "x" * 36, "NoEcho": False, "Data": {"assertion": json.dumps({"status": "success"})},
    }
    floor = len(json.dumps(envelope, separators=(",", ":")))
    sources = [f"{floor} bytes of envelope"]
    parameters = props.get("parameters") or {}
    if (service, operation) == ("stepfunctions", "DescribeExecution") and decode(parameters.get("includedData", '""')) != "METADATA_ONLY":
        for token in _tokens(parameters.get("executionArn")):
            if isinstance(token, dict) and "Fn::GetAtt" in token:
                start = resources.get(token["Fn::GetAtt"][0], {}).get("Properties", {})
                text = decode((start.get("parameters") or {}).get("input", '""'))
                if isinstance(text, str) and text:
                    floor += len(json.dumps(text))
                    sources.append(f"the execution's input echoed, {len(json.dumps(text)):,} bytes")
    if (service, operation) == ("cloudwatch", "DescribeAlarms"):
        for token in _tokens(parameters.get("AlarmNames")):
            found = _resolve_output(token, stacks)
            alarm = found[0].get(found[1], {}) if found else {}
            if alarm.get("Type") == "AWS::CloudWatch::Alarm":
                size = len(json.dumps({k: _rendered(v) for k, v in alarm["Properties"].items() if k != "Tags"}))
                floor += size
                sources.append(f"alarm {found[1] if found else ''} {size:,} bytes")
    if (service, operation) == ("cloudwatch", "GetDashboard"):
        for token in _tokens(parameters.get("DashboardName")):
            found = _resolve_output(token, stacks)
            dashboard = found[0].get(found[1], {}) if found else {}
            if dashboard.get("Type") == "AWS::CloudWatch::Dashboard":
                size = len(json.dumps(render(dashboard["Properties"].get("DashboardBody", ""))))
                floor += size
                sources.append(f"the dashboard body, {size:,} bytes")
    return floor, sources


# --- one template -------------------------------------------------------------------------------------


def check_template(
    template: dict[str, Any], label: str = "template", stacks: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """Every problem of every SDK call assertion in an assertion stack's template; [] when all pass.
    `stacks` (stack name -> template, the app's test stacks) lets Fn::GetStackOutput values be followed
    to the resources they name, for the response-size floor."""
    from botocore.validate import ParamValidator

    resources = template.get("Resources", {})
    problems: list[str] = []
    outputs_of: dict[str, Any] = {}  # logical id -> (output shape, outputPaths, flattened)
    calls = {lid: r for lid, r in resources.items() if str(r.get("Type", "")).startswith(SDK_CALL)}
    for lid, resource in calls.items():
        props = resource.get("Properties", {})
        service, api = str(props.get("service")), str(props.get("api"))
        where = f"{label} {lid} ({service}.{api})"
        v3 = v3_name(service)
        model = botocore_model(v3)
        if model is None:
            problems.append(
                f"{where}: no AWS service has the SDK v3 client @aws-sdk/client-{v3}; use the service's "
                "SDK v3 client name (e.g. 'CloudWatch', 'StepFunctions', 'ApplicationAutoScaling', "
                "'OpenSearchServerless' or '@aws-sdk/client-sfn')"
            )
            continue
        command = v3_action(v3, api)
        by_lower = {name.lower(): name for name in model.operation_names}
        operation = by_lower.get(command.lower())
        if operation is None:
            close = difflib.get_close_matches(command, model.operation_names, n=3, cutoff=0.6)
            problems.append(
                f"{where}: @aws-sdk/client-{v3} has no {command}Command ({model.service_id} has no operation "
                f"{command}); {'did you mean ' + ' or '.join(close) + '?' if close else 'see its operation list'}"
            )
            continue
        op = model.operation_model(operation)
        raw = props.get("parameters") or {}
        decoded = {key: decode(value) for key, value in raw.items()} if isinstance(raw, dict) else {}
        params = typed(decoded, op.input_shape) if op.input_shape is not None else decoded
        if op.input_shape is None:
            if params:
                problems.append(f"{where}: {operation} takes no parameters, got {sorted(params)}")
        else:
            report = ParamValidator().validate(params, op.input_shape)
            if report.has_errors():
                problems.append(f"{where}: parameters fail botocore's {model.service_name}.{operation} model:\n    "
                                + report.generate_report().replace("\n", "\n    "))
        output = op.output_shape
        flattened = props.get("flattenResponse") == "true" or bool(props.get("outputPaths"))
        outputs_of[lid] = (output, props.get("outputPaths") or [], flattened, where)
        for path in props.get("outputPaths") or []:
            problem = path_problem(output, path) if output is not None else f"{operation} has no output"
            if problem:
                problems.append(f"{where}: outputPaths {path!r}: {problem}")
        actual_path = props.get("actualPath")
        if actual_path:
            problem = path_problem(output, actual_path) if output is not None else f"{operation} has no output"
            if problem:
                problems.append(f"{where}: actualPath {actual_path!r}: {problem}")
        if "expected" in props:
            if flattened and not actual_path:
                problems.append(
                    f"{where}: the response is flattened (outputPaths / get_att) and no actualPath is set, so "
                    "the expected result is compared with nothing; assert on another call or use assert_at_path"
                )
            expected = decode(props["expected"])
            shape = output
            if actual_path and output is not None and path_problem(output, actual_path) is None:
                shape = _shape_at(output, actual_path)
            if output is None:
                problems.append(f"{where}: {operation} returns nothing to compare with the expected result")
            else:
                problems.extend(matcher_problems(expected, shape, f"{where}: expected"))
        if not (flattened and props.get("outputPaths")):
            floor, sources = response_floor(props, model.service_name, operation, resources, stacks or {})
            if floor > RESPONSE_LIMIT:
                problems.append(
                    f"{where}: its CloudFormation response holds at least {floor:,} bytes ({'; '.join(sources)}), "
                    f"above the {RESPONSE_LIMIT:,} bytes CloudFormation accepts from a custom resource: the "
                    "assertion stack fails with 'Response object is too long'. Return less: assert_at_path(path, ...) "
                    "or output_paths keep only the fields named"
                )
        # IAM: the role of the function that makes the call.
        needed = iam_action(v3, operation)
        prefix, name = needed.split(":", 1)
        known = iam_actions().get(prefix)
        if known is None or name.lower() not in known:
            problems.append(
                f"{where}: IAM knows no action {needed}; add the action the Service Authorization Reference "
                f"names for {model.service_id} {operation} to integ._sdk_check.IAM_ACTIONS"
            )
        provider = _function_of_token(props.get("ServiceToken"))
        waiter = _waiter_function(resources, props.get("stateMachineArn"))
        makers = [(waiter, needed)] if "stateMachineArn" in props else [(provider, needed)]
        if "stateMachineArn" in props:
            makers.append((provider, "states:StartExecution"))  # the provider starts the waiter
            if waiter is None:
                problems.append(f"{where}: its waiter state machine has no isComplete function")
        for function, action in makers:
            role = _role_of_function(resources, function) if function else None
            if role is None:
                problems.append(f"{where}: cannot find the role of the function that needs {action}")
            elif not allows(allowed_actions(resources, role), action):
                problems.append(
                    f"{where}: the role {role} of {function} does not allow {action}; the call fails with "
                    "AccessDenied (add it with provider.add_to_role_policy / waiter_provider.add_to_role_policy)"
                )
    # Attributes other resources read: Fn::GetAtt <call>.apiCallResponse.<path>.
    for lid, resource in resources.items():
        for ref in _get_atts(resource):
            target, attribute = ref
            if target not in outputs_of or not attribute.startswith("apiCallResponse."):
                continue
            output, paths, flattened, where = outputs_of[target]
            path = attribute.removeprefix("apiCallResponse.")
            if not flattened:
                problems.append(f"{label} {lid} reads {target}.{attribute}, but {where} does not flatten its response")
            elif paths and not any(path.startswith(p) for p in paths):
                problems.append(f"{label} {lid} reads {target}.{attribute}, not among {where}'s outputPaths {paths}")
            elif output is not None and (problem := path_problem(output, path)):
                problems.append(f"{label} {lid} reads {target}.{attribute}: {problem}")
    return problems


def _get_atts(value: Any) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        if "Fn::GetAtt" in value and isinstance(value["Fn::GetAtt"], list) and len(value["Fn::GetAtt"]) == 2:
            found.append((str(value["Fn::GetAtt"][0]), str(value["Fn::GetAtt"][1])))
        for inner in value.values():
            found.extend(_get_atts(inner))
    elif isinstance(value, list):
        for inner in value:
            found.extend(_get_atts(inner))
    return found


def sdk_calls(template: dict[str, Any]) -> list[str]:
    """The logical ids of a template's SDK call assertions."""
    return [lid for lid, r in template.get("Resources", {}).items() if str(r.get("Type", "")).startswith(SDK_CALL)]
