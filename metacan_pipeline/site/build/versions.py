"""Works listed under several OpenAlex ids: ``work_versions``, written once per release after the per-work tables.

OpenAlex sometimes holds one work under several ids (a repository deposit and its versions, a record split by a
merge it has not made yet): "The DataLad Handbook" has four, with a Zenodo DOI each. The release keeps every id as
a work of its own, so every count stays the count of OpenAlex works; the search results list the versions of a
work together ("also listed as"). Two works are versions of one another when

- their DOIs are the same (compared lower-cased), or
- their titles are the same once normalised (lower case, accents removed, every run of characters that are not
  letters or digits one space) and so are their publication years, the title holding at least
  :data:`MIN_TITLE_WORDS` words, so that "Editorial" or "Book review" of the same year is never taken for one work.

A key shared by more than :data:`MAX_VERSIONS` works is a generic title or a DOI given to a whole series, not one
work: it groups nothing. ``work_versions`` holds one row per ordered pair (both directions) with the reason,
``doi``, ``title_year`` or both. Grouping is by each key alone, never transitively: a work lists the works that share
its DOI or its title and year.
"""

from __future__ import annotations

import duckdb

#: Fewest words of a normalised title that groups works by title and year.
MIN_TITLE_WORDS = 3
#: Most works one DOI or one title and year may group (more: a generic key, which groups nothing).
MAX_VERSIONS = 10

#: A title as it is compared: lower case, accents removed, every run of other characters than letters and digits one
#: space, no space at either end.
NORMALISED_TITLE = r"trim(regexp_replace(lower(strip_accents(title)), '[^\p{L}\p{N}]+', ' ', 'g'))"


def write_work_versions(con: duckdb.DuckDBPyConnection) -> int:
    """Fill ``work_versions`` from ``works`` (module docstring); returns the rows written."""
    con.execute(
        f"""
        INSERT INTO work_versions
        WITH keys AS (
          SELECT work_key, 'doi' AS basis, lower(doi) AS k FROM works WHERE doi IS NOT NULL AND doi <> ''
          UNION ALL
          SELECT work_key, 'title_year', CAST(year AS VARCHAR) || ' ' || t FROM (
            SELECT work_key, year, {NORMALISED_TITLE} AS t FROM works WHERE year IS NOT NULL AND title IS NOT NULL
          ) WHERE len(string_split(t, ' ')) >= {MIN_TITLE_WORDS}
        ), shared AS (
          SELECT basis, k FROM keys GROUP BY basis, k HAVING count(*) BETWEEN 2 AND {MAX_VERSIONS}
        ), members AS (
          SELECT keys.* FROM keys JOIN shared USING (basis, k)
        )
        SELECT a.work_key, b.work_key, string_agg(DISTINCT a.basis, ',' ORDER BY a.basis)
        FROM members a JOIN members b ON a.basis = b.basis AND a.k = b.k AND a.work_key <> b.work_key
        GROUP BY a.work_key, b.work_key
        ORDER BY a.work_key, b.work_key
        """
    )
    return con.execute("SELECT count(*) FROM work_versions").fetchone()[0]
