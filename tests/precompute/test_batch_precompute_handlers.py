"""lambda/batch_precompute: record ids and the split, the prepared input, the loader, the summary, the event handler.

S3 and DynamoDB are moto's; Step Functions' SendTaskSuccess is stubbed with botocore's Stubber.
"""

from __future__ import annotations

import calendar
import importlib
import json
import random
import sys

import boto3
import pytest
from batch_precompute import records
from batch_precompute.records import Quotas, SplitError, extract_answer, plan_split, record_id
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws
from pacer_runtime import answers, metrics

IN, OUT, TABLE, TOKENS = "in-bucket", "out-bucket", "answers", "tokens"
QUOTAS = Quotas(min_records_per_job=10, max_records_per_job=40, max_records_per_file=15,
                max_job_bytes=10**9, max_file_bytes=10**8)
JOB_ARN = "arn:aws:bedrock:us-east-1:123456789012:model-invocation-job/abcdef123456"
START = "2026-12-01T06:00:00.250Z"
SEQUENCE = calendar.timegm((2026, 12, 1, 6, 0, 0)) * 1000 + 250  # START in ms


@pytest.fixture
def aws(monkeypatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        s3 = boto3.client("s3")
        for bucket in (IN, OUT):
            s3.create_bucket(Bucket=bucket)
        ddb = boto3.client("dynamodb")
        for table, key in ((TABLE, "pk"), (TOKENS, "jobArn")):
            ddb.create_table(TableName=table, KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
                             AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                             BillingMode="PAY_PER_REQUEST")
        yield s3, ddb


def module(name: str, monkeypatch, **env: str):
    """A handler module imported afresh with its environment (they read it at import, as in Lambda)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    sys.modules.pop(f"batch_precompute.{name}", None)
    return importlib.import_module(f"batch_precompute.{name}")


# ---- records ------------------------------------------------------------------------------------------


def test_record_ids_are_eleven_alphanumerics_stable_per_key_and_distinct_across_many_keys():
    ids = {record_id(f"review-summary#{n}") for n in range(50_000)}
    assert len(ids) == 50_000
    assert all(len(i) == 11 and i.isalnum() and i.isascii() for i in ids)
    assert record_id("ticker-morning#amzn") == record_id("ticker-morning#amzn")


@pytest.mark.parametrize(
    ("count", "jobs", "sizes"),
    [
        (10, 1, [10]),
        (40, 1, [40]),
        (41, 2, [21, 20]),  # never 40 + 1: the remainder job would fall below the minimum
        (95, 3, [32, 32, 31]),
    ],
)
def test_runs_split_into_near_equal_jobs_and_files_under_the_maxima(count, jobs, sizes):
    split = plan_split([100] * count, QUOTAS)
    assert [end - start for start, end in (f for f in [(job[0][0], job[-1][1]) for job in split])] == sizes
    assert len(split) == jobs
    for job in split:
        assert all(end - start <= QUOTAS.max_records_per_file for start, end in job)
        assert all(a[1] == b[0] for a, b in zip(job, job[1:], strict=False))  # contiguous
    assert split[0][0][0] == 0 and split[-1][-1][1] == count


def test_the_split_follows_the_byte_quotas_too():
    quotas = Quotas(min_records_per_job=2, max_records_per_job=100, max_records_per_file=100,
                    max_job_bytes=1_000, max_file_bytes=300)
    split = plan_split([100] * 30, quotas)  # 3,000 bytes: at least 3 jobs, files of 3 records
    assert len(split) == 3
    assert all(end - start <= 3 for job in split for start, end in job)


def test_an_impossible_split_says_why():
    with pytest.raises(SplitError, match="below the minimum of 10"):
        plan_split([1] * 9, QUOTAS)
    with pytest.raises(SplitError, match="above max_file_bytes"):
        plan_split([10**9] * 12, QUOTAS)
    tight = Quotas(min_records_per_job=5, max_records_per_job=100, max_records_per_file=100,
                   max_job_bytes=400, max_file_bytes=400)
    with pytest.raises(SplitError, match="fewer than the minimum of 5"):
        plan_split([100] * 12, tight)


@pytest.mark.parametrize("name", ["min_records_per_job", "max_records_per_job", "max_records_per_file",
                                  "max_job_bytes", "max_file_bytes"])
@pytest.mark.parametrize("value", [0, -5, 2.5, "10", True])
def test_a_split_refuses_a_limit_that_is_not_a_positive_whole_number_naming_it(name, value):
    """Zero max_records_per_job or max_job_bytes divided by zero; zero max_records_per_file planned
    one-record files; zero max_file_bytes refused every record as too large."""
    with pytest.raises(ValueError, match=rf"^Quotas {name}={value!r} must be a whole number >= 1$"):
        plan_split([100] * 20, Quotas(**{**QUOTAS.__dict__, name: value}))


@pytest.mark.parametrize(
    ("output", "text", "stop", "tokens"),
    [
        ({"output": {"message": {"role": "assistant", "content": [{"text": "A"}, {"text": "B"}]}},
          "stopReason": "end_turn", "usage": {"inputTokens": 3, "outputTokens": 4}}, "AB", "end_turn", (3, 4)),
        ({"content": [{"type": "text", "text": "claude"}], "stop_reason": "max_tokens",
          "usage": {"input_tokens": 5, "output_tokens": 6}}, "claude", "max_tokens", (5, 6)),
        ({"generation": "llama", "stop_reason": "stop", "prompt_token_count": 7, "generation_token_count": 8},
         "llama", "stop", (7, 8)),
        ({"inputTextTokenCount": 2, "results": [{"outputText": "titan", "completionReason": "FINISH", "tokenCount": 9}]},
         "titan", "FINISH", (2, 9)),
        ({"outputs": [{"text": "mistral", "stop_reason": "stop"}]}, "mistral", "stop", (0, 0)),
        ({"choices": [{"message": {"content": "gpt"}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 1, "completion_tokens": 2}}, "gpt", "stop", (1, 2)),
    ],
)
def test_answers_are_read_from_every_model_output_shape(output, text, stop, tokens):
    extracted = extract_answer(output)
    assert (extracted.text, extracted.stop_reason, (extracted.input_tokens, extracted.output_tokens)) == (text, stop, tokens)


@pytest.mark.parametrize(
    "output",
    [None, "text", {}, {"output": {"message": {"content": []}}}, {"content": [{"type": "tool_use"}]}, {"generation": "  "}],
)
def test_an_output_without_answer_text_is_refused(output):
    with pytest.raises(records.NoAnswerError):
        extract_answer(output)


# ---- prepare ------------------------------------------------------------------------------------------

PREPARE_ENV = {
    "INPUT_BUCKET": IN, "INPUT_PREFIX": "batch-input/", "OUTPUT_BUCKET": OUT, "OUTPUT_PREFIX": "batch-output/",
    "ITEMS_BUCKET": IN, "ITEMS_PREFIX": "items/", "INVOCATION_TYPE": "Converse", "MAX_TOKENS": "300",
    "SYSTEM_PROMPT": "You summarize reviews.", "TEMPERATURE": "0.2",
    "MIN_RECORDS_PER_JOB": "10", "MAX_RECORDS_PER_JOB": "40", "MAX_RECORDS_PER_FILE": "15",
    "MAX_JOB_BYTES": str(10**9), "MAX_FILE_BYTES": str(10**8), "JOB_NAME_PREFIX": "reviews", "JOB_TIMEOUT_HOURS": "24",
}


def items(count: int, start: int = 0) -> list[dict]:
    return [{"key": f"Review-Summary#{n}", "prompt": f"Summarize the reviews of product {n}"} for n in range(start, start + count)]


def read_lines(s3, uri: str) -> list[dict]:
    bucket, key = records.split_uri(uri)
    return [json.loads(line) for line in s3.get_object(Bucket=bucket, Key=key)["Body"].read().splitlines()]


def test_prepare_writes_each_jobs_input_folder_and_key_mapping_beside_it(aws, monkeypatch):
    s3, _ = aws
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    plan = prepare.handler({"input": {"items": items(50)}, "runId": "nightly_2026-12-01", "startTime": START})

    assert plan["belowMinimum"] is False and plan["records"] == 50 and plan["rejected"] == 0
    assert [job["records"] for job in plan["jobs"]] == [25, 25]
    job = plan["jobs"][0]
    assert job["inputUri"] == "s3://in-bucket/batch-input/nightly_2026-12-01/" + job["jobName"] + "/"
    assert job["outputUri"] == "s3://out-bucket/batch-output/nightly_2026-12-01/" + job["jobName"] + "/"
    assert job["keysUri"] == "s3://in-bucket/batch-input/nightly_2026-12-01/" + job["jobName"] + ".keys.jsonl"
    assert job["sequence"] == SEQUENCE and job["sentAt"] == "2026-12-01T06:00:00.250+00:00"
    assert job["jobName"].startswith("reviews-") and job["jobName"].endswith("-0000") and len(job["jobName"]) <= 63
    assert job["clientRequestToken"].isalnum()
    listed = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=IN, Prefix=f"batch-input/nightly_2026-12-01/{job['jobName']}/")["Contents"])
    assert listed == [f"batch-input/nightly_2026-12-01/{job['jobName']}/records-{n:04d}.jsonl" for n in range(2)]  # 13 + 12
    lines = [line for key in listed for line in read_lines(s3, f"s3://{IN}/{key}")]
    mapping = {entry["recordId"]: entry["key"] for entry in read_lines(s3, job["keysUri"])}
    assert len(lines) == 25 and set(mapping) == {line["recordId"] for line in lines}
    assert mapping[lines[0]["recordId"]] == "review-summary#0"  # the normalized key
    assert lines[0]["modelInput"] == {
        "messages": [{"role": "user", "content": [{"text": "Summarize the reviews of product 0"}]}],
        "system": [{"text": "You summarize reviews."}],
        "inferenceConfig": {"maxTokens": 300, "temperature": 0.2},
    }


def test_prepare_rejects_unanswerable_items_by_reason_and_never_quotes_the_prompt(aws, monkeypatch):
    s3, _ = aws
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    bad = [
        {"key": "REVIEW-summary#3 ", "prompt": "SECRET duplicate once normalized"},
        {"key": "", "prompt": "SECRET"},
        {"key": "claim#1", "prompt": "SECRET"},
        {"key": "x#1"},
        {"key": "x#2", "prompt": "SECRET", "modelInput": {"a": 1}},
        {"key": "x#3", "prompt": "SECRET", "extra": 1},
        "not an object",
    ]
    plan = prepare.handler({"input": {"items": items(12) + bad}, "runId": "r", "startTime": START})
    assert plan["records"] == 12 and plan["rejected"] == 7 and plan["items"] == 19
    rejected = read_lines(s3, plan["rejectedUri"])
    assert [entry["item"] for entry in rejected] == list(range(12, 19))
    assert "duplicate key: item 3" in rejected[0]["reason"]
    assert "SECRET" not in json.dumps(rejected)


def test_items_are_read_from_a_jsonl_or_json_object_under_the_items_prefix(aws, monkeypatch):
    s3, _ = aws
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    body = "".join(json.dumps(item) + "\n" for item in items(11)) + "{not json\n\n"
    s3.put_object(Bucket=IN, Key="items/keys.jsonl", Body=body.encode())
    s3.put_object(Bucket=IN, Key="items/keys.json", Body=json.dumps(items(11)).encode())

    from_lines = prepare.handler({"input": {"itemsKey": "items/keys.jsonl"}, "runId": "a", "startTime": START})
    from_array = prepare.handler({"input": {"itemsKey": "items/keys.json"}, "runId": "b", "startTime": START})

    assert (from_lines["records"], from_lines["rejected"]) == (11, 1)
    assert read_lines(s3, from_lines["rejectedUri"]) == [{"item": 11, "reason": "item 11 is not a JSON line"}]
    assert (from_array["records"], from_array["rejected"]) == (11, 0)


def test_a_run_below_the_minimum_writes_nothing_and_says_the_numbers(aws, monkeypatch):
    s3, _ = aws
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    plan = prepare.handler({"input": {"items": items(9)}, "runId": "small", "startTime": START})
    assert plan["belowMinimum"] is True and plan["jobs"] == []
    assert plan["message"].startswith("9 records to answer (9 items, 0 rejected) is below the minimum of 10 records")
    assert "Gather at least 1 more" in plan["message"]
    assert "Contents" not in s3.list_objects_v2(Bucket=IN)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"input": {}, "runId": "r", "startTime": START}, "give exactly one of items"),
        ({"input": {"items": [], "itemsKey": "items/a"}, "runId": "r", "startTime": START}, "give exactly one of items"),
        ({"input": {"items": "a"}, "runId": "r", "startTime": START}, "items must be a list"),
        ({"input": {"itemsKey": "other/keys.jsonl"}, "runId": "r", "startTime": START}, "must name an object under 'items/'"),
        ({"input": {"itemsKey": "items/missing.jsonl"}, "runId": "r", "startTime": START}, "no items object"),
        ({"input": [], "runId": "r", "startTime": START}, "must be an object"),
        ({"input": {"items": []}, "startTime": START}, "runId"),
        ({"input": {"items": []}, "runId": "r", "startTime": "yesterday"}, "not an ISO-8601 time"),
    ],
)
def test_a_malformed_run_input_fails_with_invalid_input(aws, monkeypatch, given, message):
    prepare = module("prepare", monkeypatch, **PREPARE_ENV)
    with pytest.raises(prepare.InvalidInputError, match=message):
        prepare.handler(given)


def test_large_files_go_up_as_multipart_uploads(aws, monkeypatch):
    s3, _ = aws
    prepare = module("prepare", monkeypatch, **{**PREPARE_ENV, "MAX_RECORDS_PER_FILE": "40"})
    writer = prepare.MultipartWriter(s3, IN, "big.jsonl", part_bytes=5 * 1024 * 1024)
    line = b"x" * 1023 + b"\n"
    for _ in range(11 * 1024):  # 11 MiB: two full parts and a tail
        writer.write(line)
    writer.close()
    assert writer.upload_id is not None and len(writer.parts) == 3
    assert s3.head_object(Bucket=IN, Key="big.jsonl")["ContentLength"] == 11 * 1024 * 1024


# ---- load ---------------------------------------------------------------------------------------------

LOAD_ENV = {"ANSWER_TABLE": TABLE, "ANSWER_TTL_SECONDS": "86400", "MODEL_ID": "us.amazon.nova-lite-v1:0",
            "AWS_LAMBDA_FUNCTION_NAME": "Loader", "WRITE_CONCURRENCY": "4"}


def converse_output(text: str) -> dict:
    return {"output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn", "usage": {"inputTokens": 20, "outputTokens": 5}}


def job_output(s3, keys: list[str], *, errored=(), missing=(), unknown=0, files=2, manifest=None, seed=1, extra_lines=()):
    """A job's output as Bedrock writes it: shuffled .jsonl.out files and a manifest; returns the load request."""
    run = "batch-output/run/reviews-0000/"
    mapping = [{"recordId": record_id(k), "key": k} for k in keys]
    s3.put_object(Bucket=IN, Key="batch-input/run/reviews-0000.keys.jsonl",
                  Body="".join(json.dumps(m) + "\n" for m in mapping).encode())
    lines = []
    for entry in mapping:
        if entry["key"] in missing:
            continue
        line = {"recordId": entry["recordId"], "modelInput": {"messages": []}}
        if entry["key"] in errored:
            line["error"] = {"errorCode": 400, "errorMessage": "Input is too long for requested model."}
        else:
            line["modelOutput"] = converse_output(f"answer for {entry['key']}")
        lines.append(json.dumps(line))
    lines += [json.dumps({"recordId": f"UNKNOWN{n:04d}", "modelOutput": converse_output("?")}) for n in range(unknown)]
    lines += list(extra_lines)
    random.Random(seed).shuffle(lines)
    for n in range(files):
        s3.put_object(Bucket=OUT, Key=f"{run}abcdef123456/records-{n:04d}.jsonl.out",
                      Body=("\n".join(lines[n::files]) + "\n").encode())
    ok = len(keys) - len(errored) - len(missing)
    s3.put_object(Bucket=OUT, Key=f"{run}abcdef123456/manifest.json.out", Body=json.dumps(manifest or {
        "totalRecordCount": len(keys), "processedRecordCount": ok + len(errored), "successRecordCount": ok,
        "errorRecordCount": len(errored), "inputTokenCount": 20 * ok, "outputTokenCount": 5 * ok}).encode())
    return {"jobArn": JOB_ARN, "jobName": "reviews-0000", "jobIndex": 0, "status": "PartiallyCompleted",
            "outputUri": f"s3://{OUT}/{run}", "keysUri": f"s3://{IN}/batch-input/run/reviews-0000.keys.jsonl",
            "sequence": SEQUENCE, "sentAt": "2026-12-01T06:00:00.250+00:00"}


def stored(ddb) -> dict[str, answers.Answer]:
    return {item["pk"]["S"]: answers.Answer.from_item(item) for item in ddb.scan(TableName=TABLE)["Items"]}


def test_the_loader_joins_shuffled_output_on_record_id_and_lists_what_has_no_answer(aws, monkeypatch, capsys):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    keys = [f"review-summary#{n}" for n in range(30)]
    request = job_output(s3, keys, errored=keys[3:6], missing=keys[10:12])

    result = load.handler(request)

    assert {name: result[name] for name in ("records", "loaded", "errored", "missing", "failedRecords", "reconciled")} == {
        "records": 30, "loaded": 25, "errored": 3, "missing": 2, "failedRecords": 5, "reconciled": True}
    answers_by_key = stored(ddb)
    assert set(answers_by_key) == set(keys) - set(keys[3:6]) - set(keys[10:12])
    first = answers_by_key["review-summary#0"]
    assert first.text == "answer for review-summary#0" and first.sequence == SEQUENCE
    assert first.request_id == f"batch#abcdef123456:{record_id('review-summary#0')}"  # the batch writer's namespace
    assert (first.input_tokens, first.output_tokens, first.stop_reason) == (20, 5, "end_turn")
    assert first.expires_at is not None and first.model_id == "us.amazon.nova-lite-v1:0"
    listed = read_lines(s3, result["erroredUri"])
    assert result["erroredUri"] == f"s3://{OUT}/batch-output/run/reviews-0000/errored-records.jsonl"
    assert sorted((e["key"], e["reason"]) for e in listed) == sorted(
        [(k, "errored") for k in keys[3:6]] + [(k, "missing from the output") for k in keys[10:12]])
    assert {e["errorMessage"] for e in listed if e["reason"] == "errored"} == {"Input is too long for requested model."}
    emf = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert emf[metrics.BATCH_RECORDS_LOADED] == 25 and emf[metrics.BATCH_RECORDS_FAILED] == 5
    assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == metrics.NAMESPACE and emf[metrics.FUNCTION_DIMENSION] == "Loader"


def test_the_loader_reports_every_way_the_output_disagrees_with_the_manifest(aws, monkeypatch):
    s3, _ = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    keys = [f"k#{n}" for n in range(12)]
    request = job_output(
        s3, keys, unknown=2, manifest={"totalRecordCount": 13, "processedRecordCount": 13, "successRecordCount": 13,
                                       "errorRecordCount": 0},
        extra_lines=["not json", json.dumps({"recordId": record_id("k#0"), "modelOutput": converse_output("again")})],
    )
    result = load.handler(request)
    assert result["reconciled"] is False and result["loaded"] == 12
    assert result["discrepancies"] == [
        "manifest totalRecordCount=13 but 12 records were submitted",
        "manifest processedRecordCount=13 but 12 records are in the output files",
        "manifest successRecordCount=13 but 12 records in the output files have modelOutput",
        "2 output lines have a recordId this job did not submit",
        "1 output lines repeat a recordId (an answer wins over a failure; else the first)",
        "1 output lines are not JSON objects",
    ]
    assert result["unknownRecordIds"] == ["UNKNOWN0000", "UNKNOWN0001"]


def test_a_missing_manifest_is_a_discrepancy_not_a_failure(aws, monkeypatch):
    s3, _ = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    request = job_output(s3, [f"k#{n}" for n in range(5)])
    s3.delete_object(Bucket=OUT, Key="batch-output/run/reviews-0000/abcdef123456/manifest.json.out")
    result = load.handler(request)
    assert result["loaded"] == 5 and result["manifest"] is None
    assert result["discrepancies"] == ["no manifest.json.out: the counts cannot be checked"]


def test_a_newer_stored_answer_is_kept_and_a_reload_writes_nothing_twice(aws, monkeypatch):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    keys = [f"k#{n}" for n in range(6)]
    newer = answers.Answer(key="k#0", text="fresher", model_id="m", request_id="later", sequence=SEQUENCE + 1)
    answers.put_answer(ddb, TABLE, newer)
    request = job_output(s3, keys)

    first = load.handler(request)
    again = load.handler(request)

    assert (first["loaded"], first["superseded"]) == (5, 1)
    assert (again["loaded"], again["superseded"]) == (0, 6)
    assert stored(ddb)["k#0"].text == "fresher"


def test_failed_writes_are_listed_and_fail_the_invocation_for_a_retry(aws, monkeypatch):
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    request = job_output(s3, [f"k#{n}" for n in range(8)])
    real_put = load.DDB.put_item

    def flaky(**kwargs):
        if kwargs["Item"]["pk"]["S"] in ("k#2", "k#5"):
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "PutItem")
        return real_put(**kwargs)

    monkeypatch.setattr(load.DDB, "put_item", flaky)
    with pytest.raises(load.StoreWriteError, match="2 of 8 answers of job reviews-0000 could not be written"):
        load.handler(request)
    assert len(stored(ddb)) == 6
    listed = read_lines(s3, f"s3://{OUT}/batch-output/run/reviews-0000/errored-records.jsonl")
    assert sorted(e["key"] for e in listed) == ["k#2", "k#5"] and {e["reason"] for e in listed} == {"write failed"}


