"""Prevalence per category: design-weighted teacher rates with a design-based 95% CI, classify-and-count,
and the range obtained by swapping which teacher is called the screener (SPEC sections 5-6). The asset
``prevalence`` (:mod:`.assets`) writes :func:`prevalence_rows` to the table ``prevalence``.

Estimator (SPEC section 5, Hajek): for a teacher's labelled works with design weights ``w`` (1 / selection
probability) in strata ``h``, ``p = sum w y / sum w``. Its variance is the stratified linearisation
(Taylor) variance of a ratio: with ``u_hi = w_hi (y_hi - p) / N`` (``N = sum w``),
``var(p) = sum_h (1 - f_h) n_h / (n_h - 1) sum_i (u_hi - mean_h u)^2``, where ``f_h = n_h / N_h`` is the
sampling fraction (``N_h`` = the stratum's weight total), so a census stratum adds nothing and a stratum
with one labelled work cannot add (it is counted in ``strata_single``). The 95% CI is ``p +- 1.96 se``,
clipped to [0, 1]. A head a label leaves unknown (a failed label, insufficient_payload, a category the
source cannot express: :func:`metacan_pipeline.teachers.core.agreement.head_values`) is left out, never
counted negative.

Works of one stratum with the same value ``y`` and the same weight ``w`` add identical terms to every sum above,
so the estimator is computed over *cells* (stratum, y, w, number of works): DuckDB reads the label tables, keeps
each work's current label, joins the weights and counts the works of each cell (:func:`label_cells`); only those
counts, a few rows per teacher and stratum, come to Python, never a row per work (the census teacher labels every
frame work).
"""

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from ..storage import MetacanStorage, sql_literal
from ..teachers.core.agreement import head_values
from ..teachers.core.registry import TeacherSpec
from ..vocab import CATEGORIES
from .census import CENSUS_DESIGN, CENSUS_NO_SAMPLING_ERROR, zero_width_census
from .roles import direct_labels_key, teacher_standing

Z95 = 1.959963984540054

#: One cell of a teacher's labelled works: (stratum, value of the head, design weight, number of works).
Cell = tuple[str, bool, float, int]


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


def stratified_rate(cells: Iterable[Cell]) -> Estimate:
    """Hajek rate and its stratified linearisation variance (module doc) of the works counted in ``cells``
    (``(stratum, y, w, k)``: ``k`` works of stratum ``stratum`` with value ``y`` and design weight ``w``; a stratum
    may have several cells). Raises ValueError for a weight that is not finite and > 0 or a negative count."""
    cells = list(cells)
    if any(w is None for _, _, w, _ in cells):  # a sample_design row without a weight
        raise ValueError("every design weight must be finite and > 0 (SPEC section 5): a work in the sample has none")
    cells = [(h, float(y), float(w), int(k)) for h, y, w, k in cells]
    if any(k < 0 for *_, k in cells):
        raise ValueError("a cell's number of works must be >= 0")
    cells = [c for c in cells if c[3]]
    if any(not (w > 0 and math.isfinite(w)) for _, _, w, _ in cells):
        raise ValueError("every design weight must be finite and > 0 (SPEC section 5: no selection probability 0)")
    n = sum(k for *_, k in cells)
    if n == 0:
        return Estimate(0, 0.0, None, None, None, None, 0)
    total = sum(k * w for _, _, w, k in cells)
    p = sum(k * w * y for _, y, w, k in cells) / total
    groups: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for h, y, w, k in cells:
        groups[h].append((w * (y - p) / total, w, k))
    var, single = 0.0, 0
    for members in groups.values():
        nh = sum(k for *_, k in members)
        if nh < 2:
            single += 1
            continue
        fh = min(1.0, nh / sum(k * w for _, w, k in members))
        mean = sum(k * u for u, _, k in members) / nh
        var += (1 - fh) * nh / (nh - 1) * sum(k * (u - mean) ** 2 for u, _, k in members)
    se = math.sqrt(var)
    return Estimate(n, total, p, se, max(0.0, p - Z95 * se), min(1.0, p + Z95 * se), single)


# ---- the cells, counted in DuckDB ------------------------------------------------------------------

#: The private DuckDB of the rates: bounded memory, spilling beside the warehouse (the census teacher's labels
#: are ranked per work on disk when they do not fit).
_DUCKDB_MEMORY_LIMIT = "1GB"

