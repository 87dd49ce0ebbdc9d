"""Publishing assets: ``work_records`` with ``work_lineage`` (JSON records and their lineage) and ``work_pages``
(HTML); their blocking checks are in :mod:`.checks`.

The assets orchestrate; the work is in :mod:`.records` (a record), :mod:`.record_inputs` (their query),
:mod:`.record_build` (the table, built in worker processes), :mod:`.lineage`, :mod:`.manifest` (which pages to
render), :mod:`.pages` (rendering) and :mod:`.page_writer` (writing the site). Upstream
stages are named by asset key, the teachers by the registry (:mod:`metacan_pipeline.teachers.core.registry`).
"""

import contextlib
import datetime as dt
import tempfile
import time
from pathlib import Path

import dagster as dg
from pydantic import Field

from ..meta import counts_markdown, table_metadata
from ..openalex.api import DEFAULT_BASE_URL
from ..release.gate import read_passing_heads
from ..release.layer import layer_rule
from ..settings import ABSTRACT_SOURCES_ENV, API_URL_ENV
from ..storage import MetacanStorage, process_tag, sweep_dead
from ..tables.publish import LINEAGE_SCHEMA, PAGE_MANIFEST_SCHEMA, RECORDS_SCHEMA
from ..teachers.core.registry import load_registry, load_roles
from ..teachers.qualification import load_qualification, qualification_notes
from ..vocab import SAMPLE_TEACHER
from .abstract_cascade import AbstractCascade
from .lineage import build_lineage
from .manifest import (
    newest_render,
    pages_to_render,
    renderer_fingerprint,
    snapshot_manifest,
    withdraw,
    works_gone,
)
from .medline_layer import read_medline_verdicts
from .page_writer import PageWriter, SiteIndex, stream_records, write_index
from .pages import environment, run_context
from .record_build import (
    RecordBuild,
    RecordWorkerDied,
    count_changed,
    keep_previous_hashes,
    record_workers,
    write_records,
)
from .records import SCHEMA_PATH, RecordInputError

WORK_RECORDS = dg.AssetKey("work_records")
WORK_LINEAGE = dg.AssetKey("work_lineage")
_PUBLISHING = {"group_name": "publishing", "code_version": "2", "owners": ["team:metacan"]}


def label_tables() -> list[str]:
    """The ``direct_labels_<teacher>`` table of every registry teacher, in registry order (absent ones included)."""
    return [f"direct_labels_{t}" for t in load_registry()]


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            WORK_RECORDS,
            deps=[
                "predictions",
                "machine_scores",
                "teacher_qualification",
                WORK_LINEAGE,
                "human_codes",
                "validation_report",
                "medline_study_design",
                "work_retractions",
                "cascade_batch",
            ],
            kinds={"python", "json"},
            description="One JSON record per frame work with the field names of seeds/004 (SPEC section 9): routes and "
            "evidence, direct labels, prediction, machine scores, lineage; id, record JSON and its SHA-256/16. Blocked "
            "from shipping by records_may_ship.",
            **_PUBLISHING,
        ),
        dg.AssetSpec(
            WORK_LINEAGE,
            deps=["predictions", "machine_scores"],
            kinds={"python", "parquet"},
            description="One row per frame work: what produced each number its page shows (SPEC section 9): frame "
            "build and run, input part or archived API response, entity lists, lexicon, teacher calls, model version, "
            "machine-score round.",
            **_PUBLISHING,
        ),
    ],
)
def work_records(context: dg.AssetExecutionContext, storage: MetacanStorage):
    """One JSON record per frame work with the field names of seeds/004 (SPEC section 9), and its lineage.

    Fields: bibliographic record, routes and their evidence, retraction, the direct labels of every
    registry teacher (with source and status), the hybrid prediction, the machine scores, and
    ``lineage`` (`lineage`: frame build and its run, input part or archived API response,
    entity-list and lexicon versions, every teacher call with model, prompt version, request hash and
    time, the model version and the run of each stage). Every record validates against
    ``publish/work_record.schema.json`` (the blocking check ``records_may_ship`` enforces it).

    Writes the table ``work_lineage`` (one row per work) and the table ``work_records`` (id, record JSON,
    ``record_hash`` = SHA-256/16 of the JSON text). Nothing reaches ``data/site`` here: ``work_pages``
    publishes a record's file with its page, after the blocking check has passed.
    Raises ``dg.Failure`` naming the id when the frame holds one work twice or an id that is not ``^W\\d+$``
    (`records.RecordBatches`). The records are built by range of ids, one process per core
    (`record_build.write_records`); the record query is `record_inputs.record_inputs`.
    """
    tables = label_tables()
    n_lineage = build_lineage(storage, tables)
    yield dg.MaterializeResult(asset_key=WORK_LINEAGE, metadata=_lineage_metadata(storage, n_lineage))
    notes = qualification_notes(storage, load_registry(), load_qualification())
    rule = layer_rule(storage)  # the newest frozen release and the heads that passed human validation
    present = tuple(t for t in tables if storage.has_table(t))
    build = RecordBuild(
        storage.data_dir,
        present,
        rule.release_frame,
        notes,
        read_passing_heads(storage),
        rule,
        medline=read_medline_verdicts(storage),
    )
    previous = keep_previous_hashes(storage)  # (id, record_hash) of the last materialization, on disk
    try:
        built = write_records(storage, build, record_workers())
        changed = count_changed(storage, previous)
    except (RecordInputError, RecordWorkerDied) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    finally:
        if previous is not None:
            previous.unlink(missing_ok=True)
    n = built["records"]
    context.log.info(
        f"work_records: {n} records ({changed} new or changed since the last materialization), "
        f"{built['ranges']} range(s) of ids in {built['workers']} process(es)"
    )
    yield dg.MaterializeResult(
        asset_key=WORK_RECORDS,
        metadata=table_metadata(
            RECORDS_SCHEMA,
            n,
            built["preview"],
            ["id", "record_hash"],
            records_changed=changed,
            records_unchanged=n - changed,
            human_coded_records=built["human_coded"],
            human_validated_records=built["human_validated"],
            id_ranges=built["ranges"],
            worker_processes=built["workers"],
            lineage_table="work_lineage",
            release_layer=rule.layer(True),
            json_schema=dg.MetadataValue.path(str(SCHEMA_PATH)),
        ),
    )


