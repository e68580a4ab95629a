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
    Pipeline:   PipelineName (PIPELINE_NAME; anything else fails the resource naming it, before any
                request), Body (JSON of the pipeline definition)
    Index:      IndexName, Body (JSON {"settings", "mappings"} to create it with), BuildTime (JSON of
                the settings HNSW builds the graph with: engine, space_type, m, ef_construction,
                dimension, field, and for faiss ef_search), EfSearch (the dynamic index setting
                index.knn.algo_param.ef_search that lucene and nmslib read; "" for none),
                DeleteOnRemoval ("true" deletes the index with the resource; default keeps the data)

Create  Pipeline: PUT /_search/pipeline/<name>, then GET it back to confirm what OpenSearch stored.
        Index: PUT /<index> with settings and mappings; an index that already exists is adopted
        only when its vector field has the same build-time settings. An adopted index's physical id
        ends in ADOPTED_SUFFIX: CloudFormation hands that id back on Update and Delete (Data it
        does not), so the handler remembers the stack did not create the index.
Update  Pipeline: PUT again (a real update, same physical id); a new name or endpoint creates the
        new pipeline and CloudFormation then deletes the old one.
        Index: the wanted build-time settings are compared with the index's real mapping (not with
        the old properties, so a rollback to what the index has always succeeds); a difference is
        refused ("needs a reindex"): HNSW graphs are built at indexing time, and a new setting
        applies only to a new index. For faiss that includes ef_search, which each graph stores;
        its per-query override (method_parameters.ef_search) needs no reindex. The index setting
        ef_search (lucene, nmslib) is dynamic: PUT /<index>/_settings (null when it was removed,
        which restores the default).
Delete  DELETE; a 404 is success (already gone), so deletes are idempotent. An index is kept
        unless DeleteOnRemoval is "true", and always when it was adopted: deleting the stack must
        not delete data the stack never created.

Faults  OpenSearch answering 429, 502, 503 or 504, a timeout or a dropped connection is retried with
        exponential backoff and full jitter (a random pause up to BACKOFF_BASE_SECONDS x 2^attempt,
        at most BACKOFF_CAP_SECONDS), at most MAX_ATTEMPTS times, never past the invocation's
        deadline. Every request's timeout is cut to what the invocation has left minus
        RESPONSE_RESERVE_SECONDS, so the function always lives long enough to answer CloudFormation.
        On Serverless a 401/403 is retried for up to AOSS_PERMISSION_WAIT_SECONDS: a data access
        policy created in the same deployment takes a while to apply. Anything else fails at once.
Events  An unknown RequestType or missing ResourceProperties is answered FAILED with the reason. An
        event that is not an object, or lacks ResponseURL, StackId, RequestId or LogicalResourceId,
        cannot be answered: the handler logs which fields are missing and raises, so the invocation
        fails visibly (the function's Errors metric); if CloudFormation did send it, it fails the
        resource after the resource's ServiceTimeout (10 minutes, set by the constructs).
Answers The response body is cut to CloudFormation's 4,096 bytes by shortening the reason (measured
        on the whole encoded body). The PUT to the ResponseURL is tried RESPONSE_ATTEMPTS times.
Logs    Reasons, ids and error types only: this function handles pipeline definitions and index
        mappings, never documents or queries, and an unexpected error is logged by type and place,
        not by its message.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import re
import time
import traceback
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from pacer_runtime.structured_log import log

