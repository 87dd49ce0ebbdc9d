-- The rolling layer's works of one range of work keys (metacan_pipeline.site.build, after release.sql, while its
-- relation r exists): a record whose layer is 'rolling' (SPEC section 8; metacan_pipeline.release.layer), with the
-- frame partition its newest version was read from (the partition key metacan_pipeline.openalex.inventory gives its
-- source file) and its updated_date. Relation made by the caller: chunk_arrival (id, source_file, updated_date: the
-- range's frame rows).
INSERT INTO recent_works
SELECT r.work_key,
       coalesce(nullif(regexp_extract(a.source_file, '(window=[^/]+)', 1), ''),
                nullif(regexp_extract(a.source_file, '(?:^|/)works/(updated_date=[^/]+)/[^/]+$', 1), ''),
                'files'),
       a.updated_date
FROM r LEFT JOIN chunk_arrival a ON a.id = r.id
WHERE r.s.layer = 'rolling'
ORDER BY r.work_key;
