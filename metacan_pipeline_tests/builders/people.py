"""The people world for tests: the site world (:func:`.site.site_world`) whose works carry planted authorships, so
that author and institution pages, the id filters and the collaboration network have known answers."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline_tests.builders.common import XSS
from metacan_pipeline_tests.builders.site import site_world

MCGILL = {"id": "I10", "name": "McGill University", "country_code": "CA", "ror": "https://ror.org/01pxwe438"}
LAVAL = {"id": "I20", "name": "Université Laval", "country_code": "CA", "ror": "https://ror.org/04sjchr03"}
OXFORD = {"id": "I30", "name": "University of Oxford", "country_code": "GB", "ror": "https://ror.org/052gg0110"}
#: The planted pair: A100 writes every even work, A200 every third; they share the works i % 6 == 0 (10 of 60).
ADA = ("A100", "Ada Lovelace", "https://orcid.org/0000-0001-0000-0100", [MCGILL])
JEAN = ("A200", "Jean Tremblay", None, [LAVAL])
NOOR = ("A300", "Noor Khan", None, [OXFORD])
#: Canadian by country only (an affiliation that never resolved): in the author network, in no institution's.
JOSE = ("A400", "José Núñez", None, [])
#: An XSS payload as a name: names are data, shown escaped.
SOLO = ("A500", "Solo <b>" + XSS, None, [MCGILL])


def _authorship(position: int, who: tuple, canadian: bool) -> dict:
    author_id, name, orcid, insts = who
    return {
        "position": position,
        "author_id": author_id,
        "author_id_status": "ok" if author_id else "missing",
        "orcid": orcid,
        "name": name,
        "is_canadian": canadian,
        "institutions": insts,
    }


def planted_authorships(i: int) -> list[dict]:
    """The authorships of the people world's ``i``-th work (module docstring)."""
    people: list[tuple[tuple, bool]] = []
    if i % 2 == 0:
        people.append((ADA, True))
    if i % 3 == 0:
        people.append((JEAN, True))
    if i % 4 == 0:
        people.append((NOOR, False))
    if i % 5 == 0:
        people.append(((None, "Anonymous Consortium", None, []), False))
    if i % 10 == 1:
        people.append((JOSE, True))
    if not people:
        people.append((SOLO, True))
    return [_authorship(k, who, ca) for k, (who, ca) in enumerate(people, start=1)]


def people_world(storage: MetacanStorage, openalex_dir: Path, n: int = 60) -> list[dict]:
    """The site world's warehouse tables with the frame's authorships replaced by :func:`planted_authorships`;
    returns the frame rows."""
    frame = site_world(storage, openalex_dir, n)
    for i, row in enumerate(frame):
        row["authorships"] = planted_authorships(i)
    storage.write_table("frame", pa.Table.from_pylist(frame, schema=FRAME_SCHEMA))
    return frame
