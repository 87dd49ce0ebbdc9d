"""Tables of the coding store ``<data dir>/audit/coding.sqlite`` (SPEC section 10): the human
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

from .fields import column, columns
from .table import Table

CODERS_SCHEMA = columns(
    "coder",
    "token_sha256",
    column("created_at", pa.string(), description="when the coder was added (ISO 8601, UTC)"),
    "revoked_at",
)

CODING_TASKS_SCHEMA = columns(
    "protocol_id",
    "id",
    column("position", description="the task's position in the coding queue"),
    "evidence_json",
    "evidence_sha256",
    "loaded_at",
    "evidence_changed_at",
)

CODING_EVIDENCE_SCHEMA = columns(
    "evidence_sha256",
    "id",
    "evidence_json",
    "first_loaded_at",
)

CODING_CLAIMS_SCHEMA = columns(
    "protocol_id",
    "id",
    "coder",
    "claimed_at",
)

CODING_ANSWERS_SCHEMA = columns(
    "answer_id",
    "protocol_id",
    "id",
    "coder",
    column("role", description="code | adjudication"),
    column(
        "categories",
        pa.string(),
        description="the categories given (JSON list in vocabulary order; null only in an unresolved answer)",
    ),
    "domain",
    "study_design",
    "genre",
    "about_ca_system",
    "about_ca_topic",
    column("confidence", description="the coder's confidence: high | medium | low"),
    column("unresolved", pa.int32(), description="1: the coder could not decide, 0: resolved"),
    column("note", description="the coder's note"),
    column("evidence_sha256", description="the evidence version the coder was shown"),
    "submitted_at",
    column("source", description="site | label_studio:<16 hex of the imported file's SHA-256>"),
    "provenance",
    column(
        "abstract_sha256",
        description="SHA-256 of the abstract text the coder was shown (a coding_abstracts row); null: none was shown",
    ),
)

CODING_IMPORTS_SCHEMA = columns(
    "file_sha256",
    column("imported_at", pa.string(), description="when the file was imported (ISO 8601, UTC)"),
    "file_name",
    "tasks",
    "annotations",
    "appended",
    "already_present",
    "refused",
    "refusals",
)

#: The coding pages' tables (``metacan_pipeline/site/coding_pages.py``).
CODING_LOADS_SCHEMA = columns(
    "protocol_id",
    "loaded_at",
    "instructions_version",
    column("source", description="asset:<run id> | cli: what loaded the tasks"),
    "sample_works",
    "added",
    "evidence_changed",
    "moved",
    "unchanged",
    "missing",
)

CODER_ROLES_SCHEMA = columns(
    "coder",
    column("role", description="adjudicator: settles the disagreements on the adjudication page"),
    "granted_at",
    "revoked_at",
)

CODING_SESSIONS_SCHEMA = columns(
    "session_sha256",
    "coder",
    column("created_at", pa.string(), description="when the coder signed in (ISO 8601, UTC)"),
    "expires_at",
    "ended_at",
)

CODING_STUDIES_SCHEMA = columns(
    "protocol_id",
    column("content_sha256", description="the protocol's content SHA-256: the seed of its coder pairs"),
    column(
        "heads",
        pa.string(),
        description="the heads the protocol evaluates (JSON list): the fields two coders must agree on",
    ),
    "loaded_at",
)

CODING_ASSIGNMENTS_SCHEMA = columns(
    "protocol_id",
    "id",
    "coder",
    "assigned_at",
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

TABLES += [
    Table(
        "coding_studies",
        "what the coding store keeps of a protocol it codes: its content hash (the seed of the coder pairs) and the "
        "heads it evaluates (where two coders must agree)",
        "metacan_pipeline.audit.coding.loading.load_coding_tasks (asset coding_tasks, metacan coding load-tasks)",
        CODING_STUDIES_SCHEMA,
        ("protocol_id",),
        store="sqlite",
        json_columns=frozenset({"heads"}),
    ),
    Table(
        "coding_assignments",
        "one coder of the pair a work of a protocol is assigned to (two rows a work): a coder's queue holds only "
        "their works; an assignment with an answer is never changed",
        "metacan_pipeline.audit.coding.assignments.AssignmentsMixin.assign_works (coding_tasks, metacan coding assign)",
        CODING_ASSIGNMENTS_SCHEMA,
        ("protocol_id", "id", "coder"),
        store="sqlite",
    ),
]

#: The abstracts the coding study showed its coders (the original protocol's "best ascertainable evidence", archived
#: with its hash): content-addressed, appended once, never changed (triggers refuse UPDATE and DELETE).
CODING_ABSTRACTS_SCHEMA = columns(
    column("abstract_sha256", description="SHA-256 (hex) of the abstract text as shown, UTF-8"),
    "id",
    column("source", description="the source that gave the abstract: openalex | europepmc | crossref"),
    "abstract_sections",
    "abstract_text",
    column("fetched_at", description="when the source gave the abstract (ISO 8601, UTC)"),
    "first_shown_at",
)

TABLES.append(
    Table(
        "coding_abstracts",
        "one abstract the coding study showed a coder of a work (text, sections, the source that gave it), under the "
        "SHA-256 of its text, so every answer's abstract_sha256 resolves; appended once, never changed",
        "metacan_pipeline.audit.coding.abstracts.AbstractsMixin.archive_abstract (the coding pages, the Label Studio "
        "export)",
        CODING_ABSTRACTS_SCHEMA,
        ("abstract_sha256", "id"),
        store="sqlite",
        json_columns=frozenset({"abstract_sections"}),
    )
)

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
    "CREATE INDEX IF NOT EXISTS coding_assignments_coder ON coding_assignments (protocol_id, coder, id)",
    f"CREATE INDEX IF NOT EXISTS coding_answers_annotator ON coding_answers ({ANNOTATOR_SQL})",
    "CREATE TRIGGER IF NOT EXISTS coding_answers_no_update BEFORE UPDATE ON coding_answers "
    "BEGIN SELECT RAISE(ABORT, 'coding_answers is append-only: submit a new answer instead'); END",
    "CREATE TRIGGER IF NOT EXISTS coding_answers_no_delete BEFORE DELETE ON coding_answers "
    "BEGIN SELECT RAISE(ABORT, 'coding_answers is append-only: nothing is deleted'); END",
    "CREATE TRIGGER IF NOT EXISTS coding_abstracts_no_update BEFORE UPDATE ON coding_abstracts "
    "BEGIN SELECT RAISE(ABORT, 'coding_abstracts is append-only: an abstract shown is never changed'); END",
    "CREATE TRIGGER IF NOT EXISTS coding_abstracts_no_delete BEFORE DELETE ON coding_abstracts "
    "BEGIN SELECT RAISE(ABORT, 'coding_abstracts is append-only: nothing is deleted'); END",
)

#: Columns added to a table after stores were written without them: ``(table, column, SQL type)``, added last in place
#: (``ALTER TABLE ... ADD COLUMN``, every row kept, null in the rows written before) when a store is opened for writing.
ADDED_COLUMNS = (("coding_answers", "abstract_sha256", "VARCHAR"),)


def coding_store_ddl() -> list[str]:
    """Every statement that creates the coding store: each table's catalog DDL, then :data:`EXTRA_DDL`. Idempotent.
    A store written before a column of :data:`ADDED_COLUMNS` existed gets it from
    :func:`metacan_pipeline.audit.coding.base.add_missing_columns`."""
    return [t.ddl() for t in TABLES] + list(EXTRA_DDL)


#: The coding store's secrets (:mod:`metacan_pipeline.audit.coding.pseudonyms`): one row per name, created once and never
#: changed; ``pseudonym_key`` keys the coders' pseudonyms of every released table. Never leaves the store.
CODING_SECRETS_SCHEMA = columns(
    column("name", pa.string(), description="the secret's name (pseudonym_key)"),
    column("value", pa.string(), description="the secret, hex (never exported)"),
    column("created_at", pa.string(), description="when the secret was created (ISO 8601, UTC)"),
)

TABLES.append(
    Table(
        "coding_secrets",
        "one secret of the coding store (the key of the coders' pseudonyms): created once, never changed or exported",
        "metacan_pipeline.audit.coding.pseudonyms.PseudonymsMixin",
        CODING_SECRETS_SCHEMA,
        ("name",),
        store="sqlite",
    )
)

MACHINE_CODES_SCHEMA = columns(
    "protocol_id",
    "id",
    "head",
    column("code", description="1 | 0: the adjudicator's code on the head (null: no usable verdict)"),
    "adjudicator",
    "verdict",
    column("reason", description="the adjudicator's reason"),
    column("source_file", description="the file the code was imported from"),
    "source_sha256",
    "recorded_at",
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
