"""Agreement between teacher configurations: Cohen's kappa per head, raw and design-weighted.

Heads (SPEC section 6): the 11 binary heads (9 categories, ``about_ca_system``, ``about_ca_topic``), the
3 categorical heads (``domain``, ``study_design``, ``genre``) and ``category_set`` (exact agreement on
the whole category list). A work is compared on a head only when both labels give it a value
(:func:`head_values`); a missing value is unknown, never a negative (SPEC section 4). Explicitly:

- only ``labelled`` rows are compared: a ``failed`` label (and a work one side never labelled) is
  unknown on every head, so the work is not among the ``n`` of any head;
- an ``insufficient_payload`` label (the teacher declined to judge, SPEC section 3) is compared on the
  ``insufficient_payload`` head (True) and on ``category_set``; every other head is unknown for it,
  since a declined judgment says nothing about metaresearch, domain or genre;
- a field the label's source never provides (``absent`` in the import's ``source_ref``) and a category
  it cannot express (``undecided_categories``, e.g. every category but ``metaresearch`` for the pilot
  screeners) are unknown; ``category_set`` is unknown when any category is undecided;
- ``domain`` is null in a label without ``metaresearch`` (SPEC section 3); when the source gives domains
  that null is the class ``not_metaresearch`` (the first class of the domain head), else unknown.

Kappa (Cohen 1960): ``(p_o - p_e) / (1 - p_e)`` with observed agreement ``p_o`` and chance agreement
``p_e = sum_k p_a(k) p_b(k)`` from the two marginals. Design-weighted: every work counts with its design
weight ``w`` (SPEC section 5, Hajek): ``p_o = sum w [a = b] / sum w`` and ``p_a(k) = sum w [a = k] / sum w``.
``sklearn.metrics.cohen_kappa_score(..., sample_weight=w)`` computes exactly this (its confusion matrix
is the weighted one); it is undefined (None here) when both sides use one and the same value throughout.
"""

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import duckdb

from ...meta import table_metadata
from ...storage import MetacanStorage, sql_literal
from ...tables.teachers import AGREEMENT_SCHEMA
from ...vocab import (
    BINARY_TARGETS,
    CATEGORICAL_TARGETS,
    CATEGORIES,
    INSUFFICIENT_PAYLOAD,
)

CATEGORY_SET = "category_set"
HEADS: tuple[str, ...] = BINARY_TARGETS + tuple(CATEGORICAL_TARGETS) + (CATEGORY_SET,)
NO_CATEGORY = "(none)"
"""``category_set`` value of an empty category list ("not meta-research")."""


def agreement(a: Sequence[Any], b: Sequence[Any], weights: Sequence[float] | None = None) -> float | None:
    """Share of positions where ``a[i] == b[i]``, each counted with ``weights[i]`` (default 1).

    Shapes: three sequences of one length. Returns None when there is nothing to compare (no position, or
    the weights sum to 0).
    """
    w = [1.0] * len(a) if weights is None else [float(x) for x in weights]
    if len(a) != len(b) or len(a) != len(w):
        raise ValueError(f"agreement: lengths differ (a {len(a)}, b {len(b)}, weights {len(w)})")
    total = sum(w)
    if not a or total <= 0:
        return None
    return sum(wi for ai, bi, wi in zip(a, b, w, strict=False) if ai == bi) / total


def kappa(a: Sequence[Any], b: Sequence[Any], weights: Sequence[float] | None = None) -> float | None:
    """Cohen's kappa of two raters' values (module docstring), design-weighted with ``weights``.

    Values are any hashable labels (booleans, class names). Returns None when undefined: no position,
    or both raters give one and the same value everywhere (``p_e = 1``). Computed by
    ``sklearn.metrics.cohen_kappa_score`` (``sample_weight`` = the design weights).
    """
    if len(a) != len(b) or (weights is not None and len(weights) != len(a)):
        raise ValueError(
            f"kappa: lengths differ (a {len(a)}, b {len(b)}, weights {None if weights is None else len(weights)})"
        )
    if not a or len(set(a) | set(b)) < 2:
        return None
    from sklearn.metrics import cohen_kappa_score  # here: scikit-learn takes 3.6 s to import, every step process

    # sklearn sorts the labels: give it strings so that booleans and class names sort alike.
    return float(cohen_kappa_score([str(x) for x in a], [str(x) for x in b], sample_weight=weights))


