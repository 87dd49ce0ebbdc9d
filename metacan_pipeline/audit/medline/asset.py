"""The ``medline_study_design`` asset (group ``audit``): study design against MEDLINE, the one external reference of
the study-design labels (SPEC section 11; the original protocol, section 5.5)."""

import datetime as dt

import dagster as dg
from pydantic import Field

from ... import settings
from ...meta import table_metadata
from ...resources import OpenAlexFiles
from ...storage import MetacanStorage
from ...tables.medline import MEDLINE_AGREEMENT_SCHEMA
from ..instruments.measure import TEACHERS
from .agreement import MedlineGate
from .eutils import MAX_BATCH, EutilsClient, MedlineArchive
from .measure import measure_medline
from .summary import MEANS, medline_markdown


class MedlineConfig(dg.Config):
    """The MEDLINE gate and the efetch batch size (the mode, bound and contact come from the environment:
    ``METACAN_MEDLINE``, ``METACAN_MEDLINE_MAX_PMIDS``, ``METACAN_NCBI_EMAIL``, ``NCBI_API_KEY``)."""

    min_n: int = Field(default=30, description="Gate: fewest eligible hand-indexed records with a decision.")
    min_positives: int = Field(default=10, description="Gate: fewest NLM positives among them.")
    precision_lower: float = Field(default=0.80, description="Gate: lower 95% bound on precision.")
    recall_lower: float = Field(default=0.70, description="Gate: lower 95% bound on recall.")
    batch_size: int = Field(default=MAX_BATCH, description=f"PMIDs per efetch request (1..{MAX_BATCH}).")


def _client_factory(batch_size: int, log):
    """What builds the efetch client on the archive, its settings read (and a bad one refused) now."""
    url, (email, tool) = settings.eutils_url(), settings.ncbi_contact()
    key = settings.secret(settings.NCBI_API_KEY_ENV)

    def build(archive: MedlineArchive) -> EutilsClient:
        return EutilsClient(url, archive, api_key=key, email=email, tool=tool, batch_size=batch_size, logger=log)

    return build


@dg.asset(
    group_name="audit",
    kinds={"python", "duckdb"},
    code_version="1",
    owners=["team:metacan"],
    deps=["audit_inputs"],  # the frame, the predictions and every direct_labels_<teacher> (audit/inputs.py)
)
def medline_study_design(
    context: dg.AssetExecutionContext, config: MedlineConfig, storage: MetacanStorage, openalex: OpenAlexFiles
) -> dg.MaterializeResult:
    """Study design against MEDLINE: the frame works with a PMID (OpenAlex ids.pmid) and their NLM publication types
    from E-utilities efetch (METACAN_MEDLINE=replay, the default: the archived answers only, no request; fetch: at
    most METACAN_MEDLINE_MAX_PMIDS PMIDs not answered yet are asked, 3 requests a second, 10 with NCBI_API_KEY, every
    answer archived under <data>/medline_archive; off). Per study-design class (randomized trial, observational,
    systematic review, meta-analysis, case report, qualitative: independent binary heads), per source of study-design
    labels (each teacher's direct labels, each student head) and per indexing group (hand = the reference; Curated and
    Automated = agreement with another machine), on the records eligible for the class (its publication type
    existed): agreement, precision and recall with 95% Clopper-Pearson lower bounds, and the gate on the hand-indexed
    records; a class that fails ships as an unvalidated score."""
    try:
        gate = MedlineGate(config.min_n, config.min_positives, config.precision_lower, config.recall_lower)
        mode, max_pmids = settings.medline_mode(), settings.medline_max_pmids()
        factory = _client_factory(config.batch_size, context.log) if mode == "fetch" else None
        if not 1 <= config.batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be 1..{MAX_BATCH} PMIDs per efetch request, got {config.batch_size}")
    except ValueError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    m = measure_medline(
        storage,
        openalex.path_of,
        TEACHERS,
        gate,
        mode=mode,
        max_pmids=max_pmids,
        client=factory,
        run_id=context.run.run_id,
        now=now,
    )
    storage.write_table("medline_records", m.records)
    n = storage.write_table("medline_study_design", m.agreement)
    fetched = m.fetch
    context.log.info(
        f"medline_study_design ({m.mode}): {m.frame_pmids} frame works with a PMID, {m.answered} answered, "
        f"{m.with_record} MEDLINE records ({', '.join(f'{k} {v}' for k, v in sorted(m.by_indexing.items())) or 'none'})"
        + (
            f"; asked {fetched.asked} PMIDs in {fetched.requests} requests, {fetched.failed_batches} batches failed"
            if fetched
            else ""
        )
        + (f"; {m.note}" if m.note else "")
    )
    frame = m.agreement.to_pandas()
    return dg.MaterializeResult(
        metadata=table_metadata(
            MEDLINE_AGREEMENT_SCHEMA,
            n,
            None,
            None,
            mode=m.mode,
            status=m.note or f"{m.with_record} MEDLINE records",
            frame_works_with_pmid=m.frame_pmids,
            pmids_answered=m.answered,
            medline_records=m.with_record,
            records_by_indexing=dg.MetadataValue.json(m.by_indexing),
            pmids_asked_this_run=fetched.asked if fetched else 0,
            efetch_requests_this_run=fetched.requests if fetched else 0,
            efetch_errors=dg.MetadataValue.json(fetched.errors[:20] if fetched else []),
            damaged_archive_files=dg.MetadataValue.json(m.damaged[:20]),
            gate=dg.MetadataValue.json(
                {
                    "min_n": gate.min_n,
                    "min_positives": gate.min_positives,
                    "precision_lower": gate.precision_lower,
                    "recall_lower": gate.recall_lower,
                }
            ),
            study_design_medline=dg.MetadataValue.md(medline_markdown(frame, m.note)),
        )
    )


def medline_report_markdown(storage: MetacanStorage) -> str:
    """What the validation report says of study design against MEDLINE: the stored table's Markdown, or where it
    will be once ``medline_study_design`` has run."""
    if not storage.has_table("medline_study_design"):
        return f"**Study design against MEDLINE** (asset `medline_study_design`, not run yet). {MEANS}"
    frame = storage.read_table("medline_study_design").to_pandas()
    return medline_markdown(frame.drop(columns=["run_id", "computed_at"]))
