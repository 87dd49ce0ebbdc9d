"""The blocking check on the human layers of the records (issue 16; SPEC section 8): no ``human_code`` without the
stored final human code behind it, no ``human_validated:<protocol>`` status without a passing newest
``human_validation`` row. :func:`human_layer_problems` is a plain function (tested alone); the asset check wraps it."""

from __future__ import annotations

import json

import dagster as dg

from ..audit.coding import CodingStore
from ..audit.validation import HUMAN_BASES
from ..settings import coding_store_path
from ..storage import MetacanStorage
from .human_layer import human_layer_violations, read_passing_heads


def stored_human_codes(store: CodingStore, protocol_ids: set[str]) -> dict[tuple[str, str], dict]:
    """``{(protocol id, work id): final human code}`` of the coding store (two coders agreed or adjudicated)."""
    return {
        (pid, c["id"]): c
        for pid in sorted(protocol_ids)
        for c in store.adjudicated_codes(pid)
        if c["basis"] in HUMAN_BASES
    }


def human_layer_problems(storage: MetacanStorage) -> tuple[int, list[str]]:
    """Records checked and every violation of :func:`.human_layer.human_layer_violations` over ``work_records``."""
    records = [json.loads(t) for b in storage.iter_batches("work_records", columns=["record_json"])
               for t in b.column("record_json").to_pylist()]  # fmt: skip
    pids = {r["human_code"].get("protocol_id") for r in records if r.get("human_code")}
    stored: dict = {}
    if pids:
        with CodingStore(coding_store_path(str(storage.root))) as store:
            stored = stored_human_codes(store, {p for p in pids if p})
    passing = read_passing_heads(storage)
    violations = [v for r in records for v in human_layer_violations(r, stored, passing)]
    return len(records), violations


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
