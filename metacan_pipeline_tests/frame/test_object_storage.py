"""Tests of the frame built from an OpenAlex snapshot in object storage (metacan_pipeline/openalex/remote.py).

A real S3-compatible server runs on loopback (moto's server mode), and the test uploads the shared snapshot sample
(../shared/data/openalex/...snapshot_sample: works, funders, sources, institutions parts and the works manifest)
with the four real Canadian funder files beside it. The same folder is built from its local copy and from its
``s3://`` URL through the real Dagster assets; a fault-injecting TCP proxy on loopback cuts the server's answers
to test reads dropped mid-part."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import socket
import threading
import urllib.parse
from pathlib import Path

import boto3
import dagster as dg
import duckdb
import pyarrow.parquet as pq
import pytest
from moto.server import ThreadedMotoServer

from metacan_pipeline.definitions import all_partitions_run_tags, build_resources, defs
from metacan_pipeline.frame.cluster import build_parts
from metacan_pipeline.frame.entities import EntityLists
from metacan_pipeline.frame.parts import part_dir, part_jobs, split_finished
from metacan_pipeline.openalex.folders import input_folders, locate
from metacan_pipeline.openalex.inventory import take_inventory
from metacan_pipeline.openalex.lookup import load_abstracts
from metacan_pipeline.openalex.remote import storage_options
from metacan_pipeline.settings import split_dirs
from metacan_pipeline_tests.builders.common import OPENALEX, node_metadata, root_error
from metacan_pipeline_tests.builders.openalex import copy_funders, is_canadian, write_part

SAMPLE = OPENALEX / "max-planck-innovation-competition__go-openalex__snapshot_sample"
BUCKET = "metacan-snapshot"
PART = "data/works/updated_date=2023-05-16/part_000.gz"
KEY_ID = "AKIAMETACANTESTKEY01"
SECRET = "metacan-test-secret-never-logged-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CuttingProxy:
    """A TCP proxy on loopback in front of the S3 server: an answer to a GET of ``key`` is cut after its headers
    and 512 bytes of its body (the connection closed, as a network drop does), ``cuts`` times (None: always)."""

    def __init__(self, upstream: int, key: str, cuts: int | None = None) -> None:
        self.upstream, self.cuts, self.cut = upstream, cuts, 0
        self.marks = (f"/{BUCKET}/{urllib.parse.quote(key, safe='/~')}".encode(), f"/{BUCKET}/{key}".encode())
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _take(self, data: bytes) -> bool:
        if not data.startswith(b"GET ") or not any(data.split(b" ", 2)[1].startswith(m) for m in self.marks):
            return False
        with self.lock:
            if self.cuts is not None and self.cut >= self.cuts:
                return False
            self.cut += 1
            return True

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        doomed = threading.Event()

        def close() -> None:
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

        def up() -> None:
            try:
                while data := client.recv(1 << 16):
                    if self._take(data):
                        doomed.set()
                    upstream.sendall(data)
            except OSError:
                pass

        threading.Thread(target=up, daemon=True).start()
        buf = b""
        try:
            while data := upstream.recv(1 << 16):
                if not doomed.is_set():
                    client.sendall(data)
                    continue
                buf += data
                if b"\r\n\r\n" in buf and len(buf) > buf.index(b"\r\n\r\n") + 4 + 512:
                    client.sendall(buf[: buf.index(b"\r\n\r\n") + 4 + 512])
                    break
        except OSError:
            pass
        close()

    def stop(self) -> None:
        self.server.close()


@pytest.fixture(scope="module")
def sample(tmp_path_factory, real_works) -> Path:
    """The snapshot sample with the four Canadian funder files and one more works part of real records, 30 of them
    Canadian (the sample's own part holds none), listed in the sample's manifest, as a local folder."""
    root = tmp_path_factory.mktemp("local") / "snapshot"
    shutil.copytree(SAMPLE, root)
    copy_funders(OPENALEX, root)
    ca = sorted(k for k, w in real_works.items() if is_canadian(w))[:30]
    other = sorted(k for k, w in real_works.items() if not is_canadian(w))[:20]
    rel = write_part(root, "2025-01-01", 0, [real_works[k] for k in sorted(ca + other)])
    manifest = json.loads((root / "data/works/manifest").read_text())
    manifest["entries"].append(
        {"url": f"s3://openalex/{rel}", "meta": {"content_length": (root / rel).stat().st_size, "record_count": 50}}
    )
    (root / "data/works/manifest").write_text(json.dumps(manifest))
    return root


@pytest.fixture(scope="module")
def s3(sample):
    """A moto S3 server on loopback holding ``sample`` under ``s3://metacan-snapshot/snapshot/`` (and a copy under
    ``changed/``), with the AWS environment pointing at it; yields ``(port, boto3 client)``."""
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "METACAN_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "METACAN_REMOTE_READ_ATTEMPTS": "2",
        }.items():
            mp.setenv(name, value)
        mp.delenv("METACAN_S3_ANON", raising=False)
        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}")
        client.create_bucket(Bucket=BUCKET)
        for f in sorted(p for p in sample.rglob("*") if p.is_file()):
            for prefix in ("snapshot", "changed"):
                client.upload_file(str(f), BUCKET, f"{prefix}/{f.relative_to(sample).as_posix()}")
        yield port, client
    server.stop()


def _messages(instance: dg.DagsterInstance) -> list[str]:
    return [e.user_message or "" for run in instance.get_runs() for e in instance.all_logs(run.run_id)]


@pytest.fixture(scope="module")
def built(tmp_path_factory, sample, s3):
    """The frame built from the local folder and from its s3:// URL."""
    out = {}
    for name, where in (("local", str(sample)), ("s3", f"s3://{BUCKET}/snapshot")):
        data = tmp_path_factory.mktemp(name)
        instance = dg.DagsterInstance.ephemeral()
        # the bucket is read by the worker pool (2 processes), the local copy in this process: both paths are real
        result = _materialize(instance, build_resources(str(data), where), workers=2 if name == "s3" else 1)
        assert result.success, root_error(result)
        out[name] = (data, instance, result)
    return out


