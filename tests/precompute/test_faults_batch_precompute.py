"""Faults in BatchPrecompute's handlers: hostile items, half-written or odd job output, a failing store,
malformed or unreadable events. S3 and DynamoDB are moto's; Step Functions and Bedrock's job API are
botocore Stubbers. Each case asserts what a user relies on: the stored answers afterwards, the run's
failure list (rejected.jsonl / errored-records.jsonl), what is retried, and that no prompt reaches a log.
"""

from __future__ import annotations

import json
import logging

import pytest

# the moto buckets and tables, and the fresh import of a handler, are the handler tests' own
import test_batch_precompute_handlers as handler_tests
from batch_precompute.records import record_id
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from pacer_runtime import answers
from test_batch_precompute_handlers import IN, OUT, TABLE, TOKENS, module

aws = handler_tests.aws  # the fixture: moto with the handler tests' buckets and tables

START = "2026-12-01T06:00:00.250Z"
SEQUENCE = 1_764_568_800_250
JOB_ID = "abcdef123456"
JOB_ARN = f"arn:aws:bedrock:us-east-1:123456789012:model-invocation-job/{JOB_ID}"
RUN = "batch-output/run/reviews-0000/"
KEYS_KEY = "batch-input/run/reviews-0000.keys.jsonl"
PROMPT = "PROMPT-TEXT-7f3a never log me"
ANSWER = "ANSWER-TEXT-91c2 never log me"
PREPARE_ENV = {
    "INPUT_BUCKET": IN, "INPUT_PREFIX": "batch-input/", "OUTPUT_BUCKET": OUT, "OUTPUT_PREFIX": "batch-output/",
    "ITEMS_BUCKET": IN, "ITEMS_PREFIX": "items/", "INVOCATION_TYPE": "Converse", "MAX_TOKENS": "300",
    "SYSTEM_PROMPT": "", "TEMPERATURE": "", "MIN_RECORDS_PER_JOB": "10", "MAX_RECORDS_PER_JOB": "40",
    "MAX_RECORDS_PER_FILE": "15", "MAX_JOB_BYTES": str(10**9), "MAX_FILE_BYTES": str(10**8),
    "JOB_NAME_PREFIX": "reviews", "JOB_TIMEOUT_HOURS": "24",
}
LOAD_ENV = {"ANSWER_TABLE": TABLE, "ANSWER_TTL_SECONDS": "", "MODEL_ID": "amazon.nova-lite-v1:0",
            "AWS_LAMBDA_FUNCTION_NAME": "Loader", "WRITE_CONCURRENCY": "4"}
DEEP = b'{"recordId": "x", "modelOutput": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"




def lines_of(s3, uri: str) -> list[dict]:
    bucket, _, key = uri[5:].partition("/")
    return [json.loads(line) for line in s3.get_object(Bucket=bucket, Key=key)["Body"].read().splitlines()]


def items(count: int) -> list[dict]:
    return [{"key": f"k#{n}", "prompt": f"{PROMPT} {n}"} for n in range(count)]


def stored(ddb) -> dict[str, answers.Answer]:
    return {item["pk"]["S"]: answers.Answer.from_item(item) for item in ddb.scan(TableName=TABLE)["Items"]}


# ---- prepare: one bad item fails alone -----------------------------------------------------------------------


def test_a_lone_surrogate_in_a_key_or_a_prompt_rejects_only_that_item(aws, monkeypatch):
    s3, _ = aws
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    bad = [{"key": "k#\ud800", "prompt": PROMPT}, {"key": "k#half-emoji", "prompt": f"{PROMPT} \ud83d"}]
    plan = prepare.handler({"input": {"items": items(12) + bad}, "runId": "r", "startTime": START})

    assert (plan["items"], plan["records"], plan["rejected"]) == (14, 12, 2)
    rejected = lines_of(s3, plan["rejectedUri"])
    assert [entry["item"] for entry in rejected] == [12, 13]
    assert all("not valid Unicode" in entry["reason"] for entry in rejected)
    assert rejected[1]["key"] == "k#half-emoji" and "key" not in rejected[0]  # a key that cannot be written is left out
    assert sum(job["records"] for job in plan["jobs"]) == 12


