"""CloudFormation custom resource: OpenSearch search pipelines and k-NN index settings, SigV4-signed.

No CloudFormation resource creates a search pipeline (managed domain or Serverless collection) or an
index on a managed domain, so genai_pacer.HybridSearchPipeline and VectorIndexSettings (domain
target) put them here. The function is the resource's ServiceToken: it answers CloudFormation itself
(a PUT of the result to the pre-signed ResponseURL), always, so a failure surfaces as the stack
event's reason instead of an hour-long wait.

ResourceProperties (CloudFormation passes every value as a string, so documents travel as JSON)
    Kind        "Pipeline" or "Index"
    Endpoint    the domain or collection endpoint, with or without https://
    Service     "es" (managed domain) or "aoss" (Serverless collection): the SigV4 service name
    Region      the endpoint's Region
    Pipeline:   PipelineName, Body (JSON of the pipeline definition)
    Index:      IndexName, Body (JSON {"settings", "mappings"} to create it with), BuildTime (JSON of
                the settings HNSW builds the graph with: engine, space_type, m, ef_construction,
                dimension, field), EfSearch ("" when the engine ignores it), DeleteOnRemoval
                ("true" deletes the index with the resource; default keeps the data)

Create  Pipeline: PUT /_search/pipeline/<name>, then GET it back to confirm what OpenSearch stored.
        Index: PUT /<index> with settings and mappings; an index that already exists is adopted
        only when its vector field has the same build-time settings. An adopted index's physical id
        ends in ADOPTED_SUFFIX: CloudFormation hands that id back on Update and Delete (Data it
        does not), so the handler remembers the stack did not create the index.
Update  Pipeline: PUT again (a real update, same physical id); a new name or endpoint creates the
        new pipeline and CloudFormation then deletes the old one.
        Index: a changed build-time setting on the same index is refused ("needs a reindex"): HNSW
        graphs are built at indexing time, and a new setting applies only to a new index. ef_search
        is dynamic: PUT /<index>/_settings (null when it was removed, which restores the default).
Delete  DELETE; a 404 is success (already gone), so deletes are idempotent. An index is kept
        unless DeleteOnRemoval is "true", and always when it was adopted: deleting the stack must
        not delete data the stack never created.

Time    Every request's timeout is cut to what the invocation has left minus RESPONSE_RESERVE_SECONDS,
        so the function always lives long enough to answer CloudFormation (a Lambda timeout would
        leave the stack waiting an hour). On Serverless a 401/403 is retried for up to
        AOSS_PERMISSION_WAIT_SECONDS: a data access policy created in the same deployment takes
        a while to apply.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

TIMEOUT_SECONDS = 30
#: CloudFormation refuses a response body over 4,096 bytes; the reason is cut to fit.
MAX_REASON = 3000
FAILED_CREATE = "failed-create"
#: Ends the physical id of an index that existed before the stack: Delete keeps it whatever DeleteOnRemoval says.
ADOPTED_SUFFIX = "#adopted"
#: Kept back from the invocation's remaining time for the response to CloudFormation.
RESPONSE_RESERVE_SECONDS = 15
#: How long a Serverless 401/403 is retried while a new data access policy applies.
AOSS_PERMISSION_WAIT_SECONDS = 90
#: time.monotonic() by which the handler must stop calling OpenSearch (set per invocation).
_deadline: float | None = None
#: One session for every signed request of every invocation: it resolves the role's credentials once
#: and botocore refreshes them when they rotate (a Session per request re-resolved them each time).
_SESSION = boto3.Session()


class ResourceError(Exception):
    """A failure to report to CloudFormation as the resource's reason."""


@dataclass(frozen=True)
class Endpoint:
    url: str  # https://host (or http://127.0.0.1:port in tests)
    service: str
    region: str

    @property
    def host(self) -> str:
        return self.url.split("://", 1)[1]


def endpoint_of(props: dict[str, Any]) -> Endpoint:
    raw = str(props.get("Endpoint", "")).strip().rstrip("/")
    if not raw:
        raise ResourceError("Endpoint is empty: pass the domain or collection endpoint")
    service = str(props.get("Service", ""))
    if service not in ("es", "aoss"):
        raise ResourceError(f"Service={service!r} must be 'es' (managed domain) or 'aoss' (Serverless collection)")
    url = raw if "://" in raw else f"https://{raw}"
    return Endpoint(url, service, str(props.get("Region", "")))


