"""Records, pages and the SPEC section 8 blocking check, on real DuckDB/Parquet and Dagster's executor."""

import datetime as dt
import json

import dagster as dg
import pyarrow as pa
import pytest

from metacan_pipeline.definitions import build_resources
from metacan_pipeline.frame.entities import EntityLists
from metacan_pipeline.frame.routes import AdmissionRule, frame_row
from metacan_pipeline.openalex.reader import Record
from metacan_pipeline.openalex.works import work_row
from metacan_pipeline.publish.abstracts import Abstract
from metacan_pipeline.publish.assets import PagesConfig, records_may_ship, work_pages, work_records
from metacan_pipeline.publish.manifest import (
    ManifestRow,
    newest_render,
    note_rendered,
    page_path_ok,
    pages_to_render,
    read_manifest,
    withdraw,
    works_gone,
)
from metacan_pipeline.publish.pages import (
    environment,
    index_row,
    page_context,
    page_path,
    render_work,
    stream_records,
    write_atomic,
)
from metacan_pipeline.publish.records import (
    SCHEMA_PATH,
    RecordBatches,
    RecordInputError,
    build_record,
    classification_card,
    record_row,
    schema_violation,
    ship_violations,
)
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.publish import RECORDS_SCHEMA
from metacan_pipeline.tables.student import HEADS_SCHEMA, MACHINE_SCHEMA, PRED_SCHEMA
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.vocab import (
    CATEGORICAL_TARGETS,
    CATEGORIES,
    GENRES,
    PREDICTION_STATUS,
    SCORE_ONLY_IMMATURE,
    STUDY_DESIGNS,
)

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'
ENTITIES = EntityLists({}, {}, {}, {"funder": "f", "source": "s", "institution": "i"})


def _frame_row(openalex_dir, **overrides):
    data = json.loads((openalex_dir / "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json").read_text())[
        "payload"
    ]["results"][0]
    data = {**data, **overrides}
    row, why = frame_row(
        work_row(
            Record(data, "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json", "payload.results[0]", None, "W")
        ),
        ENTITIES,
        AdmissionRule(),
    )
    assert why == "admitted"
    row["frame_build_id"] = "test-run"
    return row


def _label(wid, teacher, categories, status="labelled"):
    return {
        "work_id": wid,
        "teacher": teacher,
        "model": "m",
        "prompt_version": "v1",
        "record_view": "title_only",
        "view_hash": "h",
        "status": status,
        "categories": categories,
        "domain": None,
        "study_design": "observational",
        "genre": "empirical",
        "about_ca_system": False,
        "about_ca_topic": False,
        "confidence": "low",
        "reason": f"because {XSS}",
        "error": None,
        "attempts": 1,
        "call_id": "c1",
        "label_id": "l1",
        "run_id": "r",
        "source": "teacher_call",
        "created_at": None,
    }


def _prediction(wid):
    row = {
        "id": wid,
        "model_version": "metacan-v0-hybrid-000000000000",
        "candidate_categories": [],
        "consensus_categories": [],
        "category_scores_codex": [0.1] * 9,
        "category_scores_gemma": [0.2] * 9,
        "teacher_disagreement_score": 0.9,
        "threshold_uncertainty_score": 0.0,
        "prediction_status": PREDICTION_STATUS,
        "gemma_label_status": "labelled",
    }
    for t in ("about_ca_system", "about_ca_topic"):
        row.update({f"{t}_candidate": False, f"{t}_consensus": False, f"{t}_score_codex": 0.1, f"{t}_score_gemma": 0.1})
    for t, classes in CATEGORICAL_TARGETS.items():
        row.update(
            {
                f"{t}_scores_codex": [1 / len(classes)] * len(classes),
                f"{t}_scores_gemma": [1 / len(classes)] * len(classes),
                f"{t}_codex": None,
                f"{t}_gemma": None,
                f"{t}_candidate": None,
                f"{t}_consensus": None,
            }
        )
    return row


