"""Student benchmark: training every head, and scoring a frame through ``write_predictions``, each against
bare scikit-learn measured in the same benchmark run.

Usage::

    .venv/bin/python benchmarks/bench_student.py [--sizes 100000 1000000] [--train-works 10000]
                                                [--scratch /tmp/metacan-bench-student] [--stages train,score]
                                                [--titles synthetic|repeat] [--no-repeat-baseline] [--profile]

*Inputs* (built once under ``--scratch`` and reused while their recipe is unchanged):

- The real frame rows: the scale input of the frame benchmark (make_scale_input.py, 50,000 real
  OpenAlex work records under fresh ids) through the frame build exactly as bench_frame.py runs it
  (``openalex_inventory``, ``canadian_entities``, ``frame_parts``, ``frame`` on an ephemeral instance).
  A 1,000,000-row frame cannot be built that way here: the admission routes keep about 5.6% of the
  shared records (1,000,000 input works gave a 56,243-row frame, 4.07 GB of gzip, 105 s of frame build
  plus 91 s for a bare scan; see benchmarks/out/frame_1000000.json), so 1M frame rows would need about
  18M input works (~72 GB of gzip, ~30 min of frame build plus generation).
- The scored frames ``<scratch>/score_<N>/data``: N rows made by repeating those real frame rows (every
  column kept, venues included) with fresh ids ``W7<10 digits>``. With ``--titles synthetic`` (default)
  each row's ``title``/``title_text`` is a fresh synthetic title: 6-16 words drawn from the word
  frequencies of the 2,393 real titles under shared/data/metacan_pilot, plus keyword phrases that carry
  the labels (below). The real frame has only ~45 distinct titles; repeated 1M times they would let
  Parquet dictionary-encode every score column, tie every quota threshold and leave the TF-IDF
  vocabulary nearly empty. ``--titles repeat`` keeps the real titles as they are (for comparison).
  The first ``--train-works`` rows are the labelled works; the 100k frame is the 1M frame's prefix.
- Labels, derived from title keywords: each binary target has keyword phrases inserted at a fixed rate
  (research_integrity 0.15% and insufficient_payload 0.1%, so both fall under the support gate's 20
  positives at 10,000 works; the others 0.5%-8%); each teacher's label is the keyword truth with
  independent noise (gemma: 10% false negatives and false positives at 10% of the target's rate;
  codex 5% / 5%, so the rare targets stay rare in both teachers' labels); categorical
  values (domain, study_design, genre) follow their own keywords, 85% kept by each teacher, 3% null.
  gemma labels every frame work (coverage ``all``: table ``direct_labels_gemma`` of N rows, 2% failed
  calls, and 2% older duplicate labels that the predictions query must drop, which export_labels never
  writes: a little more work than the real table); codex labels the training works
  with design weights 10/20/50/100 from four strata (coverage ``sample``).
- The bundle: ``fit_heads`` on those labels; ``bundle.gates`` and ``bundle.rates`` exactly as
  ``student_heads`` derives them (``support_gates`` and the design-weighted codex rate).

*Stages*, one after the other, never overlapping, each in a fresh child process
(``python bench_student.py --_stage ...``) whose RSS (summed over its process tree, sampled every 0.2 s)
and ``ru_maxrss`` the parent records as bench_frame.py does:

- ``train``: in one process, the bare scikit-learn loop (TfidfVectorizer with the same parameters
  fitted on the same texts, then one LogisticRegression per head, same parameters, same rows, labels and
  weights, BLAS threads as the machine sets them), then ``train_bundle``, then the bare loop again;
  ratio = train_bundle / mean(bare). Then the bare loop once more with BLAS on one thread (as
  ``heads.fit_logreg`` fits), and one binary fit and one 12-class fit timed alone.
- ``score_baseline`` (at the largest size, before and after): the N texts held in memory (read and
  joined before the clock starts), then ``bundle.vectorizer.transform(texts)`` and every head's
  ``score(X)``: the bare scikit-learn cost of the same heads, no Parquet, no DuckDB.
- ``score`` at each size: ``write_predictions(storage, bundle)`` (student_scores + quota calibration +
  the DuckDB predictions query + Parquet writes), timed around the call, with a breakdown from timing
  ``MetacanStorage.write_table`` and ``pyarrow.parquet.write_table`` in the child.

Targets (printed, not asserted): scoring 1,000,000 works < 120 s with peak RSS flat between
100,000 and 1,000,000 works; training all heads on 10,000 labelled works < 60 s.
Output: a table on stdout and ``benchmarks/out/student.json``; ``--smoke``: 500 works scored, 300 labelled, from a
2,000-work scale input. ``--profile`` also writes cProfile stats
of the largest scoring run to ``benchmarks/out/profile_student_score_<N>.pstats``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import _common as common
from student_inputs import SOURCE_WORKS, prepare
from student_stages import stage_score, stage_score_baseline, stage_train

TARGET_SCORE_S = 120.0
TARGET_TRAIN_S = 60.0


def run_stage_in_child(args: argparse.Namespace) -> None:
    if args._stage == "train":
        res = stage_train(Path(args.input), Path(args.bundle))
    elif args._stage == "score_baseline":
        res = stage_score_baseline(Path(args.data), Path(args.bundle))
    elif args._stage == "score":
        res = stage_score(Path(args.data), Path(args.bundle), args.profile_to)
    else:
        raise SystemExit(f"unknown stage {args._stage}")
    common.write_child_result(res, args.result)


# ------------------------------------------------------------------------------------------------
# parent: spawn, sample, collect
# ------------------------------------------------------------------------------------------------
def spawn(stage: str, key: str, scratch: Path, extra: list[str]) -> dict:
    """Run one stage in a fresh child (_common.run_stage, RSS only); its result with its RSS samples."""
    res, samples, t0 = common.run_stage(Path(__file__), stage, key, scratch, extra, scratch / f"{key}.log", pss=False)
    res["rss_samples_mib"] = common.thin_samples(samples, t0, 300)
    return res


def print_table(r: dict) -> None:
    code = r["code"]
    print(f"\n=== student benchmark: code {common.code_label(code)} (branch {r['branch']}), package {r['package']} ===")
    print(f"command: {r['command']}")
    print(
        f"machine: {r['machine']['nproc']} cores ({r['machine']['cpu_model']}), load at start {r['machine']['load_at_start']}, at end {r['machine'].get('load_at_end')}"
    )
    inp = r["inputs"]
    print(
        f"inputs: {inp['source_frame_rows']:,} real frame rows ({inp['source_frame_distinct_titles']} distinct titles) from a "
        f"{SOURCE_WORKS:,}-work scale input, repeated with fresh ids; titles: {inp['recipe']['titles']}"
    )
    print(
        f"{'stage':<46}{'works':>10}{'seconds':>9}{'works/s':>10}{'vs base':>9}{'peak RSS MiB':>14}  load before -> after"
    )
    st = r["stages"]
    if "train" in st:
        t = st["train"]
        base = common.mean(t[k]["seconds"] for k in ("baseline", "baseline_after"))
        n = t["train_works"]["gemma"]
        for label, s in (
            ("train baseline: bare sklearn loop", t["baseline"]["seconds"]),
            ("train_bundle (2 teachers x 14 heads)", t["train_bundle_seconds"]),
            ("train baseline again", t["baseline_after"]["seconds"]),
            ("variant: bare loop, BLAS on one thread", t["baseline_one_blas_thread"]["seconds"]),
        ):
            print(
                f"{label:<46}{n:>10,}{s:>9.1f}{n / s:>10.0f}{s / base:>9.2f}{t['peak_rss_mib']:>14.0f}  {t['load_before']} -> {t['load_after']}"
            )
        print(
            f"  one binary LR fit {t['one_binary_fit_seconds']:.2f} s, one 12-class fit {t['one_categorical_fit_seconds']:.2f} s; "
            f"{t['heads_trained']} of 28 heads trained; {t['features']:,} TF-IDF features; gated binary heads: {t['gated_binary']}"
        )
    base_keys = [k for k in st if k.startswith("score_baseline")]
    sbase = common.mean(st[k]["seconds"] for k in base_keys) if base_keys else None
    for k, s in st.items():
        if k == "train":
            continue
        label = {
            "score_baseline": "score baseline: transform + 28 heads in memory",
            "score_baseline_after": "score baseline again",
        }.get(k, f"write_predictions ({s['rows']:,} works)")
        vs = f"{s['seconds'] / sbase:>9.2f}" if sbase and s["rows"] == r["stages"][base_keys[0]]["rows"] else f"{'':>9}"
        print(
            f"{label:<46}{s['rows']:>10,}{s['seconds']:>9.1f}{s['rows'] / s['seconds']:>10.0f}{vs}{s['peak_rss_mib']:>14.0f}  "
            f"{s['load_before']} -> {s['load_after']}"
        )
        if "breakdown" in s:
            b = s["breakdown"]
            print(
                f"    scoring {b['student_scores_scoring']:.1f} s + scores Parquet {b['student_scores_parquet_writes']:.1f} s; "
                f"quotas {b['quotas_and_count']:.1f} s; predictions query {b['predictions_query']:.1f} s + Parquet "
                f"{b['predictions_parquet_writes']:.1f} s; rest {b['thresholds_and_rest']:.1f} s"
            )
    print(
        "ratios: against the mean of the baseline runs of this benchmark run (train: same process; score: same input, fresh child). "
        "peak RSS = max(wait4 ru_maxrss, RSS summed over the child's process tree sampled every 0.2 s)"
    )
    for line in r["verdicts"]:
        print(line)
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--train-works", type=int, default=10_000)
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-bench-student"))
    ap.add_argument(
        "--stages", default="train,score", help="comma list: train, score (score needs a bundle from train)"
    )
    ap.add_argument("--titles", choices=("synthetic", "repeat"), default="synthetic")
    ap.add_argument("--no-repeat-baseline", action="store_true", help="run each baseline once, not before and after")
    ap.add_argument("--profile", action="store_true", help="cProfile the largest write_predictions run")
    common.add_smoke_arg(ap, "500 works scored, 300 labelled, from a 2,000-work scale input")
    common.add_child_args(ap, ("input", "data", "bundle", "profile_to"))
    args = ap.parse_args(argv)
    source_works = SOURCE_WORKS
    if args.smoke and not args._stage:
        args.sizes, args.train_works, source_works = [500], 300, 2_000
    if args._stage:
        run_stage_in_child(args)
        return
    import metacan_pipeline

    scratch = args.scratch.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    common.OUT.mkdir(parents=True, exist_ok=True)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    r: dict = {
        "command": " ".join([sys.executable, *sys.argv]) if argv is None else " ".join(["bench_student.py", *argv]),
        "cwd": os.getcwd(),
        "package": metacan_pipeline.__file__,
        "branch": common.git_branch(),
        "code": common.git_state(),
        "machine": common.machine(),
        "stages": {},
        "verdicts": [],
    }
    t0 = time.perf_counter()
    r["inputs"] = prepare(scratch, args.sizes, args.train_works, args.titles, source_works)
    r["inputs"]["prepare_seconds"] = time.perf_counter() - t0
    tag = r["inputs"]["tag"]
    bundle_file = scratch / f"bundle_{tag}.joblib"
    if "train" in stages:
        common.say(f"stage train ({args.train_works:,} labelled works, load {common.loadavg()}) ...")
        r["stages"]["train"] = spawn(
            "train", "train", scratch, ["--input", r["inputs"]["train_file"], "--bundle", str(bundle_file)]
        )
    elif not bundle_file.exists():
        raise SystemExit(f"{bundle_file} is missing: run with --stages train,score first")
    if "score" in stages:
        big = max(args.sizes)
        frames = r["inputs"]["frames"]
        order = [("score_baseline", "score_baseline", big)] + [("score", f"score_{n}", n) for n in sorted(args.sizes)]
        if not args.no_repeat_baseline:
            order.append(("score_baseline", "score_baseline_after", big))
        for stage, key, n in order:
            data = frames[n if stage == "score" else big]["data_dir"]
            extra = ["--data", data, "--bundle", str(bundle_file)]
            if stage == "score" and args.profile and n == big:
                extra += ["--profile_to", str(common.OUT / f"profile_student_score_{n}.pstats")]
            common.say(f"stage {key} (load {common.loadavg()}) ...")
            res = spawn(stage, key, scratch, extra)
            if res["rows"] != n:
                raise SystemExit(f"stage {key} scored {res['rows']} works, expected {n}")
            r["stages"][key] = res
            common.say(
                f"stage {key}: {res['seconds']:.1f} s, {n / res['seconds']:.0f} works/s, peak RSS {res['peak_rss_mib']:.0f} MiB "
                f"(load {res['load_before']} -> {res['load_after']})"
            )
    r["machine"]["load_at_end"] = common.loadavg()
    st = r["stages"]
    if "train" in st:
        t = st["train"]
        base = common.mean(t[k]["seconds"] for k in ("baseline", "baseline_after"))
        r["train_ratio_vs_baseline"] = t["train_bundle_seconds"] / base
        r["verdicts"].append(
            f"train_bundle on {t['train_works']['gemma']:,} labelled works: {t['train_bundle_seconds']:.1f} s "
            f"(target < {TARGET_TRAIN_S:.0f} s: {common.verdict(t['train_bundle_seconds'] < TARGET_TRAIN_S)}); "
            f"{r['train_ratio_vs_baseline']:.2f} x the bare sklearn loop ({base:.1f} s), "
            f"{t['train_bundle_seconds'] / t['baseline_one_blas_thread']['seconds']:.2f} x the bare loop on one BLAS thread "
            f"({t['baseline_one_blas_thread']['seconds']:.1f} s)"
        )
    score_keys = sorted(
        (k for k in st if k.startswith("score_") and not k.startswith("score_baseline")), key=lambda k: st[k]["rows"]
    )
    if score_keys:
        big = st[score_keys[-1]]
        base_keys = [k for k in st if k.startswith("score_baseline")]
        sbase = common.mean(st[k]["seconds"] for k in base_keys)
        r["score_ratio_vs_baseline"] = big["seconds"] / sbase
        r["verdicts"].append(
            f"write_predictions on {big['rows']:,} works: {big['seconds']:.1f} s, {big['rows'] / big['seconds']:.0f} works/s "
            f"(target < {TARGET_SCORE_S:.0f} s: {common.verdict(big['seconds'] < TARGET_SCORE_S)}); "
            f"{r['score_ratio_vs_baseline']:.2f} x the bare transform + heads ({sbase:.1f} s)"
        )
        if len(score_keys) > 1:
            small = st[score_keys[0]]
            r["rss_ratio_big_over_small"] = big["peak_rss_mib"] / small["peak_rss_mib"]
            r["verdicts"].append(
                f"peak RSS of write_predictions: {small['rows']:,} works {small['peak_rss_mib']:.0f} MiB, "
                f"{big['rows']:,} works {big['peak_rss_mib']:.0f} MiB (ratio {r['rss_ratio_big_over_small']:.2f}; "
                f"flat means about 1)"
            )
    print_table(r)
    ratios = {
        k: round(r[k], 3)
        for k in ("train_ratio_vs_baseline", "score_ratio_vs_baseline", "rss_ratio_big_over_small")
        if k in r
    }
    common.record("student", r, ratios=ratios, started=r["machine"], smoke=args.smoke)


if __name__ == "__main__":
    main()