def _ref(label: Mapping[str, Any]) -> dict[str, Any]:
    ref = label.get("source_ref")
    if isinstance(ref, str) and ref:
        try:
            ref = json.loads(ref)
        except json.JSONDecodeError:
            return {}
    return ref if isinstance(ref, dict) else {}


def head_values(label: Mapping[str, Any]) -> dict[str, Any]:
    """The value of every head in :data:`HEADS` for one stored label row (columns of
    ``teacher_labels``: ``status``, ``categories``, ``domain``, ..., optional ``source_ref``), None where
    unknown (rules in the module docstring). Binary heads are booleans, the others strings.
    """
    values: dict[str, Any] = dict.fromkeys(HEADS)
    if label.get("status") != "labelled":
        return values
    ref = _ref(label)
    absent = set(ref.get("absent") or ())
    undecided = set(ref.get("undecided_categories") or ())
    cats = set(label.get("categories") or ())
    declined = INSUFFICIENT_PAYLOAD in cats
    for c in CATEGORIES:
        if c not in undecided and (not declined or c == INSUFFICIENT_PAYLOAD):
            values[c] = c in cats
    if not undecided:
        values[CATEGORY_SET] = ",".join(c for c in CATEGORIES if c in cats) or NO_CATEGORY
    if declined:
        return values
    for key in ("about_ca_system", "about_ca_topic", "study_design", "genre"):
        values[key] = None if key in absent else label.get(key)
    if "domain" not in absent:
        if label.get("domain") is not None:
            values["domain"] = label["domain"]
        elif values["metaresearch"] is False:
            values["domain"] = CATEGORICAL_TARGETS["domain"][0]  # not_metaresearch
    return values


@dataclass(frozen=True)
class HeadAgreement:
    """Agreement of two configurations on one head: ``n`` works compared, raw ``agreement`` and
    ``kappa``; ``n_with_weight`` of them carry a design weight, ``n_weighted`` is the sum of those weights
    (the population they stand for) and ``weighted_agreement`` / ``weighted_kappa`` use them."""

    head: str
    n: int
    agreement: float | None
    kappa: float | None
    n_with_weight: int
    n_weighted: float
    weighted_agreement: float | None
    weighted_kappa: float | None


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def compare(
    labels_a: Mapping[str, Mapping[str, Any]],
    labels_b: Mapping[str, Mapping[str, Any]],
    weights: Mapping[str, float | None] | None = None,
) -> tuple[list[HeadAgreement], list[tuple[str, str, str, str]]]:
    """Compare two configurations' labels (``{work_id: label row}``) on every head of :data:`HEADS`.

    ``weights``: ``{work_id: design weight}``; works without one (or with a weight <= 0) count in the raw
    figures only. Returns one :class:`HeadAgreement` per head (in :data:`HEADS` order, ``n`` = 0 when
    nothing is comparable) and the disagreements ``(work_id, head, value_a, value_b)`` sorted by work id
    and head order (booleans as ``true``/``false``).
    """
    weights = weights or {}
    common = sorted(set(labels_a) & set(labels_b))
    va = {w: head_values(labels_a[w]) for w in common}
    vb = {w: head_values(labels_b[w]) for w in common}
    results: list[HeadAgreement] = []
    disagreements: list[tuple[str, str, str, str]] = []
    for head in HEADS:
        works = [w for w in common if va[w][head] is not None and vb[w][head] is not None]
        a = [va[w][head] for w in works]
        b = [vb[w][head] for w in works]
        weighted = [(x, y, weights[w]) for w, x, y in zip(works, a, b, strict=False) if (weights.get(w) or 0) > 0]
        wa, wb, ww = ([t[i] for t in weighted] for i in range(3))
        results.append(
            HeadAgreement(
                head=head,
                n=len(works),
                agreement=agreement(a, b),
                kappa=kappa(a, b),
                n_with_weight=len(weighted),
                n_weighted=float(sum(ww)),
                weighted_agreement=agreement(wa, wb, ww),
                weighted_kappa=kappa(wa, wb, ww),
            )
        )
        disagreements += [(w, head, _text(x), _text(y)) for w, x, y in zip(works, a, b, strict=False) if x != y]
    disagreements.sort(key=lambda r: (r[0], HEADS.index(r[1])))
    return results, disagreements


