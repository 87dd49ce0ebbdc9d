"""How ``work_records`` counts the records changed since its last materialization, at a given size (issue 17): the
previous ``{id: record_hash}`` as a Python dict of every work (the code before) against the hashes kept on disk and
compared in DuckDB (``publish.record_build.keep_previous_hashes`` + ``count_changed``).

Reads the ``work_records`` table of a data folder (e.g. one ``bench_release_db.py`` wrote, ``--data
/tmp/metacan-release-db/works_400000/data``) and measures, each in a fresh child process (``_common.run_stage``:
seconds inside the child, peak RSS): ``dict`` (building the dict as the old ``previous_hashes`` did, then looking
every record of the table up in it, as ``RecordBatches`` did) and ``duckdb`` (keeping the hashes, then counting
against the same table). Both count 0 changes (the table against itself); the count is printed to show they agree.

Usage: nice .venv/bin/python benchmarks/bench_records_changed.py --data DIR
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _common import REPO, add_child_args, machine_line, run_stage, write_child_result


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
    add_child_args(ap, ("datadir",))
    args = ap.parse_args()
    if args._stage:
        write_child_result(stage_child(args._stage, Path(args.datadir)), args.result)
        return
    if args.data is None:
        ap.error("--data is required")
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


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
