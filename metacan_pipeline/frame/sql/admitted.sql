-- The admitted rows, stamped with the frame build id, in id order: the frame.
SELECT r.*, $build_id AS frame_build_id FROM routed r
JOIN outcome o USING (id, source_file, source_locator) WHERE o.outcome = 'admitted' ORDER BY r.id
