"""The query parameters of a cohort request, each declared once: what a value may be and what it means.

:data:`PARAMS` holds one :class:`Param` per parameter (kind, bounds or vocabulary, default, one line of
documentation); :mod:`.cohort` checks every given value through it and :mod:`..web.openapi` describes every parameter
from it, so the parser and the OpenAPI document cannot disagree. :func:`single_values` is the strict first step
of every request (an unknown or repeated name is refused). Refusals are :class:`CohortError` built from
:func:`~metacan_pipeline.i18n.N_` sentences: English in ``str()``, translatable for the HTML pages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...i18n import N_, Sentence, fold
from ...release.release_layers import RELEASE_LAYERS
from ...vocab import CASCADE_DECISIONS, CATEGORIES, DOMAINS, GENRES, RETRACTION_STATES, STUDY_DESIGNS
from ..build import fts
from ..build.facet_columns import BOOLEAN_COLUMNS
from ..build.release import ReleaseInfo

TRISTATE = ("yes", "no", "any")
#: The yes/no/any filters, one per boolean column of ``works`` (:data:`..build.facet_columns.BOOLEAN_COLUMNS`).
BOOLEAN_FILTERS = tuple(BOOLEAN_COLUMNS)
TEXT_FILTERS = ("language", "type", "field", "topic", "venue", "institution", "funder", "keyword")
#: The exclusion of each text filter: ``not_venue=Nature`` keeps the works whose venue is not Nature (nor any other
#: value of the list), works without a venue included.
EXCLUSION_PREFIX = "not_"
EXCLUSION_FILTERS = tuple(EXCLUSION_PREFIX + n for n in TEXT_FILTERS)
#: Separates the values of one text filter that match any (OR): ``venue=Nature|Science``.
OR_SEPARATOR = "|"
MAX_VALUES = 20
#: A text filter's value as JSON Schema says it (:func:`text_values`): no separator, or a character besides the
#: separators and spaces (``|`` alone holds no value).
TEXT_FILTER_PATTERN = r"^[^|]*$|[^\s|]"
#: The filters by OpenAlex id (:func:`id_values`): ``author=A1|A2`` keeps the works listing any of these authors,
#: ``institution_id=I1`` those with an authorship at this institution; the letter of each id kind.
ID_FILTERS = {"author": "A", "institution_id": "I"}
#: One id of each id filter, as the parser takes it (the letter in either case, ASCII digits), and the value as
#: JSON Schema says it: empty (unset) or ids separated by ``|``, nothing else (spaces around the whole value are
#: dropped, as of every value: :func:`single_values`).
ID_PATTERNS = {name: f"[{letter}{letter.lower()}][0-9]{{1,19}}" for name, letter in ID_FILTERS.items()}
ID_FILTER_PATTERNS = {name: rf"^\s*$|^\s*{one}(\|{one})*\s*$" for name, one in ID_PATTERNS.items()}
LABEL_VALUES = {
    "label_category": CATEGORIES,
    "label_domain": DOMAINS,
    "label_study_design": STUDY_DESIGNS,
    "label_genre": GENRES,
}
CLASSIFIER_MODES = ("candidate", "consensus")
AGREEMENTS = ("any", "all")
SORTS = ("relevance", "year", "cited_by")
#: The yes/no/any filters of coverage: what the record ships, not a column of ``works``.
COVERAGE_FILTERS = ("labelled", "classified")
#: The most citations ``cited_by_min`` takes (six digits, as every integer parameter).
MAX_CITATIONS = 999_999
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
    :meth:`schema` what the OpenAPI document says of it (:mod:`..web.openapi`), so the two cannot disagree.
    """

    name: str
    kind: str
    doc: str
    choices: tuple[str, ...] | None = None
    release_choices: str | None = None
    bounds: tuple[float, float] | None = None
    max_length: int | None = None
    default: str | None = None
    #: the OpenAPI document marks the parameter required (the route refuses a request without it)
    required: bool = False
    #: a regular expression the value matches (JSON Schema ``pattern``), as the parser's own rules for the kind have it
    pattern: str | None = None

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
        if allowed is not None:  # an empty value is an unset parameter, so an optional choice also takes ""
            out["enum"] = list(allowed) if self.required else [*allowed, ""]
        if self.bounds is not None:
            out["minimum"], out["maximum"] = self.bounds
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        if self.pattern is not None:
            out["pattern"] = self.pattern
        if self.default is not None:
            out["default"] = int(self.default) if self.kind == "integer" else self.default
        return out


