"""Retrieve / RetrieveAndGenerate builders, filters, context budget, OpenSearch bodies and query
preprocessing, checked against botocore's bedrock-agent-runtime model.

botocore's validator checks types, required members and minimums only, so every produced request
is also walked against the model's shapes for maximums, enums and unions (`model_problems`)."""

from __future__ import annotations

import math
import re
from typing import Any

import botocore.session
import pytest
from botocore.stub import Stubber
from botocore.validate import ParamValidator
from pacer_runtime import answers
from pacer_runtime import retrieval as r

SERVICE = botocore.session.get_session().get_service_model("bedrock-agent-runtime")
KB = "ABCDEFGHIJ"
RERANK_ARN = "arn:aws:bedrock:us-west-2::foundation-model/amazon.rerank-v1:0"
MODEL_ARN = "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0"


def model_problems(shape: Any, value: Any, path: str = "$") -> list[str]:
    """Maximums, enums and unions the botocore validator does not check."""
    problems = []
    meta = shape.metadata
    if shape.type_name == "structure":
        if meta.get("document"):
            return problems
        if meta.get("union") and len(value) != 1:
            problems.append(f"{path}: a union takes exactly one member, got {sorted(value)}")
        for key, item in value.items():
            if key in shape.members:
                problems += model_problems(shape.members[key], item, f"{path}.{key}")
    elif shape.type_name == "list":
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{path}: {len(value)} items > max {meta['max']}")
        for i, item in enumerate(value):
            problems += model_problems(shape.member, item, f"{path}[{i}]")
    elif shape.type_name == "string":
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{path}: length {len(value)} > max {meta['max']}")
        if "pattern" in meta and not re.search(meta["pattern"], value):
            problems.append(f"{path}: {value!r} does not match {meta['pattern']}")
        if shape.enum and value not in shape.enum:
            problems.append(f"{path}: {value!r} not in {shape.enum}")
    elif shape.type_name in ("integer", "long") and "max" in meta and value > meta["max"]:
        problems.append(f"{path}: {value} > max {meta['max']}")
    return problems


def assert_valid(operation: str, request: dict) -> None:
    shape = SERVICE.operation_model(operation).input_shape
    report = ParamValidator().validate(request, shape)
    assert not report.has_errors(), report.generate_report()
    assert model_problems(shape, request) == []


def vector_config(operation: str):
    if operation == "Retrieve":
        return SERVICE.operation_model(operation).input_shape.members["retrievalConfiguration"].members["vectorSearchConfiguration"]
    kb = SERVICE.operation_model(operation).input_shape.members["retrieveAndGenerateConfiguration"].members["knowledgeBaseConfiguration"]
    return kb.members["retrievalConfiguration"].members["vectorSearchConfiguration"]


def test_the_builders_limits_are_the_api_models_limits():
    for operation in ("Retrieve", "RetrieveAndGenerate"):
        config = vector_config(operation)
        assert config.members["numberOfResults"].metadata["max"] == r.MAX_RESULTS
        assert tuple(config.members["overrideSearchType"].enum) == r.SEARCH_TYPES
        filt = config.members["filter"]
        assert set(filt.members) == set(r.OPERATORS)
        assert filt.members["andAll"].metadata["min"] == r.MIN_GROUP == filt.members["orAll"].metadata["min"]
        assert filt.members["equals"].members["key"].metadata["max"] == r.MAX_KEY_LENGTH
        implicit = config.members["implicitFilterConfiguration"]
        assert implicit.members["metadataAttributes"].metadata["max"] == r.MAX_IMPLICIT_ATTRIBUTES
        assert tuple(implicit.members["metadataAttributes"].member.members["type"].enum) == r.ATTRIBUTE_TYPES
    retrieve = SERVICE.operation_model("Retrieve").input_shape
    assert retrieve.members["retrievalQuery"].members["text"].metadata["max"] == r.MAX_QUERY_CHARS
    rag = SERVICE.operation_model("RetrieveAndGenerate").input_shape
    assert rag.members["input"].members["text"].metadata["max"] == r.MAX_RAG_INPUT_CHARS


