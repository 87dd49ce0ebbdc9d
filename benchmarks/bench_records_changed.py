"""How ``work_records`` counts the records changed since its last materialization, at a given size: the
previous ``{id: record_hash}`` as a Python dict of every work (the code before) against the hashes kept on disk and
compared in DuckDB (``publish.record_build.keep_previous_hashes`` + ``count_changed``).

Reads the ``work_records`` table of a data folder (e.g. one ``bench_release_db.py`` wrote, ``--data
/tmp/metacan-release-db/works_400000/data``) and measures, each in a fresh child process (``_common.run_stage``:
seconds inside the child, peak RSS): ``dict`` (building the dict as the old ``previous_hashes`` did, then looking
every record of the table up in it, as ``RecordBatches`` did) and ``duckdb`` (keeping the hashes, then counting
against the same table). Both count 0 changes (the table against itself); the count is printed to show they agree.

The figure: duckdb / dict peak RSS (to beat: below 1, nothing may hold a whole table in Python memory) at a similar
time. Writes ``benchmarks/out/records_changed.json``.

Usage: nice .venv/bin/python benchmarks/bench_records_changed.py --data DIR
       .venv/bin/python benchmarks/bench_records_changed.py --smoke   (300 records of pages_records, no --data)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    REPO,
    add_child_args,
    add_smoke_arg,
    machine,
    machine_line,
    ratio,
    record,
    run_stage,
    write_child_result,
)


def stage_child(stage: str, data: Path) -> dict:
    from metacan_pipeline.storage import MetacanStorage

    storage = MetacanStorage(data_dir=str(data))
    t0 = time.perf_counter()
    if stage == "dict":
        previous = {
            r["id"]: r["record_hash"] for r in storage.read_table("work_records", ["id", "record_hash"]).to_pylist()
        }
        changed = 0
        for batch in storage.iter_batches("work_records", 5000, ["id", "record_hash"]):
            for wid, h in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                changed += previous.get(wid) != h
    else:
        from metacan_pipeline.publish.record_build import count_changed, keep_previous_hashes

        kept = keep_previous_hashes(storage)
        try:
            changed = count_changed(storage, kept)
        finally:
            kept.unlink()
    return {"seconds": time.perf_counter() - t0, "changed": changed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="the data folder whose work_records is read (required)")
    add_smoke_arg(ap, "300 records written to a temporary folder, no --data")
    add_child_args(ap, ("datadir",))
    args = ap.parse_args()
    if args._stage:
        write_child_result(stage_child(args._stage, Path(args.datadir)), args.result)
        return
    with tempfile.TemporaryDirectory(prefix="metacan-records-changed-") as tmp:
        if args.smoke and args.data is None:
            from pages_records import write_release_inputs

            args.data = Path(tmp) / "data"
            write_release_inputs(args.data, 300)
        if args.data is None:
            ap.error("--data is required")
        measure(args)


def measure(args: argparse.Namespace) -> None:
    started, results = machine(), {}
    print(machine_line())
    for stage in ("dict", "duckdb"):
        res, _, _ = run_stage(
            Path(__file__), stage, stage, args.data, ["--datadir", str(args.data)], args.data / f"changed_{stage}.log"
        )
        print(
            f"{stage:<7} {res['seconds']:6.1f} s, peak RSS {res['peak_rss_mib']:6.0f} MiB, changed {res['changed']}; "
            f"load {res['load_before']} -> {res['load_after']}",
            flush=True,
        )
        results[stage] = res
    ratios = {f"duckdb_{k}/dict": ratio(results["duckdb"][k], results["dict"][k]) for k in ("seconds", "peak_rss_mib")}
    record(
        "records_changed", {"data": str(args.data), "stages": results}, ratios=ratios, started=started, smoke=args.smoke
    )


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
