"""Teacher quality before and after a prompt or view change, on the qualification's reference set. The figure:
the design-weighted kappa against the reference, to beat: the qualification's needed kappa (its verdict).

Labels the frame1k reference set (``[qualification]`` of the packaged registry: every work a frontier model
put in scope and the drawn negatives, with design weights) with the embedded Gemma for each (prompt version,
view version, structured-output mode) of ``--configs`` and each default teacher (gemma: title_only, codex: title_abstract), through
the project's labelling path into a fresh label store, and prints per configuration and teacher: the
validity rate (labelled / reference works), works called meta-research, the design-weighted kappa against
the adjudicated reference (the qualification figure) and its verdict, seconds per label; then per
configuration the design-weighted kappa between the two teachers (agreement with the sample teacher).
The same server and model for every configuration: only the prompt, the view and the reply grammar differ
(``json_object_schema``: llama.cpp's grammar from the reply schema, which lets the model pretty-print;
``gbnf``: the compact reply grammar, the embedded teachers' default).

Usage: .venv/bin/python benchmarks/bench_teacher_quality.py [--configs v2:1:json_object_schema v3:2:gbnf] [--works N]
Writes ``benchmarks/out/teacher_quality.json``; ``--smoke``: the first 4 reference works, one configuration.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from _common import SHARED_DATA, add_smoke_arg, machine, machine_line, record


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--configs",
        nargs="+",
        default=["v2:1:json_object_schema", "v3:2:json_object_schema", "v3:2:gbnf"],
        help="prompt_version:view_version:structured_output (the mode may be left out: gbnf)",
    )
    ap.add_argument("--pilot-dir", default=str(SHARED_DATA / "metacan_pilot"))
    ap.add_argument("--works", type=int, default=None, help="label only the first N reference works (default: all)")
    add_smoke_arg(ap, "the first 4 reference works, one configuration")
    args = ap.parse_args()
    if args.smoke:
        args.configs, args.works = ["v3:2:gbnf"], 4
    started, results = machine(), []

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.teachers.calling.server import EmbeddedLlamaServer
    from metacan_pipeline.teachers.core.agreement import kappa
    from metacan_pipeline.teachers.core.registry import load_registry
    from metacan_pipeline.teachers.export import current_labels
    from metacan_pipeline.teachers.labelling import label_works
    from metacan_pipeline.teachers.qualification import draw_reference_set, judge, load_qualification

    log = logging.getLogger("bench_teacher_quality")
    cfg = load_qualification()
    works = draw_reference_set(Path(args.pilot_dir), cfg, set())[: args.works]
    texts = {w.row["id"]: w.abstract for w in works}
    weight = {w.row["id"]: w.weight for w in works}
    registry = load_registry(environ={})
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        server = EmbeddedLlamaServer(log_dir=str(Path(tmp) / "logs"))
        url = server.base_url(log)
        print(
            f"{len(works)} reference works ({sum(w.reference for w in works)} positive); {machine_line()}; "
            f"server {server.n_threads} threads, {server.n_parallel} slots"
        )
        print(
            f"{'prompt':6s} {'view':4s} {'grammar':18s} {'teacher':7s} {'valid':>7s} {'positive':>8s} {'kappa':>7s} {'needed':>7s} "
            f"{'verdict':>14s} {'s/label':>7s}"
        )
        try:
            for config in args.configs:
                prompt, version, mode = (config.split(":") + ["gbnf"])[:3]
                said: dict[str, dict[str, int]] = {}
                for name in ("gemma", "codex"):
                    spec = registry[name].model_copy(
                        update={"prompt_version": prompt, "view_version": int(version), "structured_output": mode}
                    )
                    storage = MetacanStorage(data_dir=str(Path(tmp) / f"store-{config}-{name}"))
                    t0 = time.perf_counter()
                    stats = label_works(
                        storage,
                        spec,
                        [w.row for w in works],
                        run_id=f"bench-{config}",
                        log=log,
                        base_url=lambda: url,
                        abstracts=lambda rows: {r["id"]: texts[r["id"]] for r in rows},
                    )
                    seconds = time.perf_counter() - t0
                    rows = current_labels(storage, spec, stats.view_hashes).to_pylist()
                    said[name] = {
                        r["work_id"]: int("metaresearch" in (r["categories"] or []))
                        for r in rows
                        if r["status"] == "labelled"
                    }
                    r = judge(works, said[name], cfg)
                    k = "n/a" if r.kappa is None else f"{r.kappa:.3f}"
                    results.append(
                        {
                            "config": config,
                            "teacher": name,
                            "valid_rate": r.labelled / len(works),
                            "positives": r.teacher_positives,
                            "kappa": r.kappa,
                            "needed_kappa": r.needed_kappa,
                            "verdict": r.status,
                            "seconds_per_label": round(seconds / len(works), 3),
                        }
                    )
                    print(
                        f"{prompt:6s} {version:4s} {mode:18s} {name:7s} {r.labelled / len(works):7.1%} {r.teacher_positives:8d} "
                        f"{k:>7s} {r.needed_kappa:7.3f} {r.status:>14s} {seconds / len(works):7.2f}",
                        flush=True,
                    )
                both = sorted(set(said["gemma"]) & set(said["codex"]))
                k = kappa([said["gemma"][i] for i in both], [said["codex"][i] for i in both], [weight[i] for i in both])
                print(
                    f"{prompt:6s} {version:4s} {mode:18s} gemma vs codex: weighted kappa {k} on {len(both)} works",
                    flush=True,
                )
                results.append({"config": config, "teachers": "gemma vs codex", "kappa": k, "works": len(both)})
        finally:
            server.stop()
    figures = {"reference_works": len(works), "configurations": results}
    record("teacher_quality", figures, started=started, smoke=args.smoke)


if __name__ == "__main__":
    main()