EVERY_FILTER = r.all_of(
    r.equals("year", 2024),
    r.not_equals("draft", True),
    r.greater_than("price", 10),
    r.greater_than_or_equals("rating", 3.5),
    r.less_than("age", 30),
    r.less_than_or_equals("pages", 100),
    r.in_("region", ["eu", "us"]),
    r.not_in("status", ["archived"]),
    r.list_contains("tags", "warranty"),
    r.string_contains("title", "manual"),
    r.starts_with("sku", "AB-"),
    r.any_of(r.equals("tenant", "a"), r.equals("tenant", "b")),
)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"number_of_results": 1},
        {"number_of_results": 100, "search_type": "HYBRID"},
        {"search_type": "SEMANTIC", "filter": EVERY_FILTER},
        {"filter": r.equals("year", 2024), "reranking": r.Reranking(RERANK_ARN, number_of_results=3)},
        {"implicit_filter": r.ImplicitFilter(MODEL_ARN, (r.MetadataAttribute("year", "NUMBER", "Publication year"),))},
        {"reranking": r.Reranking(RERANK_ARN)},
    ],
)
def test_every_retrieve_request_validates_against_the_model(kwargs):
    request = r.build_retrieve_request(KB, "What is the warranty on AB-12?", **kwargs)
    assert_valid("Retrieve", request)
    rag = r.build_retrieve_and_generate_request(KB, "What is the warranty on AB-12?", model_arn=MODEL_ARN, query_decomposition=True, **kwargs)
    assert_valid("RetrieveAndGenerate", rag)


def test_retrieve_request_shape():
    request = r.build_retrieve_request(
        KB, "q", number_of_results=7, search_type="HYBRID", filter=r.equals("year", 2024), reranking=r.Reranking(RERANK_ARN, 3)
    )
    config = request["retrievalConfiguration"]["vectorSearchConfiguration"]
    assert config == {
        "numberOfResults": 7,
        "overrideSearchType": "HYBRID",
        "filter": {"equals": {"key": "year", "value": 2024}},
        "rerankingConfiguration": {
            "type": "BEDROCK_RERANKING_MODEL",
            "bedrockRerankingConfiguration": {"modelConfiguration": {"modelArn": RERANK_ARN}, "numberOfRerankedResults": 3},
        },
    }


def test_query_decomposition_goes_in_orchestration_of_retrieve_and_generate_and_is_refused_on_retrieve():
    rag = r.build_retrieve_and_generate_request(KB, "q", model_arn=MODEL_ARN, query_decomposition=True)
    kb = rag["retrieveAndGenerateConfiguration"]["knowledgeBaseConfiguration"]
    assert kb["orchestrationConfiguration"] == {"queryTransformationConfiguration": {"type": "QUERY_DECOMPOSITION"}}
    assert "orchestrationConfiguration" not in r.build_retrieve_and_generate_request(KB, "q", model_arn=MODEL_ARN)[
        "retrieveAndGenerateConfiguration"]["knowledgeBaseConfiguration"]
    with pytest.raises(r.RetrievalRequestError, match="only RetrieveAndGenerate"):
        r.build_retrieve_request(KB, "q", query_decomposition=True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"number_of_results": 500}, "1 to 100"),
        ({"number_of_results": 0}, "1 to 100"),
        ({"number_of_results": 5.0}, "whole number"),
        ({"number_of_results": True}, "whole number"),
        ({"number_of_results": None}, "whole number"),
        ({"search_type": "hybrid"}, "upper case"),
        ({"search_type": "KEYWORD"}, "'HYBRID' or 'SEMANTIC'"),
        ({"filter": {"equals": {"key": "a", "value": 1}}}, "build one with"),
        ({"reranking": r.Reranking(RERANK_ARN, 10), "number_of_results": 5}, "only 5 are retrieved"),
        ({"reranking": "rerank"}, "pass a Reranking"),
        ({"implicit_filter": {"modelArn": MODEL_ARN}}, "pass an ImplicitFilter"),
    ],
)
def test_bad_retrieve_values_are_refused_with_the_rule(kwargs, message):
    with pytest.raises(r.RetrievalRequestError, match=message):
        r.build_retrieve_request(KB, "q", **kwargs)


