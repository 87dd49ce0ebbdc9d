-- The newest version of every routed work id (SPEC section 2: a work appears once): newest
-- updated_date, then the later file in sort order, then the later record in the file.
-- Reads the temp views idx (every work record of every part) and routed (the routed rows).
CREATE TEMP TABLE newest AS
SELECT id, source_file, source_locator FROM (
  SELECT id, source_file, source_locator, row_number() OVER (
    PARTITION BY id ORDER BY updated_date DESC NULLS LAST, source_file DESC, ordinal DESC NULLS LAST) AS rn
  FROM idx WHERE id IN (SELECT id FROM routed)) WHERE rn = 1
