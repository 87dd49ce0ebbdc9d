"""Tables of the publishing stage (:mod:`metacan_pipeline.publish`, SPEC sections 8-9): the work
records, their lineage, and the manifest of rendered pages."""

from __future__ import annotations

import pyarrow as pa

from . import Table

RECORDS_SCHEMA = pa.schema([("id", pa.string()), ("record_json", pa.string()), ("record_hash", pa.string())])

TEACHER_CALL_TYPE = pa.struct(
    [
        ("teacher", pa.string()),
        ("model", pa.string()),
        ("prompt_version", pa.string()),
        ("prompt_sha", pa.string()),
        ("record_view", pa.string()),
        ("label_status", pa.string()),
        ("source", pa.string()),
        ("call_id", pa.string()),
        ("request_hash", pa.string()),
        ("called_at", pa.string()),
        ("run_id", pa.string()),
        ("archive", pa.string()),
    ]
)

LINEAGE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("frame_build_id", pa.string()),
        ("frame_run_id", pa.string()),
        ("input_kind", pa.string()),
        ("source_file", pa.string()),
        ("source_locator", pa.string()),
        ("part_run_id", pa.string()),
        ("entity_list_versions", pa.string()),
        ("lexicon_version", pa.string()),
        ("teacher_calls", pa.list_(TEACHER_CALL_TYPE)),
        ("model_version", pa.string()),
        ("student_run_id", pa.string()),
        ("machine_round", pa.int32()),
        ("machine_scores_run_id", pa.string()),
        ("machine_validation_status", pa.string()),
    ]
)

PAGE_MANIFEST_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("record_hash", pa.string()),
        ("renderer", pa.string()),
        ("page_path", pa.string()),
        ("abstract_status", pa.string()),
        ("rendered_at", pa.timestamp("s")),
        ("run_id", pa.string()),
    ]
)

#: A scratch file of one ``work_pages`` run, not a table: one row per ``work_records`` row, in its file order,
#: saying whether the work's page is rendered (:func:`metacan_pipeline.publish.manifest.pages_to_render`).
PAGE_PLAN_SCHEMA = pa.schema([("id", pa.string()), ("render", pa.bool_())])

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