def test_a_load_request_without_its_fields_fails_clearly(aws, monkeypatch):
    load = module("load", monkeypatch, **LOAD_ENV)
    with pytest.raises(load.OutputError, match="incomplete or malformed"):
        load.handler({"jobArn": JOB_ARN, "outputUri": "not-a-uri", "keysUri": "s3://a/b", "sequence": 1})


@pytest.mark.parametrize("sequence", [-1, 10**40, "1764568800250", 1.5, True, None])
def test_a_load_request_with_a_sequence_no_write_accepts_is_refused_before_any_record(aws, monkeypatch, sequence):
    """An internal input, checked anyway: such a sequence made every record "not storable" while the job
    was reported reconciled. Refused whole, naming `sequence` and its range; nothing is written or listed."""
    s3, ddb = aws
    load = module("load", monkeypatch, **LOAD_ENV)
    request = {**job_output(s3, [f"k#{n}" for n in range(3)]), "sequence": sequence}
    with pytest.raises(load.OutputError, match=r"sequence=.* must be a whole number from 0 to now plus 60 s in epoch milliseconds"):
        load.load_job(s3, ddb, request, table=TABLE, model_id="m", ttl_seconds=None, concurrency=2, now=SEQUENCE / 1000)
    assert ddb.scan(TableName=TABLE)["Count"] == 0
    assert "Contents" not in s3.list_objects_v2(Bucket=OUT, Prefix="batch-output/run/reviews-0000/errored")


