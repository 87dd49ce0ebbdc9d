"""The coding store of the audit study (issue 16, "Coding"; SPEC section 10): coders, their queues, every answer.

One SQLite file, ``<data dir>/audit/coding.sqlite`` (:func:`metacan_pipeline.settings.coding_store_path`), whose tables
are declared in :mod:`metacan_pipeline.tables.coding` and created from the catalog's DDL. :class:`CodingStore` opens it
in WAL mode with a busy timeout, and every write is one short ``BEGIN IMMEDIATE`` transaction that checks and appends
together, so the served site (threads) and the ``metacan`` CLI (another process) can use the file at once.

- **Coders** sign in with a personal token (:meth:`CodingStore.add_coder`, ``secrets.token_urlsafe``): only its
  SHA-256 is stored, it is never logged, and :meth:`CodingStore.coder_for_token` compares digests in constant time.
- **Tasks** (:meth:`CodingStore.load_tasks`) carry evidence only, taken from a row through an explicit allow-list
  (:data:`EVIDENCE_FIELDS`): title, year, language, type, venue, Canadian institutions, funders, keywords, DOI and a
  full-text link. Whatever else the row holds (labels, scores, predictions, routes, teacher output) is dropped, so a
  coder is masked to every machine output (SPEC section 10). The abstract is not stored (SPEC section 2): the coding
  page fetches it live by id. Each evidence version is kept (``coding_evidence``, content-addressed), and an answer
  names the version it was shown.
- **Queues** (:meth:`CodingStore.next_task`) are derived from the answers, not from a cursor: the first task in
  position order the coder has not answered and fewer than two other coders have answered or hold. Handing out a task
  records a claim (valid :data:`CLAIM_TTL`), so two coders, not three, work on a work at once, and a coder who comes
  back is handed the task they held first. A coder never sees another coder's answer or any machine output.
- **Answers** (:meth:`CodingStore.submit`) are validated by :func:`validate_answer` with the SPEC section 3-4 rules of
  :func:`metacan_pipeline.teachers.core.validate.validate_label` (vocabularies, ``insufficient_payload`` alone, a domain
  only with ``metaresearch``), plus: a complete answer gives every field but ``confidence`` (and a domain with
  ``metaresearch``); ``unresolved=True`` allows empty fields; a note of at most 1,000 characters. Every answer is
  appended with coder, role (``code`` | ``adjudication``), time, protocol, the evidence version shown and its source;
  nothing is overwritten (triggers refuse UPDATE and DELETE), and the latest answer per (work, coder, role) counts, by
  ``submitted_at`` (then append order). An imported answer keeps its own time (Label Studio's ``updated_at``), so one
  dated more than :data:`MAX_CLOCK_SKEW` after now is refused: it would hide every later answer.
- **Agreement** (:meth:`CodingStore.disagreements`, :meth:`CodingStore.adjudicated_codes`): two coders agree when
  their latest answers are equal on :data:`OUTCOME_FIELDS` (the section 3 fields but ``confidence``, plus
  ``unresolved``) and neither is unresolved; otherwise the work goes to adjudication, and the latest adjudication that
  is not itself unresolved is the work's final human code.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import re
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .. import vocab
from ..openalex.ids import is_work_id, short_id
from ..tables.coding import ANNOTATOR_SQL, TABLES, coding_store_ddl
from ..teachers.core.validate import InvalidLabel, validate_label
from ..teachers.core.views import canonical_json

log = logging.getLogger(__name__)

ROLES: tuple[str, ...] = ("code", "adjudication")
CODERS_PER_WORK = 2
NOTE_MAX_CHARS = 1000
#: The longest answer value but the note (a vocabulary value, a category): longer ones are refused before any check.
MAX_VALUE_CHARS = 64
#: The most items a ``categories`` list may have (the vocabulary has 9).
MAX_CATEGORIES = 16
#: The longest an error message shows of a value it quotes (:func:`shown`); the longest message a CodingError keeps.
SHOWN_CHARS = 60
MAX_MESSAGE_CHARS = 1000
#: How far in the future an imported answer's time may be (clock skew between Label Studio's server and this one). The
#: latest answer counts by time, so a later time would hide every answer given after it: such an answer is refused.
MAX_CLOCK_SKEW = dt.timedelta(minutes=5)
CLAIM_TTL = dt.timedelta(hours=2)
"""How long a task handed to a coder stays theirs in the queue of the others (a claim is advisory: it orders queues,
and submitting is refused only when two other coders have answered)."""

#: A coder name: letters, digits, ``.``, ``_``, ``-`` (no ``:``, so no name can pass for an imported annotator's).
CODER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: The name an imported Label Studio annotator gets when no coder map names them (:mod:`.labelstudio`).
IMPORTED_CODER_PREFIX = "labelstudio:"
_IMPORTED_CODER_RE = re.compile(r"labelstudio:[^\s:][^\s]{0,253}")
PROTOCOL_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: The roles a coder may hold beside coding (``coder_roles``): an adjudicator settles disagreements.
ADJUDICATOR = "adjudicator"
CODER_ROLES: tuple[str, ...] = (ADJUDICATOR,)
#: How long a sign-in on the coding pages lasts (a coding day), unless the coder signs out or is revoked first.
SESSION_TTL = dt.timedelta(hours=12)

#: The SPEC section 3 fields a coder answers (a direct label's fields without ``reason``: a coder writes a note).
CODE_FIELDS: tuple[str, ...] = tuple(f for f in vocab.LABEL_FIELDS if f != "reason")
#: Every key an answer may have.
ANSWER_KEYS: tuple[str, ...] = (*CODE_FIELDS, "unresolved", "note")
#: The fields two coders must agree on (SPEC section 10: the section 3 fields plus ``unresolved``; ``confidence`` and
#: the note are the coder's own and are not compared).
OUTCOME_FIELDS: tuple[str, ...] = tuple(f for f in CODE_FIELDS if f != "confidence") + ("unresolved",)
_REQUIRED = ("study_design", "genre", "about_ca_system", "about_ca_topic")

#: The evidence a coder sees, by evidence key: the row columns it is read from, first present wins. Nothing outside
#: this allow-list reaches a task (``full_text_url`` is derived from ``doi`` and ``landing_url``).
EVIDENCE_FIELDS: dict[str, tuple[str, ...]] = {
    "id": ("id",),
    "title": ("title_text", "title"),
    "year": ("publication_year", "year"),
    "language": ("language",),
    "type": ("type",),
    "venue": ("venue_name", "venue"),
    "ca_institutions": ("ca_institutions",),
    "funders": ("funder_names", "funders"),
    "keywords": ("keywords",),
    "doi": ("doi",),
    "landing_url": ("landing_page_url", "landing_url"),
}
_LIST_EVIDENCE = frozenset({"ca_institutions", "funders", "keywords"})


class CodingError(ValueError):
    """An answer, coder or task the store refuses; ``field`` names what is wrong (an answer field, ``coder``, ``id``...)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field = field if len(field) <= SHOWN_CHARS else field[:SHOWN_CHARS] + "..."
        message = message if message.startswith(field) else f"{field}: {message}"
        if len(message) > MAX_MESSAGE_CHARS:  # a last guard: every value quoted is cut by shown() already
            message = message[:MAX_MESSAGE_CHARS] + f"... ({len(message)} characters in all)"
        super().__init__(message)


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` as an error message quotes it: at most ``limit`` characters, then ``... (N characters)``, so a
    10 MB value is never echoed (or stored in a refusal) in full."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value):,} characters" if isinstance(value, str) else f"{len(text):,} characters as text"
    return f"{text[:limit]}... ({size})"


class CodingStoreError(Exception):
    """The coding store file cannot be used: missing, not a SQLite database (corrupt), read-only, busy. The message
    names the file and says what to do; ``path`` is the file."""

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        super().__init__(message)


def store_error(path: Path, exc: sqlite3.Error, *, read_only: bool = False) -> CodingStoreError:
    """The :class:`CodingStoreError` of a SQLite error on the store ``path`` (the first line of SQLite's message kept)."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    low = msg.lower()
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return CodingStoreError(
            path,
            f"coding store {path} is not a readable SQLite database ({msg}): it holds human work that nothing rebuilds, "
            "so restore it from your backup (move the damaged file aside first; never delete it)",
        )
    if "readonly" in low or "read-only" in low:
        return CodingStoreError(
            path,
            f"cannot write to coding store {path} ({msg}): the file or its folder is read-only for this user; make "
            "both writable, or work on a writable copy",
        )
    if "locked" in low or "busy" in low:
        return CodingStoreError(
            path, f"coding store {path} is busy ({msg}: another process held its write lock too long): try again"
        )
    if "unable to open" in low:
        return CodingStoreError(
            path,
            f"cannot open coding store {path} ({msg}): check that the file and its folder exist and are "
            + ("readable" if read_only else "writable by this user"),
        )
    return CodingStoreError(path, f"coding store {path}: {msg}")


def now_iso() -> str:
    """The time now, in the store's format (:func:`_iso`)."""
    return _iso(dt.datetime.now(dt.UTC))


def _iso(t: dt.datetime) -> str:
    """UTC, microseconds, ``Z``: one fixed width, so text order is time order."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> str | None:
    """An ISO 8601 time (``Z`` or an offset; no offset is taken as UTC) in the store's format, or None."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        t = dt.datetime.fromisoformat(value.strip())
        return _iso(t if t.tzinfo else t.replace(tzinfo=dt.UTC))
    except (ValueError, OverflowError):  # OverflowError: a time such as 0001-01-01T00:00+05:00 has no UTC value
        return None


def annotator_of(completed_by: object) -> str | None:
    """The annotator of a provenance's ``completed_by`` (``{"id", "email"}`` or an id): the email in lower case, else the
    id as text, else None; the rule of :data:`ANNOTATOR_SQL` and of :func:`.labelstudio.annotator_key`."""
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


# --- evidence -----------------------------------------------------------------------------------------------------


def _present(value: object) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _names(value: object) -> list[str]:
    """A list of names from a list of strings or of ``{name: ...}`` structs (the frame's funders), de-duplicated."""
    if value is None or isinstance(value, str | bytes):
        return [value.strip()] if isinstance(value, str) and value.strip() else []
    out: list[str] = []
    for v in value:  # a list, tuple or numpy array
        name = v.get("name") if isinstance(v, Mapping) else v
        if isinstance(name, str) and name.strip() and name.strip() not in out:
            out.append(name.strip())
    return out


def _http(url: object) -> str | None:
    return url if isinstance(url, str) and re.match(r"https?://\S+$", url) else None


def full_text_url(doi: str | None, landing_url: str | None) -> str | None:
    """The link to the full text a coder follows: the DOI's resolver URL, else the landing page; http(s) only."""
    if isinstance(doi, str) and doi.strip():
        d = doi.strip()
        if d.startswith("10."):
            d = "https://doi.org/" + d
        if _http(d):
            return d
    return _http(landing_url)


def task_evidence(row: Mapping[str, Any]) -> dict[str, Any]:
    """The evidence of one task from a row of any shape (a frame row, an audit-sample row): only the
    :data:`EVIDENCE_FIELDS`, lists as lists of names, plus ``full_text_url``. Raises CodingError without a work id."""
    out: dict[str, Any] = {}
    for key, columns in EVIDENCE_FIELDS.items():
        value = next((row[c] for c in columns if c in row and _present(row[c])), None)
        if key in _LIST_EVIDENCE:
            value = _names(value)
        elif key == "year" and value is not None:
            value = int(value)
        elif value is not None:
            value = str(value).strip()
        out[key] = value
    wid = short_id(out["id"])
    if wid is None or not is_work_id(wid):
        raise CodingError("id", f"task id {shown(out['id'])} is not a work id (W followed by digits)")
    out["id"] = wid
    out["landing_url"] = _http(out["landing_url"])
    out["full_text_url"] = full_text_url(out["doi"], out["landing_url"])
    return out


# --- answers ------------------------------------------------------------------------------------------------------


def _field_of(message: str) -> str:
    """The answer field a :class:`InvalidLabel` message of :func:`validate_label` is about."""
    m = re.match(r"missing field '(\w+)'", message) or re.match(r"(\w+)=", message)
    if m and m.group(1) in CODE_FIELDS:
        return m.group(1)
    if message.startswith("domain"):
        return "domain"
    if "categor" in message or message.startswith(vocab.INSUFFICIENT_PAYLOAD):
        return "categories"
    return "answer"


def _clean_text(text: str) -> str:
    if not text.isprintable():
        text = "".join(ch for ch in text if ch.isprintable() or ch in "\n\t")
    return text.strip()


def _check_sizes(answer: Mapping[str, Any]) -> None:
    """Refuse an answer value too long to be one (before any check quotes it): a string but the note longer than
    :data:`MAX_VALUE_CHARS`, a ``categories`` list of more than :data:`MAX_CATEGORIES` items or with a long item."""
    for f in CODE_FIELDS:
        v = answer.get(f)
        if isinstance(v, str) and len(v) > MAX_VALUE_CHARS:
            raise CodingError(f, f"{f} has {len(v):,} characters; a vocabulary value has at most {MAX_VALUE_CHARS}")
    cats = answer.get("categories")
    if isinstance(cats, list | tuple):
        if len(cats) > MAX_CATEGORIES:
            raise CodingError(
                "categories", f"categories has {len(cats):,} items; the vocabulary has {len(vocab.CATEGORIES)}"
            )
        if any(isinstance(c, str) and len(c) > MAX_VALUE_CHARS for c in cats):
            raise CodingError(
                "categories", f"a category has more than {MAX_VALUE_CHARS} characters: not in the vocabulary"
            )


def validate_answer(answer: object, work_id: str) -> dict[str, Any]:  # noqa: C901 (one check per rule, in order)
    """A coder's answer on ``work_id``, validated and normalised: the :data:`ANSWER_KEYS` (categories in vocabulary
    order, ``unresolved`` a bool, ``note`` None when empty). Raises :class:`CodingError` naming the field.

    The SPEC section 3-4 rules are those of :func:`validate_label` (which gets the answer as a label without a
    reason). A complete answer (``unresolved`` false) gives ``categories`` (``[]`` means not meta-research),
    ``study_design``, ``genre``, both ``about_ca`` booleans, and a ``domain`` when ``metaresearch`` is among the
    categories; ``confidence`` is optional. An unresolved answer may leave any field empty (None); what it gives is
    validated all the same.
    """
    if not isinstance(answer, Mapping):
        raise CodingError("answer", f"an answer is an object of {list(ANSWER_KEYS)}, not {type(answer).__name__}")
    unknown = sorted(set(answer) - set(ANSWER_KEYS))
    if unknown:
        raise CodingError(
            str(unknown[0]), f"{shown(unknown[0])} is not an answer field; an answer has {list(ANSWER_KEYS)}"
        )
    unresolved = answer.get("unresolved", False)
    if not isinstance(unresolved, bool):
        raise CodingError("unresolved", f"unresolved={shown(unresolved)} is not a boolean")
    note = answer.get("note")
    if note is not None and not isinstance(note, str):
        raise CodingError("note", f"note={shown(note)} is not a string")
    note = _clean_text(note or "")
    if len(note) > NOTE_MAX_CHARS:
        raise CodingError("note", f"note has {len(note)} characters; at most {NOTE_MAX_CHARS}")
    _check_sizes(answer)
    categories = answer.get("categories")
    if categories is None and not unresolved:
        raise CodingError(
            "categories", "categories is missing: give the categories ([] means not meta-research) or mark unresolved"
        )
    obj: dict[str, Any] = {"id": work_id, "categories": [] if categories is None else categories}
    obj["domain"] = answer.get("domain")
    absent = {"reason"}
    for f in (*_REQUIRED, "confidence"):
        value = answer.get(f)
        if value is None and f in _REQUIRED and not unresolved:
            raise CodingError(f, f"{f} is missing: give a value or mark the answer unresolved")
        if value is None:
            absent.add(f)
        else:
            obj[f] = value
    try:
        label = validate_label(obj, work_id, absent=frozenset(absent))
    except InvalidLabel as exc:
        raise CodingError(_field_of(str(exc)), str(exc)) from None
    if not unresolved and "metaresearch" in label.categories and label.domain is None:
        raise CodingError(
            "domain",
            "domain is missing: an answer with the category 'metaresearch' gives its domain (or is unresolved)",
        )
    out = {f: getattr(label, f) for f in CODE_FIELDS}
    out["categories"] = None if categories is None else list(label.categories)
    out["unresolved"] = unresolved
    out["note"] = note or None
    return out


def _answer_of(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["categories"] = None if d["categories"] is None else json.loads(d["categories"])
    d["provenance"] = None if d["provenance"] is None else json.loads(d["provenance"])
    for f in ("about_ca_system", "about_ca_topic"):
        d[f] = None if d[f] is None else bool(d[f])
    d["unresolved"] = bool(d["unresolved"])
    return d


def _outcome(answer: Mapping[str, Any]) -> dict[str, Any]:
    return {f: answer[f] for f in OUTCOME_FIELDS}


_LATEST_SQL = """
SELECT * FROM (
  SELECT a.*, a.rowid AS seq, t.position,
         row_number() OVER (PARTITION BY a.id, a.coder, a.role ORDER BY a.submitted_at DESC, a.rowid DESC) AS rn
  FROM coding_answers a LEFT JOIN coding_tasks t ON t.protocol_id = a.protocol_id AND t.id = a.id
  WHERE a.protocol_id = ?
) WHERE rn = 1
ORDER BY position, id, role, coder
"""

_QUEUE_SQL = """
WITH coded AS (
  SELECT id, count(DISTINCT coder) AS n, max(coder = :coder) AS mine
  FROM coding_answers WHERE protocol_id = :pid AND role = 'code' GROUP BY id
), held AS (
  SELECT c.id, count(*) AS n FROM coding_claims c
  WHERE c.protocol_id = :pid AND c.coder <> :coder AND c.claimed_at >= :cutoff
    AND NOT EXISTS (SELECT 1 FROM coding_answers a
                    WHERE a.protocol_id = :pid AND a.id = c.id AND a.coder = c.coder AND a.role = 'code')
  GROUP BY c.id
), mine AS (
  SELECT id FROM coding_claims WHERE protocol_id = :pid AND coder = :coder AND claimed_at >= :cutoff
)
SELECT t.id, t.position, t.evidence_json, t.evidence_sha256
FROM coding_tasks t LEFT JOIN coded c ON c.id = t.id LEFT JOIN held h ON h.id = t.id
WHERE t.protocol_id = :pid AND coalesce(c.mine, 0) = 0 AND coalesce(c.n, 0) + coalesce(h.n, 0) < :per_work
ORDER BY t.id IN (SELECT id FROM mine) DESC, t.position, t.id
LIMIT 1
"""


class CodingStore:
    """The coding store: one SQLite connection (WAL mode), guarded by a lock, as site requests run on threads.

    Usable as a context manager (closes the connection). ``read_only=True`` (the CLI's read commands) opens an existing
    file read-only and writes nothing (no folder, no table, no journal mode), so a store on a read-only medium can be
    read; a write is then refused. Any SQLite failure of the file (missing in read-only mode, not a database, read-only,
    busy) is a :class:`CodingStoreError` naming the file and what to do, never a bare ``sqlite3`` error."""

    def __init__(self, path: Path | str, *, claim_ttl: dt.timedelta = CLAIM_TTL, read_only: bool = False) -> None:
        self.path = Path(path)
        self.claim_ttl = claim_ttl
        self.read_only = read_only
        self._lock = threading.RLock()
        try:
            self._con = self._open_read_only() if read_only else self._open()
        except sqlite3.Error as exc:
            raise store_error(self.path, exc, read_only=read_only) from None
        except OSError as exc:  # the folder cannot be created
            raise CodingStoreError(
                self.path, f"cannot create the folder of coding store {self.path} ({exc.strerror}): check --data-dir"
            ) from None

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
        con.row_factory = sqlite3.Row
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA busy_timeout=10000")
            con.execute("BEGIN IMMEDIATE")
            for statement in coding_store_ddl():
                con.execute(statement)
            con.execute("COMMIT")
        except BaseException:
            con.close()
            raise
        return con

    def _open_read_only(self) -> sqlite3.Connection:
        """The file opened read-only (``mode=ro``); in a folder this user cannot write and without a ``-wal`` file (the
        store was closed cleanly, so no writer is at work), as an immutable file, since WAL mode needs a ``-shm``."""
        if not self.path.is_file():
            raise CodingStoreError(
                self.path,
                f"no coding store at {self.path}: check --data-dir ($METACAN_DATA_DIR); `metacan coders add NAME` "
                "creates it",
            )
        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
        try:
            con = self._connect_checked(uri)
        except sqlite3.OperationalError as exc:
            if "unable to open" not in str(exc) or Path(f"{self.path}-wal").exists():
                raise
            con = self._connect_checked(uri + "&immutable=1")
        return con

    def _connect_checked(self, uri: str) -> sqlite3.Connection:
        con = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None, timeout=10.0)
        con.row_factory = sqlite3.Row
        try:
            con.execute("PRAGMA busy_timeout=10000")
            present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except BaseException:
            con.close()
            raise
        missing = [t.name for t in TABLES if t.name not in present]
        if missing:
            con.close()
            raise CodingStoreError(
                self.path,
                f"coding store {self.path} lacks the tables {missing}: it is not a metacan coding store (or one of an "
                "older version, which `metacan coders add` or an import brings up to date)",
            )
        return con

    def __enter__(self) -> CodingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._con.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction (``BEGIN IMMEDIATE``: the write lock first, so checks and appends are atomic
        across processes). A SQLite failure of the file (read-only, busy, corrupt) is a :class:`CodingStoreError`."""
        if self.read_only:
            raise CodingStoreError(self.path, f"coding store {self.path} was opened read-only: nothing can be written")
        with self._lock:
            try:
                self._con.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise store_error(self.path, exc) from None
            try:
                yield self._con
            except sqlite3.IntegrityError:
                self._con.execute("ROLLBACK")
                raise
            except sqlite3.Error as exc:
                if self._con.in_transaction:
                    self._con.execute("ROLLBACK")
                raise store_error(self.path, exc) from None
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
            try:
                self._con.execute("COMMIT")
            except sqlite3.Error as exc:
                raise store_error(self.path, exc) from None

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction (a consistent snapshot over several queries). A SQLite failure of the file (corrupt
        pages, busy) is a :class:`CodingStoreError`."""
        with self._lock:
            try:
                self._con.execute("BEGIN")
                try:
                    yield self._con
                finally:
                    self._con.execute("COMMIT")
            except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                if isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError):
                    raise
                raise store_error(self.path, exc) from None

    # --- coders -------------------------------------------------------------------------------------------------

    def add_coder(self, name: str) -> str:
        """Register coder ``name`` and return their sign-in token (shown once: only its SHA-256 is stored). A name
        already present, revoked or not, in any letter case, is refused."""
        check_coder_name(name)
        token = secrets.token_urlsafe(32)
        with self._write() as con:
            row = con.execute("SELECT coder FROM coders WHERE lower(coder) = lower(?)", [name]).fetchone()
            if row is not None:
                raise CodingError(
                    "coder", f"a coder named {row[0]!r} exists already (revoked or not): choose another name"
                )
            con.execute("INSERT INTO coders VALUES (?, ?, ?, NULL)", [name, sha256_hex(token), now_iso()])
        log.info("coder %s added", name)
        return token

    def revoke_coder(self, name: str) -> str:
        """Revoke ``name``'s token (their answers stay); returns the revocation time. Unknown or revoked: CodingError."""
        now = now_iso()
        with self._write() as con:
            row = con.execute("SELECT revoked_at FROM coders WHERE coder = ?", [name]).fetchone()
            if row is None:
                raise CodingError("coder", f"no coder named {shown(name)}")
            if row["revoked_at"] is not None:
                raise CodingError("coder", f"coder {name!r} was revoked already at {row['revoked_at']}")
            con.execute("UPDATE coders SET revoked_at = ? WHERE coder = ?", [now, name])
        log.info("coder %s revoked", name)
        return now

    def stored_name(self, name: str) -> str:
        """The spelling the store has of coder ``name`` (names match ignoring letter case, as ``add_coder`` refuses a
        case variant), or ``name`` itself when there is no such coder (the caller's error then names it)."""
        with self._read() as con:
            row = con.execute("SELECT coder FROM coders WHERE lower(coder) = lower(?) LIMIT 1", [name]).fetchone()
        return name if row is None else row["coder"]

    def list_coders(self) -> list[dict[str, str | None]]:
        """Every coder: ``coder``, ``created_at``, ``revoked_at`` (never a token or its hash)."""
        with self._read() as con:
            rows = con.execute("SELECT coder, created_at, revoked_at FROM coders ORDER BY created_at, coder").fetchall()
        return [dict(r) for r in rows]

    def coder_for_token(self, token: object) -> str | None:
        """The active coder whose token this is, else None. Every active coder's digest is compared in constant time
        (``hmac.compare_digest``), with no early exit."""
        if not isinstance(token, str) or not 16 <= len(token) <= 256:
            return None
        digest = sha256_hex(token)
        with self._read() as con:
            rows = con.execute("SELECT coder, token_sha256 FROM coders WHERE revoked_at IS NULL").fetchall()
        found = None
        for row in rows:
            if hmac.compare_digest(row["token_sha256"], digest):
                found = row["coder"]
        return found

    def _active_coder(self, con: sqlite3.Connection, coder: str) -> None:
        row = con.execute("SELECT revoked_at FROM coders WHERE coder = ?", [coder]).fetchone()
        if row is None:
            raise CodingError("coder", f"no coder named {shown(coder)}")
        if row["revoked_at"] is not None:
            raise CodingError("coder", f"coder {coder!r} was revoked at {row['revoked_at']}")

    # --- tasks --------------------------------------------------------------------------------------------------

    def load_tasks(self, protocol_id: str, rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """Add or update the tasks of a protocol (idempotent): per row, its evidence (:func:`task_evidence`) and its
        queue position (the row's ``position``, else its place in ``rows``). A task whose evidence changed gets the new
        version; the answers given on the old one keep pointing to it. Tasks not in ``rows`` stay. Returns counts
        ``added``, ``evidence_changed``, ``moved`` (position only), ``unchanged``."""
        check_protocol_id(protocol_id)
        prepared: dict[str, tuple[int, str, str]] = {}
        for i, row in enumerate(rows):
            evidence = task_evidence(row)
            position = row.get("position", i)
            if isinstance(position, bool) or not isinstance(position, int):
                raise CodingError("position", f"position={position!r} of {evidence['id']} is not an integer")
            if evidence["id"] in prepared:
                raise CodingError("id", f"{evidence['id']} appears twice in the tasks of {protocol_id}")
            text = canonical_json(evidence)
            prepared[evidence["id"]] = (position, text, sha256_hex(text))
        counts = dict.fromkeys(("added", "evidence_changed", "moved", "unchanged"), 0)
        now = now_iso()
        with self._write() as con:
            existing = {
                r["id"]: (r["position"], r["evidence_sha256"])
                for r in con.execute(
                    "SELECT id, position, evidence_sha256 FROM coding_tasks WHERE protocol_id = ?", [protocol_id]
                )
            }
            for wid, (position, text, sha) in prepared.items():
                con.execute("INSERT OR IGNORE INTO coding_evidence VALUES (?, ?, ?, ?)", [sha, wid, text, now])
                old = existing.get(wid)
                if old is None:
                    con.execute(
                        "INSERT INTO coding_tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [protocol_id, wid, position, text, sha, now, now],
                    )
                    counts["added"] += 1
                elif old[1] != sha:
                    con.execute(
                        "UPDATE coding_tasks SET position = ?, evidence_json = ?, evidence_sha256 = ?, evidence_changed_at = ?"
                        " WHERE protocol_id = ? AND id = ?",
                        [position, text, sha, now, protocol_id, wid],
                    )
                    counts["evidence_changed"] += 1
                elif old[0] != position:
                    con.execute(
                        "UPDATE coding_tasks SET position = ? WHERE protocol_id = ? AND id = ?",
                        [position, protocol_id, wid],
                    )
                    counts["moved"] += 1
                else:
                    counts["unchanged"] += 1
        log.info("tasks of %s loaded: %s", protocol_id, counts)
        return counts

    def tasks(self, protocol_id: str) -> list[dict[str, Any]]:
        """The tasks of a protocol in queue order: ``id``, ``position``, ``evidence`` (dict), ``evidence_sha256``."""
        with self._read() as con:
            rows = con.execute(
                "SELECT id, position, evidence_json, evidence_sha256 FROM coding_tasks WHERE protocol_id = ? ORDER BY position, id",
                [protocol_id],
            ).fetchall()
        return [self._task_dict(protocol_id, r) for r in rows]

    @staticmethod
    def _task_dict(protocol_id: str, row: sqlite3.Row) -> dict[str, Any]:
        return {
            "protocol_id": protocol_id,
            "id": row["id"],
            "position": row["position"],
            "evidence": json.loads(row["evidence_json"]),
            "evidence_sha256": row["evidence_sha256"],
        }

    def evidence(self, evidence_sha256: str) -> dict[str, Any] | None:
        """One evidence version (what an answer naming it was shown), or None."""
        with self._read() as con:
            row = con.execute(
                "SELECT evidence_json FROM coding_evidence WHERE evidence_sha256 = ?", [evidence_sha256]
            ).fetchone()
        return None if row is None else json.loads(row[0])

    def next_task(self, protocol_id: str, coder: str) -> dict[str, Any] | None:
        """The coder's next task (as :meth:`tasks` gives it: evidence only), or None when their queue is empty.

        The queue is derived from the answers: tasks in position order the coder has not answered, that fewer than
        two other coders have answered or currently hold. The task returned is claimed for the coder (so a third coder
        is handed another one), and a coder's own live claim comes first, so stopping and coming back resumes there.
        """
        cutoff = _iso(dt.datetime.now(dt.UTC) - self.claim_ttl)
        with self._write() as con:
            self._active_coder(con, coder)
            row = con.execute(
                _QUEUE_SQL, {"pid": protocol_id, "coder": coder, "cutoff": cutoff, "per_work": CODERS_PER_WORK}
            ).fetchone()
            if row is None:
                return None
            con.execute(
                "INSERT INTO coding_claims VALUES (?, ?, ?, ?) "
                "ON CONFLICT (protocol_id, id, coder) DO UPDATE SET claimed_at = excluded.claimed_at",
                [protocol_id, row["id"], coder, now_iso()],
            )
        return self._task_dict(protocol_id, row)

    # --- answers ------------------------------------------------------------------------------------------------

    def _check_append(
        self, con: sqlite3.Connection, protocol_id: str, work_id: str, coder: str, role: str, shown_sha: str | None
    ) -> str:
        """The checks every appended answer passes (in the write transaction); returns the evidence version shown."""
        if role not in ROLES:
            raise CodingError("role", f"role={shown(role)}: expected one of {list(ROLES)}")
        task = con.execute(
            "SELECT evidence_sha256 FROM coding_tasks WHERE protocol_id = ? AND id = ?", [protocol_id, work_id]
        ).fetchone()
        if task is None:
            raise CodingError("id", f"{shown(work_id)} is not a task of protocol {shown(protocol_id)}")
        shown_sha = shown_sha or task["evidence_sha256"]
        version = con.execute("SELECT id FROM coding_evidence WHERE evidence_sha256 = ?", [shown_sha]).fetchone()
        if version is None or version["id"] != work_id:
            raise CodingError("evidence_sha256", f"{shown(shown_sha)} is not an evidence version of {work_id}")
        coders = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT coder FROM coding_answers WHERE protocol_id = ? AND id = ? AND role = 'code' ORDER BY coder",
                [protocol_id, work_id],
            )
        ]
        if role == "code" and coder not in coders and len(coders) >= CODERS_PER_WORK:
            raise CodingError("coder", f"{work_id} has its {CODERS_PER_WORK} coders already ({', '.join(coders)})")
        if role == "adjudication" and len(coders) < CODERS_PER_WORK:
            raise CodingError("role", f"{work_id} has {len(coders)} coder(s): adjudication needs {CODERS_PER_WORK}")
        return shown_sha

    def _append(
        self,
        con: sqlite3.Connection,
        answer_id: str,
        protocol_id: str,
        work_id: str,
        coder: str,
        role: str,
        clean: Mapping[str, Any],
        shown: str,
        submitted_at: str,
        source: str,
        provenance: Mapping[str, Any] | None,
    ) -> None:
        categories = None if clean["categories"] is None else json.dumps(clean["categories"])
        con.execute(
            "INSERT INTO coding_answers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                answer_id,
                protocol_id,
                work_id,
                coder,
                role,
                categories,
                clean["domain"],
                clean["study_design"],
                clean["genre"],
                clean["about_ca_system"],
                clean["about_ca_topic"],
                clean["confidence"],
                int(clean["unresolved"]),
                clean["note"],
                shown,
                submitted_at,
                source,
                None if provenance is None else canonical_json(provenance),
            ],
        )

    def submit(
        self,
        protocol_id: str,
        work_id: str,
        coder: str,
        answer: Mapping[str, Any],
        role: str = "code",
        *,
        evidence_sha256: str | None = None,
    ) -> str:
        """Append a coder's answer given on the site (validated by :func:`validate_answer`); returns its ``answer_id``.

        ``evidence_sha256`` is the evidence version the page showed (default: the task's current one). Refused
        (:class:`CodingError`): an unknown or revoked coder, a work that is not a task of the protocol, an unknown
        evidence version, a third coder on a work two others have answered, an adjudication of a work without two
        coders, an invalid answer. A coder answering again appends a new row: the latest counts.
        """
        clean = validate_answer(answer, work_id)
        answer_id = uuid.uuid4().hex
        with self._write() as con:
            self._active_coder(con, coder)
            shown_sha = self._check_append(con, protocol_id, work_id, coder, role, evidence_sha256)
            self._append(con, answer_id, protocol_id, work_id, coder, role, clean, shown_sha, now_iso(), "site", None)
        log.info("answer %s appended: %s (%s) on %s %s", answer_id, coder, role, protocol_id, work_id)
        return answer_id

    def append_imported(
        self,
        protocol_id: str,
        work_id: str,
        coder: str,
        answer: Mapping[str, Any],
        *,
        answer_id: str,
        evidence_sha256: str,
        submitted_at: str,
        source: str,
        provenance: Mapping[str, Any],
    ) -> bool:
        """Append a ``code`` answer made elsewhere (a Label Studio annotation, :mod:`.labelstudio`), validated like a
        site answer; ``answer_id`` is derived from the annotation, so the same annotation is appended once. Returns
        False when that answer is present already, or the same annotation (its annotator, ``annotation_id`` and time
        in ``provenance``) under another coder name. One person is one coder: ``coder`` takes the spelling of a coder
        the store knows in another letter case (registered, or with answers), and an annotator whose earlier
        annotations were imported as another coder is refused (CodingError) rather than made a second coder. The coder need not be registered (they never sign in here), but a
        registered coder who was revoked is refused (CodingError), like their sign-in, and so is a ``submitted_at``
        more than :data:`MAX_CLOCK_SKEW` in the future (the latest answer counts by time: it would hide later ones)."""
        check_coder_name(coder, imported=True)
        clean = validate_answer(answer, work_id)
        when = parse_time(submitted_at)
        if when is None:
            raise CodingError("submitted_at", f"submitted_at={shown(submitted_at)} is not an ISO 8601 time")
        if when > _iso(dt.datetime.now(dt.UTC) + MAX_CLOCK_SKEW):  # one fixed width: text order is time order
            raise CodingError(
                "submitted_at",
                f"submitted_at {when} is in the future (more than {MAX_CLOCK_SKEW.seconds // 60} minutes after now): the "
                "latest answer counts by time, so it would hide every answer given after it; fix the clock of the "
                "Label Studio server or the annotation's updated_at",
            )
        submitted_at = when
        annotator = annotator_of(provenance.get("completed_by"))
        with self._write() as con:
            if con.execute("SELECT 1 FROM coding_answers WHERE answer_id = ?", [answer_id]).fetchone():
                return False
            if annotator is not None and self._annotation_present(
                con, protocol_id, work_id, annotator, provenance, when
            ):
                return False  # the same annotation, imported before under another spelling or coder map
            coder = self._imported_coder(con, coder, annotator)
            revoked = con.execute(
                "SELECT coder, revoked_at FROM coders WHERE lower(coder) = lower(?) AND revoked_at IS NOT NULL", [coder]
            ).fetchone()
            if revoked is not None:
                raise CodingError(
                    "coder",
                    f"coder {revoked['coder']!r} was revoked at {revoked['revoked_at']}: their codes are no longer "
                    "accepted; map this annotator to an active coder (or add a new one) if their codes should count",
                )
            shown_sha = self._check_append(con, protocol_id, work_id, coder, "code", evidence_sha256)
            self._append(
                con, answer_id, protocol_id, work_id, coder, "code", clean, shown_sha, submitted_at, source, provenance
            )
        return True

    @staticmethod
    def _annotation_present(
        con: sqlite3.Connection,
        protocol_id: str,
        work_id: str,
        annotator: str,
        provenance: Mapping[str, Any],
        submitted_at: str,
    ) -> bool:
        """True when the annotation of ``provenance`` (annotator, annotation id, time) is stored already, by any coder."""
        return (
            con.execute(
                f"SELECT 1 FROM coding_answers WHERE protocol_id = ? AND id = ? AND role = 'code' AND submitted_at = ? "
                f"AND json_extract(provenance, '$.annotation_id') = ? AND {ANNOTATOR_SQL} = ?",
                [protocol_id, work_id, submitted_at, provenance.get("annotation_id"), annotator],
            ).fetchone()
            is not None
        )

    @staticmethod
    def _imported_coder(con: sqlite3.Connection, coder: str, annotator: str | None) -> str:
        """The coder an imported answer is stored under: ``coder`` in the spelling the store knows (registered coders
        first, then coders with answers; letter case ignored). CodingError when ``annotator``'s earlier imported answers
        are another coder's (one person, two coders)."""
        known = con.execute(
            "SELECT coder FROM coders WHERE lower(coder) = lower(?) UNION ALL "
            "SELECT coder FROM (SELECT DISTINCT coder FROM coding_answers WHERE lower(coder) = lower(?)) LIMIT 1",
            [coder, coder],
        ).fetchone()
        coder = known[0] if known else coder
        if annotator is None:
            return coder
        before = con.execute(
            f"SELECT DISTINCT coder FROM coding_answers WHERE provenance IS NOT NULL AND {ANNOTATOR_SQL} = ? "
            "AND lower(coder) <> lower(?) LIMIT 1",
            [annotator, coder],
        ).fetchone()
        if before is not None:
            other = before[0]
            how = (
                "leave them out of the coder map"
                if other.startswith(IMPORTED_CODER_PREFIX)
                else f"map them to {other!r} in the coder map"
            )
            raise CodingError(
                "coder",
                f"annotator {shown(annotator)} was imported as coder {shown(other)} before, and now as {shown(coder)}: "
                f"one person is one coder (their answers are never merged or renamed), so {how}",
            )
        return coder

    def _latest(self, con: sqlite3.Connection, protocol_id: str) -> list[dict[str, Any]]:
        out = []
        for row in con.execute(_LATEST_SQL, [protocol_id]).fetchall():
            d = _answer_of(row)
            del d["rn"]
            out.append(d)
        return out

    def latest_answers(self, protocol_id: str) -> list[dict[str, Any]]:
        """The latest answer per (work, coder, role) of a protocol, in queue order: every column of
        ``coding_answers`` (categories a list, booleans as bools, provenance a dict) plus ``position`` and ``seq``
        (the append order)."""
        with self._read() as con:
            return self._latest(con, protocol_id)

    def my_answer(self, protocol_id: str, work_id: str, coder: str, role: str = "code") -> dict[str, Any] | None:
        """The coder's own latest answer on a work (for their edit page), or None; never another coder's."""
        with self._read() as con:
            row = con.execute(
                "SELECT *, rowid AS seq FROM coding_answers WHERE protocol_id = ? AND id = ? AND coder = ? AND role = ? "
                "ORDER BY submitted_at DESC, rowid DESC LIMIT 1",
                [protocol_id, work_id, coder, role],
            ).fetchone()
        return None if row is None else _answer_of(row)

    def _states(self, protocol_id: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """The protocol's tasks and, per work with answers, ``codes`` (latest per coder) and ``adjudication`` (latest)."""
        with self._read() as con:
            tasks = [
                dict(r)
                for r in con.execute(
                    "SELECT id, position, evidence_sha256 FROM coding_tasks WHERE protocol_id = ? ORDER BY position, id",
                    [protocol_id],
                )
            ]
            latest = self._latest(con, protocol_id)
        states: dict[str, dict[str, Any]] = {}
        for a in latest:
            s = states.setdefault(a["id"], {"codes": [], "adjudication": None})
            if a["role"] == "code":
                s["codes"].append(a)
            elif s["adjudication"] is None or (a["submitted_at"], a["seq"]) > (
                s["adjudication"]["submitted_at"],
                s["adjudication"]["seq"],
            ):
                s["adjudication"] = a
        return tasks, states

    @staticmethod
    def _resolved(state: Mapping[str, Any]) -> bool:
        adj = state["adjudication"]
        return adj is not None and not adj["unresolved"]

    @staticmethod
    def _differing(codes: list[dict[str, Any]]) -> list[str]:
        a, b = codes[0], codes[1]
        fields = [f for f in OUTCOME_FIELDS if a[f] != b[f]]
        if not fields and (a["unresolved"] or b["unresolved"]):
            fields = ["unresolved"]
        return fields

    def disagreements(self, protocol_id: str) -> list[dict[str, Any]]:
        """The works to adjudicate, in queue order: two coders' latest answers differ on an :data:`OUTCOME_FIELDS`
        field, or one of them is unresolved, and no adjudication that is not itself unresolved exists. Each: ``id``,
        ``position``, ``fields`` (those that differ), ``answers`` (both, by coder name, each with the evidence version
        it was shown), ``adjudication`` (the latest unresolved attempt, or None), ``evidence_sha256`` (current)."""
        tasks, states = self._states(protocol_id)
        out = []
        for t in tasks:
            s = states.get(t["id"])
            if s is None or len(s["codes"]) < CODERS_PER_WORK or self._resolved(s):
                continue
            codes = sorted(s["codes"], key=lambda a: a["coder"])
            fields = self._differing(codes)
            if fields:
                out.append(
                    {
                        "id": t["id"],
                        "position": t["position"],
                        "fields": fields,
                        "answers": codes,
                        "adjudication": s["adjudication"],
                        "evidence_sha256": t["evidence_sha256"],
                    }
                )
        return out

    def adjudicated_codes(self, protocol_id: str) -> list[dict[str, Any]]:
        """The final human code per work, in queue order: the latest adjudication that is not unresolved (``basis``
        ``adjudicated``), else the agreed answer of two coders (``agreed``), else the answer of the only coder so far
        when it is not unresolved (``single_coder``, flagged ``single_coder=True``). Works awaiting adjudication have
        none. Each: ``protocol_id``, ``id``, ``position``, ``basis``, ``single_coder``, the :data:`OUTCOME_FIELDS`
        but ``unresolved``, ``coders``, ``answer_ids`` (the answers it rests on), ``evidence_sha256s`` (what they saw)."""
        tasks, states = self._states(protocol_id)
        out = []
        for t in tasks:
            s = states.get(t["id"])
            if s is None or not s["codes"]:
                continue
            codes = sorted(s["codes"], key=lambda a: a["coder"])
            if self._resolved(s):
                basis, final, used = "adjudicated", s["adjudication"], [*codes, s["adjudication"]]
            elif len(codes) >= CODERS_PER_WORK and not self._differing(codes):
                basis, final, used = "agreed", codes[0], codes
            elif len(codes) == 1 and not codes[0]["unresolved"]:
                basis, final, used = "single_coder", codes[0], codes
            else:
                continue
            row = {"protocol_id": protocol_id, "id": t["id"], "position": t["position"], "basis": basis}
            row["single_coder"] = len(codes) == 1
            row.update({f: final[f] for f in OUTCOME_FIELDS if f != "unresolved"})
            row["coders"] = [a["coder"] for a in codes]
            row["answer_ids"] = [a["answer_id"] for a in used]
            row["evidence_sha256s"] = sorted({a["evidence_sha256"] for a in used})
            out.append(row)
        return out

    def task_progress(self, protocol_id: str) -> dict[str, Any]:
        """Counts of a protocol: ``tasks``, ``no_coder``, ``one_coder``, ``two_coders``, ``agreed``,
        ``disagreements`` (awaiting adjudication), ``adjudicated``, ``final_codes`` (works with a final human code,
        single-coder ones included), ``answers`` (rows appended) and ``by_coder`` (works each coder has answered)."""
        tasks, states = self._states(protocol_id)
        counts: dict[str, Any] = dict.fromkeys(
            ("tasks", "no_coder", "one_coder", "two_coders", "agreed", "disagreements", "adjudicated"), 0
        )
        by_coder: dict[str, int] = {}
        counts["tasks"] = len(tasks)
        for t in tasks:
            s = states.get(t["id"], {"codes": [], "adjudication": None})
            n = len(s["codes"])
            counts[("no_coder", "one_coder")[n] if n < 2 else "two_coders"] += 1
            for a in s["codes"]:
                by_coder[a["coder"]] = by_coder.get(a["coder"], 0) + 1
            if n >= CODERS_PER_WORK:
                if self._resolved(s):
                    counts["adjudicated"] += 1
                elif self._differing(sorted(s["codes"], key=lambda a: a["coder"])):
                    counts["disagreements"] += 1
                else:
                    counts["agreed"] += 1
        counts["final_codes"] = len(self.adjudicated_codes(protocol_id))
        with self._read() as con:
            counts["answers"] = con.execute(
                "SELECT count(*) FROM coding_answers WHERE protocol_id = ?", [protocol_id]
            ).fetchone()[0]
        counts["by_coder"] = dict(sorted(by_coder.items()))
        return counts

    def record_import(self, row: Mapping[str, Any]) -> None:
        """Append one ``coding_imports`` row (:mod:`.labelstudio`)."""
        with self._write() as con:
            con.execute(
                "INSERT INTO coding_imports VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    row["file_sha256"],
                    row["imported_at"],
                    row["file_name"],
                    row["tasks"],
                    row["annotations"],
                    row["appended"],
                    row["already_present"],
                    row["refused"],
                    canonical_json(row["refusals"]),
                ],
            )

    # --- the coding pages (issue 16: metacan_pipeline/site/coding_pages.py) ---------------------------------------
    # Added beside the methods above, which they do not change: loads, roles, sessions, a coder's own progress and
    # answers, and the adjudication queue.

    def record_load(
        self,
        protocol_id: str,
        counts: Mapping[str, int],
        *,
        instructions_version: str,
        source: str,
        sample_works: int,
        missing: int,
    ) -> str:
        """Append one ``coding_loads`` row (a load of the protocol's audit sample, :mod:`.coding_tasks`); the newest
        row names the protocol the coding pages serve (:meth:`serving_protocol`). Returns its time."""
        check_protocol_id(protocol_id)
        now = now_iso()
        with self._write() as con:
            con.execute(
                "INSERT INTO coding_loads VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    protocol_id,
                    now,
                    instructions_version,
                    source,
                    sample_works,
                    *(counts[k] for k in ("added", "evidence_changed", "moved", "unchanged")),
                    missing,
                ],
            )
        return now

    def serving_protocol(self) -> dict[str, Any] | None:
        """The newest ``coding_loads`` row (``protocol_id``, ``instructions_version``, ``loaded_at``...), or None
        before any load: the coding pages code that protocol's tasks."""
        with self._read() as con:
            row = con.execute("SELECT * FROM coding_loads ORDER BY loaded_at DESC, rowid DESC LIMIT 1").fetchone()
        return None if row is None else dict(row)

    def grant_role(self, coder: str, role: str = ADJUDICATOR) -> str:
        """Give an active coder ``role`` (:data:`CODER_ROLES`; again after a revocation); returns the time."""
        if role not in CODER_ROLES:
            raise CodingError("role", f"role={role!r}: expected one of {list(CODER_ROLES)}")
        now = now_iso()
        with self._write() as con:
            self._active_coder(con, coder)
            con.execute(
                "INSERT INTO coder_roles VALUES (?, ?, ?, NULL) "
                "ON CONFLICT (coder, role) DO UPDATE SET granted_at = excluded.granted_at, revoked_at = NULL",
                [coder, role, now],
            )
        log.info("coder %s is %s", coder, role)
        return now

    def revoke_role(self, coder: str, role: str = ADJUDICATOR) -> str:
        """Take ``role`` back from ``coder`` (their answers stay); CodingError when they do not hold it."""
        now = now_iso()
        with self._write() as con:
            cur = con.execute(
                "UPDATE coder_roles SET revoked_at = ? WHERE coder = ? AND role = ? AND revoked_at IS NULL",
                [now, coder, role],
            )
            if cur.rowcount == 0:
                raise CodingError("coder", f"coder {coder!r} is not {role}")
        log.info("coder %s is no longer %s", coder, role)
        return now

    def has_role(self, coder: str, role: str = ADJUDICATOR) -> bool:
        """True when ``coder`` is active and holds ``role``."""
        with self._read() as con:
            row = con.execute(
                "SELECT 1 FROM coder_roles r JOIN coders c USING (coder) "
                "WHERE r.coder = ? AND r.role = ? AND r.revoked_at IS NULL AND c.revoked_at IS NULL",
                [coder, role],
            ).fetchone()
        return row is not None

    def coder_roles(self) -> dict[str, list[str]]:
        """The roles each coder holds now, by coder name (coders without a role are absent)."""
        with self._read() as con:
            rows = con.execute(
                "SELECT coder, role FROM coder_roles WHERE revoked_at IS NULL ORDER BY coder, role"
            ).fetchall()
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r["coder"], []).append(r["role"])
        return out

    def open_session(self, coder: str, ttl: dt.timedelta = SESSION_TTL) -> str:
        """A new sign-in session of an active coder: returns the session value (the cookie's; only its SHA-256 is
        stored), valid ``ttl`` unless the coder signs out or is revoked first."""
        session = secrets.token_urlsafe(32)
        now = dt.datetime.now(dt.UTC)
        with self._write() as con:
            self._active_coder(con, coder)
            con.execute(
                "INSERT INTO coding_sessions VALUES (?, ?, ?, ?, NULL)",
                [sha256_hex(session), coder, _iso(now), _iso(now + ttl)],
            )
        log.info("coder %s signed in", coder)
        return session

    def session_coder(self, session: object) -> str | None:
        """The coder of a live session (not expired, not ended, the coder not revoked), else None."""
        if not isinstance(session, str) or not 16 <= len(session) <= 256:
            return None
        with self._read() as con:
            row = con.execute(
                "SELECT s.coder FROM coding_sessions s JOIN coders c USING (coder) WHERE s.session_sha256 = ? "
                "AND s.ended_at IS NULL AND s.expires_at > ? AND c.revoked_at IS NULL",
                [sha256_hex(session), now_iso()],
            ).fetchone()
        return None if row is None else row["coder"]

    def end_session(self, session: object) -> None:
        """Sign out: the session stops working (an unknown or ended one is ignored)."""
        if isinstance(session, str):
            with self._write() as con:
                con.execute(
                    "UPDATE coding_sessions SET ended_at = ? WHERE session_sha256 = ? AND ended_at IS NULL",
                    [now_iso(), sha256_hex(session)],
                )

    def task(self, protocol_id: str, work_id: str) -> dict[str, Any] | None:
        """One task of a protocol (as :meth:`tasks` gives it: evidence only), or None."""
        with self._read() as con:
            row = con.execute(
                "SELECT id, position, evidence_json, evidence_sha256 FROM coding_tasks WHERE protocol_id = ? AND id = ?",
                [protocol_id, work_id],
            ).fetchone()
        return None if row is None else self._task_dict(protocol_id, row)

    def holds_task(self, protocol_id: str, work_id: str, coder: str) -> bool:
        """True when ``coder`` has answered ``work_id`` (a code) or holds a live claim on it: the works a coder may
        open (the queue hands out the others)."""
        cutoff = _iso(dt.datetime.now(dt.UTC) - self.claim_ttl)
        with self._read() as con:
            row = con.execute(
                "SELECT 1 FROM coding_answers WHERE protocol_id = ? AND id = ? AND coder = ? AND role = 'code' "
                "UNION ALL SELECT 1 FROM coding_claims WHERE protocol_id = ? AND id = ? AND coder = ? AND claimed_at >= ?",
                [protocol_id, work_id, coder, protocol_id, work_id, coder, cutoff],
            ).fetchone()
        return row is not None

    def coder_progress(self, protocol_id: str, coder: str) -> dict[str, int]:
        """One coder's queue: ``done`` (works they have coded), ``to_do`` (tasks they have not coded that fewer than
        two other coders have: what the queue can still hand them, claims aside) and ``tasks``."""
        with self._read() as con:
            row = con.execute(
                """
                WITH coded AS (
                  SELECT id, count(DISTINCT coder) FILTER (WHERE coder <> :coder) AS others,
                         max(coder = :coder) AS mine
                  FROM coding_answers WHERE protocol_id = :pid AND role = 'code' GROUP BY id
                )
                SELECT count(*) AS tasks,
                       coalesce(sum(coalesce(c.mine, 0)), 0) AS done,
                       coalesce(sum(coalesce(c.mine, 0) = 0 AND coalesce(c.others, 0) < :per_work), 0) AS to_do
                FROM coding_tasks t LEFT JOIN coded c ON c.id = t.id WHERE t.protocol_id = :pid
                """,
                {"pid": protocol_id, "coder": coder, "per_work": CODERS_PER_WORK},
            ).fetchone()
        return {"tasks": row["tasks"], "done": row["done"], "to_do": row["to_do"]}

    def coder_answers(self, protocol_id: str, coder: str) -> list[dict[str, Any]]:
        """The coder's own latest code per work, in queue order (never another coder's): every column of
        ``coding_answers`` as :meth:`latest_answers` gives it."""
        return [a for a in self.latest_answers(protocol_id) if a["coder"] == coder and a["role"] == "code"]

    def adjudication_queue(self, protocol_id: str, adjudicator: str) -> tuple[list[dict[str, Any]], int]:
        """The disagreements (:meth:`disagreements`) ``adjudicator`` may settle, and how many others are left to
        another adjudicator because ``adjudicator`` coded the work themselves (an adjudicator is never one of the
        two coders whose answers they settle)."""
        items = self.disagreements(protocol_id)
        mine = [d for d in items if adjudicator not in {a["coder"] for a in d["answers"]}]
        return mine, len(items) - len(mine)

    def adjudicate(
        self, protocol_id: str, work_id: str, adjudicator: str, answer: Mapping[str, Any], *, evidence_sha256: str
    ) -> str:
        """Append an adjudication (:meth:`submit` with role ``adjudication``) by a coder holding the adjudicator
        role who did not code the work; returns its ``answer_id``. Refused (:class:`CodingError`) otherwise."""
        if not self.has_role(adjudicator, ADJUDICATOR):
            raise CodingError("coder", f"coder {adjudicator!r} is not an adjudicator")
        with self._read() as con:
            own = con.execute(
                "SELECT 1 FROM coding_answers WHERE protocol_id = ? AND id = ? AND coder = ? AND role = 'code'",
                [protocol_id, work_id, adjudicator],
            ).fetchone()
        if own is not None:
            raise CodingError("coder", f"{adjudicator} coded {work_id}: another adjudicator settles it")
        # only a disagreement is adjudicated (again, if need be: the latest adjudication counts); an agreed code is
        # the human code, and an adjudication posted over it would replace what the two coders said
        codes = sorted(self._states(protocol_id)[1].get(work_id, {"codes": []})["codes"], key=lambda a: a["coder"])
        if len(codes) < CODERS_PER_WORK or not self._differing(codes):
            raise CodingError("id", f"{work_id} has no disagreement to settle: its two coders have not disagreed")
        return self.submit(
            protocol_id, work_id, adjudicator, answer, role="adjudication", evidence_sha256=evidence_sha256
        )

    def backup(self, dest: Path | str) -> int:
        """Copy the whole store, the answers still in its write-ahead log included, to ``dest`` (a new file) through
        SQLite's online backup, consistent while the pages and the CLI write; returns the answers copied. A copy of
        ``coding.sqlite`` alone misses every answer the log has not checkpointed yet. Raises :class:`CodingError`
        when ``dest`` exists (a backup never overwrites another)."""
        dest = Path(dest)
        if dest.exists():
            raise CodingError("backup", f"{dest} exists: name a new file (a backup never overwrites another)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        target = sqlite3.connect(dest)
        try:
            self._con.backup(target)
            return target.execute("SELECT count(*) FROM coding_answers").fetchone()[0]
        finally:
            target.close()

    # --- machine adjudicators (never human codes) -----------------------------------------------------------------

    def append_machine_codes(self, rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """Append codes of a MACHINE adjudicator (``machine_codes``: protocol, work, head, code 0 / 1 / None, the
        adjudicator ``machine-adjudicator:<name>``, its own verdict and reason, the source file and its SHA-256).
        They never enter :meth:`adjudicated_codes` or any human layer. A (protocol, work, head, adjudicator) already
        stored is left as it was, so a re-import adds nothing. Returns ``{"added", "already_present"}``. Raises
        :class:`CodingError` naming the row for an adjudicator that does not say machine, a bad protocol id or work
        id, or a code other than 0 / 1 / None."""
        prepared = []
        for row in rows:
            adjudicator = str(row.get("adjudicator") or "")
            if not re.fullmatch(r"machine-adjudicator:[A-Za-z0-9][A-Za-z0-9._-]{0,63}", adjudicator):
                raise CodingError("adjudicator", f"{adjudicator!r} must read machine-adjudicator:<name>")
            check_protocol_id(row["protocol_id"])
            if not is_work_id(str(row["id"])):
                raise CodingError("id", f"{row['id']!r} is not a work id (W<digits>)")
            code = row.get("code")
            if code is not None and (isinstance(code, bool) or code not in (0, 1)):
                raise CodingError("code", f"{row['id']} {row.get('head')}: code {code!r} is not 0, 1 or None")
            prepared.append(
                [
                    row["protocol_id"],
                    row["id"],
                    row["head"],
                    code,
                    adjudicator,
                    row.get("verdict"),
                    row.get("reason"),
                    row.get("source_file"),
                    row.get("source_sha256"),
                    now_iso(),
                ]
            )
        added = 0
        with self._write() as con:
            for values in prepared:
                added += con.execute(
                    "INSERT OR IGNORE INTO machine_codes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values
                ).rowcount
        return {"added": added, "already_present": len(prepared) - added}

    def machine_codes(self, protocol_id: str) -> list[dict[str, Any]]:
        """Every machine adjudicator's code under a protocol, ordered by adjudicator, work and head."""
        with self._read() as con:
            rows = con.execute(
                "SELECT * FROM machine_codes WHERE protocol_id = ? ORDER BY adjudicator, id, head", [protocol_id]
            ).fetchall()
        return [dict(r) for r in rows]
