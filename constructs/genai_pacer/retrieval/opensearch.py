"""OpenSearch for retrieval: a hybrid search pipeline and the k-NN index settings it searches.

`HybridSearchPipeline` creates a search pipeline whose normalization-processor makes lexical and
vector scores comparable and weights them (a bool query adding raw BM25 and vector scores lets the
unbounded BM25 side dominate). `VectorIndexSettings` creates the k-NN index with an engine, space,
HNSW build settings and ef_search, written where that engine reads it (see its docstring).

Sub-query order: weights are positional. The runtime's `hybrid_query` puts the lexical sub-query
first and the vector sub-query second (pacer_runtime.retrieval.HYBRID_SUBQUERY_ORDER), so
weights=(0.3, 0.7) give the vector side 70%. Tune them with genai_pacer.retrieval.tuning.

Engine version: what OpenSearch accepts depends on the domain's version (z_score from 3.0, Lucene
reading the ef_search index setting from 3.5). The constructs take it from `engine_version` or from
a domain created in the same app (its CfnDomain's EngineVersion); where neither says (an imported
domain, a Serverless collection, a token), a rule that depends on it warns instead of refusing.

Why a plain CustomResource backed by our own function, not custom_resources.Provider: the
Provider adds a framework function (its runtime and its AWSLambdaBasicExecutionRole managed policy
are the library's choice, so cdk-nag L1/IAM4 findings would need acknowledging) and a second hop
for every event. Our handler is synchronous (a PUT and a GET), answers CloudFormation itself, and
keeps the stack nag-clean without acknowledgments.

One handler per stack: every HybridSearchPipeline and domain VectorIndexSettings in a stack shares
one function, role, log group and KMS key (`SEARCH_HANDLER_ID`, found with
`stack.node.try_find_child` as aws-cdk-lib's SingletonFunction does), instead of one each for the
same code (a KMS key is billed monthly). Each construct attaches its own iam.Policy to that role,
with statements on the exact paths it sends requests to, and on Serverless its own data access
policy naming that role; its custom resource waits for its own policy. The role holds the union of
those grants: that is the price of sharing, and each grant stays on an exact path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_opensearchserverless as aoss
from aws_cdk import aws_opensearchservice as opensearch

from constructs import Construct

from .._internal.checks import Checks, _show, is_token, kind_of, token_kind, warn
from .._internal.docs import constructor_doc
from .._internal.secure import handler_function
from .tuning import (
    COMBINATIONS,
    MAX_SUBQUERIES,
    NORMALIZATIONS,
    WEIGHT_SUM_TOLERANCE,
    check_technique,
    weights_sum_to_one,
)

__all__ = [
    "ENGINES",
    "SEARCH_HANDLER_ID",
    "SPACE_TYPES",
    "HybridSearchPipeline",
    "VectorIndexSettings",
]

ENGINES = ("faiss", "lucene", "nmslib")
SPACE_TYPES = ("l2", "cosinesimil", "innerproduct")
#: AWS::OpenSearchServerless::Index IndexName pattern (cfn-lint resource schema; OpenSearch's own rule too).
_INDEX_NAME = re.compile(r"^(?![_-])[a-z][a-z0-9_-]*$")
#: The search handler's PIPELINE_NAME (lambda/search_pipeline/handler.py, where its OpenSearch sources are
#: cited); tests/retrieval/test_search_pipeline_handler.py keeps the two equal.
_PIPELINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
#: AWS::OpenSearchServerless::Index Mappings.Properties: names matching this pattern only
#: (patternProperties with additionalProperties false; cfn-lint resource schema).
SERVERLESS_FIELD_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: AWS::OpenSearchServerless::Index PropertyMapping.Type enum (cfn-lint resource schema; E3030 otherwise).
SERVERLESS_FIELD_TYPES = ("text", "knn_vector", "keyword", "integer")
#: Field types a domain index's metadata_fields may use (OpenSearch field types suited to filters).
DOMAIN_FIELD_TYPES = ("keyword", "text", "integer", "long", "float", "double", "boolean", "date")
#: CreateDomain EngineVersion (botocore opensearch 2021-01-01 service-2.json, shape VersionString).
ENGINE_VERSION = re.compile(r"^Elasticsearch_[0-9]{1}\.[0-9]{1,2}$|^OpenSearch_[0-9]{1,2}\.[0-9]{1,2}$")
#: The normalization-processor first ships in neural-search 2.10 (NormalizationProcessor.java first
#: in tag 2.10.0.0 of opensearch-project/neural-search).
MIN_PIPELINE_VERSION = (2, 10)
#: z_score normalization: neural-search 3.0 (#1224; ScoreNormalizationFactory.java lists it from tag
#: 3.0.0.0; 2.19 answers "provided normalization technique is not supported").
MIN_Z_SCORE_VERSION = (3, 0)
#: Where each engine reads ef_search when a query sets none (opensearch-project/k-NN):
#: - faiss: the graph's own efSearch, set at build time from the mapping's method.parameters.ef_search
#:   (src/main/java/org/opensearch/knn/index/engine/faiss/FaissHNSWMethod.java declares the parameter;
#:   jni/src/faiss_wrapper.cpp SetExtraParameters stores it in the graph, and at query time reads
#:   hnswReader->hnsw.efSearch unless the query's method_parameters give one). The index setting is
#:   never read for faiss (src/main/java/org/opensearch/knn/index/util/IndexUtil.java
#:   getParametersAtLoading adds it for NMSLIB only), except by memory-optimized search.
#: - nmslib: the index setting index.knn.algo_param.ef_search, passed when a graph is loaded
#:   (getParametersAtLoading); the setting is dynamic and a change rebuilds the graph cache
#:   (src/main/java/org/opensearch/knn/index/KNNSettings.java onIndexModule).
#: - lucene: the index setting from 3.5 (MIN_LUCENE_EF_SEARCH_SETTING_VERSION).
#: A query's method_parameters.ef_search overrides all three (k-NN 2.16+: KNNQueryBuilder; Lucene
#: explores max(k, ef_search), KNNQueryFactory.java).
EF_SEARCH_IN_MAPPING = ("faiss",)
EF_SEARCH_IN_SETTING = ("lucene", "nmslib")
#: Lucene reads index.knn.algo_param.ef_search from k-NN 3.5 (#3037: KNNQueryFactory.java's
#: luceneK = max(k, IndexHyperParametersUtil.getHNSWEFSearchValue(...)), first in tag 3.5.0.0);
#: before, only the query's method_parameters.ef_search (k-NN 2.16+) reaches Lucene.
MIN_LUCENE_EF_SEARCH_SETTING_VERSION = (3, 5)
#: k-NN refuses new nmslib indexes from 3.0 (#2573: KNNEngine.NMSLIB restricted from Version.V_3_0_0,
#: KNNVectorFieldMapper.validateBlockedKNNEngine).
NMSLIB_BLOCKED_FROM = (3, 0)
#: The data access permissions on a collection for collection-level items. Which of them a search
#: pipeline needs is not documented (unconfirmed: the permission table documents aliases and
#: templates); a missing one fails the deployment within AOSS_PERMISSION_WAIT_SECONDS with a reason
#: that names these and the role (lambda/search_pipeline/handler.py).
PIPELINE_DATA_PERMISSIONS = (
    "aoss:CreateCollectionItems",
    "aoss:UpdateCollectionItems",
    "aoss:DescribeCollectionItems",
    "aoss:DeleteCollectionItems",
)
INDEX_DATA_PERMISSIONS = ("aoss:CreateIndex", "aoss:DescribeIndex", "aoss:UpdateIndex", "aoss:DeleteIndex")
#: The id, under the stack, of the handler every HybridSearchPipeline and domain VectorIndexSettings shares.
SEARCH_HANDLER_ID = "GenaiPacerSearchHandler"
#: How long CloudFormation waits for the handler's answer (AWS::CloudFormation::CustomResource
#: ServiceTimeout, 1..3600 s, default 3600: CloudFormation user guide, crpg-ref). The handler always
#: answers within its own 2-minute timeout; 10 minutes also covers Lambda's two asynchronous retries
#: of an invocation that crashed, instead of the stack waiting an hour.
SERVICE_TIMEOUT = cdk.Duration.minutes(10)
_HANDLER_TIMEOUT = cdk.Duration.minutes(2)
_TARGET_FIX = "pass domain=<an opensearchservice.Domain> or collection=<an opensearchserverless.CfnCollection>, not both"
_VERSION_FIX = "pass engine_version=opensearch.EngineVersion.OPENSEARCH_2_19 (or the string 'OpenSearch_2.19'), the domain's version"


def _check_target(check: Checks, domain: Any, collection: Any) -> None:
    check.instance("domain", domain, opensearch.IDomain, "an opensearchservice.Domain (or Domain.from_domain_endpoint)", optional=True)
    check.instance("collection", collection, aoss.CfnCollection, "an opensearchserverless.CfnCollection", optional=True)
    check.rule((domain is None) != (collection is None), f"exactly one target is needed: {_TARGET_FIX}", id="target.one-of-domain-or-collection")


def _concrete(check: Checks, name: str, value: Any) -> bool:
    """A setting that must be known at synth: the construct checks it against other settings or
    writes it as a JSON key, which a deploy-time token cannot be."""
    return check.rule(
        not is_token(value),
        f"{name} is a deploy-time token ({_token_kind(value)}); {name} decides what the construct checks and writes "
        f"at synth, so pass a literal value",
        id=f"{name}.deploy-time-setting",
    )


def _say(value: Any) -> str:
    """A value for a message: a token by its kind, anything else as _show shows it."""
    return f"<{_token_kind(value)}>" if is_token(value) else _show(value)


def _token_kind(value: Any) -> str:
    """What kind of token a value is, for messages (a number token's own value is a meaningless encoding)."""
    return f"a {token_kind(value) or kind_of(value)} token"


def _integer_prop(check: Checks, name: str, value: Any, **limits: Any) -> bool:
    """check.integer, but a string token (a Ref to a String parameter) is refused: CloudFormation would
    pass text where OpenSearch wants a number. Number tokens (cdk.Token.as_number) stay allowed."""
    if isinstance(value, str) and is_token(value):
        return check.fail(
            f"{name} is a string token; pass an integer or a number token "
            f"(CfnParameter(type='Number').value_as_number, cdk.Token.as_number(...))", id=f"{name}.string-token"
        )
    if value is not None and not isinstance(value, int | float | list | tuple | str) and is_token(value):
        # check.integer skips every unresolved value, a Duration token included, which jsii then refuses
        return check.fail(f"{name} is {_token_kind(value)}; pass an integer or a number token", id=f"{name}.token-kind")
    return check.integer(name, value, **limits)


def _claim(check: Checks, fields: dict[str, str], prop: str, name: str) -> None:
    """One mapping per field: a second prop naming the same field would silently replace the first
    (metadata_fields={'embedding': 'keyword'} would turn the vector field into a keyword)."""
    if name in fields:
        check.fail(f"{prop} names field {name!r}, which {fields[name]} already maps: each field is mapped once; rename one of them", id=f"{prop}.field-mapped-twice")
    else:
        fields[name] = prop


@dataclass(frozen=True)
class _Version:
    """A domain's engine version as CreateDomain spells it ("OpenSearch_2.19", "Elasticsearch_7.10")."""

    text: str

    def before(self, minimum: tuple[int, int]) -> bool:
        """True when this version predates OpenSearch `minimum` (every Elasticsearch version does)."""
        if not self.text.startswith("OpenSearch_"):
            return True
        major, minor = self.text.removeprefix("OpenSearch_").split(".")
        return (int(major), int(minor)) < minimum


def _engine_version(check: Checks, engine_version: Any, domain: Any, collection: Any) -> _Version | None:
    """The domain's version when synth can know it: `engine_version`, else the EngineVersion of a
    domain created in this app (its CfnDomain); None when unknown (imported domain, token, collection).
    The two must agree when both are given."""
    given: str | None = None
    if engine_version is not None:
        text = engine_version.version if isinstance(engine_version, opensearch.EngineVersion) else engine_version
        if collection is not None:
            check.fail(f"engine_version={_say(text)} applies to a managed domain; a Serverless collection's version is AWS's choice: drop it", id="engine_version.with-collection")
        elif not isinstance(text, str):
            check.fail(f"engine_version={_say(engine_version)} is {kind_of(engine_version)}; {_VERSION_FIX}", id="engine_version.type")
        elif not is_token(text):
            if ENGINE_VERSION.match(text):
                given = text
            else:
                check.fail(f"engine_version={text!r} is not an engine version such as 'OpenSearch_2.19'; {_VERSION_FIX}", id="engine_version.format")
    child = domain.node.default_child if isinstance(domain, Construct) else None
    declared = getattr(child, "engine_version", None) if isinstance(child, opensearch.CfnDomain) else None
    from_domain = declared if isinstance(declared, str) and ENGINE_VERSION.match(declared) else None
    if given and from_domain and given != from_domain:
        check.fail(f"engine_version={given!r} differs from the domain's own {from_domain!r}: drop engine_version, "
                   "the construct reads the version of a domain created in this app", id="engine_version.other-than-domain")
    text = given or from_domain
    return _Version(text) if text else None


def _warn_version_unknown(scope: Construct, rule: str, minimum: tuple[int, int], consequence: str) -> None:
    warn(
        scope,
        "engine-version-unknown",
        f"{rule} needs OpenSearch {minimum[0]}.{minimum[1]} or later and the domain's version is unknown at synth "
        f"(an imported domain, a token or a collection); {consequence}. On a domain, {_VERSION_FIX} to check it at synth",
    )


class _SearchHandler(Construct):
    """The stack's one custom resource handler, with the log settings it was created with (by
    `owner`) so a construct asking for other ones is refused instead of silently ignored."""

    def __init__(self, scope: Construct, id: str, *, encryption_key: kms.IKey | None,
                 log_retention: logs.RetentionDays | None, owner: str) -> None:
        super().__init__(scope, id)
        self.encryption_key, self.log_retention, self.owner = encryption_key, log_retention, owner
        self.function = handler_function(
            self,
            "Function",
            handler="search_pipeline.handler.handler",
            environment={},
            timeout=_HANDLER_TIMEOUT,
            encryption_key=encryption_key,
            log_retention=log_retention,
        )


def _existing_handler(scope: Construct) -> _SearchHandler | None:
    found = cdk.Stack.of(scope).node.try_find_child(SEARCH_HANDLER_ID)
    with Checks(type(scope).__name__, scope=scope) as check:
        check.rule(
            found is None or isinstance(found, _SearchHandler),
            f"{cdk.Stack.of(scope).node.path}/{SEARCH_HANDLER_ID} is a {type(found).__name__}, not genai-pacer's search "
            "handler: that id is reserved for the handler HybridSearchPipeline and VectorIndexSettings share; rename your construct",
            id="search_handler.id-taken",
        )
    return cast(_SearchHandler | None, found)


def _check_shared_log_settings(check: Checks, scope: Construct, encryption_key: Any, log_retention: Any) -> None:
    """A construct may name the shared handler's log settings only if they match what it already has:
    the handler and its one log group serve every search construct in the stack."""
    shared = _existing_handler(scope)
    if shared is None:
        return
    same_key = encryption_key is None or (
        shared.encryption_key is not None
        and (encryption_key is shared.encryption_key or getattr(encryption_key, "key_arn", None) == shared.encryption_key.key_arn)
    )
    same_retention = log_retention is None or log_retention == shared.log_retention
    for name, wanted, existing, same in (("encryption_key", encryption_key, shared.encryption_key, same_key),
                                         ("log_retention", log_retention, shared.log_retention, same_retention)):
        check.rule(
            same,
            f"{name}={_show(wanted)} differs from the one the stack's shared search handler got from {shared.owner} "
            f"({'its default' if existing is None else _show(existing)}): every HybridSearchPipeline and domain "
            f"VectorIndexSettings in a stack shares one handler and one log group, so a second setting would be ignored; "
            f"pass the same {name} to {shared.owner} as well, or leave it out here",
            id=f"{name}.differs-from-shared-handler",
        )


def _search_handler(scope: Construct, encryption_key: kms.IKey | None, log_retention: logs.RetentionDays | None) -> lambda_.Function:
    """The stack's shared handler, created by the first construct that needs it."""
    shared = _existing_handler(scope) or _SearchHandler(
        cdk.Stack.of(scope), SEARCH_HANDLER_ID, encryption_key=encryption_key, log_retention=log_retention, owner=scope.node.path
    )
    return shared.function


def _handler_policy(scope: Construct, function: lambda_.Function, statements: list[iam.PolicyStatement]) -> iam.Policy:
    """This construct's grants to the shared handler's role, in a policy of its own: removing the
    construct removes exactly its grants, and its custom resource waits for them."""
    return iam.Policy(scope, "HandlerPolicy", statements=statements, roles=[cast(iam.IRole, function.role)])  # a Function has one


def _policy_name(scope: Construct, prefix: str) -> str:
    """A data access policy name (3..32 lower-case letters, digits and hyphens), unique per construct."""
    return f"{prefix}-{scope.node.addr[:32 - len(prefix) - 1]}"


def _data_access_policy(
    scope: Construct, id: str, *, collection: aoss.CfnCollection, rules: list[dict[str, Any]], principals: Sequence[str], description: str
) -> aoss.CfnAccessPolicy:
    policy = aoss.CfnAccessPolicy(
        scope,
        id,
        name=_policy_name(scope, id.lower()[:8]),
        type="data",
        description=description,
        policy=cdk.Stack.of(scope).to_json_string([{"Rules": rules, "Principal": list(principals)}]),
    )
    policy.node.add_dependency(collection)
    return policy


@constructor_doc
class HybridSearchPipeline(Construct):
    """A search pipeline with a normalization-processor, on a managed domain or a Serverless collection.

    pipeline_name: required; the name a search passes as ?search_pipeline=<name> (letters, digits,
        '.', '_', '-'; up to 128).
    domain / collection: exactly one; the managed domain (OpenSearch 2.10+: the normalization-processor
        first ships there) or the Serverless collection that holds the pipeline.
    weights: one per hybrid sub-query, in sub-query order, each 0..1, summing to 1.0 (within 0.01,
        the tolerance OpenSearch applies).
        Default: (0.5, 0.5): lexical and vector equally, until a relevance test set says otherwise
        (genai_pacer.retrieval.tuning.grid_search_weights).
    normalization: "min_max" (default: bounded 0..1, robust to one query's scale), "l2" or
        "z_score" (only with arithmetic_mean; OpenSearch 3.0+ on a domain, refused for a domain known
        to be older and a warning where its version is unknown; not on Serverless, which offers
        min_max and l2).
    combination: "arithmetic_mean" (default), "geometric_mean" or "harmonic_mean".
    description: stored with the pipeline. Default: says genai-pacer made it and the weight order.
    engine_version (domain only): the domain's version, an opensearch.EngineVersion or its string
        ("OpenSearch_2.19"), so version rules are checked at synth. Default: read from a domain
        created in this app (its CfnDomain); unknown for an imported domain (rules then warn).
    encryption_key / log_retention: for the log group of the stack's shared search handler (see
        the module docstring), set by whichever search construct creates it; another construct may
        repeat the same values or leave them out, and different ones are refused. Default: the
        handler's one KMS key, with rotation, retained on delete ($1 a month while it exists, AWS KMS
        pricing page; docs/security.md, "KMS keys"); one month.

    Access, least privilege: this construct grants the shared handler's role es:ESHttpPut/Get/Delete
    on <domain ARN>/_search/pipeline/<name> only, in its own iam.Policy (`handler_policy`). With fine-grained access control that IAM grant is
    not enough: map `function.role` to an OpenSearch role holding cluster permission
    cluster:admin/search/pipeline/* (PUT _plugins/_security/api/rolesmapping/<role> with
    "backend_roles": [<role ARN>]), once, by an admin. On a collection, a data access policy names
    the handler's role alone, with the collection-item permissions a pipeline needs, and the role
    gets aoss:APIAccessAll on that collection's ARN.

    Attributes: `function` (the stack's shared handler), `handler_policy` (this construct's grants
    to it), `resource` (the CustomResource), `pipeline_name`, `weights`, `definition` (the pipeline
    body sent), `access_policy` (Serverless only).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        pipeline_name: str,
        domain: opensearch.IDomain | None = None,
        collection: aoss.CfnCollection | None = None,
        weights: Sequence[float] = (0.5, 0.5),
        normalization: str = "min_max",
        combination: str = "arithmetic_mean",
        description: str | None = None,
        engine_version: opensearch.EngineVersion | str | None = None,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays | None = None,
    ) -> None:
        super().__init__(scope, id)
        with Checks("HybridSearchPipeline", scope=self) as check:
            if check.text("pipeline_name", pipeline_name, max_length=128) and not is_token(pipeline_name):
                check.rule(
                    bool(_PIPELINE_NAME.match(pipeline_name)),
                    f"pipeline_name={pipeline_name!r} may hold letters, digits, '.', '_' and '-' and must start "
                    "with a letter or digit: it goes in the request path /_search/pipeline/<name>",
                    id="pipeline_name.characters",
                )
            _check_target(check, domain, collection)
            normalization_ok = _concrete(check, "normalization", normalization) and check.one_of(
                "normalization", normalization, NORMALIZATIONS, fix="min_max (the default) suits most hybrid searches"
            )
            combination_ok = _concrete(check, "combination", combination) and check.one_of(
                "combination", combination, COMBINATIONS, fix="arithmetic_mean (the default) is the only one z_score allows"
            )
            if normalization_ok and combination_ok:
                for problem in check_technique(normalization, combination, serverless=collection is not None):
                    check.fail(problem, id="normalization.unsupported-technique")
            version = _engine_version(check, engine_version, domain, collection)
            if version is not None:
                check.rule(not version.before(MIN_PIPELINE_VERSION),
                           f"the domain runs {version.text}: search pipelines with a normalization-processor need "
                           f"OpenSearch {MIN_PIPELINE_VERSION[0]}.{MIN_PIPELINE_VERSION[1]} or later; upgrade the domain", id="domain.version-below-normalization")
            if normalization_ok and normalization == "z_score" and domain is not None:
                if version is None:
                    _warn_version_unknown(self, "normalization='z_score'", MIN_Z_SCORE_VERSION,
                                          "an older domain refuses the pipeline and the deployment rolls back")
                else:
                    check.rule(not version.before(MIN_Z_SCORE_VERSION),
                               f"normalization='z_score' needs OpenSearch {MIN_Z_SCORE_VERSION[0]}.{MIN_Z_SCORE_VERSION[1]} "
                               f"or later and the domain runs {version.text} (which answers \"provided normalization "
                               "technique is not supported\"): use min_max or l2, or upgrade the domain", id="normalization.z-score-version")
            self._check_weights(check, weights)
            check.text("description", description, optional=True, max_length=1024)
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
            _check_shared_log_settings(check, self, encryption_key, log_retention)
        self.pipeline_name = pipeline_name
        self.weights = tuple(float(w) for w in weights)
        combination_block: dict[str, Any] = {"technique": combination, "parameters": {"weights": list(self.weights)}}
        self.definition: dict[str, Any] = {
            "description": description
            or f"genai-pacer hybrid search: {normalization} + {combination}, weights in sub-query order (lexical, vector)",
            "phase_results_processors": [
                {"normalization-processor": {"normalization": {"technique": normalization}, "combination": combination_block}}
            ],
        }
        self.function = _search_handler(self, encryption_key, log_retention)
        self.access_policy: aoss.CfnAccessPolicy | None = None
        stack = cdk.Stack.of(self)
        if domain is not None:
            endpoint, service = domain.domain_endpoint, "es"
            grant = iam.PolicyStatement(
                actions=["es:ESHttpPut", "es:ESHttpGet", "es:ESHttpDelete"],
                resources=[f"{domain.domain_arn}/_search/pipeline/{pipeline_name}"],
            )
        else:
            collection = cast(aoss.CfnCollection, collection)  # one of domain and collection, checked above
            endpoint, service = collection.attr_collection_endpoint, "aoss"
            grant = iam.PolicyStatement(actions=["aoss:APIAccessAll"], resources=[collection.attr_arn])
            self.access_policy = _data_access_policy(
                self,
                "Access",
                collection=collection,
                rules=[{"ResourceType": "collection", "Resource": [f"collection/{collection.name}"],
                        "Permission": list(PIPELINE_DATA_PERMISSIONS)}],
                principals=[self.function.role.role_arn] if self.function.role else [],
                description=f"genai-pacer: lets {self.node.path} manage search pipelines",
            )
        self.handler_policy = _handler_policy(self, self.function, [grant])
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=self.function.function_arn,
            resource_type="Custom::OpenSearchSearchPipeline",
            service_timeout=SERVICE_TIMEOUT,
            properties={
                "Kind": "Pipeline",
                "Endpoint": endpoint,
                "Service": service,
                "Region": stack.region,
                "PipelineName": pipeline_name,
                "Body": stack.to_json_string(self.definition),
            },
        )
        self.resource.node.add_dependency(self.handler_policy)
        if self.access_policy is not None:
            self.resource.node.add_dependency(self.access_policy)

    @staticmethod
    def _check_weights(check: Checks, weights: Any) -> None:
        if isinstance(weights, list | tuple) and any(isinstance(w, str) and is_token(w) for w in weights):
            check.fail(
                f"weights={_show(weights)} holds a string or list token: OpenSearch wants numbers and the sum must be "
                "checked at synth; pass literal weights, or number tokens for some of them "
                "(CfnParameter(type='Number').value_as_number)", id="weights.token"
            )
            return
        if isinstance(weights, str) or not isinstance(weights, list | tuple):
            check.fail(f"weights={_show(weights)} is not a list; pass one weight per sub-query, e.g. (0.3, 0.7) for (lexical, vector)", id="weights.type")
            return
        fix = "one weight per sub-query in hybrid-query order (lexical, vector), each 0..1, summing to 1.0"
        if not 2 <= len(weights) <= MAX_SUBQUERIES:
            check.fail(f"weights has {len(weights)} values; a hybrid query has 2..{MAX_SUBQUERIES} sub-queries: pass {fix}", id="weights.count")
            return
        ok = all([
            check.number(f"weights[{i}]", w, minimum=0, maximum=1, fix=fix) if isinstance(w, int | float)
            else check.fail(f"weights[{i}]={_show(w)} is {kind_of(w)}; pass {fix}", id="weights.item-type")
            for i, w in enumerate(weights)
        ])
        if ok and not any(is_token(w) for w in weights):
            total = math.fsum(weights)
            check.rule(
                weights_sum_to_one(weights),
                f"weights={list(weights)} sum to {total:g}, not 1.0 (OpenSearch allows {WEIGHT_SUM_TOLERANCE:g} either "
                f"way and refuses the pipeline otherwise); scale them to "
                f"sum to 1.0, e.g. {[round(w / total, 4) for w in weights] if total else [0.5, 0.5]}",
                id="weights.sum-not-one",
            )


@constructor_doc
class VectorIndexSettings(Construct):
    """A k-NN index: its vector field's engine, space and HNSW build settings, and ef_search.

    index_name: required; lower-case, starting with a letter (OpenSearch's rule).
    dimension: required; the embedding size, 1..16,000.
    domain / collection: exactly one. A collection's index is an AWS::OpenSearchServerless::Index
        (aws-cdk-lib CfnIndex); a domain's is created by the same custom resource handler as
        HybridSearchPipeline (no CloudFormation resource makes one).
    vector_field: the knn_vector field. Default: "embedding".
    engine: "faiss" (default: efficient filtering on HNSW), "lucene" (efficient filtering) or
        "nmslib" (deprecated upstream, refused by OpenSearch 3.0+ for new indexes, no efficient
        filtering: a filter post-filters).
    space_type: "l2" (default), "cosinesimil" or "innerproduct": match the embedding model.
    m: HNSW links per node, 2..100. Default: 16 (OpenSearch's default).
    ef_construction: candidate list while building, 2..4,096. Default: 100 (OpenSearch's default).
        m and ef_construction are build-time: changing them on an existing index needs a reindex;
        on a domain the handler refuses it ("needs a reindex"); on a collection OpenSearch refuses
        the mapping change at deploy. Use a new index_name, reindex, then move readers.
    ef_search: the candidate list at search time, 2..100,000 (at least the k you query with).
        Default: none (OpenSearch's default: 100 for indexes created on 2.12 and later). Each engine
        reads it from its own place, and the construct writes it there:
        - faiss: the vector field's mapping, method.parameters.ef_search, stored in each HNSW graph
          when it is built. On a domain the index is created with it, and a later change needs a
          reindex (the handler refuses it, as for m). On a collection it is refused: the
          AWS::OpenSearchServerless::Index method parameters hold only M and EfConstruction, and
          faiss never reads the index setting.
        - lucene: the index setting index.knn.algo_param.ef_search, which Lucene reads from
          OpenSearch 3.5 (it explores max(k, ef_search)); refused on a domain known to be older, a
          warning where the version is unknown (an imported domain, a collection).
        - nmslib: the index setting, dynamic: a change applies in place.
        On every engine and target the per-query dial works from OpenSearch 2.16 and overrides the
        index's value: pacer_runtime.retrieval.knn_query(..., ef_search=N) sends
        method_parameters.ef_search (Lucene explores max(k, N)). Tune it with
        retrieval_tuning.tune_ef_search before touching the build-time settings.
    text_field: a text field for the lexical side of hybrid search. Default: "text"; None for none.
    metadata_fields: attribute -> OpenSearch field type for filters: on a domain "keyword",
        "text", "integer", "long", "float", "double", "boolean" or "date"; on a collection only
        "keyword", "text" or "integer" (the AWS::OpenSearchServerless::Index schema). Default: none.
        On a collection every field name (vector_field and text_field too) must match
        [A-Za-z0-9_.-]{1,64}.
    removal_policy: Default: RETAIN (deleting the stack keeps the indexed data). With DESTROY, an
        index on a domain that already existed when the stack created the resource (adopted,
        because its build-time settings matched) is still kept: the stack deletes only indexes it
        created.
    index_managers (collection only): principal ARNs the data access policy lets create and change
        the index: CloudFormation creates a CfnIndex with the deploying role's credentials.
        Default: the CDK bootstrap CloudFormation execution role of this stack's synthesizer.
    engine_version (domain only): the domain's version, as for HybridSearchPipeline. Default: read
        from a domain created in this app; unknown for an imported one.
    encryption_key / log_retention (domain only): for the log group of the stack's shared search
        handler, as for HybridSearchPipeline.

    Access on a domain, in this construct's own iam.Policy on the shared handler's role: it may GET
    <domain ARN>/<index>/_mapping, PUT <index> and <index>/_settings, and DELETE <index> only with
    removal_policy=DESTROY; with fine-grained access control map it to a role with
    indices:admin/create, indices:admin/mapping/get and indices:admin/settings/update (and
    indices:admin/delete for removal) on the index.

    Attributes: `index_name`, `settings` (the build-time and search-time values), `resource` (the
    CfnIndex or CustomResource), `function` (domain only: the stack's shared handler),
    `handler_policy` (domain only: this construct's grants to it), `access_policy` (collection only).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        index_name: str,
        dimension: int,
        domain: opensearch.IDomain | None = None,
        collection: aoss.CfnCollection | None = None,
        vector_field: str = "embedding",
        engine: str = "faiss",
        space_type: str = "l2",
        m: int = 16,
        ef_construction: int = 100,
        ef_search: int | None = None,
        text_field: str | None = "text",
        metadata_fields: Mapping[str, str] | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        index_managers: Sequence[str] | None = None,
        engine_version: opensearch.EngineVersion | str | None = None,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays | None = None,
    ) -> None:
        super().__init__(scope, id)
        with Checks("VectorIndexSettings", scope=self) as check:
            if check.text("index_name", index_name, max_length=255) and not is_token(index_name):
                check.rule(
                    bool(_INDEX_NAME.match(index_name)),
                    f"index_name={index_name!r} must be lower-case letters, digits, '_' and '-', starting with a letter",
                    id="index_name.characters",
                )
            _integer_prop(check, "dimension", dimension, minimum=1, maximum=16_000, fix="the embedding model's output size, e.g. 1024")
            _check_target(check, domain, collection)
            engine_ok = _concrete(check, "engine", engine) and check.one_of("engine", engine, ENGINES)
            _concrete(check, "space_type", space_type) and check.one_of(
                "space_type", space_type, SPACE_TYPES, fix="match the embedding model's similarity"
            )
            _integer_prop(check, "m", m, minimum=2, maximum=100, fix="HNSW links per node; 16 is OpenSearch's default")
            _integer_prop(check, "ef_construction", ef_construction, minimum=2, maximum=4096, fix="100 is OpenSearch's default")
            ef_search_given = _integer_prop(check, "ef_search", ef_search, minimum=2, maximum=100_000, optional=True,
                                            fix="omit it for OpenSearch's default of 100") or (
                isinstance(ef_search, float) and is_token(ef_search))  # a number token: placed like a number
            version = _engine_version(check, engine_version, domain, collection)
            if engine_ok:
                self._check_engine(check, engine, ef_search if ef_search_given else None, collection, version)
            self._check_fields(check, vector_field, text_field, metadata_fields, serverless=collection is not None)
            if check.instance("removal_policy", removal_policy, cdk.RemovalPolicy, "cdk.RemovalPolicy.RETAIN or DESTROY"):
                check.one_of("removal_policy", removal_policy, (cdk.RemovalPolicy.RETAIN, cdk.RemovalPolicy.DESTROY),
                             fix="RETAIN keeps the indexed data; SNAPSHOT does not exist for an index")
            if index_managers is not None:
                self._check_index_managers(check, index_managers, collection)
            if collection is not None:
                for name, value in (("encryption_key", encryption_key), ("log_retention", log_retention)):
                    check.rule(value is None, f"{name} configures the domain handler's log group; a collection's index needs no function: drop it", id=f"{name}.with-collection")
            else:
                key_ok = encryption_key is None or check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key")
                retention_ok = log_retention is None or check.instance(
                    "log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays"
                )
                if key_ok and retention_ok:  # comparing a wrong type with the shared handler's would reach jsii
                    _check_shared_log_settings(check, self, encryption_key, log_retention)
        self.index_name = index_name
        self.settings = {
            "field": vector_field,
            "dimension": dimension,
            "engine": engine,
            "space_type": space_type,
            "m": m,
            "ef_construction": ef_construction,
            "ef_search": ef_search,
        }
        in_mapping = engine in EF_SEARCH_IN_MAPPING and ef_search is not None  # build time: stored in each graph
        in_setting = engine in EF_SEARCH_IN_SETTING and ef_search is not None  # dynamic
        parameters: dict[str, Any] = {"m": m, "ef_construction": ef_construction}
        if in_mapping:
            parameters["ef_search"] = ef_search
        properties: dict[str, Any] = {
            vector_field: {
                "type": "knn_vector",
                "dimension": dimension,
                "method": {"name": "hnsw", "engine": engine, "space_type": space_type, "parameters": parameters},
            }
        }
        if text_field:
            properties[text_field] = {"type": "text"}
        for name, kind in (metadata_fields or {}).items():
            properties[name] = {"type": kind}
        self.function: lambda_.Function | None = None
        self.handler_policy: iam.Policy | None = None
        self.access_policy: aoss.CfnAccessPolicy | None = None
        stack = cdk.Stack.of(self)
        if collection is not None:
            managers = list(index_managers) if index_managers is not None else self._bootstrap_role(stack, self)
            self.access_policy = _data_access_policy(
                self,
                "Access",
                collection=collection,
                rules=[{"ResourceType": "index", "Resource": [f"index/{collection.name}/{index_name}"],
                        "Permission": list(INDEX_DATA_PERMISSIONS)}],
                principals=managers,
                description=f"genai-pacer: lets CloudFormation manage index {index_name}",
            )
            index = aoss.CfnIndex(
                self,
                "Resource",
                collection_endpoint=collection.attr_collection_endpoint,
                index_name=index_name,
                settings=aoss.CfnIndex.IndexSettingsProperty(
                    index=aoss.CfnIndex.IndexProperty(knn=True, knn_algo_param_ef_search=ef_search if in_setting else None)
                ),
                mappings=aoss.CfnIndex.MappingsProperty(properties=self._cfn_properties(properties)),
            )
            index.apply_removal_policy(removal_policy)
            index.node.add_dependency(self.access_policy)
            self.resource: cdk.CfnResource | cdk.CustomResource = index
            return
        domain = cast(opensearch.IDomain, domain)  # one of domain and collection, checked above
        self.function = _search_handler(self, encryption_key, log_retention)
        # Each method only on the path the handler sends it to; DELETE only when the index goes with the stack.
        index_arn = f"{domain.domain_arn}/{index_name}"
        self.handler_policy = _handler_policy(self, self.function, [
            iam.PolicyStatement(actions=actions, resources=paths)
            for actions, paths in (
                (["es:ESHttpGet"], [f"{index_arn}/_mapping"]),
                (["es:ESHttpPut"], [index_arn, f"{index_arn}/_settings"]),
                (["es:ESHttpDelete"], [index_arn] if removal_policy == cdk.RemovalPolicy.DESTROY else []),
            )
            if paths
        ])
        index_settings: dict[str, Any] = {"knn": True}
        if in_setting:
            index_settings["knn.algo_param.ef_search"] = ef_search
        build_time = {k: v for k, v in self.settings.items() if k != "ef_search"}
        if in_mapping:
            build_time["ef_search"] = ef_search
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=self.function.function_arn,
            resource_type="Custom::OpenSearchKnnIndex",
            service_timeout=SERVICE_TIMEOUT,
            removal_policy=cdk.RemovalPolicy.DESTROY,  # the handler keeps the data unless DeleteOnRemoval
            properties={
                "Kind": "Index",
                "Endpoint": domain.domain_endpoint,
                "Service": "es",
                "Region": stack.region,
                "IndexName": index_name,
                "Body": stack.to_json_string({"settings": {"index": index_settings}, "mappings": {"properties": properties}}),
                "BuildTime": stack.to_json_string(build_time),
                # the dynamic index setting only; stringify_number keeps a number token a Ref
                "EfSearch": cdk.Tokenization.stringify_number(ef_search) if ef_search is not None and in_setting else "",
                "DeleteOnRemoval": "true" if removal_policy == cdk.RemovalPolicy.DESTROY else "false",
            },
        )
        self.resource.node.add_dependency(self.handler_policy)

    def _check_engine(self, check: Checks, engine: str, ef_search: Any, collection: Any, version: _Version | None) -> None:
        """Where this engine reads ef_search, and what the domain's version allows."""
        if engine == "nmslib":
            if version is not None:
                check.rule(version.before(NMSLIB_BLOCKED_FROM),
                           f"engine='nmslib' cannot create an index on {version.text}: k-NN refuses new nmslib indexes "
                           f"from OpenSearch {NMSLIB_BLOCKED_FROM[0]}.{NMSLIB_BLOCKED_FROM[1]}; use faiss", id="engine.nmslib-not-creatable")
            warn(
                self,
                "nmslib-post-filters",
                "engine='nmslib' has no efficient k-NN filtering: a filter is applied after the search and a "
                "restrictive one returns fewer than k results; use faiss or lucene",
            )
        if ef_search is None:
            return
        per_query = ("pass ef_search per query instead: pacer_runtime.retrieval.knn_query(..., ef_search=N) sends "
                     "method_parameters.ef_search (OpenSearch 2.16+)")
        if engine == "faiss" and collection is not None:
            check.fail(
                f"ef_search={_say(ef_search)} with engine='faiss' on a collection has nowhere to go: faiss reads ef_search "
                "from the mapping's method parameters, which AWS::OpenSearchServerless::Index limits to M and "
                f"EfConstruction, and never reads the index setting; drop ef_search and {per_query}", id="ef_search.faiss-on-collection"
            )
        elif engine == "lucene":
            rule = "ef_search with engine='lucene' (read as the index setting)"
            if version is None:
                _warn_version_unknown(self, rule, MIN_LUCENE_EF_SEARCH_SETTING_VERSION,
                                      f"an older one ignores the setting and explores k candidates: {per_query}")
            else:
                check.rule(
                    not version.before(MIN_LUCENE_EF_SEARCH_SETTING_VERSION),
                    f"ef_search={_say(ef_search)} with engine='lucene' on {version.text} would be ignored: Lucene reads "
                    f"index.knn.algo_param.ef_search from OpenSearch {MIN_LUCENE_EF_SEARCH_SETTING_VERSION[0]}."
                    f"{MIN_LUCENE_EF_SEARCH_SETTING_VERSION[1]}; drop ef_search and {per_query}",
                    id="ef_search.lucene-ignored",
                )

    @staticmethod
    def _check_fields(check: Checks, vector_field: Any, text_field: Any, metadata_fields: Any, *, serverless: bool) -> None:
        """Each field named once, with a type the target accepts (a collection's schema is narrower)."""
        fields: dict[str, str] = {}  # field name -> the prop that names it

        def name_ok(where: str, name: str) -> bool:
            return not serverless or check.rule(
                bool(SERVERLESS_FIELD_NAME.match(name)),
                f"{where}={name!r}: a collection's field names must match {SERVERLESS_FIELD_NAME.pattern} "
                "(AWS::OpenSearchServerless::Index schema; CloudFormation refuses the index otherwise): rename it",
                id="fields.collection-field-name",
            )

        if _concrete(check, "vector_field", vector_field) and check.text("vector_field", vector_field, max_length=255):
            name_ok("vector_field", vector_field)
            fields[vector_field] = "vector_field"
        if _concrete(check, "text_field", text_field) and check.text("text_field", text_field, optional=True, max_length=255) and text_field:
            name_ok("text_field", text_field)
            _claim(check, fields, "text_field", text_field)
        if metadata_fields is None or not check.instance(
            "metadata_fields", metadata_fields, Mapping, "a dict of field name -> type, e.g. {'tenant': 'keyword'}"
        ):
            return
        types = SERVERLESS_FIELD_TYPES if serverless else DOMAIN_FIELD_TYPES
        choices = tuple(t for t in types if t != "knn_vector")
        fix = ("a collection accepts only these (AWS::OpenSearchServerless::Index schema): keyword for exact-match filters, "
               "integer for ranges (a date as epoch seconds)" if serverless else "keyword for exact-match filters, integer/date for ranges")
        for name, kind in metadata_fields.items():
            where = f"metadata_fields[{name!r}]"
            if not isinstance(name, str) or not name.strip() or is_token(name):
                check.fail(f"{where}: a field name must be a non-empty literal string, not {_show(name)}", id="metadata_fields.field-name")
                continue
            if name.startswith("_"):
                check.fail(f"{where}: names starting with '_' are OpenSearch metadata fields (_id, _source...); rename the attribute", id="metadata_fields.metadata-name")
                continue
            name_ok("metadata_fields key", name)
            _claim(check, fields, where, name)
            _concrete(check, where, kind) and check.one_of(where, kind, choices, fix=fix)

    @staticmethod
    def _check_index_managers(check: Checks, index_managers: Any, collection: Any) -> None:
        check.rule(collection is not None, "index_managers applies to a collection's data access policy; with a domain drop it", id="index_managers.with-domain")
        if isinstance(index_managers, list) and any(isinstance(v, str) and v.startswith("#{Token[") for v in index_managers):
            check.fail(
                "index_managers is a list token (a CommaDelimitedList parameter): the data access policy is a JSON "
                "document the construct writes at synth; pass a list of principal ARNs, each may be a string token "
                "([CfnParameter(...).value_as_string])", id="index_managers.list-token"
            )
        elif check.each("index_managers", index_managers, lambda n, v: check.text(n, v, fix="a principal ARN")):
            check.rule(
                len(index_managers) > 0,
                "index_managers=[] leaves the index's data access policy without a principal, so nobody (not "
                "even CloudFormation) may create the index: omit it for the CDK bootstrap execution role, or "
                "name the role that deploys this stack",
                id="index_managers.empty",
            )

    @staticmethod
    def _bootstrap_role(stack: cdk.Stack, scope: Construct) -> list[str]:
        arn: str = getattr(stack.synthesizer, "cloud_formation_execution_role_arn", None) or ""
        with Checks("VectorIndexSettings", scope=scope) as check:
            check.rule(
                bool(arn),
                f"the stack's synthesizer ({type(stack.synthesizer).__name__}) names no CloudFormation execution role, "
                "so the index's data access policy has no principal: pass index_managers=[<the ARN of the role that "
                "deploys this stack>]",
                id="index_managers.no-execution-role",
            )
        # The synthesizer's ARN holds CloudFormation placeholders meant for Fn::Sub; a policy document
        # needs the values.
        for placeholder, value in (("${AWS::Partition}", stack.partition), ("${AWS::AccountId}", stack.account),
                                   ("${AWS::Region}", stack.region)):
            arn = arn.replace(placeholder, value)
        return [arn]

    @staticmethod
    def _cfn_properties(properties: dict[str, Any]) -> dict[str, aoss.CfnIndex.PropertyMappingProperty]:
        out = {}
        for name, spec in properties.items():
            method = spec.get("method")
            out[name] = aoss.CfnIndex.PropertyMappingProperty(
                type=spec["type"],
                dimension=spec.get("dimension"),
                method=aoss.CfnIndex.MethodProperty(
                    name=method["name"],
                    engine=method["engine"],
                    space_type=method["space_type"],
                    parameters=aoss.CfnIndex.ParametersProperty(
                        m=method["parameters"]["m"], ef_construction=method["parameters"]["ef_construction"]
                    ),
                )
                if method
                else None,
            )
        return out
