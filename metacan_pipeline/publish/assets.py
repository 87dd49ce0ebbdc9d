"""Publishing assets: ``work_records`` (JSON), the SPEC section 8 blocking check, ``work_pages`` (HTML)."""


import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path

import dagster as dg
import pyarrow as pa

from ..meta import counts_markdown, table_metadata
from ..openalex.ids import is_work_id
from ..openalex.lookup import load_abstracts
from ..resources import OpenAlexFiles
from ..storage import MetacanStorage
from ..student.assets import machine_scores, predictions
from .pages import environment, index_row, render_index, render_work, write_static
from .records import build_record, ship_violations

RECORDS_SCHEMA = pa.schema([("id", pa.string()), ("record_json", pa.string()), ("record_hash", pa.string())])


def _write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` only when it differs from what is there; True when written."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True


def _safe_id(work_id: str) -> str:
    """A work id that may become a file name; ValueError otherwise (ids must match ^W\\d+$)."""
    if not is_work_id(work_id):
        raise ValueError(f"refusing to publish work id {work_id!r}: ids must match ^W\\d+$")
    return work_id


@dg.asset(group_name="publishing", kinds={"python", "json"}, code_version="1", owners=["team:metacan"],
          deps=[predictions, machine_scores])
def work_records(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """One JSON record per frame work with the field names of seeds/004 (SPEC section 9).

    Fields: bibliographic record, routes and their evidence, retraction, the direct labels of every
    teacher (with source and status), the hybrid prediction, the machine scores, and lineage (frame
    build, input file and locator, entity-list and lexicon versions, teacher call ids, model
    version). Written to ``data/site/records/<id>.json`` (only when changed) and to the table
    ``work_records`` that the blocking check reads.
    """
    frame_rows = storage.read_table("frame").to_pylist()
    labels: dict[str, list[dict]] = defaultdict(list)
    for teacher in ("gemma", "codex"):
        if storage.has_table(f"direct_labels_{teacher}"):
            for l in storage.read_table(f"direct_labels_{teacher}").to_pylist():
                labels[l["work_id"]].append(l)
    preds = {p["id"]: p for p in storage.read_table("predictions").to_pylist()}
    machine = {m["id"]: m for m in storage.read_table("machine_scores").to_pylist()}
    out, written = [], 0
    rec_dir = storage.site_dir / "records"
    for w in frame_rows:
        wid = _safe_id(w["id"])
        lineage = {
            "frame_build": w["frame_build_id"],
            "input_record": f"{w['source_file']} @ {w['source_locator']}",
            "entity_list_versions": w["entity_list_versions"],
            "lexicon_version": w["lexicon_version"],
            "teacher_calls": "; ".join(f"{l['teacher']}: {l['model']} prompt {l['prompt_version']} call {l['call_id'] or 'none (rule)'} run {l['run_id']}"
                                       for l in sorted(labels[wid], key=lambda l: l["teacher"])) or "none",
            "model_version": (preds.get(wid) or {}).get("model_version"),
        }
        record = build_record(w, labels[wid], preds.get(wid), machine.get(wid), lineage)
        text = json.dumps(record, ensure_ascii=False, sort_keys=False, default=str)
        written += _write_if_changed(rec_dir / f"{wid}.json", text)
        out.append({"id": wid, "record_json": text, "record_hash": hashlib.sha256(text.encode()).hexdigest()[:16]})
    n = storage.write_table("work_records", pa.Table.from_pylist(out, schema=RECORDS_SCHEMA))
    context.log.info(f"work_records: {n} records ({written} written or changed) in {rec_dir}")
    return dg.MaterializeResult(metadata=table_metadata(RECORDS_SCHEMA, n, out, ["id", "record_hash"],
                                                        records_dir=str(rec_dir), records_written=written))


@dg.asset_check(asset=work_records, blocking=True,
                description="SPEC section 8: no score_only row carries a category; every category carries source and status.")
def records_may_ship(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails (and, being blocking, stops ``work_pages``) when any record breaks SPEC section 8.

    Metadata lists the number of violating records and up to 20 violations with the work id.
    """
    violations: list[str] = []
    bad = 0
    for batch in storage.iter_batches("work_records", columns=["record_json"]):
        for text in batch.column("record_json").to_pylist():
            v = ship_violations(json.loads(text))
            bad += bool(v)
            violations.extend(v)
    return dg.AssetCheckResult(passed=bad == 0, metadata={"violating_records": bad,
                                                          "violations": dg.MetadataValue.json(violations[:20])})


@dg.asset(group_name="publishing", kinds={"python", "html"}, code_version="1", owners=["team:metacan"], deps=[work_records])
def work_pages(context: dg.AssetExecutionContext, storage: MetacanStorage, openalex: OpenAlexFiles) -> dg.MaterializeResult:
    """One HTML page per frame work plus ``index.html`` (SPEC section 9; sections of seeds/000).

    Jinja2 with autoescaping; the abstract is de-inverted from the input record the frame points to
    (never stored) with a note on its source; a page is rewritten only when its HTML changed.
    Output: ``data/site/works/<id>.html`` and ``data/site/index.html``.
    """
    records = [json.loads(t) for b in storage.iter_batches("work_records", columns=["record_json"]) for t in b.column("record_json").to_pylist()]
    frame_ptr = {r["id"]: r for r in storage.read_table("frame", ["id", "source_file", "source_locator", "has_abstract"]).to_pylist()}
    abstracts = load_abstracts(openalex.path_of, [(wid, p["source_file"], p["source_locator"]) for wid, p in frame_ptr.items() if p["has_abstract"]])
    heads = storage.read_table("student_heads").to_pylist() if storage.has_table("student_heads") else []
    codex_heads = [h for h in heads if h["teacher"] == "codex"]
    ctx = {"n_codex_labels": max((h["n_train"] for h in codex_heads), default=0),
           "gated_heads": sum(1 for h in codex_heads if h["gate_passed"]), "total_heads": len(codex_heads),
           "constant_heads": {(h["teacher"], h["target"]) for h in heads if h["status"].startswith("constant")}}
    env = environment()
    works_dir = storage.site_dir / "works"
    written = 0
    kinds: Counter[str] = Counter()
    index_rows = []
    for rec in records:
        wid = _safe_id(rec["id"])
        ptr = frame_ptr.get(wid, {})
        html = render_work(env, rec, abstracts.get(wid), f"{ptr.get('source_file')} @ {ptr.get('source_locator')}", ctx)
        written += _write_if_changed(works_dir / f"{wid}.html", html)
        row = index_row(rec)
        kinds[row["classification"].split(":")[0].split(" (")[0]] += 1
        index_rows.append(row)
    index_rows.sort(key=lambda r: (-(r["year"] or 0), r["id"]))
    index_path = storage.site_dir / "index.html"
    _write_if_changed(index_path, render_index(env, index_rows))
    write_static(storage.site_dir)
    example = works_dir / f"{index_rows[0]['id']}.html" if index_rows else index_path
    context.log.info(f"work_pages: {len(records)} pages ({written} written or changed) in {works_dir}; index {index_path}")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(records), "pages_dir": str(works_dir), "pages_written": written,
        "index": dg.MetadataValue.path(str(index_path)), "example_page": dg.MetadataValue.path(str(example)),
        "pages_by_classification": counts_markdown(dict(kinds), "classification"),
        "abstracts_rendered": sum(1 for v in abstracts.values() if v),
    })
