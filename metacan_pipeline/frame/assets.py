"""Ingestion assets: ``openalex_inventory``, ``canadian_entities``, ``frame_parts`` (partitioned),
``frame``, and the frame's checks (SPEC section 2; issue 3: frame ingestion at OpenAlex scale).

A frame build reads each input file once into a part (:mod:`metacan_pipeline.frame.parts`):
``frame_parts`` builds the parts of the selected partitions in parallel worker processes and skips the
parts already built; ``frame`` merges every part into the frame (newest version of a work wins,
merged and deleted ids removed, admission filter applied), which takes seconds.
"""

import datetime as dt
import gzip
import hashlib
import json
import warnings
from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from ..meta import counts_markdown, frame_plot_png, markdown_preview, png_markdown, table_metadata
from ..openalex.ids import short_id
from ..openalex.inventory import take_inventory
from ..openalex.lexicon import LEXICON_VERSION
from ..openalex.reader import Record, iter_records
from ..resources import OpenAlexFiles
from ..storage import MetacanStorage, sql_literal
from ..tables.frame import BUILD_MANIFEST_SCHEMA, ENTITY_SCHEMA, FRAME_SCHEMA, QUARANTINE_SCHEMA, ROUTED_SCHEMA
from ..tables.openalex import INVENTORY_SCHEMA
from .entities import EntityLists, canadian_entity_rows
from .parts import InputChanged, PartJob, build_key, build_parts, default_workers, finished, part_dir
from .routes import AdmissionRule

FRAME_CODE_VERSION = "frame-v2"
# BackfillPolicy is "beta" in Dagster 1.13; we pin the version, so the warning only adds noise to every run's log.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)

#: The frame's partitions: one per snapshot ``updated_date=`` folder, one per API refresh window
#: (``window=<from>_<to>``), plus ``files`` for every other input file. Registered by
#: ``openalex_inventory`` as it finds them.
openalex_partitions = dg.DynamicPartitionsDefinition(name="openalex_partitions")


class IngestConfig(dg.Config):
    """Parallelism of the part builds: worker processes (0 = one per CPU core)."""

    workers: int = 0


class FrameConfig(dg.Config):
    """SPEC section 2 admission settings."""

    year_min: int = 2000
    year_max: int = 2025


#: One row per distinct frame build: the Dagster run that first produced it (per-work lineage, SPEC section 9).


def frame_build_id(parts: list[dict], versions: dict[str, str], rule: AdmissionRule, merged_files: list[str]) -> str:
    """``frame-<12 hex>`` over the parts used (file and sha256), the entity-list versions, the lexicon
    version, the admission rule and the merged-id files: the same inputs give the same id, so an
    unchanged re-run changes no published record; any change gives a new one (SPEC section 9 lineage:
    "which frame build")."""
    payload = json.dumps(
        {
            "parts": sorted((p["source_file"], p["sha256"]) for p in parts),
            "entities": versions,
            "lexicon": LEXICON_VERSION,
            "rule": [rule.year_min, rule.year_max],
            "merged": sorted(merged_files),
            "code": FRAME_CODE_VERSION,
        },
        sort_keys=True,
    )
    return "frame-" + hashlib.sha256(payload.encode()).hexdigest()[:12]


def _reason_class(reason: str) -> str:
    return reason.split(":")[0].split("(")[0].strip()