@pytest.mark.parametrize("layout", ["array", "lines"])
def test_an_items_file_with_a_utf8_byte_order_mark_is_read_whole(aws, monkeypatch, layout):
    s3, _ = aws
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    text = json.dumps(items(12)) if layout == "array" else "".join(json.dumps(i) + "\n" for i in items(12))
    s3.put_object(Bucket=IN, Key="items/bom.json", Body=b"\xef\xbb\xbf" + text.encode())
    plan = prepare.handler({"input": {"itemsKey": "items/bom.json"}, "runId": "r", "startTime": START})
    assert (plan["records"], plan["rejected"]) == (12, 0)


def test_a_line_nested_100000_deep_rejects_only_that_item(aws, monkeypatch):
    s3, _ = aws
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    body = b"".join(json.dumps(i).encode() + b"\n" for i in items(12)) + b"[" * 100_000 + b"]" * 100_000 + b"\n"
    s3.put_object(Bucket=IN, Key="items/deep.jsonl", Body=body)
    plan = prepare.handler({"input": {"itemsKey": "items/deep.jsonl"}, "runId": "r", "startTime": START})
    assert (plan["records"], plan["rejected"]) == (12, 1)
    assert lines_of(s3, plan["rejectedUri"]) == [{"item": 12, "reason": "item 12 is nested too deeply to parse"}]


def test_an_invoke_model_pipeline_prepares_without_max_tokens(aws, monkeypatch):
    s3, _ = aws  # the construct writes MAX_TOKENS="" for InvokeModel: it must not fail every run
    prepare = module("prepare", monkeypatch, **{**PREPARE_ENV, "INVOCATION_TYPE": "InvokeModel", "MAX_TOKENS": ""})
    given = [{"key": f"k#{n}", "modelInput": {"inputText": f"{PROMPT} {n}"}} for n in range(12)]
    plan = prepare.handler({"input": {"items": given}, "runId": "r", "startTime": START})
    assert (plan["records"], plan["rejected"]) == (12, 0)


@pytest.mark.parametrize("event", [None, "run", ["r"]])
def test_a_prepare_request_that_is_not_an_object_fails_clearly(aws, monkeypatch, event):
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    with pytest.raises(prepare.InvalidInputError, match="must be an object"):
        prepare.handler(event)


# ---- load: the job's output --------------------------------------------------------------------------------


def converse(text: str) -> dict:
    return {"output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn", "usage": {"inputTokens": 20, "outputTokens": 5}}


def write_job(s3, keys: list[str], lines: list[bytes], *, manifest: bytes | None = None, mapping: bytes | None = None,
              folder: str = f"{JOB_ID}/") -> dict:
    """The key mapping, one output file of `lines` and a manifest; returns the load request."""
    body = mapping if mapping is not None else b"".join(
        json.dumps({"recordId": record_id(k), "key": k}).encode() + b"\n" for k in keys)
    s3.put_object(Bucket=IN, Key=KEYS_KEY, Body=body)
    s3.put_object(Bucket=OUT, Key=f"{RUN}{folder}records-0000.jsonl.out", Body=b"\n".join(lines) + b"\n")
    if manifest is None:
        manifest = json.dumps({"totalRecordCount": len(keys), "processedRecordCount": len(lines),
                               "successRecordCount": len(lines), "errorRecordCount": 0}).encode()
    s3.put_object(Bucket=OUT, Key=f"{RUN}{folder}manifest.json.out", Body=manifest)
    return {"jobArn": JOB_ARN, "jobName": "reviews-0000", "jobIndex": 0, "status": "Completed",
            "outputUri": f"s3://{OUT}/{RUN}", "keysUri": f"s3://{IN}/{KEYS_KEY}", "sequence": SEQUENCE,
            "sentAt": "2026-12-01T06:00:00.250+00:00"}


def ok(key: str, text: str | None = None) -> bytes:
    return json.dumps({"recordId": record_id(key), "modelInput": {}, "modelOutput": converse(text or f"{ANSWER} {key}")}).encode()


