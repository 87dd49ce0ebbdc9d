"""Tests of metacan_pipeline.student.score_list, list_input and ``metacan score``: any list of works scored by a published model
version, each bad input row named and kept, and a frame work scored exactly as the frame's ``student_scores``."""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.openalex.ids import short_id
from metacan_pipeline.openalex.reader import Record, iter_records
from metacan_pipeline.openalex.works import student_view, work_row
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.assets import predictions, student_heads
from metacan_pipeline.student.features import student_text
from metacan_pipeline.student.list_input import ENTITY_NAMES, InputWork, classify_object, read_list
from metacan_pipeline.student.score_list import (
    QUANTILE_LEVELS,
    ScoringUnavailable,
    open_scorer,
    percentiles,
    rejects_path,
)
from metacan_pipeline.student.scoring import score_column
from metacan_pipeline.vocab import CATEGORICAL_TARGETS, PREDICTION_STATUS
from metacan_pipeline_tests.builders.student import list_rows, run_student, write_inputs


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[MetacanStorage, list[dict]]:
    """The test builders' small warehouse with a published model version and its student_scores (trained once)."""
    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("score") / "data"))
    frame = write_inputs(storage)
    run_student(storage, student_heads, predictions)
    return storage, frame


def _invoke(storage: MetacanStorage, *args: str):
    return CliRunner().invoke(app, ["score", *args, "--data-dir", str(storage.root)])


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


LIST_COLUMNS = ["id", "title", "venue", "topic", "field", "type", "language"]


def test_a_frame_work_scored_through_metacan_score_gets_exactly_its_student_scores_value(published, tmp_path):
    storage, frame = published
    rows = list_rows(frame)[::-1][:120]  # another order and batch composition than the frame's
    src = _write_csv(tmp_path / "list.csv", rows, LIST_COLUMNS)
    out = tmp_path / "scored.parquet"
    result = _invoke(storage, str(src), "--out", str(out), "--batch-size", "50")
    assert result.exit_code == 0, result.output
    got = pq.read_table(out).to_pylist()
    assert [r["id"] for r in got] == [r["id"] for r in rows]  # one row per work, input order
    titles = {r["id"]: r["title_text"] for r in frame}
    assert [r["title"] for r in got] == [titles[r["id"]] for r in rows]
    frame_scores = {r["id"]: r for r in storage.read_table("student_scores").to_pylist()}
    version = storage.read_table("predictions", ["model_version"]).column(0)[0].as_py()
    bundle = open_scorer(storage).bundle
    sources = list(bundle.heads)
    assert sources == ["codex", "gemma"]
    for r in got:
        want = frame_scores[r["id"]]
        for source in sources:
            for head in bundle.heads[source]:
                if head in CATEGORICAL_TARGETS:
                    probs = want[score_column(source, head)]
                    assert r[f"{source}:{head}"] == want[f"{score_column(source, head)}__argmax"]
                    assert r[f"{source}:{head}:probability"] == max(probs)
                else:
                    assert r[f"{source}:{head}"] == want[score_column(source, head)], (r["id"], source, head)
        assert r["model_version"] == version
        assert r["validation_status"] == PREDICTION_STATUS
    assert not rejects_path(out).exists()


def test_percentiles_are_the_share_of_frame_works_at_or_below_the_score(published, tmp_path):
    storage, frame = published
    src = _write_csv(tmp_path / "list.csv", list_rows(frame), LIST_COLUMNS)
    out = tmp_path / "scored.csv"
    assert _invoke(storage, str(src), "--out", str(out)).exit_code == 0
    with open(out, newline="") as fh:
        got = list(csv.DictReader(fh))
    frame_scores = np.array(storage.read_table("student_scores", ["codex__metaresearch"]).column(0).to_numpy())
    for r in got:
        s = float(r["codex:metaresearch"])
        share = 100.0 * (frame_scores <= s).mean()
        # 1,001 quantile levels: the percentile is a lower bound of the share, within 0.1 point
        assert float(r["codex:metaresearch:percentile"]) <= share + 1e-9
        assert float(r["codex:metaresearch:percentile"]) >= share - 0.1 - 100.0 / len(frame_scores)
    top = max(got, key=lambda r: float(r["codex:metaresearch"]))
    assert float(top["codex:metaresearch:percentile"]) == 100.0


def test_percentiles_function_on_known_quantiles():
    q = np.linspace(0.0, 1.0, len(QUANTILE_LEVELS))  # uniform frame scores
    assert percentiles(q, np.array([-0.1, 0.0, 0.2505, 0.5, 1.0, 2.0])).tolist() == [0.0, 0.0, 25.0, 50.0, 100.0, 100.0]


