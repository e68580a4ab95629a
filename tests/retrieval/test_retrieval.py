"""HybridSearchPipeline and VectorIndexSettings: templates, grants, every bad prop, and the reference
stack under cdk-nag (synthesized once for this module)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_opensearchserverless as aoss
from aws_cdk import aws_opensearchservice as opensearch
from aws_cdk.assertions import Annotations, Match, Template
from conftest import nag_violations
from genai_pacer import InvalidPropsError
from genai_pacer.retrieval.opensearch import (
    DOMAIN_FIELD_TYPES,
    ENGINES,
    PIPELINE_DATA_PERMISSIONS,
    SEARCH_HANDLER_ID,
    HybridSearchPipeline,
    VectorIndexSettings,
)
from helpers import ENCODED_NUMBER, new_stack, only, resources, token_of

ENDPOINT = "https://search-docs-abc.us-east-1.es.amazonaws.com"


def domain_of(stack: cdk.Stack) -> opensearch.IDomain:
    return opensearch.Domain.from_domain_endpoint(stack, "Domain", ENDPOINT)


def collection_of(stack: cdk.Stack) -> aoss.CfnCollection:
    return aoss.CfnCollection(stack, "Collection", name="docs", type="VECTORSEARCH")


def pipeline(target: str = "domain", **props) -> tuple[cdk.Stack, HybridSearchPipeline]:
    stack = new_stack()
    where = {"domain": domain_of(stack)} if target == "domain" else {"collection": collection_of(stack)}
    return stack, HybridSearchPipeline(stack, "Hybrid", **{"pipeline_name": "hybrid", **where, **props})


def index(target: str = "collection", **props) -> tuple[cdk.Stack, VectorIndexSettings]:
    stack = new_stack()
    where = {"domain": domain_of(stack)} if target == "domain" else {"collection": collection_of(stack)}
    return stack, VectorIndexSettings(stack, "Index", **{"index_name": "chunks", "dimension": 8, **where, **props})


def statements(template: Template) -> list[dict]:
    return [s for p in resources(template, "AWS::IAM::Policy").values() for s in p["Properties"]["PolicyDocument"]["Statement"]]


def test_pipeline_on_a_domain_sends_the_documented_body_with_grants_on_its_path_only():
    stack, built = pipeline(weights=(0.3, 0.7))
    template = Template.from_stack(stack)
    resource = only(template, "Custom::OpenSearchSearchPipeline")["Properties"]
    assert resource["Kind"] == "Pipeline" and resource["Service"] == "es" and resource["PipelineName"] == "hybrid"
    assert resource["Endpoint"] == "search-docs-abc.us-east-1.es.amazonaws.com" and resource["Region"] == "us-east-1"
    body = json.loads(resource["Body"])
    # the OpenSearch documentation's example pipeline: min_max, arithmetic_mean, weights [0.3, 0.7]
    assert body["phase_results_processors"] == [{"normalization-processor": {
        "normalization": {"technique": "min_max"},
        "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [0.3, 0.7]}}}}]
    assert body == built.definition and "(lexical, vector)" in body["description"]
    es = [s for s in statements(template) if any(str(a).startswith("es:") for a in _list(s["Action"]))]
    assert len(es) == 1 and sorted(es[0]["Action"]) == ["es:ESHttpDelete", "es:ESHttpGet", "es:ESHttpPut"]
    assert json.dumps(es[0]["Resource"]).endswith('/_search/pipeline/hybrid"]]}') and "*" not in json.dumps(es[0]["Resource"])
    function = only(template, "AWS::Lambda::Function")["Properties"]
    assert function["Handler"] == "search_pipeline.handler.handler" and function["Runtime"] == "python3.14"
    assert resource["ServiceToken"] == {"Fn::GetAtt": [stack.get_logical_id(built.function.node.default_child), "Arn"]}
    assert resources(template, "AWS::OpenSearchServerless::AccessPolicy") == {}


def test_pipeline_on_a_collection_gets_a_data_access_policy_naming_only_its_role():
    stack, built = pipeline("collection", normalization="l2", combination="harmonic_mean", weights=(0.2, 0.3, 0.5))
    template = Template.from_stack(stack)
    resource = only(template, "Custom::OpenSearchSearchPipeline")
    assert resource["Properties"]["Service"] == "aoss"
    body = json.loads(resource["Properties"]["Body"])["phase_results_processors"][0]["normalization-processor"]
    assert body == {"normalization": {"technique": "l2"}, "combination": {"technique": "harmonic_mean", "parameters": {"weights": [0.2, 0.3, 0.5]}}}
    access = only(template, "AWS::OpenSearchServerless::AccessPolicy")
    assert access["Properties"]["Type"] == "data" and len(access["Properties"]["Name"]) <= 32
    document = stack.resolve(built.access_policy.policy)
    text = json.dumps(document)
    assert "collection/docs" in text and all(p in text for p in PIPELINE_DATA_PERMISSIONS)
    assert "aoss:*" not in text and stack.get_logical_id(built.function.role.node.default_child) in text
    assert "Principal" in text and text.count("Arn") == 1  # one principal: the handler's role
    aoss_grant = [s for s in statements(template) if s["Action"] == "aoss:APIAccessAll"]
    assert aoss_grant and aoss_grant[0]["Resource"] == {"Fn::GetAtt": ["Collection", "Arn"]}
    depends = resource.get("DependsOn", [])
    assert stack.get_logical_id(built.access_policy) in depends


def _list(value):
    return value if isinstance(value, list) else [value]


BAD_PIPELINE = [
    ({"pipeline_name": None}, "pipeline_name is required"),
    ({"pipeline_name": ""}, "empty"),
    ({"pipeline_name": "a/b"}, "request path"),
    ({"pipeline_name": 3}, "is an int"),
    ({"weights": (0.5, 0.6)}, "sum to 1.1"),
    ({"weights": (1.0,)}, "2..5 sub-queries"),
    ({"weights": (0.2,) * 6}, "2..5 sub-queries"),
    ({"weights": (math.nan, 0.5)}, "not a finite number"),
    ({"weights": (math.inf, 0.5)}, "not a finite number"),
    ({"weights": (-0.5, 1.5)}, "below the minimum of 0"),
    ({"weights": (True, False)}, "is a bool"),
    ({"weights": None}, "not a list"),
    ({"weights": "0.5,0.5"}, "not a list"),
    ({"normalization": "minmax"}, "must be one of"),
    ({"combination": "rrf"}, "must be one of"),
    ({"normalization": "z_score", "combination": "geometric_mean"}, "only with 'arithmetic_mean'"),
    ({"description": ""}, "empty"),
    ({"encryption_key": "alias/x"}, "kms.Key"),
    ({"log_retention": 30}, "RetentionDays"),
    # a token cannot be checked against the z_score rules at synth
    ({"normalization": cdk.Token.as_string({"Ref": "Norm"})}, "normalization is a deploy-time token"),
    ({"combination": cdk.Token.as_number({"Ref": "Comb"})}, "combination is a deploy-time token"),
    ({"weights": (0.3, 0.6)}, r"not 1.0 \(OpenSearch allows 0.01 either way"),
]


@pytest.mark.parametrize(("props", "message"), BAD_PIPELINE)
def test_bad_pipeline_props_are_refused(props, message):
    with pytest.raises(InvalidPropsError, match=message):
        pipeline(**props)


def test_pipeline_target_rules():
    with pytest.raises(InvalidPropsError, match="z_score.*not supported on OpenSearch Serverless"):
        pipeline("collection", normalization="z_score")
    stack = new_stack()
    with pytest.raises(InvalidPropsError, match="exactly one target"):
        HybridSearchPipeline(stack, "Neither", pipeline_name="p")
    with pytest.raises(InvalidPropsError, match="exactly one target"):
        HybridSearchPipeline(stack, "Both", pipeline_name="p", domain=domain_of(stack), collection=collection_of(stack))
    with pytest.raises(InvalidPropsError, match="opensearchservice.Domain"):
        HybridSearchPipeline(stack, "Wrong", pipeline_name="p", domain=ENDPOINT)


def test_pipeline_accepts_tokens_where_valid_and_z_score_on_a_domain():
    stack = new_stack()
    name = cdk.CfnParameter(stack, "Name").value_as_string
    weight = cdk.CfnParameter(stack, "Weight", type="Number").value_as_number
    HybridSearchPipeline(stack, "Tokens", pipeline_name=name, domain=domain_of(stack), weights=(weight, 0.5))
    z = HybridSearchPipeline(stack, "Z", pipeline_name="z", domain=opensearch.Domain.from_domain_endpoint(stack, "D2", ENDPOINT),
                             normalization="z_score")
    assert z.definition["phase_results_processors"][0]["normalization-processor"]["normalization"] == {"technique": "z_score"}


def test_serverless_index_is_a_cfn_index_with_faiss_hnsw_settings():
    stack, built = index(m=24, ef_construction=256, space_type="innerproduct", metadata_fields={"tenant": "keyword"})
    template = Template.from_stack(stack)
    resource = only(template, "AWS::OpenSearchServerless::Index")
    props = resource["Properties"]
    assert props["IndexName"] == "chunks" and props["CollectionEndpoint"] == {"Fn::GetAtt": ["Collection", "CollectionEndpoint"]}
    assert props["Settings"] == {"Index": {"Knn": True}}
    vector = props["Mappings"]["Properties"]["embedding"]
    assert vector == {"Type": "knn_vector", "Dimension": 8, "Method": {
        "Name": "hnsw", "Engine": "faiss", "SpaceType": "innerproduct", "Parameters": {"M": 24, "EfConstruction": 256}}}
    assert props["Mappings"]["Properties"]["text"] == {"Type": "text"}
    assert props["Mappings"]["Properties"]["tenant"] == {"Type": "keyword"}
    assert resource["DeletionPolicy"] == "Retain" and built.settings["ef_search"] is None
    access = json.dumps(stack.resolve(built.access_policy.policy))
    assert "index/docs/chunks" in access and "cdk-hnb659fds-cfn-exec-role" in access and "${AWS::" not in access
    assert stack.get_logical_id(built.access_policy) in resource["DependsOn"]
    assert resources(template, "AWS::Lambda::Function") == {}


def test_domain_index_goes_through_the_handler_with_build_time_settings_to_compare():
    stack, built = index("domain", removal_policy=cdk.RemovalPolicy.DESTROY, text_field=None)
    template = Template.from_stack(stack)
    props = only(template, "Custom::OpenSearchKnnIndex")["Properties"]
    assert props["Kind"] == "Index" and props["DeleteOnRemoval"] == "true" and props["EfSearch"] == ""
    assert json.loads(props["BuildTime"]) == {"field": "embedding", "dimension": 8, "engine": "faiss", "space_type": "l2",
                                              "m": 16, "ef_construction": 100}
    body = json.loads(props["Body"])
    assert body["settings"] == {"index": {"knn": True}} and list(body["mappings"]["properties"]) == ["embedding"]
    es = [s for s in statements(template) if "es:ESHttpPut" in _list(s["Action"])]
    assert "*" not in json.dumps(es) and "/chunks/_settings" in json.dumps(es)
    assert built.function is not None
    grants = {s["Action"]: [json.dumps(r)[-30:] for r in _list(s["Resource"])] for s in statements(template) if str(s["Action"]).startswith("es:")}
    assert set(grants) == {"es:ESHttpGet", "es:ESHttpPut", "es:ESHttpDelete"}
    assert all("_mapping" in r for r in grants["es:ESHttpGet"]) and len(grants["es:ESHttpDelete"]) == 1


def test_a_retained_domain_index_gives_its_handler_no_delete_grant():
    """Least privilege: the handler deletes the index only with removal_policy=DESTROY."""
    stack, _ = index("domain")
    actions = {a for s in statements(Template.from_stack(stack)) for a in _list(s["Action"]) if str(a).startswith("es:")}
    assert actions == {"es:ESHttpGet", "es:ESHttpPut"}


def test_index_managers_name_the_principals_of_the_index_policy():
    stack, built = index(index_managers=["arn:aws:iam::111122223333:role/deployer"])
    assert "role/deployer" in json.dumps(stack.resolve(built.access_policy.policy))
    custom = cdk.Stack(cdk.App(), "Legacy", synthesizer=cdk.LegacyStackSynthesizer())
    with pytest.raises(ValueError, match="index_managers=") as refused:
        VectorIndexSettings(custom, "Index", index_name="chunks", dimension=8, collection=collection_of(custom))
    assert (refused.value.path, refused.value.ids) == ("Legacy/Index", ["VectorIndexSettings.index_managers.no-execution-role"])


BAD_INDEX = [
    ({"index_name": "Chunks"}, "lower-case"),
    ({"index_name": "_x"}, "lower-case"),
    ({"index_name": None}, "index_name is required"),
    ({"dimension": 0}, "below the minimum of 1"),
    ({"dimension": 20_000}, "exceeds the maximum of 16,000"),
    ({"dimension": 8.5}, "not a whole number"),
    ({"dimension": None}, "dimension is required"),
    ({"dimension": math.nan}, "not a finite number"),
    ({"engine": "hnswlib"}, "must be one of"),
    ({"space_type": "cosine"}, "must be one of"),
    ({"m": 1}, "below the minimum of 2"),
    ({"m": 101}, "exceeds the maximum of 100"),
    ({"m": True}, "is a bool"),
    ({"ef_construction": 0}, "below the minimum of 2"),
    ({"ef_construction": math.inf}, "not a finite number"),
    ({"ef_search": 1}, "below the minimum of 2"),
    ({"ef_search": -5}, "below the minimum of 2"),
    ({"ef_search": 100}, "ef_search=100 with engine='faiss' on a collection has nowhere to go.*method_parameters.ef_search"),
    ({"metadata_fields": {"published": "date"}}, r"metadata_fields\['published'\]='date' must be one of 'text', 'keyword', 'integer'"),
    ({"metadata_fields": {"price": "float"}}, "must be one of 'text', 'keyword', 'integer'; a collection accepts only these"),
    ({"metadata_fields": {"x" * 65: "keyword"}}, r"field names must match \^\[A-Za-z0-9_.-\]\{1,64\}\$"),
    ({"metadata_fields": {"product id": "keyword"}}, "metadata_fields key='product id': a collection's field names must match"),
    ({"vector_field": "emb/v1"}, "vector_field='emb/v1': a collection's field names must match"),
    ({"text_field": "body text"}, "text_field='body text': a collection's field names must match"),
    ({"metadata_fields": {"tenant": cdk.Token.as_string({"Ref": "Kind"})}}, r"metadata_fields\['tenant'\] is a deploy-time token"),
    ({"engine_version": "OpenSearch_2.19"}, "engine_version='OpenSearch_2.19' applies to a managed domain"),
    ({"index_managers": cdk.Token.as_list({"Ref": "Managers"})}, "index_managers is a list token"),
    ({"vector_field": ""}, "empty"),
    ({"text_field": 3}, "is an int"),
    ({"metadata_fields": {"tenant": "string"}}, "must be one of"),
    ({"metadata_fields": ["tenant"]}, "a dict"),
    ({"removal_policy": cdk.RemovalPolicy.SNAPSHOT}, "must be one of"),
    ({"index_managers": [""]}, "empty"),
    ({"log_retention": 30}, "log_retention configures the domain handler"),
    # a second prop naming the vector (or text) field would silently replace its mapping
    ({"metadata_fields": {"embedding": "keyword"}}, "names field 'embedding', which vector_field already maps"),
    ({"text_field": "embedding"}, "names field 'embedding', which vector_field already maps"),
    ({"metadata_fields": {"text": "keyword"}}, "names field 'text', which text_field already maps"),
    ({"metadata_fields": {"": "keyword"}}, "a field name must be a non-empty literal string"),
    ({"metadata_fields": {1: "keyword"}}, "a field name must be a non-empty literal string, not 1"),
    ({"metadata_fields": {"_id": "keyword"}}, "OpenSearch metadata fields"),
    ({"index_managers": []}, "without a principal"),
    ({"removal_policy": cdk.Token.as_string({"Ref": "Policy"})}, "removal_policy=.* pass cdk.RemovalPolicy"),
    ({"dimension": cdk.Token.as_string({"Ref": "Dim"})}, "dimension is a string token; pass an integer or a number token"),
    ({"ef_search": cdk.Token.as_string({"Ref": "Ef"})}, "ef_search is a string token"),
    ({"vector_field": cdk.Token.as_string({"Ref": "Field"})}, "vector_field is a deploy-time token"),
    ({"text_field": cdk.Token.as_string({"Ref": "Field"})}, "text_field is a deploy-time token"),
    ({"engine": cdk.Token.as_string({"Ref": "Engine"})}, "engine is a deploy-time token"),
]


@pytest.mark.parametrize(("props", "message"), BAD_INDEX)
def test_bad_index_props_are_refused(props, message):
    with pytest.raises(InvalidPropsError, match=message):
        index(**props)


def test_index_target_rules_tokens_and_the_nmslib_warning():
    with pytest.raises(InvalidPropsError, match="index_managers applies to a collection"):
        index("domain", index_managers=["arn:aws:iam::111122223333:role/x"])
    stack = new_stack()
    with pytest.raises(InvalidPropsError, match="exactly one target"):
        VectorIndexSettings(stack, "None", index_name="x", dimension=8)
    dimension = cdk.CfnParameter(stack, "Dim", type="Number").value_as_number
    VectorIndexSettings(stack, "Token", index_name="x", dimension=dimension, collection=collection_of(stack))
    nmslib = VectorIndexSettings(stack, "Nms", index_name="y", dimension=8, engine="nmslib",
                                 collection=aoss.CfnCollection(stack, "Other", name="other", type="VECTORSEARCH"))
    warnings = Annotations.from_stack(stack).find_warning(f"/{nmslib.node.path}", Match.string_like_regexp("no efficient k-NN filtering"))
    assert len(warnings) == 1
    lucene = index(engine="lucene")[1]
    assert lucene.settings["engine"] == "lucene" and lucene.settings["ef_search"] is None


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict]:
    from cdk_nag import AwsSolutionsChecks

    from stacks.retrieval_stack import RetrievalStack

    outdir = tmp_path_factory.mktemp("retrieval.out")
    app = cdk.App(outdir=str(outdir))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = RetrievalStack(app, "GenaiPacerRetrieval", env=cdk.Environment(account="111122223333", region="us-east-1"))
    try:
        app.synth()
    except RuntimeError as error:
        raise AssertionError("cdk-nag findings:\n" + "\n".join(nag_violations(outdir))) from error
    assert stack.pipeline.weights == (0.3, 0.7)
    return outdir, json.loads((outdir / "GenaiPacerRetrieval.template.json").read_text())


def test_reference_stack_is_nag_clean_without_acknowledgments(reference):
    outdir, template = reference
    assert nag_violations(outdir) == []
    metadata = json.dumps(template)
    assert "acknowledg" not in metadata.lower()


def test_reference_stack_composes_collection_policies_index_and_pipeline(reference):
    _, template = reference
    types = sorted(r["Type"] for r in template["Resources"].values())
    assert types.count("AWS::OpenSearchServerless::SecurityPolicy") == 2
    assert types.count("AWS::OpenSearchServerless::AccessPolicy") == 2
    assert "AWS::OpenSearchServerless::Index" in types and "Custom::OpenSearchSearchPipeline" in types
    collection = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::OpenSearchServerless::Collection")
    assert sorted(template["Resources"][collection]["DependsOn"]) == ["Encryption", "Network"]
    policies = {r["Properties"]["Type"]: json.loads(r["Properties"]["Policy"]) for r in template["Resources"].values()
                if r["Type"] == "AWS::OpenSearchServerless::SecurityPolicy"}
    assert policies["encryption"]["AWSOwnedKey"] is True
    pipeline_resource = next(r for r in template["Resources"].values() if r["Type"] == "Custom::OpenSearchSearchPipeline")
    index_id = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::OpenSearchServerless::Index")
    assert index_id in pipeline_resource["DependsOn"]


def test_grants_use_no_wildcard_and_no_managed_policy(reference):
    _, template = reference
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::IAM::Role":
            assert "ManagedPolicyArns" not in resource["Properties"]
        if resource["Type"] == "AWS::IAM::Policy":
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                assert "*" not in json.dumps(statement["Resource"]).replace(":*", ""), statement



@pytest.mark.parametrize("target", ["collection", "domain"])
def test_string_tokens_for_integers_are_refused_on_both_targets_and_number_tokens_pass(target):
    """A string token for dimension used to pass on a domain (text in the index body) and die deep in
    jsii on a collection; both now get one message naming the prop."""
    with pytest.raises(InvalidPropsError, match="m is a string token"):
        index(target, m=cdk.Token.as_string({"Ref": "M"}))
    stack, built = index(target, m=cdk.Token.as_number({"Ref": "M"}))
    assert built.settings["m"] is not None


def test_weights_within_opensearchs_tolerance_and_a_mapping_of_metadata_fields_are_accepted():
    from types import MappingProxyType

    _, built = pipeline(weights=(0.33, 0.33, 0.33))  # OpenSearch accepts a sum within 0.01 of 1.0
    assert built.weights == (0.33, 0.33, 0.33)
    stack, idx = index(metadata_fields=MappingProxyType({"tenant": "keyword"}))
    fields = Template.from_stack(stack).to_json()["Resources"]
    mapping = next(r for r in fields.values() if r["Type"] == "AWS::OpenSearchServerless::Index")["Properties"]["Mappings"]["Properties"]
    assert mapping["tenant"] == {"Type": "keyword"} and mapping["embedding"]["Type"] == "knn_vector"


def test_every_search_construct_in_a_stack_shares_one_handler_with_its_own_path_scoped_policy(tmp_path):
    """One function, role, log group and KMS key per stack, whatever the number of pipelines and
    domain indexes; each construct's grants sit in its own policy on that role, on its exact paths,
    and its custom resource waits for that policy. Nag-clean without acknowledgments."""
    from cdk_nag import AwsSolutionsChecks

    app = cdk.App(outdir=str(tmp_path))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "Shared", env=cdk.Environment(account="111122223333", region="us-east-1"))
    domain = domain_of(stack)
    first = HybridSearchPipeline(stack, "First", pipeline_name="first", domain=domain)
    second = HybridSearchPipeline(stack, "Second", pipeline_name="second", domain=domain, weights=(0.2, 0.8))
    kept = VectorIndexSettings(stack, "Kept", index_name="kept", dimension=8, domain=domain)
    dropped = VectorIndexSettings(stack, "Dropped", index_name="dropped", dimension=8, domain=domain,
                                  removal_policy=cdk.RemovalPolicy.DESTROY)
    try:
        app.synth()
    except RuntimeError as error:
        raise AssertionError("cdk-nag findings:\n" + "\n".join(nag_violations(tmp_path))) from error
    template = json.loads((tmp_path / "Shared.template.json").read_text())
    for kind in ("AWS::Lambda::Function", "AWS::IAM::Role", "AWS::KMS::Key", "AWS::Logs::LogGroup"):
        assert len(resources(template, kind)) == 1, kind
    constructs = (first, second, kept, dropped)
    assert len({c.function for c in constructs}) == 1
    assert first.function.node.path == f"Shared/{SEARCH_HANDLER_ID}/Function"
    function_id = stack.get_logical_id(first.function.node.default_child)
    role_id = stack.get_logical_id(first.function.role.node.default_child)
    expected = {
        "First": {("es:ESHttpDelete", "es:ESHttpGet", "es:ESHttpPut"): ["/_search/pipeline/first"]},
        "Second": {("es:ESHttpDelete", "es:ESHttpGet", "es:ESHttpPut"): ["/_search/pipeline/second"]},
        "Kept": {("es:ESHttpGet",): ["/kept/_mapping"], ("es:ESHttpPut",): ["/kept", "/kept/_settings"]},
        "Dropped": {("es:ESHttpGet",): ["/dropped/_mapping"], ("es:ESHttpPut",): ["/dropped", "/dropped/_settings"],
                    ("es:ESHttpDelete",): ["/dropped"]},
    }
    for built in constructs:
        policy_id = stack.get_logical_id(built.handler_policy.node.default_child)
        policy = template["Resources"][policy_id]["Properties"]
        assert policy["Roles"] == [{"Ref": role_id}]
        grants = {tuple(sorted(_list(s["Action"]))): [_path(r) for r in _list(s["Resource"])]
                  for s in policy["PolicyDocument"]["Statement"]}
        assert grants == expected[built.node.id], built.node.id
        resource = template["Resources"][stack.get_logical_id(built.resource.node.default_child)]
        assert resource["Properties"]["ServiceToken"] == {"Fn::GetAtt": [function_id, "Arn"]}
        assert policy_id in resource["DependsOn"]
    # the role's own policy holds only the log-group grant
    default = template["Resources"][stack.get_logical_id(first.function.role.node.find_child("DefaultPolicy").node.default_child)]
    assert all(str(a).startswith("logs:") for s in default["Properties"]["PolicyDocument"]["Statement"] for a in _list(s["Action"]))
    assert nag_violations(tmp_path) == []


def _path(resource) -> str:
    """The path part of an es grant: what follows the domain ARN."""
    text = resource if isinstance(resource, str) else "".join(p for p in resource["Fn::Join"][1] if isinstance(p, str))
    return "/" + text.split("/", 2)[2] if text.count("/") >= 2 else text


def test_serverless_pipelines_share_the_handler_and_each_policy_names_that_role_for_its_collection():
    stack = new_stack()
    built = [HybridSearchPipeline(stack, name, pipeline_name=name.lower(), collection=aoss.CfnCollection(
        stack, f"{name}Collection", name=name.lower() + "-docs", type="VECTORSEARCH")) for name in ("One", "Two")]
    template = Template.from_stack(stack).to_json()
    assert len(resources(template, "AWS::Lambda::Function")) == 1 and built[0].function is built[1].function
    role_id = stack.get_logical_id(built[0].function.role.node.default_child)
    for pipeline_, collection in zip(built, ("OneCollection", "TwoCollection"), strict=True):
        access = json.loads(json.dumps(stack.resolve(pipeline_.access_policy.policy)))
        assert role_id in json.dumps(access) and f"collection/{collection[:3].lower()}-docs" in json.dumps(access)
        statements_ = stack.resolve(pipeline_.handler_policy.document)["Statement"]
        assert statements_ == [{"Action": "aoss:APIAccessAll", "Effect": "Allow", "Resource": {"Fn::GetAtt": [collection, "Arn"]}}]


def test_the_shared_handlers_log_settings_are_set_once_and_a_different_one_is_refused():
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_logs as logs

    stack = new_stack()
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    domain = domain_of(stack)
    first = HybridSearchPipeline(stack, "First", pipeline_name="a", domain=domain, encryption_key=key,
                                 log_retention=logs.RetentionDays.ONE_YEAR)
    # the same values, or none, share the handler
    HybridSearchPipeline(stack, "Same", pipeline_name="b", domain=domain, encryption_key=key, log_retention=logs.RetentionDays.ONE_YEAR)
    VectorIndexSettings(stack, "Quiet", index_name="c", dimension=8, domain=domain)
    imported = kms.Key.from_key_arn(stack, "Imported", "arn:aws:kms:us-east-1:111122223333:key/abc")
    with pytest.raises(InvalidPropsError, match=r"encryption_key=.* differs from the one the stack's shared search handler got "
                                                r"from Test/First .*pass the same encryption_key to Test/First as well"):
        HybridSearchPipeline(stack, "OtherKey", pipeline_name="d", domain=domain, encryption_key=imported)
    with pytest.raises(InvalidPropsError, match="log_retention=.* differs from the one the stack's shared search handler"):
        VectorIndexSettings(stack, "OtherRetention", index_name="e", dimension=8, domain=domain,
                            log_retention=logs.RetentionDays.ONE_WEEK)
    template = Template.from_stack(stack).to_json()
    assert len(resources(template, "AWS::KMS::Key")) == 1  # the user's key; no key created for the handler
    assert only(template, "AWS::Logs::LogGroup")["Properties"]["RetentionInDays"] == 365
    assert first.function.node.scope.node.path == f"Test/{SEARCH_HANDLER_ID}"
    # a handler made with the defaults refuses a key asked for later
    defaults = new_stack()
    HybridSearchPipeline(defaults, "First", pipeline_name="a", domain=domain_of(defaults))
    with pytest.raises(InvalidPropsError, match=r"encryption_key=.* got from Test/First \(its default\)"):
        HybridSearchPipeline(defaults, "Keyed", pipeline_name="b", domain=domain_of_other(defaults),
                             encryption_key=kms.Key(defaults, "Key", enable_key_rotation=True))


def domain_of_other(stack: cdk.Stack) -> opensearch.IDomain:
    return opensearch.Domain.from_domain_endpoint(stack, "OtherDomain", ENDPOINT)


def test_a_construct_of_the_users_under_the_handlers_id_is_named_in_the_error():
    from constructs import Construct

    stack = new_stack()
    Construct(stack, SEARCH_HANDLER_ID)
    with pytest.raises(ValueError, match=f"Test/{SEARCH_HANDLER_ID} is a Construct, not genai-pacer's search handler"):
        HybridSearchPipeline(stack, "P", pipeline_name="p", domain=domain_of(stack))


def test_the_sub_query_limit_is_defined_once_in_retrieval_tuning():
    """MAX_SUBQUERIES used to be defined again here; a change to one copy would not reach the other."""
    import ast

    import genai_pacer.retrieval.opensearch as module
    from genai_pacer.retrieval import tuning as retrieval_tuning

    tree = ast.parse(Path(module.__file__).read_text())
    assigned = [n for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)
                and any(getattr(t, "id", None) == "MAX_SUBQUERIES" for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
    imported = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "tuning"
                and any(a.name == "MAX_SUBQUERIES" for a in n.names)]
    assert assigned == [] and len(imported) == 1
    assert module.MAX_SUBQUERIES == retrieval_tuning.MAX_SUBQUERIES


# ---------------------------------------------------------------------------------------------
# ef_search where each engine reads it, and the rules that depend on the domain's version


def domain_resource(stack: cdk.Stack) -> dict:
    props = only(Template.from_stack(stack), "Custom::OpenSearchKnnIndex")["Properties"]
    return {**props, "Body": json.loads(props["Body"]), "BuildTime": json.loads(props["BuildTime"])}


def test_faiss_ef_search_on_a_domain_goes_in_the_mapping_not_the_index_setting():
    """The index setting index.knn.algo_param.ef_search is read only for nmslib (and lucene from 3.5):
    faiss reads the graph's own value, set from the mapping's method parameters."""
    stack, built = index("domain", ef_search=64)
    props = domain_resource(stack)
    assert props["Body"]["settings"] == {"index": {"knn": True}}
    method = props["Body"]["mappings"]["properties"]["embedding"]["method"]
    assert method["engine"] == "faiss" and method["parameters"] == {"m": 16, "ef_construction": 100, "ef_search": 64}
    assert props["BuildTime"]["ef_search"] == 64 and props["EfSearch"] == ""  # build time: a change needs a reindex
    assert built.settings["ef_search"] == 64


@pytest.mark.parametrize("engine", ["nmslib", "lucene"])
def test_engines_that_read_the_index_setting_get_it_dynamically(engine):
    stack, _ = index("domain", engine=engine, ef_search=64, engine_version="OpenSearch_3.5" if engine == "lucene" else None)
    props = domain_resource(stack)
    assert props["Body"]["settings"] == {"index": {"knn": True, "knn.algo_param.ef_search": 64}}
    assert "ef_search" not in props["Body"]["mappings"]["properties"]["embedding"]["method"]["parameters"]
    assert "ef_search" not in props["BuildTime"] and props["EfSearch"] == "64"  # dynamic: PUT _settings in place
    collection_stack, _ = index(engine=engine, ef_search=64)
    settings = only(Template.from_stack(collection_stack), "AWS::OpenSearchServerless::Index")["Properties"]["Settings"]
    assert settings == {"Index": {"Knn": True, "KnnAlgoParamEfSearch": 64}}


def test_lucene_ef_search_is_refused_before_3_5_allowed_from_it_and_warned_where_the_version_is_unknown():
    with pytest.raises(InvalidPropsError, match=r"engine='lucene' on OpenSearch_2.19 would be ignored: Lucene reads "
                                                r"index.knn.algo_param.ef_search from OpenSearch 3.5.*knn_query\(\.\.\., ef_search=N\)"):
        index("domain", engine="lucene", ef_search=64, engine_version=opensearch.EngineVersion.OPENSEARCH_2_19)
    index("domain", engine="lucene", ef_search=64, engine_version=opensearch.EngineVersion.OPENSEARCH_3_5)
    for target in ("domain", "collection"):  # an imported domain, a collection: no version known at synth
        stack, built = index(target, engine="lucene", ef_search=64)
        warnings = Annotations.from_stack(stack).find_warning(
            f"/{built.node.path}", Match.string_like_regexp("ef_search with engine='lucene'.*needs OpenSearch 3.5"))
        assert len(warnings) == 1, target
    quiet, built = index("domain", engine="lucene")  # no ef_search, nothing to warn about
    assert Annotations.from_stack(quiet).find_warning(f"/{built.node.path}", Match.string_like_regexp("engine-version")) == []


def test_the_version_of_a_domain_created_in_the_app_is_read_from_its_cfn_domain():
    stack = new_stack()
    domain = opensearch.Domain(stack, "Search", version=opensearch.EngineVersion.OPENSEARCH_2_19)
    with pytest.raises(InvalidPropsError, match="engine='lucene' on OpenSearch_2.19 would be ignored"):
        VectorIndexSettings(stack, "Lucene", index_name="l", dimension=8, domain=domain, engine="lucene", ef_search=64)
    with pytest.raises(InvalidPropsError, match="normalization='z_score' needs OpenSearch 3.0 or later and the domain runs OpenSearch_2.19"):
        HybridSearchPipeline(stack, "Z", pipeline_name="z", domain=domain, normalization="z_score")
    with pytest.raises(InvalidPropsError, match="engine_version='OpenSearch_3.5' differs from the domain's own 'OpenSearch_2.19'"):
        HybridSearchPipeline(stack, "Mismatch", pipeline_name="m", domain=domain, engine_version="OpenSearch_3.5")
    with pytest.raises(InvalidPropsError, match="engine='nmslib' cannot create an index on OpenSearch_3.1"):
        VectorIndexSettings(stack, "Nms", index_name="n", dimension=8, engine="nmslib",
                            domain=opensearch.Domain(stack, "New", version=opensearch.EngineVersion.OPENSEARCH_3_1))


def test_z_score_is_refused_on_a_domain_known_older_than_3_0_and_warned_where_unknown():
    with pytest.raises(InvalidPropsError, match="provided normalization technique is not supported"):
        pipeline(normalization="z_score", engine_version="OpenSearch_2.19")
    stack, built = pipeline(normalization="z_score", engine_version="OpenSearch_3.0")
    assert Annotations.from_stack(stack).find_warning(f"/{built.node.path}", Match.any_value()) == []
    stack, built = pipeline(normalization="z_score")  # imported domain: unknown
    warnings = Annotations.from_stack(stack).find_warning(
        f"/{built.node.path}", Match.string_like_regexp("normalization='z_score' needs OpenSearch 3.0.*rolls back"))
    assert len(warnings) == 1


@pytest.mark.parametrize(("version", "message"), [
    ("OpenSearch_2.9", "search pipelines with a normalization-processor need OpenSearch 2.10"),
    ("Elasticsearch_7.10", "the domain runs Elasticsearch_7.10: search pipelines"),
    ("OpenSearch-2.19", "is not an engine version such as 'OpenSearch_2.19'"),
    ("2.19", "is not an engine version"),
    (2.19, "engine_version=2.19 is a float"),
])
def test_engine_versions_are_checked(version, message):
    with pytest.raises(InvalidPropsError, match=message):
        pipeline(engine_version=version)


def test_a_domain_index_refuses_a_wrong_encryption_key_type_by_name_instead_of_a_jsii_error():
    """`encryption_key="alias/x"` used to reach jsii: "Unable to deserialize value as LogGroupProps"."""
    with pytest.raises(InvalidPropsError, match=r"encryption_key='alias/x' is a str; pass a kms.Key"):
        index("domain", encryption_key="alias/x")
    with pytest.raises(InvalidPropsError, match=r"log_retention=30 is an int; pass a logs.RetentionDays"):
        index("domain", log_retention=30)


def test_custom_resources_fail_within_ten_minutes_when_the_handler_cannot_answer():
    stack = new_stack()
    domain = domain_of(stack)
    HybridSearchPipeline(stack, "P", pipeline_name="p", domain=domain)
    VectorIndexSettings(stack, "I", index_name="i", dimension=8, domain=domain)
    template = Template.from_stack(stack)
    for kind in ("Custom::OpenSearchSearchPipeline", "Custom::OpenSearchKnnIndex"):
        assert only(template, kind)["Properties"]["ServiceTimeout"] == "600"


# ---------------------------------------------------------------------------------------------
# Every prop given an unresolved token: it reaches the template as a token, or is refused by name




REF = {"Ref": "Param"}


def holds_ref(value) -> bool:
    return REF in value if isinstance(value, list) else json.dumps(REF) in json.dumps(value)


def pipeline_with(kind: str, prop: str, target: str = "domain", wrap=None):
    stack = new_stack()
    token = token_of(stack, kind)
    where = {"domain": domain_of(stack)} if target == "domain" else {"collection": collection_of(stack)}
    built = HybridSearchPipeline(stack, "Hybrid", **{"pipeline_name": "hybrid", **where, prop: wrap(token) if wrap else token})
    return stack, built


def index_with(kind: str, prop: str, target: str = "collection", wrap=None, **extra):
    stack = new_stack()
    token = token_of(stack, kind)
    where = {"domain": domain_of(stack)} if target == "domain" else {"collection": collection_of(stack)}
    props = {"index_name": "chunks", "dimension": 8, **where, **extra, prop: wrap(token) if wrap else token}
    return stack, VectorIndexSettings(stack, "Index", **props)


def pipeline_property(name):
    return lambda template: only(template, "Custom::OpenSearchSearchPipeline")["Properties"][name]


def serverless_index(*path):
    def get(template):
        value = only(template, "AWS::OpenSearchServerless::Index")["Properties"]
        for key in path:
            value = value[key]
        return value
    return get


def domain_index(name):
    return lambda template: only(template, "Custom::OpenSearchKnnIndex")["Properties"][name]


def access_policy(template):
    return only(template, "AWS::OpenSearchServerless::AccessPolicy")["Properties"]["Policy"]


KINDS = ("number", "string", "duration", "list")
PIPELINE_PROPS = ("pipeline_name", "domain", "collection", "weights", "normalization", "combination", "description",
                  "engine_version", "encryption_key", "log_retention")
INDEX_PROPS = ("index_name", "dimension", "domain", "collection", "vector_field", "engine", "space_type", "m", "ef_construction",
               "ef_search", "text_field", "metadata_fields", "removal_policy", "index_managers", "engine_version",
               "encryption_key", "log_retention")
#: Both constructs with every one of their props (tests/test_tokens_coverage.py checks it is all).
TABLE = {"pipeline": (HybridSearchPipeline, PIPELINE_PROPS), "index": (VectorIndexSettings, INDEX_PROPS)}
#: Where a token that passes lands in the template (None: only consulted at synth, nothing written).
#: Every other (prop, target, kind) is refused, naming the prop.
PASSES = {
    ("pipeline", "pipeline_name", "domain", "string"): pipeline_property("PipelineName"),
    ("pipeline", "description", "domain", "string"): pipeline_property("Body"),
    ("pipeline", "engine_version", "domain", "string"): None,  # unknown version: rules warn
    ("index", "index_name", "collection", "string"): serverless_index("IndexName"),
    ("index", "index_name", "domain", "string"): domain_index("IndexName"),
    ("index", "dimension", "collection", "number"): serverless_index("Mappings", "Properties", "embedding", "Dimension"),
    ("index", "dimension", "domain", "number"): domain_index("Body"),
    ("index", "m", "collection", "number"): serverless_index("Mappings", "Properties", "embedding", "Method", "Parameters", "M"),
    ("index", "m", "domain", "number"): domain_index("BuildTime"),
    ("index", "ef_construction", "collection", "number"): serverless_index("Mappings", "Properties", "embedding", "Method",
                                                                            "Parameters", "EfConstruction"),
    ("index", "ef_construction", "domain", "number"): domain_index("BuildTime"),
    ("index", "ef_search", "domain", "number"): domain_index("BuildTime"),  # faiss: build time, in the mapping
    ("index", "engine_version", "domain", "string"): None,
}
EVERY_TOKEN = [
    (construct, prop, target, kind)
    for construct, props, targets in (("pipeline", PIPELINE_PROPS, ("domain",)), ("index", INDEX_PROPS, ("collection", "domain")))
    for prop in props
    for target in ((prop,) if prop in ("domain", "collection") else targets)
    for kind in KINDS
]


@pytest.mark.parametrize(("construct", "prop", "target", "kind"), EVERY_TOKEN, ids=["-".join(case) for case in EVERY_TOKEN])
def test_every_prop_given_every_kind_of_token_reaches_the_template_or_is_refused_by_name(construct, prop, target, kind):
    """A CfnParameter's value_as_number / value_as_string / a Duration of one / value_as_list, for each
    prop of both constructs on each target: a Ref where the value reaches CloudFormation unchanged,
    else a refusal that names the prop (never a garbled number in the template, never a jsii error)."""
    build = pipeline_with if construct == "pipeline" else index_with
    key = (construct, prop, target, kind)
    if key not in PASSES:
        with pytest.raises(InvalidPropsError) as refused:
            build(kind, prop, target=target)
        assert any(problem.startswith((prop, f"{prop}=")) for problem in refused.value.problems), refused.value.problems
        assert not ENCODED_NUMBER.search(str(refused.value)), str(refused.value)
        return
    stack, _ = build(kind, prop, target=target)
    template = Template.from_stack(stack).to_json()
    assert not ENCODED_NUMBER.search(json.dumps(template["Resources"]))
    where = PASSES[key]
    if where is None:
        assert not holds_ref(template["Resources"])
    else:
        assert holds_ref(where(template)), json.dumps(where(template))[:300]


# (builder, prop, token kind, builder options, where the Ref must land | the refusal's pattern): tokens inside a value
TOKENS_INSIDE = [
    (pipeline_with, "weights", "number", {"wrap": lambda t: (t, 0.5)}, pipeline_property("Body")),
    (pipeline_with, "weights", "string", {"wrap": lambda t: (t, 0.5)}, "weights=.* holds a string or list token"),
    (pipeline_with, "weights", "duration", {"wrap": lambda t: (t, 0.5)}, r"weights\[0\]=.* is a Duration"),
    (index_with, "ef_search", "number", {"target": "domain", "engine": "nmslib"}, domain_index("EfSearch")),  # a Ref, not a garbled number
    (index_with, "ef_search", "number", {"engine": "nmslib"}, serverless_index("Settings", "Index", "KnnAlgoParamEfSearch")),
    (index_with, "metadata_fields", "string", {"wrap": lambda t: {"tenant": t}}, r"metadata_fields\['tenant'\] is a deploy-time token"),
    (index_with, "metadata_fields", "string", {"wrap": lambda t: {t: "keyword"}}, "a field name must be a non-empty literal string"),
    (index_with, "index_managers", "string", {"wrap": lambda t: [t]}, access_policy),
]


@pytest.mark.parametrize(("build", "prop", "kind", "options", "outcome"), TOKENS_INSIDE,
                         ids=[f"{p}-{k}-{i}" for i, (_, p, k, _, _) in enumerate(TOKENS_INSIDE)])
def test_a_token_inside_a_value_reaches_the_template_or_is_refused_by_name(build, prop, kind, options, outcome):
    if isinstance(outcome, str):
        with pytest.raises(InvalidPropsError, match=outcome):
            build(kind, prop, **options)
        return
    stack, _ = build(kind, prop, **options)
    assert holds_ref(outcome(Template.from_stack(stack).to_json()))


# ---------------------------------------------------------------------------------------------
# cfn-lint on what these tests synthesize, not only the reference stacks


def every_option_stacks() -> list[cdk.Stack]:
    """Stacks composing each engine, target, normalization, field type and token kind once."""
    app = cdk.App()
    env = cdk.Environment(account="111122223333", region="us-east-1")
    domains = cdk.Stack(app, "Domains", env=env)
    managed = opensearch.Domain(domains, "Search", version=opensearch.EngineVersion.OPENSEARCH_3_5)
    imported = domain_of(domains)
    for normalization in ("min_max", "l2", "z_score"):
        HybridSearchPipeline(domains, f"Managed{normalization}", pipeline_name=f"p-{normalization}", domain=managed,
                             normalization=normalization, weights=(0.2, 0.3, 0.5))
    HybridSearchPipeline(domains, "Imported", pipeline_name="imported", domain=imported, combination="geometric_mean")
    for engine in ENGINES:
        target = imported if engine == "nmslib" else managed  # nmslib: refused on 3.x, kept for imported 2.x domains
        VectorIndexSettings(domains, engine, index_name=f"idx-{engine}", dimension=8, domain=target, engine=engine,
                            ef_search=64, metadata_fields={f"f_{name}": name for name in DOMAIN_FIELD_TYPES},
                            removal_policy=cdk.RemovalPolicy.DESTROY)
    collections = cdk.Stack(app, "Collections", env=env)
    for engine in ENGINES:
        collection = aoss.CfnCollection(collections, f"{engine}Collection", name=f"docs-{engine}", type="VECTORSEARCH")
        VectorIndexSettings(collections, f"{engine}Index", index_name="chunks", dimension=1024, collection=collection, engine=engine,
                            ef_search=None if engine == "faiss" else 128, space_type="cosinesimil",
                            metadata_fields={"tenant": "keyword", "year": "integer", "summary.v1": "text"})
        HybridSearchPipeline(collections, f"{engine}Pipeline", pipeline_name=f"{engine}-hybrid", collection=collection,
                             normalization="l2", combination="harmonic_mean")
    tokens = cdk.Stack(app, "Tokens", env=env)
    number = cdk.CfnParameter(tokens, "Number", type="Number").value_as_number
    text = cdk.CfnParameter(tokens, "Text").value_as_string
    token_collection = aoss.CfnCollection(tokens, "Collection", name="tokens", type="VECTORSEARCH")
    VectorIndexSettings(tokens, "Serverless", index_name=text, dimension=number, m=number, ef_construction=number,
                        collection=token_collection, index_managers=[text])
    VectorIndexSettings(tokens, "DomainIndex", index_name="tok", dimension=number, ef_search=number, engine="nmslib",
                        domain=domain_of(tokens), engine_version=text)
    HybridSearchPipeline(tokens, "Pipeline", pipeline_name=text, domain=domain_of_other(tokens), weights=(number, 0.5),
                         description=text)
    return [domains, collections, tokens]


def test_templates_of_every_option_pass_cfn_lint():
    from cfnlint.api import ManualArgs, lint

    for stack in every_option_stacks():
        template = Template.from_stack(stack).to_json()
        errors = [f"{m.rule.id} {m.path_string}: {m.message}" for m in lint(json.dumps(template), config=ManualArgs(regions=["us-east-1"]))
                  if m.rule.id.startswith("E")]
        assert errors == [], f"{stack.stack_name}:\n" + "\n".join(errors)