# ---- summary ------------------------------------------------------------------------------------------


def loaded(name: str, n: int, failed: int = 0, **extra) -> dict:
    return {"jobName": name, "jobArn": f"arn:{name}", "status": "Completed", "loaded": n, "superseded": 0,
            "failedRecords": failed, "reconciled": True, "erroredUri": None, **extra}


def test_a_run_whose_jobs_all_loaded_is_loaded_with_its_totals():
    from batch_precompute.summary import summarize

    result = summarize({
        "plan": {"runId": "r", "items": 210, "records": 200, "rejected": 10, "rejectedUri": "s3://in/r/rejected.jsonl"},
        "jobs": [loaded("a", 100), loaded("b", 97, 3, status="PartiallyCompleted", reconciled=False, erroredUri="s3://o/b")],
    })
    assert result["outcome"] == "Loaded" and result["cause"] == ""
    assert (result["loaded"], result["failedRecords"], result["partiallyCompletedJobs"]) == (197, 3, 1)
    assert result["unreconciledJobs"] == ["b"] and result["erroredUris"] == ["s3://o/b"]


@pytest.mark.parametrize(
    ("statuses", "outcome"),
    [
        (["Failed"], "JobFailed"),
        (["Stopped"], "JobStopped"),
        (["Expired"], "JobExpired"),
        (["SubmitFailed"], "SubmitFailed"),
        (["LoadFailed"], "LoadFailed"),
        (["Stopped", "Failed"], "JobFailed"),
        (["Expired", "SubmitFailed", "Stopped"], "SubmitFailed"),
    ],
)
def test_a_job_that_did_not_load_names_the_outcome_and_carries_bedrocks_message(statuses, outcome):
    from batch_precompute.summary import summarize

    not_loaded = [{"jobName": f"j{n}", "jobArn": f"arn:j{n}", "status": status, "failureMessage": f"message {n}"}
                  for n, status in enumerate(statuses)]
    result = summarize({"plan": {}, "jobs": [loaded("ok", 50), *not_loaded]})
    assert result["outcome"] == outcome
    assert result["cause"].startswith(f"{len(statuses)} of {len(statuses) + 1} batch jobs were not loaded: j0 (arn:j0) "
                                      f"ended {statuses[0]}: message 0")
    assert result["cause"].endswith("The other 1 jobs loaded 50 answers")


