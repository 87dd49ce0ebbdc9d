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
``limit`` (1-100, default 20). Each parameter is declared once in ``PARAMS`` (:class:`Param`: kind, bounds or
vocabulary, one line of documentation): the parser checks every value through it, and the OpenAPI document
(:mod:`.openapi`) describes every parameter from it. Refusals are :func:`~metacan_pipeline.i18n.N_` sentences, so
the HTML pages can say them in French; the API says them in English.

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

from ..i18n import N_, Sentence
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
CLASSIFIER_MODES = ("candidate", "consensus")
AGREEMENTS = ("any", "all")
SORTS = ("relevance", "year", "cited_by")
MAX_TEXT = 300
MAX_QUERY = 200
YEAR_RANGE = (1000, 2100)
DEFAULT_LIMIT, MAX_LIMIT = 20, 100


class CohortError(ValueError):
    """A request the site refuses (HTTP 400); the message is one sentence saying why.

    Built from a :class:`~metacan_pipeline.i18n.Sentence` (``N_(msgid, **values)``): ``str(exc)`` is the English
    sentence, ``exc.sentence.translate(tr)`` the same sentence in another interface language.
    """

    def __init__(self, sentence: str) -> None:
        self.sentence = sentence if isinstance(sentence, Sentence) else Sentence(sentence)
        super().__init__(str(self.sentence))


@dataclass(frozen=True)
class Param:
    """One query parameter: the JSON Schema of its value, what it means, and how a value is checked.

    ``kind`` is ``integer`` or ``number`` (within ``bounds``), ``text`` (at most ``max_length`` characters, no
    control character), ``choice`` (one of ``choices``, or of the release's ``release_choices`` attribute) or
    ``cursor`` (an opaque ``after`` token). :meth:`check` is what the parser applies to every given value and
    :meth:`schema` what the OpenAPI document says of it (:mod:`.openapi`), so the two cannot disagree.
    """

    name: str
    kind: str
    doc: str
    choices: tuple[str, ...] | None = None
    release_choices: str | None = None
    bounds: tuple[float, float] | None = None
    max_length: int | None = None
    default: str | None = None

    def allowed(self, release: ReleaseInfo | None) -> tuple[str, ...] | None:
        if self.choices is not None:
            return self.choices
        if self.release_choices is not None and release is not None:
            return tuple(getattr(release, self.release_choices))
        return None

    def check(self, value: str, release: ReleaseInfo) -> Any:
        """The parsed value (int, float or str); :class:`CohortError` when ``value`` is not one of this parameter."""
        if self.kind == "integer":
            return _int(self.name, value, *self.bounds)
        if self.kind == "number":
            return _float(self.name, value, *self.bounds)
        if self.kind == "choice":
            return _choice(self.name, value, self.allowed(release))
        if self.kind == "text":
            return _text(self.name, value, self.max_length)
        return value

    def schema(self, release: ReleaseInfo | None = None) -> dict:
        """The JSON Schema of the value (the release's vocabulary for a release-bound choice)."""
        out: dict[str, Any] = {
            "type": "integer" if self.kind == "integer" else "number" if self.kind == "number" else "string"
        }
        allowed = self.allowed(release)
        if allowed is not None:
            out["enum"] = list(allowed)
        if self.bounds is not None:
            out["minimum"], out["maximum"] = self.bounds
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        if self.default is not None:
            out["default"] = int(self.default) if self.kind == "integer" else self.default
        return out


_TEXT_DOCS = {
    "language": "Language code, exactly as OpenAlex gives it (e.g. en, fr).",
    "type": "Work type, exactly as OpenAlex gives it (e.g. article, review).",
    "field": "OpenAlex field of the primary topic, exact value.",
    "topic": "OpenAlex primary topic, exact value.",
    "venue": "Venue name, exact value.",
    "institution": "A Canadian institution among the work's affiliations, exact name.",
    "funder": "A funder of the work, exact name.",
    "keyword": "A keyword of the work, exact value.",
}
_BOOLEAN_DOCS = {
    "ca_aff": "Admitted through a Canadian affiliation (SPEC section 2).",
    "ca_fund": "Admitted through a Canadian funder.",
    "ca_venue": "Admitted through a Canadian venue.",
    "about_ca": "Admitted as being about Canada (lexicon).",
    "invisible_to_affiliation_only": "Canadian, but invisible to an affiliation-only search.",
    "has_abstract": "OpenAlex has an abstract for the work.",
    "retracted": "OpenAlex marks the work as retracted.",
}

