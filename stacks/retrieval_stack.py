"""Retrieval: a Serverless vector collection with a k-NN index and a hybrid search pipeline.

The collection is encrypted (an AWS-owned key unless `retrieval_kms_key_arn` is given), reachable
through its public endpoint with SigV4 only (use a VPC endpoint in production: network policy
`AllowFromPublic: false` with `SourceVPCEs`), and readable only by the principals its data access
policies name. The index uses faiss HNSW (efficient filtering). A collection's faiss index takes no
ef_search (the AWS::OpenSearchServerless::Index method parameters hold only M and EfConstruction):
queries set it themselves (pacer_runtime.retrieval.knn_query(..., ef_search=N)). The pipeline weights
the vector side 70% (lexical first, vector second), a starting point to replace with the weights
genai_pacer.retrieval.tuning.grid_search_weights finds on your relevance test set.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_opensearchserverless as aoss
from genai_pacer.retrieval import HybridSearchPipeline, VectorIndexSettings

from constructs import Construct

#: context key -> (default, meaning); read here because stacks/settings.py belongs to every stack.
RETRIEVAL_DEFAULTS: dict[str, tuple[str, str]] = {
    "retrieval_collection": ("genai-pacer-docs", "the Serverless collection's name (3..32 lower-case characters)"),
    "retrieval_dimension": ("1024", "the embedding size (Titan Text Embeddings V2 default: 1024)"),
    "retrieval_kms_key_arn": ("", "a customer managed KMS key for the collection (default: AWS-owned)"),
}


def _context(scope: Construct, key: str) -> str:
    value = scope.node.try_get_context(key)
    return str(value) if value is not None else RETRIEVAL_DEFAULTS[key][0]


class RetrievalStack(cdk.Stack):
    def __init__(self, scope: Construct, id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        name = _context(self, "retrieval_collection")
        try:
            dimension = int(_context(self, "retrieval_dimension"))
        except ValueError:
            raise ValueError("context retrieval_dimension must be a whole number, e.g. 1024") from None
        key_arn = _context(self, "retrieval_kms_key_arn")
        encryption = aoss.CfnSecurityPolicy(
            self,
            "Encryption",
            name=f"{name[:24]}-enc",
            type="encryption",
            policy=cdk.Stack.to_json_string(self, {
                "Rules": [{"ResourceType": "collection", "Resource": [f"collection/{name}"]}],
                **({"KmsARN": key_arn} if key_arn else {"AWSOwnedKey": True}),
            }),
        )
        network = aoss.CfnSecurityPolicy(
            self,
            "Network",
            name=f"{name[:24]}-net",
            type="network",
            policy=cdk.Stack.to_json_string(self, [{
                "Rules": [{"ResourceType": "collection", "Resource": [f"collection/{name}"]}],
                "AllowFromPublic": True,
            }]),
        )
        self.collection = aoss.CfnCollection(self, "Collection", name=name, type="VECTORSEARCH",
                                             description="genai-pacer reference: chunks for retrieval")
        self.collection.node.add_dependency(encryption, network)
        self.index = VectorIndexSettings(
            self,
            "Index",
            collection=self.collection,
            index_name="chunks",
            dimension=dimension,
            engine="faiss",
            space_type="l2",
            m=16,
            ef_construction=100,
            metadata_fields={"tenant": "keyword", "product_id": "keyword", "year": "integer"},
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
        self.pipeline.resource.node.add_dependency(self.index.resource)  # the pipeline searches the index
        cdk.CfnOutput(self, "CollectionEndpoint", value=self.collection.attr_collection_endpoint)
        cdk.CfnOutput(self, "SearchPipeline", value=self.pipeline.pipeline_name)
