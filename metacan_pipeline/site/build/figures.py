"""The figures of the statistics page, the disagreement dossier's table and the typeahead counts, computed once
when a release is built (:func:`write_figures`, called by :mod:`.build` after ``sql/facets.sql``), so the
served pages read a few small rows whatever the release's size.

- ``release_statistics`` (one JSON row list per figure, the rows of the page's data table): ``frame_by_year``
  (works, invisible to an affiliation-only search, without an abstract, per publication year), ``route_overlaps``
  (works per combination of the four routes, SPEC section 2), ``by_field`` and ``by_language`` (the same three
  counts per value), ``retraction_states`` (works per Retraction Watch state, with OpenAlex's ``is_retracted`` and the
  retractions OpenAlex misses, and the Retraction Watch file's version), ``labels_by_teacher`` (per teacher: labelled and failed direct labels, coverage of the release,
  qualification sentence), ``labels_by_category`` and ``labels_by_study_design`` (works per teacher and value among
  its labelled direct labels), ``decisions_by_category`` (works per classifier version, mode and category, with
  ``prediction_status``), ``teacher_pairs`` (per pair of teachers: works both labelled, works they disagree on,
  per head) and ``release_layers`` (works per release layer of the original protocol, every layer listed); and, when
  the pipeline materialized them, ``filter_recall`` and ``venue_known_item_recall`` (the protocol's instruments ii and
  iii, their rows copied from the warehouse); and the coverage figures of :mod:`.coverage_figures` (top venues,
  funders and institutions, the abstract gap by work type, labelled works by year and by language).
- ``release_prevalence``: the pipeline's ``prevalence`` rows (design-weighted teacher rates with their design-based
  95% CI, classify-and-count, the screener-swap range; :mod:`metacan_pipeline.student.prevalence`) copied verbatim,
  or none when that asset was never materialized (the page says so).
- ``work_disagreements``: one row per work and pair of teachers whose labelled direct labels differ on at least one
  head, the heads named (the rules of :func:`metacan_pipeline.teachers.core.agreement.head_values`: a head a label leaves
  unknown is not a disagreement). Pairs are ``<a> vs <b>`` in name order, as ``teacher_disagreements`` names them.
- ``dossier_works``: what the dossier lists of each of those works, with its record's ``direct_labels`` (every
  teacher's verdict and reason, source and status), so a dossier page never reads ``works``.
- ``facet_value_counts``: every folded value (``facet_codes.norm``: what a text filter matches) of each text filter
  (language, type, field, topic, venue, institution, funder, keyword) with its most frequent spelling, that
  spelling's ``facet_codes`` code and the number of works with any spelling of it in the release (what the
  suggestions answer without a cohort, the home page's choices of language, type and field, and the values
  "did you mean" compares an unknown one with).
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import duckdb
import pyarrow as pa

from ...release.release_layers import RELEASE_LAYERS
from ...tables.site import DISAGREEMENT_SCHEMA, RELEASE_PREVALENCE_SCHEMA, catalog_schema
from ...teachers.core.agreement import HEADS, head_values  # the pipeline's rule of which heads a label gives
from .coverage_figures import coverage_statistics
from .facet_columns import NAME_TABLES

DOSSIER_SCHEMA = catalog_schema("dossier_works")

#: The facets the typeahead completes (:mod:`..web.typeahead`): every text filter; name facets are code lists of
#: ``work_facets``.
TYPEAHEAD_FACETS = ("language", "type", "field", "topic", "venue", "institution", "funder", "keyword")
ROUTES = ("ca_aff", "ca_fund", "ca_venue", "about_ca")

_COUNTS = (
    "count(*) AS works, count(*) FILTER (WHERE w.invisible_to_affiliation_only) AS invisible, "
    "count(*) FILTER (WHERE NOT coalesce(w.has_abstract, false)) AS no_abstract"
)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
    return con.execute(sql, params or []).to_arrow_table().to_pylist()


def statistics(con: duckdb.DuckDBPyConnection) -> dict[str, list[dict]]:
    """Every figure of ``release_statistics`` (module docstring) over a release database's tables."""
    out = {
        "frame_by_year": _rows(con, f"SELECT w.year, {_COUNTS} FROM work_facets w GROUP BY 1 ORDER BY 1 NULLS LAST"),
        "route_overlaps": _rows(
            con,
            f"SELECT {', '.join(f'coalesce(w.{r}, false) AS {r}' for r in ROUTES)}, count(*) AS works "
            "FROM work_facets w GROUP BY ALL ORDER BY works DESC, 1, 2, 3, 4",
        ),
    }
    for name, facet in (("by_field", "field"), ("by_language", "language")):
        out[name] = _rows(
            con,
            f"SELECT k.value, {_COUNTS} FROM work_facets w LEFT JOIN facet_codes k ON k.facet = '{facet}' "
            f"AND k.code = w.{facet} GROUP BY 1 ORDER BY works DESC, 1 NULLS LAST",
        )
    out["retraction_states"] = _rows(
        con,
        "SELECT retraction_state AS state, count(*) AS works, count(*) FILTER (WHERE is_retracted) AS "
        "openalex_retracted, count(*) FILTER (WHERE openalex_missed) AS openalex_missed, (SELECT "
        "record_json->>'$.retraction_watch.version' FROM works WHERE retraction_state <> 'not_checked' LIMIT 1) "
        "AS version FROM works GROUP BY 1 ORDER BY works DESC, 1",
    )
    out["labels_by_teacher"] = _rows(
        con,
        "SELECT teacher, count(*) FILTER (WHERE status = 'labelled') AS labelled, "
        "count(*) FILTER (WHERE status <> 'labelled') AS failed, "
        "count(*) FILTER (WHERE status = 'labelled' AND len(categories) = 0) AS not_metaresearch, "
        "any_value(label_status) FILTER (WHERE status = 'labelled') AS label_status, any_value(qualification) AS "
        "qualification, (SELECT count(*) FROM works) AS release_works FROM work_labels GROUP BY 1 ORDER BY 1",
    )
    out["labels_by_category"] = _rows(
        con,
        "SELECT teacher, category, count(DISTINCT work_key) AS works FROM (SELECT work_key, teacher, "
        "unnest(categories) AS category FROM work_labels WHERE status = 'labelled') GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2",
    )
    out["labels_by_study_design"] = _rows(
        con,
        "SELECT teacher, study_design, count(*) AS works FROM work_labels WHERE status = 'labelled' "
        "GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2 NULLS LAST",
    )
    out["decisions_by_category"] = _rows(
        con,
        "SELECT model_version, mode, category, any_value(prediction_status) AS prediction_status, "
        "count(DISTINCT work_key) AS works FROM work_decisions GROUP BY 1, 2, 3 ORDER BY 1, 2, 5 DESC, 3",
    )
    out["release_layers"] = _rows(
        con,
        "SELECT l.layer, count(w.work_key) AS works FROM unnest(?::VARCHAR[]) WITH ORDINALITY AS l(layer, pos) "
        "LEFT JOIN works w ON w.release_layer = l.layer GROUP BY l.layer, l.pos ORDER BY l.pos",
        [list(RELEASE_LAYERS)],
    )
    out.update(coverage_statistics(con))
    return out


