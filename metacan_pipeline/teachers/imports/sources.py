"""The sources of the ``imported_labels`` asset (SPEC section 4): its configuration (MetaCan pilot folders and label
files in our schema), the imports they make, the current imported labels and the asset's metadata."""

from collections import Counter
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
from pydantic import Field

from ... import settings
from ...meta import counts_markdown, markdown_preview, table_metadata
from ...tables.teachers import LABELS_SCHEMA
from ..core.registry import load_registry
from .importing import (
    ImportReport,
    ImportSpec,
    current_imported_sql,
    import_file,
)
from .pilot import pilot_imports
from .texts import label_file_texts, pilot_texts, store_texts

PILOT_DIR_ENV, DEFAULT_PILOT_DIR = settings.PILOT_DIR_ENV, settings.DEFAULT_PILOT_DIR


def default_pilot_dir() -> str:
    """The MetaCan pilot folder: ``$METACAN_PILOT_DIR`` or ``../shared/data/metacan_pilot`` (relative to the
    working directory, like the OpenAlex input folder)."""
    return settings.pilot_dir()


class LabelFile(dg.Config):
    """One file of labels in our schema (JSON array or JSON Lines, SPEC section 4) and whose they are."""

    path: str = Field(description="The file.")
    teacher: str = Field(description="Teacher name the labels are stored under (e.g. 'external_gpt').")
    model: str = Field(description="Model that produced them.")
    prompt_version: str = Field(description="Prompt / rubric version they were produced under.")
    record_view: str = Field(description="What the labeller saw (e.g. 'title_abstract').")
    source: str = Field(description="Where the file comes from (who, when, which study); also keys imported_design.")
    absent: list[str] = Field(
        default=[], description="Label fields the source never provides (e.g. ['domain', 'study_design'])."
    )
    undecided_categories: list[str] = Field(
        default=[], description="Categories the source's vocabulary cannot express."
    )
    prompt_text: str | None = Field(
        default=None, description="The prompt text, when known: its SHA-256 keys the labels."
    )


class ImportedLabelsConfig(dg.Config):
    """Import sources: MetaCan pilot folders (converted by :mod:`.pilot`) and label files in our schema."""

    pilot_dirs: list[str] | None = Field(
        default=None,
        description=(
            f"MetaCan pilot folders (labels_joined.json, codex/). Default: [${PILOT_DIR_ENV} or {DEFAULT_PILOT_DIR}], "
            "skipped with a note when that folder does not exist; [] for none. A folder named here must exist."
        ),
    )
    files: list[LabelFile] = Field(default=[], description="Label files in our schema (JSON array or JSON Lines).")


def _spec(f: LabelFile) -> ImportSpec:
    if f.teacher in load_registry():
        raise ValueError(
            f"import of {f.path}: teacher {f.teacher!r} is a registry teacher; imported labels need a name of their own "
            f"(e.g. {f.teacher}_external) so that they never mix with the labels the registry teacher buys"
        )
    return ImportSpec(
        teacher=f.teacher,
        model=f.model,
        prompt_version=f.prompt_version,
        record_view=f.record_view,
        source=f.source,
        absent=frozenset(f.absent),
        undecided_categories=frozenset(f.undecided_categories),
        prompt_text=f.prompt_text,
    )


def _list_md(items: list[str]) -> dg.MetadataValue:
    return dg.MetadataValue.md("".join(f"- `{i}`\n" for i in items) if items else "_(none)_")


def _invalid_md(reports: list[ImportReport]) -> dg.MetadataValue:
    rows = [
        {"teacher": r.teacher, "file": Path(f).name, "index": i, "work_id": w, "cause": cause}
        for r in reports
        for f, i, w, cause in r.invalid
    ]
    return markdown_preview(rows, ["teacher", "file", "index", "work_id", "cause"], limit=50)


def resolve_pilot_dirs(pilot_dirs: list[str] | None, log) -> tuple[list[str], list[str]]:
    """``(folders, notes)``: ``pilot_dirs`` as configured, or for None the default folder (:func:`default_pilot_dir`)
    when it exists, else none and a note. Raises FileNotFoundError for a named folder that does not exist."""
    notes: list[str] = []
    if pilot_dirs is None:
        folder = Path(default_pilot_dir())
        pilot_dirs = [str(folder)] if folder.exists() else []
        if not pilot_dirs:
            notes.append(
                f"pilot folder {folder.resolve()} not found (set ${PILOT_DIR_ENV}): the MetaCan pilot labels were not imported"
            )
            log.info(notes[-1])
    for d in pilot_dirs:
        if not Path(d).is_dir():
            raise FileNotFoundError(f"pilot folder {d!r} (imported_labels config pilot_dirs) does not exist")
    return pilot_dirs, notes