#: ``undecided_categories`` of a label's ``source_ref`` (JSON; the categories its source cannot express, a list
#: as the importer writes it), NULL when the text is not JSON, not an object, or holds no such list (as for
#: :func:`~metacan_pipeline.teachers.core.agreement.head_values`, such a label has no undecided category).
_UNDECIDED = """CASE WHEN json_valid(l.source_ref) THEN
    CASE WHEN json_type(l.source_ref) = 'OBJECT' AND json_type(l.source_ref, '$.undecided_categories') = 'ARRAY'
         THEN json_extract_string(l.source_ref, '$.undecided_categories[*]') END END"""


def _connect(storage: MetacanStorage) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB (2 threads, 1 GB, spilling under ``warehouse/.spill-prevalence``); no catalog lock."""
    spill = storage.warehouse / ".spill-prevalence"
    return duckdb.connect(config={"memory_limit": _DUCKDB_MEMORY_LIMIT, "threads": 2, "temp_directory": str(spill)})


def _files(storage: MetacanStorage, name: str) -> str:
    return sql_literal(str(storage.table_dir(name) / "*.parquet"))


def label_cells(
    con: duckdb.DuckDBPyConnection, labels: str, weights: str, teacher: str | None = None, **params
) -> dict[str, list[Cell]]:
    """``{category: cells}`` of the current labelled rows of the label table ``labels`` (a ``read_parquet``
    source; with ``teacher``, that teacher's rows only) weighted by ``weights`` (a query giving ``(id, stratum,
    weight)``, one row per work, its ``$name`` parameters in ``params``); works without a weight are left out.

    The current label of a work is what :func:`~metacan_pipeline.teachers.core.agreement.current_labelled` keeps: per
    configuration (teacher, model, prompt version and SHA) the newest row (by ``created_at``, none first, then
    ``label_id``, then table order: file, row), if it is labelled. DuckDB counts the works of each (stratum,
    weight, categories, undecided categories); each count becomes a cell of every category whose head
    :func:`~metacan_pipeline.teachers.core.agreement.head_values` gives a value for such a label."""
    if teacher is not None:
        params["teacher"] = teacher
    rows = con.execute(
        f"""
        WITH current AS (
          SELECT work_id, status, categories, source_ref
          FROM read_parquet({labels}, filename = true, file_row_number = true, hive_partitioning = false)
          WHERE work_id IS NOT NULL {"AND teacher = $teacher" if teacher is not None else ""}
          QUALIFY row_number() OVER (
            PARTITION BY teacher, model, prompt_version, prompt_sha, work_id
            ORDER BY created_at IS NOT NULL DESC, created_at DESC, coalesce(label_id, '') DESC,
                     filename DESC, file_row_number DESC
          ) = 1
        )
        SELECT w.stratum, w.weight, l.categories, {_UNDECIDED} AS undecided, count(*) AS works
        FROM current l JOIN ({weights}) w ON w.id = l.work_id
        WHERE l.status = 'labelled'
        GROUP BY ALL ORDER BY ALL
        """,
        params,
    ).fetchall()
    cells: dict[str, list[Cell]] = {c: [] for c in CATEGORIES}
    for stratum, weight, categories, undecided, works in rows:
        ref = {"undecided_categories": undecided or []}
        values = head_values({"status": "labelled", "categories": categories, "source_ref": ref})
        for c in CATEGORIES:
            if values[c] is not None:
                cells[c].append((stratum, values[c], weight, works))
    return cells


# ---- the rows, by method ---------------------------------------------------------------------------


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
    (weight 1, one stratum ``census``, the works of the frame), a sample teacher is weighted by ``sample_design``
    (its works ``in_sample``: stratum and design weight; its batch labels, which carry no design weight, are left
    out); a teacher of neither kind, or without labels, gives no row. Raises FileNotFoundError without a frame."""
    storage.require("frame")
    census = (
        "SELECT id, 'census' AS stratum, 1.0::DOUBLE AS weight "
        f"FROM (SELECT DISTINCT id FROM read_parquet({_files(storage, 'frame')}, hive_partitioning = false))"
    )
    design = None
    if storage.has_table("sample_design"):
        design = (
            "SELECT id, stratum, design_weight AS weight "
            f"FROM read_parquet({_files(storage, 'sample_design')}, filename = true, file_row_number = true, "
            "hive_partitioning = false) WHERE in_sample "
            "QUALIFY row_number() OVER (PARTITION BY id ORDER BY filename DESC, file_row_number DESC) = 1"
        )
    rows = []
    with _connect(storage) as con:
        for name, spec in registry.items():
            if (spec.coverage != "all" and not spec.covers_sample) or not storage.has_table(direct_labels_key(name)):
                continue
            weights, how = (census, CENSUS_DESIGN) if spec.coverage == "all" else (design, "sample_design")
            cells = label_cells(con, _files(storage, direct_labels_key(name)), weights) if weights else {}
            rows += [_rate_row("frame", c, name, stratified_rate(cells.get(c, [])), how) for c in CATEGORIES]
    return rows


