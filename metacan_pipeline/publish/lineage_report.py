"""A work's lineage from the Dagster UI: the job ``work_lineage_report`` and the Markdown it writes.

The job takes work ids or DOIs in its config (the Launchpad is pre-filled with :data:`EXAMPLE_WORK`), reads each
work's row of ``work_lineage`` from the DuckDB catalog (read-only), and writes one Markdown table per work as the
metadata of its output (the run's page shows it) and in its log: each part of the record, the asset and table that
produced it, and the run, linked to the run's page in the Dagster UI. A run the instance does not hold (a run of
another Dagster home) is named without a link. Below the table, the runs that produced the same frame build
(:func:`.lineage.same_build_sentence`): the lineage names the first, the UI shows every one of them.

It reads the warehouse only: it materializes nothing and needs no upstream run but the one that built
``work_records`` (which writes ``work_lineage``).
"""

# no ``from __future__ import annotations``: Dagster reads the op's config class from its annotation
from collections.abc import Callable
from typing import Any

import dagster as dg
import duckdb
from pydantic import Field

from .. import settings
from ..storage import MetacanStorage
from .lineage import LineageNotBuilt, build_runs, lineages_with_pages, resolve_works, run_url, same_build_sentence

#: The Launchpad's example: the first work (by id) of the frame the default run (``make run``, over
#: ``../shared/data/openalex`` and ``openalex_more``) builds.
EXAMPLE_WORK = "W1491754772"
JOB_NAME = "work_lineage_report"
#: The newest ``frame`` materializations the job reads from the instance for the runs of a build (a weekly refresh
#: makes about 52 a year).
FRAME_MATERIALIZATIONS_READ = 1000
#: The job's one op: the Launchpad's config goes under ``ops: write_work_lineage: config:``.
OP_NAME = "write_work_lineage"