def test_every_bad_row_is_named_on_stderr_and_in_the_rejects_file(published, tmp_path):
    storage, frame = published
    good = list_rows(frame)[:3]
    lines = [
        json.dumps(good[0]),
        json.dumps({"title": "A title without an id"}),  # row 2: no id
        json.dumps({"id": "x-1", "title": "   "}),  # row 3: empty title
        '{"id": "x-2", "title": ',  # row 4: not JSON
        json.dumps({"id": "x-3", "title": 42}),  # row 5: wrong type
        json.dumps({"id": ["x"], "title": "A list id"}),  # row 6: wrong type of id
        json.dumps(good[0]),  # row 7: duplicate id
        json.dumps([1, 2]),  # row 8: not an object
        json.dumps({"id": "x-4", "title": "Keywords typed wrong", "keywords": {"a": 1}}),  # row 9
        json.dumps(good[1]),
        "",  # a blank line is no row
        json.dumps({"id": "W1", "title": "Mixed", "venue": "J", "authorships": []}),  # row 11: mixed shapes
        json.dumps(good[2]),
    ]
    src = tmp_path / "list.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "scored.jsonl"
    result = _invoke(storage, str(src), "--out", str(out))
    assert result.exit_code == 0, result.output
    got = [orjson.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in got] == [good[0]["id"], good[1]["id"], good[2]["id"]]
    with open(rejects_path(out), newline="") as fh:
        rejects = list(csv.DictReader(fh))
    reasons = {int(r["row"]): r["reason"] for r in rejects}
    assert reasons[2] == "no id"
    assert reasons[3] == "empty title"
    assert reasons[4].startswith("not JSON")
    assert reasons[5] == "title is a number, not a string"
    assert reasons[6] == "id is a list, not a string"
    assert reasons[7] == "duplicate id (first at row 1)"
    assert reasons[8] == "a JSON list, not an object"
    assert reasons[9] == "keywords is an object, not a string or a list of strings"
    assert reasons[11].startswith("mixes OpenAlex work fields (authorships) with list columns (venue)")
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7, 8, 9, 11]
    assert {r["location"] for r in rejects if r["row"] == "4"} == {"line 4"}
    stderr = result.stderr
    for row, reason in reasons.items():
        assert f"row {row} " in stderr and reason in stderr, (row, reason)
    assert "9 rejected rows written to" in stderr


def test_csv_bad_rows_wrong_field_count_and_non_utf8_are_rejected(published, tmp_path):
    storage, frame = published
    r = list_rows(frame)[0]
    src = tmp_path / "list.csv"
    src.write_bytes(
        b"id,title,venue\n"
        + f"{r['id']},{r['title']},{r['venue']}\n".encode()
        + b"x-1,Too,many,fields\n"
        + b"x-2,Caf\xe9 latin-1 title,J\n"
        + b",Title without id,J\n"
        + b"x-3,,J\n"
        + b",,\n"
        + b"x-4,"
        + b"t" * 2001
        + b",J\n"
    )
    out = tmp_path / "scored.csv"
    result = _invoke(storage, str(src), "--out", str(out))
    assert result.exit_code == 0, result.output
    with open(rejects_path(out), newline="") as fh:
        reasons = {(x["row"], x["location"]): x["reason"] for x in csv.DictReader(fh)}
    assert reasons == {
        ("2", "line 3"): "has 4 fields, the header has 3",
        ("3", "line 4"): "not UTF-8 text",
        ("4", "line 5"): "no id",
        ("5", "line 6"): "empty title",
        ("6", "line 7"): "every field is blank",
        ("7", "line 8"): "a title of 2,001 characters: at most 2,000 are scored",
    }


