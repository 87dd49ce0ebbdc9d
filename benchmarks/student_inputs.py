"""The student benchmark's inputs on disk, built once under the scratch folder and reused while their recipe
is unchanged: the real frame rows (a frame built by bench_frame.py's frame stage from a SOURCE_WORKS scale
input), the scored frames ``score_<N>/data`` (those rows repeated under fresh ids, synthetic titles, and the
gemma labels of every work) and the training set (the first works labelled by both teachers, codex with
design weights). See bench_student.py's docstring.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import HERE, REPO, say
from student_synth import SEED, STRATUM_WEIGHTS, gemma_table, label_dicts, synth_works, teacher_labels

SOURCE_WORKS = 50_000  # scale input of the real frame rows (make_scale_input.py)
RECIPE_VERSION = "bench-student-v2"  # bump when the generator changes: cached inputs are rebuilt


def real_frame(scratch: Path, source_works: int = SOURCE_WORKS) -> Path:
    """The warehouse folder of a frame built as bench_frame.py builds it (its ``frame`` stage, in a child)
    from a scale input of ``source_works`` works."""
    from make_scale_input import make_scale_input

    data_dir = scratch / f"framesrc_{source_works}" / "data"
    done = data_dir.parent / "DONE.json"
    if done.exists() and (data_dir / "warehouse" / "frame").is_dir():
        return data_dir / "warehouse" / "frame"
    input_dir = scratch / f"works_{source_works}"
    make_scale_input(source_works, input_dir, quiet=True)
    result = data_dir.parent / "frame_result.json"
    t0 = time.perf_counter()
    cmd = [sys.executable, str(HERE / "bench_frame.py"), "--_stage", "frame", "--result", str(result)]
    subprocess.run([*cmd, "--input", str(input_dir), "--data", str(data_dir)], cwd=str(REPO), check=True)
    res = json.loads(result.read_text())
    if not res["success"]:
        raise SystemExit(f"frame build failed: {res}")
    done.write_text(json.dumps({"seconds": time.perf_counter() - t0}))
    return data_dir / "warehouse" / "frame"


def _recipe(n_max: int, train_works: int, titles_mode: str, src_rows: int) -> dict:
    return {
        "recipe": RECIPE_VERSION,
        "n_max": n_max,
        "train_works": train_works,
        "titles": titles_mode,
        "source_frame_rows": src_rows,
        "seed": SEED,
    }


def prepare(
    scratch: Path, sizes: list[int], train_works: int, titles_mode: str, source_works: int = SOURCE_WORKS
) -> dict:
    """Build (or reuse) every scored frame, its gemma labels and the training set (the real frame rows from a scale
    input of ``source_works`` works)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student.features import STUDENT_FIELDS
    from metacan_pipeline.student.scoring import student_texts

    src_dir = real_frame(scratch, source_works)
    src = pq.read_table(src_dir)
    n_max = max(sizes)
    recipe = _recipe(n_max, train_works, titles_mode, src.num_rows)
    tag = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:10]
    info = {
        "source_frame": str(src_dir),
        "source_frame_rows": src.num_rows,
        "source_frame_distinct_titles": len(set(src.column("title_text").to_pylist())),
        "recipe": recipe,
        "tag": tag,
        "frames": {},
    }
    train_file = scratch / f"train_{tag}.pkl"
    ready = {n: scratch / f"score_{n}" / "READY.json" for n in sizes}
    if train_file.exists() and all(p.exists() and json.loads(p.read_text()).get("tag") == tag for p in ready.values()):
        info["frames"] = {n: json.loads(p.read_text()) for n, p in ready.items()}
        info["train_file"] = str(train_file)
        return info
    t0 = time.perf_counter()
    say(f"bench_student: generating {n_max:,} works ({titles_mode} titles) from {src.num_rows:,} real frame rows ...")
    works = synth_works(n_max, titles_mode, src.column("title_text").to_pylist())
    gemma = teacher_labels(works, "gemma", n_max)
    ids = [f"W7{i:010d}" for i in range(n_max)]
    say(f"bench_student: generated in {time.perf_counter() - t0:.1f} s")
    chunk = 50_000
    for n in sorted(set(sizes)):
        data = scratch / f"score_{n}" / "data"
        if data.exists():
            shutil.rmtree(data)
        storage = MetacanStorage(data_dir=str(data))
        t1 = time.perf_counter()

        def frame_parts(n=n):
            for a in range(0, n, chunk):
                b = min(n, a + chunk)
                t = src.take(pa.array([i % src.num_rows for i in range(a, b)]))
                t = t.set_column(t.schema.get_field_index("id"), "id", pa.array(ids[a:b]))
                if titles_mode == "synthetic":
                    for c in ("title", "title_text"):
                        t = t.set_column(t.schema.get_field_index(c), c, pa.array(works["titles"][a:b], pa.string()))
                yield t

        def gemma_parts(n=n):
            for a in range(0, n, chunk):
                b = min(n, a + chunk)
                yield gemma_table({k: v[a:b] for k, v in gemma.items()}, ids[a:b], a)

        rows = storage.write_table("frame", frame_parts())
        g_rows = storage.write_table("direct_labels_gemma", gemma_parts())
        meta = {
            "tag": tag,
            "works": rows,
            "gemma_label_rows": g_rows,
            "data_dir": str(data),
            "seconds": time.perf_counter() - t1,
        }
        (scratch / f"score_{n}" / "READY.json").write_text(json.dumps(meta))
        info["frames"][n] = meta
        say(
            f"bench_student: wrote the {n:,}-work frame and {g_rows:,} gemma labels under {data} in {meta['seconds']:.1f} s"
        )
    # training set: the first train_works frame works, labelled by both teachers (codex with design weights)
    storage = MetacanStorage(data_dir=str(scratch / f"score_{min(sizes)}" / "data"))
    head = next(
        storage.iter_batches(
            "frame",
            batch_size=train_works,
            columns=["id", "venue_id", *STUDENT_FIELDS],
        )
    )
    texts = dict(zip(head.column("id").to_pylist(), student_texts(head), strict=False))
    tids = ids[:train_works]
    codex = teacher_labels(works, "codex", train_works)
    labels = {
        "gemma": label_dicts({k: v[:train_works] for k, v in gemma.items()}, tids, "gemma"),
        "codex": label_dicts(codex, tids, "codex"),
    }
    weights = {wid: STRATUM_WEIGHTS[i % len(STRATUM_WEIGHTS)] for i, wid in enumerate(tids)}
    train_file.write_bytes(pickle.dumps({"labels": labels, "texts": texts, "weights": weights}))
    info["train_file"] = str(train_file)
    return info
