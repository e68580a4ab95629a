"""`genai-pacer bench report s3://...` and genai_pacer.testing.bench.replay_report (issue 26): a
deployed run's report rendered exactly as a local run's, also when its summary step never ran."""

from __future__ import annotations

import importlib
import io
import json
import sys
from dataclasses import asdict

import boto3
import pacer_runtime.replay as replay
import pytest
from genai_pacer.testing import bench
from genai_pacer.testing.cli import main
from moto import mock_aws

BUCKET, RUN = "results", "load-replay/run-7/"
CONFIG = replay.BenchConfig(model_id="us.amazon.nova-micro-v1:0", requests=5, warmup=1, concurrency=2)


def records() -> list[replay.Sample]:
    return [replay.Sample(i, f"chat-{i % 2}", i < 1, float(i), 2.0 + i / 10, 0.3 + i / 100, 40.0 + i, 1_000, 100 + i,
                          attempts=1 + (i == 3), throttles=int(i == 3), served_latency="standard",
                          served_tier="default", reserved=1_400, settled=1_100 + i) for i in range(6)]


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        samples = records()
        for worker in (0, 1):  # as two workers wrote them, one part each
            mine = [s for s in samples if s.index % 2 == worker]
            client.put_object(Bucket=BUCKET, Key=f"{RUN}records/worker-{worker:05d}-part-00000.jsonl",
                              Body="".join(json.dumps(asdict(s)) + "\n" for s in mine).encode())
        client.put_object(Bucket=BUCKET, Key=RUN + "run.json",
                          Body=json.dumps({"config": asdict(CONFIG), "run": {"id": "run-7"}}).encode())
        yield client


def local_files(tmp_path, samples):
    """What a local run with these records writes (write_report)."""
    report = bench.BenchReport(CONFIG, samples, replay.summarize(samples, CONFIG))
    paths = bench.write_report(report, tmp_path / "local", "bench")
    return {p.suffix: p.read_bytes() for p in paths if p.suffix in (".json", ".csv")}


def test_a_run_stopped_before_its_summary_reports_from_its_records_as_a_local_run(s3, tmp_path):
    report, paths = bench.replay_report(f"s3://{BUCKET}/{RUN}", tmp_path / "deployed", s3=s3)
    assert [s.index for s in report.samples] == list(range(6))
    written = {p.suffix: p.read_bytes() for p in paths if p.suffix in (".json", ".csv")}
    assert written == local_files(tmp_path, records())
    assert report.summary["requests"] == 5 and report.summary["throttles"] == 1


def test_a_finished_run_reports_its_own_summary(s3, tmp_path):
    summary = {**replay.summarize(records(), CONFIG), "requests": 5}
    s3.put_object(Bucket=BUCKET, Key=RUN + "bench.json",
                  Body=json.dumps(replay.report_document(CONFIG, summary)).encode())
    s3.delete_object(Bucket=BUCKET, Key=RUN + "run.json")
    report, _ = bench.replay_report(f"s3://{BUCKET}/{RUN.rstrip('/')}", tmp_path, s3=s3)  # with or without the slash
    assert report.summary == json.loads(json.dumps(summary))


