"""A cohort: strictly parsed, validated filters over one release, and its canonical query hash.

:func:`parse_request` takes the query parameters of a request (name -> list of values, as Starlette's
``QueryParams.multi_items`` gives them) and returns a :class:`Cohort` (the filters) and a :class:`Listing`
(sort, cursor, page size), or raises :class:`CohortError` whose message is one sentence saying what is wrong
(the site answers HTTP 400 with it). An empty value is an unset field (a form without JavaScript sends every
field); an unknown name, a repeated name, a value outside its vocabulary or contradictory filters are errors.

The parameters (``FILTERS``): ``year_min``/``year_max``; ``language``, ``type``, ``field``, ``topic``, ``venue``,
``institution`` (a Canadian institution), ``funder``, ``keyword`` (whole values, case and accents ignored;
``a|b`` matches either), and the exclusion of each, ``not_language`` ... ``not_keyword`` (the same values, left
out; works without the field are kept); ``ca_aff``, ``ca_fund``, ``ca_venue``, ``about_ca``,
``invisible_to_affiliation_only``, ``has_abstract``, ``retracted``, ``openalex_missed``
(``yes``/``no``/``any``); coverage: ``labelled`` (a teacher's direct label is in the record) and ``classified`` (the
record ships a category) (``yes``/``no``/``any``), ``cited_by_min`` (fewest citations); ``retraction_state`` (a Retraction Watch state, ``none`` or ``not_checked``);
``cascade_decision`` (the cascade's decision on the metaresearch head, ``not_planned`` without one);
``release_layer`` (``human_verified``, ``high_precision``, ``provisional``,
``contested``); direct labels: ``label_category``, ``label_domain``, ``label_study_design``,
``label_genre`` (one labelled direct label must carry all that are given), ``label_teacher`` (that teacher's
label) or ``label_agreement=all`` (every teacher of the release labelled the work so; default ``any``: at
least one); classifier decisions: ``classifier_category`` with ``classifier_mode`` (``candidate`` or
``consensus``) and optionally ``classifier_version``; machine scores: ``score_arm`` with ``score_min`` and/or
``score_max`` (in [0, 1]); ``q``: words that must all occur in the title or keywords (``"a phrase"`` as written,
``a OR b`` either; :func:`..build.fts.parse_query`). Listing (``LISTING``):
``sort`` (``relevance`` with ``q`` only, ``year``, ``cited_by``), ``after`` (the cursor of the previous page),
``limit`` (1-100, default 20). Each parameter is declared once in :data:`.params.PARAMS` (kind, bounds or
vocabulary, one line of documentation): the parser checks every value through it, and the OpenAPI document
(:mod:`..web.openapi`) describes every parameter from it. Refusals are :func:`~metacan_pipeline.i18n.N_` sentences, so
the HTML pages can say them in French; the API says them in English.

The query hash (:meth:`Cohort.query_hash`) is the first 12 hex of SHA-256 over the canonical filters (set
fields only, in name order, normalised: a text filter's values folded and sorted, :func:`.params.text_values`;
the text query's words lower-cased, :func:`..build.fts.query_text`), the release id and the classifier version:
sort and page are not in it.
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

from ...i18n import N_
from ..build import fts
from ..build.release import ReleaseInfo
from .params import (
    BOOLEAN_FILTERS,
    COVERAGE_FILTERS,
    DEFAULT_LIMIT,
    EXCLUSION_FILTERS,
    FILTERS,
    ID_FILTERS,
    LABEL_VALUES,
    LISTING,
    PARAMS,
    TEXT_FILTERS,
    CohortError,
    id_values,
    single_values,
    text_values,
)


@dataclass(frozen=True)
class Cohort:
    """Validated filters (only the set ones, normalised) over ``release``."""

    filters: dict[str, Any]
    release: ReleaseInfo

    @property
    def words(self) -> fts.TextQuery:
        """The text query's groups of phrases (:func:`..build.fts.parse_query`); empty without ``q``."""
        return fts.parse_query(self.filters.get("q", ""))

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
    for name in ("year_min", "year_max"):
        if name in values:
            f[name] = _given(values, name, release)
    for name in (*TEXT_FILTERS, *EXCLUSION_FILTERS):
        if name in values:
            f[name] = text_values(name, _given(values, name, release))
    f.update({name: id_values(name, _given(values, name, release)) for name in ID_FILTERS if name in values})
    if "year_min" in f and "year_max" in f and f["year_min"] > f["year_max"]:
        raise CohortError(
            N_("year_min %(lo)s is after year_max %(hi)s: no work can match.", lo=f["year_min"], hi=f["year_max"])
        )
    for name in BOOLEAN_FILTERS:
        if name in values:
            v = _given(values, name, release)
            if v != "any":
                f[name] = v
    _coverage_filters(values, release, f)
    if "release_layer" in values:
        f["release_layer"] = _given(values, "release_layer", release)
    if "retraction_state" in values:
        f["retraction_state"] = _given(values, "retraction_state", release)
    if "cascade_decision" in values:
        f["cascade_decision"] = _given(values, "cascade_decision", release)
    _label_filters(values, release, f)
    _classifier_filters(values, release, f)
    _score_filters(values, release, f)
    if "q" in values:
        query = fts.parse_query(_given(values, "q", release))
        n = sum(len(phrase) for group in query for phrase in group)
        if not n:
            raise CohortError(N_("the text query q holds no word to search for (letters or digits)."))
        if n > fts.MAX_TOKENS:
            raise CohortError(
                N_(
                    "the text query q holds %(n)s words; at most %(most)s are searched.",
                    n=n,
                    most=fts.MAX_TOKENS,
                )
            )
        f["q"] = fts.query_text(query)
    return Cohort(f, release)


def _coverage_filters(values: dict[str, str], release: ReleaseInfo, f: dict[str, Any]) -> None:
    """``labelled`` and ``classified`` (``any`` is no filter) and ``cited_by_min`` (0 keeps every work: no filter)."""
    for name in COVERAGE_FILTERS:
        if name in values and (v := _given(values, name, release)) != "any":
            f[name] = v
    if "cited_by_min" in values and (n := _given(values, "cited_by_min", release)) > 0:
        f["cited_by_min"] = n


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


def _int64(value: Any) -> bool:
    """True for an int that SQLite and DuckDB hold as a 64-bit integer (a work key, a year, a count)."""
    return type(value) is int and -(2**63) <= value < 2**63


def decode_cursor(token: str, sort: str) -> tuple[Any, int]:
    """``(sort value, work_key)`` of an ``after`` token; :class:`CohortError` when it is not one of ``sort``."""
    bad = CohortError(N_("the after cursor is not one this site gave for this sort; start again from the first page."))
    if len(token) > 200:
        raise bad
    try:
        body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if not (isinstance(body, list) and len(body) == 3 and body[0] == sort and _int64(body[2])):
        raise bad
    value = body[1]
    if sort == "relevance":  # a BM25 score: a float to SQLite, whatever size of number the token held
        try:
            ok = isinstance(value, float | int) and not isinstance(value, bool) and math.isfinite(float(value))
        except OverflowError:
            ok = False
        value = float(value) if ok else value
    else:
        ok = _int64(value)
    if not ok:
        raise bad
    return value, body[2]
