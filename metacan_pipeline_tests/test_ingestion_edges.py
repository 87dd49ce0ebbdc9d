"""Edge cases of frame ingestion found by trying to break it: each test failed before its fix.

Inputs are built in ``tmp_path`` from real OpenAlex work records (../shared/data/openalex), in the
snapshot layout where it matters, as in ``test_bad_input``.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from metacan_pipeline.definitions import all_partitions_run_tags, build_resources, defs, materialize_in_process

from .test_bad_input import _copy_funders, _is_canadian, _write_part, real_works  # noqa: F401 (a fixture)


def _failure_messages(result) -> list[str]:
    return [e.event_specific_data.error.message for e in result.all_events if e.is_step_failure]


def _ca(works: dict[str, dict]) -> list[str]:
    return sorted(k for k, w in works.items() if _is_canadian(w))


def test_an_empty_input_folder_fails_the_inventory_naming_the_folder(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    instance = dg.DagsterInstance.ephemeral()
    result = materialize_in_process(instance, build_resources(str(tmp_path / "data"), str(inp)), through="frame")
    assert not result.success
    [msg] = _failure_messages(result)
    assert "no OpenAlex input files" in msg and str(inp) in msg and "METACAN_OPENALEX_DIR" in msg
    # no materialization of the inventory: the sensor does not fire, no partition key is removed
    assert instance.get_latest_materialization_event(dg.AssetKey("openalex_inventory")) is None
