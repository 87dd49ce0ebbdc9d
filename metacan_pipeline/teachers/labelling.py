"""The labelling engine behind the ``direct_labels_<name>`` assets (SPEC section 4), usable without
Dagster (the benchmarks call it).

:func:`select_works` picks the frame rows a teacher covers; :func:`label_works` labels them: reuse what
the label store holds and put aside the works a budget defers (:func:`plan_run`), give works outside
the sampling frame their rule label (:func:`store_frame_rule_labels`), send the rest in batches of
``works_per_call`` to the teacher's endpoints, ``concurrency`` calls in flight at each (:func:`call_teacher`), archiving and storing
every call and outcome as it happens; :func:`~.export.export_labels` writes the teacher's current labels.
"""

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock, Timeout

from ..http import mask_secret
from ..storage import MetacanStorage
from ..tables.teachers import VIEW_HASH_SCHEMA
from ..vocab import INSUFFICIENT_PAYLOAD
from .calling.archive import LabelWriter, recover
from .calling.client import CallRecord, LabelOutcome
from .calling.sending import Progress, run_interruptibly, send_batches, structured_modes, teacher_lanes
from .core.registry import TeacherSpec
from .core.rubric import Prompt, load_prompt
from .core.stats import LabelRunStats, LaneStats
from .core.store import append_rows, existing_keys, new_key, now_utc
from .core.views import record_view, view_hash

Abstracts = Callable[[list[dict]], dict[str, str | None]]
"""Loads ``{work id: abstract}`` for frame rows (the ``title_abstract`` view)."""


_FRAME_RULE_REASON = "Not sent to a teacher: outside the sampling frame ({why}); SPEC section 2 gives such works insufficient_payload only."


#: Frame works a labelling run holds at once (:func:`iter_selected`): views, hashes and the plan are per chunk.
CHUNK_WORKS = 50_000


def covered_ids(storage: MetacanStorage, spec: TeacherSpec) -> set[str] | None:
    """The ids a teacher covers beyond the frame itself: None for ``all`` (every frame work), else the sample
    (``in_sample`` in ``sample_design``, SPEC section 5) and/or the ids of batch ``<name>`` in ``label_batches``
    (a sample or a batch: small). Raises ValueError for a ``batch:<name>`` coverage whose batch has no works."""
    if spec.coverage == "all":
        return None
    wanted: set[str] = set()
    if spec.covers_sample:
        storage.require("sample_design")
        sample = pq.read_table(storage.table_dir("sample_design"), columns=["id"], filters=[("in_sample", "=", True)])
        wanted |= set(sample.column("id").to_pylist())
    if spec.batch is not None:
        with storage.connect() as con:
            batch = {
                r[0] for r in con.execute("SELECT work_id FROM label_batches WHERE batch = ?", [spec.batch]).fetchall()
            }
        if not batch and not spec.covers_sample:
            raise ValueError(
                f"teacher {spec.name}: coverage {spec.coverage!r} names a batch with no works in the DuckDB table "
                f"label_batches; load it first (INSERT INTO label_batches (batch, work_id, added_at, source) ...), "
                f"or materialize machine_scores then label_batches, which adds the proposed batch 'active_learning'"
            )
        wanted |= batch
    return wanted


def iter_selected(storage: MetacanStorage, spec: TeacherSpec, chunk_works: int = CHUNK_WORKS) -> Iterator[list[dict]]:
    """The frame rows a teacher covers (:func:`covered_ids`), in frame order, ``chunk_works`` frame rows read
    at a time (a chunk holds at most that many works; empty chunks are skipped): a census teacher over a
    frame of millions never holds the frame in memory. Raises FileNotFoundError naming the asset to
    materialize first, and ValueError as :func:`covered_ids`."""
    wanted = covered_ids(storage, spec)
    for batch in storage.iter_batches("frame", chunk_works):
        rows = batch.to_pylist()
        if wanted is not None:
            rows = [w for w in rows if w["id"] in wanted]
        if rows:
            yield rows
        del rows, batch  # released before the next batch is read


def select_works(storage: MetacanStorage, spec: TeacherSpec) -> list[dict]:
    """The frame rows a teacher covers: ``all`` (every frame work), ``sample`` (``in_sample`` in
    ``sample_design``, SPEC section 5), ``batch:<name>`` (the ids of that batch in ``label_batches``;
    ids not in the frame are ignored), ``sample+batch:<name>`` (both: the sample teacher labelling the
    batches that ``machine_scores`` rounds propose and ``label_batches`` adds). All in one list: for a small
    frame or coverage; the assets stream (:func:`iter_selected`). Raises as :func:`iter_selected`."""
    return [w for chunk in iter_selected(storage, spec) for w in chunk]


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
        "label_id": new_key(),
        "work_id": work_id,
        "teacher": spec.name,
        "model": spec.model,
        "prompt_version": prompt.version,
        "prompt_sha": prompt.sha,
        "record_view": spec.view_name,
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


