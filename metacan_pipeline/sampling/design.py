"""Stratified sample design over the sampling frame (SPEC section 5).

Strata partition the sampling frame (frame rows with ``in_sampling_frame``), from configuration
(:class:`StrataSpec`): first the enrichment strata, in order (a work whose title matches a rule's
pattern, or whose venue is in its list, belongs to the first such rule's stratum ``enrich:<name>``
and is sampled at that rule's fraction: the oversampling of likely positives the original system
used), then every other work by the chosen dimensions (``route`` combination, ``language``,
``abstract`` availability). Within a stratum works are ordered by a salted SHA-256 of the id and the
first ``n_h`` are taken, ``n_h = max(min_per_stratum, round(fraction_h * N_h))`` capped at ``N_h``;
``pi = n_h / N_h`` and ``design_weight = 1 / pi``. Every stratum gets at least one draw, so no work has
selection probability 0. The sample is drawn after the frame filter.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..tables.sampling import DESIGN_PLAN_SCHEMA, STAGED_STRATA_SCHEMA


def salted_hash(work_id: str, salt: str) -> str:
    """Hex SHA-256 of ``salt:id``: a stable, unpredictable order within a stratum."""
    return hashlib.sha256(f"{salt}:{work_id}".encode()).hexdigest()


DIMENSIONS = ("route", "language", "abstract")


@dataclass(frozen=True)
class EnrichmentRule:
    """An enrichment stratum ``enrich:<name>``: works whose ``title_text`` matches ``title_pattern`` (a
    case-insensitive regular expression) or whose ``venue_id`` is in ``venue_ids``, sampled at ``fraction``."""

    name: str
    title_pattern: str = ""
    venue_ids: tuple[str, ...] = ()
    fraction: float = 1.0


@dataclass(frozen=True)
class StrataSpec:
    """How strata are formed: enrichment rules first (first match wins), then ``dimensions`` (a subset of
    :data:`DIMENSIONS`, in order)."""

    dimensions: tuple[str, ...] = ("route", "abstract")
    enrichment: tuple[EnrichmentRule, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        bad = [d for d in self.dimensions if d not in DIMENSIONS]
        if bad:
            raise ValueError(f"stratify_by {bad} unknown; expected a subset of {list(DIMENSIONS)}")
        for rule in self.enrichment:
            if not 0 < rule.fraction <= 1:
                raise ValueError(f"enrichment stratum {rule.name!r}: fraction {rule.fraction} not in (0, 1]")
            if not rule.title_pattern and not rule.venue_ids:
                raise ValueError(
                    f"enrichment stratum {rule.name!r} has neither a title_pattern nor venue_ids: it would be empty"
                )
            try:
                re.compile(rule.title_pattern)
            except re.error as exc:
                raise ValueError(
                    f"enrichment stratum {rule.name!r}: title_pattern is not a regular expression ({exc})"
                ) from exc


#: Title signals of meta-research vocabulary (SPEC section 3's categories), used to oversample likely positives.
META_SIGNALS = EnrichmentRule(
    "meta_signal",
    r"meta-?research|meta-?science|research (integrity|misconduct|practice|waste|funding|evaluation)|reproducib|replicat|"
    r"peer review|preprint|open (access|science|data)|data sharing|preregist|publication bias|reporting (quality|guideline)|"
    r"bibliometri|scientometri|citation|retract|questionable research|p-hacking|spin\b|trial registr",
    fraction=1.0,
)


def stratum_of(row: dict, spec: StrataSpec = StrataSpec()) -> str:
    """The stratum name of a frame row under ``spec``, e.g. ``enrich:meta_signal`` or ``ca_aff|abstract``."""
    for rule in spec.enrichment:
        if (rule.venue_ids and row.get("venue_id") in rule.venue_ids) or (
            rule.title_pattern and re.search(rule.title_pattern, row.get("title_text") or "", re.I)
        ):
            return f"enrich:{rule.name}"
    parts = {
        "route": row["route_key"],
        "language": row.get("language") or "unknown_language",
        "abstract": "abstract" if row["has_abstract"] else "no_abstract",
    }
    return "|".join(parts[d] for d in spec.dimensions) or "all"


def draw_sample(
    rows: list[dict], fraction: float, min_per_stratum: int, salt: str, spec: StrataSpec = StrataSpec()
) -> list[dict]:
    """Design rows (:data:`DESIGN_SCHEMA`) for every sampling-frame row in ``rows``.

    ``rows`` need ``id``, ``route_key``, ``has_abstract`` (and ``language``, ``title_text``, ``venue_id``
    when ``spec`` uses them). Raises ValueError for a fraction outside (0, 1] or ``min_per_stratum < 1``
    (either would give some work selection probability 0).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"sample fraction must be in (0, 1], got {fraction}")
    if min_per_stratum < 1:
        raise ValueError(f"min_per_stratum must be >= 1 so that every pi > 0, got {min_per_stratum}")
    strata: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        strata[stratum_of(r, spec)].append(r)
    fractions = {f"enrich:{rule.name}": rule.fraction for rule in spec.enrichment}
    out = []
    for stratum, members in sorted(strata.items()):
        n = stratum_sample_size(len(members), fractions.get(stratum, fraction), min_per_stratum)
        out.extend(stratum_design([r["id"] for r in members], stratum, n, salt))
    return out


def stratum_sample_size(big_n: int, fraction: float, min_per_stratum: int) -> int:
    """``n_h = max(min_per_stratum, round(fraction * N_h))`` capped at ``N_h`` (Python's round: half to even)."""
    return min(big_n, max(min_per_stratum, round(fraction * big_n)))


