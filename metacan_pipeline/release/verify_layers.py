"""The release layers of a bundle, recomputed from its files alone (``metacan verify-release``).

Every record of ``records.jsonl`` must carry the layer the rule gives over the record itself
(:func:`.release_layers.release_layer`), and a human-verified record's ``human_code`` must be a row of the bundle's
``tables/human_codes.parquet`` (same protocol and work), the table ``verify-release`` recomputes from the released
answers: so the human-verified layer rests on codes the bundle can show, and no other layer hides one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from .bundle import RECORDS_FILE
from .layer import TABLES_DIR
from .release_layers import FIELD, HUMAN_VERIFIED, release_layer
from .study import Difference

HUMAN_CODES = "human_codes"


def recompute_layers(folder: Path) -> tuple[int, list[Difference]]:
    """``(records checked, differences)`` of the bundle in ``folder`` (module docstring); a difference is named by
    the table ``release_layer``, the work id and ``release_layer`` or ``human_code``. Raises ValueError naming the file
    when ``records.jsonl`` is missing or a line is not a JSON object."""
    path = folder / RECORDS_FILE
    if not path.is_file():
        raise ValueError(f"{path} is missing: the bundle's records cannot be checked")
    codes_file = folder / TABLES_DIR / f"{HUMAN_CODES}.parquet"
    codes = (
        {(r["protocol_id"], r["id"]) for r in pq.read_table(codes_file, columns=["protocol_id", "id"]).to_pylist()}
        if codes_file.is_file()
        else set()
    )
    checked, out = 0, []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {number}: not JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}, line {number}: not a JSON object")
            checked += 1
            wid = f"id={record.get('id')}"
            want = release_layer(record)
            if record.get(FIELD) != want:
                out.append(Difference(FIELD, wid, FIELD, record.get(FIELD), want))
            code = record.get("human_code")
            if want == HUMAN_VERIFIED and (code.get("protocol_id"), record.get("id")) not in codes:
                out.append(Difference(FIELD, wid, "human_code", code.get("protocol_id"), f"no row in {HUMAN_CODES}"))
    return checked, out
