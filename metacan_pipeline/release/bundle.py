"""Writing, finding and verifying a frozen release bundle under ``data/releases/<release_version>/`` (SPEC section 10).

A bundle holds:

- ``tables/frame.parquet``, ``tables/direct_labels.parquet`` (every registry teacher's direct labels, failed ones
  included), ``tables/predictions.parquet``, ``tables/machine_scores.parquet``, ``tables/human_validation.parquet``
  (every row as of the cut; no row: no head passed): each read in key order and written by pyarrow in fixed batches,
  so the same rows give the same bytes;
- the validation results behind a ``human_validated:<protocol>`` status: ``tables/audit_protocols.parquet`` (every
  locked protocol, its full JSON) and, once ``validation_report`` ran, ``tables/validation_error_rates``,
  ``validation_confusion``, ``validation_prevalence``, ``validation_agreement``, ``validation_gate`` and
  ``human_codes`` (the current protocol's report and final human codes) without their run columns (``run_id``,
  ``computed_at``), so a report that says the same freezes to the same bytes;
- with them, the study they rest on (:mod:`.study`): ``tables/study_sample``, ``study_tasks``, ``study_answers`` (every
  answer and adjudication under the coders' pseudonyms), ``study_machine_codes``, ``study_decisions`` and
  ``study_frame_means``; a cut whose validation tables do not recompute from it is refused (run validation_report
  first), so ``metacan verify-release`` passes on every bundle as cut;
- the recall instruments measured without a probability sample, once they ran: ``tables/filter_recall`` and
  ``tables/venue_known_item_recall`` (the latter a non-probability bound, never a design-based estimate), without
  their run columns; ``metacan verify-release`` does not recompute them (they rest on the teachers' qualification);
- study design against MEDLINE, once it ran: ``tables/medline_study_design`` without its run columns (not recomputed
  by ``metacan verify-release`` either);
- ``records.jsonl``: the ``work_records`` that passed ``records_may_ship``, one JSON record a line in id order,
  each as this release freezes it: its ``layer`` is this release's version, and a record published in the rolling
  layer shows the classifier categories withheld there (:func:`.layer.frozen_record`), so it is byte for byte the
  record ``work_records`` writes once the release is registered;
- ``model_cards/<model_version>/``: the model card of every classifier version the predictions carry
  (``model_card.md``, ``model_card.json`` and its reliability plots, :mod:`metacan_pipeline.student.card`), copied
  from ``data/reports/<model_version>/``; ``release.json``'s ``model_cards`` lists them per version (empty: that
  version's card was never written, e.g. a version trained before cards existed);
- ``codemeta.json`` (CodeMeta 3.0: the software that cut it) and ``ro-crate-metadata.json`` (RO-Crate 1.1: the
  bundle as a research object, every file listed with its size and media type), :mod:`.fair`;
- ``README.md`` (what each file holds, how to check it), ``CITATION.cff`` (:mod:`.citation`), ``release.json`` (version, frame build id, classifier version, created at,
  the content hash, every other file's SHA-256 and size, the counts) and ``SHA256SUMS`` (``sha256sum -c`` format,
  every file but itself).

Identity: ``content_sha256`` is the SHA-256 over the frozen tables' names and SHA-256s (the inputs; the records are
derived from them). A cut whose tables hash to a release already cut reuses that release and writes nothing; new
tables make a new version. A bundle is assembled in ``data/releases/.tmp-<hex>`` and renamed into place, then
registered in ``releases``: it is complete or absent, and never rewritten.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..audit.coding.store import CodingStore
from ..audit.estimates.study import export_study
from ..audit.instruments.recall import FILTER_RECALL_MEANS, KNOWN_ITEM_MEANS
from ..audit.protocol.locked import current_protocol
from ..settings import coding_store_path
from ..storage import MetacanStorage, sql_literal
from ..student.card import card_files
from ..tables.audit import HUMAN_VALIDATION_SCHEMA, PROTOCOLS_SCHEMA
from ..tables.audit import TABLES as AUDIT_CATALOG
from ..tables.medline import TABLES as MEDLINE_CATALOG
from .citation import citation_text
from .fair import CODEMETA_FILE, CRATE_FILE, DEFAULT_LICENSE, codemeta_document, crate_document, write_json
from .layer import ROLLING, TABLES_DIR, WITHHELD_FIELDS, frozen_record, releases_root
from .study import STUDY_DESCRIPTIONS, freeze_study, recompute

#: A release version: a folder name and a CFF ``version`` (letters, digits, '.', '_', '-'; at most 64).
VERSION_PATTERN = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,63}$")
RESERVED_VERSIONS = frozenset({"rolling", "unreleased"})
#: The warehouse tables frozen as they are, with the key they are ordered by.
WAREHOUSE_TABLES = {"frame": "id", "predictions": "id", "machine_scores": "id"}
RECORDS_FILE, RELEASE_JSON, SUMS_FILE, CITATION_FILE = "records.jsonl", "release.json", "SHA256SUMS", "CITATION.cff"
README_FILE = "README.md"
MODEL_CARDS_DIR = "model_cards"
#: The validation report's warehouse tables frozen when present (module docstring), in their catalog key order.
VALIDATION_TABLES = (
    "validation_error_rates",
    "validation_confusion",
    "validation_prevalence",
    "validation_agreement",
    "validation_gate",
    "human_codes",
)
#: The recall instruments' warehouse tables frozen when present (module docstring), in their catalog key order.
INSTRUMENT_TABLES = ("filter_recall", "venue_known_item_recall", "medline_study_design")
RUN_COLUMNS = frozenset({"run_id", "computed_at"})
_BATCH = 50_000


class ReleaseError(ValueError):
    """A release that may not be cut or does not verify: the message names the input or file and what to do."""


@dataclass(frozen=True)
class CutRelease:
    """The outcome of :func:`cut_release`: the release and whether an existing one was reused."""

    release_version: str
    folder: Path
    reused: bool
    manifest: dict


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_query(con: duckdb.DuckDBPyConnection, query: str, path: Path, schema: pa.Schema | None = None) -> int:
    """Write ``query``'s rows to one Parquet file in batches of a fixed size (the same rows, the same bytes)."""
    reader = con.execute(query).to_arrow_reader(_BATCH)
    rows = 0
    with pq.ParquetWriter(path, schema or reader.schema, compression="zstd") as writer:
        for batch in reader:
            writer.write_table(
                pa.Table.from_batches([batch]).cast(schema) if schema else pa.Table.from_batches([batch])
            )
            rows += batch.num_rows
    return rows


