"""``prevalence`` and ``audit_sample`` alone at a given frame size, the code before a change beside the code now
(the figure: new / old peak RSS and seconds, to beat: below 1 with the same output; neither stage may hold a whole
table as Python rows).

For each ``--works N`` it writes, into ``<scratch>/works_<N>/data`` (kept for the next run), what a student run
leaves for the two stages: a frame of N works (route, abstract, language; 2% outside the sampling frame), the sample
design drawn by the pipeline's own ``stream_design`` (strata by route and abstract, ``--sample`` works), a census
teacher's labels on every frame work (``direct_labels_gemma``) and a sample teacher's on the sample
(``direct_labels_codex``, 10% of the works with an older row too), the MetaCan pilot imported by ``imported_labels``
(``--pilot``), predictions of one model version with its thresholds, heads and training set, and an audit protocol
locked by ``audit_protocol`` (default configuration); this is written by a child of its own, so the parent never
holds the pipeline (a child's ``ru_maxrss`` starts from its parent's RSS at the fork). Then each stage runs in a fresh
child (``_common.run_stage``: peak RSS of its process tree, the child's own ``VmHWM``, seconds inside the child, load
before and after), first with the pipeline of ``--baseline`` (``_common.code_tree``: by default ``main``, the code
before the change), then with this checkout:

- ``prevalence``: ``dg.materialize([prevalence])``; the child returns the rows, and the parent compares them
  (every count and text equal, the largest relative difference of a float);
- ``audit_sample``: the stored ``audit_sample`` is removed, then ``dg.materialize([audit_sample])`` draws the current
  protocol again; the child returns a SHA-256 of every stored row (in file order) and the drawn ids, which must be
  the same.

Ratios new / old (seconds, peak RSS) are printed per stage, with the CPU model and the load average: the machine is
shared, so the two are measured minutes apart in one run, never across runs. ``--new-only`` measures this checkout
alone (no ratio), for a size at which the old code would take more of the shared machine's memory than it should.

Usage (from the checkout to measure):
    nice .venv/bin/python benchmarks/bench_prevalence.py --works 1000000 [--sample 10000] [--baseline main]
         [--stages prevalence,audit_sample] [--scratch /tmp/metacan-prevalence] [--name after] [--new-only]
Figures go to ``benchmarks/out/prevalence.json`` (``prevalence_<name>.json`` with ``--name``); ``--smoke``: 2,000
frame works, a sample of 200, ``HEAD`` as the baseline.
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
    SHARED_DATA,
    add_child_args,
    add_smoke_arg,
    code_label,
    code_tree,
    git_state,
    machine,
    record,
    run_stage,
    say,
    synthetic_title,
    use_code,
    write_child_result,
)

MV = "metacan-v0-hybrid-0b0e0c0a0d01"
BUILD = "frame-bench00000000"
CHUNK = 50_000
#: Routes with their shares: strata of unequal sizes, as the real frame's.
ROUTES = (("ca_aff", 0.55), ("ca_aff+ca_fund", 0.2), ("about_ca", 0.1), ("ca_fund", 0.07), ("about_ca+ca_aff", 0.08))
STAGES = ("prevalence", "audit_sample")
DEFAULT_PILOT = SHARED_DATA / "metacan_pilot"


def _frame_chunk(ids: list[str], rng: random.Random):
    import pyarrow as pa

    routes, shares = zip(*ROUTES, strict=True)
    n = len(ids)
    return pa.table(
        {
            "id": ids,
            "title_text": [synthetic_title(rng) for _ in range(n)],
            "venue_id": [f"S{rng.randrange(5000)}" for _ in range(n)],
            "route_key": rng.choices(routes, shares, k=n),
            "has_abstract": [rng.random() < 0.8 for _ in range(n)],
            "language": rng.choices(["en", "fr", None], [0.9, 0.08, 0.02], k=n),
            "in_sampling_frame": [rng.random() < 0.98 for _ in range(n)],
            "frame_build_id": [BUILD] * n,
        }
    )


def _labels(teacher: str, ids: list[str], rng: random.Random) -> list[dict]:
    """One labelled row per work (a failed one in 50), categories drawn from the vocabulary (insufficient_payload
    alone in 1%), created in November 2026."""
    import datetime as dt

    from metacan_pipeline.vocab import CATEGORIES

    plain = [c for c in CATEGORIES if c != "insufficient_payload"]
    t0 = dt.datetime(2026, 11, 1)
    rows = []
    for i, wid in enumerate(ids):
        r = rng.random()
        cats = ["insufficient_payload"] if r < 0.01 else rng.sample(plain, rng.choice((0, 0, 0, 0, 1, 1, 2)))
        rows.append(
            {
                "label_id": f"{teacher}-{wid}-{i}",
                "work_id": wid,
                "teacher": teacher,
                "model": f"{teacher}-model",
                "prompt_version": "v3",
                "prompt_sha": "0123456789abcdef",
                "record_view": "title_only" if teacher == "gemma" else "title_abstract",
                "view_hash": "h",
                "status": "failed" if r > 0.98 else "labelled",
                "categories": cats,
                "domain": None,
                "study_design": "observational",
                "genre": "empirical",
                "about_ca_system": rng.random() < 0.1,
                "about_ca_topic": rng.random() < 0.2,
                "confidence": "medium",
                "reason": "The title names a survey of reporting in Canadian journals; it studies research practice.",
                "error": None,
                "attempts": 1,
                "call_id": f"c-{teacher}-{wid}",
                "run_id": "r",
                "source": "teacher_call",
                "source_ref": None,
                "created_at": t0 + dt.timedelta(seconds=i % 86_400),
            }
        )
    return rows


def _predictions(ids: list[str], rng: random.Random) -> list[dict]:
    """Predictions of :data:`MV`: scores with a long right tail, consensus (and candidate) from 0.5 on metaresearch
    and from 0.6 on bibliometrics, the census teacher's open_science label on 1% (candidate only)."""
    from metacan_pipeline.vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS, CATEGORIES, PREDICTION_STATUS

    rows = []
    for wid in ids:
        scores = [rng.betavariate(1, 12) for _ in CATEGORIES]
        scores[0] = rng.betavariate(1, 9)
        consensus = [c for c, s, t in zip(CATEGORIES[:4], scores[:4], (0.5, 2, 2, 0.6), strict=True) if s >= t]
        candidate = consensus + (["open_science"] if rng.random() < 0.01 else [])
        row = {
            "id": wid,
            "model_version": MV,
            "candidate_categories": candidate,
            "consensus_categories": consensus,
            "category_scores_codex": scores,
            "category_scores_gemma": [float(c in candidate) for c in CATEGORIES],
            "teacher_disagreement_score": 0.5,
            "threshold_uncertainty_score": 0.0,
            "prediction_status": PREDICTION_STATUS,
            "gemma_label_status": "labelled",
        }
        for t in ABOUT_CA_TARGETS:
            row.update({f"{t}_candidate": False, f"{t}_consensus": False, f"{t}_score_codex": rng.random() * 0.3})
        for t, classes in CATEGORICAL_TARGETS.items():
            row[f"{t}_scores_codex"] = [1 / len(classes)] * len(classes)
        rows.append(row)
    return rows