def _removed_work_ids(root: Path) -> tuple[dict[str, str], list[str]]:
    """``({old id: merged into, or '' when deleted}, files read)`` from ``merged_ids/works/*.csv[.gz]``
    (OpenAlex snapshot docs, "Merged entities": columns ``merge_date,id,merge_into_id``). A row
    with an empty ``merge_into_id`` is a deletion. Raises dg.Failure naming an unreadable file."""
    import duckdb

    files = sorted(p for p in root.rglob("merged_ids/works/*") if p.name.lower().endswith((".csv", ".csv.gz")))
    out: dict[str, str] = {}
    for f in files:
        try:  # read_csv with explicit columns renames by position: check the header first
            with (gzip.open if f.name.lower().endswith(".gz") else open)(f, "rb") as fh:
                header = fh.readline().decode("utf-8-sig", errors="replace").strip().lower().replace(" ", "")
        except (OSError, EOFError) as exc:
            header, why = None, f"is unreadable ({exc})"
        if header != "merge_date,id,merge_into_id":
            raise dg.Failure(
                description=f"merged-id file {f} "
                + (why if header is None else f"has the header {header[:100]!r}, so its columns would be misread")
                + "; it must be a (gzip) CSV with the header merge_date,id,merge_into_id as in the "
                "OpenAlex snapshot: re-download it or remove it",
                allow_retries=False,
            )
        try:
            rows = duckdb.execute(
                "SELECT id, merge_into_id FROM read_csv(?, header=true, columns={'merge_date':'VARCHAR','id':'VARCHAR','merge_into_id':'VARCHAR'})",
                [str(f)],
            ).fetchall()
        except duckdb.Error as exc:
            raise dg.Failure(
                description=f"merged-id file {f} is unreadable ({str(exc).splitlines()[0]}); it must be a (gzip) CSV with the "
                f"header merge_date,id,merge_into_id as in the OpenAlex snapshot: re-download it or remove it",
                allow_retries=False,
            ) from None
        for old, new in rows:
            if old:
                out[short_id(old) or old] = short_id(new) or ""
    return out, [str(f.relative_to(root)) for f in files]


def _part_jobs(storage: MetacanStorage, openalex: OpenAlexFiles, keys: set[str] | None = None) -> list[PartJob]:
    rows = storage.read_table("openalex_inventory").to_pylist()
    return [
        PartJob(
            str(openalex.path_of(r["source_file"])),
            r["source_file"],
            r["partition_key"],
            r["bytes"],
            r["mtime_ns"],
            r["manifest_record_count"],
            "no_manifest" if r["manifest_status"] == "not_snapshot" else r["manifest_status"],
        )
        for r in rows
        if r["present"] and r["manifest_status"] != "unsupported" and (keys is None or r["partition_key"] in keys)
    ]


#: ``openalex_inventory`` also lists the API archive that ``openalex_api_refresh`` (frame/api_refresh.py,
#: which imports this module) writes: a dependency by key, for lineage, without an import cycle.
API_REFRESH_KEY = dg.AssetKey("openalex_api_refresh")


