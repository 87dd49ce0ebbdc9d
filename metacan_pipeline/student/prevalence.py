"""Prevalence per category and per estimand of the protocol (:mod:`.estimands`, SPEC section 11): design-weighted
teacher rates with a design-based 95% CI, classify-and-count, and the range obtained by swapping which teacher is
called the screener (SPEC sections 5-6). The asset ``prevalence`` (:mod:`.assets`) writes :func:`prevalence_rows` to
the table ``prevalence``; a row's ``estimand`` is ``category`` for a category's rate, else the estimand's name (its
``category`` is then the in-scope head ``metaresearch``). An estimand's cells are counted as a category's, with the
frame's route flags joined by work id.

Estimator (SPEC section 5, Hajek): for a teacher's labelled works with design weights ``w`` (1 / selection
probability) in strata ``h``, ``p = sum w y / sum w``. Its variance is the stratified linearisation
(Taylor) variance of a ratio: with ``u_hi = w_hi (y_hi - p) / N`` (``N = sum w``),
``var(p) = sum_h (1 - f_h) n_h / (n_h - 1) sum_i (u_hi - mean_h u)^2``, where ``f_h = n_h / N_h`` is the
sampling fraction (``N_h`` = the stratum's weight total), so a census stratum adds nothing and a stratum
with one labelled work cannot add (it is counted in ``strata_single``). The 95% CI is ``p +- 1.96 se``,
clipped to [0, 1]; when a sample (a stratum with sampling fraction below 1) has ``se = 0`` because every labelled
work has the same value (``p`` is 0 or 1), that interval would read as certainty, so the CI is then Clopper-Pearson's
exact interval at the Kish effective sample size ``(sum w)^2 / sum w^2`` of the labelled works (Korn and Graubard's
interval for a proportion from a complex sample). A census keeps its zero width: it has no sampling error. A head a label leaves unknown (a failed label, insufficient_payload, a category the
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
from scipy.stats import beta

from ..storage import MetacanStorage, sql_literal
from ..teachers.core.agreement import head_values
from ..teachers.core.registry import TeacherSpec
from ..vocab import CATEGORIES
from .census import CENSUS_DESIGN, CENSUS_NO_SAMPLING_ERROR, zero_width_census
from .estimands import CATEGORY_RATE, ESTIMAND_ROUTES, ESTIMANDS, IN_SCOPE
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
    sampled = any(sum(k for *_, k in members) < sum(k * w for _, w, k in members) - 1e-9 for members in groups.values())
    if se == 0.0 and sampled and p in (0.0, 1.0):
        low, high = _exact_bounds(p, total**2 / sum(k * w * w for _, _, w, k in cells))
        return Estimate(n, total, p, se, low, high, single)
    return Estimate(n, total, p, se, max(0.0, p - Z95 * se), min(1.0, p + Z95 * se), single)


def _exact_bounds(p: float, n_eff: float) -> tuple[float, float]:
    """Clopper-Pearson's 95% interval for ``p`` (0 or 1) observed on ``n_eff`` (possibly fractional) works."""
    x = p * n_eff
    low = 0.0 if x == 0 else float(beta.ppf(0.025, x, n_eff - x + 1))
    high = 1.0 if x == n_eff else float(beta.ppf(0.975, x + 1, n_eff - x))
    return low, high


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
#: ``absent`` of a label's ``source_ref`` (the fields its source never provides), read as :data:`_UNDECIDED`.
_ABSENT = """CASE WHEN json_valid(l.source_ref) THEN
    CASE WHEN json_type(l.source_ref) = 'OBJECT' AND json_type(l.source_ref, '$.absent') = 'ARRAY'
         THEN json_extract_string(l.source_ref, '$.absent[*]') END END"""