def stratum_probability(stratum: str, big_n: int, n: int) -> tuple[float, float]:
    """``(pi, design_weight)`` of the works of a stratum of ``N_h = big_n`` works of which ``n`` are drawn:
    ``pi = n / N_h``, ``design_weight = 1 / pi``. Raises ValueError for ``n`` outside ``[1, N_h]`` (``n = 0`` would
    give every work of the stratum selection probability 0)."""
    if not 1 <= n <= big_n:
        raise ValueError(f"stratum {stratum!r}: sample size {n} not in [1, N_h = {big_n}]: every pi must be > 0")
    pi = n / big_n
    return pi, 1.0 / pi


def stratum_design(ids: list[str], stratum: str, n: int, salt: str) -> list[dict]:
    """The design rows of one stratum of ``N_h = len(ids)`` works: ordered by salted hash (ties by id), the first
    ``n`` in the sample, ``pi`` and ``design_weight`` of :func:`stratum_probability` (which raises ValueError for
    ``n`` outside ``[1, N_h]``)."""
    big_n = len(ids)
    pi, weight = stratum_probability(stratum, big_n, n)
    return [
        {
            "id": wid,
            "stratum": stratum,
            "stratum_size": big_n,
            "stratum_sample_size": n,
            "hash_rank": rank,
            "selection_probability": pi,
            "design_weight": weight,
            "in_sample": rank < n,
        }
        for rank, wid in enumerate(sorted(ids, key=lambda i: (salted_hash(i, salt), i)))
    ]


#: Columns of the frame the design reads (:func:`stage_strata`).
DESIGN_INPUT_COLUMNS = ["id", "route_key", "has_abstract", "language", "title_text", "venue_id", "in_sampling_frame"]


def stage_strata(batches: Iterable[pa.RecordBatch], spec: StrataSpec, salt: str, path: Path) -> dict[str, int]:
    """Write ``(id, stratum, salted hash)`` of every sampling-frame row of ``batches`` (frame columns
    :data:`DESIGN_INPUT_COLUMNS`) to the Parquet file ``path``, one batch at a time (filter first, then
    stratify); returns ``{stratum: N_h}``."""
    sizes: dict[str, int] = defaultdict(int)
    with pq.ParquetWriter(str(path), STAGED_STRATA_SCHEMA) as writer:
        for batch in batches:
            rows = [r for r in batch.to_pylist() if r["in_sampling_frame"]]
            strata = [stratum_of(r, spec) for r in rows]
            for stratum in strata:
                sizes[stratum] += 1
            ids = [r["id"] for r in rows]
            hashes = [salted_hash(i, salt) for i in ids]
            writer.write_table(pa.table({"id": ids, "stratum": strata, "hash": hashes}, schema=STAGED_STRATA_SCHEMA))
    return dict(sizes)


def stream_design(
    batches: Iterable[pa.RecordBatch],
    fraction: float,
    min_per_stratum: int,
    salt: str,
    spec: StrataSpec,
    workdir: Path,
) -> Iterator[pa.RecordBatch]:
    """The rows of :func:`draw_sample` (same values, same order: strata by name, then hash rank) as Arrow
    batches, for a frame read in ``batches``: the strata and hashes are staged to a Parquet file in
    ``workdir``, and DuckDB (1 GB, spilling to ``workdir``) ranks each stratum by (hash, id), so memory
    holds one batch, not the frame. Raises ValueError as :func:`draw_sample` (before anything is yielded)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"sample fraction must be in (0, 1], got {fraction}")
    if min_per_stratum < 1:
        raise ValueError(f"min_per_stratum must be >= 1 so that every pi > 0, got {min_per_stratum}")
    workdir.mkdir(parents=True, exist_ok=True)
    staged = workdir / "strata.parquet"
    sizes = stage_strata(batches, spec, salt, staged)
    fractions = {f"enrich:{rule.name}": rule.fraction for rule in spec.enrichment}
    n_h = {h: stratum_sample_size(big_n, fractions.get(h, fraction), min_per_stratum) for h, big_n in sizes.items()}
    for h, n in n_h.items():
        if not 1 <= n <= sizes[h]:
            raise ValueError(f"stratum {h!r}: sample size {n} not in [1, N_h = {sizes[h]}]: every pi must be > 0")
    plan = pa.table(  # noqa: F841 - read by DuckDB below
        {"stratum": list(sizes), "big_n": list(sizes.values()), "n": [n_h[h] for h in sizes]},
        schema=DESIGN_PLAN_SCHEMA,
    )
    con = duckdb.connect(config={"memory_limit": "1GB", "temp_directory": str(workdir / "spill")})
    try:
        con.register("plan", plan)
        reader = con.execute(
            f"""SELECT id, stratum, big_n AS stratum_size, n AS stratum_sample_size, hash_rank,
                       n::DOUBLE / big_n::DOUBLE AS selection_probability,
                       1::DOUBLE / (n::DOUBLE / big_n::DOUBLE) AS design_weight, hash_rank < n AS in_sample
                FROM (SELECT id, stratum, row_number() OVER (PARTITION BY stratum ORDER BY hash, id) - 1 AS hash_rank
                      FROM read_parquet({_literal(str(staged))})) JOIN plan USING (stratum)
                ORDER BY stratum, hash_rank"""
        ).to_arrow_reader(50_000)
        yield from reader
    finally:
        con.close()


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
