"""The direct-label assets, one per teacher of the registry (SPEC section 4).

:func:`direct_labels_asset` turns a :class:`~.registry.TeacherSpec` into the asset
``direct_labels_<name>`` and :func:`covers_check` into its check ``<name>_covers_its_works``; the
labelling itself (which works, reuse, rule labels, calls, archive, export) is :mod:`.labelling`.
The assets depend on ``frame`` and ``sample_design`` by key. The registry's ``[roles]`` table names the
census and the sample teacher (:data:`ROLES`).
"""

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa

from ..meta import counts_markdown, table_metadata
from ..openalex.lookup import load_abstracts
from ..resources import OpenAlexFiles
from ..settings import pilot_dir
from ..storage import MetacanStorage, sql_literal
from ..tables.teachers import LABELS_SCHEMA
from ..vocab import CATEGORIES, CENSUS_TEACHER, SAMPLE_TEACHER
from .labelling import LabelRunStats, covered_ids, discard_view_hashes, export_labels, iter_selected, label_works
from .qualification import draw_reference_set, frontier_kappa, qualify
from .registry import TeacherRunConfig, TeacherSpec, direct_labels_table, load_qualification, load_registry, load_roles
from .server import EmbeddedLlamaServer

#: A teacher step that fails (a server gone, a full disk) is tried again up to twice, 0-10 s then 10-20 s later. Not as
#: the assets' ``retry_policy``: Dagster's RetryPolicy retries an interrupted step too, so a ``metacan run`` sent
#: SIGTERM (or Ctrl-C, or a run terminated in the UI) went on labelling after it was told to stop. The steps raise
#: ``RetryRequested`` themselves instead (:func:`retried_unless_interrupted`), and an interrupt stops the run.
_TEACHER_RETRY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


@contextmanager
def retried_unless_interrupted(retry_number: int) -> Iterator[None]:
    """Turn an exception of the step's body into ``RetryRequested`` as :data:`_TEACHER_RETRY` would after attempt
    ``retry_number`` (the context's: 0 the first time) (a
    ``dg.Failure`` with ``allow_retries=False`` is not retried); an interrupt (``KeyboardInterrupt``, Dagster's
    ``DagsterExecutionInterruptedError``: BaseExceptions; and DuckDB's ``InterruptException``, raised as a
    ``KeyboardInterrupt``, which a signal during a query becomes) passes through and stops the run. Labels stored before
    either are kept: a re-run reuses them."""
    try:
        yield
    except duckdb.InterruptException as exc:  # DuckDB's form of a signal that landed during one of its queries
        raise KeyboardInterrupt from exc
    except dg.Failure as failure:
        if not failure.allow_retries:
            raise
        raise _retry(retry_number) from failure
    except Exception as exc:
        raise _retry(retry_number) from exc


def _retry(retry_number: int) -> dg.RetryRequested:
    return dg.RetryRequested(
        max_retries=_TEACHER_RETRY.max_retries, seconds_to_wait=_TEACHER_RETRY.calculate_delay(retry_number + 1)
    )


_COVERAGE_TEXT = {
    "all": "every frame work",
    "sample": "the design-weighted sample (sample_design.in_sample, SPEC section 5)",
}


