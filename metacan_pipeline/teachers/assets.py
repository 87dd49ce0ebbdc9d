"""The direct-label assets, one per teacher of the registry (SPEC section 4).

:func:`direct_labels_asset` turns a :class:`~.registry.TeacherSpec` into the asset
``direct_labels_<name>``; :func:`label_works` is the labelling itself, usable without Dagster (the
benchmark calls it): reuse what the label store holds, give works outside the sampling frame their rule
label, send the rest in batches of ``works_per_call`` with ``concurrency`` calls in flight, archive
and store every call and outcome as it happens, and export the teacher's current labels.
"""

import asyncio
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg
import httpx
import pyarrow as pa
from filelock import FileLock, Timeout
from tqdm import tqdm

from ..frame.assets import frame
from ..meta import counts_markdown, table_metadata
from ..openalex.lookup import load_abstracts
from ..resources import OpenAlexFiles
from ..sampling.assets import sample_design
from ..storage import MetacanStorage
from ..tables.teachers import LABELS_SCHEMA
from ..vocab import CATEGORIES, INSUFFICIENT_PAYLOAD
from .archive import LabelWriter, recover
from .client import CallRecord, EndpointConfigurationError, EndpointUnavailableError, LabelOutcome, TeacherClient
from .registry import TeacherRunConfig, TeacherSpec, load_registry
from .rubric import Prompt, load_prompt
from .server import EmbeddedLlamaServer
from .store import NOT_FINAL, append_rows, current_labels_sql, existing_keys, now_utc
from .views import record_view, view_hash

_FRAME_RULE_REASON = "Not sent to a teacher: outside the sampling frame ({why}); SPEC section 2 gives such works insufficient_payload only."


@dataclass
class LabelRunStats:
    """What one labelling run did (shown as asset metadata and in the CLI summary)."""

    works: int = 0
    reused: int = 0
    rule_labels: int = 0
    deferred: int = 0
    sent: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)
    structured_output: str | None = None
    recovered: dict = field(default_factory=dict)
    view_hashes: dict[str, str] = field(default_factory=dict)


class _Progress:
    """A tqdm bar (shown on a terminal) plus a log line every ``every_s`` seconds: works done of total,
    calls, tokens, running cost and ETA."""

    def __init__(self, teacher: str, total: int, stats: LabelRunStats, log, every_s: float = 15.0) -> None:
        self.teacher, self.total, self.stats, self.log, self.every_s = teacher, total, stats, log, every_s
        self.bar = tqdm(total=total, desc=f"teacher {teacher}", unit="work", disable=None)
        self.t0 = self.last = time.monotonic()
        self.done = 0

    def line(self) -> str:
        s, elapsed = self.stats, time.monotonic() - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        return (
            f"teacher {self.teacher}: {self.done}/{self.total} works, {s.calls} calls, "
            f"{s.prompt_tokens + s.completion_tokens} tokens, ${s.cost_usd:.4f}, {elapsed:.0f}s elapsed, ETA {eta:.0f}s"
        )

    def update(self, works: int) -> None:
        self.done += works
        self.bar.update(works)
        self.bar.set_postfix(
            calls=self.stats.calls,
            tokens=self.stats.prompt_tokens + self.stats.completion_tokens,
            cost=f"${self.stats.cost_usd:.4f}",
            refresh=False,
        )
        now = time.monotonic()
        if now - self.last >= self.every_s or self.done == self.total:
            self.last = now
            self.log.info(self.line())

    def close(self) -> None:
        self.bar.close()