def test_the_unchecked_values_the_builder_refuses_would_pass_botocore():
    """Why the builder checks: botocore itself accepts both of these."""
    request = r.build_retrieve_request(KB, "q")
    config = request["retrievalConfiguration"]["vectorSearchConfiguration"]
    config["numberOfResults"], config["overrideSearchType"] = 500, "hybrid"
    shape = SERVICE.operation_model("Retrieve").input_shape
    assert not ParamValidator().validate(request, shape).has_errors()
    assert len(model_problems(shape, request)) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("bad-id", "q"), "10-character"),
        ((KB, ""), "non-empty"),
        ((KB, "x" * 20_001), "at most 20,000"),
        ((KB, None), "non-empty"),
    ],
)
def test_bad_ids_and_queries(args, message):
    with pytest.raises(r.RetrievalRequestError, match=message):
        r.build_retrieve_request(*args)


def test_retrieve_and_generate_input_limit_and_session():
    with pytest.raises(r.RetrievalRequestError, match="at most 1,000"):
        r.build_retrieve_and_generate_request(KB, "x" * 1001, model_arn=MODEL_ARN)
    with pytest.raises(r.RetrievalRequestError, match="session_id"):
        r.build_retrieve_and_generate_request(KB, "q", model_arn=MODEL_ARN, session_id="x")
    with pytest.raises(r.RetrievalRequestError, match="model_arn"):
        r.build_retrieve_and_generate_request(KB, "q", model_arn="")
    assert_valid("RetrieveAndGenerate", r.build_retrieve_and_generate_request(KB, "q", model_arn=MODEL_ARN, session_id="abc"))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: r.all_of(r.equals("a", 1)), "at least 2"),
        (lambda: r.any_of(), "at least 2"),
        (lambda: r.all_of(r.equals("a", 1), {"equals": {}}), "pass a Filter"),
        (lambda: r.equals("", 1), "non-empty metadata attribute"),
        (lambda: r.equals("k" * 101, 1), "at most 100"),
        (lambda: r.equals("a", None), "takes a string"),
        (lambda: r.equals("a", math.nan), "takes a string"),
        (lambda: r.equals("a", [1]), "takes a string"),
        (lambda: r.greater_than("a", "10"), "finite number"),
        (lambda: r.greater_than("a", True), "finite number"),
        (lambda: r.less_than("a", math.inf), "finite number"),
        (lambda: r.in_("a", []), "non-empty list"),
        (lambda: r.in_("a", "eu"), "non-empty list"),
        (lambda: r.not_in("a", [None]), "non-empty list"),
        (lambda: r.list_contains("a", ["x"]), "one list element"),
        (lambda: r.starts_with("a", ""), "non-empty string"),
        (lambda: r.string_contains("a", 3), "non-empty string"),
        (lambda: r.Filter("like", "a", "b"), "not one of"),
    ],
)
def test_bad_filters_are_refused(build, message):
    with pytest.raises(r.RetrievalRequestError, match=message):
        build()


def test_combine_all_never_builds_a_one_member_group():
    assert r.combine_all([]) is None and r.combine_all([None]) is None
    one = r.equals("a", 1)
    assert r.combine_all([one, None]) is one
    assert r.combine_all([one, r.equals("b", 2)]).operator == "andAll"


