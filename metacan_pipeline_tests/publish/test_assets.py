"""Tests of metacan_pipeline.publish.assets: work_records and work_pages through Dagster (blocking checks,
re-rendering, abstract fetches)."""

import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from metacan_pipeline.definitions import build_resources
from metacan_pipeline.publish.assets import PagesConfig, work_pages, work_records
from metacan_pipeline.publish.checks import records_may_ship
from metacan_pipeline.publish.records import schema_violation
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.student import HEADS_SCHEMA, MACHINE_SCHEMA, PRED_SCHEMA
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.vocab import SCORE_ONLY_IMMATURE
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.student import machine_row, prediction_row
from metacan_pipeline_tests.builders.teachers import label_row


def _write_world(storage: MetacanStorage, openalex_dir, machine_extra=None):
    row = real_frame_row(openalex_dir)
    storage.write_table("frame", pa.Table.from_pylist([row], schema=FRAME_SCHEMA))
    storage.write_table(
        "direct_labels_gemma", pa.Table.from_pylist([label_row(row["id"], "gemma", ["sts"])], schema=LABELS_SCHEMA)
    )
    storage.write_table("direct_labels_codex", pa.Table.from_pylist([], schema=LABELS_SCHEMA))
    storage.write_table("predictions", pa.Table.from_pylist([prediction_row(row["id"])], schema=PRED_SCHEMA))
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    machine = machine_row(row["id"])
    schema = MACHINE_SCHEMA
    if machine_extra:
        machine.update(machine_extra)
        schema = MACHINE_SCHEMA.append(pa.field("categories", pa.list_(pa.string())))
    storage.write_table("machine_scores", pa.Table.from_pylist([machine], schema=schema))
    return row["id"]


