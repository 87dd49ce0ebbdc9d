"""A teacher's current labels out of the label store (SPEC section 4): :func:`current_labels` in memory,
:func:`export_labels` streamed into ``warehouse/direct_labels_<name>``, and that table's asset metadata
(:func:`direct_labels_metadata`)."""

import shutil
from collections import Counter
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..meta import counts_markdown, table_metadata
from ..storage import MetacanStorage, scratch_path, sql_literal
from ..tables.teachers import LABELS_SCHEMA
from ..vocab import CATEGORIES
from .core.registry import TeacherSpec, direct_labels_table
from .core.rubric import load_prompt
from .core.stats import LabelRunStats
from .core.store import current_labels_sql
from .labelling import CHUNK_WORKS


def current_labels_query(spec: TeacherSpec, view_hashes: "dict[str, str] | Path") -> tuple[str, list, pa.Table | None]:
    """The SQL, parameters and (for a dict) the Arrow table ``wanted`` behind :func:`current_labels`."""
    prompt = load_prompt(spec.prompt_version)
    params = [spec.name, spec.model, prompt.version, prompt.sha]
    if isinstance(view_hashes, Path):
        wanted, source = None, f"read_parquet({sql_literal(str(view_hashes))})"
    else:
        wanted = pa.table({"work_id": list(view_hashes), "view_hash": list(view_hashes.values())})
        source = "wanted"
    sql = f"SELECT l.* FROM ({current_labels_sql()}) l SEMI JOIN {source} USING (work_id, view_hash) ORDER BY work_id"
    return sql, params, wanted


def current_labels(storage: MetacanStorage, spec: TeacherSpec, view_hashes: "dict[str, str] | Path") -> pa.Table:
    """For each ``{work_id: view hash}`` (or the Parquet file of a chunked run, :class:`ViewHashSpill`), the
    newest stored outcome of the current configuration (model, prompt version and SHA) for that record view
    (schema :data:`~.store.LABELS_SCHEMA`), by work id. A work without one (deferred by ``max_works``) has no
    row. The whole table in memory: for the reference set and tests; :func:`export_labels` streams."""
    sql, params, wanted = current_labels_query(spec, view_hashes)
    with storage.connect() as con:
        if wanted is not None:
            con.register("wanted", wanted)
        table = con.execute(sql, params).to_arrow_table()
    return table.select([f.name for f in LABELS_SCHEMA]).cast(LABELS_SCHEMA)


#: DuckDB's memory for the export's newest-label window and sort (it spills beyond; the catalog's default is 80% of
#: RAM). A 4,300,000-work census export: 5,160 MiB peak and 41.6 s by default, 1,237 MiB and 83.4 s
#: with 1 GB, 2,193 MiB and 81.4 s with 2 GB (Intel Xeon, 2 CPUs).
EXPORT_MEMORY = "1GB"


