-- The outcome of every routed row (SPEC section 2 admission): superseded by a newer version, merged or
-- deleted (temp table removed), no title, publication year outside [$min, $max], else admitted.
CREATE TEMP TABLE outcome AS
SELECT r.id, r.source_file, r.source_locator,
  CASE WHEN n.id IS NULL THEN 'superseded'
       WHEN r.id IN (SELECT id FROM removed) THEN 'merged_or_deleted'
       WHEN coalesce(r.title_text, '') = '' THEN 'no_title'
       WHEN r.publication_year IS NULL OR r.publication_year NOT BETWEEN $min AND $max THEN 'year_out_of_range'
       ELSE 'admitted' END AS outcome
FROM routed r LEFT JOIN newest n USING (id, source_file, source_locator)