def _pages_run(resources, api, **config):
    run_config = dg.RunConfig({"work_pages": PagesConfig(openalex_api_url=api.base_url, **config)})
    return dg.materialize(
        [work_records, records_may_ship, work_pages],
        resources=resources,
        run_config=run_config,
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


@pytest.mark.parametrize("violating", [False, True])
def test_blocking_check_stops_pages(tmp_path, openalex_dir, openalex_api, violating):
    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    wid = _write_world(storage, openalex_dir, {"categories": ["metaresearch"]} if violating else None)
    result = _pages_run(resources, openalex_api)
    evals = result.get_asset_check_evaluations()
    assert [e.passed for e in evals] == [not violating]
    page = storage.site_dir / "works" / "metacan-v0-hybrid-000000000000" / f"{wid}.html"
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    if violating:
        assert not result.success
        assert evals[0].metadata["violating_records"].value == 1
        assert any("schema" in v and "machine_scores" in v for v in evals[0].metadata["violations"].value)
        assert "work_pages" not in materialized and not page.exists()
        assert not (storage.site_dir / "records" / f"{wid}.json").exists()  # nothing the check refused is published
        assert openalex_api.hits == []
    else:
        assert result.success and materialized == {"work_lineage", "work_records", "work_pages"}
        assert page.exists() and (storage.site_dir / "index.html").exists() and (storage.site_dir / "index.js").exists()
        record = json.loads((storage.site_dir / "records" / f"{wid}.json").read_text())
        assert schema_violation(record) is None
        assert (
            record["routes"]["ca_aff"] is True and record["machine_scores"]["validation_status"] == SCORE_ONLY_IMMATURE
        )
        # the abstract was fetched live from (a loopback stub of) OpenAlex in one call, and never stored
        assert "Maximum likelihood or restricted maximum likelihood" in page.read_text()
        assert len(openalex_api.hits) == 1 and openalex_api.hits[0]["filter"] == f"ids.openalex:{wid}"
        md = result.asset_materializations_for_node("work_pages")[0].metadata
        assert md["pages_rendered"].value == 1 and md["openalex_abstract_calls"].value == 1
        with storage.connect(read_only=True) as con:
            assert con.execute("SELECT abstract_status FROM page_manifest").fetchall() == [("ok",)]
        # a second render with nothing changed writes no page and asks OpenAlex nothing
        before = page.stat().st_mtime_ns
        again = _pages_run(resources, openalex_api)
        md = again.asset_materializations_for_node("work_pages")[0].metadata
        assert (
            md["pages_rendered"].value == 0
            and md["pages_unchanged"].value == 1
            and md["index_rewritten"].value is False
        )
        assert len(openalex_api.hits) == 1 and page.stat().st_mtime_ns == before


def test_pages_rerender_only_changed_records_and_say_when_the_fetch_failed(tmp_path, openalex_dir, openalex_api):
    """Incremental rendering: a changed label re-renders that page only; an unreachable OpenAlex gives an
    honest 'could not be fetched just now' page, re-tried only when asked."""
    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    wid = _write_world(storage, openalex_dir)
    page = storage.site_dir / "works" / "metacan-v0-hybrid-000000000000" / f"{wid}.html"
    dead = type("Dead", (), {"base_url": "http://127.0.0.1:9"})()  # discard port: connection refused
    assert _pages_run(resources, dead).success
    assert "could not be fetched from OpenAlex just now" in page.read_text()
    # unchanged record, default config: not re-rendered, the failure stays visible
    md = _pages_run(resources, openalex_api).asset_materializations_for_node("work_pages")[0].metadata
    assert md["pages_rendered"].value == 0 and openalex_api.hits == []
    # asked to retry failed fetches: re-rendered with the abstract
    md = (
        _pages_run(resources, openalex_api, retry_failed_abstracts=True)
        .asset_materializations_for_node("work_pages")[0]
        .metadata
    )
    assert md["pages_rendered"].value == 1 and "Maximum likelihood" in page.read_text()
    # a changed direct label changes the record: that page is rendered again
    storage.write_table(
        "direct_labels_gemma", pa.Table.from_pylist([label_row(wid, "gemma", ["open_science"])], schema=LABELS_SCHEMA)
    )
    md = _pages_run(resources, openalex_api).asset_materializations_for_node("work_pages")[0].metadata
    assert md["pages_rendered"].value == 1 and "Open science" in page.read_text()


def test_pages_ask_openalex_once_per_50_works(tmp_path, openalex_dir, openalex_api):
    """120 frame works with abstracts: the pages asset sends 3 batched calls (50, 50, 20 ids), not 120."""
    from metacan_pipeline_tests.openalex_stub import real_works

    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    ids = sorted(real_works())[:120]
    rows = [{**real_frame_row(openalex_dir), "id": wid, "has_abstract": True} for wid in ids]
    storage.write_table("frame", pa.Table.from_pylist(rows, schema=FRAME_SCHEMA))
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist([], schema=LABELS_SCHEMA))
    storage.write_table("predictions", pa.Table.from_pylist([prediction_row(w) for w in ids], schema=PRED_SCHEMA))
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    storage.write_table("machine_scores", pa.Table.from_pylist([machine_row(w) for w in ids], schema=MACHINE_SCHEMA))
    result = _pages_run(resources, openalex_api)
    assert result.success
    sizes = [len(h["filter"].split(":", 1)[1].split("|")) for h in openalex_api.hits]
    assert sizes == [50, 50, 20] and all(h["select"] == "id,abstract_inverted_index,ids" for h in openalex_api.hits)
    md = result.asset_materializations_for_node("work_pages")[0].metadata
    assert md["pages_rendered"].value == 120 and md["openalex_abstract_calls"].value == 3
    with storage.connect(read_only=True) as con:
        statuses = dict(con.execute("SELECT abstract_status, count(*) FROM page_manifest GROUP BY ALL").fetchall())
    with_text = sum(1 for w in ids if real_works()[w].get("abstract_inverted_index"))
    assert statuses.get("ok", 0) == with_text and sum(statuses.values()) == 120