def select_works(storage: MetacanStorage, spec: TeacherSpec) -> list[dict]:
    """The frame rows a teacher covers: ``all`` (every frame work), ``sample`` (``in_sample`` in
    ``sample_design``, SPEC section 5), ``batch:<name>`` (the ids of that batch in ``label_batches``;
    ids not in the frame are ignored), ``sample+batch:<name>`` (both: the sample teacher labelling the
    batches that ``machine_scores`` rounds propose). Raises FileNotFoundError naming the asset to
    materialize first, and ValueError for a ``batch:<name>`` coverage whose batch has no works."""
    works = storage.read_table("frame").to_pylist()
    if spec.coverage == "all":
        return works
    wanted: set[str] = set()
    if spec.covers_sample:
        wanted |= {
            r["id"] for r in storage.read_table("sample_design", ["id", "in_sample"]).to_pylist() if r["in_sample"]
        }
    if spec.batch is not None:
        with storage.connect() as con:
            batch = {
                r[0] for r in con.execute("SELECT work_id FROM label_batches WHERE batch = ?", [spec.batch]).fetchall()
            }
        if not batch and not spec.covers_sample:
            raise ValueError(
                f"teacher {spec.name}: coverage {spec.coverage!r} names a batch with no works in the DuckDB table "
                f"label_batches; load it first (INSERT INTO label_batches (batch, work_id, added_at, source) ...), "
                f"or let machine_scores propose batch 'active_learning'"
            )
        wanted |= batch
    return [w for w in works if w["id"] in wanted]


def _label_row(
    spec: TeacherSpec,
    prompt: Prompt,
    work_id: str,
    vhash: str,
    run_id: str,
    *,
    status: str,
    label=None,
    error: str | None = None,
    call_id: str | None = None,
    attempts: int = 0,
    source: str = "teacher_call",
    categories: list[str] | None = None,
    reason: str | None = None,
) -> dict:
    row = {
        "label_id": uuid.uuid4().hex,
        "work_id": work_id,
        "teacher": spec.name,
        "model": spec.model,
        "prompt_version": prompt.version,
        "prompt_sha": prompt.sha,
        "record_view": spec.record_view,
        "view_hash": vhash,
        "status": status,
        "categories": categories,
        "reason": reason,
        "error": error,
        "attempts": attempts,
        "call_id": call_id,
        "run_id": run_id,
        "source": source,
        "created_at": now_utc(),
    }
    if label is not None:
        row.update(label.as_dict())
        row.pop("id", None)
    return row


#: Batches in a row whose every work failed for a reason that is not about the work (:data:`~.store.NOT_FINAL`)
#: after which a run stops taking new batches: an endpoint that is down or misconfigured costs a few calls.
MAX_FAILED_BATCHES_IN_A_ROW = 8


async def _send(
    client: TeacherClient, batches: list[list[dict]], concurrency: int, progress: _Progress
) -> BaseException | None:
    """Send ``batches`` with ``concurrency`` workers. Returns the error that stopped the run early, or None.

    A stop (a configuration error such as HTTP 401, or :data:`MAX_FAILED_BATCHES_IN_A_ROW` batches lost
    to the endpoint) ends the taking of new batches; calls in flight finish and are stored first, so no
    reply already paid for is lost. Works never sent have no outcome: the next run asks for them.
    """
    queue = deque(batches)
    stop: list[BaseException] = []
    streak = 0

    async def worker() -> None:
        nonlocal streak
        while queue and not stop:
            batch = queue.popleft()
            try:
                outcomes = await client.label(batch)
            except EndpointConfigurationError as exc:
                stop.append(exc)
                return
            progress.update(len(batch))
            if all(o.error is not None and o.error.startswith(NOT_FINAL) for o in outcomes):
                streak += 1
                if streak >= MAX_FAILED_BATCHES_IN_A_ROW and queue and not stop:
                    stop.append(
                        EndpointUnavailableError(
                            f"{streak} batches in a row failed at the endpoint ({outcomes[0].error[:300]}); stopped with "
                            f"{len(queue)} batches not sent: they are asked for by the next run"
                        )
                    )
            else:
                streak = 0

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(batches)) or 1)))
    finally:
        await client.aclose()
    return stop[0] if stop else None


