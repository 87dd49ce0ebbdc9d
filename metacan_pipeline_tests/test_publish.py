"""Records, pages and the SPEC section 8 blocking check, on real DuckDB/Parquet and Dagster's executor."""

import json

import dagster as dg
import pyarrow as pa
import pytest

from metacan_pipeline.definitions import build_resources
from metacan_pipeline.frame.entities import EntityLists
from metacan_pipeline.frame.routes import FRAME_SCHEMA, AdmissionRule, frame_row
from metacan_pipeline.openalex.reader import Record
from metacan_pipeline.openalex.works import work_row
from metacan_pipeline.publish.assets import records_may_ship, work_pages, work_records
from metacan_pipeline.publish.pages import environment, render_work
from metacan_pipeline.publish.records import build_record, classification_card, ship_violations
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.assets import HEADS_SCHEMA, MACHINE_SCHEMA, PRED_SCHEMA
from metacan_pipeline.teachers.assets import LABELS_SCHEMA
from metacan_pipeline.vocab import CATEGORICAL_TARGETS, PREDICTION_STATUS, SCORE_ONLY_IMMATURE

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'
ENTITIES = EntityLists({}, {}, {}, {"funder": "f", "source": "s", "institution": "i"})


def _frame_row(openalex_dir, **overrides):
    data = json.loads((openalex_dir / "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json").read_text())["payload"]["results"][0]
    data = {**data, **overrides}
    row, why = frame_row(work_row(Record(data, "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json", "payload.results[0]", None, "W")),
                         ENTITIES, AdmissionRule())
    assert why == "admitted"
    row["frame_build_id"] = "test-run"
    return row


def _label(wid, teacher, categories, status="labelled"):
    return {"work_id": wid, "teacher": teacher, "model": "m", "prompt_version": "v1", "record_view": "title_only",
            "view_hash": "h", "status": status, "categories": categories, "domain": None, "study_design": "observational",
            "genre": "empirical", "about_ca_system": False, "about_ca_topic": False, "confidence": "low",
            "reason": f"because {XSS}", "error": None, "attempts": 1, "call_id": "c1", "label_id": "l1", "run_id": "r",
            "source": "teacher_call", "created_at": None}


def _prediction(wid):
    row = {"id": wid, "model_version": "metacan-v0-hybrid-000000000000", "candidate_categories": [], "consensus_categories": [],
           "category_scores_codex": [0.1] * 9, "category_scores_gemma": [0.2] * 9, "teacher_disagreement_score": 0.9,
           "threshold_uncertainty_score": 0.0, "prediction_status": PREDICTION_STATUS, "gemma_label_status": "labelled"}
    for t in ("about_ca_system", "about_ca_topic"):
        row.update({f"{t}_candidate": False, f"{t}_consensus": False, f"{t}_score_codex": 0.1, f"{t}_score_gemma": 0.1})
    for t, classes in CATEGORICAL_TARGETS.items():
        row.update({f"{t}_scores_codex": [1 / len(classes)] * len(classes), f"{t}_scores_gemma": [1 / len(classes)] * len(classes),
                    f"{t}_codex": None, f"{t}_gemma": None, f"{t}_candidate": None, f"{t}_consensus": None})
    return row


def _machine(wid):
    return {"id": wid, "score_gemma": 0.3, "score_codex": 0.1, "score_spread": 0.2, "validation_status": SCORE_ONLY_IMMATURE,
            "provisional": True, "baseline": True, "maturity_gate_passed": False, "rounds_run": 1, "arm_status": "x",
            "note": "Scores rank; they never assert a category."}


def test_markup_and_script_in_titles_and_abstracts_render_as_text(openalex_dir):
    row = _frame_row(openalex_dir, title=f"Using <b>lme4</b> {XSS}")
    row["venue_name"] = f"Venue {XSS}"
    record = build_record(row, [_label(row["id"], "gemma", ["metaresearch"])], _prediction(row["id"]), _machine(row["id"]), {"k": XSS})
    html = render_work(environment(), record, f"An abstract with <b>markup</b> {XSS}", "file @ x",
                       {"n_codex_labels": 0, "gated_heads": 0, "total_heads": 14})
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert "Using lme4 alert(&#34;x&#34;)" in html  # the title's markup reduced to text
    assert "Venue &lt;script&gt;" in html and "&lt;b&gt;markup&lt;/b&gt;" in html  # other fields escaped
    assert "How this classification was reached" in html and "<details>" in html
    assert "direct label · gemma" in html and "badge\">machine prediction" not in html
    assert "Training rounds run: 1 · maturity gate not passed" in html


