"""The site's icon, served at ``/favicon.svg`` and ``/favicon.ico`` by the public and the coding server."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from .middleware import SECURITY_HEADERS

#: The icon (SVG: every current browser draws it, also when it asked for ``/favicon.ico``).
FAVICON = (Path(__file__).parent.parent / "static" / "favicon.svg").read_bytes()


def favicon(request: Request) -> Response:
    headers = {"Cache-Control": "public, max-age=86400", **SECURITY_HEADERS}
    return Response(FAVICON, media_type="image/svg+xml", headers=headers)