# ---- the teacher_agreement asset --------------------------------------------------------------------


@dataclass(frozen=True)
class TeacherConfig:
    """A teacher configuration (the label-store key) and where its current labels were read:
    ``kind`` ``registry`` (table ``direct_labels_<name>``) or ``import`` (table ``imported_labels``)."""

    teacher: str
    model: str | None
    prompt_version: str | None
    prompt_sha: str | None
    kind: str

    @property
    def key(self) -> tuple:
        return (self.teacher, self.model, self.prompt_version, self.prompt_sha)

    def describe(self) -> str:
        return f"{self.teacher} | {self.model} | {self.prompt_version} | {self.prompt_sha} ({self.kind})"


def current_labelled(rows: list[dict]) -> dict[tuple, dict[str, dict]]:
    """``{config key: {work_id: newest row}}``, keeping only works whose newest row is labelled."""
    newest: dict[tuple, dict[str, dict]] = {}
    for r in sorted(
        rows, key=lambda r: (r.get("created_at") is not None, r.get("created_at") or 0, r.get("label_id") or "")
    ):
        if r.get("work_id") is not None:
            newest.setdefault((r["teacher"], r.get("model"), r.get("prompt_version"), r.get("prompt_sha")), {})[
                r["work_id"]
            ] = r
    return {k: {w: r for w, r in v.items() if r.get("status") == "labelled"} for k, v in newest.items()}


Loaded = tuple[
    list[TeacherConfig],
    dict[tuple, dict[str, dict]],
    dict[str, float],
    dict[str, dict[str, float]],
    dict[tuple, set[str]],
]

#: A label table's rows in the order :func:`current_labelled` keeps the newest of a work: by ``created_at`` (none
#: first), then ``label_id``, then table order (file, row), the last one newest.
_NEWEST_LAST = "created_at IS NOT NULL, created_at, coalesce(label_id, ''), filename, file_row_number"
_CONFIG = "teacher, model, prompt_version, prompt_sha"


def _current_sql(tables: list[str]) -> str:
    """A query over the label tables' Parquet files (``tables``: their ``read_parquet`` sources in reading
    order) for what :func:`current_labelled` keeps of them, as narrow rows ``(t, config, work_id, status, filename,
    file_row_number, first)``: each configuration read from the first table that holds it (``t``: its position),
    each work's newest row there (``filename``, ``file_row_number``: where it is), ``first``: the configuration's
    first position in that table's order (which orders the configurations)."""
    cols = f"{_CONFIG}, work_id, status, created_at, label_id, filename, file_row_number"
    union = " UNION ALL ".join(
        f"SELECT {i} AS t, {cols} FROM read_parquet({src}, filename=true, file_row_number=true, "
        "hive_partitioning=false)"
        for i, src in enumerate(tables)
    )
    return f"""
        WITH rows AS (SELECT * FROM ({union}) WHERE work_id IS NOT NULL),
        owned AS (SELECT * FROM rows QUALIFY t = min(t) OVER (PARTITION BY {_CONFIG})),
        ordered AS (SELECT *, row_number() OVER (PARTITION BY t ORDER BY {_NEWEST_LAST}) AS pos FROM owned)
        SELECT t, {_CONFIG}, work_id, status, filename, file_row_number,
               min(pos) OVER (PARTITION BY {_CONFIG}) AS first
        FROM ordered
        QUALIFY row_number() OVER (PARTITION BY {_CONFIG}, work_id ORDER BY pos DESC) = 1
    """


