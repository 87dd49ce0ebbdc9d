-- The per-work tables of a release database from what work_records publishes (metacan_pipeline.site.build), run once
-- per range of work keys, the ranges in ascending order, so that each table, appended range after range, is in
-- work_key order. Relations made by the caller for the range: chunk (work_key, id, record_json: the range's
-- work_records rows), chunk_frame (id and the name lists of the range's frame rows), vocab_categories (category,
-- pos: SPEC section 3 order, 1-based). The release tables exist already (their DDL comes from
-- metacan_pipeline/tables/site.py). The caller checks r and fr against each other, then drops them. No abstract
-- text exists in any input.
-- r parses each record once into the struct s of the fields the tables need (a JSON path per column parsed the
-- record again for every column: about 25 parsed copies of each 2,048-row vector, which ran out of DuckDB's 1 GB at
-- 2,000 works of 5 KB records). Scalars are read as text and cast as before; machine_scores stays JSON (its arms are
-- its keys); prediction is an object or null in a record that may ship, so "is an object" is "is not null".
CREATE TEMP TABLE r AS
SELECT work_key, id, record_json, from_json(record_json, '{
  "title": "VARCHAR", "year": "VARCHAR", "lang": "VARCHAR", "type": "VARCHAR", "venue": "VARCHAR",
  "field": "VARCHAR", "topic": "VARCHAR", "doi": "VARCHAR", "cited_by": "VARCHAR", "has_abstract": "VARCHAR",
  "is_retracted": "VARCHAR", "ca_institutions": "VARCHAR", "funders": "VARCHAR", "keywords": "VARCHAR",
  "retraction_watch": {"state": "VARCHAR", "openalex_missed": "VARCHAR"},
  "routes": {"ca_aff": "VARCHAR", "ca_fund": "VARCHAR", "ca_venue": "VARCHAR", "about_ca": "VARCHAR",
             "invisible_to_affiliation_only": "VARCHAR"},
  "sampling_frame": {"in_sampling_frame": "VARCHAR"}, "release_layer": "VARCHAR", "layer": "VARCHAR",
  "cascade": [{"head": "VARCHAR", "decision": "VARCHAR"}],
  "lineage": {"frame_build_id": "VARCHAR"},
  "direct_labels": [{"teacher": "VARCHAR", "model": "VARCHAR", "prompt_version": "VARCHAR", "record_view": "VARCHAR",
                     "status": "VARCHAR", "label_status": "VARCHAR", "qualification": "VARCHAR",
                     "categories": ["VARCHAR"], "domain": "VARCHAR", "study_design": "VARCHAR", "genre": "VARCHAR",
                     "confidence": "VARCHAR"}],
  "prediction": {"model_version": "VARCHAR", "prediction_status": "VARCHAR",
                 "candidate_categories": ["VARCHAR"], "consensus_categories": ["VARCHAR"],
                 "category_scores_codex": ["DOUBLE"], "category_scores_gemma": ["DOUBLE"]},
  "machine_scores": "JSON"}') AS s
FROM chunk;

CREATE TEMP TABLE fr AS SELECT id, ca_institutions, funder_names, keywords FROM chunk_frame;

