"""Tests of metacan_pipeline.frame.merge: the newest-version merge and the merged-id removal."""

from __future__ import annotations

import gzip

import dagster as dg
import pytest

from metacan_pipeline.frame.merge import removed_work_ids
from metacan_pipeline.openalex.folders import input_folders


@pytest.mark.parametrize("header", ["id,merge_into_id,merge_date", "date,old,new", None])
def test_a_merged_ids_file_with_another_header_fails_naming_the_file(tmp_path, header):
    """read_csv with explicit columns renames by position: a file whose columns are in another order
    removed the merge targets (W2) instead of the merged ids (W1), and a file without header lost its
    first merge. The header must be the snapshot's, or the frame fails naming the file."""
    folders = input_folders([tmp_path / "snapshot", tmp_path / "more"])
    f = tmp_path / "snapshot" / "data" / "merged_ids" / "works" / "2025-01-01.csv.gz"
    f.parent.mkdir(parents=True)
    row = {"merge_date": "2025-01-01", "id": "W1", "merge_into_id": "W2"}
    cols = (header or "merge_date,id,merge_into_id").split(",")
    body = "".join(
        f"{','.join(row.get(c, v) for c, v in zip(cols, ('2025-01-01', 'W1', 'W2'), strict=False))}\n" for _ in range(1)
    )
    f.write_bytes(gzip.compress(((header + "\n") if header else "").encode() + body.encode()))
    with pytest.raises(dg.Failure) as err:
        removed_work_ids(folders)
    assert "2025-01-01.csv.gz" in err.value.description and "merge_date,id,merge_into_id" in err.value.description
    f.write_bytes(
        gzip.compress(b"merge_date,id,merge_into_id\n2025-01-01,https://openalex.org/W1,W2\n2025-01-02,W3,\n")
    )
    assert removed_work_ids(folders) == ({"W1": "W2", "W3": ""}, ["data/merged_ids/works/2025-01-01.csv.gz"])
    # a further folder's merged ids count as well, named under its folder name
    g = tmp_path / "more" / "data" / "merged_ids" / "works" / "2025-02-01.csv"
    g.parent.mkdir(parents=True)
    g.write_text("merge_date,id,merge_into_id\n2025-02-01,W4,W5\n")
    assert removed_work_ids(folders) == (
        {"W1": "W2", "W3": "", "W4": "W5"},
        ["data/merged_ids/works/2025-01-01.csv.gz", "more/data/merged_ids/works/2025-02-01.csv"],
    )


def test_the_build_manifest_has_one_row_per_part_by_file_with_its_admitted_count():
    from metacan_pipeline.frame.merge import build_manifest_table

    t = build_manifest_table([{"source_file": "b.json"}, {"source_file": "a.json"}], {"b.json": 3})
    assert [(r["source_file"], r["admitted"]) for r in t.to_pylist()] == [("a.json", 0), ("b.json", 3)]
