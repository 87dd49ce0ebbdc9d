"""Paths of the shared real data and helpers that read a Dagster result or query the warehouse, for every stage's tests."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from metacan_pipeline.storage import MetacanStorage

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("METACAN_SHARED_DIR", REPO.parent / "shared"))
OPENALEX = SHARED / "data" / "openalex"
#: 1,054 more real work records in shapes ../openalex lacks (its SOURCES.md): 2022 schema, a tar.gz, .txt JSON Lines, ...
OPENALEX_MORE = SHARED / "data" / "openalex_more"
PILOT = SHARED / "data" / "metacan_pilot"

#: An injection payload that every rendered page must escape.
XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def node_metadata(result, node: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(node)[0].metadata.items()}


def check_evaluation(result, name: str):
    return next(e for e in result.get_asset_check_evaluations() if e.check_name == name)


def root_error(result) -> str:
    """The innermost error message of the first failed step (what the operator reads)."""
    for e in result.all_events:
        if e.is_step_failure:
            err = e.event_specific_data.error
            while err.cause is not None:
                err = err.cause
            return f"{err.cls_name}: {err.message}"
    return ""


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == asset]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def failure_messages(result) -> list[str]:
    return [e.event_specific_data.error.message for e in result.all_events if e.is_step_failure]


def sql(storage: MetacanStorage, query: str) -> list[tuple]:
    with storage.connect() as con:
        return con.execute(query).fetchall()