def _time_left(method: str, path: str, endpoint: Endpoint) -> float:
    """Seconds the next request may take, or ResourceError when the invocation has none to spare."""
    if _deadline is None:
        return TIMEOUT_SECONDS
    left = _deadline - time.monotonic()
    if left < 1:
        raise ResourceError(
            f"{method} {path} on {endpoint.host} was not sent: the function ran out of time waiting for OpenSearch; "
            "check that the endpoint answers (network policy, VPC access) and deploy again"
        )
    return min(TIMEOUT_SECONDS, left)


def send(endpoint: Endpoint, method: str, path: str, body: Any = None, *, session: Any = None) -> tuple[int, Any]:
    """A SigV4-signed request; returns (status, parsed JSON or text). Never raises on HTTP errors.

    On Serverless, 401/403 is retried (backing off to 10 s) for up to AOSS_PERMISSION_WAIT_SECONDS,
    within the invocation's time: a data access policy takes a while to apply after it is created.
    """
    waited, pause = 0.0, 2.0
    while True:
        status, answer = _send_once(endpoint, method, path, body, session=session)
        if endpoint.service != "aoss" or status not in (401, 403) or waited + pause > AOSS_PERMISSION_WAIT_SECONDS:
            return status, answer
        if _deadline is not None and _deadline - time.monotonic() < pause + TIMEOUT_SECONDS:
            return status, answer
        time.sleep(pause)
        waited += pause
        pause = min(pause * 2, 10.0)