def test_ship_violations_and_card_precedence(openalex_dir):
    row = _frame_row(openalex_dir)
    good = build_record(row, [_label(row["id"], "gemma", [])], _prediction(row["id"]), _machine(row["id"]), {})
    assert ship_violations(good) == []
    assert classification_card(good)["kind"] == "direct"
    bad = json.loads(json.dumps(good))
    bad["machine_scores"]["categories"] = ["metaresearch"]
    bad["direct_labels"][0].update(status=None, categories=["sts"])
    bad["prediction"]["candidate_categories"] = ["sts"]
    bad["prediction"]["prediction_status"] = None
    assert len(ship_violations(bad)) == 3
    nothing = build_record(row, [], None, None, {})
    assert classification_card(nothing) == {"kind": "none"}
    html = render_work(environment(), nothing, None, "f", {"n_codex_labels": 0, "gated_heads": 0, "total_heads": 0})
    assert "Not classified yet" in html and "absence is not a negative" in html.lower()


def _write_world(storage: MetacanStorage, openalex_dir, machine_extra=None):
    row = _frame_row(openalex_dir)
    storage.write_table("frame", pa.Table.from_pylist([row], schema=FRAME_SCHEMA))
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist([_label(row["id"], "gemma", ["sts"])], schema=LABELS_SCHEMA))
    storage.write_table("direct_labels_codex", pa.Table.from_pylist([], schema=LABELS_SCHEMA))
    storage.write_table("predictions", pa.Table.from_pylist([_prediction(row["id"])], schema=PRED_SCHEMA))
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    machine = _machine(row["id"])
    schema = MACHINE_SCHEMA
    if machine_extra:
        machine.update(machine_extra)
        schema = MACHINE_SCHEMA.append(pa.field("categories", pa.list_(pa.string())))
    storage.write_table("machine_scores", pa.Table.from_pylist([machine], schema=schema))
    return row["id"]


@pytest.mark.parametrize("violating", [False, True])
def test_blocking_check_stops_pages(tmp_path, openalex_dir, violating):
    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    wid = _write_world(storage, openalex_dir, {"categories": ["metaresearch"]} if violating else None)
    result = dg.materialize([work_records, records_may_ship, work_pages], resources=resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    evals = result.get_asset_check_evaluations()
    assert [e.passed for e in evals] == [not violating]
    page = storage.site_dir / "works" / f"{wid}.html"
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    if violating:
        assert not result.success
        assert evals[0].metadata["violating_records"].value == 1
        assert "work_pages" not in materialized and not page.exists()
    else:
        assert result.success and materialized == {"work_records", "work_pages"}
        assert page.exists() and (storage.site_dir / "index.html").exists()
        record = json.loads((storage.site_dir / "records" / f"{wid}.json").read_text())
        seed_fields = {"id", "doi", "title", "year", "lang", "type", "venue", "topic", "field", "cited_by", "is_retracted",
                       "has_abstract", "ca_institutions", "funders", "keywords", "routes", "retraction", "screen",
                       "direct_labels", "prediction", "machine_scores"}
        assert seed_fields <= set(record)
        assert record["routes"]["ca_aff"] is True and record["machine_scores"]["validation_status"] == SCORE_ONLY_IMMATURE
        # the abstract was re-read from the input record, never stored
        assert "Maximum likelihood or restricted maximum likelihood" in page.read_text()
        # a second render with nothing changed writes no page
        again = dg.materialize([work_records, records_may_ship, work_pages], resources=resources, instance=dg.DagsterInstance.ephemeral())
        md = again.asset_materializations_for_node("work_pages")[0].metadata
        assert md["pages_written"].value == 0
