"""The coding store's constants and the checks every part of it shares: coder names, protocol ids, times, the
annotator of an imported answer."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping

from .errors import CodingError, shown

ROLES: tuple[str, ...] = ("code", "adjudication")
CODERS_PER_WORK = 2
#: How far in the future an imported answer's time may be (clock skew between Label Studio's server and this one). The
#: latest answer counts by time, so a later time would hide every answer given after it: such an answer is refused.
MAX_CLOCK_SKEW = dt.timedelta(minutes=5)
CLAIM_TTL = dt.timedelta(hours=2)
"""How long a task handed to a coder stays theirs in the queue of the others (a claim is advisory: it orders queues,
and submitting is refused only when two other coders have answered)."""

#: A coder name: letters, digits, ``.``, ``_``, ``-`` (no ``:``, so no name can pass for an imported annotator's).
CODER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: The name an imported Label Studio annotator gets when no coder map names them (:mod:`.labelstudio_import`).
IMPORTED_CODER_PREFIX = "labelstudio:"
_IMPORTED_CODER_RE = re.compile(r"labelstudio:[^\s:][^\s]{0,253}")
PROTOCOL_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: The roles a coder may hold beside coding (``coder_roles``): an adjudicator settles disagreements.
ADJUDICATOR = "adjudicator"
CODER_ROLES: tuple[str, ...] = (ADJUDICATOR,)
#: How long a sign-in on the coding pages lasts (a coding day), unless the coder signs out or is revoked first.
SESSION_TTL = dt.timedelta(hours=12)


def now_iso() -> str:
    """The time now, in the store's format (:func:`iso`)."""
    return iso(dt.datetime.now(dt.UTC))


def iso(t: dt.datetime) -> str:
    """UTC, microseconds, ``Z``: one fixed width, so text order is time order."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> str | None:
    """An ISO 8601 time (``Z`` or an offset; no offset is taken as UTC) in the store's format, or None."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        t = dt.datetime.fromisoformat(value.strip())
        return iso(t if t.tzinfo else t.replace(tzinfo=dt.UTC))
    except (ValueError, OverflowError):  # OverflowError: a time such as 0001-01-01T00:00+05:00 has no UTC value
        return None


def annotator_of(completed_by: object) -> str | None:
    """The annotator of a provenance's ``completed_by`` (``{"id", "email"}`` or an id): the email in lower case, else the
    id as text, else None; the rule of :data:`ANNOTATOR_SQL` and of :func:`.labelstudio_import.annotator_key`."""
    if isinstance(completed_by, Mapping):
        email = completed_by.get("email")
        if isinstance(email, str) and email.strip():
            return email.strip().lower()
        completed_by = completed_by.get("id")
    if isinstance(completed_by, bool) or not isinstance(completed_by, int | str) or not str(completed_by).strip():
        return None
    return str(completed_by).strip()


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_coder_name(name: object, *, imported: bool = False) -> str:
    """``name`` when it is a valid coder name (``imported`` also allows ``labelstudio:<email or id>``); CodingError else."""
    if isinstance(name, str) and (CODER_NAME_RE.fullmatch(name) or (imported and _IMPORTED_CODER_RE.fullmatch(name))):
        return name
    raise CodingError(
        "coder",
        f"coder name {shown(name)} is not valid: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
    )


def check_protocol_id(protocol_id: object) -> str:
    if isinstance(protocol_id, str) and PROTOCOL_ID_RE.fullmatch(protocol_id):
        return protocol_id
    raise CodingError(
        "protocol_id", f"protocol id {shown(protocol_id)} is not valid (letters, digits, '.', '_', ':', '-')"
    )
