"""The audit sample (issue 16, "The audit sample"; SPEC sections 5 and 10): a stratified probability sample of the
frame for human coding, separate from the teachers' sample (``sample_design``), drawn under one locked protocol.

**Population**: every frame work (``frame``), paratext and short titles included: the audit checks what the
classifier says about every work it publishes a prediction for. A frame work without a prediction (the blocking
check ``predictions_score_every_frame_work_once`` forbids it) counts as predicted negative, far from every threshold.

**Machine state on an evaluated head** (``predictions`` of the classifier version under test):

- *consensus*: the head's category (or about_ca flag) is in the work's consensus; *candidate*: in its candidate;
- *near*: the sample teacher's head score ``s >= (1 - near_band) * t`` for the head's threshold ``t > 0``: the
  relative distance of SPEC section 6's ``threshold_uncertainty_score``, so with the default band 0.5 a negative is
  near when its uncertainty on the head is at least 0.5. It decides the stratum of works that are candidate on no
  head only (the rule below puts consensus and candidate first).
- A head that passed its support gate has its quota threshold (``prediction_thresholds``). A head that failed it has
  no decision: its consensus is never true, its candidate is the census teacher's label (as ``predictions`` records
  it), and its near/far split uses the *score at the quota it would have had*, the ``k``-th highest score with
  ``k = round(rate x works scored)`` (``threshold_source = score_quantile``); with no positive rate it adds nothing
  to *near* (``none``). The protocol records each head's source.

**Stratum rule** (:func:`stratum_sql`, a DuckDB expression; first match wins, so the strata partition the frame):

1. ``trained_on``: the work trained or calibrated the classifier under test (:func:`trained_ids`); with
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

**Power note** (:func:`power_note`): from the configured expected positive rate ``p_h`` of each stratum (a prior
recorded in the protocol; a work counts as positive when it is positive on any evaluated head, which is optimistic
for any single head), expected coded positives ``sum n_h p_h`` and approximate 95% half-widths
``1.96 sqrt(x (1 - x) / n_eff)`` of precision and recall, with ``x`` their expected values and ``n_eff`` Kish's
effective sample size of the design weights of the cases in the rate's denominator: for precision the sampled
predicted positives (``(sum N_h)^2 / sum N_h^2 / n_h`` over the predicted-positive strata), for recall the expected
coded positives (``(sum N_h p_h)^2 / sum N_h^2 p_h / n_h``). A Wald interval on Kish's n ignores the gain from
stratification and the finite population correction (conservative for both) and is poor near 0 or 1 and for small
n (the report uses the Korn-Graubard interval); it is a planning figure, not an estimate. The ``trained_on``
stratum is reported on its own line, outside the totals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..sampling.design import stratum_probability, stratum_sample_size
from ..storage import MetacanStorage, sql_literal
from ..student.roles import SAMPLE, direct_labels_key
from ..tables.audit import AUDIT_PLAN_SCHEMA, AUDIT_SAMPLE_SCHEMA
from ..vocab import BINARY_TARGETS, CATEGORIES
from .protocol import STRATA, AuditProtocol, HeadUnderTest, StratumPlan

EXCLUDED_TRAINED = "excluded:trained_on"
FRENCH = "fr"
ABOUT_CA_ONLY_ROUTE = "about_ca"
Z95 = 1.959963984540054

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


# --- the classifier under test --------------------------------------------------------------------------------------


#: The memory of the audit's private DuckDB (:func:`scratch`); past it, DuckDB spills under ``warehouse/.spill-audit``.
SCRATCH_MEMORY_LIMIT = "1GB"


def scratch(storage: MetacanStorage, names: Iterable[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection (2 threads, :data:`SCRATCH_MEMORY_LIMIT`, spilling under
    ``warehouse/.spill-audit``) with a view over each warehouse table of ``names`` that exists (no lock taken)."""
    spill = storage.warehouse / ".spill-audit"
    con = duckdb.connect(config={"threads": 2, "memory_limit": SCRATCH_MEMORY_LIMIT, "temp_directory": str(spill)})
    for name in names:
        if storage.has_table(name):
            pattern = sql_literal(str(storage.table_dir(name) / "*.parquet"))
            con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM read_parquet({pattern})')
    return con


