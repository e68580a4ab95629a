"""bench/shared_quota_experiment.py's additions (issue 25): the event simulation of the ledger's
writes (--simulate), which runs the real SharedLedger against moto's DynamoDB backend on its own
clock, so its figures are exact and repeat; the size and write-unit accounting it reports against
DynamoDB's limits; and the configurations the process benchmark accepts."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "bench" / "shared_quota_experiment.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("shared_quota_experiment", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def plan(bench):
    return bench.quota_plan(bench.load_prompts(str(bench.SAMPLE_PROMPTS)), bench.EXPERIMENT_MODEL)


def test_an_attribute_is_sized_as_dynamodb_counts_it(bench):
    # a number: its name's bytes + 1 byte per two significant digits (zeroes at either end trimmed) + 1
    assert bench.attribute_bytes("held", {"N": "3081"}) == 4 + 2 + 1
    assert bench.attribute_bytes("held", {"N": "30810"}) == 4 + 2 + 1
    assert bench.attribute_bytes("held", {"N": "-12345"}) == 4 + 3 + 1
    assert bench.attribute_bytes("h#c1", {"N": "0"}) == 4 + 1 + 1
    # a string: its name's bytes + its UTF-8 bytes
    assert bench.attribute_bytes("wanted_by", {"S": "c1é"}) == 9 + 4


def test_an_update_is_charged_on_the_larger_of_the_item_before_and_after(bench):
    now = [bench.SIMULATION_EPOCH]
    table = bench.SimulatedDynamoDB(lambda: now[0])
    key = {"pk": {"S": "quota#q"}}
    big = "x" * 3000  # about 3 KB: three write units
    table.update_item(TableName=bench.TABLE, Key=key, UpdateExpression="SET #a = :a",
                      ExpressionAttributeNames={"#a": "a"}, ExpressionAttributeValues={":a": {"S": big}})
    now[0] += 1
    table.update_item(TableName=bench.TABLE, Key=key, UpdateExpression="REMOVE #a", ExpressionAttributeNames={"#a": "a"})
    # the removal shrinks the item to its key, and is still charged on the 3 KB it had before
    assert table.write_units == {0: 3, 1: 3} and table.writes == {0: 1, 1: 1}


def test_a_failed_condition_comes_back_as_the_ledger_expects_with_the_item(bench):
    from botocore.exceptions import ClientError

    table = bench.SimulatedDynamoDB(lambda: bench.SIMULATION_EPOCH)
    key = {"pk": {"S": "quota#q"}}
    table.update_item(TableName=bench.TABLE, Key=key, UpdateExpression="ADD #h :r", ExpressionAttributeNames={"#h": "held"},
                      ExpressionAttributeValues={":r": {"N": "5"}})
    with pytest.raises(ClientError) as failed:
        table.update_item(TableName=bench.TABLE, Key=key, UpdateExpression="ADD #h :r", ConditionExpression="#h <= :c",
                          ExpressionAttributeNames={"#h": "held"},
                          ExpressionAttributeValues={":r": {"N": "5"}, ":c": {"N": "1"}},
                          ReturnValuesOnConditionCheckFailure="ALL_OLD")
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert failed.value.response["Item"] == {"pk": {"S": "quota#q"}, "held": {"N": "5"}}
    assert table.conditional_failures == 1


def test_one_consumer_at_light_load_costs_about_one_write_a_call_and_never_conflicts(bench, plan):
    """The protocol's steady-state cost: a reservation per call, the settlement's return riding the next
    one (a few written alone, when they waited settle_delay_seconds), one read on first use."""
    row = bench.simulate(1, 20, plan=plan, load=0.5, minutes=2, seed=0)
    assert row["calls"] == row["requests"] > 0
    assert 1.0 <= row["ledger_writes_per_call"] < 1.5
    counts = row["ledger_counts"]  # each write a reservation, or deferred returns written on their own
    assert counts["writes"] == counts["reserved"] + counts["flushes"] and counts["flushes"] < counts["reserved"] / 4
    assert row["ledger_conflicts"] == row["conditional_check_failures"] == 0
    assert row["ledger_reads_per_call"] == round(1 / row["calls"], 3)
    assert row["p99_wait_s"] == 0.0  # nothing ever waited: the quota held every call at once


def test_the_simulation_is_exact_repeatable_and_keeps_every_consumer_inside_the_quota(bench, plan):
    """Several consumers at twice the load: the same seed gives the same figures to the last digit (no
    wall clock, no threads); the window never holds more than the quota; stale views cause conflicts,
    which the conditional writes catch (each one is a failed condition DynamoDB charged)."""
    first = bench.simulate(3, 60, plan=plan, load=2.0, minutes=2, seed=1)
    def exact(row: dict) -> dict:  # every figure but the machine's load, which the report carries beside them
        return {name: value for name, value in row.items() if name != "load_average"}

    assert exact(first) == exact(bench.simulate(3, 60, plan=plan, load=2.0, minutes=2, seed=1))
    assert first["calls"] == first["requests"]  # every call got in, after waiting in the ledger
    assert first["held_peak_pct_of_quota"] <= 100
    assert first["p50_wait_s"] > 0  # at 2x load the ledger made calls wait
    assert 0 < first["ledger_conflicts"] <= first["conditional_check_failures"]
    assert first["ledger_writes_per_call"] > 1  # a reservation per call, and the conflicts' retries
    assert first["largest_item_kb"] * 1024 <= bench.MAX_ITEM_BYTES
    assert first["seconds_over_partition_write_limit"] == 0  # three consumers are far from a partition's limit
    assert exact(first) != exact(bench.simulate(3, 60, plan=plan, load=2.0, minutes=2, seed=2))  # the seed matters


def test_the_simulation_says_where_the_items_bytes_and_each_calls_writes_go(bench, plan):
    """What the cuts of issue 25 were chosen by: the largest item's bytes by attribute family add up to
    its size, each call's writes by kind to the writes a call, and every failed condition has a cause."""
    row = bench.simulate(3, 60, plan=plan, load=2.0, minutes=2, seed=1)
    families = row["largest_item_bytes_by_family"]
    assert round(sum(families.values()) / 1024, 1) == row["largest_item_kb"]
    assert families["slots"] > families["consumers (h#)"] > 0
    assert sum(row["largest_item_attributes_by_family"].values()) > row["largest_item_attributes_by_family"]["slots"] > 0
    kinds = row["writes_per_call_by_kind"]
    assert kinds["reservations"] == 1.0 and kinds["other"] == 0  # every call reserved once, nothing unaccounted
    assert sum(kinds.values()) == pytest.approx(row["ledger_writes_per_call"], abs=0.005)
    assert sum(row["failed_conditions_by_cause"].values()) == row["conditional_check_failures"]


