"""Fixtures of the site tests: one release built through Dagster from the site world (builders.site.site_world), and
the loopback OpenAlex stub every served work page fetches its abstract from (never the public API)."""

from __future__ import annotations

import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline_tests.builders.site import build_site, site_world


@pytest.fixture(scope="module", autouse=True)
def loopback_openalex():
    """``$METACAN_OPENALEX_API_URL`` set to a loopback stub of OpenAlex serving the real records for the module's
    tests (an app made without ``abstracts=`` fetches work pages' abstracts from there), so no test reaches the
    public API."""
    from metacan_pipeline_tests.openalex_stub import StubOpenAlex, real_works

    stub = StubOpenAlex(real_works())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("METACAN_OPENALEX_API_URL", stub.base_url)
        yield stub
    stub.shutdown()


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
    from metacan_pipeline.site.build.release import Release

    rel = Release(site_release[0].root)
    yield rel
    rel.close()
