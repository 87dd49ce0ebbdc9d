"""Tables of the coding store ``<data dir>/audit/coding.sqlite`` (issue 16, "Coding"; SPEC section 10): the human
coders of the audit study, the works they code (evidence only) and every answer they give.

One SQLite file (``store="sqlite"``), opened by :class:`metacan_pipeline.audit.coding.store.CodingStore` in WAL mode, so the
served site and the ``metacan`` CLI can use it at once. Lists and label fields are JSON text. ``coding_answers`` is
append-only (triggers refuse an UPDATE or DELETE): a re-submitted answer is a new row and the latest one counts. No
row of any table holds a machine output: a task's evidence is what a coder may see (an explicit allow-list,
:data:`metacan_pipeline.audit.coding.evidence.EVIDENCE_FIELDS`), never a label, score, prediction, route or teacher output.
Tokens are never stored: ``coders.token_sha256`` is the SHA-256 of the token.
"""

from __future__ import annotations

import pyarrow as pa

from . import Table

CODERS_SCHEMA = pa.schema(
    [
        ("coder", pa.string()),
        ("token_sha256", pa.string()),
        ("created_at", pa.string()),
        ("revoked_at", pa.string()),
    ]
)

CODING_TASKS_SCHEMA = pa.schema(
    [
        ("protocol_id", pa.string()),
        ("id", pa.string()),
        ("position", pa.int64()),
        ("evidence_json", pa.string()),
        ("evidence_sha256", pa.string()),
        ("loaded_at", pa.string()),
        ("evidence_changed_at", pa.string()),
    ]
)

CODING_EVIDENCE_SCHEMA = pa.schema(
    [
        ("evidence_sha256", pa.string()),
        ("id", pa.string()),
        ("evidence_json", pa.string()),
        ("first_loaded_at", pa.string()),
    ]
)

CODING_CLAIMS_SCHEMA = pa.schema(
    [
        ("protocol_id", pa.string()),
        ("id", pa.string()),
        ("coder", pa.string()),
        ("claimed_at", pa.string()),
    ]
)

CODING_ANSWERS_SCHEMA = pa.schema(
    [
        ("answer_id", pa.string()),
        ("protocol_id", pa.string()),
        ("id", pa.string()),
        ("coder", pa.string()),
        ("role", pa.string()),  # code | adjudication
        ("categories", pa.string()),  # JSON list in vocabulary order; NULL only in an unresolved answer
        ("domain", pa.string()),
        ("study_design", pa.string()),
        ("genre", pa.string()),
        ("about_ca_system", pa.bool_()),
        ("about_ca_topic", pa.bool_()),
        ("confidence", pa.string()),
        ("unresolved", pa.int32()),  # 0 | 1
        ("note", pa.string()),
        ("evidence_sha256", pa.string()),  # the evidence version the coder was shown
        ("submitted_at", pa.string()),
        ("source", pa.string()),  # site | label_studio:<16 hex of the imported file's SHA-256>
        ("provenance", pa.string()),  # JSON: for an import, the file, task, annotation id, completed_by, times
    ]
)

CODING_IMPORTS_SCHEMA = pa.schema(
    [
        ("file_sha256", pa.string()),
        ("imported_at", pa.string()),
        ("file_name", pa.string()),
        ("tasks", pa.int64()),
        ("annotations", pa.int64()),
        ("appended", pa.int64()),
        ("already_present", pa.int64()),
        ("refused", pa.int64()),
        ("refusals", pa.string()),  # JSON list of {task_id, work_id, annotation_id, annotator, reason}
    ]
)

#: The coding pages' tables (issue 16, coding pages: ``metacan_pipeline/site/coding_pages.py``).
CODING_LOADS_SCHEMA = pa.schema(
    [
        ("protocol_id", pa.string()),
        ("loaded_at", pa.string()),
        ("instructions_version", pa.string()),  # the coder instructions the protocol names (shown on the pages)
        ("source", pa.string()),  # asset:<run id> | cli
        ("sample_works", pa.int64()),  # works in the audit sample of the protocol
        ("added", pa.int64()),
        ("evidence_changed", pa.int64()),
        ("moved", pa.int64()),
        ("unchanged", pa.int64()),
        ("missing", pa.int64()),  # sampled works the frame no longer holds (their tasks, if any, stay)
    ]
)

CODER_ROLES_SCHEMA = pa.schema(
    [
        ("coder", pa.string()),
        ("role", pa.string()),  # adjudicator
        ("granted_at", pa.string()),
        ("revoked_at", pa.string()),
    ]
)

CODING_SESSIONS_SCHEMA = pa.schema(
    [
        ("session_sha256", pa.string()),  # SHA-256 of the session cookie's value (never the value)
        ("coder", pa.string()),
        ("created_at", pa.string()),
        ("expires_at", pa.string()),
        ("ended_at", pa.string()),  # signed out
    ]
)

WRITER = "metacan_pipeline.audit.coding.store.CodingStore (metacan coders / coding commands, the coding pages)"

