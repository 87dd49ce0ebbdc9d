"""Tests of metacan_pipeline.student.holdout: the venue holdout rule."""

import pyarrow as pa
import pytest

from metacan_pipeline.student.assets import student_heads
from metacan_pipeline.student.holdout import HOLDOUT_FRACTION, freeze_holdout, frozen_among, venue_held_out, venue_key
from metacan_pipeline.student.training import frame_venues
from metacan_pipeline_tests.builders.common import root_error, sql
from metacan_pipeline_tests.builders.student import N_WORKS, run_student, write_inputs


def test_holdout_venue_rule_applies_to_a_null_venue_work(storage):
    """A work without a venue is its own group: present in the frozen holdout only if its no-venue key is held out."""
    frame = write_inputs(storage)
    f = storage.read_table("frame").to_pylist()
    for r in f[:40]:
        r["venue_id"] = None
        r["venue_name"] = None
        r["title_text"] = None
    storage.write_table("frame", pa.Table.from_pylist(f))
    result = run_student(storage, student_heads, raise_on_error=False)
    assert result.success, root_error(result)
    held = {r[0] for r in sql(storage, "SELECT work_id FROM student_holdout")}
    assert held == {r["id"] for r in f if venue_held_out(venue_key(r["id"], r["venue_id"]))}
    assert len(frame) == N_WORKS


def test_holdout_rule_groups_whole_venues_and_holds_about_its_fraction():
    keys = [f"https://openalex.org/S{i}" for i in range(20_000)]
    share = sum(map(venue_held_out, keys)) / len(keys)
    assert abs(share - HOLDOUT_FRACTION) < 0.01
    assert venue_key("W1", None) == "no-venue:W1" and venue_key("W1", "S9") == "S9"
    assert [venue_held_out(k) for k in keys[:50]] == [
        venue_held_out(k) for k in keys[:50]
    ]  # stable, not random per call


def test_a_freeze_that_fails_half_way_freezes_nothing(storage):
    """The holdout is frozen from the frame's record batches in one transaction: a failure after the first batch
    leaves student_holdout empty (a partial set would have been frozen for good), and the next freeze is whole."""
    frame = write_inputs(storage)
    expected = {r["id"] for r in frame if venue_held_out(venue_key(r["id"], r["venue_id"]))}

    def failing():
        yield next(iter(storage.iter_batches("frame", batch_size=100, columns=["id", "venue_id"])))
        raise OSError("frame file went away")

    with pytest.raises(OSError, match="went away"):
        freeze_holdout(storage, failing(), "run-1")
    assert sql(storage, "SELECT count(*) FROM student_holdout") == [(0,)]
    assert freeze_holdout(storage, frame_venues(storage), "run-2") == (len(expected), True)
    assert freeze_holdout(storage, frame_venues(storage), "run-3") == (len(expected), False)
    assert {r[0] for r in sql(storage, "SELECT work_id FROM student_holdout WHERE run_id = 'run-2'")} == expected
    free = sorted({r["id"] for r in frame} - expected)
    assert frozen_among(storage, [*sorted(expected)[:3], *free[:3], "W-not-in-the-frame"]) == set(sorted(expected)[:3])