def freeze_tables(storage: MetacanStorage, label_tables: list[str], folder: Path) -> dict[str, int]:
    """Write the frozen tables into ``folder/tables/``; returns rows per table. Raises :class:`ReleaseError` naming
    the warehouse table to materialize when one is missing."""
    for name in WAREHOUSE_TABLES:
        if not storage.has_table(name):
            raise ReleaseError(f"no release can be cut: the table {name!r} is missing; materialize {name!r} first")
    out = folder / TABLES_DIR
    out.mkdir(parents=True)
    counts: dict[str, int] = {}

    def parquet(name: str) -> str:
        return f"read_parquet({sql_literal(str(storage.table_dir(name) / '*.parquet'))}, hive_partitioning=false)"

    con = duckdb.connect(config={"memory_limit": "1GB", "temp_directory": str(storage.warehouse / ".spill-release")})
    try:
        for name, key in WAREHOUSE_TABLES.items():
            counts[name] = _write_query(con, f"SELECT * FROM {parquet(name)} ORDER BY {key}", out / f"{name}.parquet")
        present = [t for t in label_tables if storage.has_table(t)]
        labels = " UNION ALL BY NAME ".join(f"SELECT * FROM {parquet(t)}" for t in present)
        if not labels:
            raise ReleaseError("no release can be cut: no direct_labels_<teacher> table exists; run the teachers first")
        counts["direct_labels"] = _write_query(
            con, f"SELECT * FROM ({labels}) ORDER BY teacher, work_id, label_id", out / "direct_labels.parquet"
        )
        catalog = {t.name: t for t in (*AUDIT_CATALOG, *MEDLINE_CATALOG)}
        validated = [t for t in VALIDATION_TABLES if storage.has_table(t)]
        for name in [*validated, *(t for t in INSTRUMENT_TABLES if storage.has_table(t))]:
            table = catalog[name]
            schema = table.schema  # the catalog's, less its run columns
            for column in RUN_COLUMNS & set(schema.names):
                schema = schema.remove(schema.get_field_index(column))
            columns = ", ".join(f'"{c}"' for c in schema.names)
            order = ", ".join(f'"{c}"' for c in table.primary_key)
            query = f"SELECT {columns} FROM {parquet(name)} ORDER BY {order}"
            counts[name] = _write_query(con, query, out / f"{name}.parquet", schema)
    finally:
        con.close()
    with storage.connect() as con:
        counts["human_validation"] = _write_query(
            con,
            "SELECT * FROM human_validation ORDER BY protocol_id, classifier_version, head, computed_at, run_id",
            out / "human_validation.parquet",
            HUMAN_VALIDATION_SCHEMA,
        )
        counts["audit_protocols"] = _write_query(
            con, "SELECT * FROM audit_protocols ORDER BY protocol_id", out / "audit_protocols.parquet", PROTOCOLS_SCHEMA
        )
    if validated:
        counts.update(_freeze_study(storage, folder))
    return counts


