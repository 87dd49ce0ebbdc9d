"""The teachers stage's Dagster assets (SPEC section 4): one ``direct_labels_<name>`` per registry teacher, the
imported labels, the qualification of every teacher, the agreement between teachers and the label batches.

The bodies orchestrate; the work is in :mod:`.core` (registry, labelling, export, qualification, agreement,
batches), :mod:`.calling` (the endpoints and the embedded server) and :mod:`.imports`. The direct-label assets
depend on ``frame`` and ``sample_design`` by key; the registry's ``[roles]`` table names the census and the sample
teacher (:data:`ROLES`).
"""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa

from ..meta import table_metadata
from ..openalex.lookup import load_abstracts
from ..resources import OpenAlexFiles
from ..settings import pilot_dir
from ..storage import MetacanStorage
from ..tables.teachers import AGREEMENT_SCHEMA, DISAGREEMENTS_SCHEMA, LABELS_SCHEMA
from ..vocab import CENSUS_TEACHER, SAMPLE_TEACHER
from .calling.retry import retried_unless_interrupted
from .calling.server import EmbeddedLlamaServer
from .core.agreement import agreement_metadata, agreement_note, compare_pairs, load_labelled
from .core.batches import add_round_proposals, batches_metadata, rows_per_batch
from .core.registry import TeacherRunConfig, TeacherSpec, direct_labels_table, load_registry, load_roles
from .export import direct_labels_metadata, export_labels
from .imports.importing import import_records
from .imports.sources import (
    ImportedLabelsConfig,
    current_imported,
    import_label_file,
    import_texts,
    imported_metadata,
    pilot_jobs,
    report_line,
    resolve_pilot_dirs,
)
from .labelling import discard_view_hashes, iter_selected, label_works
from .qualification import (
    draw_reference_set,
    load_qualification,
    qualification_entry,
    qualification_metadata,
    qualify,
)

_COVERAGE_TEXT = {
    "all": "every frame work",
    "sample": "the design-weighted sample (sample_design.in_sample, SPEC section 5)",
}