def _lineage_metadata(storage: MetacanStorage, n: int) -> dict:
    """The metadata of a ``work_lineage`` materialization: row count, schema, the first ten rows."""
    preview = next(storage.iter_batches("work_lineage", batch_size=10), None)
    rows = preview.to_pylist() if preview is not None else []
    return table_metadata(
        LINEAGE_SCHEMA, n, rows, ["id", "frame_build_id", "input_kind", "source_file", "model_version"]
    )


class PagesConfig(dg.Config):
    """Run configuration of ``work_pages`` (Dagster launchpad: ``ops: work_pages: config:``)."""

    fetch_abstracts: bool = Field(
        default=True,
        description=(
            "Fetch abstracts live while rendering, through the abstract cascade (OpenAlex, then Europe PMC, then "
            "Crossref; cached in memory, never stored). False: pages say abstracts were not fetched."
        ),
    )
    abstract_sources: str = Field(
        default="",
        description=(
            f"The abstract sources asked, in order, comma-separated (openalex, europepmc, crossref). Empty: "
            f"${ABSTRACT_SOURCES_ENV} or all three."
        ),
    )
    openalex_api_url: str = Field(
        default="", description=f"OpenAlex API root for abstracts. Empty: ${API_URL_ENV} or {DEFAULT_BASE_URL}."
    )
    retry_failed_abstracts: bool = Field(
        default=False,
        description=(
            "Also re-render pages whose record is unchanged but whose abstract is not shown because the fetch failed "
            "or was off last time (e.g. once the API is reachable again)."
        ),
    )
    rerender_all: bool = Field(
        default=False, description="Render every page, changed or not (e.g. after a template change)."
    )