def _freeze_study(storage: MetacanStorage, folder: Path) -> dict[str, int]:
    """Write the study the frozen validation tables rest on (:mod:`.study`) and check that they recompute from it;
    :class:`ReleaseError` when they do not (the report is older than the codes, the decisions or the protocol)."""
    path = Path(coding_store_path(str(storage.root)))
    if not path.exists():  # opening it would create an empty store, and the release would ship an empty study
        raise ReleaseError(
            f"no release can be cut: the coding store {path} is missing, yet validation_report's tables rest on the "
            "study it held; it holds human work that nothing rebuilds: restore it there from your backup (`metacan "
            "coding backup` writes one), then cut the release"
        )
    try:
        protocol = current_protocol(storage)
        with CodingStore(path) as store:
            counts = freeze_study(export_study(storage, store, protocol), folder / TABLES_DIR)
        result = recompute(folder)
    except ValueError as exc:  # no protocol or no drawn sample any more: the report's tables rest on nothing shipped
        raise ReleaseError(
            f"no release can be cut: the study behind the validation tables cannot be frozen: {exc}"
        ) from None
    if result.differences:
        raise ReleaseError(
            f"no release can be cut: the validation tables do not recompute from the study they rest on "
            f"({len(result.differences)} differences, first: {result.differences[0]}); the codes, decisions or "
            f"protocol changed since validation_report ran: materialize validation_report, then cut the release"
        )
    return counts


def content_sha256(folder: Path) -> str:
    """SHA-256 over ``<sha256>  <name>`` of every frozen table in ``folder/tables`` (name order)."""
    lines = [f"{sha256_file(p)}  {p.name}\n" for p in sorted((folder / TABLES_DIR).glob("*.parquet"))]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _frozen_facts(folder: Path) -> tuple[str, str]:
    """(frame build id, classifier version) of the frozen frame and predictions (``none`` when absent)."""
    con = duckdb.connect()
    try:
        tables = folder / TABLES_DIR
        build = con.execute(
            f"SELECT string_agg(DISTINCT frame_build_id, ',') FROM read_parquet({sql_literal(str(tables / 'frame.parquet'))})"
        ).fetchone()[0]
        version = con.execute(
            "SELECT string_agg(DISTINCT model_version, ',' ORDER BY model_version) "
            f"FROM read_parquet({sql_literal(str(tables / 'predictions.parquet'))})"
        ).fetchone()[0]
    finally:
        con.close()
    return build or "none", version or "none"


