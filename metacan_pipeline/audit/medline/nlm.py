"""NLM publication types as a reference for study design: which NLM names each ``study_design`` class stands for,
from which year NLM could assign them, and what an efetch answer (``db=pubmed&retmode=xml``) says of one record.

**The classes.** Six independent binary heads of the ``study_design`` vocabulary (:data:`MEDLINE_CLASSES`). A
MEDLINE record is a positive of a class when one of its ``PublicationType`` names is among the class's NLM names
(:data:`NLM_CLASSES`, spelled as NLM spells them); publication types overlap (a work can be both ``Systematic Review``
and ``Meta-Analysis``), so each class is judged apart, never as a choice among them.

**Calendar eligibility.** A publication type that did not exist cannot be a negative: a record indexed before its
class's ``introduced`` year is not data for that class, in either direction (the original protocol, section 5.5).
The year of a record is the year NLM completed its indexing (``DateCompleted``), else its publication year.

**Indexing method.** Only records NLM indexed by hand are the reference: ``MedlineCitation`` with ``Status`` MEDLINE
(or OLDMEDLINE) and no ``IndexingMethod`` attribute. ``IndexingMethod="Curated"`` (automated, then reviewed) and
``"Automated"`` are machine indexing: reported as agreement with another machine, never as the reference. A
citation NLM has not indexed (``In-Process``, ``Publisher``, ``PubMed-not-MEDLINE``...) carries no indexed
publication type and is none of these.
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from ...vocab import STUDY_DESIGNS


@dataclass(frozen=True)
class NlmClass:
    """One ``study_design`` class as NLM indexes it: its NLM publication type names (empty: NLM has none, so
    the class has no reference) and the first year NLM could assign the main one (None: since MEDLINE began)."""

    design: str
    publication_types: tuple[str, ...]
    introduced: int | None
    note: str


#: The classes with a MEDLINE reference, each an independent binary head, and their NLM publication types.
#: Introduction years are those of the MeSH publication type records (MeSH Browser, "Date Established"; NLM's
#: list of publication types, https://www.nlm.nih.gov/mesh/pubtypes.html): Randomized Controlled Trial (D016449)
#: 1990; Meta-Analysis (D017418) 1993; Observational Study (D064888) 2014; Systematic Review (D000078182) 2019
#: (NLM Technical Bulletin 425, MeSH 2019; the veterinary variants of the trial and observational types came with
#: it and count as positives of their class). Case Reports (D002363) is one of MEDLINE's original publication
#: types: every record is eligible. NLM has no publication type for qualitative studies ("Qualitative Research" is a
#: topical heading, not a publication type): the class is listed and never has a reference.
NLM_CLASSES: dict[str, NlmClass] = {
    c.design: c
    for c in (
        NlmClass(
            "randomized_trial",
            ("Randomized Controlled Trial", "Randomized Controlled Trial, Veterinary"),
            1990,
            "MeSH D016449, established 1990",
        ),
        NlmClass(
            "observational",
            ("Observational Study", "Observational Study, Veterinary"),
            2014,
            "MeSH D064888, established 2014",
        ),
        NlmClass("systematic_review", ("Systematic Review",), 2019, "MeSH D000078182, established 2019"),
        NlmClass("meta_analysis", ("Meta-Analysis",), 1993, "MeSH D017418, established 1993"),
        NlmClass("case_report", ("Case Reports",), None, "MeSH D002363, one of MEDLINE's original publication types"),
        NlmClass("qualitative", (), None, "NLM has no publication type for qualitative studies: no reference"),
    )
}
MEDLINE_CLASSES: tuple[str, ...] = tuple(NLM_CLASSES)
assert set(MEDLINE_CLASSES) <= set(STUDY_DESIGNS), "a MEDLINE class outside the study_design vocabulary"

#: The indexing groups of a MEDLINE record: ``hand`` is the reference; the machine groups are reported apart.
HAND, CURATED, AUTOMATED, NOT_INDEXED = "hand", "curated", "automated", "not_indexed"
MACHINE_GROUPS: tuple[str, ...] = (CURATED, AUTOMATED)
INDEXING_GROUPS: tuple[str, ...] = (HAND, *MACHINE_GROUPS)
#: The ``MedlineCitation`` statuses of a citation NLM indexed for MEDLINE.
INDEXED_STATUSES = ("MEDLINE", "OLDMEDLINE")


@dataclass(frozen=True)
class MedlineRecord:
    """What one ``PubmedArticle`` of an efetch answer says: its PMID, ``Status`` and ``IndexingMethod`` as given,
    the indexing group, the publication type names (and UIs) and the years that decide calendar eligibility."""

    pmid: str
    status: str
    indexing_method: str | None
    publication_types: tuple[str, ...]
    publication_type_uis: tuple[str, ...]
    year_completed: int | None
    year_published: int | None

    @property
    def indexing(self) -> str:
        """``hand`` | ``curated`` | ``automated`` | ``not_indexed`` (an unknown method counts as not indexed)."""
        if self.status not in INDEXED_STATUSES:
            return NOT_INDEXED
        if self.indexing_method is None:
            return HAND
        return {"curated": CURATED, "automated": AUTOMATED}.get(self.indexing_method.strip().lower(), NOT_INDEXED)

    @property
    def year(self) -> int | None:
        """The year NLM completed the record's indexing, else its publication year (None: neither is given)."""
        return self.year_completed if self.year_completed is not None else self.year_published