@dg.asset(
    group_name="ingestion",
    kinds={"python", "parquet"},
    code_version="1",
    owners=["team:metacan"],
    deps=[API_REFRESH_KEY],
)
def openalex_inventory(
    context: dg.AssetExecutionContext, storage: MetacanStorage, openalex: OpenAlexFiles
) -> dg.MaterializeResult:
    """Every work-bearing file under the OpenAlex input folder and the API archive, by frame
    partition, checked against the snapshot manifests (OpenAlex docs, "Download the snapshot").

    Registers one ``openalex_partitions`` key per snapshot ``updated_date=`` folder present, one per
    API refresh window folder (``window=<from>_<to>``, written by ``openalex_api_refresh``) and
    ``files`` for the other files, and removes keys whose files are gone. A partition whose parts
    are not all listed in its manifest, or whose manifest lists parts that are not here, is
    incomplete: it is still read (nothing is lost) and the ``frame`` check
    ``frame_build_manifest_covers_snapshot`` warns. A listed part whose size is not the manifest's
    ``content_length`` (a cut or replaced download) is logged as a warning and the check warns too. Unsupported files are listed, never skipped
    silently. Output: ``warehouse/openalex_inventory`` (:data:`INVENTORY_SCHEMA`).
    """
    inv = take_inventory(openalex.root, openalex.api_root)
    if not inv.present():  # an empty (or unmounted) folder: fail before any partition key is removed
        raise dg.Failure(
            description=(
                f"no OpenAlex input files under {openalex.root}"
                + (f" (only unsupported files, e.g. {inv.unsupported[0][0]})" if inv.unsupported else "")
                + f" nor in the API archive {openalex.api_root}: point METACAN_OPENALEX_DIR (the openalex resource's input_dir) "
                f"at a folder of OpenAlex .json / .json.gz / .jsonl / .ndjson / snapshot part_*.gz files"
            ),
            allow_retries=False,
        )
    rows = inv.rows + [
        {
            "partition_key": "files",
            "source_file": name,
            "present": True,
            "bytes": p.stat().st_size,
            "mtime_ns": p.stat().st_mtime_ns,
            "manifest_record_count": None,
            "manifest_bytes": None,
            "manifest_status": "unsupported",
            "manifest_file": None,
        }
        for name, p in inv.unsupported
    ]
    storage.write_table("openalex_inventory", pa.Table.from_pylist(rows, schema=INVENTORY_SCHEMA))
    keys = inv.partition_keys()
    known = set(context.instance.get_dynamic_partitions(openalex_partitions.name))
    new = [k for k in keys if k not in known]
    gone = sorted(known - set(keys))
    if new:
        context.instance.add_dynamic_partitions(openalex_partitions.name, new)
    for k in gone:
        context.instance.delete_dynamic_partition(openalex_partitions.name, k)
    for err in inv.manifest_errors:
        context.log.warning(err)
    incomplete = inv.incomplete_partitions()
    if incomplete:
        context.log.warning(
            f"{len(incomplete)} snapshot partition(s) incomplete (read anyway): "
            + "; ".join(f"{k}: {why}" for k, why in list(incomplete.items())[:10])
        )
    resized = inv.size_mismatches()
    for r in resized:
        context.log.warning(
            f"{r['source_file']}: {r['bytes']} bytes here, the snapshot manifest lists {r['manifest_bytes']} "
            f"(truncated or replaced download? re-download it); read anyway"
        )
    for name, _ in inv.unsupported:
        context.log.warning(
            f"not read: {name} (unsupported file type; OpenAlex input must be .json, "
            f".json.gz, .jsonl, .ndjson or .gz JSON Lines)"
        )
    present = inv.present()
    missing = [r for r in inv.rows if r["manifest_status"] == "missing_locally"]
    by_key = Counter(r["partition_key"] for r in present)
    context.log.info(
        f"openalex_inventory: {len(present)} files in {len(keys)} partitions ({len(new)} new, {len(gone)} removed); "
        f"{len(missing)} manifest parts not here; {len(incomplete)} incomplete partitions"
    )
    return dg.MaterializeResult(
        metadata=table_metadata(
            INVENTORY_SCHEMA,
            len(rows),
            present,
            ["partition_key", "source_file", "bytes", "manifest_status"],
            files_present=len(present),
            bytes_present=sum(r["bytes"] for r in present),
            partitions=len(keys),
            partitions_added=dg.MetadataValue.json(new),
            partitions_removed=dg.MetadataValue.json(gone),
            files_by_partition=counts_markdown(dict(by_key), "partition", "files"),
            manifest_parts_not_here=len(missing),
            size_mismatches=dg.MetadataValue.json(
                [f"{r['source_file']}: {r['bytes']} bytes, manifest {r['manifest_bytes']}" for r in resized]
            ),
            incomplete_partitions=dg.MetadataValue.md(
                "".join(f"- `{k}`: {why}\n" for k, why in incomplete.items()) or "_(none)_"
            ),
            manifest_errors=dg.MetadataValue.json(inv.manifest_errors),
            unsupported_files=dg.MetadataValue.json([name for name, _ in inv.unsupported]),
        )
    )


@dg.asset(group_name="ingestion", kinds={"python", "parquet"}, code_version="1", owners=["team:metacan"])
def canadian_entities(
    context: dg.AssetExecutionContext, storage: MetacanStorage, openalex: OpenAlexFiles
) -> dg.MaterializeResult:
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
            ENTITY_SCHEMA,
            n,
            rows,
            ["kind", "id", "display_name", "list_version"],
            built_on=built_on,
            funders=by_kind.get("funder", 0),
            sources=by_kind.get("source", 0),
            institutions=by_kind.get("institution", 0),
            list_versions=dg.MetadataValue.json(versions),
        )
    )