def _rolling_predictions(storage: MetacanStorage, folder: Path) -> dict[str, dict]:
    """The frozen prediction fields (:data:`.layer.WITHHELD_FIELDS`) of every work whose record is in the rolling
    layer, by id (the records are prefiltered on their JSON text, then read exactly by :func:`.layer.frozen_record`)."""
    if not storage.has_table("work_records"):
        return {}
    records = sql_literal(str(storage.table_dir("work_records") / "*.parquet"))
    predictions = sql_literal(str(folder / TABLES_DIR / "predictions.parquet"))
    fields = ", ".join(f'p."{f}"' for f in WITHHELD_FIELDS)
    con = duckdb.connect()
    try:
        cur = con.execute(
            f"SELECT p.id, {fields} FROM read_parquet({predictions}) p JOIN read_parquet({records}, "
            f"hive_partitioning=false) r USING (id) WHERE contains(r.record_json, ?)",
            [f'"layer": "{ROLLING}"'],
        )
        names = [d[0] for d in cur.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}
    finally:
        con.close()


def _write_records(storage: MetacanStorage, path: Path, version: str) -> int:
    """Write ``records.jsonl``: every ``work_records`` record in id order as release ``version`` freezes it
    (:func:`.layer.frozen_record`: its layer is ``version``). Raises :class:`ReleaseError` naming the work when a
    rolling-layer record has no frozen prediction."""
    predictions = _rolling_predictions(storage, path.parent)
    n = 0
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for batch in storage.iter_batches("work_records", columns=["id", "record_json"]):
            for wid, text in zip(batch.column("id").to_pylist(), batch.column("record_json").to_pylist(), strict=True):
                try:
                    record = frozen_record(json.loads(text), version, predictions.get(wid))
                except ValueError as exc:
                    raise ReleaseError(f"no release can be cut: {exc}") from None
                fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
                n += 1
    return n


def file_entries(folder: Path, skip: tuple[str, ...] = (RELEASE_JSON, SUMS_FILE)) -> list[dict]:
    """``{"path", "sha256", "bytes"}`` of every file under ``folder`` but ``skip``, in path order."""
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() not in skip)
    return [
        {"path": p.relative_to(folder).as_posix(), "sha256": sha256_file(p), "bytes": p.stat().st_size} for p in paths
    ]


def copy_model_cards(root: Path, classifier_versions: str, folder: Path) -> dict[str, list[str]]:
    """Copy the card files of every version in ``classifier_versions`` (comma-separated, as ``release.json`` names
    them; ``none``: no version) from the data folder ``root`` into ``folder/model_cards/<version>/``; returns
    ``{version: [bundle paths]}`` (an empty list: no card was written for that version)."""
    out: dict[str, list[str]] = {}
    for version in [v for v in classifier_versions.split(",") if v and v != "none"]:
        out[version] = []
        for src in card_files(root, version):
            dest = folder / MODEL_CARDS_DIR / version / src.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            out[version].append(dest.relative_to(folder).as_posix())
    return out


def registered(storage: MetacanStorage) -> list[dict]:
    """Every row of ``releases``, oldest first."""
    with storage.connect() as con:
        cur = con.execute("SELECT * FROM releases ORDER BY created_at, release_version")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def check_version(version: str) -> None:
    """Raise :class:`ReleaseError` unless ``version`` is '' (a generated one) or a valid release version (the
    message shows at most 40 characters of it)."""
    if version and (not VERSION_PATTERN.match(version) or version in RESERVED_VERSIONS):
        shown = version if len(version) <= 40 else version[:40] + f"... ({len(version)} characters)"
        raise ReleaseError(
            f"release_version {shown!r} is not a release version: use letters, digits, '.', '_' or '-' "
            f"(at most 64, not starting with '.', '_' or '-', not 'rolling' or 'unreleased'), e.g. '2026.1'"
        )


