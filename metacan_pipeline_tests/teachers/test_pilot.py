"""Tests of metacan_pipeline.teachers.imports.pilot: the MetaCan pilot imports and their published figures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import duckdb

from metacan_pipeline.tables import create_tables
from metacan_pipeline.teachers.core.agreement import kappa
from metacan_pipeline.teachers.imports.importing import current_imported_sql, import_records
from metacan_pipeline.teachers.imports.pilot import pilot_imports


def test_pilot_import_counts(tmp_path: Path, pilot_dir: Path):
    joined = json.loads((pilot_dir / "labels_joined.json").read_text())
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    create_tables(con)
    imports = pilot_imports(pilot_dir)
    reports = [import_records(con, imp.spec, imp.records, "run-1") for imp in imports]
    # SOURCES.md: 1290 double-screened works; 1435 codex labels of 1432 works (3 works in two files); the
    # 496 joined works without a codex label take tier_b from labels_joined; each frame1k arm labels 750 works.
    assert [(r.teacher, r.labelled, r.failed, len(r.duplicates)) for r in reports] == [
        ("pilot_a", 1290, 0, 0),
        ("pilot_b", 1432, 0, 3),
        ("pilot_b", 496, 0, 0),
        ("frame1k_opus", 750, 0, 0),
        ("frame1k_gpt", 750, 0, 0),
        ("frame1k_grok", 750, 0, 0),
    ]
    assert sorted(w for w, _, _ in reports[1].duplicates) == ["W1940863920", "W1974733467", "W2902615448"]
    # The duplicate kept is the stratified run's (codex/chunk_16.json pairs with chunks_b/chunk_16.json).
    rows = con.execute(f"SELECT * FROM ({current_imported_sql()})").to_arrow_table().to_pylist()
    b = {r["work_id"]: r for r in rows if r["teacher"] == "pilot_b"}
    a = {r["work_id"]: r for r in rows if r["teacher"] == "pilot_a"}
    assert json.loads(b["W2902615448"]["source_ref"])["file"].endswith("codex/chunk_16.json")
    assert (len(a), len(b)) == (1290, 1928)
    assert {r["model"] for r in a.values()} == {"claude-sonnet-4-6"} and {r["model"] for r in b.values()} == {
        "gpt-5.6-sol"
    }
    assert {r["prompt_version"] for r in rows} == {"pilot-rubric-v1.0"}
    # frame1k arms: the positives of each arm's own tier (T1/T2), as pilot_frame1k counts them: 28, 20 and 14
    positives = {
        t: sum(1 for r in rows if r["teacher"] == t and "metaresearch" in r["categories"])
        for t in ("frame1k_opus", "frame1k_gpt", "frame1k_grok")
    }
    assert positives == {"frame1k_opus": 28, "frame1k_gpt": 20, "frame1k_grok": 14}

    # B's tier on the joined works: from the codex file for 794 works, from labels_joined for 496; equal to tier_b.
    from_codex = sum("/codex/" in json.loads(b[r["id"]]["source_ref"])["file"] for r in joined)
    assert from_codex == 794
    for r in joined:
        assert a[r["id"]]["categories"] == (["metaresearch"] if r["tier_a"] in ("T1", "T2") else [])
        assert b[r["id"]]["categories"] == (["metaresearch"] if r["tier_b"] in ("T1", "T2") else [])
        assert a[r["id"]]["confidence"] == r["conf_a"] and b[r["id"]]["confidence"] == r["conf_b"]
    # SOURCES.md screener table: in-scope A 58, B 88; confidence A 617/422/251, B 1087/87/116.
    assert sum(a[r["id"]]["categories"] == ["metaresearch"] for r in joined) == 58
    assert sum(b[r["id"]]["categories"] == ["metaresearch"] for r in joined) == 88
    assert Counter(a[r["id"]]["confidence"] for r in joined) == {"high": 617, "medium": 422, "low": 251}
    assert Counter(b[r["id"]]["confidence"] for r in joined) == {"high": 1087, "medium": 87, "low": 116}
    # Fields a screener did not give are None: A gives tier and confidence only; B's codex labels add genre,
    # about_ca (-> about_ca_system) and why (-> reason).
    assert all(r["genre"] is None and r["reason"] is None and r["about_ca_system"] is None for r in a.values())
    codex_b = [r for r in b.values() if "/codex/" in json.loads(r["source_ref"])["file"]]
    assert len(codex_b) == 1432 and all(
        r["genre"] and r["reason"] and r["about_ca_system"] is not None for r in codex_b
    )
    assert all(r["domain"] is None and r["study_design"] is None and r["about_ca_topic"] is None for r in rows)
    # Genre mapping of the 1432 stored codex labels (SOURCES.md over 1435 labels: empirical 1099,
    # conceptual 148, other 77, editorial/commentary 70, infrastructure/announcement 22, policy 19).
    originals = Counter(json.loads(r["source_ref"])["original"]["genre"] for r in codex_b)
    genres = Counter(r["genre"] for r in codex_b)
    assert genres == {
        "empirical": originals["empirical"],
        "commentary": originals["editorial/commentary"] + originals["policy"],
        "other": originals["conceptual"] + originals["other"] + originals["infrastructure/announcement"],
    }
    assert sum(r["about_ca_system"] for r in codex_b) == 6
    # Design: 1290 works; settled_out 600 at sel_prob 0.1249, weight 8.005 as published.
    design = con.execute(
        "SELECT stratum, sel_prob, design_weight, count(*) FROM imported_design GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert design == [
        ("boundary", 1.0, 1.0, 599),
        ("paratext", 1.0, 1.0, 33),
        ("positive", 1.0, 1.0, 58),
        ("settled_out", 0.1249, 8.005, 600),
    ]
    # SOURCES.md: exact 4-tier agreement 0.934, Cohen kappa 0.583, from the original values kept in source_ref.
    tiers_a = [json.loads(a[r["id"]]["source_ref"])["original"]["tier_a"] for r in joined]
    tiers_b = [r["tier_b"] for r in joined]
    assert round(sum(x == y for x, y in zip(tiers_a, tiers_b, strict=False)) / len(joined), 3) == 0.934
    assert round(kappa(tiers_a, tiers_b), 3) == 0.583

    again = [import_records(con, imp.spec, imp.records, "run-2") for imp in pilot_imports(pilot_dir)]
    assert all(r.already_imported for r in again)
    assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 1290 + 1432 + 496 + 3 * 750
