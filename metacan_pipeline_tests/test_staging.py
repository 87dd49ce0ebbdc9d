"""The DuckDB fast path and the exact Python path stage identical rows; bad files fall back."""

import gzip
import json

import pyarrow.parquet as pq

from metacan_pipeline.openalex.staging import stage_file

from .conftest import SNAPSHOT


def _stage(path, root, tmp_path, name, fast):
    out = tmp_path / name
    out.mkdir()
    staged = stage_file(str(path), str(root), str(out), 0, fast=fast)
    rows = pq.read_table(out).sort_by("id").to_pylist() if any(out.glob("*.parquet")) else []
    return staged, rows


def test_fast_and_exact_paths_agree_on_the_real_snapshot_part(tmp_path):
    part = next(SNAPSHOT.glob("data/works/updated_date=*/part_000.gz"))
    fast, fast_rows = _stage(part, SNAPSHOT, tmp_path, "fast", True)
    exact, exact_rows = _stage(part, SNAPSHOT, tmp_path, "exact", False)
    assert fast.counts["fast_path_files"] == 1 and fast.fallback_reason is None
    assert len(fast_rows) == 27 and fast_rows == exact_rows
    # the snapshot's hive-style folder name must not leak into updated_date
    assert {r["updated_date"] for r in fast_rows} != {"2023-05-16"}


def test_entity_parts_are_counted_not_staged_as_works(tmp_path):
    part = next(SNAPSHOT.glob("data/institutions/updated_date=*/part_000.gz"))
    staged, rows = _stage(part, SNAPSHOT, tmp_path, "inst", True)
    assert rows == [] and staged.counts["I"] == 678


def test_a_bad_line_sends_the_file_to_the_exact_path(tmp_path, openalex_dir):
    work = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json").read_text())
    part = tmp_path / "part_000.gz"
    with gzip.open(part, "wt") as fh:
        fh.write(json.dumps(work) + "\n{not json\n" + json.dumps({**work, "id": "https://openalex.org/W1"}) + "\n")
    staged, rows = _stage(part, tmp_path, tmp_path, "out", True)
    assert staged.counts["exact_path_files"] == 1 and staged.fallback_reason
    assert [r["id"] for r in rows] == ["W1", "W2741809807"]
    assert [(q["line"], q["reason"].split(":")[0]) for q in staged.quarantine] == [(2, "unparseable JSON")]


def test_fast_and_exact_paths_agree_on_every_real_work_record(tmp_path, openalex_dir):
    """All 889 real work records (old and current schemas, null titles, inline markup, truncated
    author lists, duplicates) written as one JSON Lines part: both readers must stage the same rows."""
    from metacan_pipeline.openalex.reader import Record, iter_records

    part = tmp_path / "part_000.gz"
    with gzip.open(part, "wt", encoding="utf-8") as fh:
        for rec in iter_records(openalex_dir):
            if isinstance(rec, Record) and rec.kind == "W":
                fh.write(json.dumps(rec.data, ensure_ascii=False) + "\n")
    fast, fast_rows = _stage(part, tmp_path, tmp_path, "fast", True)
    exact, exact_rows = _stage(part, tmp_path, tmp_path, "exact", False)
    assert fast.counts["fast_path_files"] == 1, fast.fallback_reason
    key = lambda r: (r["id"], int(r["source_locator"].split()[1]))  # noqa: E731
    fast_rows, exact_rows = sorted(fast_rows, key=key), sorted(exact_rows, key=key)
    assert len(fast_rows) == len(exact_rows) == 889
    mismatches = [(a["id"], k) for a, b in zip(fast_rows, exact_rows) for k in a if a[k] != b[k]]
    assert mismatches == []
    assert sum(bool(r["lexicon_hits"]) for r in fast_rows) == 20  # works with evidence-relevant lexicon hits


def test_blank_lines_do_not_shift_abstract_pointers(tmp_path, openalex_dir):
    """A work's pointer must lead back to its own record, whichever reader staged it."""
    from metacan_pipeline.openalex.lookup import load_abstracts

    base = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json").read_text())
    works = [{**base, "id": f"https://openalex.org/W{i}", "abstract_inverted_index": {f"Abstract-of-W{i}": [0]}} for i in (1, 2, 3)]
    part = tmp_path / "b.jsonl"
    part.write_text(json.dumps(works[0]) + "\n\n" + json.dumps(works[1]) + "\n   \n" + json.dumps(works[2]) + "\n")
    for fast in (True, False):
        _, rows = _stage(part, tmp_path, tmp_path, f"out-{fast}", fast)
        got = load_abstracts(tmp_path, [(r["id"], r["source_file"], r["source_locator"]) for r in rows])
        assert got == {"W1": "Abstract-of-W1", "W2": "Abstract-of-W2", "W3": "Abstract-of-W3"}


def test_hostile_values_do_not_stop_the_read(tmp_path, openalex_dir):
    base = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json").read_text())
    odd = [
        {**base, "id": "https://openalex.org/W1", "cited_by_count": 9223372036854775813, "publication_year": 1099511627776},
        {**base, "id": "https://openalex.org/W2", "publication_year": 2025.5, "title": 123, "abstract_inverted_index": []},
        {**base, "id": "https://openalex.org/W3", "authorships": [{"countries": "CA", "institutions": [None]}]},
    ]
    part = tmp_path / "odd.jsonl"
    part.write_text("\n".join(json.dumps(w) for w in odd) + "\n")
    results = [_stage(part, tmp_path, tmp_path, f"out-{fast}", fast)[1] for fast in (True, False)]
    assert results[0] == results[1]
    rows = {r["id"]: r for r in results[0]}
    assert rows["W1"]["cited_by_count"] is None and rows["W1"]["publication_year"] is None
    assert rows["W2"]["publication_year"] is None and rows["W2"]["has_abstract"] is False
    assert rows["W2"]["title"] == base["display_name"]
    assert rows["W3"]["author_countries"] == ["CA"]


def test_accented_lexicon_words_are_found_on_both_readers(tmp_path, openalex_dir):
    base = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json").read_text())
    work = {**base, "id": "https://openalex.org/W77", "title": "Tides", "keywords": [],
            "abstract_inverted_index": {"Tides": [0], "of": [1], "Île-du-Prince-Édouard.": [2]}}
    part = tmp_path / "acc.jsonl"
    part.write_text(json.dumps(work, ensure_ascii=False) + "\n")
    results = [_stage(part, tmp_path, tmp_path, f"out-{fast}", fast)[1] for fast in (True, False)]
    assert results[0] == results[1]
    assert [h["term"] for h in results[0][0]["lexicon_hits"]] == ["Île-du-Prince-Édouard"]
