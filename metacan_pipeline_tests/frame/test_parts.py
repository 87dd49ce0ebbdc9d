"""Tests of metacan_pipeline.frame.parts: part builds keyed by their input, resumed after an interruption, not read
again when unchanged, and cut parts counted and flagged."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow.parquet as pq
import pytest

from metacan_pipeline.definitions import all_partitions_run_tags, build_resources, defs, materialize_in_process
from metacan_pipeline_tests.builders.common import REPO, check_evaluation, failure_messages, node_metadata
from metacan_pipeline_tests.builders.frame import build_frame
from metacan_pipeline_tests.builders.openalex import (
    FUNDER_FILES,
    canadian_ids,
    complete_lines,
    copy_funders,
    is_canadian,
    write_manifest,
    write_part,
)

PYTHON = str(Path(sys.executable))


@pytest.fixture(scope="module")
def clean_input(tmp_path_factory, openalex_dir, real_works) -> Path:
    """Five listed parts of very different sizes (the largest builds for about a second), all whole."""
    inp = tmp_path_factory.mktemp("clean") / "in"
    copy_funders(openalex_dir, inp)
    ids = sorted(real_works)
    sizes = {
        "2025-05-01": ids * 2,
        "2025-05-02": ids[:200],
        "2025-05-03": ids[200:260],
        "2025-05-04": ids[260:275],
        "2025-05-05": ids[275:278],
    }
    counts = {write_part(inp, date, 0, [real_works[k] for k in part]): len(part) for date, part in sizes.items()}
    write_manifest(inp, counts)
    return inp


@pytest.fixture(scope="module")
def clean_build(tmp_path_factory, clean_input):
    data = tmp_path_factory.mktemp("clean-data") / "data"
    _, result = build_frame(data, clean_input)
    assert result.success
    return data, result


def _manifests(data: Path) -> dict[str, str]:
    """``{part folder: manifest.json text}`` of every finished part."""
    root = data / "warehouse" / "frame_parts"
    return {
        str(p.parent.relative_to(root)): p.read_text()
        for p in root.glob("*/*/manifest.json")
        if not p.parent.name.startswith(".")
    }


def _frame(data: Path) -> list[dict]:
    return sorted(pq.read_table(data / "warehouse" / "frame").to_pylist(), key=lambda r: (r["id"], r["source_file"]))


@pytest.mark.slow
def test_a_clean_snapshot_passes_the_manifest_check(clean_build):
    data, result = clean_build
    check = check_evaluation(result, "frame_build_manifest_covers_snapshot")
    assert check.passed is True and check.metadata["parts_built_and_counted"].value == 5
    assert node_metadata(result, "frame_parts")["parts_built"] == len(_manifests(data)) == 5 + len(FUNDER_FILES)


@pytest.mark.slow
def test_an_interrupted_build_resumes_at_the_first_unfinished_part(tmp_path, clean_input, clean_build):
    data = tmp_path / "data"
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dagster as dg; "
        "from metacan_pipeline.definitions import build_resources, materialize_in_process; "
        "r = materialize_in_process(dg.DagsterInstance.ephemeral(), build_resources(sys.argv[2], sys.argv[3]), through='frame'); "
        "sys.exit(0 if r.success else 1)"
    )
    proc = subprocess.Popen(
        [PYTHON, "-c", script, str(REPO), str(data), str(clean_input)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _manifests(data):
            if proc.poll() is not None:
                pytest.fail(f"the build ended before any part was finished:\n{proc.stdout.read().decode()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("no part finished within 120 s")
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)  # the build and its worker processes, as a crash or an OOM kill would
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
    before = _manifests(data)
    total = len(_manifests(clean_build[0]))  # 5 snapshot parts and the 4 funder files
    assert 1 <= len(before) < total, f"the kill must fall between two parts: {len(before)} of {total} finished"
    assert not (data / "warehouse" / "frame").exists()

    _, result = build_frame(data, clean_input)
    assert result.success
    md = node_metadata(result, "frame_parts")
    assert (md["parts_built"], md["parts_already_built"]) == (total - len(before), len(before))
    after = _manifests(data)
    assert set(after) == set(_manifests(clean_build[0]))
    for d, text in before.items():  # a finished part is never read twice: its manifest row is the first run's
        assert after[d] == text
    run_ids = {d: json.loads(t)["run_id"] for d, t in after.items()}
    assert all(run_ids[d] == result.run_id for d in after if d not in before)
    assert all(run_ids[d] != result.run_id for d in before)
    leftovers = [str(p) for p in (data / "warehouse").rglob("*") if ".tmp-" in p.name]
    assert leftovers == []
    assert node_metadata(result, "frame")["frame_build_id"] == node_metadata(clean_build[1], "frame")["frame_build_id"]
    assert _frame(data) == _frame(clean_build[0]) and len(_frame(data)) > 0


@pytest.mark.slow
def test_an_unchanged_input_is_not_read_again(tmp_path, clean_input):
    data = tmp_path / "data"
    _, first = build_frame(data, clean_input)
    assert first.success
    root = data / "warehouse" / "frame_parts"
    stamps = {p: (p.stat().st_mtime_ns, p.read_text()) for p in root.glob("*/*/manifest.json")}
    assert len(stamps) == 5 + len(FUNDER_FILES)
    _, second = build_frame(data, clean_input)
    assert second.success
    md = node_metadata(second, "frame_parts")
    assert (md["parts_built"], md["parts_already_built"], md["records_read"]) == (
        0,
        len(stamps),
        node_metadata(first, "frame_parts")["records_read"],
    )
    assert {p: (p.stat().st_mtime_ns, p.read_text()) for p in root.glob("*/*/manifest.json")} == stamps
    assert node_metadata(second, "frame")["frame_build_id"] == node_metadata(first, "frame")["frame_build_id"]


def _flushed_gzip(records: list[dict]) -> tuple[bytes, list[int]]:
    """A gzip stream flushed after every line (as streaming writers do), and the byte offset where each line ends."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    out, ends = b"", []
    for r in records:
        out += c.compress(json.dumps(r, ensure_ascii=False).encode() + b"\n") + c.flush(zlib.Z_SYNC_FLUSH)
        ends.append(len(out))
    return out + c.flush(), ends


