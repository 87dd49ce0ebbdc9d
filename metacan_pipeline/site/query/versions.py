"""The other OpenAlex ids of the works on a page of results (``work_versions``, :mod:`..build.versions`).

:func:`group_versions` gives each listed work the list of its other versions in the release (id, page path, why they
are grouped, whether that version is in the cohort) and folds into the first of them any version the same page lists
again, so a work appears once on a page with "also listed as". Only the page's presentation changes: the cohort's
count, its facets and its exports still count every OpenAlex id, and the next page's cursor is the page's as read.
"""

from __future__ import annotations

from typing import Any

import duckdb


def other_versions(con: duckdb.DuckDBPyConnection, work_keys: list[int]) -> dict[int, list[dict[str, Any]]]:
    """``{work_key: [{"id", "page_path", "basis", "work_key"}, ...]}`` (ids in order) for the works of ``work_keys``
    that have other versions; empty for a release of an earlier layout (no ``work_versions``)."""
    if not work_keys:
        return {}
    try:
        rows = con.execute(
            "SELECT v.work_key, o.work_key, o.id, o.page_path, v.basis FROM work_versions v "
            "JOIN works o ON o.work_key = v.other_key WHERE v.work_key IN (SELECT unnest(?::BIGINT[])) "
            "ORDER BY v.work_key, o.id",
            [work_keys],
        ).fetchall()
    except duckdb.CatalogException:
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    for key, other_key, other_id, path, basis in rows:
        out.setdefault(key, []).append(
            {"work_key": other_key, "id": other_id, "page_path": path, "basis": basis.split(",")}
        )
    return out


def group_versions(con: duckdb.DuckDBPyConnection, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's works (rows of :meth:`..cohort_query.CohortQuery.page`), each with ``versions`` (its other versions,
    :func:`other_versions`, each marked ``listed``: the page lists it too), without the rows that are a version of a
    work listed earlier on the page (they are named in that work's ``versions``)."""
    versions = other_versions(con, [r["work_key"] for r in items])
    on_page = {r["work_key"] for r in items}
    shown: list[dict[str, Any]] = []
    folded: set[int] = set()
    for r in items:
        if r["work_key"] in folded:
            continue
        mine = [{**v, "listed": v["work_key"] in on_page} for v in versions.get(r["work_key"], [])]
        folded.update(v["work_key"] for v in mine)
        shown.append({**r, "versions": mine})
    return shown
