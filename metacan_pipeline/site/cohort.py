"""A cohort: strictly parsed, validated filters over one release (issue 15), and its canonical query hash.

:func:`parse_request` takes the query parameters of a request (name -> list of values, as Starlette's
``QueryParams.multi_items`` gives them) and returns a :class:`Cohort` (the filters) and a :class:`Listing`
(sort, cursor, page size), or raises :class:`CohortError` whose message is one sentence saying what is wrong
(the site answers HTTP 400 with it). An empty value is an unset field (a form without JavaScript sends every
field); an unknown name, a repeated name, a value outside its vocabulary or contradictory filters are errors.

The parameters (``FILTERS``): ``year_min``/``year_max``; ``language``, ``type``, ``field``, ``topic``, ``venue``,
``institution`` (a Canadian institution), ``funder``, ``keyword`` (exact values); ``ca_aff``, ``ca_fund``,
``ca_venue``, ``about_ca``, ``invisible_to_affiliation_only``, ``has_abstract``, ``retracted``
(``yes``/``no``/``any``); direct labels: ``label_category``, ``label_domain``, ``label_study_design``,
``label_genre`` (one labelled direct label must carry all that are given), ``label_teacher`` (that teacher's
label) or ``label_agreement=all`` (every teacher of the release labelled the work so; default ``any``: at
least one); classifier decisions: ``classifier_category`` with ``classifier_mode`` (``candidate`` or
``consensus``) and optionally ``classifier_version``; machine scores: ``score_arm`` with ``score_min`` and/or
``score_max`` (in [0, 1]); ``q``: words that must all occur in the title or keywords. Listing (``LISTING``):
``sort`` (``relevance`` with ``q`` only, ``year``, ``cited_by``), ``after`` (the cursor of the previous page),
``limit`` (1-100, default 20).

The query hash (:meth:`Cohort.query_hash`) is the first 12 hex of SHA-256 over the canonical filters (set
fields only, in name order, normalised), the release id and the classifier version: sort and page are not in it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..vocab import CATEGORIES, DOMAINS, GENRES, STUDY_DESIGNS
from . import fts
from .release import ReleaseInfo

TRISTATE = ("yes", "no", "any")
BOOLEAN_FILTERS = (
    "ca_aff",
    "ca_fund",
    "ca_venue",
    "about_ca",
    "invisible_to_affiliation_only",
    "has_abstract",
    "retracted",
)
TEXT_FILTERS = ("language", "type", "field", "topic", "venue", "institution", "funder", "keyword")
LABEL_VALUES = {
    "label_category": CATEGORIES,
    "label_domain": DOMAINS,
    "label_study_design": STUDY_DESIGNS,
    "label_genre": GENRES,
}
FILTERS = (
    ("year_min", "year_max", *TEXT_FILTERS, *BOOLEAN_FILTERS, *LABEL_VALUES)
    + ("label_teacher", "label_agreement", "classifier_category", "classifier_mode", "classifier_version")
    + ("score_arm", "score_min", "score_max", "q")
)
LISTING = ("sort", "after", "limit")
SORTS = ("relevance", "year", "cited_by")
MAX_TEXT = 300
MAX_QUERY = 200
YEAR_RANGE = (1000, 2100)
DEFAULT_LIMIT, MAX_LIMIT = 20, 100


class CohortError(ValueError):
    """A request the site refuses (HTTP 400); the message is one sentence saying why."""


@dataclass(frozen=True)
class Cohort:
    """Validated filters (only the set ones, normalised) over ``release``."""

    filters: dict[str, Any]
    release: ReleaseInfo

    @property
    def words(self) -> list[str]:
        return fts.tokens(self.filters.get("q", ""))

    @property
    def classifier_version(self) -> str:
        """The classifier version the cohort is read under: the one it names, else the release's."""
        return self.filters.get("classifier_version") or self.release.classifier_version

    def canonical(self) -> str:
        """The canonical JSON text of the filters, the release id and the classifier version."""
        body = {
            "filters": self.filters,
            "release_id": self.release.release_id,
            "classifier_version": self.classifier_version,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def query_hash(self) -> str:
        """First 12 hex of SHA-256 of :meth:`canonical` (sort and pagination are not part of it)."""
        return hashlib.sha256(self.canonical().encode("utf-8")).hexdigest()[:12]

    def params(self) -> dict[str, str]:
        """The filters as query parameters (what a link to the same cohort carries)."""
        return {k: _param_text(v) for k, v in sorted(self.filters.items())}


@dataclass(frozen=True)
class Listing:
    """How a page of a cohort is listed: ``sort``, the keyset ``after`` (sort value, work_key) or None, ``limit``."""

    sort: str
    after: tuple[Any, int] | None = None
    limit: int = DEFAULT_LIMIT


def _param_text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def single_values(items: Iterable[tuple[str, str]], allowed: Iterable[str]) -> dict[str, str]:
    """``{name: value}`` of the non-empty parameters; :class:`CohortError` for an unknown or repeated name."""
    allowed = tuple(allowed)
    out: dict[str, str] = {}
    for name, value in items:
        if name not in allowed:
            raise CohortError(f"unknown parameter {name[:40]!r}: the parameters are {', '.join(allowed)}.")
        if name in out:
            raise CohortError(f"the parameter {name!r} is given twice; give each parameter at most once.")
        value = value.strip()
        if value:
            out[name] = value
    return out


def parse_request(items: Iterable[tuple[str, str]], release: ReleaseInfo) -> tuple[Cohort, Listing]:
    """The cohort and listing of a request's parameters (module docstring)."""
    values = single_values(items, FILTERS + LISTING)
    cohort = parse_filters({k: v for k, v in values.items() if k in FILTERS}, release)
    return cohort, parse_listing(values, cohort)


def parse_filters(values: dict[str, str], release: ReleaseInfo) -> Cohort:
    """A :class:`Cohort` from ``{name: non-empty value}`` (names must be in ``FILTERS``)."""
    f: dict[str, Any] = {}
    for name in ("year_min", "year_max"):
        if name in values:
            f[name] = _int(name, values[name], *YEAR_RANGE)
    if "year_min" in f and "year_max" in f and f["year_min"] > f["year_max"]:
        raise CohortError(f"year_min {f['year_min']} is after year_max {f['year_max']}: no work can match.")
    for name in TEXT_FILTERS:
        if name in values:
            f[name] = _text(name, values[name], MAX_TEXT)
    for name in BOOLEAN_FILTERS:
        if name in values:
            v = _choice(name, values[name], TRISTATE)
            if v != "any":
                f[name] = v
    _label_filters(values, release, f)
    _classifier_filters(values, release, f)
    _score_filters(values, release, f)
    if "q" in values:
        q = _text("q", values["q"], MAX_QUERY)
        words = fts.tokens(q)
        if not words:
            raise CohortError("the text query q holds no word to search for (letters or digits).")
        if len(words) > fts.MAX_TOKENS:
            raise CohortError(f"the text query q holds {len(words)} words; at most {fts.MAX_TOKENS} are searched.")
        f["q"] = " ".join(words)
    return Cohort(f, release)


def _label_filters(values: dict[str, str], release: ReleaseInfo, f: dict[str, Any]) -> None:
    for name, vocab in LABEL_VALUES.items():
        if name in values:
            f[name] = _choice(name, values[name], vocab)
    has_value = any(n in f for n in LABEL_VALUES)
    if "label_teacher" in values:
        if not release.teachers:
            raise CohortError("label_teacher: this release holds no direct label of any teacher.")
        f["label_teacher"] = _choice("label_teacher", values["label_teacher"], release.teachers)
    agreement = _choice("label_agreement", values.get("label_agreement", "any"), ("any", "all"))
    if ("label_teacher" in f or agreement == "all") and not has_value:
        raise CohortError(
            "label_teacher and label_agreement qualify a direct-label filter: give label_category, label_domain, "
            "label_study_design or label_genre as well."
        )
    if agreement == "all":
        if "label_teacher" in f:
            raise CohortError("label_agreement=all asks every teacher, label_teacher names one: give one or the other.")
        f["label_agreement"] = "all"


def _classifier_filters(values: dict[str, str], release: ReleaseInfo, f: dict[str, Any]) -> None:
    category, mode = values.get("classifier_category"), values.get("classifier_mode")
    if category is None:
        for name in ("classifier_mode", "classifier_version"):
            if name in values:
                raise CohortError(f"{name} qualifies a classifier decision: give classifier_category as well.")
        return
    f["classifier_category"] = _choice("classifier_category", category, CATEGORIES)
    if mode is None:
        raise CohortError(
            "classifier_category needs classifier_mode (candidate or consensus): the two are different claims."
        )
    f["classifier_mode"] = _choice("classifier_mode", mode, ("candidate", "consensus"))
    if not release.classifier_versions:
        raise CohortError("this release holds no classifier prediction, so no classifier decision can be filtered.")
    if "classifier_version" in values:
        f["classifier_version"] = _choice(
            "classifier_version", values["classifier_version"], release.classifier_versions
        )
    elif len(release.classifier_versions) > 1:
        raise CohortError(
            f"this release holds {len(release.classifier_versions)} classifier versions: name one in classifier_version."
        )
    else:
        f["classifier_version"] = release.classifier_versions[0]
    if f["classifier_mode"] == "consensus" and f["classifier_category"] in release.ungated.get(
        f["classifier_version"], ()
    ):
        raise CohortError(
            f"no work can have a consensus on {f['classifier_category']}: no head for it passed its "
            f"support gate in {f['classifier_version']}, so it decides nothing (SPEC section 6); use candidate mode."
        )


def _score_filters(values: dict[str, str], release: ReleaseInfo, f: dict[str, Any]) -> None:
    bounds = [n for n in ("score_min", "score_max") if n in values]
    if "score_arm" not in values:
        if bounds:
            raise CohortError(f"{bounds[0]} needs score_arm: name the machine-score arm it bounds.")
        return
    if not bounds:
        raise CohortError("score_arm needs score_min or score_max: a range to keep.")
    if not release.score_arms:
        raise CohortError("this release holds no machine score, so no score range can be filtered.")
    f["score_arm"] = _choice("score_arm", values["score_arm"], release.score_arms)
    for name in bounds:
        f[name] = _float(name, values[name], 0.0, 1.0)
    if f.get("score_min", 0.0) > f.get("score_max", 1.0):
        raise CohortError(f"score_min {f['score_min']} is above score_max {f['score_max']}: no work can match.")


def parse_listing(values: dict[str, str], cohort: Cohort) -> Listing:
    sort = _choice("sort", values.get("sort", "relevance" if "q" in cohort.filters else "year"), SORTS)
    if sort == "relevance" and "q" not in cohort.filters:
        raise CohortError("sort=relevance ranks matches of a text query: give q, or sort by year or cited_by.")
    limit = _int("limit", values["limit"], 1, MAX_LIMIT) if "limit" in values else DEFAULT_LIMIT
    after = decode_cursor(values["after"], sort) if "after" in values else None
    return Listing(sort, after, limit)


def encode_cursor(sort: str, value: Any, work_key: int) -> str:
    """The opaque ``after`` token of a page's last row (URL-safe base64 of JSON)."""
    return base64.urlsafe_b64encode(json.dumps([sort, value, work_key]).encode()).decode().rstrip("=")


def decode_cursor(token: str, sort: str) -> tuple[Any, int]:
    """``(sort value, work_key)`` of an ``after`` token; :class:`CohortError` when it is not one of ``sort``."""
    bad = CohortError("the after cursor is not one this site gave for this sort; start again from the first page.")
    if len(token) > 200:
        raise bad
    try:
        body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if not (isinstance(body, list) and len(body) == 3 and body[0] == sort and type(body[2]) is int):
        raise bad
    value = body[1]
    if sort == "relevance":
        ok = isinstance(value, float | int) and not isinstance(value, bool) and math.isfinite(value)
    else:
        ok = type(value) is int
    if not ok:
        raise bad
    return value, body[2]


def _choice(name: str, value: str, allowed: Iterable[str]) -> str:
    allowed = tuple(allowed)
    if value not in allowed:
        raise CohortError(f"{name} {value[:60]!r} is not one of {', '.join(allowed)}.")
    return value


def _int(name: str, value: str, lo: int, hi: int) -> int:
    if not (value.isascii() and value.lstrip("-").isdigit()) or len(value) > 6:
        raise CohortError(f"{name} {value[:40]!r} is not a whole number.")
    n = int(value)
    if not lo <= n <= hi:
        raise CohortError(f"{name} {n} is outside {lo}-{hi}.")
    return n


def _float(name: str, value: str, lo: float, hi: float) -> float:
    try:
        x = float(value) if value.isascii() and len(value) <= 20 else math.nan
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or not lo <= x <= hi:
        raise CohortError(f"{name} {value[:40]!r} is not a number in [{lo}, {hi}].")
    return x


def _text(name: str, value: str, max_len: int) -> str:
    if len(value) > max_len:
        raise CohortError(f"{name} is {len(value)} characters long; at most {max_len} are accepted.")
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        raise CohortError(f"{name} holds a control character.")
    return value