TABLES = [
    Table(
        "coders",
        "one human coder of the audit study: the SHA-256 of their sign-in token (never the token), created, revoked",
        WRITER,
        CODERS_SCHEMA,
        ("coder",),
        store="sqlite",
    ),
    Table(
        "coding_tasks",
        "one work to code under a protocol: its queue position and the evidence shown now (no machine output)",
        WRITER,
        CODING_TASKS_SCHEMA,
        ("protocol_id", "id"),
        store="sqlite",
        json_columns=frozenset({"evidence_json"}),
    ),
    Table(
        "coding_evidence",
        "one evidence version a task has shown (content-addressed), so every answer's evidence_sha256 resolves",
        WRITER,
        CODING_EVIDENCE_SCHEMA,
        ("evidence_sha256",),
        store="sqlite",
        json_columns=frozenset({"evidence_json"}),
    ),
    Table(
        "coding_claims",
        "the task a coder was last handed in their queue (so two coders, not three, work on a work at once)",
        WRITER,
        CODING_CLAIMS_SCHEMA,
        ("protocol_id", "id", "coder"),
        store="sqlite",
    ),
    Table(
        "coding_answers",
        "one answer of a coder (or an adjudicator) on a work, as given; append-only, the latest per coder and role counts",
        WRITER,
        CODING_ANSWERS_SCHEMA,
        ("answer_id",),
        store="sqlite",
        json_columns=frozenset({"categories", "provenance"}),
    ),
    Table(
        "coding_imports",
        "one import of a Label Studio JSON export: the file, counts, and every refused annotation with its reason",
        "metacan_pipeline.audit.coding.labelstudio_import.import_export (metacan coding import-labelstudio)",
        CODING_IMPORTS_SCHEMA,
        ("file_sha256", "imported_at"),
        store="sqlite",
        json_columns=frozenset({"refusals"}),
    ),
    Table(
        "coding_loads",
        "one load of a protocol's audit sample into the coding tasks (asset coding_tasks or metacan coding load-tasks): "
        "counts; the newest row names the protocol the coding pages serve",
        "metacan_pipeline.audit.coding.loading.load_coding_tasks (asset coding_tasks, metacan coding load-tasks)",
        CODING_LOADS_SCHEMA,
        ("protocol_id", "loaded_at"),
        store="sqlite",
    ),
    Table(
        "coder_roles",
        "one role a coder holds beside coding (adjudicator: settles the disagreements on the adjudication page)",
        WRITER,
        CODER_ROLES_SCHEMA,
        ("coder", "role"),
        store="sqlite",
    ),
    Table(
        "coding_sessions",
        "one sign-in on the coding pages: the SHA-256 of the session cookie (never the cookie), coder, expiry, sign-out",
        WRITER,
        CODING_SESSIONS_SCHEMA,
        ("session_sha256",),
        store="sqlite",
    ),
]

#: The annotator of an imported answer, from its provenance (SQL): the email in lower case, else the Label Studio user
#: id as text (the rule of :func:`metacan_pipeline.audit.coding.rules.annotator_of`); indexed, as every import looks it up.
ANNOTATOR_SQL = (
    "coalesce(lower(trim(json_extract(provenance, '$.completed_by.email'))), "
    "trim(CAST(json_extract(provenance, '$.completed_by.id') AS TEXT)))"
)

#: Indexes and the append-only guard of ``coding_answers`` (created with the tables, after them).
EXTRA_DDL = (
    "CREATE INDEX IF NOT EXISTS coding_answers_work ON coding_answers (protocol_id, id, role, coder)",
    "CREATE INDEX IF NOT EXISTS coding_tasks_queue ON coding_tasks (protocol_id, position, id)",
    f"CREATE INDEX IF NOT EXISTS coding_answers_annotator ON coding_answers ({ANNOTATOR_SQL})",
    "CREATE TRIGGER IF NOT EXISTS coding_answers_no_update BEFORE UPDATE ON coding_answers "
    "BEGIN SELECT RAISE(ABORT, 'coding_answers is append-only: submit a new answer instead'); END",
    "CREATE TRIGGER IF NOT EXISTS coding_answers_no_delete BEFORE DELETE ON coding_answers "
    "BEGIN SELECT RAISE(ABORT, 'coding_answers is append-only: nothing is deleted'); END",
)


def coding_store_ddl() -> list[str]:
    """Every statement that creates the coding store: each table's catalog DDL, then :data:`EXTRA_DDL`. Idempotent."""
    return [t.ddl() for t in TABLES] + list(EXTRA_DDL)


MACHINE_CODES_SCHEMA = pa.schema(
    [
        ("protocol_id", pa.string()),
        ("id", pa.string()),
        ("head", pa.string()),
        ("code", pa.int32()),  # 0 | 1; NULL when the adjudicator gave no usable verdict
        ("adjudicator", pa.string()),  # machine-adjudicator:<name>
        ("verdict", pa.string()),  # the adjudicator's own value, e.g. the frame1k tier
        ("reason", pa.string()),
        ("source_file", pa.string()),
        ("source_sha256", pa.string()),
        ("recorded_at", pa.string()),
    ]
)

TABLES.append(
    Table(
        "machine_codes",
        "one code of a MACHINE adjudicator (e.g. the frame1k verdicts) on one work and head under a protocol, with the "
        "file it came from; never a human code (append-only: a re-import adds nothing)",
        "metacan_pipeline.audit.coding.store.CodingStore.append_machine_codes (metacan coding import-adjudicator)",
        MACHINE_CODES_SCHEMA,
        ("protocol_id", "id", "head", "adjudicator"),
        store="sqlite",
    )
)
