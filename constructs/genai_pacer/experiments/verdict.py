"""The verdict of a live prompt/model experiment: is the difference real, and can the data be trusted?

Input is what the runtime writes (pacer_runtime.experiment: one EMF JSON line per call, failed
call and outcome event, each with Experiment, Variant and a pseudonymous Unit), exported from
CloudWatch Logs (`aws logs filter-log-events`, an S3 export, or Logs Insights results saved as
JSON lines; a leading timestamp before the JSON is skipped), or per-variant figures you assemble
yourself from metric data (`VariantData`). Latency intervals need the individual calls, so metric
data that holds only aggregates gives counts and rates, not latency intervals.

The report puts the sample-ratio-mismatch check first: a chi-square test of the users seen per
variant against the configured split. A mismatch means the assignment or the logging is broken
(a variant that crashes before it logs, a cache serving an old split, bots in one arm), and no
difference below it should be read until that is fixed.

Then, per variant: users, calls, error rate, latency p50/p90/p99 with percentile-bootstrap
confidence intervals, and outcome rates (share of users with at least one thumbs-up, escalation,
resolution...) with Wilson intervals. Each treatment is compared with the control: the difference,
its interval (percentile bootstrap for latency; Newcombe's hybrid score interval for rates, sound
when a rate is 0 where the Wald interval collapses to a point), a p-value and whether it is
significant at `level`, Bonferroni-corrected for the number of treatments (not for the several
metrics compared per treatment: decide the primary metric before the test). Standard library only (numpy speeds up the bootstrap when installed);
`chart()` needs matplotlib and draws with the Agg backend.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from .._internal.checks import Checks
from .._internal.install import MATPLOTLIB_HINT, missing
from .._internal.runtime_constants import metrics_constants
from ..stats import percentile_of_sorted

__all__ = [
    "Comparison",
    "LatencyEstimate",
    "Rate",
    "SampleRatioCheck",
    "Verdict",
    "VariantData",
    "VariantResult",
    "chi_square_sf",
    "read_log",
    "sample_ratio_check",
    "verdict",
    "wilson",
]

PERCENTILES = (50, 90, 99)
#: The record field names the runtime writes (pacer_runtime.metrics, the one place they are spelled).
_NAMES = metrics_constants()
#: The runtime's outcome names (pacer_runtime.metrics.OUTCOMES), in report order.
OUTCOMES = tuple(_NAMES.OUTCOMES)
#: Sample-ratio checks are run at a strict level: a true mismatch gives p-values far below it,
#: and a false alarm stops a sound experiment.
DEFAULT_SRM_LEVEL = 0.001


@dataclass
class VariantData:
    """What one variant's records hold: users seen, call latencies (ms), failed calls, users with each outcome."""

    name: str
    units: set[str] = field(default_factory=set)
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    outcome_units: dict[str, set[str]] = field(default_factory=dict)
    unit_count: int | None = None  # when units are only counted (metric data), not listed

    @property
    def users(self) -> int:
        return self.unit_count if self.unit_count is not None else len(self.units)

    @property
    def calls(self) -> int:
        return len(self.latencies_ms) + self.errors


