"""The direct-label assets ``direct_labels_gemma`` and ``direct_labels_codex`` (SPEC section 4)."""


import datetime as dt
import time
import uuid
from collections import Counter

import dagster as dg
import pyarrow as pa
from tqdm import tqdm

from ..frame.assets import frame
from ..meta import counts_markdown, table_metadata
from ..openalex.lookup import load_abstracts
from ..resources import OpenAlexFiles
from ..sampling.assets import sample_design
from ..storage import MetacanStorage
from ..vocab import CATEGORIES, INSUFFICIENT_PAYLOAD
from .server import EmbeddedLlamaServer
from .settings import TeacherSettings
from .store import LabelKey, append_outcome, current_labels_sql, ensure_tables, existing_keys
from .views import record_view, view_hash

LABELS_SCHEMA = pa.schema(
    [
        ("work_id", pa.string()), ("teacher", pa.string()), ("model", pa.string()), ("prompt_version", pa.string()),
        ("record_view", pa.string()), ("view_hash", pa.string()), ("status", pa.string()),
        ("categories", pa.list_(pa.string())), ("domain", pa.string()), ("study_design", pa.string()), ("genre", pa.string()),
        ("about_ca_system", pa.bool_()), ("about_ca_topic", pa.bool_()), ("confidence", pa.string()), ("reason", pa.string()),
        ("error", pa.string()), ("attempts", pa.int32()), ("call_id", pa.string()), ("label_id", pa.string()),
        ("run_id", pa.string()), ("source", pa.string()), ("created_at", pa.timestamp("us")),
    ]
)

_FRAME_RULE_REASON = "Not sent to a teacher: outside the sampling frame ({why}); SPEC section 2 gives such works insufficient_payload only."


def _frame_rule_label(con, key: LabelKey, record_view_name: str, why: str, run_id: str) -> None:
    """Record the SPEC section 2 rule outcome for a work outside the sampling frame (no model call)."""
    ensure_tables(con)
    con.execute(
        "INSERT INTO teacher_labels (label_id, work_id, teacher, model, prompt_version, record_view, view_hash, status, categories,"
        " reason, attempts, run_id, source, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [uuid.uuid4().hex, key.work_id, key.teacher, key.model, key.prompt_version, record_view_name, key.view_hash, "labelled",
         [INSUFFICIENT_PAYLOAD], _FRAME_RULE_REASON.format(why=why), 0, run_id, "frame_rule",
         dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)],
    )


def label_works(context: dg.AssetExecutionContext, storage: MetacanStorage, openalex: OpenAlexFiles,
                teacher: TeacherSettings, server: EmbeddedLlamaServer, works: list[dict]) -> dg.MaterializeResult:
    """Label ``works`` (frame rows) with ``teacher``, reusing stored labels; write its label table.

    Each outcome is committed as soon as it exists, so a killed run resumes where it stopped. Output:
    ``warehouse/direct_labels_<teacher>``: one row per work with the stored outcome for the current
    (model, prompt version, view) (schema :data:`LABELS_SCHEMA`).
    """
    run_id = context.run.run_id
    abstracts: dict[str, str | None] = {}
    if teacher.record_view == "title_abstract":
        abstracts = load_abstracts(openalex.path_of, [(w["id"], w["source_file"], w["source_locator"]) for w in works if w["has_abstract"]])
    views = {w["id"]: record_view(w, teacher.record_view, abstracts.get(w["id"])) for w in works}
    hashes = {wid: view_hash(v) for wid, v in views.items()}
    with storage.connect() as con:
        done = existing_keys(con, teacher.name, teacher.model, teacher.prompt_version)
        todo = [w for w in works if (w["id"], hashes[w["id"]]) not in done]
        rule_works = [w for w in todo if not w["in_sampling_frame"]]
        for w in rule_works:
            _frame_rule_label(con, LabelKey(w["id"], teacher.name, teacher.model, teacher.prompt_version, hashes[w["id"]]),
                              teacher.record_view, w["sampling_frame_exclusion"], run_id)
    to_call = [w for w in todo if w["in_sampling_frame"]]
    reused = len(works) - len(todo)
    context.log.info(
        f"teacher {teacher.name}: {len(works)} works, {reused} reused from the label store, {len(rule_works)} outside the "
        f"sampling frame (rule label), {len(to_call)} to send to {teacher.base_url or 'the embedded server'}"
    )
    calls = 0
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    tokens = 0
    if to_call:
        client = teacher.client(server, context.log)
        t_start = time.monotonic()
        try:
            for i, w in enumerate(tqdm(to_call, desc=f"teacher {teacher.name}", unit="work", disable=None), start=1):
                t0 = time.monotonic()
                outcome = client.label(views[w["id"]])
                latencies.append(time.monotonic() - t0)
                calls += len(outcome.calls)
                tokens += sum((c.prompt_tokens or 0) + (c.completion_tokens or 0) for c in outcome.calls)
                outcomes[outcome.status] += 1
                if outcome.error:
                    context.log.warning(f"teacher {teacher.name}: {w['id']} failed: {outcome.error}")
                key = LabelKey(w["id"], teacher.name, teacher.model, teacher.prompt_version, hashes[w["id"]])
                with storage.connect() as con:
                    append_outcome(con, key, teacher.record_view, outcome, run_id)
                if i % 10 == 0 or i == len(to_call):
                    elapsed = time.monotonic() - t_start
                    eta = elapsed / i * (len(to_call) - i)
                    context.log.info(f"teacher {teacher.name}: {i}/{len(to_call)} works, {calls} calls, {tokens} tokens, "
                                     f"{elapsed:.0f}s elapsed, ETA {eta:.0f}s")
        finally:
            client.close()
    table = _export_labels(storage, teacher, [(w["id"], hashes[w["id"]]) for w in works])
    rows = table.to_pylist()
    status = Counter(r["status"] for r in rows)
    cats = Counter(c for r in rows for c in (r["categories"] or []))
    cats["(none: not meta-research)"] = sum(1 for r in rows if r["status"] == "labelled" and not r["categories"])
    mean_s = sum(latencies) / len(latencies) if latencies else None
    context.log.info(f"teacher {teacher.name}: {calls} teacher calls this run; status {dict(status)}"
                     + (f"; {mean_s:.2f} s per work" if mean_s else ""))
    return dg.MaterializeResult(
        metadata=table_metadata(
            LABELS_SCHEMA, table.num_rows, rows, ["work_id", "status", "categories", "genre", "confidence", "error"],
            teacher=teacher.name, model=teacher.model, prompt_version=teacher.prompt_version, record_view=teacher.record_view,
            endpoint=teacher.base_url or "embedded llama.cpp server",
            teacher_calls_this_run=calls, works_sent_this_run=len(to_call), reused_from_store=reused,
            rule_labels_this_run=len(rule_works), tokens_this_run=tokens,
            seconds_per_work_this_run=dg.MetadataValue.float(round(mean_s, 3)) if mean_s else dg.MetadataValue.null(),
            labels_by_status=counts_markdown(dict(status), "status"),
            labels_by_category=counts_markdown({c: cats[c] for c in (*CATEGORIES, "(none: not meta-research)") if cats[c]}, "category"),
        )
    )