@dg.asset(kinds={"python", "html"}, deps=[WORK_RECORDS], **_PUBLISHING)
def work_pages(context: dg.AssetExecutionContext, config: PagesConfig, storage: MetacanStorage) -> dg.MaterializeResult:
    """One HTML page per frame work at ``data/site/works/<model_version>/<id>.html``, plus ``data/site/index.html``.

    SPEC section 9, the sections of seeds/000 (Jinja2 with autoescape; no script on work pages).
    Incremental: a page is rendered only when its record's hash differs from the one it was last
    rendered from (table ``page_manifest``), its file is missing, or the config asks for it; a re-run
    with nothing changed writes no page. Abstracts of the works rendered are fetched live from the
    OpenAlex API in batches of 50 ids, held in memory only;
    the page says whether the work has no abstract or the fetch failed just now. Records are streamed;
    pages are written in chunks of about 2,000 and ``page_manifest`` is updated after each, so an
    interrupted run resumes. Which pages to render is decided in DuckDB and the records are streamed with that
    plan, so memory does not grow with the frame.
    The index (search and filters) is rewritten when its content changed; it lists
    at most 50,000 works, the newest, and says so when the frame holds more.
    """
    started = time.perf_counter()
    try:
        renderer = renderer_fingerprint()  # reads METACAN_SITE_URL, METACAN_REPORT_URL and METACAN_DAGSTER_UI_URL
    except ValueError as exc:
        raise dg.Failure(
            description=f"{exc}; no page was rendered: correct it and materialize work_pages again"
        ) from None
    env, run_id = environment(), context.run.run_id
    rendered_at = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)  # UTC, as page_manifest stores it
    page_ctx = run_context(storage, load_roles()[SAMPLE_TEACHER], run_id, rendered_at)
    try:
        fetcher = (
            AbstractCascade(
                config.abstract_sources.split(",") if config.abstract_sources.strip() else None,
                openalex_url=config.openalex_api_url or None,
                logger=context.log,
            )
            if config.fetch_abstracts
            else None
        )
    except ValueError as exc:  # a source or an API root that cannot be one
        raise dg.Failure(
            description=f"{exc}; no page was rendered: correct it and materialize work_pages again"
        ) from None
    writer = PageWriter(storage, env, page_ctx, fetcher, renderer=renderer, run_id=run_id, rendered_at=rendered_at)
    storage.warehouse.mkdir(parents=True, exist_ok=True)
    sweep_dead(storage.warehouse, ".pages-")  # a killed run's manifest snapshot
    with tempfile.TemporaryDirectory(prefix=f".pages-{process_tag()}-", dir=storage.warehouse) as scratch:
        manifest = snapshot_manifest(storage, Path(scratch) / "manifest.parquet")
        plan = pages_to_render(
            storage,
            manifest,
            renderer,
            Path(scratch) / "plan.parquet",
            rerender_all=config.rerender_all,
            retry_abstracts=config.retry_failed_abstracts and config.fetch_abstracts,
        )
        withdrawn = withdraw(storage, works_gone(storage, manifest))
        with fetcher if fetcher is not None else contextlib.nullcontext():  # streamed: one batch, one chunk in memory
            index = stream_records(storage, plan, writer.write)
    index_written = write_index(storage.site_dir, env, index, newest_render(storage))
    seconds = time.perf_counter() - started
    calls = fetcher.calls if fetcher is not None else {}
    index_path = storage.site_dir / "index.html"
    context.log.info(
        f"work_pages: {plan.to_render} of {plan.works} pages rendered ({plan.works - plan.to_render} unchanged) in "
        f"{seconds:.1f}s; abstracts {dict(writer.statuses)} from {dict(writer.sources)} with {calls} call(s) per "
        f"source; index {index_path}"
    )
    return dg.MaterializeResult(
        metadata=_pages_metadata(storage, writer, index, plan.works, plan.to_render, withdrawn, calls)
        | {"renderer": renderer, "seconds": round(seconds, 2), "index_rewritten": index_written}
    )


def _pages_metadata(
    storage: MetacanStorage,
    writer: PageWriter,
    index: SiteIndex,
    n: int,
    rendered: int,
    withdrawn: int,
    calls: dict[str, int],
) -> dict:
    """The metadata of a ``work_pages`` materialization (row count, preview, counts, where to look)."""
    kinds, versions = index.counts()
    index_path = storage.site_dir / "index.html"
    example = storage.site_dir / writer.preview[0]["page_path"] if writer.preview else index_path
    return {
        **table_metadata(PAGE_MANIFEST_SCHEMA, n, writer.preview, ["id", "page_path", "abstract_status", "run_id"]),
        "pages_rendered": rendered,
        "pages_unchanged": n - rendered,
        "pages_withdrawn": withdrawn,
        "index_works": index.listed,
        "pages_dir": dg.MetadataValue.path(str(storage.site_dir / "works")),
        "index": dg.MetadataValue.path(str(index_path)),
        "example_page": dg.MetadataValue.path(str(example)),
        "abstracts_by_status": counts_markdown(dict(writer.statuses), "abstract"),
        "abstracts_by_source": counts_markdown(dict(writer.sources), "source"),
        "openalex_abstract_calls": calls.get("openalex", 0),
        "abstract_calls_by_source": dg.MetadataValue.json(calls),
        "works_by_classification_source": counts_markdown(dict(kinds), "source"),
        "model_versions": counts_markdown(dict(versions), "model_version"),
    }
