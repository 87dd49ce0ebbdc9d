"""Work-page rendering throughput: at least 1,000 pages/s rendered without abstracts.

Builds ``--works`` synthetic published records (default 20,000) from one real frame row (the first
work of ../shared/data/openalex/choxos__MetaCan__works_funders_ca_*.json through ``work_row`` and
``frame_row``, as the publish tests do), each with a fresh id ``W5<9 digits>``, a synthetic title, year
and routes, and a mix of classifications: 25% a direct gemma label plus a prediction, 35% a consensus
prediction, 25% candidate only, 15% nothing (no prediction, page under ``works/unscored/``). Predictions
use two model versions, so pages land in three folders. Then measures, one after the other in this
process (nothing else in between):

- ``baseline``: ``json.dumps`` of every record written to ``<scratch>/records/<id>.json``: the cost of
  writing the JSON records, the floor any page writer pays;
- ``pages``: ``render_work(env, record, None, ...)`` (abstract None: no input record re-read) for every
  record, each page written to ``<scratch>/site/<page_path(record)>``; render and write seconds are
  also summed apart;
- ``baseline_after``: the baseline again (load on this shared machine drifts); ratio = pages seconds /
  mean of the two baselines;
- ``index``: ``index_row`` for every record and ``render_index`` over the rows (size of index.html);
- ``check``: what the blocking check ``records_may_ship`` does per record (JSON Schema through
  fastjsonschema, then the SPEC section 8 rules), on the records as parsed JSON;
- ``asset``: the ``work_pages`` asset itself through Dagster's executor (``fetch_abstracts: false``) over
  the same records stored as the ``work_records`` table: streaming, page_manifest upserts, the index;
  then again with nothing changed (it must render no page).

- ``pages_gzip``: the same renders written precompressed (``page_files.encoded``, ``.html.gz``), right after
  ``pages``: ratio = gzip seconds / plain seconds; bytes a page and disk a page (``st_blocks``, what the filesystem
  allocates) plain and gzip, and the same for the record files; then the projection of both to 4,300,000 works
  (pages plus record files) against the free disk of the scratch folder (``shutil.disk_usage``).
- ``--serve-works N`` (0: skipped): the synthetic release of N works (``bench_site.release_dirs``, reused under
  ``--serve-keep``), the pages of ``--serve-repeats`` random works of it written from their stored records as
  ``.html.gz`` (the pages a whole site takes: ``pages_gzip``), then
  ``GET /works/<version>/<id>.html`` through Starlette's ``TestClient`` on the same random works, alternated: the
  stored gzip page (``work_pages="static"``, ``Accept-Encoding: gzip``, raw bytes read) against the page rendered on
  demand from the release database (abstracts answered at once in memory); p50 / p95 of both, ratio static / live.

Files are written with one ``Path.write_text`` (gzip: ``write_bytes``) each (no compare-before-write), the same
writer for both; the scratch folder is a fresh temporary folder, removed at the end unless ``--keep``.
Figure to beat (printed, not asserted): >= 1,000 pages/s, for render_work + write and for the asset. ``--profile`` also runs cProfile over
the render of the first ``--profile-works`` records (no writes) and prints the top functions by own
time and by cumulative time, and writes ``benchmarks/out/profile_pages.pstats``.

Usage: .venv/bin/python benchmarks/bench_pages.py [--works 20000] [--scratch DIR] [--keep]
                                                  [--profile] [--profile-works 2000] [--smoke]
                                                  [--serve-works 100000 --serve-keep DIR --serve-repeats 400]
Writes ``benchmarks/out/pages.json``; ``--smoke``: 200 works.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import OUT, add_smoke_arg, git_state, loadavg, machine, mean, record, say, verdict
from pages_records import make_records

TARGET_PAGES_PER_S = 1000.0
SCALE_WORKS = 4_300_000  # the rehearsal's frame, the size the disk projection is for


# ------------------------------------------------------------------------------------------------
# measurements
# ------------------------------------------------------------------------------------------------
CONTEXT = {
    "n_codex_labels": 10_348,
    "gated_heads": 9,
    "total_heads": 14,
    "constant_heads": {("codex", "insufficient_payload")},
}


def run_baseline(records: list[dict], dest: Path) -> dict:
    """json.dumps of every record (as work_records writes them), one file each; returns seconds and bytes."""
    dest.mkdir(parents=True, exist_ok=True)
    n_bytes = 0
    t0 = time.perf_counter()
    for rec in records:
        text = json.dumps(rec, ensure_ascii=False, default=str)
        (dest / f"{rec['id']}.json").write_text(text, encoding="utf-8")
        n_bytes += len(text)
    return {"seconds": time.perf_counter() - t0, "chars": n_bytes}


def _disk(paths: list[Path]) -> dict:
    """Bytes and allocated disk (``st_blocks`` x 512) of ``paths``, in total."""
    stats = [p.stat() for p in paths]
    return {"bytes": sum(st.st_size for st in stats), "disk_bytes": sum(st.st_blocks * 512 for st in stats)}


def run_records(records: list[dict], site: Path, encoding: str) -> dict:
    """Every record's JSON (as work_records writes it) stored under ``site/records`` in ``encoding``; bytes and
    disk."""
    from metacan_pipeline.publish.page_files import encoded, stored_name

    paths = []
    t0 = time.perf_counter()
    for rec in records:
        text = json.dumps(rec, ensure_ascii=False, default=str)
        path = site / stored_name(f"records/{rec['id']}.json", encoding)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encoded(text, encoding))
        paths.append(path)
    return {"seconds": time.perf_counter() - t0, **_disk(paths)}


def run_pages(records: list[dict], site: Path, encoding: str = "plain") -> dict:
    """render_work (abstract None) of every record, written to site/page_path(record) (``gzip``: its ``.gz`` file,
    compressed in the write step); returns seconds (total, render alone, write alone), characters rendered, and the
    bytes and disk of the files."""
    from metacan_pipeline.publish.page_files import encoded, stored_name
    from metacan_pipeline.publish.pages import environment, page_path, render_work

    env = environment()
    render_work(env, records[0], None, CONTEXT)  # compile the templates before the clock starts
    paths = [site / stored_name(page_path(rec), encoding) for rec in records]
    for folder in {p.parent for p in paths}:
        folder.mkdir(parents=True, exist_ok=True)
    render_s = write_s = 0.0
    n_chars = 0
    clock = time.perf_counter
    t0 = clock()
    for rec, path in zip(records, paths, strict=False):
        a = clock()
        html = render_work(env, rec, None, CONTEXT)
        b = clock()
        if encoding == "plain":
            path.write_text(html, encoding="utf-8")
        else:
            path.write_bytes(encoded(html, encoding))
        write_s += clock() - b
        render_s += b - a
        n_chars += len(html)
    return {
        "encoding": encoding,
        "seconds": clock() - t0,
        "render_seconds": render_s,
        "write_seconds": write_s,
        "chars": n_chars,
        "folders": sorted(str(f.relative_to(site)) for f in {p.parent for p in paths}),
        **_disk(paths),
    }


def disk_projection(r: dict, n: int, scratch: Path) -> dict:
    """Pages plus record files at :data:`SCALE_WORKS` works, plain and gzip, from the disk a work took here, against
    the free disk of the scratch folder's filesystem now."""
    free = shutil.disk_usage(scratch).free
    out = {"works": SCALE_WORKS, "free_disk_bytes": free}
    for enc, pages, recs in (("plain", "pages", "records_plain"), ("gzip", "pages_gzip", "records_gzip")):
        per_work = (r[pages]["disk_bytes"] + r[recs]["disk_bytes"]) / n
        out[enc] = {
            "disk_per_work": per_work,
            "pages_disk_per_work": r[pages]["disk_bytes"] / n,
            "records_disk_per_work": r[recs]["disk_bytes"] / n,
            "projected_bytes": per_work * SCALE_WORKS,
            "fits": per_work * SCALE_WORKS < free,
        }
    return out