def _connect(storage: MetacanStorage) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB (2 threads, 1 GB, spilling under ``warehouse/.spill-prevalence``); no catalog lock."""
    spill = storage.warehouse / ".spill-prevalence"
    return duckdb.connect(config={"memory_limit": _DUCKDB_MEMORY_LIMIT, "threads": 2, "temp_directory": str(spill)})


def _files(storage: MetacanStorage, name: str) -> str:
    return sql_literal(str(storage.table_dir(name) / "*.parquet"))


def _labelled_groups(
    con: duckdb.DuckDBPyConnection,
    labels: str,
    weights: str,
    teacher: str | None = None,
    routes: str | None = None,
    **params,
) -> list[tuple]:
    """The works of the current labelled rows of ``labels`` (module doc of :func:`label_cells`) counted per (stratum,
    weight, categories, undecided categories, absent fields, ``about_ca_system``, and with ``routes``, a query giving
    ``(id, ca_aff, ca_fund, ca_venue)``, the routes of :data:`~.estimands.ESTIMAND_ROUTES`): one row per group, the
    count last. Works without a weight (or, with ``routes``, without a row there) are left out."""
    if teacher is not None:
        params["teacher"] = teacher
    route_cols = "".join(f", r.{c}" for c in ESTIMAND_ROUTES) if routes else ""
    route_join = f"JOIN ({routes}) r ON r.id = l.work_id" if routes else ""
    return con.execute(
        f"""
        WITH current AS (
          SELECT work_id, status, categories, about_ca_system, source_ref
          FROM read_parquet({labels}, filename = true, file_row_number = true, hive_partitioning = false)
          WHERE work_id IS NOT NULL {"AND teacher = $teacher" if teacher is not None else ""}
          QUALIFY row_number() OVER (
            PARTITION BY teacher, model, prompt_version, prompt_sha, work_id
            ORDER BY created_at IS NOT NULL DESC, created_at DESC, coalesce(label_id, '') DESC,
                     filename DESC, file_row_number DESC
          ) = 1
        )
        SELECT w.stratum, w.weight, l.categories, {_UNDECIDED} AS undecided, {_ABSENT} AS absent,
               l.about_ca_system{route_cols}, count(*) AS works
        FROM current l JOIN ({weights}) w ON w.id = l.work_id {route_join}
        WHERE l.status = 'labelled'
        GROUP BY ALL ORDER BY ALL
        """,
        params,
    ).fetchall()


def _group_heads(categories, undecided, absent, about_ca_system) -> dict:
    """:func:`head_values` of a group's label (its categories, undecided categories, absent fields, about_ca_system)."""
    ref = {"undecided_categories": undecided or [], "absent": absent or []}
    label = {"status": "labelled", "categories": categories, "source_ref": ref, "about_ca_system": about_ca_system}
    return head_values(label)


def _category_cells(groups: list[tuple]) -> dict[str, list[Cell]]:
    cells: dict[str, list[Cell]] = {c: [] for c in CATEGORIES}
    for stratum, weight, categories, undecided, absent, about, *_, works in groups:
        values = _group_heads(categories, undecided, absent, about)
        for c in CATEGORIES:
            if values[c] is not None:
                cells[c].append((stratum, values[c], weight, works))
    return cells


def _estimand_cells(groups: list[tuple]) -> dict[str, list[Cell]]:
    """``{estimand: cells}`` of groups counted with their routes: a work is a cell of an estimand when the estimand's
    membership is known for it (:meth:`~.estimands.Estimand.member`), with that membership as its value."""
    cells: dict[str, list[Cell]] = {e.name: [] for e in ESTIMANDS}
    for stratum, weight, categories, undecided, absent, about, *flags, works in groups:
        values = _group_heads(categories, undecided, absent, about)
        on = dict(zip(ESTIMAND_ROUTES, flags, strict=True))
        for e in ESTIMANDS:
            member = e.member(values, on)
            if member is not None:
                cells[e.name].append((stratum, member, weight, works))
    return cells


def label_cells(
    con: duckdb.DuckDBPyConnection, labels: str, weights: str, teacher: str | None = None, **params
) -> dict[str, list[Cell]]:
    """``{category: cells}`` of the current labelled rows of the label table ``labels`` (a ``read_parquet``
    source; with ``teacher``, that teacher's rows only) weighted by ``weights`` (a query giving ``(id, stratum,
    weight)``, one row per work, its ``$name`` parameters in ``params``); works without a weight are left out.

    The current label of a work is what :func:`~metacan_pipeline.teachers.core.agreement.current_labelled` keeps: per
    configuration (teacher, model, prompt version and SHA) the newest row (by ``created_at``, none first, then
    ``label_id``, then table order: file, row), if it is labelled. DuckDB counts the works of each (stratum,
    weight, categories, undecided categories, ...); each count becomes a cell of every category whose head
    :func:`~metacan_pipeline.teachers.core.agreement.head_values` gives a value for such a label."""
    return _category_cells(_labelled_groups(con, labels, weights, teacher, **params))


