"""The site benchmark's input (bench_site.py): a real seed release, then a synthetic release of N works in the
exact release layout, generated inside DuckDB from the seed's rows and the value distributions of the real
records.

1. :func:`build_seed`: the frame of every real OpenAlex work record under ``../shared/data/openalex`` and
   ``openalex_more`` (built through Dagster, as the frame tests do), plus direct labels (gemma, codex),
   predictions and machine scores for its works (the test helpers' row shapes, categories varied over the
   whole vocabulary), then ``work_records`` + ``records_may_ship`` + ``site_database`` through Dagster: a
   release database of the real frame works, written by the project's own build (``site/build.py``).
2. :func:`value_pools`: from every real work record (``work_row``, about 1,800), the joint rows (title, year,
   language, type, field, topic, keywords, cited_by, has_abstract) and the name pools by real frequency:
   venues (works and the snapshot sample's sources), institutions (every affiliation, Canadian ones
   first, and the snapshot sample's institution records), funders (every funder, Canadian first).
3. :func:`build_synthetic`: ``works`` row i (``generate_series``, never a Python row) takes
   - a real record's year, language, type, field, topic, keywords, cited_by, has_abstract (a hash-picked
     real row: the joint distribution of the real records);
   - a title made of the first half of one real title and the second half of another (about 3.3M
     distinct titles, with the real words' frequencies);
   - a venue, 0-3 institutions and 0-2 funders drawn Zipf-like (density ~ 1/rank) over the pools, so the
     most frequent real values lead and facets have thousands of values (``--venues`` extends the real
     venue names with numbered series of them to reach a realistic count);
   - a classification template: a seed work of a class picked at set rates (direct labels on 1% of works,
     consensus 8%, candidate only 20%, prediction without category 61%, no prediction 10%); its label and
     decision rows are copied under the new key, and its ``record_json`` is the template's record with
     every changed field patched in (``json_merge_patch``), so the work page renders the row's own values;
   - machine scores (two arms) from hashes, patched into the record too.
   Keys are fresh (``work_key`` = 9,000,000,000 + i, id ``W<work_key>``). Once the per-work tables are
   written, the rest is the project's own build: the whole-release tables by
   :func:`metacan_pipeline.site.build.build.write_whole_release_tables` (the seed's classifier heads as its ``heads``),
   the FTS5 index by :func:`metacan_pipeline.site.build.build.write_index`; ``release_info`` names a release id
   ``release-<12 hex>`` of N, the seed and the layout version.
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path

import duckdb
import pyarrow as pa
from _common import SHARED_DATA, say

SHARED = SHARED_DATA
OPENALEX_DIRS = (SHARED / "openalex", SHARED / "openalex_more")
SNAPSHOT = SHARED / "openalex" / "max-planck-innovation-competition__go-openalex__snapshot_sample" / "data"
KEY_BASE = 9_000_000_000
#: Classification classes of a synthetic work and their shares (they add up to 1).
CLASS_RATES = (("direct", 0.01), ("consensus", 0.08), ("candidate", 0.20), ("no_category", 0.61), ("none", 0.10))
MODEL_VERSION = "metacan-v0-hybrid-000000000000"
#: DuckDB's memory limit while generating: the ``works`` insert of 4.3M works (correlated name lists, JSON patches)
#: needs more than 6 GB on duckdb 1.5.6; ``$METACAN_BENCH_MEMORY`` overrides it.
MEMORY_LIMIT = os.environ.get("METACAN_BENCH_MEMORY", "12GB")


# ------------------------------------------------------------------------------------------------
# 1. the seed release: the real frame works through the project's own assets
# ------------------------------------------------------------------------------------------------
def build_seed(data: Path) -> Path:
    """Build the seed release under ``data`` (the real frame works); returns its database file."""
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables.student import HEADS_SCHEMA, MACHINE_SCHEMA, PRED_SCHEMA
    from metacan_pipeline.tables.teachers import LABELS_SCHEMA
    from metacan_pipeline.vocab import CATEGORIES
    from metacan_pipeline_tests.builders.frame import build_frame
    from metacan_pipeline_tests.builders.site import build_site
    from metacan_pipeline_tests.builders.student import machine_row, prediction_row
    from metacan_pipeline_tests.builders.teachers import label_row

    _, result = build_frame(data, os.pathsep.join(str(d) for d in OPENALEX_DIRS))
    if not result.success:
        raise SystemExit("the seed frame failed to build from the real records")
    storage = MetacanStorage(data_dir=str(data))
    frame = storage.read_table("frame").to_pylist()
    gemma, codex, preds, machine = [], [], [], []
    n_cat = len(CATEGORIES)
    for i, row in enumerate(sorted(frame, key=lambda r: r["id"])):
        wid = row["id"]
        # classes cycle: direct (labels + prediction), consensus, candidate, no category, none (no prediction)
        cls = i % 5
        cats = [CATEGORIES[i % n_cat]] + ([CATEGORIES[(i + 4) % n_cat]] if i % 3 == 0 else [])
        if cls == 0:
            gemma.append(label_row(wid, "gemma", cats, status="failed" if i % 25 == 0 else "labelled"))
            if i % 2 == 0:
                codex.append({**label_row(wid, "codex", cats[:1]), "record_view": "title_abstract"})
        if cls != 4:
            pred = prediction_row(wid)
            pred["candidate_categories"] = cats if cls in (0, 1, 2) else []
            pred["consensus_categories"] = cats[:1] if cls in (0, 1) else []
            pred["category_scores_codex"] = [round(((i + k) % 10) / 10, 3) for k in range(n_cat)]
            pred["category_scores_gemma"] = [round(((i * 3 + k) % 10) / 10, 3) for k in range(n_cat)]
            preds.append(pred)
        machine.append(machine_row(wid))
    for label in gemma:
        if label["status"] == "failed":
            label.update(categories=None, study_design=None, genre=None, error="reply invalid")
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(gemma, schema=LABELS_SCHEMA))
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    storage.write_table("predictions", pa.Table.from_pylist(preds, schema=PRED_SCHEMA))
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    storage.write_table("machine_scores", pa.Table.from_pylist(machine, schema=MACHINE_SCHEMA))
    result = build_site(storage)
    if not result.success:
        raise SystemExit("the seed release failed to build (work_records / site_database)")
    pointer = json.loads((data / "site" / "releases" / "current.json").read_text())
    return data / "site" / "releases" / pointer["database"]


# ------------------------------------------------------------------------------------------------
# 2. value pools from every real work record
# ------------------------------------------------------------------------------------------------
def value_pools(min_venues: int) -> dict[str, pa.Table]:
    """``real_rows`` (the joint per-record values) and the name pools ``venues``, ``institutions``,
    ``funders`` (``idx``: 0 = the most frequent real value), as Arrow tables (a few thousand rows)."""
    from metacan_pipeline.openalex.reader import Record, iter_records
    from metacan_pipeline.openalex.works import work_row

    rows: dict[str, dict] = {}
    for d in OPENALEX_DIRS:
        for rec in iter_records(d):
            if isinstance(rec, Record) and rec.kind == "W":
                try:
                    w = work_row(rec)
                except Exception:  # noqa: BLE001 - a record work_row refuses is not a value source
                    continue
                if w and w.get("title_text"):
                    rows[w["id"]] = w
    real = sorted(rows.values(), key=lambda w: w["id"])
    venues, inst_ca, inst, funders = _name_counts(real)
    ca_funders = ("Canadian Institutes of Health Research", "Natural Sciences and Engineering Research Council")
    ranked_funders = sorted(funders, key=lambda n: (not n.startswith(ca_funders), -funders[n], n))

    def ranked(counter: collections.Counter) -> list[str]:
        return sorted(counter, key=lambda n: (-counter[n], n))

    venue_names = ranked(venues)
    real_venues = len(venue_names)
    k = 1
    while len(venue_names) < min_venues:  # numbered series of the real names (a realistic venue count)
        venue_names += [f"{n} ({roman(k)})" for n in venue_names[:real_venues]]
        k += 1
    inst_names = ranked(inst_ca) + [n for n in ranked(inst) if n not in inst_ca]

    def pool(names: list[str]) -> pa.Table:
        return pa.table({"idx": pa.array(range(len(names)), pa.int32()), "name": pa.array(names, pa.string())})

    real_tab = pa.table(
        {
            "idx": pa.array(range(len(real)), pa.int32()),
            "title": [w["title_text"] for w in real],
            "year": pa.array([w.get("publication_year") for w in real], pa.int32()),
            "language": [w.get("language") or None for w in real],
            "type": [w.get("type") or None for w in real],
            "field": [w.get("field") or None for w in real],
            "topic": [w.get("topic") or None for w in real],
            "keywords": pa.array([sorted(set(w.get("keywords") or [])) for w in real], pa.list_(pa.string())),
            "cited_by": pa.array([w.get("cited_by_count") or 0 for w in real], pa.int64()),
            "has_abstract": [bool(w.get("has_abstract")) for w in real],
            "has_doi": [bool(w.get("doi")) for w in real],
        }
    )
    return {
        "real_rows": real_tab,
        "venues": pool(venue_names[: max(min_venues, real_venues)]),
        "institutions": pool(inst_names),
        "funders": pool(ranked_funders),
        "_counts": {
            "real_records": len(real),
            "real_venues": real_venues,
            "venues": max(min_venues, real_venues),
            "institutions": len(inst_names),
            "canadian_institutions": len(inst_ca),
            "funders": len(ranked_funders),
        },
    }


def _name_counts(real: list[dict]) -> tuple[collections.Counter, ...]:
    """Real frequency of every venue, Canadian and other institution, and funder name (the snapshot sample's
    source and institution records add their names with count 0)."""
    import gzip

    venues, inst_ca, inst, funders = (collections.Counter() for _ in range(4))
    for w in real:
        if w.get("venue_name"):
            venues[w["venue_name"]] += 1
        for i in w.get("institutions") or []:
            if i.get("name"):
                (inst_ca if i.get("country_code") == "CA" else inst)[i["name"]] += 1
        for f in w.get("funders") or []:
            name = f.get("name") if isinstance(f, dict) else f
            if name:
                funders[name] += 1
    for kind, counter in (("sources", venues), ("institutions", inst)):
        for part in (SNAPSHOT / kind).glob("*/*.gz"):
            for line in gzip.open(part, "rt", encoding="utf-8"):
                name = json.loads(line).get("display_name")
                if name and name not in counter:
                    counter[name] += 0
    return venues, inst_ca, inst, funders


def roman(n: int) -> str:
    out = ""
    for value, letters in ((10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        while n >= value:
            out, n = out + letters, n - value
    return out


# ------------------------------------------------------------------------------------------------
# 3. the synthetic release, generated inside DuckDB
# ------------------------------------------------------------------------------------------------
def _u(salt: int) -> str:
    """A uniform value in [0, 1) from a hash of the row number ``i`` and ``salt`` (SQL)."""
    return f"((hash(i, {salt}) % 1000000007)::DOUBLE / 1000000007)"


def _zipf(salt: int, size: str) -> str:
    """An index in [0, size) with density ~ 1/(index+1) (SQL; ``size`` a SQL expression)."""
    return f"least({size} - 1, CAST(floor(exp({_u(salt)} * ln({size} + 1))) AS INTEGER) - 1)"


#: Synthetic authorships: 1-6 per work, drawn from a pool of one author per AUTHOR_POOL_WORKS works with the 1/rank
#: density of _zipf (a few prolific authors, a long tail), 70% of authorships Canadian; each authorship lists the
#: work's first institution (the pool's index as its id).
AUTHOR_POOL_WORKS = 3


def write_synthetic_authorships(con: duckdb.DuckDBPyConnection, n: int) -> None:
    """Fill ``site_work_institution_ids`` and ``site_work_authors`` from ``gt`` and ``work_institutions``, then
    ``site_authors`` and ``site_institutions`` with the build's own SQL (``sql/author_totals.sql``)."""
    from metacan_pipeline.site.build import build

    con.execute(
        "INSERT INTO site_work_institution_ids SELECT DISTINCT x.work_key, 'I' || p.idx, p.name, NULL, 'CA', true "
        "FROM work_institutions x JOIN pool_institutions p ON p.name = x.name ORDER BY 1, 2"
    )
    pool = max(1, n // AUTHOR_POOL_WORKS)
    zipf = _zipf(12, str(pool)).replace("hash(i, 12)", "hash(i, 12, k)")
    con.execute(
        f"""
        INSERT INTO site_work_authors
        SELECT a.work_key, a.k + 1, 'A' || a.idx, 'ok', NULL, 'Author ' || a.idx, (hash(a.idx, 13) % 10) < 7,
               coalesce(f.ids, [])
        FROM (SELECT work_key, k, {zipf} AS idx FROM gt, range(6) r(k) WHERE k < 1 + hash(i, 14) % 6) a
        LEFT JOIN (SELECT work_key, [min(institution_id)] AS ids FROM site_work_institution_ids GROUP BY 1) f
          USING (work_key)
        ORDER BY 1, 2
        """
    )
    con.execute(build.AUTHOR_TOTALS_SQL)


def build_synthetic(seed_db: Path, data: Path, n: int, min_venues: int = 20_000, threads: int = 2) -> dict:
    """Write the synthetic release of ``n`` works under ``data/site/releases/`` and make it current; returns
    the build's figures (seconds per step, rows per table, file sizes, pool sizes)."""
    import datetime as dt
    import hashlib

    from metacan_pipeline.site.build import build
    from metacan_pipeline.site.build.release import database_path, index_path, releases_dir, write_pointer
    from metacan_pipeline.site.query.stored_counts import write_stored_counts
    from metacan_pipeline.tables.site import release_tables

    pools = value_pools(min_venues)
    counts = pools.pop("_counts")
    seed_con = duckdb.connect(str(seed_db), read_only=True)
    seed_id = seed_con.execute("SELECT release_id FROM release_info").fetchone()[0]
    seed_con.close()
    release_id = (
        "release-" + hashlib.sha256(f"bench-site-{n}-{seed_id}-{build.LAYOUT_VERSION}".encode()).hexdigest()[:12]
    )
    folder = releases_dir(data)
    folder.mkdir(parents=True, exist_ok=True)
    db, index = database_path(data, release_id), index_path(data, release_id)
    for p in (db, index, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    timings: dict[str, float] = {}
    con = duckdb.connect(
        str(db),
        config={
            "memory_limit": MEMORY_LIMIT,
            "threads": threads,
            "temp_directory": str(db) + ".spill",
            "storage_compatibility_version": build.RELEASE_STORAGE_VERSION,
        },
    )
    # a session setting: as a connect() option duckdb 1.5.6 refuses it once the process holds another database
    con.execute("SET enable_progress_bar = false")
    try:
        for table in release_tables():
            con.execute(table.ddl())
        con.execute(f"ATTACH '{seed_db}' AS seed (READ_ONLY)")
        for name, tab in pools.items():
            con.register(f"{name}_src", tab)
            con.execute(f"CREATE TEMP TABLE pool_{name} AS SELECT * FROM {name}_src")
            con.unregister(f"{name}_src")
        n_real = pools["real_rows"].num_rows
        sizes = {k: pools[k].num_rows for k in ("venues", "institutions", "funders")}
        # the seed works as templates: classification (by class) and routes (any seed work)
        con.execute(
            """
            CREATE TEMP TABLE tmpl AS
            SELECT w.*, row_number() OVER (PARTITION BY classification_kind ORDER BY work_key) - 1 AS j,
                   row_number() OVER (ORDER BY work_key) - 1 AS r,
                   (SELECT count(*) FROM seed.work_institutions x WHERE x.work_key = w.work_key) AS n_inst,
                   (SELECT count(*) FROM seed.work_funders x WHERE x.work_key = w.work_key) AS n_fund,
                   w.record_json::JSON AS rj
            FROM seed.works w
            """
        )
        class_sizes = dict(con.execute("SELECT classification_kind, count(*) FROM tmpl GROUP BY 1").fetchall())
        n_seed = sum(class_sizes.values())
        edges, acc, case = [], 0.0, []
        for cls, rate in CLASS_RATES:
            if cls not in class_sizes:
                raise SystemExit(f"the seed release has no work of class {cls!r}")
            acc += rate
            case.append(f"WHEN {_u(3)} < {acc!r} THEN '{cls}'")
            edges.append(cls)
        t0 = time.perf_counter()
        con.execute(
            f"""
            CREATE TEMP TABLE g AS
            SELECT i, {KEY_BASE} + i AS work_key,
                   CAST(floor({_u(1)} * {n_real}) AS INTEGER) AS ra,
                   CAST(floor({_u(2)} * {n_real}) AS INTEGER) AS rb,
                   CASE {" ".join(case)} ELSE 'none' END AS cls,
                   {_u(4)} AS u_tmpl,
                   CAST(floor({_u(5)} * {n_seed}) AS INTEGER) AS rt,
                   {_zipf(6, str(sizes["venues"]))} AS venue_idx,
                   round({_u(7)}, 3) AS score_gemma, round({_u(8)}, 3) AS score_codex
            FROM range({n}) t(i)
            """
        )
        con.execute(
            "CREATE TEMP TABLE gt AS SELECT g.*, c.work_key AS class_key, rt_.work_key AS route_key, "
            "rt_.n_inst, rt_.n_fund FROM g "
            "JOIN (SELECT classification_kind, count(*) AS k FROM tmpl GROUP BY 1) s ON s.classification_kind = g.cls "
            "JOIN tmpl c ON c.classification_kind = g.cls AND c.j = CAST(floor(g.u_tmpl * s.k) AS INTEGER) "
            "JOIN tmpl rt_ ON rt_.r = g.rt"
        )
        con.execute("DROP TABLE g")
        timings["picks_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        con.execute(
            f"""
            INSERT INTO work_institutions
            SELECT DISTINCT work_key, p.name FROM (
              SELECT work_key, {_zipf(10, str(sizes["institutions"])).replace("hash(i, 10)", "hash(i, 10, k)")} AS idx
              FROM gt, range(3) r(k) WHERE k < n_inst
            ) x JOIN pool_institutions p USING (idx) ORDER BY 1, 2
            """
        )
        con.execute(
            f"""
            INSERT INTO work_funders
            SELECT DISTINCT work_key, p.name FROM (
              SELECT work_key, {_zipf(11, str(sizes["funders"])).replace("hash(i, 11)", "hash(i, 11, k)")} AS idx
              FROM gt, range(2) r(k) WHERE k < n_fund
            ) x JOIN pool_funders p USING (idx) ORDER BY 1, 2
            """
        )
        con.execute(
            "INSERT INTO work_keywords SELECT DISTINCT work_key, name FROM "
            "(SELECT gt.work_key, unnest(rr.keywords) AS name FROM gt JOIN pool_real_rows rr ON rr.idx = gt.ra) "
            "WHERE name IS NOT NULL AND name <> '' ORDER BY 1, 2"
        )
        timings["names_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        con.execute(
            """
            INSERT INTO works
            WITH names AS (
              SELECT gt.work_key,
                     (SELECT string_agg(name, '; ' ORDER BY name) FROM work_institutions x WHERE x.work_key = gt.work_key) AS inst,
                     (SELECT string_agg(name, '; ' ORDER BY name) FROM work_funders x WHERE x.work_key = gt.work_key) AS fund
              FROM gt
            ), v AS (
              SELECT gt.*, names.inst, names.fund,
                     array_to_string(list_concat(
                       string_split(a.title, ' ')[1:len(string_split(a.title, ' ')) // 2],
                       string_split(b.title, ' ')[len(string_split(b.title, ' ')) // 2 + 1:]), ' ') AS title,
                     a.year, a.language, a.type, a.field, a.topic, a.cited_by, a.has_abstract, a.has_doi,
                     array_to_string(a.keywords, '; ') AS kw,
                     pv.name AS venue,
                     c.rj AS crj, c.classification_kind, c.release_layer, c.cascade_decision, c.model_version, c.prediction_status, c.candidate_categories,
                     c.consensus_categories, c.scored, c.validation_status,
                     rt.rj AS rrj, rt.is_retracted, rt.retraction_state, rt.openalex_missed, rt.ca_aff, rt.ca_fund,
                     rt.ca_venue, rt.about_ca,
                     rt.invisible_to_affiliation_only, rt.in_sampling_frame,
                     'W' || gt.work_key AS id,
                     CASE WHEN a.has_doi THEN 'https://doi.org/10.99999/metacan.bench.' || gt.work_key END AS doi
              FROM gt JOIN names USING (work_key)
              JOIN pool_real_rows a ON a.idx = gt.ra JOIN pool_real_rows b ON b.idx = gt.rb
              JOIN pool_venues pv ON pv.idx = gt.venue_idx
              JOIN tmpl c ON c.work_key = gt.class_key JOIN tmpl rt ON rt.work_key = gt.route_key
            )
            SELECT work_key, id, title, year, language, type, venue, field, topic, doi, cited_by, has_abstract,
                   is_retracted, retraction_state, openalex_missed, ca_aff, ca_fund, ca_venue, about_ca,
                   invisible_to_affiliation_only, in_sampling_frame, classification_kind, release_layer, cascade_decision,
                   model_version,
                   prediction_status, candidate_categories, consensus_categories, scored,
                   abs(score_gemma - score_codex), validation_status,
                   'works/' || coalesce(model_version, 'unscored') || '/' || id || '.html',
                   CAST(json_merge_patch(crj, json_object(
                     'id', id, 'doi', doi, 'title', title, 'year', year, 'lang', coalesce(language, ''),
                     'type', coalesce(type, ''), 'venue', venue, 'topic', coalesce(topic, ''),
                     'field', coalesce(field, ''), 'cited_by', cited_by, 'is_retracted', is_retracted,
                     'has_abstract', has_abstract, 'ca_institutions', coalesce(inst, ''),
                     'funders', coalesce(fund, ''), 'keywords', coalesce(kw, ''),
                     'routes', rrj->'$.routes', 'route_evidence', rrj->'$.route_evidence',
                     'sampling_frame', rrj->'$.sampling_frame', 'retraction_watch', rrj->'$.retraction_watch',
                     'machine_scores', json_object('score_gemma', score_gemma, 'score_codex', score_codex,
                                                   'score_spread', abs(score_gemma - score_codex))
                   )) AS VARCHAR)
            FROM v ORDER BY work_key
            """
        )
        timings["works_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        con.execute(
            "INSERT INTO work_labels SELECT gt.work_key, l.* EXCLUDE (work_key) FROM gt "
            "JOIN seed.work_labels l ON l.work_key = gt.class_key ORDER BY 1, 2"
        )
        con.execute(
            "INSERT INTO work_decisions SELECT gt.work_key, d.* EXCLUDE (work_key) FROM gt "
            "JOIN seed.work_decisions d ON d.work_key = gt.class_key ORDER BY 1, 2, 3, 4"
        )
        con.execute(
            "INSERT INTO work_scores SELECT work_key, arm, CASE arm WHEN 'gemma' THEN score_gemma ELSE score_codex END, "
            "vs FROM (SELECT gt.work_key, gt.score_gemma, gt.score_codex, c.rj->>'$.machine_scores.validation_status' AS vs "
            "FROM gt JOIN tmpl c ON c.work_key = gt.class_key), (VALUES ('codex'), ('gemma')) a(arm) ORDER BY 1, 2"
        )
        timings["labels_decisions_scores_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        write_synthetic_authorships(con, n)
        timings["authorships_s"] = time.perf_counter() - t0
        # the heads the seed release kept (its student_heads), as the real build's ``heads`` relation
        con.execute(
            "CREATE TEMP VIEW heads AS SELECT model_version, teacher, target, gate_passed, gate_reason "
            "FROM seed.classifier_heads"
        )
        t0 = time.perf_counter()
        build.write_whole_release_tables(
            con, None, write_stored_counts
        )  # as site_database does after its ranges (no prevalence here)
        timings["whole_release_tables_s"] = time.perf_counter() - t0
        sha = hashlib.sha256(release_id.encode()).hexdigest()
        con.execute(
            "INSERT INTO release_info SELECT ?, ?, ?, ?, (SELECT count(*) FROM works), s.frame_build_ids, "
            "coalesce((SELECT list(DISTINCT model_version ORDER BY model_version) FROM works WHERE model_version IS NOT NULL), []), "
            "coalesce((SELECT list(DISTINCT teacher ORDER BY teacher) FROM work_labels), []), "
            "coalesce((SELECT list(DISTINCT arm ORDER BY arm) FROM work_scores), []), 'sqlite_fts5', s.page_context "
            "FROM seed.release_info s",
            [release_id, build.LAYOUT_VERSION, dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0), sha],
        )
        con.execute("DETACH seed")
        t0 = time.perf_counter()
        con.execute("CHECKPOINT")
        timings["checkpoint_s"] = time.perf_counter() - t0
    finally:
        con.close()
    t0 = time.perf_counter()
    build.write_index(db, index)
    timings["fts_index_s"] = time.perf_counter() - t0
    write_pointer(data, release_id)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in build.COUNTED_TABLES + ("work_scores",)
        }
        distinct = {
            c: con.execute(f"SELECT count(DISTINCT {c}) FROM works").fetchone()[0]
            for c in ("year", "language", "type", "venue", "field", "topic", "title")
        }
        for t in ("work_institutions", "work_funders", "work_keywords"):
            distinct[t] = con.execute(f"SELECT count(DISTINCT name) FROM {t}").fetchone()[0]
    finally:
        con.close()
    say(
        f"synthetic release {release_id}: {rows['works']:,} works, {db.stat().st_size / 2**30:.2f} GiB + "
        f"{index.stat().st_size / 2**30:.2f} GiB index; {timings}"
    )
    return {
        "release_id": release_id,
        "seed_release_id": seed_id,
        "seed_works": n_seed,
        "seed_classes": class_sizes,
        "pools": counts,
        "rows": rows,
        "distinct": distinct,
        "database_bytes": db.stat().st_size,
        "fts_index_bytes": index.stat().st_size,
        "build_seconds": {k: round(v, 1) for k, v in timings.items()},
        "layout_version": build.LAYOUT_VERSION,
    }
