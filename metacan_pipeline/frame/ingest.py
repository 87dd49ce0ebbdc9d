"""The Dagster side of a frame build (SPEC section 2): the failures that tell a person what
to materialize, the part builds with their progress and log lines, and the metadata of
``openalex_inventory``, ``frame_parts`` and ``frame``. The work itself is in :mod:`.parts` (one
input file at a time) and :mod:`.merge` (the merge); the assets in :mod:`.assets` only orchestrate.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
from tqdm import tqdm

from ..meta import counts_markdown, frame_plot_png, markdown_preview, png_markdown, table_metadata
from ..openalex.inventory import Inventory
from ..openalex.reader import SUPPORTED_TYPES
from ..tables.frame import BUILD_MANIFEST_SCHEMA, FRAME_SCHEMA, QUARANTINE_SCHEMA, ROUTED_SCHEMA
from ..tables.openalex import INVENTORY_SCHEMA
from . import parts
from .cluster import ClusterError, build_parts
from .entities import EntityLists
from .merge import PREVIEW_COLUMNS, FrameSummary, MergeResult
from .parts import InputChanged, PartJob


def _folder_list(roots: list[Path]) -> str:
    return ", ".join(str(r) for r in roots)


def no_input_failure(inv: Inventory, roots: list[Path], api_root: Path | None) -> dg.Failure:
    """The failure of an inventory that found no input file (empty or unmounted folders)."""
    return dg.Failure(
        description=(
            f"no OpenAlex input files under {_folder_list(roots)}"
            + (f" (only unsupported files, e.g. {inv.unsupported[0][0]})" if inv.unsupported else "")
            + f" nor in the API archive {api_root}: point METACAN_OPENALEX_DIR (the openalex resource's input_dirs; "
            f"several folders separated by {os.pathsep!r}) at folders of OpenAlex files ({SUPPORTED_TYPES})"
        ),
        allow_retries=False,
    )


def inventory_metadata(inv: Inventory, rows: list[dict], keys: list[str], new: list[str], gone: list[str]) -> dict:
    """The ``openalex_inventory`` metadata: the table's, plus files and bytes present, partitions
    (added, removed), files by partition and every manifest problem."""
    present = inv.present()
    incomplete = inv.incomplete_partitions()
    return table_metadata(
        INVENTORY_SCHEMA,
        len(rows),
        present,
        ["partition_key", "source_file", "bytes", "manifest_status"],
        files_present=len(present),
        bytes_present=sum(r["bytes"] for r in present),
        partitions=len(keys),
        partitions_added=dg.MetadataValue.json(new),
        partitions_removed=dg.MetadataValue.json(gone),
        files_by_partition=counts_markdown(dict(Counter(r["partition_key"] for r in present)), "partition", "files"),
        manifest_parts_not_here=sum(1 for r in inv.rows if r["manifest_status"] == "missing_locally"),
        size_mismatches=dg.MetadataValue.json(
            [f"{r['source_file']}: {r['bytes']} bytes, manifest {r['manifest_bytes']}" for r in inv.size_mismatches()]
        ),
        incomplete_partitions=dg.MetadataValue.md(
            "".join(f"- `{k}`: {why}\n" for k, why in incomplete.items()) or "_(none)_"
        ),
        manifest_errors=dg.MetadataValue.json(inv.manifest_errors),
        unsupported_files=dg.MetadataValue.json([name for name, _ in inv.unsupported]),
    )


def parts_location(storage_parts: Path) -> Path | str:
    """Where the finished parts are (:func:`.parts.parts_location`); a bad ``METACAN_PARTS_URL`` is a dg.Failure in
    one sentence naming it."""
    try:
        return parts.parts_location(storage_parts)
    except ValueError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None


def parts_store_failure(exc: OSError) -> dg.Failure:
    """The failure of a step that could not list, write or read the parts in object storage (may pass later)."""
    return dg.Failure(
        description=f"{exc}: check the network, the endpoint (METACAN_S3_ENDPOINT_URL) and the credentials of "
        f"METACAN_PARTS_URL, then materialize again (finished parts are kept)",
        allow_retries=True,
    )


def part_built_message(row: dict, done: int, total: int) -> str:
    """The log line of one finished part build."""
    msg = (
        f"{row['source_file']}: {row['records_read']} records, {row['work_records']} works, {row['routed']} routed, "
        f"{row['quarantined']} quarantined, {row['seconds']:.1f}s via {row['read_path']} ({done}/{total})"
    )
    return msg + (
        f"; exact path because {row['fallback_reason']}"
        if row["fallback_reason"] and row["read_path"] == "python"
        else ""
    )


def run_part_builds(
    log: Any,
    todo: list[tuple[PartJob, str]],
    parts_root: Path | str,
    entities: EntityLists,
    run_id: str,
    workers: int,
    scheduler: str | None = None,
) -> tuple[list[dict], str]:
    """Build the parts ``todo`` (:func:`.cluster.build_parts`: on the Dask scheduler at ``scheduler``, else a local
    cluster of ``workers`` processes) with a progress bar in bytes, logging where they are built, each part, and a
    warning on a record count that disagrees with the snapshot manifest; returns their manifest rows and the
    sentence saying where they were built. A file changed since the inventory stops the build with a dg.Failure
    (the parts finished before it are kept; a re-run after ``frame_refresh`` builds the rest); so does a scheduler
    that does not answer, or a part every worker died building."""
    built: list[dict] = []
    where: list[str] = []

    def on_cluster(sentence: str) -> None:
        where.append(sentence)
        log.info(f"frame_parts: building {len(todo)} part(s) on {sentence}")

    progress = tqdm(total=sum(j.bytes for j, _ in todo), desc="frame_parts", unit="B", unit_scale=True, disable=None)
    try:
        for row in build_parts(todo, parts_root, entities, run_id, workers, scheduler=scheduler, on_cluster=on_cluster):
            built.append(row)
            progress.update(row["bytes"])
            log.info(part_built_message(row, len(built), len(todo)))
            if row["read_path"] == "failed":
                log.warning(
                    f"{row['source_file']}: not read ({row['fallback_reason']}); quarantined, the frame is built "
                    f"without it and the next frame_parts run reads it again"
                )
            if row["count_check"] == "mismatch":
                log.warning(
                    f"{row['source_file']}: the snapshot manifest lists {row['manifest_record_count']} records, "
                    f"{row['records_read']} were read (truncated or replaced part? re-download it)"
                )
    except InputChanged as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    except ClusterError as exc:
        raise dg.Failure(description=str(exc), allow_retries=True) from None
    except OSError as exc:
        if isinstance(parts_root, str):  # object storage (METACAN_PARTS_URL) refused a write
            raise parts_store_failure(exc) from None
        raise
    progress.close()
    return built, (where[0] if where else "nowhere (nothing to build)")


def parts_metadata(
    rows: list[dict], built: list[dict], keys: set[str], workers: int, quarantine: Counter, built_on: str = ""
) -> dict[str, Any]:
    """The ``frame_parts`` metadata over the manifest ``rows`` of the selected partitions (``built``
    in this run, the others skipped): the routed rows they hold (candidates for the frame, in
    ROUTED_SCHEMA), a preview of the parts, counts, quarantine reasons, count mismatches and where the parts
    were built (``built_on``: the sentence of :func:`run_part_builds`)."""
    mismatches = [r for r in rows if r["count_check"] == "mismatch"]
    routed = sum(r["routed"] for r in rows)
    return {
        **table_metadata(ROUTED_SCHEMA, routed),
        "parts_preview": markdown_preview(
            sorted(rows, key=lambda r: r["source_file"]),
            ["source_file", "records_read", "work_records", "routed", "quarantined", "read_path"],
        ),
        "partitions": len(keys),
        "parts": len(rows),
        "parts_built": len(built),
        "parts_already_built": len(rows) - len(built),
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
        "parts_built_on": built_on,
    }


def unbuilt_parts_failure(unbuilt: list[PartJob]) -> dg.Failure:
    """The failure of a merge asked for before every part is built: names the partitions to build."""
    keys = sorted({j.partition_key for j in unbuilt})
    return dg.Failure(
        description=(
            f"{len(unbuilt)} input file(s) have no finished part for the current inputs and entity lists, in partition(s) "
            f"{keys[:10]}{' ...' if len(keys) > 10 else ''} (e.g. {unbuilt[0].source_file}): materialize frame_parts for "
            f"those partitions first (Dagster UI: frame_parts > Materialize > select the partitions; or `metacan run`)."
        ),
        allow_retries=False,
    )


def no_parts_failure(roots: list[Path]) -> dg.Failure:
    """The failure of a merge with no part to merge (no input file in the inventory)."""
    return dg.Failure(
        description=f"no OpenAlex input files under {_folder_list(roots)}: point METACAN_OPENALEX_DIR at folders of "
        f"OpenAlex files and materialize openalex_inventory",
        allow_retries=False,
    )


def empty_frame_failure(merged: MergeResult, year_min: int, year_max: int) -> dg.Failure:
    """The failure of a merge that admitted no work (with the outcomes, to say why)."""
    return dg.Failure(
        description=(
            f"the frame is empty: none of the {merged.works_read} works read is Canada-linked with a title "
            f"and a publication year in {year_min}-{year_max} (outcomes {merged.outcomes}). Check the "
            f"input folder (METACAN_OPENALEX_DIR) and the year range (frame config)."
        ),
        allow_retries=False,
    )


def frame_metadata(
    merged: MergeResult,
    summary: FrameSummary,
    manifest: list[dict],
    by_reason: Counter,
    removed: int,
    entities: EntityLists,
    build_id: str,
) -> dict[str, Any]:
    """The ``frame`` metadata: the table's, works read, admitted by route, affiliation-blind share,
    outcomes, quarantine, parts, merged ids, list versions, the build id and the works-per-year plot."""
    n = merged.admitted
    return table_metadata(
        FRAME_SCHEMA,
        n,
        summary.preview,
        PREVIEW_COLUMNS,
        works_read=merged.works_read,
        work_records_read=merged.records_read,
        admitted_by_route=counts_markdown(summary.by_route, "route"),
        affiliation_blind=summary.affiliation_blind,
        affiliation_blind_share=round(summary.affiliation_blind / n, 4),
        in_sampling_frame=summary.in_sampling_frame,
        with_abstract=summary.with_abstract,
        outcomes=counts_markdown(merged.outcomes, "outcome"),
        quarantined=sum(by_reason.values()),
        quarantined_by_reason=counts_markdown(dict(by_reason), "reason"),
        parts_done=len(manifest),
        count_mismatches=sum(1 for r in manifest if r["count_check"] == "mismatch"),
        merged_or_deleted_ids=removed,
        entity_list_versions=dg.MetadataValue.json(entities.versions),
        frame_build_id=build_id,
        works_by_year_and_route=png_markdown(
            frame_plot_png(summary.by_year, f"frame {build_id}: works per year by route"),
            "frame works per year by route",
        ),
    )


def frame_log_line(merged: MergeResult, summary: FrameSummary, parts: int, by_reason: Counter, removed: int) -> str:
    """The log line of a finished merge: admitted of read, by route, outcomes, quarantine, removed ids."""
    return (
        f"frame: {merged.admitted} works admitted of {merged.works_read} unique works ({merged.records_read} work "
        f"records) in {parts} parts; by route {summary.by_route}; outcomes {merged.outcomes}; "
        f"{sum(by_reason.values())} quarantined ({dict(by_reason)}); {removed} merged/deleted ids"
    )


def side_table_results(quarantine: pa.Table, build_manifest: pa.Table) -> Iterator[dg.MaterializeResult]:
    """The materializations of the two tables the merge writes beside the frame, with their
    row counts, column schemas and previews."""
    yield dg.MaterializeResult(
        asset_key="openalex_quarantine",
        metadata=table_metadata(QUARANTINE_SCHEMA, len(quarantine), quarantine.slice(0, 10).to_pylist()),
    )
    yield dg.MaterializeResult(
        asset_key="frame_build_manifest",
        metadata=table_metadata(
            BUILD_MANIFEST_SCHEMA,
            len(build_manifest),
            build_manifest.slice(0, 10).to_pylist(),
            ["source_file", "records_read", "work_records", "admitted", "count_check"],
        ),
    )
