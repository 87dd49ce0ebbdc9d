"""The coding step's Dagster asset (issue 16, "Coding"): ``coding_tasks`` loads the current protocol's audit sample
into the coding store (:mod:`.coding_tasks`), which the coding pages of ``metacan serve`` hand to the coders."""

import dagster as dg

from .. import settings
from ..meta import table_metadata
from ..storage import MetacanStorage
from ..tables.coding import CODING_TASKS_SCHEMA
from .coding import CodingStore
from .coding_tasks import load_coding_tasks


@dg.asset(
    group_name="audit",
    kinds={"python", "sqlite"},
    code_version="1",
    owners=["team:metacan"],
    deps=["audit_sample", "frame"],
)
def coding_tasks(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """The coding tasks of the current protocol in the coding store data/audit/coding.sqlite (SPEC section 10): one
    task per work the audit sample drew, carrying the protocol id, its queue position (a salted hash: strata
    interleaved) and an evidence version (title, year, language, type, venue, Canadian institutions, funders,
    keywords, DOI and full-text link; never a label, score, prediction, stratum or weight; the abstract is fetched
    live by the coding page). Idempotent: a re-run adds only works not loaded yet; answers are never touched. Also
    `metacan coding load-tasks` (the same code). Metadata: added, evidence_changed, moved, unchanged, missing."""
    with CodingStore(settings.coding_store_path(storage.data_dir)) as store:
        out = load_coding_tasks(storage, store, source=f"asset:{context.run.run_id}")
        progress = store.task_progress(out["protocol_id"])
    context.log.info(
        f"coding_tasks {out['protocol_id']}: {out['added']} added, {out['unchanged']} unchanged, "
        f"{out['evidence_changed']} with new evidence, {len(out['missing'])} sampled works not in the frame"
    )
    return dg.MaterializeResult(
        metadata=table_metadata(
            CODING_TASKS_SCHEMA,
            progress["tasks"],
            None,
            None,
            protocol_id=out["protocol_id"],
            sample_works=out["sample_works"],
            added=out["added"],
            evidence_changed=out["evidence_changed"],
            moved=out["moved"],
            unchanged=out["unchanged"],
            missing=len(out["missing"]),
            missing_ids=", ".join(out["missing"][:50]) or "(none)",
            works_with_two_coders=progress["two_coders"],
            answers=progress["answers"],
        )
    )