# ---- job events ---------------------------------------------------------------------------------------


def event(status: str, message: str = "", arn: str = JOB_ARN) -> dict:
    return {"version": "0", "id": "e1", "detail-type": "Batch Inference Job State Change", "source": "aws.bedrock",
            "account": "123456789012", "region": "us-east-1", "resources": [arn],
            "detail": {"batchJobArn": arn, "batchJobName": "reviews-0000", "status": status, "failureMessage": message}}


def described(status: str, message: str = "", arn: str = JOB_ARN, name: str = "reviews-0000") -> dict:
    """A GetModelInvocationJob answer (botocore's shape: the Stubber checks it)."""
    job = {"jobArn": arn, "jobName": name, "modelId": "amazon.nova-lite-v1:0", "status": status,
           "roleArn": "arn:aws:iam::123456789012:role/r", "submitTime": "2026-12-01T06:00:00Z",
           "inputDataConfig": {"s3InputDataConfig": {"s3Uri": "s3://in-bucket/x/"}},
           "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": "s3://out-bucket/x/"}}}
    if message:
        job["message"] = message
    return job


@pytest.fixture
def job_events(aws, monkeypatch):
    handler = module("job_events", monkeypatch, TOKEN_TABLE=TOKENS, JOB_NAME_PREFIX="reviews")
    with Stubber(handler.SFN) as sfn, Stubber(handler.BEDROCK) as bedrock:
        handler.stub, handler.bedrock_stub = sfn, bedrock
        yield handler
        sfn.assert_no_pending_responses()
        bedrock.assert_no_pending_responses()


