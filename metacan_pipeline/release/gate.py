"""The human-validation gate rows a release and the published records read (SPEC section 10): per classifier
version, the heads whose newest ``human_validation`` row of a locked protocol passed.

:func:`passing_heads` is the one rule behind both the rolling layer's withheld categories (:mod:`.layer`) and the
records' ``human_validated:<protocol>`` status (:mod:`metacan_pipeline.publish.human_layer`).
"""

from __future__ import annotations

import duckdb

from ..storage import MetacanStorage

#: The newest human_validation row per (protocol, classifier version, head) that passed, with the protocol's rule.
PASSING_SQL = """
SELECT v.*, p.decision_rule FROM (
  SELECT *, row_number() OVER (PARTITION BY protocol_id, classifier_version, head
                               ORDER BY computed_at DESC, run_id DESC) AS rn
  FROM human_validation) v
JOIN audit_protocols p USING (protocol_id)
WHERE v.rn = 1 AND v.passed
ORDER BY v.classifier_version, v.head, v.protocol_id
"""


def passing_heads(con: duckdb.DuckDBPyConnection) -> dict[str, list[dict]]:
    """``{classifier_version: [passing gate rows]}`` (:data:`PASSING_SQL`; empty before any report)."""
    cur = con.execute(PASSING_SQL)
    names = [d[0] for d in cur.description]
    out: dict[str, list[dict]] = {}
    for values in cur.fetchall():
        row = dict(zip(names, values, strict=True))
        out.setdefault(row["classifier_version"], []).append(row)
    return out


def read_passing_heads(storage: MetacanStorage) -> dict[str, list[dict]]:
    """:func:`passing_heads` on the catalog (a short read-only connection)."""
    with storage.connect(read_only=True) as con:
        try:
            return passing_heads(con)
        except duckdb.CatalogException:
            return {}