def load_labelled(storage: MetacanStorage) -> tuple[Loaded, dict[tuple, int]]:
    """(Configurations, their current labelled rows by work, sample_design weights, imported_design weights
    by source, the sources of each imported configuration (``label_imports``)), and each configuration's number of
    labelled works.

    DuckDB reads the label tables and keeps what :func:`current_labelled` keeps (each configuration from the first
    table holding it, each work's newest row, labelled); of those, only the works two configurations or more
    labelled come to Python as rows (no other work is in any pair's comparison), with their ``sample_design``
    weights, so memory follows the overlap of the teachers (the sample), not the frame."""
    tables = [
        ("registry", p.name) for p in sorted(storage.warehouse.glob("direct_labels_*")) if storage.has_table(p.name)
    ]
    if storage.has_table("imported_labels"):
        tables.append(("import", "imported_labels"))
    configs: list[TeacherConfig] = []
    labels: dict[tuple, dict[str, dict]] = {}
    counts: dict[tuple, int] = {}
    sample_w: dict[str, float] = {}
    con = duckdb.connect(config={"memory_limit": "1GB", "temp_directory": str(storage.warehouse / ".spill-agreement")})
    try:
        if tables:
            sources = [sql_literal(str(storage.table_dir(name) / "*.parquet")) for _, name in tables]
            con.execute(f"CREATE TEMP TABLE current AS {_current_sql(sources)}")
            for t, *key, _first, n in con.execute(
                f"SELECT t, {_CONFIG}, first, count(*) FILTER (WHERE status = 'labelled') FROM current "
                f"GROUP BY ALL ORDER BY t, first"
            ).fetchall():
                configs.append(TeacherConfig(*key, kind=tables[t][0]))
                labels[tuple(key)] = {}
                counts[tuple(key)] = n
            con.execute(
                "CREATE TEMP TABLE shared AS SELECT t, work_id, filename, file_row_number FROM current "
                "WHERE status = 'labelled' QUALIFY count(*) OVER (PARTITION BY work_id) >= 2"
            )
            for t, src in enumerate(sources):  # the whole rows of the shared works, read where they are
                for batch in con.execute(
                    f"SELECT * EXCLUDE (filename, file_row_number) FROM read_parquet({src}, filename=true, "
                    "file_row_number=true, hive_partitioning=false) "
                    "WHERE (filename, file_row_number) IN (SELECT (filename, file_row_number) FROM shared WHERE t = ?)",
                    [t],
                ).to_arrow_reader(10_000):
                    for row in batch.to_pylist():
                        key = (row["teacher"], row["model"], row["prompt_version"], row["prompt_sha"])
                        labels[key][row["work_id"]] = row
            if storage.has_table("sample_design"):
                src = sql_literal(str(storage.table_dir("sample_design") / "*.parquet"))
                sample_w = dict(
                    con.execute(
                        f"SELECT id, design_weight FROM read_parquet({src}, hive_partitioning=false) "
                        "WHERE id IN (SELECT work_id FROM shared)"
                    ).fetchall()
                )
    finally:
        con.close()
    imported_w: dict[str, dict[str, float]] = {}
    sources: dict[tuple, set[str]] = {}
    with storage.connect() as con:
        present = {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema='main'"
            ).fetchall()
        }
        if "imported_design" in present:
            for source, work, weight in con.execute(
                "SELECT source, work_id, design_weight FROM imported_design"
            ).fetchall():
                imported_w.setdefault(source, {})[work] = weight
        if "label_imports" in present:
            for *key, source in con.execute(
                "SELECT DISTINCT teacher, model, prompt_version, prompt_sha, source FROM label_imports"
            ).fetchall():
                sources.setdefault(tuple(key), set()).add(source)
    return (configs, labels, sample_w, imported_w, sources), counts


def pair_weights(
    a: TeacherConfig,
    b: TeacherConfig,
    sample_w: Mapping[str, float],
    imported_w: Mapping[str, Mapping[str, float]],
    sources: Mapping[tuple, set[str]],
) -> tuple[dict[str, float | None], str]:
    """The design weights for comparing ``a`` and ``b`` and which design they come from.

    Two imported configurations use the design of their sources (``imported_design``; a work given two
    different weights by those sources gets none); a pair with a registry teacher uses the frame's
    ``sample_design.design_weight`` (SPEC section 5), since registry teachers label the frame's sample.
    """
    if a.kind == b.kind == "import":
        names = sorted(sources.get(a.key, set()) | sources.get(b.key, set()))
        weights: dict[str, float | None] = {}
        for name in names:
            for work, w in imported_w.get(name, {}).items():
                weights[work] = w if weights.get(work, w) == w else None
        return weights, "imported_design: " + ("; ".join(names) or "(no source)")
    return dict(sample_w), "sample_design"