def _head(head: str) -> str:
    if head not in BINARY_TARGETS:
        raise ValueError(f"head {head!r} is not a binary head; expected one of {list(BINARY_TARGETS)}")
    return head


def score_sql(head: str) -> str:
    """The sample teacher's score of ``head`` in a ``predictions`` row ``p``."""
    if _head(head) in CATEGORIES:
        return f"p.category_scores_codex[{CATEGORIES.index(head) + 1}]"
    return f"p.{head}_score_codex"


def state_sql(head: str, state: str) -> str:
    """``consensus`` or ``candidate`` of ``head`` in a ``predictions`` row ``p`` (false without a prediction)."""
    if _head(head) in CATEGORIES:
        return f"coalesce(list_contains(p.{state}_categories, '{head}'), false)"
    return f"coalesce(p.{head}_{state}, false)"


def classifier_version(con: duckdb.DuckDBPyConnection) -> str:
    """The one model version of ``predictions``, checked against ``prediction_thresholds`` and ``student_heads``.
    Raises ValueError when they disagree (a stage was re-run and the next not yet) or predictions are missing."""
    versions = {}
    for table in ("predictions", "prediction_thresholds", "student_heads"):
        try:
            versions[table] = sorted(
                r[0] for r in con.execute(f"SELECT DISTINCT model_version FROM {table}").fetchall()
            )
        except duckdb.CatalogException:
            raise ValueError(f"table {table!r} not found: materialize predictions before the audit protocol") from None
    if len(versions["predictions"]) != 1 or any(v != versions["predictions"] for v in versions.values() if v):
        raise ValueError(
            f"the classifier under test must be one model version; found {versions}: materialize predictions again"
        )
    return versions["predictions"][0]


def default_heads(threshold_rows: list[dict]) -> list[str]:
    """Every binary category head that got decisions (support gate passed), plus ``metaresearch`` always."""
    gated = {r["target"] for r in threshold_rows if r["gate_passed"]}
    return [c for c in CATEGORIES if c == "metaresearch" or c in gated]


def heads_under_test(
    con: duckdb.DuckDBPyConnection, model_version: str, requested: list[str]
) -> tuple[tuple[HeadUnderTest, ...], list[str]]:
    """The evaluated heads (``requested``, or :func:`default_heads` when empty; vocabulary order) with their gate,
    rate, k and near/far threshold (module docstring), and one note per head without decisions."""
    rows = [
        dict(zip(("target", "gate_passed", "gate_reason", "rate", "n", "k", "threshold"), r, strict=True))
        for r in con.execute(
            "SELECT target, gate_passed, gate_reason, rate, n, k, threshold FROM prediction_thresholds "
            "WHERE model_version = ?",
            [model_version],
        ).fetchall()
    ]
    by_head = {r["target"]: r for r in rows}
    names = [_head(h) for h in requested] or default_heads(rows)
    if len(set(names)) != len(names):
        raise ValueError(f"heads {names} name a head twice")
    heads, notes = [], []
    for name in (t for t in BINARY_TARGETS if t in names):
        r = by_head.get(name) or {"gate_passed": False, "gate_reason": "no prediction_thresholds row", "rate": None}
        gated = bool(r["gate_passed"])
        k, threshold, source = r.get("k"), r.get("threshold"), "quota"
        if not gated:
            k = round(r["rate"] * r["n"]) if r["rate"] and r.get("n") else 0
            threshold = _score_at_rank(con, name, k) if k > 0 else None
            source = "score_quantile"
            notes.append(
                f"{name}: no decisions ({r['gate_reason']}); consensus never, candidate = the census teacher's label, "
                + (
                    f"near/far against the score at the quota it would have had (k = {k}, threshold {threshold:.4g})"
                    if threshold is not None
                    else "no positive rate: it adds nothing to negative_near"
                )
            )
        if threshold is None:
            source = "none"
        heads.append(HeadUnderTest(name, gated, r["gate_reason"] or "", r["rate"], k, threshold, source))
    return tuple(heads), notes


