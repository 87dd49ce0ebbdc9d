"""Tests of metacan_pipeline.openalex.reader: reading every real record shape, quarantining bad lines and cut parts."""

import gzip
import json
from pathlib import Path

from metacan_pipeline.openalex.ids import short_id
from metacan_pipeline.openalex.reader import Quarantined, Record, iter_file, iter_records


def test_reads_every_real_shape(openalex_dir):
    items = list(iter_records(openalex_dir))
    works = [i for i in items if isinstance(i, Record) and i.kind == "W"]
    quarantined = [i for i in items if isinstance(i, Quarantined)]
    # SOURCES.md: 889 work records (866 unique ids) in 32 work-bearing files
    assert len(works) == 889
    assert len({short_id(w.data["id"]) for w in works}) == 866
    assert quarantined == []
    kinds = {i.kind for i in items if isinstance(i, Record)}
    assert {"W", "F", "S", "I", "G"} <= kinds
    # archived {request, payload} responses are unwrapped
    wrapped = [w for w in works if w.source_file.startswith("choxos__MetaCan__works_funders")]
    assert [short_id(w.data["id"]) for w in wrapped] == ["W1951724000"]
    assert wrapped[0].locator == "payload.results[0]"
    # snapshot parts are JSON Lines with line numbers
    snap = [w for w in works if w.source_file.endswith("part_000.gz")]
    assert len(snap) == 27 and snap[0].line == 1


def test_bad_lines_are_quarantined_and_reading_goes_on(tmp_path: Path):
    part = tmp_path / "part_000.gz"
    lines = [
        json.dumps({"id": "https://openalex.org/W1", "title": "ok"}),
        "{not json",
        json.dumps({"title": "no id"}),
        json.dumps([1, 2]),
        json.dumps({"id": "https://openalex.org/W2", "title": "also ok"}),
    ]
    with gzip.open(part, "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    items = list(iter_file(part, tmp_path))
    assert [short_id(i.data["id"]) for i in items if isinstance(i, Record)] == ["W1", "W2"]
    q = [i for i in items if isinstance(i, Quarantined)]
    assert [(x.line, x.reason.split(":")[0]) for x in q] == [
        (2, "unparseable JSON"),
        (3, "missing id"),
        (4, "record is a JSON list, not an object"),
    ]
    assert q[0].source_file == "part_000.gz"


def test_truncated_gzip_part_is_quarantined(tmp_path: Path, openalex_dir: Path):
    src = next(openalex_dir.rglob("works/updated_date=*/part_000.gz")).read_bytes()
    cut = tmp_path / "part_001.gz"
    cut.write_bytes(src[: len(src) // 2])
    items = list(iter_file(cut, tmp_path))
    good = [i for i in items if isinstance(i, Record)]
    bad = [i for i in items if isinstance(i, Quarantined)]
    assert 0 < len(good) < 27
    assert len(bad) == 1 and "truncated or corrupt gzip" in bad[0].reason
