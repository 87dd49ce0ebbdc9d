-- The release's authors and institutions, once every range of site_work_authors and site_work_institution_ids is
-- written (metacan_pipeline.site.build). The name shown is the one of the newest work (highest work key breaks ties).
INSERT INTO site_authors
SELECT a.author_id,
       arg_max(a.orcid, (w.year, a.work_key)) FILTER (WHERE a.orcid IS NOT NULL),
       arg_max(a.author_name, (w.year, a.work_key)),
       bool_or(a.is_canadian),
       count(DISTINCT a.work_key), min(w.year), max(w.year)
FROM site_work_authors a JOIN works w USING (work_key)
WHERE a.author_id IS NOT NULL
GROUP BY a.author_id ORDER BY a.author_id;

INSERT INTO site_institutions
SELECT i.institution_id,
       arg_max(i.ror, (w.year, i.work_key)) FILTER (WHERE i.ror IS NOT NULL),
       arg_max(i.display_name, (w.year, i.work_key)),
       arg_max(i.country_code, (w.year, i.work_key)) FILTER (WHERE i.country_code IS NOT NULL),
       bool_or(i.is_canadian),
       count(DISTINCT i.work_key), min(w.year), max(w.year)
FROM site_work_institution_ids i JOIN works w USING (work_key)
GROUP BY i.institution_id ORDER BY i.institution_id;