def _send_once(endpoint: Endpoint, method: str, path: str, body: Any = None, *, session: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else b""
    headers = {"Content-Type": "application/json", "Host": endpoint.host}
    # Serverless requires the payload hash as a header; managed domains accept it too.
    headers["X-Amz-Content-SHA256"] = hashlib.sha256(data).hexdigest()
    request = AWSRequest(method=method, url=endpoint.url + path, data=data, headers=headers)
    credentials = (session or _SESSION).get_credentials()
    if credentials is None:
        raise ResourceError("no AWS credentials in the function's environment to sign the request with")
    SigV4Auth(credentials.get_frozen_credentials(), endpoint.service, endpoint.region).add_auth(request)
    prepared = urllib.request.Request(
        endpoint.url + path, data=data if method in ("PUT", "POST") else None, method=method, headers=dict(request.headers)
    )
    try:
        with urllib.request.urlopen(prepared, timeout=_time_left(method, path, endpoint)) as response:  # noqa: S310 (https endpoint)
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode(errors="replace")
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise ResourceError(
            f"{method} {path} on {endpoint.host} could not connect ({error}): a VPC-only domain or collection "
            "needs the function in its VPC (or a network policy that allows it)"
        ) from error
    try:
        return status, json.loads(text) if text else None
    except json.JSONDecodeError:
        return status, text


def _failure(method: str, path: str, endpoint: Endpoint, status: int, body: Any) -> ResourceError:
    detail = json.dumps(body)[:800] if not isinstance(body, str) else body[:800]
    hint = ""
    if status in (401, 403):
        hint = (
            ": the function's role is not allowed. On a domain with fine-grained access control, map the role "
            "(HybridSearchPipeline.function.role) to an OpenSearch role with cluster permission "
            "cluster:admin/search/pipeline/* (and index permissions for index settings); on Serverless the "
            "collection's data access policy must name the role"
            if endpoint.service == "es"
            else ": the collection's data access policy must name the function's role"
        )
    elif status == 400:
        hint = ": OpenSearch refused the definition (check the technique names, and that the domain runs 2.10+ for the normalization-processor)"
    return ResourceError(f"{method} {path} on {endpoint.host} returned {status}{hint}. Response: {detail}")


def _json_prop(props: dict[str, Any], name: str) -> Any:
    try:
        return json.loads(props.get(name) or "null")
    except json.JSONDecodeError as error:
        raise ResourceError(f"{name} is not valid JSON ({error})") from error


# ---------------------------------------------------------------------------------------------
# Pipelines


def _pipeline_path(props: dict[str, Any]) -> str:
    name = str(props.get("PipelineName", ""))
    if not name or "/" in name:
        raise ResourceError(f"PipelineName={name!r} must be a non-empty name without '/'")
    return f"/_search/pipeline/{name}"


def put_pipeline(props: dict[str, Any], session: Any = None) -> tuple[str, dict[str, Any]]:
    endpoint, path = endpoint_of(props), _pipeline_path(props)
    body = _json_prop(props, "Body")
    status, response = send(endpoint, "PUT", path, body, session=session)
    if not 200 <= status < 300:
        raise _failure("PUT", path, endpoint, status, response)
    status, stored = send(endpoint, "GET", path, session=session)
    name = str(props["PipelineName"])
    if status != 200 or not isinstance(stored, dict) or name not in stored:
        raise ResourceError(f"GET {path} on {endpoint.host} after the PUT returned {status}: the pipeline was not stored")
    expected = body.get("phase_results_processors")
    if expected is not None and stored[name].get("phase_results_processors") != expected:
        raise ResourceError(
            f"{path} on {endpoint.host} stores processors {json.dumps(stored[name].get('phase_results_processors'))[:400]}, "
            f"not the ones sent: the cluster changed or ignored the definition"
        )
    return f"{endpoint.host}{path}", {"PipelineName": name}


def delete_path(endpoint: Endpoint, path: str, session: Any = None) -> None:
    status, response = send(endpoint, "DELETE", path, session=session)
    if status == 404 or 200 <= status < 300:
        return
    raise _failure("DELETE", path, endpoint, status, response)


# ---------------------------------------------------------------------------------------------
# Index settings (managed domains)


def _index_path(props: dict[str, Any]) -> str:
    name = str(props.get("IndexName", ""))
    if not name or not name.islower() or "/" in name or name.startswith(("_", "-")):
        raise ResourceError(f"IndexName={name!r} must be a lower-case index name not starting with _ or -")
    return f"/{name}"


def reindex_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """The build-time settings that differ between two BuildTime documents."""
    old = old or {}
    return [f"{key} {old.get(key)!r} -> {new.get(key)!r}" for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]


def _existing_build_time(mapping: Any, index: str, field: str) -> dict[str, Any] | None:
    try:
        properties = mapping[index]["mappings"]["properties"][field]
    except (KeyError, TypeError):
        return None
    method = properties.get("method", {})
    parameters = method.get("parameters", {})
    return {
        "field": field,
        "dimension": properties.get("dimension"),
        "engine": method.get("engine"),
        "space_type": method.get("space_type", properties.get("space_type")),
        "m": parameters.get("m"),
        "ef_construction": parameters.get("ef_construction"),
    }


def _put_ef_search(endpoint: Endpoint, path: str, props: dict[str, Any], session: Any, *, reset: bool = False) -> None:
    """Set ef_search; with `reset` (it was set before and is now removed) restore the default."""
    ef_search = str(props.get("EfSearch") or "")
    if not ef_search and not reset:
        return
    try:
        value = int(ef_search) if ef_search else None  # null restores OpenSearch's default (100)
    except ValueError:
        raise ResourceError(f"EfSearch={ef_search!r} must be a whole number (or empty for OpenSearch's default)") from None
    settings_path = f"{path}/_settings"
    status, response = send(endpoint, "PUT", settings_path, {"index": {"knn.algo_param.ef_search": value}}, session=session)
    if not 200 <= status < 300:
        raise _failure("PUT", settings_path, endpoint, status, response)


def create_index(props: dict[str, Any], session: Any = None) -> tuple[str, dict[str, Any]]:
    """Create the index, or adopt an existing one with the same build-time settings (its physical id
    then ends in ADOPTED_SUFFIX, so a later Delete keeps it)."""
    endpoint, path = endpoint_of(props), _index_path(props)
    build_time = _json_prop(props, "BuildTime") or {}
    status, existing = send(endpoint, "GET", f"{path}/_mapping", session=session)
    physical = f"{endpoint.host}{path}"
    if status == 200:
        found = _existing_build_time(existing, path[1:], str(build_time.get("field")))
        changes = reindex_changes(found, build_time)
        if changes:
            raise ResourceError(
                f"index {path[1:]} already exists on {endpoint.host} with other build-time settings ({'; '.join(changes)}): "
                "it needs a reindex: choose a new index_name, reindex into it, then move readers"
            )
        _put_ef_search(endpoint, path, props, session)
        physical += ADOPTED_SUFFIX
    elif status == 404:
        status, response = send(endpoint, "PUT", path, _json_prop(props, "Body"), session=session)
        if not 200 <= status < 300:
            raise _failure("PUT", path, endpoint, status, response)
    else:
        raise _failure("GET", f"{path}/_mapping", endpoint, status, existing)
    return physical, {"IndexName": path[1:]}


def update_index(props: dict[str, Any], old: dict[str, Any], physical: str, session: Any = None) -> tuple[str, dict[str, Any]]:
    """Change ef_search in place, keeping the physical id (and with it whether the index was adopted);
    a new index name or endpoint is a new index, created or adopted under a new physical id."""
    endpoint, path = endpoint_of(props), _index_path(props)
    old_endpoint = endpoint_of(old) if old.get("Endpoint") else endpoint
    if path != _index_path(old) or endpoint.host != old_endpoint.host:
        return create_index(props, session)  # a new physical id: CloudFormation then deletes the old one
    changes = reindex_changes(_json_prop(old, "BuildTime"), _json_prop(props, "BuildTime") or {})
    if changes:
        raise ResourceError(
            f"index {path[1:]}: {'; '.join(changes)} needs a reindex: HNSW builds its graph when documents are "
            "indexed, so a new build-time setting applies only to a new index. Set a new index_name (the old "
            "index is kept), reindex into it, then move readers; ef_search alone can change in place"
        )
    _put_ef_search(endpoint, path, props, session, reset=bool(str(old.get("EfSearch") or "")))
    return physical or f"{endpoint.host}{path}", {"IndexName": path[1:]}


# ---------------------------------------------------------------------------------------------
# CloudFormation


def handle(event: dict[str, Any], session: Any = None) -> tuple[str, dict[str, Any]]:
    """The resource's physical id and attributes, or ResourceError."""
    kind_of = event["ResourceProperties"].get("Kind")
    request = event["RequestType"]
    props = event["ResourceProperties"]
    if kind_of not in ("Pipeline", "Index"):
        raise ResourceError(f"Kind={kind_of!r} must be 'Pipeline' or 'Index'")
    if request == "Delete":
        physical = event.get("PhysicalResourceId", "")
        if physical.startswith(FAILED_CREATE):
            return physical, {}  # nothing was created
        if kind_of == "Pipeline":
            delete_path(endpoint_of(props), _pipeline_path(props), session)
        elif physical.endswith(ADOPTED_SUFFIX):
            print(json.dumps({"level": "info", "message": f"kept index {props.get('IndexName')!r}: it existed before "
                              "the stack adopted it, so deleting the stack does not delete its data"}))
        elif str(props.get("DeleteOnRemoval")) == "true":
            delete_path(endpoint_of(props), _index_path(props), session)
        return physical, {}
    if kind_of == "Pipeline":
        return put_pipeline(props, session)
    if request == "Update":
        return update_index(props, event.get("OldResourceProperties", {}), event.get("PhysicalResourceId", ""), session)
    return create_index(props, session)


def respond(event: dict[str, Any], status: str, physical_id: str, reason: str = "", data: dict[str, Any] | None = None) -> None:
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:MAX_REASON],
            "PhysicalResourceId": physical_id,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": data or {},
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 (CloudFormation's pre-signed URL)
        response.read()  # S3 answers the PUT with an empty body; reading it completes the exchange


def handler(event: dict[str, Any], context: Any = None, session: Any = None) -> None:
    global _deadline
    physical = event.get("PhysicalResourceId") or f"{FAILED_CREATE}-{event.get('RequestId', '')}"
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    _deadline = time.monotonic() + remaining() / 1000 - RESPONSE_RESERVE_SECONDS if callable(remaining) else None
    try:
        physical, data = handle(event, session)
    except ResourceError as error:
        print(json.dumps({"level": "error", "message": str(error), "requestType": event.get("RequestType")}))
        respond(event, "FAILED", physical, str(error))
        return
    except Exception as error:  # anything else still answers CloudFormation, with the cause
        print(json.dumps({"level": "error", "message": traceback.format_exc()}))
        respond(event, "FAILED", physical, f"{type(error).__name__}: {error}")
        return
    respond(event, "SUCCESS", physical, "", data)
