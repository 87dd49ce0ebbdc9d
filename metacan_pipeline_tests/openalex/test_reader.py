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


# ../shared/data/openalex_more (its SOURCES.md): work records per file, every one of them a work of the 1,054.
MORE_FILES = {
    "FMuro__bibliographer__openalex.json": 65,  # {meta, results}, 2026 schema
    "Nabeelhassan__OpenAlex-Dashboard__app_lib_works3.json": 1,  # one work, 5,103 authorships
    "OpenDevEd__OpenAlex-SDK__english_africa_page1.json": 200,  # {meta, results} search page
    "UtrechtUniversity__BackToPure__all_responses.json": 9,  # a list of single-work responses
    "UtrechtUniversity__BackToPure__src_source_files_works.json": 25,  # {meta, results, group_by}
    "eliarizzetto__omid-openalex__test_works_part_test.gz": 29,  # gzip JSON Lines, grants and funders mixed
    "herreio__openalex-client-review__tu9_type_selection_py_diophila.tar.gz": 410,  # tar.gz of one JSON list
    "knogen__openalex-load-go__testdata_works.txt": 10,  # JSON Lines named .txt
    "openalexPro__openalexPro__snaps_005_pro_pipeline_search.json": 200,  # {meta, results}, newer versions
    "samiullah07__FYP-LLM__openalex_results.json": 5,  # {meta, results, group_by}
    "ywatanabe1989__openalex-local__tests_fixtures_sample_works.json": 100,  # a plain list of search results
}
TAR = "herreio__openalex-client-review__tu9_type_selection_py_diophila.tar.gz"
TAR_MEMBER = "institutions-id-tu9--type-selection--py-diophila.json"


def test_every_record_of_the_second_folder_is_read(openalex_dir, openalex_more_dir):
    items = list(iter_records(openalex_more_dir))
    assert [i for i in items if isinstance(i, Quarantined)] == []
    works = [i for i in items if isinstance(i, Record) and i.kind == "W"]
    by_file = {f: sum(1 for w in works if w.source_file == f) for f in MORE_FILES}
    assert by_file == MORE_FILES and len(works) == 1054
    ids = {short_id(w.data["id"]) for w in works}
    old = {short_id(r.data["id"]) for r in iter_records(openalex_dir) if isinstance(r, Record) and r.kind == "W"}
    assert len(ids) == 1054 and len(ids - old) == 961
    # the only other records: the 10 funders of knogen's funders.txt (NSERC among them), read for the entity lists
    others = [i for i in items if isinstance(i, Record) and i.kind != "W"]
    assert {i.source_file for i in others} == {"knogen__openalex-load-go__testdata_funders.txt"} and len(others) == 10
    assert "F4320334593" in {short_id(i.data["id"]) for i in others}
    # results pages that also carry group_by counts give their results
    utrecht = [w for w in works if w.source_file == "UtrechtUniversity__BackToPure__src_source_files_works.json"]
    assert (utrecht[0].locator, utrecht[-1].locator) == ("results[0]", "results[24]")


def test_a_tar_gz_holding_one_json_list_is_read_member_by_member(openalex_more_dir):
    items = list(iter_file(openalex_more_dir / TAR, openalex_more_dir))
    assert all(isinstance(i, Record) and i.kind == "W" for i in items) and len(items) == 410
    assert (items[0].locator, short_id(items[0].data["id"])) == (f"{TAR_MEMBER}:[0]", "W4200035428")
    assert (items[-1].locator, short_id(items[-1].data["id"])) == (f"{TAR_MEMBER}:[409]", "W3081750989")
    assert {i.source_file for i in items} == {TAR}
    # a work's pointer leads back to its record inside the archive (the codex view re-reads abstracts so)
    from metacan_pipeline.openalex.lookup import load_abstracts

    got = load_abstracts(lambda f: openalex_more_dir / f, [("W4286472674", TAR, f"{TAR_MEMBER}:[11]")])
    assert got["W4286472674"] and len(got["W4286472674"].split()) > 20