def _score_at_rank(con: duckdb.DuckDBPyConnection, head: str, k: int) -> float | None:
    """The ``k``-th highest sample-teacher score of ``head`` over ``predictions`` (ties by id, as the quota)."""
    row = con.execute(
        f"SELECT s FROM (SELECT {score_sql(head)} AS s, p.id FROM predictions p WHERE {score_sql(head)} IS NOT NULL) "
        f"ORDER BY s DESC, id LIMIT 1 OFFSET {int(k) - 1}"
    ).fetchone()
    return None if row is None else float(row[0])


def frame_build_id(con: duckdb.DuckDBPyConnection) -> str:
    """The frame's build id (several, comma-joined, if the frame mixes builds). Raises ValueError without a frame."""
    try:
        ids = [r[0] for r in con.execute("SELECT DISTINCT frame_build_id FROM frame ORDER BY 1").fetchall()]
    except duckdb.CatalogException:
        raise ValueError("table 'frame' not found: materialize the frame first") from None
    return ",".join(str(i) for i in ids) or "empty-frame"


# --- trained works and the machine state of every frame work ------------------------------------------------------


def trained_ids(con: duckdb.DuckDBPyConnection, model_version: str) -> tuple[set[str], dict[str, int]]:
    """The works that trained or calibrated the classifier version under test, and counts for the metadata.

    Trained: ``student_training_set`` rows of the sample teacher (its heads decide) for ``model_version``.
    Calibrated: every labelled sample-teacher call on a work of the teachers' sample (``sample_design.in_sample``):
    the quota rates are computed over all of them, frozen-holdout works included. The census teacher's training
    works are not counted: its heads decide nothing (its direct labels enter candidate and consensus as labels),
    and it labels nearly the whole frame. Labels added after the version was trained make this a superset.
    """
    trained = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT work_id FROM student_training_set WHERE model_version = ? AND teacher = ?",
            [model_version, SAMPLE],
        ).fetchall()
    }
    census = con.execute(
        "SELECT count(DISTINCT work_id) FROM student_training_set WHERE model_version = ? AND teacher <> ?",
        [model_version, SAMPLE],
    ).fetchone()[0]
    calibrated: set[str] = set()
    labels = direct_labels_key(SAMPLE)
    names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    if {labels, "sample_design"} <= names:
        calibrated = {
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT l.work_id FROM {labels} l JOIN sample_design d ON d.id = l.work_id "
                "WHERE d.in_sample AND l.status = 'labelled' AND l.source = 'teacher_call'"
            ).fetchall()
        }
    return trained | calibrated, {
        "sample_teacher_training_works": len(trained),
        "calibration_works_not_in_training": len(calibrated - trained),
        "census_teacher_training_works_not_counted": census,
    }


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


# --- strata and the draw -----------------------------------------------------------------------------------------


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


# --- storage ---------------------------------------------------------------------------------------------------------


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


# --- the power note ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerNote:
    """Planning figures of a drawn design (module docstring): per stratum and over the audited population."""

    strata: list[dict]
    expected_coded_positives: float
    precision: float | None
    precision_n_eff: float
    precision_half_width: float | None
    recall: float | None
    recall_n_eff: float
    recall_half_width: float | None
    min_coded_positives: int

    @property
    def enough_positives(self) -> bool:
        return self.expected_coded_positives >= self.min_coded_positives


def _half_width(x: float | None, n_eff: float) -> float | None:
    return None if x is None or n_eff <= 0 else Z95 * math.sqrt(x * (1 - x) / n_eff)


