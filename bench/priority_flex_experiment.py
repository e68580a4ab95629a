"""Interactive calls at Priority and background calls at Flex sharing one on-demand quota, against the
same calls all at default, on the emulator (issue 37.6): what Priority buys the interactive calls and
what Flex costs the background work, at 1x and 2x load, over seeded trials.

ASSUMPTIONS, the emulator's and so this benchmark's (constructs/genai_pacer/testing/emulator.py and
slots.py; AWS publishes neither how Bedrock orders its queue nor whether the quota favours a tier):

- One on-demand quota per model for priority, default and flex (the Bedrock user guide's service
  tiers page says so). The emulator charges it at admission, the same for every tier: a call the
  window cannot hold is throttled at once, Priority included; no tier has room of its own.
- With ModelSpec.serving_slots, the model serves that many calls at once and the others wait, Priority
  first and Flex last, first come first served within a tier (slots.ASSUMED_TIER_ORDER, read from
  AWS's words only); a call that waited max_queue_seconds is refused with ThrottlingException. A
  waiting call already holds its quota reservation.
- Every tier runs at the same speed once served (no TierLatency here), so any difference below is the
  queue order alone.

Hence two regimes, each with both classes drawing on the one quota:

- quota-bound: the quota is what runs out (it sustains about as many calls a minute as the
  serving-bound model serves; no serving slots, so nothing waits in a queue). The emulator's quota
  knows no tier, so the tiers should change nothing here beyond noise.
- serving-bound: Bedrock's serving capacity is what runs out (4 slots; the quota far above the load).
  Only here does the tier order anything.

Per regime, load and seed, one Poisson arrival stream at `load` x the regime's capacity (calls a
minute), each arrival interactive with probability --interactive-share (else background), its prompt
drawn from the shipped sample prompts (max_tokens 400, ConverseStream), is sent twice, each time to a
fresh emulator:

- tiered: interactive calls ask for priority, background calls for flex;
- untiered: the same arrivals, all at default (each keeps its class for the report).

Each call is retried on a throttle up to --attempts in all, with full-jitter backoff (base 1 s, cap 20 s
of model time, the draws seeded per call, so both arms back off alike), as botocore's standard mode
does; a call still throttled then fails. Reported per class, in model seconds from arrival (the call's
server-side first token and end, from the emulator's record of its last attempt, found by RequestId):
TTFT and end-to-end p50/p90/p99 of the answered calls; throttled attempts and failed calls; and, for
the background class, the calls answered and output tokens a minute of the run (from the first arrival
to the end of the last call). Over the seeds: mean, min-max and 95% t-interval (spread), and tiered
minus untiered paired by seed (compare: "differs" when the ranges do not overlap and the interval
excludes 0).

Time: by default the emulator's wall clock runs --time-scale times faster than model time; the client's
own delays on a loaded machine then show as `start_lag_s` (arrival to the first attempt reaching the
emulator). --manual-clock STEP runs the same code on a ManualClock instead, advancing model time STEP
seconds at a time once every call in flight is asleep on the clock or waiting for a slot: figures then
depend on the seed only, not on the machine (each sleep ends on the STEP grid).

Run (5 seeds x 2 loads x 2 arms x 2 regimes: 11 minutes of wall time at the defaults on a shared 2-core
machine, 4 minutes with --manual-clock 0.05):
    nice -n 10 .venv/bin/python bench/priority_flex_experiment.py --out bench/results/priority_flex_experiment.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "constructs"), str(ROOT / "lambda")]

from botocore.exceptions import ClientError  # noqa: E402
from genai_pacer.testing import BedrockEmulator, ManualClock, ModelSpec  # noqa: E402
from genai_pacer.testing.bench import Prompt, converse_request, error_code, load_prompts, percentiles  # noqa: E402
from genai_pacer.testing.experiments import DIFFERENCE_RULE, compare, machine_report, quota_plan, spread  # noqa: E402
from genai_pacer.testing.slots import ASSUMED_TIER_ORDER  # noqa: E402
from genai_pacer.testing.specs import approx_tokens  # noqa: E402
from pacer_runtime import is_throttle  # noqa: E402

#: The reference stacks' model (stacks/settings.py), burndown 1.
MODEL_ID = "us.amazon.nova-2-lite-v1:0"
MAX_TOKENS = 400
TTFT_SECONDS, PREFILL_PER_SECOND, OUTPUT_PER_SECOND, JITTER = 0.5, 8_000.0, 60.0, 0.1
DEFAULT_PROMPTS = ROOT / "constructs" / "genai_pacer" / "testing" / "data" / "prompts.jsonl"
CLASSES = ("interactive", "background")
#: The tier each class asks for in the tiered arm; the untiered arm asks for default for both.
TIERS = {"interactive": "priority", "background": "flex"}
ARMS = ("tiered", "untiered")
REGIMES = ("quota-bound", "serving-bound")
#: serving-bound: far above any load here, so only the serving slots run out.
UNBOUNDED_TPM = 100_000_000
#: Client retries: full jitter, model seconds (botocore's standard mode: 3 attempts in all).
BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS = 1.0, 20.0
#: Wall seconds a ManualClock run may wait for its calls to settle before it calls the run stuck.
SETTLE_WALL_SECONDS = 120.0


def model_spec(regime: str, *, quota_tpm: int, slots: int, max_queue_seconds: float) -> ModelSpec:
    serving = regime == "serving-bound"
    return ModelSpec(MODEL_ID, tpm_quota=UNBOUNDED_TPM if serving else quota_tpm, burndown=1,
                     ttft_seconds=TTFT_SECONDS, prefill_tokens_per_second=PREFILL_PER_SECOND,
                     output_tokens_per_second=OUTPUT_PER_SECOND, jitter=JITTER,
                     serving_slots=slots if serving else None, max_queue_seconds=max_queue_seconds)


def mean_call_seconds(prompts: Sequence[Prompt]) -> float:
    """A call's model seconds once served, over the prompts (the emulator's latency model without jitter)."""
    def seconds(prompt: Prompt) -> float:
        output = min(prompt.expected_output_tokens or 300, MAX_TOKENS)
        return TTFT_SECONDS + approx_tokens(prompt.input_text) / PREFILL_PER_SECOND + output / OUTPUT_PER_SECOND
    return statistics.fmean(seconds(p) for p in prompts)


def capacity(regime: str, prompts: Sequence[Prompt], spec: ModelSpec) -> float:
    """Calls a minute the regime's bottleneck sustains: the planner's rate for the quota, or slots / call time."""
    if regime == "serving-bound":
        return (spec.serving_slots or 1) * 60 / mean_call_seconds(prompts)
    return float(quota_plan(prompts, spec, max_tokens=MAX_TOKENS)["sustainable_requests_per_minute"])


def arrivals(seed: int, count: int, per_minute: float, interactive_share: float,
             prompts: Sequence[Prompt]) -> list[tuple[float, str, Prompt]]:
    """(arrival model second, class, prompt) per call: Poisson arrivals, class and prompt drawn with the seed."""
    rng = random.Random(seed)
    at, plan = 0.0, []
    for _ in range(count):
        klass = "interactive" if rng.random() < interactive_share else "background"
        plan.append((at, klass, prompts[rng.randrange(len(prompts))]))
        at += rng.expovariate(per_minute / 60)
    return plan


class Driver:
    """Moves model time for a run: the emulator's wall clock runs by itself; a ManualClock is advanced
    `step` seconds at a time, each time only once every call in flight is asleep on the clock (the
    emulator serving it, or the client backing off) or waiting for a serving slot."""

    def __init__(self, emulator: BedrockEmulator, step: float | None):
        self.emulator, self.clock, self.step = emulator, emulator.clock, step
        self.in_flight = 0
        self._lock = threading.Lock()

    def started(self) -> None:
        with self._lock:
            self.in_flight += 1

    def finished(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _settled(self) -> None:
        if self.step is None:
            return
        assert isinstance(self.clock, ManualClock)
        deadline = time.monotonic() + SETTLE_WALL_SECONDS
        while self.in_flight and self.clock.sleepers + self.emulator.queued(MODEL_ID) < self.in_flight:
            if time.monotonic() > deadline:
                raise RuntimeError(f"calls never settled: {self.in_flight} in flight, {self.clock.sleepers} asleep, "
                                   f"{self.emulator.queued(MODEL_ID)} waiting for a slot")
            time.sleep(0.001)

    def until(self, when: float) -> None:
        """Return at model time `when` (at once if it has passed)."""
        if self.step is None:
            self.clock.sleep(when - self.clock.now())
            return
        assert isinstance(self.clock, ManualClock)
        while self.clock.now() < when:
            self._settled()
            left = when - self.clock.now()
            self.clock.advance(left if not self.in_flight else min(self.step, left))

    def submitted(self) -> None:
        """Let a call just sent reach the emulator and block there before time moves on."""
        self._settled()

    def drain(self, futures: Sequence[Any]) -> None:
        if self.step is not None:
            assert isinstance(self.clock, ManualClock)
            while self.in_flight:
                self._settled()
                if self.in_flight:
                    self.clock.advance(self.step)
        for future in futures:
            future.result()


def run(arm: str, plan: Sequence[tuple[float, str, Prompt]], spec: ModelSpec, *, seed: int, attempts: int,
        time_scale: float, step: float | None) -> list[dict[str, Any]]:
    """Send the planned arrivals to a fresh emulator; one record per call (model seconds from arrival)."""
    records: list[dict[str, Any]] = [{} for _ in plan]
    clock = {"clock": ManualClock()} if step is not None else {"time_scale": time_scale}
    with BedrockEmulator([spec], seed=seed, **clock) as bedrock:  # type: ignore[arg-type]
        read_timeout = 3_600.0 if step is not None else max(60.0, 2 * spec.max_queue_seconds / time_scale)
        client = bedrock.client(max_pool_connections=len(plan), retries={"total_max_attempts": 1},
                                read_timeout=read_timeout)
        driver = Driver(bedrock, step)

        def one(index: int) -> None:
            arrived, klass, prompt = plan[index]
            try:
                records[index] = call(client, bedrock.clock, arm, klass, prompt, arrived,
                                      random.Random(f"{seed}:{index}"), attempts)
            finally:
                driver.finished()

        with ThreadPoolExecutor(max_workers=len(plan), thread_name_prefix=arm) as pool:
            futures = []
            for index, (arrived, _, _) in enumerate(plan):
                driver.until(arrived)
                driver.started()
                futures.append(pool.submit(one, index))
                driver.submitted()
            driver.drain(futures)
        measure(records, plan, {i.request_id: i for i in bedrock.invocations})
    return records


def call(client: Any, clock: Any, arm: str, klass: str, prompt: Prompt, arrived: float, rng: random.Random,
         attempts: int) -> dict[str, Any]:
    """One call with its retries; the emulator's records of its attempts are joined in `measure`."""
    tier = TIERS[klass] if arm == "tiered" else "default"
    request = converse_request(prompt, MODEL_ID, max_tokens=MAX_TOKENS) | {"serviceTier": {"type": tier}}
    record: dict[str, Any] = {"class": klass, "asked": tier, "throttled": 0, "request_ids": []}
    for attempt in range(1, attempts + 1):
        try:
            response = client.converse_stream(**request)
            record["request_ids"].append(response["ResponseMetadata"]["RequestId"])
            collections.deque(response["stream"], maxlen=0)  # read the stream to its end, keeping nothing
        except ClientError as error:  # a refusal is counted, never hidden in a latency
            request_id = (error.response.get("ResponseMetadata") or {}).get("RequestId")
            if request_id:
                record["request_ids"].append(request_id)
            if not is_throttle(error):
                record["error"] = error_code(error)
                break
            record["throttled"] += 1
            if attempt == attempts:
                record["error"] = error_code(error)
                break
            clock.sleep(rng.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))))
        else:
            break
    record["attempts"] = len(record["request_ids"])
    record["end_s"] = round(clock.now() - arrived, 4)
    return record