-- Every table is written in work_key order: an export reads the one-to-many tables for a range of keys, which
-- their zone maps then find without a scan of the whole table (benchmarks/bench_site.py).
INSERT INTO works
SELECT work_key, id,
       s.title,
       TRY_CAST(s.year AS INTEGER),
       nullif(s.lang, ''),
       nullif(s.type, ''),
       nullif(s.venue, ''),
       nullif(s.field, ''),
       nullif(s.topic, ''),
       nullif(s.doi, ''),
       coalesce(TRY_CAST(s.cited_by AS BIGINT), 0),
       CAST(s.has_abstract AS BOOLEAN),
       CAST(s.is_retracted AS BOOLEAN),
       -- a record without the Retraction Watch object (built before it existed) was not checked
       coalesce(s.retraction_watch.state, 'not_checked'),
       coalesce(CAST(s.retraction_watch.openalex_missed AS BOOLEAN), false),
       CAST(s.routes.ca_aff AS BOOLEAN),
       CAST(s.routes.ca_fund AS BOOLEAN),
       CAST(s.routes.ca_venue AS BOOLEAN),
       CAST(s.routes.about_ca AS BOOLEAN),
       CAST(s.routes.invisible_to_affiliation_only AS BOOLEAN),
       CAST(s.sampling_frame.in_sampling_frame AS BOOLEAN),
       -- the Classification card's precedence (metacan_pipeline.publish.records.classification_card)
       CASE
         WHEN list_contains(coalesce(list_transform(s.direct_labels, x -> x.status), []), 'labelled') THEN 'direct'
         WHEN len(coalesce(s.prediction.consensus_categories, [])) > 0 THEN 'consensus'
         WHEN len(coalesce(s.prediction.candidate_categories, [])) > 0 THEN 'candidate'
         WHEN s.prediction IS NOT NULL THEN 'no_category'
         ELSE 'none'
       END,
       s.release_layer,
       -- the cascade's decision on the metaresearch head (vocab.CASCADE_SITE_HEAD); no entry: not planned
       coalesce(list_filter(s.cascade, x -> x.head = 'metaresearch')[1].decision, 'not_planned'),
       s.prediction.model_version,
       s.prediction.prediction_status,
       coalesce(s.prediction.candidate_categories, []),
       coalesce(s.prediction.consensus_categories, []),
       -- scored: at least one category score; a head trained on one class ranks nothing and gives null
       len(list_filter(list_concat(coalesce(s.prediction.category_scores_codex, []),
                                   coalesce(s.prediction.category_scores_gemma, [])), x -> x IS NOT NULL)) > 0,
       TRY_CAST(s.machine_scores->>'$.score_spread' AS DOUBLE),
       s.machine_scores->>'$.validation_status',
       'works/' || coalesce(s.prediction.model_version, 'unscored') || '/' || id || '.html',
       record_json
FROM r
ORDER BY work_key;

INSERT INTO work_institutions
SELECT DISTINCT work_key, name FROM (
  SELECT r.work_key, unnest(f.ca_institutions) AS name FROM r JOIN fr f ON f.id = r.id
) WHERE name IS NOT NULL AND name <> ''
ORDER BY work_key, name;

INSERT INTO work_funders
SELECT DISTINCT work_key, name FROM (
  SELECT r.work_key, unnest(f.funder_names) AS name FROM r JOIN fr f ON f.id = r.id
) WHERE name IS NOT NULL AND name <> ''
ORDER BY work_key, name;

INSERT INTO work_keywords
SELECT DISTINCT work_key, name FROM (
  SELECT r.work_key, unnest(f.keywords) AS name FROM r JOIN fr f ON f.id = r.id
) WHERE name IS NOT NULL AND name <> ''
ORDER BY work_key, name;

INSERT INTO work_labels
SELECT work_key, l.teacher, l.model, l.prompt_version, l.record_view, l.status, l.label_status, l.qualification,
       CASE WHEN l.qualification IS NULL THEN NULL ELSE starts_with(l.qualification, 'teacher qualified') END,
       coalesce(l.categories, []), l.domain, l.study_design, l.genre, l.confidence
FROM (
  SELECT work_key, unnest(s.direct_labels) AS l
  FROM r
)
ORDER BY work_key, l.teacher;

INSERT INTO work_decisions
SELECT d.work_key, d.model_version, d.mode, d.category, d.prediction_status,
       list_extract(d.scores_codex, v.pos), list_extract(d.scores_gemma, v.pos)
FROM (
  SELECT work_key, s.prediction.model_version AS model_version, m.mode,
         unnest(CASE m.mode WHEN 'candidate' THEN s.prediction.candidate_categories
                            ELSE s.prediction.consensus_categories END) AS category,
         s.prediction.prediction_status AS prediction_status,
         s.prediction.category_scores_codex AS scores_codex,
         s.prediction.category_scores_gemma AS scores_gemma
  FROM r, (VALUES ('candidate'), ('consensus')) m(mode)
  WHERE s.prediction IS NOT NULL
) d
LEFT JOIN vocab_categories v ON v.category = d.category
ORDER BY d.work_key, d.model_version, d.mode, d.category;

INSERT INTO work_scores
SELECT work_key, substr(k, 7), TRY_CAST(json_extract_string(ms, k) AS DOUBLE), ms->>'$.validation_status'
FROM (SELECT work_key, ms, unnest(json_keys(ms)) AS k FROM (SELECT work_key, s.machine_scores AS ms FROM r)
      WHERE json_type(ms) = 'OBJECT')
WHERE starts_with(k, 'score_') AND k <> 'score_spread'
ORDER BY work_key, 2;
