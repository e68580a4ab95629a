"""The search pipeline / index custom resource handler against a local OpenSearch stand-in that
verifies each request's SigV4 signature (service, Region, signed payload hash) and keeps state, and
records what the handler answers CloudFormation."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from search_pipeline import handler as h

SESSION = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="wJalrXUtnFEMI/K7MDENG",
                        aws_session_token="lambda-session-token", region_name="us-east-1")  # Lambda signs with a session
PIPELINE = {
    "description": "hybrid",
    "phase_results_processors": [
        {"normalization-processor": {"normalization": {"technique": "min_max"},
                                     "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [0.3, 0.7]}}}}
    ],
}


class FakeOpenSearch:
    def __init__(self, service: str) -> None:
        self.service = service
        self.pipelines: dict[str, Any] = {}
        self.indexes: dict[str, dict[str, Any]] = {}
        self.failures: dict[tuple[str, str], tuple[int, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.bad_signatures: list[str] = []
        self.responses: list[dict[str, Any]] = []

    def verify(self, method: str, path: str, headers: dict[str, str], body: bytes, url: str) -> None:
        authorization = headers.get("Authorization", "")
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            self.bad_signatures.append(f"{method} {path}: no SigV4 Authorization header")
            return
        parts = dict(p.strip().split("=", 1) for p in authorization[len("AWS4-HMAC-SHA256 "):].split(","))
        scope = parts["Credential"].split("/")
        if scope[0] != "AKIDEXAMPLE" or scope[2] != "us-east-1" or scope[3] != self.service:
            self.bad_signatures.append(f"{method} {path}: credential scope {scope}")
        signed = parts["SignedHeaders"].split(";")
        if not {"x-amz-content-sha256", "host", "x-amz-date", "x-amz-security-token"} <= set(signed):
            self.bad_signatures.append(f"{method} {path}: signed headers {signed}")
        lower = {k.lower(): v for k, v in headers.items()}
        if lower.get("x-amz-security-token") != "lambda-session-token":
            self.bad_signatures.append(f"{method} {path}: the session token is missing")
        request = AWSRequest(method=method, url=url, data=body, headers={k: lower[k] for k in signed})
        request.context["timestamp"] = lower["x-amz-date"]
        auth = SigV4Auth(SESSION.get_credentials().get_frozen_credentials(), self.service, "us-east-1")
        expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
        if expected != parts["Signature"]:
            self.bad_signatures.append(f"{method} {path}: signature does not match the request")

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if (method, path) in self.failures:
            return self.failures[(method, path)]
        if path.startswith("/_search/pipeline/"):
            name = path.rsplit("/", 1)[1]
            if method == "PUT":
                self.pipelines[name] = body
                return 200, {"acknowledged": True}
            if name not in self.pipelines:
                return 404, {"error": "pipeline not found"}
            if method == "GET":
                return 200, {name: self.pipelines[name]}
            del self.pipelines[name]
            return 200, {"acknowledged": True}
        index, _, rest = path[1:].partition("/")
        if method == "GET" and rest == "_mapping":
            return (200, {index: {"mappings": self.indexes[index]["mappings"]}}) if index in self.indexes else (404, {"error": "no such index"})
        if method == "PUT" and rest == "_settings":
            self.indexes[index]["settings"].setdefault("index", {}).update(body["index"])
            return 200, {"acknowledged": True}
        if method == "PUT" and not rest:
            self.indexes[index] = json.loads(json.dumps(body))
            return 200, {"acknowledged": True}
        if method == "DELETE" and not rest:
            return (200, {"acknowledged": True}) if self.indexes.pop(index, None) is not None else (404, {"error": "no such index"})
        return 400, {"error": f"unexpected {method} {path}"}


@pytest.fixture
def cluster(request):
    state = FakeOpenSearch(getattr(request, "param", "es"))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            """Quiet: the tests read the requests, not the server log."""

        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path == "/cfn-response":
                state.responses.append(json.loads(raw))
                self.send_response(200)
                self.end_headers()
                return
            state.verify(self.command, self.path, dict(self.headers), raw, f"http://{self.headers['Host']}{self.path}")
            body = json.loads(raw) if raw else None
            state.requests.append((self.command, self.path, body))
            status, answer = state.answer(self.command, self.path, body)
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_DELETE = do_POST = _serve

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()
    assert state.bad_signatures == []


def event(cluster, request_type: str, props: dict[str, Any], old: dict[str, Any] | None = None, physical: str | None = None) -> dict:
    base = {"Endpoint": cluster.url, "Service": cluster.service, "Region": "us-east-1"}
    result = {
        "RequestType": request_type,
        "ResponseURL": f"{cluster.url}/cfn-response",
        "StackId": "arn:aws:cloudformation:us-east-1:111122223333:stack/s/1",
        "RequestId": "req-1",
        "LogicalResourceId": "Pipeline",
        "ResourceProperties": {**base, **props},
    }
    if old is not None:
        result["OldResourceProperties"] = {**base, **old}
    if physical is not None:
        result["PhysicalResourceId"] = physical
    return result


def pipeline_props(name: str = "hybrid", body: dict | None = None) -> dict:
    return {"Kind": "Pipeline", "PipelineName": name, "Body": json.dumps(body or PIPELINE)}


@pytest.mark.parametrize("cluster", ["es", "aoss"], indirect=True)
def test_create_update_delete_a_pipeline_with_signed_requests(cluster):
    h.handler(event(cluster, "Create", pipeline_props()), session=SESSION)
    created = cluster.responses[-1]
    assert created["Status"] == "SUCCESS", created["Reason"]
    assert created["PhysicalResourceId"].endswith("/_search/pipeline/hybrid") and created["Data"] == {"PipelineName": "hybrid"}
    assert cluster.pipelines["hybrid"] == PIPELINE
    assert [(m, p) for m, p, _ in cluster.requests] == [("PUT", "/_search/pipeline/hybrid"), ("GET", "/_search/pipeline/hybrid")]

    updated_body = json.loads(json.dumps(PIPELINE))
    updated_body["phase_results_processors"][0]["normalization-processor"]["combination"]["parameters"]["weights"] = [0.4, 0.6]
    h.handler(event(cluster, "Update", pipeline_props(body=updated_body), old=pipeline_props(), physical=created["PhysicalResourceId"]), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS"
    assert cluster.responses[-1]["PhysicalResourceId"] == created["PhysicalResourceId"]  # updated in place
    assert cluster.pipelines["hybrid"] == updated_body

    h.handler(event(cluster, "Delete", pipeline_props(), physical=created["PhysicalResourceId"]), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS" and cluster.pipelines == {}
    h.handler(event(cluster, "Delete", pipeline_props(), physical=created["PhysicalResourceId"]), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS"  # 404: already gone is success


def test_renaming_a_pipeline_creates_the_new_one_under_a_new_physical_id(cluster):
    h.handler(event(cluster, "Create", pipeline_props("old")), session=SESSION)
    old_id = cluster.responses[-1]["PhysicalResourceId"]
    h.handler(event(cluster, "Update", pipeline_props("new"), old=pipeline_props("old"), physical=old_id), session=SESSION)
    assert cluster.responses[-1]["PhysicalResourceId"] != old_id and set(cluster.pipelines) == {"old", "new"}


def test_a_refused_put_fails_the_resource_with_the_status_and_the_fix(cluster):
    cluster.failures[("PUT", "/_search/pipeline/hybrid")] = (403, {"error": "no permissions for [cluster:admin/search/pipeline/put]"})
    h.handler(event(cluster, "Create", pipeline_props()), session=SESSION)
    failed = cluster.responses[-1]
    assert failed["Status"] == "FAILED"
    assert "returned 403" in failed["Reason"] and "cluster:admin/search/pipeline" in failed["Reason"]
    assert "no permissions" in failed["Reason"] and failed["PhysicalResourceId"].startswith(h.FAILED_CREATE)
    # CloudFormation then deletes the failed resource: nothing was created, so no request is sent
    sent = len(cluster.requests)
    h.handler(event(cluster, "Delete", pipeline_props(), physical=failed["PhysicalResourceId"]), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS" and len(cluster.requests) == sent


def test_a_rejected_definition_and_a_failed_delete_are_reported(cluster):
    cluster.failures[("PUT", "/_search/pipeline/hybrid")] = (400, {"error": "z_score supports only arithmetic_mean"})
    h.handler(event(cluster, "Create", pipeline_props()), session=SESSION)
    assert "returned 400" in cluster.responses[-1]["Reason"] and "arithmetic_mean" in cluster.responses[-1]["Reason"]
    cluster.failures.clear()
    cluster.failures[("DELETE", "/_search/pipeline/hybrid")] = (500, {"error": "boom"})
    h.handler(event(cluster, "Delete", pipeline_props(), physical="host/_search/pipeline/hybrid"), session=SESSION)
    assert cluster.responses[-1]["Status"] == "FAILED" and "returned 500" in cluster.responses[-1]["Reason"]


def test_a_pipeline_the_cluster_did_not_store_fails(cluster):
    cluster.failures[("GET", "/_search/pipeline/hybrid")] = (404, {"error": "missing"})
    h.handler(event(cluster, "Create", pipeline_props()), session=SESSION)
    assert cluster.responses[-1]["Status"] == "FAILED" and "was not stored" in cluster.responses[-1]["Reason"]


def test_bad_properties_and_unreachable_endpoints_fail_with_a_reason(cluster):
    h.handler(event(cluster, "Create", {**pipeline_props(), "Service": "opensearch"}), session=SESSION)
    assert "'es' (managed domain) or 'aoss'" in cluster.responses[-1]["Reason"]
    h.handler(event(cluster, "Create", {**pipeline_props(), "Body": "{not json"}), session=SESSION)
    assert "Body is not valid JSON" in cluster.responses[-1]["Reason"]
    h.handler(event(cluster, "Create", {**pipeline_props(), "Kind": "Template"}), session=SESSION)
    assert "Kind='Template'" in cluster.responses[-1]["Reason"]
    unreachable = event(cluster, "Create", pipeline_props())
    unreachable["ResourceProperties"]["Endpoint"] = "http://127.0.0.1:9"
    h.handler(unreachable, session=SESSION)
    assert cluster.responses[-1]["Status"] == "FAILED" and "could not connect" in cluster.responses[-1]["Reason"]


@pytest.mark.parametrize("request_type", ["Create", "Update", "Delete"])
@pytest.mark.parametrize("name", ["my pipeline", "hybrid\nx", "a,b", "hyb*", "_none", "..", "", "a" * 129, None, 7])
def test_a_pipeline_name_opensearch_would_misread_fails_naming_the_property_before_any_request(cluster, name, request_type):
    """A space or a control character used to fail as http.client's InvalidURL; ',' and '*' are lists and
    wildcards to GET and DELETE (a DELETE of 'hyb*' deletes every pipeline starting with 'hyb')."""
    cluster.pipelines["hybrid"] = PIPELINE
    props = {**pipeline_props(), "PipelineName": name} if name is not None else {
        k: v for k, v in pipeline_props().items() if k != "PipelineName"}
    h.handler(event(cluster, request_type, props, old=pipeline_props() if request_type == "Update" else None,
                    physical="host/_search/pipeline/hybrid"), session=SESSION)
    failed = cluster.responses[-1]
    assert failed["Status"] == "FAILED" and failed["Reason"].startswith("PipelineName=")
    assert "letters, digits, '.', '_' or '-'" in failed["Reason"] and "InvalidURL" not in failed["Reason"]
    assert cluster.requests == [] and cluster.pipelines == {"hybrid": PIPELINE}


def test_the_construct_checks_the_pipeline_name_the_handler_accepts():
    from genai_pacer.retrieval import opensearch as retrieval

    assert retrieval._PIPELINE_NAME.pattern == h.PIPELINE_NAME.pattern


BUILD = {"field": "embedding", "dimension": 4, "engine": "nmslib", "space_type": "l2", "m": 16, "ef_construction": 128}


def index_props(build: dict | None = None, ef_search: str = "100", name: str = "docs", delete: str = "false") -> dict:
    """Properties as VectorIndexSettings writes them: faiss keeps ef_search in the mapping (and BuildTime),
    lucene and nmslib in the index setting (and EfSearch)."""
    build = build or BUILD
    in_mapping = build["engine"] == "faiss" and "ef_search" in build
    setting = int(ef_search) if ef_search and not in_mapping else None
    parameters = {"m": build["m"], "ef_construction": build["ef_construction"]}
    if in_mapping:
        parameters["ef_search"] = build["ef_search"]
    body = {
        "settings": {"index": {"knn": True, **({"knn.algo_param.ef_search": setting} if setting else {})}},
        "mappings": {"properties": {build["field"]: {
            "type": "knn_vector", "dimension": build["dimension"],
            "method": {"name": "hnsw", "engine": build["engine"], "space_type": build["space_type"], "parameters": parameters}}}},
    }
    return {"Kind": "Index", "IndexName": name, "Body": json.dumps(body), "BuildTime": json.dumps(build),
            "EfSearch": ef_search if setting else "", "DeleteOnRemoval": delete}


def test_index_create_then_ef_search_updates_in_place(cluster):
    h.handler(event(cluster, "Create", index_props()), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS", cluster.responses[-1]["Reason"]
    physical = cluster.responses[-1]["PhysicalResourceId"]
    assert cluster.indexes["docs"]["mappings"]["properties"]["embedding"]["method"]["parameters"]["m"] == 16
    h.handler(event(cluster, "Update", index_props(ef_search="64"), old=index_props(), physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS"
    assert cluster.requests[-1] == ("PUT", "/docs/_settings", {"index": {"knn.algo_param.ef_search": 64}})


def test_changing_a_build_time_setting_on_the_same_index_needs_a_reindex(cluster):
    h.handler(event(cluster, "Create", index_props()), session=SESSION)
    physical = cluster.responses[-1]["PhysicalResourceId"]
    sent = len(cluster.requests)
    h.handler(event(cluster, "Update", index_props({**BUILD, "m": 32}), old=index_props(), physical=physical), session=SESSION)
    failed = cluster.responses[-1]
    assert failed["Status"] == "FAILED" and "needs a reindex" in failed["Reason"] and "m 16 -> 32" in failed["Reason"]
    assert [(m, p) for m, p, _ in cluster.requests[sent:]] == [("GET", "/docs/_mapping")]  # compared with the index, nothing changed
    # a new index name is a new index (CloudFormation then deletes the old resource; the data is kept)
    h.handler(event(cluster, "Update", index_props({**BUILD, "m": 32}, name="docs-v2"), old=index_props(), physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS" and set(cluster.indexes) == {"docs", "docs-v2"}
    h.handler(event(cluster, "Delete", index_props(), physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS" and "docs" in cluster.indexes


def test_an_existing_index_is_adopted_only_with_the_same_build_time_settings(cluster):
    h.handler(event(cluster, "Create", index_props()), session=SESSION)
    h.handler(event(cluster, "Create", index_props(ef_search="200")), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS"
    assert cluster.indexes["docs"]["settings"]["index"]["knn.algo_param.ef_search"] == 200
    h.handler(event(cluster, "Create", index_props({**BUILD, "engine": "lucene"}, ef_search="")), session=SESSION)
    assert cluster.responses[-1]["Status"] == "FAILED" and "needs a reindex" in cluster.responses[-1]["Reason"]


def test_delete_on_removal_deletes_the_index_and_tolerates_it_being_gone(cluster):
    h.handler(event(cluster, "Create", index_props(delete="true")), session=SESSION)
    physical = cluster.responses[-1]["PhysicalResourceId"]
    assert ("PUT", "/docs") in [(m, p) for m, p, _ in cluster.requests] and not physical.endswith(h.ADOPTED_SUFFIX)
    for _ in range(2):
        h.handler(event(cluster, "Delete", index_props(delete="true"), physical=physical), session=SESSION)
        assert cluster.responses[-1]["Status"] == "SUCCESS" and cluster.indexes == {}


@pytest.mark.parametrize("delete", [None, "", "false", "True", "TRUE", "yes", "1", " true"])
def test_an_index_is_deleted_on_removal_only_when_delete_on_removal_is_exactly_true(cluster, delete):
    """Keeping the data is the default: a missing or any other DeleteOnRemoval keeps the index."""
    h.handler(event(cluster, "Create", index_props(delete="true")), session=SESSION)
    physical = cluster.responses[-1]["PhysicalResourceId"]
    assert not physical.endswith(h.ADOPTED_SUFFIX)  # the stack created it: only DeleteOnRemoval keeps it
    props = index_props(delete=delete) if delete is not None else {
        k: v for k, v in index_props().items() if k != "DeleteOnRemoval"}
    h.handler(event(cluster, "Delete", props, physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS" and "docs" in cluster.indexes
    assert "DELETE" not in [m for m, _, _ in cluster.requests]


def existing_index(cluster, build: dict | None = None) -> None:
    """An index someone made before the stack (same build-time settings), holding their data."""
    cluster.indexes["docs"] = {**json.loads(index_props(build)["Body"]), "documents": ["theirs"]}


def test_an_adopted_index_survives_delete_on_removal(cluster):
    """DeleteOnRemoval deletes only what the stack created: an index that existed before Create and
    was adopted is kept when the stack goes, through an ef_search update in between."""
    existing_index(cluster)
    h.handler(event(cluster, "Create", index_props(delete="true")), session=SESSION)
    created = cluster.responses[-1]
    assert created["Status"] == "SUCCESS", created["Reason"]
    assert created["PhysicalResourceId"].endswith(h.ADOPTED_SUFFIX) and ("PUT", "/docs") not in [(m, p) for m, p, _ in cluster.requests]
    physical = created["PhysicalResourceId"]
    h.handler(event(cluster, "Update", index_props(ef_search="64", delete="true"), old=index_props(delete="true"), physical=physical),
              session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS"
    assert cluster.responses[-1]["PhysicalResourceId"] == physical  # same id: no replacement, adoption remembered
    h.handler(event(cluster, "Delete", index_props(ef_search="64", delete="true"), physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS"
    assert cluster.indexes["docs"]["documents"] == ["theirs"]
    assert "DELETE" not in [m for m, _, _ in cluster.requests]


def test_an_index_the_stack_created_is_deleted_on_removal_and_one_it_adopted_under_a_new_name_is_kept(cluster):
    h.handler(event(cluster, "Create", index_props(delete="true")), session=SESSION)
    physical = cluster.responses[-1]["PhysicalResourceId"]
    assert not physical.endswith(h.ADOPTED_SUFFIX)
    # renamed to an index that already exists: adopted under a new physical id; CloudFormation then
    # deletes the old resource, which the stack created
    cluster.indexes["docs-v2"] = {**json.loads(index_props(name="docs-v2")["Body"]), "documents": ["theirs"]}
    h.handler(event(cluster, "Update", index_props(name="docs-v2", delete="true"), old=index_props(delete="true"), physical=physical),
              session=SESSION)
    renamed = cluster.responses[-1]["PhysicalResourceId"]
    assert renamed != physical and renamed.endswith("/docs-v2" + h.ADOPTED_SUFFIX)
    h.handler(event(cluster, "Delete", index_props(delete="true"), physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS" and "docs" not in cluster.indexes
    h.handler(event(cluster, "Delete", index_props(name="docs-v2", delete="true"), physical=renamed), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS" and cluster.indexes["docs-v2"]["documents"] == ["theirs"]


@pytest.mark.parametrize("cluster", ["aoss"], indirect=True)
def test_one_session_signs_every_request_retries_included(cluster, monkeypatch):
    """Credentials come from one module-level Session (botocore refreshes a Lambda role's rotating
    credentials inside it), not a new Session per request and per retry."""
    monkeypatch.setattr(h.time, "sleep", lambda seconds: None)

    def no_new_sessions(*args, **kwargs):
        raise AssertionError("a boto3.Session was created for a request")

    monkeypatch.setattr(h, "_SESSION", SESSION)
    monkeypatch.setattr(h.boto3, "Session", no_new_sessions)
    cluster.failures[("PUT", "/_search/pipeline/hybrid")] = (403, {"message": "policy not applied yet"})
    original = cluster.answer

    def clear_after_two(method, path, body):
        if method == "PUT" and sum(1 for m, _, _ in cluster.requests if m == "PUT") > 2:
            cluster.failures.clear()
        return original(method, path, body)

    monkeypatch.setattr(cluster, "answer", clear_after_two)
    h.handler(event(cluster, "Create", pipeline_props()))  # no session argument: the module's
    assert cluster.responses[-1]["Status"] == "SUCCESS", cluster.responses[-1]["Reason"]
    assert [m for m, _, _ in cluster.requests] == ["PUT", "PUT", "PUT", "GET"]


def test_reindex_changes_lists_each_difference():
    assert h.reindex_changes(BUILD, BUILD) == []
    assert h.reindex_changes(BUILD, {**BUILD, "engine": "lucene", "m": 8}) == ["engine 'nmslib' -> 'lucene'", "m 16 -> 8"]


def test_the_stand_in_rejects_a_request_signed_with_other_credentials_or_service(cluster):
    """The signature check above can fail: a wrong secret or the wrong service name is caught."""
    wrong = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="not-the-secret",
                          aws_session_token="lambda-session-token", region_name="us-east-1")
    endpoint = h.Endpoint(cluster.url, "es", "us-east-1")
    h.send(endpoint, "GET", "/_search/pipeline/x", session=wrong)
    h.send(h.Endpoint(cluster.url, "aoss", "us-east-1"), "GET", "/_search/pipeline/x", session=SESSION)
    assert cluster.bad_signatures[0].endswith("signature does not match the request")
    assert "credential scope" in cluster.bad_signatures[1] and "'aoss'" in cluster.bad_signatures[1]
    cluster.bad_signatures.clear()


def test_removing_ef_search_restores_the_default_instead_of_leaving_the_old_value(cluster):
    h.handler(event(cluster, "Create", index_props(ef_search="64")), session=SESSION)
    physical = cluster.responses[-1]["PhysicalResourceId"]
    h.handler(event(cluster, "Update", index_props(ef_search=""), old=index_props(ef_search="64"), physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS", cluster.responses[-1]["Reason"]
    assert cluster.requests[-1] == ("PUT", "/docs/_settings", {"index": {"knn.algo_param.ef_search": None}})  # null: the default
    sent = len(cluster.requests)
    h.handler(event(cluster, "Update", index_props(ef_search=""), old=index_props(ef_search=""), physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS"
    assert [m for m, _, _ in cluster.requests[sent:]] == ["GET"]  # the mapping compared; no setting to change


@pytest.mark.parametrize("cluster", ["aoss"], indirect=True)
def test_serverless_retries_a_403_while_a_new_data_access_policy_applies(cluster, monkeypatch):
    pauses: list[float] = []
    monkeypatch.setattr(h.time, "sleep", pauses.append)
    answers = iter([(403, {"message": "User does not have permissions for the requested resource"})] * 2)

    original = cluster.answer

    def flaky(method, path, body):
        return next(answers, None) or original(method, path, body)

    monkeypatch.setattr(cluster, "answer", flaky)
    h.handler(event(cluster, "Create", pipeline_props()), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS", cluster.responses[-1]["Reason"]
    assert pauses == [2.0, 4.0] and cluster.pipelines["hybrid"] == PIPELINE


@pytest.mark.parametrize("cluster", ["aoss"], indirect=True)
def test_a_403_that_outlasts_the_wait_fails_with_the_policy_hint(cluster, monkeypatch):
    pauses: list[float] = []
    monkeypatch.setattr(h.time, "sleep", pauses.append)
    cluster.failures[("PUT", "/_search/pipeline/hybrid")] = (403, {"message": "no permissions"})
    h.handler(event(cluster, "Create", pipeline_props()), session=SESSION)
    assert cluster.responses[-1]["Status"] == "FAILED" and "data access policy must name" in cluster.responses[-1]["Reason"]
    assert sum(pauses) <= h.AOSS_PERMISSION_WAIT_SECONDS and len(pauses) >= 3


@pytest.mark.parametrize("status", [401, 403])
def test_a_managed_domain_fails_a_401_or_403_at_once_without_waiting_for_a_policy(cluster, monkeypatch, status):
    """Only Serverless applies a new data access policy after a delay; a domain's 401/403 is a missing
    role mapping, which no wait fixes: one request, no pause, the domain's hint."""
    pauses: list[float] = []
    monkeypatch.setattr(h.time, "sleep", pauses.append)
    cluster.failures[("PUT", "/_search/pipeline/hybrid")] = (status, {"message": "no permissions"})
    h.handler(event(cluster, "Create", pipeline_props()), session=SESSION)
    assert cluster.responses[-1]["Status"] == "FAILED" and "fine-grained access control" in cluster.responses[-1]["Reason"]
    assert pauses == [] and [(m, p) for m, p, _ in cluster.requests] == [("PUT", "/_search/pipeline/hybrid")]


