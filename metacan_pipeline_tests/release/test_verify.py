"""A release of a coded study: no coder's name, email or Label Studio identity in any file of the bundle, the
warehouse or the Dagster metadata, and ``metacan verify-release`` recomputing every validation table from the bundle
alone (passing as cut; failing, naming the table and cell, after one answer is altered with its checksums rewritten;
failing, naming the file, when a file is missing).

The study is the 200-work world of :mod:`metacan_pipeline_tests.audit.test_validation` (its builders): two named
coders on the site and, on some works, a Label Studio annotator imported without a coder map (stored as
``labelstudio:<email>``) in place of the second, an adjudicator on the disagreements, every coder writing their name in
their note; ``validation_report`` materialized through Dagster, then a release cut.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from metacan_pipeline.audit.coding.pseudonyms import coder_pseudonym
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.cli import app
from metacan_pipeline.release.bundle import SUMS_FILE, ReleaseError, content_sha256, cut_release, file_entries
from metacan_pipeline.settings import coding_store_path
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.roles import CENSUS, SAMPLE
from metacan_pipeline_tests.audit.test_validation import answer, run, truth, wid, write_world

CODERS = ("alice.tremblay", "bob.nguyen", "carol.okafor")
LS_EMAIL = "ann.lee@example.org"
LS_CODER = "labelstudio:" + LS_EMAIL
#: Every string that identifies a coder: none may leave the coding store.
IDENTITIES = (*CODERS, LS_EMAIL, "ann.lee", "labelstudio:")


def coded(positive: bool, who: str) -> dict:
    return {**answer(positive), "note": f"{who} read the abstract twice"}


@pytest.fixture(scope="module")
def world(tmp_path_factory, openalex_dir):
    """``(storage, folder, result, pid)``: the coded study's data folder, its release bundle and the report's run."""
    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("verify") / "data"))
    write_world(storage, openalex_dir)
    instance = dg.DagsterInstance.ephemeral()
    before = run(storage, instance)
    [m] = [
        m
        for m in before.asset_materializations_for_node("validation_report")
        if m.asset_key.path == ["validation_report"]
    ]
    pid = m.metadata["protocol_id"].value
    sample = [r for r in storage.read_table("audit_sample").to_pylist() if r["protocol_id"] == pid and r["in_sample"]]
    frame = {r["id"]: r for r in storage.read_table("frame").to_pylist()}
    index = {wid(i): i for i in range(200)}
    alice, bob, carol = CODERS
    with CodingStore(coding_store_path(str(storage.root))) as store:
        store.load_tasks(pid, [frame[r["id"]] for r in sample])
        shown = {t["id"]: t["evidence_sha256"] for t in store.tasks(pid)}
        for name in CODERS:
            store.add_coder(name)
        for n, r in enumerate(sorted(sample, key=lambda r: r["id"])):
            i = index[r["id"]]
            store.submit(pid, r["id"], alice, coded(truth(i), alice))
            second = truth(i) != (i % 10 == 3)
            if n % 4 == 0:  # a Label Studio annotator, imported with no coder map
                store.append_imported(
                    pid, r["id"], LS_CODER, coded(second, LS_EMAIL), answer_id=f"ls-{n:032x}",
                    evidence_sha256=shown[r["id"]], submitted_at="2026-01-05T10:00:00Z",
                    source="label_studio:0123456789abcdef",
                    provenance={"completed_by": {"id": 7, "email": LS_EMAIL}, "annotation_id": n},
                )  # fmt: skip
            else:
                store.submit(pid, r["id"], bob, coded(second, bob))
        for d in store.disagreements(pid):
            store.submit(pid, d["id"], carol, coded(truth(index[d["id"]]), carol), role="adjudication")
    after = run(storage, instance)
    labels = [f"direct_labels_{CENSUS}", f"direct_labels_{SAMPLE}"]
    cut = cut_release(storage, labels, "test-1", ["MetaCan research group"], "run-release")
    return {"storage": storage, "folder": cut.folder, "after": after, "pid": pid}


def store_key(storage: MetacanStorage) -> bytes:
    with CodingStore(coding_store_path(str(storage.root))) as store:
        return store.pseudonym_key()


def strings(value) -> list[str]:
    """Every string inside a Parquet cell (lists and structs opened)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings(v)]
    return []


def identities_in_parquet(table: pa.Table) -> set[str]:
    found = set()
    for name in table.column_names:
        for cell in table.column(name).to_pylist():
            for s in strings(cell):
                found |= {i for i in IDENTITIES if i.lower() in s.lower()}
    return found


