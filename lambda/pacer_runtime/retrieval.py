"""Retrieval requests that find the right chunks quickly: Knowledge Base Retrieve / RetrieveAndGenerate
builders, metadata filters, a context budget, and OpenSearch hybrid and k-NN query bodies.

Fix the query before tuning the index: a filter built from what the user stated narrows the search
to the documents that can answer, which no index setting can do. Then send only the few most
relevant chunks, so the prompt (and TTFT) stays short.

Knowledge Bases (bedrock-agent-runtime)
    `build_retrieve_request` and `build_retrieve_and_generate_request` return keyword arguments for
    `client.retrieve(**req)` / `client.retrieve_and_generate(**req)`. Every limit the API model
    declares (numberOfResults 1-100, the enums HYBRID|SEMANTIC, andAll/orAll with at least two
    members, key lengths) is checked here, because botocore checks only types and minimums and
    Step Functions checks nothing: a wrong value would fail only at run time, in production.

Filters
    `equals("year", 2024)`, `in_("region", ["eu", "us"])`, `all_of(f1, f2)`, `any_of(f1, f2)`... build
    a `Filter`; `.to_knowledge_base()` gives the Retrieve `filter` union and `.to_opensearch()` the
    OpenSearch query DSL clause for the same condition.

OpenSearch
    `hybrid_query` puts the lexical sub-query FIRST and the vector sub-query SECOND
    (`HYBRID_SUBQUERY_ORDER`), so a pipeline's weights [w_lexical, w_vector] apply in that order
    (genai_pacer.HybridSearchPipeline uses the same order). A filter always goes INSIDE the knn
    clause (efficient filtering: k results whenever k documents match); a bool query wrapping knn
    with a filter (post-filtering: the global top k, then the filter, often fewer than k) is never
    produced, and `post_filtered_knn_paths` finds one in a body you wrote yourself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import bedrock
from .answers import normalize_key
from .bedrock import _is_number, _kind  # one wording of a bad value across pacer_runtime's errors

__all__ = [
    "HYBRID_SUBQUERY_ORDER",
    "MAX_RESULTS",
    "SEARCH_TYPES",
    "ContextBudget",
    "Filter",
    "FollowUpRewrite",
    "ImplicitFilter",
    "MetadataAttribute",
    "Reranking",
    "RetrievalRequestError",
    "StatedFacts",
    "all_of",
    "any_of",
    "approximate_tokens",
    "build_retrieve_and_generate_request",
    "build_retrieve_request",
    "combine_all",
    "equals",
    "facts_to_filter",
    "fit_context",
    "greater_than",
    "greater_than_or_equals",
    "hybrid_query",
    "in_",
    "knn_query",
    "less_than",
    "less_than_or_equals",
    "list_contains",
    "needs_rewrite",
    "not_equals",
    "not_in",
    "post_filtered_knn_paths",
    "rewrite_follow_up",
    "split_compound_question",
    "starts_with",
    "string_contains",
]

#: The API model's limits (bedrock-agent-runtime; the tests read them back from botocore's model).
MAX_RESULTS = 100
MIN_GROUP = 2  # andAll / orAll members
MAX_KEY_LENGTH = 100  # a filter attribute key
MAX_QUERY_CHARS = 20_000  # Retrieve retrievalQuery.text
MAX_RAG_INPUT_CHARS = 1_000  # RetrieveAndGenerate input.text
MAX_IMPLICIT_ATTRIBUTES = 25
MAX_ATTRIBUTE_DESCRIPTION = 1_024
MAX_ATTRIBUTE_KEY = 256
SEARCH_TYPES = ("HYBRID", "SEMANTIC")
ATTRIBUTE_TYPES = ("STRING", "NUMBER", "BOOLEAN", "STRING_LIST")
_KB_ID = re.compile(r"^[0-9a-zA-Z]{10}$|^arn:aws(-[^:]+)?:bedrock:[a-z0-9-]{1,20}:[0-9]{12}:knowledge-base/[0-9a-zA-Z]{10}$")
_RERANK_ARN = re.compile(r"^arn:aws(-[^:]+)?:bedrock:[a-z0-9-]{1,20}::foundation-model/.+$")
#: The API model's patterns (BedrockModelArn, SessionId, NextToken): botocore does not check them.
_MODEL_ARN = re.compile(
    r"^(arn:aws(-[^:]+)?:(bedrock|sagemaker):[a-z0-9-]{1,20}:([0-9]{12})?:([a-z-]+/)?)?([a-z0-9.-]{1,63}){0,2}"
    r"(([:][a-z0-9-]{1,63}){0,2})?(/[a-z0-9]{1,12})?$"
)
#: Converse's modelId limit (ConversationalModelId, max 2048).
MAX_MODEL_ID_CHARS = 2_048
_SESSION_ID = re.compile(r"^[0-9a-zA-Z._:-]{2,100}$")
#: Sub-query positions in `hybrid_query`: a pipeline's weights list follows this order.
HYBRID_SUBQUERY_ORDER = ("lexical", "vector")


class RetrievalRequestError(ValueError):
    """A retrieval request that can never succeed as written (the service would reject it, or
    silently do something else)."""


def _whole(name: str, value: Any, minimum: int, maximum: int, why: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise RetrievalRequestError(f"{name}={value!r} must be a whole number from {minimum} to {maximum}: {why}")
    return value


def _text(name: str, value: Any, max_chars: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RetrievalRequestError(f"{name} must be a non-empty string, not {_kind(value)}")
    if len(value) > max_chars:
        raise RetrievalRequestError(
            f"{name} has {len(value):,} characters; the API accepts at most {max_chars:,}: shorten it "
            "(split a compound question, or drop the conversation history the rewrite already folded in)"
        )
    return value


# ---------------------------------------------------------------------------------------------
# Filters

_VALUE_OPERATORS = ("equals", "notEquals")
_NUMBER_OPERATORS = ("greaterThan", "greaterThanOrEquals", "lessThan", "lessThanOrEquals")
_LIST_OPERATORS = ("in", "notIn")
_STRING_OPERATORS = ("stringContains", "startsWith")
_GROUP_OPERATORS = ("andAll", "orAll")
OPERATORS = (*_VALUE_OPERATORS, *_NUMBER_OPERATORS, *_LIST_OPERATORS, "listContains", *_STRING_OPERATORS, *_GROUP_OPERATORS)


@dataclass(frozen=True)
class Filter:
    """One metadata condition (operator, key, value) or a group (andAll/orAll of >= 2 filters).

    Build it with the functions below (`equals`, `in_`, `all_of`...), which check the value types
    each operator accepts: numbers for greaterThan and its siblings, a non-empty list of strings or
    numbers for in/notIn, a string for startsWith/stringContains, a string, number or boolean for
    equals/notEquals, a string or number for listContains.
    """

    operator: str
    key: str | None = None
    value: Any = None
    members: tuple[Filter, ...] = ()

    def __post_init__(self) -> None:
        op = self.operator
        if op not in OPERATORS:
            raise RetrievalRequestError(f"filter operator {op!r} is not one of {', '.join(OPERATORS)}")
        if op in _GROUP_OPERATORS:
            if len(self.members) < MIN_GROUP:
                raise RetrievalRequestError(
                    f"{op} needs at least {MIN_GROUP} filters, got {len(self.members)}: the API refuses a "
                    "one-member group; use the filter itself (combine_all does this for you)"
                )
            for i, member in enumerate(self.members):
                if not isinstance(member, Filter):
                    raise RetrievalRequestError(f"{op}[{i}] is {_kind(member)}; pass a Filter (equals(...), in_(...), ...)")
            return
        if not isinstance(self.key, str) or not self.key.strip():
            raise RetrievalRequestError(f"{op}: key must be a non-empty metadata attribute name, not {_kind(self.key)}")
        if len(self.key) > MAX_KEY_LENGTH:
            raise RetrievalRequestError(f"{op}: key has {len(self.key)} characters; the API allows at most {MAX_KEY_LENGTH}")
        value, where = self.value, f"{op}({self.key!r})"
        if op in _VALUE_OPERATORS:
            ok = isinstance(value, str | bool) or _is_number(value)
            expected = "a string, a finite number or a boolean"
        elif op in _NUMBER_OPERATORS:
            ok, expected = _is_number(value), "a finite number (range operators compare numbers)"
        elif op in _LIST_OPERATORS:
            ok = isinstance(value, list | tuple) and len(value) > 0
            expected = "a non-empty list of strings or numbers"
            if ok:
                for i, member in enumerate(value):
                    if not (isinstance(member, str) or _is_number(member)):
                        raise RetrievalRequestError(f"{where}: value[{i}] is {_kind(member)}; {op} takes {expected}")
        elif op == "listContains":
            ok, expected = isinstance(value, str) or _is_number(value), "a string or a number (one list element)"
        else:
            ok, expected = isinstance(value, str) and bool(value), "a non-empty string"
        if not ok:
            raise RetrievalRequestError(f"{where}: value is {_kind(value)}; {op} takes {expected}")

    def to_knowledge_base(self) -> dict[str, Any]:
        """The Retrieve `filter` union: {"equals": {"key": ..., "value": ...}} or {"andAll": [...]}."""
        if self.operator in _GROUP_OPERATORS:
            return {self.operator: [m.to_knowledge_base() for m in self.members]}
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {self.operator: {"key": self.key, "value": value}}

    def to_opensearch(self, *, field_prefix: str = "") -> dict[str, Any]:
        """The same condition as an OpenSearch query DSL clause, for the `filter` inside a knn clause.

        field_prefix: where the attributes sit in your documents (e.g. "metadata."). Exact-match
        operators expect keyword fields (term on a text field matches analyzed tokens instead).
        """
        op = self.operator
        if op == "andAll":
            return {"bool": {"filter": [m.to_opensearch(field_prefix=field_prefix) for m in self.members]}}
        if op == "orAll":
            return {
                "bool": {
                    "should": [m.to_opensearch(field_prefix=field_prefix) for m in self.members],
                    "minimum_should_match": 1,
                }
            }
        name = f"{field_prefix}{self.key}"
        if op in ("equals", "listContains"):  # term on an array field matches any element
            return {"term": {name: self.value}}
        if op == "notEquals":
            return {"bool": {"must_not": [{"term": {name: self.value}}]}}
        if op in _NUMBER_OPERATORS:
            bound = {"greaterThan": "gt", "greaterThanOrEquals": "gte", "lessThan": "lt", "lessThanOrEquals": "lte"}[op]
            return {"range": {name: {bound: self.value}}}
        if op == "in":
            return {"terms": {name: list(self.value)}}
        if op == "notIn":
            return {"bool": {"must_not": [{"terms": {name: list(self.value)}}]}}
        if op == "startsWith":
            return {"prefix": {name: self.value}}
        escaped = re.sub(r"([*?\\])", r"\\\1", self.value)
        return {"wildcard": {name: {"value": f"*{escaped}*"}}}


def equals(key: str, value: str | float | bool) -> Filter:
    return Filter("equals", key, value)


def not_equals(key: str, value: str | float | bool) -> Filter:
    return Filter("notEquals", key, value)


def greater_than(key: str, value: float) -> Filter:
    return Filter("greaterThan", key, value)


def greater_than_or_equals(key: str, value: float) -> Filter:
    return Filter("greaterThanOrEquals", key, value)


def less_than(key: str, value: float) -> Filter:
    return Filter("lessThan", key, value)


def less_than_or_equals(key: str, value: float) -> Filter:
    return Filter("lessThanOrEquals", key, value)


def in_(key: str, values: Sequence[str | float]) -> Filter:
    return Filter("in", key, tuple(values) if isinstance(values, list | tuple) else values)


def not_in(key: str, values: Sequence[str | float]) -> Filter:
    return Filter("notIn", key, tuple(values) if isinstance(values, list | tuple) else values)


def list_contains(key: str, value: str | float) -> Filter:
    return Filter("listContains", key, value)


def string_contains(key: str, value: str) -> Filter:
    return Filter("stringContains", key, value)


def starts_with(key: str, value: str) -> Filter:
    """Supported by the Knowledge Base only on some vector stores (OpenSearch Serverless among them)."""
    return Filter("startsWith", key, value)


def all_of(*filters: Filter) -> Filter:
    """andAll: every filter must hold (at least two; see combine_all for any number)."""
    return Filter("andAll", members=tuple(filters))


def any_of(*filters: Filter) -> Filter:
    """orAll: at least one filter must hold (at least two)."""
    return Filter("orAll", members=tuple(filters))


def combine_all(filters: Iterable[Filter | None]) -> Filter | None:
    """None for no filter, the filter itself for one, andAll for several (the API refuses a
    one-member andAll, so a variable number of stated facts needs this)."""
    present = [f for f in filters if f is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else all_of(*present)


# ---------------------------------------------------------------------------------------------
# Knowledge Base request parts


@dataclass(frozen=True)
class Reranking:
    """A Bedrock reranking model reorders what the search found (it improves order, not which
    documents are searched). number_of_results: how many reranked results to return (1-100;
    default: all that were retrieved). model_arn: a foundation-model ARN, e.g.
    arn:aws:bedrock:us-west-2::foundation-model/amazon.rerank-v1:0."""

    model_arn: str
    number_of_results: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model_arn, str) or not _RERANK_ARN.match(self.model_arn):
            raise RetrievalRequestError(
                f"Reranking model_arn {self.model_arn!r} must be a foundation-model ARN such as "
                "arn:aws:bedrock:us-west-2::foundation-model/amazon.rerank-v1:0"
            )
        if self.number_of_results is not None:
            _whole("Reranking number_of_results", self.number_of_results, 1, MAX_RESULTS, "the API returns 1..100 reranked results")

    def to_request(self) -> dict[str, Any]:
        config: dict[str, Any] = {"modelConfiguration": {"modelArn": self.model_arn}}
        if self.number_of_results is not None:
            config["numberOfRerankedResults"] = self.number_of_results
        return {"type": "BEDROCK_RERANKING_MODEL", "bedrockRerankingConfiguration": config}


@dataclass(frozen=True)
class MetadataAttribute:
    """A metadata attribute the knowledge base may filter on implicitly: its key, type
    (STRING, NUMBER, BOOLEAN or STRING_LIST) and a description the model reads to decide."""

    key: str
    type: str
    description: str

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip() or len(self.key) > MAX_ATTRIBUTE_KEY:
            raise RetrievalRequestError(f"MetadataAttribute key {self.key!r} must be 1..{MAX_ATTRIBUTE_KEY} characters")
        if self.type not in ATTRIBUTE_TYPES:
            raise RetrievalRequestError(f"MetadataAttribute {self.key!r}: type {self.type!r} must be one of {', '.join(ATTRIBUTE_TYPES)}")
        if not isinstance(self.description, str) or not self.description.strip() or len(self.description) > MAX_ATTRIBUTE_DESCRIPTION:
            raise RetrievalRequestError(
                f"MetadataAttribute {self.key!r}: description must be 1..{MAX_ATTRIBUTE_DESCRIPTION} characters "
                "saying what the attribute holds (the model reads it to derive a filter)"
            )


@dataclass(frozen=True)
class ImplicitFilter:
    """Implicit filtering: the knowledge base asks `model_arn` to derive a filter from the query,
    given the attributes' descriptions (1-25). Use it where the knowledge base supports it; it
    costs a model call per query. Without it, `facts_to_filter` does the same with your extractors."""

    model_arn: str
    attributes: tuple[MetadataAttribute, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.model_arn, str) or not self.model_arn.startswith("arn:") or not _MODEL_ARN.match(self.model_arn):
            raise RetrievalRequestError(
                f"ImplicitFilter model_arn {self.model_arn!r} must be a Bedrock model ARN, e.g. "
                "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0 (the model that derives the filter)"
            )
        attributes = tuple(self.attributes)
        object.__setattr__(self, "attributes", attributes)
        if not 1 <= len(attributes) <= MAX_IMPLICIT_ATTRIBUTES:
            raise RetrievalRequestError(
                f"ImplicitFilter has {len(attributes)} attributes; the API takes 1..{MAX_IMPLICIT_ATTRIBUTES}"
            )
        for attribute in attributes:
            if not isinstance(attribute, MetadataAttribute):
                raise RetrievalRequestError(f"ImplicitFilter attributes must be MetadataAttribute, not {_kind(attribute)}")

    def to_request(self) -> dict[str, Any]:
        return {
            "modelArn": self.model_arn,
            "metadataAttributes": [{"key": a.key, "type": a.type, "description": a.description} for a in self.attributes],
        }


def _vector_search(
    *,
    number_of_results: int,
    search_type: str | None,
    filter: Filter | None,
    implicit_filter: ImplicitFilter | None,
    reranking: Reranking | None,
) -> dict[str, Any]:
    _whole("number_of_results", number_of_results, 1, MAX_RESULTS, "the API returns 1..100 chunks; keep it small so prompts stay short")
    config: dict[str, Any] = {"numberOfResults": number_of_results}
    if search_type is not None:
        if search_type not in SEARCH_TYPES:
            raise RetrievalRequestError(
                f"search_type={search_type!r} must be 'HYBRID' or 'SEMANTIC' (upper case, as the API spells them); "
                "HYBRID works only on vector stores with a filterable text field"
            )
        config["overrideSearchType"] = search_type
    if filter is not None:
        if not isinstance(filter, Filter):
            raise RetrievalRequestError(f"filter is {_kind(filter)}; build one with equals(...), all_of(...) and friends")
        config["filter"] = filter.to_knowledge_base()
    if implicit_filter is not None:
        if not isinstance(implicit_filter, ImplicitFilter):
            raise RetrievalRequestError(f"implicit_filter is {_kind(implicit_filter)}; pass an ImplicitFilter")
        config["implicitFilterConfiguration"] = implicit_filter.to_request()
    if reranking is not None:
        if not isinstance(reranking, Reranking):
            raise RetrievalRequestError(f"reranking is {_kind(reranking)}; pass a Reranking")
        if reranking.number_of_results is not None and reranking.number_of_results > number_of_results:
            raise RetrievalRequestError(
                f"reranking returns {reranking.number_of_results} results but only {number_of_results} are retrieved: "
                "lower Reranking.number_of_results or raise number_of_results"
            )
        config["rerankingConfiguration"] = reranking.to_request()
    return config


def _knowledge_base_id(value: Any, *, arn_allowed: bool = True) -> str:
    if not isinstance(value, str) or not _KB_ID.match(value):
        raise RetrievalRequestError(
            f"knowledge_base_id {value!r} must be a 10-character knowledge base id (letters and digits)"
            + (" or its ARN" if arn_allowed else "")
        )
    if not arn_allowed and value.startswith("arn:"):
        raise RetrievalRequestError(
            f"knowledge_base_id {value!r}: RetrieveAndGenerate takes the 10-character id only (its model allows no "
            f"ARN there, unlike Retrieve); pass {value.rsplit('/', 1)[-1]!r}"
        )
    return value


def build_retrieve_request(
    knowledge_base_id: str,
    query: str,
    *,
    number_of_results: int = 5,
    search_type: str | None = None,
    filter: Filter | None = None,
    implicit_filter: ImplicitFilter | None = None,
    reranking: Reranking | None = None,
    query_decomposition: bool = False,
    next_token: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for bedrock-agent-runtime `retrieve`.

    number_of_results: 1-100 (the API's default is 5). search_type: "HYBRID" or "SEMANTIC"
    (default: the store's choice). query_decomposition=True is refused: Retrieve has no query
    transformation; it exists only in RetrieveAndGenerate's orchestrationConfiguration, so either
    call build_retrieve_and_generate_request, or split the question yourself
    (split_compound_question) and retrieve per part.
    """
    if not isinstance(query_decomposition, bool):
        raise RetrievalRequestError(f"query_decomposition must be True or False, not {_kind(query_decomposition)}")
    if query_decomposition:
        raise RetrievalRequestError(
            "query_decomposition is not available on Retrieve: the API has no queryTransformationConfiguration "
            "there (only RetrieveAndGenerate's orchestrationConfiguration does); use "
            "build_retrieve_and_generate_request(..., query_decomposition=True), or split_compound_question(...) "
            "and one Retrieve per part"
        )
    request: dict[str, Any] = {
        "knowledgeBaseId": _knowledge_base_id(knowledge_base_id),
        "retrievalQuery": {"text": _text("query", query, MAX_QUERY_CHARS)},
        "retrievalConfiguration": {
            "vectorSearchConfiguration": _vector_search(
                number_of_results=number_of_results,
                search_type=search_type,
                filter=filter,
                implicit_filter=implicit_filter,
                reranking=reranking,
            )
        },
    }
    if next_token is not None:
        request["nextToken"] = _text("next_token", next_token, 2048)
        if any(c.isspace() for c in next_token):
            raise RetrievalRequestError("next_token holds whitespace; pass the nextToken a previous Retrieve response returned, unchanged")
    return request