def errored(key: str) -> bytes:
    return json.dumps({"recordId": record_id(key), "modelInput": {},
                       "error": {"errorCode": 429, "errorMessage": "Too many requests"}}).encode()


KEYS = [f"k#{n}" for n in range(6)]


def test_a_corrupt_key_mapping_line_fails_only_its_record(aws, monkeypatch):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    mapping = b"".join(json.dumps({"recordId": record_id(k), "key": k}).encode() + b"\n" for k in KEYS[1:])
    request = write_job(s3, KEYS, [ok(k) for k in KEYS], mapping=b'{"recordId": "' + record_id(KEYS[0]).encode() + b'", "ke\n' + mapping)

    result = load.handler(request)

    assert sorted(stored(ddb)) == KEYS[1:]
    assert (result["loaded"], result["unreadableMapping"], result["unknown"], result["failedRecords"]) == (5, 1, 1, 1)
    listed = lines_of(s3, result["erroredUri"])
    assert listed == [{"reason": "line 1 of the key mapping is not a {recordId, key} object"}]
    assert "1 lines of the key mapping cannot be read; their records are listed" in result["discrepancies"]


def test_an_output_line_nested_100000_deep_fails_only_its_record(aws, monkeypatch):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    request = write_job(s3, KEYS, [ok(k) for k in KEYS[1:]] + [DEEP])
    result = load.handler(request)
    assert sorted(stored(ddb)) == KEYS[1:]
    assert (result["malformed"], result["missing"], result["failedRecords"]) == (1, 1, 1)
    listed = lines_of(s3, result["erroredUri"])
    assert {"recordId": record_id("k#0"), "key": "k#0", "reason": "missing from the output"} in listed


def test_an_answer_over_the_item_limit_is_listed_with_its_size_and_never_retried(aws, monkeypatch):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    huge = "x" * (400 * 1024)
    request = write_job(s3, KEYS, [ok("k#0", huge)] + [ok(k) for k in KEYS[1:]])
    puts: list[str] = []
    real_put = load.DDB.put_item
    monkeypatch.setattr(load.DDB, "put_item", lambda **kw: (puts.append(kw["Item"]["pk"]["S"]), real_put(**kw))[1])

    result = load.handler(request)  # no StoreWriteError: nothing here a retry could fix

    assert sorted(stored(ddb)) == KEYS[1:] and "k#0" not in puts
    assert (result["tooLarge"], result["writeFailed"], result["failedRecords"]) == (1, 0, 1)
    [entry] = lines_of(s3, result["erroredUri"])
    assert (entry["key"], entry["reason"], entry["limitBytes"]) == ("k#0", "too large", 409_600)
    assert entry["itemBytes"] > 409_600


def test_a_store_validation_refusal_is_final_and_a_throttle_is_retried(aws, monkeypatch):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    request = write_job(s3, KEYS, [ok(k) for k in KEYS])
    real_put = load.DDB.put_item

    def refusing(**kwargs):
        key = kwargs["Item"]["pk"]["S"]
        if key == "k#1":
            raise ClientError({"Error": {"Code": "ValidationException", "Message": "Item size has exceeded"}}, "PutItem")
        if key == "k#2":
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "PutItem")
        return real_put(**kwargs)

    monkeypatch.setattr(load.DDB, "put_item", refusing)
    with pytest.raises(load.StoreWriteError, match="1 of 6 answers"):
        load.handler(request)
    listed = {e["key"]: e for e in lines_of(s3, f"s3://{OUT}/{RUN}errored-records.jsonl")}
    assert (listed["k#1"]["reason"], listed["k#1"]["code"]) == ("not storable", "ValidationException")
    assert (listed["k#2"]["reason"], listed["k#2"]["code"]) == ("write failed", "ThrottlingException")
    assert sorted(stored(ddb)) == ["k#0", "k#3", "k#4", "k#5"]


def test_an_answer_that_is_not_valid_unicode_fails_alone(aws, monkeypatch):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    request = write_job(s3, KEYS, [ok("k#0", "half an emoji \ud83d")] + [ok(k) for k in KEYS[1:]])
    result = load.handler(request)
    assert sorted(stored(ddb)) == KEYS[1:]
    [entry] = lines_of(s3, result["erroredUri"])
    assert (entry["key"], entry["reason"]) == ("k#0", "not storable")


