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
  ``prediction_status``) and ``teacher_pairs`` (per pair of teachers: works both labelled, works they disagree on,
  per head).
- ``release_prevalence``: the pipeline's ``prevalence`` rows (design-weighted teacher rates with their design-based
  95% CI, classify-and-count, the screener-swap range; :mod:`metacan_pipeline.student.prevalence`) copied verbatim,
  or none when that asset was never materialized (the page says so).
- ``work_disagreements``: one row per work and pair of teachers whose labelled direct labels differ on at least one
  head, the heads named (the rules of :func:`metacan_pipeline.teachers.core.agreement.head_values`: a head a label leaves
  unknown is not a disagreement). Pairs are ``<a> vs <b>`` in name order, as ``teacher_disagreements`` names them.
- ``dossier_works``: what the dossier lists of each of those works, with its record's ``direct_labels`` (every
  teacher's verdict and reason, source and status), so a dossier page never reads ``works``.
- ``facet_value_counts``: every venue, institution, funder and topic with its ``facet_codes`` code and its number of
  works in the release (what the typeahead answers without a cohort).
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import duckdb
import pyarrow as pa

from ...tables.site import DISAGREEMENT_SCHEMA, RELEASE_PREVALENCE_SCHEMA, catalog_schema
from ...teachers.core.agreement import HEADS, head_values  # the pipeline's rule of which heads a label gives

DOSSIER_SCHEMA = catalog_schema("dossier_works")

#: The facets the typeahead completes (:mod:`..web.typeahead`): name facets are code lists of ``work_facets``.
TYPEAHEAD_FACETS = ("venue", "institution", "funder", "topic")
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


def write_figures(con: duckdb.DuckDBPyConnection, prevalence_files: Path | None) -> dict[str, int]:
    """Write ``release_statistics``, ``release_prevalence``, ``work_disagreements`` and ``facet_value_counts`` (the
    build, after ``facet_codes`` and ``work_facets``); returns their row counts."""
    figures = statistics(con)
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
        values = f"unnest(w.{facet})" if facet in ("institution", "funder") else f"w.{facet}"
        con.execute(
            f"INSERT INTO facet_value_counts SELECT '{facet}', k.code, k.value, coalesce(g.n, 0) FROM facet_codes k "
            f"LEFT JOIN (SELECT code, count(*) AS n FROM (SELECT {values} AS code FROM work_facets w) GROUP BY 1) g "
            f"ON g.code = k.code WHERE k.facet = '{facet}' ORDER BY k.code"
        )
    return {
        "release_statistics": len(figures),
        "release_prevalence": copy_prevalence(con, prevalence_files),
        "work_disagreements": table.num_rows,
    }
