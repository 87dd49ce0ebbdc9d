"""Ingestion assets: ``openalex_works``, ``canadian_entities``, ``frame`` and the frame's checks."""


import datetime as dt
import hashlib
import json
import os
import shutil
import uuid
from collections import Counter

import dagster as dg
import pyarrow as pa
from tqdm import tqdm

from ..meta import counts_markdown, table_metadata
from ..openalex.reader import Record, discover, iter_records
from ..openalex.staging import stage_files
from ..openalex.works import WORKS_SCHEMA
from ..resources import OpenAlexFiles
from ..storage import MetacanStorage, sql_literal
from ..openalex.ids import short_id
from .entities import ENTITY_SCHEMA, EntityLists, canadian_entity_rows
from .lexicon import LEXICON_VERSION
from .routes import FRAME_SCHEMA, AdmissionRule, frame_row

FRAME_CODE_VERSION = "frame-v1"

INPUTS_SCHEMA = pa.schema(
    [("source_file", pa.string()), ("bytes", pa.int64()), ("mtime_ns", pa.int64()), ("work_records", pa.int64()),
     ("quarantined", pa.int64()), ("read_path", pa.string())]
)
QUARANTINE_SCHEMA = pa.schema(
    [("source_file", pa.string()), ("locator", pa.string()), ("line", pa.int64()), ("reason", pa.string()), ("excerpt", pa.string())]
)


class IngestConfig(dg.Config):
    """Parallelism of the OpenAlex read: worker processes (0 = one per CPU core)."""

    workers: int = 0


class FrameConfig(dg.Config):
    """SPEC section 2 admission settings."""

    year_min: int = 2000
    year_max: int = 2025


def frame_build_id(inputs: list[dict], versions: dict[str, str], rule: AdmissionRule) -> str:
    """``frame-<12 hex>`` over the input files (path, size, mtime), entity-list versions, lexicon
    version and admission rule: the same inputs give the same id, so an unchanged re-run changes no
    published record; any change gives a new one (SPEC section 9 lineage: "which frame build")."""
    payload = json.dumps({"inputs": sorted((i["source_file"], i["bytes"], i["mtime_ns"]) for i in inputs),
                          "entities": versions, "lexicon": LEXICON_VERSION, "rule": [rule.year_min, rule.year_max],
                          "code": FRAME_CODE_VERSION}, sort_keys=True)
    return "frame-" + hashlib.sha256(payload.encode()).hexdigest()[:12]


def _reason_class(reason: str) -> str:
    return reason.split(":")[0].split("(")[0].strip()


def _merged_work_ids(root) -> set[str]:
    """Old ids from ``data/merged_ids/works/*.csv.gz`` (OpenAlex snapshot docs: merged entities)."""
    import duckdb

    files = sorted(root.rglob("merged_ids/works/*.csv*"))
    if not files:
        return set()
    out: set[str] = set()
    for f in files:
        try:
            rows = duckdb.execute(
                "SELECT DISTINCT id FROM read_csv(?, header=true, columns={'merge_date':'VARCHAR','id':'VARCHAR','merge_into_id':'VARCHAR'})",
                [str(f)],
            ).fetchall()
        except duckdb.Error as exc:
            raise dg.Failure(
                description=f"merged-id file {f} is unreadable ({str(exc).splitlines()[0]}); it must be a (gzip) CSV with the "
                            f"header merge_date,id,merge_into_id as in the OpenAlex snapshot: re-download it or remove it",
                allow_retries=False,
            ) from None
        out.update(short_id(r[0]) or r[0] for r in rows if r[0])
    return out


