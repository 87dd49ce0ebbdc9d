-- Everything one published record is built from: one row per frame work, in id order
-- (metacan_pipeline.publish.records.record_inputs makes the relations, views over the Parquet tables):
--   work    the frame row;
--   labels  the direct labels of every teacher (direct_labels: their rows, UNION ALL BY NAME), by teacher;
--   pred    the prediction row, or NULL;
--   machine the machine-score row, or NULL;
--   lineage the work_lineage row;
--   human   the work's final human code (human_codes, written by validation_report), or NULL;
--   reference the reference-set heads' scores (reference_scores: student_scores' <set>__<target> columns), or NULL;
--   in_release whether the work is in the newest frozen release's frame (release_frame);
--   rw_notices the work's Retraction Watch notices (work_retractions), by date, undated first;
--   rw_version the Retraction Watch file read (retraction_watch_source), NULL when none is configured;
--   cascade the cascade's decisions of the work, one per head, each with its head's thresholds (cascade_decisions).
WITH labels AS (
  SELECT work_id, list(l ORDER BY l.teacher) AS labels
  FROM direct_labels l
  GROUP BY work_id
), rw AS (
  SELECT id, list(n ORDER BY n.retraction_date NULLS FIRST, n.rw_record_id) AS notices
  FROM work_retractions n
  GROUP BY id
), cd AS (
  SELECT id, list(c ORDER BY c.target) AS decisions
  FROM cascade_decisions c
  GROUP BY id
), rws AS (
  SELECT max(rw_version) AS rw_version FROM retraction_watch_source WHERE status = 'loaded'
)
SELECT f AS work,
       coalesce(lb.labels, []) AS labels,
       CASE WHEN p.id IS NULL THEN NULL ELSE p END AS pred,
       CASE WHEN m.id IS NULL THEN NULL ELSE m END AS machine,
       g AS lineage,
       CASE WHEN h.id IS NULL THEN NULL ELSE h END AS human,
       CASE WHEN r.id IS NULL THEN NULL ELSE r END AS reference,
       rf.id IS NOT NULL AS in_release,
       coalesce(rw.notices, []) AS rw_notices,
       rws.rw_version,
       coalesce(cd.decisions, []) AS cascade
FROM frame f
CROSS JOIN rws
LEFT JOIN predictions p ON p.id = f.id
LEFT JOIN machine_scores m ON m.id = f.id
LEFT JOIN work_lineage g ON g.id = f.id
LEFT JOIN labels lb ON lb.work_id = f.id
LEFT JOIN human_codes h ON h.id = f.id
LEFT JOIN reference_scores r ON r.id = f.id
LEFT JOIN release_frame rf ON rf.id = f.id
LEFT JOIN rw ON rw.id = f.id
LEFT JOIN cd ON cd.id = f.id
ORDER BY f.id
