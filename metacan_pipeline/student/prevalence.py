"""Prevalence per category: design-weighted teacher rates with a design-based 95% CI, classify-and-count,
and the range obtained by swapping which teacher is called the screener (issue 5, SPEC sections 5-6).

Estimator (SPEC section 5, Hajek): for a teacher's labelled works with design weights ``w`` (1 / selection
probability) in strata ``h``, ``p = sum w y / sum w``. Its variance is the stratified linearisation
(Taylor) variance of a ratio: with ``u_hi = w_hi (y_hi - p) / N`` (``N = sum w``),
``var(p) = sum_h (1 - f_h) n_h / (n_h - 1) sum_i (u_hi - mean_h u)^2``, where ``f_h = n_h / N_h`` is the
sampling fraction (``N_h`` = the stratum's weight total), so a census stratum adds nothing and a stratum
with one labelled work cannot add (it is counted in ``strata_single``). The 95% CI is ``p +- 1.96 se``,
clipped to [0, 1]. A head a label leaves unknown (a failed label, insufficient_payload, a category the
source cannot express: :func:`metacan_pipeline.teachers.agreement.head_values`) is left out, never
counted negative.
"""

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg
import pyarrow as pa

from ..meta import table_metadata
from ..storage import MetacanStorage
from ..tables.student import PREVALENCE_SCHEMA
from ..teachers.agreement import current_labelled, head_values
from ..teachers.registry import TeacherSpec, load_registry
from ..vocab import CATEGORIES
from .roles import direct_labels_key, teacher_standing

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Estimate:
    """A design-weighted rate: ``n`` works, ``n_weighted`` their weight total, ``rate`` in [0, 1], its
    standard error and 95% CI; ``strata_single``: strata with one labelled work (no variance from them)."""

    n: int
    n_weighted: float
    rate: float | None
    se: float | None
    ci_low: float | None
    ci_high: float | None
    strata_single: int


def stratified_rate(y: Sequence[bool | int], w: Sequence[float], strata: Sequence[str]) -> Estimate:
    """Hajek rate of ``y`` with weights ``w`` and its stratified linearisation variance (module doc).
    Inputs are parallel sequences; raises ValueError for unequal lengths or a weight that is not > 0."""
    if not len(y) == len(w) == len(strata):
        raise ValueError(f"y, w and strata differ in length ({len(y)}, {len(w)}, {len(strata)})")
    if any(not (x > 0 and math.isfinite(x)) for x in w):
        raise ValueError("every design weight must be finite and > 0 (SPEC section 5: no selection probability 0)")
    n = len(y)
    total = float(sum(w))
    if n == 0:
        return Estimate(0, 0.0, None, None, None, None, 0)
    p = sum(wi * float(yi) for yi, wi in zip(y, w, strict=False)) / total
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for yi, wi, h in zip(y, w, strata, strict=False):
        groups[h].append((wi * (float(yi) - p) / total, wi))
    var, single = 0.0, 0
    for members in groups.values():
        nh = len(members)
        if nh < 2:
            single += 1
            continue
        fh = min(1.0, nh / sum(wi for _, wi in members))
        mean = sum(u for u, _ in members) / nh
        var += (1 - fh) * nh / (nh - 1) * sum((u - mean) ** 2 for u, _ in members)
    se = math.sqrt(var)
    return Estimate(n, total, p, se, max(0.0, p - Z95 * se), min(1.0, p + Z95 * se), single)


# ---- the rows, by method ---------------------------------------------------------------------------


def _teacher_rows(labels: list[dict], weights: dict[str, tuple[str, float]]) -> dict[str, Estimate]:
    """``{category: Estimate}`` for one teacher's current labelled rows, weighted by ``weights``
    (``{work_id: (stratum, weight)}``); works without a weight are left out."""
    values = [(head_values(r), weights[r["work_id"]]) for r in labels if r["work_id"] in weights]
    out = {}
    for c in CATEGORIES:
        known = [(v[c], stratum, weight) for v, (stratum, weight) in values if v[c] is not None]
        out[c] = stratified_rate([k[0] for k in known], [k[2] for k in known], [k[1] for k in known])
    return out


def _current(rows: list[dict]) -> list[dict]:
    """The newest labelled row per work (:func:`~metacan_pipeline.teachers.agreement.current_labelled`)."""
    return [r for works in current_labelled(rows).values() for r in works.values()]


def _rate_row(population: str, category: str, teacher: str, e: Estimate, design: str) -> dict:
    return {
        "population": population,
        "category": category,
        "method": "design_weighted_teacher_rate",
        "teacher": teacher,
        **e.__dict__,
        "design": design,
    }