TIMEOUT_SECONDS = 30
#: The most a response to CloudFormation may hold ("The total size of the response body can't exceed
#: 4096 bytes": CloudFormation user guide, Custom resource response objects, crpg-ref-responses.html).
MAX_RESPONSE_BYTES = 4096
#: Ends a reason cut to fit MAX_RESPONSE_BYTES.
TRUNCATED = " [reason cut to fit CloudFormation's 4,096-byte response]"
FAILED_CREATE = "failed-create"
#: Ends the physical id of an index that existed before the stack: Delete keeps it whatever DeleteOnRemoval says.
ADOPTED_SUFFIX = "#adopted"
#: Kept back from the invocation's remaining time for the response to CloudFormation.
RESPONSE_RESERVE_SECONDS = 15
#: How long a Serverless 401/403 is retried while a new data access policy applies.
AOSS_PERMISSION_WAIT_SECONDS = 90
#: Answers that mean "not now" rather than "no" (HTTP 429 Too Many Requests; 502/503/504 from the
#: service's front end or a node being replaced): retried.
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 20.0
MAX_ATTEMPTS = 8
#: A retry is not started with less time than this left before the deadline.
MIN_REQUEST_SECONDS = 5.0
RESPONSE_ATTEMPTS = 3
#: The request types CloudFormation sends (CloudFormation user guide, crpg-ref-requesttypes).
REQUEST_TYPES = ("Create", "Update", "Delete")
#: What a response must echo for CloudFormation to accept it (crpg-ref-responses).
RESPONSE_FIELDS = ("ResponseURL", "StackId", "RequestId", "LogicalResourceId")
#: The pipeline names this handler creates, reads back and deletes as exactly one pipeline. OpenSearch
#: itself accepts any id on PUT (PutSearchPipelineRequest.validate() returns null), but GET splits the
#: id at commas (RestGetSearchPipelineAction: Strings.splitStringByCommaToArray) and matches wildcards,
#: and DELETE deletes every pipeline the id matches as a wildcard pattern (SearchPipelineService.innerDelete:
#: Regex.simpleMatch), and "_none" names no pipeline (SearchPipelineService.NOOP_PIPELINE_ID)
#: (opensearch-project/OpenSearch, server/src/main/java/org/opensearch/{action,rest/action}/search/ and
#: search/pipeline/SearchPipelineService.java). So: RFC 3986 unreserved characters without "~" (sent
#: unencoded in the path, so the SigV4 canonical URI is the path itself), no "," or "*", a letter or digit
#: first (never "_none", "." or ".."); at most 128 characters, this library's bound (HybridSearchPipeline
#: checks the same pattern at synth).
PIPELINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
#: time.monotonic() by which the handler must stop calling OpenSearch (set per invocation).
_deadline: float | None = None
#: One session for every signed request of every invocation: it resolves the role's credentials once
#: and botocore refreshes them when they rotate (a Session per request re-resolved them each time).
_SESSION = boto3.Session()


class ResourceError(Exception):
    """A failure to report to CloudFormation as the resource's reason."""


class MalformedEvent(ValueError):
    """An event no answer can be sent for: not an object, or without the fields a response echoes."""


class _Transient(Exception):
    """A request that failed in a way a retry may fix (timeout, dropped connection)."""


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


def _backoff(attempt: int) -> float:
    """Full jitter: a pause drawn from 0 up to the exponential ceiling, so retries from many callers spread out."""
    return random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** attempt))


def _may_wait(seconds: float) -> bool:
    """Whether a pause of `seconds` still leaves time for another request before the deadline."""
    return _deadline is None or _deadline - time.monotonic() - seconds >= MIN_REQUEST_SECONDS


