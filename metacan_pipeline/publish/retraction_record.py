"""The ``retraction_watch`` object of a published record: the work's Retraction Watch notices and its state."""

from __future__ import annotations

from ..retraction.join import RETRACTION, work_state
from ..vocab import RETRACTION_NOT_CHECKED


def retraction_watch_entry(notices: list[dict] | None, version: str | None, is_retracted: bool) -> dict:
    """The record's ``retraction_watch``: ``state`` (:func:`metacan_pipeline.retraction.join.work_state` of
    ``notices``, the work's ``work_retractions`` rows in date order; ``not_checked`` when ``version`` is None, i.e.
    no Retraction Watch file was read, whatever the notices), the file's ``version``, ``openalex_missed`` (the state
    is a retraction while OpenAlex's ``is_retracted`` is false) and each notice's Record ID, nature, state, reasons,
    date, notice DOI and PubMed id, and how it was matched."""
    if version is None:
        return {"state": RETRACTION_NOT_CHECKED, "version": None, "openalex_missed": False, "notices": []}
    notices = list(notices or [])
    state = work_state(notices)
    return {
        "state": state,
        "version": version,
        "openalex_missed": state == RETRACTION and not is_retracted,
        "notices": [
            {
                "record_id": n["rw_record_id"],
                "nature": n["retraction_nature"],
                "state": n["retraction_state"],
                "reasons": list(n["retraction_reasons"] or []),
                "date": n["retraction_date"],
                "notice_doi": n["notice_doi"],
                "notice_pmid": n["notice_pmid"],
                "matched_by": n["matched_by"],
            }
            for n in notices
        ],
    }