def frame_teacher_rows(storage: MetacanStorage, registry: dict[str, TeacherSpec]) -> list[dict]:
    """``design_weighted_teacher_rate`` rows of population ``frame``: a teacher covering all works is a census
    (weight 1, one stratum), a sample teacher is weighted by ``sample_design`` (its batch labels, which carry
    no design weight, are left out); a teacher of neither kind, or without labels, gives no row."""
    frame_ids = storage.read_table("frame", ["id"]).column("id").to_pylist()
    design = {}
    if storage.has_table("sample_design"):
        sd = storage.read_table("sample_design", ["id", "stratum", "design_weight", "in_sample"]).to_pylist()
        design = {r["id"]: (r["stratum"], r["design_weight"]) for r in sd if r["in_sample"]}
    census = {wid: ("census", 1.0) for wid in frame_ids}
    rows = []
    for name, spec in registry.items():
        if (spec.coverage != "all" and not spec.covers_sample) or not storage.has_table(direct_labels_key(name)):
            continue
        weights, how = (census, "census of the frame") if spec.coverage == "all" else (design, "sample_design")
        labels = _current(storage.read_table(direct_labels_key(name)).to_pylist())
        rows += [_rate_row("frame", c, name, e, how) for c, e in _teacher_rows(labels, weights).items()]
    return rows


def _import_designs(storage: MetacanStorage) -> tuple[dict[str, dict[str, tuple[str, float]]], dict[str, str]]:
    """``({source: {work_id: (stratum, weight)}}, {imported teacher: source})`` from ``imported_design`` and
    ``label_imports`` (empty when the tables are absent); a source without a design gives no teacher."""
    with storage.connect() as con:
        present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        idesign = (
            con.execute("SELECT source, work_id, stratum, design_weight FROM imported_design").fetchall()
            if "imported_design" in present
            else []
        )
        sources = (
            con.execute("SELECT DISTINCT teacher, source FROM label_imports ORDER BY ALL").fetchall()
            if "label_imports" in present
            else []
        )
    by_source: dict[str, dict[str, tuple[str, float]]] = defaultdict(dict)
    for source, wid, stratum, weight in idesign:
        if weight:
            by_source[source][wid] = (stratum or "(none)", weight)
    return by_source, {teacher: source for teacher, source in sources if source in by_source}


def imported_teacher_rows(storage: MetacanStorage) -> list[dict]:
    """``design_weighted_teacher_rate`` rows of population ``import:<source>``: imported teachers weighted
    by their source's ``imported_design`` (e.g. the MetaCan pilot's strata and weights)."""
    if not storage.has_table("imported_labels"):
        return []
    imported = storage.read_table("imported_labels").to_pylist()
    by_source, source_of = _import_designs(storage)
    rows = []
    for teacher in sorted({r["teacher"] for r in imported}):
        source = source_of.get(teacher)
        if source is None:
            continue
        labels = _current([r for r in imported if r["teacher"] == teacher])
        population, how = f"import:{source.split(' (')[0]}", f"imported_design: {source}"
        rows += [
            _rate_row(population, c, teacher, e, how)
            for c, e in _teacher_rows(labels, by_source[source]).items()
            if e.n
        ]
    return rows


def _unweighted_row(population: str, category: str, method: str, n: int, rate, design: str, **extra) -> dict:
    row = {"population": population, "category": category, "method": method, "teacher": None, "n": n}
    row.update(n_weighted=None, rate=rate, se=None, ci_low=None, ci_high=None, strata_single=0, design=design)
    return {**row, **extra}


def classify_and_count_rows(storage: MetacanStorage) -> list[dict]:
    """``classify_and_count`` (and ``classify_and_count_consensus``) rows: the share of frame works whose
    ``predictions.candidate_categories`` (``consensus_categories``) holds the category; no CI. While a role
    teacher has not passed its qualification test the decisions are not the classifier's to count: the rows
    carry no rate and ``design`` says why (a 0 there would read as a measured prevalence)."""
    if not storage.has_table("predictions"):
        return []
    standing = teacher_standing(storage)
    unqualified = "; ".join(n for n in (standing.sample_not_qualified, standing.census_not_qualified) if n)
    with storage.connect() as con:
        n_preds = con.execute("SELECT count(*) FROM predictions").fetchone()[0]
        counts = {
            (col, c): k
            for col in ("candidate_categories", "consensus_categories")
            for c, k in con.execute(
                f"SELECT c, count(*) FROM (SELECT unnest({col}) c FROM predictions) GROUP BY c"
            ).fetchall()
        }
    methods = (("candidate_categories", "classify_and_count"), ("consensus_categories", "classify_and_count_consensus"))
    return [
        _unweighted_row(
            "frame",
            c,
            method,
            n_preds,
            None if unqualified or not n_preds else counts.get((col, c), 0) / n_preds,
            f"not computed: {unqualified}" if unqualified else "every frame work scored once",
            n_weighted=float(n_preds),
        )
        for c in CATEGORIES
        for col, method in methods
    ]