def cut_release(
    storage: MetacanStorage,
    label_tables: list[str],
    version: str,
    authors: list[str],
    run_id: str,
    now: dt.datetime | None = None,
    license_url: str = DEFAULT_LICENSE,
) -> CutRelease:
    """Cut a release of what ``storage`` holds (module docstring), or reuse the one of the same content.

    ``version``: the release version to give a new release ('' for ``<YYYY.MM.DD>-<8 hex of the content>``).
    ``license_url``: the licence the RO-Crate metadata gives the release (a URL).
    Raises :class:`ReleaseError` when ``version`` is not a valid name, already names a release of other content, or
    an input table is missing; nothing is left behind (the temporary folder is removed).
    """
    check_version(version)
    now = (now or dt.datetime.now(dt.UTC)).replace(tzinfo=None, microsecond=0)
    root = releases_root(storage)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{uuid.uuid4().hex[:12]}"
    try:
        counts = freeze_tables(storage, label_tables, tmp)
        content = content_sha256(tmp)
        cut = registered(storage)
        same = next((r for r in cut if r["content_sha256"] == content), None)
        if same is not None and (not version or version == same["release_version"]):
            shutil.rmtree(tmp)
            folder = root / same["folder"]
            return CutRelease(same["release_version"], folder, True, read_manifest(folder))
        version = version or f"{now:%Y.%m.%d}-{content[:8]}"
        if any(r["release_version"] == version for r in cut) or (root / version).exists():
            raise ReleaseError(
                f"release {version!r} already exists with other content ({root / version}); a release is never "
                f"rewritten: give the release config a new release_version (or leave it empty for an automatic one)"
            )
        counts["records"] = _write_records(storage, tmp / RECORDS_FILE, version)
        build, classifier = _frozen_facts(tmp)
        cards = copy_model_cards(storage.root, classifier, tmp)
        (tmp / CITATION_FILE).write_text(citation_text(version, now.date(), build, classifier, authors), "utf-8")
        write_json(tmp / CODEMETA_FILE, codemeta_document(now.date()))
        (tmp / README_FILE).write_text(readme_text(version, tmp), "utf-8")
        later = {p: FILE_DESCRIPTIONS[p] for p in (RELEASE_JSON, SUMS_FILE)}
        try:
            crate = crate_document(version, now.date(), authors, license_url, file_entries(tmp), later, describe(tmp))
        except ValueError as exc:
            raise ReleaseError(f"{exc}: check the release config license (a URL)") from None
        write_json(tmp / CRATE_FILE, crate)
        manifest = {
            "release_version": version,
            "frame_build_id": build,
            "classifier_version": classifier,
            "created_at": f"{now:%Y-%m-%dT%H:%M:%SZ}",
            "content_sha256": content,
            "counts": counts,
            "model_cards": cards,
            "files": file_entries(tmp),
        }
        (tmp / RELEASE_JSON).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        sums = "".join(f"{e['sha256']}  {e['path']}\n" for e in file_entries(tmp, skip=(SUMS_FILE,)))
        (tmp / SUMS_FILE).write_text(sums, encoding="utf-8")
        os.rename(tmp, root / version)  # atomic; fails if the folder appeared meanwhile
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    folder = root / version
    _register(storage, manifest, folder, run_id, now)
    return CutRelease(version, folder, False, manifest)


#: What each file of a bundle holds, for its README (the study tables' are :data:`.study.STUDY_DESCRIPTIONS`).
FILE_DESCRIPTIONS = {
    "tables/frame.parquet": "the frame: every admitted work, its routes and their evidence (no abstract)",
    "tables/direct_labels.parquet": "every registry teacher's direct labels, failed ones included",
    "tables/predictions.parquet": "the student's predictions (candidate, consensus, scores) per work",
    "tables/machine_scores.parquet": "the active-learning student's machine scores (scores rank, they assert nothing)",
    "tables/human_validation.parquet": "the gate's rows per protocol, classifier version and head (no row: none passed)",
    "tables/audit_protocols.parquet": "every locked audit protocol: its canonical JSON as locked (protocol_json) and "
    "its SHA-256 (content_sha256), which the protocol id is made of",
    RECORDS_FILE: "the published work records, one JSON record a line, in id order",
    CITATION_FILE: "how to cite this release (CFF 1.2)",
    CODEMETA_FILE: "the software that cut this release (CodeMeta 3.0)",
    CRATE_FILE: "this release as a research object: every file, its size and media type (RO-Crate 1.1)",
    RELEASE_JSON: "version, frame build, classifier version, content hash, counts, every file's SHA-256 and size",
    SUMS_FILE: "every file's SHA-256 (sha256sum -c SHA256SUMS)",
}