def eligible(design: str, year: int | None) -> bool:
    """Whether a record of ``year`` is data for class ``design`` (a class with no NLM name never is; a record of
    unknown year is data only for a class eligible since MEDLINE began)."""
    cls = NLM_CLASSES[design]
    if not cls.publication_types:
        return False
    return cls.introduced is None or (year is not None and year >= cls.introduced)


def positive(design: str, publication_types: tuple[str, ...] | list[str]) -> bool:
    """Whether NLM put the record in class ``design`` (one of its publication types is the class's)."""
    return bool(set(NLM_CLASSES[design].publication_types) & set(publication_types))


class EfetchAnswerError(ValueError):
    """An efetch answer that is not a ``PubmedArticleSet`` (an error page, a truncated body)."""


def _year(text: str | None) -> int | None:
    if text and text.strip()[:4].isdigit():
        year = int(text.strip()[:4])
        return year if 1800 <= year <= dt.date.today().year + 1 else None
    return None


def _pub_year(citation: ET.Element) -> int | None:
    date = citation.find("Article/Journal/JournalIssue/PubDate")
    if date is None:
        return None
    return _year(date.findtext("Year")) or _year(date.findtext("MedlineDate"))


def parse_efetch(xml: str | bytes) -> list[MedlineRecord]:
    """The records of one efetch answer (``PubmedArticleSet``; ``PubmedBookArticle`` entries have no
    ``MedlineCitation`` and are skipped). Raises :class:`EfetchAnswerError` naming what came instead."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        head = (xml[:80].decode("utf-8", "replace") if isinstance(xml, bytes) else xml[:80]).strip()
        raise EfetchAnswerError(f"the efetch answer is not XML ({exc}); it starts {head!r}") from None
    if root.tag != "PubmedArticleSet":
        raise EfetchAnswerError(f"the efetch answer is a <{root.tag}>, not a <PubmedArticleSet>")
    out = []
    for article in root.iter("PubmedArticle"):
        citation = article.find("MedlineCitation")
        if citation is None or not (citation.findtext("PMID") or "").strip():
            continue
        types = citation.findall("Article/PublicationTypeList/PublicationType")
        out.append(
            MedlineRecord(
                pmid=citation.findtext("PMID").strip(),
                status=citation.get("Status", ""),
                indexing_method=citation.get("IndexingMethod"),
                publication_types=tuple((t.text or "").strip() for t in types),
                publication_type_uis=tuple(t.get("UI", "") for t in types),
                year_completed=_year(citation.findtext("DateCompleted/Year")),
                year_published=_pub_year(citation),
            )
        )
    return out