def test_the_command_writes_the_report_and_prints_the_summary(s3, tmp_path, capsys):
    assert main(["bench", "report", f"s3://{BUCKET}/{RUN}", "--out", str(tmp_path / "out"), "--name", "deployed"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(replay.summarize(records(), CONFIG)))
    assert json.loads((tmp_path / "out" / "deployed.json").read_text())["config"] == json.loads(json.dumps(asdict(CONFIG)))
    buffer = io.StringIO(newline="")
    replay.write_csv(buffer, records())
    assert (tmp_path / "out" / "deployed.csv").read_bytes().decode() == buffer.getvalue()


@pytest.mark.parametrize("uri", ["s3://results/load-replay/nothing/", "results/run-7", "s3://results"])
def test_a_folder_with_no_run_is_refused_in_one_line(s3, tmp_path, capsys, uri):
    assert main(["bench", "report", uri, "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("genai-pacer bench: ") and error.count("\n") == 1
    assert "s3://<bucket>/<results_prefix><execution name>/" in error


def test_the_report_reads_the_files_where_the_function_writes_them(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    sys.modules.pop("load_replay.handler", None)
    handler = importlib.import_module("load_replay.handler")
    written_by_the_function = (handler.RECORDS, handler.RUN_FILE, f"{handler.REPORT_NAME}.json")
    assert written_by_the_function == (bench.RUN_RECORDS, bench.RUN_FILE, bench.RUN_REPORT)


def summary_with(ttft_p90: float, otps_p90: float) -> dict:
    return {"ttft_s": {"p50": 0.3, "p90": ttft_p90, "p99": None}, "otps": {"p90": otps_p90}, "throttles": 0}


def test_runs_are_compared_unpaired_and_differ_only_beyond_the_spread():
    from genai_pacer.testing.experiments import RUNS_DIFFERENCE_RULE, compare_runs

    before = [summary_with(0.50, 40.0), summary_with(0.56, 44.0)]
    after = [summary_with(0.40, 43.0), summary_with(0.44, 47.0)]
    result = compare_runs(before, after, metrics=("ttft_s.p90", "otps.p90", "ttft_s.p99"))
    ttft, otps, missing = (result["metrics"][m] for m in ("ttft_s.p90", "otps.p90", "ttft_s.p99"))
    assert (ttft["differs"], ttft["difference"]) == (True, -0.11)  # 0.40-0.44 against 0.50-0.56: apart
    assert (otps["differs"], otps["ranges_overlap"]) == (False, True)  # 43-47 against 40-44: within the spread
    assert (missing["difference"], missing["differs"]) == (None, False)  # no figure, no verdict
    assert result["rule"] == RUNS_DIFFERENCE_RULE and result["runs"] == {"before": 2, "after": 2}
    with pytest.raises(ValueError, match=r"1 run\(s\) before the change; .* at least two runs a side"):
        compare_runs(before[:1], after)


def test_the_compare_command_reads_deployed_and_local_runs(s3, tmp_path, capsys):
    """Two deployed runs (one stopped before its summary) against two local reports."""
    s3.copy_object(Bucket=BUCKET, Key="load-replay/run-8/run.json", CopySource={"Bucket": BUCKET, "Key": RUN + "run.json"})
    for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=RUN + "records/")["Contents"]:
        s3.copy_object(Bucket=BUCKET, Key=item["Key"].replace("run-7", "run-8"),
                       CopySource={"Bucket": BUCKET, "Key": item["Key"]})
    local = []
    for name, slower in (("a", 2.0), ("b", 2.2)):
        samples = [replay.Sample(**{**asdict(s), "ttft_s": (s.ttft_s or 0) * slower}) for s in records()]
        report = bench.BenchReport(CONFIG, samples, replay.summarize(samples, CONFIG))
        local.append(str(bench.write_report(report, tmp_path, name)[0]))
    code = main(["bench", "compare", "--before", f"s3://{BUCKET}/{RUN}", f"s3://{BUCKET}/load-replay/run-8/",
                 "--after", *local])
    captured = capsys.readouterr()
    assert code == 0
    ttft = json.loads(captured.out)["metrics"]["ttft_s.p90"]
    assert ttft["differs"] and ttft["difference"] > 0
    assert "ttft_s.p90: " in captured.err and ": differs" in captured.err


def test_a_local_report_loads_back_with_its_records(tmp_path):
    samples = records()
    report = bench.BenchReport(CONFIG, samples, replay.summarize(samples, CONFIG))
    json_path = bench.write_report(report, tmp_path, "local")[0]
    loaded = bench.load_run(json_path)
    # bench.Sample is the runtime file loaded by its path (another class object): compare the fields
    assert [asdict(s) for s in loaded.samples] == [asdict(s) for s in samples]
    assert asdict(loaded.config) == asdict(CONFIG)
    assert loaded.summary == json.loads(json.dumps(report.summary))