def test_an_input_with_no_usable_row_exits_2_and_writes_no_output(published, tmp_path):
    storage, _ = published
    src = tmp_path / "bad.jsonl"
    src.write_text('{"id": "a"}\nnot json\n')
    out = tmp_path / "scored.csv"
    result = _invoke(storage, str(src), "--out", str(out))
    assert result.exit_code == 2
    assert not out.exists()
    assert "holds no usable row (2 rejected" in result.stderr
    assert rejects_path(out).exists()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("list.csv", "identifier,name\nW1,A title\n", "has no id and no title column"),
        ("list.csv", "id,name\nW1,A title\n", "has no title column"),
        ("list.csv", "id,title,title\nW1,A,B\n", "the header names 'title' more than once"),
        ("list.csv.gz", "id,title\nW1,not gzip at all\n", "cannot be read (BadGzipFile"),
        ("list.xlsx", "x", "unsupported type (.xlsx)"),
        ("missing.csv", None, "does not exist"),
    ],
)
def test_an_unreadable_input_exits_2_naming_it(published, tmp_path, name, content, message):
    storage, _ = published
    src = tmp_path / name
    if content is not None:
        src.write_text(content)
    result = _invoke(storage, str(src), "--out", str(tmp_path / "o.csv"))
    assert result.exit_code == 2
    assert message in result.stderr


def test_a_cut_gzip_csv_keeps_the_rows_before_the_cut_and_names_where_it_ends(published, tmp_path):
    storage, frame = published
    rows = list_rows(frame)
    body = (
        "id,title\n"
        + "".join(f"{r['id']},{r['title']}\n" for r in rows)
        + "".join(f"x-{i},Filler title number {i} about research assessment\n" for i in range(20_000))
    )
    whole = gzip.compress(body.encode())
    src = tmp_path / "cut.csv.gz"
    src.write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "scored.csv"
    result = _invoke(storage, str(src), "--out", str(out))
    assert result.exit_code == 0, result.output
    with open(out, newline="") as fh:
        scored = [x["id"] for x in csv.DictReader(fh)]
    with open(rejects_path(out), newline="") as fh:
        rejects = list(csv.DictReader(fh))
    assert scored[: len(rows)] == [r["id"] for r in rows] and len(scored) > len(rows)
    assert len(rejects) == 1 and rejects[0]["location"] == f"after line {len(scored) + 1}"
    assert "file unreadable after line" in rejects[0]["reason"] and "EOFError" in rejects[0]["reason"]


def test_an_unknown_output_suffix_exits_2(published, tmp_path):
    storage, frame = published
    src = _write_csv(tmp_path / "list.csv", list_rows(frame)[:2], LIST_COLUMNS)
    result = _invoke(storage, str(src), "--out", str(tmp_path / "o.xlsx"))
    assert result.exit_code == 2 and "use .csv, .jsonl, .parquet" in result.stderr


def test_no_warehouse_or_unknown_model_version_names_make_run(published, tmp_path):
    storage, frame = published
    src = _write_csv(tmp_path / "list.csv", list_rows(frame)[:2], LIST_COLUMNS)
    empty = MetacanStorage(data_dir=str(tmp_path / "nothing"))
    result = _invoke(empty, str(src), "--out", str(tmp_path / "o.csv"))
    assert result.exit_code == 1 and "run `make run` (or `metacan run`)" in result.stderr
    result = _invoke(storage, str(src), "--out", str(tmp_path / "o.csv"), "--model-version", "metacan-v0-nope")
    version = open_scorer(storage).model_version
    assert result.exit_code == 1
    assert "'metacan-v0-nope' is not registered in model_versions" in result.stderr and version in result.stderr
    with pytest.raises(ScoringUnavailable, match="make run"):
        open_scorer(empty)


def test_openalex_records_score_as_their_frame_fields(published, tmp_path, openalex_dir):
    """A real OpenAlex file scores the same as a list of its works' frame fields (work_row's extraction)."""
    storage, _ = published
    src = openalex_dir / "Mearman__Academic-Explorer__works_page1_per50.json"
    by_file = [
        work_row(r)
        for r in iter_records(src.parent)
        if isinstance(r, Record) and r.source_file == src.name and r.kind == "W"
    ]
    assert by_file
    listed = [
        {
            "id": w["id"],
            "title": w["title_text"],
            "venue": w["venue_name"],
            "topic": w["topic"],
            "field": w["field"],
            "type": w["type"],
            "language": w["language"],
            "keywords": w["keywords"],
        }
        for w in by_file
        if (w["title_text"] or "").strip()
    ]
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert _invoke(storage, str(src), "--out", str(a)).exit_code == 0
    list_file = tmp_path / "list.jsonl"
    list_file.write_text("\n".join(json.dumps(x) for x in listed))
    assert _invoke(storage, str(list_file), "--out", str(b)).exit_code == 0
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.num_rows == len(listed) > 10
    assert ta.equals(tb)