def _machine(wid):
    return {
        "id": wid,
        "score_gemma": 0.3,
        "score_codex": 0.1,
        "score_spread": 0.2,
        "validation_status": SCORE_ONLY_IMMATURE,
        "provisional": True,
        "baseline": True,
        "maturity_gate_passed": False,
        "rounds_run": 1,
        "arm_status": "x",
        "note": "Scores rank; they never assert a category.",
    }


CTX = {"n_codex_labels": 0, "gated_heads": 0, "total_heads": 14}
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def test_markup_and_script_in_titles_and_abstracts_render_as_text(openalex_dir):
    row = _frame_row(openalex_dir, title=f"Using <b>lme4</b> {XSS}")
    row["venue_name"] = f"Venue {XSS}"
    record = build_record(
        row, [_label(row["id"], "gemma", ["metaresearch"])], _prediction(row["id"]), _machine(row["id"]), None
    )
    html = render_work(
        environment(), record, Abstract(row["id"], "ok", f"An abstract with <b>markup</b> {XSS}", None, NOW), CTX
    )
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert "Using lme4 alert(&#34;x&#34;)" in html  # the title's markup reduced to text
    assert "Venue &lt;script&gt;" in html and "&lt;b&gt;markup&lt;/b&gt;" in html  # other fields escaped
    assert "How this classification was reached" in html and "<details>" in html
    assert "direct label · gemma" in html and 'badge">machine prediction' not in html
    assert "Training rounds run: 1 · maturity gate not passed" in html
    assert "classifier version <code>metacan-v0-hybrid-000000000000</code>" in html
    assert 'href="../../works/metacan-v0-hybrid-000000000000/W' in html and 'href="../../index.html"' in html


@pytest.mark.parametrize(
    ("abstract", "has_abstract", "expected"),
    [
        (None, True, "Abstracts were not fetched for this build"),
        ("none", False, "its record carried no abstract_inverted_index"),
        ("none", True, "OpenAlex has no abstract for this work (asked at"),
        ("missing", True, "OpenAlex returned no record for this id"),
        ("failed", True, "could not be fetched from OpenAlex just now (2026-11-30 12:00 UTC): HTTP 503"),
        ("ok", True, "Fetched live from OpenAlex at 2026-11-30 12:00 UTC and de-inverted. Abstracts are not stored"),
    ],
)
def test_page_says_honestly_what_happened_to_the_abstract(openalex_dir, abstract, has_abstract, expected):
    row = _frame_row(openalex_dir)
    row["has_abstract"] = has_abstract
    record = build_record(row, [], _prediction(row["id"]), _machine(row["id"]), None)
    value = None
    if abstract is not None:
        asked = None if (abstract == "none" and not has_abstract) else NOW
        value = Abstract(
            row["id"],
            abstract,
            "The text." if abstract == "ok" else None,
            "HTTP 503" if abstract == "failed" else None,
            asked,
        )
    html = render_work(environment(), record, value, CTX)
    assert expected in html
    assert ("<p>The text.</p>" in html) == (abstract == "ok")


