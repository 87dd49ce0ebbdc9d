"""Fixtures of the site tests: one release built through Dagster from the site world (builders.site.site_world), the
same release with its classifier version published as a student model (``scoring_release``, for ``POST
/api/v1/score``), and the loopback OpenAlex stub every served work page fetches its abstract from (never the public
API)."""

from __future__ import annotations

import dataclasses
import shutil

import duckdb
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.site.build.release import Release, current_release_id, database_path, record_manifest
from metacan_pipeline.site.query.stored_counts import write_cohort_facet_counts
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.assets import predictions, student_heads
from metacan_pipeline.student.models import load_published, publish
from metacan_pipeline.student.predicting import current_model_version
from metacan_pipeline_tests.builders.site import build_site, site_world
from metacan_pipeline_tests.builders.student import run_student, write_inputs


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


@pytest.fixture(scope="module")
def scoring_release(site_release, tmp_path_factory):
    """The site world's release, whose classifier version is published in its data folder as a model trained on
    the student builders' warehouse (``models.publish``), with that warehouse's ``student_scores`` as the frame's."""
    storage = site_release[0]
    trained = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("trained") / "data"))
    frame = write_inputs(trained)
    run_student(trained, student_heads, predictions)
    bundle = load_published(trained, current_model_version(trained))
    with TestClient(create_app(storage.root, rate_limit="off")) as c:
        (version,) = c.get("/api/v1/").json()["classifier_versions"]
    publish(
        storage,
        dataclasses.replace(bundle, model_version=version),
        kind="hybrid",
        run_id="test",
        feature_kind=bundle.feature_kind,
        summary={},
    )
    storage.write_table("student_scores", trained.read_table("student_scores"))
    return storage, trained, frame, version


MIN_WORKS = 5  # of the site world's 60 works: languages, types, booleans, names and decisions reach it


@pytest.fixture(scope="module")
def stored(site_release, tmp_path_factory):
    """A copy of the site release whose ``cohort_facet_counts`` holds every one-filter cohort of >= MIN_WORKS works."""
    data = tmp_path_factory.mktemp("stored") / "data"
    shutil.copytree(site_release[0].root / "site", data / "site")
    release_id = current_release_id(data)
    con = duckdb.connect(str(database_path(data, release_id)))
    try:
        assert con.execute("SELECT count(*) FROM cohort_facet_counts").fetchone()[0] == 0  # 60 works: none by default
        n = write_cohort_facet_counts(con, min_works=MIN_WORKS)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    record_manifest(data, release_id)
    release = Release(data)
    yield release, n
    release.close()
