"""The ``teacher_agreement`` asset alone at a given frame size, without the rest of the chain. The figure: its peak
RSS and seconds per size; the peak must not grow with the frame (it streams the labels).

For each ``--works N``: writes ``direct_labels_gemma`` (a census teacher: one labelled row per frame work, title
only, categories and heads drawn from a fixed seed, a 200-character reason), ``direct_labels_codex`` (a sample
teacher: ``--sample`` of those works, other draws) and ``sample_design`` (every frame work, a design weight of
``N / sample`` for the sample and 1 for the rest) into ``<scratch>/works_<N>/data`` (kept for the next run); then
materializes ``teacher_agreement`` through Dagster in a fresh child process (``_common.run_stage``: peak RSS of its
process tree, seconds inside the child, load before and after). The child also reports a SHA-256 of both output
tables (``teacher_agreement`` and ``teacher_disagreements``, every row), so a build before and after a change can
be compared.

Usage (from the checkout to measure):
    nice .venv/bin/python benchmarks/bench_agreement.py --works 50000 200000 [--sample 10000] [--name after]
Figures go to ``benchmarks/out/agreement.json`` (``agreement_<name>.json`` with ``--name``); ``--smoke`` runs 2,000
works.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import time
from pathlib import Path

from _common import (
    REPO,
    add_child_args,
    add_smoke_arg,
    code_label,
    git_state,
    machine,
    record,
    run_stage,
    say,
    write_child_result,
)

REASON = "The title names a survey of how Canadian journals report trials; nothing suggests it studies research. " * 2


def _labels(teacher: str, ids: list[str], rng: random.Random) -> list[dict]:
    from metacan_pipeline.vocab import CATEGORIES

    cats = [c for c in CATEGORIES if c != "insufficient_payload"]
    return [
        {
            "work_id": wid,
            "teacher": teacher,
            "model": f"{teacher}-model",
            "prompt_version": "v3",
            "prompt_sha": "0123456789abcdef",
            "record_view": "title_only" if teacher == "gemma" else "title_abstract",
            "view_hash": "h",
            "status": "labelled",
            "categories": rng.sample(cats, 1) if rng.random() < 0.2 else [],
            "domain": None,
            "study_design": rng.choice(["observational", "experimental", "review"]),
            "genre": rng.choice(["empirical", "commentary"]),
            "about_ca_system": rng.random() < 0.1,
            "about_ca_topic": rng.random() < 0.2,
            "confidence": "medium",
            "reason": REASON[:200],
            "error": None,
            "attempts": 1,
            "call_id": f"c-{teacher}-{wid}",
            "label_id": f"{teacher}-{wid}",
            "run_id": "r",
            "source": "teacher_call",
            "created_at": None,
        }
        for wid in ids
    ]


def prepare(data: Path, works: int, sample: int, chunk: int = 50_000) -> dict:
    import pyarrow as pa

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables.sampling import DESIGN_SCHEMA
    from metacan_pipeline.tables.teachers import LABELS_SCHEMA

    storage = MetacanStorage(data_dir=str(data))
    t0 = time.perf_counter()
    ids = [f"W9{i:010d}" for i in range(works)]
    step = max(1, works // sample)
    in_sample = set(ids[::step][:sample])
    rng = random.Random(17)

    def census():
        for i in range(0, works, chunk):
            yield pa.Table.from_pylist(_labels("gemma", ids[i : i + chunk], rng), schema=LABELS_SCHEMA)

    def design():
        for i in range(0, works, chunk):
            rows = [
                {
                    "id": w,
                    "stratum": "s",
                    "stratum_size": works,
                    "stratum_sample_size": len(in_sample),
                    "hash_rank": i + k,
                    "selection_probability": len(in_sample) / works if w in in_sample else 1.0,
                    "design_weight": works / len(in_sample) if w in in_sample else 1.0,
                    "in_sample": w in in_sample,
                }
                for k, w in enumerate(ids[i : i + chunk])
            ]
            yield pa.Table.from_pylist(rows, schema=DESIGN_SCHEMA)

    storage.write_table("direct_labels_gemma", census(), schema=LABELS_SCHEMA)
    storage.write_table(
        "direct_labels_codex", pa.Table.from_pylist(_labels("codex", sorted(in_sample), rng), schema=LABELS_SCHEMA)
    )
    storage.write_table("sample_design", design(), schema=DESIGN_SCHEMA)
    (data / ".prepared").write_text(json.dumps({"works": works, "sample": len(in_sample)}))
    return {"seconds": time.perf_counter() - t0, "sample": len(in_sample)}


def table_sha(storage, name: str) -> str:
    digest = hashlib.sha256()
    for batch in storage.iter_batches(name, 50_000):
        for row in batch.to_pylist():
            digest.update(json.dumps(row, sort_keys=True, default=str).encode() + b"\n")
    return digest.hexdigest()


def stage_child(data: Path) -> dict:
    import dagster as dg

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.teachers.assets import teacher_agreement

    storage = MetacanStorage(data_dir=str(data))
    t0 = time.perf_counter()
    result = dg.materialize(
        [teacher_agreement], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral()
    )
    seconds = time.perf_counter() - t0
    return {
        "success": result.success,
        "seconds": seconds,
        "agreement_rows": storage.read_table("teacher_agreement").num_rows,
        "disagreement_rows": storage.read_table("teacher_disagreements").num_rows,
        "sha256": {n: table_sha(storage, n) for n in ("teacher_agreement", "teacher_disagreements")},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--works", type=int, nargs="+", default=[50_000])
    ap.add_argument("--sample", type=int, default=10_000)
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-agreement"))
    ap.add_argument("--name", default="")
    ap.add_argument("--fresh", action="store_true", help="write the warehouse tables again")
    add_smoke_arg(ap, "2,000 works, a sample of 200")
    add_child_args(ap, ("data",))
    args = ap.parse_args(argv)
    if args.smoke:
        args.works, args.sample, args.fresh = [2_000], 200, True
    if args._stage:
        write_child_result(stage_child(Path(args.data)), args.result)
        return
    out = {"machine": machine(), "code": git_state(), "sizes": {}}
    for n in args.works:
        folder = args.scratch / f"works_{n}"
        data = folder / "data"
        if args.fresh or not (data / ".prepared").exists():
            shutil.rmtree(folder, ignore_errors=True)
            say(f"writing {n:,} census labels, {args.sample:,} sample labels and the design under {data} ...")
            say(f"  {prepare(data, n, args.sample)}")
        log = folder / f"agreement_{args.name or 'run'}.log"
        res, _, _ = run_stage(Path(__file__), "agreement", f"agreement_{n}", folder, ["--data", str(data)], log)
        out["sizes"][str(n)] = res
        m = out["machine"]
        print(
            f"works {n:>8,}: {res['seconds']:6.1f} s, peak RSS {res['peak_rss_mib']:6.0f} MiB, rows "
            f"{res['agreement_rows']}/{res['disagreement_rows']}, sha {res['sha256']['teacher_agreement'][:10]}/"
            f"{res['sha256']['teacher_disagreements'][:10]}; load {res['load_before']} -> {res['load_after']}; "
            f"{m['cpu_model']}; code {code_label(out['code'])}",
            flush=True,
        )
    record("agreement", out, name=args.name, started=out["machine"], smoke=args.smoke)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