def send(endpoint: Endpoint, method: str, path: str, body: Any = None, *, session: Any = None) -> tuple[int, Any]:
    """A SigV4-signed request; returns (status, parsed JSON or text). HTTP errors are returned, not raised.

    Transient answers (TRANSIENT_STATUSES, a timeout, a dropped connection) are retried with full
    jitter while attempts and time remain; the last transient status is then returned (a timeout
    raises ResourceError). On Serverless, 401/403 is retried (backing off to 10 s) for up to
    AOSS_PERMISSION_WAIT_SECONDS: a data access policy takes a while to apply after it is created.
    """
    attempt, policy_waited, policy_pause = 0, 0.0, 2.0
    while True:
        attempt += 1
        try:
            status, answer = _send_once(endpoint, method, path, body, session=session)
        except _Transient as error:
            pause = _backoff(attempt)
            if attempt >= MAX_ATTEMPTS or not _may_wait(pause):
                raise ResourceError(
                    f"{method} {path} on {endpoint.host}: {error} on each of {attempt} attempts; check the domain's "
                    "health (CPU, JVM memory pressure, a blue/green change) and deploy again"
                ) from error
            log("warning", "retrying OpenSearch after a transient failure", method=method, path=path,
                attempt=attempt, pauseSeconds=round(pause, 2), errorType=type(error.__cause__).__name__)
            time.sleep(pause)
            continue
        if status in TRANSIENT_STATUSES:
            pause = _backoff(attempt)
            if attempt < MAX_ATTEMPTS and _may_wait(pause):
                log("warning", "retrying OpenSearch after a transient answer", method=method, path=path,
                    attempt=attempt, status=status, pauseSeconds=round(pause, 2))
                time.sleep(pause)
                continue
            return status, answer
        waiting_for_policy = endpoint.service == "aoss" and status in (401, 403)
        if waiting_for_policy and policy_waited + policy_pause <= AOSS_PERMISSION_WAIT_SECONDS and _may_wait(policy_pause):
            time.sleep(policy_pause)
            policy_waited += policy_pause
            policy_pause = min(policy_pause * 2, 10.0)
            continue
        return status, answer


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
            status, text = response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode(errors="replace")
    except (TimeoutError, ConnectionResetError, http.client.IncompleteRead) as error:
        raise _Transient(f"no complete answer ({type(error).__name__})") from error
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError | ConnectionResetError):
            raise _Transient(f"no complete answer ({type(error.reason).__name__})") from error
        raise ResourceError(
            f"{method} {path} on {endpoint.host} could not connect ({error.reason}): a VPC-only domain or collection "
            "needs the function in its VPC (or a network policy that allows it)"
        ) from error
    except OSError as error:
        raise ResourceError(f"{method} {path} on {endpoint.host} could not connect ({type(error).__name__})") from error
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
            else ": the collection's data access policy must name the function's role. The construct's policy grants "
            "aoss:CreateCollectionItems, UpdateCollectionItems, DescribeCollectionItems and DeleteCollectionItems on "
            "the collection; AWS does not document which a search pipeline needs, so if that policy is in place, add "
            "a data access policy of your own naming the same role with aoss:* on collection/<name> and report it"
        )
    elif status == 400:
        hint = ": OpenSearch refused the definition (check the technique names, and that the domain runs 2.10+ for the normalization-processor)"
    elif status in TRANSIENT_STATUSES:
        hint = f" on every attempt ({MAX_ATTEMPTS} at most, with backoff): the service is overloaded or changing; deploy again later"
    return ResourceError(f"{method} {path} on {endpoint.host} returned {status}{hint}. Response: {detail}")


def _json_prop(props: dict[str, Any], name: str) -> Any:
    try:
        return json.loads(props.get(name) or "null")
    except (json.JSONDecodeError, TypeError) as error:
        raise ResourceError(f"{name} is not valid JSON ({type(error).__name__}: {error})") from error


# ---------------------------------------------------------------------------------------------
# Pipelines


def _pipeline_path(props: dict[str, Any]) -> str:
    name = props.get("PipelineName")
    if not isinstance(name, str) or not PIPELINE_NAME.match(name):
        shown = name[:200] if isinstance(name, str) else name
        raise ResourceError(
            f"PipelineName={shown!r} must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit: it is sent as /_search/pipeline/<name>, where OpenSearch reads ',' and '*' as lists and wildcards"
        )
    return f"/_search/pipeline/{name}"


def put_pipeline(props: dict[str, Any], session: Any = None) -> tuple[str, dict[str, Any]]:
    endpoint, path = endpoint_of(props), _pipeline_path(props)
    body = _json_prop(props, "Body")
    if not isinstance(body, dict):
        raise ResourceError(f"Body must be a JSON object (the pipeline definition), not {type(body).__name__}")
    status, response = send(endpoint, "PUT", path, body, session=session)
    if not 200 <= status < 300:
        raise _failure("PUT", path, endpoint, status, response)
    status, stored = send(endpoint, "GET", path, session=session)
    name = str(props["PipelineName"])
    if status != 200 or not isinstance(stored, dict) or not isinstance(stored.get(name), dict):
        shape = "not JSON" if isinstance(stored, str) else type(stored).__name__
        raise ResourceError(f"GET {path} on {endpoint.host} after the PUT returned {status} ({shape}): the pipeline was not stored")
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


