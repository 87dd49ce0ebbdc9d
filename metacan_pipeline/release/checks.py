"""The release stage's blocking check: every registered release bundle still matches its hashes."""

import dagster as dg

from ..storage import MetacanStorage
from .bundle import registered, verify
from .layer import releases_root


@dg.asset_check(
    asset="release",
    blocking=True,
    description="Every release registered in releases verifies: release.json is the registered one, every file it "
    "lists has its SHA-256 and size, no file is unlisted, SHA256SUMS agrees.",
)
def release_matches_its_hashes(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Re-hash every registered release bundle (`bundle.verify`); fails, naming the file, on any difference."""
    problems: list[str] = []
    rows = registered(storage)
    for row in rows:
        problems += verify(releases_root(storage) / row["folder"], row["release_json_sha256"])
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"releases_checked": len(rows), "problems": dg.MetadataValue.json(problems[:20])},
    )
