-- The tables of a release database from what work_records publishes (metacan_pipeline.site.build).
-- Relations made by the caller: records (id, record_json, record_hash: the work_records Parquet files),
-- frame (id and the name lists: the frame Parquet files), heads (student_heads, possibly empty),
-- vocab_categories (category, pos: SPEC section 3 order, 1-based). The release tables exist already
-- (their DDL comes from metacan_pipeline/tables/site.py). No abstract text exists in any input.
CREATE TEMP TABLE r AS
SELECT CAST(substr(id, 2) AS BIGINT) AS work_key, id, record_json, record_json::JSON AS j FROM records;

-- Every table is written in work_key order: an export reads the one-to-many tables for a range of keys, which
-- their zone maps then find without a scan of the whole table (benchmarks/bench_site.py).
INSERT INTO works
SELECT work_key, id,
       j->>'$.title',
       TRY_CAST(j->>'$.year' AS INTEGER),
       nullif(j->>'$.lang', ''),
       nullif(j->>'$.type', ''),
       nullif(j->>'$.venue', ''),
       nullif(j->>'$.field', ''),
       nullif(j->>'$.topic', ''),
       nullif(j->>'$.doi', ''),
       coalesce(TRY_CAST(j->>'$.cited_by' AS BIGINT), 0),
       CAST(j->>'$.has_abstract' AS BOOLEAN),
       CAST(j->>'$.is_retracted' AS BOOLEAN),
       CAST(j->>'$.routes.ca_aff' AS BOOLEAN),
       CAST(j->>'$.routes.ca_fund' AS BOOLEAN),
       CAST(j->>'$.routes.ca_venue' AS BOOLEAN),
       CAST(j->>'$.routes.about_ca' AS BOOLEAN),
       CAST(j->>'$.routes.invisible_to_affiliation_only' AS BOOLEAN),
       CAST(j->>'$.sampling_frame.in_sampling_frame' AS BOOLEAN),
       -- the Classification card's precedence (metacan_pipeline.publish.records.classification_card)
       CASE
         WHEN list_contains(coalesce(json_extract_string(j, '$.direct_labels[*].status'), []), 'labelled') THEN 'direct'
         WHEN len(coalesce(from_json(j->'$.prediction.consensus_categories', '["VARCHAR"]'), [])) > 0 THEN 'consensus'
         WHEN len(coalesce(from_json(j->'$.prediction.candidate_categories', '["VARCHAR"]'), [])) > 0 THEN 'candidate'
         WHEN json_type(j->'$.prediction') = 'OBJECT' THEN 'no_category'
         ELSE 'none'
       END,
       j->>'$.prediction.model_version',
       j->>'$.prediction.prediction_status',
       coalesce(from_json(j->'$.prediction.candidate_categories', '["VARCHAR"]'), []),
       coalesce(from_json(j->'$.prediction.consensus_categories', '["VARCHAR"]'), []),
       TRY_CAST(j->>'$.machine_scores.score_spread' AS DOUBLE),
       j->>'$.machine_scores.validation_status',
       'works/' || coalesce(j->>'$.prediction.model_version', 'unscored') || '/' || id || '.html',
       record_json
FROM r
ORDER BY work_key;

INSERT INTO work_institutions
SELECT DISTINCT work_key, name FROM (
  SELECT r.work_key, unnest(f.ca_institutions) AS name FROM r JOIN frame f ON f.id = r.id
) WHERE name IS NOT NULL AND name <> ''
ORDER BY work_key, name;

INSERT INTO work_funders
SELECT DISTINCT work_key, name FROM (
  SELECT r.work_key, unnest(f.funder_names) AS name FROM r JOIN frame f ON f.id = r.id
) WHERE name IS NOT NULL AND name <> ''
ORDER BY work_key, name;

INSERT INTO work_keywords
SELECT DISTINCT work_key, name FROM (
  SELECT r.work_key, unnest(f.keywords) AS name FROM r JOIN frame f ON f.id = r.id
) WHERE name IS NOT NULL AND name <> ''
ORDER BY work_key, name;

INSERT INTO work_labels
SELECT work_key, l.teacher, l.model, l.prompt_version, l.record_view, l.status, l.label_status, l.qualification,
       CASE WHEN l.qualification IS NULL THEN NULL ELSE starts_with(l.qualification, 'teacher qualified') END,
       coalesce(l.categories, []), l.domain, l.study_design, l.genre, l.confidence
FROM (
  SELECT work_key, unnest(from_json(j->'$.direct_labels', '[{"teacher": "VARCHAR", "model": "VARCHAR",
    "prompt_version": "VARCHAR", "record_view": "VARCHAR", "status": "VARCHAR", "label_status": "VARCHAR",
    "qualification": "VARCHAR", "categories": ["VARCHAR"], "domain": "VARCHAR", "study_design": "VARCHAR",
    "genre": "VARCHAR", "confidence": "VARCHAR"}]')) AS l
  FROM r
)
ORDER BY work_key, l.teacher;

INSERT INTO work_decisions
SELECT d.work_key, d.model_version, d.mode, d.category, d.prediction_status,
       list_extract(d.scores_codex, v.pos), list_extract(d.scores_gemma, v.pos)
FROM (
  SELECT work_key, j->>'$.prediction.model_version' AS model_version, m.mode,
         unnest(CASE m.mode WHEN 'candidate' THEN from_json(j->'$.prediction.candidate_categories', '["VARCHAR"]')
                            ELSE from_json(j->'$.prediction.consensus_categories', '["VARCHAR"]') END) AS category,
         j->>'$.prediction.prediction_status' AS prediction_status,
         from_json(j->'$.prediction.category_scores_codex', '["DOUBLE"]') AS scores_codex,
         from_json(j->'$.prediction.category_scores_gemma', '["DOUBLE"]') AS scores_gemma
  FROM r, (VALUES ('candidate'), ('consensus')) m(mode)
  WHERE json_type(j->'$.prediction') = 'OBJECT'
) d
LEFT JOIN vocab_categories v ON v.category = d.category
ORDER BY d.work_key, d.model_version, d.mode, d.category;

INSERT INTO work_scores
SELECT work_key, substr(k, 7), TRY_CAST(json_extract_string(ms, k) AS DOUBLE), ms->>'$.validation_status'
FROM (SELECT work_key, ms, unnest(json_keys(ms)) AS k FROM (SELECT work_key, j->'$.machine_scores' AS ms FROM r)
      WHERE json_type(ms) = 'OBJECT')
WHERE starts_with(k, 'score_') AND k <> 'score_spread'
ORDER BY work_key, 2;

INSERT INTO classifier_heads
SELECT model_version, teacher, target, gate_passed, gate_reason FROM heads
WHERE model_version IN (SELECT DISTINCT model_version FROM works WHERE model_version IS NOT NULL);
