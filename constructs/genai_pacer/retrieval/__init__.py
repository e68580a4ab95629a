"""Retrieval tuned by measurement: OpenSearch's hybrid search pipeline and k-NN index settings as
constructs (`opensearch`), and the offline tuning of weights and ef_search (`tuning`). The request
builders a handler uses at run time are `genai_pacer.runtime.retrieval`. Documentation:
docs/retrieval.md.
"""

from . import tuning
from .opensearch import ENGINES, SEARCH_HANDLER_ID, SPACE_TYPES, HybridSearchPipeline, VectorIndexSettings

__all__ = ["ENGINES", "SEARCH_HANDLER_ID", "SPACE_TYPES", "HybridSearchPipeline", "VectorIndexSettings", "tuning"]
