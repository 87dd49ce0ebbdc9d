"""Retraction Watch files for tests, written in the real export's header with its real quirks."""

from __future__ import annotations

import csv
from pathlib import Path

from metacan_pipeline.retraction.notices import HEADER


def rw_row(record_id, nature, original_doi="", original_pmid="0", *, date="8/16/2023 0:00", **cells) -> dict:
    """One row of the export: a Crossref-style notice with the given Record ID, RetractionNature, original DOI and
    PubMed id; ``cells`` overrides any other column by its header name (spaces as in the header)."""
    row = {
        "Record ID": str(record_id),
        "Title": f"Paper {record_id}, with a comma",
        "Subject": "(BLS) Biology - Molecular;(HSC) Medicine - Oncology;",
        "Institution": "Department of Oncology, McGill University, Montreal, Quebec, Canada;",
        "Journal": "Journal of Tests",
        "Publisher": "Hindawi",
        "Country": "Canada",
        "Author": "Ann Author;Bob Author",
        "URLS": "https://retractionwatch.com/2023/04/05/example/",
        "ArticleType": "Research Article;",
        "RetractionDate": date,
        "RetractionDOI": f"10.1155/2023/98{record_id}",
        "RetractionPubMedID": "0",
        "OriginalPaperDate": "9/24/2021 0:00",
        "OriginalPaperDOI": original_doi,
        "OriginalPaperPubMedID": original_pmid,
        "RetractionNature": nature,
        "Reason": "+Concerns/Issues About Data;+Unreliable Results;",
        "Paywalled": "No",
        "Notes": "",
    }
    row.update(cells)
    return row


def write_rw(path: Path, rows: list[dict]) -> Path:
    """Write ``rows`` as the export does: the real header, every cell quoted only where it must be (commas, quotes,
    line breaks), CRLF line ends."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(HEADER), lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)
    return path
