"""A real HTTP server on loopback answering as Europe PMC's REST search and Crossref's REST works do, in their real
answer shapes, for the abstract cascade's tests (metacan_pipeline/publish/abstract_cascade.py).

Shapes followed (read from recorded public answers):

- Europe PMC ``GET /europepmc/search?query=...&resultType=core&format=json``: ``{"version", "hitCount", "request":
  {"queryString", "resultType": "CORE", "cursorMark", "pageSize", "sort", "synonym"}, "resultList": {"result":
  [record, ...]}}``; a record has ``id``, ``source`` (``MED``), ``pmid``, ``doi``, ``title``, ``abstractText`` (HTML,
  ``<h4>`` section headings) among many more fields; no hit is ``hitCount: 0`` and an empty ``result`` list.
- Crossref ``GET /crossref/works/{doi}``: ``{"status": "ok", "message-type": "work", "message-version": "1.0.0",
  "message": {"DOI", "type", "title": [...], "abstract": JATS XML, ...}}``; an unknown DOI is HTTP 404 with the
  plain-text body ``Resource not found.``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse


def europepmc_answer(query: str, records: list[dict]) -> dict:
    """Europe PMC's answer to ``query`` holding ``records``."""
    return {
        "version": "6.9",
        "hitCount": len(records),
        "nextCursorMark": "AoIIQJ5xbig0MjcyNjgwMA==",
        "request": {
            "queryString": query,
            "resultType": "CORE",
            "cursorMark": "*",
            "pageSize": 5,
            "sort": "",
            "synonym": False,
        },
        "resultList": {"result": records},
    }


def europepmc_record(pmid: str, doi: str | None, title: str, abstract: str | None) -> dict:
    """A MEDLINE record of Europe PMC (``abstract`` None: the record has no ``abstractText``)."""
    rec = {
        "id": pmid,
        "source": "MED",
        "pmid": pmid,
        "doi": doi,
        "title": title,
        "authorString": "Invented A, Person B.",
        "journalInfo": {"journal": {"title": "Journal of invented studies"}, "yearOfPublication": 1976},
        "pubYear": "1976",
        "language": "eng",
        "pubModel": "Print",
        "pubTypeList": {"pubType": ["Journal Article"]},
        "isOpenAccess": "N",
        "inEPMC": "N",
        "hasTextMinedTerms": "Y",
        "firstPublicationDate": "1976-05-07",
    }
    if abstract is not None:
        rec["abstractText"] = abstract
    return rec


def crossref_work(doi: str, abstract: str | None) -> dict:
    """Crossref's answer for one DOI (``abstract`` None: the work has no ``abstract``)."""
    message = {
        "DOI": doi,
        "type": "journal-article",
        "title": ["An invented title"],
        "publisher": "Elsevier BV",
        "container-title": ["Analytical Biochemistry"],
        "issued": {"date-parts": [[1976, 5]]},
        "URL": f"https://doi.org/{doi}",
        "is-referenced-by-count": 12,
    }
    if abstract is not None:
        message["abstract"] = abstract
    return {"status": "ok", "message-type": "work", "message-version": "1.0.0", "message": message}


class LoopbackSources:
    """Europe PMC under ``/europepmc`` and Crossref under ``/crossref`` on one loopback server.

    ``europepmc``: query string -> list of records (a query not listed has no hit); ``crossref``: DOI -> work answer
    (a DOI not listed is a 404). ``script``: ``(source, key) -> [(status, headers, body)]`` answers served first, in
    order, for that query or DOI (then the listed answer). ``hits``: ``(source, key, monotonic time)`` of every
    request; ``params``: the query parameters of every Europe PMC request."""

    def __init__(
        self,
        europepmc: dict[str, list[dict]] | None = None,
        crossref: dict[str, dict] | None = None,
        script: dict[tuple[str, str], list[tuple[int, dict, str]]] | None = None,
    ) -> None:
        self.europepmc, self.crossref = europepmc or {}, crossref or {}
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.hits: list[tuple[str, str, float]] = []
        self.params: list[dict[str, str]] = []
        this = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status: int, headers: dict, body: str, kind: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urlparse(self.path)
                if url.path == "/europepmc/search":
                    q = {k: v[0] for k, v in parse_qs(url.query).items()}
                    this.params.append(q)
                    key, source = q.get("query", ""), "europepmc"
                elif url.path.startswith("/crossref/works/"):
                    key, source = unquote(url.path.removeprefix("/crossref/works/")), "crossref"
                else:
                    self._send(404, {}, "no such path", "text/plain")
                    return
                this.hits.append((source, key, time.monotonic()))
                scripted = this.script.get((source, key))
                if scripted:
                    status, headers, body = scripted.pop(0)
                    self._send(status, headers, body, "application/json" if body.startswith("{") else "text/plain")
                elif source == "europepmc":
                    answer = europepmc_answer(key, this.europepmc.get(key, []))
                    self._send(200, {}, json.dumps(answer), "application/json;charset=UTF-8")
                elif key.lower() in this.crossref:
                    self._send(200, {}, json.dumps(this.crossref[key.lower()]), "application/json;charset=utf-8")
                else:
                    self._send(404, {}, "Resource not found.", "text/plain")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.europepmc_url, self.crossref_url = f"{base}/europepmc", f"{base}/crossref"

    def asked(self, source: str) -> list[str]:
        """The keys (queries, DOIs) ``source`` was asked for, in order."""
        return [k for s, k, _ in self.hits if s == source]

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