def test_a_job_that_ended_completes_its_stored_token_with_the_status_and_message_bedrock_reports(job_events, aws):
    _, ddb = aws
    ddb.put_item(TableName=TOKENS, Item={"jobArn": {"S": JOB_ARN}, "token": {"S": "TOKEN-1"}, "expires_at": {"N": "1"}})
    job_events.bedrock_stub.add_response("get_model_invocation_job", described("Failed", "the input is malformed"),
                                         {"jobIdentifier": JOB_ARN})
    output = {"jobArn": JOB_ARN, "status": "Failed", "failureMessage": "the input is malformed"}
    job_events.stub.add_response("send_task_success", {}, {"taskToken": "TOKEN-1", "output": json.dumps(output)})

    assert job_events.handler(event("Failed", "a message the event carries is not used"))["completed"] is True
    assert "Item" not in ddb.get_item(TableName=TOKENS, Key={"jobArn": {"S": JOB_ARN}})


def test_an_event_before_its_token_is_stored_fails_so_lambda_retries_it(job_events):
    job_events.bedrock_stub.add_response("get_model_invocation_job", described("Completed"), {"jobIdentifier": JOB_ARN})
    with pytest.raises(job_events.TokenNotFoundError, match="no task token is stored"):
        job_events.handler(event("Completed"))


