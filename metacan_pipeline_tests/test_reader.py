import gzip
import json
from pathlib import Path

from metacan_pipeline.openalex.abstract import deinvert, markup_to_text
from metacan_pipeline.openalex.ids import is_work_id, short_id
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


def test_deinversion_handles_gaps_and_leading_label(openalex_dir: Path):
    work = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2241997964.json").read_text())
    index = work["abstract_inverted_index"]
    text = deinvert(index)
    n_tokens = sum(len(v) for v in index.values())
    assert max(p for v in index.values() for p in v) + 1 > n_tokens  # the real record has a gap
    assert len(text.split()) == n_tokens
    assert deinvert({"Abstract": [0], "Results": [1], "<p>matter.</p>": [3]}) == "Results matter."
    assert deinvert({"": [0], " ": [1]}) is None
    assert deinvert(None) is None


def test_markup_to_text_and_ids():
    assert markup_to_text("Using<b>lme4</b>") == "Usinglme4"
    assert markup_to_text("<i>Planck</i> 2018 results") == "Planck 2018 results"
    assert markup_to_text("<script>alert(1)</script>x &lt; y") == "alert(1) x < y"
    assert markup_to_text("Effect<br>Ontario") == "Effect Ontario" and markup_to_text("H<sub>2</sub>O") == "H2O"
    assert short_id("https://openalex.org/w123") == "W123"
    assert short_id("F4320334593") == "F4320334593"
    assert short_id("https://example.org/W1") is None
    assert is_work_id("W1") and not is_work_id("W1/../x") and not is_work_id("../W1")
    assert not is_work_id("W\u0661") and not is_work_id("W1\n") and short_id("W" + "1" * 20) is None