def direct_labels_asset(spec: TeacherSpec) -> dg.AssetsDefinition:
    """The asset ``direct_labels_<name>`` for one registry teacher (SPEC section 4).

    Output table ``warehouse/direct_labels_<name>``: one row per covered work with the stored outcome of
    the current configuration (schema :data:`~.store.LABELS_SCHEMA`; ``status`` labelled or failed, a
    failure is unknown, never a negative). Launchpad config: :class:`~.registry.TeacherRunConfig`.
    """
    coverage = _COVERAGE_TEXT.get(
        spec.coverage,
        ("the design-weighted sample and " if spec.covers_sample else "")
        + f"the works of batch {spec.batch!r} (table label_batches)",
    )
    deps = ["frame"] + (["sample_design"] if spec.covers_sample else [])

    @dg.asset(
        name=direct_labels_table(spec.name),
        group_name="labeling",
        kinds={"python", "duckdb"},
        code_version="2",
        owners=["team:metacan"],
        deps=deps,
        description=f"Direct labels from teacher {spec.name!r} ({spec.model} at {spec.where}, "
        f"prompt {spec.prompt_version}, {spec.view_name} view, {spec.works_per_call} works per call) on {coverage}. "
        "Stored labels are reused; works outside the sampling frame get insufficient_payload by rule without a call.",
    )
    def _asset(
        context: dg.AssetExecutionContext,
        config: TeacherRunConfig,
        storage: MetacanStorage,
        openalex: OpenAlexFiles,
        llm_server: EmbeddedLlamaServer,
    ) -> dg.MaterializeResult:
        try:
            run_spec = config.apply(spec)
        except ValueError as exc:  # the launchpad config: not transient, fail once saying what to fix
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        with retried_unless_interrupted(context.retry_number):
            works = iter_selected(storage, run_spec)  # chunk after chunk: a census of millions is never held at once

            def abstracts(rows: list[dict]) -> dict[str, str | None]:
                return load_abstracts(
                    openalex.path_of,
                    [(w["id"], w["source_file"], w["source_locator"]) for w in rows if w["has_abstract"]],
                )

            stats = label_works(
                storage,
                run_spec,
                works,
                run_id=context.run.run_id,
                log=context.log,
                base_url=lambda: run_spec.base_url or llm_server.base_url(context.log),
                abstracts=abstracts,
                max_works=config.max_works,
            )
            try:
                export_labels(storage, run_spec, stats.view_hashes)
            finally:
                discard_view_hashes(stats.view_hashes)
        return dg.MaterializeResult(metadata=direct_labels_metadata(run_spec, storage, stats))

    return _asset


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
    """What each endpoint did this run (:class:`~.sending.LaneStats`): a Markdown table, one row per endpoint."""
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


def covers_check(spec: TeacherSpec, asset: dg.AssetsDefinition) -> dg.AssetChecksDefinition:
    """Blocking check ``<name>_covers_its_works``: every work the teacher covers has a row (a label or an
    explicit failure) in ``direct_labels_<name>``; a work deferred by ``max_works`` fails it."""

    @dg.asset_check(
        asset=asset.key,
        name=f"{spec.name}_covers_its_works",
        blocking=spec.coverage == "all",
        description=f"Every work teacher {spec.name} covers ({spec.coverage}) has a label or an explicit failure row.",
    )
    def _check(storage: MetacanStorage) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(**coverage_gaps(storage, spec))

    return _check


def coverage_gaps(storage: MetacanStorage, spec: TeacherSpec) -> dict:
    """``passed`` and ``metadata`` of ``<name>_covers_its_works``: the covered works (:func:`~.labelling.covered_ids`
    of the frame) without a row in ``direct_labels_<name>``, counted in DuckDB over the Parquet files (the frame's
    ids are never a Python set)."""
    wanted = covered_ids(storage, spec)
    frame = sql_literal(str(storage.table_dir("frame") / "*.parquet"))
    labels = sql_literal(str(storage.table_dir(direct_labels_table(spec.name)) / "*.parquet"))
    storage.require("frame")
    storage.require(direct_labels_table(spec.name))
    con = duckdb.connect()
    try:
        covered = f"SELECT id FROM read_parquet({frame})"
        if wanted is not None:
            con.register("wanted", pa.table({"id": sorted(wanted)}))
            covered += " WHERE id IN (SELECT id FROM wanted)"
        gaps = f"FROM ({covered}) WHERE id NOT IN (SELECT work_id FROM read_parquet({labels}))"
        n_covered = con.execute(f"SELECT count(*) FROM ({covered})").fetchone()[0]
        n_missing = con.execute(f"SELECT count(*) {gaps}").fetchone()[0]
        first = [r[0] for r in con.execute(f"SELECT id {gaps} ORDER BY id LIMIT 20").fetchall()]
        failed = con.execute(f"SELECT count(*) FROM read_parquet({labels}) WHERE status = 'failed'").fetchone()[0]
    finally:
        con.close()
    return {
        "passed": n_missing == 0,
        "metadata": {
            "works_covered": n_covered,
            "works_without_label_or_failure": n_missing,
            "first_missing": dg.MetadataValue.json(first),
            "failed_labels": failed,
        },
    }