def _export_labels(storage: MetacanStorage, teacher: TeacherSettings, keys: list[tuple[str, str]]) -> pa.Table:
    with storage.connect() as con:
        ensure_tables(con)
        con.execute("CREATE TEMP TABLE wanted(work_id VARCHAR, view_hash VARCHAR)")
        if keys:
            con.executemany("INSERT INTO wanted VALUES (?, ?)", [list(k) for k in keys])
        table = con.execute(
            f"SELECT l.* FROM ({current_labels_sql()}) l JOIN wanted USING (work_id, view_hash) ORDER BY work_id",
            [teacher.name, teacher.model, teacher.prompt_version],
        ).to_arrow_table()
    cols = [f.name for f in LABELS_SCHEMA]
    table = table.select(cols).cast(LABELS_SCHEMA)
    storage.write_table(f"direct_labels_{teacher.name}", table, schema=LABELS_SCHEMA)
    return table


_TEACHER_RETRY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


@dg.asset(group_name="labeling", kinds={"python", "duckdb"}, code_version="1", owners=["team:metacan"], deps=[frame],
          retry_policy=_TEACHER_RETRY)
def direct_labels_gemma(context: dg.AssetExecutionContext, storage: MetacanStorage, openalex: OpenAlexFiles,
                        teacher_gemma: TeacherSettings, llm_server: EmbeddedLlamaServer) -> dg.MaterializeResult:
    """Direct labels from the cheap teacher ``gemma`` on every frame work, title-only view (SPEC section 4).

    Works outside the sampling frame get ``insufficient_payload`` by rule without a call. Labels are
    stored append-only in DuckDB (``teacher_labels``, ``teacher_calls``) and reused: a second run makes
    zero teacher calls for unchanged works. A failed label is recorded as ``failed`` with its cause
    (unknown, never a negative). Output table: ``warehouse/direct_labels_gemma``.
    """
    works = storage.read_table("frame").to_pylist()
    return label_works(context, storage, openalex, teacher_gemma, llm_server, works)


@dg.asset(group_name="labeling", kinds={"python", "duckdb"}, code_version="1", owners=["team:metacan"], deps=[frame, sample_design],
          retry_policy=_TEACHER_RETRY)
def direct_labels_codex(context: dg.AssetExecutionContext, storage: MetacanStorage, openalex: OpenAlexFiles,
                        teacher_codex: TeacherSettings, llm_server: EmbeddedLlamaServer) -> dg.MaterializeResult:
    """Direct labels from the strong teacher ``codex`` on the design-weighted sample, title+abstract view.

    Covers the works with ``in_sample`` in ``sample_design`` (SPEC section 5); the abstract is
    re-read from the input record and never stored. By default it points at the same embedded model
    as ``gemma``: the point is that two teachers with different coverage and views share one code
    path. Output table: ``warehouse/direct_labels_codex``.
    """
    sampled = {r["id"] for r in storage.read_table("sample_design", ["id", "in_sample"]).to_pylist() if r["in_sample"]}
    works = [w for w in storage.read_table("frame").to_pylist() if w["id"] in sampled]
    return label_works(context, storage, openalex, teacher_codex, llm_server, works)


@dg.asset_check(asset=direct_labels_gemma, blocking=True, description="Every frame work has a gemma label or an explicit failure row.")
def gemma_covers_frame(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when a frame work has no row in ``direct_labels_gemma`` (SPEC section 4 coverage: all)."""
    with storage.connect() as con:
        missing = con.execute(
            "SELECT id FROM frame WHERE id NOT IN (SELECT work_id FROM direct_labels_gemma) ORDER BY id LIMIT 20").fetchall()
        failed = con.execute("SELECT count(*) FROM direct_labels_gemma WHERE status = 'failed'").fetchone()[0]
    return dg.AssetCheckResult(passed=not missing, metadata={"works_without_label_or_failure": dg.MetadataValue.json([m[0] for m in missing]),
                                                           "failed_labels": failed})