def test_filters_translate_to_opensearch_clauses():
    assert r.equals("year", 2024).to_opensearch(field_prefix="metadata.") == {"term": {"metadata.year": 2024}}
    assert r.not_in("s", ["x"]).to_opensearch() == {"bool": {"must_not": [{"terms": {"s": ["x"]}}]}}
    assert r.greater_than_or_equals("p", 3).to_opensearch() == {"range": {"p": {"gte": 3}}}
    assert r.starts_with("sku", "AB").to_opensearch() == {"prefix": {"sku": "AB"}}
    assert r.string_contains("t", "a*b").to_opensearch() == {"wildcard": {"t": {"value": "*a\\*b*"}}}
    group = r.any_of(r.equals("t", "a"), r.in_("r", ["eu"])).to_opensearch()
    assert group == {"bool": {"should": [{"term": {"t": "a"}}, {"terms": {"r": ["eu"]}}], "minimum_should_match": 1}}
    assert EVERY_FILTER.to_opensearch()["bool"]["filter"][0] == {"term": {"year": 2024}}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: r.Reranking("amazon.rerank-v1:0"), "foundation-model ARN"),
        (lambda: r.Reranking(RERANK_ARN, 0), "1 to 100"),
        (lambda: r.Reranking(RERANK_ARN, 101), "1 to 100"),
        (lambda: r.MetadataAttribute("k", "string", "d"), "must be one of"),
        (lambda: r.MetadataAttribute("", "STRING", "d"), "1..256"),
        (lambda: r.MetadataAttribute("k", "STRING", ""), "description"),
        (lambda: r.ImplicitFilter(MODEL_ARN, ()), "1..25"),
        (lambda: r.ImplicitFilter(MODEL_ARN, tuple(r.MetadataAttribute(f"k{i}", "STRING", "d") for i in range(26))), "1..25"),
        (lambda: r.ImplicitFilter("nova", (r.MetadataAttribute("k", "STRING", "d"),)), "model ARN"),
        (lambda: r.ImplicitFilter(MODEL_ARN, ("k",)), "MetadataAttribute"),
    ],
)
def test_bad_reranking_and_implicit_filter_values(build, message):
    with pytest.raises(r.RetrievalRequestError, match=message):
        build()


def chunk(text: str, score: float | None) -> dict:
    result: dict = {"content": {"text": text}}
    if score is not None:
        result["score"] = score
    return result


def test_context_budget_keeps_the_best_chunks_that_fit_and_stops_at_the_first_that_does_not():
    results = [chunk("a" * 40, 0.2), chunk("b" * 400, 0.9), chunk("c" * 40, 0.5), chunk("d" * 4, None)]
    budget = r.fit_context(results, max_tokens=115)
    # b (100 tokens) first, then c (10 + 2 separator) = 112; a (10 + 2) would reach 124 > 115
    assert [c["content"]["text"][0] for c in budget.kept] == ["b", "c"]
    assert [c["content"]["text"][0] for c in budget.dropped] == ["a", "d"]
    assert budget.tokens == 112 and budget.text.startswith("b")
    assert [c["content"]["text"][0] for c in r.fit_context(results, max_tokens=10_000, max_chunks=2).kept] == ["b", "c"]
    assert r.fit_context(results, max_tokens=50).kept == ()  # the best chunk alone does not fit: nothing smaller jumps in
    words = r.fit_context(results, max_tokens=3, count_tokens=lambda text: 1, separator_tokens=0)
    assert len(words.kept) == 3
    for bad in (0, -1, 1.5, None, True):
        with pytest.raises(r.RetrievalRequestError, match="max_tokens"):
            r.fit_context(results, max_tokens=bad)


def test_hybrid_query_orders_lexical_then_vector_with_the_filter_inside_knn():
    body = r.hybrid_query(
        text="warranty", text_field="text", vector=[0.1, 0.2], vector_field="embedding", k=5,
        filter=r.equals("tenant", "a"), ef_search=64,
    )
    lexical, vector = body["query"]["hybrid"]["queries"]
    assert r.HYBRID_SUBQUERY_ORDER == ("lexical", "vector")
    assert lexical == {"bool": {"must": [{"match": {"text": {"query": "warranty"}}}], "filter": [{"term": {"tenant": "a"}}]}}
    assert vector == {"knn": {"embedding": {"vector": [0.1, 0.2], "k": 5, "filter": {"term": {"tenant": "a"}},
                                            "method_parameters": {"ef_search": 64}}}}
    assert body["size"] == 5 and body["_source"] == {"excludes": ["embedding"]}
    assert r.post_filtered_knn_paths(body) == []
    plain = r.hybrid_query(text="w", text_field="text", vector=[1.0], vector_field="v")
    assert plain["query"]["hybrid"]["queries"][0] == {"match": {"text": {"query": "w"}}}
    assert "filter" not in plain["query"]["hybrid"]["queries"][1]["knn"]["v"]


def test_a_bool_wrapped_knn_post_filter_is_detected():
    post = {"query": {"bool": {"must": [{"knn": {"v": {"vector": [1.0], "k": 5}}}], "filter": [{"term": {"t": "a"}}]}}}
    assert r.post_filtered_knn_paths(post) == ["query"]
    assert r.post_filtered_knn_paths({"query": {"knn": {"v": {"vector": [1.0], "k": 5}}}, "post_filter": {"term": {"t": "a"}}}) == ["post_filter"]
    assert r.post_filtered_knn_paths(r.knn_query(vector_field="v", vector=[1.0], k=3, filter={"term": {"t": "a"}})) == []