@pytest.fixture(scope="module")
def cut_build(tmp_path_factory, openalex_dir, real_works):
    """Two listed 8-record parts, both cut: one right after its 5th line's flush point, one inside its last line."""
    tmp = tmp_path_factory.mktemp("cuts")
    inp = tmp / "in"
    copy_funders(openalex_dir, inp)
    ca = sorted(k for k, w in real_works.items() if is_canadian(w))
    parts = {"at_line_end": ca[:8], "in_last_line": ca[8:16]}
    counts, sizes = {}, {}
    for n, (name, ids) in enumerate(parts.items()):
        stream, ends = _flushed_gzip([real_works[k] for k in ids])
        cut = ends[4] if name == "at_line_end" else (ends[6] + ends[7]) // 2
        rel = write_part(inp, "2025-07-01", n, [])
        (inp / rel).write_bytes(stream[:cut])
        assert complete_lines(stream[:cut]) == (5 if name == "at_line_end" else 7)
        parts[name] = rel
        counts[rel], sizes[rel] = 8, len(stream)
    write_manifest(inp, counts, sizes)
    _, result = build_frame(tmp / "data", inp)
    assert result.success
    con = duckdb.connect(str(tmp / "data" / "metacan.duckdb"), read_only=True)
    yield parts, con, result
    con.close()


def test_a_gzip_cut_at_a_line_boundary_is_quarantined(cut_build):
    parts, con, _ = cut_build
    rel = parts["at_line_end"]
    m = con.execute(
        "SELECT work_records, count_check, read_path FROM frame_build_manifest WHERE source_file = ?", [rel]
    ).fetchone()
    assert m[:2] == (5, "mismatch")  # the records before the cut are kept; the count check alone notices
    q = con.execute("SELECT reason FROM openalex_quarantine WHERE source_file = ?", [rel]).fetchall()
    assert len(q) == 1 and "truncated or corrupt gzip" in q[0][0], (m, q)


def test_a_part_that_lost_only_its_last_record_fails_the_count_check(cut_build):
    parts, con, _ = cut_build
    rel = parts["in_last_line"]
    m = con.execute(
        "SELECT work_records, quarantined, records_read, count_check FROM frame_build_manifest WHERE source_file = ?",
        [rel],
    ).fetchone()
    assert m[:2] == (7, 1)  # 7 whole records and the truncation row
    assert m[2:] == (7, "mismatch")