@dg.asset(
    group_name="ingestion",
    kinds={"python", "duckdb", "parquet"},
    code_version="1",
    owners=["team:metacan"],
    partitions_def=openalex_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[openalex_inventory, canadian_entities],
)
def frame_parts(
    context: dg.AssetExecutionContext, config: IngestConfig, storage: MetacanStorage, openalex: OpenAlexFiles
) -> dg.MaterializeResult:
    """The frame's parts for the selected partitions: each input file read once into its routed
    works, its id index, its quarantine rows and its build-manifest row
    (:mod:`metacan_pipeline.frame.parts`).

    A backfill of many partitions runs as one run whose files are built ``workers`` at a time,
    largest first. A part already built with the same build key (file size and mtime, entity-list
    versions, lexicon and code version) is skipped without being read, so an interrupted build
    resumes at the first unfinished part. Each part's record count is checked against its snapshot
    manifest entry; a mismatch is logged and recorded (``count_check``), never fatal.
    Output: ``warehouse/frame_parts/<partition>/<part>/``.
    """
    keys = set(context.partition_keys)
    entities = EntityLists.from_table(storage.read_table("canadian_entities"))
    jobs = _part_jobs(storage, openalex, keys)
    parts_root = storage.table_dir("frame_parts")
    todo, skipped = [], []
    for job in jobs:
        key = build_key(job, entities)
        done = finished(parts_root, job, key)
        (skipped.append(done) if done else todo.append((job, key)))
    if not jobs:
        context.log.warning(
            f"no input files in partition(s) {sorted(keys)}: materialize openalex_inventory to refresh the partitions"
        )
    workers = default_workers(config.workers)
    context.log.info(
        f"frame_parts: {len(jobs)} files in {len(keys)} partition(s); {len(skipped)} already built, {len(todo)} to build "
        f"with {workers} worker(s)"
    )
    built: list[dict] = []
    progress = tqdm(total=sum(j.bytes for j, _ in todo), desc="frame_parts", unit="B", unit_scale=True, disable=None)
    try:
        for row in build_parts(todo, parts_root, entities, context.run.run_id, workers):
            built.append(row)
            progress.update(row["bytes"])
            msg = (
                f"{row['source_file']}: {row['records_read']} records, {row['work_records']} works, {row['routed']} routed, "
                f"{row['quarantined']} quarantined, {row['seconds']:.1f}s via {row['read_path']} ({len(built)}/{len(todo)})"
            )
            if row["fallback_reason"]:
                msg += f"; exact path because {row['fallback_reason']}"
            context.log.info(msg)
            if row["count_check"] == "mismatch":
                context.log.warning(
                    f"{row['source_file']}: the snapshot manifest lists {row['manifest_record_count']} records, "
                    f"{row['records_read']} were read (truncated or replaced part? re-download it)"
                )
    except InputChanged as exc:  # parts finished before it are kept; a re-run after frame_refresh builds the rest
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    progress.close()
    quarantine = Counter()
    for row in built:
        if row["quarantined"]:
            q = pq.read_table(
                part_dir(parts_root, row["partition_key"], row["source_file"]) / "quarantine.parquet",
                columns=["reason"],
            )
            quarantine.update(_reason_class(r) for r in q.column("reason").to_pylist())
    rows = skipped + built
    mismatches = [r for r in rows if r["count_check"] == "mismatch"]
    routed = sum(r["routed"] for r in rows)
    return dg.MaterializeResult(
        metadata={
            # the rows these partitions hold: routed works (candidates for the frame), in ROUTED_SCHEMA
            **table_metadata(ROUTED_SCHEMA, routed),
            "parts_preview": markdown_preview(
                sorted(rows, key=lambda r: r["source_file"]),
                ["source_file", "records_read", "work_records", "routed", "quarantined", "read_path"],
            ),
            "partitions": len(keys),
            "parts": len(rows),
            "parts_built": len(built),
            "parts_already_built": len(skipped),
            "records_read": sum(r["records_read"] for r in rows),
            "work_records_read": sum(r["work_records"] for r in rows),
            "routed_works": routed,
            "quarantined_by_reason": counts_markdown(dict(quarantine), "reason"),
            "count_mismatches": dg.MetadataValue.md(
                "".join(
                    f"- `{r['source_file']}`: manifest {r['manifest_record_count']}, read {r['records_read']}\n"
                    for r in mismatches
                )
                or "_(none)_"
            ),
            "build_seconds": round(sum(r["seconds"] for r in built), 1),
            "workers": workers,
        }
    )