def read_log(
    lines: Iterable[str | bytes] | str | Path,
    *,
    experiment: str | None = None,
    latency_field: str = _NAMES.LATENCY_MS,
) -> dict[str, VariantData]:
    """Per-variant data from the runtime's JSON lines (a path, or an iterable of lines).

    latency_field: the record field holding a call's latency. Default: LatencyMs, as the caller
    measured it; ServiceLatencyMs is Bedrock's own figure (and the emulator's model time).
    Lines that are not experiment records are skipped. Records of several experiments need
    `experiment` to pick one. Also accepted: the log's text itself (several lines), and records
    already parsed (dicts, e.g. Logs Insights results).
    """
    with Checks("read_log") as check:
        if check.text("latency_field", latency_field, fix="LatencyMs or ServiceLatencyMs"):
            check.rule(latency_field.strip() == latency_field, f"latency_field={latency_field!r} has spaces around it", id="latency_field.spaces")
        check.text("experiment", experiment, optional=True, fix="the experiment name the records carry")
        if lines is None or isinstance(lines, int | float | bool) or not isinstance(lines, str | Path | Iterable):
            check.fail(f"lines={lines!r:.60} is {type(lines).__name__}; pass a path, the log's lines, or its text", id="lines.type")
    if isinstance(lines, str) and ("\n" in lines or lines.lstrip().startswith("{")):
        lines = lines.splitlines()  # the log's text, not a path
    if isinstance(lines, str | Path):
        with open(lines, encoding="utf-8") as handle:
            return read_log(handle.readlines(), experiment=experiment, latency_field=latency_field)
    data: dict[str, VariantData] = {}
    seen: set[str] = set()
    experiment_key, variant_key = _NAMES.EXPERIMENT_DIMENSION, _NAMES.VARIANT_DIMENSION
    errors_key = _NAMES.CALL_ERRORS
    for number, raw in enumerate(lines, 1):
        if isinstance(raw, Mapping):
            record: Any = dict(raw)
        else:
            text = raw.decode() if isinstance(raw, bytes) else raw
            if not isinstance(text, str):
                # runtime input (a log read after deployment), not a prop: a plain ValueError naming the line
                raise ValueError(f"line {number} is {type(raw).__name__}; pass lines of text (str or bytes) or dicts")
            start = text.find("{")
            if start < 0:
                continue
            try:
                record = json.loads(text[start:])
            except ValueError:
                continue
        if not isinstance(record, dict) or experiment_key not in record or variant_key not in record:
            continue
        seen.add(str(record[experiment_key]))
        if experiment is not None and record[experiment_key] != experiment:
            continue
        variant = data.setdefault(str(record[variant_key]), VariantData(str(record[variant_key])))
        unit = record.get("Unit")
        if unit is not None:
            variant.units.add(str(unit))
        if record.get(errors_key):
            variant.errors += _count(record[errors_key], number, errors_key)
        elif latency_field in record and "Outcome" not in record:
            variant.latencies_ms.append(_latency(record[latency_field], number, latency_field))
        if "Outcome" in record and unit is not None:
            variant.outcome_units.setdefault(str(record["Outcome"]), set()).add(str(unit))
    with Checks("read_log") as check:
        check.rule(experiment is not None or len(seen) <= 1,
                   f"the log holds experiments {sorted(seen)}; pass experiment= to pick one", id="experiment.several-in-log")
        check.rule(experiment is None or not seen or experiment in seen,
                   f"the log holds no records of experiment={experiment!r}, only of {sorted(seen)}; pass one of those names", id="experiment.not-in-log")
    return data


