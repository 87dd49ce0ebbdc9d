"""Tests of metacan_pipeline.openalex.staging: the fast reader agrees with the exact one, and damaged parts are
quarantined."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metacan_pipeline.frame.entities import EntityLists, canadian_entity_rows
from metacan_pipeline.frame.parts import PartJob, build_part, part_dir
from metacan_pipeline.openalex.reader import Record, iter_records
from metacan_pipeline.openalex.staging import ReadStats, read_work_batches
from metacan_pipeline.tables.frame import ENTITY_SCHEMA
from metacan_pipeline_tests.builders.common import OPENALEX
from metacan_pipeline_tests.builders.openalex import canadian_ids

SNAPSHOT = OPENALEX / "max-planck-innovation-competition__go-openalex__snapshot_sample"


@pytest.mark.parametrize("name", ["part_000.gz", "works.jsonl.gz", "page.json.gz"])
def test_an_empty_gz_file_is_quarantined_not_read_as_no_records(tmp_path, name):
    """A 0-byte ``.gz`` is no gzip stream (an empty one is 20 bytes): an interrupted download, whose
    works would otherwise vanish without a trace when no manifest covers the file."""
    path = tmp_path / "data" / "works" / "updated_date=2025-01-01" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    stats = ReadStats()
    assert [
        b
        for b in read_work_batches(path, name, {"institution": [], "funder": [], "source": []}, stats)
        if b is not None
    ] == []
    [q] = stats.quarantine
    assert q["source_file"] == name and "empty file" in q["reason"] and "re-download" in q["reason"]
    assert stats.counts["file_errors"] == 1  # the file, not a record: not counted as a record read
    # a real gzip of nothing is still read quietly as an empty part
    path.write_bytes(gzip.compress(b""))
    stats = ReadStats()
    assert [
        b
        for b in read_work_batches(path, name, {"institution": [], "funder": [], "source": []}, stats)
        if b is not None
    ] == []
    assert stats.quarantine == []


def test_an_api_page_gzipped_as_a_snapshot_part_is_read_not_lost(tmp_path, real_works):
    """``{meta, results}`` on one line, gzip-compressed and named ``part_000.gz``: each result is a
    work, not one 'missing id' quarantine row for the whole page."""
    ids = canadian_ids(real_works)[:2]
    path = tmp_path / "data" / "works" / "updated_date=2025-01-01" / "part_000.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(
        gzip.compress(json.dumps({"meta": {"count": 2}, "results": [real_works[k] for k in ids]}).encode())
    )
    stats = ReadStats()
    batches = [
        b for b in read_work_batches(path, "p", {"institution": [], "funder": [], "source": []}, stats) if b is not None
    ]
    assert [r for b in batches for r in b.index.column("id").to_pylist()] == ids
    assert stats.quarantine == [] and stats.counts["W"] == 2
    assert [r["source_locator"] for b in batches for r in b.candidates] == [
        "record 1.results[0]",
        "record 1.results[1]",
    ]


@pytest.fixture(scope="module")
def entities(openalex_dir):
    """The real pinned Canadian lists (4 funders, 3 sources, 35 institutions), so the fast path's
    structural pre-filter is exercised against real ids."""
    recs = (
        r
        for r in iter_records(openalex_dir, {"funders", "sources", "institutions"})
        if isinstance(r, Record) and r.kind != "W"
    )
    return EntityLists.from_table(pa.Table.from_pylist(canadian_entity_rows(recs, "2026-01-01"), schema=ENTITY_SCHEMA))


def _stage(path, root, tmp_path, name, fast, entities):
    """Build one part; returns (manifest row, routed rows, index rows, quarantine rows)."""
    st = path.stat()
    job = PartJob(str(path), str(path.relative_to(root)), "p", st.st_size, st.st_mtime_ns, None, "no_manifest")
    row = build_part(job, str(tmp_path / name), entities, "key", "run", fast=fast)
    d = part_dir(tmp_path / name, "p", job.source_file)
    key = lambda r: (r["id"], r["source_locator"])  # noqa: E731
    read = lambda f: (
        sorted(pq.read_table(d / f).to_pylist(), key=key)
        if f != "quarantine.parquet"
        else pq.read_table(d / f).to_pylist()
    )  # noqa: E731
    return row, read("routed.parquet"), read("index.parquet"), read("quarantine.parquet")


def test_fast_and_exact_paths_agree_on_the_real_snapshot_part(tmp_path, entities):
    part = next(SNAPSHOT.glob("data/works/updated_date=*/part_000.gz"))
    fast = _stage(part, SNAPSHOT, tmp_path, "fast", True, entities)
    exact = _stage(part, SNAPSHOT, tmp_path, "exact", False, entities)
    assert fast[0]["read_path"] == "duckdb" and fast[0]["fallback_reason"] is None and exact[0]["read_path"] == "python"
    assert fast[0]["records_read"] == fast[0]["work_records"] == 27
    assert fast[1:] == exact[1:] and len(fast[2]) == 27
    # the snapshot's hive-style folder name must not leak into updated_date
    assert {r["updated_date"] for r in fast[2]} != {"2023-05-16"}


def test_entity_parts_are_counted_not_read_as_works(tmp_path, entities):
    part = next(SNAPSHOT.glob("data/institutions/updated_date=*/part_000.gz"))
    row, routed, index, _ = _stage(part, SNAPSHOT, tmp_path, "inst", True, entities)
    assert routed == [] and index == [] and row["records_read"] == 678 and row["work_records"] == 0


def test_a_bad_line_sends_the_file_to_the_exact_path(tmp_path, openalex_dir, entities):
    work = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json").read_text())
    part = tmp_path / "part_000.gz"
    with gzip.open(part, "wt") as fh:
        fh.write(json.dumps(work) + "\n{not json\n" + json.dumps({**work, "id": "https://openalex.org/W1"}) + "\n")
    row, routed, index, quarantine = _stage(part, tmp_path, tmp_path, "out", True, entities)
    assert row["read_path"] == "python" and row["fallback_reason"]
    assert [r["id"] for r in index] == ["W1", "W2741809807"] and [r["id"] for r in routed] == ["W1", "W2741809807"]
    assert [(q["line"], q["reason"].split(":")[0]) for q in quarantine] == [(2, "unparseable JSON")]
    assert row["records_read"] == 3 and row["quarantined"] == 1


@pytest.mark.parametrize("candidate_rows", [None, 7])
def test_fast_and_exact_paths_agree_on_every_real_work_record(
    tmp_path, openalex_dir, entities, candidate_rows, monkeypatch
):
    """All 889 real work records (old and current schemas, null titles, inline markup, truncated
    author lists, duplicates) written as one JSON Lines part: both readers must build the same part,
    so the fast path's pre-filter drops no work on which a route fires. With ``candidate_rows`` 7 the fast
    path turns its candidates into rows 7 at a time (many slices of one read batch): nothing is lost or doubled."""
    if candidate_rows:
        monkeypatch.setattr("metacan_pipeline.openalex.staging.CANDIDATE_ROWS", candidate_rows)
    part = tmp_path / "part_000.gz"
    with gzip.open(part, "wt", encoding="utf-8") as fh:
        for rec in iter_records(openalex_dir):
            if isinstance(rec, Record) and rec.kind == "W":
                fh.write(json.dumps(rec.data, ensure_ascii=False) + "\n")
    fast = _stage(part, tmp_path, tmp_path, "fast", True, entities)
    exact = _stage(part, tmp_path, tmp_path, "exact", False, entities)
    assert fast[0]["read_path"] == "duckdb", fast[0]["fallback_reason"]
    assert len(fast[2]) == len(exact[2]) == 889 and fast[2] == exact[2]
    mismatches = [(a["id"], k) for a, b in zip(fast[1], exact[1], strict=False) for k in a if a[k] != b[k]]
    assert len(fast[1]) == len(exact[1]) and mismatches == []
    routes = lambda rows: {k: sum(r[k] for r in rows) for k in ("ca_aff", "ca_fund", "ca_venue", "about_ca")}  # noqa: E731
    # every route the data supports fires on both paths (duplicates of a work are still separate records here)
    assert routes(fast[1]) == routes(exact[1]) and routes(fast[1])["ca_aff"] > 0 and routes(fast[1])["about_ca"] > 0
    # the PubMed id (ids.pmid as digits) that joins Retraction Watch: both paths read it, and real records carry it
    assert [r["pmid"] for r in fast[1]] == [r["pmid"] for r in exact[1]]
    assert all(p is None or (p.isdigit() and p[0] != "0") for p in (r["pmid"] for r in exact[1]))
    assert sum(r["pmid"] is not None for r in exact[1]) > 0


def test_blank_lines_do_not_shift_abstract_pointers(tmp_path, openalex_dir, entities):
    """A work's pointer must lead back to its own record, whichever reader read it."""
    from metacan_pipeline.openalex.lookup import load_abstracts

    base = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json").read_text())
    works = [
        {**base, "id": f"https://openalex.org/W{i}", "abstract_inverted_index": {f"Abstract-of-W{i}": [0]}}
        for i in (1, 2, 3)
    ]
    part = tmp_path / "b.jsonl"
    part.write_text(json.dumps(works[0]) + "\n\n" + json.dumps(works[1]) + "\n   \n" + json.dumps(works[2]) + "\n")
    for fast in (True, False):
        _, routed, index, _ = _stage(part, tmp_path, tmp_path, f"out-{fast}", fast, entities)
        assert [(r["id"], r["source_locator"]) for r in routed] == [(r["id"], r["source_locator"]) for r in index]
        got = load_abstracts(
            lambda sf: tmp_path / sf, [(r["id"], r["source_file"], r["source_locator"]) for r in index]
        )
        assert got == {"W1": "Abstract-of-W1", "W2": "Abstract-of-W2", "W3": "Abstract-of-W3"}