def _fmt(v: float | None, digits: int = 4) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def _pair_md(rows: list[dict]) -> dg.MetadataValue:
    shown = [r for r in rows if r["n"] > 0]
    skipped = [r["head"] for r in rows if r["n"] == 0]
    md = "| head | n | agreement | kappa | n_weighted | weighted agreement | weighted kappa |\n|---|---|---|---|---|---|---|\n"
    md += "".join(
        f"| {r['head']} | {r['n']} | {_fmt(r['agreement'])} | {_fmt(r['kappa'])} | {_fmt(r['n_weighted'], 1)} | "
        f"{_fmt(r['weighted_agreement'])} | {_fmt(r['weighted_kappa'])} |\n"
        for r in shown
    )
    if not shown:
        md = "_No work labelled by both on any head._\n"
    if rows:
        md += f"\nWeights: {rows[0]['weights']}.\n"
    if skipped:
        md += f"\nNot comparable (a side gives no value): {', '.join(skipped)}.\n"
    return dg.MetadataValue.md(md)


def short_names(configs: Sequence[TeacherConfig]) -> dict[tuple, str]:
    """``{config key: name}``: the teacher name, or ``teacher@model/prompt_version/prompt_sha[:8]`` when
    the teacher has several configurations."""
    names = Counter(c.teacher for c in configs)
    return {
        c.key: c.teacher
        if names[c.teacher] == 1
        else f"{c.teacher}@{c.model}/{c.prompt_version}/{(c.prompt_sha or '')[:8]}"
        for c in configs
    }


@dataclass
class PairComparison:
    """Every pair of configurations compared: ``configs`` in name order (:func:`short_names`), ``rows``
    (:data:`AGREEMENT_SCHEMA`), ``diffs`` (:data:`DISAGREEMENTS_SCHEMA`) and ``per_pair`` (the rows of
    each pair name, in name order)."""

    configs: list[TeacherConfig]
    rows: list[dict]
    diffs: list[dict]
    per_pair: dict[str, list[dict]]


def compare_pairs(loaded: Loaded) -> PairComparison:
    """Compare every pair ``<a> vs <b>`` of the configurations of ``loaded`` (:func:`load_labelled`), named and
    ordered by :func:`short_names` (:func:`compare` with the weights of :func:`pair_weights`)."""
    configs, labels, sample_w, imported_w, sources = loaded
    short = short_names(configs)
    configs = sorted(configs, key=lambda c: short[c.key])
    out = PairComparison(configs, [], [], {})
    for i, a in enumerate(configs):
        for b in configs[i + 1 :]:
            pair = f"{short[a.key]} vs {short[b.key]}"
            weights, design = pair_weights(a, b, sample_w, imported_w, sources)
            heads, disagreements = compare(labels[a.key], labels[b.key], weights)
            out.per_pair[pair] = [
                {"pair": pair, **h.__dict__, "config_a": a.describe(), "config_b": b.describe(), "weights": design}
                for h in heads
            ]
            out.rows += out.per_pair[pair]
            out.diffs += [
                {"pair": pair, "work_id": w, "head": h, "value_a": x, "value_b": y} for w, h, x, y in disagreements
            ]
    return out


def agreement_note(compared: PairComparison) -> str:
    """One line saying what was compared, or why nothing was (not an error)."""
    configs = compared.configs
    if len(configs) < 2:
        return (
            f"Nothing to compare: {len(configs)} teacher configuration(s) with labels "
            f"({', '.join(c.describe() for c in configs) or 'none'}); materialize direct_labels_* or imported_labels."
        )
    if not any(r["n"] for r in compared.rows):
        return "Nothing to compare: no pair of teacher configurations labelled a common work."
    return f"{len(compared.per_pair)} pair(s) of {len(configs)} teacher configurations compared."


def agreement_metadata(compared: PairComparison, counts: dict[tuple, int], n: int, n_diff: int, note: str) -> dict:
    """The metadata of ``teacher_agreement`` (``n`` rows; ``n_diff`` rows in ``teacher_disagreements``): the
    table's, the note, every configuration with its labelled works (``counts``, from :func:`load_labelled`) and
    one Markdown table per pair."""
    return table_metadata(
        AGREEMENT_SCHEMA,
        n,
        [r for r in compared.rows if r["n"]][:10],
        ["pair", "head", "n", "agreement", "kappa", "weighted_kappa"],
        note=note,
        configurations=dg.MetadataValue.md(
            "".join(f"- {c.describe()}: {counts[c.key]} labelled works\n" for c in compared.configs) or "_(none)_"
        ),
        disagreements_row_count=n_diff,
        **{f"pair: {p}": _pair_md(r) for p, r in compared.per_pair.items()},
    )