@dg.asset(
    group_name="ingestion",
    kinds={"python", "parquet"},
    code_version="1",
    owners=["team:metacan"],
)
def openalex_works(context: dg.AssetExecutionContext, config: IngestConfig, storage: MetacanStorage, openalex: OpenAlexFiles) -> dg.MaterializeResult:
    """Every OpenAlex work record under the input folder, one row per work id (newest wins).

    Reads all shapes (API pages, single works, plain lists, archived ``{request, payload}`` files,
    JSON Lines and the snapshot's ``updated_date=*/part_*.gz``), old and current schemas; file by file,
    staging typed rows in Parquet so memory stays at one batch. Deduplicates by id keeping the newest
    ``updated_date`` (ties: the later file in sort order, then the later record in the file) and drops
    ids listed in ``merged_ids/works``.
    Bad records (unparseable line, missing id, non-object, truncated gzip) go to the table
    ``openalex_quarantine`` with file, line/locator and reason; the run goes on. The table
    ``openalex_inputs`` lists every file read (size, mtime, records, reader path): the frame build id
    is derived from it.
    Output: ``warehouse/openalex_works`` (schema ``WORKS_SCHEMA``; no abstract text).
    """
    root = openalex.root
    files, unsupported = discover(root)
    stage = storage.warehouse / f".stage-openalex_works-{uuid.uuid4().hex[:8]}"
    stage.mkdir(parents=True)
    quarantine: list[dict] = [
        {"source_file": str(p.relative_to(root)), "locator": "file", "line": None, "excerpt": "",
         "reason": "not read: unsupported file type; OpenAlex input must be .json, .json.gz, .jsonl, .ndjson or .gz (JSON Lines)"}
        for p in unsupported
    ]
    inputs: list[dict] = []
    read: Counter[str] = Counter()
    workers = config.workers or os.cpu_count() or 1
    try:
        for staged in tqdm(stage_files(files, root, stage, workers), total=len(files), desc="openalex_works: files", unit="file", disable=None):
            quarantine.extend(staged.quarantine)
            read.update(staged.counts)
            inputs.append({"source_file": staged.source_file, "bytes": staged.bytes, "mtime_ns": staged.mtime_ns,
                           "work_records": staged.counts["W"], "quarantined": staged.counts["quarantined"],
                           "read_path": "duckdb" if staged.counts["fast_path_files"] else "python"})
            if staged.fallback_reason:
                context.log.info(f"{staged.source_file}: read on the exact path ({staged.fallback_reason})")
        merged = _merged_work_ids(root)
        n_work_records = read["W"]
        if not any(stage.glob("*.parquet")):
            rows = storage.write_table("openalex_works", [], schema=WORKS_SCHEMA)
        else:
            import duckdb

            con = duckdb.connect(config={"memory_limit": "1GB", "temp_directory": str(stage / "spill"),
                                         "preserve_insertion_order": False})
            con.execute("CREATE TEMP TABLE merged(id VARCHAR)")
            if merged:
                con.executemany("INSERT INTO merged VALUES (?)", [[m] for m in merged])
            staged = f"read_parquet({sql_literal(str(stage / '*.parquet'))})"
            n_rows, n_ids, n_merged = con.execute(
                f"SELECT count(*), count(DISTINCT id), count(*) FILTER (id IN (SELECT id FROM merged)) FROM {staged}").fetchone()
            if n_rows == n_ids and n_merged == 0:  # the usual snapshot case: the staged files are the table
                con.close()
                shutil.rmtree(stage / "spill", ignore_errors=True)
                storage.adopt_table("openalex_works", stage)
                rows = n_rows
            else:
                reader = con.execute(f"""
                    SELECT * EXCLUDE (rn) FROM (
                      SELECT *, row_number() OVER (
                        PARTITION BY id ORDER BY updated_date DESC NULLS LAST, source_file DESC,
                          TRY_CAST(regexp_extract(source_locator, '([0-9]+)[^0-9]*$', 1) AS BIGINT) DESC NULLS LAST) AS rn
                      FROM {staged}
                    ) WHERE rn = 1 AND id NOT IN (SELECT id FROM merged)""").to_arrow_reader(50_000)
                rows = storage.write_table("openalex_works", reader, schema=WORKS_SCHEMA)
                con.close()
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    storage.write_table("openalex_quarantine", pa.Table.from_pylist(quarantine, schema=QUARANTINE_SCHEMA))
    storage.write_table("openalex_inputs", pa.Table.from_pylist(sorted(inputs, key=lambda r: r["source_file"]), schema=INPUTS_SCHEMA))
    by_reason = Counter(_reason_class(q["reason"]) for q in quarantine)
    context.log.info(
        f"openalex_works: {len(files)} files, {n_work_records} work records -> {rows} unique works; "
        f"{len(quarantine)} quarantined ({dict(by_reason)}); {len(merged)} merged ids applied"
    )
    preview = storage.read_table("openalex_works", ["id", "title_text", "publication_year", "updated_date", "source_file"]).slice(0, 10).to_pylist()
    return dg.MaterializeResult(
        metadata=table_metadata(
            WORKS_SCHEMA, rows, preview, ["id", "title_text", "publication_year", "updated_date", "source_file"],
            files_read=len(files),
            work_records_read=n_work_records,
            duplicates_dropped=n_work_records - rows,
            merged_ids_applied=len(merged),
            quarantined=len(quarantine),
            quarantined_by_reason=counts_markdown(dict(by_reason), "reason"),
            records_by_entity=counts_markdown({k: v for k, v in read.items() if len(k) == 1}, "entity"),
            files_on_fast_path=read["fast_path_files"],
            files_on_exact_path=read["exact_path_files"],
            workers=workers,
        )
    )


