"""The frame's checks (SPEC section 2), each attached to the table it reads: three blocking checks
on ``frame`` and a warning on ``frame_build_manifest``. Plain functions over the storage, so a test
can feed them a bad table."""

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from ..storage import MetacanStorage
from ..vocab import ROUTES
from . import part_store
from .parts import parts_location


@dg.asset_check(
    asset="frame", blocking=True, description="Every frame work appears once (SPEC section 2: a work appears once)."
)
def frame_ids_unique(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when an id occurs more than once in the frame; metadata lists up to 10 offenders."""
    with storage.connect() as con:
        dups = con.execute("SELECT id, count(*) c FROM frame GROUP BY id HAVING c > 1 ORDER BY id LIMIT 10").fetchall()
    return dg.AssetCheckResult(passed=not dups, metadata={"duplicate_ids": dg.MetadataValue.json([d[0] for d in dups])})


@dg.asset_check(
    asset="frame", blocking=True, description="Every frame row has a route and evidence for each true route."
)
def frame_routes_have_evidence(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when a row has no true route or a true route without evidence; lists up to 10 ids."""
    with storage.connect() as con:
        bad = con.execute(
            f"SELECT id FROM frame WHERE NOT ({' OR '.join(ROUTES)}) OR "
            + " OR ".join(f"({r} AND len({r}_evidence) = 0)" for r in ROUTES)
            + " ORDER BY id LIMIT 10"
        ).fetchall()
    return dg.AssetCheckResult(
        passed=not bad, metadata={"rows_without_route_evidence": dg.MetadataValue.json([b[0] for b in bad])}
    )


@dg.asset_check(
    asset="frame", blocking=True, description="No abstract text is stored in the frame or its parts (SPEC section 2)."
)
def frame_stores_no_abstract_text(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when the frame, or the routed rows of any part (local, or in the object storage of
    ``METACAN_PARTS_URL``), has a column holding abstract text (any column whose name mentions ``abstract``
    other than the boolean ``has_abstract``)."""

    def offenders(schema: pa.Schema) -> list[str]:
        return [
            f.name
            for f in schema
            if "abstract" in f.name.lower() and not (f.name == "has_abstract" and pa.types.is_boolean(f.type))
        ]

    found = {"frame": offenders(pq.read_schema(next(storage.table_dir("frame").glob("*.parquet"))))}
    parts_root = parts_location(storage.table_dir("frame_parts"))
    if isinstance(parts_root, str):  # object storage (METACAN_PARTS_URL): every routed.parquet object there
        for url in part_store.routed_files(parts_root):
            fs, path = part_store.filesystem(url)
            with fs.open(path, "rb") as fh:
                if bad := offenders(pq.read_schema(fh)):
                    found[url] = bad
    for f in [] if isinstance(parts_root, str) else sorted(parts_root.glob("*/*/routed.parquet")):
        if bad := offenders(pq.read_schema(f)):
            found[str(f.relative_to(storage.warehouse))] = bad
    found = {k: v for k, v in found.items() if v}
    return dg.AssetCheckResult(passed=not found, metadata={"abstract_columns": dg.MetadataValue.json(found)})


@dg.asset_check(
    asset="frame_build_manifest",
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
