"""Tests of ``metacan serve --work-pages static`` (metacan_pipeline.site.web.static_pages): the work pages work_pages
stored precompressed, served through the real app at the URLs the live pages have, with ``Content-Encoding: gzip`` to
a client that accepts it and decompressed to one that does not."""

from __future__ import annotations

import gzip

import dagster as dg
import duckdb
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from metacan_pipeline.cli import app as cli
from metacan_pipeline.publish.assets import PagesConfig, work_pages
from metacan_pipeline.site.build.release import current_release_id, releases_dir
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.site.web.static_pages import accepts_gzip


@pytest.fixture(scope="module")
def gzip_site(site_release):
    """The site world's release with its work pages written by work_pages as ``.html.gz`` files; ``(storage, [(id,
    page path)])``."""
    storage = site_release[0]
    result = dg.materialize(
        [work_pages],
        resources={"storage": storage},
        run_config=dg.RunConfig({"work_pages": PagesConfig(fetch_abstracts=False, page_encoding="gzip")}),
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    path = releases_dir(storage.root) / f"{current_release_id(storage.root)}.duckdb"
    con = duckdb.connect(str(path), read_only=True)
    try:
        pages = con.execute("SELECT id, page_path FROM works ORDER BY id").fetchall()
    finally:
        con.close()
    return storage, pages


@pytest.fixture(scope="module")
def static_client(gzip_site):
    with TestClient(create_app(gzip_site[0].root, rate_limit="off", work_pages="static")) as c:
        yield c


@pytest.mark.parametrize(
    ("header", "accepted"),
    [
        ("gzip, deflate, br", True),
        ("br;q=1.0, gzip;q=0.8", True),
        ("x-gzip", True),
        ("*", True),
        ("GZIP;Q=0.5", True),
        ("identity", False),
        ("gzip;q=0", False),
        ("gzip;q=0.000, *;q=1", False),
        ("*;q=0", False),
        ("deflate, br", False),
        ("gzip;q=high", False),
        ("", False),
        (None, False),
    ],
)
def test_accept_encoding_is_read_as_rfc_9110_weighs_it(header, accepted):
    assert accepts_gzip(header) is accepted


def test_a_client_that_accepts_gzip_gets_the_stored_bytes_and_others_the_page_decompressed(gzip_site, static_client):
    storage, pages = gzip_site
    wid, path = pages[0]
    stored = (storage.site_dir / (path + ".gz")).read_bytes()
    assert not (storage.site_dir / path).exists()  # only the .gz file is on disk
    plain = gzip.decompress(stored)
    with static_client.stream("GET", "/" + path, headers={"Accept-Encoding": "gzip, deflate"}) as r:
        wire = b"".join(r.iter_raw())
        assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
        assert r.headers["vary"] == "Accept-Encoding" and r.headers["content-type"] == "text/html; charset=utf-8"
        assert int(r.headers["content-length"]) == len(stored) and r.headers["link"].startswith("<https://")
        assert r.headers["content-security-policy"].startswith("default-src 'none'")
    assert wire == stored
    for header in ("identity", "gzip;q=0", "br"):
        with static_client.stream("GET", "/" + path, headers={"Accept-Encoding": header}) as r:
            wire = b"".join(r.iter_raw())
            assert (
                r.status_code == 200 and "content-encoding" not in r.headers and r.headers["vary"] == "Accept-Encoding"
            )
        assert wire == plain
    # the static page: English, no language switch, lineage of the run that rendered it
    text = plain.decode("utf-8")
    assert "<title>" in text and "/language/fr" not in text and 'hreflang="fr"' not in text and wid in text


def test_the_same_urls_answer_live_where_no_file_is_stored_and_in_french(gzip_site, static_client):
    storage, pages = gzip_site
    (wid, path), (other, other_path) = pages[1], pages[2]
    (storage.site_dir / (other_path + ".gz")).unlink()  # a work whose page was not written: rendered live
    live = static_client.get("/" + other_path, headers={"Accept-Encoding": "gzip"})
    assert live.status_code == 200 and "content-encoding" not in live.headers and "/language/fr" in live.text
    assert other in live.text
    french = static_client.get("/fr/" + path, headers={"Accept-Encoding": "gzip"})
    assert french.status_code == 200 and "content-encoding" not in french.headers and '<html lang="fr"' in french.text
    # the redirect and the wrong-version 404 are the live site's
    r = static_client.get(f"/works/{wid}", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/" + path
    assert static_client.get(f"/works/other-version/{wid}.html").status_code == 404


def test_the_live_app_ignores_stored_files_and_a_bad_source_is_refused(gzip_site):
    storage, pages = gzip_site
    _, path = pages[3]
    with TestClient(create_app(storage.root, rate_limit="off")) as c:
        r = c.get("/" + path, headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200 and "content-encoding" not in r.headers and "/language/fr" in r.text
    with pytest.raises(ValueError, match=r"work_pages='gz' must be one of live, static"):
        create_app(storage.root, rate_limit="off", work_pages="gz")


def test_metacan_serve_names_a_bad_work_pages_value_before_opening_anything(gzip_site):
    result = CliRunner().invoke(cli, ["serve", "--data-dir", str(gzip_site[0].root), "--work-pages", "gz"])
    assert result.exit_code == 1 and "Serving" not in result.output
    assert "metacan serve: --work-pages 'gz' must be one of live, static" in result.output
