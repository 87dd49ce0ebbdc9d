"""Bytes written by the flushes of a labelling run into a large label store: the code before
(``teacher_labels`` with a primary key, random ids) against this checkout (no key index on ``teacher_labels``,
time-ordered ids from ``teachers.core.store.new_key``).

The figure: bytes written after / before (to beat: well under 1; the flushes must not rewrite the whole key
index). Each flush of a
``LabelWriter`` (every 2 s) opens the catalog, inserts its rows with ``append_rows`` and closes it, and
closing checkpoints: DuckDB writes the parts of the ``label_id`` index that changed, and random keys change
all of it.

Each stage runs in a fresh child (``_common.run_stage``) on its own code (``--before``: a commit, unpacked with
``_common.code_tree``): it creates a store through that code's ``MetacanStorage.connect`` holding ``--labels``
labels with random ids (a catalog written before the change; not timed), then makes ``--flushes`` flushes of
``--rows`` labels through ``connect`` and ``append_rows``, with the code's own ids (``new_key`` where it
exists, else ``uuid4``). Printed: seconds, bytes the child wrote meanwhile (``/proc/self/io``
``write_bytes``), rows and distinct ids at the end (the same in both), and the ratios after / before.

Usage: nice .venv/bin/python benchmarks/bench_label_store.py --before REV [--labels 2000000] [--flushes 20] [--rows 3000]
Writes ``benchmarks/out/label_store.json``; ``--smoke``: 2,000 labels, 2 flushes of 100, ``HEAD`` as the baseline.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import uuid
from pathlib import Path

from _common import (
    REPO,
    add_child_args,
    add_smoke_arg,
    code_tree,
    machine,
    machine_line,
    ratio,
    record,
    run_stage,
    use_code,
    write_child_result,
)


def written_bytes() -> int:
    """Bytes this process caused to be written to storage so far (``/proc/self/io``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no write_bytes line")


def stage_child(data: Path, labels: int, flushes: int, rows: int) -> dict:
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.teachers.core import store

    key = getattr(store, "new_key", lambda: uuid.uuid4().hex)
    build_base(data, labels)
    storage = MetacanStorage(data_dir=str(data))
    w0, t0 = written_bytes(), time.perf_counter()
    for f in range(flushes):
        batch = [
            {
                "label_id": key(),
                "work_id": f"W9{f:03d}{i:07d}",
                "teacher": "census",
                "model": "stub",
                "prompt_version": "v1",
                "prompt_sha": "0" * 16,
                "view_hash": "v",
                "status": "labelled",
                "created_at": store.now_utc(),
            }
            for i in range(rows)
        ]
        with storage.connect() as con:
            store.append_rows(con, [], batch)
    seconds, written = time.perf_counter() - t0, written_bytes() - w0
    with storage.connect(read_only=True) as con:
        n, distinct = con.execute("SELECT count(*), count(DISTINCT label_id) FROM teacher_labels").fetchone()
    shutil.rmtree(data)
    return {"seconds": seconds, "written_bytes": written, "labels": n, "distinct_ids": distinct}


def build_base(base: Path, labels: int) -> None:
    """A store of ``labels`` labels with random ids, its catalog created by ``MetacanStorage.connect``."""
    from metacan_pipeline.storage import MetacanStorage

    shutil.rmtree(base, ignore_errors=True)
    with MetacanStorage(data_dir=str(base)).connect() as con:
        con.execute(
            "INSERT INTO teacher_labels (label_id, work_id, teacher, model, prompt_version, prompt_sha, view_hash, "
            "status, created_at) SELECT replace(uuid()::VARCHAR, '-', ''), 'W1' || lpad(i::VARCHAR, 10, '0'), "
            "'census', 'stub', 'v1', repeat('0', 16), 'v', 'labelled', now()::TIMESTAMP FROM range(?) r(i)",
            [labels],
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="the commit whose code is the baseline (required)")
    ap.add_argument("--labels", type=int, default=2_000_000, help="labels in the store before the flushes")
    ap.add_argument("--flushes", type=int, default=20)
    ap.add_argument(
        "--rows", type=int, default=3000, help="labels per flush (a labelling run flushes about 6,000 every 2 s)"
    )
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-label-store"))
    add_smoke_arg(ap, "2,000 labels, 2 flushes of 100, HEAD as the baseline")
    add_child_args(ap, ("code", "datadir", "n_labels", "n_flushes", "n_rows"))
    args = ap.parse_args()
    if args.smoke:
        args.labels, args.flushes, args.rows, args.before = 2_000, 2, 100, args.before or "HEAD"
    if args._stage:
        use_code(args.code)
        res = stage_child(Path(args.datadir), int(args.n_labels), int(args.n_flushes), int(args.n_rows))
        write_child_result(res, args.result)
        return
    if args.before is None:
        ap.error("--before is required")
    started = machine()
    print(machine_line())
    args.scratch.mkdir(parents=True, exist_ok=True)
    codes = {"before": str(code_tree(args.before, args.scratch)), "after": ""}
    results = {}
    for stage, code in codes.items():
        extra = ["--datadir", str(args.scratch / f"data_{stage}"), "--n_labels", str(args.labels)]
        extra += ["--n_flushes", str(args.flushes), "--n_rows", str(args.rows), "--code", code]
        res, _, _ = run_stage(Path(__file__), stage, stage, args.scratch, extra, args.scratch / f"{stage}.log")
        results[stage] = res
        print(
            f"{stage:<6} ({args.before if code else 'this checkout'}) {args.flushes} flushes of {args.rows:,} into "
            f"{args.labels:,}: {res['seconds']:6.1f} s, written {res['written_bytes'] / 2**20:8,.1f} MiB "
            f"({res['written_bytes'] / args.flushes / 2**20:,.1f} a flush), labels {res['labels']:,} "
            f"({res['distinct_ids']:,} distinct ids); load {res['load_before']} -> {res['load_after']}",
            flush=True,
        )
    before, after = results["before"], results["after"]
    print(
        f"after / before: written {after['written_bytes'] / max(before['written_bytes'], 1):.3f}, "
        f"seconds {after['seconds'] / max(before['seconds'], 1e-9):.3f}"
    )
    ratios = {
        "written_bytes/before": ratio(after["written_bytes"], before["written_bytes"]),
        "seconds/before": ratio(after["seconds"], before["seconds"]),
    }
    record("label_store", {"args": vars(args), "stages": results}, ratios=ratios, started=started, smoke=args.smoke)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
