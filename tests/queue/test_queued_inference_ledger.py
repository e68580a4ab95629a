"""QueuedInference(ledger=...): the worker's grants and variables on the quota's shared ledger, its
floor from the share it holds, and every prop combination refused by name (issue 25)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from genai_pacer import BedrockModel, ModelQuota, QueuedInference, QuotaLedger
from genai_pacer.queue.inference import LEDGER_SECONDS, PROCESSES_VARIABLE, QUEUE_URL_VARIABLE, STORE_SECONDS
from genai_pacer.quota.ledger import LEDGER_ENVIRONMENT, LEDGER_KEY_PREFIX
from genai_pacer.quota.model_quota import PACER_ENVIRONMENT
from helpers import new_stack, only, policy_statements, refused, resources, template_of

MODEL = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
TABLE, LEDGER_ID, CONSUMER, QUOTA_TPM, FLOOR_TPM, BURST_TPM, SKEW, DAILY = LEDGER_ENVIRONMENT


def quota(stack: cdk.Stack, model: BedrockModel = MODEL) -> ModelQuota:
    return ModelQuota(stack, "Quota", model=model, tpm_quota=400_000, burndown=5)


def profile(q: ModelQuota):
    return q.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)


def worker_env(stack: cdk.Stack) -> dict:
    return only(template_of(stack), "AWS::Lambda::Function")["Properties"]["Environment"]["Variables"]


def test_a_worker_holding_a_share_takes_part_with_the_share_as_its_floor():
    stack = new_stack()
    q = quota(stack)
    ledger = QuotaLedger(stack, "Ledger", quota=q)
    plan = q.share("Reviews", profile(q), fraction=0.5, call_seconds=6)
    worker = QueuedInference(stack, "Queued", model=MODEL, max_concurrency=plan, max_output_tokens=440, ledger=ledger)
    env = worker_env(stack)
    table_id = next(iter(resources(template_of(stack), "AWS::DynamoDB::Table")))
    queue_id = next(k for k, v in resources(template_of(stack), "AWS::SQS::Queue").items() if "RedrivePolicy" in v["Properties"])
    assert {name: env[name] for name in LEDGER_ENVIRONMENT} == {
        TABLE: {"Ref": table_id}, LEDGER_ID: MODEL.model_id, CONSUMER: "Reviews", QUOTA_TPM: "400000",
        FLOOR_TPM: "200000", BURST_TPM: "400000", SKEW: "1", DAILY: str(400_000 * 1_440),
    }
    assert env[PACER_ENVIRONMENT[2]] == "5"  # the burndown the settlement multiplies output by
    assert env[QUEUE_URL_VARIABLE] == {"Ref": queue_id}
    assert env[PROCESSES_VARIABLE] == str(plan.max_concurrency)
    assert (worker.ledger, worker.ledger_consumer, worker.ledger_floor_tpm) == (ledger, "Reviews", 200_000)


def test_the_worker_may_update_and_read_its_quotas_item_only_and_send_to_its_own_queue():
    stack = new_stack()
    q = quota(stack)
    ledger = QuotaLedger(stack, "Ledger", quota=q)
    QueuedInference(stack, "Queued", model=MODEL, max_concurrency=4, ledger=ledger)
    template = template_of(stack).to_json()
    table_id = next(iter(resources(template, "AWS::DynamoDB::Table")))
    queue_id = next(k for k, v in resources(template, "AWS::SQS::Queue").items() if "RedrivePolicy" in v["Properties"])
    on_ledger = [s for s in policy_statements(template) if table_id in str(s["Resource"])]
    assert on_ledger == [{
        "Action": ["dynamodb:UpdateItem", "dynamodb:GetItem"],
        "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [LEDGER_KEY_PREFIX + MODEL.model_id]}},
        "Effect": "Allow",
        "Resource": {"Fn::GetAtt": [table_id, "Arn"]},
    }]
    sends = [s for s in policy_statements(template) if "sqs:SendMessage" in str(s["Action"])]
    assert [s["Resource"] for s in sends] == [{"Fn::GetAtt": [queue_id, "Arn"]}]
    assert not [s for s in policy_statements(template) if "kms:" in str(s["Action"])]  # AWS-managed table and queue


def test_a_customer_managed_ledger_key_is_granted_through_dynamodb_only():
    stack = new_stack()
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack), encryption_key=key)
    QueuedInference(stack, "Queued", model=MODEL, max_concurrency=4, ledger=ledger)
    key_id = next(iter(resources(template_of(stack), "AWS::KMS::Key")))
    (on_key,) = [s for s in policy_statements(template_of(stack)) if key_id in str(s["Resource"])]
    assert sorted(on_key["Action"]) == ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
    assert on_key["Condition"] == {"StringEquals": {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}}


def test_a_share_drawn_under_the_construct_id_is_held_by_name():
    stack = new_stack()
    q = quota(stack)
    q.share("Queued", profile(q), tpm=100_000, call_seconds=6)
    worker = QueuedInference(stack, "Queued", model=MODEL, max_concurrency=4, ledger=QuotaLedger(stack, "L", quota=q))
    assert (worker.ledger_consumer, worker.ledger_floor_tpm) == ("Queued", 100_000)
    assert worker_env(stack)[FLOOR_TPM] == "100000"


def test_a_worker_without_a_share_only_borrows_under_a_name_unique_in_the_app():
    stack = new_stack()
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack))
    first = QueuedInference(stack, "Queued", model=MODEL, max_concurrency=4, ledger=ledger)
    scope = cdk.Stack(stack.node.root, "Other", env=stack.environment and cdk.Environment(account="111122223333", region="us-east-1"))
    second = QueuedInference(scope, "Queued", model=MODEL, max_concurrency=4, ledger=ledger)
    assert first.ledger_floor_tpm == second.ledger_floor_tpm == 0
    assert first.ledger_consumer != second.ledger_consumer
    for name in (first.ledger_consumer, second.ledger_consumer):
        assert name and "#" not in name and len(name) <= 80
    assert worker_env(stack)[FLOOR_TPM] == "0"


def test_the_ledger_work_joins_each_messages_time_budget():
    stack = new_stack()
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack))
    plain = QueuedInference(stack, "Plain", model=MODEL, max_concurrency=4, max_output_tokens=440)
    shared = QueuedInference(stack, "Shared", model=MODEL, max_concurrency=4, max_output_tokens=440, ledger=ledger)
    budget = plain.call_budget_seconds
    assert plain.timeout.to_seconds() == 5 * (budget + STORE_SECONDS) + 3
    assert shared.timeout.to_seconds() == 5 * (budget + STORE_SECONDS + LEDGER_SECONDS) + 3


def test_a_deploy_time_cap_reaches_the_worker_as_it_is():
    stack = new_stack()
    cap = cdk.CfnParameter(stack, "Cap", type="Number", default=4)
    QueuedInference(stack, "Queued", model=MODEL, max_concurrency=cap.value_as_number, timeout=cdk.Duration.minutes(5),
                    ledger=QuotaLedger(stack, "Ledger", quota=quota(stack)))
    env = worker_env(stack)
    assert env[PROCESSES_VARIABLE] == {"Ref": "Cap"}
    mapping = only(template_of(stack), "AWS::Lambda::EventSourceMapping")["Properties"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "Cap"}}


def test_a_deploy_time_model_id_is_not_compared():
    stack = new_stack()
    model_id = cdk.CfnParameter(stack, "ModelId", type="String", default=MODEL.model_id)
    model = BedrockModel.foundation(model_id.value_as_string)
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack))  # the quota's own id is known
    QueuedInference(stack, "Queued", model=model, max_concurrency=4, ledger=ledger)
    assert worker_env(stack)[LEDGER_ID] == MODEL.model_id


def test_a_ledger_of_another_models_quota_is_refused():
    stack = new_stack()
    other = QuotaLedger(stack, "Ledger", quota=quota(stack, BedrockModel.from_id("us.amazon.nova-lite-v1:0")))
    (problem,) = refused(lambda: QueuedInference(stack, "Queued", model=MODEL, max_concurrency=4, ledger=other))
    assert problem.startswith("ledger=QuotaLedger Ledger keeps the quota of model 'us.amazon.nova-lite-v1:0'")
    assert MODEL.model_id in problem


def test_a_ledger_that_is_not_a_quota_ledger_is_refused():
    stack = new_stack()
    (problem,) = refused(lambda: QueuedInference(stack, "Queued", model=MODEL, max_concurrency=4, ledger="ledger"))
    assert "ledger" in problem and "QuotaLedger" in problem


def test_a_fifo_queue_is_refused_with_a_ledger():
    stack = new_stack()
    dlq = sqs.Queue(stack, "Dlq", fifo=True, enforce_ssl=True)
    fifo = sqs.Queue(stack, "Fifo", fifo=True, enforce_ssl=True, visibility_timeout=cdk.Duration.hours(1),
                     dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=3))
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack))
    (problem,) = refused(lambda: QueuedInference(stack, "Queued", model=MODEL, max_concurrency=4, queue=fifo,
                                                 timeout=cdk.Duration.minutes(5), ledger=ledger))
    assert problem.startswith("ledger= needs a standard queue")


def test_a_share_name_the_ledger_cannot_hold_is_refused_naming_ledger():
    stack = new_stack()
    q = quota(stack)
    plan = q.share("a#b", profile(q), fraction=0.5, call_seconds=6)
    ledger = QuotaLedger(stack, "Ledger", quota=q)
    (problem,) = refused(lambda: QueuedInference(stack, "Queued", model=MODEL, max_concurrency=plan,
                                                 max_output_tokens=440, ledger=ledger))
    assert problem.startswith("ledger: the worker's share 'a#b'")


def test_a_customer_managed_queue_key_gives_the_worker_exactly_what_sending_needs():
    stack = new_stack()
    key = kms.Key(stack, "QueueKey", enable_key_rotation=True)
    QueuedInference(stack, "Queued", model=MODEL, max_concurrency=4, queue_encryption_key=key,
                    ledger=QuotaLedger(stack, "Ledger", quota=quota(stack)))
    key_id = next(iter(resources(template_of(stack), "AWS::KMS::Key")))
    actions = sorted(a for s in policy_statements(template_of(stack)) if key_id in str(s["Resource"])
                     for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
    assert actions == ["kms:Decrypt", "kms:Decrypt", "kms:GenerateDataKey"]  # consuming (Decrypt), sending


def test_a_ledger_table_named_at_deploy_time_reaches_the_worker_and_its_grant():
    stack = new_stack()
    name = cdk.CfnParameter(stack, "LedgerTable", type="String")
    table = dynamodb.Table.from_table_name(stack, "Imported", name.value_as_string)
    QueuedInference(stack, "Queued", model=MODEL, max_concurrency=4,
                    ledger=QuotaLedger(stack, "Ledger", quota=quota(stack), table=table))
    assert worker_env(stack)[TABLE] == {"Ref": "LedgerTable"}
    (on_ledger,) = [s for s in policy_statements(template_of(stack)) if "dynamodb:UpdateItem" in str(s["Action"])]
    assert "LedgerTable" in str(on_ledger["Resource"])


def _ledger_warnings(stack: cdk.Stack) -> list[str]:
    from aws_cdk.assertions import Annotations, Match

    return [str(m.entry.data) for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
            if "genai-pacer:ledger-hold-never-admitted" in str(m.entry.data)]


def test_a_max_output_tokens_the_ledger_could_never_hold_is_warned_naming_both_numbers():
    """max_output_tokens x burndown alone above the ledger's day (or the worker's burst cap): every message
    without a smaller maxTokens would be refused at run time. A warning (messages may send a smaller
    maxTokens), naming both numbers; within the limits, none."""
    stack = new_stack()
    q = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=400_000, burndown=5, daily_token_quota=10_000)
    QueuedInference(stack, "Queued", model=MODEL, max_concurrency=2, max_output_tokens=2_100,
                    ledger=QuotaLedger(stack, "Ledger", quota=q))
    (warning,) = _ledger_warnings(stack)
    assert "max_output_tokens=2,100 x burndown 5 = 10,500 tokens held per message" in warning
    assert "more than the ledger's whole day (10,000 tokens)" in warning

    fits = new_stack()
    q = ModelQuota(fits, "Quota", model=MODEL, tpm_quota=400_000, burndown=5, daily_token_quota=10_000)
    QueuedInference(fits, "Queued", model=MODEL, max_concurrency=2, max_output_tokens=2_000,
                    ledger=QuotaLedger(fits, "Ledger", quota=q))
    assert _ledger_warnings(fits) == []


def test_a_max_output_tokens_only_the_shares_outside_the_ledger_make_unholdable_is_warned():
    """The worker's burst cap in the ledger is at most what the ledger's consumers share once the shares held
    outside every ledger are left free (QuotaLedger.shared_tpm): 40,000 tokens held per message fit the
    100,000 allocatable TPM, not the 30,000 a 70,000 TPM share held by a plain function leaves."""
    from aws_cdk import aws_lambda as lambda_

    def build(outside: bool) -> cdk.Stack:
        stack = new_stack()
        q = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=100_000, burndown=5)
        small = q.profile(input_tokens=100, output_tokens=100, max_tokens=200)
        if outside:  # a function holding a share, with no ledger
            share = q.share("Outside", small, tpm=70_000, call_seconds=4)
            function = lambda_.Function(
                stack, "Outside", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
                code=lambda_.Code.from_inline("def handler(event, context):\n    return None\n"),
                reserved_concurrent_executions=share.max_concurrency)
            MODEL.grant_invoke(function)
        ledger = QuotaLedger(stack, "Ledger", quota=q)
        QueuedInference(stack, "Queued", model=MODEL, max_concurrency=2, max_output_tokens=8_000, batch_size=1,
                        ledger=ledger)
        return stack

    assert _ledger_warnings(build(outside=False)) == []  # 40,000 of the whole 100,000
    (warning,) = _ledger_warnings(build(outside=True))
    assert "max_output_tokens=8,000 x burndown 5 = 40,000 tokens held per message" in warning
    assert "more than the worker's burst cap in the ledger (its 100,000 TPM less the shares held outside every " \
           "ledger of the quota: 'Outside' (70,000 TPM)) (30,000 TPM)" in warning, warning