def export_labels(storage: MetacanStorage, spec: TeacherSpec, view_hashes: "dict[str, str] | Path") -> int:
    """Write ``warehouse/direct_labels_<name>``: :func:`current_labels` of the frame works ``view_hashes``,
    streamed from DuckDB in batches of :data:`CHUNK_WORKS` rows (one Parquet file, a row group a batch, the
    same rows and schema as one write of the whole table). Returns the number of rows."""
    sql, params, wanted = current_labels_query(spec, view_hashes)
    name = direct_labels_table(spec.name)
    storage.warehouse.mkdir(parents=True, exist_ok=True)
    folder = scratch_path(storage.warehouse, f".{name}.tmp-")
    folder.mkdir()
    rows = 0
    try:
        with (
            storage.connect() as con,
            pq.ParquetWriter(str(folder / "part-00000.parquet"), LABELS_SCHEMA, compression="zstd") as writer,
        ):
            con.execute(f"SET memory_limit = {sql_literal(EXPORT_MEMORY)}")  # else 80% of RAM: 5 GB at 4.3M works
            if wanted is not None:
                con.register("wanted", wanted)
            reader = con.execute(sql, params).to_arrow_reader(CHUNK_WORKS)
            for batch in reader:
                table = pa.Table.from_batches([batch]).select([f.name for f in LABELS_SCHEMA]).cast(LABELS_SCHEMA)
                writer.write_table(table)
                rows += table.num_rows
        storage.adopt_table(name, folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return rows


def direct_labels_metadata(spec: TeacherSpec, storage: MetacanStorage, stats: LabelRunStats) -> dict:
    """The metadata of ``direct_labels_<name>`` (as written by :func:`~.labelling.export_labels`): the table's
    (row count, schema, preview), the teacher's configuration, what this run did (calls, tokens, cost, reuse,
    rule labels, deferrals, recoveries) and the labels by status and category, counted by DuckDB over the
    table's Parquet files (no row of it in Python but the preview's)."""
    files = sql_literal(str(storage.table_dir(direct_labels_table(spec.name)) / "*.parquet"))
    con = duckdb.connect()
    try:
        con.execute(f"CREATE VIEW labels AS SELECT * FROM read_parquet({files})")
        n = con.execute("SELECT count(*) FROM labels").fetchone()[0]
        status = dict(con.execute("SELECT status, count(*) FROM labels GROUP BY ALL").fetchall())
        cats = Counter(
            dict(
                con.execute("SELECT c, count(*) FROM (SELECT unnest(categories) c FROM labels) GROUP BY ALL").fetchall()
            )
        )
        cats["(none: not meta-research)"] = con.execute(
            "SELECT count(*) FROM labels WHERE status = 'labelled' AND coalesce(len(categories), 0) = 0"
        ).fetchone()[0]
        preview = con.execute("SELECT * FROM labels LIMIT 10").to_arrow_table().to_pylist()
    finally:
        con.close()
    per_work = stats.seconds / stats.sent if stats.sent else None
    return table_metadata(
        LABELS_SCHEMA,
        n,
        preview,
        ["work_id", "status", "categories", "genre", "confidence", "error"],
        teacher=spec.name,
        model=spec.model,
        prompt_version=spec.prompt_version,
        record_view=spec.view_name,
        coverage=spec.coverage,
        endpoint=spec.where,
        works_per_call=spec.works_per_call,
        concurrency=spec.calls_in_flight,
        structured_output=stats.structured_output or "(no call)",
        works_covered=stats.works,
        teacher_calls_this_run=stats.calls,
        works_sent_this_run=stats.sent,
        reused_from_store=stats.reused,
        rule_labels_this_run=stats.rule_labels,
        deferred_by_max_works=stats.deferred,
        tokens_this_run=stats.prompt_tokens + stats.completion_tokens,
        cost_usd_this_run=dg.MetadataValue.float(round(stats.cost_usd, 6)),
        seconds_per_work_this_run=dg.MetadataValue.float(round(per_work, 3)) if per_work else dg.MetadataValue.null(),
        works_missing_a_label=stats.works - n,
        recovered_from_killed_runs=dg.MetadataValue.json(stats.recovered),
        failures_this_run=counts_markdown(dict(stats.failures), "cause"),
        endpoints_this_run=endpoints_markdown(stats),
        labels_by_status=counts_markdown(dict(status), "status"),
        labels_by_category=counts_markdown(
            {c: cats[c] for c in (*CATEGORIES, "(none: not meta-research)") if cats[c]}, "category"
        ),
    )


def endpoints_markdown(stats: LabelRunStats) -> dg.MetadataValue:
    """What each endpoint did this run (:class:`~..calling.sending.LaneStats`): a Markdown table, one row per endpoint."""
    if not stats.endpoints:
        return dg.MetadataValue.md("(no call this run)")
    rows = "".join(
        f"| {e.endpoint} | {e.concurrency} | {e.calls} | {e.works} | {e.labelled} | {e.failures} | {e.given_back} | "
        f"{e.seconds:.1f} | {e.downs} | {e.probes} | {e.state} |\n"
        for e in stats.endpoints.values()
    )
    return dg.MetadataValue.md(
        "| endpoint | concurrency | calls | works | labelled | failed | given back | seconds on the wire | downs | "
        "probes | state at the end |\n|---|---|---|---|---|---|---|---|---|---|---|\n" + rows
    )