PARAMS: dict[str, Param] = {
    p.name: p
    for p in (
        Param("year_min", "integer", "Earliest publication year.", bounds=YEAR_RANGE),
        Param("year_max", "integer", "Latest publication year (not before year_min).", bounds=YEAR_RANGE),
        *(Param(n, "text", _TEXT_DOCS[n], max_length=MAX_TEXT) for n in TEXT_FILTERS),
        *(Param(n, "choice", _BOOLEAN_DOCS[n], choices=TRISTATE, default="any") for n in BOOLEAN_FILTERS),
        *(
            Param(n, "choice", f"A direct label carrying this {n.removeprefix('label_').replace('_', ' ')}.", choices=v)
            for n, v in LABEL_VALUES.items()
        ),
        Param(
            "label_teacher", "choice", "Only this teacher's direct label counts (needs a label_* value).",
            release_choices="teachers",
        ),
        Param(
            "label_agreement", "choice", "any: at least one teacher labelled the work so; all: every teacher of the "
            "release did (needs a label_* value; not with label_teacher).", choices=AGREEMENTS, default="any",
        ),
        Param("classifier_category", "choice", "A classifier decision on this category (needs classifier_mode).",
              choices=CATEGORIES),
        Param("classifier_mode", "choice", "candidate (either side called it) or consensus (both did); needs "
              "classifier_category.", choices=CLASSIFIER_MODES),
        Param("classifier_version", "choice", "The classifier version the decision is read under (required when the "
              "release holds several).", release_choices="classifier_versions"),
        Param("score_arm", "choice", "The machine-score arm score_min / score_max bound.", release_choices="score_arms"),
        Param("score_min", "number", "Lowest machine score kept (needs score_arm).", bounds=(0.0, 1.0)),
        Param("score_max", "number", "Highest machine score kept (needs score_arm).", bounds=(0.0, 1.0)),
        Param("q", "text", "Words that must all occur in the title or keywords (full-text, at most "
              f"{fts.MAX_TOKENS} words).", max_length=MAX_QUERY),
        Param("sort", "choice", "relevance (with q only; the default then), year (newest first; the default "
              "otherwise) or cited_by (most first).", choices=SORTS),
        Param("after", "cursor", "The cursor of the previous page (its next field); sort must be the same."),
        Param("limit", "integer", "Works per page.", bounds=(1, MAX_LIMIT), default=str(DEFAULT_LIMIT)),
    )
}  # fmt: skip
LISTING = ("sort", "after", "limit")
FILTERS = tuple(name for name in PARAMS if name not in LISTING)


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
            raise CohortError(
                N_(
                    "unknown parameter %(name)r: the parameters are %(allowed)s.",
                    name=name[:40],
                    allowed=", ".join(allowed),
                )
            )
        if name in out:
            raise CohortError(N_("the parameter %(name)r is given twice; give each parameter at most once.", name=name))
        value = value.strip()
        if value:
            out[name] = value
    return out


def parse_request(items: Iterable[tuple[str, str]], release: ReleaseInfo) -> tuple[Cohort, Listing]:
    """The cohort and listing of a request's parameters (module docstring)."""
    values = single_values(items, FILTERS + LISTING)
    cohort = parse_filters({k: v for k, v in values.items() if k in FILTERS}, release)
    return cohort, parse_listing(values, cohort)


def _given(values: dict[str, str], name: str, release: ReleaseInfo) -> Any:
    return PARAMS[name].check(values[name], release)


def parse_filters(values: dict[str, str], release: ReleaseInfo) -> Cohort:
    """A :class:`Cohort` from ``{name: non-empty value}`` (names must be in ``FILTERS``)."""
    f: dict[str, Any] = {}
    for name in ("year_min", "year_max", *TEXT_FILTERS):
        if name in values:
            f[name] = _given(values, name, release)
    if "year_min" in f and "year_max" in f and f["year_min"] > f["year_max"]:
        raise CohortError(
            N_("year_min %(lo)s is after year_max %(hi)s: no work can match.", lo=f["year_min"], hi=f["year_max"])
        )
    for name in BOOLEAN_FILTERS:
        if name in values:
            v = _given(values, name, release)
            if v != "any":
                f[name] = v
    _label_filters(values, release, f)
    _classifier_filters(values, release, f)
    _score_filters(values, release, f)
    if "q" in values:
        words = fts.tokens(_given(values, "q", release))
        if not words:
            raise CohortError(N_("the text query q holds no word to search for (letters or digits)."))
        if len(words) > fts.MAX_TOKENS:
            raise CohortError(
                N_(
                    "the text query q holds %(n)s words; at most %(most)s are searched.",
                    n=len(words),
                    most=fts.MAX_TOKENS,
                )
            )
        f["q"] = " ".join(words)
    return Cohort(f, release)


def _label_filters(values: dict[str, str], release: ReleaseInfo, f: dict[str, Any]) -> None:
    for name in LABEL_VALUES:
        if name in values:
            f[name] = _given(values, name, release)
    has_value = any(n in f for n in LABEL_VALUES)
    if "label_teacher" in values:
        if not release.teachers:
            raise CohortError(N_("label_teacher: this release holds no direct label of any teacher."))
        f["label_teacher"] = _given(values, "label_teacher", release)
    agreement = PARAMS["label_agreement"].check(values.get("label_agreement", "any"), release)
    if ("label_teacher" in f or agreement == "all") and not has_value:
        raise CohortError(
            N_(
                "label_teacher and label_agreement qualify a direct-label filter: give label_category, label_domain, "
                "label_study_design or label_genre as well."
            )
        )
    if agreement == "all":
        if "label_teacher" in f:
            raise CohortError(
                N_("label_agreement=all asks every teacher, label_teacher names one: give one or the other.")
            )
        f["label_agreement"] = "all"


