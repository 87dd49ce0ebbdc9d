"""Tables of the frozen releases (:mod:`metacan_pipeline.release`, issue 16 "Releases", SPEC sections 8 and 10): the
register of every release cut, one row each, append-only."""

from __future__ import annotations

import pyarrow as pa

from . import Table

#: A contract: the records (their ``layer``), the pages and the served site read the newest release from here.
RELEASES_SCHEMA = pa.schema(
    [
        ("release_version", pa.string()),
        ("content_sha256", pa.string()),
        ("frame_build_id", pa.string()),
        ("classifier_version", pa.string()),
        ("created_at", pa.timestamp("us")),
        ("folder", pa.string()),
        ("n_works", pa.int64()),
        ("release_json_sha256", pa.string()),
        ("run_id", pa.string()),
    ]
)

TABLES = [
    Table(
        "releases",
        "one frozen release (append-only, never updated): its version, the SHA-256 of the frozen inputs it was cut "
        "from, frame build, classifier version, when, its folder under data/releases/, works, and release.json's hash",
        "release",
        RELEASES_SCHEMA,
        ("release_version",),
        store="duckdb",
    ),
]
