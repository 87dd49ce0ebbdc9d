"""The interface strings the site's Python holds, as English msgids marked with :func:`~metacan_pipeline.i18n.N_`,
and the sentences built from counts, each said in the request's language (:mod:`metacan_pipeline.i18n`).

Templates write their own strings inline through ``_()``; what lives here is what code looks up by name: the label
of every form field and facet group (by parameter name, ``LABELS``), the words shown for parameter values
(``VALUE_WORDS``), the status phrases of error pages, and the coverage and citation sentences. Data values (titles,
names, vocabulary codes, statuses) are never translated: a vocabulary code is shown by its display name
(:func:`metacan_pipeline.vocab.display_name`, which the catalogue translates) and travels unchanged in links, form
values and the API.
"""

from __future__ import annotations

from ...i18n import DEFAULT_LOCALE, N_, format_number, translations
from ...vocab import DISPLAY_NAMES, display_name

#: The label of each form field and facet group, by parameter (or facet) name.
LABELS: dict[str, str] = {
    "year": N_("Year"),
    "year_min": N_("Year from"),
    "year_max": N_("Year to"),
    "language": N_("Language"),
    "type": N_("Type"),
    "field": N_("Field"),
    "topic": N_("Topic"),
    "venue": N_("Venue"),
    "institution": N_("Canadian institution"),
    "author": N_("Author (OpenAlex id)"),
    "institution_id": N_("Institution (OpenAlex id)"),
    "funder": N_("Funder"),
    "keyword": N_("Keyword"),
    "not_language": N_("Not in the language"),
    "not_type": N_("Not of the type"),
    "not_field": N_("Not in the field"),
    "not_topic": N_("Not on the topic"),
    "not_venue": N_("Not in the venue"),
    "not_institution": N_("Not from the institution"),
    "not_funder": N_("Not funded by"),
    "not_keyword": N_("Not with the keyword"),
    "q": N_("Words in title or keywords"),
    "ca_aff": N_("Canadian affiliation"),
    "ca_fund": N_("Canadian funder"),
    "ca_venue": N_("Canadian venue"),
    "about_ca": N_("About Canada"),
    "invisible_to_affiliation_only": N_("Invisible to affiliation-only search"),
    "has_abstract": N_("Has an abstract"),
    "retracted": N_("Retracted"),
    "labelled": N_("Labelled by a teacher"),
    "classified": N_("Ships a category"),
    "cited_by_min": N_("Cited at least"),
    "release_layer": N_("Release layer"),
    "retraction_state": N_("Retraction Watch"),
    "openalex_missed": N_("Retraction missed by OpenAlex"),
    "cascade_decision": N_("Cascade decision (meta-research)"),
    "label_category": N_("Category"),
    "label_domain": N_("Domain"),
    "label_study_design": N_("Study design"),
    "label_genre": N_("Genre"),
    "label_teacher": N_("Teacher"),
    "label_agreement": N_("Agreement"),
    "classifier_category": N_("Category"),
    "classifier_mode": N_("Mode"),
    "classifier_version": N_("Classifier version"),
    "score_arm": N_("Arm"),
    "score_min": N_("Score from"),
    "score_max": N_("Score to"),
    "sort": N_("Sort by"),
}

#: What the pages show for a parameter value (the value itself travels in links unchanged).
VALUE_WORDS: dict[str, str] = {
    "yes": N_("yes"),
    "no": N_("no"),
    "any": N_("any"),
    "candidate": N_("candidate"),
    "consensus": N_("consensus"),
    # the original protocol's release layers (metacan_pipeline.release.release_layers)
    "human_verified": N_("human-verified"),
    "high_precision": N_("high-precision"),
    "provisional": N_("provisional"),
    "contested": N_("contested"),
    # Retraction Watch states (retraction_state): not_checked is never "not retracted"
    "retraction": N_("retraction"),
    "expression_of_concern": N_("expression of concern"),
    "correction": N_("correction"),
    "reinstatement": N_("reinstatement"),
    "none": N_("no notice"),
    "not_checked": N_("not checked (no Retraction Watch file)"),
    # the date an OpenAlex API refresh window is taken over (/recent)
    "updated_date": N_("by updated date"),
    "publication_date": N_("by publication date"),
    # the cascade's decisions on the metaresearch head (cascade_decision): certified ones are machine decisions
    "positive": N_("certified positive (machine decision)"),
    "negative": N_("certified negative (machine decision)"),
    "teacher": N_("sent to the teacher"),
    "unsettled": N_("unsettled (beyond the call budget)"),
    "withheld": N_("withheld (rolling layer)"),
    "not_planned": N_("no cascade decision"),
}

