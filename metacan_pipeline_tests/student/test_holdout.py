"""Tests of metacan_pipeline.student.holdout: the venue holdout rule."""

import pyarrow as pa

from metacan_pipeline.student.assets import student_heads
from metacan_pipeline.student.holdout import HOLDOUT_FRACTION, venue_held_out, venue_key
from metacan_pipeline_tests.builders import N_WORKS, root_error, run_student, sql, write_inputs


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
