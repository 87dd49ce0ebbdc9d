"""Fault handling of the served site, each fault made for real on a copy of a real release: an unexpected error under
/api/, a truncated, damaged or locked release database, a corrupt saved-cohorts file, a too-long release id, a rate
limit that would block everything, and exports over a client's bucket."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from metacan_pipeline.cli import app as cli
from metacan_pipeline.site.build.release import (
    ReleaseUnavailable,
    current_release_id,
    database_path,
    index_path,
    manifest_path,
    releases_dir,
    verified_path,
)
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.site.web.saved import QueryStoreUnavailable
from metacan_pipeline_tests.builders.common import REPO
from metacan_pipeline_tests.builders.site import build_site

ORIGIN = {"Origin": "https://example.org"}


@pytest.fixture()
def copy(tmp_path, site_release):
    """A data folder holding a copy of the module's release (its files may be damaged at will)."""
    data = tmp_path / "data"
    shutil.copytree(releases_dir(site_release[0].root), releases_dir(data))
    return data


def _serve(data) -> str:
    """What `metacan serve` prints when it refuses to start (it must exit 1 without a traceback)."""
    result = CliRunner().invoke(cli, ["serve", "--data-dir", str(data)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    return result.output


def test_an_unexpected_error_under_the_api_is_json_readable_cross_origin(copy):
    rid = current_release_id(copy)
    with TestClient(create_app(copy, rate_limit="off"), raise_server_exceptions=False) as c:
        assert c.get("/api/v1/works", params={"q": "cardiology"}).status_code == 200
        index_path(copy, rid).unlink()  # the full-text index vanishes under the running site
        r = c.get("/api/v1/works", params={"q": "cardiology"}, headers=ORIGIN)
        assert r.status_code == 500 and r.headers["content-type"] == "application/json"
        assert r.json() == {
            "error": {
                "status": 500,
                "message": "internal error while answering /api/v1/works: the server logged it; try again, and "
                "report it if it persists.",
            }
        }
        assert r.headers["access-control-allow-origin"] == "*" and r.headers["cache-control"] == "no-store"
        assert c.get("/api/v1/count", params={"language": "fr"}).status_code == 200  # the rest still answers


def test_a_truncated_release_database_is_a_start_up_error_naming_the_file_and_the_asset(copy):
    rid = current_release_id(copy)
    db = database_path(copy, rid)
    built = db.stat().st_size
    with open(db, "r+b") as f:
        f.truncate(built // 2)
    with pytest.raises(ReleaseUnavailable) as info:
        create_app(copy)
    assert str(info.value) == (
        f"{db} is {built // 2:,} bytes, but the build of {rid} wrote {built:,} bytes (truncated, or another file put "
        f"in its place?); materialize the asset 'site_database' again."
    )
    assert f"{rid}.duckdb is {built // 2:,} bytes" in _serve(copy)


def test_bytes_overwritten_in_place_are_a_start_up_error_and_a_file_is_hashed_again_only_when_it_changed(copy):
    rid = current_release_id(copy)
    db, index = database_path(copy, rid), index_path(copy, rid)
    manifest = json.loads(manifest_path(copy, rid).read_text())
    assert manifest["database_sha256"] == hashlib.sha256(db.read_bytes()).hexdigest()
    assert manifest["fts_index_sha256"] == hashlib.sha256(index.read_bytes()).hexdigest()
    verified_path(copy, rid).unlink(missing_ok=True)
    with TestClient(create_app(copy, rate_limit="off")) as c:
        assert c.get("/api/v1/count").json()["count"] == 60
    stamps = json.loads(verified_path(copy, rid).read_text())
    for path, key in ((db, "database_sha256"), (index, "fts_index_sha256")):
        assert stamps[path.name] == [path.stat().st_size, path.stat().st_mtime_ns, manifest[key]]
    size = db.stat().st_size
    block = min(200_000, size // 4)
    with open(db, "r+b") as f:  # near the end, the size unchanged
        f.seek(size - block - 4096)
        f.write(b"\xa5" * block)
    assert db.stat().st_size == size
    with pytest.raises(ReleaseUnavailable) as info:
        create_app(copy)
    message = str(info.value)
    assert message.startswith(f"{db} has SHA-256 ") and f"but the build of {rid} wrote" in message
    assert message.endswith("(its bytes were overwritten or damaged); materialize the asset 'site_database' again.")
    assert "overwritten or damaged" in _serve(copy)


def test_a_table_whose_row_count_is_not_the_builds_is_a_start_up_error(copy):
    rid = current_release_id(copy)
    manifest = json.loads(manifest_path(copy, rid).read_text())
    assert (
        manifest["row_counts"]["works"] == 60 and manifest["database_bytes"] == database_path(copy, rid).stat().st_size
    )
    manifest["row_counts"]["work_labels"] += 1
    manifest_path(copy, rid).write_text(json.dumps(manifest))
    want = manifest["row_counts"]["work_labels"]
    with pytest.raises(
        ReleaseUnavailable, match=rf"table work_labels holds {want - 1} rows, but the build wrote {want}"
    ):
        create_app(copy)
    manifest_path(copy, rid).unlink()
    with pytest.raises(ReleaseUnavailable, match=rf"{rid}\.manifest\.json is missing.*'site_database' again"):
        create_app(copy)


def test_a_damaged_release_is_built_again_not_reused(site_release):
    storage = site_release[0]
    rid = current_release_id(storage.root)
    db = database_path(storage.root, rid)
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 2)
    result = build_site(storage)
    assert result.success
    metadata = result.asset_materializations_for_node("site_database")[0].metadata
    assert metadata["reused"].value is False and metadata["release_id"].value == rid
    with TestClient(create_app(storage.root, rate_limit="off")) as c:  # whole again
        assert c.get("/api/v1/count").json()["count"] == 60


def test_a_release_whose_manifest_records_no_checksum_is_built_again_with_them(site_release):
    storage = site_release[0]
    rid = current_release_id(storage.root)
    manifest = json.loads(manifest_path(storage.root, rid).read_text())
    old = {k: v for k, v in manifest.items() if not k.endswith("_sha256")}
    manifest_path(storage.root, rid).write_text(json.dumps(old))  # as a build before checksums wrote it
    result = build_site(storage)
    assert result.success
    assert result.asset_materializations_for_node("site_database")[0].metadata["reused"].value is False
    rebuilt = json.loads(manifest_path(storage.root, rid).read_text())
    assert rebuilt["database_sha256"] == hashlib.sha256(database_path(storage.root, rid).read_bytes()).hexdigest()


def test_a_release_held_open_by_a_writing_process_is_said_to_be_in_use(copy):
    db = database_path(copy, current_release_id(copy))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys; c = duckdb.connect({str(db)!r}); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"held\n"
        with pytest.raises(ReleaseUnavailable) as info:
            create_app(copy)
        message = str(info.value)
        assert message.startswith(f"{db} is in use by another process (") and f"(PID {holder.pid})" in message
        assert "delete it" not in message and "Wait for that process" in message
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    with TestClient(create_app(copy, rate_limit="off")) as c:  # once it let go, the site starts
        assert c.get("/api/v1/").status_code == 200


def test_a_corrupt_saved_cohorts_file_is_a_clear_start_up_error(copy):
    store = copy / "site" / "queries.sqlite"
    store.write_bytes(b"these are not the cohorts you saved" * 200)
    with pytest.raises(QueryStoreUnavailable) as info:
        create_app(copy)
    assert str(info.value).startswith(f"{store} is not a readable store of saved cohorts (")
    assert "restore it from a backup, or move it aside" in str(info.value)
    assert "queries.sqlite is not a readable store of saved cohorts" in _serve(copy)
    store.unlink()
    import sqlite3

    con = sqlite3.connect(store)
    con.execute("CREATE TABLE saved_queries (query_hash TEXT PRIMARY KEY, body TEXT)")  # another shape
    con.close()
    with pytest.raises(QueryStoreUnavailable, match="no such column"):
        create_app(copy)


def test_a_too_long_release_id_is_refused_without_being_echoed(copy):
    pointer = releases_dir(copy) / "current.json"
    long_id = "release-" + "a" * 5000
    pointer.write_text(json.dumps({"release_id": long_id}))
    with pytest.raises(ReleaseUnavailable) as info:
        create_app(copy)
    message = str(info.value)
    assert f"names 'release-{'a' * 32}'... (5,008 characters), which is not a release id" in message
    assert len(message) < 400 and "'site_database'" in message
    output = _serve(copy)
    assert "5,008 characters" in output and "a" * 100 not in output


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("120/m burst 0", "METACAN_SITE_RATE_LIMIT='120/m burst 0' allows bursts of 0 requests, so it would refuse"),
        ("twice a day", "METACAN_SITE_RATE_LIMIT='twice a day' is not a rate: write '<n>/<s|m|h|d>'"),
        (
            "9" * 10_000 + "/m",
            "METACAN_SITE_RATE_LIMIT='9999999999999999999999999999999999999999'... (10,002 characters)",
        ),
    ],
)
def test_a_rate_limit_that_is_not_a_usable_rate_is_refused_naming_the_variable(copy, monkeypatch, value, why):
    monkeypatch.setenv("METACAN_SITE_RATE_LIMIT", value)
    with pytest.raises(ValueError) as info:
        create_app(copy)
    assert str(info.value).startswith(why) and len(str(info.value)) < 300
    output = _serve(copy)
    assert why in output.replace("\n", "") or why[:60] in output
    assert "9" * 100 not in output


def test_exports_take_from_the_same_bucket_as_the_api(copy):
    with TestClient(create_app(copy, rate_limit="1/m burst 2")) as c:
        assert [c.get("/export.csv").status_code, c.get("/export.jsonl").status_code] == [200, 200]
        r = c.get("/export.csv")
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
        assert r.headers["content-type"].startswith("text/html") and r.headers["cache-control"] == "no-store"
        assert (
            "Too many requests from testclient: exports and the API answer 1 requests per 60 s per client, in bursts "
            f"of at most 2; retry in {r.headers['retry-after']} s." in r.text
        )
        assert c.get("/api/v1/count").status_code == 429  # the bucket is the API's
        assert c.get("/").status_code == 200  # pages are not limited
    for fmt in ("parquet", "ris", "bib"):  # every export format, not only the first two
        with TestClient(create_app(copy, rate_limit="1/m burst 1")) as c:
            assert [c.get(f"/export.{fmt}").status_code, c.get(f"/export.{fmt}").status_code] == [200, 429]
    with TestClient(create_app(copy, rate_limit="off")) as c:
        assert all(c.get("/export.csv").status_code == 200 for _ in range(5))


def test_a_data_folder_the_server_cannot_write_is_a_start_up_error(copy):
    """Mounted read-only (a bind mount in a mount namespace of its own: as root, file modes do not stop a write),
    the saved-cohorts store refuses at start-up, naming the file, instead of answering every cohort with a 500."""
    script = (
        "from metacan_pipeline.site.web.app import create_app\n"
        "from metacan_pipeline.site.web.saved import QueryStoreUnavailable\n"
        f"try:\n    create_app({str(copy)!r}, rate_limit='off')\n    print('STARTED')\n"
        "except QueryStoreUnavailable as exc:\n    print('REFUSED', exc)\n"
    )
    site = copy / "site"
    shell = (
        f"mount --bind {site} {site} && mount -o remount,ro,bind {site} && "
        f'PYTHONPATH={REPO} {sys.executable} -c "$PROBE"'
    )
    try:
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", shell], capture_output=True, text=True, env={**os.environ, "PROBE": script}
        )
    except FileNotFoundError:
        pytest.skip("no unshare on this machine")
    if "mount:" in done.stderr or "unshare:" in done.stderr:
        pytest.skip(f"no read-only bind mount here: {done.stderr.strip()[:200]}")
    assert done.stdout.startswith("REFUSED cannot open the saved cohorts file"), done.stdout + done.stderr
    assert "Serve a data folder this process may write to" in done.stdout  # no store yet: it cannot be created
    with TestClient(create_app(copy, rate_limit="off")) as c:  # the store exists now, and holds a cohort
        assert c.get("/api/v1/count").status_code == 200
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", shell], capture_output=True, text=True, env={**os.environ, "PROBE": script}
    )
    assert f"REFUSED {site / 'queries.sqlite'} cannot be written (attempt to write a readonly database)" in done.stdout


def test_an_unexpected_error_on_a_page_is_the_sites_error_page_in_its_language(copy, monkeypatch, caplog):
    from metacan_pipeline.site.web.app import Site

    def broken(self, *args, **kwargs):
        raise RuntimeError("a fault inside the release database")

    monkeypatch.setattr(Site, "summary", broken)
    with TestClient(create_app(copy, rate_limit="off"), raise_server_exceptions=False) as c:
        for path, words in (("/", "Something went wrong on the server"), ("/fr/", "Une erreur est survenue")):
            r = c.get(path)
            assert r.status_code == 500 and r.headers["content-type"].startswith("text/html"), path
            assert words in r.text and "RuntimeError" not in r.text and "fault inside" not in r.text
        api = c.get("/api/v1/count")
        assert api.status_code == 500 and api.json()["error"]  # the API keeps answering JSON