def test_schema_vocabularies_are_the_spec_vocabularies_and_it_rejects_what_may_not_ship(openalex_dir):
    schema = json.loads(SCHEMA_PATH.read_text())
    label = schema["properties"]["direct_labels"]["items"]["properties"]
    assert label["categories"]["items"]["enum"] == list(CATEGORIES)
    assert label["study_design"]["enum"][:-1] == list(STUDY_DESIGNS) and label["genre"]["enum"][:-1] == list(GENRES)
    pred = schema["properties"]["prediction"]["properties"]
    assert set(pred) == set(PRED_SCHEMA.names) - {"id", "gemma_label_status"}
    row = _frame_row(openalex_dir)
    lineage = {
        "frame_build_id": "b",
        "frame_run_id": "r",
        "input_kind": "input_file",
        "source_file": "f.json",
        "source_locator": "payload.results[0]",
        "part_run_id": "r",
        "entity_list_versions": "funder=f",
        "lexicon_version": "l",
        "teacher_calls": [
            {
                "teacher": "gemma",
                "model": "m",
                "prompt_version": "v1",
                "prompt_sha": "s",
                "record_view": "title_only",
                "label_status": "labelled",
                "source": "teacher_call",
                "call_id": "c1",
                "request_hash": "h",
                "called_at": "2026-11-30T12:00:00Z",
                "run_id": "r",
                "archive": None,
            }
        ],
        "model_version": "metacan-v0-hybrid-000000000000",
        "student_run_id": "r",
        "machine_round": 1,
        "machine_scores_run_id": "r",
        "machine_validation_status": SCORE_ONLY_IMMATURE,
    }
    good = json.loads(
        json.dumps(
            build_record(
                row, [_label(row["id"], "gemma", ["sts"])], _prediction(row["id"]), _machine(row["id"]), lineage
            )
        )
    )
    assert schema_violation(good) is None
    assert schema_violation({**good, "prediction": None, "machine_scores": None}) is None  # a work nothing scored yet
    breaks = {
        "machine_scores": lambda r: r["machine_scores"].update(categories=["metaresearch"]),
        "ca_aff must be boolean": lambda r: r["routes"].update(ca_aff="yes"),
        "id must match pattern": lambda r: r.update(id="W1/../x"),
        "categories": lambda r: r["direct_labels"][0].update(categories=["not_a_category"]),
        "prediction_status": lambda r: r["prediction"].update(prediction_status="validated"),
        "category_scores_codex": lambda r: r["prediction"].update(category_scores_codex=[0.1] * 8),
        "validation_status": lambda r: r["machine_scores"].update(validation_status="mature"),
        "request_hash": lambda r: r["lineage"]["teacher_calls"][0].pop("request_hash"),
        "model_version must match pattern": lambda r: r["prediction"].update(model_version=".."),
    }
    for version in ("unscored", ".hidden", "-x", "x" * 129, "a/b"):  # what page_path refuses, the schema refuses
        assert "model_version must match pattern" in schema_violation(
            {**good, "prediction": {**good["prediction"], "model_version": version}}
        )
    for expected, breaker in breaks.items():
        bad = json.loads(json.dumps(good))
        breaker(bad)
        message = schema_violation(bad)
        assert message is not None and expected in message, (expected, message)


def test_page_path_refuses_ids_and_versions_that_are_not_names(openalex_dir):
    row = _frame_row(openalex_dir)
    record = build_record(row, [], None, None, None)
    assert page_path(record) == f"works/unscored/{row['id']}.html"
    for wid in ("W1/../../x", "../W1", "W", "w12", "W1\n"):
        with pytest.raises(ValueError, match="refusing to publish work id"):
            page_path({**record, "id": wid})
    for version in ("..", ".hidden", "a/b", "v 1", "x" * 129, "unscored"):
        with pytest.raises(ValueError, match="under model version"):
            page_path({**record, "prediction": {"model_version": version}})


def test_ship_violations_and_card_precedence(openalex_dir):
    row = _frame_row(openalex_dir)
    good = build_record(row, [_label(row["id"], "gemma", [])], _prediction(row["id"]), _machine(row["id"]), None)
    assert ship_violations(good) == []
    assert classification_card(good)["kind"] == "direct"
    bad = json.loads(json.dumps(good))
    bad["machine_scores"]["categories"] = ["metaresearch"]
    bad["direct_labels"][0].update(status=None, categories=["sts"])
    bad["prediction"]["candidate_categories"] = ["sts"]
    bad["prediction"]["prediction_status"] = None
    assert len(ship_violations(bad)) == 3
    nothing = build_record(row, [], None, None, None)
    assert classification_card(nothing) == {"kind": "none"}
    html = render_work(environment(), nothing, None, CTX)
    assert "Not classified yet" in html and "absence is not a negative" in html.lower()
    # a rule label (out of the sampling frame, no model call) is a direct label: it comes before a candidate prediction
    rule = {**_label(row["id"], "gemma", ["insufficient_payload"]), "source": "frame_rule", "call_id": None}
    candidate = {**_prediction(row["id"]), "candidate_categories": ["sts"]}
    card = classification_card(build_record(row, [rule], candidate, _machine(row["id"]), None))
    assert card["kind"] == "direct" and card["labels"][0]["source"] == "frame_rule"
    # scored, and no category called on either side: a machine prediction, never "not classified yet"
    scored = build_record(row, [], _prediction(row["id"]), _machine(row["id"]), None)
    assert classification_card(scored) == {
        "kind": "no_category",
        "categories": [],
        "model_version": "metacan-v0-hybrid-000000000000",
    }
    html = render_work(environment(), scored, None, CTX)
    assert "Machine prediction (no category)" in html and "Not classified yet" not in html
    assert (index_row(scored)["source"], index_row(scored)["mode"]) == ("classifier", None)