def prepare(data: Path, works: int, sample: int, pilot: Path) -> dict:
    import dagster as dg
    import pyarrow as pa

    from metacan_pipeline.audit.assets import audit_protocol
    from metacan_pipeline.sampling.design import DESIGN_INPUT_COLUMNS, StrataSpec, stream_design
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables.sampling import DESIGN_SCHEMA
    from metacan_pipeline.tables.student import HEADS_SCHEMA, PRED_SCHEMA, THRESHOLDS_SCHEMA, TRAINING_SET_SCHEMA
    from metacan_pipeline.tables.teachers import LABELS_SCHEMA
    from metacan_pipeline.teachers.assets import imported_labels
    from metacan_pipeline.teachers.imports.sources import ImportedLabelsConfig
    from metacan_pipeline.vocab import BINARY_TARGETS

    storage = MetacanStorage(data_dir=str(data))
    t0 = time.perf_counter()
    rng = random.Random(17)
    ids = [f"W9{i:010d}" for i in range(works)]
    chunks = [ids[i : i + CHUNK] for i in range(0, works, CHUNK)]
    storage.write_table("frame", (_frame_chunk(c, rng) for c in chunks))
    say(f"  frame written ({time.perf_counter() - t0:.0f} s)")
    fraction = min(1.0, sample / works)
    design = stream_design(
        storage.iter_batches("frame", columns=DESIGN_INPUT_COLUMNS),
        fraction,
        5,
        "bench-salt",
        StrataSpec(("route", "abstract")),
        data / "design-work",
    )
    storage.write_table("sample_design", design, schema=DESIGN_SCHEMA)
    shutil.rmtree(data / "design-work", ignore_errors=True)
    in_sample = [
        i
        for b in storage.iter_batches("sample_design", columns=["id", "in_sample"])
        for i, s in zip(b.column("id").to_pylist(), b.column("in_sample").to_pylist(), strict=True)
        if s
    ]
    say(f"  sample_design written: {len(in_sample):,} works in the sample ({time.perf_counter() - t0:.0f} s)")
    storage.write_table(
        "direct_labels_gemma", (pa.Table.from_pylist(_labels("gemma", c, rng), schema=LABELS_SCHEMA) for c in chunks)
    )
    codex = _labels("codex", in_sample, rng) + _labels("codex", in_sample[::10], rng)  # 10%: a second, newer row
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    say(f"  labels written ({time.perf_counter() - t0:.0f} s)")
    storage.write_table("predictions", (pa.Table.from_pylist(_predictions(c, rng), schema=PRED_SCHEMA) for c in chunks))
    gated = {"metaresearch": 0.5, "bibliometrics": 0.6}
    thresholds = [
        {"model_version": MV, "target": t, "gate_passed": t in gated, "gate_reason": "passed" if t in gated else
         "codex positives 12 < 20", "rate": 0.01, "n": works, "k": works // 100 if t in gated else None,
         "threshold": gated.get(t), "boundary_id": ids[0] if t in gated else None}
        for t in BINARY_TARGETS
    ]  # fmt: skip
    storage.write_table("prediction_thresholds", pa.Table.from_pylist(thresholds, schema=THRESHOLDS_SCHEMA))
    heads = [{"model_version": MV, "teacher": t, "target": h} for t in ("codex", "gemma") for h in BINARY_TARGETS]
    storage.write_table("student_heads", pa.Table.from_pylist(heads, schema=HEADS_SCHEMA))
    training = [{"model_version": MV, "teacher": "codex", "work_id": w, "venue_key": "v"} for w in in_sample[::2]]
    storage.write_table("student_training_set", pa.Table.from_pylist(training, schema=TRAINING_SET_SCHEMA))
    say(f"  predictions written ({time.perf_counter() - t0:.0f} s)")
    resources = {"storage": storage}
    instance = dg.DagsterInstance.ephemeral()
    run_config = dg.RunConfig({"imported_labels": ImportedLabelsConfig(pilot_dirs=[str(pilot)])})
    assert dg.materialize([imported_labels], resources=resources, run_config=run_config, instance=instance).success
    assert dg.materialize([audit_protocol], resources=resources, instance=instance).success
    (data / ".prepared").write_text(json.dumps({"works": works, "sample": len(in_sample)}))
    return {"seconds": round(time.perf_counter() - t0, 1), "sample": len(in_sample)}