def test_the_site_follows_the_frame_and_the_renderer(tmp_path, openalex_dir, openalex_api, monkeypatch):
    """A work that leaves the frame leaves the site; a manifest row whose path was tampered with does not
    hide a missing page; a changed template re-renders every page; a duplicated work stops the records."""
    from metacan_pipeline.publish import assets

    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    first = real_frame_row(openalex_dir)
    second = {**first, "id": "W2"}
    storage.write_table("frame", pa.Table.from_pylist([first, second], schema=FRAME_SCHEMA))
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist([], schema=LABELS_SCHEMA))
    storage.write_table(
        "predictions", pa.Table.from_pylist([prediction_row(first["id"]), prediction_row("W2")], schema=PRED_SCHEMA)
    )
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    storage.write_table(
        "machine_scores", pa.Table.from_pylist([machine_row(first["id"]), machine_row("W2")], schema=MACHINE_SCHEMA)
    )
    pages = lambda **cfg: (
        _pages_run(resources, openalex_api, **cfg).asset_materializations_for_node("work_pages")[0].metadata
    )  # noqa: E731
    assert pages()["pages_rendered"].value == 2
    site = storage.site_dir
    w2_page = site / "works" / "metacan-v0-hybrid-000000000000" / "W2.html"
    assert w2_page.exists() and (site / "records" / "W2.json").exists()
    # a manifest path pointing at another existing file, and the real page deleted: rendered again
    with storage.connect() as con:
        con.execute("UPDATE page_manifest SET page_path = '../../../../etc/passwd' WHERE id = 'W2'")
    w2_page.unlink()
    assert pages()["pages_rendered"].value == 1 and w2_page.exists()
    # a bad METACAN_SITE_URL stops the pages in one sentence naming it, before a page is written
    monkeypatch.setenv("METACAN_SITE_URL", "javascript:alert(1)")
    result = _pages_run(resources, openalex_api)
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert not result.success and "Failure: METACAN_SITE_URL='javascript:alert(1)' is not an absolute" in failure
    assert "no page was rendered" in failure and w2_page.exists()
    monkeypatch.delenv("METACAN_SITE_URL")
    # the renderer changed (a template edit): every page is rendered again without being asked
    monkeypatch.setattr(assets, "renderer_fingerprint", lambda: "a-new-template")
    assert pages()["pages_rendered"].value == 2
    # W2 leaves the frame: its record and page go, the index forgets it
    storage.write_table("frame", pa.Table.from_pylist([first], schema=FRAME_SCHEMA))
    md = pages()
    assert md["pages_withdrawn"].value == 1 and md["pages_rendered"].value == 0
    assert (
        not w2_page.exists()
        and not (site / "records" / "W2.json").exists()
        and "W2.html" not in (site / "index.html").read_text()
    )
    # the same work twice: the records stop with its id, and the site keeps what it had
    storage.write_table("frame", pa.Table.from_pylist([first, first], schema=FRAME_SCHEMA))
    result = _pages_run(resources, openalex_api)
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert not result.success and f"work {first['id']} appears twice" in failure
    assert (site / "records" / f"{first['id']}.json").exists()


def test_records_changed_counts_the_new_and_changed_records_and_leaves_no_scratch_file(tmp_path, openalex_dir):
    """``records_changed``: every record on the first materialization, none when nothing changed, and exactly the
    works whose label changed (the previous hashes are kept on disk and compared in DuckDB)."""
    from metacan_pipeline_tests.builders.site import site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=30)

    def changed() -> tuple[int, int]:
        result = dg.materialize([work_records], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
        event = next(e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey("work_records"))
        md = event.materialization.metadata
        return md["records_changed"].value, md["records_unchanged"].value

    assert changed() == (30, 0)
    hashes = storage.read_table("work_records").to_pylist()
    assert changed() == (0, 30)
    labels = storage.read_table("direct_labels_gemma").to_pylist()
    labels[0]["categories"], labels[3]["categories"] = ["open_science"], ["peer_review"]
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(labels, schema=LABELS_SCHEMA))
    assert changed() == (2, 28)
    after = {r["id"]: r["record_hash"] for r in storage.read_table("work_records").to_pylist()}
    assert sorted(w for w, h in ((r["id"], r["record_hash"]) for r in hashes) if after[w] != h) == sorted(
        {labels[0]["work_id"], labels[3]["work_id"]}
    )
    assert not list(storage.warehouse.glob(".work_records-previous-*"))