def test_json_lines_named_txt_are_read_and_notes_are_not(tmp_path, openalex_more_dir):
    import shutil

    from metacan_pipeline.openalex.reader import discover

    shutil.copy(openalex_more_dir / "knogen__openalex-load-go__testdata_works.txt", tmp_path / "works.txt")
    (tmp_path / "README.txt").write_text("Works downloaded from OpenAlex on 2023-10-09.\n")
    files, unsupported = discover(tmp_path)
    assert [p.name for p in files] == ["works.txt"] and unsupported == []
    items = list(iter_file(tmp_path / "works.txt", tmp_path))
    assert [(i.locator, i.line) for i in items[:2]] == [("record 1", 1), ("record 2", 2)] and len(items) == 10
    assert short_id(items[0].data["id"]) == "W2114918609"


def test_a_damaged_tar_is_quarantined_after_what_it_could_read(tmp_path, openalex_more_dir):
    import io
    import tarfile

    from metacan_pipeline.openalex.reader import is_file_error

    works = json.loads(next(iter(_tar_members(openalex_more_dir / TAR).values())))[:3]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (
            ("a/page.jsonl.gz", gzip.compress(b"\n".join(json.dumps(w).encode() for w in works[:2]))),
            ("a/notes.md", b"# notes"),
            ("a/broken.json", b'{"id": "https://openalex.org/W1", "title": '),
            ("a/works.json", json.dumps(works).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    whole = tmp_path / "whole.tar.gz"
    whole.write_bytes(buf.getvalue())
    items = list(iter_file(whole, tmp_path))
    assert [i.locator for i in items if isinstance(i, Record)] == [
        "a/page.jsonl.gz:record 1",
        "a/page.jsonl.gz:record 2",
        "a/works.json:[0]",
        "a/works.json:[1]",
        "a/works.json:[2]",
    ]
    [bad] = [i for i in items if isinstance(i, Quarantined)]  # the note is skipped, the broken member is not
    assert bad.locator == "a/broken.json:document" and bad.reason.startswith("not valid JSON") and is_file_error(bad)
    # cut inside the last member: the members before it are read, then one row says where the archive broke
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(buf.getvalue()[: len(buf.getvalue()) * 3 // 4])
    items = list(iter_file(cut, tmp_path))
    assert [i.locator for i in items] == [
        "a/page.jsonl.gz:record 1",
        "a/page.jsonl.gz:record 2",
        "a/broken.json:document",
        "after member a/broken.json",
    ]
    assert items[-1].reason.startswith("tar archive unreadable after member a/broken.json (EOFError")
    assert "re-download" in items[-1].reason and is_file_error(items[-1])


def test_a_tar_cut_or_damaged_at_a_member_header_is_quarantined_not_silently_short(tmp_path):
    """tarfile stops iterating quietly at a cut or damaged header: every cut of a plain tar that loses a
    member, and a flipped header byte inside a valid gzip stream, must leave a quarantine row."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(4):
            data = json.dumps({"id": f"https://openalex.org/W{i + 1}", "title": f"Work {i + 1}"}).encode()
            info = tarfile.TarInfo(f"w{i + 1}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    silent = []
    for cut in range(0, len(raw), 64):
        path = tmp_path / "cut.tar"
        path.write_bytes(raw[:cut])
        items = list(iter_file(path, tmp_path))
        if sum(isinstance(i, Record) for i in items) < 4 and not any(isinstance(i, Quarantined) for i in items):
            silent.append(cut)
    assert silent == [] and len(raw) // 64 > 40
    damaged = bytearray(raw)
    damaged[1024 + 100] ^= 0xFF  # the second member's header: its checksum no longer matches
    path = tmp_path / "damaged.tar.gz"
    path.write_bytes(gzip.compress(bytes(damaged)))
    items = list(iter_file(path, tmp_path))
    assert [i.locator for i in items] == ["w1.json:document", "after member w1.json"]
    assert "members may be missing" in items[-1].reason


def _tar_members(path: Path) -> dict[str, bytes]:
    import tarfile

    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def test_an_empty_json_file_is_quarantined_as_a_file_not_read_as_no_records(tmp_path):
    from metacan_pipeline.openalex.reader import is_file_error

    for name, body in (("empty.json", b""), ("blank.json", b"  \n\n")):
        path = tmp_path / name
        path.write_bytes(body)
        [q] = list(iter_file(path, source=name))
        assert isinstance(q, Quarantined) and is_file_error(q)
        assert q.reason.startswith(f"empty file ({len(body)} bytes, no JSON)") and "re-download" in q.reason