def _materialize(instance: dg.DagsterInstance, resources: dict, workers: int, refresh: bool = True):
    """``frame_refresh`` then ``frame_build`` over every partition, as ``materialize_in_process`` runs them, with
    ``workers`` part-build processes."""
    if refresh:
        assert defs.resolve_job_def("frame_refresh").execute_in_process(instance=instance, resources=resources).success
    return defs.resolve_job_def("frame_build").execute_in_process(
        instance=instance,
        resources=resources,
        raise_on_error=False,
        tags=all_partitions_run_tags(instance),
        run_config={"ops": {"frame_parts": {"config": {"workers": workers}}}},
    )


def _table(data: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_the_frame_built_from_s3_equals_the_frame_built_from_the_local_folder(built):
    local, remote = built["local"][0], built["s3"][0]
    everything = "SELECT * EXCLUDE (frame_build_id) FROM frame ORDER BY id"
    frame = _table(local, everything)
    assert len(frame) > 0 and _table(remote, everything) == frame
    routes = "SELECT id, ca_aff, ca_fund, ca_venue, about_ca, source_file, source_locator FROM frame ORDER BY id"
    assert _table(remote, routes) == _table(local, routes)
    build_id = lambda data: _table(data, "SELECT DISTINCT frame_build_id FROM frame")  # noqa: E731
    assert len(build_id(local)) == 1 and build_id(remote) == build_id(local)
    md_local, md_s3 = node_metadata(built["local"][2], "frame"), node_metadata(built["s3"][2], "frame")
    for k in ("works_read", "work_records_read", "admitted_by_route", "quarantined", "parts_done"):
        assert md_s3[k] == md_local[k], k
    assert _table(remote, "SELECT kind, id, list_version FROM canadian_entities ORDER BY ALL") == _table(
        local, "SELECT kind, id, list_version FROM canadian_entities ORDER BY ALL"
    )


def test_an_s3_part_counts_by_size_and_etag_and_holds_the_same_bytes(built, sample):
    manifest = "SELECT source_file, bytes, mtime_ns, etag, sha256, records_read, count_check, build_key FROM frame_build_manifest ORDER BY 1"
    local = {r[0]: r for r in _table(built["local"][0], manifest)}
    remote = {r[0]: r for r in _table(built["s3"][0], manifest)}
    assert set(remote) == set(local) and PART in remote
    for name, r in remote.items():
        loc = local[name]
        assert r[1] == loc[1] == (sample / name).stat().st_size and r[4] == loc[4] and r[5:7] == loc[5:7]
        assert r[2] is None and r[3] and loc[3] is None and loc[2] is not None  # ETag in place of mtime
        assert r[7] != loc[7]  # the build key counts the ETag where a local part counts the mtime
    assert remote[PART][5:7] == (27, "ok")
    inventory = _table(
        built["s3"][0], f"SELECT manifest_status, etag FROM openalex_inventory WHERE source_file = '{PART}'"
    )
    assert inventory[0][0] == "listed" and inventory[0][1] == remote[PART][3]


def test_a_second_build_from_s3_reads_no_part_again(built):
    data = built["s3"][0]
    storage = build_resources(str(data))["storage"]
    folders = input_folders([f"s3://{BUCKET}/snapshot"])
    jobs = part_jobs(take_inventory(folders).rows, lambda sf: locate(folders, None, sf))
    entities = EntityLists.from_table(storage.read_table("canadian_entities"))
    done, todo = split_finished(jobs, storage.table_dir("frame_parts"), entities, retry_failed_reads=True)
    assert todo == [] and len(done) == node_metadata(built["s3"][2], "frame_parts")["parts"] == len(jobs) > 1


def test_no_credential_appears_in_a_log_line_metadata_entry_or_table(built):
    _, instance, result = built["s3"]
    texts = _messages(instance) + [str(e) for run in instance.get_runs() for e in instance.all_logs(run.run_id)]
    texts += [str(r) for r in _table(built["s3"][0], "SELECT * FROM openalex_inventory")]
    assert any(f"{BUCKET}" in t or "part_000.gz" in t for t in texts)
    assert not [t for t in texts if SECRET in t or KEY_ID in t]


def test_a_part_changed_in_the_bucket_after_the_inventory_is_refused(tmp_path, s3, sample):
    _, client = s3
    resources = build_resources(str(tmp_path / "data"), f"s3://{BUCKET}/changed")
    instance = dg.DagsterInstance.ephemeral()
    assert defs.resolve_job_def("frame_refresh").execute_in_process(instance=instance, resources=resources).success
    lines = gzip.decompress((sample / PART).read_bytes()).splitlines(keepends=True)
    client.put_object(Bucket=BUCKET, Key=f"changed/{PART}", Body=gzip.compress(b"".join(lines[:-1])))
    result = _materialize(instance, resources, workers=1, refresh=False)
    assert not result.success
    error = root_error(result)
    assert f"{PART} changed since openalex_inventory took stock of it" in error and "ETag" in error
    assert "re-run the job frame_refresh" in error and SECRET not in error
    assert not part_dir(tmp_path / "data" / "warehouse" / "frame_parts", "updated_date=2023-05-16", PART).exists()


def _part_job(data: Path):
    """The part job of PART from the inventory of the bucket, and the entity lists of the local build."""
    inv = take_inventory(f"s3://{BUCKET}/snapshot")
    folders = input_folders([f"s3://{BUCKET}/snapshot"])
    jobs = part_jobs(inv.rows, lambda sf: locate(folders, None, sf))
    storage = build_resources(str(data))["storage"]
    return [j for j in jobs if j.source_file == PART], EntityLists.from_table(storage.read_table("canadian_entities"))


def test_a_connection_dropped_mid_part_is_retried_and_the_part_built_whole(tmp_path, s3, built, monkeypatch):
    port, _ = s3
    jobs, entities = _part_job(built["local"][0])
    proxy = CuttingProxy(port, f"snapshot/{PART}", cuts=1)
    monkeypatch.setenv("METACAN_S3_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
    try:
        _, todo = split_finished(jobs, tmp_path, entities)
        [row] = list(build_parts(todo, tmp_path, entities, "run-cut-once", workers=1))
    finally:
        proxy.stop()
    assert proxy.cut == 1
    local = {
        r[0]: r for r in _table(built["local"][0], "SELECT source_file, sha256, records_read FROM frame_build_manifest")
    }
    assert (row["read_path"], row["sha256"], row["records_read"], row["count_check"]) == (
        "duckdb",
        local[PART][1],
        27,
        "ok",
    )
    assert not list(part_dir(tmp_path, "updated_date=2023-05-16", PART).rglob(".input"))  # the copy is not kept


def test_a_connection_dropped_on_every_attempt_is_quarantined_with_its_reason_and_read_again_later(
    tmp_path, s3, built, monkeypatch
):
    port, _ = s3
    jobs, entities = _part_job(built["local"][0])
    proxy = CuttingProxy(port, f"snapshot/{PART}", cuts=None)
    monkeypatch.setenv("METACAN_S3_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
    try:
        _, todo = split_finished(jobs, tmp_path, entities)
        [row] = list(build_parts(todo, tmp_path, entities, "run-cut-always", workers=1))
    finally:
        proxy.stop()
    assert proxy.cut >= 2  # every attempt was cut (s3fs retries inside each of ours)
    assert (row["read_path"], row["records_read"], row["work_records"], row["quarantined"], row["sha256"]) == (
        "failed",
        0,
        0,
        1,
        None,
    )
    assert row["count_check"] == "mismatch"  # the manifest lists 27 records: the loss is counted, not hidden
    [q] = pq.read_table(part_dir(tmp_path, "updated_date=2023-05-16", PART) / "quarantine.parquet").to_pylist()
    assert q["source_file"] == PART and q["locator"] == "file"
    assert q["reason"].startswith("unreadable from object storage: reading s3://metacan-snapshot/snapshot/" + PART)
    assert "gave up after 2 attempt(s)" in q["reason"] and "the next frame_parts run reads it again" in q["reason"]
    assert SECRET not in q["reason"] and KEY_ID not in q["reason"]
    # the merge may use the quarantined part; the next frame_parts run reads it again, and with the network back, whole
    assert split_finished(jobs, tmp_path, entities)[1] == []
    monkeypatch.setenv("METACAN_S3_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    _, todo = split_finished(jobs, tmp_path, entities, retry_failed_reads=True)
    [again] = list(build_parts(todo, tmp_path, entities, "run-healed", workers=1))
    assert (again["read_path"], again["records_read"], again["quarantined"]) == ("duckdb", 27, 0)


def test_anonymous_access_when_asked_or_when_no_credentials_are_found(s3, monkeypatch, tmp_path):
    port, _ = s3
    monkeypatch.setenv("METACAN_S3_ANON", "1")
    assert storage_options("s3") == {"anon": True, "endpoint_url": f"http://127.0.0.1:{port}"}
    inv = take_inventory(f"s3://{BUCKET}/snapshot")  # unsigned requests against the bucket
    assert PART in {r["source_file"] for r in inv.present()}
    monkeypatch.setenv("METACAN_S3_ANON", "0")
    assert storage_options("s3")["anon"] is False
    monkeypatch.delenv("METACAN_S3_ANON")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert storage_options("s3")["anon"] is True
    monkeypatch.setenv("METACAN_S3_ANON", "maybe")
    with pytest.raises(ValueError, match="METACAN_S3_ANON='maybe' is not a choice"):
        storage_options("s3")


def test_an_s3_url_is_one_folder_in_a_list_and_credentials_in_a_url_are_refused():
    assert split_dirs("s3://openalex") == ["s3://openalex"]
    assert split_dirs("../a:s3://bucket/prefix/:/b") == ["../a", "s3://bucket/prefix/", "/b"]
    first, second = input_folders(["s3://openalex/", "s3://bucket/more"])
    assert (first.root, first.prefix, second.prefix) == ("s3://openalex", "", "more/")
    assert locate([first, second], None, "more/data/x.gz") == "s3://bucket/more/data/x.gz"
    assert first.source_file("s3://openalex/data/works/manifest") == "data/works/manifest"
    with pytest.raises(ValueError, match="lies inside"):
        input_folders(["s3://openalex", "s3://openalex/data"])
    with pytest.raises(ValueError, match="carries credentials in its URL") as err:
        input_folders(["s3://AKIA:hunter2@bucket/x"])
    assert "hunter2" not in str(err.value)
    # in a ':' list the URL's own ':' would split it into a bucket named after the key and a folder named after
    # the secret: the list is refused whole, naming neither
    with pytest.raises(ValueError, match="carries credentials in its URL") as err:
        split_dirs("../a:s3://AKIAKEY:hunter2@bucket/works")
    assert "hunter2" not in str(err.value) and "AKIAKEY" not in str(err.value) and "s3://bucket" in str(err.value)


def test_an_endpoint_url_with_credentials_or_no_host_is_refused_naming_the_variable(monkeypatch):
    from metacan_pipeline import settings

    monkeypatch.setenv("METACAN_S3_ENDPOINT_URL", "http://u:hunter2@127.0.0.1:9")
    with pytest.raises(ValueError, match="METACAN_S3_ENDPOINT_URL carries credentials") as err:
        settings.s3_endpoint_url()
    assert "hunter2" not in str(err.value) and "127.0.0.1:9" in str(err.value)
    monkeypatch.setenv("METACAN_S3_ENDPOINT_URL", "notaurl")
    with pytest.raises(ValueError, match="METACAN_S3_ENDPOINT_URL is not an http"):
        settings.s3_endpoint_url()
    monkeypatch.setenv("METACAN_S3_ENDPOINT_URL", " http://127.0.0.1:9000 ")
    assert settings.s3_endpoint_url() == "http://127.0.0.1:9000"


def test_abstracts_are_re_read_from_the_bucket_as_from_the_local_folder(built, sample):
    pointers = _table(
        built["local"][0], "SELECT id, source_file, source_locator FROM frame WHERE has_abstract ORDER BY id LIMIT 5"
    )
    assert pointers
    folders = input_folders([f"s3://{BUCKET}/snapshot"])
    remote = load_abstracts(lambda sf: locate(folders, None, sf), pointers)
    local = load_abstracts(lambda sf: sample / sf, pointers)
    assert remote == local and all(isinstance(v, str) and v for v in remote.values())
    assert load_abstracts(lambda sf: f"s3://{BUCKET}/gone/{sf}", pointers[:1]) == {pointers[0][0]: None}


# ---- finished parts written to object storage (METACAN_PARTS_URL) ----------------------------------------------------

PARTS_BUCKET = "metacan-parts"
PARTS_URL = f"s3://{PARTS_BUCKET}/frame_parts"


def _part_objects(client, bucket: str = PARTS_BUCKET) -> dict[str, str]:
    """Every object under the parts URL (``s3://<bucket>/frame_parts``): key -> ETag."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="frame_parts/")
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def _marker_key(source_file: str, partition_key: str) -> str:
    return f"frame_parts/{partition_key}/{hashlib.sha256(source_file.encode()).hexdigest()[:16]}/manifest.json"


@pytest.fixture(scope="module")
def remote_parts(tmp_path_factory, s3):
    """The frame built from the bucket's snapshot by a local cluster of 2 workers writing its parts to
    ``s3://metacan-parts/frame_parts`` (METACAN_PARTS_URL); returns ``(data, instance, result, resources)``, the
    variable set only while it builds (each test that builds again sets it)."""
    _, client = s3
    client.create_bucket(Bucket=PARTS_BUCKET)
    data = tmp_path_factory.mktemp("remote_parts")
    instance = dg.DagsterInstance.ephemeral()
    resources = build_resources(str(data), f"s3://{BUCKET}/snapshot")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("METACAN_PARTS_URL", PARTS_URL + "/")  # a trailing slash is dropped
        result = _materialize(instance, resources, workers=2)
    assert result.success, root_error(result)
    return data, instance, result, resources


def test_the_frame_built_with_parts_in_the_bucket_equals_the_frame_built_with_local_parts(remote_parts, built, s3):
    _, client = s3
    data, _, result, _ = remote_parts
    everything = "SELECT * FROM frame ORDER BY id"
    frame = _table(built["s3"][0], everything)
    assert len(frame) > 0 and _table(data, everything) == frame  # the frame build id too: same parts, same sha256
    manifest = (
        "SELECT * EXCLUDE (started_at, finished_at, seconds, run_id, admitted) FROM frame_build_manifest ORDER BY 1, 2"
    )
    assert _table(data, manifest) == _table(built["s3"][0], manifest)
    quarantine = "SELECT * FROM openalex_quarantine ORDER BY ALL"
    assert _table(data, quarantine) == _table(built["s3"][0], quarantine)
    parts = node_metadata(result, "frame_parts")
    rows = _table(data, "SELECT source_file, partition_key, build_key FROM frame_build_manifest")
    assert parts["parts_built"] == parts["parts"] == len(rows) > 1 and parts["parts_already_built"] == 0
    assert "a local Dask cluster of 2 worker process(es)" in parts["parts_built_on"]
    # nothing was written to the local parts folder; in the bucket each part is one data prefix and its marker
    local_parts = data / "warehouse" / "frame_parts"
    assert not local_parts.exists() or not [p for p in local_parts.rglob("*") if p.is_file()]
    objects = _part_objects(client)
    for source_file, partition_key, key in rows:
        marker = json.loads(
            client.get_object(Bucket=PARTS_BUCKET, Key=_marker_key(source_file, partition_key))["Body"].read()
        )
        assert marker["build_key"] == key == marker["row"]["build_key"] and marker["data"].startswith(key + "-")
        prefix = _marker_key(source_file, partition_key).rsplit("/", 1)[0]
        assert {k for k in objects if k.startswith(prefix + "/")} == {f"{prefix}/manifest.json"} | {
            f"{prefix}/{marker['data']}/{n}" for n in ("index.parquet", "quarantine.parquet", "routed.parquet")
        }
        for name, f in marker["files"].items():
            body = client.get_object(Bucket=PARTS_BUCKET, Key=f"{prefix}/{marker['data']}/{name}")["Body"].read()
            assert (len(body), hashlib.sha256(body).hexdigest()) == (f["bytes"], f["sha256"])
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["frame_stores_no_abstract_text"] is True  # it read the routed parts in the bucket
    assert not list((data / "warehouse").glob(".frame-parts-*"))  # the merge's downloaded copies are removed
    _, instance, _, _ = remote_parts
    texts = [str(e) for run in instance.get_runs() for e in instance.all_logs(run.run_id)]
    assert any(PARTS_URL in t for t in texts)  # the log says where the parts are ...
    assert not [t for t in texts if SECRET in t or KEY_ID in t]  # ... and never with a credential


def test_a_re_run_with_parts_in_the_bucket_rebuilds_none_and_rewrites_no_object(remote_parts, s3, monkeypatch):
    _, client = s3
    data, instance, first, resources = remote_parts
    monkeypatch.setenv("METACAN_PARTS_URL", PARTS_URL)
    before = _part_objects(client)
    frame = _table(data, "SELECT * FROM frame ORDER BY id")
    again = _materialize(instance, resources, workers=2, refresh=False)
    assert again.success, root_error(again)
    parts = node_metadata(again, "frame_parts")
    n = node_metadata(first, "frame_parts")["parts"]
    assert (parts["parts_built"], parts["parts_already_built"], parts["parts"]) == (0, n, n)
    assert parts["parts_built_on"] == "nowhere (nothing to build)"
    assert _part_objects(client) == before  # same keys, same ETags: nothing uploaded again
    assert _table(data, "SELECT * FROM frame ORDER BY id") == frame


def test_a_part_without_its_marker_or_with_another_build_keys_marker_is_rebuilt_and_its_stale_objects_removed(
    remote_parts, s3, monkeypatch
):
    """A build killed after its uploads leaves data objects and no marker: the part is absent. A marker of another
    build key (older entity lists, say) with its objects is stale. Both are built again, the other parts reused."""
    _, client = s3
    data, instance, first, resources = remote_parts
    monkeypatch.setenv("METACAN_PARTS_URL", PARTS_URL)
    frame = _table(data, "SELECT * FROM frame ORDER BY id")
    rows = _table(data, "SELECT source_file, partition_key FROM frame_build_manifest ORDER BY 1")
    (crashed_sf, crashed_pk), (stale_sf, stale_pk) = rows[0], rows[1]
    crashed, stale = _marker_key(crashed_sf, crashed_pk), _marker_key(stale_sf, stale_pk)
    orphan = json.loads(client.get_object(Bucket=PARTS_BUCKET, Key=crashed)["Body"].read())["data"]
    client.delete_object(Bucket=PARTS_BUCKET, Key=crashed)  # the crash: data uploaded, marker never written
    old = json.loads(client.get_object(Bucket=PARTS_BUCKET, Key=stale)["Body"].read())
    old_key = "0" * 20
    stale_prefix = stale.rsplit("/", 1)[0]
    for name in old["files"]:
        client.copy_object(
            Bucket=PARTS_BUCKET,
            Key=f"{stale_prefix}/{old_key}-deadbeef/{name}",
            CopySource={"Bucket": PARTS_BUCKET, "Key": f"{stale_prefix}/{old['data']}/{name}"},
        )
        client.delete_object(Bucket=PARTS_BUCKET, Key=f"{stale_prefix}/{old['data']}/{name}")
    old.update(build_key=old_key, data=f"{old_key}-deadbeef", row={**old["row"], "build_key": old_key})
    client.put_object(Bucket=PARTS_BUCKET, Key=stale, Body=json.dumps(old).encode())
    again = _materialize(instance, resources, workers=2, refresh=False)  # frame_parts rebuilds, frame merges
    assert again.success, root_error(again)
    parts = node_metadata(again, "frame_parts")
    n = node_metadata(first, "frame_parts")["parts"]
    assert (parts["parts_built"], parts["parts_already_built"]) == (2, n - 2)
    objects = _part_objects(client)
    for marker_key in (crashed, stale):
        marker = json.loads(client.get_object(Bucket=PARTS_BUCKET, Key=marker_key)["Body"].read())
        prefix = marker_key.rsplit("/", 1)[0]
        assert {k.split("/")[3] for k in objects if k.startswith(prefix + "/") and k.count("/") == 4} == {
            marker["data"]
        }  # one data prefix: the orphan of the crash and the stale build's objects are gone
        assert marker["data"] not in (orphan, f"{old_key}-deadbeef")
    assert _table(data, "SELECT * FROM frame ORDER BY id") == frame


def test_the_merge_refuses_a_part_object_that_is_not_the_file_its_marker_names(remote_parts, s3, monkeypatch):
    _, client = s3
    data, instance, _, resources = remote_parts
    monkeypatch.setenv("METACAN_PARTS_URL", PARTS_URL)
    source_file, partition_key = _table(data, "SELECT source_file, partition_key FROM frame_build_manifest LIMIT 1")[0]
    marker_key = _marker_key(source_file, partition_key)
    marker = json.loads(client.get_object(Bucket=PARTS_BUCKET, Key=marker_key)["Body"].read())
    key = f"{marker_key.rsplit('/', 1)[0]}/{marker['data']}/quarantine.parquet"
    body = client.get_object(Bucket=PARTS_BUCKET, Key=key)["Body"].read()
    client.put_object(Bucket=PARTS_BUCKET, Key=key, Body=body[:-8] + b"PAR1PAR1")  # same size, other bytes
    try:
        result = _materialize(instance, resources, workers=1, refresh=False)  # every part reused, merge refuses
        assert not result.success
        error = root_error(result)
        assert f"{source_file}: its part's quarantine.parquet at {PARTS_URL}/" in error
        assert "is not the file its completion marker names" in error and "materialize frame_parts again" in error
        assert SECRET not in error and KEY_ID not in error
    finally:
        client.put_object(Bucket=PARTS_BUCKET, Key=key, Body=body)


PRELOAD = Path(__file__).with_name("dask_kill_preload.py")
#: The sample's part of 50 real works, 30 of them Canadian (``sample``): its routed rows would show if counted twice.
KILLED_PART = "data/works/updated_date=2025-01-01/part_000.gz"


@pytest.mark.slow
def test_a_worker_killed_mid_upload_of_a_part_to_the_bucket_loses_nothing_and_the_part_is_built_again_and_counted_once(
    tmp_path, s3, built, monkeypatch
):
    """Parts in a bucket of their own (METACAN_PARTS_URL), the snapshot read from the bucket, the default local cluster
    of two worker processes; the first worker to build KILLED_PART uploads its routed.parquet and index.parquet and
    SIGKILLs itself before its quarantine.parquet and its marker (dask_kill_preload.py, loaded by every worker). The
    frame must equal the one built from the same bucket with local parts (``built["s3"]``)."""
    import dask

    _, client = s3
    bucket = "metacan-parts-killed"
    client.create_bucket(Bucket=bucket)
    marks, data, scratch = tmp_path / "marks", tmp_path / "data", tmp_path / "tmp"
    marks.mkdir()
    scratch.mkdir()
    for name, value in {
        "TMPDIR": str(scratch),  # the workers' temporary folders
        "METACAN_PARTS_URL": f"s3://{bucket}/frame_parts",
        "METACAN_TEST_KILL_DIR": str(marks),
        "METACAN_TEST_KILL_PART": KILLED_PART,
        "METACAN_TEST_KILL_AFTER_UPLOAD": "index.parquet",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("METACAN_DASK_SCHEDULER", raising=False)
    instance, resources = dg.DagsterInstance.ephemeral(), build_resources(str(data), f"s3://{BUCKET}/snapshot")
    with dask.config.set({"distributed.worker.preload": [str(PRELOAD)]}):
        result = _materialize(instance, resources, workers=2)
    assert result.success, root_error(result)

    killed = int((marks / "killed").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(killed, 0)  # that worker process is gone
    [rebuilt] = [int(p.name.split("-")[1]) for p in marks.glob("rebuilt-*")]
    assert rebuilt != killed  # built again, once, by another worker process
    assert killed in {int(p.name.split("-")[1]) for p in marks.glob("built-*")}
    # the dead build's temporary folder (its part files, its copy of the input) was removed by a later build
    builds = scratch / f"metacan-part-builds-{os.getuid()}"
    assert builds.is_dir() and not [p.name for p in builds.iterdir()]
    # the dead build's upload: bucket/frame_parts/<partition>/<16 hex>/<key>-<8 hex>/index.parquet, no marker yet
    uploaded = (marks / "uploaded").read_text().split("/")
    assert uploaded[:2] == [bucket, "frame_parts"] and uploaded[-1] == "index.parquet"
    killed_prefix = "/".join(uploaded[1:-1])

    md, local_md = node_metadata(result, "frame_parts"), node_metadata(built["s3"][2], "frame_parts")
    assert "local Dask cluster of 2 worker process(es)" in md["parts_built_on"]
    n = local_md["parts"]
    assert (md["parts"], md["parts_built"], md["parts_already_built"]) == (n, n, 0) and n > 1
    for k in ("records_read", "work_records_read", "routed_works"):
        assert md[k] == local_md[k], k

    # every part is in the bucket once: its marker, of this run, and the three objects it names, nothing else
    rows = _table(data, "SELECT source_file, partition_key, build_key FROM frame_build_manifest")
    assert len(rows) == n and KILLED_PART in {r[0] for r in rows}
    objects, expected = _part_objects(client, bucket), set()
    for source_file, partition_key, key in rows:
        marker_key = _marker_key(source_file, partition_key)
        marker = json.loads(client.get_object(Bucket=bucket, Key=marker_key)["Body"].read())
        assert marker["build_key"] == key == marker["row"]["build_key"] and marker["row"]["run_id"] == result.run_id
        prefix = f"{marker_key.rsplit('/', 1)[0]}/{marker['data']}"
        expected |= {marker_key} | {f"{prefix}/{name}" for name in marker["files"]}
        for name, f in marker["files"].items():
            body = client.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read()
            assert (len(body), hashlib.sha256(body).hexdigest()) == (f["bytes"], f["sha256"])
        if source_file == KILLED_PART:  # finished under another data prefix than the dead build's
            assert prefix.rsplit("/", 1)[0] == killed_prefix.rsplit("/", 1)[0] and prefix != killed_prefix
    assert set(objects) == expected  # the dead build's objects were removed by the build that finished the part
    assert not [p for p in (data / "warehouse").rglob("*") if p.is_file() and "frame_parts" in p.parts]

    # the frame: the same rows as with local parts (ids, routes, build id), each work once, counted once
    everything, local = "SELECT * FROM frame ORDER BY id", built["s3"][0]
    frame = _table(data, everything)
    assert frame == _table(local, everything) and len(frame) == len({r[0] for r in frame}) > 0
    routes = "SELECT id, ca_aff, ca_fund, ca_venue, about_ca, source_file FROM frame ORDER BY id"
    assert _table(data, routes) == _table(local, routes)
    from_killed = f"SELECT count(*) FROM frame WHERE source_file = '{KILLED_PART}'"
    assert _table(data, from_killed) == _table(local, from_killed) != [(0,)]
    manifest = (
        "SELECT * EXCLUDE (started_at, finished_at, seconds, run_id, admitted) FROM frame_build_manifest ORDER BY 1"
    )
    assert _table(data, manifest) == _table(local, manifest)
    counts = ("works_read", "work_records_read", "admitted_by_route", "quarantined", "parts_done")
    frame_md, local_frame_md = node_metadata(result, "frame"), node_metadata(built["s3"][2], "frame")
    assert {k: frame_md[k] for k in counts} == {k: local_frame_md[k] for k in counts}

    # a whole copy of the killed part's objects left without a marker (a build killed after all its uploads) does
    # not count either: the next run builds nothing and merges the same frame
    part = killed_prefix.rsplit("/", 1)[0]
    marker = json.loads(client.get_object(Bucket=bucket, Key=f"{part}/manifest.json")["Body"].read())
    stray = f"{part}/{marker['build_key']}-0badc0de"
    for name in marker["files"]:
        client.copy_object(
            Bucket=bucket,
            Key=f"{stray}/{name}",
            CopySource={"Bucket": bucket, "Key": f"{part}/{marker['data']}/{name}"},
        )
    again = _materialize(instance, resources, workers=2, refresh=False)
    assert again.success, root_error(again)
    assert (node_metadata(again, "frame_parts")["parts_built"], node_metadata(again, "frame_parts")["parts"]) == (0, n)
    assert _table(data, everything) == frame
    assert {k: node_metadata(again, "frame")[k] for k in counts} == {k: local_frame_md[k] for k in counts}
    assert set(_part_objects(client, bucket)) == expected | {f"{stray}/{name}" for name in marker["files"]}


@pytest.mark.parametrize(
    "value",
    [
        "s3://AKIAMETACANTESTKEY01:hunter2@metacan-parts/frame_parts",
        "/srv/frame_parts",
        "http://127.0.0.1:9000/metacan-parts",
        "s3:///frame_parts",
        "s3://metacan-parts/frame_parts?X-Amz-Signature=hunter2",
        "s3://metacan-parts//frame_parts",
    ],
)
def test_a_bad_parts_url_fails_the_build_in_one_sentence_naming_the_variable(value, tmp_path, s3, monkeypatch):
    from metacan_pipeline import settings

    monkeypatch.setenv("METACAN_PARTS_URL", value)
    with pytest.raises(ValueError, match=r"^METACAN_PARTS_URL") as err:
        settings.parts_url()
    message = str(err.value)
    assert (
        "hunter2" not in message and "AKIA" not in message and message.replace("e.g. ", "").count(". ") == 0
    )  # one sentence
    resources = build_resources(str(tmp_path / "data"), f"s3://{BUCKET}/snapshot")
    instance = dg.DagsterInstance.ephemeral()
    result = _materialize(instance, resources, workers=1)
    assert not result.success
    assert root_error(result) == f"Failure: {message}" or message in root_error(result)
    assert "hunter2" not in root_error(result)
    assert not (tmp_path / "data" / "warehouse" / "frame_parts").exists()  # refused before any part


@pytest.mark.parametrize(
    "value",
    [
        "s3:alice:hunter2@metacan-parts",  # no '://': the error must not echo the user info
        "alice:hunter2@minio/metacan-parts",
        "s3://ab/frame_parts",  # an S3 bucket name has 3-63 lower-case characters
        "S3://Metacan-Parts/frame_parts",
        "s3://metacan-parts/../../etc",
        "s3://metacan-parts/a\u2028b",  # a line separator would split the log lines that print it
        "s3://metacan-parts/a\u202eb",
    ],
)
def test_more_bad_parts_urls_are_refused_without_their_secret(value, monkeypatch):
    from metacan_pipeline import settings

    monkeypatch.setenv("METACAN_PARTS_URL", value)
    with pytest.raises(ValueError, match=r"^METACAN_PARTS_URL") as err:
        settings.parts_url()
    assert "hunter2" not in str(err.value) and "\u2028" not in str(err.value) and "\u202e" not in str(err.value)


def test_the_parts_url_setting_unset_is_the_local_folder_and_a_url_is_normalised(monkeypatch):
    from metacan_pipeline import settings
    from metacan_pipeline.frame.parts import parts_location

    monkeypatch.delenv("METACAN_PARTS_URL", raising=False)
    assert settings.parts_url() is None and parts_location(Path("/d/warehouse/frame_parts")) == Path(
        "/d/warehouse/frame_parts"
    )
    monkeypatch.setenv("METACAN_PARTS_URL", "  ")
    assert settings.parts_url() is None
    monkeypatch.setenv("METACAN_PARTS_URL", "S3://metacan-parts/a/b/")
    assert settings.parts_url() == "s3://metacan-parts/a/b" == parts_location(Path("/d"))
