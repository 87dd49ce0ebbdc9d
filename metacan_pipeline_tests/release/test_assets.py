"""Tests of metacan_pipeline.release: the release bundle through Dagster (contents, hashes under ``sha256sum -c``,
CITATION.cff checked, immutability) and the rolling layer of the records (no classifier category on a work
that entered after the release until a human_validation row passes)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from metacan_pipeline.publish.assets import work_records
from metacan_pipeline.publish.checks import records_may_ship
from metacan_pipeline.publish.pages import environment, render_work
from metacan_pipeline.release.assets import ReleaseConfig, release
from metacan_pipeline.release.bundle import verify
from metacan_pipeline.release.checks import release_matches_its_hashes
from metacan_pipeline.release.citation import CitationError, validate_citation
from metacan_pipeline.release.layer import ROLLING, UNRELEASED, rolling_violations
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.card import report_dir
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.student import PRED_SCHEMA
from metacan_pipeline_tests.builders.site import CTX, site_world
from metacan_pipeline_tests.builders.student import prediction_row

VERSION = "metacan-v0-hybrid-000000000000"
NEW_ID = "W7999"


def run(storage: MetacanStorage, **config) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [work_records, records_may_ship, release, release_matches_its_hashes],
        resources={"storage": storage},
        run_config=dg.RunConfig({"release": ReleaseConfig(**config)}),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def records(storage: MetacanStorage) -> dict[str, dict]:
    return {r["id"]: json.loads(r["record_json"]) for r in storage.read_table("work_records").to_pylist()}


def meta(result, node="release") -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(node)[0].metadata.items()}


def add_work(storage: MetacanStorage, frame: list[dict]) -> None:
    """A work the weekly refresh brought in after the release, with a classifier candidate and consensus call."""
    storage.write_table("frame", pa.Table.from_pylist([*frame, {**frame[1], "id": NEW_ID}], schema=FRAME_SCHEMA))
    preds = storage.read_table("predictions").to_pylist()
    new = prediction_row(NEW_ID) | {"candidate_categories": ["metaresearch"], "consensus_categories": ["metaresearch"]}
    new |= {"about_ca_topic_candidate": True, "genre_candidate": "empirical", "genre_codex": "empirical"}
    storage.write_table("predictions", pa.Table.from_pylist([*preds, new], schema=PRED_SCHEMA))


def write_card_files(storage: MetacanStorage) -> None:
    """The model card of the world's classifier version, as student_heads leaves it under data/reports/<version>/
    (its content does not matter to a release, which copies the files as they are)."""
    folder = report_dir(storage.root, VERSION)
    folder.mkdir(parents=True)
    (folder / "model_card.json").write_text(json.dumps({"model_version": VERSION, "heads": []}) + "\n")
    (folder / "model_card.md").write_text(f"# Model card: {VERSION}\n")
    (folder / "reliability_codex.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a real plot")


@pytest.fixture(scope="module")
def world(tmp_path_factory, openalex_dir):
    """Two materializations with ``cut: true`` over the 60-work site world: ``(storage, frame, first, second)``."""
    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("release") / "data"))
    frame = site_world(storage, openalex_dir)
    write_card_files(storage)
    first = run(storage, cut=True, citation_authors=["MetaCan research group"])
    assert first.success, [e.event_specific_data for e in first.all_events if e.is_step_failure]
    before = records(storage)
    second = run(storage, cut=True, citation_authors=["MetaCan research group"])
    assert second.success
    return storage, frame, first, second, before


def test_release_bundle_holds_the_frozen_tables_records_cards_and_hashes(world, tmp_path):
    storage, frame, first, _, records_before = world
    md = meta(first)
    folder = Path(md["folder"])
    version = md["release_version"]
    assert md["reused"] is False and folder == storage.root / "releases" / version
    assert version.startswith(dt.date.today().strftime("%Y.%m.%d") + "-") and version.endswith(md["content_sha256"][:8])
    manifest = json.loads((folder / "release.json").read_text())
    assert manifest["release_version"] == version and manifest["classifier_version"] == VERSION
    assert manifest["counts"] == {
        "frame": 60,
        "predictions": 55,
        "machine_scores": 60,
        "direct_labels": 32,
        "human_validation": 0,
        "audit_protocols": 0,
        "records": 60,
    }
    listed = {f["path"] for f in manifest["files"]}
    cards = [f"model_cards/{VERSION}/{name}" for name in ("model_card.json", "model_card.md", "reliability_codex.png")]
    assert manifest["model_cards"] == {VERSION: cards}
    assert listed == {
        "CITATION.cff",
        "README.md",
        "codemeta.json",
        "ro-crate-metadata.json",
        "records.jsonl",
        *cards,
        *(
            f"tables/{t}.parquet"
            for t in ("frame", "direct_labels", "predictions", "machine_scores", "human_validation", "audit_protocols")
        ),
    }
    for f in manifest["files"]:
        assert (folder / f["path"]).stat().st_size == f["bytes"]
    assert pq.read_table(folder / "tables" / "frame.parquet").column("id").to_pylist() == sorted(r["id"] for r in frame)
    # the records frozen are the checked work_records, byte for byte, in id order
    lines = (folder / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == sorted(records_before)
    # frozen by this release, each record is in it (work_records built them before the first release: unreleased)
    assert {r["layer"] for r in records_before.values()} == {UNRELEASED}
    assert {json.loads(line)["layer"] for line in lines} == {version}
    # sha256sum -c, a real subprocess: every file but SHA256SUMS itself, release.json included
    check = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=folder, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": OK") == len(listed) + 1
    assert f"model_cards/{VERSION}/model_card.json: OK" in check.stdout
    for path in cards:  # the card as student_heads wrote it, byte for byte
        assert (folder / path).read_bytes() == (report_dir(storage.root, VERSION) / Path(path).name).read_bytes()
    assert json.loads((folder / cards[0]).read_text())["model_version"] == VERSION
    # an altered card in a copy of the bundle no longer verifies
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / cards[1]).write_text("# Model card: something else\n")
    assert verify(copy) == [
        f"{copy / cards[1]}: SHA-256 or size differs from release.json",
        f"{copy / 'SHA256SUMS'} disagrees with the files of the bundle: {cards[1]}",
    ]
    [evaluation] = [e for e in first.get_asset_check_evaluations() if e.check_name == "release_matches_its_hashes"]
    assert evaluation.passed and evaluation.metadata["releases_checked"].value == 1


def test_citation_cff_is_valid_cff_1_2(world):
    storage, *_ = world
    folder = Path(meta(world[2])["folder"])
    text = (folder / "CITATION.cff").read_text()
    validate_citation(text)
    body = yaml.safe_load(text)
    assert (
        body["cff-version"] == "1.2.0"
        and body["type"] == "dataset"
        and body["authors"] == [{"name": "MetaCan research group"}]
    )
    assert body["date-released"] == json.loads((folder / "release.json").read_text())["created_at"][:10]
    for broken, why in (
        (text.replace("cff-version: 1.2.0", "cff-version: 1.1.0"), "cff-version is '1.1.0'"),
        (text.replace("authors:", "creators:"), "unknown key"),
        (text + "doi: 10.5281/x\n", "unknown key"),
    ):
        with pytest.raises(CitationError, match=why):
            validate_citation(broken)
    assert "MetaCan research group" in text and f"version: {meta(world[2])['release_version']}" in text.replace("'", "")


def test_ro_crate_and_codemeta_describe_every_file_of_the_bundle(world):
    """ro-crate-metadata.json against RO-Crate 1.1's required entities, read independently of the writer: the
    metadata descriptor, the root data entity with its required properties, one File per bundle file with its real
    size, every reference described; codemeta.json names the installed software."""
    from importlib import metadata

    from metacan_pipeline.release.fair import crate_problems

    folder = Path(meta(world[2])["folder"])
    manifest = json.loads((folder / "release.json").read_text())
    crate = json.loads((folder / "ro-crate-metadata.json").read_text())
    assert crate["@context"] == "https://w3id.org/ro/crate/1.1/context"
    graph = {e["@id"]: e for e in crate["@graph"]}
    assert len(graph) == len(crate["@graph"])  # flat: each entity once
    descriptor = graph["ro-crate-metadata.json"]
    assert descriptor["@type"] == "CreativeWork" and descriptor["about"] == {"@id": "./"}
    assert descriptor["conformsTo"] == {"@id": "https://w3id.org/ro/crate/1.1"}
    root = graph["./"]
    assert root["@type"] == "Dataset" and root["name"] and root["description"]
    assert root["datePublished"] == manifest["created_at"][:10] and root["version"] == manifest["release_version"]
    assert graph[root["license"]["@id"]]["@type"] == "CreativeWork"
    assert root["license"]["@id"] == "https://creativecommons.org/publicdomain/zero/1.0/"
    assert [graph[a["@id"]]["name"] for a in root["author"]] == ["MetaCan research group"]
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    parts = {p["@id"] for p in root["hasPart"]}
    assert parts == on_disk - {"ro-crate-metadata.json"} and len(parts) == len(manifest["files"]) + 1
    sizes = {e["path"]: e["bytes"] for e in manifest["files"]}
    for path in parts:
        entity = graph[path]
        assert entity["@type"] == "File" and entity["encodingFormat"], path
        if path in sizes and path != "ro-crate-metadata.json":
            assert int(entity["contentSize"]) == sizes[path] == (folder / path).stat().st_size, path
    assert graph["tables/frame.parquet"]["encodingFormat"] == "application/vnd.apache.parquet"
    assert "contentSize" not in graph["release.json"]  # written after the crate, which it hashes
    for entity in crate["@graph"]:  # every reference is to an entity of the graph (or the spec itself)
        for value in entity.values():
            for ref in value if isinstance(value, list) else [value]:
                if isinstance(ref, dict):
                    assert set(ref) == {"@id"} and (
                        ref["@id"] in graph or ref["@id"].startswith("https://w3id.org/ro/")
                    ), ref
    code = json.loads((folder / "codemeta.json").read_text())
    assert code["@context"] == "https://w3id.org/codemeta/3.0" and code["@type"] == "SoftwareSourceCode"
    assert (code["name"], code["version"]) == ("metacan_pipeline", metadata.version("metacan_pipeline"))
    assert "duckdb==1.5.6" in code["softwareRequirements"]
    assert graph["#metacan_pipeline"]["subjectOf"] == {"@id": "codemeta.json"}
    # the checker the writer runs refuses what breaks the rules
    assert crate_problems(crate, sorted(on_disk)) == []
    broken = json.loads(json.dumps(crate))
    broken["@graph"][1].pop("datePublished")
    broken["@graph"][1]["hasPart"].pop()
    broken["@graph"][0]["conformsTo"] = {"@id": "https://w3id.org/ro/crate/1.0"}
    problems = crate_problems(broken, sorted(on_disk))
    assert "the root data entity has no datePublished" in problems
    assert "the metadata descriptor does not conform to https://w3id.org/ro/crate/1.1" in problems
    assert any(p.startswith("hasPart lists") for p in problems)


def test_a_second_materialization_reuses_the_release(world):
    storage, _, first, second, _ = world
    md1, md2 = meta(first), meta(second)
    assert md2["reused"] is True and md2["release_version"] == md1["release_version"]
    with storage.connect() as con:
        assert con.execute("SELECT count(*) FROM releases").fetchone()[0] == 1
    assert [p.name for p in (storage.root / "releases").iterdir()] == [md1["release_version"]]  # no temporary left
    # after the cut, every record names the release it is in
    assert {r["layer"] for r in records(storage).values()} == {md1["release_version"]}


def test_a_version_is_never_rewritten_and_bad_versions_are_refused(world, tmp_path):
    storage, *_ = world
    taken = meta(world[2])["release_version"]
    bad = run(storage, cut=True, release_version="rolling")
    assert not bad.success
    # the same version name for other content is refused, naming the version; nothing is written
    other = MetacanStorage(data_dir=str(tmp_path / "data"))
    (other.root / "releases").mkdir(parents=True)
    (other.root / "releases" / taken).mkdir()
    for t in ("frame", "predictions", "machine_scores", "direct_labels_gemma", "direct_labels_codex"):
        other.write_table(t, storage.read_table(t).slice(0, 5))
    failed = run(other, cut=True, release_version=taken)
    assert not failed.success
    assert any(
        f"release {taken!r} already exists" in str(e.event_specific_data.error)
        for e in failed.all_events
        if e.is_step_failure
    )
    assert sorted(p.name for p in (other.root / "releases").iterdir()) == [taken]


def test_a_work_added_after_the_release_is_rolling_and_shows_no_category_until_validation_passes(world):
    storage, frame, first, _, _ = world
    version = meta(first)["release_version"]
    add_work(storage, frame)
    result = run(storage)  # default config: no cut
    assert result.success and meta(result)["cut"] is False and meta(result)["release_version"] == version
    rec = records(storage)
    new, old = rec[NEW_ID], rec[frame[0]["id"]]
    assert new["layer"] == ROLLING and old["layer"] == version
    pred = new["prediction"]
    assert pred["candidate_categories"] == [] and pred["consensus_categories"] == []
    assert pred["about_ca_topic_candidate"] is None and pred["genre_candidate"] is None and pred["genre_codex"] is None
    assert pred["category_scores_codex"] == [0.1] * 9  # scores stay
    html = render_work(environment(), new, None, CTX)
    assert "Rolling layer" in html and "Machine prediction (withheld)" in html
    assert f"Frozen release {version}." in render_work(environment(), old, None, CTX)
    # a human_validation row that passes metaresearch for this version under a locked protocol, as
    # validation_report would append it
    with storage.connect() as con:
        con.execute(
            "INSERT INTO audit_protocols VALUES ('protocol-000000000001', 'x', ?, ?, 'consensus', ['metaresearch'], "
            "'v1', 'y', '{}')",
            [dt.datetime(2026, 11, 30), VERSION],
        )
        con.execute(
            "INSERT INTO human_validation VALUES ('protocol-000000000001', ?, 'metaresearch', true, 0.9, 0.85, 0.8, "
            "0.75, 40, 300, 'passed', 'run-1', ?)",
            [VERSION, dt.datetime(2026, 12, 1)],
        )
    assert run(storage).success
    pred = records(storage)[NEW_ID]["prediction"]
    assert pred["candidate_categories"] == ["metaresearch"] and pred["consensus_categories"] == ["metaresearch"]
    assert pred["about_ca_topic_candidate"] is None  # that head has not passed
    assert records(storage)[NEW_ID]["human_validation"][0]["status"] == "human_validated:protocol-000000000001"
    # a newer failing row of that protocol withdraws it again
    with storage.connect() as con:
        con.execute(
            "INSERT INTO human_validation VALUES ('protocol-000000000001', ?, 'metaresearch', false, 0.7, 0.6, 0.8, "
            "0.75, 40, 300, 'precision lower bound below 0.80', 'run-2', ?)",
            [VERSION, dt.datetime(2026, 12, 2)],
        )
    assert run(storage).success
    assert records(storage)[NEW_ID]["prediction"]["candidate_categories"] == []


def test_rolling_record_with_a_category_that_has_not_passed_is_a_violation():
    pred = prediction_row(NEW_ID) | {"candidate_categories": ["sts"]}
    pred |= {f"{t}_{m}": None for t in ("about_ca_system", "about_ca_topic") for m in ("candidate", "consensus")}
    record = {"id": NEW_ID, "layer": ROLLING, "prediction": pred}
    assert rolling_violations(record, frozenset()) == [
        f"{NEW_ID}: rolling layer: classifier category 'sts' of {VERSION} shown, but that head has not passed human "
        "validation (human_validation has no passing row); re-materialize work_records"
    ]
    assert rolling_violations(record, frozenset({(VERSION, "sts")})) == []
    assert rolling_violations({**record, "layer": "2026.1"}, frozenset()) == []


def test_records_frozen_by_a_release_carry_its_version_and_a_rolling_work_its_withheld_categories(
    tmp_path, openalex_dir
):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    frame = site_world(storage, openalex_dir, n=12)

    def frozen(version: str) -> list[str]:
        return (storage.root / "releases" / version / "records.jsonl").read_text().splitlines()

    assert run(storage, cut=True, release_version="test-1").success
    assert {json.loads(line)["layer"] for line in frozen("test-1")} == {"test-1"}
    add_work(storage, frame)
    assert run(storage).success  # the new work is in the rolling layer: its classifier categories withheld
    rolling = records(storage)[NEW_ID]
    assert rolling["layer"] == ROLLING and rolling["prediction"]["candidate_categories"] == []
    assert run(storage, cut=True, release_version="test-2").success
    lines = frozen("test-2")
    assert {json.loads(line)["layer"] for line in lines} == {"test-2"} and len(lines) == 13
    pred = next(json.loads(line) for line in lines if json.loads(line)["id"] == NEW_ID)["prediction"]
    assert pred["candidate_categories"] == ["metaresearch"] and pred["consensus_categories"] == ["metaresearch"]
    assert pred["about_ca_topic_candidate"] is True and pred["genre_candidate"] == "empirical"
    assert pred["genre_codex"] == "empirical"
    # the frozen records are, byte for byte, the records work_records writes once test-2 is registered
    assert run(storage).success
    assert lines == [
        r["record_json"] for r in sorted(storage.read_table("work_records").to_pylist(), key=lambda r: r["id"])
    ]


def test_a_tampered_bundle_fails_the_blocking_check(tmp_path, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=12)
    cut = run(storage, cut=True, release_version="2026.1")
    assert cut.success and meta(cut)["release_version"] == "2026.1"
    folder = storage.root / "releases" / "2026.1"
    with (folder / "records.jsonl").open("a") as fh:
        fh.write("{}\n")
    (folder / "extra.txt").write_text("x")
    result = run(storage)
    [evaluation] = [e for e in result.get_asset_check_evaluations() if e.check_name == "release_matches_its_hashes"]
    assert not evaluation.passed
    problems = evaluation.metadata["problems"].value
    assert any("records.jsonl: SHA-256 or size differs" in p for p in problems)
    assert any("extra.txt is not listed" in p for p in problems)


def test_the_served_site_names_the_release_in_its_footer(world):
    """After a cut, site_database (downstream of release) serves a release database whose footer names the frozen
    release, in English and French; a work page of the release names it too."""
    from starlette.testclient import TestClient

    from metacan_pipeline.site.assets import site_database
    from metacan_pipeline.site.web.app import create_app

    storage, frame, first, _, _ = world
    version = meta(first)["release_version"]
    built = dg.materialize(
        [work_records, records_may_ship, release, release_matches_its_hashes, site_database],
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert built.success
    with TestClient(create_app(storage.root, rate_limit="off")) as client:
        home = client.get("/")
        assert home.status_code == 200 and f"frozen release {version}" in home.text
        assert f"version figée {version}" in client.get("/fr/").text
        page = client.get(f"/works/{VERSION}/{frame[2]['id']}.html")
        assert page.status_code == 200 and f"Frozen release {version}." in page.text


def test_metacan_release_cuts_or_names_the_release_from_the_command_line(world, monkeypatch):
    from typer.testing import CliRunner

    from metacan_pipeline.cli import app

    storage, _, first, _, _ = world
    monkeypatch.setenv("DAGSTER_HOME", str(storage.root / "dagster_home"))
    if NEW_ID not in {r["id"] for r in storage.read_table("frame").to_pylist()}:  # whatever ran before in the module
        add_work(storage, storage.read_table("frame").to_pylist())
    assert run(storage).success  # the records of the changed world: a cut now freezes new content
    out = CliRunner().invoke(app, ["release", "--data-dir", str(storage.root), "--author", "MetaCan research group"])
    assert out.exit_code == 0, out.output
    # a new version, the old one kept; one line, not the run's Dagster log
    assert out.output.startswith("release ") and " cut: " in out.output and "DEBUG" not in out.output, out.output
    with storage.connect() as con:
        versions = [r[0] for r in con.execute("SELECT release_version FROM releases ORDER BY created_at").fetchall()]
    assert versions[0] == meta(first)["release_version"] and len(versions) >= 2
    again = CliRunner().invoke(app, ["release", "--data-dir", str(storage.root), "--author", "MetaCan research group"])
    assert again.exit_code == 0 and "reused (nothing changed since it was cut)" in again.output
    taken = CliRunner().invoke(app, ["release", "--data-dir", str(storage.root), "--version", "rolling"])
    assert taken.exit_code == 2 and "is not a release version" in taken.output


def test_metacan_release_refuses_a_bad_version_before_any_run(tmp_path):
    from typer.testing import CliRunner

    from metacan_pipeline.cli import app

    for bad in ("../x", "2026 1", "rolling", "x" * 300):
        result = CliRunner().invoke(app, ["release", "--version", bad, "--data-dir", str(tmp_path)])
        assert result.exit_code == 2 and "is not a release version" in result.output, result.output
        assert "Stack Trace" not in result.output and len(result.output) < 400
    assert not (tmp_path / "releases").exists()