KNN = {"knn": {"v": {"vector": [1.0], "k": 5}}}


@pytest.mark.parametrize(("boolean", "post_filtered"), [
    ({"must": [KNN], "must_not": [{"term": {"t": "a"}}]}, True),  # must_not beside knn: the top k, then the exclusion
    ({"should": KNN, "must_not": {"term": {"t": "a"}}}, True),  # single clauses, not lists
    ({"filter": [KNN], "must_not": [{"term": {"t": "a"}}]}, True),  # knn in filter context is still a top-k search
    ({"filter": [KNN, {"term": {"t": "a"}}]}, True),
    ({"filter": [KNN]}, False),  # knn alone in filter context
    ({"must": [KNN], "must_not": []}, False),  # an empty must_not excludes nothing
    ({"must": [{"match": {"text": "w"}}], "must_not": [{"term": {"t": "a"}}]}, False),  # no knn: not a k-NN search
])
def test_a_clause_excluding_documents_beside_knn_is_post_filtering(boolean, post_filtered):
    assert r.post_filtered_knn_paths({"query": {"bool": boolean}}) == (["query"] if post_filtered else [])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vector": []}, "non-empty list"),
        ({"vector": [math.nan]}, "non-empty list"),
        ({"vector": "0.1"}, "non-empty list"),
        ({"k": 0}, "k=0"),
        ({"ef_search": 2, "k": 5}, "below k"),
        ({"filter": {"term": {}, "range": {}}}, "one OpenSearch query clause"),
        ({"vector_field": ""}, "vector_field"),
    ],
)
def test_bad_knn_values(kwargs, message):
    with pytest.raises(r.RetrievalRequestError, match=message):
        r.knn_query(**{"vector_field": "v", "vector": [1.0], "k": 5, **kwargs})


def test_stated_facts_become_filters_normalized_as_the_answer_store_normalizes():
    extractors = {
        "order_id": lambda q: next((w for w in q.split() if w.upper().startswith("AB-")), None),
        "year": lambda q: 2024 if "2024" in q else None,
        "region": lambda q: [w for w in ("EU", "US") if w in q],
    }
    facts = r.facts_to_filter("Where is order AB-12 from 2024 shipped in EU or US?", extractors)
    assert facts.facts == {"order_id": answers.normalize_key("AB-12"), "year": 2024, "region": ["eu", "us"]}
    assert facts.filter is not None
    assert facts.filter.to_knowledge_base() == {"andAll": [
        {"equals": {"key": "order_id", "value": "ab-12"}},
        {"equals": {"key": "year", "value": 2024}},
        {"in": {"key": "region", "value": ["eu", "us"]}},
    ]}
    assert r.facts_to_filter("nothing stated", extractors).filter is None
    only = r.facts_to_filter("order  AB-12", {"order_id": lambda q: "  Order\tAB-12 "})
    assert only.filter == r.equals("order_id", "order ab-12")
    assert_valid("Retrieve", r.build_retrieve_request(KB, "q", filter=facts.filter))
    with pytest.raises(r.RetrievalRequestError, match="extractors"):
        r.facts_to_filter("q", {"a": "not callable"})


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        ("What is the price of AB-12 and how long is the warranty?", ["What is the price of AB-12?", "how long is the warranty?"]),
        ("Who makes it? Where is it sold?", ["Who makes it?", "Where is it sold?"]),
        ("Compare the AB-12 and the AB-14", ["Compare the AB-12 and the AB-14"]),
        ("price of AB-12; warranty of AB-14", ["price of AB-12", "warranty of AB-14"]),
        ("", []),
    ],
)
def test_compound_questions_split_conservatively(question, parts):
    assert r.split_compound_question(question) == parts


