"""The entity lists that ship: a frame from work records alone routes ca_fund and ca_venue as one built with the
entity records; refreshing the list from a snapshot or the API; an empty kind is an error unless allowed."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
import tarfile
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.definitions import build_resources, materialize_in_process
from metacan_pipeline.frame.shipped import (
    FILE_COLUMNS,
    EntityListError,
    packaged_file,
    pinned_lists,
    read_list_file,
    shipped_records,
    sidecar_of,
)
from metacan_pipeline.openalex.reader import Record
from metacan_pipeline_tests.builders.openalex import LoopbackOpenAlex

SNAPSHOT = "max-planck-innovation-competition__go-openalex__snapshot_sample"
ENTITY_DIRS = ("funders", "sources", "institutions")


def _is_entity_file(name: str) -> bool:
    """A file of funder records (the MetaCan funder answers, a JSON Lines funder dump)."""
    return "__funder_" in name or name.endswith("_funders.txt")


def _works_only(src: Path, dest: Path) -> Path:
    """A copy of the input folder ``src`` without a single funder, source or institution record: the funder files
    and the snapshot's entity folders are left out, every work file (and the merged ids) kept."""
    shutil.copytree(
        src,
        dest,
        ignore=lambda folder, names: [
            n for n in names if _is_entity_file(n) or (Path(folder).name == "data" and n in ENTITY_DIRS)
        ],
    )
    return dest


def _json_lines(text: str):
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


