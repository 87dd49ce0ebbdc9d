"""The frozen-holdout part of ``machine_scores`` at a given holdout size (nothing may hold a whole table in
Python memory): storing one round's holdout scores, and the maturity gate over every stored round, as the code
before the change did it (``metacan_pipeline_tests/student/rounds_before.py``: the holdout as a Python set, its texts
as a dict, the scores inserted from a list of tuples with ``executemany``, every round read into
``{round: {arm: {work_id: score}}}``) against the code now (:mod:`metacan_pipeline.student.rounds`: record batches,
Parquet staging, one round pair at a time as numpy arrays).

*Input* (``<scratch>/holdout_<N>/data``, written once by a child process and kept for the next run): a frame of
``--holdout`` + ``--extra`` works (id, venue, synthetic titles of ``_common.synthetic_title``), the first
``--holdout`` of them frozen as ``student_holdout`` directly (not by the venue rule: the size is what is measured);
a bundle of both arms (:func:`~metacan_pipeline.student.rounds.fit_arms` on ``--extra`` works' keyword labels,
joblib); ``--rounds`` - 1 stored rounds of holdout scores per arm (the bundle's scores plus noise that shrinks
round by round, rounded to 3 decimals so that many tie); the census teacher's labels of ``--census-labels``
holdout works and the sample teacher's of ``--sample-labels`` (the keyword rule of the training labels, 10%
flipped).

*Stages*, each in a fresh child process (``_common.run_stage``: seconds inside the child, peak RSS), one after the
other: ``floor`` (imports, the bundle and the label rows only: what every stage holds before it starts),
``score_before`` / ``score_after`` (the holdout read, then round ``--rounds``'s scores written; both replace the
same round with the same scores), ``gate_before`` / ``gate_after`` (the holdout read, the holdout labels, the gate
over the stored rounds: run the score stages once first, so that round ``--rounds`` is stored). Each child reports a checksum of the round it wrote (DuckDB ``bit_xor`` of
``hash(arm, work_id, score)``) or a SHA-256 of the gate's series and verdict: before and after must agree.

Usage (from the checkout to measure; ``--stages`` runs a subset, e.g. the slow ``score_before`` on its own):
    nice .venv/bin/python benchmarks/bench_machine_rounds.py --holdout 400000 [--rounds 6] [--name after]
        [--stages floor,score_before,score_after,gate_before,gate_after]
Prints one line per stage, a JSON line per stage, the ratios after/before of the pairs run (to beat: below 1 for
peak RSS, the same result), and writes ``benchmarks/out/machine_rounds.json`` (``machine_rounds_<name>.json`` with
``--name``); ``--smoke``: a holdout of 2,000 works, 3 rounds.
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
    synthetic_title,
    write_child_result,
)

STAGES = ("floor", "score_before", "score_after", "gate_before", "gate_after")
KEYWORDS = ("reproducibility", "retractions", "preprints")  # a title with one of them is metaresearch
CHUNK = 50_000


def _frame_chunk(ids: list[str], rng: random.Random):
    import pyarrow as pa

    titles = [synthetic_title(rng) for _ in ids]
    venues = [rng.randrange(20_000) for _ in ids]
    return pa.table(
        {
            "id": ids,
            "title_text": titles,
            "venue_name": [f"Journal {v}" for v in venues],
            "venue_id": [f"https://openalex.org/S{v}" for v in venues],
            "topic": [rng.choice(("Topic cardiology", "Topic ecology", "Topic nursing")) for _ in ids],
            "field": [rng.choice(("Medicine", "Earth Sciences")) for _ in ids],
            "type": ["article"] * len(ids),
            "language": ["en"] * len(ids),
            "keywords": pa.array([[] for _ in ids], pa.list_(pa.string())),
        }
    )


def _label(arm: str, wid: str, title: str, flip: bool = False) -> dict:
    meta = any(k in title.lower() for k in KEYWORDS) != flip
    return {"arm": arm, "work_id": wid, "label_id": f"{arm}-{wid}", "categories": ["metaresearch"] if meta else []}


def prepare(data: Path, holdout: int, extra: int, rounds: int, census_labels: int, sample_labels: int) -> dict:
    """Write the input (see the module docstring) under ``data``."""
    import joblib
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student.features import student_text
    from metacan_pipeline.student.holdout import HOLDOUT_VERSION
    from metacan_pipeline.student.rounds import ARMS, TARGET, fit_arms
    from metacan_pipeline.student.scoring import student_texts
    from metacan_pipeline.tables.student import ROUND_SCORES_SCHEMA

    t0 = time.perf_counter()
    storage = MetacanStorage(data_dir=str(data))
    rng, nrng = random.Random(17), np.random.default_rng(17)
    held_ids = [f"W8{i:010d}" for i in range(holdout)]
    extra_ids = [f"W9{i:010d}" for i in range(extra)]
    chunks = [_frame_chunk(held_ids[i : i + CHUNK], rng) for i in range(0, holdout, CHUNK)]
    chunks += [_frame_chunk(extra_ids[i : i + CHUNK], rng) for i in range(0, extra, CHUNK)]
    storage.write_table("frame", iter(chunks))

    # the bundle: both arms on keyword labels of the extra works (census: 5,000, sample: 2,000)
    extra_rows = pa.concat_tables(chunks[len(range(0, holdout, CHUNK)) :]).slice(0, 5_000).to_pylist()
    train = {
        a: [_label(a, r["id"], r["title_text"]) for r in extra_rows[: 5_000 if a == "gemma" else 2_000]] for a in ARMS
    }
    bundle = fit_arms(train, {r["id"]: student_text(r) for r in extra_rows})
    joblib.dump(bundle, data / "bench_bundle.joblib")

    # the frozen holdout, its labels, and rounds 1 .. rounds-1 of holdout scores
    labels = []
    with storage.connect() as con:
        con.execute("DELETE FROM student_holdout")
        con.execute("DELETE FROM machine_round_scores")
        for i, chunk in enumerate(chunks[: len(range(0, holdout, CHUNK))]):
            frozen = pa.table({"work_id": chunk["id"]})  # noqa: F841 (DuckDB replacement scan)
            con.execute(
                "INSERT INTO student_holdout SELECT work_id, 'bench-venue', ?, now(), 'bench' FROM frozen",
                [HOLDOUT_VERSION],
            )
            X = bundle.vectorizer.transform(student_texts(chunk))
            for arm in ARMS:
                score = bundle.heads[arm][TARGET].score_samples(X)
                for r in range(1, rounds):
                    noisy = np.round(np.clip(score + nrng.normal(0, 0.3 / r**2, len(score)), 0, 1), 3)
                    part = pa.table(  # noqa: F841 (DuckDB replacement scan)
                        [
                            pa.array(np.full(len(score), r, np.int32)),
                            pa.array([arm] * len(score)),
                            chunk["id"],
                            pa.array(noisy),
                        ],
                        schema=ROUND_SCORES_SCHEMA,
                    )
                    con.execute("INSERT INTO machine_round_scores SELECT * FROM part")
            ids, titles = chunk["id"].to_pylist(), chunk["title_text"].to_pylist()
            for k, (wid, title) in enumerate(zip(ids, titles, strict=True)):
                n = i * CHUNK + k
                if n * census_labels // holdout != (n + 1) * census_labels // holdout:
                    labels.append(_label("gemma", wid, title, flip=rng.random() < 0.1))
                if n * sample_labels // holdout != (n + 1) * sample_labels // holdout:
                    labels.append(_label("codex", wid, title, flip=rng.random() < 0.1))
    pq.write_table(pa.Table.from_pylist(labels), data / "gate_labels.parquet")
    sizes = {
        "holdout": holdout,
        "extra": extra,
        "rounds": rounds,
        "census_labels": census_labels,
        "sample_labels": sample_labels,
    }
    (data / ".prepared").write_text(json.dumps(sizes))
    return {"seconds": time.perf_counter() - t0, "labels": len(labels)}


def _round_checksum(storage, round_no: int) -> list:
    with storage.connect() as con:
        return list(
            con.execute(
                "SELECT count(*), bit_xor(hash(arm, work_id, score)) FROM machine_round_scores WHERE round = ?",
                [round_no],
            ).fetchone()
        )


def _gate_sha(gate) -> str:
    doc = {"passed": gate.passed, "reason": gate.reason, "series": gate.series}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def stage_child(stage: str, data: Path, rounds_run: int) -> dict:
    import joblib
    import pyarrow.parquet as pq

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student import rounds
    from metacan_pipeline.student.holdout import freeze_holdout, frozen_among
    from metacan_pipeline.student.training import frame_venues
    from metacan_pipeline_tests.student import rounds_before as before

    storage = MetacanStorage(data_dir=str(data))
    bundle = joblib.load(data / "bench_bundle.joblib")
    label_rows = pq.read_table(data / "gate_labels.parquet").to_pylist()
    labels = {a: [r for r in label_rows if r["arm"] == a] for a in rounds.ARMS}
    steps: dict[str, float] = {}
    out: dict = {}

    def step(name: str, t: float) -> float:
        now = time.perf_counter()
        steps[name] = now - t
        return now

    t0 = t = time.perf_counter()
    if stage == "score_before":
        held = before.frozen_holdout(storage)
        t = step("holdout_read", t)
        out["rows"] = before.store_holdout_scores(storage, bundle, held, rounds_run)
        step("store", t)
    elif stage == "score_after":
        freeze_holdout(storage, frame_venues(storage), "bench")
        t = step("holdout_read", t)
        out["rows"] = rounds.store_holdout_scores(storage, bundle, rounds_run)
        step("store", t)
    elif stage == "gate_before":
        held = before.frozen_holdout(storage)
        hold_labels = before.holdout_labels(labels, held)
        t = step("holdout_read_and_labels", t)
        history = before.round_history(storage)
        t = step("round_history", t)
        gate = before.maturity_gate(history, hold_labels)
        step("gate", t)
    elif stage == "gate_after":
        works, _ = freeze_holdout(storage, frame_venues(storage), "bench")
        held = frozen_among(storage, {r["work_id"] for r in label_rows})
        hold_labels = rounds.ArmInputs(labels, {}, held, works, {}).holdout_labels()
        t = step("holdout_read_and_labels", t)
        gate = rounds.maturity_gate(storage, hold_labels)
        step("gate", t)
    seconds = time.perf_counter() - t0
    if stage.startswith("score"):
        out["round_checksum"] = _round_checksum(storage, rounds_run)
    if stage.startswith("gate"):
        out.update(gate_sha=_gate_sha(gate), gate_passed=gate.passed, gate_reason=gate.reason)
        out["last_series"] = {a: {k: v[-1:] for k, v in s.items()} for a, s in gate.series.items()}
    return {"seconds": seconds, "steps": steps, **out}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--holdout", type=int, default=400_000, help="frozen holdout works")
    ap.add_argument("--extra", type=int, default=100_000, help="frame works outside the holdout")
    ap.add_argument("--rounds", type=int, default=6, help="stored rounds the gate reads (the last one scored here)")
    ap.add_argument("--census-labels", type=int, default=40_000, help="census teacher labels of holdout works")
    ap.add_argument("--sample-labels", type=int, default=2_000, help="sample teacher labels of holdout works")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-machine-rounds"))
    ap.add_argument("--name", default="")
    ap.add_argument("--fresh", action="store_true", help="write the input again")
    add_smoke_arg(ap, "a holdout of 2,000 works, 3 rounds")
    add_child_args(ap, ("data", "rounds_run", "sizes"))
    args = ap.parse_args(argv)
    if args.smoke:
        args.holdout, args.extra, args.rounds, args.census_labels, args.sample_labels = 2_000, 1_000, 3, 400, 100
    if args._stage == "prepare":
        sizes = json.loads(args.sizes)
        write_child_result(prepare(Path(args.data), **sizes), args.result)
        return
    if args._stage:
        write_child_result(stage_child(args._stage, Path(args.data), int(args.rounds_run)), args.result)
        return
    stages = [s for s in args.stages.split(",") if s]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        ap.error(f"unknown stages {unknown}: choose from {', '.join(STAGES)}")
    folder = args.scratch / f"holdout_{args.holdout}"
    data = folder / "data"
    sizes = {
        "holdout": args.holdout,
        "extra": args.extra,
        "rounds": args.rounds,
        "census_labels": args.census_labels,
        "sample_labels": args.sample_labels,
    }
    prepared = json.loads((data / ".prepared").read_text()) if (data / ".prepared").exists() else None
    if args.fresh or prepared != sizes:
        shutil.rmtree(folder, ignore_errors=True)
        data.mkdir(parents=True)
        say(
            f"writing {args.holdout:,} holdout works, {args.rounds - 1} rounds of their scores and a bundle under {data} ..."
        )
        res, _, _ = run_stage(
            Path(__file__),
            "prepare",
            "prepare",
            folder,
            ["--data", str(data), "--sizes", json.dumps(sizes)],
            folder / "prepare.log",
        )
        say(f"  prepared in {res['seconds']:.0f} s ({res['labels']:,} holdout labels)")
    out = {"machine": machine(), "code": git_state(), "sizes": sizes, "stages": {}}
    m = out["machine"]
    print(f"holdout {args.holdout:,} works x 2 arms x {args.rounds} rounds; {m['nproc']} CPUs ({m['cpu_model']})")
    for stage in stages:
        extra = ["--data", str(data), "--rounds_run", str(args.rounds)]
        res, _, _ = run_stage(Path(__file__), stage, stage, folder, extra, folder / f"{stage}_{args.name or 'run'}.log")
        out["stages"][stage] = res
        check = res.get("round_checksum") or res.get("gate_sha", "")[:16]
        print(
            f"{stage:<13} {res['seconds']:7.1f} s  peak RSS {res['peak_rss_mib']:7.0f} MiB  check {check}  "
            f"load {res['load_before']} -> {res['load_after']}  {m['cpu_model']}; code {code_label(out['code'])}",
            flush=True,
        )
    for kind in ("score", "gate"):
        old, new = out["stages"].get(f"{kind}_before"), out["stages"].get(f"{kind}_after")
        if old and new:
            same = (old.get("round_checksum"), old.get("gate_sha")) == (new.get("round_checksum"), new.get("gate_sha"))
            out[f"{kind}_ratio"] = {
                "seconds_after_over_before": new["seconds"] / old["seconds"],
                "peak_rss_after_over_before": new["peak_rss_mib"] / old["peak_rss_mib"],
                "same_result": same,
            }
            r = out[f"{kind}_ratio"]
            print(
                f"{kind}: after/before seconds {r['seconds_after_over_before']:.3f}, peak RSS "
                f"{r['peak_rss_after_over_before']:.3f}; same result: {same}",
                flush=True,
            )
    for stage, res in out["stages"].items():
        keep = ("seconds", "steps", "peak_rss_mib", "vm_hwm_mib", "load_before", "load_after")
        print(json.dumps({"stage": stage, **{k: res[k] for k in keep}, "cpu_model": m["cpu_model"]}), flush=True)
    ratios = {
        f"{kind}_{what}/before": out[f"{kind}_ratio"][f"{what}_after_over_before"]
        for kind in ("score", "gate")
        if f"{kind}_ratio" in out
        for what in ("seconds", "peak_rss")
    }
    record("machine_rounds", out, ratios=ratios, name=args.name, started=out["machine"], smoke=args.smoke)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