def run_served(n: int, keep: Path | None, scratch: Path, repeats: int) -> dict:
    """The synthetic release of ``n`` works, the pages of ``repeats`` random works stored as ``.html.gz``, then the
    stored gzip page against the page rendered on demand, alternated on the same random works (see the docstring)."""
    import duckdb
    from bench_site import interleaved, no_record_fetcher, release_dirs
    from starlette.testclient import TestClient

    from metacan_pipeline.publish.page_files import write_site_file
    from metacan_pipeline.publish.pages import environment, render_work
    from metacan_pipeline.site.build.release import current_release_id, releases_dir
    from metacan_pipeline.site.web.app import create_app

    data, built = release_dirs(keep or scratch / "serve", n, 20_000 if n >= 100_000 else 100)
    db = duckdb.connect(str(releases_dir(data) / f"{current_release_id(data)}.duckdb"), read_only=True)
    rng = random.Random(37)
    keys = sorted({9_000_000_000 + rng.randrange(n) for _ in range(repeats + 1)})
    rows = db.execute(
        "SELECT id, record_json, page_path FROM works WHERE work_key IN (SELECT unnest(?::BIGINT[]))", [keys]
    ).fetchall()
    db.close()
    site, env = data / "site", environment()
    written = disk = 0
    t0 = time.perf_counter()
    for _, text, path in rows:  # the works requested (pages/s of a whole site: the pages_gzip part)
        stored = write_site_file(site, path, render_work(env, json.loads(text), None, CONTEXT), "gzip")
        disk += (site / stored).stat().st_size
        written += 1
    write_s = time.perf_counter() - t0
    say(f"served: {written:,} gzip pages written in {write_s:.1f} s (load {loadavg()})")
    rows = [(wid, path) for wid, _, path in rows]
    it = {"i": 0, "static_bytes": [], "live_bytes": []}
    with (
        TestClient(create_app(data, abstracts=no_record_fetcher(), work_pages="static")) as static,
        TestClient(create_app(data, abstracts=no_record_fetcher())) as live,
    ):

        def get_static():
            _, path = rows[it["i"] % len(rows)]
            with static.stream("GET", "/" + path, headers={"Accept-Encoding": "gzip"}) as resp:
                body = b"".join(resp.iter_raw())
                if resp.status_code != 200 or resp.headers.get("content-encoding") != "gzip":
                    raise SystemExit(f"GET /{path} (static): HTTP {resp.status_code} {resp.headers}")
            it["static_bytes"].append(len(body))

        def get_live():
            _, path = rows[it["i"] % len(rows)]
            resp = live.get("/" + path, headers={"Accept-Encoding": "identity"})
            if resp.status_code != 200:
                raise SystemExit(f"GET /{path} (live): HTTP {resp.status_code}")
            it["live_bytes"].append(len(resp.content))
            it["i"] += 1

        timing = interleaved(get_static, get_live, repeats)
    return {
        "works": n,
        "release_reused": built.get("reused"),
        "gzip_pages_written": written,
        "gzip_write_seconds": write_s,
        "gzip_pages_per_s": written / write_s,
        "gzip_bytes_per_page": disk / written,
        "static_gzip_p50_ms": timing["p50_ms"],
        "static_gzip_p95_ms": timing["p95_ms"],
        "live_p50_ms": timing["baseline_p50_ms"],
        "live_p95_ms": timing["baseline_p95_ms"],
        "ratio_p50_static_vs_live": timing["ratio"],
        "ratio_p95_static_vs_live": round(timing["p95_ms"] / timing["baseline_p95_ms"], 3),
        "runs": timing["runs"],
        "static_wire_bytes_p50": int(sorted(it["static_bytes"])[len(it["static_bytes"]) // 2]),
        "live_wire_bytes_p50": int(sorted(it["live_bytes"])[len(it["live_bytes"]) // 2]),
    }


def run_index(records: list[dict], site: Path) -> dict:
    from metacan_pipeline.publish.pages import environment, index_row, render_index, write_static

    env = environment()
    t0 = time.perf_counter()
    rows = [index_row(r) for r in records]
    t1 = time.perf_counter()
    html = render_index(env, rows, built_at="bench")
    t2 = time.perf_counter()
    (site / "index.html").write_text(html, encoding="utf-8")
    write_static(site)
    return {
        "index_row_seconds": t1 - t0,
        "render_index_seconds": t2 - t1,
        "index_bytes": len(html.encode()),
        "bytes_per_work": len(html.encode()) / max(1, len(records)),
    }


def profile_render(records: list[dict], top: int = 18) -> str:
    from metacan_pipeline.publish.pages import environment, render_work

    env = environment()
    render_work(env, records[0], None, CONTEXT)
    prof = cProfile.Profile()
    prof.enable()
    for rec in records:
        render_work(env, rec, None, CONTEXT)
    prof.disable()
    OUT.mkdir(parents=True, exist_ok=True)
    prof.dump_stats(OUT / "profile_pages.pstats")
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf).strip_dirs()
    st.sort_stats("tottime").print_stats(top)
    st.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def run_check(records: list[dict]) -> dict:
    """schema_violation + ship_violations over every record (as JSON round-trips it); seconds and violations."""
    from metacan_pipeline.publish.records import schema_violation, ship_violations

    parsed = [json.loads(json.dumps(r, default=str)) for r in records]
    schema_violation(parsed[0])  # compile the schema before the clock starts
    t0 = time.perf_counter()
    bad = sum(1 for r in parsed if schema_violation(r) or ship_violations(r))
    return {"seconds": time.perf_counter() - t0, "violating": bad}


def run_asset(records: list[dict], data: Path) -> dict:
    """The work_pages asset on ``records`` (as the work_records table), twice; seconds and pages rendered."""
    import hashlib

    import dagster as dg
    import pyarrow as pa

    from metacan_pipeline.publish.assets import PagesConfig, work_pages
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables.publish import RECORDS_SCHEMA

    storage = MetacanStorage(data_dir=str(data))
    rows = []
    for rec in records:
        text = json.dumps(rec, ensure_ascii=False, default=str)
        rows.append(
            {"id": rec["id"], "record_json": text, "record_hash": hashlib.sha256(text.encode()).hexdigest()[:16]}
        )
    storage.write_table("work_records", pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA))
    out = {}
    for name in ("first", "unchanged"):
        t0 = time.perf_counter()
        result = dg.materialize(
            [work_pages],
            resources={"storage": storage},
            instance=dg.DagsterInstance.ephemeral(),
            run_config=dg.RunConfig({"work_pages": PagesConfig(fetch_abstracts=False)}),
        )
        md = result.asset_materializations_for_node("work_pages")[0].metadata
        out[name] = {
            "seconds": time.perf_counter() - t0,
            "pages_rendered": md["pages_rendered"].value,
            "asset_seconds": md["seconds"].value,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--works", type=int, default=20_000)
    ap.add_argument(
        "--scratch",
        type=Path,
        default=None,
        help="parent of the fresh scratch folder (default: the system temporary folder)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (pages, records, index.html)")
    ap.add_argument("--profile", action="store_true", help="cProfile the render of the first --profile-works records")
    ap.add_argument("--profile-works", type=int, default=2000)
    ap.add_argument("--serve-works", type=int, default=0, help="works of the synthetic release served (0: skip)")
    ap.add_argument("--serve-keep", type=Path, default=None, help="keep (and reuse) the served release here")
    ap.add_argument("--serve-repeats", type=int, default=400, help="requests of each kind in the served part")
    add_smoke_arg(ap, "200 works")
    args = ap.parse_args(argv)
    if args.smoke:
        args.works, args.profile_works = 200, 50
    import metacan_pipeline

    scratch = Path(tempfile.mkdtemp(prefix="metacan-bench-pages-", dir=args.scratch))
    r: dict = {
        "command": " ".join([sys.executable, *sys.argv]),
        "package": metacan_pipeline.__file__,
        "code": git_state(),
        "machine": machine(),
        "works": args.works,
        "scratch": str(scratch),
    }
    try:
        t0 = time.perf_counter()
        records = make_records(args.works)
        r["make_records_seconds"] = time.perf_counter() - t0
        say(f"{args.works:,} records built in {r['make_records_seconds']:.1f} s; scratch {scratch} (load {loadavg()})")
        r["baseline"] = run_baseline(records, scratch / "records_1")
        say(f"baseline: {r['baseline']['seconds']:.2f} s (load {loadavg()})")
        r["pages"] = run_pages(records, scratch / "site")
        say(f"pages: {r['pages']['seconds']:.2f} s (load {loadavg()})")
        r["pages_gzip"] = run_pages(records, scratch / "site_gzip", "gzip")
        say(f"pages gzip: {r['pages_gzip']['seconds']:.2f} s (load {loadavg()})")
        r["records_plain"] = run_records(records, scratch / "site", "plain")
        r["records_gzip"] = run_records(records, scratch / "site_gzip", "gzip")
        r["projection"] = disk_projection(r, args.works, scratch)
        r["baseline_after"] = run_baseline(records, scratch / "records_2")
        r["index"] = run_index(records, scratch / "site")
        r["check"] = run_check(records)
        r["asset"] = run_asset(records, scratch / "asset_data")
        say(
            f"asset: {r['asset']['first']['seconds']:.2f} s, unchanged re-run {r['asset']['unchanged']['seconds']:.2f} s (load {loadavg()})"
        )
        if args.serve_works:
            r["served"] = run_served(args.serve_works, args.serve_keep, scratch, args.serve_repeats)
        r["machine"]["load_at_end"] = loadavg()
        if args.profile:
            r["profile"] = profile_render(records[: args.profile_works])
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)

    n = args.works
    base_s = mean(r[k]["seconds"] for k in ("baseline", "baseline_after"))
    p = r["pages"]
    r["pages_per_s"] = n / p["seconds"]
    r["render_only_pages_per_s"] = n / p["render_seconds"]
    r["baseline_records_per_s"] = n / base_s
    r["ratio_pages_vs_baseline"] = p["seconds"] / base_s
    ix = r["index"]
    print(
        f"works: {n:,} ({', '.join(p['folders'])}); {r['machine']['nproc']} CPUs ({r['machine']['cpu_model']}), "
        f"load {r['machine']['load_at_start']} -> {r['machine']['load_at_end']}"
    )
    print(
        f"baseline  json.dumps + write of the records: {r['baseline']['seconds']:.2f} s / {r['baseline_after']['seconds']:.2f} s "
        f"(before / after) = {r['baseline_records_per_s']:,.0f} records/s, {r['baseline']['chars'] / n:,.0f} chars each"
    )
    print(
        f"pages     render_work (no abstract) + write:   {p['seconds']:.2f} s = {r['pages_per_s']:,.0f} pages/s "
        f"(render {p['render_seconds']:.2f} s = {r['render_only_pages_per_s']:,.0f} pages/s, write {p['write_seconds']:.2f} s), "
        f"{p['chars'] / n:,.0f} chars each"
    )
    print(f"ratio     pages seconds / baseline seconds: {r['ratio_pages_vs_baseline']:.2f}x")
    g = r["pages_gzip"]
    r["gzip_pages_per_s"] = n / g["seconds"]
    r["ratio_gzip_vs_plain_seconds"] = g["seconds"] / p["seconds"]
    r["ratio_gzip_vs_plain_bytes"] = g["bytes"] / p["bytes"]
    r["ratio_gzip_vs_plain_disk"] = g["disk_bytes"] / p["disk_bytes"]
    print(
        f"gzip      render_work + gzip + write: {g['seconds']:.2f} s = {r['gzip_pages_per_s']:,.0f} pages/s "
        f"({r['ratio_gzip_vs_plain_seconds']:.2f}x the plain pages' time); bytes a page {p['bytes'] / n:,.0f} plain, "
        f"{g['bytes'] / n:,.0f} gzip ({r['ratio_gzip_vs_plain_bytes']:.3f}x); disk a page {p['disk_bytes'] / n:,.0f} "
        f"plain, {g['disk_bytes'] / n:,.0f} gzip ({r['ratio_gzip_vs_plain_disk']:.3f}x)"
    )
    rp, rg = r["records_plain"], r["records_gzip"]
    print(
        f"records   bytes a record file {rp['bytes'] / n:,.0f} plain, {rg['bytes'] / n:,.0f} gzip; disk "
        f"{rp['disk_bytes'] / n:,.0f} plain, {rg['disk_bytes'] / n:,.0f} gzip"
    )
    pj = r["projection"]
    for enc in ("plain", "gzip"):
        e = pj[enc]
        print(
            f"at 4.3M   {enc}: pages + record files {e['projected_bytes'] / 1e9:,.1f} GB ({e['disk_per_work']:,.0f} bytes "
            f"of disk a work) against {pj['free_disk_bytes'] / 1e9:,.1f} GB free: {'fits' if e['fits'] else 'does NOT fit'}"
        )
    if "served" in r:
        sv = r["served"]
        print(
            f"served    {sv['works']:,} works: {sv['gzip_pages_written']:,} gzip pages written from the release at "
            f"{sv['gzip_pages_per_s']:,.0f} pages/s ({sv['gzip_bytes_per_page']:,.0f} bytes each); GET p50 / p95: "
            f"static gzip {sv['static_gzip_p50_ms']} / {sv['static_gzip_p95_ms']} ms "
            f"({sv['static_wire_bytes_p50']:,} bytes), on demand {sv['live_p50_ms']} / {sv['live_p95_ms']} ms "
            f"({sv['live_wire_bytes_p50']:,} bytes); ratio static / on demand p50 {sv['ratio_p50_static_vs_live']}, "
            f"p95 {sv['ratio_p95_static_vs_live']} ({sv['runs']} requests each)"
        )
    print(
        f"index     index_row x {n:,}: {ix['index_row_seconds']:.2f} s; render_index: {ix['render_index_seconds']:.2f} s; "
        f"index.html {ix['index_bytes'] / 1e6:.1f} MB ({ix['bytes_per_work']:.0f} bytes per work)"
    )
    c = r["check"]
    print(
        f"check     records_may_ship per record (schema + SPEC section 8): {n / c['seconds']:,.0f} records/s, {c['violating']} violating"
    )
    a = r["asset"]
    r["asset_pages_per_s"] = a["first"]["pages_rendered"] / a["first"]["asset_seconds"]
    print(
        f"asset     work_pages (Dagster, no abstracts): {a['first']['pages_rendered']:,} pages in {a['first']['asset_seconds']:.2f} s "
        f"= {r['asset_pages_per_s']:,.0f} pages/s ({a['first']['seconds']:.2f} s with the run's overhead); "
        f"unchanged re-run: {a['unchanged']['pages_rendered']} pages in {a['unchanged']['asset_seconds']:.2f} s"
    )
    r["meets_target"] = min(r["pages_per_s"], r["asset_pages_per_s"]) >= TARGET_PAGES_PER_S
    print(
        f"target    >= {TARGET_PAGES_PER_S:,.0f} pages/s: {verdict(r['meets_target'], 'met', 'NOT met')} "
        f"(render_work + write {r['pages_per_s']:,.0f} pages/s; the work_pages asset {r['asset_pages_per_s']:,.0f} pages/s)"
    )
    if args.profile:
        print(r["profile"])
    ratios = {
        "pages_seconds/baseline": round(r["ratio_pages_vs_baseline"], 3),
        "gzip_seconds/plain_seconds": round(r["ratio_gzip_vs_plain_seconds"], 3),
        "gzip_bytes/plain_bytes": round(r["ratio_gzip_vs_plain_bytes"], 3),
    }
    if "served" in r:
        ratios["static_gzip_p95/live_p95"] = r["served"]["ratio_p95_static_vs_live"]
    record("pages", r, ratios=ratios, started=r["machine"], smoke=args.smoke)


if __name__ == "__main__":
    main()
