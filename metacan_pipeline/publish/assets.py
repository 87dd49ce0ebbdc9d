"""Publishing assets: ``work_records`` (JSON + ``work_lineage``), the blocking check ``records_may_ship``, ``work_pages`` (HTML)."""

import datetime as dt
import hashlib
import json
import re
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
from pydantic import Field
from tqdm import tqdm

from .. import __version__
from ..meta import counts_markdown, table_metadata
from ..openalex.api import DEFAULT_BASE_URL
from ..openalex.ids import is_work_id
from ..settings import API_URL_ENV
from ..storage import MetacanStorage, sql_literal
from ..student.assets import machine_scores, predictions
from ..tables.publish import PAGE_MANIFEST_SCHEMA, RECORDS_SCHEMA
from ..teachers.assets import TEACHERS
from .abstracts import Abstract, AbstractFetcher
from .lineage import build_lineage, lineage_record
from .pages import environment, index_row, page_path, render_index, render_work, write_static
from .records import SCHEMA_PATH, build_record, schema_violation, ship_violations

_HERE = Path(__file__).resolve().parent


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a sibling temporary file and a rename (no half-written page)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` only when it differs from what is there; True when written."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    _write_atomic(path, text)
    return True


def _safe_id(work_id: str) -> str:
    """A work id that may become a file name; ValueError otherwise (ids must match ^W\\d+$)."""
    if not is_work_id(work_id):
        raise ValueError(f"refusing to publish work id {work_id!r}: ids must match ^W\\d+$")
    return work_id


@dg.asset(
    group_name="publishing",
    kinds={"python", "json"},
    code_version="2",
    owners=["team:metacan"],
    deps=[predictions, machine_scores],
)
def work_records(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """One JSON record per frame work with the field names of seeds/004 (SPEC section 9), and its lineage.

    Fields: bibliographic record, routes and their evidence, retraction, the direct labels of every
    registry teacher (with source and status), the hybrid prediction, the machine scores, and
    ``lineage`` (:mod:`.lineage`: frame build and its run, input part or archived API response,
    entity-list and lexicon versions, every teacher call with model, prompt version, request hash and
    time, the model version and the run of each stage). Every record validates against
    ``publish/work_record.schema.json`` (the blocking check ``records_may_ship`` enforces it).

    Writes the table ``work_lineage`` (one row per work) and the table ``work_records`` (id, record JSON,
    ``record_hash`` = SHA-256/16 of the JSON text). Nothing reaches ``data/site`` here: ``work_pages``
    publishes a record's file with its page, after the blocking check has passed.
    Raises ``dg.Failure`` naming the id when the frame holds one work twice or an id that is not ``^W\\d+$``.
    """
    label_tables = [f"direct_labels_{t}" for t in TEACHERS]
    build_lineage(storage, label_tables)
    previous = (
        {r["id"]: r["record_hash"] for r in storage.read_table("work_records", ["id", "record_hash"]).to_pylist()}
        if storage.has_table("work_records")
        else {}
    )
    changed = 0
    preview: list[dict] = []

    def batches():
        nonlocal changed
        last = None
        for rows in _record_inputs(storage, [t for t in label_tables if storage.has_table(t)]):
            out = []
            for row in rows:
                wid = row["work"]["id"]
                if not is_work_id(wid):
                    raise dg.Failure(
                        description=f"the frame holds the work id {wid!r}, which is not ^W\\d+$: no record is "
                        f"written; rebuild the frame (its check frame_ids_unique and the reader refuse such ids)",
                        allow_retries=False,
                    )
                if wid == last:  # rows come ordered by id: a repeat is a duplicate (frame or a table joined to it)
                    raise dg.Failure(
                        description=f"work {wid} appears twice among the records' inputs (frame, predictions, "
                        f"machine_scores or work_lineage): no record is written; re-materialize the frame "
                        f"and the scoring assets so that each holds one row per work",
                        allow_retries=False,
                    )
                last = wid
                record = build_record(
                    row["work"], row["labels"], row["pred"], row["machine"], lineage_record(row["lineage"])
                )
                text = json.dumps(record, ensure_ascii=False, default=str)
                digest = hashlib.sha256(text.encode()).hexdigest()[:16]
                changed += previous.get(wid) != digest
                out.append({"id": wid, "record_json": text, "record_hash": digest})
            preview.extend(out[: 10 - len(preview)])
            yield pa.Table.from_pylist(out, schema=RECORDS_SCHEMA)

    n = storage.write_table("work_records", batches(), schema=RECORDS_SCHEMA)
    context.log.info(f"work_records: {n} records ({changed} new or changed since the last materialization)")
    return dg.MaterializeResult(
        metadata=table_metadata(
            RECORDS_SCHEMA,
            n,
            preview,
            ["id", "record_hash"],
            records_changed=changed,
            records_unchanged=n - changed,
            lineage_table="work_lineage",
            json_schema=dg.MetadataValue.path(str(SCHEMA_PATH)),
        )
    )


def _record_inputs(storage: MetacanStorage, label_tables: list[str], batch_rows: int = 5000):
    """Everything one record is built from, one dict per frame work in id order, in lists of ``batch_rows``:
    ``{"work": frame row, "labels": [direct label rows], "pred": prediction row or None, "machine": machine
    score row or None, "lineage": work_lineage row}``. One DuckDB query over the Parquet tables (its own
    in-memory connection, so no catalog lock is held), streamed: memory stays at one batch."""

    def table(name: str) -> str:
        return f"read_parquet({sql_literal(str(storage.table_dir(name) / '*.parquet'))}, hive_partitioning=false)"

    labels = " UNION ALL BY NAME ".join(f"SELECT * FROM {table(t)}" for t in label_tables)
    label_cte = (
        f"labels AS (SELECT work_id, list(l ORDER BY l.teacher) AS labels FROM ({labels}) l GROUP BY work_id)"
        if labels
        else "labels AS (SELECT NULL::VARCHAR AS work_id, [] AS labels WHERE false)"
    )
    con = duckdb.connect(config={"memory_limit": "2GB", "temp_directory": str(storage.warehouse / ".spill-records")})
    try:
        reader = con.execute(f"""
            WITH {label_cte}
            SELECT f AS work, coalesce(lb.labels, []) AS labels,
                   CASE WHEN p.id IS NULL THEN NULL ELSE p END AS pred,
                   CASE WHEN m.id IS NULL THEN NULL ELSE m END AS machine, g AS lineage
            FROM {table("frame")} f
            LEFT JOIN {table("predictions")} p ON p.id = f.id
            LEFT JOIN {table("machine_scores")} m ON m.id = f.id
            LEFT JOIN {table("work_lineage")} g ON g.id = f.id
            LEFT JOIN labels lb ON lb.work_id = f.id
            ORDER BY f.id""").to_arrow_reader(batch_rows)
        for batch in reader:
            yield batch.to_pylist()
    finally:
        con.close()


@dg.asset_check(
    asset=work_records,
    blocking=True,
    description="SPEC sections 8 and 9: every record matches the JSON Schema; no score_only row carries a category; "
    "every category carries source and status.",
)
def records_may_ship(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails (and, being blocking, stops ``work_pages``) when any record breaks SPEC section 8 or the schema.

    Each record is validated against ``publish/work_record.schema.json`` (JSON Schema draft-07, compiled by
    fastjsonschema; the first error per record is reported) and
    :func:`.records.ship_violations`. Metadata: the number of violating records and up to 20
    violations, each naming the work id and the field.
    """
    violations: list[str] = []
    bad = checked = 0
    for batch in storage.iter_batches("work_records", columns=["record_json"]):
        for text in batch.column("record_json").to_pylist():
            record = json.loads(text)
            v = ship_violations(record) + [e for e in [schema_violation(record)] if e]
            checked += 1
            bad += bool(v)
            violations.extend(v)
    return dg.AssetCheckResult(
        passed=bad == 0,
        metadata={
            "records_checked": checked,
            "violating_records": bad,
            "violations": dg.MetadataValue.json(violations[:20]),
        },
    )


class PagesConfig(dg.Config):
    """Run configuration of ``work_pages`` (Dagster launchpad: ``ops: work_pages: config:``)."""

    fetch_abstracts: bool = Field(
        default=True,
        description=(
            "Fetch abstracts live from the OpenAlex API while rendering (batched, cached in memory, never stored). "
            "False: pages say abstracts were not fetched."
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


#: One row per work page: the record hash it was rendered from (incremental rendering), where it is, what
#: happened to its abstract (ok | none | missing | failed | off), when and by which run.
_CHUNK = 2000


def renderer_fingerprint() -> str:
    """SHA-256 (16 hex) of what turns a record into a page: the templates, the static files, the package
    version. Stored with each page, so a changed template re-renders every page without being asked."""
    digest = hashlib.sha256(__version__.encode())
    for folder in (_HERE / "templates", _HERE / "static"):
        for path in sorted(folder.iterdir()):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _page_path_ok(wid: str, page: str | None) -> bool:
    """True when a stored page path is what :func:`.pages.page_path` makes: ``works/<version>/<id>.html``."""
    return bool(page) and re.fullmatch(rf"works/[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}/{wid}\.html", page) is not None


def _published(storage: MetacanStorage, wid: str, page: str | None) -> bool:
    """True when the work's record file and the page the manifest names both exist; a manifest path
    that :func:`_page_path_ok` refuses counts as missing (the page is rendered again)."""
    return (
        _page_path_ok(wid, page)
        and (storage.site_dir / page).exists()
        and (storage.site_dir / "records" / f"{wid}.json").exists()
    )


def _withdraw(storage: MetacanStorage, gone: dict[str, str | None]) -> int:
    """Remove the record file and current page of works that left the frame, and their manifest rows.
    Pages of earlier model versions stay where they are: their permalinks were published."""
    if not gone:
        return 0
    for wid, page in gone.items():
        if is_work_id(wid):
            (storage.site_dir / "records" / f"{wid}.json").unlink(missing_ok=True)
            if _page_path_ok(wid, page):
                (storage.site_dir / page).unlink(missing_ok=True)
    with storage.connect() as con:
        con.register("gone", pa.table({"id": list(gone)}))
        con.execute("DELETE FROM page_manifest WHERE id IN (SELECT id FROM gone)")
    return len(gone)


def _page_context(storage: MetacanStorage) -> dict:
    heads = storage.read_table("student_heads").to_pylist() if storage.has_table("student_heads") else []
    codex_heads = [h for h in heads if h["teacher"] == "codex"]
    return {
        "n_codex_labels": max((h["n_train"] for h in codex_heads), default=0),
        "gated_heads": sum(1 for h in codex_heads if h["gate_passed"]),
        "total_heads": len(codex_heads),
        "constant_heads": {(h["teacher"], h["target"]) for h in heads if h["status"].startswith("constant")},
    }


@dg.asset(
    group_name="publishing", kinds={"python", "html"}, code_version="2", owners=["team:metacan"], deps=[work_records]
)
def work_pages(context: dg.AssetExecutionContext, config: PagesConfig, storage: MetacanStorage) -> dg.MaterializeResult:
    """One HTML page per frame work at ``data/site/works/<model_version>/<id>.html``, plus ``data/site/index.html``.

    SPEC section 9, the sections of seeds/000 (Jinja2 with autoescape; no script on work pages).
    Incremental: a page is rendered only when its record's hash differs from the one it was last
    rendered from (table ``page_manifest``), its file is missing, or the config asks for it; a re-run
    with nothing changed writes no page. Abstracts of the works rendered are fetched live from the
    OpenAlex API in batches of 50 ids (:class:`.abstracts.AbstractFetcher`), held in memory only;
    the page says whether the work has no abstract or the fetch failed just now. Records are streamed;
    pages are written in chunks of about 2,000 and ``page_manifest`` is updated after each, so an
    interrupted run resumes.
    The index (search and filters, :func:`.pages.render_index`) is rewritten when its content changed.
    """
    started = time.perf_counter()
    hashes: dict[str, str] = {}
    for b in storage.iter_batches("work_records", columns=["id", "record_hash"]):
        hashes.update(zip(b.column("id").to_pylist(), b.column("record_hash").to_pylist(), strict=False))
    renderer = renderer_fingerprint()
    with storage.connect() as con:
        manifest = {
            r[0]: r[1:]
            for r in con.execute(
                "SELECT id, record_hash, renderer, page_path, abstract_status FROM page_manifest"
            ).fetchall()
        }
    todo = set()
    for wid, digest in hashes.items():
        last = manifest.get(_safe_id(wid))
        if (
            config.rerender_all
            or last is None
            or last[0] != digest
            or last[1] != renderer
            or not _published(storage, wid, last[2])
            or (config.retry_failed_abstracts and config.fetch_abstracts and last[3] in ("failed", "off"))
        ):
            todo.add(wid)
    withdrawn = _withdraw(storage, {wid: last[2] for wid, last in manifest.items() if wid not in hashes})
    env = environment()
    preview: list[dict] = []  # the first pages rendered by this run, for the UI
    rendered_at = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)  # UTC, as page_manifest stores it
    page_ctx = {
        **_page_context(storage),
        "page_run_id": context.run.run_id,
        "rendered_at": f"{rendered_at:%Y-%m-%d %H:%M} UTC",
    }
    statuses: Counter[str] = Counter()
    fetcher = AbstractFetcher(config.openalex_api_url or None) if config.fetch_abstracts else None

    def render(chunk: list[tuple[str, dict, str]]) -> None:
        """Fetch the chunk's abstracts (batches of 50), write its records and pages, then note them in page_manifest."""
        abstracts = fetcher.fetch([wid for wid, rec, _ in chunk if rec["has_abstract"]]) if fetcher is not None else {}
        rows = []
        for wid, rec, text in chunk:
            abstract = abstracts.get(wid) if fetcher is not None else None
            if fetcher is not None and abstract is None:  # the frame saw no abstract: no call for it
                abstract = Abstract(wid, "none", None, None, None)
            path = page_path(rec)
            _write_atomic(storage.site_dir / "records" / f"{wid}.json", text)
            _write_atomic(storage.site_dir / path, render_work(env, rec, abstract, page_ctx))
            status = abstract.status if abstract is not None else "off"
            statuses[status] += 1
            rows.append((wid, hashes[wid], renderer, path, status, rendered_at, context.run.run_id))
            if len(preview) < 10:
                preview.append(dict(zip(PAGE_MANIFEST_SCHEMA.names, rows[-1], strict=False)))
        rendered = pa.Table.from_pylist(
            [dict(zip(PAGE_MANIFEST_SCHEMA.names, r, strict=False)) for r in rows], schema=PAGE_MANIFEST_SCHEMA
        )
        with storage.connect() as con:  # one set-based upsert (executemany would cost a statement per page)
            con.register("rendered", rendered)
            con.execute(
                f"INSERT OR REPLACE INTO page_manifest ({', '.join(PAGE_MANIFEST_SCHEMA.names)}) "
                f"SELECT {', '.join(PAGE_MANIFEST_SCHEMA.names)} FROM rendered"
            )
        bar.update(len(chunk))

    index_rows = []
    pending: list[tuple[str, dict, str]] = []
    try:  # records are streamed: memory holds one Parquet batch, one chunk of pages and the index rows
        with tqdm(total=len(todo), desc="work pages", unit="page", mininterval=5, disable=not todo) as bar:
            for b in storage.iter_batches("work_records", batch_size=_CHUNK, columns=["id", "record_json"]):
                for wid, text in zip(b.column("id").to_pylist(), b.column("record_json").to_pylist(), strict=False):
                    rec = json.loads(text)
                    index_rows.append(index_row(rec))
                    if wid in todo:
                        pending.append((wid, rec, text))
                if len(pending) >= _CHUNK:
                    render(pending)
                    pending = []
            if pending:
                render(pending)
    finally:
        if fetcher is not None:
            fetcher.close()
    index_rows.sort(key=lambda r: (-(r["year"] or 0), r["id"]))
    versions = Counter(r["model_version"] for r in index_rows if r.get("model_version"))
    index_path = storage.site_dir / "index.html"
    with storage.connect(
        read_only=True
    ) as con:  # the index says when its newest page was rendered: unchanged pages, unchanged index
        newest = con.execute("SELECT max(rendered_at) FROM page_manifest").fetchone()[0]
    index_written = _write_if_changed(
        index_path, render_index(env, index_rows, built_at=f"{newest:%Y-%m-%d %H:%M} UTC" if newest else None)
    )
    write_static(storage.site_dir)
    seconds = time.perf_counter() - started
    kinds = Counter(f"{r['source']}" + (f" ({r['mode']})" if r.get("mode") else "") for r in index_rows)
    example = storage.site_dir / preview[0]["page_path"] if preview else index_path
    calls = fetcher.calls if fetcher is not None else 0
    context.log.info(
        f"work_pages: {len(todo)} of {len(hashes)} pages rendered ({len(hashes) - len(todo)} unchanged) in {seconds:.1f}s; "
        f"abstracts {dict(statuses)} with {calls} OpenAlex call(s); index {index_path}"
    )
    return dg.MaterializeResult(
        metadata={
            **table_metadata(
                PAGE_MANIFEST_SCHEMA, len(hashes), preview, ["id", "page_path", "abstract_status", "run_id"]
            ),
            "pages_rendered": len(todo),
            "pages_unchanged": len(hashes) - len(todo),
            "pages_withdrawn": withdrawn,
            "renderer": renderer,
            "seconds": round(seconds, 2),
            "pages_dir": dg.MetadataValue.path(str(storage.site_dir / "works")),
            "index": dg.MetadataValue.path(str(index_path)),
            "index_rewritten": index_written,
            "example_page": dg.MetadataValue.path(str(example)),
            "abstracts_by_status": counts_markdown(dict(statuses), "abstract"),
            "openalex_abstract_calls": calls,
            "works_by_classification_source": counts_markdown(dict(kinds), "source"),
            "model_versions": counts_markdown(dict(versions), "model_version"),
        }
    )
