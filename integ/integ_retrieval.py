"""Integration test: a Serverless vector collection with a VectorIndexSettings k-NN index and a
HybridSearchPipeline, deployed, read back, and deleted.

One test case. What the deploy itself verifies: CloudFormation accepts the index (faiss HNSW and
metadata fields; no ef_search: on a collection faiss takes it only per query) and the pipeline's custom resource stores the pipeline (it reads it
back after the PUT and fails the deploy when the stored processors differ). Assertions: the
collection is ACTIVE and of type VECTORSEARCH; GetIndex returns the index's schema, read by the
assertion's own role through a data access policy that names it. The collection is billed per
OCU-hour while it exists (about $0.24 per OCU-hour, at least one OCU for indexing and one for
search): keep the run short.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aws_cdk as cdk  # noqa: E402
from aws_cdk import aws_opensearchserverless as aoss  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest, Match  # noqa: E402
from genai_pacer.retrieval import HybridSearchPipeline, VectorIndexSettings  # noqa: E402

from integ._support import destroy_on_delete, new_app  # noqa: E402

COLLECTION = "genai-pacer-integ"
INDEX = "chunks"
DIMENSION = 16  # small vectors: nothing is embedded, the schema is what is tested


class RetrievalStack(cdk.Stack):
    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        rules = [{"ResourceType": "collection", "Resource": [f"collection/{COLLECTION}"]}]
        encryption = aoss.CfnSecurityPolicy(
            self, "Encryption", name=f"{COLLECTION}-enc", type="encryption",
            policy=cdk.Stack.to_json_string(self, {"Rules": rules, "AWSOwnedKey": True}),
        )
        network = aoss.CfnSecurityPolicy(
            self, "Network", name=f"{COLLECTION}-net", type="network",
            policy=cdk.Stack.to_json_string(self, [{"Rules": rules, "AllowFromPublic": True}]),
        )
        self.collection = aoss.CfnCollection(self, "Collection", name=COLLECTION, type="VECTORSEARCH",
                                             standby_replicas="DISABLED")  # one OCU each for indexing and search
        self.collection.node.add_dependency(encryption, network)
        self.index = VectorIndexSettings(
            self,
            "Index",
            collection=self.collection,
            index_name=INDEX,
            dimension=DIMENSION,
            engine="faiss",
            space_type="l2",
            metadata_fields={"tenant": "keyword", "year": "integer"},
        )
        self.pipeline = HybridSearchPipeline(
            self,
            "Hybrid",
            collection=self.collection,
            pipeline_name="chunks-hybrid",
            normalization="min_max",
            combination="arithmetic_mean",
            weights=(0.3, 0.7),
        )
        self.pipeline.node.add_dependency(self.index)
        destroy_on_delete(self)


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    app = new_app(context, outdir)
    stack = RetrievalStack(app, "IntegRetrieval")
    # An assertion stack of our own, so the data access policy that lets the assertion read the
    # index can name the assertion's role (the test stack cannot refer to it: that would be a cycle).
    assertion_stack = cdk.Stack(app, "RetrievalAssertions")
    integ = IntegTest(
        app, "Retrieval", test_cases=[stack], assertion_stack=assertion_stack, stack_update_workflow=False
    )
    active = integ.assertions.aws_api_call("OpenSearchServerless", "batchGetCollection", {"names": [COLLECTION]}).expect(
        ExpectedResult.object_like(
            {"collectionDetails": [Match.object_like({"name": COLLECTION, "status": "ACTIVE", "type": "VECTORSEARCH"})]}
        )
    )
    index = (
        integ.assertions.aws_api_call("OpenSearchServerless", "getIndex", {"id": stack.collection.attr_id, "indexName": INDEX})
        .expect(ExpectedResult.object_like({"indexSchema": Match.object_like({})}))
        # a new data access policy takes a little while to apply
        .wait_for_assertions(total_timeout=cdk.Duration.minutes(5), interval=cdk.Duration.seconds(20))
    )
    readers = []
    for call in (index,):
        for provider in (call.provider, getattr(call, "waiter_provider", None)):
            if provider is not None:
                provider.add_to_role_policy({"Effect": "Allow", "Action": ["aoss:APIAccessAll"], "Resource": [stack.collection.attr_arn]})
                readers.append(provider.handler_role_arn)
    reader_policy = aoss.CfnAccessPolicy(
        assertion_stack,
        "IndexReaders",
        name=f"{COLLECTION}-readers",
        type="data",
        policy=cdk.Stack.to_json_string(
            assertion_stack,
            [
                {
                    "Rules": [
                        {"ResourceType": "index", "Resource": [f"index/{COLLECTION}/*"], "Permission": ["aoss:DescribeIndex"]}
                    ],
                    "Principal": readers,
                }
            ],
        ),
    )
    index.node.add_dependency(reader_policy)
    active.next(index)
    return app


if __name__ == "__main__":
    build_app().synth()
