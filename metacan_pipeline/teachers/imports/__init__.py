"""Labels produced elsewhere: label files in our schema, the MetaCan pilot's screening files, and the sources of
the ``imported_labels`` asset."""