def test_a_token_the_run_no_longer_waits_on_is_not_an_error(job_events, aws):
    _, ddb = aws
    ddb.put_item(TableName=TOKENS, Item={"jobArn": {"S": JOB_ARN}, "token": {"S": "OLD"}, "expires_at": {"N": "1"}})
    job_events.bedrock_stub.add_response("get_model_invocation_job", described("Completed"), {"jobIdentifier": JOB_ARN})
    job_events.stub.add_client_error("send_task_success", service_error_code="TaskTimedOut")
    assert job_events.handler(event("Completed"))["completed"] is False


def test_an_event_without_a_job_arn_is_ignored_with_a_log_line(job_events, capsys):
    assert job_events.handler({"detail": {}})["completed"] is False
    assert json.loads(capsys.readouterr().out)["level"] == "ERROR"


# ---- the benchmark's inputs ---------------------------------------------------------------------------


def test_the_loader_benchmark_loads_every_successful_record_of_its_generated_output(tmp_path):
    """The figures mean something only if the timed call loads what the output holds."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "batch_loader_bench.py"
    spec = importlib.util.spec_from_file_location("batch_loader_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "loader.json"
    assert bench.main(["--records", "400", "--trials", "1", "--put-latency-ms", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    for scenario in report["scenarios"].values():
        (run,) = scenario["trials"]
        assert run["records"] == 400 and run["loaded"] + run["errored"] == 400 and run["loaded"] > 380
    table = bench.StandInTable(0)
    newer = answers.Answer(key="k", text="new", model_id="m", request_id="b", sequence=2)
    older = answers.Answer(key="k", text="old", model_id="m", request_id="a", sequence=1)
    assert answers.put_answer(table, "t", newer) is True and answers.put_answer(table, "t", older) is False