@pytest.mark.parametrize("order", ["error first", "answer first"])
def test_an_answer_wins_over_an_error_line_for_the_same_record_in_any_order(aws, monkeypatch, order):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    pair = [errored("k#0"), ok("k#0")] if order == "error first" else [ok("k#0"), errored("k#0")]
    result = load.handler(write_job(s3, KEYS, pair + [ok(k) for k in KEYS[1:]]))
    assert stored(ddb)["k#0"].text == f"{ANSWER} k#0"
    assert (result["loaded"], result["errored"], result["failedRecords"], result["duplicates"]) == (6, 0, 0, 1)
    assert result["erroredUri"] is None


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        (json.dumps({"totalRecordCount": "6", "processedRecordCount": "6", "successRecordCount": "6",
                     "errorRecordCount": "0"}).encode(), "manifest totalRecordCount is a str, not a count"),
        (b"{not json", "manifest.json.out cannot be read (JSONDecodeError)"),
        (b"[" * 100_000 + b"]" * 100_000, "manifest.json.out cannot be read (RecursionError)"),
        (b"[6, 6]", "manifest.json.out is list, not an object"),
        (json.dumps({"totalRecordCount": 6}).encode(), "manifest has no processedRecordCount"),
    ],
)
def test_a_manifest_that_cannot_be_trusted_is_a_mismatch_not_reconciled(aws, monkeypatch, manifest, problem):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    result = load.handler(write_job(s3, KEYS, [ok(k) for k in KEYS], manifest=manifest))
    assert result["reconciled"] is False and any(problem in d for d in result["discrepancies"])
    assert result["loaded"] == 6 and len(stored(ddb)) == 6


def test_output_outside_the_job_id_folder_is_still_loaded_and_reported(aws, monkeypatch):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    result = load.handler(write_job(s3, KEYS, [ok(k) for k in KEYS], folder="other-layout/"))
    assert result["loaded"] == 6 and len(stored(ddb)) == 6
    assert result["discrepancies"] == ["some .jsonl.out files are not under <jobId>/ as expected; all were read"]


def test_a_job_without_output_files_says_what_it_found(aws, monkeypatch):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    request = write_job(s3, KEYS, [ok(k) for k in KEYS])
    s3.delete_object(Bucket=OUT, Key=f"{RUN}{JOB_ID}/records-0000.jsonl.out")
    s3.put_object(Bucket=OUT, Key=f"{RUN}{JOB_ID}/records-0000.jsonl.result", Body=b"")
    result = load.handler(request)
    assert result["missing"] == 6 and stored(ddb) == {}
    assert result["discrepancies"][0] == (
        "the job wrote no .jsonl.out file under its output location (found: ['manifest.json.out', 'records-0000.jsonl.result'])")


def test_a_load_request_that_is_not_an_object_fails_clearly(aws, monkeypatch):
    load = module("load", monkeypatch, **LOAD_ENV)
    with pytest.raises(load.OutputError, match="it is NoneType, not an object"):
        load.handler(None)


# ---- summary -----------------------------------------------------------------------------------------------


def test_the_summary_refuses_a_null_input_and_a_loaded_count_that_is_not_a_whole_number(monkeypatch):
    """A count summed as 0 hid answers from the totals; only a bug sends one, so it is refused by name."""
    summary = module("summary", monkeypatch)
    with pytest.raises(summary.InvalidSummaryInputError, match="not NoneType"):
        summary.handler(None)
    counts = {"loaded": 10, "superseded": 0, "failedRecords": 2}
    result = summary.handler({"plan": None, "jobs": [{"status": "Completed", **counts}, "x"]})
    assert (result["outcome"], result["loaded"], result["failedRecords"]) == ("Loaded", 10, 2)
    for name in counts:
        for bad in ("12", 1.5, -1, None, True):
            job = {"jobName": "reviews-0001", "status": "PartiallyCompleted", **counts, name: bad}
            with pytest.raises(summary.InvalidSummaryInputError,
                               match=rf"loaded job 1 \('reviews-0001'\) has {name}={bad!r}; .* whole number >= 0"):
                summary.handler({"plan": {}, "jobs": [{"status": "Completed", **counts}, job]})
    # A job that was not loaded carries no counts.
    result = summary.handler({"plan": {}, "jobs": [{"status": "Failed", "jobName": "j", "loaded": "n/a"}]})
    assert (result["outcome"], result["loaded"]) == ("JobFailed", 0)