def _write_world(storage: MetacanStorage, openalex_dir, machine_extra=None):
    row = _frame_row(openalex_dir)
    storage.write_table("frame", pa.Table.from_pylist([row], schema=FRAME_SCHEMA))
    storage.write_table(
        "direct_labels_gemma", pa.Table.from_pylist([_label(row["id"], "gemma", ["sts"])], schema=LABELS_SCHEMA)
    )
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


def _pages_run(resources, api, **config):
    run_config = dg.RunConfig({"work_pages": PagesConfig(openalex_api_url=api.base_url, **config)})
    return dg.materialize(
        [work_records, records_may_ship, work_pages],
        resources=resources,
        run_config=run_config,
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


@pytest.mark.parametrize("violating", [False, True])
def test_blocking_check_stops_pages(tmp_path, openalex_dir, openalex_api, violating):
    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    wid = _write_world(storage, openalex_dir, {"categories": ["metaresearch"]} if violating else None)
    result = _pages_run(resources, openalex_api)
    evals = result.get_asset_check_evaluations()
    assert [e.passed for e in evals] == [not violating]
    page = storage.site_dir / "works" / "metacan-v0-hybrid-000000000000" / f"{wid}.html"
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    if violating:
        assert not result.success
        assert evals[0].metadata["violating_records"].value == 1
        assert any("schema" in v and "machine_scores" in v for v in evals[0].metadata["violations"].value)
        assert "work_pages" not in materialized and not page.exists()
        assert not (storage.site_dir / "records" / f"{wid}.json").exists()  # nothing the check refused is published
        assert openalex_api.hits == []
    else:
        assert result.success and materialized == {"work_lineage", "work_records", "work_pages"}
        assert page.exists() and (storage.site_dir / "index.html").exists() and (storage.site_dir / "index.js").exists()
        record = json.loads((storage.site_dir / "records" / f"{wid}.json").read_text())
        assert schema_violation(record) is None
        assert (
            record["routes"]["ca_aff"] is True and record["machine_scores"]["validation_status"] == SCORE_ONLY_IMMATURE
        )
        # the abstract was fetched live from (a loopback stub of) OpenAlex in one call, and never stored
        assert "Maximum likelihood or restricted maximum likelihood" in page.read_text()
        assert len(openalex_api.hits) == 1 and openalex_api.hits[0]["filter"] == f"ids.openalex:{wid}"
        md = result.asset_materializations_for_node("work_pages")[0].metadata
        assert md["pages_rendered"].value == 1 and md["openalex_abstract_calls"].value == 1
        with storage.connect(read_only=True) as con:
            assert con.execute("SELECT abstract_status FROM page_manifest").fetchall() == [("ok",)]
        # a second render with nothing changed writes no page and asks OpenAlex nothing
        before = page.stat().st_mtime_ns
        again = _pages_run(resources, openalex_api)
        md = again.asset_materializations_for_node("work_pages")[0].metadata
        assert (
            md["pages_rendered"].value == 0
            and md["pages_unchanged"].value == 1
            and md["index_rewritten"].value is False
        )
        assert len(openalex_api.hits) == 1 and page.stat().st_mtime_ns == before


def test_pages_rerender_only_changed_records_and_say_when_the_fetch_failed(tmp_path, openalex_dir, openalex_api):
    """Incremental rendering: a changed label re-renders that page only; an unreachable OpenAlex gives an
    honest 'could not be fetched just now' page, re-tried only when asked."""
    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    wid = _write_world(storage, openalex_dir)
    page = storage.site_dir / "works" / "metacan-v0-hybrid-000000000000" / f"{wid}.html"
    dead = type("Dead", (), {"base_url": "http://127.0.0.1:9"})()  # discard port: connection refused
    assert _pages_run(resources, dead).success
    assert "could not be fetched from OpenAlex just now" in page.read_text()
    # unchanged record, default config: not re-rendered, the failure stays visible
    md = _pages_run(resources, openalex_api).asset_materializations_for_node("work_pages")[0].metadata
    assert md["pages_rendered"].value == 0 and openalex_api.hits == []
    # asked to retry failed fetches: re-rendered with the abstract
    md = (
        _pages_run(resources, openalex_api, retry_failed_abstracts=True)
        .asset_materializations_for_node("work_pages")[0]
        .metadata
    )
    assert md["pages_rendered"].value == 1 and "Maximum likelihood" in page.read_text()
    # a changed direct label changes the record: that page is rendered again
    storage.write_table(
        "direct_labels_gemma", pa.Table.from_pylist([_label(wid, "gemma", ["open_science"])], schema=LABELS_SCHEMA)
    )
    md = _pages_run(resources, openalex_api).asset_materializations_for_node("work_pages")[0].metadata
    assert md["pages_rendered"].value == 1 and "Open science" in page.read_text()


def test_pages_ask_openalex_once_per_50_works(tmp_path, openalex_dir, openalex_api):
    """120 frame works with abstracts: the pages asset sends 3 batched calls (50, 50, 20 ids), not 120."""
    from .openalex_stub import real_works

    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    ids = sorted(real_works())[:120]
    rows = [{**_frame_row(openalex_dir), "id": wid, "has_abstract": True} for wid in ids]
    storage.write_table("frame", pa.Table.from_pylist(rows, schema=FRAME_SCHEMA))
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist([], schema=LABELS_SCHEMA))
    storage.write_table("predictions", pa.Table.from_pylist([_prediction(w) for w in ids], schema=PRED_SCHEMA))
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    storage.write_table("machine_scores", pa.Table.from_pylist([_machine(w) for w in ids], schema=MACHINE_SCHEMA))
    result = _pages_run(resources, openalex_api)
    assert result.success
    sizes = [len(h["filter"].split(":", 1)[1].split("|")) for h in openalex_api.hits]
    assert sizes == [50, 50, 20] and all(h["select"] == "id,abstract_inverted_index" for h in openalex_api.hits)
    md = result.asset_materializations_for_node("work_pages")[0].metadata
    assert md["pages_rendered"].value == 120 and md["openalex_abstract_calls"].value == 3
    with storage.connect(read_only=True) as con:
        statuses = dict(con.execute("SELECT abstract_status, count(*) FROM page_manifest GROUP BY ALL").fetchall())
    with_text = sum(1 for w in ids if real_works()[w].get("abstract_inverted_index"))
    assert statuses.get("ok", 0) == with_text and sum(statuses.values()) == 120