def pilot_jobs(pilot_dirs: list[str], log) -> tuple[list[tuple[ImportSpec, list]], list[str]]:
    """The imports of the MetaCan pilot folders ``pilot_dirs`` (resolved by :func:`resolve_pilot_dirs`,
    converted by :func:`~.pilot.pilot_imports`) and the notes they give."""
    notes: list[str] = []
    jobs: list[tuple[ImportSpec, list]] = []
    for d in pilot_dirs:
        for imp in pilot_imports(Path(d)):
            jobs.append((imp.spec, imp.records))
            notes += [f"{imp.spec.teacher}: {n}" for n in imp.notes]
    return jobs, notes


def import_texts(con: duckdb.DuckDBPyConnection, pilot_dirs: list[str], files: list[LabelFile]) -> int:
    """Store the student's text of the imported works (:mod:`.texts`): the pilot folders' work files and the label
    files' records that carry a title. Returns the rows written."""
    rows = [row for d in pilot_dirs for row in pilot_texts(Path(d))]
    rows += [row for f in files for row in label_file_texts(Path(f.path))]
    return store_texts(con, rows)


def import_label_file(con: duckdb.DuckDBPyConnection, f: LabelFile, run_id: str | None) -> ImportReport:
    """Import one configured label file (:func:`~.importing.import_file`); raises FileNotFoundError when it
    does not exist, ValueError as :func:`_spec` and :func:`~.importing.import_file`."""
    if not Path(f.path).is_file():
        raise FileNotFoundError(f"label file {f.path!r} (imported_labels config files) does not exist")
    return import_file(con, Path(f.path), _spec(f), run_id)


def current_imported(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """The current imported label per teacher configuration and work (:func:`~.importing.current_imported_sql`),
    as :data:`LABELS_SCHEMA`, ordered by teacher, model, prompt version and work."""
    table = con.execute(
        f"SELECT * FROM ({current_imported_sql()}) ORDER BY teacher, model, prompt_version, work_id"
    ).to_arrow_table()
    return table.select(LABELS_SCHEMA.names).cast(LABELS_SCHEMA)


def report_line(r: ImportReport) -> str:
    """One log line for one import."""
    return f"import {r.teacher}: {len(r.files)} file(s), " + (
        "already imported"
        if r.already_imported
        else f"{r.labelled} labelled, {r.failed} failed, {r.existing} already stored, {len(r.duplicates)} duplicates"
    )


def imported_metadata(table: pa.Table, n: int, reports: list[ImportReport], notes: list[str]) -> dict:
    """The metadata of ``imported_labels``: the table's, rows by teacher and status, the files imported
    this run and before, the counts, invalid records, duplicate ids and the notes."""
    new = [f"{r.teacher}: {f}" for r in reports if not r.already_imported for f, _ in r.files]
    old = [f"{r.teacher}: {f}" for r in reports if r.already_imported for f, _ in r.files]
    by_status = Counter(
        f"{t} / {s}"
        for t, s in zip(table.column("teacher").to_pylist(), table.column("status").to_pylist(), strict=False)
    )
    return table_metadata(
        LABELS_SCHEMA,
        n,
        table.slice(0, 10).to_pylist(),
        ["work_id", "teacher", "model", "status", "categories", "error"],
        rows_by_teacher_and_status=counts_markdown(dict(by_status), "teacher / status", "rows"),
        files_imported_this_run=_list_md(new),
        files_already_imported=_list_md(old),
        labelled_this_run=sum(r.labelled for r in reports),
        failed_this_run=sum(r.failed for r in reports),
        invalid_records=_invalid_md(reports),
        duplicate_ids_not_stored=dg.MetadataValue.md(
            "".join(f"- {r.teacher}: `{w}` at {Path(f).name} record {i}\n" for r in reports for w, f, i in r.duplicates)
            or "_(none)_"
        ),
        notes=dg.MetadataValue.md("".join(f"- {n}\n" for n in notes) or "_(none)_"),
    )