# ---- job events ----------------------------------------------------------------------------------------------


def described(status: str, arn: str = JOB_ARN, name: str = "reviews-0000", message: str = "") -> dict:
    job = {"jobArn": arn, "jobName": name, "modelId": "amazon.nova-lite-v1:0", "status": status,
           "roleArn": "arn:aws:iam::123456789012:role/r", "submitTime": "2026-12-01T06:00:00Z",
           "inputDataConfig": {"s3InputDataConfig": {"s3Uri": "s3://in-bucket/x/"}},
           "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": "s3://out-bucket/x/"}}}
    return {**job, "message": message} if message else job


@pytest.fixture
def job_events(aws, monkeypatch):
    handler = module("job_events", monkeypatch, TOKEN_TABLE=TOKENS, JOB_NAME_PREFIX="reviews")
    with Stubber(handler.SFN) as sfn, Stubber(handler.BEDROCK) as bedrock:
        handler.sfn_stub, handler.bedrock_stub = sfn, bedrock
        yield handler
        sfn.assert_no_pending_responses()
        bedrock.assert_no_pending_responses()


def store_token(ddb, arn: str = JOB_ARN, token: str = "TOKEN-1") -> None:
    ddb.put_item(TableName=TOKENS, Item={"jobArn": {"S": arn}, "token": {"S": token}, "expires_at": {"N": "1"}})


def expect_completion(job_events, status: str, token: str = "TOKEN-1", arn: str = JOB_ARN, message: str = "") -> None:
    job_events.sfn_stub.add_response("send_task_success", {}, {
        "taskToken": token, "output": json.dumps({"jobArn": arn, "status": status, "failureMessage": message})})


@pytest.mark.parametrize(
    "detail",
    [
        {"batchJobArn": JOB_ARN, "batchJobName": "reviews-0000", "status": "Completed"},
        {"jobArn": JOB_ARN, "jobName": "reviews-0000", "jobStatus": "Completed"},
        {"status": "Completed"},  # the ARN only in the envelope's resources
    ],
    ids=["batch fields", "customization fields", "resources only"],
)
def test_an_event_of_either_shape_completes_the_wait_with_bedrocks_status(job_events, aws, detail):
    _, ddb = aws
    store_token(ddb)
    job_events.bedrock_stub.add_response("get_model_invocation_job", described("PartiallyCompleted"), {"jobIdentifier": JOB_ARN})
    expect_completion(job_events, "PartiallyCompleted")
    event = {"source": "aws.bedrock", "detail-type": "Batch Inference Job State Change", "resources": [JOB_ARN], "detail": detail}
    assert job_events.handler(event) == {"completed": True, "jobArn": JOB_ARN, "status": "PartiallyCompleted"}
    assert "Item" not in ddb.get_item(TableName=TOKENS, Key={"jobArn": {"S": JOB_ARN}})


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (None, "malformed event: it is null, not an object"),
        ("text", "malformed event: it is a str, not an object"),
        ({"detail": None}, "malformed event: detail is null, not an object"),
        ({"detail": "Completed"}, "malformed event: detail is a str, not an object"),
        ({"detail": ["x"]}, "malformed event: detail is a list, not an object"),
        ({"detail": {"status": "Completed"}, "resources": ["arn:aws:s3:::bucket"]}, "names no job ARN"),
        ({"detail": {"status": "Completed", "batchJobName": "other-team-0001", "batchJobArn": JOB_ARN}}, "another pipeline's job"),
    ],
)
def test_an_event_that_cannot_be_used_is_ignored_with_a_reason_and_no_call(job_events, event, reason):
    result = job_events.handler(event)  # no AttributeError, no retry: nothing here a retry could fix
    assert result["completed"] is False and reason in result["reason"]