def _cell(value: Any) -> str:
    """A value as a Markdown table cell: ``|`` escaped, on one line."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def _code(value: Any) -> str:
    text = _cell(value).replace("`", "'")
    return f"`{text}`" if text else ""


def markdown_run_link(
    ui_url: str | None, known: Callable[[str], bool] = lambda _run: True
) -> Callable[[str | None], str]:
    """How a run id shows in the Markdown: linked to ``<ui_url>/runs/<id>`` (:func:`.lineage.run_url`; ``ui_url=""``
    links relative to the UI's root), as text when no UI address is given, and ``not recorded`` for None. A run for
    which ``known`` is false (not in the Dagster instance) is named without a link, with a note saying so."""

    def link(run_id: str | None) -> str:
        if not run_id:
            return "not recorded"
        url = run_url(ui_url, run_id)
        if url is None:
            return _code(run_id)
        if not known(run_id):
            return f"{_code(run_id)} (not a run of this Dagster instance)"
        return f"[{_code(run_id)}]({url})"

    return link


def lineage_rows(row: dict[str, Any], link: Callable[[str | None], str]) -> list[tuple[str, str, str, str]]:
    """``(part of the record, what it is, produced by (asset · table), run)`` for a ``work_lineage`` row (with its
    page, :func:`.lineage.lineages_with_pages`), in the order the record is built."""
    source = "archived API response" if row.get("input_kind") == "archived_api_response" else "input part"
    rows = [
        ("frame build", _code(row.get("frame_build_id")), "`frame` · `frame_builds`", link(row.get("frame_run_id"))),
        (
            source,
            f"{_code(row.get('source_file'))} at {_code(row.get('source_locator'))}",
            "`frame_parts` · `frame_build_manifest`",
            link(row.get("part_run_id")),
        ),
        (
            "entity lists",
            _cell(row.get("entity_list_versions") or "not recorded"),
            "`canadian_entities` · `frame`",
            "the frame build's",
        ),
        ("lexicon", _cell(row.get("lexicon_version") or "not recorded"), "`frame`", "the frame build's"),
    ]
    for c in row.get("teacher_calls") or []:
        imported = c.get("source") not in (None, "teacher_call", "frame_rule")
        what = (
            f"{_cell(c.get('model'))}, prompt {_cell(c.get('prompt_version'))}, {_cell(c.get('label_status'))}"
            + ("" if c.get("source") in (None, "teacher_call") else f" ({_cell(c.get('source'))})")
            + (f"; call {_code(c.get('call_id'))}, request {_code(c.get('request_hash'))}" if c.get("call_id") else "")
            + (f" at {_cell(c.get('called_at'))}" if c.get("called_at") else "")
        )
        asset = "`imported_labels`" if imported else f"`direct_labels_{_cell(c.get('teacher'))}`"
        rows.append(
            (
                f"direct label ({_cell(c.get('teacher'))})",
                what,
                asset + (" · `teacher_calls`" if c.get("call_id") else ""),
                link(c.get("run_id")),
            )
        )
    if not row.get("teacher_calls"):
        rows.append(("direct labels", "no teacher has labelled this work yet", "", ""))
    rows.append(
        (
            "student model",
            _code(row.get("model_version")) if row.get("model_version") else "none",
            "`student_heads` · `model_versions`",
            link(row.get("student_run_id")) if row.get("model_version") else "",
        )
    )
    has_scores = row.get("machine_round") is not None
    rows.append(
        (
            "machine scores",
            f"round {row['machine_round']} ({_cell(row.get('machine_validation_status'))})" if has_scores else "none",
            "`machine_scores` · `machine_rounds`",
            link(row.get("machine_scores_run_id")) if has_scores else "",
        )
    )
    if row.get("page_path"):
        rows.append(
            (
                "page",
                f"{_code(row['page_path'])}, rendered {_cell(row.get('rendered_at'))} UTC",
                "`work_pages` · `page_manifest`",
                link(row.get("page_run_id")),
            )
        )
    return rows


def lineage_markdown(
    row: dict[str, Any], runs_of_build: list[str], link: Callable[[str | None], str], named_as: str | None = None
) -> str:
    """One work's lineage as Markdown: a heading (the work id, and the value it was asked by when that differs), the
    table of :func:`lineage_rows`, and the runs that produced the same frame build when there are two or more
    (``runs_of_build``: :func:`.lineage.build_runs` of the row's build)."""
    wid = row["id"]
    heading = f"### {wid}" + (f" (asked as {_code(named_as)})" if named_as and named_as != wid else "")
    lines = [
        heading,
        "",
        "| part of the record | what | produced by (asset · table) | run |",
        "|---|---|---|---|",
        *(f"| {part} | {what} | {by} | {run} |" for part, what, by, run in lineage_rows(row, link)),
        "",
        f"The record and this lineage: `work_records` · `work_lineage` (the same as text: `metacan lineage {wid}`).",
    ]
    if (sentence := same_build_sentence(row.get("frame_build_id"), runs_of_build, link)) is not None:
        lines += ["", sentence]
    return "\n".join(lines)


def frame_runs_in_instance(instance: dg.DagsterInstance, build_ids: set[str]) -> dict[str, list[str]]:
    """The runs of ``instance`` whose ``frame`` materialization carries one of ``build_ids`` as its
    ``frame_build_id`` metadata, oldest first, among the newest :data:`FRAME_MATERIALIZATIONS_READ`: what the UI shows
    for each build."""
    out: dict[str, list[str]] = {b: [] for b in build_ids}
    if not build_ids:
        return out
    result = instance.fetch_materializations(dg.AssetKey("frame"), limit=FRAME_MATERIALIZATIONS_READ)
    for record in reversed(result.records):
        mat = record.asset_materialization
        value = mat.metadata.get("frame_build_id") if mat is not None else None
        build = getattr(value, "value", value)
        if build in out and record.run_id not in out[build]:
            out[build].append(record.run_id)
    return out


class LineageReportConfig(dg.Config):
    """The works whose lineage the job writes."""

    works: list[str] = Field(
        default=[EXAMPLE_WORK],
        description="Works to trace: OpenAlex work ids (W2741809807, or https://openalex.org/W2741809807) or DOIs "
        "(10.1234/abc, doi:10.1234/abc or https://doi.org/10.1234/abc), as `metacan lineage` takes them.",
    )


def _unknown_failure(db: str, not_ids: list[str], not_in_frame: list[str]) -> dg.Failure:
    parts = []
    if not_ids:
        parts.append(f"not a work id or DOI: {', '.join(repr(v) for v in not_ids)}")
    if not_in_frame:
        parts.append(f"not in the frame of {db}: {', '.join(repr(v) for v in not_in_frame)}")
    return dg.Failure(
        description=f"{'; '.join(parts)}. Give OpenAlex work ids (W followed by digits, e.g. {EXAMPLE_WORK}) or DOIs "
        "of works in the frame (the work's page or the index names both), or materialize work_records if the work "
        "entered the frame since; no lineage was written.",
        metadata={"not_a_work_id_or_doi": not_ids, "not_in_the_frame": not_in_frame},
        allow_retries=False,
    )


@dg.op(
    name=OP_NAME,
    description="Write the lineage of the works in the config as Markdown: what produced each part of the record, "
    "and the run, linked in this UI.",
    out=dg.Out(dg.Nothing),
)
def write_work_lineage(context: dg.OpExecutionContext, config: LineageReportConfig, storage: MetacanStorage):
    """One Markdown table per work of ``config.works`` (:func:`lineage_markdown`) in the output's metadata (keyed by
    work id) and the log. Raises dg.Failure naming every value that is not a work id or DOI, or names no frame work
    (before writing anything), and naming what to run when the catalog has no ``work_lineage`` yet or is held by a
    writing run."""
    db = storage.duckdb_path
    if not config.works:
        raise dg.Failure(description=f"no works given: list work ids or DOIs under works, e.g. [{EXAMPLE_WORK}]")
    if not db.exists():
        raise dg.Failure(description=f"no database at {db}: materialize work_records (or `metacan run`) first")
    try:
        ui_url = settings.dagster_ui_url()
    except ValueError as exc:
        raise dg.Failure(description=f"{exc}; no lineage was written") from None
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        raise dg.Failure(
            description=f"cannot read {db}: {str(exc).splitlines()[0]}. If a run is writing it, launch again when it ends."
        ) from None
    try:
        try:
            resolved = resolve_works(con, list(config.works))
        except LineageNotBuilt:
            raise dg.Failure(
                description=f"{db} has no work_lineage table yet: materialize work_records (`metacan run`) first"
            ) from None
        if resolved.unknown:
            raise _unknown_failure(str(db), resolved.not_ids, resolved.not_in_frame)
        ids = [wid for _, wid in resolved.works]
        rows = dict(lineages_with_pages(con, list(dict.fromkeys(ids))))
        builds = {r["frame_build_id"] for r in rows.values() if r and r.get("frame_build_id")}
        runs = build_runs(con, sorted(builds))
    finally:
        con.close()
    for build, in_ui in frame_runs_in_instance(context.instance, builds).items():
        runs[build] = runs.get(build, []) + [r for r in in_ui if r not in runs.get(build, [])]
    link = markdown_run_link(ui_url or "", lambda run: context.instance.has_run(run))
    metadata: dict[str, Any] = {}
    for asked, wid in resolved.works:
        if wid in metadata:
            continue
        row = rows[wid]
        text = lineage_markdown(row, runs.get(row.get("frame_build_id"), []), link, named_as=asked)
        metadata[wid] = dg.MetadataValue.md(text)
        context.log.info(text)
    metadata["works"] = len(metadata)
    metadata["dagster_ui_url"] = ui_url or "links relative to this UI (METACAN_DAGSTER_UI_URL unset)"
    yield dg.Output(None, metadata=metadata)


@dg.job(
    name=JOB_NAME,
    description="A work's lineage from the UI: give work ids or DOIs in the Launchpad config (pre-filled with an "
    "example), launch, and read each work's table (what produced each part, and the run, linked) in the run's output "
    "metadata. Reads the warehouse only.",
    config={"ops": {OP_NAME: {"config": {"works": [EXAMPLE_WORK]}}}},
)
def work_lineage_report():
    write_work_lineage()
