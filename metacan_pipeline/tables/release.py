"""Tables of the frozen releases (:mod:`metacan_pipeline.release`, SPEC sections 8 and 10): the
register of every release cut, one row each, append-only."""

from __future__ import annotations

from .fields import columns
from .table import Table

#: A contract: the records (their ``layer``), the pages and the served site read the newest release from here.
RELEASES_SCHEMA = columns(
    "release_version",
    "content_sha256",
    "frame_build_id",
    "classifier_version",
    "created_at",
    "folder",
    "n_works",
    "release_json_sha256",
    "run_id",
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