def frame_routes(storage: MetacanStorage, con: duckdb.DuckDBPyConnection) -> tuple[str | None, str | None]:
    """A query giving ``(id, ca_aff, ca_fund, ca_venue)`` once per frame work (a route true in any of a work's rows
    is true), and None; or None and why the estimands cannot be computed when the frame has no such route column (a
    frame the ``frame`` asset did not build)."""
    files = _files(storage, "frame")
    present = {
        r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({files}, hive_partitioning = false)").fetchall()
    }
    missing = [c for c in ESTIMAND_ROUTES if c not in present]
    if missing:
        return None, (
            f"not computed: the frame has no route column {', '.join(missing)} (SPEC section 2); rebuild the frame "
            "(materialize frame)"
        )
    flags = ", ".join(f"coalesce(bool_or({c}), false) AS {c}" for c in ESTIMAND_ROUTES)
    return f"SELECT id, {flags} FROM read_parquet({files}, hive_partitioning = false) GROUP BY id", None


# ---- the rows, by method ---------------------------------------------------------------------------


def _rate_row(
    population: str, category: str, teacher: str, e: Estimate, design: str, estimand: str = CATEGORY_RATE
) -> dict:
    return {
        "population": population,
        "estimand": estimand,
        "category": category,
        "method": "design_weighted_teacher_rate",
        "teacher": teacher,
        **e.__dict__,
        "design": design,
    }


def _design_note(design: str, estimand) -> str:
    return f"{design}; {estimand.note}" if estimand.note else design


def frame_teacher_rows(storage: MetacanStorage, registry: dict[str, TeacherSpec]) -> list[dict]:
    """``design_weighted_teacher_rate`` rows of population ``frame``: a teacher covering all works is a census
    (weight 1, one stratum ``census``, the works of the frame), a sample teacher is weighted by ``sample_design``
    (its works ``in_sample``: stratum and design weight; its batch labels, which carry no design weight, are left
    out); a teacher of neither kind, or without labels, gives no row. Per teacher: one row per category (estimand
    ``category``), then one per estimand of :data:`~.estimands.ESTIMANDS` (category ``metaresearch``, the in-scope
    head; the frame's routes joined by work id). Raises FileNotFoundError without a frame, ValueError when the frame
    has no route columns (:func:`frame_routes`)."""
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
        routes, why_not = frame_routes(storage, con)
        for name, spec in registry.items():
            if (spec.coverage != "all" and not spec.covers_sample) or not storage.has_table(direct_labels_key(name)):
                continue
            weights, how = (census, CENSUS_DESIGN) if spec.coverage == "all" else (design, "sample_design")
            labels = _files(storage, direct_labels_key(name))
            groups = _labelled_groups(con, labels, weights, routes=routes) if weights else []
            cells = _category_cells(groups)
            rows += [_rate_row("frame", c, name, stratified_rate(cells[c]), how) for c in CATEGORIES]
            if routes is None:
                rows += [_rate_row("frame", IN_SCOPE, name, stratified_rate([]), why_not, e.name) for e in ESTIMANDS]
                continue
            by_estimand = _estimand_cells(groups)
            rows += [
                _rate_row("frame", IN_SCOPE, name, stratified_rate(by_estimand[e.name]), _design_note(how, e), e.name)
                for e in ESTIMANDS
            ]
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


def _unweighted_row(
    population: str, category: str, method: str, n: int, rate, design: str, estimand: str = CATEGORY_RATE, **extra
) -> dict:
    row = {"population": population, "estimand": estimand, "category": category, "method": method, "teacher": None}
    row["n"] = n
    row.update(n_weighted=None, rate=rate, se=None, ci_low=None, ci_high=None, strata_single=0, design=design)
    return {**row, **extra}


#: The classifier's decision columns counted by classify-and-count, per method: the categories, the about_ca_system flag.
_DECISION_COLUMNS = {
    "classify_and_count": ("candidate_categories", "about_ca_system_candidate"),
    "classify_and_count_consensus": ("consensus_categories", "about_ca_system_consensus"),
}


