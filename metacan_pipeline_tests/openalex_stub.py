"""A real loopback HTTP stub of OpenAlex ``GET /works`` answering from real records of ../shared/data/openalex.

Used by the abstract-fetcher tests and by the page tests that render abstracts live.
"""

from __future__ import annotations

import json
import threading
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from metacan_pipeline_tests.builders.common import OPENALEX

#: Real files holding every quirk the tests name (ids in the comments of the tests below).
REAL_FILES = (
    "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json",  # W1951724000 lme4: "R.", "(REML)", "formula,"
    "Mearman__Academic-Explorer__work_W2241997964.json",  # a position gap
    "Mearman__Academic-Explorer__work_W2612755892.json",  # abstract_inverted_index null
    "Mearman__Academic-Explorer__works_page1_per50.json",
    "Mearman__Academic-Explorer__works_from2023_per50.json",  # JATS paragraphs (W1637437975)
    "Mearman__Academic-Explorer__works_pub2020-2023_per50.json",  # "&amp;gt;1" (W3131055609)
    "rkrug__openalexPro__json_files_page_1.json",  # <h2>Abstract</h2>, <title>Abstract</title>, "p&lt;0.05", ABSTRACT
    "rkrug__openalexPro__pipeline_chunk_1_page_1.json",  # "Abstract:", "AbstractConservation"
    "rkrug__openalexPro__pipeline_chunk_3_page_1.json",  # an empty token (W1926314100)
)


def _works_of(obj) -> list:
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict):
        if "payload" in obj:
            return _works_of(obj["payload"])
        if "results" in obj:
            return obj["results"] or []
        if "id" in obj:
            return [obj]
    return []


@lru_cache(maxsize=1)
def real_works() -> dict[str, dict]:
    """``{short id: real record}`` for the real works of REAL_FILES (first copy of a duplicated id)."""
    if not OPENALEX.exists():
        pytest.fail(f"real data not found at {OPENALEX}: the tests need ../shared/data beside the checkout")
    out: dict[str, dict] = {}
    for name in REAL_FILES:
        for rec in _works_of(json.loads((OPENALEX / name).read_text())):
            if (
                isinstance(rec, dict)
                and "abstract_inverted_index" in rec
                and str(rec.get("id", "")).startswith("https://openalex.org/W")
            ):
                out.setdefault(rec["id"].rsplit("/", 1)[1], rec)
    return out


def real_index(wid: str):
    """The real ``abstract_inverted_index`` of one work of REAL_FILES."""
    return real_works()[wid]["abstract_inverted_index"]


# ---- a real HTTP stub of OpenAlex /works ------------------------------------------------------------
class StubOpenAlex:
    """A loopback HTTP server answering ``GET /works`` like OpenAlex for the id filter: ``ids.openalex``
    (or its alias ``openalex``) with up to 50 ``|``-separated values (more, or another filter: 400),
    ``select`` honoured, ``per_page``/``per-page`` defaulting to 25 (max 100), ``meta.count`` the number
    of matches. ``hits`` holds each request's query (one value per parameter)."""

    def __init__(self, records: dict[str, dict]) -> None:
        self.records = records
        self.hits: list[dict[str, str]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code: int, payload: dict) -> None:
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                url = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                stub.hits.append(q)
                if url.path != "/works":
                    return self._send(404, {"error": "not found"})
                name, _, values = q.get("filter", "").partition(":")
                ids = values.split("|") if values else []
                if name not in ("ids.openalex", "openalex") or not ids or len(ids) > 50:
                    return self._send(
                        400, {"error": "Invalid query parameters error.", "message": f"bad filter {name!r}"}
                    )
                per_page = int(q.get("per_page", q.get("per-page", 25)))
                fields = q["select"].split(",") if "select" in q else None
                found = [stub.records[i] for i in sorted(set(ids), reverse=True) if i in stub.records]
                results = [{k: r.get(k) for k in fields} if fields else r for r in found[:per_page]]
                self._send(200, {"meta": {"count": len(found), "per_page": per_page, "page": 1}, "results": results})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