def test_student_view_agrees_with_work_row_on_real_records(openalex_dir, openalex_more_dir):
    n = 0
    for root in (openalex_dir, openalex_more_dir):
        for rec in iter_records(root):
            if isinstance(rec, Record) and rec.kind == "W":
                row = work_row(rec)
                view = student_view(rec.data)
                expected = {k: row[k] for k in view}
                expected["title_text"] = (row["title_text"] or "").strip()
                assert view == expected, rec.locator
                n += 1
    assert n > 500


def test_openalex_records_in_json_lines_and_gzip_and_a_snapshot_folder(published, tmp_path, openalex_dir):
    storage, _ = published
    recs = [r.data for r in iter_records(openalex_dir) if isinstance(r, Record) and r.kind == "W"][:40]
    folder = tmp_path / "snap" / "data" / "works" / "updated_date=2026-01-01"
    folder.mkdir(parents=True)
    with gzip.open(folder / "part_000.gz", "wb") as fh:
        fh.write(b"\n".join(orjson.dumps(r) for r in recs))
    outs = []
    for src in (folder / "part_000.gz", tmp_path / "snap"):
        out = tmp_path / f"o{len(outs)}.parquet"
        result = _invoke(storage, str(src), "--out", str(out))
        assert result.exit_code == 0, result.output
        outs.append(pq.read_table(out))
    assert outs[0].equals(outs[1])
    ids = list(dict.fromkeys(short_id(r["id"]) for r in recs if student_view(r)["title_text"]))
    assert outs[0].column("id").to_pylist() == ids


def test_records_of_other_entities_are_counted_as_skipped_not_rejected(published, tmp_path, openalex_dir):
    """A folder of mixed OpenAlex records: its works are scored, its authors, institutions, ... are counted on
    stderr by entity, not rejected one by one; a snapshot folder's parts of other entities are not read at all."""
    storage, _ = published
    records = [r for r in iter_records(openalex_dir, snapshot_entities={"works"}) if isinstance(r, Record)]
    others = Counter(ENTITY_NAMES.get(r.kind, r.kind) for r in records if r.kind != "W")
    assert sum(others.values()) > 0  # the real folder mixes entities outside its snapshot sample
    out = tmp_path / "mixed.csv"
    result = _invoke(storage, str(openalex_dir), "--out", str(out))
    assert result.exit_code == 0, result.output
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(others.items()))
    assert f"skipped {sum(others.values())} OpenAlex records of other entities (not works): {kinds}" in result.output
    assert "not a work" not in result.output
    if rejects_path(out).exists():
        assert "not a work" not in rejects_path(out).read_text()
    authors = [r.data for r in records if r.kind == "A"][:5]
    works = [r.data for r in records if r.kind == "W" and student_view(r.data)["title_text"]][:5]
    for entity, recs in (("authors", authors), ("works", works)):
        part = tmp_path / "snap" / "data" / entity / "updated_date=2026-01-01" / "part_000.gz"
        part.parent.mkdir(parents=True)
        with gzip.open(part, "wb") as fh:
            fh.write(b"\n".join(orjson.dumps(r) for r in recs))
    result = _invoke(storage, str(tmp_path / "snap"), "--out", str(tmp_path / "snap.csv"))
    assert result.exit_code == 0 and "skipped" not in result.output, result.output
    with open(tmp_path / "snap.csv", newline="") as fh:
        assert [r["id"] for r in csv.DictReader(fh)] == [short_id(r["id"]) for r in works]


def test_classify_object_tells_records_fromlist_rows():
    wid, fields, why = classify_object({"id": "https://openalex.org/W12", "display_name": "<i>Hello</i> world"})
    assert (wid, fields["title_text"], why) == ("W12", "Hello world", None)
    wid, fields, why = classify_object({"id": "my-1", "title": "A &amp; B", "keywords": "x; y"})
    assert (wid, fields["title_text"], fields["keywords"], why) == ("my-1", "A & B", ["x", "y"], None)
    assert classify_object({"id": "https://openalex.org/A5", "display_name": "An author"})[2] == (
        "an OpenAlex A record, not a work"
    )