def test_the_site_follows_the_frame_and_the_renderer(tmp_path, openalex_dir, openalex_api, monkeypatch):
    """A work that leaves the frame leaves the site; a manifest row whose path was tampered with does not
    hide a missing page; a changed template re-renders every page; a duplicated work stops the records."""
    from metacan_pipeline.publish import assets

    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    first = _frame_row(openalex_dir)
    second = {**first, "id": "W2"}
    storage.write_table("frame", pa.Table.from_pylist([first, second], schema=FRAME_SCHEMA))
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist([], schema=LABELS_SCHEMA))
    storage.write_table(
        "predictions", pa.Table.from_pylist([_prediction(first["id"]), _prediction("W2")], schema=PRED_SCHEMA)
    )
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    storage.write_table(
        "machine_scores", pa.Table.from_pylist([_machine(first["id"]), _machine("W2")], schema=MACHINE_SCHEMA)
    )
    pages = lambda **cfg: (
        _pages_run(resources, openalex_api, **cfg).asset_materializations_for_node("work_pages")[0].metadata
    )  # noqa: E731
    assert pages()["pages_rendered"].value == 2
    site = storage.site_dir
    w2_page = site / "works" / "metacan-v0-hybrid-000000000000" / "W2.html"
    assert w2_page.exists() and (site / "records" / "W2.json").exists()
    # a manifest path pointing at another existing file, and the real page deleted: rendered again
    with storage.connect() as con:
        con.execute("UPDATE page_manifest SET page_path = '../../../../etc/passwd' WHERE id = 'W2'")
    w2_page.unlink()
    assert pages()["pages_rendered"].value == 1 and w2_page.exists()
    # the renderer changed (a template edit): every page is rendered again without being asked
    monkeypatch.setattr(assets, "renderer_fingerprint", lambda: "a-new-template")
    assert pages()["pages_rendered"].value == 2
    # W2 leaves the frame: its record and page go, the index forgets it
    storage.write_table("frame", pa.Table.from_pylist([first], schema=FRAME_SCHEMA))
    md = pages()
    assert md["pages_withdrawn"].value == 1 and md["pages_rendered"].value == 0
    assert (
        not w2_page.exists()
        and not (site / "records" / "W2.json").exists()
        and "W2.html" not in (site / "index.html").read_text()
    )
    # the same work twice: the records stop with its id, and the site keeps what it had
    storage.write_table("frame", pa.Table.from_pylist([first, first], schema=FRAME_SCHEMA))
    result = _pages_run(resources, openalex_api)
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert not result.success and f"work {first['id']} appears twice" in failure
    assert (site / "records" / f"{first['id']}.json").exists()