def test_a_failed_condition_is_blamed_on_the_clause_that_failed_first_a_removed_slot(bench):
    """A removal pins the expired slot and, when it is its consumer's last, the consumer's h#: when
    another writer removed both, the cause is the slot (the h# pin fails with it)."""
    request = {"ConditionExpression": "#p0 = :p0 AND #e0 = :e0 AND (attribute_not_exists(#held) OR #held <= :total)",
               "ExpressionAttributeNames": {"#p0": "h#b", "#e0": "s#00:00:01#b", "#held": "held"},
               "ExpressionAttributeValues": {":p0": {"N": "100"}, ":e0": {"N": "100"}, ":total": {"N": "900"}}}
    assert bench.conflict_cause(request, {"held": {"N": "950"}}) == "an expired slot another writer removed"
    pinned = {"h#b": {"N": "100"}, "s#00:00:01#b": {"N": "100"}, "held": {"N": "950"}}
    assert bench.conflict_cause(request, pinned) == "a ceiling (the window, the consumer's or the day's)"
    assert bench.conflict_cause(request, {**pinned, "h#b": {"N": "200"}}) == "a consumer attribute pinned for removal"
    gone = {"ConditionExpression": "attribute_exists(#r0)", "ExpressionAttributeNames": {"#r0": "s#00:00:02#a"},
            "ExpressionAttributeValues": {}}
    assert bench.conflict_cause(gone, {}) == "a carried return's slot gone"


def test_simulate_writes_the_results_layout_with_its_sources(bench, tmp_path):
    out = tmp_path / "sim.json"
    assert bench.main(["--simulate", "--seeds", "1", "--consumers", "2", "--calls-per-minute", "30", "--minutes", "1.5",
                       "--load", "0.5", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report) == {"experiment", "description", "conditions", "runs", "summary", "wall_seconds"}
    assert report["experiment"] == "shared_quota_simulation" and list(report["runs"]) == ["2:30"]
    assert report["conditions"]["partition_write_units_per_second"] == 1_000
    assert report["conditions"]["max_item_bytes"] == 400 * 1024
    assert report["summary"]["2:30"]["ledger_writes_per_call"]["mean"] == report["runs"]["2:30"][0]["ledger_writes_per_call"]


def test_a_configuration_the_benchmark_cannot_run_is_refused_by_name(bench):
    assert bench.parse_configurations("16:ledger, 4:unbounded") == [(16, "ledger"), (4, "unbounded")]
    for wrong in ("4:shared", "0:ledger", "ledger"):
        with pytest.raises(SystemExit, match="--configurations: .* static, whole, ledger, unbounded"):
            bench.parse_configurations(wrong)


def test_a_bounded_map_beside_the_processes_reserves_in_their_ledger_item_on_their_model_clock(bench, plan):
    """--map-items: the BoundedMap's execution (StateMachineRunner, the same emulator) writes the very
    item the processes reach through the moto server, and names its slots on the processes' model
    clock (here an hour ahead of the wall clock), or the processes would see its holds as long expired
    and remove them. Then the patches are undone."""
    from datetime import UTC, datetime

    from genai_pacer.testing import BedrockEmulator
    from moto.dynamodb.models import DynamoDBBackend

    original = DynamoDBBackend.update_item
    ahead = 3_600.0
    with BedrockEmulator([bench.EXPERIMENT_MODEL], seed=0, time_scale=50) as emulator, \
            bench.MapBeside(emulator, plan, ["Say hello.", "Say goodbye."]) as beside:
        began = datetime.now(UTC).timestamp()
        beside.start(lambda: datetime.now(UTC).timestamp() + ahead, began).join()
        figures = beside.figures(50)
        item = bench.dynamodb_client(beside.endpoint).get_item(  # as a worker process reads it
            TableName=beside.table, Key={"pk": {"S": "quota#" + beside.ledger_id}}, ConsistentRead=True)["Item"]
    assert figures["map_succeeded"] and figures["map_model_calls"] == 2 and figures["map_throttled_attempts"] == 0
    slots = {name: int(value["N"]) for name, value in item.items() if name.startswith("s#")}
    assert slots and all(name.endswith("#" + bench.MAP_SHARE) for name in slots)
    from pacer_runtime.ledger import _parse_slot

    starts = [_parse_slot(name, began + ahead)[0] for name in slots]  # a slot names its second on the model clock
    assert all(began + ahead - 2 <= start <= began + ahead + 600 for start in starts)
    assert int(item["held"]["N"]) == sum(slots.values()) > 0
    assert DynamoDBBackend.update_item is original