def test_no_coder_identity_leaves_the_coding_store(world):
    folder, storage = world["folder"], world["storage"]
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        raw = path.read_bytes().lower()
        assert [i for i in IDENTITIES if i.lower().encode() in raw] == [], path
        if path.suffix == ".parquet":  # Parquet compresses: its decompressed strings too
            assert identities_in_parquet(pq.read_table(path)) == set(), path
    # the warehouse tables the release freezes, and the report's Dagster metadata
    for name in ("human_codes", "validation_agreement", "validation_gate", "validation_error_rates"):
        assert identities_in_parquet(storage.read_table(name)) == set(), name
    for m in world["after"].asset_materializations_for_node("validation_report"):
        text = json.dumps({k: str(v.value) for k, v in m.metadata.items()}).lower()
        assert [i for i in IDENTITIES if i.lower() in text] == [], m.asset_key
    # the coders are there, under their pseudonyms, and every answer a human code rests on is shipped
    assert any(p.name == "study_answers.parquet" for p in files)
    readme = (folder / "README.md").read_text()
    assert "| `tables/study_answers.parquet` | every answer (role code) and adjudication" in readme
    assert "| `tables/human_codes.parquet` |" in readme and "metacan verify-release" in readme
    answers = pq.read_table(folder / "tables" / "study_answers.parquet").to_pylist()
    pid, key = world["pid"], store_key(storage)
    pseudonyms = {coder_pseudonym(key, pid, c) for c in (*CODERS, LS_CODER)}
    assert {a["coder"] for a in answers} == pseudonyms and len(pseudonyms) == 4
    assert {a["role"] for a in answers if a["coder"] == coder_pseudonym(key, pid, "carol.okafor")} == {"adjudication"}
    codes = pq.read_table(folder / "tables" / "human_codes.parquet").to_pylist()
    shipped = {a["answer_id"] for a in answers}
    assert codes and all(set(c["answer_ids"]) <= shipped and set(c["coders"]) <= pseudonyms for c in codes)
    assert any(coder_pseudonym(key, pid, LS_CODER) in c["coders"] for c in codes)


def verify_release(folder: Path):
    return CliRunner().invoke(app, ["verify-release", str(folder)])


def test_verify_release_recomputes_every_validation_table_from_the_bundle(world, tmp_path):
    """The bundle copied where no data folder is: every validation table recomputes cell for cell."""
    copy = tmp_path / "bundle"
    shutil.copytree(world["folder"], copy)
    result = verify_release(copy)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("verified 7 tables, ")
    cells = int(result.output.split("tables, ")[1].split(" cells")[0])
    assert cells > 1000


def rewrite_checksums(folder: Path) -> None:
    """Make ``release.json`` (files, counts of the tables still there, content hash) and ``SHA256SUMS`` match the
    files as they are now (what a thorough forger would do)."""
    manifest = json.loads((folder / "release.json").read_text())
    tables = folder / "tables"
    manifest["counts"] = {
        name: pq.ParquetFile(tables / f"{name}.parquet").metadata.num_rows if name != "records" else n
        for name, n in manifest["counts"].items()
        if name == "records" or (tables / f"{name}.parquet").is_file()
    }
    manifest["content_sha256"] = content_sha256(folder)
    manifest["files"] = file_entries(folder)
    (folder / "release.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    sums = "".join(f"{e['sha256']}  {e['path']}\n" for e in file_entries(folder, skip=(SUMS_FILE,)))
    (folder / SUMS_FILE).write_text(sums)


def test_an_altered_answer_fails_verify_release_naming_the_table_and_cell(world, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(world["folder"], copy)
    path = copy / "tables" / "study_answers.parquet"
    table = pq.read_table(path)
    rows = table.to_pylist()
    # one coder's answer on a work both coders called meta-research now says it is not
    agreed = {a["id"] for a in rows if a["role"] == "code" and a["categories"] == ["metaresearch"]}
    target = next(i for i, a in enumerate(rows) if a["role"] == "code" and a["id"] in sorted(agreed)[:1])
    rows[target]["categories"], rows[target]["domain"] = [], None
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path, compression="zstd")
    rewrite_checksums(copy)
    result = verify_release(copy)
    assert result.exit_code == 1, result.output
    assert "differs: human_codes [" in result.output and "differs: validation_error_rates [" in result.output
    assert "published" in result.output and "recomputed" in result.output


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "records.jsonl").read_text(encoding="utf-8").splitlines()]


def _write_records(folder: Path, records: list[dict]) -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    (folder / "records.jsonl").write_text(text, encoding="utf-8")


