"""Every interface string of the served site, in one place (English). A French catalogue (gettext through
Babel, issue 15) replaces this mapping later; templates read strings only through ``t`` (this mapping) and the
sentence functions below, never spelt inline. Data values (titles, names, statuses) are never translated."""

from __future__ import annotations

from ..vocab import CATEGORY_DISPLAY

STRINGS: dict[str, str] = {
    "site_title": "metacan evidence browser",
    "home_heading": "Build a cohort of Canadian research",
    "release": "Release",
    "classifier_version": "Classifier version",
    "filters": "Filters",
    "apply": "Count and list",
    "reset": "Clear all filters",
    "year_min": "Year from",
    "year_max": "Year to",
    "language": "Language",
    "type": "Type",
    "field": "Field",
    "topic": "Topic",
    "venue": "Venue",
    "institution": "Canadian institution",
    "funder": "Funder",
    "keyword": "Keyword",
    "q": "Words in title or keywords",
    "ca_aff": "Canadian affiliation",
    "ca_fund": "Canadian funder",
    "ca_venue": "Canadian venue",
    "about_ca": "About Canada",
    "invisible_to_affiliation_only": "Invisible to affiliation-only search",
    "has_abstract": "Has an abstract",
    "retracted": "Retracted",
    "yes": "yes",
    "no": "no",
    "any": "any",
    "label_heading": "Direct labels (teachers)",
    "label_category": "Category",
    "label_domain": "Domain",
    "label_study_design": "Study design",
    "label_genre": "Genre",
    "label_teacher": "Teacher",
    "label_agreement": "Agreement",
    "agreement_any": "any teacher",
    "agreement_all": "all teachers",
    "classifier_heading": "Classifier decisions (machine predictions)",
    "classifier_category": "Category",
    "classifier_mode": "Mode",
    "candidate": "candidate",
    "consensus": "consensus",
    "score_heading": "Machine scores",
    "score_arm": "Arm",
    "score_min": "Score from",
    "score_max": "Score to",
    "sort": "Sort by",
    "sort_default": "relevance when searching, else year",
    "sort_relevance": "relevance",
    "sort_year": "year (newest first)",
    "sort_cited_by": "cited by (most first)",
    "results": "Works",
    "count_heading": "Exact count",
    "facets": "Counts under the other filters",
    "no_results": "No work matches these filters.",
    "next_page": "Next page",
    "first_page": "First page",
    "cite_heading": "Cite this cohort",
    "query_link": "Link to this cohort",
    "export": "Download",
    "export_csv": "CSV",
    "export_jsonl": "JSON Lines",
    "not_recorded": "not recorded",
    "direct_label": "direct label",
    "not_meta": "not meta-research",
    "failed_label": "label failed",
    "prediction": "prediction",
    "no_category": "no category called",
    "not_classified": "not classified yet",
    "machine_scores": "machine scores",
    "error_heading": "This request cannot be answered",
    "error_back": "Back to the cohort builder",
    "not_found": "Not found",
    "saved_heading": "Saved cohort",
    "saved_other_release": "This link was made on release {made_on}; the site now serves {serving}. "
    "The filters are shown below; the count is of the release the link names only when that release is served.",
    "run_on_current": "Run these filters on the current release",
    "facet_source_label": "direct label ({teacher}, {qualification})",
    "facet_source_prediction": "{mode} prediction ({version}, {status})",
}


def coverage_sentence(cov: dict[str, int], classifier_version: str) -> str:
    """The sentence that travels with every result (issue 15): what the labels and decisions cover."""
    return (
        f"Direct labels cover {cov['direct']:,} of {cov['works']:,} works; the classifier ({classifier_version}) "
        f"scored {cov['scored']:,} and its decisions cover {cov['decided']:,}; absence of a label or a decision is "
        f"not a negative."
    )


def citation_sentence(count: int, query_hash: str, release_id: str, classifier_version: str, url: str) -> str:
    """How to cite a cohort: the count, the query hash, the release and the classifier version."""
    return (
        f"metacan cohort {query_hash} ({count:,} works), release {release_id}, classifier version "
        f"{classifier_version}: {url}"
    )


def category_name(category: str) -> str:
    return CATEGORY_DISPLAY.get(category, category)