def measure(records: list[dict[str, Any]], plan: Sequence[tuple[float, str, Prompt]], seen: dict[str, Any]) -> None:
    """Add to each record the server-side figures of its attempts (model seconds from arrival)."""
    for record, (arrived, _, _) in zip(records, plan, strict=True):
        record["arrived_s"] = round(arrived, 4)
        tries = [seen[i] for i in record.pop("request_ids") if i in seen]
        if tries:
            record["start_lag_s"] = round(tries[0].started - arrived, 4)  # the client's own delay
        last = tries[-1] if tries else None
        if "error" in record or last is None or last.outcome != "ok":
            continue
        if last.served_tier != record["asked"]:  # the emulator echoes the tier it served: a mismatch is a bug here
            raise RuntimeError(f"a call asked for {record['asked']!r} and was served at {last.served_tier!r}")
        record["ttft_s"] = round(last.started + last.ttft_ms / 1000 - arrived, 4)
        record["e2e_s"] = round(last.started + last.latency_ms / 1000 - arrived, 4)
        record["queued_s"] = round((last.queued_ms or 0) / 1000, 4)
        record["output_tokens"] = last.output_tokens


PERCENTILE_METRICS = tuple(f"{m}_p{q}" for m in ("ttft_s", "e2e_s") for q in (50, 90, 99))
COUNT_METRICS = ("requests", "answered", "failed", "throttled_attempts")
RATE_METRICS = ("answered_per_minute", "output_tokens_per_minute")
METRICS = PERCENTILE_METRICS + COUNT_METRICS + RATE_METRICS


def summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per class: counts, TTFT and e2e p50/p90/p99 of the answered calls, work a minute of the run; and
    the client's own start delay over all calls."""
    minutes = max((r["arrived_s"] + r["end_s"] for r in records), default=0.0) / 60
    lags = [r["start_lag_s"] for r in records if "start_lag_s" in r]
    lag = percentiles(lags)
    out: dict[str, Any] = {"run_minutes": round(minutes, 3),
                           "client": {"start_lag_s_p50": lag.p50, "start_lag_s_p99": lag.p99}}
    for klass in CLASSES:
        mine = [r for r in records if r["class"] == klass]
        answered = [r for r in mine if "e2e_s" in r]
        figures: dict[str, Any] = {
            "requests": len(mine), "answered": len(answered), "failed": sum("error" in r for r in mine),
            "errors": sorted({r["error"] for r in mine if "error" in r}),
            "throttled_attempts": sum(r["throttled"] for r in mine),
            "answered_per_minute": round(len(answered) / minutes, 3) if minutes else None,
            "output_tokens_per_minute": round(sum(r["output_tokens"] for r in answered) / minutes, 1) if minutes else None,
        }
        for metric in ("ttft_s", "e2e_s"):
            values = percentiles([r[metric] for r in answered])
            figures.update({f"{metric}_p50": values.p50, f"{metric}_p90": values.p90, f"{metric}_p99": values.p99})
        out[klass] = figures
    return out


