"""``metacan score`` benchmark: a list of real titles scored end to end, against reading and writing the same list
alone, measured in the same process run.

Usage::

    .venv/bin/python benchmarks/bench_score_list.py [--works 200000] [--formats csv parquet jsonl]
                                                    [--scratch /tmp/metacan-bench-score] [--smoke]

*Inputs* (built under ``--scratch``; the warehouse is reused while its recipe is unchanged):

- The warehouse: a frame of every titled real OpenAlex work under shared/data/openalex and openalex_more (about
  1,800 works, their fields as the frame takes them: :func:`metacan_pipeline.openalex.works.student_view`), census
  (gemma) labels on every work and sample (codex) labels on every other work (design weight 2), each binary target
  positive on a salted-hash share of 10-40% of the works and every categorical target spread over four classes, so
  that every head is a fitted logistic regression (a constant head would score for free); the teachers' qualification
  recorded as passed; then ``student_heads`` and ``predictions`` materialized (the default feature backend), which
  publish the model version and write ``student_scores`` (the percentiles' frame).
- The list: ``--works`` rows of CSV ``id,title,venue,topic,field,type,language``, the real works repeated in turn
  with distinct ids ``L<9 digits>``.

*Stages*, in this order, in this process (the model's imports are warm for both):

- ``baseline`` (before and after the scoring runs): :func:`~metacan_pipeline.student.list_input.read_list` over the
  list and :class:`~metacan_pipeline.student.score_list.TableWriter` writing each batch's ``id, title`` to the same
  output format: reading and writing alone;
- ``score_<fmt>`` per ``--formats``: ``open_scorer`` (the model loaded and checked against its SHA-256, the frame's
  quantiles computed in DuckDB) plus ``score_file`` (read, featurise, score, percentiles, write), timed together;
- ``featurise_score``: the list's texts held in memory, then the vectorizer and every head alone (no reading or
  writing): what the student itself costs;
- ``cli``: ``python -m metacan_pipeline.cli score LIST --out OUT.csv`` in a child process, wall time including the
  interpreter's start and the imports, and its peak RSS (``ru_maxrss``: memory stays one batch as the list grows).

Ratios: ``score_<fmt>_works_per_s / baseline_works_per_s`` (the share of the reading-and-writing speed that scoring
keeps; below 1) and ``cli_works_per_s / 2000`` (the target: at least 2,000 works/s end to end on 2 cores).
Output: a table on stdout and ``benchmarks/out/score_list.json``; ``--smoke``: 2,000 works.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _common as common

TARGET_WORKS_PER_S = 2_000.0
RECIPE_VERSION = "1"


def _real_works() -> list[dict]:
    from metacan_pipeline.openalex.ids import short_id
    from metacan_pipeline.openalex.reader import Record, iter_records
    from metacan_pipeline.openalex.works import _venue, student_view

    works: dict[str, dict] = {}
    for root in (common.SHARED_DATA / "openalex", common.SHARED_DATA / "openalex_more"):
        for rec in iter_records(root):
            if isinstance(rec, Record) and rec.kind == "W":
                view = student_view(rec.data)
                if view["title_text"]:
                    works[short_id(rec.data["id"])] = {**view, "venue_id": _venue(rec.data)[0]}
    return [{"id": k, **v} for k, v in sorted(works.items())]


def _share(wid: str, target: str, rate: float) -> bool:
    h = int.from_bytes(hashlib.sha256(f"bench:{target}:{wid}".encode()).digest()[:8], "big")
    return h / 2**64 < rate


def build_warehouse(folder: Path, works: list[dict]) -> Path:
    """The warehouse of the module docstring under ``folder/data`` (reused when its recipe file matches)."""
    import pyarrow as pa

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student.assets import predictions, student_heads
    from metacan_pipeline.tables.teachers import LABELS_SCHEMA
    from metacan_pipeline.vocab import CATEGORICAL_TARGETS, CATEGORIES
    from metacan_pipeline_tests.builders.student import record_qualification, run_student, student_label

    recipe = {"version": RECIPE_VERSION, "works": [w["id"] for w in works]}
    data = folder / "data"
    marker = folder / "recipe.json"
    if marker.exists() and json.loads(marker.read_text()) == recipe:
        return data
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    storage = MetacanStorage(data_dir=str(data))
    frame = [
        {
            k: w[k]
            for k in ("id", "title_text", "venue_name", "venue_id", "topic", "field", "type", "language", "keywords")
        }
        for w in works
    ]
    storage.write_table("frame", pa.Table.from_pylist(frame))
    storage.write_table(
        "sample_design",
        pa.Table.from_pylist(
            [{"id": w["id"], "in_sample": i % 2 == 0, "design_weight": 2.0} for i, w in enumerate(works)]
        ),
    )
    rates = {c: 0.10 + 0.03 * i for i, c in enumerate(c for c in CATEGORIES if c != "insufficient_payload")}

    def label(teacher: str, w: dict) -> dict:
        row = student_label(teacher, w["id"], w["title_text"])
        cats = [c for c, r in rates.items() if _share(w["id"], c, r)]
        row["categories"] = cats
        row["domain"] = CATEGORICAL_TARGETS["domain"][1 + int(w["id"][1:]) % 4] if "metaresearch" in cats else None
        for t in ("study_design", "genre"):
            row[t] = CATEGORICAL_TARGETS[t][int(hashlib.sha256(f"{t}{w['id']}".encode()).hexdigest(), 16) % 4]
        row["about_ca_system"] = _share(w["id"], "about_ca_system", 0.15)
        row["about_ca_topic"] = _share(w["id"], "about_ca_topic", 0.30)
        return row

    storage.write_table(
        "direct_labels_gemma", pa.Table.from_pylist([label("gemma", w) for w in works], schema=LABELS_SCHEMA)
    )
    storage.write_table(
        "direct_labels_codex",
        pa.Table.from_pylist([label("codex", w) for i, w in enumerate(works) if i % 2 == 0], schema=LABELS_SCHEMA),
    )
    record_qualification(storage, "gemma")
    record_qualification(storage, "codex")
    run_student(storage, student_heads, predictions)
    marker.write_text(json.dumps(recipe))
    return data


def write_list(path: Path, works: list[dict], n: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "title", "venue", "topic", "field", "type", "language"])
        for i in range(n):
            x = works[i % len(works)]
            w.writerow(
                [f"L{i:09d}", x["title_text"], x["venue_name"], x["topic"], x["field"], x["type"], x["language"]]
            )


def stage_baseline(src: Path, out: Path) -> float:
    import pyarrow as pa

    from metacan_pipeline.student.list_input import BATCH_SIZE, batches, read_list
    from metacan_pipeline.student.score_list import TableWriter

    schema = pa.schema([("id", pa.string()), ("title", pa.string())])
    t0 = time.perf_counter()
    writer = TableWriter(out, schema)
    for works, _ in batches(read_list(src), BATCH_SIZE):
        writer.write(
            pa.table({"id": [w.id for w in works], "title": [w.fields["title_text"] for w in works]}, schema=schema)
        )
    writer.close()
    return time.perf_counter() - t0


def stage_score(data: Path, src: Path, out: Path) -> tuple[float, dict]:
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student.list_input import read_list
    from metacan_pipeline.student.score_list import open_scorer, score_file

    t0 = time.perf_counter()
    scorer = open_scorer(MetacanStorage(data_dir=str(data)))
    t_open = time.perf_counter() - t0
    result = score_file(scorer, read_list(src), out, progress=False)
    total = time.perf_counter() - t0
    return total, {
        "open_scorer_s": round(t_open, 3),
        "works": result.works,
        "rejects": result.rejects,
        "model_version": result.model_version,
        "feature_kind": scorer.bundle.feature_kind,
        "heads": len(scorer.heads),
        "columns": len(scorer.columns),
    }


def stage_featurise_score(data: Path, src: Path) -> float:
    import pyarrow as pa

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student.features import STUDENT_FIELDS
    from metacan_pipeline.student.list_input import InputWork, read_list
    from metacan_pipeline.student.score_list import open_scorer
    from metacan_pipeline.student.scoring import student_texts
    from metacan_pipeline.tables.frame import FRAME_SCHEMA

    scorer = open_scorer(MetacanStorage(data_dir=str(data)), with_percentiles=False)
    works = [w for w in read_list(src) if isinstance(w, InputWork)]
    table = pa.table(
        {f: pa.array([w.fields.get(f) for w in works], FRAME_SCHEMA.field(f).type) for f in STUDENT_FIELDS}
    )
    texts = student_texts(table)
    t0 = time.perf_counter()
    X = scorer.bundle.vectorizer.transform(texts)
    for heads in scorer.bundle.heads.values():
        for head in heads.values():
            head.score_samples(X)
    return time.perf_counter() - t0


def stage_cli(data: Path, src: Path, out: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of ``metacan score`` in a child process. The peak is the child's own
    ``VmHWM`` (its memory after ``exec``), read every 0.2 s while it runs: ``ru_maxrss`` would count the parent's
    pages the child held between ``fork`` and ``exec``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("METACAN_DATA")}
    env["PYTHONPATH"] = str(common.REPO)
    log = out.with_suffix(".stderr")
    t0 = time.perf_counter()
    with open(log, "wb") as err:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "metacan_pipeline.cli",
                "score",
                str(src),
                "--out",
                str(out),
                "--data-dir",
                str(data),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        hwm = 0
        while child.poll() is None:
            hwm = max(hwm, common.proc_kib(f"/proc/{child.pid}/status", "VmHWM") or 0)
            time.sleep(0.2)
    wall = time.perf_counter() - t0
    if child.returncode != 0:
        raise SystemExit(f"metacan score exited {child.returncode}:\n{log.read_text()[-3000:]}")
    return wall, hwm / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--works", type=int, default=200_000, help="rows of the list scored")
    ap.add_argument("--formats", nargs="+", default=["csv", "parquet", "jsonl"], choices=["csv", "parquet", "jsonl"])
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-bench-score"))
    ap.add_argument("--name", default="", help="result file benchmarks/out/score_list_<name>.json")
    common.add_smoke_arg(ap, "2,000 works")
    args = ap.parse_args()
    n = 2_000 if args.smoke else args.works
    started = common.run_info()
    common.say(f"bench_score_list: {n:,} works; {common.machine_line()}")
    works = _real_works()
    t0 = time.perf_counter()
    data = build_warehouse(args.scratch / "warehouse", works)
    common.say(f"warehouse ready ({len(works):,} real frame works) in {time.perf_counter() - t0:.1f} s")
    src = args.scratch / f"list_{n}.csv"
    write_list(src, works, n)
    outs = args.scratch / "out"
    outs.mkdir(parents=True, exist_ok=True)

    figures: dict = {"works": n, "frame_works": len(works), "list_bytes": src.stat().st_size}
    baseline_s = [stage_baseline(src, outs / "baseline.csv")]
    for fmt in args.formats:
        seconds, info = stage_score(data, src, outs / f"scored.{fmt}")
        figures[f"score_{fmt}_s"] = round(seconds, 3)
        figures[f"score_{fmt}_works_per_s"] = round(n / seconds, 1)
        figures[f"score_{fmt}_output_bytes"] = (outs / f"scored.{fmt}").stat().st_size
        figures[f"score_{fmt}_open_scorer_s"] = info.pop("open_scorer_s")
        figures.update(info)
    fs = stage_featurise_score(data, src)
    figures["featurise_score_s"] = round(fs, 3)
    figures["featurise_score_works_per_s"] = round(n / fs, 1)
    cli_s, cli_rss = stage_cli(data, src, outs / "cli.csv")
    figures["cli_s"] = round(cli_s, 3)
    figures["cli_peak_rss_mib"] = round(cli_rss, 1)
    figures["cli_works_per_s"] = round(n / cli_s, 1)
    baseline_s.append(stage_baseline(src, outs / "baseline.csv"))
    base = common.mean(baseline_s)
    figures["baseline_s"] = [round(s, 3) for s in baseline_s]
    figures["baseline_works_per_s"] = round(n / base, 1)
    ratios = {
        f"score_{fmt}_works_per_s/baseline": common.ratio(figures[f"score_{fmt}_works_per_s"], n / base)
        for fmt in args.formats
    }
    ratios["cli_works_per_s/target_2000"] = common.ratio(figures["cli_works_per_s"], TARGET_WORKS_PER_S)

    common.say(f"\n{'stage':<22}{'seconds':>10}{'works/s':>12}")
    common.say(f"{'baseline (read+write)':<22}{base:>10.2f}{n / base:>12,.0f}")
    for fmt in args.formats:
        common.say(
            f"{'score -> ' + fmt:<22}{figures[f'score_{fmt}_s']:>10.2f}{figures[f'score_{fmt}_works_per_s']:>12,.0f}"
        )
    common.say(f"{'featurise+score only':<22}{fs:>10.2f}{n / fs:>12,.0f}")
    common.say(f"{'metacan score (CLI)':<22}{cli_s:>10.2f}{n / cli_s:>12,.0f}")
    common.say(f"metacan score (CLI) peak RSS: {cli_rss:,.0f} MiB")
    common.say(
        f"\nend to end (CLI, csv): {n / cli_s:,.0f} works/s, target {TARGET_WORKS_PER_S:,.0f}: "
        f"{common.verdict(n / cli_s >= TARGET_WORKS_PER_S)}; feature backend {figures['feature_kind']}; "
        f"CPU {common.cpu_model()}"
    )
    common.record("score_list", figures, ratios=ratios, name=args.name, started=started, smoke=args.smoke)


if __name__ == "__main__":
    main()
