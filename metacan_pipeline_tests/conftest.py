"""Shared fixtures: the real OpenAlex records in ../shared/data (never copied into the repository)."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from metacan_pipeline.openalex.ids import short_id
from metacan_pipeline.openalex.reader import Record, iter_records
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.features import make_features
from metacan_pipeline_tests.builders.common import OPENALEX, OPENALEX_MORE, PILOT
from metacan_pipeline_tests.builders.openalex import LME4_ID, REPRO_ID, SMALL_INPUT_FILES, is_canadian


@pytest.fixture(scope="session", autouse=True)
def abstracts_from_openalex_only():
    """``$METACAN_ABSTRACT_SOURCES=openalex`` for the session: the abstract cascade asks only OpenAlex (a loopback stub
    in the tests that fetch), so no test reaches the public Europe PMC or Crossref; a test of the cascade names its
    sources and their loopback addresses itself."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("METACAN_ABSTRACT_SOURCES", "openalex")
        yield


@pytest.fixture(scope="session")
def openalex_dir() -> Path:
    if not OPENALEX.exists():
        pytest.fail(f"real data not found at {OPENALEX}: the tests need ../shared/data beside the checkout")
    return OPENALEX


@pytest.fixture(scope="session")
def openalex_more_dir() -> Path:
    if not (OPENALEX_MORE / "SOURCES.md").exists():
        pytest.fail(f"real data not found at {OPENALEX_MORE}: the tests need ../shared/data beside the checkout")
    return OPENALEX_MORE


@pytest.fixture()
def small_input(tmp_path: Path, openalex_dir: Path) -> Path:
    """A temporary input folder holding a few real OpenAlex files (copied at test time)."""
    dest = tmp_path / "openalex"
    dest.mkdir()
    for name in SMALL_INPUT_FILES:
        shutil.copy(openalex_dir / name, dest / name)
    return dest


@pytest.fixture()
def recorded_folds(monkeypatch):
    """Every split that heads.grouped_cv_metrics makes: (train indices, test indices, groups)."""
    from sklearn.model_selection import GroupKFold

    from metacan_pipeline.student import heads

    seen: list[tuple] = []  # (train indices, test indices, groups) per split

    class RecordingGroupKFold(GroupKFold):
        def split(self, X, y=None, groups=None):
            for train, test in super().split(X, y, groups):
                seen.append((train, test, list(groups)))
                yield train, test

    monkeypatch.setattr(heads, "GroupKFold", RecordingGroupKFold)
    return seen


@pytest.fixture()
def openalex_api():
    """A real loopback stub of OpenAlex ``GET /works`` serving real records (``.base_url``, ``.hits``)."""
    from metacan_pipeline_tests.openalex_stub import StubOpenAlex, real_works

    stub = StubOpenAlex(real_works())
    yield stub
    stub.shutdown()


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium driven by Playwright (metacan_pipeline_tests/browser.py); one per test module.
    Fails, never skips, when chromium or playwright is missing: `make setup` installs both."""
    from metacan_pipeline_tests.browser import launch_chromium, start_playwright

    playwright = start_playwright()
    try:
        chromium = launch_chromium(playwright)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()


@pytest.fixture(scope="module")
def real_works(openalex_dir) -> dict[str, dict]:
    """Every real work record by short id (866), the newest version of each."""
    pool: dict[str, dict] = {}
    for r in iter_records(openalex_dir, {"works"}):
        if isinstance(r, Record) and r.kind == "W":
            old = pool.get(sid := short_id(r.data["id"]))
            if old is None or (r.data.get("updated_date") or "") > (old.get("updated_date") or ""):
                pool[sid] = r.data
    assert len(pool) == 866 and is_canadian(pool[LME4_ID]) and is_canadian(pool[REPRO_ID])
    return pool


@pytest.fixture()
def storage(tmp_path) -> MetacanStorage:
    return MetacanStorage(data_dir=str(tmp_path / "data"))


@pytest.fixture(scope="session")
def pilot_dir() -> Path:
    if not (PILOT / "labels_joined.json").exists():
        pytest.fail(f"real pilot data not found at {PILOT}: the tests need ../shared/data beside the checkout")
    return PILOT


@pytest.fixture(scope="module")
def encoder():
    """A MiniLM encoder whose model was loaded with every network connection refused: offline for real (the
    process-wide model cache is emptied first, so the load happens here, under the refusal)."""
    from metacan_pipeline.student import embeddings

    embeddings.sentence_transformer.cache_clear()
    enc = make_features("minilm")

    def refuse(*args, **kwargs):
        raise AssertionError(f"the minilm backend tried to open a network connection: {args[:2]}")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", refuse)
        mp.setattr(socket, "create_connection", refuse)
        enc.transform(["warm-up"])
    return enc


def pytest_itemcollected(item):
    """Under ``pytest -n N --dist loadgroup`` (``make test``): a module's tests run on one worker, so its module
    fixtures are built once, and every test that starts the embedded llama.cpp server (marker ``llm``) runs on
    one worker, so two servers never share the cores. Without xdist the marker does nothing. The group is set as
    each item is collected, so it is there before any ``pytest_collection_modifyitems`` (xdist's reads it)."""
    group = "llm" if item.get_closest_marker("llm") else item.module.__name__
    item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config):
    """Under ``make test`` each pytest-xdist worker keeps a core busy, so the embedded llama.cpp server gets one
    thread (``METACAN_LLAMA_THREADS``, unless set): llama.cpp's threads wait for each other by spinning, and with
    the other core taken 2 threads make one call 3-6 times slower than 1 thread."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers and workers >= (os.cpu_count() or 1):
        os.environ.setdefault("METACAN_LLAMA_THREADS", "1")


def pytest_collection_modifyitems(config, items):
    """The longest xdist groups first (the ``llm`` group, the benchmarks, then the modules that run the whole graph, a
    browser or sentence embeddings): ``--dist loadgroup`` hands out groups in collection order, so a long group collected
    last would run alone at the end while the other worker idles."""
    first = {name: rank for rank, name in enumerate(LONGEST_GROUPS)}

    def rank(item) -> int:
        marker = item.get_closest_marker("xdist_group")
        group = marker.args[0] if marker and marker.args else item.module.__name__
        return first.get(group.split(":", 1)[0], len(first))

    items.sort(key=rank)  # stable: within a rank, collection order


#: Groups whose tests take longest (``pytest --durations=0 -n 2``), longest first.
LONGEST_GROUPS = (
    "llm",
    "bench",  # each benchmark at its smallest size is a group "bench:<script>" (test_benchmarks.py)
    "metacan_pipeline_tests.student.test_training",
    "metacan_pipeline_tests.student.test_pilot_eval_frame1k",
    "metacan_pipeline_tests.integration.test_ui_browser",
    "metacan_pipeline_tests.frame.test_parts",
    "metacan_pipeline_tests.frame.test_assets",
    "metacan_pipeline_tests.site.test_site_browser",
    "metacan_pipeline_tests.teachers.test_labelling",
    "metacan_pipeline_tests.release.test_assets",
    "metacan_pipeline_tests.student.test_pilot_eval",
)
