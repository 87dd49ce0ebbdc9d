"""What every HTTP client of the pipeline shares (the OpenAlex harvest, the live abstracts, the teachers):
one Retry-After rule, the masking of API keys in httpx's log lines, and the public form of a URL that a
table or a log line may show."""

from __future__ import annotations

import datetime as dt
import email.utils
import logging
from urllib.parse import urlsplit, urlunsplit

MAX_RETRY_AFTER_S = 300.0
"""The longest a server's Retry-After is honoured (5 minutes); a client may cap it lower still."""


def retry_after_seconds(value: str | None, cap_s: float = MAX_RETRY_AFTER_S) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (RFC 9110 section 10.2.3: delta-seconds or an HTTP
    date), at least 0 and at most ``cap_s`` (never more than :data:`MAX_RETRY_AFTER_S`); ``None`` when the
    header is absent or unreadable."""
    if not value:
        return None
    try:
        secs = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        secs = (when - dt.datetime.now(dt.UTC)).total_seconds()
    if secs != secs:  # NaN
        return None
    return min(max(secs, 0.0), cap_s, MAX_RETRY_AFTER_S)


class _MaskSecrets(logging.Filter):
    """Masks registered secrets in ``httpx`` log records (httpx logs each request URL, query string
    included, at INFO)."""

    def __init__(self) -> None:
        super().__init__("metacan-mask-secrets")
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            msg = record.getMessage()
            if any(k in msg for k in self.secrets):
                for k in self.secrets:
                    msg = msg.replace(k, "***")
                record.msg, record.args = msg, None
        return True


_MASK = _MaskSecrets()
logging.getLogger("httpx").addFilter(_MASK)


def mask_secret(secret: str) -> None:
    """Never let ``secret`` (an API key) appear in an httpx log line of this process."""
    if secret:
        _MASK.secrets.add(secret)


def public_url(url: str) -> str:
    """``url`` as a table or a log line may show it: scheme, host, port and path, without user info
    (``user:key@``), query string (``?api_key=...``) or fragment, and without a trailing ``/``."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


#: The longest shown form of a value an error message echoes (:func:`shown_url`).
MAX_SHOWN_CHARS = 200


def shown_url(value: object) -> str:
    """What an error message may show of a URL a user wrote (a registry ``base_url``, a launchpad override): its
    :func:`public_url` (no user info, query or fragment) when it has the shape ``scheme://...``, with a scheme of
    letters only, at most :data:`MAX_SHOWN_CHARS` characters; anything else (a pasted key, a huge value) is described,
    never shown."""
    if not isinstance(value, str):
        return f"(a {type(value).__name__}, not shown)"
    scheme, sep, _ = value.strip().partition("://")
    if not sep or not scheme.isalpha() or len(scheme) > 10:
        return f"(a value of {len(value)} characters without scheme://, not shown)"
    shown = repr(public_url(value))
    return shown if len(shown) <= MAX_SHOWN_CHARS else shown[: MAX_SHOWN_CHARS - 5] + "...'"