def disagreements(con: duckdb.DuckDBPyConnection) -> tuple[pa.Table, pa.Table, list[dict]]:
    """``work_disagreements`` and ``dossier_works`` rows and the ``teacher_pairs`` figure, from the direct labels of
    the records of the works at least two teachers labelled (module docstring).

    The records are read whole and parsed here: a JSON path over ``works.record_json`` in the statement was evaluated
    on every row before the filter (30 s for 483 works of 100,000; the raw column 0.8 s)."""
    teachers = [r[0] for r in con.execute("SELECT DISTINCT teacher FROM work_labels ORDER BY 1").fetchall()]
    pairs = {f"{a} vs {b}": {h: 0 for h in HEADS} for a, b in combinations(teachers, 2)}
    compared = dict.fromkeys(pairs, 0)
    rows: list[dict] = []
    works: list[dict] = []
    keys = [
        r[0]
        for r in con.execute(
            "SELECT work_key FROM work_labels WHERE status = 'labelled' GROUP BY 1 HAVING count(DISTINCT teacher) >= 2"
        ).fetchall()
    ]
    reader = con.execute(
        "SELECT work_key, id, title, year, venue, page_path, record_json FROM works "
        "WHERE work_key IN (SELECT unnest(?::BIGINT[])) ORDER BY work_key",
        [keys],
    ).to_arrow_reader(10_000)
    for batch in reader:
        for work in batch.to_pylist():
            entries = json.loads(work.pop("record_json")).get("direct_labels") or []
            labels = {x["teacher"]: head_values(x) for x in entries if x.get("status") == "labelled"}
            found = False
            for a, b in combinations(sorted(labels), 2):
                pair = f"{a} vs {b}"
                compared[pair] += 1
                heads = [
                    h
                    for h in HEADS
                    if labels[a][h] is not None and labels[b][h] is not None and labels[a][h] != labels[b][h]
                ]
                for h in heads:
                    pairs[pair][h] += 1
                if heads:
                    found = True
                    rows.append(
                        {"work_key": work["work_key"], "pair": pair, "teacher_a": a, "teacher_b": b, "heads": heads}
                    )
            if found:
                works.append({**work, "direct_labels": json.dumps(entries, ensure_ascii=False)})
    n_diff: dict[str, int] = dict.fromkeys(pairs, 0)
    for r in rows:
        n_diff[r["pair"]] += 1
    figure = [
        {
            "pair": p,
            "teacher_a": p.split(" vs ")[0],
            "teacher_b": p.split(" vs ")[1],
            "compared": compared[p],
            "disagree": n_diff[p],
            "heads": {h: n for h, n in heads.items() if n},
        }
        for p, heads in pairs.items()
    ]
    return (
        pa.Table.from_pylist(rows, schema=DISAGREEMENT_SCHEMA),
        pa.Table.from_pylist(works, schema=DOSSIER_SCHEMA),
        figure,
    )


