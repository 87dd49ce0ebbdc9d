"""The ``sample_design`` asset (SPEC section 5); its blocking check is in :mod:`.checks`."""

import shutil

import dagster as dg
from pydantic import Field

from ..meta import counts_markdown, table_metadata
from ..storage import MetacanStorage, scratch_path
from ..tables.sampling import DESIGN_SCHEMA
from .design import DESIGN_INPUT_COLUMNS, META_SIGNALS, EnrichmentRule, StrataSpec, stream_design


class EnrichmentStratumConfig(dg.Config):
    """An enrichment stratum (`design.EnrichmentRule`): title regex and/or venue ids, its own fraction."""

    name: str
    title_pattern: str = ""
    venue_ids: list[str] = []
    fraction: float = 1.0


class SampleDesignConfig(dg.Config):
    """Sample size, strata and hash salt; a new salt draws a new sample (SPEC section 5)."""

    fraction: float = Field(default=0.3, description="Share of each ordinary stratum drawn, in (0, 1].")
    min_per_stratum: int = Field(default=1, description="At least this many per stratum (>= 1: every pi > 0).")
    salt: str = "metacan-sample-v1"
    stratify_by: list[str] = Field(
        default=["route", "abstract"], description="Dimensions of the ordinary strata: route, language, abstract."
    )
    enrichment: list[EnrichmentStratumConfig] = Field(
        default=[
            {
                "name": META_SIGNALS.name,
                "title_pattern": META_SIGNALS.title_pattern,
                "venue_ids": [],
                "fraction": META_SIGNALS.fraction,
            }
        ],
        description="Enrichment strata, first match wins (default: titles with meta-research vocabulary, all sampled).",
    )

    def strata_spec(self) -> StrataSpec:
        """The :class:`~.design.StrataSpec` of this config (ValueError names a bad dimension, pattern or fraction)."""
        rules = [
            EnrichmentStratumConfig(**e) if isinstance(e, dict) else e for e in self.enrichment
        ]  # a default stays a dict
        return StrataSpec(
            tuple(self.stratify_by),
            tuple(EnrichmentRule(e.name, e.title_pattern, tuple(e.venue_ids), e.fraction) for e in rules),
        )


@dg.asset(group_name="labeling", kinds={"python", "parquet"}, code_version="1", owners=["team:metacan"], deps=["frame"])
def sample_design(
    context: dg.AssetExecutionContext, config: SampleDesignConfig, storage: MetacanStorage
) -> dg.MaterializeResult:
    """Strata, selection probabilities and design weights over the sampling frame (SPEC section 5).

    One row per sampling-frame work (``in_sampling_frame``): stratum (enrichment strata by title or
    venue first, then route combination x abstract availability by default; config ``stratify_by`` and
    ``enrichment``), N_h, n_h, salted-hash rank, ``selection_probability = n_h / N_h``,
    ``design_weight = 1 / pi`` and ``in_sample``. The ``codex`` teacher labels the works in the sample.
    """
    (storage.root / "tmp").mkdir(parents=True, exist_ok=True)
    workdir = scratch_path(storage.root / "tmp", "sample-design-")
    try:
        batches = storage.iter_batches("frame", 50_000, DESIGN_INPUT_COLUMNS)  # filter first, then sample
        design = stream_design(
            batches, config.fraction, config.min_per_stratum, config.salt, config.strata_spec(), workdir
        )
        n = storage.write_table("sample_design", design, schema=DESIGN_SCHEMA)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    with storage.connect(read_only=True) as con:
        sizes = dict(con.execute("SELECT DISTINCT stratum, stratum_size FROM sample_design").fetchall())
        sampled = dict(
            con.execute("SELECT stratum, count(*) FROM sample_design WHERE in_sample GROUP BY ALL").fetchall()
        )
        preview = con.execute("SELECT * FROM sample_design WHERE in_sample LIMIT 10").to_arrow_table().to_pylist()
    context.log.info(
        f"sample_design: {n} sampling-frame works in {len(sizes)} strata; {sum(sampled.values())} in the sample"
    )
    return dg.MaterializeResult(
        metadata=table_metadata(
            DESIGN_SCHEMA,
            n,
            preview,
            ["id", "stratum", "selection_probability", "design_weight"],
            strata=len(sizes),
            sample_size=sum(sampled.values()),
            stratum_sizes=counts_markdown(sizes, "stratum", "N_h"),
            stratum_sample_sizes=counts_markdown(sampled, "stratum", "n_h"),
        )
    )
