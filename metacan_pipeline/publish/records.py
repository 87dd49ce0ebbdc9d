"""Per-work JSON records with the field names of ../shared/seeds/004_*.txt (SPEC section 9).

A record is assembled from the frame row, the direct labels of every teacher, the hybrid prediction
and the machine scores. :func:`ship_violations` is the SPEC section 8 invariant that the blocking
asset check enforces on every record before any page is rendered.

:func:`record_inputs` streams what the records are built from (one DuckDB query, ``record_inputs.sql``),
:class:`RecordBatches` turns those rows into ``work_records`` batches (JSON text and its hash).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import fastjsonschema
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from .. import settings
from ..openalex.ids import is_work_id
from ..release.layer import UNRELEASED, LayerRule
from ..storage import MetacanStorage, id_ranges, scratch_path, sql_literal, sweep_dead
from ..tables.publish import RECORDS_SCHEMA
from ..vocab import LABEL_FIELDS, PREDICTION_STATUS
from .human_layer import human_code_entry, validation_entries
from .lineage import lineage_record

#: JSON Schema (draft-07) of a published record: the seed 004 fields, route evidence, lineage.
SCHEMA_PATH = Path(__file__).with_name("work_record.schema.json")

DIRECT_LABEL_STATUS = "direct_label_unvalidated"


def _join(values: list[str] | None) -> str:
    return "; ".join(v for v in (values or []) if v)


@lru_cache(maxsize=1)
def record_validator():
    """The compiled validator of ``work_record.schema.json`` (fastjsonschema: about 14,000 records/s here).

    Call it with a record: returns the record, or raises ``fastjsonschema.JsonSchemaValueException``
    whose ``message`` names the first field that breaks the schema (e.g. ``data.routes.ca_aff must be boolean``).
    """
    return fastjsonschema.compile(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def schema_violation(record: dict) -> str | None:
    """The first way ``record`` breaks the JSON Schema, as ``"<id>: schema: <message>"``, or None."""
    try:
        record_validator()(record)
    except fastjsonschema.JsonSchemaValueException as exc:
        return f"{record.get('id') if isinstance(record, dict) else '?'}: schema: {exc.message}"
    return None


def canadian_authors(rows: list[dict] | None) -> list[dict]:
    """The record's ``ca_authors``: the frame's Canadian authorships (``frame.ca_authors``; none for a frame built
    before it had them), each ``{"name", "orcid", "institutions": [{"name", "ror"}]}``."""
    return [
        {
            "name": a["name"],
            "orcid": a.get("orcid"),
            "institutions": [{"name": i["name"], "ror": i.get("ror")} for i in a.get("institutions") or []],
        }
        for a in rows or []
    ]


def direct_label_entry(label: dict, qualification: dict[str, str] | None = None) -> dict:
    """One entry of ``direct_labels``: the label with its source (teacher, model, prompt) and status, and
    ``qualification``: whether its teacher passed the qualification test, the sentence every surface shows
    (``qualification`` maps a teacher to it; a teacher not in the map gets none: an imported screener)."""
    entry = {
        "teacher": label["teacher"],
        "model": label["model"],
        "prompt_version": label["prompt_version"],
        "record_view": label["record_view"],
        "status": label["status"],
        "label_status": DIRECT_LABEL_STATUS if label["status"] == "labelled" else None,
        "source": label.get("source"),
        "error": label.get("error"),
        "call_id": label.get("call_id"),
        "labelled_at": str(label["created_at"]) if label.get("created_at") is not None else None,
        "qualification": (qualification or {}).get(label["teacher"]),
    }
    for k in LABEL_FIELDS:
        entry[k] = label.get(k)
    if entry["categories"] is not None:
        entry["categories"] = list(entry["categories"])
    return entry


def build_record(
    work: dict,
    labels: list[dict],
    prediction: dict | None,
    machine: dict | None,
    lineage: dict,
    qualification: dict[str, str] | None = None,
    human_code: dict | None = None,
    human_validation: list[dict] | None = None,
) -> dict:
    """The published record of one frame work (seed 004 fields, plus route evidence and lineage), and the human
    layers (:mod:`.human_layer`) only where they exist: ``human_code`` (a coded work's final human code) and
    ``human_validation`` (the passing heads of its classifier version)."""
    pred = None
    if prediction is not None:
        pred = {k: v for k, v in prediction.items() if k not in ("id", "gemma_label_status")}
    ms = None
    if machine is not None:
        ms = {k: v for k, v in machine.items() if k != "id"}
    record = {
        "id": work["id"],
        "doi": work["doi"] or "",
        "title": work["title_text"],
        "year": work["publication_year"],
        "lang": work["language"] or "",
        "type": work["type"] or "",
        "venue": work["venue_name"] or "",
        "topic": work["topic"] or "",
        "field": work["field"] or "",
        "cited_by": work["cited_by_count"] or 0,
        "is_retracted": bool(work["is_retracted"]),
        "has_abstract": bool(work["has_abstract"]),
        "ca_institutions": _join(work["ca_institutions"]),
        "ca_authors": canadian_authors(work.get("ca_authors")),
        "funders": _join(work["funder_names"]),
        "keywords": _join(work["keywords"]),
        "routes": {
            "ca_aff": work["ca_aff"],
            "ca_fund": work["ca_fund"],
            "ca_venue": work["ca_venue"],
            "about_ca": work["about_ca"],
            "invisible_to_affiliation_only": work["invisible_to_affiliation_only"],
        },
        "route_evidence": {
            "ca_aff": list(work["ca_aff_evidence"] or []),
            "ca_fund": list(work["ca_fund_evidence"] or []),
            "ca_venue": list(work["ca_venue_evidence"] or []),
            "about_ca": list(work["about_ca_evidence"] or []),
        },
        "retraction": {"is_retracted": True, "source": "OpenAlex is_retracted"} if work["is_retracted"] else None,
        "screen": None,
        "sampling_frame": {
            "in_sampling_frame": work["in_sampling_frame"],
            "exclusion": work["sampling_frame_exclusion"],
        },
        "direct_labels": [
            direct_label_entry(label, qualification) for label in sorted(labels, key=lambda label: label["teacher"])
        ],
        "prediction": pred,
        "machine_scores": ms,
        "lineage": lineage,
        "layer": UNRELEASED,  # set by release.layer.LayerRule.apply (record_row)
    }
    if human_code is not None:
        record["human_code"] = human_code
    if human_validation:
        record["human_validation"] = human_validation
    return record


def ship_violations(record: dict) -> list[str]:
    """Every way ``record`` breaks SPEC section 8 (empty list = may ship).

    - a ``score_only:*`` machine-score row that carries any category label;
    - a direct label with categories but no teacher (source) or no status;
    - predicted categories without ``prediction_status`` or ``model_version``.
    """
    out: list[str] = []
    wid = record.get("id")
    ms = record.get("machine_scores") or {}
    if str(ms.get("validation_status") or "").startswith("score_only"):
        for key, value in ms.items():
            if "categor" in key and value not in (None, [], ""):
                out.append(f"{wid}: score_only machine scores carry a category label ({key}={value!r})")
    for lab in record.get("direct_labels") or []:
        if lab.get("categories") and (not lab.get("teacher") or not lab.get("status") or not lab.get("label_status")):
            out.append(f"{wid}: direct label categories {lab.get('categories')!r} without source and status")
    pred = record.get("prediction") or {}
    if (pred.get("candidate_categories") or pred.get("consensus_categories")) and (
        pred.get("prediction_status") != PREDICTION_STATUS or not pred.get("model_version")
    ):
        out.append(f"{wid}: predicted categories without prediction_status {PREDICTION_STATUS!r} and model_version")
    return out


def classification_card(record: dict) -> dict[str, Any]:
    """What the Classification card shows, by precedence: direct labels, then consensus, then candidate.

    Returns ``{"kind": "direct"|"consensus"|"candidate"|"no_category"|"none", ...}``: ``labels`` for
    direct, ``categories`` and ``model_version`` for the prediction kinds. ``no_category``: the
    classifier scored the work and called none of the categories on either side (a machine output,
    unvalidated, not a judgement that it is not meta-research).
    An empty category list from a labelled direct label means "not meta-research" (a judgement);
    no label and no prediction at all means "not classified yet" (absence is not a negative).
    """
    labelled = [
        label for label in record.get("direct_labels") or [] if label["status"] == "labelled"
    ]  # teacher calls and rule labels
    if labelled:
        return {"kind": "direct", "labels": labelled}
    pred = record.get("prediction") or {}
    if pred.get("consensus_categories"):
        return {
            "kind": "consensus",
            "categories": pred["consensus_categories"],
            "model_version": pred.get("model_version"),
        }
    if pred.get("candidate_categories"):
        return {
            "kind": "candidate",
            "categories": pred["candidate_categories"],
            "model_version": pred.get("model_version"),
        }
    if record.get("prediction"):
        return {"kind": "no_category", "categories": [], "model_version": pred.get("model_version")}
    return {"kind": "none"}


# ---- building the records ----------------------------------------------------------------------------

#: The query of :func:`record_inputs` (static; the relations it reads are views made per call).
RECORD_INPUTS_SQL = resources.files("metacan_pipeline.publish").joinpath("record_inputs.sql").read_text("utf-8")
#: The warehouse tables a record joins to the frame (besides the direct-label tables).
_INPUT_TABLES = ("frame", "predictions", "machine_scores", "work_lineage")
#: Joined when present (an empty relation of the same name otherwise): the human codes validation_report writes.
_OPTIONAL_TABLES = {"human_codes": "NULL::VARCHAR AS id, NULL::VARCHAR AS protocol_id"}


class RecordInputError(ValueError):
    """A frame work that may not become a record: an id that is not ``^W\\d+$``, or a work seen twice."""


class RecordWorkerDied(RuntimeError):
    """A worker process of a ``work_records`` build ended without an answer (SIGKILL: the OOM killer, ``kill -9``)."""


def input_views(storage: MetacanStorage, label_tables: list[str], release_frame: Path | None = None) -> list[str]:
    """The ``CREATE VIEW`` statements :data:`RECORD_INPUTS_SQL` reads: one view per table of
    ``_INPUT_TABLES`` over its Parquet files, and ``direct_labels``, the rows of every table of
    ``label_tables`` (all must exist), or an empty relation when there is none; ``release_frame``, the ids of the
    newest release's frozen frame (``release_frame``: that Parquet file, or none before the first release)."""

    def parquet(name: str) -> str:
        return f"read_parquet({sql_literal(str(storage.table_dir(name) / '*.parquet'))}, hive_partitioning=false)"

    views = [f"CREATE VIEW {name} AS SELECT * FROM {parquet(name)}" for name in _INPUT_TABLES]
    labels = " UNION ALL BY NAME ".join(f"SELECT * FROM {parquet(t)}" for t in label_tables)
    for name, empty in _OPTIONAL_TABLES.items():
        present = storage.has_table(name)
        views.append(
            f"CREATE VIEW {name} AS SELECT * FROM {parquet(name)}"
            if present
            else f"CREATE VIEW {name} AS SELECT {empty} WHERE false"
        )
    views.append(
        f"CREATE VIEW direct_labels AS {labels}"
        if labels
        else "CREATE VIEW direct_labels AS SELECT NULL::VARCHAR AS work_id, NULL::VARCHAR AS teacher WHERE false"
    )
    views.append(
        f"CREATE VIEW release_frame AS SELECT id FROM read_parquet({sql_literal(str(release_frame))})"
        if release_frame is not None
        else "CREATE VIEW release_frame AS SELECT NULL::VARCHAR AS id WHERE false"
    )
    return views


#: Frame works per range of ids that :func:`record_inputs` joins at a time: one query over the whole frame ran out of
#: DuckDB's 2 GB at 200,000 rehearsal works (every joined table's hash table and the sort of every wide frame row).
RANGE_WORKS = 50_000
#: The relations :data:`RECORD_INPUTS_SQL` reads, and the column holding each one's work id.
_RANGED = {
    "frame": "id",
    "predictions": "id",
    "machine_scores": "id",
    "work_lineage": "id",
    "human_codes": "id",
    "release_frame": "id",
    "direct_labels": "work_id",
}


def _ranged_connection(
    storage: MetacanStorage, label_tables: list[str], release_frame: Path | None, spill: Path | None = None
) -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB (2 GB, spilling under ``spill``, by default ``warehouse/.spill-records``, no catalog
    lock) with the input views of :func:`input_views` as ``<name>__all``; :func:`_range_batches` narrows them to one
    range of ids. DuckDB processes spilling to one folder use the same file names and crash or read each other's
    blocks (duckdb issue 15173): connections that may run side by side each need their own ``spill``."""
    spill = spill or storage.warehouse / ".spill-records"
    con = duckdb.connect(config={"memory_limit": "2GB", "temp_directory": str(spill)})
    for statement in input_views(storage, label_tables, release_frame):
        name = statement.split()[2]
        con.execute(statement.replace(f"CREATE VIEW {name} AS", f"CREATE VIEW {name}__all AS", 1))
    return con


def record_ranges(con: duckdb.DuckDBPyConnection, range_works: int) -> list[str]:
    """The ranges of frame ids joined at a time (:func:`metacan_pipeline.storage.id_ranges` of ``frame__all``)."""
    return id_ranges(con, "frame__all", range_works)


def _range_batches(con: duckdb.DuckDBPyConnection, where: str, batch_rows: int) -> Iterator[list[dict]]:
    for name, key in _RANGED.items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {name}__all WHERE {where.replace('{key}', key)}")
    for batch in con.execute(RECORD_INPUTS_SQL).to_arrow_reader(batch_rows):
        yield batch.to_pylist()


def record_inputs(
    storage: MetacanStorage, label_tables: list[str], batch_rows: int = 5000, release_frame: Path | None = None
) -> Iterator[list[dict]]:
    """Everything one record is built from, one dict per frame work in id order, in lists of ``batch_rows``:
    ``{"work": frame row, "labels": [direct label rows], "pred": prediction row or None, "machine": machine
    score row or None, "lineage": work_lineage row, "in_release": in the newest release's frame}``. One DuckDB query
    over the Parquet tables (its own in-memory connection, so no catalog lock is held) per range of
    :data:`RANGE_WORKS` frame ids, ranges ascending, each range's views filtered to its ids, streamed: memory stays at
    one range's joins and one batch, whatever the size of the frame (works with a NULL id, if any, come last, as
    ``ORDER BY id`` puts them). ``label_tables``: the ``direct_labels_<teacher>`` tables to read (each must exist)."""
    con = _ranged_connection(storage, label_tables, release_frame)
    try:
        for where in record_ranges(con, RANGE_WORKS):
            yield from _range_batches(con, where, batch_rows)
    finally:
        con.close()


@dataclass(frozen=True)
class RecordBuild:
    """What every range of a ``work_records`` build shares (picklable: it travels to the worker processes)."""

    data_dir: str
    label_tables: tuple[str, ...]
    release_frame: Path | None
    qualification: dict[str, str] | None
    passing: dict[str, list[dict]] | None
    layer: LayerRule | None
    batch_rows: int = 5000


def build_range(build: RecordBuild, where: str, index: int, folder: Path) -> tuple[int, int, int, list[dict]]:
    """Write the records of one range of ids (:func:`record_ranges`) as ``folder/part-<index>-<batch>.parquet``;
    returns ``(records, human-coded, human-validated, the first ten rows)``. Raises :class:`RecordInputError`
    as :class:`RecordBatches`. DuckDB spills under ``.spill-records/<folder name>-<index>``, this range's own."""
    storage = MetacanStorage(data_dir=build.data_dir)
    batches = RecordBatches({}, build.qualification, build.passing, build.layer)
    spill = _range_spill(folder, index)
    spill.mkdir(parents=True, exist_ok=True)
    con = _ranged_connection(storage, list(build.label_tables), build.release_frame, spill)
    rows = 0
    try:
        for j, inputs in enumerate(_range_batches(con, where, build.batch_rows)):
            table = batches.table(inputs)
            pq.write_table(table, folder / f"part-{index:05d}-{j:05d}.parquet", compression="zstd")
            rows += table.num_rows
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
    return rows, batches.human_coded, batches.human_validated, batches.preview


def _range_spill(folder: Path, index: int) -> Path:
    """The spill folder of range ``index`` of the build into ``folder`` (:func:`build_range`)."""
    return folder.parent / ".spill-records" / f"{folder.name}-{index:05d}"


def _exit_with_parent() -> None:
    """Initializer of a record worker process: end it as soon as the process that started it is gone. A pool's
    workers are never told that their parent was killed (SIGKILL, the OOM killer): they went on building the queued
    ranges into a build folder no one would adopt, then waited for work forever."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


#: At most this many record worker processes.
RECORD_WORKERS_MAX = 4
#: Memory one record worker may take: about 350 MB before any work, DuckDB's 2 GB limit (:func:`_ranged_connection`)
#: and a batch of records in Python.
RECORD_WORKER_MEMORY = int(2.5 * 2**30)


def record_workers() -> int:
    """Worker processes of a ``work_records`` build: ``$METACAN_RECORD_WORKERS`` when set, else one per core this
    process may use (dask's count: CPU affinity and a container's cgroup CPU quota), at most
    :data:`RECORD_WORKERS_MAX` and at most one per :data:`RECORD_WORKER_MEMORY` of the memory distributed sees
    (the machine's, a container's cgroup limit or the process's rlimit): four workers on an 8 GB machine would be
    OOM-killed."""
    from dask.system import cpu_count
    from distributed.system import MEMORY_LIMIT

    if (configured := settings.record_workers()) is not None:
        return configured
    return max(1, min(RECORD_WORKERS_MAX, cpu_count(), MEMORY_LIMIT // RECORD_WORKER_MEMORY))


@contextlib.contextmanager
def worker_pool(workers: int, doing: str, kept: str = "") -> Iterator[ProcessPoolExecutor]:
    """``workers`` spawned worker processes for work_records (a step process has threads: no fork), each ending when
    its parent does. Any exception in the block terminates them now: the tasks running and queued would otherwise run
    to their end first (an interrupted build went on for two ranges' time). A worker that dies raises
    :class:`RecordWorkerDied`, saying it happened ``doing``, what to lower, and ``kept``."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_exit_with_parent) as pool:
        try:
            yield pool
        except BrokenProcessPool:
            raise RecordWorkerDied(
                f"a work_records worker process died {doing} ({workers} workers): most often the out-of-memory killer "
                f"(each worker may take about {RECORD_WORKER_MEMORY / 2**30:.1f} GB); set "
                f"{settings.RECORD_WORKERS_ENV}=1 (or a smaller number) and materialize work_records again{kept}"
            ) from None
        except BaseException:
            for process in (pool._processes or {}).values():
                process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def check_file(path: str, passed: frozenset[tuple[str, str]]) -> tuple[int, int, list[str]]:
    """Records checked, records violating and the first :data:`SHOWN_VIOLATIONS` violations of one ``work_records``
    file: the JSON Schema (:func:`schema_violation`), :func:`ship_violations` and :func:`.layer.rolling_violations`
    (``passed``: the (classifier version, head) pairs that passed human validation)."""
    from ..release.layer import rolling_violations

    checked = bad = 0
    shown: list[str] = []
    for batch in pq.ParquetFile(path).iter_batches(batch_size=5000, columns=["record_json"]):
        for text in batch.column(0).to_pylist():
            record = _loads(text)
            v = ship_violations(record) + rolling_violations(record, passed)
            v += [e for e in [schema_violation(record)] if e]
            checked += 1
            bad += bool(v)
            shown.extend(v[: SHOWN_VIOLATIONS - len(shown)])
    return checked, bad, shown


#: Violations a check's metadata shows (the first ones, in record order).
SHOWN_VIOLATIONS = 20


def _loads(text: str) -> Any:
    """A record's JSON: orjson, or json for what orjson refuses (``NaN``, which json.dumps writes for a float NaN and
    the JSON Schema then judges)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def check_records(storage: MetacanStorage, passed: frozenset[tuple[str, str]], workers: int) -> tuple[int, int, list]:
    """:func:`check_file` over every file of ``work_records``, in ``workers`` processes when there are several files;
    returns records checked, records violating and the first :data:`SHOWN_VIOLATIONS` violations in record order.
    In the step process alone, the 4.3M-work rehearsal's check took 536.7 s."""
    storage.require("work_records")
    files = [str(p) for p in sorted(storage.table_dir("work_records").glob("*.parquet"))]
    workers = max(1, min(workers, len(files)))
    if workers == 1:
        results = [check_file(f, passed) for f in files]
    else:
        with worker_pool(workers, "while checking the records") as pool:
            results = list(pool.map(check_file, files, [passed] * len(files)))
    shown = [v for _, _, vs in results for v in vs][:SHOWN_VIOLATIONS]
    return sum(r[0] for r in results), sum(r[1] for r in results), shown


def write_records(storage: MetacanStorage, build: RecordBuild, workers: int, range_works: int = RANGE_WORKS) -> dict:
    """Build ``work_records`` range by range (:func:`build_range`), in ``workers`` processes when there is more than
    one range of ``range_works`` ids, each range's files named in id order, and adopt them as the table atomically
    (a failure leaves the previous table). Returns ``{records, human_coded, human_validated, preview, ranges (of
    ids, the NULL-id one not counted), workers}``. Every range is built by the same code whatever the workers, so the
    table is the same."""
    con = _ranged_connection(storage, list(build.label_tables), build.release_frame)
    try:
        ranges = record_ranges(con, range_works)
    finally:
        con.close()
    storage.warehouse.mkdir(parents=True, exist_ok=True)
    folder = scratch_path(storage.warehouse, ".work_records.build-")
    sweep_dead(_range_spill(folder, 0).parent, ".work_records.build-")  # a killed build's spill folders
    folder.mkdir()
    workers = max(1, min(workers, len(ranges) - 1))
    try:
        if workers == 1:
            results = [build_range(build, where, k, folder) for k, where in enumerate(ranges)]
        else:
            with worker_pool(workers, "while building", "; the previous work_records is kept") as pool:
                futures = [pool.submit(build_range, build, where, k, folder) for k, where in enumerate(ranges)]
                results = [f.result() for f in futures]
        if not any(folder.iterdir()):
            pq.write_table(RECORDS_SCHEMA.empty_table(), folder / "part-00000-00000.parquet")
        storage.adopt_table("work_records", folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        spills = _range_spill(folder, 0).parent
        for spill in spills.glob(f"{folder.name}-*"):  # a killed worker's
            shutil.rmtree(spill, ignore_errors=True)
        with contextlib.suppress(OSError):
            spills.rmdir()  # unless another build of this warehouse spills there
    preview = [row for *_, rows in results for row in rows][:10]
    return {
        "records": sum(r[0] for r in results),
        "human_coded": sum(r[1] for r in results),
        "human_validated": sum(r[2] for r in results),
        "preview": preview,
        "ranges": len(ranges) - 1,  # of ids: the NULL-id range is not one
        "workers": workers,
    }


def record_row(
    row: dict,
    qualification: dict[str, str] | None = None,
    passing: dict[str, list[dict]] | None = None,
    layer: LayerRule | None = None,
) -> dict:
    """The ``work_records`` row of one :func:`record_inputs` row: ``{"id", "record_json", "record_hash"}``,
    the hash being SHA-256 (16 hex) of the JSON text. ``qualification``: teacher -> qualification sentence;
    ``layer``: the release layer rule (:mod:`metacan_pipeline.release.layer`; None: ``unreleased``)."""
    record = build_record(
        row["work"],
        row["labels"],
        row["pred"],
        row["machine"],
        lineage_record(row["lineage"]),
        qualification,
        human_code_entry(row.get("human")),
        validation_entries(row["pred"], passing or {}),
    )
    if layer is not None:
        layer.apply(record, bool(row.get("in_release")))
    text = json.dumps(record, ensure_ascii=False, default=str)
    return {"id": record["id"], "record_json": text, "record_hash": hashlib.sha256(text.encode()).hexdigest()[:16]}


class RecordBatches:
    """Turns lists of :func:`record_inputs` rows into ``work_records`` tables, checking the ids on the way.

    ``previous``: ``{id: record_hash}`` of the last materialization (a test's few; the asset counts changes in
    DuckDB instead, :func:`count_changed`). After the batches are consumed, ``changed`` counts the records new or
    changed since then and ``preview`` holds the first ten rows.
    Raises :class:`RecordInputError` naming the id when a work id is not ``^W\\d+$`` or a work comes twice
    (rows come ordered by id, so a repeat is a duplicate of the frame or of a table joined to it).
    """

    def __init__(
        self,
        previous: dict[str, str],
        qualification: dict[str, str] | None = None,
        passing: dict[str, list[dict]] | None = None,
        layer: LayerRule | None = None,
    ) -> None:
        self.previous = previous
        self.qualification = qualification
        self.passing = passing
        self.layer = layer
        self.changed = 0
        self.human_coded = 0  # records with a human-coded layer (SPEC section 8: its own count)
        self.human_validated = 0  # records carrying a human_validated:<protocol> status
        self.preview: list[dict] = []
        self._last: str | None = None

    def check_id(self, wid: str) -> None:
        """Raise :class:`RecordInputError` when ``wid`` is not a work id or repeats the previous row's."""
        if not is_work_id(wid):
            raise RecordInputError(
                f"the frame holds the work id {wid!r}, which is not ^W\\d+$: no record is "
                f"written; rebuild the frame (its check frame_ids_unique and the reader refuse such ids)"
            )
        if wid == self._last:
            raise RecordInputError(
                f"work {wid} appears twice among the records' inputs (frame, predictions, "
                f"machine_scores or work_lineage): no record is written; re-materialize the frame "
                f"and the scoring assets so that each holds one row per work"
            )
        self._last = wid

    def table(self, rows: list[dict]) -> pa.Table:
        """The ``work_records`` table (``RECORDS_SCHEMA``) of one list of input rows."""
        out = []
        for row in rows:
            self.check_id(row["work"]["id"])
            out.append(record_row(row, self.qualification, self.passing, self.layer))
            self.human_coded += row.get("human") is not None
            self.human_validated += bool(self.passing and (row["pred"] or {}).get("model_version") in self.passing)
            self.changed += self.previous.get(out[-1]["id"]) != out[-1]["record_hash"]
        self.preview.extend(out[: max(0, 10 - len(self.preview))])
        return pa.Table.from_pylist(out, schema=RECORDS_SCHEMA)


def keep_previous_hashes(storage: MetacanStorage) -> Path | None:
    """Copy ``(id, record_hash)`` of the current ``work_records`` table to a scratch Parquet file in the warehouse
    (DuckDB, streamed: nothing of it in Python, issue 17) and return its path; None before the first
    materialization. :func:`count_changed` reads it once the new table is written; the caller deletes it."""
    if not storage.has_table("work_records"):
        return None
    path = Path(f"{scratch_path(storage.warehouse, '.work_records-previous-')}.parquet")
    con = duckdb.connect(config={"memory_limit": "1GB", "temp_directory": str(storage.warehouse / ".spill-records")})
    try:
        source = sql_literal(str(storage.table_dir("work_records") / "*.parquet"))
        con.execute(
            f"COPY (SELECT id, record_hash FROM read_parquet({source}, hive_partitioning=false)) "
            f"TO {sql_literal(str(path))} (FORMAT parquet)"
        )
    finally:
        con.close()
    return path


def count_changed(storage: MetacanStorage, previous: Path | None) -> int:
    """The records of the current ``work_records`` that are new or whose ``record_hash`` differs from the one
    :func:`keep_previous_hashes` kept in ``previous`` (None: every record is new). Counted in DuckDB."""
    source = sql_literal(str(storage.table_dir("work_records") / "*.parquet"))
    con = duckdb.connect(config={"memory_limit": "1GB", "temp_directory": str(storage.warehouse / ".spill-records")})
    try:
        if previous is None:
            return con.execute(f"SELECT count(*) FROM read_parquet({source}, hive_partitioning=false)").fetchone()[0]
        return con.execute(
            f"SELECT count(*) FROM read_parquet({source}, hive_partitioning=false) n "
            f"LEFT JOIN read_parquet({sql_literal(str(previous))}) o ON o.id = n.id "
            "WHERE o.record_hash IS DISTINCT FROM n.record_hash"
        ).fetchone()[0]
    finally:
        con.close()
