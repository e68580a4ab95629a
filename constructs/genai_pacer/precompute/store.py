"""The answer store: one DynamoDB table of generated answers, written ahead of time and read by lookup.

Every writer (the queue worker, scheduled and batch pre-computation, a router's write-back) and
every reader go through `pacer_runtime.answers`, which defines the key rule (`normalize_key`), the
attributes, the write order (an older answer never replaces a newer one) and the claims kept under
their own `claim#` prefix. This construct is the table those functions expect: a string partition
key `pk` and no sort key, a TTL attribute that ages answers out and cleans up abandoned claims.

Lookups are by exact normalized key only. A semantic cache (nearest embedding) would answer
"summarize reviews of product 123" with the stored summary of product 124: the two queries differ
by one entity name and sit close together in embedding space, but their answers must not be shared.

Who may write which keys
    IAM cannot tell one key from another here: dynamodb:LeadingKeys is documented with exact
    partition key values (ForAllValues:StringEquals, e.g. a user id; DynamoDB Developer Guide,
    "Using IAM policy conditions for fine-grained access control", specifying-conditions.html), and
    a prefix pattern (StringLike) is not documented, so no grant relies on it. Each grant is per
    table, and the rules below are kept by the code every writer shares (pacer_runtime.answers) and
    by which grant each construct gets:

    - Readers (`grant_read`): GetItem only; they write nothing.
    - ScheduledPrecompute (`grant_write`): answers under the normalized keys of its item list, with
      request ids "precompute#<execution>" and the run's start (epoch ms) as sequence; its run lock
      under "claim#precompute-run#<state machine>", which it deletes when the run ends.
    - BatchPrecompute's loader: answers under the keys of its job, request ids "batch#<job>:<record>",
      the job's sequence (epoch ms). It deletes nothing, so `grant_put` is enough.
    - QueuedInference's worker (`grant_write`): answers under any key a producer sends (whoever may
      send to the queue may write any answer key), request ids "queue#<requestId>", a sequence no
      later than the message's SentTimestamp + 60 s; per-request claims under "claim#req#<requestId>",
      which it deletes once done.
    - AnswerRouter's write-back (`grant_put`: no DeleteItem): answers under the caller's key,
      request ids "router#<id>", its clock (epoch ms) as sequence; per-key claims under
      "claim#key#<key>", which it overwrites and never deletes.

    For every writer: an answer key never starts with "claim#" (`check_key` refuses it, whatever its
    case), so no answer lands on a claim; a stored answer is replaced only by a newer one (higher
    sequence, then higher request id), and request-id prefixes make the writer kind, not a
    producer-chosen id, decide ties (batch < precompute < queue < router); an item a reader finds
    invalid (`answers.check_item`) is replaced by the next write. What no grant can stop: a holder of
    `grant_put` or `grant_write` calling DynamoDB directly with any key; give those grants only to
    the handlers above.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from constructs import Construct

from .._internal.checks import Checks, Default, in_unit, resolved, seconds_text
from .._internal.docs import constructor_doc
from .._internal.tables import KMS_VIA_SERVICE as KMS_VIA_SERVICE  # its home before _internal.tables
from .._internal.tables import check_existing_table, grant_table_key, table_or_new

__all__ = ["AnswerStore", "DEFAULT_ANSWER_TTL", "PARTITION_KEY", "TTL_ATTRIBUTE"]

#: Kept equal to pacer_runtime.answers (the handlers' side of the schema); a test holds them together.
PARTITION_KEY = "pk"
TTL_ATTRIBUTE = "expires_at"

#: How long an answer lives by default: a month-old summary is stale for most uses.
DEFAULT_ANSWER_TTL = cdk.Duration.days(30)
#: The signature's default, shown by help() as the code that builds it.
_ANSWER_TTL = Default("cdk.Duration.days(30)", lambda: DEFAULT_ANSWER_TTL)

_READ_ACTIONS = ("dynamodb:GetItem",)
#: put_answer (conditional PutItem) and get_answer (GetItem): answers and overwritable per-key claims,
#: never a delete, so a holder cannot remove the worker's claims or the pre-computation's run lock.
_PUT_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem")
#: put_answer, claim (PutItem) and release (DeleteItem), with GetItem.
_WRITE_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem")
#: KMS actions a reader needs on a customer-managed table key: "When you first access an encrypted
#: table, DynamoDB sends a request to AWS KMS to use the CMK to decrypt the table key" (AWS KMS
#: Developer Guide, "How Amazon DynamoDB uses AWS KMS", docs.aws.amazon.com/kms/latest/developerguide/
#: services-dynamodb.html), on behalf of the caller. DescribeKey: what aws-cdk-lib's own
#: Table.grant_read_data grants beside Decrypt.
_KEY_READ_ACTIONS = ("kms:Decrypt", "kms:DescribeKey")
#: A writer's data-plane calls use the same cached table key (Decrypt); GenerateDataKey (not the
#: GenerateDataKey* family, not Encrypt or ReEncrypt*) is added for writes as a margin: no primary
#: source found says a PutItem needs it, and it is harmless under the kms:ViaService condition.
_KEY_WRITE_ACTIONS = ("kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey")


@constructor_doc
class AnswerStore(Construct):
    """The DynamoDB table of generated answers (see `pacer_runtime.answers` for the item schema).

    table: an existing table: string partition key "pk", no sort key (refused otherwise where its
        schema is known; an imported table gets a warning saying what to check). Its TTL attribute,
        if any, should be "expires_at". Default: a new on-demand table with point-in-time recovery,
        TTL on "expires_at", kept when the stack is deleted.
    encryption_key: customer-managed KMS key for a new table. Default: AWS-managed encryption.
    answer_ttl: how long a written answer lives before DynamoDB's TTL removes it (within a few
        days of expiry; readers check freshness themselves). Default: 30 days. None keeps answers
        until they are replaced. A deploy-time value: cdk.Duration.seconds(<number token>), which
        reaches the handlers as a reference; a token in another unit is refused.

    Attributes: `table`, `answer_ttl`. Grants: `grant_read`, `grant_put` (no delete),
    `grant_write`. Handlers receive
    `environment()`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        table: dynamodb.ITable | None = None,
        encryption_key: kms.IKey | None = None,
        answer_ttl: cdk.Duration | Default | None = _ANSWER_TTL,
    ) -> None:
        super().__init__(scope, id)
        with Checks("AnswerStore", scope=self) as check:
            check.instance("table", table, dynamodb.ITable, "a dynamodb.Table or dynamodb.Table.from_table_name(...)", optional=True)
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.rule(
                table is None or encryption_key is None,
                "encryption_key configures a new table, but table is an existing one: encrypt your table yourself",
                id="encryption_key.existing-table",
            )
            ttl: cdk.Duration | None = resolved(answer_ttl)
            check.duration(
                "answer_ttl", ttl, minimum=cdk.Duration.minutes(1), maximum=cdk.Duration.days(3650), optional=True,
                fix="None keeps answers until they are replaced",
            )
            in_unit(check, "answer_ttl", ttl, "seconds", why="the handlers' ANSWER_TTL_SECONDS is")
            check_existing_table(self, check, table, partition_key=PARTITION_KEY, ttl_attribute=TTL_ATTRIBUTE,
                                 purpose="answers are read and written")
        self.answer_ttl = ttl
        self.table = table_or_new(self, table, partition_key=PARTITION_KEY, ttl_attribute=TTL_ATTRIBUTE,
                                  encryption_key=encryption_key, removal_policy=cdk.RemovalPolicy.RETAIN)

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Look answers up by key (GetItem), and decrypt with a customer-managed key."""
        return self._grant(grantee, _READ_ACTIONS, _KEY_READ_ACTIONS)

    def grant_put(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read and write answers, and overwrite per-key claims (GetItem, conditional PutItem), with no
        DeleteItem: for the router, which must not release the worker's claims or a run's lock."""
        return self._grant(grantee, _PUT_ACTIONS, _KEY_WRITE_ACTIONS)

    def grant_write(self, grantee: iam.IGrantable) -> iam.Grant:
        """Write answers, take and release claims (GetItem, conditional PutItem, DeleteItem): for the
        queue worker and the pre-computation, which delete the claims they own."""
        return self._grant(grantee, _WRITE_ACTIONS, _KEY_WRITE_ACTIONS)

    def environment(self) -> dict[str, str]:
        """What a handler needs to use this store: ANSWER_TABLE and ANSWER_TTL_SECONDS ("" = no TTL)."""
        return {"ANSWER_TABLE": self.table.table_name, "ANSWER_TTL_SECONDS": seconds_text(self.answer_ttl)}

    def _grant(self, grantee: iam.IGrantable, actions: tuple[str, ...], key_actions: tuple[str, ...]) -> iam.Grant:
        grant = self.table.grant(grantee, *actions)
        grant_table_key(self.table, grantee, key_actions)
        return grant