_TEXT_DOCS = {
    "language": "Language code as OpenAlex gives it (e.g. en, fr)",
    "type": "Work type as OpenAlex gives it (e.g. article, review)",
    "field": "OpenAlex field of the primary topic",
    "topic": "OpenAlex primary topic",
    "venue": "Venue name",
    "institution": "A Canadian institution among the work's affiliations",
    "funder": "A funder of the work",
    "keyword": "A keyword of the work",
}
_MATCHING = (
    f"whole value, case and accents ignored (montreal finds Montréal); several values separated by "
    f"{OR_SEPARATOR} match any of them (at most {MAX_VALUES})."
)
_BOOLEAN_DOCS = {
    "ca_aff": "Admitted through a Canadian affiliation (SPEC section 2).",
    "ca_fund": "Admitted through a Canadian funder.",
    "ca_venue": "Admitted through a Canadian venue.",
    "about_ca": "Admitted as being about Canada (lexicon).",
    "invisible_to_affiliation_only": "Canadian, but invisible to an affiliation-only search.",
    "has_abstract": "OpenAlex has an abstract for the work.",
    "retracted": "OpenAlex marks the work as retracted.",
    "openalex_missed": "Retraction Watch lists a retraction that OpenAlex does not mark (is_retracted false).",
}

PARAMS: dict[str, Param] = {
    p.name: p
    for p in (
        Param("year_min", "integer", "Earliest publication year.", bounds=YEAR_RANGE),
        Param("year_max", "integer", "Latest publication year (not before year_min).", bounds=YEAR_RANGE),
        *(
            Param(n, "text", f"{_TEXT_DOCS[n]}: {_MATCHING}", max_length=MAX_TEXT, pattern=TEXT_FILTER_PATTERN)
            for n in TEXT_FILTERS
        ),
        *(
            Param(EXCLUSION_PREFIX + n, "text", f"Leave out the works with this {n} (works without one are kept): "
                  f"{_MATCHING}", max_length=MAX_TEXT, pattern=TEXT_FILTER_PATTERN)
            for n in TEXT_FILTERS
        ),
        Param("author", "text", f"OpenAlex author ids (A followed by digits): the works listing any of them, "
              f"separated by {OR_SEPARATOR}.", max_length=MAX_TEXT, pattern=ID_FILTER_PATTERNS["author"]),
        Param("institution_id", "text", f"OpenAlex institution ids (I followed by digits): the works with an "
              f"authorship at any of them, separated by {OR_SEPARATOR}.", max_length=MAX_TEXT,
              pattern=ID_FILTER_PATTERNS["institution_id"]),
        *(Param(n, "choice", _BOOLEAN_DOCS[n], choices=TRISTATE, default="any") for n in BOOLEAN_FILTERS),
        Param("labelled", "choice", "yes: at least one teacher's direct label (status labelled) is in the record; "
              "no: none is (not labelled yet, which is not a negative).", choices=TRISTATE, default="any"),
        Param("classified", "choice", "yes: the record ships at least one category (a category of a labelled direct "
              "label, or a candidate or consensus decision of the classifier); no: it ships none (not classified "
              "yet, or every label found no category).", choices=TRISTATE, default="any"),
        Param("cited_by_min", "integer", "Fewest citations (OpenAlex cited_by_count) a work has.",
              bounds=(0, MAX_CITATIONS)),
        Param("release_layer", "choice", "The original protocol's release layer: human_verified (an adjudicated human "
              "code), high_precision (every positive classifier decision on a head that passed human validation), "
              "provisional (machine output no audit validated, or nothing yet) or contested (the qualified or imported "
              "teachers, or the classifier's two sides, split; an unqualified teacher splits nothing).",
              choices=RELEASE_LAYERS),
        Param("retraction_state", "choice", "The work's state in Retraction Watch (retraction, expression of concern, "
              "correction, reinstatement); none: checked, no notice; not_checked: the release read no Retraction "
              "Watch file (not a statement that the work is not retracted).", choices=RETRACTION_STATES),
        Param("cascade_decision", "choice", "The cascade's decision on the metaresearch head: positive or negative "
              "(the student's certified decision, a machine decision never validated by a human), teacher (sent to "
              "the teacher), unsettled (beyond the call budget), withheld (a rolling-layer work whose head is not "
              "validated), not_planned (no cascade decision).", choices=CASCADE_DECISIONS),
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
        Param(
            "score_arm",
            "choice",
            "Works with a machine score from this arm (within score_min / score_max when given).",
            release_choices="score_arms",
        ),
        Param("score_min", "number", "Lowest machine score kept (needs score_arm).", bounds=(0.0, 1.0)),
        Param("score_max", "number", "Highest machine score kept (needs score_arm).", bounds=(0.0, 1.0)),
        Param("q", "text", "Words that must all occur in the title or keywords (full-text, case and accents ignored, "
              f"at most {fts.MAX_TOKENS} words); \"a phrase\" in double quotes must occur as written, and OR (or "
              f"{OR_SEPARATOR}) between two words or phrases asks for either.", max_length=MAX_QUERY),
        Param("sort", "choice", "relevance (with q only; the default then), year (newest first; the default "
              "otherwise) or cited_by (most first).", choices=SORTS),
        Param("after", "cursor", "The cursor of the previous page (its next field); sort must be the same."),
        Param("limit", "integer", "Works per page.", bounds=(1, MAX_LIMIT), default=str(DEFAULT_LIMIT)),
    )
}  # fmt: skip
LISTING = ("sort", "after", "limit")
FILTERS = tuple(name for name in PARAMS if name not in LISTING)


