"""Tests of metacan_pipeline.openalex.api: the OpenAlex API client (cursor paging, archive, retries, budget, key
masking)."""

import gzip
import json

import httpx
import pytest

from metacan_pipeline.openalex.api import Budget, BudgetExhausted, OpenAlexClient, or_groups, route_filters
from metacan_pipeline.openalex.reader import Record, iter_records


@pytest.fixture()
def real_results(openalex_dir):
    return json.loads((openalex_dir / "rkrug__openalexPro__pipeline_chunk_1_page_1.json").read_text())["results"]


def _pages(results, per_page):
    chunks = [results[i : i + per_page] for i in range(0, len(results), per_page)]
    return {
        ("*" if i == 0 else f"c{i}"): {
            "meta": {
                "count": len(results),
                "next_cursor": f"c{i + 1}" if i + 1 < len(chunks) else None,
                "cost_usd": 0.0001,
            },
            "results": chunk,
        }
        for i, chunk in enumerate(chunks)
    }


def _client(tmp_path, handler, **kw):
    return OpenAlexClient(tmp_path / "archive", transport=httpx.MockTransport(handler), **kw)


def test_cursor_paging_archives_each_page_once_and_replays_offline(tmp_path, real_results, monkeypatch):
    monkeypatch.setenv("OPENALEX_API_KEY", "secret-key-123")
    pages = _pages(real_results, 20)
    seen = []

    def handler(req):
        seen.append(dict(req.url.params))
        return httpx.Response(200, json=pages[req.url.params["cursor"]])

    client = _client(tmp_path, handler, per_page=20)
    got = [r["id"] for p in client.iter_pages("authorships.countries:ca") for r in p["results"]]
    assert got == [r["id"] for r in real_results] and len(seen) == 3 and client.calls_made == 3
    assert all(s["api_key"] == "secret-key-123" and s["per-page"] == "20" for s in seen)
    archived = sorted((tmp_path / "archive" / "pages").rglob("*.json.gz"))
    assert len(archived) == 3
    blob = b"".join(gzip.decompress(p.read_bytes()) for p in archived)
    assert b"secret-key-123" not in blob and b'"retrieved_at_utc"' in blob
    # the archive is readable by the frame reader, record for record
    ids = [r.data["id"] for r in iter_records(tmp_path / "archive" / "pages") if isinstance(r, Record)]
    assert sorted(ids) == sorted(r["id"] for r in real_results)
    # a second harvest buys nothing
    again = _client(tmp_path, lambda req: pytest.fail("no call expected"), per_page=20)
    assert sum(len(p["results"]) for p in again.iter_pages("authorships.countries:ca")) == len(real_results)
    assert again.calls_made == 0 and again.pages_from_archive == 3