def test_hostile_values_do_not_stop_the_read(tmp_path, openalex_dir, entities):
    base = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json").read_text())
    odd = [
        {
            **base,
            "id": "https://openalex.org/W1",
            "cited_by_count": 9223372036854775813,
            "publication_year": 1099511627776,
        },
        {
            **base,
            "id": "https://openalex.org/W2",
            "publication_year": 2025.5,
            "title": 123,
            "abstract_inverted_index": [],
        },
        {**base, "id": "https://openalex.org/W3", "authorships": [{"countries": "CA", "institutions": [None]}]},
    ]
    part = tmp_path / "odd.jsonl"
    part.write_text("\n".join(json.dumps(w) for w in odd) + "\n")
    results = [_stage(part, tmp_path, tmp_path, f"out-{fast}", fast, entities)[1] for fast in (True, False)]
    assert results[0] == results[1]
    rows = {r["id"]: r for r in results[0]}
    assert rows["W1"]["cited_by_count"] is None and rows["W1"]["publication_year"] is None
    assert rows["W2"]["publication_year"] is None and rows["W2"]["has_abstract"] is False
    assert rows["W2"]["title"] == base["display_name"]
    assert rows["W3"]["ca_aff_evidence"] == ["authorships[].countries contains CA"]


def test_accented_lexicon_words_are_found_on_both_readers(tmp_path, openalex_dir, entities):
    base = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json").read_text())
    work = {
        **base,
        "id": "https://openalex.org/W77",
        "title": "Tides",
        "keywords": [],
        "authorships": [],
        "abstract_inverted_index": {"Tides": [0], "of": [1], "Île-du-Prince-Édouard.": [2]},
    }
    part = tmp_path / "acc.jsonl"
    part.write_text(json.dumps(work, ensure_ascii=False) + "\n")
    results = [_stage(part, tmp_path, tmp_path, f"out-{fast}", fast, entities)[1] for fast in (True, False)]
    assert results[0] == results[1]
    assert results[0][0]["about_ca_evidence"] == ["tier A 'Île-du-Prince-Édouard' in abstract"]