def test_an_event_is_not_trusted_over_get_model_invocation_job(job_events, aws):
    _, ddb = aws
    store_token(ddb)
    job_events.bedrock_stub.add_response("get_model_invocation_job", described("InProgress"), {"jobIdentifier": JOB_ARN})
    result = job_events.handler({"detail": {"batchJobArn": JOB_ARN, "status": "Completed"}})
    assert result == {"completed": False, "reason": "the job has not ended"}
    assert "Item" in ddb.get_item(TableName=TOKENS, Key={"jobArn": {"S": JOB_ARN}})  # the wait goes on


def test_a_job_another_pipeline_named_is_ignored_after_reading_it(job_events):
    job_events.bedrock_stub.add_response("get_model_invocation_job", described("Completed", name="nightly-other"),
                                         {"jobIdentifier": JOB_ARN})
    assert job_events.handler({"detail": {"status": "Completed"}, "resources": [JOB_ARN]})["reason"] == "another pipeline's job"


def test_a_throttled_read_of_the_job_fails_the_event_so_lambda_retries_it(job_events):
    job_events.bedrock_stub.add_client_error("get_model_invocation_job", service_error_code="ThrottlingException")
    with pytest.raises(ClientError):
        job_events.handler({"detail": {"batchJobArn": JOB_ARN, "status": "Completed"}})


def test_the_scheduled_check_completes_ended_jobs_and_one_failing_check_stops_no_other(job_events, aws):
    _, ddb = aws
    arns = [JOB_ARN.replace(JOB_ID, f"job{n}") for n in range(3)]
    for n, arn in enumerate(arns):
        store_token(ddb, arn, f"T{n}")
    ddb.put_item(TableName=TOKENS, Item={"jobArn": {"S": "arn:broken"}, "expires_at": {"N": "1"}})  # no token
    by_arn = {arns[0]: described("Completed", arns[0]), arns[1]: described("InProgress", arns[1]), arns[2]: None}
    scanned = [i["jobArn"]["S"] for i in ddb.scan(TableName=TOKENS, ConsistentRead=True)["Items"] if "token" in i]
    for arn in scanned:  # in the table's own order
        if by_arn[arn] is None:
            job_events.bedrock_stub.add_client_error("get_model_invocation_job", service_error_code="ThrottlingException",
                                                     expected_params={"jobIdentifier": arn})
        else:
            job_events.bedrock_stub.add_response("get_model_invocation_job", by_arn[arn], {"jobIdentifier": arn})
            if by_arn[arn]["status"] == "Completed":
                expect_completion(job_events, "Completed", "T0", arns[0])

    counts = job_events.handler(dict(job_events.CHECK_JOBS))

    assert counts == {"checked": 3, "completed": 1, "running": 1, "failed": 1, "malformed": 1}
    left = {i["jobArn"]["S"] for i in ddb.scan(TableName=TOKENS)["Items"]}
    assert left == {arns[1], arns[2], "arn:broken"}  # only the completed wait's token is gone


# ---- logs ---------------------------------------------------------------------------------------------------


def test_no_prompt_or_answer_reaches_a_log_line(aws, monkeypatch, capsys, caplog):
    s3, ddb = aws
    caplog.set_level(logging.INFO)  # botocore logs request bodies only at DEBUG, which Lambda never enables by default
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    hostile = [{"key": "k#bad", "prompt": f"{PROMPT} \ud800"}, {"key": "", "prompt": PROMPT}, {"key": "k#x", "prompt": PROMPT, "extra": 1}]
    plan = prepare.handler({"input": {"items": items(12) + hostile}, "runId": "r", "startTime": START})
    assert plan["rejected"] == 3

    load = module("load", monkeypatch, **LOAD_ENV)
    lines = [ok("k#0", "x" * (400 * 1024) + ANSWER), errored("k#1"), ok("k#2", f"{ANSWER} \ud83d"), b"not json " + PROMPT.encode()]
    request = write_job(s3, KEYS, lines + [ok(k) for k in KEYS[3:]],
                        manifest=json.dumps({"totalRecordCount": PROMPT}).encode())
    real_put = load.DDB.put_item

    def failing(**kwargs):
        if kwargs["Item"]["pk"]["S"] == "k#3":  # botocore's message would quote the request
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": f"bad item {ANSWER}"}}, "PutItem")
        return real_put(**kwargs)

    monkeypatch.setattr(load.DDB, "put_item", failing)
    with pytest.raises(load.StoreWriteError) as raised:
        load.handler(request)
    assert sorted(stored(ddb)) == ["k#4", "k#5"]

    logged = capsys.readouterr()
    text = logged.out + logged.err + caplog.text + str(raised.value)
    assert "WARN" in logged.out  # the loader did log (the manifest mismatch)
    assert PROMPT not in text and ANSWER not in text and "PROMPT-TEXT" not in text and "ANSWER-TEXT" not in text


