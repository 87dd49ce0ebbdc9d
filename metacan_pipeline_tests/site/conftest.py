"""Fixtures of the site tests: one release built through Dagster from the site world (builders.site_world)."""

from __future__ import annotations

import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline_tests.builders import build_site, site_world


@pytest.fixture(scope="module")
def site_release(tmp_path_factory, openalex_dir):
    """``(storage, frame rows, Dagster result)`` of a world of 60 works whose ``site_database`` was materialized."""
    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("site") / "data"))
    frame = site_world(storage, openalex_dir)
    result = build_site(storage)
    assert result.success
    return storage, frame, result


@pytest.fixture(scope="module")
def release(site_release):
    from metacan_pipeline.site.release import Release

    rel = Release(site_release[0].root)
    yield rel
    rel.close()