def screener_swap_rows(rows: list[dict]) -> list[dict]:
    """``screener_swap_range`` rows: per population and category with more than one teacher rate in ``rows``,
    the lowest and highest (``ci_low`` / ``ci_high``, ``rate`` their midpoint)."""
    rates: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        if r["method"] == "design_weighted_teacher_rate" and r["rate"] is not None:
            rates[(r["population"], r["category"])].append(r["rate"])
    return [
        _unweighted_row(
            population,
            c,
            "screener_swap_range",
            len(values),
            (min(values) + max(values)) / 2,
            "teacher rates above",
            ci_low=min(values),
            ci_high=max(values),
        )
        for (population, c), values in sorted(rates.items())
        if len(values) > 1
    ]


def prevalence_rows(storage: MetacanStorage, registry: dict[str, TeacherSpec]) -> list[dict]:
    """Every ``prevalence`` row, in table order: frame teacher rates, imported teacher rates,
    classify-and-count, screener-swap ranges."""
    rows = frame_teacher_rows(storage, registry) + imported_teacher_rows(storage) + classify_and_count_rows(storage)
    return rows + screener_swap_rows(rows)


def _fmt(r: dict) -> str:
    if r["rate"] is None:
        return "n/a"
    if r["method"] == "screener_swap_range":
        return f"{r['ci_low']:.4f} to {r['ci_high']:.4f}"
    return f"{r['rate']:.4f}" + (f" [{r['ci_low']:.4f}, {r['ci_high']:.4f}]" if r["ci_low"] is not None else "")


def metaresearch_markdown(rows: list[dict]) -> str:
    """A markdown table of the ``metaresearch`` rows (population, method, teacher, n, rate [95% CI])."""
    return "| population | category | method | teacher | n | rate [95% CI] |\n|---|---|---|---|---|---|\n" + "".join(
        f"| {r['population']} | {r['category']} | {r['method']} | {r['teacher'] or ''} | {r['n']} | {_fmt(r)} |\n"
        for r in rows
        if r["category"] == "metaresearch"
    )


# ---- the asset -------------------------------------------------------------------------------------

#: The teacher registry the rates read (one ``direct_labels_<name>`` asset per teacher).
REGISTRY: dict[str, TeacherSpec] = load_registry()


@dg.asset(
    group_name="scoring",
    kinds={"python", "parquet"},
    code_version="1",
    owners=["team:metacan"],
    deps=["predictions", "imported_labels", *(direct_labels_key(name) for name in REGISTRY)],
)
def prevalence(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Prevalence per category (issue 5, SPEC sections 5-6). Rows of table ``prevalence``
    (:data:`PREVALENCE_SCHEMA`), one per population, category and method (:func:`prevalence_rows`):

    - ``design_weighted_teacher_rate``: each teacher's rate with a design-based 95% CI
      (:func:`stratified_rate`). Population ``frame``: a teacher covering all works is a census of the
      frame (weight 1, one stratum, no sampling variance); a sample teacher uses ``sample_design``
      (stratum, design weight). Population ``import:<source>``: imported teachers with their source's
      ``imported_design`` (e.g. the MetaCan pilot's strata and weights).
    - ``classify_and_count``: the share of frame works whose ``predictions.candidate_categories`` (and,
      method ``classify_and_count_consensus``, ``consensus_categories``) holds the category; no CI.
    - ``screener_swap_range``: per population, the lowest and highest teacher rate (``ci_low`` /
      ``ci_high`` hold the range, ``rate`` its midpoint): what changes when another teacher is called
      the screener, the honest uncertainty the original system reported.
    """
    rows = prevalence_rows(storage, REGISTRY)
    table = pa.Table.from_pylist(rows, schema=PREVALENCE_SCHEMA)
    storage.write_table("prevalence", table, schema=PREVALENCE_SCHEMA)
    context.log.info(f"prevalence: {len(rows)} rows over {len({r['population'] for r in rows})} populations")
    return dg.MaterializeResult(
        metadata=table_metadata(
            PREVALENCE_SCHEMA,
            table.num_rows,
            rows[:10],
            None,
            metaresearch=dg.MetadataValue.md(metaresearch_markdown(rows)),
        )
    )
