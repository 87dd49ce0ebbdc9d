"""Build a scale input for the frame-build benchmark: real OpenAlex work records under fresh ids.

Usage::

    .venv/bin/python benchmarks/make_scale_input.py N OUT_DIR [--source DIR] [--per-part 50000] [--procs 2]

Reads every work record (kind ``W``) under ``--source`` (default ``../shared/data/openalex``, i.e.
``/work/shared/data/openalex``) with :func:`metacan_pipeline.openalex.reader.iter_records` and re-emits
them cyclically, N in all, each with a fresh id ``https://openalex.org/W9<10-digit counter>`` (also
put in ``ids.openalex`` when the record has one) and every other field unchanged, in the OpenAlex
snapshot layout (OpenAlex docs, "Download the snapshot")::

    OUT_DIR/data/works/updated_date=YYYY-MM-DD/part_NNN.gz   gzip JSON Lines, --per-part records each
    OUT_DIR/data/works/manifest                              Redshift-style manifest (entries + meta)
    OUT_DIR/data/funders/updated_date=2026-01-01/part_000.gz the Canadian funder records (choxos__MetaCan__funder_*.json payloads)
    OUT_DIR/data/institutions/updated_date=.../part_000.gz   copied from the snapshot sample
    OUT_DIR/data/sources/updated_date=.../part_000.gz        copied from the snapshot sample

Parts are spread round-robin over four ``updated_date`` folders. Speed: each distinct source record is
serialised once; a work line is the pre-encoded record with the id spliced in (no JSON work per
record); gzip level 1; parts are written by ``--procs`` worker processes. The manifest is written
last, so a complete manifest for N (record count N, every part present with its listed size) means
the input is complete and the run is skipped.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import shutil
import sys
import time
import zlib
from pathlib import Path

from _common import SHARED_DATA

DEFAULT_SOURCE = SHARED_DATA / "openalex"
SNAPSHOT_SAMPLE = "max-planck-innovation-competition__go-openalex__snapshot_sample"
UPDATED_DATES = ("2025-10-06", "2025-10-13", "2025-10-20", "2025-10-27")
ID_PREFIX = "https://openalex.org/W9"
ID_DIGITS = 10
_SENTINEL = "\u0000METACAN-FRESH-ID\u0000"  # cannot occur in real JSON text (a raw NUL is escaped by json.dumps)

_TEMPLATES: list[list[bytes]] | None = None  # per worker: each source record split around its id


def work_templates(source: Path) -> list[list[bytes]]:
    """Every work record under ``source`` serialised once, split where the fresh id goes."""
    from metacan_pipeline.openalex.reader import Record, iter_records

    out: list[list[bytes]] = []
    for rec in iter_records(source):
        if not isinstance(rec, Record) or rec.kind != "W":
            continue
        data = dict(rec.data)
        data["id"] = _SENTINEL
        if isinstance(data.get("ids"), dict) and "openalex" in data["ids"]:
            data["ids"] = {**data["ids"], "openalex": _SENTINEL}
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        # json.dumps escapes the NUL inside the sentinel; split on its escaped form.
        pieces = text.split(json.dumps(_SENTINEL)[1:-1])
        out.append([p.encode("utf-8") for p in pieces])
    if not out:
        raise SystemExit(f"no work records found under {source}")
    return out


def _init_worker(templates: list[list[bytes]]) -> None:
    global _TEMPLATES
    _TEMPLATES = templates


def _write_part(job: tuple[str, int, int]) -> tuple[str, int, int]:
    """Write one part: records ``start .. start+count-1`` of the global sequence. Returns (path, bytes, count)."""
    path, start, count = job
    templates = _TEMPLATES
    assert templates is not None
    n_t = len(templates)
    tmp = path + ".tmp"
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: gzip container, level 1
    chunk: list[bytes] = []
    size = 0
    with open(tmp, "wb") as fh:
        for g in range(start, start + count):
            new_id = f"{ID_PREFIX}{g:0{ID_DIGITS}d}".encode()
            chunk.append(new_id.join(templates[g % n_t]))
            chunk.append(b"\n")
            if len(chunk) >= 2000:
                fh.write(comp.compress(b"".join(chunk)))
                chunk = []
        fh.write(comp.compress(b"".join(chunk)))
        fh.write(comp.flush())
        size = fh.tell()
    os.replace(tmp, path)
    return path, size, count


def manifest_complete(works_dir: Path, n: int) -> bool:
    """True when ``works_dir/manifest`` lists N records and every listed part exists with its size."""
    mf = works_dir / "manifest"
    if not mf.exists():
        return False
    try:
        doc = json.loads(mf.read_text())
        if doc["meta"]["record_count"] != n or sum(e["meta"]["record_count"] for e in doc["entries"]) != n:
            return False
        for e in doc["entries"]:
            rel = e["url"].split("s3://openalex/", 1)[1]
            p = works_dir.parents[1] / rel
            if not p.exists() or p.stat().st_size != e["meta"]["content_length"]:
                return False
    except (ValueError, KeyError, IndexError, TypeError):
        return False
    return True


def _write_entities(source: Path, out: Path) -> dict[str, int]:
    """Canadian funder payloads as a funders part; institutions and sources parts copied as they are."""
    counts = {}
    funders = []
    from metacan_pipeline.openalex.reader import Record, iter_file

    for f in sorted(source.glob("choxos__MetaCan__funder_*.json")):
        # {request, payload}; the payload is a one-result API page or a bare funder: let the reader unwrap it
        funders += [r.data for r in iter_file(f) if isinstance(r, Record) and r.kind == "F"]
    fdir = out / "data" / "funders" / "updated_date=2026-01-01"
    fdir.mkdir(parents=True, exist_ok=True)
    with gzip.open(fdir / "part_000.gz", "wt", encoding="utf-8", compresslevel=1) as fh:
        for rec in funders:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    counts["funders"] = len(funders)
    sample = source / SNAPSHOT_SAMPLE / "data"
    for entity in ("institutions", "sources"):
        n = 0
        for part in sorted((sample / entity).glob("updated_date=*/part_*.gz")):
            dest = out / "data" / entity / part.parent.name / part.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(part, dest)
            with gzip.open(part, "rb") as fh:
                n += sum(1 for line in fh if line.strip())
        counts[entity] = n
    return counts


def make_scale_input(
    n: int,
    out_dir: Path,
    source: Path = DEFAULT_SOURCE,
    per_part: int = 50_000,
    procs: int = 2,
    force: bool = False,
    quiet: bool = False,
    keep: list[int] | None = None,
) -> dict:
    """Create (or reuse) the scale input; returns a summary dict (works, parts, bytes, seconds, reused).
    ``keep``: re-emit only these source records (indices in :func:`work_templates` order), e.g. the ones the
    frame admits (``benchmarks/rehearsal.py --admitted-only``)."""
    out_dir = Path(out_dir).resolve()
    works_dir = out_dir / "data" / "works"
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    if not force and manifest_complete(works_dir, n):
        doc = json.loads((works_dir / "manifest").read_text())
        entity_counts = _write_entities(source, out_dir)  # tiny; always rewritten
        say(f"make_scale_input: {works_dir / 'manifest'} is complete for {n} works; skipping the works")
        return {
            "works": n,
            "parts": len(doc["entries"]),
            "bytes": doc["meta"]["content_length"],
            "seconds": 0.0,
            "reused": True,
            "entities": entity_counts,
            "out_dir": str(out_dir),
        }
    t0 = time.perf_counter()
    if (out_dir / "data").exists():
        shutil.rmtree(out_dir / "data")
    templates = work_templates(source)
    if keep is not None:
        templates = [templates[i] for i in keep]
    n_parts = max(1, -(-n // per_part))
    jobs = []
    for k in range(n_parts):
        start = k * per_part
        count = min(per_part, n - start)
        d = works_dir / f"updated_date={UPDATED_DATES[k % len(UPDATED_DATES)]}"
        d.mkdir(parents=True, exist_ok=True)
        jobs.append((str(d / f"part_{k // len(UPDATED_DATES):03d}.gz"), start, count))
    say(
        f"make_scale_input: {len(templates)} distinct work records -> {n} works in {n_parts} parts under {works_dir} ({procs} procs)"
    )
    results = []
    if procs > 1 and n_parts > 1:
        ctx = mp.get_context("fork")
        with ctx.Pool(min(procs, n_parts), initializer=_init_worker, initargs=(templates,)) as pool:
            for r in pool.imap_unordered(_write_part, jobs):
                results.append(r)
                say(f"  wrote {r[0]} ({r[2]} works, {r[1] / 2**20:.1f} MiB)")
    else:
        _init_worker(templates)
        for job in jobs:
            r = _write_part(job)
            results.append(r)
            say(f"  wrote {r[0]} ({r[2]} works, {r[1] / 2**20:.1f} MiB)")
    entity_counts = _write_entities(source, out_dir)
    by_path = {r[0]: r for r in results}
    entries = []
    for path, _, _ in jobs:  # manifest in part order
        _, size, count = by_path[path]
        rel = Path(path).relative_to(out_dir).as_posix()
        entries.append({"url": f"s3://openalex/{rel}", "meta": {"content_length": size, "record_count": count}})
    manifest = {
        "entries": entries,
        "meta": {
            "content_length": sum(e["meta"]["content_length"] for e in entries),
            "record_count": sum(e["meta"]["record_count"] for e in entries),
        },
    }
    tmp = works_dir / "manifest.tmp"
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, works_dir / "manifest")  # last: its presence marks a complete input
    secs = time.perf_counter() - t0
    say(
        f"make_scale_input: {n} works, {manifest['meta']['content_length'] / 2**30:.2f} GiB gzip, "
        f"entities {entity_counts}, {secs:.1f} s"
    )
    return {
        "works": n,
        "parts": len(entries),
        "bytes": manifest["meta"]["content_length"],
        "seconds": round(secs, 2),
        "reused": False,
        "distinct_templates": len(templates),
        "entities": entity_counts,
        "out_dir": str(out_dir),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", type=int, help="number of works to emit")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="folder of real OpenAlex records (read only)")
    ap.add_argument("--per-part", type=int, default=50_000)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--force", action="store_true", help="regenerate even when a complete manifest exists")
    args = ap.parse_args(argv)
    summary = make_scale_input(args.n, args.out_dir, args.source, args.per_part, args.procs, args.force)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