@dg.asset(
    group_name="labeling",
    kinds={"python", "duckdb"},
    code_version="1",
    owners=["team:metacan"],
    deps=["canadian_entities"],
    description="Qualification of every registry teacher against the frontier reference set (frame1k: 750 works of "
    "the original frame, three frontier models, contested ones adjudicated), shown in the teacher's own view: "
    "design-weighted kappa on metaresearch against the adjudicated label, needed: [qualification] min_kappa_ratio x "
    "the frontier models' own pairwise kappa. A teacher that fails decides nothing (candidate, consensus, "
    "classify-and-count); its labels stay stored and shown as not qualified.",
)
def teacher_qualification(
    context: dg.AssetExecutionContext, storage: MetacanStorage, llm_server: EmbeddedLlamaServer
) -> dg.MaterializeResult:
    """Appends one ``teacher_qualification`` row per registry teacher (:mod:`.qualification`)."""
    try:  # a bad configuration or reference folder is not transient: fail once, saying what to fix
        cfg = load_qualification()
        entities = storage.read_table("canadian_entities", ["kind", "display_name"]).to_pylist()
        ca_funders = {(r["display_name"] or "").casefold() for r in entities if r["kind"] == "funder"}
        works = draw_reference_set(Path(pilot_dir()), cfg, ca_funders)
    except (ValueError, FileNotFoundError) as exc:
        raise dg.Failure(description=f"teacher_qualification: {exc}", allow_retries=False) from None
    results = {}
    with retried_unless_interrupted(context.retry_number):
        for spec in TEACHERS.values():
            results[spec.name] = qualify(
                storage,
                spec,
                works,
                cfg,
                run_id=context.run.run_id,
                log=context.log,
                base_url=lambda spec=spec: spec.base_url or llm_server.base_url(context.log),
            )
    table = (
        "| teacher | status | kappa | needed | labelled | reference positives |\n|---|---|---|---|---|---|\n"
        + "".join(
            f"| {name} | {r.status} | {_num(r.kappa)} | {_num(r.needed_kappa)} | {r.labelled} of {r.reference_works} | "
            f"{r.reference_positives} |\n"
            for name, r in results.items()
        )
    )
    return dg.MaterializeResult(
        metadata={
            "qualification": dg.MetadataValue.md(table),
            "reference_works": len(works),
            "reference_positives": sum(w.reference for w in works),
            "frontier_pairwise_kappa": dg.MetadataValue.float(round(frontier_kappa(works) or 0.0, 4)),
            "config_hash": cfg.config_hash,
            "config": dg.MetadataValue.json(json.loads(cfg.as_json())),
            **{f"{name}_status": r.status for name, r in results.items()},
            **{f"{name}_note": r.note() for name, r in results.items()},
        }
    )


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


#: The registry as loaded when the definitions load (``METACAN_TEACHERS_FILE``), and its assets.
TEACHERS: dict[str, TeacherSpec] = load_registry()
TEACHER_ASSETS: dict[str, dg.AssetsDefinition] = {name: direct_labels_asset(spec) for name, spec in TEACHERS.items()}
TEACHER_CHECKS = [covers_check(spec, TEACHER_ASSETS[name]) for name, spec in TEACHERS.items()]
#: ``{role: teacher name}`` (registry ``[roles]``) and the direct-label assets of the two roles.
ROLES: dict[str, str] = load_roles()
census_direct_labels = TEACHER_ASSETS[ROLES[CENSUS_TEACHER]]
sample_direct_labels = TEACHER_ASSETS[ROLES[SAMPLE_TEACHER]]
#: Former names of the role assets, kept for the importers that still use them (student/assets.py).
direct_labels_gemma = census_direct_labels
direct_labels_codex = sample_direct_labels