def test_both_cut_parts_are_still_flagged_by_their_size(cut_build):
    """Whatever the readers miss, the inventory compares each listed part with the manifest's content_length."""
    parts, con, result = cut_build
    resized = dict(
        con.execute(
            "SELECT source_file, manifest_bytes - bytes FROM openalex_inventory WHERE bytes <> manifest_bytes"
        ).fetchall()
    )
    assert set(resized) == set(parts.values()) and all(d > 0 for d in resized.values())
    check = check_evaluation(result, "frame_build_manifest_covers_snapshot")
    assert (
        check.passed is False
        and check.severity == dg.AssetCheckSeverity.WARN
        and len(check.metadata["size_mismatches"].value) == 2
    )


@pytest.mark.parametrize("change", ["rewritten", "gone"])
def test_a_file_changed_after_the_inventory_is_not_built_under_its_old_key(tmp_path, openalex_dir, real_works, change):
    """The inventory lists a part; before frame_build reads it, it is rewritten (other works, other
    size) or removed. The build must not record the new content under the old size and mtime (a part
    that would never be read again if the old file came back with its old mtime, as ``aws s3 sync``
    restores it) and must say what to do; a frame_refresh + frame_build then picks the file up."""
    ca = canadian_ids(real_works)
    inp, data = tmp_path / "in", tmp_path / "data"
    copy_funders(openalex_dir, inp)
    write_part(inp, "2025-01-01", 0, [real_works[k] for k in ca[:2]])
    changed = write_part(inp, "2025-01-01", 1, [real_works[k] for k in ca[2:4]])
    instance, resources = dg.DagsterInstance.ephemeral(), build_resources(str(data), str(inp))
    assert defs.resolve_job_def("frame_refresh").execute_in_process(instance=instance, resources=resources).success
    if change == "rewritten":
        write_part(inp, "2025-01-01", 1, [real_works[k] for k in ca[4:7]])
    else:
        (inp / changed).unlink()
    build = defs.resolve_job_def("frame_build").execute_in_process(
        instance=instance, resources=resources, raise_on_error=False, tags=all_partitions_run_tags(instance)
    )
    assert not build.success
    [msg] = failure_messages(build)
    assert changed in msg and "changed since openalex_inventory" in msg and "frame_refresh" in msg
    assert not list((data / "warehouse" / "frame_parts").glob("updated_date=2025-01-01/*/manifest.json"))[
        1:
    ]  # only the unchanged part
    again = materialize_in_process(instance, resources, through="frame")
    assert again.success
    with duckdb.connect(str(data / "metacan.duckdb"), read_only=True) as con:
        frame_ids = {r[0] for r in con.execute("SELECT id FROM frame").fetchall()}
    assert frame_ids == set(ca[:2]) | (set(ca[4:7]) if change == "rewritten" else set())


PRELOAD = Path(__file__).with_name("dask_kill_preload.py")


def _largest_part(inp: Path) -> str:
    return max((p for p in inp.glob("data/works/*/*.gz")), key=lambda p: p.stat().st_size).relative_to(inp).as_posix()