def _build_time(props: dict[str, Any]) -> dict[str, Any]:
    wanted = _json_prop(props, "BuildTime")
    if not isinstance(wanted, dict) or not isinstance(wanted.get("field"), str):
        raise ResourceError("BuildTime must be a JSON object naming the vector field (field, engine, m, ...)")
    return wanted


def _existing_build_time(mapping: Any, index: str, wanted: dict[str, Any]) -> dict[str, Any] | None:
    """The index's real values of the build-time settings `wanted` names (ef_search only when it does)."""
    field = wanted["field"]
    try:
        properties = mapping[index]["mappings"]["properties"][field]
    except (KeyError, TypeError):
        return None
    if not isinstance(properties, dict):
        return None
    method = _object(properties.get("method"))
    parameters = _object(method.get("parameters"))
    found = {
        "field": field,
        "dimension": properties.get("dimension"),
        "engine": method.get("engine"),
        "space_type": method.get("space_type", properties.get("space_type")),
        "m": parameters.get("m"),
        "ef_construction": parameters.get("ef_construction"),
        "ef_search": parameters.get("ef_search"),
    }
    return {key: value for key, value in found.items() if key in wanted or key != "ef_search"}


def _object(value: Any) -> dict[str, Any]:
    """A mapping part as a dict; anything else (absent, malformed) as an empty one."""
    return value if isinstance(value, dict) else {}


def _reindex_error(index: str, host: str, changes: list[str]) -> ResourceError:
    text = (
        f"index {index} on {host}: {'; '.join(changes)} needs a reindex: HNSW builds its graph when documents are "
        "indexed, so a new build-time setting applies only to a new index. Set a new index_name (the old index is "
        "kept), reindex into it, then move readers"
    )
    if any(change.startswith("ef_search ") for change in changes):
        text += (
            ". faiss stores ef_search in each graph; to change it without a reindex, keep the index's value here "
            "(or drop ef_search) and pass it per query: pacer_runtime.retrieval.knn_query(..., ef_search=N) sends "
            "method_parameters.ef_search (OpenSearch 2.16+)"
        )
    return ResourceError(text)


def _put_ef_search(endpoint: Endpoint, path: str, props: dict[str, Any], session: Any, *, reset: bool = False) -> None:
    """Set the ef_search index setting; with `reset` (it was set before and is now removed) restore the default."""
    ef_search = str(props.get("EfSearch") or "")
    if not ef_search and not reset:
        return
    try:
        value = int(ef_search) if ef_search else None  # null restores OpenSearch's default
    except ValueError:
        raise ResourceError(f"EfSearch={ef_search!r} must be a whole number (or empty for OpenSearch's default)") from None
    settings_path = f"{path}/_settings"
    status, response = send(endpoint, "PUT", settings_path, {"index": {"knn.algo_param.ef_search": value}}, session=session)
    if not 200 <= status < 300:
        raise _failure("PUT", settings_path, endpoint, status, response)


def _already_exists(status: int, response: Any) -> bool:
    error = response.get("error") if isinstance(response, dict) else None
    return status == 400 and isinstance(error, dict) and error.get("type") == "resource_already_exists_exception"