def id_values(name: str, value: str) -> str:
    """An id filter's value (:data:`ID_FILTERS`) in canonical form: its ids upper-cased, each once, sorted (as a text
    filter's values are: one set of ids is one query hash), joined by ``|``; :class:`CohortError` naming the filter
    for a value that is not ids of its kind
    (:data:`ID_PATTERNS`: no space, ASCII digits)."""
    letter = ID_FILTERS[name]
    ids: list[str] = []
    for part in value.split(OR_SEPARATOR):
        if re.fullmatch(ID_PATTERNS[name], part, flags=re.ASCII) is None:
            raise CohortError(
                N_(
                    "%(name)s: %(value)r is not an OpenAlex id (%(letter)s followed by digits, e.g. %(letter)s123).",
                    name=name,
                    value=part[:40],
                    letter=letter,
                )
            )
        if part.upper() not in ids:
            ids.append(part.upper())
    return OR_SEPARATOR.join(sorted(ids))


def single_values(items: Iterable[tuple[str, str]], allowed: Iterable[str]) -> dict[str, str]:
    """``{name: value}`` of the non-empty parameters; :class:`CohortError` for an unknown or repeated name."""
    allowed = tuple(allowed)
    out: dict[str, str] = {}
    for name, value in items:
        if name not in allowed and not allowed:
            raise CohortError(N_("unknown parameter %(name)r: this address takes no parameters.", name=name[:40]))
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


def _choice(name: str, value: str, allowed: Iterable[str]) -> str:
    allowed = tuple(allowed)
    if value not in allowed:
        raise CohortError(
            N_("%(name)s %(value)r is not one of %(allowed)s.", name=name, value=value[:60], allowed=", ".join(allowed))
        )
    return value


def _int(name: str, value: str, lo: int, hi: int) -> int:
    if not (value.isascii() and value.removeprefix("-").isdigit()) or len(value) > 6:
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


def text_values(name: str, value: str) -> str:
    """The canonical text of a text filter's value: its values (split on :data:`OR_SEPARATOR`) folded (:func:`fold`),
    without repeats, sorted, joined by the separator, so that two spellings of one filter are one query hash;
    :class:`CohortError` when it holds no value or more than :data:`MAX_VALUES`."""
    values = sorted({fold(v.strip()) for v in value.split(OR_SEPARATOR)} - {""})
    if not values:
        raise CohortError(N_("%(name)s holds no value between its %(sep)s separators.", name=name, sep=OR_SEPARATOR))
    if len(values) > MAX_VALUES:
        raise CohortError(
            N_(
                "%(name)s holds %(n)s values; at most %(most)s are accepted.",
                name=name,
                n=len(values),
                most=MAX_VALUES,
            )
        )
    return OR_SEPARATOR.join(values)