@pytest.mark.slow
def test_a_worker_killed_mid_part_loses_nothing_and_the_part_is_built_again_elsewhere_and_counted_once(
    tmp_path, clean_input, clean_build, monkeypatch
):
    """The default local cluster of two worker processes; the first worker to build the largest part SIGKILLs itself
    after writing that part's rows into its temporary folder (dask_kill_preload.py, loaded by every worker)."""
    import dask

    marks, data = tmp_path / "marks", tmp_path / "data"
    marks.mkdir()
    killed_part = _largest_part(clean_input)
    monkeypatch.setenv("METACAN_TEST_KILL_DIR", str(marks))
    monkeypatch.setenv("METACAN_TEST_KILL_PART", killed_part)
    monkeypatch.delenv("METACAN_DASK_SCHEDULER", raising=False)
    with dask.config.set({"distributed.worker.preload": [str(PRELOAD)]}):
        _, result = build_frame(data, clean_input)
    assert result.success

    killed = int((marks / "killed").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(killed, 0)  # that worker process is gone
    [rebuilt] = [int(p.name.split("-")[1]) for p in marks.glob("rebuilt-*")]
    assert rebuilt != killed  # built again, once, by another worker process
    builders = {int(p.name.split("-")[1]) for p in marks.glob("built-*")}
    assert len(builders - {killed}) >= 1 and killed in builders

    md = node_metadata(result, "frame_parts")
    total = len(_manifests(clean_build[0]))
    assert "local Dask cluster of 2 worker process(es)" in md["parts_built_on"]
    assert (md["parts"], md["parts_built"], md["parts_already_built"]) == (total, total, 0)
    clean_md = node_metadata(clean_build[1], "frame_parts")
    assert (md["records_read"], md["work_records_read"], md["routed_works"]) == (
        clean_md["records_read"],
        clean_md["work_records_read"],
        clean_md["routed_works"],
    )
    manifests = _manifests(data)
    assert set(manifests) == set(_manifests(clean_build[0]))
    assert {json.loads(t)["run_id"] for t in manifests.values()} == {result.run_id}
    assert [str(p) for p in (data / "warehouse").rglob("*") if ".tmp-" in p.name] == []  # the dead build's folder
    frame = _frame(data)
    assert frame == _frame(clean_build[0]) and len(frame) == len({r["id"] for r in frame}) > 0
    assert node_metadata(result, "frame")["frame_build_id"] == node_metadata(clean_build[1], "frame")["frame_build_id"]


@pytest.mark.slow
def test_parts_are_built_by_the_dask_scheduler_that_the_setting_names_and_it_is_left_running(
    tmp_path, clean_input, clean_build, monkeypatch
):
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        monkeypatch.setenv("METACAN_DASK_SCHEDULER", cluster.scheduler_address)
        _, result = build_frame(tmp_path / "data", clean_input)
        assert result.success
        md = node_metadata(result, "frame_parts")
        assert f"the Dask scheduler at {cluster.scheduler_address} (1 worker(s) now)" == md["parts_built_on"]
        assert md["parts_built"] == len(_manifests(clean_build[0]))
        with Client(cluster.scheduler_address, timeout="10s") as client:  # not closed by the build
            assert len(client.scheduler_info()["workers"]) == 1
    assert _frame(tmp_path / "data") == _frame(clean_build[0])


def test_a_scheduler_setting_that_is_not_an_address_is_refused_naming_the_variable(monkeypatch):
    from metacan_pipeline import settings

    monkeypatch.delenv("METACAN_DASK_SCHEDULER", raising=False)
    assert settings.dask_scheduler() is None
    for value, address in (
        (" tcp://10.0.0.5:8786 ", "tcp://10.0.0.5:8786"),
        ("10.0.0.5:8786", "tcp://10.0.0.5:8786"),
        ("tls://[::1]:8786", "tls://[::1]:8786"),
    ):
        monkeypatch.setenv("METACAN_DASK_SCHEDULER", value)
        assert settings.dask_scheduler() == address
    for value in (
        "http://10.0.0.5:8786",
        "10.0.0.5",
        "tcp://user:pw@host:8786",
        "tcp://host:port/x",
        "user:pw@tcp://10.0.0.5:8786",  # the secret before the scheme
        "tcp://10.0.0.5:8786?token=pw",
        "tls://10.0.0.5:8786#pw",
        "tcp://a:b:8786",
        "tcp://ho st:8786",
        "tcp://host\n:8786",
        "tcp://host:99999",
        "tcp://host:0",
        "tcp://host:\uff18\uff17\uff18\uff16",  # full-width digits
    ):
        monkeypatch.setenv("METACAN_DASK_SCHEDULER", value)
        with pytest.raises(ValueError, match="METACAN_DASK_SCHEDULER=.* is not the address of a Dask scheduler") as err:
            settings.dask_scheduler()
        assert "pw" not in str(err.value) and "\n" not in str(err.value)


def test_a_scheduler_that_does_not_answer_stops_the_build_naming_its_address_and_the_setting(tmp_path):
    import dask

    from metacan_pipeline.frame.cluster import ClusterError, build_parts
    from metacan_pipeline.frame.entities import EntityLists
    from metacan_pipeline.frame.parts import PartJob

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    lists = EntityLists({}, {}, {}, {})
    job = PartJob(str(tmp_path / "in.jsonl"), "in.jsonl", "files", 1, 1, None, "no_manifest")
    assert list(build_parts([], tmp_path, lists, "run", workers=2, scheduler=address)) == []  # nothing to ask it
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), pytest.raises(ClusterError) as err:
        list(build_parts([(job, "key")], tmp_path, lists, "run", workers=2, scheduler=address))
    assert address in str(err.value) and "METACAN_DASK_SCHEDULER" in str(err.value)
    assert not list(tmp_path.iterdir())


