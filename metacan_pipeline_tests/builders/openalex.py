"""OpenAlex inputs for tests: the small real input, a loopback OpenAlex API, and writers of snapshot parts and manifests."""

from __future__ import annotations

import gzip
import json
import shutil
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

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


LME4_ABSTRACT = (
    "Maximum likelihood or restricted maximum likelihood (REML) estimates of the parameters in linear mixed-effects "
    "models can be determined using the lmer function in the lme4 package for R. As for most model-fitting functions "
    "in R, the model is described in an lmer call by a formula, in this case including both fixed- and random-effects "
    "terms. The formula and data together determine a numerical representation of the model from which the profiled "
    "deviance or the profiled REML criterion can be evaluated as a function of some of the model parameters. The "
    "appropriate criterion is optimized, using one of the constrained optimization functions in R, to provide the "
    "parameter estimates. We describe the structure of the model, the steps in evaluating the profiled deviance or "
    "REML criterion, and the structure of classes or types that represents such a model. Sufficient detail is "
    "included to allow specialization of these structures by users who wish to write functions to fit specialized "
    "linear mixed models, such as models incorporating pedigrees or smoothing splines, that are not easily "
    "expressible in the formula language used by lmer."
)

FUNDER_FILES = (
    "choxos__MetaCan__funder_CIHR_F4320334506.json",
    "choxos__MetaCan__funder_NSERC_F4320334593.json",
    "choxos__MetaCan__funder_SSHRC_F4320334617.json",
    "choxos__MetaCan__funder_CFI_F4320319952.json",
)
LME4_ID = "W1951724000"  # funded by NSERC (ca_fund) and with a Canadian author: choxos works_funders_ca
REPRO_ID = "W2997681568"  # choxos works_ca_reproducibility


def is_canadian(w: dict) -> bool:
    """A work the frame must admit on its own: a Canadian author country, a title, a year in 2000-2025."""
    return (
        any("CA" in (a.get("countries") or []) for a in w.get("authorships") or [])
        and isinstance(w.get("title"), str)
        and bool(w["title"].strip())
        and 2000 <= (w.get("publication_year") or 0) <= 2025
    )


def json_lines(records: list) -> bytes:
    """JSON Lines; a ``str`` item is written as the raw line (a bad line, or ``""`` for a blank line)."""
    return b"".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)).encode() + b"\n" for r in records)


def write_part(root: Path, date: str, n: int, records: list) -> str:
    rel = f"data/works/updated_date={date}/part_{n:03d}.gz"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(gzip.compress(json_lines(records), compresslevel=1, mtime=0))
    return rel


def write_manifest(root: Path, counts: dict[str, int], sizes: dict[str, int] | None = None) -> None:
    """``data/works/manifest`` as OpenAlex writes it (Redshift-style JSON: url, content_length, record_count);
    ``sizes`` gives the content_length of parts cut after the manifest was written (default: the file's size)."""
    sizes = sizes or {}
    entries = [
        {
            "url": f"s3://openalex/{rel}",
            "meta": {"content_length": sizes.get(rel, (root / rel).stat().st_size), "record_count": n},
        }
        for rel, n in counts.items()
    ]
    (root / "data" / "works" / "manifest").write_text(json.dumps({"entries": entries}, indent=2))


def copy_funders(openalex_dir: Path, root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name in FUNDER_FILES:
        shutil.copy(openalex_dir / name, root / name)


def complete_lines(data: bytes) -> int:
    """How many whole lines the readable prefix of a (cut) gzip stream holds, decoded independently of the reader."""
    return zlib.decompressobj(wbits=31).decompress(data).count(b"\n")


def canadian_ids(works: dict[str, dict]) -> list[str]:
    return sorted(k for k, w in works.items() if is_canadian(w))
