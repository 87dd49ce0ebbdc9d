"""Serving the static work pages ``work_pages`` wrote (``metacan serve --work-pages static``), plain or precompressed
(:mod:`metacan_pipeline.publish.page_files`), at the URL the page renders for: a ``.gz`` page goes as it is stored,
with ``Content-Encoding: gzip``, to a client whose ``Accept-Encoding`` accepts gzip, and decompressed to any other;
every answer says ``Vary: Accept-Encoding`` so a cache keeps the two apart. Starlette's ``StaticFiles`` serves no
precompressed file and ``GZipMiddleware`` compresses on every request, so this is the few lines between the two.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from starlette.responses import Response

from ...publish.page_files import GZ

HTML = "text/html; charset=utf-8"
#: The values of ``--work-pages``: rendered on demand from the release database, or the files ``work_pages`` wrote.
WORK_PAGE_SOURCES = ("live", "static")


def accepts_gzip(accept_encoding: str | None) -> bool:
    """True when an ``Accept-Encoding`` value (RFC 9110 section 12.5.3) accepts gzip: ``gzip`` (or ``x-gzip``) with a
    weight above 0, or ``*`` above 0 with gzip not refused by name. A missing header accepts none (answer identity)."""
    if not accept_encoding:
        return False
    weights: dict[str, float] = {}
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        coding = coding.strip().lower()
        if not coding:
            continue
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0  # a weight that is no number accepts nothing
        weights[coding] = q
    named = weights.get("gzip", weights.get("x-gzip"))
    if named is not None:
        return named > 0
    return weights.get("*", 0.0) > 0


def static_page(site_dir: Path, url_path: str, accept_encoding: str | None, headers: dict[str, str]) -> Response | None:
    """The stored page of ``url_path`` (relative to ``site_dir``, ``works/<version>/<id>.html``) as an HTML answer
    with ``headers``: the ``.gz`` file as stored with ``Content-Encoding: gzip`` when ``accept_encoding`` accepts gzip
    (:func:`accepts_gzip`), else its decompressed bytes, or the plain file; None when neither file exists."""
    vary = {**headers, "Vary": "Accept-Encoding"}
    gz = site_dir / (url_path + GZ)
    if gz.is_file():
        data = gz.read_bytes()
        if accepts_gzip(accept_encoding):
            return Response(data, media_type=HTML, headers={**vary, "Content-Encoding": "gzip"})
        return Response(gzip.decompress(data), media_type=HTML, headers=vary)
    plain = site_dir / url_path
    if plain.is_file():
        return Response(plain.read_bytes(), media_type=HTML, headers=vary)
    return None