def label_works(
    storage: MetacanStorage,
    spec: TeacherSpec,
    works: list[dict] | Iterable[list[dict]],
    *,
    run_id: str,
    log,
    base_url: Callable[[], str] | None = None,
    abstracts: Abstracts | None = None,
    max_works: int = 0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> LabelRunStats:
    """Label ``works`` (frame rows) with ``spec``; returns what was done.

    ``works`` is a list of frame rows, or an iterable of such lists (chunks, :func:`iter_selected`): each chunk
    is planned, given its rule labels and sent before the next is read, so memory holds one chunk; the view
    hash of every work goes to a Parquet file (``stats.view_hashes`` is then its path) instead of a dict.
    ``base_url`` gives the URL of a teacher of one endpoint (default: ``spec.base_url``), and is called
    only when some work must be sent (so a fully cached run never starts the embedded server); a teacher
    with ``endpoints`` calls them and never ``base_url``; ``abstracts`` loads ``{id: abstract}`` for the ``title_abstract`` view;
    ``max_works`` > 0 sends at most that many works (the rest wait for the next run). Every call and
    outcome is archived and stored as it happens (:class:`~..calling.archive.LabelWriter`), so a run killed at
    any point repeats no finished call when resumed. Raises
    :class:`~..calling.client.EndpointConfigurationError` (the endpoint refuses the model or key) or
    :class:`~..calling.client.EndpointUnavailableError` (batch after batch failed at the endpoint), in both cases
    after every call made is stored; ValueError for a negative ``max_works``.

    One run per teacher at a time on a data folder (a file lock): a second run waits for the first and
    then finds its labels stored, so no work is bought twice.
    """
    if max_works < 0:
        raise ValueError(f"max_works={max_works}: expected 0 (no limit) or a positive number of works")
    chunked = not isinstance(works, list)
    chunks: Iterable[list[dict]] = works if chunked else [works]
    with _one_run_per_teacher(storage, spec, log), ViewHashSpill(storage, spec, run_id, chunked) as spill:
        stats = LabelRunStats()
        stats.recovered = recover(storage, log)
        prompt = load_prompt(spec.prompt_version)
        budget = max_works
        for k, chunk in enumerate(chunks):
            plan = plan_run(storage, spec, prompt, chunk, abstracts, 0)
            if max_works:
                plan, budget = within_budget(plan, budget)
            spill.add(plan.hashes)
            store_frame_rule_labels(storage, spec, prompt, plan, run_id)
            stats.works += len(chunk)
            stats.reused += plan.reused
            stats.rule_labels += len(plan.rule)
            stats.deferred += plan.deferred
            log.info(
                f"teacher {spec.name}: {len(chunk)} works{f' (chunk {k + 1})' if chunked else ''}, {plan.reused} reused "
                f"from the label store, {len(plan.rule)} outside the sampling frame (rule label), {len(plan.to_call)} "
                f"to send in calls of {spec.works_per_call} to {spec.where}"
                + (f", {plan.deferred} deferred by max_works" if plan.deferred else "")
            )
            stopped: BaseException | None = None
            if plan.to_call:
                stopped = call_teacher(
                    storage, spec, prompt, plan, stats, run_id=run_id, log=log, base_url=base_url, transport=transport
                )
            if stopped is not None:
                stopped.stats = stats  # what was done and stored before the stop
                raise stopped
            del chunk, plan  # released before the next chunk is read: one chunk in memory at a time, not two
        stats.view_hashes = spill.result()
        return stats


def within_budget(plan: "RunPlan", budget: int) -> "tuple[RunPlan, int]":
    """``plan`` sending at most ``budget`` works (the rest deferred) and the budget left after it."""
    allowed = max(budget, 0)
    if len(plan.to_call) <= allowed:
        return plan, allowed - len(plan.to_call)
    return replace(plan, to_call=plan.to_call[:allowed], deferred=len(plan.to_call) - allowed), 0


class ViewHashSpill:
    """The view hash of every work a run covers: a dict (one chunk), or for a chunked run a Parquet file
    ``<data>/tmp/view-hashes-<teacher>-<run>-<8 hex>.parquet`` (``work_id``, ``view_hash``) written chunk by
    chunk, which :func:`current_labels` joins and :func:`discard_view_hashes` removes."""

    def __init__(self, storage: MetacanStorage, spec: TeacherSpec, run_id: str, to_file: bool) -> None:
        self.hashes: dict[str, str] = {}
        self.path: Path | None = None
        self.writer: pq.ParquetWriter | None = None
        if to_file:
            folder = storage.root / "tmp"
            folder.mkdir(parents=True, exist_ok=True)
            self.path = folder / f"view-hashes-{spec.name}-{run_id[:8]}-{uuid.uuid4().hex[:8]}.parquet"
            self.writer = pq.ParquetWriter(str(self.path), VIEW_HASH_SCHEMA)

    def __enter__(self) -> "ViewHashSpill":
        return self

    def add(self, hashes: dict[str, str]) -> None:
        if self.writer is None:
            self.hashes.update(hashes)
        elif hashes:
            self.writer.write_table(
                pa.table({"work_id": list(hashes), "view_hash": list(hashes.values())}, schema=VIEW_HASH_SCHEMA)
            )

    def result(self) -> "dict[str, str] | Path":
        if self.writer is None:
            return self.hashes
        self.writer.close()
        self.writer = None
        return self.path

    def __exit__(self, *exc) -> None:
        if self.writer is not None:  # stopped early: the file is incomplete and nobody will read it
            self.writer.close()
            self.path.unlink(missing_ok=True)


def discard_view_hashes(view_hashes: "dict[str, str] | Path") -> None:
    """Remove the Parquet file of a chunked run's view hashes (nothing for a dict)."""
    if isinstance(view_hashes, Path):
        view_hashes.unlink(missing_ok=True)


@contextmanager
def _one_run_per_teacher(storage: MetacanStorage, spec: TeacherSpec, log) -> Iterator[None]:
    """Hold the teacher's file lock on the data folder: a second run waits for the first, then finds its
    labels stored, so no work is bought twice."""
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
        yield
    finally:
        lock.release()


@dataclass(frozen=True)
class RunPlan:
    """What a labelling run does with its works. ``views`` / ``hashes``: the record view and its hash
    per work id (every work); ``reused``: works whose label for this view the store already holds;
    ``rule``: works outside the sampling frame without one (rule label, no call); ``to_call``: works
    sent this run; ``deferred``: works left for the next run by ``max_works``."""

    views: dict[str, dict]
    hashes: dict[str, str]
    reused: int
    rule: list[dict]
    to_call: list[dict]
    deferred: int


def plan_run(
    storage: MetacanStorage,
    spec: TeacherSpec,
    prompt: Prompt,
    works: list[dict],
    abstracts: Abstracts | None,
    max_works: int,
) -> RunPlan:
    """Split ``works`` (frame rows) by what the label store holds for the label key (teacher, model,
    prompt version and SHA, view hash; :func:`~.store.existing_keys`): reused, rule label (outside the
    sampling frame, SPEC section 2), sent now (the first ``max_works`` when > 0) and deferred."""
    texts = abstracts(works) if spec.record_view == "title_abstract" and abstracts else {}
    views = {w["id"]: record_view(w, spec.record_view, texts.get(w["id"]), spec.view_version) for w in works}
    hashes = {wid: view_hash(v) for wid, v in views.items()}
    with storage.connect() as con:
        done = existing_keys(con, spec.name, spec.model, prompt.version, prompt.sha, work_ids=list(views))
    todo = [w for w in works if (w["id"], hashes[w["id"]]) not in done]
    to_call = [w for w in todo if w["in_sampling_frame"]]
    deferred = len(to_call) - max_works if max_works and len(to_call) > max_works else 0
    return RunPlan(
        views=views,
        hashes=hashes,
        reused=len(works) - len(todo),
        rule=[w for w in todo if not w["in_sampling_frame"]],
        to_call=to_call[:max_works] if deferred else to_call,
        deferred=deferred,
    )


def store_frame_rule_labels(
    storage: MetacanStorage, spec: TeacherSpec, prompt: Prompt, plan: RunPlan, run_id: str
) -> None:
    """Store the rule label of every work of ``plan.rule`` (outside the sampling frame): ``labelled``,
    categories ``[insufficient_payload]``, source ``frame_rule``, the exclusion in ``reason``; no call."""
    if not plan.rule:
        return
    rows = [
        _label_row(
            spec,
            prompt,
            w["id"],
            plan.hashes[w["id"]],
            run_id,
            status="labelled",
            source="frame_rule",
            categories=[INSUFFICIENT_PAYLOAD],
            reason=_FRAME_RULE_REASON.format(why=w["sampling_frame_exclusion"]),
        )
        for w in plan.rule
    ]
    with storage.connect() as con:
        append_rows(con, [], rows)


def call_row(spec: TeacherSpec, prompt: Prompt, run_id: str, rec: CallRecord, cost: float) -> dict:
    """The ``teacher_calls`` row of one call (schema :data:`~metacan_pipeline.tables.teachers.CALLS_SCHEMA`
    without the archive columns, which :class:`~..calling.archive.LabelWriter` fills)."""
    return {
        "call_id": rec.call_id,
        "run_id": run_id,
        "teacher": spec.name,
        "model": spec.model,
        "prompt_version": prompt.version,
        "prompt_sha": prompt.sha,
        "record_view": spec.view_name,
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
        "endpoint": rec.endpoint or None,
    }


def count_outcomes(stats: LabelRunStats, outs: list[LabelOutcome], teacher: str, log) -> None:
    """Count ``outs`` by status and failure cause (the text before the first ``:``) into ``stats``; log
    each failure."""
    for out in outs:
        stats.outcomes[out.status] += 1
        if out.error:
            stats.failures[out.error.split(":")[0][:80]] += 1
            log.warning(f"teacher {teacher}: {out.work_id} failed: {out.error[:300]}")


def outcome_row(spec: TeacherSpec, prompt: Prompt, out: LabelOutcome, vhash: str, run_id: str) -> dict:
    """The ``teacher_labels`` row of one outcome of a call (labelled or failed, source ``teacher_call``)."""
    return _label_row(
        spec,
        prompt,
        out.work_id,
        vhash,
        run_id,
        status=out.status,
        label=out.label,
        error=out.error,
        call_id=out.call_id,
        attempts=out.attempts,
    )


def call_teacher(
    storage: MetacanStorage,
    spec: TeacherSpec,
    prompt: Prompt,
    plan: RunPlan,
    stats: LabelRunStats,
    *,
    run_id: str,
    log,
    base_url: Callable[[], str] | None,
    transport: httpx.AsyncBaseTransport | None,
) -> BaseException | None:
    """Send ``plan.to_call`` in batches of ``works_per_call`` to the teacher's endpoints
    (:func:`~..calling.sending.send_batches`), archiving and storing every call and outcome as it happens
    (:class:`~..calling.archive.LabelWriter`); counts calls, tokens, cost, outcomes and failures into ``stats``, and
    what each endpoint did into ``stats.endpoints``. Returns the error that stopped the run early, or None.
    Raises ValueError when an ``api_key_env`` is not set (before anything is opened)."""
    api_keys = [spec.api_key(endpoint) for endpoint in spec.lanes]
    for key in api_keys:
        mask_secret(key)
    t0 = time.monotonic()
    with LabelWriter(storage, spec.name, run_id) as writer:

        def on_call(rec: CallRecord) -> None:
            cost = spec.cost_usd(rec.prompt_tokens, rec.completion_tokens)
            stats.calls += 1
            stats.prompt_tokens += rec.prompt_tokens or 0
            stats.completion_tokens += rec.completion_tokens or 0
            stats.cost_usd += cost
            writer.add_call(call_row(spec, prompt, run_id, rec, cost), rec.request, rec.response_text)
            if rec.error:  # said as it happens: a run whose calls time out was silent for minutes
                log.warning(
                    f"teacher {spec.name}: a call of {len(rec.work_ids)} works failed after {rec.latency_s:.0f} s "
                    f"({rec.error[:200]}); its works are tried again or recorded as failed, as the error allows"
                )

        def on_outcomes(outs: list[LabelOutcome]) -> None:
            count_outcomes(stats, outs, spec.name, log)
            writer.add_labels([outcome_row(spec, prompt, o, plan.hashes[o.work_id], run_id) for o in outs])

        if spec.endpoints:
            urls = [endpoint.base_url for endpoint in spec.endpoints]
        else:
            urls = [base_url() if base_url is not None else spec.base_url]
        lanes = teacher_lanes(spec, prompt, urls, api_keys=api_keys, transport=transport, on_call=on_call)
        per_call = spec.works_per_call
        batches = [
            [plan.views[w["id"]] for w in plan.to_call[i : i + per_call]] for i in range(0, len(plan.to_call), per_call)
        ]
        progress = Progress(spec.name, len(plan.to_call), stats, log)
        try:
            stopped = run_interruptibly(send_batches(lanes, batches, progress, on_outcomes, log))
        finally:
            progress.close()
            stats.structured_output = structured_modes(lanes)
            for lane in lanes:  # a chunked run sends chunk after chunk: each endpoint's figures add up
                stats.endpoints[lane.name] = add_lane_stats(stats.endpoints.get(lane.name), lane.stats)
    stats.sent += progress.done
    stats.seconds += time.monotonic() - t0
    return stopped


def add_lane_stats(before: LaneStats | None, now: LaneStats) -> LaneStats:
    """An endpoint's figures over two sends (counts and seconds add up; state and cause are the latest)."""
    if before is None:
        return now
    summed = {k: getattr(before, k) + getattr(now, k) for k in ("calls", "works", "labelled", "failures", "given_back")}
    summed.update({k: getattr(before, k) + getattr(now, k) for k in ("seconds", "downs", "probes")})
    return replace(now, **summed)
