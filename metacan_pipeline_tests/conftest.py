"""Shared fixtures: the real OpenAlex records in ../shared/data (never copied into the repository)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("METACAN_SHARED_DIR", REPO.parent / "shared"))
OPENALEX = SHARED / "data" / "openalex"
SNAPSHOT = OPENALEX / "max-planck-innovation-competition__go-openalex__snapshot_sample"

# A small real input: the Canadian funder records, the current-schema Canadian works, one work seen in
# several versions and a page with an HTML title. Enough for every route the data supports.
SMALL_INPUT_FILES = (
    "choxos__MetaCan__funder_CIHR_F4320334506.json",
    "choxos__MetaCan__funder_NSERC_F4320334593.json",
    "choxos__MetaCan__funder_SSHRC_F4320334617.json",
    "choxos__MetaCan__funder_CFI_F4320319952.json",
    "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json",
    "choxos__MetaCan__works_ca_reproducibility_3406695ce49cc852.json",
    "Mearman__Academic-Explorer__work_W2741809807.json",
    "rkrug__openalexPro__fixture_keypaper_page_1.json",
)


@pytest.fixture(scope="session")
def openalex_dir() -> Path:
    if not OPENALEX.exists():
        pytest.fail(f"real data not found at {OPENALEX}: the tests need ../shared/data beside the checkout")
    return OPENALEX


@pytest.fixture()
def small_input(tmp_path: Path, openalex_dir: Path) -> Path:
    """A temporary input folder holding a few real OpenAlex files (copied at test time)."""
    dest = tmp_path / "openalex"
    dest.mkdir()
    for name in SMALL_INPUT_FILES:
        shutil.copy(openalex_dir / name, dest / name)
    return dest


class LoopbackOpenAlex:
    """A real HTTP server on loopback answering OpenAlex list pages: ``answer(path, query)`` gives the
    ``results`` of one page (``query``: the request's parameters, one value each); every page is the
    last one (``next_cursor`` null) and costs $0.0001. ``hits`` holds the query of every request."""

    def __init__(self, answer: Callable[[str, dict[str, str]], list[dict]]) -> None:
        self.hits: list[dict[str, str]] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                url = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                hits.append(q)
                results = answer(url.path, q)
                body = json.dumps(
                    {"meta": {"count": len(results), "next_cursor": None, "cost_usd": 0.0001}, "results": results}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def shutdown(self) -> None:
        self.server.shutdown()


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
    from .openalex_stub import StubOpenAlex, real_works

    stub = StubOpenAlex(real_works())
    yield stub
    stub.shutdown()


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium driven by Playwright (metacan_pipeline_tests/browser.py); one per test module.
    Fails, never skips, when chromium or playwright is missing: `make setup` installs both."""
    from .browser import launch_chromium, start_playwright

    playwright = start_playwright()
    try:
        chromium = launch_chromium(playwright)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()