def test_character_references_and_tier_c_context_agree_on_both_readers(tmp_path, openalex_dir, entities):
    """SQL cannot decode ``&eacute;`` or ``&nbsp;``; markup_to_text does. The fast path's pre-scan must
    still send such works to Python, and a tier C word must count only with a tier A word nearby."""
    base = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json").read_text())
    base = {**base, "authorships": [], "keywords": [], "abstract_inverted_index": None}
    works = [
        {**base, "id": "https://openalex.org/W11", "title": "Health care in Qu&eacute;bec"},
        {
            **base,
            "id": "https://openalex.org/W12",
            "title": "Tides",
            "abstract_inverted_index": {"Schools": [0], "in": [1], "Qu&eacute;bec": [2]},
        },
        {
            **base,
            "id": "https://openalex.org/W13",
            "title": "Tides",
            "abstract_inverted_index": {"Health": [0], "of": [1], "First&nbsp;Nations": [2]},
        },
        {
            **base,
            "id": "https://openalex.org/W14",
            "title": "Canada and its rivers",
            "abstract_inverted_index": {"In": [0], "Regina": [1]},
        },
        {
            **base,
            "id": "https://openalex.org/W15",
            "title": "Rivers",
            "abstract_inverted_index": {"In": [0], "Regina": [1]},
        },
        {
            **base,
            "id": "https://openalex.org/W16",
            "title": "Tides",
            "abstract_inverted_index": {"Nord": [0], "Territoires-du-Nord-Ouest": [1]},
        },
    ]
    part = tmp_path / "refs.jsonl"
    part.write_text("\n".join(json.dumps(w, ensure_ascii=False) for w in works) + "\n")
    fast, exact = (_stage(part, tmp_path, tmp_path, f"out-{f}", f, entities) for f in (True, False))
    assert fast[0]["read_path"] == "duckdb" and fast[1] == exact[1]
    evidence = {r["id"]: r["about_ca_evidence"] for r in fast[1]}
    assert evidence == {
        "W11": ["tier A 'Québec' in title"],
        "W12": ["tier A 'Québec' in abstract"],
        "W13": ["tier A 'First Nations' in abstract"],
        "W14": ["tier A 'Canada' in title", "tier C 'Regina' in abstract"],
        "W16": ["tier A 'Territoires du Nord-Ouest' in abstract"],
    }  # W15: a tier C word alone is no evidence


