"""What crawlers and reference managers read: ``/robots.txt``, ``/sitemap.xml`` (a sitemap index) with
``/sitemaps/<n>.xml`` (the site's pages in each language, then the work pages in work-key order, at most
:data:`SITEMAP_URLS` URLs a file, the sitemap protocol's limit), and the ``Link: <...>;
rel="cite-as"`` header (RFC 8574) that names what to cite for a work page (its DOI, else its OpenAlex id) and a saved
cohort (its ``/q/`` link). Every address is absolute, on :func:`.languages.site_base`."""

from __future__ import annotations

from xml.sax.saxutils import escape

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ...i18n import LOCALES, N_
from . import languages

#: URLs per sitemap file (the protocol's limit is 50,000).
SITEMAP_URLS = 50_000
#: The pages besides the works that a sitemap lists, in each language.
SITE_PAGES = ("/", "/statistics", "/dossier", "/recent", "/about", "/methods", "/glossary")
XML = "application/xml; charset=utf-8"


def cite_as(url: str) -> dict[str, str]:
    """The header naming what to cite (RFC 8574)."""
    return {"Link": f'<{url}>; rel="cite-as"'}


def work_cite_as(record: dict) -> dict[str, str]:
    """A work's persistent identifier as a ``cite-as`` link: its DOI as a URL, else its OpenAlex id."""
    doi = record.get("doi")
    if doi:
        return cite_as(doi if doi.startswith("https://") else f"https://doi.org/{doi}")
    return cite_as(f"https://openalex.org/{record['id']}")


class DiscoveryEndpoints:
    """``robots.txt`` and the sitemaps, for :class:`.app.Site` (which gives ``info`` and ``release``)."""

    def robots(self, request: Request) -> Response:
        base = languages.site_base(request)
        body = (
            "User-agent: *\nDisallow: /api/\nDisallow: /export.\nDisallow: /language/\nAllow: /\n"
            f"Sitemap: {base}/sitemap.xml\n"
        )
        return PlainTextResponse(body, headers={"Cache-Control": "public, max-age=3600"})

    def sitemap_files(self) -> int:
        """How many sitemap files the site's URLs fill at :data:`SITEMAP_URLS` each (the pages, then the works)."""
        return max(1, -(-(self.info.n_works + len(SITE_PAGES) * len(LOCALES)) // SITEMAP_URLS))

    def sitemap_index(self, request: Request) -> Response:
        base = languages.site_base(request)
        files = self.sitemap_files()
        entries = "".join(f"<sitemap><loc>{escape(base)}/sitemaps/{n}.xml</loc></sitemap>" for n in range(files))
        body = f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{NS}">{entries}</sitemapindex>\n'
        return Response(body, media_type=XML, headers={"Cache-Control": "public, max-age=3600"})

    def sitemap(self, request: Request) -> Response:
        n = request.path_params["n"]
        if n >= self.sitemap_files() or request.url.path != f"/sitemaps/{n}.xml":  # no "00"
            raise HTTPException(404, N_("no sitemap %(n)s on this site", n=n))
        base = languages.site_base(request)
        urls = [base + languages.PREFIXES[lang] + page for page in SITE_PAGES for lang in LOCALES] if n == 0 else []
        # the pages come first in file 0, so the works fill each file up to the protocol's 50,000 URLs, never past it
        start = max(0, n * SITEMAP_URLS - len(SITE_PAGES) * len(LOCALES))
        con = self.release.cursor()
        try:
            paths = con.execute(
                "SELECT page_path FROM works WHERE page_path IS NOT NULL ORDER BY work_key LIMIT ? OFFSET ?",
                [SITEMAP_URLS - len(urls), start],
            ).fetchall()
        finally:
            con.close()
        urls += [f"{base}/{p}" for (p,) in paths]
        entries = "".join(f"<url><loc>{escape(u)}</loc></url>" for u in urls)
        body = f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{NS}">{entries}</urlset>\n'
        return Response(body, media_type=XML, headers={"Cache-Control": "public, max-age=3600"})


NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
