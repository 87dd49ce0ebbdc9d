"""The facets of ``work_facets`` (``sql/facets.sql``): which column or code list holds each, shared by the tables the
build counts (:mod:`.cube`) and the facet counts of a cohort (:mod:`..query.facets`)."""

from __future__ import annotations

from ...tables.site import CODED_FACETS

#: ``works`` / ``work_facets`` column of each boolean filter, by filter name (the filters' order on the page).
BOOLEAN_COLUMNS = {
    "ca_aff": "ca_aff",
    "ca_fund": "ca_fund",
    "ca_venue": "ca_venue",
    "about_ca": "about_ca",
    "invisible_to_affiliation_only": "invisible_to_affiliation_only",
    "has_abstract": "has_abstract",
    "retracted": "is_retracted",
    "openalex_missed": "openalex_missed",
}
#: The one-to-many table of a name filter.
NAME_TABLES = {"institution": "work_institutions", "funder": "work_funders", "keyword": "work_keywords"}
COLUMN_FACETS = ("year", *CODED_FACETS)
#: The facets counted from ``work_facets``' code lists.
LIST_FACETS = ("institution", "funder", "keyword", "classifier")
#: Values listed per column or name facet (``year`` lists every year).
TOP_N = 20