def label_works(
    storage: MetacanStorage,
    spec: TeacherSpec,
    works: list[dict],
    *,
    run_id: str,
    log,
    base_url: Callable[[], str],
    abstracts: Callable[[list[dict]], dict[str, str | None]] | None = None,
    max_works: int = 0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> LabelRunStats:
    """Label ``works`` (frame rows) with ``spec``; returns what was done.

    ``base_url`` is called only when some work must be sent (so a fully cached run never starts the
    embedded server); ``abstracts`` loads ``{id: abstract}`` for the ``title_abstract`` view;
    ``max_works`` > 0 sends at most that many works (the rest wait for the next run). Every call and
    outcome is archived and stored as it happens (:class:`~.archive.LabelWriter`), so a run killed at
    any point repeats no finished call when resumed. Raises
    :class:`~.client.EndpointConfigurationError` (the endpoint refuses the model or key) or
    :class:`~.client.EndpointUnavailableError` (batch after batch failed at the endpoint), in both cases
    after every call made is stored; ValueError for a negative ``max_works``.

    One run per teacher at a time on a data folder (a file lock): a second run waits for the first and
    then finds its labels stored, so no work is bought twice.
    """
    if max_works < 0:
        raise ValueError(f"max_works={max_works}: expected 0 (no limit) or a positive number of works")
    storage.root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(storage.root / f".teacher-{spec.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info(
            f"teacher {spec.name}: another run is labelling with this teacher on {storage.root}; waiting for it to finish"
        )
        lock.acquire()
    try:
        return _label_works_locked(
            storage,
            spec,
            works,
            run_id=run_id,
            log=log,
            base_url=base_url,
            abstracts=abstracts,
            max_works=max_works,
            transport=transport,
        )
    finally:
        lock.release()


def _label_works_locked(
    storage: MetacanStorage,
    spec: TeacherSpec,
    works: list[dict],
    *,
    run_id: str,
    log,
    base_url: Callable[[], str],
    abstracts: Callable[[list[dict]], dict[str, str | None]] | None,
    max_works: int,
    transport: httpx.AsyncBaseTransport | None,
) -> LabelRunStats:
    stats = LabelRunStats(works=len(works))
    stats.recovered = recover(storage, log)
    prompt = load_prompt(spec.prompt_version)
    texts = abstracts(works) if spec.record_view == "title_abstract" and abstracts else {}
    views = {w["id"]: record_view(w, spec.record_view, texts.get(w["id"])) for w in works}
    hashes = stats.view_hashes = {wid: view_hash(v) for wid, v in views.items()}
    with storage.connect() as con:
        done = existing_keys(con, spec.name, spec.model, prompt.version, prompt.sha)
    todo = [w for w in works if (w["id"], hashes[w["id"]]) not in done]
    rule = [w for w in todo if not w["in_sampling_frame"]]
    if rule:
        with storage.connect() as con:
            append_rows(
                con,
                [],
                [
                    _label_row(
                        spec,
                        prompt,
                        w["id"],
                        hashes[w["id"]],
                        run_id,
                        status="labelled",
                        source="frame_rule",
                        categories=[INSUFFICIENT_PAYLOAD],
                        reason=_FRAME_RULE_REASON.format(why=w["sampling_frame_exclusion"]),
                    )
                    for w in rule
                ],
            )
    to_call = [w for w in todo if w["in_sampling_frame"]]
    stats.reused, stats.rule_labels = len(works) - len(todo), len(rule)
    if max_works and len(to_call) > max_works:
        stats.deferred = len(to_call) - max_works
        to_call = to_call[:max_works]
    log.info(
        f"teacher {spec.name}: {len(works)} works, {stats.reused} reused from the label store, {len(rule)} outside the sampling "
        f"frame (rule label), {len(to_call)} to send in calls of {spec.works_per_call} to {spec.base_url or 'the embedded server'}"
        + (f", {stats.deferred} deferred by max_works" if stats.deferred else "")
    )
    stopped: BaseException | None = None
    if to_call:
        api_key = spec.api_key()
        t0 = time.monotonic()
        with LabelWriter(storage, spec.name, run_id) as writer:

            def on_call(rec: CallRecord) -> None:
                cost = spec.cost_usd(rec.prompt_tokens, rec.completion_tokens)
                stats.calls += 1
                stats.prompt_tokens += rec.prompt_tokens or 0
                stats.completion_tokens += rec.completion_tokens or 0
                stats.cost_usd += cost
                writer.add_call(
                    {
                        "call_id": rec.call_id,
                        "run_id": run_id,
                        "teacher": spec.name,
                        "model": spec.model,
                        "prompt_version": prompt.version,
                        "prompt_sha": prompt.sha,
                        "record_view": spec.record_view,
                        "work_ids": rec.work_ids,
                        "n_works": len(rec.work_ids),
                        "request_hash": rec.request_hash,
                        "http_status": rec.http_status,
                        "error": rec.error,
                        "latency_s": rec.latency_s,
                        "prompt_tokens": rec.prompt_tokens,
                        "completion_tokens": rec.completion_tokens,
                        "cost_usd": cost,
                        "logprob_mean": rec.logprob_mean,
                        "created_at": rec.started_at,
                    },
                    rec.request,
                    rec.response_text,
                )

            def on_outcomes(outs: list[LabelOutcome]) -> None:
                for out in outs:
                    stats.outcomes[out.status] += 1
                    if out.error:
                        stats.failures[out.error.split(":")[0][:80]] += 1
                        log.warning(f"teacher {spec.name}: {out.work_id} failed: {out.error[:300]}")
                writer.add_labels(
                    [
                        _label_row(
                            spec,
                            prompt,
                            o.work_id,
                            hashes[o.work_id],
                            run_id,
                            status=o.status,
                            label=o.label,
                            error=o.error,
                            call_id=o.call_id,
                            attempts=o.attempts,
                        )
                        for o in outs
                    ]
                )

            client = TeacherClient(
                base_url(),
                spec.model,
                prompt,
                api_key=api_key,
                structured=("json_object_schema" if spec.embedded else "auto")
                if spec.structured_output == "auto"
                else spec.structured_output,
                system_role=spec.system_role == "yes" or (spec.system_role == "auto" and not spec.embedded),
                logprobs=spec.logprobs,
                temperature=spec.temperature,
                max_tokens_per_work=spec.max_tokens_per_work,
                timeout_s=spec.timeout_s,
                max_invalid_retries=spec.max_invalid_retries,
                max_transport_attempts=spec.max_transport_attempts,
                concurrency=spec.concurrency,
                transport=transport,
                on_call=on_call,
                on_outcomes=on_outcomes,
            )
            batches = [
                [views[w["id"]] for w in to_call[i : i + spec.works_per_call]]
                for i in range(0, len(to_call), spec.works_per_call)
            ]
            progress = _Progress(spec.name, len(to_call), stats, log)
            try:
                stopped = asyncio.run(_send(client, batches, spec.concurrency, progress))
            finally:
                progress.close()
                stats.structured_output = client.structured
        stats.sent, stats.seconds = progress.done, time.monotonic() - t0
    if stopped is not None:
        stopped.stats = stats  # what was done and stored before the stop
        raise stopped
    return stats


def export_labels(storage: MetacanStorage, spec: TeacherSpec, view_hashes: dict[str, str]) -> pa.Table:
    """Write ``warehouse/direct_labels_<name>``: for each ``{work_id: view hash}``, the newest stored
    outcome of the current configuration (model, prompt version and SHA) for that record view (schema
    :data:`~.store.LABELS_SCHEMA`). A work without one (deferred by ``max_works``) has no row."""
    prompt = load_prompt(spec.prompt_version)
    wanted = pa.table({"work_id": list(view_hashes), "view_hash": list(view_hashes.values())})  # noqa: F841
    with storage.connect() as con:
        table = con.execute(
            f"SELECT l.* FROM ({current_labels_sql()}) l SEMI JOIN wanted USING (work_id, view_hash) ORDER BY work_id",
            [spec.name, spec.model, prompt.version, prompt.sha],
        ).to_arrow_table()
    table = table.select([f.name for f in LABELS_SCHEMA]).cast(LABELS_SCHEMA)
    storage.write_table(f"direct_labels_{spec.name}", table, schema=LABELS_SCHEMA)
    return table


_TEACHER_RETRY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)
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
    deps = [frame] + ([sample_design] if spec.covers_sample else [])

    @dg.asset(
        name=f"direct_labels_{spec.name}",
        group_name="labeling",
        kinds={"python", "duckdb"},
        code_version="2",
        owners=["team:metacan"],
        deps=deps,
        retry_policy=_TEACHER_RETRY,
        description=f"Direct labels from teacher {spec.name!r} ({spec.model} at {spec.base_url or 'the embedded llama.cpp server'}, "
        f"prompt {spec.prompt_version}, {spec.record_view} view, {spec.works_per_call} works per call) on {coverage}. "
        "Stored labels are reused; works outside the sampling frame get insufficient_payload by rule without a call.",
    )
    def _asset(
        context: dg.AssetExecutionContext,
        config: TeacherRunConfig,
        storage: MetacanStorage,
        openalex: OpenAlexFiles,
        llm_server: EmbeddedLlamaServer,
    ) -> dg.MaterializeResult:
        run_spec = config.apply(spec)
        works = select_works(storage, run_spec)

        def abstracts(rows: list[dict]) -> dict[str, str | None]:
            return load_abstracts(
                openalex.path_of, [(w["id"], w["source_file"], w["source_locator"]) for w in rows if w["has_abstract"]]
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
        table = export_labels(storage, run_spec, stats.view_hashes)
        return dg.MaterializeResult(metadata=_metadata(run_spec, table, stats))

    return _asset


def _metadata(spec: TeacherSpec, table: pa.Table, stats: LabelRunStats) -> dict:
    rows = table.to_pylist()
    status = Counter(r["status"] for r in rows)
    cats = Counter(c for r in rows for c in (r["categories"] or []))
    cats["(none: not meta-research)"] = sum(1 for r in rows if r["status"] == "labelled" and not r["categories"])
    per_work = stats.seconds / stats.sent if stats.sent else None
    return table_metadata(
        LABELS_SCHEMA,
        table.num_rows,
        rows,
        ["work_id", "status", "categories", "genre", "confidence", "error"],
        teacher=spec.name,
        model=spec.model,
        prompt_version=spec.prompt_version,
        record_view=spec.record_view,
        coverage=spec.coverage,
        endpoint=spec.base_url or "embedded llama.cpp server",
        works_per_call=spec.works_per_call,
        concurrency=spec.concurrency,
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
        works_missing_a_label=stats.works - table.num_rows,
        recovered_from_killed_runs=dg.MetadataValue.json(stats.recovered),
        failures_this_run=counts_markdown(dict(stats.failures), "cause"),
        labels_by_status=counts_markdown(dict(status), "status"),
        labels_by_category=counts_markdown(
            {c: cats[c] for c in (*CATEGORIES, "(none: not meta-research)") if cats[c]}, "category"
        ),
    )


def covers_check(spec: TeacherSpec, asset: dg.AssetsDefinition) -> dg.AssetChecksDefinition:
    """Blocking check ``<name>_covers_its_works``: every work the teacher covers has a row (a label or an
    explicit failure) in ``direct_labels_<name>``; a work deferred by ``max_works`` fails it."""

    @dg.asset_check(
        asset=asset,
        name=f"{spec.name}_covers_its_works",
        blocking=spec.coverage == "all",
        description=f"Every work teacher {spec.name} covers ({spec.coverage}) has a label or an explicit failure row.",
    )
    def _check(storage: MetacanStorage) -> dg.AssetCheckResult:
        covered = {w["id"] for w in select_works(storage, spec)}
        labelled = storage.read_table(f"direct_labels_{spec.name}", ["work_id", "status"]).to_pylist()
        have = {r["work_id"] for r in labelled}
        missing = sorted(covered - have)
        return dg.AssetCheckResult(
            passed=not missing,
            metadata={
                "works_covered": len(covered),
                "works_without_label_or_failure": len(missing),
                "first_missing": dg.MetadataValue.json(missing[:20]),
                "failed_labels": sum(1 for r in labelled if r["status"] == "failed"),
            },
        )

    return _check


#: The registry as loaded when the definitions load (``METACAN_TEACHERS_FILE``), and its assets.
TEACHERS: dict[str, TeacherSpec] = load_registry()
TEACHER_ASSETS: dict[str, dg.AssetsDefinition] = {name: direct_labels_asset(spec) for name, spec in TEACHERS.items()}
TEACHER_CHECKS = [covers_check(spec, TEACHER_ASSETS[name]) for name, spec in TEACHERS.items()]
direct_labels_gemma = TEACHER_ASSETS["gemma"]
direct_labels_codex = TEACHER_ASSETS["codex"]
