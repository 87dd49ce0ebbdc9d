"""The served evidence browser (issue 15): release databases, cohort queries, the ASGI app."""