def _raw_json_docs(folder: Path):
    """Every JSON document of the folder's files, read with json, gzip and tarfile alone: ``.json`` documents,
    ``.txt`` and gzip JSON Lines, and the JSON list inside a ``.tar.gz``."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name.endswith(".tar.gz"):
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.isfile() and member.name.endswith(".json"):
                        yield path, json.load(tar.extractfile(member))
        elif path.suffix == ".json":
            yield path, json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".txt":
            yield from ((path, d) for d in _json_lines(path.read_text(encoding="utf-8")))
        elif path.suffix == ".gz" and "merged_ids" not in path.parts:
            yield from ((path, d) for d in _json_lines(gzip.decompress(path.read_bytes()).decode("utf-8")))


def _records(doc):
    """The entity records inside one document: a list, an API page (``results``), an archived answer
    (``payload``), or one record."""
    if isinstance(doc, list):
        for d in doc:
            yield from _records(d)
    elif isinstance(doc, dict):
        if "payload" in doc:
            yield from _records(doc["payload"])
        elif isinstance(doc.get("results"), list):
            yield from _records(doc["results"])
        elif isinstance(doc.get("id"), str):
            yield doc


def _tail(url) -> str | None:
    return url.rsplit("/", 1)[-1] if isinstance(url, str) else None


def _expected_route_ids(*folders: Path) -> tuple[set[str], set[str]]:
    """The funder- and venue-routed admitted works of ``folder``, computed from the raw JSON: the Canadian funder
    and source ids from the entity records with country_code CA, then every work's newest version, admitted when
    published 2000-2025 with a title, routed by funder (``funders[].id``, ``grants[].funder``,
    ``awards[].funder_id``) or venue (``primary_location.source.id``, or the 2022 ``host_venue.id``)."""
    docs = [(p, r) for folder in folders for p, d in _raw_json_docs(folder) for r in _records(d)]
    canadian = {_tail(r["id"]) for _, r in docs if r.get("country_code") == "CA" and _tail(r["id"])[0] in "FSI"}
    newest: dict[str, dict] = {}
    for _, r in docs:
        wid = _tail(r["id"])
        if (
            wid
            and wid.startswith("W")
            and (wid not in newest or (r.get("updated_date") or "") > (newest[wid].get("updated_date") or ""))
        ):
            newest[wid] = r
    fund, venue = set(), set()
    for wid, w in newest.items():
        if not (2000 <= (w.get("publication_year") or 0) <= 2025 and (w.get("title") or "").strip()):
            continue
        funders = {_tail(f.get("id")) for f in w.get("funders") or []}
        funders |= {_tail(g.get("funder")) for g in w.get("grants") or []}
        funders |= {_tail(a.get("funder_id")) for a in w.get("awards") or []}
        if funders & canadian:
            fund.add(wid)
        source = ((w.get("primary_location") or {}).get("source") or {}).get("id") or (w.get("host_venue") or {}).get(
            "id"
        )
        if _tail(source) in canadian:
            venue.add(wid)
    return fund, venue


def _routed(data: Path) -> tuple[set[str], set[str], dict]:
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    fund = {r[0] for r in con.execute("SELECT id FROM frame WHERE ca_fund").fetchall()}
    venue = {r[0] for r in con.execute("SELECT id FROM frame WHERE ca_venue").fetchall()}
    src = dict(con.execute("SELECT kind, min(source_file) FROM canadian_entities GROUP BY kind").fetchall())
    con.close()
    return fund, venue, src


def _build(data: Path, *inputs: Path):
    folders = [str(p) for p in inputs]
    return materialize_in_process(dg.DagsterInstance.ephemeral(), build_resources(str(data), folders), through="frame")


def _plant_venue_work(dest: Path, openalex_dir: Path) -> tuple[str, str]:
    """A real work record (W3209445140, no Canadian route of its own) moved into a real Canadian venue of the
    snapshot sample, as a newer version in its own folder: the one venue-routed work of the test. Returns the
    work id and the venue id."""
    part = next((openalex_dir / SNAPSHOT / "data" / "sources").rglob("part_*.gz"))
    venue = next(s for s in _json_lines(gzip.decompress(part.read_bytes()).decode()) if s.get("country_code") == "CA")
    work = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W3209445140.json").read_text())
    work = work.get("payload", work)
    work["primary_location"] = {**(work.get("primary_location") or {}), "source": {"id": venue["id"]}}
    work["updated_date"] = "2026-12-01T00:00:00"
    dest.mkdir()
    (dest / "planted_venue_work.json").write_text(json.dumps(work))
    return _tail(work["id"]), _tail(venue["id"])


@pytest.mark.slow
def test_a_frame_from_work_records_alone_routes_the_same_funder_and_venue_works(
    tmp_path, openalex_dir, openalex_more_dir
):
    planted, venue_id = _plant_venue_work(tmp_path / "planted", openalex_dir)
    full = [openalex_dir, openalex_more_dir, tmp_path / "planted"]
    bare = [_works_only(f, tmp_path / f"works_only_{i}") for i, f in enumerate(full)]
    assert not [p for f in bare for p in f.rglob("*") if _is_entity_file(p.name)]
    assert not (bare[0] / SNAPSHOT / "data" / "sources").exists()
    fund, venue = _expected_route_ids(*full)
    # the planted outcome: lme4 and the 5,103-author ATLAS+CMS work by NSERC, the planted work by its venue
    assert (fund, venue) == ({"W1951724000", "W1694905212"}, {planted})
    assert _expected_route_ids(*bare) == (set(), set())  # the work records alone name no Canadian entity
    assert venue_id in {r["id"] for r in read_list_file(packaged_file())}

    assert _build(tmp_path / "with", *full).success
    assert _build(tmp_path / "alone", *bare).success
    with_fund, with_venue, with_src = _routed(tmp_path / "with")
    alone_fund, alone_venue, alone_src = _routed(tmp_path / "alone")
    assert (with_fund, with_venue) == (fund, venue)
    assert (alone_fund, alone_venue) == (fund, venue)
    shipped = packaged_file().name
    assert set(alone_src.values()) == {shipped} and shipped not in with_src.values()


def test_the_packaged_list_is_dated_sourced_and_made_only_of_records_in_the_shared_data(
    openalex_dir, openalex_more_dir
):
    path = packaged_file()
    rows = read_list_file(path)
    sidecar = json.loads(sidecar_of(path).read_text(encoding="utf-8"))
    assert path.name == f"ca_entities-{sidecar['pinned_on']}.csv.gz"
    assert "PARTIAL" in sidecar["coverage"] and "2,182" in sidecar["coverage"] and "CC0" in sidecar["licence"]
    found = {
        (r.get("id") or "").rsplit("/", 1)[-1]: r
        for folder in (openalex_dir, openalex_more_dir)
        for _, d in _raw_json_docs(folder)
        for r in _records(d)
        if r.get("country_code") == "CA"
    }
    assert {r["id"] for r in rows} == {i for i in found if i[0] in "FSI"}  # every row is a real record, none missing
    assert sidecar["counts"] == {k: sum(1 for r in rows if r["kind"] == k) for k in ("funder", "source", "institution")}
    assert all(found[r["id"]]["display_name"] == r["display_name"] for r in rows)


def _write(path: Path, rows: list[list[str]], header=FILE_COLUMNS) -> Path:
    with gzip.open(path, "wt", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_a_bad_list_file_names_the_file_and_the_line(tmp_path):
    bad = _write(tmp_path / "l.csv.gz", [["funder", "F1", "A", "", "x"], ["source", "F2", "B", "", "x"]])
    with pytest.raises(EntityListError, match=r"l\.csv\.gz line 3: kind 'source' with id 'F2'"):
        read_list_file(bad)
    cols = _write(tmp_path / "c.csv.gz", [], header=("kind", "id"))
    with pytest.raises(EntityListError, match="expected"):
        read_list_file(cols)


def _rec(kind: str, eid: str, cc: str = "CA") -> Record:
    return Record(
        {"id": f"https://openalex.org/{eid}", "display_name": eid, "country_code": cc}, "in.json", "", None, kind
    )


def test_each_kind_comes_from_the_input_when_it_has_any_else_from_the_shipped_list(tmp_path):
    shipped = _write(
        tmp_path / "s.csv.gz",
        [
            ["funder", "F9", "Nine", "2024-01-02", "o"],
            ["source", "S9", "V", "", "o"],
            ["institution", "I9", "U", "", "o"],
        ],
    )
    rows, origin = pinned_lists([_rec("F", "F1"), _rec("S", "S2", "US")], "2026-01-01", shipped, frozenset())
    assert origin == {"funder": "input", "source": "shipped", "institution": "shipped"}
    assert {(r["kind"], r["id"], r["source_file"]) for r in rows} == {
        ("funder", "F1", "in.json"),
        ("source", "S9", "s.csv.gz"),
        ("institution", "I9", "s.csv.gz"),
    }
    assert [r.data["display_name"] for r in shipped_records(shipped)] == ["Nine", "V", "U"]
    with pytest.raises(
        EntityListError, match=r"no Canadian source records.*ca_venue.*METACAN_EMPTY_ENTITY_KINDS=source"
    ):
        pinned_lists([_rec("F", "F1"), _rec("I", "I1")], "2026-01-01", None, frozenset())
    rows, origin = pinned_lists([_rec("F", "F1"), _rec("I", "I1")], "2026-01-01", None, frozenset({"source"}))
    assert origin["source"] == "none" and {r["id"] for r in rows} == {"F1", "I1"}


def test_an_input_without_sources_and_no_shipped_list_fails_naming_the_kind_unless_allowed(
    tmp_path, small_input, monkeypatch
):
    monkeypatch.setenv("METACAN_ENTITY_LIST_FILE", "none")
    result = materialize_in_process(
        dg.DagsterInstance.ephemeral(), build_resources(str(tmp_path / "d1"), str(small_input)), through="frame"
    )
    assert not result.success
    msg = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    # the small input holds the four funder records but no source or institution record
    assert "no Canadian source records" in msg and "ca_venue cannot fire" in msg
    assert "metacan fetch --out" in msg and "data/sources/" in msg and "METACAN_EMPTY_ENTITY_KINDS=source" in msg
    monkeypatch.setenv("METACAN_EMPTY_ENTITY_KINDS", " Source,institution")
    assert materialize_in_process(
        dg.DagsterInstance.ephemeral(), build_resources(str(tmp_path / "d2"), str(small_input)), through="frame"
    ).success
    con = duckdb.connect(str(tmp_path / "d2" / "metacan.duckdb"), read_only=True)
    assert con.execute("SELECT list(id) FILTER (ca_fund), count(*) FILTER (ca_venue) FROM frame").fetchone() == (
        ["W1951724000"],
        0,
    )
    monkeypatch.setenv("METACAN_EMPTY_ENTITY_KINDS", "sources")
    result = materialize_in_process(
        dg.DagsterInstance.ephemeral(), build_resources(str(tmp_path / "d3"), str(small_input)), through="frame"
    )
    msg = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert "METACAN_EMPTY_ENTITY_KINDS" in msg and "sources is not an entity kind" in msg


def test_entity_list_refreshes_from_a_snapshots_entity_parts(tmp_path, openalex_dir):
    snap = openalex_dir / SNAPSHOT
    want = {
        (kind, r["id"].rsplit("/", 1)[-1])
        for kind in ENTITY_DIRS
        for part in (snap / "data" / kind).rglob("part_*.gz")
        for line in gzip.open(part, "rt", encoding="utf-8")
        if (r := json.loads(line)).get("country_code") == "CA"
    }
    res = CliRunner().invoke(
        app, ["entity-list", "--from", str(snap), "--out", str(tmp_path), "--pinned-on", "2026-01-31"]
    )
    assert res.exit_code == 0, res.output
    path = tmp_path / "ca_entities-2026-01-31.csv.gz"
    got = {(r["kind"] + "s", r["id"]) for r in read_list_file(path)}
    assert got == want and len(want) == 38
    before = path.read_bytes()
    again = CliRunner().invoke(
        app, ["entity-list", "--from", str(snap), "--out", str(tmp_path), "--pinned-on", "2026-01-31"]
    )
    assert again.exit_code == 0 and path.read_bytes() == before  # byte-stable: an unchanged list is an unchanged file
    side = json.loads(sidecar_of(path).read_text())
    assert side["counts"] == {"funder": 0, "source": 3, "institution": 35}
    # a folder of work records only has nothing to pin: refused, nothing written
    works = snap / "data" / "works"
    res = CliRunner().invoke(app, ["entity-list", "--from", str(works), "--out", str(tmp_path / "none")])
    assert res.exit_code == 2 and "no funder, source or institution record with country_code CA" in res.output
    assert not (tmp_path / "none").exists()
    res = CliRunner().invoke(app, ["entity-list", "--from", str(tmp_path / "missing"), "--out", str(tmp_path)])
    assert res.exit_code == 2 and "not a folder" in res.output


def test_fetch_writes_the_entity_list_from_the_live_api(tmp_path, openalex_dir, monkeypatch):
    nserc = json.loads((openalex_dir / "choxos__MetaCan__funder_NSERC_F4320334593.json").read_text())["payload"][
        "results"
    ][0]
    snap_sources = [
        json.loads(line)
        for line in gzip.open(next((openalex_dir / SNAPSHOT / "data" / "sources").rglob("part_*.gz")), "rt")
    ]
    ca_sources = [s for s in snap_sources if s.get("country_code") == "CA"]

    def answer(path, q):
        assert q.get("filter") == "country_code:ca" or path == "/works"
        return {"/funders": [nserc], "/sources": ca_sources}.get(path, [])

    server = LoopbackOpenAlex(answer)
    try:
        res = CliRunner().invoke(
            app,
            [
                "fetch",
                "--out",
                str(tmp_path / "a"),
                "--base-url",
                server.base_url,
                "--api-key-env",
                "",
                "--entity-list-out",
                str(tmp_path / "lists"),
            ],
        )
    finally:
        server.shutdown()
    assert res.exit_code == 0, res.output
    path = next((tmp_path / "lists").glob("ca_entities-*.csv.gz"))
    rows = read_list_file(path)
    assert [(r["kind"], r["id"]) for r in rows] == [("funder", "F4320334593")] + sorted(
        ("source", s["id"].rsplit("/", 1)[-1]) for s in ca_sources
    )
    side = json.loads(sidecar_of(path).read_text())
    assert side["coverage"].startswith("complete") and server.base_url in side["provenance"]
    # the refreshed file feeds a frame whose input holds no entity record: lme4 is routed by NSERC again
    bare = _works_only(openalex_dir, tmp_path / "bare")
    monkeypatch.setenv("METACAN_ENTITY_LIST_FILE", str(path))
    monkeypatch.setenv("METACAN_EMPTY_ENTITY_KINDS", "institution")
    assert _build(tmp_path / "data", bare).success
    fund, venue, src = _routed(tmp_path / "data")
    assert "W1951724000" in fund and src == {"funder": path.name, "source": path.name}
