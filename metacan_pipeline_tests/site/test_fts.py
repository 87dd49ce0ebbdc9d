"""The FTS5 index's champion lists (site/fts.py): a one-word query of a frequent term is answered from the stored
first matches exactly as FTS5 ranks them, page after page, and ranked by FTS5 again past them or for any other
query."""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pytest

from metacan_pipeline.site import fts

TITLES = [
    "learning to rank trials",
    "machine learning in cardiology",
    "deep learning learning learning",
    "peer review of trials",
    "learning health systems in Ontario",
    "reproducibility of machine learning models",
    "trials of learning",
    "a short note",
    "Learned societies and open science",
    "learning",
    "systematic reviews of learning interventions in nursing education programs",
    "open peer review",
]


@pytest.fixture()
def index(tmp_path, monkeypatch):
    monkeypatch.setattr(fts, "CHAMPION_MIN_DOCS", 3)
    monkeypatch.setattr(fts, "CHAMPION_DEPTH", 4)
    batch = pa.record_batch(
        {
            "work_key": pa.array(range(1, len(TITLES) + 1), pa.int64()),
            "title": TITLES,
            "keywords": ["" if i % 3 else "learning" for i in range(len(TITLES))],
        }
    )
    path = tmp_path / "index.fts.sqlite"
    fts.build_index(path, [batch])
    con = fts.open_index(path)
    yield con
    con.close()


def _ranked(con, words, after, limit):
    """The page FTS5 itself ranks (what top() gave before champion lists)."""
    sql = "SELECT rowid, r FROM (SELECT rowid, bm25(work_text) AS r FROM work_text WHERE work_text MATCH ?)"
    params: list = [fts.match_expression(words)]
    if after is not None:
        sql += " WHERE r > ? OR (r = ? AND rowid > ?)"
        params += [after[0], after[0], after[1]]
    return con.execute(sql + " ORDER BY r, rowid LIMIT ?", [*params, limit]).fetchall()


def test_the_tokenizer_gives_a_words_term():
    assert fts.term_of("learning") == fts.term_of("Learned") == "learn"
    assert fts.term_of("trials") == "trial" and fts.term_of("") is None


def test_a_frequent_words_pages_come_from_its_champion_list_as_fts5_ranks_them(index):
    stored = dict(index.execute("SELECT term, hits FROM term_hits"))
    assert stored["learn"] == 10 and stored["trial"] == 3 and "cardiolog" not in stored
    assert index.execute("SELECT count(*) FROM term_top WHERE term = 'learn'").fetchone()[0] == 4
    after, seen = None, []
    for limit in (2, 2):  # two pages within the four stored matches
        page = fts.champion_top(index, ["learning"], after, limit)
        rows = list(zip(page.column("work_key").to_pylist(), page.column("rank").to_pylist(), strict=True))
        assert rows == _ranked(index, ["learning"], after, limit) and len(rows) == limit
        after = (rows[-1][1], rows[-1][0])
        seen += rows
    assert fts.champion_top(index, ["learning"], after, 2) is None  # past the stored four: FTS5 ranks it
    assert fts.top(index, ["learning"], after, 2).to_pylist() == [
        {"work_key": k, "rank": r} for k, r in _ranked(index, ["learning"], after, 2)
    ]
    everything = fts.top(index, ["trials"], None, 10)  # all three matches stored: the whole list, then nothing
    assert [(k, r) for k, r in zip(*everything.to_pydict().values(), strict=True)] == _ranked(
        index, ["trial"], None, 10
    )


def test_other_queries_and_old_index_files_are_ranked_by_fts5(index, tmp_path):
    assert fts.champion_top(index, ["machine", "learning"], None, 5) is None
    assert fts.champion_top(index, ["cardiology"], None, 5) is None
    old = tmp_path / "old.fts.sqlite"
    con = sqlite3.connect(old)
    con.execute(f"CREATE VIRTUAL TABLE work_text USING fts5(title, keywords, tokenize='{fts.TOKENIZE}')")
    con.execute("INSERT INTO work_text(rowid, title, keywords) VALUES (1, 'learning', '')")
    con.commit()
    con.close()
    ro = fts.open_index(old)
    try:
        assert fts.champion_top(ro, ["learning"], None, 5) is None
        assert fts.top(ro, ["learning"], None, 5).column("work_key").to_pylist() == [1]
    finally:
        ro.close()
