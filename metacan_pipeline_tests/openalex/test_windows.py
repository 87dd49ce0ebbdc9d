"""Tests of metacan_pipeline.openalex.windows: the API refresh windows."""

from __future__ import annotations

import datetime as dt

import pytest

from metacan_pipeline.openalex.windows import Window, completion_marker, harvest, next_window, write_marker


def test_next_window_rules(tmp_path):
    today = dt.date(2026, 11, 30)
    assert next_window(tmp_path / "none", today) == (
        Window("2026-11-23", "2026-11-30"),
        next_window(tmp_path / "none", today)[1],
    )
    write_marker(Window("2026-11-09", "2026-11-16").folder(tmp_path), {"from": "2026-11-09", "to": "2026-11-16"})
    assert next_window(tmp_path, today)[0] == Window("2026-11-16", "2026-11-30")
    # an incomplete window after the last completed one is resumed as it is; an older one is ignored
    (Window("2026-11-01", "2026-11-08").folder(tmp_path) / "pages").mkdir(parents=True)
    (Window("2026-11-16", "2026-11-23").folder(tmp_path) / "pages").mkdir(parents=True)
    w, why = next_window(tmp_path, today)
    assert w == Window("2026-11-16", "2026-11-23") and "resuming" in why
    assert next_window(tmp_path, today, from_date="2026-11-20")[0] == Window("2026-11-20", "2026-11-30")
    with pytest.raises(ValueError, match="after to_updated_date"):
        next_window(tmp_path, today, from_date="2026-12-01")
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        next_window(tmp_path, today, to_date="30/11/2026")


def test_a_harvest_counts_pages_distinct_works_and_cost_and_logs_each_query():
    """Pages of two queries sharing a work: the window's works are distinct ids; an unreadable
    ``meta.cost_usd`` counts as nothing; one log line per query; the marker holds the window's figures."""
    pages = {
        "q1": [{"results": [{"id": "W1"}, {"id": "W2"}], "meta": {"cost_usd": 0.25}}],
        "q2": [{"results": [{"id": "W2"}], "meta": {"cost_usd": "n/a"}}, {"results": [], "meta": {}}],
    }
    lines: list[str] = []
    got = harvest(lambda f: iter(pages[f]), ["q1", "q2"], lines.append)
    assert (got.pages, got.works, got.cost_usd) == (3, {"W1", "W2"}, 0.25)
    assert lines == ["q1: 2 works", "q2: 1 works"]
    marker = completion_marker(Window("2026-11-01", "2026-11-08"), 2, got, 2)
    assert {k: marker[k] for k in ("from", "to", "calls_made", "pages", "works", "cost_usd", "queries")} == {
        "from": "2026-11-01",
        "to": "2026-11-08",
        "calls_made": 2,
        "pages": 3,
        "works": 2,
        "cost_usd": 0.25,
        "queries": 2,
    }


def test_an_api_refresh_window_cannot_end_after_today(tmp_path):
    """A window ending in the future would be marked complete with that end; every later default window
    starts at it (from > today) and fails, and the works updated in between are never harvested."""
    today = dt.date(2026, 11, 30)
    with pytest.raises(ValueError, match="to_updated_date 2026-12-31 is after today"):
        next_window(tmp_path, today, "2026-11-25", "2026-12-31")
    assert next_window(tmp_path, today, "2026-11-25", "2026-11-30")[0] == Window("2026-11-25", "2026-11-30")