def test_follow_up_rewrite_calls_the_model_only_when_the_question_leans_on_the_conversation():
    import boto3

    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    stubber = Stubber(client)
    stubber.add_response(
        "converse",
        {
            "output": {"message": {"role": "assistant", "content": [{"text": "What is the warranty of the AB-12?"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 50, "outputTokens": 9, "totalTokens": 59},
            "metrics": {"latencyMs": 120},
        },
        {
            "modelId": "amazon.nova-lite-v1:0",
            "system": [{"text": r._REWRITE_SYSTEM}],
            "messages": [{"role": "user", "content": [{"text": "Conversation:\nuser: Tell me about the AB-12\n"
                                                                 "assistant: It is a drill.\n\nLast question: what about its warranty?"}]}],
            "inferenceConfig": {"maxTokens": 200, "temperature": 0},
        },
    )
    history = [("user", "Tell me about the AB-12"), ("assistant", "It is a drill.")]
    with stubber:
        rewrite = r.rewrite_follow_up(client, "amazon.nova-lite-v1:0", history, "what about its warranty?")
        standalone = r.rewrite_follow_up(client, "amazon.nova-lite-v1:0", history, "What is the warranty of the AB-12 drill?")
    stubber.assert_no_pending_responses()
    assert rewrite.rewritten and rewrite.question == "What is the warranty of the AB-12?"
    assert rewrite.elapsed_ms >= 0 and (rewrite.input_tokens, rewrite.output_tokens) == (50, 9)
    assert not standalone.rewritten and standalone.elapsed_ms == 0.0
    with pytest.raises(r.RetrievalRequestError, match="role"):
        r.rewrite_follow_up(client, "m", [("system", "x")], "and it?")


def test_follow_up_rewrite_goes_through_bedrock_converse_against_the_emulator(monkeypatch):
    """The rewrite is an ordinary Converse call: built by build_converse_request, made and measured by
    bedrock.converse, its usage the server-reported one."""
    from genai_pacer.testing import BedrockEmulator
    from pacer_runtime import bedrock

    calls: list[tuple[dict, bedrock.ConverseResult]] = []
    real = bedrock.converse

    def spy(client, request):
        result = real(client, request)
        calls.append((dict(request), result))
        return result

    monkeypatch.setattr(r.bedrock, "converse", spy)
    history = [("user", "Tell me about the AB-12"), ("assistant", "It is a drill.")]
    with BedrockEmulator() as emulator:
        rewrite = r.rewrite_follow_up(emulator.client(), "us.amazon.nova-lite-v1:0", history, "and its warranty?", max_tokens=30)
        served = emulator.invocations
    ((request, result),) = calls
    assert request == bedrock.build_converse_request(
        "us.amazon.nova-lite-v1:0", system=r._REWRITE_SYSTEM, inference_config={"maxTokens": 30, "temperature": 0},
        prompt="Conversation:\nuser: Tell me about the AB-12\nassistant: It is a drill.\n\nLast question: and its warranty?",
    )
    assert rewrite.rewritten and rewrite.question == result.text.strip() and rewrite.elapsed_ms == result.latency_ms
    assert (rewrite.input_tokens, rewrite.output_tokens) == (served[0].input_tokens, served[0].output_tokens)
    assert served[0].max_tokens == 30 and served[0].operation == "Converse" and rewrite.output_tokens > 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"history": [("user",)]}, r"history\[0\] is a list; each turn is one of the \(role, text\) pairs"),
        ({"history": [("user", "a", "b")]}, r"history\[0\] is a list; each turn"),
        ({"history": ["user: hi"]}, r"history\[0\] is a string; each turn"),
        ({"history": [None]}, r"history\[0\] is null; each turn"),
        ({"history": [{"role": "user", "text": "hi"}]}, r"history\[0\] is an object; each turn"),
        ({"history": [("user", "")]}, r"history\[0\] text is an empty string"),
        ({"history": [("user", 3)]}, r"history\[0\] text is the number 3"),
        ({"history": [("system", "x")]}, r"history\[0\] role 'system' must be 'user' or 'assistant'"),
        ({"history": "user: hi"}, "history is a string; pass a list"),
        ({"history": None}, "history is null; pass a list"),
        ({"history": {"user": "hi"}}, "history is an object; pass a list"),
        ({"max_tokens": 0}, "max_tokens=0 must be a positive whole number"),
        ({"max_tokens": -5}, "max_tokens=-5 must be a positive whole number"),
        ({"max_tokens": 2.5}, "max_tokens=2.5 must be a positive whole number"),
        ({"max_tokens": True}, "max_tokens=True must be a positive whole number"),
        ({"max_tokens": None}, "max_tokens=None must be a positive whole number"),
        ({"max_tokens": math.nan}, "max_tokens=nan must be a positive whole number"),
        ({"model_id": ""}, "model_id='' must be the rewriting model's id"),
        ({"model_id": None}, "model_id=None must be the rewriting model's id"),
        ({"model_id": 3}, "model_id=3 must be the rewriting model's id"),
        ({"model_id": "nova lite"}, r"model_id=.nova lite. must be .* \(a string without spaces"),
        ({"model_id": "m" * 2049}, "at most 2,048 characters"),
        ({"always": "yes"}, "always must be True or False, not a string"),
    ],
)
def test_follow_up_rewrite_arguments_fail_with_what_to_pass_before_any_call(call, message):
    """Checked even for a question that needs no rewrite: the bad argument fails on the first
    question, not on the first follow-up in production. A client that must not be called proves
    nothing was sent."""

    class NoCalls:
        def converse(self, **_):
            raise AssertionError("a bad argument must fail before the model call")

    arguments = {"model_id": "us.amazon.nova-lite-v1:0", "history": [("user", "hi")], "max_tokens": 200, "always": False, **call}
    for question in ("What is the warranty of the AB-12 drill?", "and its warranty?"):
        with pytest.raises(r.RetrievalRequestError, match=message):
            r.rewrite_follow_up(NoCalls(), arguments["model_id"], arguments["history"], question,
                                max_tokens=arguments["max_tokens"], always=arguments["always"])


