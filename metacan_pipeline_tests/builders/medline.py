"""MEDLINE for tests: efetch answers in the shape NCBI sends them (``PubmedArticleSet`` of ``PubmedArticle`` with the
``MedlineCitation`` Status/Owner/IndexingMethod attributes, ``DateCompleted``, ``PubDate`` and a
``PublicationTypeList`` whose entries carry their MeSH ``UI``), and a loopback E-utilities server answering them."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

#: MeSH unique ids of the publication types the tests use (NLM's publication type list).
PT_UI = {
    "Journal Article": "D016428",
    "Randomized Controlled Trial": "D016449",
    "Observational Study": "D064888",
    "Systematic Review": "D000078182",
    "Meta-Analysis": "D017418",
    "Case Reports": "D002363",
    "Review": "D016454",
    "Comparative Study": "D003160",
}


@dataclass(frozen=True)
class Citation:
    """One planted MEDLINE record: ``method`` None (hand), ``"Curated"`` or ``"Automated"``; ``status`` as NLM."""

    pmid: str
    types: tuple[str, ...]
    completed: int | None = 2020
    published: int = 2019
    method: str | None = None
    status: str = "MEDLINE"


def article_xml(c: Citation) -> str:
    method = f' IndexingMethod="{c.method}"' if c.method else ""
    completed = (
        f"<DateCompleted><Year>{c.completed}</Year><Month>03</Month><Day>11</Day></DateCompleted>"
        if c.completed
        else ""
    )
    types = "".join(
        f'<PublicationType UI="{PT_UI.get(t, "D000000")}">{escape(t)}</PublicationType>'
        for t in ("Journal Article", *c.types)
    )
    return (
        f'<PubmedArticle><MedlineCitation Status="{c.status}" Owner="NLM"{method}>'
        f'<PMID Version="1">{c.pmid}</PMID>{completed}'
        f"<DateRevised><Year>2024</Year><Month>01</Month><Day>02</Day></DateRevised>"
        '<Article PubModel="Print-Electronic"><Journal><ISSN IssnType="Electronic">1234-5678</ISSN>'
        '<JournalIssue CitedMedium="Internet"><Volume>12</Volume><Issue>3</Issue>'
        f"<PubDate><Year>{c.published}</Year><Month>Mar</Month></PubDate></JournalIssue>"
        "<Title>A Journal</Title></Journal>"
        f"<ArticleTitle>Work {c.pmid}.</ArticleTitle>"
        f"<Language>eng</Language><PublicationTypeList>{types}</PublicationTypeList></Article>"
        "<MedlineJournalInfo><Country>Canada</Country><MedlineTA>J</MedlineTA></MedlineJournalInfo>"
        "</MedlineCitation>"
        "<PubmedData><PublicationStatus>ppublish</PublicationStatus><ArticleIdList>"
        f'<ArticleId IdType="pubmed">{c.pmid}</ArticleId></ArticleIdList></PubmedData></PubmedArticle>'
    )


def efetch_xml(citations: list[Citation]) -> str:
    return (
        '<?xml version="1.0" ?>\n<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2024//EN" '
        '"https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_240101.dtd">\n<PubmedArticleSet>'
        + "".join(article_xml(c) for c in citations)
        + "</PubmedArticleSet>"
    )


class LoopbackEutils:
    """A real HTTP server on loopback answering ``POST /efetch.fcgi`` from ``citations`` (PMIDs it does not know
    are left out of the answer, as NCBI does). ``failures``: statuses answered first, one per request (a 429 with
    ``Retry-After: 0``). ``hits``: the form of every request, one value per key."""

    def __init__(self, citations: dict[str, Citation], failures: list[int] | None = None) -> None:
        self.hits: list[dict[str, str]] = []
        self.failures = list(failures or [])
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                form = {k: v[0] for k, v in parse_qs(body).items()}
                outer.hits.append(form)
                if outer.failures:
                    status = outer.failures.pop(0)
                    self.send_response(status)
                    if status == 429:
                        self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path != "/efetch.fcgi":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                ids = [i for i in form.get("id", "").split(",") if i]
                payload = efetch_xml([citations[i] for i in ids if i in citations]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/xml; charset=UTF-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
