"""A census rate's interval: how a zero-width interval is recognised and the sentence shown beside it. Imports
nothing of the project, so the summary and the served site read it without loading the teacher registry."""

from __future__ import annotations

#: The ``design`` of a census teacher's frame rate (a teacher covering every frame work: weight 1, one stratum).
CENSUS_DESIGN = "census of the frame"
#: Shown wherever a census rate's interval of zero width is shown, so it does not read as certainty.
CENSUS_NO_SAMPLING_ERROR = (
    "A census has no sampling error: the interval of a census rate is the rate itself. The machine's error "
    "(how often the teacher is wrong) is not in it: that is the audit's to measure."
)


def zero_width_census(row: dict) -> bool:
    """True for a census teacher rate (design :data:`CENSUS_DESIGN`, possibly followed by a note after ``"; "``) whose
    95% CI has zero width."""
    design = row.get("design") or ""
    return (
        row["method"] == "design_weighted_teacher_rate"
        and (design == CENSUS_DESIGN or design.startswith(f"{CENSUS_DESIGN}; "))
        and row["ci_low"] is not None
        and row["ci_low"] == row["ci_high"]
    )