def test_pages_to_render_names_each_reason_a_page_is_rendered_again(tmp_path):
    site = tmp_path / "site"
    for wid in ("W1", "W2", "W3", "W4"):
        write_atomic(site / "works" / "v1" / f"{wid}.html", "page")
        write_atomic(site / "records" / f"{wid}.json", "{}")
    hashes = {"W1": "h1", "W2": "h2-new", "W3": "h3", "W4": "h4", "W5": "h5"}
    manifest = {
        "W1": ManifestRow("h1", "r", "works/v1/W1.html", "ok"),  # unchanged
        "W2": ManifestRow("h2", "r", "works/v1/W2.html", "ok"),  # record changed
        "W3": ManifestRow("h3", "old", "works/v1/W3.html", "ok"),  # renderer changed
        "W4": ManifestRow("h4", "r", "works/v1/W4.html", "failed"),  # abstract fetch failed last time
        "W9": ManifestRow("h9", "r", "works/v1/W9.html", "ok"),  # left the frame
    }
    assert pages_to_render(hashes, manifest, "r", site) == {"W2", "W3", "W5"}
    assert pages_to_render(hashes, manifest, "r", site, retry_abstracts=True) == {"W2", "W3", "W4", "W5"}
    assert pages_to_render(hashes, manifest, "r", site, rerender_all=True) == set(hashes)
    (site / "records" / "W1.json").unlink()  # a record file gone: rendered again
    assert "W1" in pages_to_render(hashes, manifest, "r", site)
    traversal = {**manifest, "W1": ManifestRow("h1", "r", "../../etc/passwd", "ok")}
    assert not page_path_ok("W1", "../../etc/passwd") and "W1" in pages_to_render(hashes, traversal, "r", site)
    assert works_gone(hashes, manifest) == {"W9": "works/v1/W9.html"}
    with pytest.raises(ValueError, match="refusing to publish work id"):
        pages_to_render({"W1/../x": "h"}, {}, "r", site)