def test_another_registered_version_scores_with_null_percentiles(tmp_path):
    """--model-version of a registered version other than the one the frame's student_scores were written with:
    its own scores, and null percentiles with the reason on stderr; the default stays the scores' version."""
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    frame = write_inputs(storage)
    run_student(storage, student_heads, predictions)
    first = open_scorer(storage).model_version
    write_inputs(storage, flip_holdout=True)  # other labels: a new model version, student_scores not rewritten
    run_student(storage, student_heads)
    (second,) = {r["model_version"] for r in storage.read_table("student_heads").to_pylist()}
    assert second != first and open_scorer(storage).model_version == first
    src = _write_csv(tmp_path / "list.csv", list_rows(frame)[:5], LIST_COLUMNS)
    out = tmp_path / "o.parquet"
    result = _invoke(storage, str(src), "--out", str(out), "--model-version", second)
    assert result.exit_code == 0, result.output
    assert f"student_scores were written by {first}, not {second}" in result.stderr
    got = pq.read_table(out)
    assert set(got.column("model_version").to_pylist()) == {second}
    assert got.column("codex:metaresearch:percentile").null_count == 5
    items = list(read_list(src))
    assert all(isinstance(x, InputWork) for x in items)
    expected = open_scorer(storage, second).bundle.heads["codex"]["metaresearch"]
    scorer = open_scorer(storage, second)
    X = scorer.bundle.vectorizer.transform([student_text(w.fields) for w in items])
    assert got.column("codex:metaresearch").to_pylist() == expected.score_samples(X).tolist()


def test_list_rows_take_the_frame_forms_of_ids_types_and_titles():
    wid, fields, why = classify_object(
        {"id": "https://openalex.org/W77", "title": " <b>Bold</b>  title ", "type": "journal-article"}
    )
    assert (wid, fields["title_text"], fields["type"], why) == ("W77", "Bold title", "article", None)
    assert classify_object({"id": "grant-12", "title": "T", "type": "article"})[0:2] == (
        "grant-12",
        {"title_text": "T", "type": "article"},
    )


def test_an_empty_input_exits_2(published, tmp_path):
    storage, _ = published
    src = tmp_path / "empty.csv"
    src.write_text("id,title\n")
    out = tmp_path / "o.csv"
    result = _invoke(storage, str(src), "--out", str(out))
    assert result.exit_code == 2 and "holds no usable row (0 rejected" in result.stderr and not out.exists()


