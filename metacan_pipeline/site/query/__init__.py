"""Cohort queries over a release database: parameters, the cohort, its SQL clauses, counts, pages and exports
(:mod:`.cohort_query`), facets (:mod:`.facets`) and the counts a build stores (:mod:`.stored_counts`)."""