def test_error_wording_comes_from_the_bedrock_module():
    """One description of a bad value and one finiteness test across pacer_runtime's messages."""
    from pacer_runtime import bedrock

    assert r._kind is bedrock._kind and r._is_number is bedrock._is_number


KB_ARN = "arn:aws:bedrock:us-east-1:111122223333:knowledge-base/ABCDEFGHIJ"


def test_patterns_botocore_skips_are_checked_by_the_walk_and_by_the_builders():
    """RetrieveAndGenerate's knowledgeBaseId is the bare 10-character id (Retrieve also takes the ARN)."""
    assert_valid("Retrieve", r.build_retrieve_request(KB_ARN, "q"))
    shape = SERVICE.operation_model("RetrieveAndGenerate").input_shape
    as_arn = r.build_retrieve_and_generate_request(KB, "q", model_arn=MODEL_ARN)
    as_arn["retrieveAndGenerateConfiguration"]["knowledgeBaseConfiguration"]["knowledgeBaseId"] = KB_ARN
    assert not ParamValidator().validate(as_arn, shape).has_errors()  # botocore lets it through
    assert any("knowledgeBaseId" in p for p in model_problems(shape, as_arn))  # the walk does not
    with pytest.raises(r.RetrievalRequestError, match="takes the 10-character id only.*pass 'ABCDEFGHIJ'"):
        r.build_retrieve_and_generate_request(KB_ARN, "q", model_arn=MODEL_ARN)
    assert_valid("RetrieveAndGenerate", r.build_retrieve_and_generate_request(
        KB, "q", model_arn="us.amazon.nova-lite-v1:0", session_id="a1b2-c3:d4"))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: r.build_retrieve_and_generate_request(KB, "q", model_arn="Anthropic.Claude"), "does not match the API's model ARN pattern"),
        (lambda: r.build_retrieve_and_generate_request(KB, "q", model_arn=MODEL_ARN, session_id="has space"), "session_id 'has space'"),
        (lambda: r.build_retrieve_and_generate_request(KB, "q", model_arn=MODEL_ARN, session_id="x"), "2..100-character"),
        (lambda: r.build_retrieve_request(KB, "q", next_token="a b"), "next_token holds whitespace"),
        (lambda: r.build_retrieve_request(KB, "q", query_decomposition=0), "query_decomposition must be True or False, not the number 0"),
        (lambda: r.build_retrieve_request(KB, "q", query_decomposition="yes"), "must be True or False, not a string"),
        (lambda: r.ImplicitFilter("arn:aws:bedrock:us-east-1::foundation-model/Amazon.Nova", (r.MetadataAttribute("year", "NUMBER", "Year"),)), "must be a Bedrock model ARN"),
        (lambda: r.in_("region", ["eu", math.nan]), r"in\('region'\): value\[1\] is the number nan"),
        (lambda: r.not_in("region", ["eu", None]), r"value\[1\] is null"),
    ],
)
def test_values_the_api_would_refuse_at_run_time(build, message):
    with pytest.raises(r.RetrievalRequestError, match=message):
        build()