def test_verify_release_recomputes_every_records_release_layer_from_the_bundle(world, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(world["folder"], copy)
    records = _records(copy)
    codes = {(c["protocol_id"], c["id"]) for c in pq.read_table(copy / "tables" / "human_codes.parquet").to_pylist()}
    verified = {r["id"] for r in records if r["release_layer"] == "human_verified"}
    # every human-verified work is a work the study's final codes cover, and every coded work is human-verified
    assert verified and verified == {wid for pid, wid in codes if pid == world["pid"]}
    assert {r["release_layer"] for r in records} - {"human_verified"}  # the others are in other layers
    ok = verify_release(copy)
    assert ok.exit_code == 0 and f"and the release layer of {len(records)} records" in ok.output, ok.output
    first, second = sorted(verified)[:2]
    for r in records:
        if r["id"] == first:  # a layer the rule does not give
            r["release_layer"] = "high_precision"
        elif r["id"] == second:  # a human code the bundle's codes do not hold
            r["human_code"]["protocol_id"] = "protocol-ffffffffffff"
    _write_records(copy, records)
    rewrite_checksums(copy)
    result = verify_release(copy)
    assert result.exit_code == 1, result.output
    assert (
        f"differs: release_layer [id={first}] release_layer: published 'high_precision', recomputed 'human_verified'"
        in result.output
    )
    assert f"differs: release_layer [id={second}] human_code: published 'protocol-ffffffffffff'" in result.output


def test_a_missing_or_altered_file_fails_verify_release_naming_the_file(world, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(world["folder"], copy)
    (copy / "tables" / "study_decisions.parquet").unlink()
    result = verify_release(copy)
    assert result.exit_code == 1 and "study_decisions.parquet is listed in release.json but missing" in result.output
    rewrite_checksums(copy)  # the checksums made to match the bundle without it: the recomputation names it
    result = verify_release(copy)
    assert result.exit_code == 1 and "study_decisions.parquet is missing" in result.output, result.output
    other = tmp_path / "altered"
    shutil.copytree(world["folder"], other)
    with (other / "tables" / "study_frame_means.parquet").open("ab") as fh:
        fh.write(b"\0")
    result = verify_release(other)
    assert result.exit_code == 1 and "study_frame_means.parquet: SHA-256 or size differs" in result.output


def test_a_pseudonym_is_stable_per_coder_and_study_and_keyed_by_the_store(world, tmp_path):
    """The same coder has the same pseudonym on every read of the store, another in another study, and another under
    another store's key; nothing in the pseudonym is a hash of the name alone."""
    storage, pid = world["storage"], world["pid"]
    key = store_key(storage)
    with CodingStore(coding_store_path(str(storage.root))) as store:
        first = {a["answer_id"]: a["coder"] for a in store.released_answers(pid)}
        assert store.pseudonym_key() == key
    with CodingStore(coding_store_path(str(storage.root))) as store:
        assert {a["answer_id"]: a["coder"] for a in store.released_answers(pid)} == first
    with CodingStore(tmp_path / "other.sqlite") as other:
        assert other.pseudonym_key() != key
    assert coder_pseudonym(key, pid, "alice.tremblay") != coder_pseudonym(key, "another-protocol", "alice.tremblay")
    assert coder_pseudonym(key, pid, "alice.tremblay") != "coder-" + hashlib.sha256(b"alice.tremblay").hexdigest()[:10]


def test_a_cut_is_refused_when_the_report_no_longer_recomputes_from_the_study(world, tmp_path):
    """An answer appended after validation_report ran: the frozen tables would not rest on the study shipped, so no
    release is cut (and nothing is left behind) until the report runs again."""
    shutil.copytree(world["storage"].root, tmp_path / "data")
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    before = sorted(p.name for p in (storage.root / "releases").iterdir())
    with CodingStore(coding_store_path(str(storage.root))) as store:
        work = next(a for a in store.latest_answers(world["pid"]) if a["coder"] == "alice.tremblay")
        store.submit(world["pid"], work["id"], "alice.tremblay", coded(not work["categories"], "alice.tremblay"))
    labels = [f"direct_labels_{CENSUS}", f"direct_labels_{SAMPLE}"]
    with pytest.raises(ReleaseError, match="do not recompute from the study.*materialize validation_report"):
        cut_release(storage, labels, "test-2", ["MetaCan research group"], "run-release-2")
    assert sorted(p.name for p in (storage.root / "releases").iterdir()) == before


def test_a_cut_is_refused_when_the_coding_store_behind_the_validation_tables_is_missing(world, tmp_path):
    """A data folder moved without ``audit/``: opening the store would create an empty one and the release would ship
    an empty study behind the validation tables; the cut is refused, naming the file, and creates nothing."""
    shutil.copytree(world["storage"].root, tmp_path / "data")
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    before = sorted(p.name for p in (storage.root / "releases").iterdir())
    path = coding_store_path(str(storage.root))
    path.unlink()
    labels = [f"direct_labels_{CENSUS}", f"direct_labels_{SAMPLE}"]
    with pytest.raises(ReleaseError, match=rf"the coding store {re.escape(str(path))} is missing.*restore it"):
        cut_release(storage, labels, "test-3", ["MetaCan research group"], "run-release-3")
    assert not path.exists() and sorted(p.name for p in (storage.root / "releases").iterdir()) == before


def _forge(folder: Path, name: str, change) -> None:
    """Rewrite the bundle table ``name`` as ``change(rows)`` returns it, then the checksums to match."""
    path = folder / "tables" / f"{name}.parquet"
    table = pq.read_table(path)
    pq.write_table(pa.Table.from_pylist(change(table.to_pylist()), schema=table.schema), path)
    rewrite_checksums(folder)


def test_forged_results_fail_verify_release_even_with_matching_checksums(world, tmp_path):
    """A duplicated gate row claiming a pass, a forged human_validation, answers outside the coding rules, a bundle
    whose study was removed but whose gate says passed: each fails, naming what, though every checksum matches."""
    cases = {
        "dup": ("validation_gate", lambda rows: [{**rows[0], "passed": not rows[0]["passed"]}, *rows]),
        "gate": ("human_validation", lambda rows: [{**r, "passed": not r["passed"]} for r in rows]),
        "vocab": ("study_answers", lambda rows: [{**r, "domain": "astrology"} for r in rows]),
    }
    said = {}
    for case, (name, change) in cases.items():
        copy = tmp_path / case
        shutil.copytree(world["folder"], copy)
        _forge(copy, name, change)
        result = verify_release(copy)
        assert result.exit_code == 1, (case, result.output)
        said[case] = result.output
    assert "validation_gate [" in said["dup"] and "published twice" in said["dup"]
    assert "differs: human_validation [" in said["gate"] and "] passed: published " in said["gate"], said["gate"]
    assert "breaks a rule" in said["vocab"] and "astrology" in said["vocab"] and "Traceback" not in said["vocab"]
    gone = tmp_path / "gone"
    shutil.copytree(world["folder"], gone)
    for p in (gone / "tables").glob("*.parquet"):
        if p.name.startswith(("study_", "validation_", "human_codes")):
            p.unlink()
    _forge(gone, "human_validation", lambda rows: [{**r, "passed": True} for r in rows])
    result = verify_release(gone)
    assert result.exit_code == 1 and "no study in the bundle to recompute it from" in result.output, result.output


def test_links_counts_and_a_malformed_manifest_are_named_not_a_traceback(world, tmp_path):
    linked = tmp_path / "linked"
    shutil.copytree(world["folder"], linked)
    outside = tmp_path / "frame_elsewhere.parquet"
    (linked / "tables" / "frame.parquet").rename(outside)
    (linked / "tables" / "frame.parquet").symlink_to(outside)
    result = verify_release(linked)
    assert result.exit_code == 1 and "frame.parquet is a symbolic link" in result.output, result.output
    cut = tmp_path / "cut"
    shutil.copytree(world["folder"], cut)
    frame = pq.read_table(cut / "tables" / "frame.parquet")
    pq.write_table(frame.slice(0, 10), cut / "tables" / "frame.parquet")
    manifest = json.loads((cut / "release.json").read_text())
    manifest["files"] = file_entries(cut)  # files and sums rewritten, counts left as cut
    (cut / "release.json").write_text(json.dumps(manifest))
    (cut / SUMS_FILE).write_text("".join(f"{e['sha256']}  {e['path']}\n" for e in file_entries(cut, skip=(SUMS_FILE,))))
    result = verify_release(cut)
    assert (
        result.exit_code == 1 and f"frame.parquet holds 10 rows; release.json counts {frame.num_rows}" in result.output
    )
    for bad in ("[1, 2]", '{"files": ["a", "b"]}'):
        odd = tmp_path / f"odd{len(bad)}"
        shutil.copytree(world["folder"], odd)
        (odd / "release.json").write_text(bad)
        result = verify_release(odd)
        assert result.exit_code == 1 and "is not a release manifest" in result.output, result.output
        assert "Traceback" not in result.output


def test_the_releases_folder_itself_is_named_as_a_folder_of_bundles(world):
    result = verify_release(world["folder"].parent)
    assert result.exit_code == 2 and "holds release bundles, not one: give one of them" in result.output
