-- The authorships of a range of released works (metacan_pipeline.site.build), run once per range of work keys after
-- release.sql, so each table is appended in work_key order. Relations made by the caller: r (the range's records,
-- from release.sql), chunk_frame (the range's frame rows, with authorships) and pinned_institutions (id: the pinned
-- Canadian institution list). Names, ORCIDs and RORs are copied as the frame has them (as OpenAlex gives them).
-- The range's authorships are read from the frame once (fa), for both tables.
CREATE TEMP TABLE fa AS SELECT work_key, authorships FROM chunk_frame WHERE id IN (SELECT id FROM r);

INSERT INTO site_work_authors
SELECT f.work_key, a.position, a.author_id, a.author_id_status, a.orcid, a.name, a.is_canadian,
       list_transform(list_filter(a.institutions, i -> i.id IS NOT NULL), i -> i.id)
FROM (SELECT work_key, unnest(authorships) AS a FROM fa) f
ORDER BY f.work_key, a.position;

INSERT INTO site_work_institution_ids
SELECT work_key, i.id, arg_min(i.name, position), arg_min(i.ror, position) FILTER (WHERE i.ror IS NOT NULL),
       arg_min(upper(i.country_code), position) FILTER (WHERE i.country_code IS NOT NULL),
       bool_or(upper(i.country_code) = 'CA' OR i.id IN (SELECT id FROM pinned_institutions))
FROM (SELECT work_key, a.position AS position, unnest(a.institutions) AS i
      FROM (SELECT work_key, unnest(authorships) AS a FROM fa))
WHERE i.id IS NOT NULL
GROUP BY work_key, i.id
ORDER BY work_key, i.id;

DROP TABLE fa;