def ensure_index(props: dict[str, Any], session: Any = None, *, physical: str | None = None,
                 reset_ef_search: bool = False) -> tuple[str, dict[str, Any]]:
    """Create the index, or accept the existing one when its build-time settings are the wanted ones.

    physical: the resource's id on an Update of the same index (kept, and with it whether the index
    was adopted); None for a new resource, whose id ends in ADOPTED_SUFFIX when the index existed.
    """
    endpoint, path = endpoint_of(props), _index_path(props)
    wanted = _build_time(props)
    index = path[1:]
    status, existing = send(endpoint, "GET", f"{path}/_mapping", session=session)
    created = False
    if status == 404:
        status, response = send(endpoint, "PUT", path, _json_prop(props, "Body"), session=session)
        if 200 <= status < 300:
            return physical or f"{endpoint.host}{path}", {"IndexName": index}
        if not _already_exists(status, response):
            raise _failure("PUT", path, endpoint, status, response)
        # A PUT retried after a timeout finds the index its first attempt made: compare it like any other.
        created = True
        status, existing = send(endpoint, "GET", f"{path}/_mapping", session=session)
    if status != 200:
        raise _failure("GET", f"{path}/_mapping", endpoint, status, existing)
    changes = reindex_changes(_existing_build_time(existing, index, wanted), wanted)
    if changes:
        raise _reindex_error(index, endpoint.host, changes)
    _put_ef_search(endpoint, path, props, session, reset=reset_ef_search)
    return physical or f"{endpoint.host}{path}{'' if created else ADOPTED_SUFFIX}", {"IndexName": index}


def update_index(props: dict[str, Any], old: dict[str, Any], physical: str, session: Any = None) -> tuple[str, dict[str, Any]]:
    """Bring the same index to the wanted settings under the same physical id; a new index name or
    endpoint is a new index, created or adopted under a new physical id."""
    endpoint, path = endpoint_of(props), _index_path(props)
    old_endpoint = endpoint_of(old) if old.get("Endpoint") else endpoint
    if path != _index_path(old) or endpoint.host != old_endpoint.host:
        return ensure_index(props, session)  # a new physical id: CloudFormation then deletes the old one
    return ensure_index(props, session, physical=physical or f"{endpoint.host}{path}",
                        reset_ef_search=bool(str(old.get("EfSearch") or "")))


# ---------------------------------------------------------------------------------------------
# CloudFormation


def handle(event: dict[str, Any], session: Any = None) -> tuple[str, dict[str, Any]]:
    """The resource's physical id and attributes, or ResourceError."""
    request = event.get("RequestType")
    if request not in REQUEST_TYPES:
        raise ResourceError(f"RequestType={request!r} must be one of {', '.join(REQUEST_TYPES)}: nothing was done")
    props = event.get("ResourceProperties")
    if not isinstance(props, dict):
        raise ResourceError(f"ResourceProperties is {type(props).__name__}, not an object: nothing was done")
    kind_of = props.get("Kind")
    if kind_of not in ("Pipeline", "Index"):
        raise ResourceError(f"Kind={kind_of!r} must be 'Pipeline' or 'Index'")
    physical = str(event.get("PhysicalResourceId") or "")
    if request == "Delete":
        if physical.startswith(FAILED_CREATE):
            return physical, {}  # nothing was created
        if kind_of == "Pipeline":
            delete_path(endpoint_of(props), _pipeline_path(props), session)
        elif physical.endswith(ADOPTED_SUFFIX):
            log("info", "kept an index the stack adopted: deleting the stack does not delete data it did not create",
                indexName=str(props.get("IndexName")))
        elif str(props.get("DeleteOnRemoval")) == "true":
            delete_path(endpoint_of(props), _index_path(props), session)
        return physical, {}
    if kind_of == "Pipeline":
        return put_pipeline(props, session)
    if request == "Update":
        old = event.get("OldResourceProperties")
        if not isinstance(old, dict):
            raise ResourceError(f"an Update needs OldResourceProperties, an object, not {type(old).__name__}: nothing was done")
        return update_index(props, old, physical, session)
    return ensure_index(props, session)