def experiment(prompts: Sequence[Prompt], *, regimes: Sequence[str], loads: Sequence[float], seeds: Sequence[int],
               requests: int, interactive_share: float, quota_tpm: int, slots: int, max_queue_seconds: float,
               attempts: int, time_scale: float, step: float | None, log: Callable[[str], None]) -> dict[str, Any]:
    """Every regime x load x seed x arm; figures per run, their spread and the paired differences."""
    results: dict[str, Any] = {}
    for regime in regimes:
        spec = model_spec(regime, quota_tpm=quota_tpm, slots=slots, max_queue_seconds=max_queue_seconds)
        rate = capacity(regime, prompts, spec)
        results[regime] = {"capacity_calls_per_minute": round(rate, 2), "tpm_quota": spec.tpm_quota,
                           "serving_slots": spec.serving_slots, "loads": {}}
        for load in loads:
            runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
            for seed in seeds:
                plan = arrivals(seed, requests, load * rate, interactive_share, prompts)
                for arm in ARMS:
                    records = run(arm, plan, spec, seed=seed, attempts=attempts, time_scale=time_scale, step=step)
                    figures = {"seed": seed, **summary(records)}
                    runs[arm].append(figures)
                    i, b = figures["interactive"], figures["background"]
                    log(f"{regime} {load:g}x seed {seed} {arm}: interactive ttft p50 {i['ttft_s_p50']} p99 {i['ttft_s_p99']} "
                        f"e2e p99 {i['e2e_s_p99']}, throttled {i['throttled_attempts']}, failed {i['failed']}; background "
                        f"{b['answered_per_minute']}/min, throttled {b['throttled_attempts']}, failed {b['failed']}; "
                        f"client start lag p99 {figures['client']['start_lag_s_p99']}")
            results[regime]["loads"][f"{load:g}x"] = {
                "arrivals_per_minute": round(load * rate, 2),
                "runs": runs,
                "spread": {arm: {klass: {m: spread([r[klass][m] for r in runs[arm]]) for m in METRICS}
                                 for klass in CLASSES} for arm in ARMS},
                "tiered_minus_untiered": {klass: {m: compare([r[klass][m] for r in runs["untiered"]],
                                                             [r[klass][m] for r in runs["tiered"]]) for m in METRICS}
                                          for klass in CLASSES},
                "client_start_lag_s_p99": spread([r["client"]["start_lag_s_p99"] for arm in ARMS for r in runs[arm]]),
            }
    return results


