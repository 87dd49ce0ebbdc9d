-- After every range of release.sql (metacan_pipeline.site.build): the support gates of the classifier versions the
-- works carry (heads: student_heads, possibly empty), then the coded copy below.
INSERT INTO classifier_heads
SELECT model_version, teacher, target, gate_passed, gate_reason FROM heads
WHERE model_version IN (SELECT DISTINCT model_version FROM works WHERE model_version IS NOT NULL);

-- The narrow, coded copy of the cohort columns (metacan_pipeline.site.build, after release.sql): facet_codes
-- numbers every value of a text facet column, every name and every classifier decision (model_version, mode,
-- category), with the folded form of each value (norm: what a text filter compares, query/clauses.py);
-- work_facets holds one row per work with those codes, the boolean filters, the coverage flags (labelled, decided,
-- classified: a labelled direct label's category or a decision), the citation count and the name and
-- decision code lists. Counts and facets scan it instead of works (benchmarks/bench_site.py:
-- grouping 4.3M integer codes is several times faster than grouping the text, and a name facet is an unnest
-- of the cohort's own rows, not a join of a name table with the cohort).
INSERT INTO facet_codes
SELECT facet, row_number() OVER (PARTITION BY facet ORDER BY value), value, NULL, NULL, NULL,
       lower(strip_accents(value)) FROM (
  SELECT DISTINCT 'language' AS facet, language AS value FROM works WHERE language IS NOT NULL
  UNION ALL SELECT DISTINCT 'type', type FROM works WHERE type IS NOT NULL
  UNION ALL SELECT DISTINCT 'field', field FROM works WHERE field IS NOT NULL
  UNION ALL SELECT DISTINCT 'topic', topic FROM works WHERE topic IS NOT NULL
  UNION ALL SELECT DISTINCT 'venue', venue FROM works WHERE venue IS NOT NULL
  UNION ALL SELECT DISTINCT 'classification_kind', classification_kind FROM works WHERE classification_kind IS NOT NULL
  UNION ALL SELECT DISTINCT 'release_layer', release_layer FROM works WHERE release_layer IS NOT NULL
  UNION ALL SELECT DISTINCT 'retraction_state', retraction_state FROM works WHERE retraction_state IS NOT NULL
  UNION ALL SELECT DISTINCT 'cascade_decision', cascade_decision FROM works WHERE cascade_decision IS NOT NULL
  UNION ALL SELECT DISTINCT 'institution', name FROM work_institutions
  UNION ALL SELECT DISTINCT 'funder', name FROM work_funders
  UNION ALL SELECT DISTINCT 'keyword', name FROM work_keywords
);

INSERT INTO facet_codes
SELECT 'classifier', row_number() OVER (ORDER BY model_version, mode, category), category, model_version, mode,
       any_value(prediction_status), NULL
FROM work_decisions GROUP BY model_version, mode, category;

CREATE TEMP TABLE names_coded AS
SELECT x.work_key, 'institution' AS facet, c.code FROM work_institutions x JOIN facet_codes c ON c.facet = 'institution' AND c.value = x.name
UNION ALL SELECT x.work_key, 'funder', c.code FROM work_funders x JOIN facet_codes c ON c.facet = 'funder' AND c.value = x.name
UNION ALL SELECT x.work_key, 'keyword', c.code FROM work_keywords x JOIN facet_codes c ON c.facet = 'keyword' AND c.value = x.name
UNION ALL SELECT d.work_key, 'classifier', c.code FROM work_decisions d
  JOIN facet_codes c ON c.facet = 'classifier' AND c.value = d.category AND c.model_version = d.model_version AND c.mode = d.mode;

CREATE TEMP TABLE lists_coded AS
SELECT work_key,
       list(code ORDER BY code) FILTER (WHERE facet = 'institution') AS institution,
       list(code ORDER BY code) FILTER (WHERE facet = 'funder') AS funder,
       list(code ORDER BY code) FILTER (WHERE facet = 'keyword') AS keyword,
       list(code ORDER BY code) FILTER (WHERE facet = 'classifier') AS classifier
FROM names_coded GROUP BY work_key;

INSERT INTO work_facets
SELECT w.work_key, w.year, k1.code, k2.code, k3.code, k4.code, k5.code, k6.code, k7.code, k8.code, k9.code,
       w.ca_aff, w.ca_fund, w.ca_venue, w.about_ca, w.invisible_to_affiliation_only, w.has_abstract, w.is_retracted,
       w.openalex_missed,
       w.scored,
       w.work_key IN (SELECT work_key FROM work_labels WHERE status = 'labelled'),
       w.work_key IN (SELECT work_key FROM work_decisions),
       w.work_key IN (SELECT work_key FROM work_decisions)
         OR w.work_key IN (SELECT work_key FROM work_labels WHERE status = 'labelled' AND len(categories) > 0),
       w.cited_by,
       coalesce(n.institution, []), coalesce(n.funder, []), coalesce(n.keyword, []), coalesce(n.classifier, [])
FROM works w
LEFT JOIN facet_codes k1 ON k1.facet = 'language' AND k1.value = w.language
LEFT JOIN facet_codes k2 ON k2.facet = 'type' AND k2.value = w.type
LEFT JOIN facet_codes k3 ON k3.facet = 'field' AND k3.value = w.field
LEFT JOIN facet_codes k4 ON k4.facet = 'topic' AND k4.value = w.topic
LEFT JOIN facet_codes k5 ON k5.facet = 'venue' AND k5.value = w.venue
LEFT JOIN facet_codes k6 ON k6.facet = 'classification_kind' AND k6.value = w.classification_kind
LEFT JOIN facet_codes k7 ON k7.facet = 'release_layer' AND k7.value = w.release_layer
LEFT JOIN facet_codes k8 ON k8.facet = 'retraction_state' AND k8.value = w.retraction_state
LEFT JOIN facet_codes k9 ON k9.facet = 'cascade_decision' AND k9.value = w.cascade_decision
LEFT JOIN lists_coded n ON n.work_key = w.work_key
ORDER BY w.work_key;

DROP TABLE names_coded;
DROP TABLE lists_coded;
