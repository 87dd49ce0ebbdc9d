"""The frame's authors and institutions built from the real records (``frame_authors``), checked against counts made
independently from the records' JSON, and an authorship with a bad author id kept by name."""

from __future__ import annotations

import re
from collections import defaultdict

import dagster as dg
import duckdb
import pyarrow as pa
import pytest

from metacan_pipeline.definitions import build_resources, materialize_in_process
from metacan_pipeline.frame.assets import frame_authors
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.frame import ENTITY_SCHEMA, FRAME_SCHEMA
from metacan_pipeline_tests.builders.frame import real_frame_row

_AUTHOR = re.compile(r"https://openalex\.org/(A[0-9]+)")
_INST = re.compile(r"https://openalex\.org/(I[0-9]+)")


@pytest.fixture(scope="module")
def authored(tmp_path_factory, openalex_dir):
    """``(storage, result)``: the real records' frame, then ``frame_authors`` materialized over it."""
    data = tmp_path_factory.mktemp("authors") / "data"
    built = materialize_in_process(
        dg.DagsterInstance.ephemeral(), build_resources(str(data), str(openalex_dir)), "frame"
    )
    assert built.success
    storage = MetacanStorage(data_dir=str(data))
    result = dg.materialize([frame_authors], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    return storage, result


def _expected(real_works: dict, frame_ids: list[str]) -> dict:
    """Counts made from the records' JSON alone: authorships, distinct authors and institutions, works per author."""
    authorships = 0
    author_works: dict[str, set] = defaultdict(set)
    inst_works: dict[str, set] = defaultdict(set)
    names: dict[str, str] = {}
    for wid in frame_ids:
        for a in real_works[wid].get("authorships") or []:
            authorships += 1
            m = _AUTHOR.fullmatch((a.get("author") or {}).get("id") or "")
            if m:
                author_works[m.group(1)].add(wid)
                names.setdefault(m.group(1), set()).add(a["author"]["display_name"])
            for inst in a.get("institutions") or []:
                mi = _INST.fullmatch(inst.get("id") or "")
                if mi:
                    inst_works[mi.group(1)].add(wid)
    return {"authorships": authorships, "authors": author_works, "institutions": inst_works, "names": names}


@pytest.mark.slow
def test_author_and_institution_counts_match_the_records(authored, real_works):
    storage, result = authored
    with storage.connect(read_only=True) as con:
        frame_ids = [r[0] for r in con.execute("SELECT id FROM frame ORDER BY id").fetchall()]
        exp = _expected(real_works, frame_ids)
        assert exp["authorships"] > 100 and len(exp["authors"]) > 100 and len(exp["institutions"]) > 20
        assert con.execute("SELECT count(*) FROM work_authors").fetchone()[0] == exp["authorships"]
        got = dict(con.execute("SELECT author_id, works_in_frame FROM authors").fetchall())
        assert got == {a: len(w) for a, w in exp["authors"].items()}
        got = dict(con.execute("SELECT institution_id, works_in_frame FROM institutions").fetchall())
        assert got == {i: len(w) for i, w in exp["institutions"].items()}
        # names are copied, never changed: every author's name is one OpenAlex gives them
        for author_id, name in con.execute("SELECT author_id, display_name FROM authors").fetchall():
            assert name in exp["names"][author_id]
        # the positions are the record's order, 1-based, with no gap
        gaps = con.execute(
            "SELECT count(*) FROM (SELECT work_id, max(author_position) m, count(*) n FROM work_authors GROUP BY 1) "
            "WHERE m <> n"
        ).fetchone()[0]
        assert gaps == 0
        # every Canadian institution-year of an author comes from a Canadian authorship listing that institution
        ca = con.execute(
            "SELECT count(*) FROM author_institution_years y JOIN institutions i USING (institution_id) "
            "WHERE i.country_code <> 'CA' AND y.institution_id NOT IN "
            "(SELECT id FROM canadian_entities WHERE kind = 'institution')"
        ).fetchone()[0]
        assert ca == 0
    md = result.asset_materializations_for_node("frame_authors")
    assert {m.asset_key.path[0]: m.metadata["dagster/row_count"].value for m in md}["authors"] == len(exp["authors"])


def test_an_authorship_without_a_valid_author_id_is_kept_by_name(tmp_path, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    row = real_frame_row(openalex_dir)
    first, second, *rest = row["authorships"]
    assert first["author_id_status"] == "ok" and len(rest) >= 1
    row["authorships"] = [
        first,
        {**second, "author_id": None, "author_id_status": "invalid"},
        *({**a, "author_id": None, "author_id_status": "missing"} for a in rest[:1]),
        *rest[1:],
    ]
    storage.write_table("frame", pa.Table.from_pylist([row], schema=FRAME_SCHEMA))
    storage.write_table(
        "canadian_entities",
        pa.Table.from_pylist([], schema=ENTITY_SCHEMA),
    )
    result = dg.materialize([frame_authors], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    con = duckdb.connect()
    wa = con.execute(
        "SELECT author_position, author_id, author_id_status, author_name FROM read_parquet(?) ORDER BY 1",
        [str(storage.table_dir("work_authors") / "*.parquet")],
    ).fetchall()
    assert len(wa) == len(row["authorships"])
    assert wa[1] == (2, None, "invalid", second["name"]) and wa[2][1:3] == (None, "missing")
    authors = con.execute(
        "SELECT author_id FROM read_parquet(?)", [str(storage.table_dir("authors") / "*.parquet")]
    ).fetchall()
    assert len(authors) == len({a["author_id"] for a in row["authorships"] if a["author_id"]})
    md = {m.asset_key.path[0]: m.metadata for m in result.asset_materializations_for_node("frame_authors")}
    assert md["work_authors"]["invalid_author_id"].value == 1 and md["work_authors"]["missing_author_id"].value == 1