def test_record_inputs_are_the_same_whatever_the_range_of_ids_joined_at_a_time(tmp_path, openalex_dir, monkeypatch):
    """work_records joins the frame range of ids by range (RANGE_WORKS): 30 works in ranges of 7 (five ranges, the
    last one short) give the same rows, in the same id order, as one range; no work is lost or doubled at a bound."""
    from metacan_pipeline.publish import record_inputs as inputs
    from metacan_pipeline_tests.builders.site import site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=30)
    dg.materialize([work_records], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    tables = ["direct_labels_gemma", "direct_labels_codex"]
    whole = [row for batch in inputs.record_inputs(storage, tables) for row in batch]
    monkeypatch.setattr(inputs, "RANGE_WORKS", 7)
    ranged = [row for batch in inputs.record_inputs(storage, tables, batch_rows=4) for row in batch]
    ids = [r["work"]["id"] for r in whole]
    assert len(ids) == len(set(ids)) == 30 and ids == sorted(ids)
    assert sum(len(r["labels"]) for r in whole) == 16 and any(r["pred"] for r in whole)
    assert ranged == whole


def test_records_built_by_range_in_two_processes_are_the_table_one_process_writes(tmp_path, openalex_dir):
    """work_records in worker processes (write_records): 30 works in ranges of 7 ids over two spawned processes give
    the same rows, in id order, as one range in this process; a duplicated work stops the build with its id, and the
    previous table and no build folder are left."""
    import pyarrow.parquet as pq

    from metacan_pipeline.publish import record_build, records
    from metacan_pipeline_tests.builders.site import site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=30)
    result = dg.materialize([work_records], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    md = result.asset_materializations_for_node("work_records")[-1].metadata
    assert (md["dagster/row_count"].value, md["id_ranges"].value, md["worker_processes"].value) == (30, 1, 1)
    build = record_build.RecordBuild(
        storage.data_dir, ("direct_labels_gemma", "direct_labels_codex"), None, {"gemma": "qualified"}, {}, None
    )
    one = record_build.write_records(storage, build, workers=1)
    whole = storage.read_table("work_records").to_pylist()
    two = record_build.write_records(storage, build, workers=2, range_works=7)
    files = sorted(p.name for p in storage.table_dir("work_records").glob("*.parquet"))
    ranged = pq.read_table(storage.table_dir("work_records")).to_pylist()  # the files in name order

    assert (one["ranges"], one["workers"], two["ranges"], two["workers"]) == (1, 1, 5, 2)
    assert len(files) == 5 and files[0] == "part-00000-00000.parquet" and files[-1] == "part-00004-00000.parquet"
    ids = [r["id"] for r in ranged]
    assert len(ids) == len(set(ids)) == 30 and ids == sorted(ids)
    assert ranged == whole and two["records"] == one["records"] == 30
    assert two["preview"] == one["preview"] == whole[:10]
    assert '"gemma"' in whole[0]["record_json"] and all(r["record_hash"] for r in whole)

    frame = storage.read_table("frame").to_pylist()
    storage.write_table("frame", pa.Table.from_pylist([*frame, frame[20]], schema=FRAME_SCHEMA))
    with pytest.raises(records.RecordInputError, match=f"work {frame[20]['id']} appears twice"):
        record_build.write_records(storage, build, workers=2, range_works=7)
    assert pq.read_table(storage.table_dir("work_records")).to_pylist() == whole
    assert not list(storage.warehouse.glob(".work_records.build-*"))


def test_each_range_of_a_records_build_spills_to_its_own_folder(tmp_path, openalex_dir, monkeypatch):
    """The ranges of work_records run side by side in worker processes, each with its own DuckDB: DuckDBs spilling to
    one folder write the same file names (duckdb_temp_storage_DEFAULT-0.tmp) and crash or read each other's blocks
    (two processes sorting past their memory_limit in one temp_directory segfault). Each range
    spills to a folder of its own under warehouse/.spill-records, gone after the build."""
    from metacan_pipeline.publish import record_build
    from metacan_pipeline_tests.builders.site import site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=30)
    dg.materialize([work_records], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    build = record_build.RecordBuild(
        storage.data_dir, ("direct_labels_gemma", "direct_labels_codex"), None, None, {}, None
    )
    spills = []
    connect = record_build.duckdb.connect

    def spy(*args, **kwargs):
        if ".spill-records" in (kwargs.get("config") or {}).get("temp_directory", ""):
            spills.append(Path(kwargs["config"]["temp_directory"]))
            assert len(spills) == 1 or spills[-1].is_dir(), spills[-1]  # a range's own folder exists before it runs
        return connect(*args, **kwargs)

    monkeypatch.setattr(record_build.duckdb, "connect", spy)
    built = record_build.write_records(storage, build, workers=1, range_works=7)  # the ranges in this process, in turn
    ranged = spills[1:]  # the first connection only lists the ranges, before any range runs
    assert built["ranges"] + 1 == len(ranged) == len(set(ranged)) == 6  # five ranges of ids and the NULL-id one
    assert all(p.parent == storage.warehouse / ".spill-records" for p in ranged)
    assert not any(p.exists() for p in spills[1:]) and not (storage.warehouse / ".spill-records").exists()


def _records_build_child(
    tmp_path, storage: MetacanStorage, prelude: str = "", setup: str = "", layer: str = "None", **popen
):
    """A child Python process running ``write_records(workers=2, range_works=1)`` on ``storage``: ``prelude`` is module
    code before it, ``setup`` lines run first under ``__main__``, ``layer`` the RecordBuild's layer rule expression."""
    import os
    import subprocess
    import sys

    from metacan_pipeline.publish import record_build

    script = (
        "from metacan_pipeline.publish import record_build\n"
        "from metacan_pipeline.storage import MetacanStorage\n"
        f"{prelude}"
        "if __name__ == '__main__':\n"
        f"{setup}"
        f"    storage = MetacanStorage(data_dir={storage.data_dir!r})\n"
        "    build = record_build.RecordBuild(storage.data_dir, ('direct_labels_gemma', 'direct_labels_codex'), None, None, "
        f"{{}}, {layer})\n"
        "    record_build.write_records(storage, build, workers=2, range_works=1)\n"
    )
    (tmp_path / "build.py").write_text(script)
    root = str(Path(record_build.__file__).parents[2])  # the checkout, for the child's imports
    return subprocess.Popen(
        [sys.executable, str(tmp_path / "build.py")], env={**os.environ, "PYTHONPATH": root}, **popen
    )


def _spawned_workers(pid: int) -> list[int]:
    """The live worker processes (multiprocessing spawn) whose parent is ``pid`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z" and b"spawn_main" in cmdline:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_record_workers_end_when_the_build_process_is_killed(tmp_path, openalex_dir):
    """A step process SIGKILLed during a work_records build (an OOM kill, `kill -9`, a supervisor's timeout): its
    worker processes end too (none goes on building the queued ranges into the dead build's folder, nor waits for
    work forever), and the next build removes its folder."""
    import os
    import signal
    import time

    from metacan_pipeline_tests.builders.site import site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=30)
    dg.materialize([work_records], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    proc = _records_build_child(tmp_path, storage)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 180  # workers import duckdb and pyarrow: slow on a busy machine
        while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
            workers = _spawned_workers(proc.pid)
            time.sleep(0.05)
        assert len(workers) == 2, "the build did not start its two workers"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _alive(workers):
            time.sleep(0.2)
        assert not _alive(workers), f"worker processes {workers} outlived the killed build"
        left = list(storage.warehouse.glob(".work_records.build-*"))
        assert [p.name.split("-")[2] for p in left] == [f"pid{proc.pid}"]  # the killed build's folder, named for it
        # the next build removes it (GBs at 4.3M works) and builds the table whole
        dg.materialize([work_records], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
        assert not list(storage.warehouse.glob(".work_records.build-*"))
        assert storage.read_table("work_records", ["id"]).num_rows == 30
    finally:
        proc.kill()
        for pid in _alive(workers):
            os.kill(pid, signal.SIGKILL)


def test_a_records_worker_killed_mid_build_stops_the_build_with_what_to_do(tmp_path, openalex_dir):
    """A worker process SIGKILLed mid-range (what the OOM killer does): the build stops with a sentence naming the
    likely cause and the setting to lower (not the pool's generic "A process in the process pool was terminated
    abruptly"), the previous table and no build folder are left."""
    import subprocess

    import pyarrow.parquet as pq

    from metacan_pipeline_tests.builders.site import site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=30)
    dg.materialize([work_records], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    previous = pq.read_table(storage.table_dir("work_records")).to_pylist()
    prelude = (
        "import os, signal\n"
        "from metacan_pipeline.release.layer import LayerRule\n"
        "class KilledRule(LayerRule):\n"
        "    def apply(self, record, in_release):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = _records_build_child(tmp_path, storage, prelude, layer="KilledRule()", stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert "RecordWorkerDied: a work_records worker process died while building (2 workers)" in err
    assert "set METACAN_RECORD_WORKERS=1 (or a smaller number) and materialize work_records again" in err
    assert pq.read_table(storage.table_dir("work_records")).to_pylist() == previous
    assert not list(storage.warehouse.glob(".work_records.build-*"))


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_an_interrupted_records_build_stops_its_workers_at_once(tmp_path, openalex_dir):
    """SIGTERM (turned into KeyboardInterrupt, as Dagster's handlers and `metacan run` do) during a work_records build:
    the build stops now, its workers end, the previous table and no build folder are left: it does not wait for the
    ranges running and queued in the workers (a range is about 40 s at 50,000 works), which would outlast the stop
    timeout of most supervisors. Here a range takes 600 s (a release layer that sleeps), so a build that waited for
    its ranges would outlast the 120 s allowed."""
    import os
    import signal
    import time

    import pyarrow.parquet as pq

    from metacan_pipeline_tests.builders.site import site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=30)
    dg.materialize([work_records], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    previous = pq.read_table(storage.table_dir("work_records")).to_pylist()
    prelude = (
        "import signal, time\n"
        "from metacan_pipeline.release.layer import LayerRule\n"
        "class SlowRule(LayerRule):\n"
        "    def apply(self, record, in_release):\n"
        "        time.sleep(600)\n"
        "        return super().apply(record, in_release)\n"
        "def interrupt(signum, frame):\n"
        "    raise KeyboardInterrupt\n"
    )
    proc = _records_build_child(
        tmp_path, storage, prelude, "    signal.signal(signal.SIGTERM, interrupt)\n", "SlowRule()"
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 180
        spills = storage.warehouse / ".spill-records"
        while proc.poll() is None and time.monotonic() < deadline and len(list(spills.glob("*"))) < 2:
            time.sleep(0.05)  # each worker makes its range's spill folder as the range starts
        workers = _spawned_workers(proc.pid)
        assert len(workers) == 2 and len(list(spills.glob("*"))) == 2, "the two workers did not start a range"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)  # a busy machine's slack; the ranges would take 600 s
        assert proc.returncode != 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _alive(workers):
            time.sleep(0.2)
        assert not _alive(workers)
        assert pq.read_table(storage.table_dir("work_records")).to_pylist() == previous
        assert not list(storage.warehouse.glob(".work_records.build-*")) and not spills.exists()
    finally:
        proc.kill()
        for pid in _alive(workers):
            os.kill(pid, signal.SIGKILL)


def test_lineage_built_by_ranges_of_ids_is_the_lineage_built_at_once(tmp_path, openalex_dir):
    """work_lineage at 4.3M works ran out of DuckDB's memory in one query (its per-work lists of calls do not spill):
    it is built by ranges of ids, one file each, and the table is the same, row for row and in id order."""
    import pyarrow.parquet as pq

    from metacan_pipeline.publish.assets import label_tables
    from metacan_pipeline.publish.lineage import build_lineage
    from metacan_pipeline_tests.builders.site import site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    frame = site_world(storage, openalex_dir, n=30)
    assert build_lineage(storage, label_tables(), range_works=10**6) == 30
    whole = pq.read_table(storage.table_dir("work_lineage")).to_pylist()
    assert build_lineage(storage, label_tables(), range_works=7) == 30
    files = sorted(storage.table_dir("work_lineage").glob("*.parquet"))
    assert len(files) == 6  # five ranges of at most 7 ids, then the NULL ids (none here)
    ranged = [row for f in files for row in pq.read_table(f).to_pylist()]
    assert ranged == whole
    assert [r["id"] for r in ranged] == sorted(f["id"] for f in frame)
    assert sum(len(r["teacher_calls"]) for r in ranged) > 0
