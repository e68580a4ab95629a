"""One model quota, many consumers: the planner (`planning`: reserve-then-settle arithmetic, rate plans,
max_tokens sizing; pure Python, no CDK), `ModelQuota` (every consumer of a model draws a checked share
of one plan at synth), `QuotaLedger` (the shared DynamoDB ledger that turns the shares into floors at
run time) and `quota-check` (`check`: the plan against the account's Service Quotas).
QuotaPacer, the run-time side, is `genai_pacer.runtime.QuotaPacer`. Documentation: docs/quota.md.

The constructs load on first use, so `from genai_pacer.quota import planning` starts no CDK.
"""

from typing import TYPE_CHECKING

from .._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from .ledger import QuotaLedger as QuotaLedger
    from .model_quota import ModelQuota as ModelQuota
    from .model_quota import Share as Share

_LAZY = {"ModelQuota": ".model_quota", "Share": ".model_quota", "QuotaLedger": ".ledger"}
__all__ = ["ModelQuota", "QuotaLedger", "Share", "check", "planning"]


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, ("check", "ledger", "model_quota", "planning"))