def test_fast_and_exact_paths_agree_on_every_record_of_the_second_folder(tmp_path, openalex_more_dir, entities):
    """The 1,054 work records of ../shared/data/openalex_more (2022 schema with host_venue and Crossref types,
    grants and funders, 5,103 authorships, HTML entities) as one JSON Lines part: the same part on both readers."""
    part = tmp_path / "part_000.gz"
    with gzip.open(part, "wt", encoding="utf-8") as fh:
        for rec in iter_records(openalex_more_dir):
            if isinstance(rec, Record) and rec.kind == "W":
                fh.write(json.dumps(rec.data, ensure_ascii=False) + "\n")
    fast = _stage(part, tmp_path, tmp_path, "fast", True, entities)
    exact = _stage(part, tmp_path, tmp_path, "exact", False, entities)
    assert fast[0]["read_path"] == "duckdb", fast[0]["fallback_reason"]
    assert len(fast[2]) == len(exact[2]) == 1054 and fast[2] == exact[2]
    mismatches = [(a["id"], k) for a, b in zip(fast[1], exact[1], strict=True) for k in a if a[k] != b[k]]
    assert len(fast[1]) == len(exact[1]) and mismatches == []
    routed = {r["id"]: r for r in fast[1]}
    assert routed["W1694905212"]["route_key"] == "ca_fund"  # the 5,103-author work: funders only
    assert {r["type"] for r in fast[1]} >= {"article", "book", "other"} and "journal-article" not in {
        r["type"] for r in fast[1]
    }


def test_a_host_venue_on_the_pinned_source_list_fires_the_venue_route_on_both_readers(
    tmp_path, openalex_more_dir, entities
):
    from metacan_pipeline.openalex.reader import iter_file

    tar = openalex_more_dir / "herreio__openalex-client-review__tu9_type_selection_py_diophila.tar.gz"
    base = next(iter_file(tar, openalex_more_dir)).data
    source = sorted(entities.sources)[0]
    works = [
        {**base, "id": "https://openalex.org/W21", "host_venue": {**base["host_venue"], "id": "V" + source[1:]}},
        # a transition-era record: primary_location without a source, host_venue with one
        {**base, "id": "https://openalex.org/W22", "primary_location": {"source": None}, "host_venue": {"id": source}},
        # primary_location wins over host_venue when it names a source
        {
            **base,
            "id": "https://openalex.org/W23",
            "primary_location": {"source": {"id": "https://openalex.org/S1", "display_name": "Elsewhere"}},
            "host_venue": {"id": source},
            "authorships": [{"countries": ["CA"], "institutions": []}],
        },
    ]
    part = tmp_path / "hv.jsonl"
    part.write_text("\n".join(json.dumps(w) for w in works) + "\n")
    results = [_stage(part, tmp_path, tmp_path, f"out-{fast}", fast, entities)[1] for fast in (True, False)]
    assert results[0] == results[1]
    rows = {r["id"]: r for r in results[0]}
    assert rows["W21"]["venue_id"] == source and rows["W21"]["ca_venue"] and rows["W21"]["route_key"] == "ca_venue"
    assert rows["W21"]["ca_venue_evidence"][0].startswith(f"source {source} ")
    assert rows["W22"]["venue_id"] == source and rows["W22"]["ca_venue"]
    assert (rows["W23"]["venue_id"], rows["W23"]["venue_name"], rows["W23"]["ca_venue"]) == ("S1", "Elsewhere", False)