@dg.asset(group_name="ingestion", kinds={"python", "parquet"}, code_version="1", owners=["team:metacan"])
def canadian_entities(context: dg.AssetExecutionContext, storage: MetacanStorage, openalex: OpenAlexFiles) -> dg.MaterializeResult:
    """Pinned lists of Canadian funders, sources and institutions (SPEC section 2).

    Every funder (``F``), source (``S``) and institution (``I``) record under the input folder whose
    ``country_code`` is ``CA``: funder files and archived funder responses, snapshot
    ``data/funders|sources|institutions/updated_date=*/part_*.gz``. Each list carries a version
    ``<kind>s@<build date>#<hash of its ids>``; the frame records the versions it used.
    Output: ``warehouse/canadian_entities`` (kind, id, display_name, country_code, updated_date,
    source_file, list_version).
    """
    built_on = dt.date.today().isoformat()
    snapshot_dirs = {"funders", "sources", "institutions"}
    records = (r for r in iter_records(openalex.root, snapshot_dirs) if isinstance(r, Record) and r.kind != "W")
    rows = canadian_entity_rows(records, built_on)
    n = storage.write_table("canadian_entities", pa.Table.from_pylist(rows, schema=ENTITY_SCHEMA))
    by_kind = Counter(r["kind"] for r in rows)
    versions = {r["kind"]: r["list_version"] for r in rows}
    context.log.info(f"canadian_entities: {dict(by_kind)}; versions {versions}")
    if not by_kind.get("funder"):
        context.log.warning("no Canadian funder records found: the ca_fund route cannot fire")
    return dg.MaterializeResult(
        metadata=table_metadata(
            ENTITY_SCHEMA, n, rows, ["kind", "id", "display_name", "list_version"],
            built_on=built_on,
            funders=by_kind.get("funder", 0),
            sources=by_kind.get("source", 0),
            institutions=by_kind.get("institution", 0),
            list_versions=dg.MetadataValue.json(versions),
        )
    )