def test_500_three_times_then_200(tmp_path, real_results, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    statuses = iter([500, 500, 500, 200])
    requests = []

    def handler(req):
        requests.append(req.url.params["cursor"])
        code = next(statuses)
        return httpx.Response(code, json=_pages(real_results, 200)["*"] if code == 200 else {"error": "x"})

    client = _client(tmp_path, handler)
    pages = list(client.iter_pages("authorships.countries:ca"))
    assert len(pages) == 1 and client.calls_made == 4 and requests == ["*"] * 4
    assert [r["id"] for r in pages[0]["results"]] == [r["id"] for r in real_results]
    assert len(list((tmp_path / "archive" / "pages").rglob("*.json.gz"))) == 1


def test_429_retry_after_is_honoured(tmp_path, real_results, monkeypatch):
    sleeps = []
    monkeypatch.setattr("time.sleep", lambda s: sleeps.append(s))
    statuses = iter([429, 200])
    client = _client(
        tmp_path,
        lambda req: (
            httpx.Response(429, headers={"Retry-After": "3"})
            if next(statuses) == 429
            else httpx.Response(200, json=_pages(real_results, 200)["*"])
        ),
    )
    list(client.iter_pages("x:y"))
    assert sleeps and sleeps[0] >= 3


def test_429_storm_longer_than_the_budget_stops_cleanly(tmp_path, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    client = _client(
        tmp_path,
        lambda req: httpx.Response(429, headers={"Retry-After": "1"}),
        budget=Budget(max_calls=5),
        max_attempts=50,
    )
    with pytest.raises(BudgetExhausted, match=r"resume later at endpoint /works cursor '\*'"):
        list(client.iter_pages("x:y"))
    assert client.calls_made == 5
    assert not list((tmp_path / "archive").rglob("*.json.gz"))


def test_a_429_storm_on_a_later_page_names_its_cursor_and_the_resume_buys_no_page_twice(
    tmp_path, real_results, monkeypatch
):
    monkeypatch.setattr("time.sleep", lambda s: None)
    pages = _pages(real_results, 20)  # cursors *, c1, c2
    requests = []

    def storm(req):
        requests.append(req.url.params["cursor"])
        if req.url.params["cursor"] == "*":
            return httpx.Response(200, json=pages["*"])
        return httpx.Response(429, headers={"Retry-After": "1"})

    client = _client(tmp_path, storm, per_page=20, budget=Budget(max_calls=4), max_attempts=50)
    got = []
    with pytest.raises(BudgetExhausted, match=r"spent \(4 calls.*resume later at endpoint /works cursor 'c1'"):
        for page in client.iter_pages("authorships.countries:ca"):
            got.append(page)
    assert len(got) == 1 and requests == ["*", "c1", "c1", "c1"]
    archive = tmp_path / "archive" / "pages"
    assert len(list(archive.rglob("*.json.gz"))) == 1

    # resumed (a later day, or a larger budget): the archived first page is read back, not bought again
    requests.clear()
    resumed = _client(
        tmp_path,
        lambda req: (
            requests.append(req.url.params["cursor"]) or httpx.Response(200, json=pages[req.url.params["cursor"]])
        ),
        per_page=20,
        budget=Budget(max_calls=10),
    )
    ids = [r["id"] for p in resumed.iter_pages("authorships.countries:ca") for r in p["results"]]
    assert ids == [r["id"] for r in real_results]
    assert requests == ["c1", "c2"] and resumed.pages_from_archive == 1 and resumed.calls_made == 2
    assert len(list(archive.rglob("*.json.gz"))) == 3  # each page archived once


def test_filters_per_route():
    ids = [f"F{i}" for i in range(250)]
    assert [len(g.split("|")) for g in or_groups(ids)] == [100, 100, 50]
    f = route_filters(ids, ["S1"], from_updated_date="2026-11-23")
    assert f[0] == "authorships.institutions.country_code:ca,from_updated_date:2026-11-23"
    assert sum(x.startswith("funders.id:") for x in f) == 3 and sum(x.startswith("awards.funder_id:") for x in f) == 3
    assert f[-1].startswith("primary_location.source.id:S1")
    w = route_filters(ids, [], from_updated_date="2026-11-23", to_updated_date="2026-11-30")
    assert w[1] == "authorships.countries:ca,from_updated_date:2026-11-23,to_updated_date:2026-11-30"
    assert not any(x.startswith("primary_location.source.id:") for x in w)  # no pinned source, no venue query


def test_a_repeating_cursor_stops_with_a_clear_error(tmp_path):
    from metacan_pipeline.openalex.api import OpenAlexError

    page = {"meta": {"next_cursor": "SAME"}, "results": [{"id": "https://openalex.org/W1"}]}
    client = _client(tmp_path, lambda req: httpx.Response(200, json=page))
    with pytest.raises(OpenAlexError, match="cursor loop"):
        list(client.iter_pages("x:y"))
    assert client.calls_made == 2


def test_errors_never_carry_the_api_key(tmp_path, monkeypatch):
    from metacan_pipeline.openalex.api import OpenAlexError

    monkeypatch.setenv("OPENALEX_API_KEY", "SECRET-KEY-123")
    client = _client(tmp_path, lambda req: httpx.Response(403, text="forbidden"))
    with pytest.raises(OpenAlexError) as info:
        list(client.iter_pages("x:y"))
    assert "403" in str(info.value) and "SECRET-KEY-123" not in str(info.value)


def test_ledger_dir_shares_one_budget_across_archives(tmp_path):
    page = {"meta": {"next_cursor": None, "cost_usd": 0.25}, "results": [{"id": "https://openalex.org/W1"}]}
    handler = lambda req: httpx.Response(200, json=page)  # noqa: E731
    ledger = tmp_path / "api"
    a = OpenAlexClient(
        ledger / "window=a", ledger_dir=ledger, transport=httpx.MockTransport(handler), budget=Budget(max_calls=1)
    )
    list(a.iter_pages("x:y"))
    assert (
        a.cost_usd == 0.25
        and len(list(ledger.glob("budget-*.json"))) == 1
        and not list((ledger / "window=a").glob("budget-*"))
    )
    b = OpenAlexClient(
        ledger / "window=b", ledger_dir=ledger, transport=httpx.MockTransport(handler), budget=Budget(max_calls=1)
    )
    with pytest.raises(BudgetExhausted, match="resume later at"):
        list(b.iter_pages("x:y"))


def test_httpx_request_log_lines_mask_the_api_key(tmp_path, monkeypatch, caplog):
    import logging

    monkeypatch.setenv("OPENALEX_API_KEY", "SECRET-KEY-456")
    caplog.set_level(logging.DEBUG)
    page = {"meta": {"next_cursor": None}, "results": []}
    client = _client(tmp_path, lambda req: httpx.Response(200, json=page))
    list(client.iter_pages("x:y"))
    assert "HTTP Request" in caplog.text and "SECRET-KEY-456" not in caplog.text