def _latency(value: Any, line: int, name: str) -> float:
    """A latency from a record: a finite number >= 0, or a ValueError naming the line."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        # a damaged log line (runtime input, not a prop): a plain ValueError naming the line, not Checks
        raise ValueError(f"line {line}: {name}={value!r} is not a latency in ms (a finite number >= 0); the record is "
                         "damaged or latency_field names the wrong field")
    return float(value)


def _count(value: Any, line: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        # a damaged log line (runtime input, not a prop): a plain ValueError naming the line, not Checks
        raise ValueError(f"line {line}: {name}={value!r} is not a count (a whole number >= 0); the record is damaged")
    return int(value)


# ---- statistics -----------------------------------------------------------------------------------


def chi_square_sf(x: float, df: int) -> float:
    """P(X >= x) for a chi-square variable with df degrees of freedom (regularized upper gamma)."""
    with Checks("chi_square_sf") as check:
        check.number("x", x, minimum=0, fix="a chi-square statistic")
        check.integer("df", df, minimum=1, fix="degrees of freedom: variants - 1")
    if x <= 0:
        return 1.0
    a, z = df / 2.0, x / 2.0
    if z < a + 1:  # series for the lower function
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= z / n
            total += term
            if term < total * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(-z + a * math.log(z) - math.lgamma(a)))
    # Lentz's continued fraction for the upper function
    b = z + 1 - a
    c, d = 1 / 1e-300, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return min(1.0, math.exp(-z + a * math.log(z) - math.lgamma(a)) * h)


@dataclass(frozen=True)
class SampleRatioCheck:
    observed: dict[str, int]
    expected: dict[str, float]
    chi_square: float
    p_value: float
    level: float

    @property
    def ok(self) -> bool:
        return self.p_value >= self.level


def sample_ratio_check(observed: Mapping[str, int], split: Mapping[str, float], *, level: float = DEFAULT_SRM_LEVEL) -> SampleRatioCheck:
    """Chi-square goodness of fit of users per variant against the configured split (percent)."""
    with Checks("sample_ratio_check") as check:
        if check.instance("observed", observed, Mapping, "a dict of variant name to users seen"):
            for name, count in observed.items():
                check.integer(f"observed[{name!r}]", count, minimum=0, fix="a number of users")
        _check_split(check, split)
        check.number("level", level, above=0, maximum=0.5, fix="0.001 is usual: a real mismatch is far below it")
    total = sum(observed.get(name, 0) for name in split)
    active = {name: share for name, share in split.items() if share > 0}
    expected = {name: total * share / 100 for name, share in active.items()}
    stray = sum(count for name, count in observed.items() if name not in active)
    chi = sum((observed.get(name, 0) - e) ** 2 / e for name, e in expected.items() if e > 0)
    p = chi_square_sf(chi, len(active) - 1) if len(active) > 1 and total else 1.0
    if stray:  # users in a variant the split gives no share: the assignment is broken by definition
        p = 0.0
    return SampleRatioCheck(dict(observed), expected, chi, p, level)


@dataclass(frozen=True)
class Rate:
    successes: int
    trials: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.successes / self.trials if self.trials else math.nan


def wilson(successes: int, trials: int, *, level: float = 0.05) -> Rate:
    """A proportion with its Wilson score interval (sound near 0 and 1, unlike the Wald interval)."""
    with Checks("wilson") as check:
        check.integer("trials", trials, minimum=0)
        if check.integer("successes", successes, minimum=0) and isinstance(trials, int) and not isinstance(trials, bool):
            check.rule(successes <= trials, f"successes={successes} is more than trials={trials}", id="successes.above-trials")
        check.number("level", level, above=0, maximum=0.5, fix="0.05 for a 95% interval")
    if trials == 0:
        return Rate(successes, trials, math.nan, math.nan)
    z = NormalDist().inv_cdf(1 - level / 2)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the ends, not off by rounding
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return Rate(successes, trials, low, high)


def _percentile(ordered: Sequence[float], q: float) -> float:
    """stats.percentile_of_sorted, NaN for no values (a variant with no calls has no latency)."""
    return percentile_of_sorted(ordered, q) if ordered else math.nan


def _bootstrap(values: Sequence[float], resamples: int, rng: random.Random) -> list[tuple[float, ...]]:
    """`resamples` bootstrap replicates of the PERCENTILES of `values`."""
    n = len(values)
    if n == 0:
        return []
    try:
        import numpy as np
    except ImportError:
        out = []
        for _ in range(resamples):
            sample = sorted(rng.choices(values, k=n))
            out.append(tuple(_percentile(sample, q) for q in PERCENTILES))
        return out
    generator = np.random.default_rng(rng.getrandbits(64))
    array: Any = np.asarray(values, dtype=float)
    chunk = max(1, 2_000_000 // n)
    rows = []
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        sample = array[generator.integers(0, n, size=(size, n))]
        rows.append(np.percentile(sample, PERCENTILES, axis=1).T)
    return [tuple(float(v) for v in row) for row in np.concatenate(rows)]


@dataclass(frozen=True)
class LatencyEstimate:
    percentile: int
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class VariantResult:
    name: str
    share: float
    users: int
    calls: int
    error_rate: Rate
    latency: tuple[LatencyEstimate, ...]
    outcomes: dict[str, Rate]


@dataclass(frozen=True)
class Comparison:
    """treatment - control for one metric, with its interval at the corrected level."""

    treatment: str
    metric: str
    difference: float
    low: float
    high: float
    p_value: float
    significant: bool
    unit: str
    #: True when p_value is the bootstrap's resolution (1 / resamples): the true p is at most that.
    p_at_floor: bool = False


@dataclass(frozen=True)
class Verdict:
    experiment: str
    control: str
    level: float
    corrected_level: float
    sample_ratio: SampleRatioCheck
    variants: tuple[VariantResult, ...]
    comparisons: tuple[Comparison, ...]

    @property
    def trustworthy(self) -> bool:
        """False when the sample-ratio check failed: read no difference until the assignment is fixed."""
        return self.sample_ratio.ok

    def significant(self, treatment: str, metric: str) -> bool:
        for c in self.comparisons:
            if c.treatment == treatment and c.metric == metric:
                return c.significant
        raise KeyError(f"no comparison of {treatment!r} on {metric!r}")  # a lookup in a result, as a dict's

    def report(self) -> str:
        """The verdict as plain text, the sample-ratio check first."""
        srm = self.sample_ratio
        lines = [f"Experiment {self.experiment!r}: control {self.control!r}, significance level {self.level:g}"
                 + (f" ({self.corrected_level:.4g} per comparison, Bonferroni over {len(self.variants) - 1} treatments)"
                    if len(self.variants) > 2 else ""), ""]
        counts = ", ".join(f"{n} {srm.observed.get(n, 0):,} (expected {e:,.0f})" for n, e in srm.expected.items())
        if srm.ok:
            lines.append(f"Sample ratio: OK (chi-square {srm.chi_square:.2f}, p={srm.p_value:.3g}): {counts}")
        else:
            lines += [
                f"SAMPLE RATIO MISMATCH (chi-square {srm.chi_square:.1f}, p={srm.p_value:.3g} < {srm.level:g}): {counts}.",
                "The users per variant do not match the configured split: the assignment or the logging is broken",
                "(a variant failing before it logs, a stale split in some processes, bots in one arm). Do not read",
                "the differences below until this is fixed.",
            ]
        lines.append("")
        for v in self.variants:
            lines.append(f"{v.name} (share {v.share:g}%): {v.users:,} users, {v.calls:,} calls, error rate "
                         f"{_pct(v.error_rate)}")
            for estimate in v.latency:
                lines.append(f"  latency p{estimate.percentile}: {estimate.value:,.0f} ms "
                             f"[{estimate.low:,.0f}, {estimate.high:,.0f}]")
            for name, rate in v.outcomes.items():
                lines.append(f"  {name}: {_pct(rate)} of users")
        lines.append("")
        lines.append(f"Differences against {self.control!r} ({100 * (1 - self.corrected_level):.4g}% intervals):")
        for c in self.comparisons:
            verdict = "SIGNIFICANT" if c.significant else "not significant"
            lines.append(f"  {c.treatment} {c.metric}: {c.difference:+,.3g} {c.unit} [{c.low:+,.3g}, {c.high:+,.3g}], "
                         f"p{'<=' if c.p_at_floor else '='}{c.p_value:.3g}: {verdict}")
        if not self.trustworthy:
            lines.append("(untrustworthy: sample ratio mismatch)")
        return "\n".join(lines) + "\n"

    def chart(self, path: str | Path) -> Path:
        """A PNG: latency percentiles with bootstrap intervals, and rates with Wilson intervals, per variant."""
        with Checks("Verdict.chart") as check:
            if check.instance("path", path, (str, Path), "a file path ending in .png"):
                target = Path(path)
                check.rule(target.suffix.lower() == ".png", f"path={str(path)!r} does not end in .png; the chart is a PNG", id="path.not-png")
                check.rule(target.parent.is_dir(), f"path={str(path)!r}: the folder {str(target.parent)!r} does not exist; "
                           "create it first", id="path.no-folder")
        try:
            import matplotlib
        except ModuleNotFoundError as error:
            raise missing("Verdict.chart", "matplotlib", error, MATPLOTLIB_HINT) from None

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
        width = 0.8 / max(len(self.variants), 1)
        for i, v in enumerate(self.variants):
            xs = [j + i * width for j in range(len(PERCENTILES))]
            values = [e.value for e in v.latency]
            # A percentile bootstrap interval need not contain the point estimate (skewed tails): clamp.
            errors = [[max(e.value - e.low, 0) for e in v.latency], [max(e.high - e.value, 0) for e in v.latency]]
            left.bar(xs, values, width, yerr=errors, capsize=3, label=v.name)
            rates = {"errors": v.error_rate, **v.outcomes}
            rx = [j + i * width for j in range(len(rates))]
            rv = [100 * r.value if r.trials else 0 for r in rates.values()]
            re_ = [[max(100 * (r.value - r.low), 0) if r.trials else 0 for r in rates.values()],
                   [max(100 * (r.high - r.value), 0) if r.trials else 0 for r in rates.values()]]
            right.bar(rx, rv, width, yerr=re_, capsize=3, label=v.name)
            right.set_xticks([j + width * (len(self.variants) - 1) / 2 for j in range(len(rates))], list(rates))
        left.set_xticks([j + width * (len(self.variants) - 1) / 2 for j in range(len(PERCENTILES))],
                        [f"p{p}" for p in PERCENTILES])
        left.set_ylabel("latency (ms)")
        left.set_title("Latency, bootstrap intervals")
        right.set_ylabel("% (errors of calls, outcomes of users)")
        right.set_title("Rates, Wilson intervals")
        left.legend()
        status = "sample ratio OK" if self.trustworthy else "SAMPLE RATIO MISMATCH: do not read"
        figure.suptitle(f"{self.experiment}: {status}")
        figure.tight_layout()
        out = Path(path)
        figure.savefig(out, dpi=100)
        plt.close(figure)
        return out


def _pct(rate: Rate) -> str:
    if not rate.trials:
        return "n/a"
    return f"{100 * rate.value:.2f}% [{100 * rate.low:.2f}, {100 * rate.high:.2f}] ({rate.successes:,}/{rate.trials:,})"


def _two_proportions(a: Rate, b: Rate, level: float) -> tuple[float, float, float, float]:
    """(difference b - a, low, high, two-sided p): a pooled z-test (the chi-square test of the 2x2
    table) and Newcombe's hybrid score interval from the two Wilson intervals (Newcombe 1998, method
    10), which keeps a width when a rate is 0 or 1, where the Wald interval collapses to a point."""
    if not a.trials or not b.trials:
        return math.nan, math.nan, math.nan, 1.0
    pa, pb = a.successes / a.trials, b.successes / b.trials
    pooled = (a.successes + b.successes) / (a.trials + b.trials)
    se0 = math.sqrt(pooled * (1 - pooled) * (1 / a.trials + 1 / b.trials))
    p = 1.0 if se0 == 0 else 2 * (1 - NormalDist().cdf(abs(pb - pa) / se0))
    wa, wb = wilson(a.successes, a.trials, level=level), wilson(b.successes, b.trials, level=level)
    diff = pb - pa
    low = diff - math.sqrt((pb - wb.low) ** 2 + (wa.high - pa) ** 2)
    high = diff + math.sqrt((wb.high - pb) ** 2 + (pa - wa.low) ** 2)
    return diff, low, high, p


def _check_split(check: Checks, split: Any) -> bool:
    """split: variant name -> share in percent, shares 0..100 summing to 100."""
    if not check.instance("split", split, Mapping, "a dict of variant name to share in percent (experiment.shares)"):
        return False
    valid = all([check.number(f"split[{name!r}]", share, minimum=0, maximum=100) for name, share in split.items()])
    if valid:
        total = math.fsum(split.values())
        valid = check.rule(abs(total - 100) <= 1e-6, f"split shares sum to {total:g}, not 100; pass the configured split", id="split.shares-not-100")
    return valid


def verdict(
    data: Mapping[str, VariantData],
    *,
    split: Mapping[str, float],
    control: str,
    experiment: str = "experiment",
    level: float = 0.05,
    srm_level: float = DEFAULT_SRM_LEVEL,
    resamples: int = 1000,
    seed: int = 0,
) -> Verdict:
    """Compare every variant in `split` with `control` (see the module docstring for the methods).

    split: the configured shares in percent (name -> share), as in the experiment document.
    level: the family-wise significance level; each treatment's comparisons use level / treatments.
    resamples: bootstrap replicates (1,000 gives stable 95% intervals; more for p99 of small samples).
    seed: the bootstrap's random seed, so a report is reproducible.
    """
    with Checks("verdict") as check:
        if _check_split(check, split):
            check.rule(len(split) >= 2, f"split={dict(split)!r} needs a control and at least one treatment", id="split.too-few-variants")
            if check.rule(control in split, f"control={control!r} is not in split {sorted(split)}", id="control.not-in-split"):
                check.rule(split[control] > 0, f"control {control!r} has share 0 in split; the baseline must have served "
                           "users: pass the split the experiment ran under", id="control.zero-share-in-split")
        check.text("experiment", experiment, fix="the experiment's name, for the report")
        check.number("level", level, above=0, maximum=0.5, fix="0.05 for 95% intervals")
        check.number("srm_level", srm_level, above=0, maximum=0.5, fix="0.001 is usual: a real mismatch is far below it")
        check.integer("resamples", resamples, minimum=100, maximum=100_000)
        check.instance("seed", seed, int, "an int")
        if isinstance(data, Mapping):
            stray = sorted(set(data) - set(split)) if isinstance(split, Mapping) else []
            check.rule(not stray, f"the data holds variants {stray} that split does not name; pass the split they ran under", id="data.variants-not-in-split")
            for name, row in data.items():
                if not isinstance(row, VariantData):
                    check.fail(f"data[{name!r}] is {type(row).__name__}; pass VariantData (read_log returns them)", id="data.type-of-variant")
                elif not all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in row.latencies_ms):
                    check.fail(f"data[{name!r}].latencies_ms holds values that are not finite latencies >= 0 (ms)", id="data.bad-latencies")
            if isinstance(split, Mapping) and all(isinstance(r, VariantData) for r in data.values()):
                check.rule(any(data[n].users or data[n].calls for n in split if n in data),
                           f"the data holds no users or calls for any variant of split {sorted(split)}: the log is empty, "
                           "or holds another experiment (read_log(..., experiment=...)) or other variant names", id="data.empty")
        else:
            check.fail(f"data is {type(data).__name__}; pass read_log(...)'s dict of VariantData", id="data.type")
    rng = random.Random(seed)
    treatments = [name for name in split if name != control]
    corrected = level / max(len(treatments), 1)
    empty = {name: VariantData(name) for name in split}
    rows = {**empty, **data}
    srm = sample_ratio_check({name: rows[name].users for name in split}, split, level=srm_level)
    replicates = {name: _bootstrap(rows[name].latencies_ms, resamples, rng) for name in split}
    outcome_names = [o for o in OUTCOMES if any(o in rows[n].outcome_units for n in split)] + sorted(
        {o for n in split for o in rows[n].outcome_units} - set(OUTCOMES))
    results = []
    for name in split:
        row = rows[name]
        ordered = sorted(row.latencies_ms)
        estimates = []
        for i, q in enumerate(PERCENTILES):
            column = sorted(r[i] for r in replicates[name])
            estimates.append(LatencyEstimate(q, _percentile(ordered, q), _percentile(column, 100 * level / 2),
                                             _percentile(column, 100 * (1 - level / 2))))
        results.append(VariantResult(
            name, float(split[name]), row.users, row.calls, wilson(row.errors, row.calls, level=level), tuple(estimates),
            {o: wilson(len(row.outcome_units.get(o, ())), row.users, level=level) for o in outcome_names},
        ))
    by_name = {r.name: r for r in results}
    comparisons = []
    for name in treatments:
        base, other = replicates[control], replicates[name]
        for i, q in enumerate(PERCENTILES):
            if not base or not other:
                continue
            diffs = sorted(o[i] - b[i] for o, b in zip(other, base, strict=False))
            point = by_name[name].latency[i].value - by_name[control].latency[i].value
            low, high = _percentile(diffs, 100 * corrected / 2), _percentile(diffs, 100 * (1 - corrected / 2))
            below = sum(d <= 0 for d in diffs) / len(diffs)
            above = sum(d >= 0 for d in diffs) / len(diffs)
            p = min(1.0, max(2 * min(below, above), 1 / len(diffs)))  # a bootstrap cannot resolve below 1/resamples
            comparisons.append(Comparison(name, f"latency p{q}", point, low, high, p, not (low <= 0 <= high), "ms",
                                          p_at_floor=p <= 1 / len(diffs)))
        rates = [("error rate", by_name[control].error_rate, by_name[name].error_rate)] + [
            (o, by_name[control].outcomes[o], by_name[name].outcomes[o]) for o in outcome_names]
        for metric, a, b in rates:
            diff, low, high, p = _two_proportions(a, b, corrected)
            comparisons.append(Comparison(name, metric, 100 * diff, 100 * low, 100 * high, p,
                                          bool(a.trials and b.trials and p < corrected), "points"))
    return Verdict(experiment, control, level, corrected, srm, tuple(results), tuple(comparisons))