def direct_labels_asset(spec: TeacherSpec) -> dg.AssetsDefinition:
    """The asset ``direct_labels_<name>`` for one registry teacher (SPEC section 4).

    Output table ``warehouse/direct_labels_<name>``: one row per covered work with the stored outcome of
    the current configuration (schema ``LABELS_SCHEMA``; ``status`` labelled or failed, a
    failure is unknown, never a negative). Launchpad config: ``TeacherRunConfig`` (``core/registry.py``).
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
        return dg.MaterializeResult(
            metadata=direct_labels_metadata(run_spec, storage, stats) | qualification_entry(storage, run_spec)
        )

    return _asset


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
    """Appends one ``teacher_qualification`` row per registry teacher (``qualification.py``)."""
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
    return dg.MaterializeResult(metadata=qualification_metadata(results, works, cfg))


#: The registry as loaded when the definitions load (``METACAN_TEACHERS_FILE``), and its assets.
TEACHERS: dict[str, TeacherSpec] = load_registry()
TEACHER_ASSETS: dict[str, dg.AssetsDefinition] = {name: direct_labels_asset(spec) for name, spec in TEACHERS.items()}
#: ``{role: teacher name}`` (registry ``[roles]``) and the direct-label assets of the two roles.
ROLES: dict[str, str] = load_roles()
census_direct_labels = TEACHER_ASSETS[ROLES[CENSUS_TEACHER]]
sample_direct_labels = TEACHER_ASSETS[ROLES[SAMPLE_TEACHER]]


@dg.asset(group_name="labeling", kinds={"python", "duckdb"}, code_version="1", owners=["team:metacan"])
def imported_labels(
    context: dg.AssetExecutionContext, config: ImportedLabelsConfig, storage: MetacanStorage
) -> dg.MaterializeResult:
    """Direct labels produced elsewhere, validated like teacher replies and stored with `source='import'`.

    Sources (the run's config): the MetaCan pilot folder (teachers `pilot_a` and `pilot_b`) and label files in
    our schema. Every record becomes a
    `teacher_labels` row, `failed` with its cause when invalid (an id that is not `W123` or
    `https://openalex.org/W123` included); design information goes to the DuckDB table `imported_design`. A later
    import wins: a record equal to the current imported row of its work adds nothing (so a file imported again adds
    nothing, and a file reverted to an earlier version makes that version current again). Output table
    `warehouse/imported_labels`: the current imported label per teacher configuration and work, from this and every
    earlier import (columns of `teacher_labels`). Raises FileNotFoundError for a configured file or pilot folder that
    does not exist, ValueError naming the file for a file that is empty or not a JSON array / JSON Lines (e.g. one
    JSON object).
    """
    run_id = context.run.run_id
    folders, notes = resolve_pilot_dirs(config.pilot_dirs, context.log)
    jobs, pilot_notes = pilot_jobs(folders, context.log)
    notes += pilot_notes
    with storage.connect() as con:
        reports = [import_records(con, spec, records, run_id) for spec, records in jobs]
        reports += [import_label_file(con, f, run_id) for f in config.files]
        texts = import_texts(con, folders, config.files)
        table = current_imported(con)
    n = storage.write_table("imported_labels", table, schema=LABELS_SCHEMA)
    for r in reports:
        context.log.info(report_line(r))
    context.log.info(f"reference_texts: {texts} work texts read from the imports (for the student's reference sets)")
    return dg.MaterializeResult(metadata={**imported_metadata(table, n, reports, notes), "work_texts_read": texts})


#: What the agreement reads: the direct labels of every registry teacher, the imported labels and the sample design.
AGREEMENT_DEPS = ["imported_labels", "sample_design", *(direct_labels_table(name) for name in TEACHERS)]
_AGREEMENT_SPEC = {
    "group_name": "labeling",
    "kinds": {"python", "parquet"},
    "code_version": "1",
    "owners": ["team:metacan"],
}


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "teacher_agreement",
            deps=AGREEMENT_DEPS,
            description="Raw and design-weighted agreement and Cohen's kappa of every pair of teacher configurations "
            "on every head.",
            **_AGREEMENT_SPEC,
        ),
        dg.AssetSpec(
            "teacher_disagreements",
            deps=AGREEMENT_DEPS,
            description="Every work and head on which a pair of teacher configurations gives different values.",
            **_AGREEMENT_SPEC,
        ),
    ]
)
def teacher_agreement(context: dg.AssetExecutionContext, storage: MetacanStorage) -> Iterator[dg.MaterializeResult]:
    """Agreement of every pair of teacher configurations on the works both labelled (status `labelled`).

    Configurations: each registry teacher's current one (what `warehouse/direct_labels_<name>` holds: teacher, model,
    prompt version, prompt SHA; found by globbing the warehouse) and every imported one (`warehouse/imported_labels`).
    Per pair and head (`HEADS`, rules in `core/agreement.py`): `n` works compared, raw agreement and Cohen's kappa,
    and the design-weighted ones with `n_weighted` (the sum of design weights, an estimated population size) over the
    `n_with_weight` works that have a weight (`pair_weights`). Tables: `teacher_agreement` (`AGREEMENT_SCHEMA`, one
    row per pair and head, `n` = 0 and nulls where a head is not comparable) and `teacher_disagreements`
    (`DISAGREEMENTS_SCHEMA`, one row per work and head where the two differ; `value_a` is the first-named
    configuration's). Pairs are named `<a> vs <b>` in name order, by teacher name, or by
    `teacher@model/prompt_version/prompt_sha[:8]` when one name has several configurations. Nothing to compare (fewer
    than two configurations, no shared work) is not an error: empty tables and a note.
    """
    loaded, counts = load_labelled(storage)
    compared = compare_pairs(loaded)
    agreement_rows = pa.Table.from_pylist(compared.rows, schema=AGREEMENT_SCHEMA)
    n = storage.write_table("teacher_agreement", agreement_rows, schema=AGREEMENT_SCHEMA)
    diffs = pa.Table.from_pylist(compared.diffs, schema=DISAGREEMENTS_SCHEMA)
    n_diff = storage.write_table("teacher_disagreements", diffs, schema=DISAGREEMENTS_SCHEMA)
    note = agreement_note(compared)
    context.log.info(note)
    yield dg.MaterializeResult(
        asset_key="teacher_agreement", metadata=agreement_metadata(compared, counts, n, n_diff, note)
    )
    yield dg.MaterializeResult(
        asset_key="teacher_disagreements",
        metadata=table_metadata(DISAGREEMENTS_SCHEMA, n_diff, compared.diffs[:10], note=note),
    )


@dg.asset(
    group_name="labeling",
    kinds={"duckdb"},
    code_version="1",
    owners=["team:metacan"],
    deps=["machine_scores"],
)
def label_batches(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Named batches of works for the teachers (table `label_batches`): adds every
    active-learning proposal of `machine_round_proposals` not yet in batch `active_learning` (source
    `machine_scores round <n>: <reason>`), idempotently; batches loaded by hand stay as they are.

    The loop closes on the next run: a teacher with `coverage = "batch:active_learning"` (or
    `"sample+batch:active_learning"`) labels the batch when its `direct_labels_<name>` asset is next materialized.
    That edge, `label_batches -> direct_labels_codex`, is not drawn: `machine_scores` reads the direct labels, so it
    would make a cycle. Metadata: rows per batch and the newest round's proposals.
    """
    with storage.connect() as con:
        added = add_round_proposals(con)
        per_batch = rows_per_batch(con)
        metadata = batches_metadata(con, added, per_batch)
    context.log.info(f"label_batches: {added} active-learning proposals added; rows per batch {per_batch}")
    return dg.MaterializeResult(metadata=metadata)
