"""The CSV and JSON Lines text of an export batch, written by Arrow's kernels, against what the standard library's
``csv.writer`` and ``json`` write for the same values (quotes, commas, newlines, nulls, doubles, lists, non-ASCII)."""

from __future__ import annotations

import csv
import io

import pyarrow as pa

from metacan_pipeline.site.web.export import _cell, _csv_lines, _lines

BATCH = pa.record_batch(
    {
        "id": ["W1", "W2", "W3", "W4"],
        "title": ['He said "no", twice', "line\nbreak\r\nand CR", None, "Été, à Montréal ✓"],
        "year": pa.array([2020, None, 1999, 2024], pa.int32()),
        "flag": [True, False, None, True],
        "score": pa.array([1.0, 0.30000000000000004, None, 1e-05], pa.float64()),
        "cats": pa.array([["sts", "bibliometrics"], [], None, ["a,b"]], pa.list_(pa.string())),
        "plain": ["works/v/W1.html", "", None, "works/v/W4.html"],  # nothing to quote: never searched cell by cell
        "json": ['[{"arm": "codex", "score": 0.5}]', None, "[]", '[{"arm": "gemma"}]'],
    }
)


def test_csv_lines_are_what_csv_writer_writes_for_the_same_cells():
    want = io.StringIO()
    rows = [[_cell(v) for v in row.values()] for row in BATCH.to_pylist()]
    csv.writer(want, lineterminator="\n").writerows(rows)
    got = _csv_lines(BATCH)
    assert isinstance(got, bytes) and got.decode("utf-8") == want.getvalue()
    assert list(csv.reader(io.StringIO(got.decode()))) == rows
    part = io.StringIO()
    csv.writer(part, lineterminator="\n").writerows(rows[1:3])
    assert _csv_lines(BATCH.slice(1, 2)).decode() == part.getvalue()  # a slice of a batch, as DuckDB's reader gives
    assert _csv_lines(BATCH.slice(0, 0)) == b""
    for start in range(len(rows)):  # every slice: a quote or comma in the buffer may lie outside the slice's cells
        for length in range(1, len(rows) - start + 1):
            part = io.StringIO()
            csv.writer(part, lineterminator="\n").writerows(rows[start : start + length])
            assert _csv_lines(BATCH.slice(start, length)).decode() == part.getvalue(), (start, length)


def test_lines_join_every_value_with_a_newline_each_also_for_a_sliced_array():
    values = pa.array(['{"a": 1}', "é", "", '{"b": "x\\ny"}'])
    assert _lines(values) == "".join(v + "\n" for v in values.to_pylist()).encode()
    assert _lines(values.slice(1, 2)) == "é\n\n".encode()
    assert _lines(values.slice(0, 0)) == b""


def test_csv_text_cells_a_spreadsheet_would_run_as_formulas_start_with_a_quote_and_numbers_stay_numbers():
    batch = pa.record_batch(
        {
            "title": ['=HYPERLINK("http://x","y")', "+1 and more", "-dash", "@SUM(A1)", "\ttab", "\rcr", "a=b", None],
            "delta": pa.array([-0.5, 1.0, -2.0, None, 0.0, -1e-05, 3.0, -7.0], pa.float64()),
            "n": pa.array([-3, 4, -5, 0, None, 1, 2, -1], pa.int64()),
            "names": pa.array([["=cmd|' /C calc'!A0"], ["ok", "-x"], [], None, ["@a"], ["b"], ["c"], ["+"]]),
        }
    )
    got = list(csv.reader(io.StringIO(_csv_lines(batch).decode())))
    assert [r[0] for r in got] == ["'=HYPERLINK(\"http://x\",\"y\")", "'+1 and more", "'-dash", "'@SUM(A1)", "'\ttab",
                                   "'\rcr", "a=b", ""]  # fmt: skip
    assert [r[1] for r in got] == ["-0.5", "1.0", "-2.0", "", "0.0", "-1e-05", "3.0", "-7.0"]
    assert [r[2] for r in got] == ["-3", "4", "-5", "0", "", "1", "2", "-1"]
    assert [r[3] for r in got] == ["'=cmd|' /C calc'!A0", "ok; -x", "", "", "'@a", "b", "c", "'+"]