def classify_and_count_rows(storage: MetacanStorage) -> list[dict]:
    """``classify_and_count`` (and ``classify_and_count_consensus``) rows: the share of frame works whose
    ``predictions.candidate_categories`` (``consensus_categories``) holds the category, then per estimand the share
    of frame works the decisions put in it (``metaresearch`` decided, for the secondary estimand also
    ``about_ca_system_candidate`` / ``_consensus``, and the estimand's routes in the frame); no CI. While a role
    teacher has not passed its qualification test the decisions are not the classifier's to count: the rows
    carry no rate and ``design`` says why (a 0 there would read as a measured prevalence)."""
    if not storage.has_table("predictions"):
        return []
    standing = teacher_standing(storage)
    unqualified = "; ".join(n for n in (standing.sample_not_qualified, standing.census_not_qualified) if n)
    preds = f"read_parquet({_files(storage, 'predictions')}, hive_partitioning = false)"
    members: dict[tuple[str, str], int] = defaultdict(int)
    with _connect(storage) as con:
        n_preds = con.execute(f"SELECT count(*) FROM {preds}").fetchone()[0]
        counts = {
            (col, c): k
            for col, _ in _DECISION_COLUMNS.values()
            for c, k in con.execute(
                f"SELECT c, count(*) FROM (SELECT unnest({col}) c FROM {preds}) GROUP BY c"
            ).fetchall()
        }
        routes, why_not = frame_routes(storage, con) if storage.has_table("frame") else (None, "not computed: no frame")
        flags = ", ".join(f"coalesce(r.{c}, false)" for c in ESTIMAND_ROUTES)
        for method, (col, about) in _DECISION_COLUMNS.items():
            if routes is None:
                break
            groups = con.execute(
                f"SELECT list_contains(coalesce(p.{col}, []), '{IN_SCOPE}'), coalesce(p.{about}, false), {flags}, "
                f"count(*) FROM {preds} p LEFT JOIN ({routes}) r ON r.id = p.id GROUP BY ALL"
            ).fetchall()
            for in_scope, about_system, *on, works in groups:
                heads = {IN_SCOPE: in_scope, "about_ca_system": about_system}
                for e in ESTIMANDS:
                    if e.member(heads, dict(zip(ESTIMAND_ROUTES, on, strict=True))):
                        members[(method, e.name)] += works

    def row(category: str, method: str, count: int, estimand: str = CATEGORY_RATE, note: str | None = None) -> dict:
        if unqualified or (estimand != CATEGORY_RATE and routes is None):
            rate, design = None, f"not computed: {unqualified}" if unqualified else why_not
        else:
            rate, design = (count / n_preds if n_preds else None), "every frame work scored once"
            design += f"; {note}" if note else ""
        return _unweighted_row("frame", category, method, n_preds, rate, design, estimand, n_weighted=float(n_preds))

    rows = [
        row(c, method, counts.get((col, c), 0)) for c in CATEGORIES for method, (col, _) in _DECISION_COLUMNS.items()
    ]
    return rows + [
        row(IN_SCOPE, method, members[(method, e.name)], e.name, e.note)
        for e in ESTIMANDS
        for method in _DECISION_COLUMNS
    ]


def screener_swap_rows(rows: list[dict]) -> list[dict]:
    """``screener_swap_range`` rows: per population, estimand and category with more than one teacher rate in
    ``rows``, the lowest and highest (``ci_low`` / ``ci_high``, ``rate`` their midpoint)."""
    rates: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        if r["method"] == "design_weighted_teacher_rate" and r["rate"] is not None:
            rates[(r["population"], r["estimand"], r["category"])].append(r["rate"])
    order = {name: i for i, name in enumerate([CATEGORY_RATE, *(e.name for e in ESTIMANDS)])}
    keys = sorted(rates, key=lambda k: (k[0], order.get(k[1], len(order)), k[1], k[2]))
    return [
        _unweighted_row(
            population,
            c,
            "screener_swap_range",
            len(rates[key]),
            (min(rates[key]) + max(rates[key])) / 2,
            "teacher rates above",
            estimand,
            ci_low=min(rates[key]),
            ci_high=max(rates[key]),
        )
        for key in keys
        if len(rates[key]) > 1
        for population, estimand, c in [key]
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
    """A markdown table of the ``metaresearch`` rows (population, estimand, method, teacher, n, rate [95% CI]: the
    category rate and every estimand); below it, :data:`CENSUS_NO_SAMPLING_ERROR` when a census rate's interval there
    has zero width."""
    shown = [r for r in rows if r["category"] == "metaresearch"]
    head = (
        "| population | estimand | category | method | teacher | n | rate [95% CI] |\n|---|---|---|---|---|---|---|\n"
    )
    table = head + "".join(
        f"| {r['population']} | {r['estimand']} | {r['category']} | {r['method']} | {r['teacher'] or ''} | {r['n']} "
        f"| {_fmt(r)} |\n"
        for r in shown
    )
    return table + (f"\n{CENSUS_NO_SAMPLING_ERROR}\n" if any(zero_width_census(r) for r in shown) else "")
