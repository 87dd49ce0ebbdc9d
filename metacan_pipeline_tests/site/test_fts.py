"""The FTS5 index in impact order (site/build/fts.py): every work's bound of BM25 holds (and is exact for a work with no
repeated term), and a page read in impact order is exactly the page FTS5's full ranking gives, page after page, for
one word, several, repeated words and ties; rare terms, split words, deep pages and index files of an earlier
build are ranked by FTS5 in full."""

from __future__ import annotations

import random
import sqlite3

import pyarrow as pa
import pytest

from metacan_pipeline.site.build import fts

WORDS = [f"{w}" for w in "science management learning health trial review peer data open canada model care".split()]
RARE = ["cardiology", "bibliometric", "reproducibility"]


def _corpus(n: int, seed: int = 7) -> list[tuple[int, str, str]]:
    """``n`` works: titles of 1-12 words drawn with skewed weights (so the first words are frequent and many titles
    repeat, giving tied ranks), a word now and then repeated, keywords on a third of them, a few empty."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    rows = []
    for i in range(n):
        words = rng.choices(WORDS, weights, k=rng.randint(1, 12))
        if i % 97 == 0:
            words.append(rng.choice(RARE))
        title = "" if i % 250 == 0 else " ".join(words)
        keywords = " ".join(rng.choices(WORDS, weights, k=2)) if i % 3 == 0 else ""
        rows.append((10_000 + 7 * i, title, keywords))
    return rows


def _build(path, rows) -> sqlite3.Connection:
    batch = pa.record_batch(
        {
            "work_key": pa.array([r[0] for r in rows], pa.int64()),
            "title": [r[1] for r in rows],
            "keywords": [r[2] for r in rows],
        }
    )
    fts.build_index(path, [batch.slice(0, len(rows) // 2), batch.slice(len(rows) // 2)])
    return fts.open_index(path)


@pytest.fixture()
def index(tmp_path, monkeypatch):
    monkeypatch.setattr(fts, "TERM_DOCS_MIN", 50)
    monkeypatch.setattr(fts, "COUNT_BATCH", 700)  # several in-memory counting batches per Arrow batch
    con = _build(tmp_path / "index.fts.sqlite", _corpus(3000))
    yield con
    con.close()


def _ranked(con, words, after, limit):
    """The page FTS5 itself ranks in full."""
    sql = (
        "SELECT k, r FROM (SELECT w.work_key AS k, bm25(work_text) AS r FROM work_text "
        "JOIN work_keys w ON w.rowid_ = work_text.rowid WHERE work_text MATCH ?)"
    )
    params: list = [fts.match_expression(words)]
    if after is not None:
        sql += " WHERE r > ? OR (r = ? AND k > ?)"
        params += [after[0], after[0], after[1]]
    return con.execute(sql + " ORDER BY r, k LIMIT ?", [*params, limit]).fetchall()


def _rows(page: pa.Table) -> list[tuple[int, float]]:
    return list(zip(page.column("work_key").to_pylist(), page.column("rank").to_pylist(), strict=True))


def test_the_tokenizer_gives_a_words_term():
    assert fts.term_of("learning") == fts.term_of("Learned") == "learn"
    assert fts.term_of("trials") == "trial"
    assert fts.term_of("") is None
    assert fts.term_of("a_b") is None
    assert fts.tokens("Straße ÉTUDE") == ["straße", "étude"]  # casefold() would make "strasse", which FTS5 does not


def test_a_query_with_an_eszett_finds_its_work(tmp_path):
    con = _build(tmp_path / "de.fts.sqlite", [(1, "Die Straße der Forschung", ""), (2, "Strasse", ""), (3, "x", "")])
    try:
        assert (
            fts.count(con, fts.tokens("Straße")) == 1 and _rows(fts.top(con, fts.tokens("STRASSE"), None, 5))[0][0] == 2
        )
    finally:
        con.close()


def test_works_without_a_single_token_build_an_index_that_matches_nothing(tmp_path):
    con = _build(tmp_path / "empty.fts.sqlite", [(1, None, None), (2, "!!!", ""), (3, "", "--")])
    try:
        assert con.execute("SELECT works, tokens FROM index_stats").fetchone() == (3, 0)
        assert fts.count(con, ["a"]) == 0
        assert fts.top(con, ["a"], None, 5).num_rows == 0
    finally:
        con.close()


def test_token_counts_are_the_indexs_own():
    got = fts.token_counts([(1, "Learning to learn: learned societies", "learning"), (2, "", ""), (3, None, "Data")])
    assert got == {1: (6, 4), 3: (1, 1)}  # "to" counts; learn x4 (title 3 + keyword); work 2 has no token


def test_every_works_bound_holds_and_is_exact_without_repeated_terms(index):
    works, total = index.execute("SELECT works, tokens FROM index_stats").fetchone()
    assert works == 3000
    assert total > 3000
    bounds = index.execute("SELECT first_rowid, bound FROM work_bound ORDER BY first_rowid").fetchall()
    assert [b for _, b in bounds] == sorted((b for _, b in bounds), reverse=True)
    assert len(bounds) > 20
    docs = dict(index.execute("SELECT term, docs FROM term_docs"))
    assert (
        docs["scienc"] == index.execute("SELECT count(*) FROM work_text WHERE work_text MATCH 'scienc'").fetchone()[0]
    )
    assert not {fts.term_of(w) for w in RARE} & docs.keys()  # under TERM_DOCS_MIN

    def bound_of(rowid):
        return next(b for first, b in reversed(bounds) if first <= rowid)

    exact = 0
    for word in ("science", "health", "care"):
        w_idf = fts.idf(works, docs[fts.term_of(word)])
        rows = index.execute(
            "SELECT rowid, title, keywords, bm25(work_text) FROM work_text WHERE work_text MATCH ?",
            [fts.match_expression([word])],
        ).fetchall()
        for rowid, title, keywords, rank in rows:
            bound = -w_idf * bound_of(rowid)
            assert rank >= bound * (1 + 1e-12)
            text = f"{title} {keywords}".split()
            if len(set(text)) == len(text):
                assert rank == pytest.approx(bound, rel=1e-12)
                exact += 1
    assert exact > 100


QUERIES = [["science"], ["learning"], ["science", "management"], ["management", "science", "health"], ["data", "data"]]


@pytest.mark.parametrize("words", QUERIES, ids=lambda w: "+".join(w))
def test_pages_read_in_impact_order_are_fts5s_pages(index, words, monkeypatch):
    total = fts.count(index, words)
    assert total > 60
    after, seen = None, []
    for limit in (1, 7, 20, 20):
        page = fts.impact_top(index, words, after, limit)
        assert page is not None  # read in impact order
        rows = _rows(page)
        assert rows == _ranked(index, words, after, limit)
        assert len(rows) == limit
        assert _rows(fts.top(index, words, after, limit)) == rows
        after = rows[-1][1], rows[-1][0]
        seen += rows
    assert len({k for k, _ in seen}) == len(seen) == 48
    ranks = [r for _, r in _ranked(index, words, None, total)]
    assert len(set(ranks)) < len(ranks)  # ties among the matches, broken by work key
    # the first page is proven before half the matches are read
    monkeypatch.setattr(fts, "SCAN_MAX", total // 2)
    assert _rows(fts.impact_top(index, words, None, 20)) == _ranked(index, words, None, 20)


OR_QUERIES = ["science OR learning", "management OR data health", '"data science" OR learning']


@pytest.mark.parametrize("text", OR_QUERIES)
def test_or_and_phrase_queries_match_the_union_and_page_as_fts5_ranks_them(index, text):
    query = fts.parse_query(text)
    keys = lambda q: set(fts.search(index, q).column("work_key").to_pylist())  # noqa: E731
    # a group of alternatives matches the union of its alternatives; groups intersect
    want = set.intersection(
        *(set.union(*(keys([" ".join(p)]) if len(p) == 1 else keys((((p),),)) for p in g)) for g in query)
    )
    assert keys(query) == want and fts.count(index, query) == len(want) > 20
    phrase = next((p for g in query for p in g if len(p) > 1), None)
    if phrase:  # a phrase is its words in order: fewer works than the words anywhere
        assert keys(((phrase,),)) < keys(list(phrase))
    after = None
    for limit in (1, 7, 20):
        page = fts.impact_top(index, query, after, limit)
        assert (page is None) == (phrase is not None)  # a phrase is ranked by FTS5 in full
        rows = _rows(fts.top(index, query, after, limit))
        assert rows == _ranked(index, query, after, limit) and len(rows) == limit
        if page is not None:
            assert _rows(page) == rows
        after = rows[-1][1], rows[-1][0]


def test_deep_pages_rare_terms_and_split_words_are_ranked_by_fts5(index, monkeypatch):
    monkeypatch.setattr(fts, "SCAN_MAX", 100)
    words = ["science"]
    deep = _ranked(index, words, None, 400)[-1]
    assert fts.impact_top(index, words, (deep[1], deep[0]), 20) is None  # needs more than 100 reads
    assert _rows(fts.top(index, words, (deep[1], deep[0]), 20)) == _ranked(index, words, (deep[1], deep[0]), 20)
    for words in (["bibliometric"], ["science", "bibliometric"], ["open_data"]):
        assert fts.impact_top(index, words, None, 5) is None
        assert _rows(fts.top(index, words, None, 5)) == _ranked(index, words, None, 5)
    everything = fts.search(index, ["science", "management"])
    assert sorted(_rows(everything)) == sorted(_ranked(index, ["science", "management"], None, 10_000))


def test_an_index_file_of_an_earlier_build_is_ranked_by_fts5(tmp_path):
    old = tmp_path / "old.fts.sqlite"
    con = sqlite3.connect(old)
    con.execute(f"CREATE VIRTUAL TABLE work_text USING fts5(title, keywords, tokenize='{fts.TOKENIZE}')")
    con.executemany(
        "INSERT INTO work_text(rowid, title, keywords) VALUES (?, ?, '')", [(5, "learning"), (3, "learning to learn")]
    )
    con.commit()
    con.close()
    ro = fts.open_index(old)
    try:
        ranked = ro.execute(
            "SELECT rowid, bm25(work_text) AS r FROM work_text WHERE work_text MATCH 'learning' ORDER BY r, rowid"
        ).fetchall()
        assert [k for k, _ in ranked] == [5, 3]  # one token beats three with two of them the term
        assert _rows(fts.top(ro, ["learning"], None, 5)) == ranked
        assert sorted(fts.search(ro, ["learning"]).column("work_key").to_pylist()) == [3, 5]
    finally:
        ro.close()


def test_the_build_leaves_no_scratch_file(tmp_path):
    _build(tmp_path / "i.fts.sqlite", _corpus(50)).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.fts.sqlite"]


def test_a_page_boundary_inside_a_run_of_tied_ranks_breaks_the_tie_by_work_key(tmp_path, monkeypatch):
    monkeypatch.setattr(fts, "TERM_DOCS_MIN", 5)
    # 40 tied ranks (4 tokens, each query term once); the repeated "data" puts the works of larger keys first in
    # impact order, so the scan meets the tie out of key order
    rows = [(1000 + i, "science management data data", "") for i in range(20)]
    rows += [(10 + i, "science management open canada", "") for i in range(20)]
    rows += [(5000 + i, "science management of open data in canada", "science") for i in range(30)]
    con = _build(tmp_path / "ties.fts.sqlite", rows)
    try:
        words, after, seen = ["science", "management"], None, []
        for _ in range(11):
            page = fts.impact_top(con, words, after, 7)
            assert page is not None
            assert _rows(page) == _ranked(con, words, after, 7)
            if page.num_rows < 7:
                break
            after = _rows(page)[-1][1], _rows(page)[-1][0]
            seen += _rows(page)
        first = con.execute("SELECT work_key FROM work_keys WHERE rowid_ = 1").fetchone()[0]
        assert first >= 1000
        assert [k for k, _ in seen[:40]] == [*range(10, 30), *range(1000, 1020)]
        assert len({r for _, r in seen[:40]}) == 1
        assert len(seen) == 70
    finally:
        con.close()


def test_a_hyphenated_word_is_the_phrase_of_its_parts_and_or_takes_it_whole():
    assert fts.parse_query("meta-analysis") == fts.parse_query('"meta analysis"') == ((("meta", "analysis"),),)
    assert fts.parse_query("meta\u2010analysis") == fts.parse_query("meta-analysis")  # the Unicode hyphen too
    got = fts.parse_query("systematic review OR meta-analysis")
    assert got == ((("systematic",),), (("meta", "analysis"), ("review",)))
    assert fts.query_text(got) == 'systematic "meta analysis" OR review'
    assert fts.parse_query("a - b") == ((("a",),), (("b",),))  # a hyphen between spaces joins nothing


def test_a_word_of_the_sis_declension_finds_its_other_number(tmp_path):
    """The Porter stems of analysis and analyses differ (analysi, analys); the query matches both numbers, in a
    phrase and with accents too, and a word that merely ends in -ses gets a form that matches nothing more."""
    con = _build(
        tmp_path / "greek.fts.sqlite",
        [
            (1, "A meta-analysis of peer review", ""),
            (2, "Meta-analyses of reporting guidelines", ""),
            (3, "Hypotheses in the analysis of courses", ""),
            (4, "Unrelated", "courses"),
            (5, "Web-based courses: these results", ""),
        ],
    )
    try:
        count = lambda q: fts.count(con, fts.parse_query(q))  # noqa: E731
        assert count("meta-analysis") == count("meta-analyses") == count("méta-analysís") == 2
        assert count("analyses") == 3 and count("hypothesis") == 1 and count("courses") == 3
        assert count('"meta analyses" OR hypothesis') == 3
        # short words keep their own stem: basis and thesis would add bases and theses, stemmed base and these
        assert count("basis") == 0 and count("thesis") == 0 and count("based") == 1
        assert fts.match_expression(fts.parse_query("diseases")) == '("diseases" OR "diseasis")'
        assert fts.match_expression(fts.parse_query("basis")) == '"basis"'
    finally:
        con.close()