def test_retrieve_refuses_only_true_query_decomposition_with_the_reason():
    assert "orchestrationConfiguration" not in r.build_retrieve_request(KB, "q", query_decomposition=False)
    with pytest.raises(r.RetrievalRequestError, match="not available on Retrieve"):
        r.build_retrieve_request(KB, "q", query_decomposition=True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"results": "chunk text"}, "results is a string"),
        ({"results": None}, "results is null"),
        ({"results": {"answer": 1}}, "results is an object"),
        ({"results": ["chunk"]}, r"results\[0\] is a string"),
        ({"results": [{"text": "a", "score": "0.9"}]}, r"results\[0\] score is a string"),
        ({"results": [{"text": "a", "score": math.nan}]}, "score is the number nan"),
        ({"separator_tokens": -1}, "separator_tokens=-1"),
        ({"separator_tokens": math.inf}, "separator_tokens=inf"),
        ({"count_tokens": None}, "count_tokens is null"),
        ({"count_tokens": lambda text: "3"}, "count_tokens returned '3'"),
        ({"count_tokens": lambda text: -50}, "count_tokens returned -50"),
    ],
)
def test_bad_context_budget_arguments(kwargs, message):
    args = {"results": [{"content": {"text": "abc"}, "score": 0.5}] * 3, "max_tokens": 100, **kwargs}
    with pytest.raises(r.RetrievalRequestError, match=message):
        r.fit_context(args.pop("results"), **args)


def test_fit_context_takes_the_whole_retrieve_response():
    response = {"retrievalResults": [{"content": {"text": "low"}, "score": 0.1}, {"content": {"text": "high"}, "score": 0.9}]}
    assert [c["content"]["text"] for c in r.fit_context(response, max_tokens=100).kept] == ["high", "low"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source_excludes": "embedding"}, "one field per character"),
        ({"source_excludes": [3]}, "list of field names"),
        ({"field_prefix": None}, "field_prefix must be a string"),
        ({"text_field": ""}, "text_field must name .* not an empty string"),
        ({"vector_field": 7}, "vector_field must name the knn_vector field, not the number 7"),
    ],
)
def test_bad_hybrid_query_arguments(kwargs, message):
    args = {"text": "q", "text_field": "text", "vector": [0.1, 0.2], "vector_field": "embedding", **kwargs}
    with pytest.raises(r.RetrievalRequestError, match=message):
        r.hybrid_query(**args)
    assert r.hybrid_query(text="q", text_field="text", vector=[0.1], vector_field="v", source_excludes=["v", "raw"])["_source"] == {"excludes": ["v", "raw"]}


def test_an_empty_extracted_value_is_not_a_stated_fact():
    facts = r.facts_to_filter("q", {"order_id": lambda q: "  ", "tags": lambda q: ["", "warranty"], "year": lambda q: ""})
    assert facts.facts == {"tags": ["warranty"]} and facts.filter == r.equals("tags", "warranty")
    with pytest.raises(r.RetrievalRequestError, match="extractors key 1"):
        r.facts_to_filter("q", {1: lambda q: "a"})
    with pytest.raises(r.RetrievalRequestError, match="normalize is null"):
        r.facts_to_filter("q", {"a": lambda q: "a"}, normalize=None)


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        ("What is the price, and also the warranty?", ["What is the price, and also the warranty?"]),  # "the warranty?" alone retrieves nothing
        ("What is the price and also how long is the warranty?", ["What is the price?", "how long is the warranty?"]),
        ("What is X? And what is Y?", ["What is X?", "what is Y?"]),
    ],
)
def test_and_also_splits_only_before_a_new_question(question, parts):
    assert r.split_compound_question(question) == parts