def response_body(event: dict[str, Any], status: str, physical_id: str, reason: str = "", data: dict[str, Any] | None = None) -> bytes:
    """The JSON CloudFormation reads, at most MAX_RESPONSE_BYTES: the reason is shortened (measured on
    the whole UTF-8 body, so non-ASCII text counts by its bytes) until it fits."""
    reason = reason.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate cannot be sent

    def encode(text: str) -> bytes:
        return json.dumps(
            {
                "Status": status,
                "Reason": text,
                "PhysicalResourceId": physical_id,
                "StackId": event["StackId"],
                "RequestId": event["RequestId"],
                "LogicalResourceId": event["LogicalResourceId"],
                "Data": data or {},
            },
            ensure_ascii=False,
        ).encode("utf-8")

    body = encode(reason)
    if len(body) <= MAX_RESPONSE_BYTES:
        return body
    keep_low, keep_high = 0, len(reason)  # the longest prefix that fits, by bisection
    while keep_low < keep_high:
        middle = (keep_low + keep_high + 1) // 2
        if len(encode(reason[:middle] + TRUNCATED)) <= MAX_RESPONSE_BYTES:
            keep_low = middle
        else:
            keep_high = middle - 1
    return encode(reason[:keep_low] + TRUNCATED)


def respond(event: dict[str, Any], status: str, physical_id: str, reason: str = "", data: dict[str, Any] | None = None) -> None:
    body = response_body(event, status, physical_id, reason, data)
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    for attempt in range(1, RESPONSE_ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 (CloudFormation's pre-signed URL)
                response.read()  # S3 answers the PUT with an empty body; reading it completes the exchange
            return
        except (urllib.error.URLError, TimeoutError, ConnectionResetError, http.client.HTTPException) as error:
            log("error", "the answer to CloudFormation was not delivered", attempt=attempt, status=status,
                requestId=event.get("RequestId"), errorType=type(error).__name__,
                httpStatus=getattr(error, "code", None))
            if attempt == RESPONSE_ATTEMPTS:
                raise
            time.sleep(_backoff(attempt))


def _where(error: BaseException) -> str:
    """The innermost frame an error came from, as file:line (its message may hold anything)."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else "unknown"


def _check_event(event: Any) -> dict[str, Any]:
    """The event, or MalformedEvent when no answer could reach CloudFormation (logged first)."""
    if not isinstance(event, dict):
        log("error", "the event is not a CloudFormation custom resource request", eventType=type(event).__name__)
        raise MalformedEvent(
            f"the event is {type(event).__name__}, not a CloudFormation custom resource request (a JSON object): "
            "there is no ResponseURL to answer; invoke this function only through its custom resource"
        )
    missing = [name for name in RESPONSE_FIELDS if not isinstance(event.get(name), str) or not event.get(name)]
    if missing:
        log("error", "the event cannot be answered", missing=missing, requestType=str(event.get("RequestType")),
            requestId=str(event.get("RequestId")))
        raise MalformedEvent(
            f"the event lacks {', '.join(missing)}: CloudFormation accepts an answer only at the ResponseURL, echoing "
            "StackId, RequestId and LogicalResourceId; if CloudFormation sent it, the resource fails after its ServiceTimeout"
        )
    return event


def handler(event: Any, context: Any = None, session: Any = None) -> None:
    global _deadline
    event = _check_event(event)
    physical = str(event.get("PhysicalResourceId") or f"{FAILED_CREATE}-{event['RequestId']}")
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    _deadline = time.monotonic() + remaining() / 1000 - RESPONSE_RESERVE_SECONDS if callable(remaining) else None
    try:
        physical, data = handle(event, session)
    except ResourceError as error:
        log("error", str(error), requestType=str(event.get("RequestType")), requestId=event["RequestId"])
        respond(event, "FAILED", physical, str(error))
        return
    except Exception as error:  # anything else still answers CloudFormation, by type and place only
        where = _where(error)
        log("error", "unexpected error in the search handler", errorType=type(error).__name__, where=where,
            requestType=str(event.get("RequestType")), requestId=event["RequestId"])
        respond(event, "FAILED", physical, f"{type(error).__name__} in the search handler at {where}; see the function's log")
        return
    respond(event, "SUCCESS", physical, "", data)