def describe(folder: Path):
    """``describe(path)``: what the file ``path`` of a bundle holds, for its README and its RO-Crate metadata."""
    catalog = {t.name: t.row for t in (*AUDIT_CATALOG, *MEDLINE_CATALOG)}
    described = {
        **FILE_DESCRIPTIONS,
        **{f"tables/{n}.parquet": catalog[n] for n in (*VALIDATION_TABLES, *INSTRUMENT_TABLES)},
        **{f"tables/{n}.parquet": d for n, d in STUDY_DESCRIPTIONS.items()},
    }

    def text(path: str) -> str:
        return described.get(path) or (
            "the model card of a classifier version" if path.startswith(MODEL_CARDS_DIR + "/") else "this file"
        )

    return text


def readme_text(version: str, folder: Path) -> str:
    """The bundle's README.md: what each file holds and how to check it."""
    text = describe(folder)
    paths = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    paths += [p for p in (CRATE_FILE, RELEASE_JSON, SUMS_FILE) if p not in paths]
    lines = [f"# metacan release {version}", "", "| file | holds |", "|---|---|"]
    for path in paths:
        lines.append(f"| `{path}` | {text(path)} |")
    lines += [
        "",
        "Check the files: `sha256sum -c SHA256SUMS` in this folder. Check the validation tables: `metacan "
        "verify-release <this folder>` recomputes every `validation_*` table and `human_codes` from the protocol, the "
        "audit sample, the answers and the decisions of the `study_*` tables alone (no data folder, no network) and "
        "compares them cell by cell. Coders appear under pseudonyms only (`coder-<10 hex>`, per coder and study).",
        "",
        "`filter_recall` and `venue_known_item_recall`, when present, are the original protocol's instruments ii and "
        "iii, measured without a probability sample and kept apart from the design-based estimates. Filter recall: "
        f'"{FILTER_RECALL_MEANS}" Known-item recall: "{KNOWN_ITEM_MEANS}" Neither is recomputed by '
        "`verify-release`.",
        "",
        "`medline_study_design`, when present, is study design against MEDLINE: agreement, precision and recall of each "
        "study-design class against NLM's publication types, the reference being the records NLM indexed by hand "
        "(Curated and Automated records: agreement with another machine), with the gate on the lower 95% bounds.",
        "",
    ]
    return "\n".join(lines)


def _register(storage: MetacanStorage, manifest: dict, folder: Path, run_id: str, now: dt.datetime) -> None:
    with storage.connect() as con:
        con.execute(
            "INSERT INTO releases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                manifest["release_version"],
                manifest["content_sha256"],
                manifest["frame_build_id"],
                manifest["classifier_version"],
                now,
                folder.name,
                manifest["counts"]["frame"],
                sha256_file(folder / RELEASE_JSON),
                run_id,
            ],
        )


def read_manifest(folder: Path) -> dict:
    """The ``release.json`` of a bundle. Raises :class:`ReleaseError` naming the file when unreadable."""
    path = folder / RELEASE_JSON
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReleaseError(f"{path} is missing or unreadable ({exc}): the release bundle is damaged") from None


def _table_rows(path: Path) -> int | None:
    """Rows of a Parquet file from its footer, or None when it is not readable as Parquet."""
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, ValueError, pa.ArrowException):
        return None