@dg.asset(
    group_name="ingestion",
    kinds={"python", "parquet", "duckdb"},
    code_version="1",
    owners=["team:metacan"],
    deps=[openalex_works, canadian_entities],
)
def frame(context: dg.AssetExecutionContext, config: FrameConfig, storage: MetacanStorage) -> dg.MaterializeResult:
    """The frame of Canada-linked works with their routes and evidence (SPEC section 2 in full).

    One row per admitted work: the four routes (``ca_aff``, ``ca_fund``, ``ca_venue``,
    ``about_ca``) with the evidence that fired each, ``invisible_to_affiliation_only``, the
    sampling-frame flags (paratext and titles of 10 characters or fewer stay in the frame, flagged),
    ``has_abstract`` (no abstract text is stored), the entity-list versions and lexicon version used.
    Admission: ``year_min <= publication_year <= year_max``, non-empty title, at least one route.
    Streams ``openalex_works`` in batches; DuckDB first drops the works on which no route can fire.
    Output: ``warehouse/frame`` plus the DuckDB view ``frame``.
    """
    entities = EntityLists.from_table(storage.read_table("canadian_entities"))
    rule = AdmissionRule(config.year_min, config.year_max)
    build_id = frame_build_id(storage.read_table("openalex_inputs", ["source_file", "bytes", "mtime_ns"]).to_pylist(),
                              entities.versions, rule)
    outcomes: Counter[str] = Counter()

    import duckdb

    con = duckdb.connect(config={"memory_limit": "1GB", "preserve_insertion_order": False})
    params = {"inst": list(entities.institutions), "funders": list(entities.funders), "sources": list(entities.sources)}
    files = sorted(storage.table_dir("openalex_works").glob("*.parquet"))
    total = 0

    def candidates():
        """Works on which some route can fire (about 5% of a snapshot), one staged file at a time so
        memory stays at one file; frame_row then decides routes, evidence and admission exactly."""
        nonlocal total
        for f in files:
            total += con.execute(f"SELECT count(*) FROM read_parquet({sql_literal(str(f))})").fetchone()[0]
            yield from con.execute(
                f"""SELECT * FROM read_parquet({sql_literal(str(f))}) WHERE
                      list_contains(author_countries, 'CA')
                      OR len(list_filter(institutions, i -> i.country_code = 'CA' OR list_contains($inst, i.id))) > 0
                      OR len(list_filter(funders, f -> list_contains($funders, f.id))) > 0
                      OR list_contains($sources, venue_id)
                      OR len(list_filter(lexicon_hits, h -> h.tier IN ('A', 'B'))) > 0""",
                params,
            ).to_arrow_reader(20_000)

    def batches():
        for batch in candidates():
            out = []
            for work in batch.to_pylist():
                row, outcome = frame_row(work, entities, rule)
                outcomes[outcome] += 1
                if row is not None:
                    row["frame_build_id"] = build_id
                    out.append(row)
            yield pa.Table.from_pylist(out, schema=FRAME_SCHEMA)

    n = storage.write_table("frame", batches(), schema=FRAME_SCHEMA)
    con.close()
    outcomes["no_route"] += total - sum(outcomes.values())
    with storage.connect() as con:
        stats = con.execute(
            """SELECT count(*) FILTER (ca_aff), count(*) FILTER (ca_fund), count(*) FILTER (ca_venue),
                      count(*) FILTER (about_ca), count(*) FILTER (invisible_to_affiliation_only),
                      count(*) FILTER (in_sampling_frame), count(*) FILTER (has_abstract)
               FROM frame"""
        ).fetchone()
        preview = con.execute(
            "SELECT id, title_text, publication_year, route_key, in_sampling_frame FROM frame ORDER BY id LIMIT 10"
        ).to_arrow_table().to_pylist()
    if n == 0:
        raise dg.Failure(
            description=(f"the frame is empty: none of the {sum(outcomes.values())} works read is Canada-linked with a title "
                         f"and a publication year in {config.year_min}-{config.year_max} (outcomes {dict(outcomes)}). Check the "
                         f"input folder (METACAN_OPENALEX_DIR) and the year range (frame config)."),
            allow_retries=False,
        )
    by_route = dict(zip(("ca_aff", "ca_fund", "ca_venue", "about_ca"), stats[:4]))
    context.log.info(f"frame: {n} works admitted; by route {by_route}; outcomes {dict(outcomes)}")
    return dg.MaterializeResult(
        metadata=table_metadata(
            FRAME_SCHEMA, n, preview, ["id", "title_text", "publication_year", "route_key", "in_sampling_frame"],
            works_read=sum(outcomes.values()),
            admitted_by_route=counts_markdown(by_route, "route"),
            affiliation_blind=stats[4],
            affiliation_blind_share=round(stats[4] / n, 4) if n else 0.0,
            in_sampling_frame=stats[5],
            with_abstract=stats[6],
            outcomes=counts_markdown(dict(outcomes), "outcome"),
            entity_list_versions=dg.MetadataValue.json(entities.versions),
            frame_build_id=build_id,
        )
    )


@dg.asset_check(asset=frame, blocking=True, description="Every frame work appears once (SPEC section 2: a work appears once).")
def frame_ids_unique(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when an id occurs more than once in the frame; metadata lists up to 10 offenders."""
    with storage.connect() as con:
        dups = con.execute("SELECT id, count(*) c FROM frame GROUP BY id HAVING c > 1 ORDER BY id LIMIT 10").fetchall()
    return dg.AssetCheckResult(passed=not dups, metadata={"duplicate_ids": dg.MetadataValue.json([d[0] for d in dups])})


@dg.asset_check(asset=frame, blocking=True, description="Every frame row has a route, evidence for each true route, and no abstract column.")
def frame_routes_have_evidence(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when a row has no true route, a true route without evidence, or an abstract column exists."""
    with storage.connect() as con:
        bad = con.execute(
            """SELECT id FROM frame WHERE NOT (ca_aff OR ca_fund OR ca_venue OR about_ca)
                 OR (ca_aff AND len(ca_aff_evidence) = 0) OR (ca_fund AND len(ca_fund_evidence) = 0)
                 OR (ca_venue AND len(ca_venue_evidence) = 0) OR (about_ca AND len(about_ca_evidence) = 0)
               ORDER BY id LIMIT 10"""
        ).fetchall()
        cols = [r[0] for r in con.execute("DESCRIBE frame").fetchall()]
    abstract_cols = [c for c in cols if "abstract" in c and c != "has_abstract"]
    return dg.AssetCheckResult(
        passed=not bad and not abstract_cols,
        metadata={"rows_without_route_evidence": dg.MetadataValue.json([b[0] for b in bad]),
                  "abstract_columns": dg.MetadataValue.json(abstract_cols)},
    )
