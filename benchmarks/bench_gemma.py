"""The embedded Gemma teacher's works/s per record view and per batch size: the figures that choose the
teacher's defaults (its record view, works per call and reply grammar). No baseline: the figure is works/s.

Builds the frame of the real records in ``../shared/data/openalex`` (into a temporary folder), starts the
embedded llama.cpp server once, then for each (view, works per call) labels the first ``--works`` works of
the sampling frame (with an abstract, for ``title_abstract``) through the project's labelling path into a
fresh label store, and reports works/s, seconds per call, tokens per call and how many works ended
labelled vs failed (a batch too long for the model splits, which costs calls). Run it on an idle machine:
the server uses both cores.

Each configuration runs once per ``--structured`` mode: ``gbnf`` (the compact reply grammar, the default of
the embedded teachers), ``json_object_schema`` (the reply schema as a llama.cpp grammar, which lets the
model pretty-print) and ``none`` (JSON asked for in words, then the
strict validation; the 270M model then runs to max_tokens without closing the JSON).

Usage: .venv/bin/python benchmarks/bench_gemma.py [--sizes 1 5 10 25] [--abstract-sizes 1 2 5] [--works 10]
       [--structured gbnf json_object_schema none] [--prompts v3 v4] [--smoke]
Writes ``benchmarks/out/gemma.json``; ``--smoke``: one work, one call per view, the compact grammar only.
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
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 10, 25], help="works per call, title_only view")
    ap.add_argument(
        "--abstract-sizes", type=int, nargs="*", default=[1, 2, 5], help="works per call, title_abstract view"
    )
    ap.add_argument(
        "--works", type=int, default=10, help="works labelled per configuration (at least one call's worth)"
    )
    ap.add_argument("--concurrency", type=int, default=4, help="calls in flight (the embedded server has 4 slots)")
    ap.add_argument(
        "--structured",
        nargs="+",
        default=["gbnf", "json_object_schema", "none"],
        help="structured-output modes to compare (gbnf = the compact reply grammar; json_object_schema = the schema as a llama.cpp grammar)",
    )
    ap.add_argument(
        "--prompts", nargs="+", default=None, help="prompt versions to compare (default: the gemma teacher's)"
    )
    ap.add_argument("--openalex-dir", default=str(SHARED_DATA / "openalex"))
    add_smoke_arg(ap, "one work, one call per view, the compact grammar only")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.abstract_sizes, args.works, args.structured = [1], [1], 1, ["gbnf"]
    started, rows = machine(), []

    import dagster as dg

    from metacan_pipeline.definitions import build_resources, materialize_in_process
    from metacan_pipeline.openalex.lookup import load_abstracts
    from metacan_pipeline.resources import OpenAlexFiles
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.teachers.calling.server import EmbeddedLlamaServer
    from metacan_pipeline.teachers.core.registry import load_registry
    from metacan_pipeline.teachers.labelling import label_works

    log = logging.getLogger("bench_gemma")
    with tempfile.TemporaryDirectory(prefix="bench-gemma-") as tmp:
        data = Path(tmp) / "data"
        result = materialize_in_process(
            dg.DagsterInstance.ephemeral(), build_resources(str(data), args.openalex_dir), through="frame"
        )
        assert result.success, "frame build failed"
        frame = [
            w for w in MetacanStorage(data_dir=str(data)).read_table("frame").to_pylist() if w["in_sampling_frame"]
        ]
        files = OpenAlexFiles(input_dirs=[args.openalex_dir], api_archive_dir=str(data / "openalex_api"))

        def abstracts(rows):
            return load_abstracts(
                files.path_of, [(w["id"], w["source_file"], w["source_locator"]) for w in rows if w["has_abstract"]]
            )

        gemma = load_registry(environ={})["gemma"]
        server = EmbeddedLlamaServer(log_dir=str(Path(tmp) / "logs"))
        url = server.base_url(log)
        print(
            f"{len(frame)} works in the sampling frame; {machine_line()}; server {server.n_threads} "
            f"threads, n_ctx {server.n_ctx}; prompt {gemma.prompt_version}"
        )
        print(
            f"{'prompt':6s} {'structured':18s} {'view':15s} {'per call':>8s} {'works':>5s} {'calls':>5s} {'seconds':>8s} {'works/s':>8s} {'s/work':>7s} "
            f"{'s/call':>7s} {'prompt tok/call':>15s} {'compl tok/call':>14s} {'labelled':>8s} {'failed':>6s}"
        )
        try:
            plan = [("title_only", n) for n in args.sizes] + [("title_abstract", n) for n in args.abstract_sizes]
            prompts = args.prompts or [gemma.prompt_version]
            for (view, n), mode, prompt in ((p, m, v) for p in plan for m in args.structured for v in prompts):
                pool = [w for w in frame if view == "title_only" or w["has_abstract"]]
                works = pool[: max(args.works, n)]
                spec = gemma.model_copy(
                    update={
                        "record_view": view,
                        "works_per_call": n,
                        "concurrency": args.concurrency,
                        "structured_output": mode,
                        "prompt_version": prompt,
                    }
                )
                storage = MetacanStorage(data_dir=str(Path(tmp) / f"store-{view}-{n}-{mode}-{prompt}"))
                t0 = time.perf_counter()
                stats = label_works(
                    storage, spec, works, run_id=f"bench-{view}-{n}", log=log, base_url=lambda: url, abstracts=abstracts
                )
                seconds = time.perf_counter() - t0
                calls = max(stats.calls, 1)
                rows.append(
                    {
                        "prompt": prompt,
                        "structured": mode,
                        "view": view,
                        "works_per_call": n,
                        "works": len(works),
                        "calls": stats.calls,
                        "seconds": round(seconds, 2),
                        "works_per_s": round(len(works) / seconds, 3),
                        "prompt_tokens_per_call": round(stats.prompt_tokens / calls),
                        "completion_tokens_per_call": round(stats.completion_tokens / calls),
                        "labelled": stats.outcomes["labelled"],
                        "failed": stats.outcomes["failed"],
                    }
                )
                print(
                    f"{prompt:6s} {mode:18s} {view:15s} {n:8d} {len(works):5d} {stats.calls:5d} {seconds:8.1f} {len(works) / seconds:8.3f} "
                    f"{seconds / len(works):7.2f} {seconds / calls:7.2f} {stats.prompt_tokens / calls:15.0f} "
                    f"{stats.completion_tokens / calls:14.0f} {stats.outcomes['labelled']:8d} {stats.outcomes['failed']:6d}",
                    flush=True,
                )
        finally:
            server.stop()
    record(
        "gemma",
        {"args": vars(args), "frame_works": len(frame), "configurations": rows},
        started=started,
        smoke=args.smoke,
    )


if __name__ == "__main__":
    main()