#: The heading of an error page, by HTTP status (other statuses show the status phrase untranslated).
STATUS_PHRASES: dict[int, str] = {
    400: N_("This request cannot be answered"),
    404: N_("Not found"),
    405: N_("Method not allowed"),
}

#: Between a label and its value ("2024: 3"); French puts a no-break space before the colon.
COLON = N_(": ")
COVERAGE = N_(
    "Direct labels cover %(direct)s of %(works)s works; the classifier (%(version)s) gave a category score to "
    "%(scored)s (a work without one was not scored, or only by heads trained on a single class, which give no score) "
    "and its decisions cover %(decided)s; absence of a label or a decision is not a negative."
)
CITATION = N_("metacan cohort %(hash)s (%(count)s works), release %(release)s, classifier version %(version)s: %(url)s")


def label(name: str, locale: str = DEFAULT_LOCALE) -> str:
    """The label of a form field or facet group in ``locale`` (the name itself when it has none)."""
    return translations(locale).gettext(LABELS[name]) if name in LABELS else name


def value_word(value: str, locale: str = DEFAULT_LOCALE) -> str:
    return translations(locale).gettext(VALUE_WORDS[value]) if value in VALUE_WORDS else value


def coverage_sentence(cov: dict[str, int], classifier_version: str, locale: str = DEFAULT_LOCALE) -> str:
    """The sentence that travels with every result: what the labels, the scores and the decisions cover. ``scored``
    counts only works with at least one non-null category score (``works.scored``): a head whose training labels held
    one class ranks nothing and gives null, so a prediction from such heads alone is not a score."""
    n = {k: format_number(cov[k], locale) for k in ("direct", "works", "scored", "decided")}
    return translations(locale).gettext(COVERAGE) % {**n, "version": classifier_version}


def citation_sentence(
    count: int, query_hash: str, release_id: str, classifier_version: str, url: str, locale: str = DEFAULT_LOCALE
) -> str:
    """How to cite a cohort: the count, the query hash, the release and the classifier version."""
    values = {"hash": query_hash, "count": format_number(count, locale), "release": release_id}
    return translations(locale).gettext(CITATION) % {**values, "version": classifier_version, "url": url}


def category_name(category: str, locale: str = DEFAULT_LOCALE) -> str:
    """A category's SPEC section 3 display name in ``locale`` (an unknown code as it is)."""
    return display_name("category", category, locale)


def vocab_name(code: str | None, vocabulary: str, locale: str = DEFAULT_LOCALE) -> str | None:
    """``code``'s display name in ``vocabulary`` (a key of :data:`metacan_pipeline.vocab.DISPLAY_NAMES`), said in
    ``locale``: the templates' ``named`` filter (``{{ d.study_design | named("study_design") }}``)."""
    return display_name(vocabulary, code, locale)


def vocab_names(locale: str = DEFAULT_LOCALE) -> dict[str, dict[str, str]]:
    """Every vocabulary's ``{code: display name}`` in ``locale``, for the forms' choices."""
    return {v: {c: display_name(v, c, locale) for c in names} for v, names in DISPLAY_NAMES.items()}


#: What a head of the disagreement dossier compares, for the heads that are not a category: the vocabulary of a
#: categorical head, the display name of a flag, and the whole category list.
HEAD_NAMES: dict[str, str] = {
    "domain": LABELS["label_domain"],
    "study_design": LABELS["label_study_design"],
    "genre": LABELS["label_genre"],
    "category_set": N_("Set of categories"),
}


def head_name(head: str, locale: str = DEFAULT_LOCALE) -> str:
    """A head's name in ``locale``: a category's or flag's display name, a categorical target's field label."""
    if head in HEAD_NAMES:
        return translations(locale).gettext(HEAD_NAMES[head])
    for vocabulary in ("category", "about_ca"):
        if head in DISPLAY_NAMES[vocabulary]:
            return display_name(vocabulary, head, locale)
    return head