def test_gzip_csv_tsv_and_a_json_array_oflist_rows(published, tmp_path):
    """A .csv.gz and a .tsv score like the .csv; a .json array is read as OpenAlex records, so a row without an
    OpenAlex id is refused with the reason and where id,title rows go."""
    storage, frame = published
    rows = list_rows(frame)[:5]
    plain = _write_csv(tmp_path / "l.csv", rows, LIST_COLUMNS)
    with gzip.open(tmp_path / "l.csv.gz", "wb") as fh:
        fh.write(plain.read_bytes())
    (tmp_path / "l.tsv").write_text(
        "\n".join(["\t".join(LIST_COLUMNS)] + ["\t".join(r[c] for c in LIST_COLUMNS) for r in rows]) + "\n"
    )
    tables = []
    for name in ("l.csv", "l.csv.gz", "l.tsv"):
        out = tmp_path / f"{name}.parquet"
        assert _invoke(storage, str(tmp_path / name), "--out", str(out)).exit_code == 0
        tables.append(pq.read_table(out))
    assert tables[0].num_rows == 5 and tables[0].equals(tables[1]) and tables[0].equals(tables[2])
    array = tmp_path / "l.json"
    array.write_text(json.dumps([{"id": "grant-1", "title": "A title"}, {**rows[0]}]))
    out = tmp_path / "j.csv"
    result = _invoke(storage, str(array), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "unrecognised id 'grant-1' (a record here needs an OpenAlex id; id,title rows go in a CSV or JSON Lines" in (
        result.stderr
    )
    with open(out, newline="") as fh:
        assert [r["id"] for r in csv.DictReader(fh)] == [rows[0]["id"]]


def test_stderr_names_the_first_100_bad_rows_and_counts_the_rest(published, tmp_path):
    storage, frame = published
    src = tmp_path / "l.jsonl"
    src.write_text("\n".join([json.dumps(list_rows(frame)[0])] + ['{"id": "x"}'] * 150) + "\n")
    out = tmp_path / "o.csv"
    result = _invoke(storage, str(src), "--out", str(out))
    assert result.exit_code == 0
    assert result.stderr.count(": no title") == 100
    assert "... and 50 more rejected rows" in result.stderr and "150 rejected rows written to" in result.stderr
    with open(rejects_path(out), newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 150
    # a later run with no bad row leaves no stale rejects file behind
    src.write_text(json.dumps(list_rows(frame)[0]) + "\n")
    assert _invoke(storage, str(src), "--out", str(out)).exit_code == 0
    assert not rejects_path(out).exists()


def test_an_output_that_would_overwrite_the_input_or_cannot_be_written_exits_2(published, tmp_path):
    storage, frame = published
    src = _write_csv(tmp_path / "list.csv", list_rows(frame)[:2], LIST_COLUMNS)
    before = src.read_bytes()
    result = _invoke(storage, str(src), "--out", str(src))
    assert result.exit_code == 2 and "would overwrite the input" in result.stderr
    assert src.read_bytes() == before
    (tmp_path / "hard.csv").hardlink_to(src)  # another name of the same file is the input too
    result = _invoke(storage, str(src), "--out", str(tmp_path / "hard.csv"))
    assert result.exit_code == 2 and "would overwrite the input" in result.stderr and src.read_bytes() == before
    result = _invoke(storage, str(src), "--out", "/proc/scored.csv")
    assert result.exit_code == 2 and "cannot write /proc/scored.csv" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_head_without_positives_gives_no_score_and_says_why_in_the_list_and_the_frame(published, tmp_path):
    storage, frame = published
    src = _write_csv(tmp_path / "list.csv", list_rows(frame)[:3], LIST_COLUMNS)
    out = tmp_path / "o.parquet"
    result = _invoke(storage, str(src), "--out", str(out))
    assert result.exit_code == 0, result.output
    table = pq.read_table(out).to_pydict()
    bundle = open_scorer(storage).bundle
    trained = [(s, t) for s, heads in bundle.heads.items() for t, h in heads.items() if h.status_ == "trained"]
    # the builders' teachers never call a work about_ca_system: those heads learned from negatives only
    no_positive = {
        source: heads["about_ca_system"].n_train_
        for source, heads in bundle.heads.items()
        if source in ("codex", "gemma")
    }
    assert set(no_positive) == {"codex", "gemma"} and all(n > 0 for n in no_positive.values())
    for source, n in no_positive.items():
        column = f"{source}:about_ca_system"
        assert table[column] == [None] * 3 and table[f"{column}:percentile"] == [None] * 3
        reason = f"no positive direct label to learn from (0 positives of {n} labels)"
        assert f"metacan score: {column}: no score: {reason}" in result.stderr
    assert any(v is not None for s, t in trained if t not in CATEGORICAL_TARGETS for v in table[f"{s}:{t}"])
    assert any(v is not None for s, t in trained if t not in CATEGORICAL_TARGETS for v in table[f"{s}:{t}:percentile"])
    # the frame's student_scores hold null for those heads too, never the training rate 0
    frame_scores = storage.read_table("student_scores").to_pydict()
    for source in no_positive:
        assert set(frame_scores[score_column(source, "about_ca_system")]) == {None}
    assert all(v is not None for v in frame_scores[score_column(*trained[0])])


def test_an_unclosed_quote_that_swallows_rows_is_a_reject_naming_its_lines_and_a_wrapped_title_is_not(tmp_path):
    src = tmp_path / "q.csv"
    src.write_text(
        'id,title\nW1,ok\nW2,"Open science, a review\n' + "".join(f"W{i},Title {i}\n" for i in range(3, 8)),
        encoding="utf-8",
    )
    items = list(read_list(src))
    assert [x.id for x in items if isinstance(x, InputWork)] == ["W1"]
    (bad,) = [x for x in items if not isinstance(x, InputWork)]
    assert "lines 3-8" in bad.line() and "a quoted field runs over 6 lines" in bad.line()
    assert "an unclosed quote?" in bad.line()
    wrapped = tmp_path / "wrap.csv"
    wrapped.write_text('id,title\nW1,"A title that\nwraps over two lines"\nW2,x\n', encoding="utf-8")
    got = list(read_list(wrapped))
    assert [(x.id, x.fields["title_text"]) for x in got] == [("W1", "A title that wraps over two lines"), ("W2", "x")]


def test_a_title_a_spreadsheet_would_run_is_text_in_the_csv_and_verbatim_elsewhere(published, tmp_path):
    storage, _ = published
    src = tmp_path / "list.jsonl"
    title = '=HYPERLINK("http://example.org","Peer review of grant applications")'
    src.write_text(json.dumps({"id": "x-1", "title": title}) + "\n")
    out_csv, out_parquet = tmp_path / "scored.csv", tmp_path / "scored.parquet"
    for out in (out_csv, out_parquet):
        assert _invoke(storage, str(src), "--out", str(out)).exit_code == 0
    with open(out_csv, newline="") as fh:
        row = next(csv.DictReader(fh))
    assert row["title"] == "'" + title
    assert pq.read_table(out_parquet).column("title").to_pylist() == [title]