def _import_designs(storage: MetacanStorage) -> tuple[pa.Table | None, dict[str, str]]:
    """The ``imported_design`` rows with a weight (not 0 or missing), as Arrow (one row per work of an imported
    source), and ``{imported teacher: source}`` from ``label_imports`` (a teacher of several sources: the last by
    name); None and ``{}`` when the tables are absent. A source without a weighted work gives no teacher."""
    design, designed, sources = None, set(), []
    with storage.connect() as con:
        present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "imported_design" in present:
            design = con.execute(
                "SELECT source, work_id, stratum, design_weight FROM imported_design WHERE design_weight <> 0"
            ).to_arrow_table()
            designed = set(design.column("source").unique().to_pylist())
        if "label_imports" in present:
            sources = con.execute("SELECT DISTINCT teacher, source FROM label_imports ORDER BY ALL").fetchall()
    return design, {teacher: source for teacher, source in sources if source in designed}


def imported_teacher_rows(storage: MetacanStorage) -> list[dict]:
    """``design_weighted_teacher_rate`` rows of population ``import:<source>``: imported teachers weighted
    by their source's ``imported_design`` (e.g. the MetaCan pilot's strata and weights; a work whose weight is
    0 or missing is left out, a missing stratum is ``(none)``); a category no work of a teacher gives a value
    gives no row."""
    if not storage.has_table("imported_labels"):
        return []
    labels = _files(storage, "imported_labels")
    design, source_of = _import_designs(storage)
    if design is None:
        return []
    weights = (
        "SELECT work_id AS id, coalesce(nullif(stratum, ''), '(none)') AS stratum, design_weight AS weight "
        "FROM imported_design_arrow WHERE source = $source"
    )
    rows = []
    with _connect(storage) as con:
        con.register("imported_design_arrow", design)
        teachers = con.execute(
            f"SELECT DISTINCT teacher FROM read_parquet({labels}, hive_partitioning = false) ORDER BY teacher"
        ).fetchall()
        for (teacher,) in teachers:
            source = source_of.get(teacher)
            if source is None:
                continue
            cells = label_cells(con, labels, weights, teacher, source=source)
            population, how = f"import:{source.split(' (')[0]}", f"imported_design: {source}"
            estimates = {c: stratified_rate(cells[c]) for c in CATEGORIES}
            rows += [_rate_row(population, c, teacher, e, how) for c, e in estimates.items() if e.n]
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
    preds = f"read_parquet({_files(storage, 'predictions')}, hive_partitioning = false)"
    with _connect(storage) as con:
        n_preds = con.execute(f"SELECT count(*) FROM {preds}").fetchone()[0]
        counts = {
            (col, c): k
            for col in ("candidate_categories", "consensus_categories")
            for c, k in con.execute(
                f"SELECT c, count(*) FROM (SELECT unnest({col}) c FROM {preds}) GROUP BY c"
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
    """A markdown table of the ``metaresearch`` rows (population, method, teacher, n, rate [95% CI]); below it,
    :data:`CENSUS_NO_SAMPLING_ERROR` when a census rate's interval there has zero width."""
    shown = [r for r in rows if r["category"] == "metaresearch"]
    table = "| population | category | method | teacher | n | rate [95% CI] |\n|---|---|---|---|---|---|\n" + "".join(
        f"| {r['population']} | {r['category']} | {r['method']} | {r['teacher'] or ''} | {r['n']} | {_fmt(r)} |\n"
        for r in shown
    )
    return table + (f"\n{CENSUS_NO_SAMPLING_ERROR}\n" if any(zero_width_census(r) for r in shown) else "")