def copy_prevalence(con: duckdb.DuckDBPyConnection, prevalence_files: Path | None) -> int:
    """Copy the pipeline's ``prevalence`` Parquet files (None: never materialized) into ``release_prevalence``."""
    if prevalence_files is None:
        return 0
    cols = ", ".join(f.name for f in RELEASE_PREVALENCE_SCHEMA if f.name != "position")
    con.execute(
        f"INSERT INTO release_prevalence SELECT row_number() OVER () - 1, {cols} FROM read_parquet(?, "
        "hive_partitioning=false)",
        [str(prevalence_files)],
    )
    return con.execute("SELECT count(*) FROM release_prevalence").fetchone()[0]


#: The original protocol's instruments ii and iii (tables of :mod:`metacan_pipeline.tables.audit`), copied into
#: ``release_statistics`` under their table names, each in its key order.
INSTRUMENT_ORDER = {
    "filter_recall": "reference_source, filter_name, category",
    "venue_known_item_recall": 'system, group_by, "group"',
}


def instrument_rows(con: duckdb.DuckDBPyConnection, files: Path) -> list[dict]:
    """The rows of one instrument table (its Parquet glob ``files``; the table's name is its folder's), in key order,
    without the run columns (``run_id``, ``computed_at``: when, not what)."""
    order = INSTRUMENT_ORDER[files.parent.name]
    rows = _rows(con, f"SELECT * FROM read_parquet(?, hive_partitioning=false) ORDER BY {order}", [str(files)])
    return [{k: v for k, v in r.items() if k not in ("run_id", "computed_at")} for r in rows]


def write_figures(
    con: duckdb.DuckDBPyConnection, prevalence_files: Path | None, instrument_files: dict[str, Path] | None = None
) -> dict[str, int]:
    """Write ``release_statistics``, ``release_prevalence``, ``work_disagreements`` and ``facet_value_counts`` (the
    build, after ``facet_codes`` and ``work_facets``); returns their row counts. ``instrument_files``: the Parquet
    glob of each instrument table the pipeline materialized (:data:`INSTRUMENT_ORDER`; a table not given has no
    figure, and the statistics page says it did not run)."""
    figures = statistics(con)
    for name, files in (instrument_files or {}).items():
        figures[name] = instrument_rows(con, files)
    table, dossier, figures["teacher_pairs"] = disagreements(con)
    con.register("disagreement_rows", table)
    con.execute("INSERT INTO work_disagreements SELECT * FROM disagreement_rows ORDER BY work_key, pair")
    con.unregister("disagreement_rows")
    con.register("dossier_rows", dossier)
    con.execute("INSERT INTO dossier_works SELECT * FROM dossier_rows ORDER BY work_key")
    con.unregister("dossier_rows")
    con.executemany(
        "INSERT INTO release_statistics VALUES (?, ?)", [(k, json.dumps(v, default=str)) for k, v in figures.items()]
    )
    for facet in TYPEAHEAD_FACETS:
        codes = f"unnest(w.{facet})" if facet in NAME_TABLES else f"w.{facet}"
        # per code its works, then per folded value: the works with any of its spellings (a work counted once
        # when two of its names fold alike) and its most frequent spelling
        con.execute(
            f"INSERT INTO facet_value_counts WITH x AS (SELECT DISTINCT w.work_key, k.norm, k.code FROM "
            f"(SELECT w.work_key, {codes} AS code FROM work_facets w) w "
            f"JOIN facet_codes k ON k.facet = '{facet}' AND k.code = w.code), "
            "per_code AS (SELECT norm, code, count(*) AS n FROM x GROUP BY ALL), "
            "per_norm AS (SELECT norm, count(DISTINCT work_key) AS n FROM x GROUP BY norm) "
            f"SELECT '{facet}', k.code, k.value, k.norm, coalesce(m.n, 0) FROM "
            "(SELECT k.norm, arg_min(k.code, (-coalesce(c.n, 0), k.value)) AS code FROM facet_codes k "
            f"LEFT JOIN per_code c ON c.code = k.code WHERE k.facet = '{facet}' GROUP BY k.norm) b "
            f"JOIN facet_codes k ON k.facet = '{facet}' AND k.code = b.code LEFT JOIN per_norm m ON m.norm = b.norm "
            "ORDER BY k.norm"
        )
    return {
        "release_statistics": len(figures),
        "release_prevalence": copy_prevalence(con, prevalence_files),
        "work_disagreements": table.num_rows,
    }