@dg.asset(
    group_name="ingestion",
    kinds={"duckdb", "parquet"},
    code_version="2",
    owners=["team:metacan"],
    deps=[frame_parts, openalex_inventory, canadian_entities],
)
def frame(
    context: dg.AssetExecutionContext, config: FrameConfig, storage: MetacanStorage, openalex: OpenAlexFiles
) -> dg.MaterializeResult:
    """The frame of Canada-linked works with their routes and evidence (SPEC section 2 in full).

    Merges the parts of every file in the inventory: per work id the newest version wins (newest
    ``updated_date``, then the later file in sort order, then the later record in the file); ids in
    ``merged_ids/works`` (merged, or deleted when ``merge_into_id`` is empty) are removed; a work
    whose newest version has no route leaves the frame; the admission filter (``year_min <=
    publication_year <= year_max``, non-empty title) is applied. One row per admitted work: the four
    routes with their evidence, ``invisible_to_affiliation_only``, the sampling-frame flags,
    ``has_abstract`` (no abstract text), the entity-list and lexicon versions, ``frame_build_id``.
    Also writes ``openalex_quarantine`` (every bad record, file, line, reason) and
    ``frame_build_manifest`` (one row per part, with its admitted count).
    Raises dg.Failure naming the partitions to materialize when a part is not built, and when the
    frame is empty. Output: ``warehouse/frame`` plus the DuckDB view ``frame``.
    """
    import duckdb

    entities = EntityLists.from_table(storage.read_table("canadian_entities"))
    rule = AdmissionRule(config.year_min, config.year_max)
    parts_root = storage.table_dir("frame_parts")
    jobs = _part_jobs(storage, openalex)
    manifest, unbuilt = [], []
    for job in jobs:
        row = finished(parts_root, job, build_key(job, entities))
        (manifest.append(row) if row else unbuilt.append(job))
    if unbuilt:
        keys = sorted({j.partition_key for j in unbuilt})
        raise dg.Failure(
            description=(
                f"{len(unbuilt)} input file(s) have no finished part for the current inputs and entity lists, in partition(s) "
                f"{keys[:10]}{' ...' if len(keys) > 10 else ''} (e.g. {unbuilt[0].source_file}): materialize frame_parts for "
                f"those partitions first (Dagster UI: frame_parts > Materialize > select the partitions; or `metacan run`)."
            ),
            allow_retries=False,
        )
    removed, merged_files = _removed_work_ids(openalex.root)
    build_id = frame_build_id(manifest, entities.versions, rule, merged_files)
    dirs = [part_dir(parts_root, r["partition_key"], r["source_file"]) for r in manifest]
    if not dirs:
        raise dg.Failure(
            description=f"no OpenAlex input files under {openalex.root}: point METACAN_OPENALEX_DIR at a folder of "
            f"OpenAlex files and materialize openalex_inventory",
            allow_retries=False,
        )
    con = duckdb.connect(
        config={
            "memory_limit": "1GB",
            "temp_directory": str(storage.warehouse / ".spill-frame"),
            "preserve_insertion_order": False,
        }
    )
    try:
        con.execute("CREATE TEMP TABLE removed(id VARCHAR)")
        if removed:
            con.executemany("INSERT INTO removed VALUES (?)", [[i] for i in removed])
        for view, name in (("routed", "routed.parquet"), ("idx", "index.parquet")):  # a view takes no parameters
            files = ", ".join(sql_literal(str(d / name)) for d in dirs)
            con.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM read_parquet([{files}], hive_partitioning=false)")
        con.execute("""
            CREATE TEMP TABLE newest AS
            SELECT id, source_file, source_locator FROM (
              SELECT id, source_file, source_locator, row_number() OVER (
                PARTITION BY id ORDER BY updated_date DESC NULLS LAST, source_file DESC, ordinal DESC NULLS LAST) AS rn
              FROM idx WHERE id IN (SELECT id FROM routed)) WHERE rn = 1""")
        con.execute(
            """
            CREATE TEMP TABLE outcome AS
            SELECT r.id, r.source_file, r.source_locator,
              CASE WHEN n.id IS NULL THEN 'superseded'
                   WHEN r.id IN (SELECT id FROM removed) THEN 'merged_or_deleted'
                   WHEN coalesce(r.title_text, '') = '' THEN 'no_title'
                   WHEN r.publication_year IS NULL OR r.publication_year NOT BETWEEN $min AND $max THEN 'year_out_of_range'
                   ELSE 'admitted' END AS outcome
            FROM routed r LEFT JOIN newest n USING (id, source_file, source_locator)""",
            {"min": rule.year_min, "max": rule.year_max},
        )
        n_records, n_unique = con.execute("SELECT count(*), count(DISTINCT id) FROM idx").fetchone()
        outcomes = dict(
            con.execute("SELECT outcome, count(*) FROM outcome WHERE outcome <> 'superseded' GROUP BY ALL").fetchall()
        )
        outcomes["newest_version_has_no_route"] = con.execute(
            "SELECT count(*) FROM newest n WHERE NOT EXISTS (SELECT 1 FROM routed r WHERE r.id = n.id AND r.source_file = n.source_file "
            "AND r.source_locator = n.source_locator)"
        ).fetchone()[0]
        outcomes["no_route"] = n_unique - con.execute("SELECT count(DISTINCT id) FROM routed").fetchone()[0]
        admitted_by_file = dict(
            con.execute("SELECT source_file, count(*) FROM outcome WHERE outcome = 'admitted' GROUP BY ALL").fetchall()
        )
        reader = con.execute(
            """SELECT r.*, $build_id AS frame_build_id FROM routed r
                JOIN outcome o USING (id, source_file, source_locator) WHERE o.outcome = 'admitted' ORDER BY r.id""",
            {"build_id": build_id},
        ).to_arrow_reader(50_000)
        n = storage.write_table("frame", reader, schema=FRAME_SCHEMA)
        quarantine = con.execute(
            "SELECT * FROM read_parquet(?, hive_partitioning=false)", [[str(d / "quarantine.parquet") for d in dirs]]
        ).to_arrow_table()
    finally:
        con.close()
    unsupported = [
        r for r in storage.read_table("openalex_inventory").to_pylist() if r["manifest_status"] == "unsupported"
    ]
    quarantine = pa.concat_tables(
        [
            quarantine.cast(QUARANTINE_SCHEMA),
            pa.Table.from_pylist(
                [
                    {
                        "source_file": r["source_file"],
                        "locator": "file",
                        "line": None,
                        "excerpt": "",
                        "reason": "not read: unsupported file type; OpenAlex input must be .json, .json.gz, .jsonl, .ndjson or .gz (JSON Lines)",
                    }
                    for r in unsupported
                ],
                schema=QUARANTINE_SCHEMA,
            ),
        ]
    )
    storage.write_table("openalex_quarantine", quarantine)
    storage.write_table(
        "frame_build_manifest",
        pa.Table.from_pylist(
            sorted(
                ({**r, "admitted": admitted_by_file.get(r["source_file"], 0)} for r in manifest),
                key=lambda r: r["source_file"],
            ),
            schema=BUILD_MANIFEST_SCHEMA,
        ),
    )
    by_reason = Counter(_reason_class(r) for r in quarantine.column("reason").to_pylist())
    if n == 0:
        raise dg.Failure(
            description=(
                f"the frame is empty: none of the {n_unique} works read is Canada-linked with a title "
                f"and a publication year in {config.year_min}-{config.year_max} (outcomes {outcomes}). Check the "
                f"input folder (METACAN_OPENALEX_DIR) and the year range (frame config)."
            ),
            allow_retries=False,
        )
    with storage.connect() as con:
        # the first run that produced this build id (a re-run over unchanged parts yields the same id and keeps it)
        con.execute(
            "INSERT INTO frame_builds VALUES (?, ?, now(), ?, ?) ON CONFLICT DO NOTHING",
            [build_id, context.run.run_id, n, len(manifest)],
        )
        stats = con.execute(
            """SELECT count(*) FILTER (ca_aff), count(*) FILTER (ca_fund), count(*) FILTER (ca_venue),
                      count(*) FILTER (about_ca), count(*) FILTER (invisible_to_affiliation_only),
                      count(*) FILTER (in_sampling_frame), count(*) FILTER (has_abstract)
               FROM frame"""
        ).fetchone()
        preview = (
            con.execute(
                "SELECT id, title_text, publication_year, route_key, in_sampling_frame FROM frame ORDER BY id LIMIT 10"
            )
            .to_arrow_table()
            .to_pylist()
        )
        by_year: dict[int, dict[str, int]] = {}
        for year, *counts in con.execute(
            "SELECT publication_year, count(*) FILTER (ca_aff), count(*) FILTER (ca_fund), count(*) FILTER (ca_venue), "
            "count(*) FILTER (about_ca) FROM frame GROUP BY ALL ORDER BY 1"
        ).fetchall():
            by_year[year] = dict(zip(("ca_aff", "ca_fund", "ca_venue", "about_ca"), counts, strict=False))
    by_route = dict(zip(("ca_aff", "ca_fund", "ca_venue", "about_ca"), stats[:4], strict=False))
    context.log.info(
        f"frame: {n} works admitted of {n_unique} unique works ({n_records} work records) in {len(manifest)} parts; "
        f"by route {by_route}; outcomes {outcomes}; {len(quarantine)} quarantined ({dict(by_reason)}); "
        f"{len(removed)} merged/deleted ids"
    )
    return dg.MaterializeResult(
        metadata=table_metadata(
            FRAME_SCHEMA,
            n,
            preview,
            ["id", "title_text", "publication_year", "route_key", "in_sampling_frame"],
            works_read=n_unique,
            work_records_read=n_records,
            admitted_by_route=counts_markdown(by_route, "route"),
            affiliation_blind=stats[4],
            affiliation_blind_share=round(stats[4] / n, 4),
            in_sampling_frame=stats[5],
            with_abstract=stats[6],
            outcomes=counts_markdown(outcomes, "outcome"),
            quarantined=len(quarantine),
            quarantined_by_reason=counts_markdown(dict(by_reason), "reason"),
            parts_done=len(manifest),
            count_mismatches=sum(1 for r in manifest if r["count_check"] == "mismatch"),
            merged_or_deleted_ids=len(removed),
            entity_list_versions=dg.MetadataValue.json(entities.versions),
            frame_build_id=build_id,
            works_by_year_and_route=png_markdown(
                frame_plot_png(by_year, f"frame {build_id}: works per year by route"), "frame works per year by route"
            ),
        )
    )


