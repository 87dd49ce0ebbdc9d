"""The audit sample (SPEC sections 5 and 10): a stratified probability sample of the frame for human coding, separate
from the teachers' sample (``sample_design``), drawn under one locked protocol.

**Population**: every frame work (``frame``), paratext and short titles included: the audit checks what the
classifier says about every work it publishes a prediction for. A frame work without a prediction (the blocking
check ``predictions_score_every_frame_work_once`` forbids it) counts as predicted negative, far from every threshold.

The machine state of a work on each evaluated head (consensus, candidate, near) is read as :mod:`.classifier` describes.

**Stratum rule** (:func:`stratum_sql`, a DuckDB expression; first match wins, so the strata partition the frame):

1. ``trained_on``: the work trained or calibrated the classifier under test (:func:`.classifier.trained_ids`); with
   ``trained_works = "exclude"`` the stratum is ``excluded:trained_on`` instead, with ``pi = 0``, no design
   weight and no draw: the audited population is then the frame minus those works, which the protocol states;
2. ``consensus``: consensus-positive on any evaluated head;
3. ``candidate_only``: candidate-positive on any evaluated head, consensus on none (the boundary);
4. ``negative_near``: near the threshold on any evaluated head (the boundary);
5. ``french``: language ``fr``; 6. ``no_abstract``: no abstract; 7. ``about_ca_only``: the only route is
   ``about_ca`` (the lexicon; no affiliation, funder or venue evidence);
8. ``negative_far``: every other work.

The boundary comes before the language, abstract and route strata on purpose: every work near the decision, French
or not, is drawn at the boundary's high rate, and the group strata then lift the far negatives of small groups out
of the bulk, where a proportionate draw would find few of them (per-group recall needs them).

**Draw**: the SPEC section 5 rule of :mod:`metacan_pipeline.sampling.design`, reused, not restated:
``n_h = max(min_n, round(fraction_h * N_h))`` capped at ``N_h`` (:func:`~metacan_pipeline.sampling.design.stratum_sample_size`),
salted-hash order within the stratum (:func:`~metacan_pipeline.sampling.design.salted_hash`, ties by id), the first
``n_h`` drawn, ``pi = n_h / N_h``, ``design_weight = 1 / pi``
(:func:`~metacan_pipeline.sampling.design.stratum_probability`). ``min_n >= 1``, so every work of the population has
``pi > 0``. The salt is the protocol's (default ``metacan-audit-v1``, not the teacher sample's), so the audit draw is
independent of the teachers' sample, and two protocols with one salt draw overlapping works from like strata.
DuckDB assigns the strata and ranks the works by the salted hash (:func:`draw_audit_sample`, in the audit's private
DuckDB of :func:`scratch`, spilling to disk past its memory limit): only the stratum sizes come to Python, where
``n_h``, ``pi`` and the weight are computed per stratum, and the rows go to ``audit_sample`` as Arrow batches; the
asset then reads back the per-stratum counts and the drawn works (:func:`drawn_sample`), never a row per frame work.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...sampling.design import stratum_probability, stratum_sample_size
from ...storage import MetacanStorage, sql_literal
from ...tables.audit import AUDIT_PLAN_SCHEMA, AUDIT_SAMPLE_SCHEMA
from .classifier import score_sql, state_sql
from .locked import EXCLUDED_TRAINED, STRATA, AuditProtocol, StratumPlan
from .scratch import scratch

FRENCH = "fr"
ABOUT_CA_ONLY_ROUTE = "about_ca"


#: Default plans (stratum, fraction, min_n, expected positive rate): fixed sizes (fraction 0) for a coding budget of
#: about 660 works whatever the frame's size, the boundary strata drawn at least at 5% and largest.
DEFAULT_PLANS: tuple[StratumPlan, ...] = (
    StratumPlan("trained_on", 0.0, 20, 0.10),
    StratumPlan("consensus", 0.0, 120, 0.80),
    StratumPlan("candidate_only", 0.05, 150, 0.40),
    StratumPlan("negative_near", 0.05, 150, 0.10),
    StratumPlan("french", 0.0, 40, 0.01),
    StratumPlan("no_abstract", 0.0, 40, 0.01),
    StratumPlan("about_ca_only", 0.0, 40, 0.01),
    StratumPlan("negative_far", 0.0, 100, 0.005),
)


def stratum_plans(
    fractions: dict[str, float], min_sizes: dict[str, int], rates: dict[str, float]
) -> tuple[StratumPlan, ...]:
    """:data:`DEFAULT_PLANS` with the given values put in; a stratum a mapping does not name keeps its default.
    Raises ValueError naming an unknown stratum (or a value out of range, :class:`StratumPlan`)."""
    for mapping in (fractions, min_sizes, rates):
        unknown = sorted(set(mapping) - set(STRATA))
        if unknown:
            raise ValueError(f"strata {unknown} unknown; the audit strata are {list(STRATA)}")
    return tuple(
        StratumPlan(
            p.name,
            float(fractions.get(p.name, p.fraction)),
            int(min_sizes.get(p.name, p.min_n)),
            float(rates.get(p.name, p.expected_positive_rate)),
        )
        for p in DEFAULT_PLANS
    )


# --- the machine state of every frame work ----------------------------------------------------------------------------


def machine_state_sql(protocol: AuditProtocol) -> str:
    """Per frame work: id, language, has_abstract, route_key, predicted, and whether it is consensus, candidate or
    near on any evaluated head of ``protocol`` (module docstring)."""

    def any_of(terms: list[str]) -> str:
        return "(" + " OR ".join(terms) + ")" if terms else "false"

    near = [
        f"coalesce({score_sql(h.head)} >= {float((1 - protocol.near_band) * h.threshold)!r}, false)"
        for h in protocol.heads
        if h.threshold is not None and h.threshold > 0
    ]
    return (
        "SELECT f.id, f.language, f.has_abstract, f.route_key, p.id IS NOT NULL AS predicted, "
        f"{any_of([state_sql(h.head, 'consensus') for h in protocol.heads])} AS any_consensus, "
        f"{any_of([state_sql(h.head, 'candidate') for h in protocol.heads])} AS any_candidate, "
        f"{any_of(near)} AS any_near "
        "FROM frame f LEFT JOIN predictions p ON p.id = f.id"
    )


def machine_state_view(con: duckdb.DuckDBPyConnection, protocol: AuditProtocol, trained: set[str]) -> None:
    """Create the TEMP VIEW ``machine_state`` of ``con``: :func:`machine_state_sql` with ``trained_on``, whether the
    work is in ``trained`` (:func:`trained_ids`: the sample's works, registered as an Arrow table)."""
    con.register("audit_trained_works", pa.table({"id": pa.array(sorted(trained), pa.string())}))
    con.execute(
        "CREATE OR REPLACE TEMP VIEW machine_state AS SELECT m.*, "
        "coalesce(m.id IN (SELECT id FROM audit_trained_works), false) AS trained_on "
        f"FROM ({machine_state_sql(protocol)}) m"
    )


# --- strata and the draw ----------------------------------------------------------------------------------------------


def stratum_sql(trained_works: str = "own_stratum") -> str:
    """The stratum of a work as a DuckDB expression over the columns of ``machine_state`` (module docstring: the
    first-match order; a missing flag is false, a missing abstract flag is no abstract)."""
    trained = "trained_on" if trained_works == "own_stratum" else EXCLUDED_TRAINED
    return f"""CASE
        WHEN coalesce(trained_on, false) THEN {sql_literal(trained)}
        WHEN coalesce(any_consensus, false) THEN 'consensus'
        WHEN coalesce(any_candidate, false) THEN 'candidate_only'
        WHEN coalesce(any_near, false) THEN 'negative_near'
        WHEN language = {sql_literal(FRENCH)} THEN 'french'
        WHEN NOT coalesce(has_abstract, false) THEN 'no_abstract'
        WHEN route_key = {sql_literal(ABOUT_CA_ONLY_ROUTE)} THEN 'about_ca_only'
        ELSE 'negative_far' END"""


#: Rows per Arrow batch of the drawn design (ids and short strings: a few MB).
DRAW_BATCH_ROWS = 50_000


def draw_audit_sample(
    con: duckdb.DuckDBPyConnection, protocol: AuditProtocol, batch_rows: int = DRAW_BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """``audit_sample`` rows (:data:`AUDIT_SAMPLE_SCHEMA`) as Arrow batches, one row per row of the relation
    ``machine_state`` of ``con`` (:func:`machine_state_view`, or any relation of its columns), in stratum then hash
    order. DuckDB stratifies (:func:`stratum_sql`) into a TEMP table and ranks each stratum by the salted hash of
    the id (``sha256('<salt>:<id>')``, ties by id: :func:`~metacan_pipeline.sampling.design.salted_hash`); only the
    stratum sizes come to Python, where ``n_h``, ``pi`` and the design weight are computed per stratum. Raises
    ValueError, before any batch, when an id occurs twice (the strata would not partition the frame) or a stratum's
    ``n_h`` is out of range."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE audit_strata AS SELECT id, "
        f"{stratum_sql(protocol.trained_works)} AS stratum, trained_on, language, has_abstract, route_key "
        "FROM machine_state"
    )
    rows, ids = con.execute("SELECT count(*), count(DISTINCT id) FROM audit_strata").fetchone()
    if rows != ids:
        raise ValueError(f"{rows - ids} frame id(s) occur twice: the strata would not partition the frame")
    sizes = dict(con.execute("SELECT stratum, count(*) FROM audit_strata GROUP BY stratum").fetchall())
    plan = []
    for pos, stratum in enumerate(s for s in (EXCLUDED_TRAINED, *STRATA) if s in sizes):
        big_n = sizes[stratum]
        if stratum == EXCLUDED_TRAINED:  # outside the audited population: pi 0, no weight, never drawn
            plan.append({"stratum": stratum, "pos": pos, "big_n": big_n, "n": 0, "pi": 0.0, "weight": None})
            continue
        p = protocol.plan(stratum)
        n = stratum_sample_size(big_n, p.fraction, p.min_n)
        pi, weight = stratum_probability(stratum, big_n, n)
        plan.append({"stratum": stratum, "pos": pos, "big_n": big_n, "n": n, "pi": pi, "weight": weight})
    con.register("audit_plan", pa.Table.from_pylist(plan, schema=AUDIT_PLAN_SCHEMA))
    reader = con.execute(
        """SELECT $protocol_id AS protocol_id, s.id, s.stratum, p.big_n AS stratum_size, p.n AS stratum_sample_size,
                  s.hash_rank, p.pi AS selection_probability, p.weight AS design_weight, s.hash_rank < p.n AS in_sample,
                  coalesce(s.trained_on, false) AS trained_on, s.language, s.has_abstract, s.route_key
           FROM (SELECT *, row_number() OVER (PARTITION BY stratum ORDER BY sha256($salt || ':' || id), id) - 1
                           AS hash_rank
                 FROM audit_strata) s
           JOIN audit_plan p USING (stratum)
           ORDER BY p.pos, s.hash_rank""",
        {"protocol_id": protocol.protocol_id, "salt": protocol.salt},
    ).to_arrow_reader(batch_rows)
    for batch in reader:
        yield batch.cast(AUDIT_SAMPLE_SCHEMA)


# --- storage ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrawnSample:
    """A stored audit sample as the asset reports it: ``works`` rows (frame works), ``sizes`` ``{stratum: (N_h,
    n_h)}``, ``trained_on`` works, and the ``drawn`` rows (``in_sample``, in stratum then hash order)."""

    works: int
    sizes: dict[str, tuple[int, int]]
    trained_on: int
    drawn: list[dict]


def drawn_sample(storage: MetacanStorage, protocol_id: str) -> DrawnSample:
    """What ``audit_sample`` holds of ``protocol_id`` (``works`` 0 when it has not been drawn), read by DuckDB: only
    the per-stratum counts and the drawn rows come to Python."""
    if not storage.has_table("audit_sample"):
        return DrawnSample(0, {}, 0, [])
    with scratch(storage, ["audit_sample"]) as con:
        con.execute(
            f"CREATE TEMP VIEW protocol_sample AS SELECT * FROM audit_sample WHERE protocol_id = {sql_literal(protocol_id)}"
        )
        works, trained = con.execute("SELECT count(*), count(*) FILTER (trained_on) FROM protocol_sample").fetchone()
        sizes = con.execute(
            "SELECT stratum, any_value(stratum_size), any_value(stratum_sample_size) FROM protocol_sample "
            "GROUP BY stratum ORDER BY list_position($order, stratum), stratum",
            {"order": [EXCLUDED_TRAINED, *STRATA]},
        ).fetchall()
        drawn = con.execute(
            "SELECT * FROM protocol_sample WHERE in_sample ORDER BY list_position($order, stratum), stratum, hash_rank",
            {"order": [EXCLUDED_TRAINED, *STRATA]},
        ).to_arrow_table()
    return DrawnSample(works, {s: (big_n, n) for s, big_n, n in sizes}, trained, drawn.to_pylist())


def write_sample(storage: MetacanStorage, protocol_id: str, batches: Iterable[pa.RecordBatch]) -> int:
    """Write ``audit_sample`` with ``batches`` (:func:`draw_audit_sample`) as the rows of ``protocol_id`` and every
    other protocol's rows kept (streamed, one file per stored file and per batch); returns the rows written for
    ``protocol_id``. Nothing is replaced when ``batches`` raises."""
    written = 0

    def parts():
        nonlocal written
        if storage.has_table("audit_sample"):
            for path in sorted(storage.table_dir("audit_sample").glob("*.parquet")):
                kept = pq.read_table(path, schema=AUDIT_SAMPLE_SCHEMA)
                yield kept.filter(pc.not_equal(kept["protocol_id"], protocol_id))
        for batch in batches:
            written += batch.num_rows
            yield batch

    storage.write_table("audit_sample", parts(), schema=AUDIT_SAMPLE_SCHEMA)
    return written