def test_manifest_upsert_and_withdrawal_on_a_real_catalog(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    at = dt.datetime(2026, 1, 2, 3, 4, 5)
    row = {"record_hash": "h", "renderer": "r", "abstract_status": "ok", "rendered_at": at, "run_id": "run"}
    rows = [{"id": wid, "page_path": f"works/v1/{wid}.html", **row} for wid in ("W1", "W2")]
    assert note_rendered(storage, rows) == 2 and note_rendered(storage, rows[:1]) == 1  # the upsert replaces W1
    assert read_manifest(storage) == {w: ManifestRow("h", "r", f"works/v1/{w}.html", "ok") for w in ("W1", "W2")}
    assert newest_render(storage) == at
    for path in ("works/v1/W2.html", "works/v0/W2.html", "records/W2.json"):
        write_atomic(storage.site_dir / path, "x")
    assert withdraw(storage, {"W2": "works/v1/W2.html"}) == 1 and withdraw(storage, {}) == 0
    assert set(read_manifest(storage)) == {"W1"}
    assert not (storage.site_dir / "works/v1/W2.html").exists() and not (storage.site_dir / "records/W2.json").exists()
    assert (storage.site_dir / "works/v0/W2.html").exists()  # an earlier version's permalink stays


def test_record_batches_refuse_bad_and_repeated_ids_and_count_changes(openalex_dir):
    row = _frame_row(openalex_dir)
    wid = row["id"]
    inputs = {"work": row, "labels": [_label(wid, "gemma", ["sts"])], "pred": None, "machine": None, "lineage": None}
    first = record_row(inputs)
    assert json.loads(first["record_json"])["id"] == wid and len(first["record_hash"]) == 16
    unchanged = RecordBatches({wid: first["record_hash"]})
    assert unchanged.table([inputs]).num_rows == 1 and unchanged.changed == 0 and unchanged.preview == [first]
    assert RecordBatches({}).table([inputs]).num_rows == 1
    with pytest.raises(RecordInputError, match=f"work {wid} appears twice"):
        RecordBatches({}).table([inputs, inputs])
    with pytest.raises(RecordInputError, match="which is not"):
        RecordBatches({}).table([{**inputs, "work": {**row, "id": "../W1"}}])


def test_page_context_reads_the_sample_teachers_heads():
    heads = [
        {"teacher": "codex", "target": "sts", "n_train": 40, "gate_passed": True, "status": "fitted"},
        {"teacher": "codex", "target": "x", "n_train": 40, "gate_passed": False, "status": "constant: one class"},
        {"teacher": "gemma", "target": "sts", "n_train": 900, "gate_passed": True, "status": "fitted"},
    ]
    assert page_context(heads, "codex") == {
        "n_codex_labels": 40,
        "gated_heads": 1,
        "total_heads": 2,
        "constant_heads": {("codex", "x")},
    }
    assert page_context(heads, "gemma")["n_codex_labels"] == 900 and page_context([], "codex")["total_heads"] == 0


def test_stream_records_hands_over_the_chosen_works_in_chunks(tmp_path, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    base = _frame_row(openalex_dir)
    rows = [
        record_row({"work": {**base, "id": f"W{i}"}, "labels": [], "pred": None, "machine": None, "lineage": None})
        for i in range(1, 8)
    ]
    storage.write_table("work_records", pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA))
    chunks = []
    index = stream_records(storage, {"W2", "W3", "W5", "W7"}, chunks.append, chunk_rows=2)
    # batches of two records: a chunk is handed over once it holds two works, the rest at the end
    assert [[c[0] for c in chunk] for chunk in chunks] == [["W2", "W3"], ["W5", "W7"]]
    assert all(c[3] == next(r["record_hash"] for r in rows if r["id"] == c[0]) for chunk in chunks for c in chunk)
    assert [r["id"] for r in index] == sorted(r["id"] for r in rows) and len(index) == 7