@dg.asset_check(
    asset=frame, blocking=True, description="Every frame work appears once (SPEC section 2: a work appears once)."
)
def frame_ids_unique(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when an id occurs more than once in the frame; metadata lists up to 10 offenders."""
    with storage.connect() as con:
        dups = con.execute("SELECT id, count(*) c FROM frame GROUP BY id HAVING c > 1 ORDER BY id LIMIT 10").fetchall()
    return dg.AssetCheckResult(passed=not dups, metadata={"duplicate_ids": dg.MetadataValue.json([d[0] for d in dups])})


@dg.asset_check(asset=frame, blocking=True, description="Every frame row has a route and evidence for each true route.")
def frame_routes_have_evidence(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when a row has no true route or a true route without evidence; lists up to 10 ids."""
    with storage.connect() as con:
        bad = con.execute(
            """SELECT id FROM frame WHERE NOT (ca_aff OR ca_fund OR ca_venue OR about_ca)
                 OR (ca_aff AND len(ca_aff_evidence) = 0) OR (ca_fund AND len(ca_fund_evidence) = 0)
                 OR (ca_venue AND len(ca_venue_evidence) = 0) OR (about_ca AND len(about_ca_evidence) = 0)
               ORDER BY id LIMIT 10"""
        ).fetchall()
    return dg.AssetCheckResult(
        passed=not bad, metadata={"rows_without_route_evidence": dg.MetadataValue.json([b[0] for b in bad])}
    )


@dg.asset_check(
    asset=frame, blocking=True, description="No abstract text is stored in the frame or its parts (SPEC section 2)."
)
def frame_stores_no_abstract_text(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when the frame, or the routed rows of any part, has a column holding abstract text
    (any column whose name mentions ``abstract`` other than the boolean ``has_abstract``)."""

    def offenders(schema: pa.Schema) -> list[str]:
        return [
            f.name
            for f in schema
            if "abstract" in f.name.lower() and not (f.name == "has_abstract" and pa.types.is_boolean(f.type))
        ]

    found = {"frame": offenders(pq.read_schema(next(storage.table_dir("frame").glob("*.parquet"))))}
    for f in sorted(storage.table_dir("frame_parts").glob("*/*/routed.parquet")):
        if bad := offenders(pq.read_schema(f)):
            found[str(f.relative_to(storage.warehouse))] = bad
    found = {k: v for k, v in found.items() if v}
    return dg.AssetCheckResult(passed=not found, metadata={"abstract_columns": dg.MetadataValue.json(found)})


@dg.asset_check(
    asset=frame,
    blocking=False,
    description="The build manifest covers every part the snapshot manifests list (warning).",
)
def frame_build_manifest_covers_snapshot(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Warns (severity WARN, never blocks) when a part listed in a snapshot manifest is not here or
    not built, when a part's record count or size disagrees with its manifest entry, or when a snapshot
    partition has parts no manifest lists. Metadata lists each gap (up to 20 of each kind)."""
    with storage.connect() as con:
        missing = con.execute(
            "SELECT source_file FROM openalex_inventory WHERE manifest_status = 'missing_locally' ORDER BY 1"
        ).fetchall()
        unlisted = con.execute(
            "SELECT source_file, manifest_status FROM openalex_inventory "
            "WHERE manifest_status IN ('not_in_manifest', 'no_manifest') ORDER BY 1"
        ).fetchall()
        mismatch = con.execute(
            "SELECT source_file, manifest_record_count, records_read FROM frame_build_manifest "
            "WHERE count_check = 'mismatch' ORDER BY 1"
        ).fetchall()
        resized = con.execute(
            "SELECT source_file, bytes, manifest_bytes FROM openalex_inventory WHERE present "
            "AND manifest_status = 'listed' AND bytes <> manifest_bytes ORDER BY 1"
        ).fetchall()
        built = con.execute("SELECT count(*) FROM frame_build_manifest WHERE count_check = 'ok'").fetchone()[0]
    gaps = len(missing) + len(unlisted) + len(mismatch) + len(resized)
    return dg.AssetCheckResult(
        passed=gaps == 0,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{built} manifest-listed parts built with matching counts; {len(missing)} listed parts not here; "
            f"{len(unlisted)} parts not covered by a manifest; {len(mismatch)} count mismatches; "
            f"{len(resized)} size mismatches"
        ),
        metadata={
            "parts_built_and_counted": built,
            "listed_parts_not_here": len(missing),
            "listed_parts_not_here_sample": dg.MetadataValue.json([m[0] for m in missing[:20]]),
            "parts_not_in_a_manifest": dg.MetadataValue.json([f"{u[0]} ({u[1]})" for u in unlisted[:20]]),
            "count_mismatches": dg.MetadataValue.json([f"{m[0]}: manifest {m[1]}, read {m[2]}" for m in mismatch[:20]]),
            "size_mismatches": dg.MetadataValue.json([f"{m[0]}: {m[1]} bytes, manifest {m[2]}" for m in resized[:20]]),
        },
    )