# ---- the loader retries what a retry can fix: a 5xx and a network error from DynamoDB ---------------------

import threading  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402


@contextmanager
def faulty_dynamodb(monkeypatch, fail: dict[str, int], status: int = 500, code: str = "InternalServerError"):
    """DynamoDB on loopback: an HTTP server that answers `status` with `code` to the first fail[key]
    PutItem requests for each key and hands every other request to moto's dispatcher (the same
    in-process backend as the test's mock). AWS_ENDPOINT_URL_DYNAMODB points clients created afterwards
    (the loader's, at import) at it, so the real botocore client, its HTTP stack and its retries run.
    Yields every (key, status answered) of the PutItem requests it saw."""
    from botocore.awsrequest import AWSPreparedRequest
    from moto.core.models import botocore_stubber

    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            key = None
            if self.headers.get("X-Amz-Target", "").endswith(".PutItem"):
                key = json.loads(body)["Item"]["pk"]["S"]
            with lock:
                faulted = key is not None and fail.get(key, 0) > 0
                if faulted:
                    fail[key] -= 1
            if faulted:
                answered, headers, payload = status, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(
                    {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "injected by the test"})
            else:
                forwarded = AWSPreparedRequest(
                    method="POST", url="https://dynamodb.us-east-1.amazonaws.com/", headers=dict(self.headers.items()),
                    body=body, stream_output=False)
                answered, headers, payload = botocore_stubber.process_request(forwarded)
            data = payload.encode() if isinstance(payload, str) else payload
            self.send_response(answered)
            for name, value in headers.items():
                if name.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                    self.send_header(name, str(value))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            if key is not None:
                seen.append((key, answered))

        def log_message(self, *args):  # quiet: the test asserts on `seen`, not on a log
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)  # shutdown waits one poll
    serving.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def no_backoff(monkeypatch):
    """botocore's standard retry mode sleeps up to 2**attempt s (full jitter) between attempts: keep the
    attempts, skip the waiting (the sleeps are recorded)."""
    import time as real_time

    import botocore.endpoint

    slept: list[float] = []
    monkeypatch.setattr(botocore.endpoint, "time", type("Clock", (), {
        "time": staticmethod(real_time.time), "sleep": staticmethod(slept.append)}))
    return slept


@pytest.mark.parametrize(("status", "code"), [(500, "InternalServerError"), (503, "ServiceUnavailable")])
def test_a_dynamodb_5xx_is_retried_by_the_client_and_the_load_completes(aws, monkeypatch, no_backoff, status, code):
    s3, ddb = aws
    with faulty_dynamodb(monkeypatch, {"k#2": 2}, status=status, code=code) as seen:
        load = module("load", monkeypatch, **LOAD_ENV)
        result = load.handler(write_job(s3, KEYS, [ok(k) for k in KEYS]))
    assert [s for k, s in seen if k == "k#2"] == [status, status, 200]  # two faults, then the retry's write
    assert len(no_backoff) >= 2
    assert sorted(stored(ddb)) == KEYS and stored(ddb)["k#2"].text == f"{ANSWER} k#2"
    assert (result["loaded"], result["writeFailed"], result["failedRecords"], result["erroredUri"]) == (6, 0, 0, None)


