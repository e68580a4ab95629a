"""The AWS facts the retrieval constructs rely on, read back from the sources the dev tools install:
cfn-lint's CloudFormation resource schemas and botocore's service models. A drift in either fails
here, next to the constant it contradicts."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import botocore.loaders
import cfnlint
import pytest
from aws_cdk import aws_opensearchserverless as aoss
from aws_cdk import aws_opensearchservice as opensearch
from aws_cdk.assertions import Template
from genai_pacer import InvalidPropsError
from genai_pacer.retrieval import VectorIndexSettings
from genai_pacer.retrieval import opensearch as retrieval
from helpers import new_stack, only

SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"


@cache
def schema(type_name: str) -> dict:
    providers = json.loads((SCHEMAS / "providers" / "us-east-1.json").read_text())
    return json.loads((SCHEMAS / "resources" / f"{providers[type_name]}.json").read_text())


def serverless_index() -> dict:
    return schema("AWS::OpenSearchServerless::Index")


def test_serverless_field_names_follow_the_index_schema_pattern_everywhere_it_appears():
    definition = serverless_index()
    top = definition["properties"]["Mappings"]["properties"]["Properties"]
    nested = definition["definitions"]["PropertyMapping"]["properties"]["Properties"]
    for mapping in (top, nested):
        assert mapping["additionalProperties"] is False  # a name outside the pattern is refused, not ignored
        assert list(mapping["patternProperties"]) == [retrieval.SERVERLESS_FIELD_NAME.pattern]


def test_serverless_field_types_are_the_schemas_enum():
    kinds = serverless_index()["definitions"]["PropertyMapping"]["properties"]["Type"]["enum"]
    assert sorted(kinds) == sorted(retrieval.SERVERLESS_FIELD_TYPES)


def test_serverless_method_parameters_have_no_ef_search_so_faiss_takes_it_only_per_query():
    method = serverless_index()["definitions"]["PropertyMapping"]["properties"]["Method"]
    assert sorted(method["properties"]["Parameters"]["properties"]) == ["EfConstruction", "M"]
    assert method["properties"]["Parameters"]["additionalProperties"] is False
    assert "KnnAlgoParamEfSearch" in serverless_index()["definitions"]["IndexSettings"]["properties"]["Index"]["properties"]
    assert set(retrieval.ENGINES) <= set(method["properties"]["Engine"]["enum"])
    assert set(retrieval.SPACE_TYPES) <= set(method["properties"]["SpaceType"]["enum"])


def test_the_index_name_rule_is_the_schemas():
    assert serverless_index()["properties"]["IndexName"]["pattern"] == retrieval._INDEX_NAME.pattern


def test_the_m_range_is_the_schemas():
    bounds = serverless_index()["definitions"]["PropertyMapping"]["properties"]["Method"]["properties"]["Parameters"]["properties"]["M"]

    def build(m: int) -> None:
        stack = new_stack()
        VectorIndexSettings(stack, "Index", index_name="x", dimension=8, m=m,
                            collection=aoss.CfnCollection(stack, "C", name="docs", type="VECTORSEARCH"))

    build(bounds["minimum"])
    build(bounds["maximum"])
    for outside in (bounds["minimum"] - 1, bounds["maximum"] + 1):
        with pytest.raises(InvalidPropsError, match="m="):
            build(outside)


def test_cfn_lint_refuses_what_the_construct_refuses_on_a_collection():
    """A template the construct writes, with a field type or name the construct would refuse put in
    by hand: cfn-lint (and CloudFormation's schema behind it) rejects it, E3030 and E3002."""
    from cfnlint.api import ManualArgs, lint

    stack = new_stack()
    VectorIndexSettings(stack, "Index", index_name="x", dimension=8, metadata_fields={"tenant": "keyword"},
                        collection=aoss.CfnCollection(stack, "C", name="docs", type="VECTORSEARCH"))
    template = Template.from_stack(stack).to_json()
    fields = only(template, "AWS::OpenSearchServerless::Index")["Properties"]["Mappings"]["Properties"]

    def rules() -> set[str]:
        return {m.rule.id for m in lint(json.dumps(template), config=ManualArgs(regions=["us-east-1"])) if m.rule.id.startswith("E")}

    assert rules() == set()
    for kind in ("date", "float", "long", "double", "boolean"):
        fields["tenant"] = {"Type": kind}
        assert rules() == {"E3030"}, kind
    fields["tenant"] = {"Type": "keyword"}
    fields["product id"] = {"Type": "keyword"}
    assert rules() == {"E3002"}


def test_the_data_plane_iam_action_is_the_one_the_index_resource_itself_needs():
    """HybridSearchPipeline grants the handler aoss:APIAccessAll on the collection: the action
    CloudFormation's own AWS::OpenSearchServerless::Index handlers need for the same endpoint."""
    for operation in ("create", "read", "update", "delete"):
        assert serverless_index()["handlers"][operation]["permissions"] == ["aoss:APIAccessAll"]


def test_engine_versions_follow_botocores_version_string():
    shape = botocore.loaders.Loader().load_service_model("opensearch", "service-2")["shapes"]["VersionString"]
    assert shape["pattern"] == retrieval.ENGINE_VERSION.pattern
    named = [getattr(opensearch.EngineVersion, n) for n in dir(opensearch.EngineVersion) if n.startswith(("OPENSEARCH_", "ELASTICSEARCH_"))]
    assert named and all(retrieval.ENGINE_VERSION.match(v.version) for v in named)


def test_the_custom_resource_timeout_is_a_property_cloudformation_accepts_within_its_range():
    assert schema("AWS::CloudFormation::CustomResource")["properties"]["ServiceTimeout"]["type"] == "integer"
    assert 1 <= retrieval.SERVICE_TIMEOUT.to_seconds() <= 3600  # crpg-ref: 1..3600 seconds
    # the handler must give up (and answer) before CloudFormation does
    assert retrieval._HANDLER_TIMEOUT.to_seconds() < retrieval.SERVICE_TIMEOUT.to_seconds()



def test_every_engine_has_one_place_for_ef_search():
    places = retrieval.EF_SEARCH_IN_MAPPING + retrieval.EF_SEARCH_IN_SETTING
    assert sorted(places) == sorted(retrieval.ENGINES) and len(set(places)) == len(places)
