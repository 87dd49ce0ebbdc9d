"""Tables of the publishing stage (:mod:`metacan_pipeline.publish`, SPEC sections 8-9): the work
records, their lineage, and the manifest of rendered pages."""

from __future__ import annotations

from .fields import column, columns
from .table import Table

RECORDS_SCHEMA = columns("id", "record_json", "record_hash")

LINEAGE_SCHEMA = columns(
    "id",
    "frame_build_id",
    "frame_run_id",
    "input_kind",
    "source_file",
    "source_locator",
    "part_run_id",
    "entity_list_versions",
    "lexicon_version",
    "teacher_calls",
    "model_version",
    "student_run_id",
    "machine_round",
    "machine_scores_run_id",
    "machine_validation_status",
)

PAGE_MANIFEST_SCHEMA = columns(
    "id",
    column("record_hash", description="SHA-256 of the record JSON the page was rendered from"),
    "renderer",
    "page_path",
    "abstract_status",
    "rendered_at",
    "run_id",
)

#: A scratch file of one ``work_pages`` run, not a table: one row per ``work_records`` row, in its file order,
#: saying whether the work's page is rendered (:func:`metacan_pipeline.publish.manifest.pages_to_render`).
PAGE_PLAN_SCHEMA = columns("id", "render")

TABLES = [
    Table(
        "work_records",
        "one frame work's published record (seed 004 shape, JSON) and its SHA-256",
        "work_records",
        RECORDS_SCHEMA,
        ("id",),
    ),
    Table(
        "work_lineage",
        "one frame work's lineage: frame build, input part or API page, teacher calls, model version, round",
        "work_lineage",
        LINEAGE_SCHEMA,
        ("id",),
    ),
    Table(
        "page_manifest",
        "one rendered work page: the record hash and renderer it was rendered from, its path, abstract status",
        "work_pages",
        PAGE_MANIFEST_SCHEMA,
        ("id",),
        store="duckdb",
    ),
]