def predicted_positive_strata(decision_rule: str) -> tuple[str, ...]:
    """The strata whose works the decision rule under test calls positive on some evaluated head."""
    return ("consensus",) if decision_rule == "consensus" else ("consensus", "candidate_only")


def power_note(sizes: dict[str, tuple[int, int]], protocol: AuditProtocol) -> PowerNote:
    """The power note of strata of sizes ``{stratum: (N_h, n_h)}`` under ``protocol`` (module docstring)."""
    rows = []
    for stratum, (big_n, n) in sorted(sizes.items(), key=lambda kv: (EXCLUDED_TRAINED, *STRATA).index(kv[0])):
        p = protocol.plan("trained_on" if stratum == EXCLUDED_TRAINED else stratum).expected_positive_rate
        fpc = 1 - n / big_n if big_n else 0.0
        rows.append(
            {
                "stratum": stratum,
                "N_h": big_n,
                "n_h": n,
                "pi": n / big_n if big_n else 0.0,
                "expected_positive_rate": p,
                "expected_coded_positives": n * p,
                "rate_half_width": Z95 * math.sqrt(p * (1 - p) / n * fpc) if n else None,
            }
        )
    pop = [r for r in rows if r["stratum"] not in ("trained_on", EXCLUDED_TRAINED) and r["n_h"]]
    pos = [r for r in pop if r["stratum"] in predicted_positive_strata(protocol.decision_rule)]
    n_pos = sum(r["N_h"] for r in pos)
    true_pos = sum(r["N_h"] * r["expected_positive_rate"] for r in pop)
    found = sum(r["N_h"] * r["expected_positive_rate"] for r in pos)
    precision = found / n_pos if n_pos else None
    recall = found / true_pos if true_pos else None
    prec_den = sum(r["N_h"] ** 2 / r["n_h"] for r in pos)
    rec_den = sum(r["N_h"] ** 2 * r["expected_positive_rate"] / r["n_h"] for r in pop)
    prec_n = n_pos**2 / prec_den if prec_den else 0.0
    rec_n = true_pos**2 / rec_den if rec_den else 0.0
    return PowerNote(
        rows,
        sum(r["expected_coded_positives"] for r in pop),
        precision,
        prec_n,
        _half_width(precision, prec_n),
        recall,
        rec_n,
        _half_width(recall, rec_n),
        protocol.gate.min_coded_positives,
    )


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def power_markdown(note: PowerNote, protocol: AuditProtocol) -> str:
    """The power note as markdown: a table per stratum and the overall figures against the gate."""
    head = "| stratum | N_h | n_h | pi | expected rate | expected coded positives | rate half-width |\n|---|---|---|---|---|---|---|\n"
    body = "".join(
        f"| {r['stratum']} | {r['N_h']} | {r['n_h']} | {r['pi']:.4g} | {r['expected_positive_rate']:.3g} | "
        f"{r['expected_coded_positives']:.1f} | {_fmt(r['rate_half_width'])} |\n"
        for r in note.strata
    )
    gate = protocol.gate
    lines = [
        f"Expected coded positives (audited population, trained works apart): {note.expected_coded_positives:.1f} "
        f"({'at least' if note.enough_positives else 'fewer than'} the gate's {gate.min_coded_positives}).",
        f"Precision ({protocol.decision_rule} rule): expected {_fmt(note.precision)} +/- {_fmt(note.precision_half_width)} "
        f"(Kish n_eff {note.precision_n_eff:.1f}; gate lower bound {gate.precision_lower:.2f}).",
        f"Recall: expected {_fmt(note.recall)} +/- {_fmt(note.recall_half_width)} (Kish n_eff {note.recall_n_eff:.1f}; "
        f"gate lower bound {gate.recall_lower:.2f}).",
        "Approximation: 1.96 sqrt(x(1-x)/n_eff) on Kish's effective n, priors from the protocol's expected rates, a "
        "work positive when positive on any evaluated head; a planning figure, not an estimate.",
    ]
    return head + body + "\n" + "\n\n".join(lines)