class Context:
    def __init__(self, millis: int) -> None:
        self.millis = millis

    def get_remaining_time_in_millis(self) -> int:
        return self.millis


def test_the_handler_answers_cloudformation_before_the_function_times_out(cluster):
    """With less time left than the response reserve, nothing is sent to OpenSearch and the
    resource fails with the reason, instead of a Lambda timeout leaving the stack waiting an hour."""
    h.handler(event(cluster, "Create", pipeline_props()), Context(h.RESPONSE_RESERVE_SECONDS * 1000 + 500), session=SESSION)
    assert cluster.responses[-1]["Status"] == "FAILED" and "ran out of time" in cluster.responses[-1]["Reason"]
    assert cluster.requests == []
    h.handler(event(cluster, "Create", pipeline_props()), Context(120_000), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS"
    assert h._time_left("GET", "/", h.Endpoint(cluster.url, "es", "us-east-1")) <= h.TIMEOUT_SECONDS


FAISS = {**BUILD, "engine": "faiss", "ef_search": 64}


def test_faiss_ef_search_goes_in_the_mapping_and_a_change_needs_a_reindex_or_the_per_query_dial(cluster):
    """faiss reads ef_search from each graph (mapping method.parameters), never from the index setting:
    the index is created with it there, no _settings request is sent, and a later change is refused
    with both ways out (a new index, or method_parameters.ef_search per query)."""
    h.handler(event(cluster, "Create", index_props(FAISS)), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS", cluster.responses[-1]["Reason"]
    created = cluster.indexes["docs"]
    assert created["mappings"]["properties"]["embedding"]["method"]["parameters"]["ef_search"] == 64
    assert "knn.algo_param.ef_search" not in created["settings"]["index"]
    assert [p for _, p, _ in cluster.requests] == ["/docs/_mapping", "/docs"]
    physical = cluster.responses[-1]["PhysicalResourceId"]
    sent = len(cluster.requests)
    h.handler(event(cluster, "Update", index_props({**FAISS, "ef_search": 128}), old=index_props(FAISS), physical=physical),
              session=SESSION)
    refused = cluster.responses[-1]
    assert refused["Status"] == "FAILED" and "ef_search 64 -> 128 needs a reindex" in refused["Reason"]
    assert "method_parameters.ef_search" in refused["Reason"] and "knn_query(..., ef_search=N)" in refused["Reason"]
    assert [m for m, _, _ in cluster.requests[sent:]] == ["GET"]
    assert created["mappings"]["properties"]["embedding"]["method"]["parameters"]["ef_search"] == 64


def test_a_rollback_after_a_refused_build_time_change_succeeds(cluster):
    """CloudFormation rolls a failed update back with another Update whose ResourceProperties are the
    old ones and whose OldResourceProperties are the refused ones. The handler compares with the
    index itself, so the rollback (to what the index has) succeeds instead of leaving the stack in
    UPDATE_ROLLBACK_FAILED; the same holds for an index made before ef_search moved into the mapping."""
    h.handler(event(cluster, "Create", index_props()), session=SESSION)
    physical = cluster.responses[-1]["PhysicalResourceId"]
    h.handler(event(cluster, "Update", index_props({**BUILD, "m": 32}), old=index_props(), physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "FAILED"
    h.handler(event(cluster, "Update", index_props(), old=index_props({**BUILD, "m": 32}), physical=physical), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS", cluster.responses[-1]["Reason"]
    assert cluster.responses[-1]["PhysicalResourceId"] == physical
    # faiss index from an older genai-pacer: ef_search was an index setting faiss never read
    legacy_build = {**BUILD, "engine": "faiss"}
    legacy = index_props(legacy_build, name="legacy")
    legacy["Body"] = json.dumps({**json.loads(legacy["Body"]), "settings": {"index": {"knn": True, "knn.algo_param.ef_search": 64}}})
    legacy["EfSearch"] = "64"
    h.handler(event(cluster, "Create", legacy), session=SESSION)
    legacy_id = cluster.responses[-1]["PhysicalResourceId"]
    upgraded = index_props({**legacy_build, "ef_search": 64}, name="legacy")
    h.handler(event(cluster, "Update", upgraded, old=legacy, physical=legacy_id), session=SESSION)
    refused = cluster.responses[-1]
    assert refused["Status"] == "FAILED" and "ef_search None -> 64 needs a reindex" in refused["Reason"]
    h.handler(event(cluster, "Update", legacy, old=upgraded, physical=legacy_id), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS", cluster.responses[-1]["Reason"]


def test_an_existing_faiss_index_is_adopted_only_with_the_same_ef_search_in_its_graphs(cluster):
    existing_index(cluster, FAISS)
    h.handler(event(cluster, "Create", index_props({**FAISS, "ef_search": 128})), session=SESSION)
    assert cluster.responses[-1]["Status"] == "FAILED" and "ef_search 64 -> 128" in cluster.responses[-1]["Reason"]
    h.handler(event(cluster, "Create", index_props(FAISS)), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS" and cluster.responses[-1]["PhysicalResourceId"].endswith(h.ADOPTED_SUFFIX)
    # without an ef_search of its own the construct takes the index as it is
    h.handler(event(cluster, "Create", index_props({k: v for k, v in FAISS.items() if k != "ef_search"})), session=SESSION)
    assert cluster.responses[-1]["Status"] == "SUCCESS"
