-- Works whose newest version has no route: they leave the frame (SPEC section 2).
SELECT count(*) FROM newest n
WHERE NOT EXISTS (SELECT 1 FROM routed r WHERE r.id = n.id AND r.source_file = n.source_file
                  AND r.source_locator = n.source_locator)
