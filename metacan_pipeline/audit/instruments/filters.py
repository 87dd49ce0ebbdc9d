"""The filters whose recall instrument ii measures: every filter that could cut the frame or a cohort. Each is a
DuckDB boolean over a ``frame`` row (alias ``f``) that says whether the filter keeps the work.

- ``route:<route>`` (SPEC section 2): the work has the route (``ca_aff``, ``ca_fund``, ``ca_venue``, ``about_ca``).
- ``lexicon:tier_<t>``: the about_ca lexicon (:mod:`metacan_pipeline.openalex.lexicon`) found a term of tier ``t`` that
  counts as evidence (``about_ca_evidence``: tier A and B alone, tier C only beside a tier-A term).
- ``topic:openalex_primary_topic``: the work's primary OpenAlex topic is one of a configured list of topic names, the
  filter a user might try instead of screening (the original pilot's finding 12 scored the best topic route at 12%).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...vocab import ROUTES

#: The topic filter's default topics: OpenAlex topics (names as ``primary_topic.display_name`` gives them, ids for
#: reference) that name the field's neighbourhood: T10102, T13607, T10206.
DEFAULT_TOPICS: tuple[str, ...] = (
    "scientometrics and bibliometrics research",
    "Academic Publishing and Open Access",
    "Meta-analysis and systematic reviews",
)
LEXICON_TIERS: tuple[str, ...] = ("A", "B", "C")
TOPIC_FILTER = "topic:openalex_primary_topic"


@dataclass(frozen=True)
class Filter:
    """One filter: its name, kind (``route`` | ``lexicon_tier`` | ``topic``), a sentence saying what it keeps, and
    its DuckDB predicate over the frame row ``f``."""

    name: str
    kind: str
    definition: str
    predicate: str


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def recall_filters(topics: list[str] | tuple[str, ...] = DEFAULT_TOPICS) -> list[Filter]:
    """Every filter, in report order: the four routes, the three lexicon tiers, the topic filter over ``topics``.
    Raises ValueError for an empty or blank topic list (a filter that keeps nothing measures nothing)."""
    names = [t.strip() for t in topics]
    if not names or any(not t for t in names):
        raise ValueError(
            f"filter recall: topic_filter must name at least one OpenAlex topic (its display name), got {list(topics)!r}"
        )
    filters = [Filter(f"route:{r}", "route", f"the work has the {r} route", f"coalesce(f.{r}, false)") for r in ROUTES]
    filters += [
        Filter(
            f"lexicon:tier_{t.lower()}",
            "lexicon_tier",
            f"the about_ca lexicon found a tier-{t} term that counts as evidence"
            + (" (tier C counts only beside a tier-A term)" if t == "C" else ""),
            f"len(list_filter(coalesce(f.about_ca_evidence, []::VARCHAR[]), e -> starts_with(e, 'tier {t} '))) > 0",
        )
        for t in LEXICON_TIERS
    ]
    filters.append(
        Filter(
            TOPIC_FILTER,
            "topic",
            "the work's primary OpenAlex topic is one of: " + "; ".join(names),
            f"coalesce(f.topic IN ({', '.join(_quoted(t) for t in names)}), false)",
        )
    )
    return filters
