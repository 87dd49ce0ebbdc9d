"""The ``release`` asset (SPEC sections 8 and 10); its blocking check ``release_matches_its_hashes`` is in :mod:`.checks`.

How a release is cut: materialize ``release`` with the run config ``cut: true`` (Dagster launchpad ``ops: release:
config: {cut: true, release_version: "2026.1"}``). With the default config (``cut: false``, what ``metacan run``,
``metacan_all`` and ``metacan_build`` use) it cuts nothing: it names the newest release and the check re-hashes the
bundles, so no schedule, sensor or weekly frame refresh ever cuts a release by itself. The work is in :mod:`.bundle`.
"""

import dagster as dg
from pydantic import Field

from ..meta import counts_markdown
from ..storage import MetacanStorage
from ..teachers.core.registry import load_registry
from .bundle import ReleaseError, cut_release, registered
from .citation import CitationError
from .fair import DEFAULT_LICENSE


class ReleaseConfig(dg.Config):
    """Run configuration of ``release`` (Dagster launchpad: ``ops: release: config:``)."""

    cut: bool = Field(
        default=False,
        description="Cut a release of the current frame, labels, predictions, machine scores, human validation and "
        "records. False (the default of every job): cut nothing, name the newest release and verify it.",
    )
    release_version: str = Field(
        default="",
        description="The version of a new release (e.g. '2026.1'). Empty: '<YYYY.MM.DD>-<8 hex of its content>'. "
        "An unchanged input reuses the release already cut; a version already used by other content is refused.",
    )
    citation_authors: list[str] = Field(
        default=["metacan_pipeline contributors"],
        description="The authors CITATION.cff names (entity names: a research group, a project).",
    )
    license: str = Field(
        default=DEFAULT_LICENSE,
        description="The licence ro-crate-metadata.json gives the release, as a URL. Default: CC0 1.0, as the "
        "OpenAlex records it is built from.",
    )


@dg.asset(
    deps=[
        dg.AssetKey("work_records"),
        dg.AssetKey("filter_recall"),
        dg.AssetKey("venue_known_item_recall"),
        dg.AssetKey("medline_study_design"),
    ],
    kinds={"parquet", "json"},
    group_name="publishing",
    code_version="1",
    owners=["team:metacan"],
)
def release(context: dg.AssetExecutionContext, config: ReleaseConfig, storage: MetacanStorage) -> dg.MaterializeResult:
    """A frozen, versioned release bundle at ``data/releases/<release_version>/`` (SPEC sections 8 and 10).

    Downstream of ``work_records``, so ``records_may_ship`` (blocking) stops it: nothing the check refused is frozen.
    With ``cut: true`` it freezes the frame, every direct label, the predictions, the machine scores, the
    ``human_validation`` rows as of now, the validation report with the study it rests on (audit sample, answers under
    the coders' pseudonyms, decisions; refused when the report does not recompute from it), filter recall and
    known-item venue recall (when materialized; a non-probability bound, apart from the design-based estimates) and
    the records into
    Parquet tables, ``records.jsonl``, the model cards of the classifier versions (``model_cards/<version>/``),
    ``README.md``, ``codemeta.json`` and ``ro-crate-metadata.json`` (RO-Crate 1.1), ``release.json``
    (content hashes, counts), ``SHA256SUMS`` and ``CITATION.cff``; an input already cut reuses its
    release. Works that enter the frame later are the rolling layer, on the next ``work_records``.
    Fails (no retry) naming the input when a version is invalid or taken, a table is missing, or CFF does not validate.
    """
    newest = registered(storage)[-1:] if not config.cut else []
    if not config.cut:
        name = newest[0]["release_version"] if newest else "none"
        context.log.info(f"release: no release cut (config cut: false); the newest release is {name}")
        return dg.MaterializeResult(
            metadata={"cut": False, "release_version": name, "releases": len(registered(storage))}
        )
    try:
        cut = cut_release(
            storage,
            [f"direct_labels_{t}" for t in load_registry()],
            config.release_version,
            config.citation_authors,
            context.run.run_id,
            license_url=config.license,
        )
    except (ReleaseError, CitationError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    manifest = cut.manifest
    context.log.info(
        f"release: {cut.release_version} ({'reused: its inputs are unchanged' if cut.reused else 'cut'}) at {cut.folder}"
    )
    return dg.MaterializeResult(
        metadata={
            "cut": True,
            "reused": cut.reused,
            "release_version": cut.release_version,
            "frame_build_id": manifest["frame_build_id"],
            "classifier_version": manifest["classifier_version"],
            "content_sha256": manifest["content_sha256"],
            "folder": dg.MetadataValue.path(str(cut.folder)),
            "bytes": sum(f["bytes"] for f in manifest["files"]),
            "dagster/row_count": manifest["counts"]["frame"],
            "rows_by_table": counts_markdown(manifest["counts"], "table", "rows"),
            "model_cards": dg.MetadataValue.json(manifest.get("model_cards", {})),
        }
    )