def test_a_service_that_is_not_a_scheduler_stops_the_build_within_the_connect_limit(tmp_path, monkeypatch):
    """An HTTP server at the address (the dashboard's port typed for the scheduler's) accepts the connection and
    never completes distributed's handshake, which its own timeout does not cover: the build stops anyway."""
    import http.server
    import threading
    import time

    from metacan_pipeline.frame import cluster, parts
    from metacan_pipeline.frame.entities import EntityLists

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"tcp://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(cluster, "SCHEDULER_CONNECT_S", 2.0)
    job = parts.PartJob(str(tmp_path / "in.jsonl"), "in.jsonl", "files", 1, 1, None, "no_manifest")
    t0 = time.monotonic()
    try:
        with pytest.raises(cluster.ClusterError, match="did not answer") as err:
            list(cluster.build_parts([(job, "k")], tmp_path, EntityLists({}, {}, {}, {}), "run", 2, scheduler=address))
    finally:
        server.shutdown()
    assert time.monotonic() - t0 < 10 and address in str(err.value) and "METACAN_DASK_SCHEDULER" in str(err.value)


def test_remote_build_scratch_does_not_use_a_shared_folder_it_does_not_own(tmp_path, monkeypatch):
    """``<tmp>/metacan-part-builds-<uid>`` has a name anyone on the machine can guess, in a /tmp everyone writes to.
    A symlink put there (by another user, or left over) must not take the builds elsewhere and make them delete that
    folder's entries; a file there must not stop every build bound for object storage; a folder of another owner or
    that others may write to is not used. Such a root gets a private folder instead."""
    import tempfile

    from metacan_pipeline.frame.parts import remote_build_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = tmp_path / f"metacan-part-builds-{os.getuid()}"
    host = socket.gethostname().replace("-", "_")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / f"{host}-pid999999999-x").mkdir(parents=True)  # like a dead build's folder
    root.symlink_to(elsewhere)
    with remote_build_scratch() as scratch:
        assert Path(scratch).parent == tmp_path and Path(scratch).is_dir()
    assert (elsewhere / f"{host}-pid999999999-x").is_dir()

    root.unlink()
    root.write_text("not a folder")
    with remote_build_scratch() as scratch:
        assert Path(scratch).parent == tmp_path

    root.unlink()
    root.mkdir(mode=0o700)
    os.chmod(root, 0o777)  # others may write there: they could swap a build's folder
    with remote_build_scratch() as scratch:
        assert Path(scratch).parent == tmp_path
    os.chmod(root, 0o700)
    with remote_build_scratch() as scratch:  # the folder of this user, as made
        assert Path(scratch).parent == root


@pytest.mark.parametrize("host", ["st*r", "we[i]rd", "a/b", "node-7"])
def test_remote_build_scratch_with_an_odd_host_name_keeps_other_hosts_folders(tmp_path, monkeypatch, host):
    """The host name is part of a glob pattern and of a folder name: a '*' or '[...]' in it matched (and removed) the
    dead-looking folders of other hosts sharing the folder, and a '/' made every remote part build fail
    (FileNotFoundError). The kernel takes any bytes as a host name; the folder's name now keeps letters, digits,
    '.' and '_' of it ('-' was already '_')."""
    import tempfile

    from metacan_pipeline.frame import parts

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    root = tmp_path / f"metacan-part-builds-{os.getuid()}"
    root.mkdir(mode=0o700)
    other = root / "stXr-pid999999999-x"  # a dead build of host 'stXr'
    other.mkdir()
    (root / "wei-pid999999999-x").mkdir()  # of host 'wei'
    with parts.remote_build_scratch() as scratch:
        assert Path(scratch).parent == root and Path(scratch).name.split("-")[1] == f"pid{os.getpid()}"
    assert other.is_dir() and (root / "wei-pid999999999-x").is_dir()
    dead = root / f"{Path(scratch).name.split('-')[0]}-pid999999999-y"  # a dead build of this host: removed
    dead.mkdir()
    with parts.remote_build_scratch():
        assert not dead.exists()