def _classifier_filters(values: dict[str, str], release: ReleaseInfo, f: dict[str, Any]) -> None:
    if "classifier_category" not in values:
        for name in ("classifier_mode", "classifier_version"):
            if name in values:
                raise CohortError(
                    N_("%(name)s qualifies a classifier decision: give classifier_category as well.", name=name)
                )
        return
    f["classifier_category"] = _given(values, "classifier_category", release)
    if "classifier_mode" not in values:
        raise CohortError(
            N_("classifier_category needs classifier_mode (candidate or consensus): the two are different claims.")
        )
    f["classifier_mode"] = _given(values, "classifier_mode", release)
    versions = release.classifier_versions
    if not versions:
        raise CohortError(N_("this release holds no classifier prediction, so no classifier decision can be filtered."))
    if "classifier_version" in values:
        f["classifier_version"] = _given(values, "classifier_version", release)
    elif len(versions) > 1:
        raise CohortError(
            N_("this release holds %(n)s classifier versions: name one in classifier_version.", n=len(versions))
        )
    else:
        f["classifier_version"] = versions[0]
    if f["classifier_mode"] == "consensus" and f["classifier_category"] in release.ungated.get(
        f["classifier_version"], ()
    ):
        raise CohortError(
            N_(
                "no work can have a consensus on %(category)s: no head for it passed its support gate in "
                "%(version)s, so it decides nothing (SPEC section 6); use candidate mode.",
                category=f["classifier_category"],
                version=f["classifier_version"],
            )
        )


def _score_filters(values: dict[str, str], release: ReleaseInfo, f: dict[str, Any]) -> None:
    bounds = [n for n in ("score_min", "score_max") if n in values]
    if "score_arm" not in values:
        if bounds:
            raise CohortError(N_("%(name)s needs score_arm: name the machine-score arm it bounds.", name=bounds[0]))
        return
    if not bounds:
        raise CohortError(N_("score_arm needs score_min or score_max: a range to keep."))
    if not release.score_arms:
        raise CohortError(N_("this release holds no machine score, so no score range can be filtered."))
    f["score_arm"] = _given(values, "score_arm", release)
    for name in bounds:
        f[name] = _given(values, name, release)
    if f.get("score_min", 0.0) > f.get("score_max", 1.0):
        raise CohortError(
            N_(
                "score_min %(lo)s is above score_max %(hi)s: no work can match.",
                lo=f["score_min"],
                hi=f["score_max"],
            )
        )


def parse_listing(values: dict[str, str], cohort: Cohort) -> Listing:
    sort = PARAMS["sort"].check(values.get("sort", "relevance" if "q" in cohort.filters else "year"), cohort.release)
    if sort == "relevance" and "q" not in cohort.filters:
        raise CohortError(N_("sort=relevance ranks matches of a text query: give q, or sort by year or cited_by."))
    limit = _given(values, "limit", cohort.release) if "limit" in values else DEFAULT_LIMIT
    after = decode_cursor(values["after"], sort) if "after" in values else None
    return Listing(sort, after, limit)


def encode_cursor(sort: str, value: Any, work_key: int) -> str:
    """The opaque ``after`` token of a page's last row (URL-safe base64 of JSON)."""
    return base64.urlsafe_b64encode(json.dumps([sort, value, work_key]).encode()).decode().rstrip("=")


def decode_cursor(token: str, sort: str) -> tuple[Any, int]:
    """``(sort value, work_key)`` of an ``after`` token; :class:`CohortError` when it is not one of ``sort``."""
    bad = CohortError(N_("the after cursor is not one this site gave for this sort; start again from the first page."))
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
        raise CohortError(
            N_("%(name)s %(value)r is not one of %(allowed)s.", name=name, value=value[:60], allowed=", ".join(allowed))
        )
    return value


def _int(name: str, value: str, lo: int, hi: int) -> int:
    if not (value.isascii() and value.lstrip("-").isdigit()) or len(value) > 6:
        raise CohortError(N_("%(name)s %(value)r is not a whole number.", name=name, value=value[:40]))
    n = int(value)
    if not lo <= n <= hi:
        raise CohortError(N_("%(name)s %(n)s is outside %(lo)s-%(hi)s.", name=name, n=n, lo=lo, hi=hi))
    return n


def _float(name: str, value: str, lo: float, hi: float) -> float:
    try:
        x = float(value) if value.isascii() and len(value) <= 20 else math.nan
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or not lo <= x <= hi:
        raise CohortError(
            N_("%(name)s %(value)r is not a number in [%(lo)s, %(hi)s].", name=name, value=value[:40], lo=lo, hi=hi)
        )
    return x


def _text(name: str, value: str, max_len: int) -> str:
    if len(value) > max_len:
        raise CohortError(
            N_(
                "%(name)s is %(n)s characters long; at most %(most)s are accepted.",
                name=name,
                n=len(value),
                most=max_len,
            )
        )
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        raise CohortError(N_("%(name)s holds a control character.", name=name))
    return value