def verify(folder: Path, release_json_sha256: str | None = None) -> list[str]:
    """Every way the bundle in ``folder`` differs from its ``release.json`` and ``SHA256SUMS`` (empty: it verifies):
    a symbolic link anywhere in it (a bundle is read from its own files only), ``release.json`` not an object of the
    cut's shape, a listed file missing or with another SHA-256 or size, a file not listed, a table whose rows differ
    from the manifest's ``counts`` (or a counted table missing), a ``content_sha256`` the tables no longer hash to,
    ``release.json`` not the registered one (``release_json_sha256``), ``SHA256SUMS`` disagreeing (naming the files)."""
    links = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_symlink())
    if links:
        return [f"{folder / p} is a symbolic link: a release bundle holds its own files only" for p in links]
    try:
        manifest = read_manifest(folder)
    except ReleaseError as exc:
        return [str(exc)]
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list) or not all(
        isinstance(e, dict) and isinstance(e.get("path"), str) and {"sha256", "bytes"} <= e.keys() for e in files
    ):
        return [f"{folder / RELEASE_JSON} is not a release manifest (no list of files with path, sha256 and bytes)"]
    out: list[str] = []
    if release_json_sha256 and sha256_file(folder / RELEASE_JSON) != release_json_sha256:
        out.append(f"{folder / RELEASE_JSON} is not the release.json registered in releases (it was rewritten)")
    listed = {e["path"]: e for e in files}
    actual = {e["path"]: e for e in file_entries(folder)}
    for path, entry in listed.items():
        have = actual.get(path)
        if have is None:
            out.append(f"{folder / path} is listed in release.json but missing")
        elif (have["sha256"], have["bytes"]) != (entry["sha256"], entry["bytes"]):
            out.append(f"{folder / path}: SHA-256 or size differs from release.json")
    out += [f"{folder / p} is not listed in release.json" for p in actual.keys() - listed.keys()]
    out += _count_problems(folder, manifest)
    return out + _sums_problems(folder)


def _count_problems(folder: Path, manifest: dict) -> list[str]:
    """A table (or ``records.jsonl``) whose rows differ from ``release.json``'s ``counts`` or that is missing, and a
    ``content_sha256`` the tables no longer hash to."""
    out = []
    counts = manifest.get("counts") if isinstance(manifest.get("counts"), dict) else {}
    for name, n in sorted(counts.items()):
        path = folder / RECORDS_FILE if name == "records" else folder / TABLES_DIR / f"{name}.parquet"
        if not path.is_file():
            have_rows = None
        elif name == "records":
            with path.open("rb") as fh:
                have_rows = sum(1 for _ in fh)
        else:
            have_rows = _table_rows(path)
        if have_rows is None:
            out.append(f"{path} is counted in release.json ({n} rows) but missing or unreadable")
        elif have_rows != n:
            out.append(f"{path} holds {have_rows} rows; release.json counts {n}")
    if "content_sha256" in manifest and content_sha256(folder) != manifest["content_sha256"]:
        out.append(f"{folder / TABLES_DIR}: the tables no longer hash to release.json's content_sha256")
    return out


def _sums_problems(folder: Path) -> list[str]:
    """``SHA256SUMS`` unreadable, a line not ``<sha256>  <file>`` (or ``<sha256> *<file>``), or the files whose
    SHA-256 it gives otherwise than the bundle holds."""
    sums_path = folder / SUMS_FILE
    want = {e["path"]: e["sha256"] for e in file_entries(folder, skip=(SUMS_FILE,))}
    try:
        lines = [line for line in sums_path.read_text("utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        return [f"{sums_path} is missing or unreadable ({exc})"]
    sums: dict[str, str] = {}
    for line in lines:
        digest, sep, name = line.partition("  ")
        if not sep:  # sha256sum -b writes "<hash> *<name>"
            digest, sep, name = line.partition(" *")
        if not sep:
            return [f"{sums_path}: line {line[:80]!r} is not '<sha256>  <file>'"]
        sums[name] = digest
    wrong = sorted(p for p in sums.keys() | want.keys() if sums.get(p) != want.get(p))
    return [f"{sums_path} disagrees with the files of the bundle: {', '.join(wrong[:5])}"] if wrong else []
