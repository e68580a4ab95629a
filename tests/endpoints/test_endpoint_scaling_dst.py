"""Peaks in two time zones are compared on every day of the year, not in January and July only
(issue 23, "Scheduling that is right on every day of the year"; issue 27, one-off windows that
meet only through the lead time)."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import aws_cdk as cdk
import pytest
from genai_pacer import InvalidPropsError
from genai_pacer.endpoints import scaling as endpoint_scaling
from genai_pacer.endpoints.scaling import EndpointScaling, PeakWindow
from helpers import new_stack, only

LONDON = PeakWindow(capacity=6, start="07:00", end="08:00", days="MON-FRI", time_zone="Europe/London", name="london")
NEW_YORK = PeakWindow(capacity=4, start="03:25", end="04:00", days="MON-FRI", time_zone="America/New_York", name="newyork")
# New York changes clocks on 2027-03-14 and 2027-11-07, London on 2027-03-28 and 2027-10-31: in between,
# New York's raise at 03:05 EDT is 07:05 UTC, inside London's 07:00-08:00 GMT.
WEEKDAYS_BETWEEN_CHANGES_2027 = [
    *(date(2027, 3, d) for d in (15, 16, 17, 18, 19, 22, 23, 24, 25, 26)),
    *(date(2027, 11, d) for d in (1, 2, 3, 4, 5)),
]


@pytest.fixture
def in_2027(monkeypatch):
    monkeypatch.setattr(endpoint_scaling, "_today", lambda: date(2027, 1, 1))


def scaling(*peaks: PeakWindow, lead_minutes: int = 20) -> cdk.Stack:
    stack = new_stack()
    EndpointScaling(stack, "Scaling", endpoint="my-endpoint", target_concurrency=6.4, max_capacity=12,
                    peaks=list(peaks), lead_time=cdk.Duration.minutes(lead_minutes))
    return stack


def scheduled_actions(stack: cdk.Stack) -> list[dict]:
    template = cdk.assertions.Template.from_stack(stack).to_json()
    return only(template, "AWS::ApplicationAutoScaling::ScalableTarget")["Properties"]["ScheduledActions"]


def test_the_issues_case_is_refused_with_the_15_weekdays_of_2027_between_the_clock_changes(in_2027):
    """Neither January nor July overlaps: only the days when New York has changed clocks and London not."""
    with pytest.raises(InvalidPropsError) as refused:
        scaling(LONDON, NEW_YORK)
    [problem] = refused.value.problems
    assert problem.startswith("peaks 'london' (MON-FRI 07:00-08:00 Europe/London) and 'newyork' (MON-FRI 03:25-04:00 "
                              "America/New_York) overlap once each minimum rises 20 minutes early on 15 day(s)")
    shown = WEEKDAYS_BETWEEN_CHANGES_2027[:8]
    assert ", ".join(d.isoformat() for d in shown) + ", ... 2027-11-05" in problem
    assert "when only one of America/New_York and Europe/London has changed its clocks" in problem


def test_the_overlap_dates_are_exactly_the_weekdays_between_the_two_zones_clock_changes():
    days = endpoint_scaling._overlapping_days([("london", LONDON), ("newyork", NEW_YORK)], 20, date(2027, 1, 1))
    assert days == {(0, 1): WEEKDAYS_BETWEEN_CHANGES_2027}


def test_the_check_walks_the_year_from_the_day_of_synth():
    """Without a pinned year the same peaks are refused too: every year has days between the changes."""
    with pytest.raises(InvalidPropsError, match=r"overlap once each minimum rises 20 minutes early on 1\d day\(s\) of the year from "):
        scaling(LONDON, NEW_YORK)


def test_the_control_back_to_back_on_the_days_between_changes_is_accepted(in_2027):
    """New York from 04:20: its raise at 04:00 EDT is 08:00 UTC, just as London's peak ends."""
    later = PeakWindow(**{**NEW_YORK.__dict__, "start": "04:20", "end": "05:00"})
    actions = scheduled_actions(scaling(LONDON, later))
    assert {a["ScheduledActionName"]: (a["Schedule"], a["Timezone"]) for a in actions} == {
        "london-raise": ("cron(40 6 ? * MON,TUE,WED,THU,FRI *)", "Europe/London"),
        "london-restore": ("cron(0 8 ? * MON,TUE,WED,THU,FRI *)", "Europe/London"),
        "newyork-raise": ("cron(0 4 ? * MON,TUE,WED,THU,FRI *)", "America/New_York"),
        "newyork-restore": ("cron(0 5 ? * MON,TUE,WED,THU,FRI *)", "America/New_York"),
    }
    # one minute more of lead and they meet on those days
    with pytest.raises(InvalidPropsError, match="rises 21 minutes early on 15 day"):
        scaling(LONDON, later, lead_minutes=21)


def test_an_overlap_on_every_day_says_so_without_dates(in_2027):
    with pytest.raises(InvalidPropsError) as refused:
        scaling(LONDON, PeakWindow(**{**LONDON.__dict__, "name": "again", "start": "07:30", "end": "09:00"}))
    assert "overlap once each minimum rises 20 minutes early: the first to end" in str(refused.value)


def test_a_one_off_peak_is_compared_with_the_weekly_ones_on_its_own_date(in_2027):
    """London's one-off on a Tuesday between the clock changes meets New York's weekly peak; in January not."""
    def one_off(day: datetime) -> PeakWindow:
        return PeakWindow(capacity=6, start=day, end=day + timedelta(hours=1), time_zone="Europe/London", name="launch")

    with pytest.raises(InvalidPropsError, match=r"'launch' \(2027-03-16T07:00:00 to 2027-03-16T08:00:00 Europe/London\) "
                                                r"and 'newyork'"):
        scaling(one_off(datetime(2027, 3, 16, 7)), NEW_YORK)
    assert len(scheduled_actions(scaling(one_off(datetime(2027, 1, 12, 7)), NEW_YORK))) == 4
    # far in the future, the weekly peak is unrolled around the one-off's date, whatever the year
    with pytest.raises(InvalidPropsError, match="'launch'"):
        scaling(one_off(datetime(2999, 3, 19, 7)), NEW_YORK)  # US clocks changed 2999-03-10, UK 2999-03-31


def test_one_off_peaks_that_meet_only_through_the_lead_time_are_refused():
    """09:00-10:00 then 10:10-11:00: apart by themselves, but the second raises its minimum at 09:50,
    and the first one's restore at 10:00 drops it (issue 27: no test caught dropping this check)."""
    first = PeakWindow(capacity=6, start=datetime(2999, 5, 1, 9), end=datetime(2999, 5, 1, 10), time_zone="UTC", name="a")
    second = PeakWindow(capacity=4, start=datetime(2999, 5, 1, 10, 10), end=datetime(2999, 5, 1, 11), time_zone="UTC", name="b")
    with pytest.raises(InvalidPropsError, match="peaks 'a' .* and 'b' .* overlap once each minimum rises 20 minutes early"):
        scaling(first, second)
    with pytest.raises(InvalidPropsError, match="rises 11 minutes early"):
        scaling(first, second, lead_minutes=11)
    # a lead that reaches exactly the first one's end is back to back, not an overlap
    actions = scheduled_actions(scaling(first, second, lead_minutes=10))
    assert {a["ScheduledActionName"]: a["Schedule"] for a in actions} == {
        "a-raise": "at(2999-05-01T08:50:00)", "a-restore": "at(2999-05-01T10:00:00)",
        "b-raise": "at(2999-05-01T10:00:00)", "b-restore": "at(2999-05-01T11:00:00)",
    }