def _cell(s: dict[str, Any], count: bool = False) -> str:
    """mean (min–max) over the seeds; a count's range in whole calls."""
    if s["mean"] is None:
        return "n/a"
    low, high = (f"{s['min']:.0f}", f"{s['max']:.0f}") if count else (f"{s['min']:.1f}", f"{s['max']:.1f}")
    mean = f"{s['mean']:.0f}" if count and s["mean"] == int(s["mean"]) else f"{s['mean']:.1f}"
    return mean if low == high else f"{mean} ({low}–{high})"


def markdown(report: dict[str, Any]) -> str:
    """The table: mean (min–max) over the seeds, per regime, load and arm; latencies in model seconds."""
    lines = ["| regime | load | arm | interactive TTFT p50 / p99 | interactive end-to-end p50 / p99 | "
             "background end-to-end p50 / p99 | background answered / min | throttled attempts: interactive / "
             "background | failed: interactive / background |",
             "|---|---|---|---|---|---|---|---|---|"]
    for regime, data in report["results"].items():
        for load, entry in data["loads"].items():
            for arm in ARMS:
                i, b = entry["spread"][arm]["interactive"], entry["spread"][arm]["background"]
                lines.append(f"| {regime} | {load} | {arm} | {_cell(i['ttft_s_p50'])} / {_cell(i['ttft_s_p99'])} | "
                             f"{_cell(i['e2e_s_p50'])} / {_cell(i['e2e_s_p99'])} | "
                             f"{_cell(b['e2e_s_p50'])} / {_cell(b['e2e_s_p99'])} | {_cell(b['answered_per_minute'])} | "
                             f"{_cell(i['throttled_attempts'], True)} / {_cell(b['throttled_attempts'], True)} | "
                             f"{_cell(i['failed'], True)} / {_cell(b['failed'], True)} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--regimes", default=",".join(REGIMES), help=f"comma-separated, of {', '.join(REGIMES)}")
    parser.add_argument("--loads", default="1,2", help="comma-separated arrival rates as multiples of the capacity")
    parser.add_argument("--seeds", type=int, default=5, help="trials per regime and load, seeds 0..N-1 (default 5)")
    parser.add_argument("--requests", type=int, default=180, help="arrivals per run")
    parser.add_argument("--interactive-share", type=float, default=0.3, help="probability an arrival is interactive")
    parser.add_argument("--quota-tpm", type=int, default=80_000, help="quota-bound: the model's tokens per minute")
    parser.add_argument("--slots", type=int, default=4, help="serving-bound: calls the model serves at once")
    parser.add_argument("--max-queue-seconds", type=float, default=60.0, help="model seconds a call may wait for a slot")
    parser.add_argument("--attempts", type=int, default=3, help="attempts per call in all (throttles are retried)")
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--manual-clock", type=float, default=None, metavar="STEP",
                        help="run on a ManualClock advanced STEP model seconds at a time (figures independent of the machine)")
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "priority_flex_experiment.json")
    args = parser.parse_args(argv)
    regimes = [r for r in args.regimes.split(",") if r]
    if not regimes or any(r not in REGIMES for r in regimes):
        parser.error(f"--regimes takes {', '.join(REGIMES)}, comma-separated; got {args.regimes!r}")
    try:
        loads = [float(x) for x in args.loads.split(",") if x.strip()]
    except ValueError:
        loads = []
    if not loads or any(load <= 0 for load in loads):
        parser.error(f"--loads must be numbers > 0, comma-separated, e.g. 1,2; got {args.loads!r}")
    if args.seeds < 1 or args.requests < 1 or args.attempts < 1 or args.slots < 1 or args.quota_tpm < 1:
        parser.error("--seeds, --requests, --attempts, --slots and --quota-tpm must be at least 1")
    if not 0 <= args.interactive_share <= 1:
        parser.error(f"--interactive-share must be from 0 to 1; got {args.interactive_share}")
    if args.time_scale <= 0 or (args.manual_clock is not None and args.manual_clock <= 0):
        parser.error("--time-scale and --manual-clock must be > 0")
    prompts = load_prompts(args.prompts)
    began, load_before = time.perf_counter(), os.getloadavg()
    log = lambda line: print(line, flush=True)  # noqa: E731
    results = experiment(prompts, regimes=regimes, loads=loads, seeds=range(args.seeds), requests=args.requests,
                         interactive_share=args.interactive_share, quota_tpm=args.quota_tpm, slots=args.slots,
                         max_queue_seconds=args.max_queue_seconds, attempts=args.attempts, time_scale=args.time_scale,
                         step=args.manual_clock, log=log)
    report: dict[str, Any] = {
        "experiment": "priority for interactive calls, flex for background calls, one on-demand quota (issue 37.6)",
        "assumptions": [
            "one on-demand quota for priority, default and flex, charged at admission the same for every tier "
            "(no tier has room of its own)",
            f"waiting calls take a free serving slot in the order {' > '.join(ASSUMED_TIER_ORDER)}, first come first "
            "served within a tier; a call that waited max_queue_seconds is refused with ThrottlingException",
            "every tier runs at the same speed once served (no TierLatency)",
        ],
        "settings": {
            "model_id": MODEL_ID, "burndown": 1, "max_tokens": MAX_TOKENS, "streaming": True,
            "ttft_seconds": TTFT_SECONDS, "prefill_tokens_per_second": PREFILL_PER_SECOND,
            "output_tokens_per_second": OUTPUT_PER_SECOND, "jitter": JITTER,
            "classes": {k: {"tiered": v, "untiered": "default"} for k, v in TIERS.items()},
            "interactive_share": args.interactive_share, "requests": args.requests, "seeds": list(range(args.seeds)),
            "loads": loads, "quota_tpm": args.quota_tpm, "slots": args.slots, "max_queue_seconds": args.max_queue_seconds,
            "attempts": args.attempts, "backoff": {"base_s": BACKOFF_BASE_SECONDS, "cap_s": BACKOFF_CAP_SECONDS, "jitter": "full"},
            "clock": (f"ManualClock, {args.manual_clock} model s a step" if args.manual_clock is not None
                      else f"wall, time_scale {args.time_scale:g}"),
            "prompts": str(args.prompts.relative_to(ROOT) if args.prompts.is_relative_to(ROOT) else args.prompts),
            "mean_call_model_seconds": round(mean_call_seconds(prompts), 3),
        },
        "units": ("latencies: model seconds from arrival, of the answered calls, at the call's last attempt; "
                  "throttled_attempts and failed: per run; answered_per_minute and output_tokens_per_minute: "
                  "per model minute from the first arrival to the end of the last call"),
        "difference_rule": DIFFERENCE_RULE,
        "results": results,
    }
    report["machine"] = machine_report(began, load_before)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    args.out.with_suffix(".md").write_text(table)
    log(table)
    log(f"wrote {args.out} and {args.out.with_suffix('.md').name} in {report['machine']['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
