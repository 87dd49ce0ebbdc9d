"""The publish stage's blocking checks on ``work_records`` (SPEC sections 8 and 9).

- ``records_may_ship``: every record matches the JSON Schema and SPEC section 8, and a rolling-layer record shows no
  classifier category of a head that has not passed human validation (:func:`.record_check.check_records`).
- ``records_in_one_release_layer``: every record carries exactly one of the protocol's release layers
  (:func:`release_layer_counts`, in DuckDB over the record JSON: the works per layer, and the works with none or
  another value); that the layer is the one the rule gives is part of ``records_may_ship``'s per-record scan.
- ``records_human_layers_backed``: no ``human_code`` without the stored final human code behind it, no
  ``human_validated:<protocol>`` status without a passing newest ``human_validation`` row, no study-design label
  that "agrees with MEDLINE" without a passing newest ``medline_study_design`` row (:mod:`.medline_layer`).
  :func:`human_layer_problems` is a plain function (tested alone); the asset check wraps it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator

import dagster as dg
import duckdb
import pyarrow.compute as pc

from ..audit.coding.store import CodingStore
from ..audit.estimates.validation import HUMAN_BASES
from ..release.gate import read_passing_heads
from ..release.layer import passed_heads
from ..release.release_layers import FIELD as RELEASE_LAYER
from ..release.release_layers import RELEASE_LAYERS
from ..settings import coding_store_path
from ..storage import MetacanStorage, sql_literal
from .human_layer import human_layer_violations
from .medline_layer import medline_violations, read_medline_verdicts
from .record_build import RecordWorkerDied, record_workers
from .record_check import check_records


def stored_human_codes(store: CodingStore, protocol_ids: set[str]) -> dict[tuple[str, str], dict]:
    """``{(protocol id, work id): final human code}`` of the coding store (two coders agreed or adjudicated)."""
    return {
        (pid, c["id"]): c
        for pid in sorted(protocol_ids)
        for c in store.adjudicated_codes(pid)
        if c["basis"] in HUMAN_BASES
    }


def human_layer_problems(storage: MetacanStorage) -> tuple[int, list[str]]:
    """Records checked and every violation of :func:`.human_layer.human_layer_violations` and
    :func:`.medline_layer.medline_violations` over ``work_records``,
    in record order. A record carries the keys ``human_code`` and ``human_validation`` only when it has that layer
    (:func:`.records.build_record`), and json.dumps writes a key as ``"<key>"`` where a string value's quotes would
    be escaped: only the records whose JSON text holds one of them are parsed (Arrow's substring match); the others
    have no human layer to check. Two passes over the records in batches (the protocols their human codes name, when
    there is a coding store, then the violations), so memory holds one batch, never the table."""
    codes = coding_store_path(str(storage.root))
    pids = {  # no coding store, no stored human code: every human_code is a violation, whatever its protocol
        r["human_code"].get("protocol_id")
        for _, batch in (_record_batches(storage, ('"human_code"',)) if codes.exists() else ())
        for r in batch
        if r.get("human_code")
    }
    stored: dict = {}
    if pids:
        with CodingStore(codes) as store:
            stored = stored_human_codes(store, {p for p in pids if p})
    passing = read_passing_heads(storage)
    medline = read_medline_verdicts(storage)
    checked, violations = 0, []
    for rows, batch in _record_batches(storage, ('"human_code"', '"human_validation"', '"study_design_medline"')):
        checked += rows
        violations += [v for r in batch for v in human_layer_violations(r, stored, passing)]
        violations += [v for r in batch for v in medline_violations(r, medline)]
    return checked, violations


def _record_batches(storage: MetacanStorage, keys: tuple[str, ...]) -> Iterator[tuple[int, list[dict]]]:
    """``work_records`` one Parquet batch (50,000 records) at a time: the batch's row count and its records whose JSON
    text holds one of ``keys`` (quoted), parsed."""
    for b in storage.iter_batches("work_records", columns=["record_json"]):
        text = b.column("record_json")
        hits = functools.reduce(pc.or_, [pc.fill_null(pc.match_substring(text, key), False) for key in keys])
        yield b.num_rows, [json.loads(t) for t in text.filter(hits).to_pylist()]


@dg.asset_check(
    asset="work_records",
    blocking=True,
    description="SPEC section 8: a human-coded layer only where the coding store holds the work's final human code, "
    "a human_validated:<protocol> status only for a (classifier version, head) whose newest human_validation row passed.",
)
def records_human_layers_backed(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails (blocking work_pages and site_database) on any human layer without its stored code or passing gate."""
    checked, violations = human_layer_problems(storage)
    return dg.AssetCheckResult(
        passed=not violations,
        metadata={
            "records_checked": checked,
            "violations_count": len(violations),
            "violations": dg.MetadataValue.json(violations[:20]),
        },
    )


@dg.asset_check(
    asset="work_records",
    blocking=True,
    description="SPEC sections 8 and 9: every record matches the JSON Schema; no score_only row carries a category; "
    "every category carries source and status; no classifier category on a rolling-layer work from a version and head "
    "that has not passed human validation.",
)
def records_may_ship(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails (and, being blocking, stops ``work_pages``) when any record breaks SPEC section 8 or the schema.

    Each record is validated against ``publish/work_record.schema.json`` (JSON Schema draft-07, compiled by
    fastjsonschema; the first error per record is reported) and
    `records.ship_violations` and `release.layer.rolling_violations`, file by file in
    worker processes (`record_check.check_records`). Metadata: the number of violating records and up to 20
    violations, each naming the work id and the field.
    """
    with storage.connect() as con:
        passed = passed_heads(con)
    try:
        checked, bad, violations = check_records(storage, passed, record_workers())
    except RecordWorkerDied as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    return dg.AssetCheckResult(
        passed=bad == 0,
        metadata={
            "records_checked": checked,
            "violating_records": bad,
            "violations": dg.MetadataValue.json(violations[:20]),
        },
    )


def release_layer_counts(storage: MetacanStorage, shown: int = 20) -> tuple[dict[str, int], int, list[str]]:
    """``({layer: works}, works in no layer, the first ``shown`` of them as "<id>: ...")`` over ``work_records``: a
    record is in no layer when its ``release_layer`` is missing or not one of
    :data:`~metacan_pipeline.release.release_layers.RELEASE_LAYERS` (one DuckDB pass over the record JSON; a JSON field
    holds one value, so a record is never in two). Every layer is listed, 0 included."""
    storage.require("work_records")
    files = sql_literal(str(storage.table_dir("work_records") / "*.parquet"))
    with duckdb.connect() as con:
        con.execute(
            f"CREATE TEMP TABLE l AS SELECT id, json_extract_string(record_json, '$.{RELEASE_LAYER}') AS layer "
            f"FROM read_parquet({files}, hive_partitioning=false)"
        )
        counts = dict(con.execute("SELECT layer, count(*) FROM l GROUP BY layer").fetchall())
        outside = con.execute(
            "SELECT id, layer FROM l WHERE layer IS NULL OR layer NOT IN (SELECT unnest(?::VARCHAR[])) "
            "ORDER BY id LIMIT ?",
            [list(RELEASE_LAYERS), shown],
        ).fetchall()
    none = sum(n for layer, n in counts.items() if layer not in RELEASE_LAYERS)
    sentences = [
        f"{wid}: in no release layer ({'no release_layer' if layer is None else repr(layer)}; one of "
        f"{', '.join(RELEASE_LAYERS)} is needed): re-materialize work_records"
        for wid, layer in outside
    ]
    return {layer: counts.get(layer, 0) for layer in RELEASE_LAYERS}, none, sentences


@dg.asset_check(
    asset="work_records",
    blocking=True,
    description="SPEC section 11: every published work is in exactly one release layer of the original protocol "
    "(human_verified, high_precision, provisional, contested); the works per layer.",
)
def records_in_one_release_layer(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails (blocking work_pages, the release and site_database) when a record carries no release layer or one the
    protocol does not name (:func:`release_layer_counts`)."""
    counts, none, sentences = release_layer_counts(storage)
    return dg.AssetCheckResult(
        passed=none == 0,
        metadata={
            **{f"works_{layer}": n for layer, n in counts.items()},
            "works_in_no_layer": none,
            "violations": dg.MetadataValue.json(sentences),
        },
    )