def build_retrieve_and_generate_request(
    knowledge_base_id: str,
    query: str,
    *,
    model_arn: str,
    number_of_results: int = 5,
    search_type: str | None = None,
    filter: Filter | None = None,
    implicit_filter: ImplicitFilter | None = None,
    reranking: Reranking | None = None,
    query_decomposition: bool = False,
    session_id: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for bedrock-agent-runtime `retrieve_and_generate` on a knowledge base.

    query_decomposition=True sets orchestrationConfiguration.queryTransformationConfiguration
    type QUERY_DECOMPOSITION: the knowledge base splits a compound question into sub-queries and
    retrieves for each (one more model call before retrieval).
    """
    if not isinstance(model_arn, str) or not model_arn.strip() or len(model_arn) > 2048:
        raise RetrievalRequestError(f"model_arn must be the generating model's ARN or id, not {_kind(model_arn)}")
    if not _MODEL_ARN.match(model_arn):
        raise RetrievalRequestError(
            f"model_arn {model_arn!r} does not match the API's model ARN pattern (lower-case model ids, e.g. "
            "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0 or an inference profile ARN)"
        )
    if not isinstance(query_decomposition, bool):
        raise RetrievalRequestError(f"query_decomposition must be True or False, not {_kind(query_decomposition)}")
    configuration: dict[str, Any] = {
        "knowledgeBaseId": _knowledge_base_id(knowledge_base_id, arn_allowed=False),
        "modelArn": model_arn,
        "retrievalConfiguration": {
            "vectorSearchConfiguration": _vector_search(
                number_of_results=number_of_results,
                search_type=search_type,
                filter=filter,
                implicit_filter=implicit_filter,
                reranking=reranking,
            )
        },
    }
    if query_decomposition:
        configuration["orchestrationConfiguration"] = {
            "queryTransformationConfiguration": {"type": "QUERY_DECOMPOSITION"}
        }
    request: dict[str, Any] = {
        "input": {"text": _text("query", query, MAX_RAG_INPUT_CHARS)},
        "retrieveAndGenerateConfiguration": {"type": "KNOWLEDGE_BASE", "knowledgeBaseConfiguration": configuration},
    }
    if session_id is not None:
        if not isinstance(session_id, str) or not _SESSION_ID.match(session_id):
            raise RetrievalRequestError(
                f"session_id {session_id!r} must be the 2..100-character id (letters, digits, '.', '_', ':', '-') a "
                "previous RetrieveAndGenerate response returned; omit it to start a new session"
            )
        request["sessionId"] = session_id
    return request


# ---------------------------------------------------------------------------------------------
# Context budget


def approximate_tokens(text: str) -> int:
    """About four characters per token (English prose); pass your tokenizer's count for precision."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


@dataclass(frozen=True)
class ContextBudget:
    """The chunks to send (`kept`, best first), the ones left out, and the tokens the kept ones use."""

    kept: tuple[Mapping[str, Any], ...]
    dropped: tuple[Mapping[str, Any], ...]
    tokens: int
    max_tokens: int

    @property
    def text(self) -> str:
        return "\n\n".join(_chunk_text(c) for c in self.kept)


def _chunk_text(result: Mapping[str, Any]) -> str:
    content = result.get("content", result)
    text = content.get("text") if isinstance(content, Mapping) else content
    return text if isinstance(text, str) else ""


def fit_context(
    results: Iterable[Mapping[str, Any]],
    *,
    max_tokens: int,
    max_chunks: int | None = None,
    count_tokens: Callable[[str], int] = approximate_tokens,
    separator_tokens: int = 2,
) -> ContextBudget:
    """Keep the highest-scoring chunks that fit `max_tokens`, stopping at the first that does not fit.

    results: Retrieve's retrievalResults ({"content": {"text"}, "score", ...}), the whole Retrieve
    response, or any mappings with "text"/"score". Stopping (rather than skipping to a smaller, lower-ranked chunk) keeps the
    prompt a prefix of the ranking, so what the model reads is always the best of what was found.
    Results without a score keep their given order after the scored ones.
    """
    _whole("max_tokens", max_tokens, 1, 10_000_000, "the prompt tokens you allow for retrieved context")
    if max_chunks is not None:
        _whole("max_chunks", max_chunks, 1, 10_000, "the most chunks to send")
    _whole("separator_tokens", separator_tokens, 0, 1_000, "the tokens between two chunks in the prompt")
    if not callable(count_tokens):
        raise RetrievalRequestError(f"count_tokens is {_kind(count_tokens)}; pass a function(text) -> token count, or omit it")
    if isinstance(results, Mapping) and "retrievalResults" in results:
        results = results["retrievalResults"]  # the whole Retrieve response
    if isinstance(results, str | bytes | Mapping) or not isinstance(results, Iterable):
        raise RetrievalRequestError(
            f"results is {_kind(results)}; pass Retrieve's retrievalResults (or the whole response), a list of "
            "{'content': {'text': ...}, 'score': ...}"
        )
    items = list(results)
    for i, result in enumerate(items):
        if not isinstance(result, Mapping):
            raise RetrievalRequestError(f"results[{i}] is {_kind(result)}; each result is a mapping with content.text (or text) and score")
        score = result.get("score")
        if score is not None and not _is_number(score):
            raise RetrievalRequestError(
                f"results[{i}] score is {_kind(score)}; a score must be a finite number (or absent: unscored results "
                "keep their order after the scored ones)"
            )

    def rank(pair: tuple[int, Mapping[str, Any]]) -> tuple[float, int]:
        score = pair[1].get("score")
        return (-float(score) if score is not None else math.inf, pair[0])

    def cost_of(text: str) -> int:
        tokens = count_tokens(text)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise RetrievalRequestError(f"count_tokens returned {tokens!r}; it must return a whole number of tokens, 0 or more")
        return tokens

    ranked = sorted(enumerate(items), key=rank)
    kept: list[Mapping[str, Any]] = []
    dropped: list[Mapping[str, Any]] = []
    used = 0
    full = False
    for _, result in ranked:
        cost = cost_of(_chunk_text(result)) + (separator_tokens if kept else 0)
        if full or used + cost > max_tokens or (max_chunks is not None and len(kept) >= max_chunks):
            full = True
            dropped.append(result)
            continue
        kept.append(result)
        used += cost
    return ContextBudget(tuple(kept), tuple(dropped), used, max_tokens)


# ---------------------------------------------------------------------------------------------
# OpenSearch query bodies


def _vector(name: str, vector: Any) -> list[float]:
    if not isinstance(vector, Sequence) or isinstance(vector, str) or not vector or not all(_is_number(v) for v in vector):
        raise RetrievalRequestError(f"{name} must be a non-empty list of finite numbers (the query embedding)")
    return [float(v) for v in vector]


def _filter_clause(filter: Filter | Mapping[str, Any] | None, field_prefix: str) -> dict[str, Any] | None:
    if filter is None:
        return None
    if isinstance(filter, Filter):
        return filter.to_opensearch(field_prefix=field_prefix)
    if isinstance(filter, Mapping) and len(filter) == 1:
        return dict(filter)
    raise RetrievalRequestError("filter must be a Filter or one OpenSearch query clause such as {'term': {'tenant': 'a'}}")


def knn_query(
    *,
    vector_field: str,
    vector: Sequence[float],
    k: int,
    filter: Filter | Mapping[str, Any] | None = None,
    field_prefix: str = "",
    ef_search: int | None = None,
) -> dict[str, Any]:
    """A knn clause with the filter INSIDE it (efficient filtering, Lucene and Faiss HNSW).

    ef_search sets method_parameters.ef_search for this query (OpenSearch 2.16+), on every engine:
    it overrides faiss's value (which faiss otherwise takes from the graph, set by the mapping's
    method.parameters.ef_search when the index was built) and nmslib's index setting, and Lucene
    explores max(k, ef_search) candidates. Without it: faiss uses the graph's value, nmslib the
    index setting index.knn.algo_param.ef_search, and Lucene max(k, that setting) from OpenSearch 3.5,
    k before (k-NN plugin: IndexHyperParametersUtil.getHNSWEFSearchValue, KNNQueryFactory).
    """
    if not isinstance(vector_field, str) or not vector_field.strip():
        raise RetrievalRequestError(f"vector_field must name the knn_vector field, not {_kind(vector_field)}")
    if not isinstance(field_prefix, str):
        raise RetrievalRequestError(f"field_prefix must be a string such as 'metadata.' (or ''), not {_kind(field_prefix)}")
    _whole("k", k, 1, 10_000, "k nearest neighbours to return")
    clause: dict[str, Any] = {"vector": _vector("vector", vector), "k": k}
    filter_clause = _filter_clause(filter, field_prefix)
    if filter_clause is not None:
        clause["filter"] = filter_clause
    if ef_search is not None:
        _whole("ef_search", ef_search, k, 100_000, "ef_search below k cannot return k neighbours")
        clause["method_parameters"] = {"ef_search": ef_search}
    return {"knn": {vector_field: clause}}


def hybrid_query(
    *,
    text: str,
    text_field: str,
    vector: Sequence[float],
    vector_field: str,
    k: int = 10,
    size: int | None = None,
    filter: Filter | Mapping[str, Any] | None = None,
    field_prefix: str = "",
    ef_search: int | None = None,
    source_excludes: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A search body for a hybrid query: sub-query 0 lexical (match on text_field), sub-query 1
    vector (knn on vector_field), in HYBRID_SUBQUERY_ORDER, so weights [0.4, 0.6] give the vector
    side 60%. Send it with ?search_pipeline=<name>: without a normalization pipeline nothing
    normalizes or weights the two score scales.

    The filter goes inside the knn clause and into the lexical sub-query's bool filter, so both
    sides search only matching documents. The vector embedding field is excluded from _source
    by default (it is large and the caller rarely needs it).
    """
    if not isinstance(text_field, str) or not text_field.strip():
        raise RetrievalRequestError(f"text_field must name the text field the lexical sub-query matches, not {_kind(text_field)}")
    if not isinstance(field_prefix, str):
        raise RetrievalRequestError(f"field_prefix must be a string such as 'metadata.' (or ''), not {_kind(field_prefix)}")
    if source_excludes is not None and (
        isinstance(source_excludes, str) or not isinstance(source_excludes, Sequence)
        or not all(isinstance(f, str) and f.strip() for f in source_excludes)
    ):
        raise RetrievalRequestError(
            f"source_excludes must be a list of field names, e.g. ['{vector_field}'], not {_kind(source_excludes)} "
            "(a bare string would be read as one field per character)"
        )
    _text("text", text, 100_000)
    filter_clause = _filter_clause(filter, field_prefix)
    lexical: dict[str, Any] = {"match": {text_field: {"query": text}}}
    if filter_clause is not None:
        lexical = {"bool": {"must": [lexical], "filter": [filter_clause]}}
    vector_clause = knn_query(
        vector_field=vector_field, vector=vector, k=k, filter=filter, field_prefix=field_prefix, ef_search=ef_search
    )
    body: dict[str, Any] = {
        "size": k if size is None else _whole("size", size, 1, 10_000, "hits to return"),
        "query": {"hybrid": {"queries": [lexical, vector_clause]}},
        "_source": {"excludes": list(source_excludes) if source_excludes is not None else [vector_field]},
    }
    return body


def post_filtered_knn_paths(body: Any, path: str = "") -> list[str]:
    """Where `body` post-filters a k-NN search: a bool query holding a knn clause (in must, should or
    filter) beside a filter clause or a must_not clause. OpenSearch then takes the global top k and
    drops those the other clause excludes, so a restrictive one returns fewer than k. Empty when
    every filter sits inside its knn clause."""
    found: list[str] = []
    if isinstance(body, Mapping):
        boolean = body.get("bool")
        if isinstance(boolean, Mapping):
            clauses = {part: _clauses(boolean.get(part)) for part in ("must", "should", "filter", "must_not")}
            holds_knn = any(_contains_knn(c) for part in ("must", "should", "filter") for c in clauses[part])
            excludes = clauses["must_not"] + [c for c in clauses["filter"] if not _contains_knn(c)]
            if holds_knn and excludes:
                found.append(path or "$")
        for key, value in body.items():
            found.extend(post_filtered_knn_paths(value, f"{path}.{key}" if path else str(key)))
    elif isinstance(body, list):
        for i, value in enumerate(body):
            found.extend(post_filtered_knn_paths(value, f"{path}[{i}]"))
    if isinstance(body, Mapping) and "post_filter" in body and _contains_knn(body.get("query")):
        found.append(f"{path}.post_filter" if path else "post_filter")
    return found


def _clauses(value: Any) -> list[Any]:
    """A bool part as a list of its clauses (OpenSearch takes one clause or a list)."""
    if isinstance(value, list):
        return [c for c in value if c]
    return [value] if value else []


def _contains_knn(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "knn" in value or any(_contains_knn(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_knn(v) for v in value)
    return False


# ---------------------------------------------------------------------------------------------
# Query preprocessing


@dataclass(frozen=True)
class StatedFacts:
    """What the user stated (attribute -> normalized value) and the filter built from it."""

    facts: Mapping[str, Any]
    filter: Filter | None


Extractor = Callable[[str], Any]


def facts_to_filter(
    question: str,
    extractors: Mapping[str, Extractor],
    *,
    normalize: Callable[[str], str] = normalize_key,
) -> StatedFacts:
    """Turn facts the question states into a metadata filter, with your extractors.

    extractors: attribute key -> function(question) returning the stated value, a list of values
    (any of them), or None (or an empty string) when the question states nothing for that attribute. Strings are
    normalized with the answer store's identifier rule (answers.normalize_key: NFC, whitespace
    collapsed, case-folded), so "Order  AB-12" and "order ab-12" filter the same: store the
    attribute values normalized the same way when you ingest. Numbers and booleans pass unchanged.
    One fact gives `equals`, a list `in`, several facts `andAll`.
    """
    if not isinstance(question, str):
        raise RetrievalRequestError(f"question must be a string, not {_kind(question)}")
    if not isinstance(extractors, Mapping) or not all(callable(f) for f in extractors.values()):
        raise RetrievalRequestError("extractors must map attribute keys to functions(question) -> value | list | None")
    facts: dict[str, Any] = {}
    filters: list[Filter] = []
    if not callable(normalize):
        raise RetrievalRequestError(f"normalize is {_kind(normalize)}; pass a function(str) -> str, or omit it for answers.normalize_key")
    for key, extract in extractors.items():
        if not isinstance(key, str) or not key.strip():
            raise RetrievalRequestError(f"extractors key {key!r} must be the metadata attribute name the filter compares")
        value = extract(question)
        if isinstance(value, list | tuple | set):
            value = [v for v in value if not (isinstance(v, str) and not v.strip())]
        if value is None or (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value):
            continue  # nothing stated: an empty string is no more a fact than None
        if isinstance(value, list):
            values = list(dict.fromkeys(normalize(v) if isinstance(v, str) else v for v in value))
            facts[key] = values
            filters.append(equals(key, values[0]) if len(values) == 1 else in_(key, values))
        else:
            normalized = normalize(value) if isinstance(value, str) else value
            facts[key] = normalized
            filters.append(equals(key, normalized))
    return StatedFacts(facts, combine_all(filters))


_QUESTION_END = re.compile(r"(?<=\?)\s+")
_JOINED = re.compile(
    r"\s*(?:;|,?\s+and\s+(?:also\s+)?(?=(?:what|which|who|whom|whose|when|where|why|how|is|are|can|does|do|did)\b))\s*",
    re.IGNORECASE,
)


_LEADING_AND = re.compile(r"^(?:and|also|and also)\s+(?=\S)", re.IGNORECASE)


def split_compound_question(question: str) -> list[str]:
    """Split a compound question into its parts, conservatively: at question marks followed by
    more text, at semicolons, and at "and" / "and also" followed by a question word ("...price
    and how long is the warranty?"); "...price, and also the warranty?" stays whole, since "the
    warranty?" alone would retrieve nothing useful. "Compare A and B" stays whole: it is one question about two
    things, and a filter or retrieval per part would lose the comparison.
    """
    if not isinstance(question, str):
        raise RetrievalRequestError(f"question must be a string, not {_kind(question)}")
    parts: list[str] = []
    for sentence in _QUESTION_END.split(question.strip()):
        for piece in _JOINED.split(sentence):
            piece = _LEADING_AND.sub("", piece.strip(" ,"))
            if piece:
                parts.append(piece if piece.endswith("?") or not sentence.endswith("?") else piece + "?")
    return parts or ([question.strip()] if question.strip() else [])


_REFERRING = re.compile(
    r"\b(it|its|it's|they|them|their|that|those|this|these|he|she|him|her|the same|one|ones|there)\b", re.IGNORECASE
)


def needs_rewrite(question: str) -> bool:
    """True when a follow-up leans on the conversation ("what about its warranty?"): it holds a
    referring word, or is a fragment (three words or fewer). Such a query retrieves poorly alone."""
    words = question.split()
    return bool(_REFERRING.search(question)) or len(words) <= 3


@dataclass(frozen=True)
class FollowUpRewrite:
    """The standalone question, whether a model call was made, and what it cost in time."""

    question: str
    rewritten: bool
    elapsed_ms: float
    input_tokens: int = 0
    output_tokens: int = 0


_REWRITE_SYSTEM = (
    "Rewrite the user's last question as one standalone question that needs no conversation to be "
    "understood. Keep every identifier, number and name exactly as written. Reply with the question only."
)


def rewrite_follow_up(
    client: Any,
    model_id: str,
    history: Sequence[tuple[str, str]],
    question: str,
    *,
    max_tokens: int = 200,
    always: bool = False,
) -> FollowUpRewrite:
    """Rewrite a context-dependent follow-up into a standalone question with one Converse call.

    history: (role, text) pairs, oldest first, role "user" or "assistant". The call is made only
    when needs_rewrite(question) (or always=True), because it adds a model round trip before
    retrieval; elapsed_ms measures it so you can see what the rewrite costs against what it saves.
    Every argument is checked even when no call is needed, so a bad one fails on the first
    question, not on the first follow-up. The call goes through bedrock.converse, so its usage and
    latency are read the way every other call in pacer_runtime reads them.
    """
    _text("question", question, MAX_QUERY_CHARS)
    if not isinstance(model_id, str) or not model_id.strip() or len(model_id) > MAX_MODEL_ID_CHARS or any(c.isspace() for c in model_id):
        raise RetrievalRequestError(
            f"model_id={model_id!r} must be the rewriting model's id, inference profile id or ARN (a string without "
            f"spaces, at most {MAX_MODEL_ID_CHARS:,} characters), e.g. 'us.amazon.nova-lite-v1:0'"
        )
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RetrievalRequestError(
            f"max_tokens={max_tokens!r} must be a positive whole number: it caps the rewritten question, and the "
            "quota reserves it for the call (200 fits any single question)"
        )
    if not isinstance(always, bool):
        raise RetrievalRequestError(f"always must be True or False, not {_kind(always)}")
    pair = "(role, text) pairs such as ('user', 'Tell me about the AB-12'), role 'user' or 'assistant'"
    if isinstance(history, str | bytes | Mapping) or not isinstance(history, Sequence):
        raise RetrievalRequestError(f"history is {_kind(history)}; pass a list of {pair}, oldest first ([] for none)")
    lines = []
    for i, item in enumerate(history):
        if isinstance(item, str | bytes) or not isinstance(item, Sequence) or len(item) != 2:
            raise RetrievalRequestError(f"history[{i}] is {_kind(item)}; each turn is one of the {pair}")
        role, text = item
        if role not in ("user", "assistant"):
            raise RetrievalRequestError(f"history[{i}] role {role!r} must be 'user' or 'assistant'")
        if not isinstance(text, str) or not text.strip():
            raise RetrievalRequestError(f"history[{i}] text is {_kind(text)}; each turn needs what was said, a non-empty string")
        lines.append(f"{role}: {text}")
    if not always and not needs_rewrite(question):
        return FollowUpRewrite(question, False, 0.0)
    prompt = "Conversation:\n" + "\n".join(lines) + f"\n\nLast question: {question}"
    request = bedrock.build_converse_request(
        model_id, prompt=prompt, system=_REWRITE_SYSTEM, inference_config={"maxTokens": max_tokens, "temperature": 0}
    )
    result = bedrock.converse(client, request)
    text = result.text.strip()
    return FollowUpRewrite(text or question, bool(text), result.latency_ms, result.input_tokens, result.output_tokens)
