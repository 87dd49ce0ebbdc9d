"""The scan behind the blocking check ``records_may_ship``: every ``work_records`` file checked against the JSON Schema,
SPEC section 8 (:func:`.records.ship_violations`, and :func:`.cascade_record.cascade_violations` for the cascade's
certified decisions), the rolling layer's rule
(:func:`metacan_pipeline.release.layer.rolling_violations`) and the release layer's
(:func:`metacan_pipeline.release.release_layers.layer_violations`: the layer a record carries is the one the rule gives),
file by file in worker processes.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pyarrow.parquet as pq

from ..release.layer import ROLLING, rolling_violations
from ..release.release_layers import layer_violations
from ..storage import MetacanStorage
from .cascade_record import cascade_violations
from .record_build import worker_pool
from .records import schema_violation, ship_violations


def check_file(path: str, passed: frozenset[tuple[str, str]]) -> tuple[int, int, list[str]]:
    """Records checked, records violating and the first :data:`SHOWN_VIOLATIONS` violations of one ``work_records``
    file: the JSON Schema (:func:`.records.schema_violation`), :func:`.records.ship_violations`,
    :func:`.cascade_record.cascade_violations` (a certified decision ships as a machine decision only),
    :func:`metacan_pipeline.release.layer.rolling_violations`, :func:`metacan_pipeline.release.release_layers.layer_violations`
    (``passed``: the (classifier version, head) pairs that passed human validation)."""
    checked = bad = 0
    shown: list[str] = []
    for batch in pq.ParquetFile(path).iter_batches(batch_size=5000, columns=["record_json"]):
        for text in batch.column(0).to_pylist():
            record = _loads(text)
            v = ship_violations(record) + rolling_violations(record, passed) + layer_violations(record)
            v += cascade_violations(record, record.get("layer") == ROLLING, lambda ver, head: (ver, head) in passed)
            v += [e for e in [schema_violation(record)] if e]
            checked += 1
            bad += bool(v)
            shown.extend(v[: SHOWN_VIOLATIONS - len(shown)])
    return checked, bad, shown


#: Violations a check's metadata shows (the first ones, in record order).
SHOWN_VIOLATIONS = 20


def _loads(text: str) -> Any:
    """A record's JSON: orjson, or json for what orjson refuses (``NaN``, which json.dumps writes for a float NaN and
    the JSON Schema then judges)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def check_records(storage: MetacanStorage, passed: frozenset[tuple[str, str]], workers: int) -> tuple[int, int, list]:
    """:func:`check_file` over every file of ``work_records``, in ``workers`` processes when there are several files;
    returns records checked, records violating and the first :data:`SHOWN_VIOLATIONS` violations in record order."""
    storage.require("work_records")
    files = [str(p) for p in sorted(storage.table_dir("work_records").glob("*.parquet"))]
    workers = max(1, min(workers, len(files)))
    if workers == 1:
        results = [check_file(f, passed) for f in files]
    else:
        with worker_pool(workers, "while checking the records") as pool:
            results = list(pool.map(check_file, files, [passed] * len(files)))
    shown = [v for _, _, vs in results for v in vs][:SHOWN_VIOLATIONS]
    return sum(r[0] for r in results), sum(r[1] for r in results), shown