def stage_child(stage: str, data: Path, code: str | None) -> dict:
    use_code(code)
    import dagster as dg

    import metacan_pipeline
    from metacan_pipeline.storage import MetacanStorage

    storage = MetacanStorage(data_dir=str(data))
    out: dict = {"code": str(Path(metacan_pipeline.__file__).parent)}
    if stage == "prevalence":
        from metacan_pipeline.student.assets import prevalence as asset
    else:
        from metacan_pipeline.audit.assets import audit_sample as asset

        shutil.rmtree(storage.table_dir("audit_sample"), ignore_errors=True)
    t0 = time.perf_counter()
    result = dg.materialize([asset], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    out.update(success=result.success, seconds=time.perf_counter() - t0)
    if stage == "prevalence":
        out["rows"] = storage.read_table("prevalence").to_pylist()
    else:
        digest, drawn, rows = hashlib.sha256(), [], 0
        for batch in storage.iter_batches("audit_sample"):
            for row in batch.to_pylist():
                digest.update(json.dumps(row, sort_keys=True, default=str).encode() + b"\n")
                drawn += [row["id"]] if row["in_sample"] else []
                rows += 1
        out.update(sha256=digest.hexdigest(), rows=rows, drawn=len(drawn), drawn_sha256=_sha(sorted(drawn)))
    return out


def _sha(values) -> str:
    return hashlib.sha256("\n".join(values).encode()).hexdigest()


def compare_rates(new: list[dict], old: list[dict]) -> dict:
    """Rows in the same order with every count and text equal, and the largest relative difference of a float."""
    floats = ("n_weighted", "rate", "se", "ci_low", "ci_high")
    same = len(new) == len(old) and all(
        {k: v for k, v in a.items() if k not in floats} == {k: v for k, v in b.items() if k not in floats}
        and all((a[k] is None) == (b[k] is None) for k in floats)
        for a, b in zip(new, old, strict=False)
    )
    pairs = [
        (a[k], b[k]) for a, b in zip(new, old, strict=False) for k in floats if a[k] is not None and b[k] is not None
    ]
    differ = [(x, y) for x, y in pairs if x != y]
    return {
        "rows": len(new),
        "same_rows_counts_and_texts": same,
        "floats_equal": len(pairs) - len(differ),
        "floats_different": len(differ),
        "max_abs_difference": max((abs(x - y) for x, y in differ), default=0.0),
        # relative to the old value, over values above 1e-12 (a standard error of 0 against 3e-18 is no difference)
        "max_relative_difference": max((abs(x - y) / abs(y) for x, y in differ if abs(y) > 1e-12), default=0.0),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--works", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--sample", type=int, default=10_000)
    ap.add_argument("--baseline", default="main", help="the commit whose pipeline is measured first (the old code)")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--pilot", type=Path, default=DEFAULT_PILOT)
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-prevalence"))
    ap.add_argument("--name", default="")
    ap.add_argument("--fresh", action="store_true", help="write the warehouse tables again")
    ap.add_argument("--new-only", action="store_true", help="measure this checkout only (no baseline, no ratio)")
    add_smoke_arg(ap, "2,000 frame works, a sample of 200, HEAD as the baseline")
    add_child_args(ap, ("data", "code"))
    args = ap.parse_args(argv)
    if args.smoke and not args._stage:
        args.works, args.sample, args.baseline, args.fresh = [2_000], 200, "HEAD", True
    if args._stage == "prepare":
        write_child_result(prepare(Path(args.data), args.works[0], args.sample, args.pilot), args.result)
        return
    if args._stage:
        write_child_result(stage_child(args._stage, Path(args.data), args.code), args.result)
        return
    stages = [s for s in args.stages.split(",") if s]
    old_code = None if args.new_only else code_tree(args.baseline, args.scratch)
    out = {"machine": machine(), "code": git_state(), "baseline": None if args.new_only else args.baseline, "sizes": {}}
    m = out["machine"]
    print(
        f"{m['nproc']} CPUs ({m['cpu_model']}); new: {code_label(out['code'])}"
        + ("" if old_code is None else f", old: {args.baseline} ({old_code.name})")
    )
    for n in args.works:
        folder = args.scratch / f"works_{n}"
        data = folder / "data"
        if args.fresh or not (data / ".prepared").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            say(f"writing the warehouse of {n:,} frame works under {data} ...")
            extra = ["--data", str(data), "--works", str(n), "--sample", str(args.sample), "--pilot", str(args.pilot)]
            r, _, _ = run_stage(Path(__file__), "prepare", f"prepare_{n}", folder, extra, folder / "prepare.log")
            say(f"  {r['seconds']} s, {r['sample']:,} works in the sample, peak RSS {r['peak_rss_mib']:.0f} MiB")
        figures: dict = {}
        for stage in stages:
            res = {}
            for which, code in ([] if old_code is None else [("old", str(old_code))]) + [("new", "")]:
                log = folder / f"{stage}_{which}_{args.name or 'run'}.log"
                extra = ["--data", str(data), "--code", code] if code else ["--data", str(data)]
                r, _, _ = run_stage(Path(__file__), stage, f"{stage}_{which}_{n}", folder, extra, log)
                if not r["success"]:
                    raise SystemExit(f"{stage} ({which}) did not succeed: {log}")
                res[which] = r
                print(
                    f"works {n:>9,} {stage:<12} {which}: {r['seconds']:7.1f} s, peak RSS {r['peak_rss_mib']:7.0f} MiB "
                    f"(VmHWM {r['vm_hwm_mib']:.0f}); load {r['load_before']} -> {r['load_after']}; {m['cpu_model']}",
                    flush=True,
                )
            if old_code is None:
                res["new"].pop("rows", None)
                figures[stage] = {"new": res["new"]}
                continue
            old, new = res["old"], res["new"]
            if stage == "prevalence":
                same = compare_rates(new.pop("rows"), old.pop("rows"))
            else:
                same = {k: new[k] == old[k] for k in ("sha256", "rows", "drawn", "drawn_sha256")}
                same["rows"], same["drawn"] = new["rows"], new["drawn"]
            ratio = {
                "seconds": new["seconds"] / old["seconds"],
                "peak_rss": new["peak_rss_mib"] / old["peak_rss_mib"],
                "vm_hwm": new["vm_hwm_mib"] / old["vm_hwm_mib"],
            }
            figures[stage] = {"old": old, "new": new, "same_output": same, "ratio_new_over_old": ratio}
            print(
                f"works {n:>9,} {stage:<12} new/old: seconds {ratio['seconds']:.3f}, peak RSS {ratio['peak_rss']:.3f} "
                f"(VmHWM {ratio['vm_hwm']:.3f}); same output: {same}",
                flush=True,
            )
        out["sizes"][str(n)] = figures
    ratios = {
        f"{stage}_{what}/old@{n}": figures[stage]["ratio_new_over_old"][what]
        for n, figures in out["sizes"].items()
        for stage in figures
        if "ratio_new_over_old" in figures[stage]
        for what in ("seconds", "peak_rss")
    }
    record("prevalence", out, ratios=ratios, name=args.name, started=out["machine"], smoke=args.smoke)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