def test_a_5xx_past_the_clients_retries_is_listed_and_the_state_machines_retry_writes_it(aws, monkeypatch, no_backoff):
    s3, ddb = aws
    request = write_job(s3, KEYS, [ok(k) for k in KEYS])
    with faulty_dynamodb(monkeypatch, {"k#2": 5}) as seen:  # the loader's client makes 5 attempts
        load = module("load", monkeypatch, **LOAD_ENV)
        with pytest.raises(load.StoreWriteError, match="1 of 6 answers"):  # BatchPrecompute's Retry names it
            load.handler(request)
        listed = {e["key"]: e for e in lines_of(s3, f"s3://{OUT}/{RUN}errored-records.jsonl")}
        assert (listed["k#2"]["reason"], listed["k#2"]["code"], listed["k#2"]["httpStatus"]) == (
            "write failed", "InternalServerError", 500)
        assert [s for k, s in seen if k == "k#2"] == [500] * 5
        assert sorted(stored(ddb)) == ["k#0", "k#1", "k#3", "k#4", "k#5"]
        # The state machine's retry: the same request, with DynamoDB answering again.
        again = load.handler(request)
    assert sorted(stored(ddb)) == KEYS
    assert (again["loaded"], again["superseded"], again["writeFailed"]) == (1, 5, 0)


def test_a_network_error_is_retried_by_the_client_and_past_its_retries_by_the_state_machine(aws, monkeypatch, no_backoff):
    from botocore.exceptions import EndpointConnectionError

    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    request = write_job(s3, KEYS, [ok(k) for k in KEYS])
    refusals = {"k#1": 1, "k#4": 5}  # k#1 once (the client retries), k#4 on every one of the client's 5 attempts
    attempts: list[str] = []

    def unreachable(request, **_):
        # Raised where botocore's HTTP send raises it (inside the same retry loop), before moto answers.
        key = json.loads(request.body)["Item"]["pk"]["S"]
        attempts.append(key)
        if refusals.get(key, 0) > 0:
            refusals[key] -= 1
            raise EndpointConnectionError(endpoint_url=request.url)

    load.DDB.meta.events.register_first("before-send.dynamodb.PutItem", unreachable)
    with pytest.raises(load.StoreWriteError, match="1 of 6 answers"):
        load.handler(request)
    assert (attempts.count("k#1"), attempts.count("k#4")) == (2, 5)
    listed = {e["key"]: e for e in lines_of(s3, f"s3://{OUT}/{RUN}errored-records.jsonl")}
    assert set(listed) == {"k#4"}
    assert (listed["k#4"]["reason"], listed["k#4"]["errorClass"]) == ("write failed", "EndpointConnectionError")
    assert sorted(stored(ddb)) == ["k#0", "k#1", "k#2", "k#3", "k#5"]
    again = load.handler(request)  # the state machine's retry, once the endpoint answers
    assert sorted(stored(ddb)) == KEYS and (again["loaded"], again["superseded"]) == (1, 5)


def test_a_bad_stored_item_is_replaced_by_the_load_whatever_its_sequence(aws, monkeypatch):
    """The loader writes through put_answer: a stored item readers call invalid (here one a condition can
    judge and one only put_answer can) is replaced even when its sequence is newer than the job's; a valid
    newer answer is kept."""
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    newer = {"model_id": {"S": "m"}, "request_id": {"S": "router#x"}, "sequence": {"N": str(SEQUENCE + 60_000)},
             "generated_at": {"S": "2026-12-01T06:01:00.250+00:00"}, "answer": {"S": "router's newer answer"}}
    for key, bad in (("k#0", {"stop_reason": {"N": "1"}}), ("k#1", {"output_tokens": {"N": "2.5"}}), ("k#2", {})):
        ddb.put_item(TableName=TABLE, Item={"pk": {"S": key}, **newer, **bad})
    result = load.handler(write_job(s3, KEYS, [ok(k) for k in KEYS]))
    texts = {key: answer.text for key, answer in stored(ddb).items()}
    assert texts["k#0"] == f"{ANSWER} k#0" and texts["k#1"] == f"{ANSWER} k#1"
    assert texts["k#2"] == "router's newer answer"  # the control: valid and newer, so kept
    assert (result["loaded"], result["superseded"], result["failedRecords"]) == (5, 1, 0)
