"""Bad and awkward input for the student (issue 5, SPEC sections 5-8): each test states what SHOULD happen.

Same pattern as :mod:`test_student`: a synthetic frame, sample design and teacher label tables in a
temporary data folder, run with ``dg.materialize`` (real Parquet, DuckDB, scikit-learn, Dagster).
"""

import json
import uuid

import pyarrow as pa
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.assets import machine_scores, predictions, student_heads
from metacan_pipeline.student.holdout import venue_held_out, venue_key
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.teachers.batches import label_batches

from .test_student import N_WORKS, _sql, run, write_inputs


@pytest.fixture()
def storage(tmp_path) -> MetacanStorage:
    return MetacanStorage(data_dir=str(tmp_path / "data"))


def _root_error(result) -> str:
    """The innermost error message of the first failed step (what the operator reads)."""
    for e in result.all_events:
        if e.is_step_failure:
            err = e.event_specific_data.error
            while err.cause is not None:
                err = err.cause
            return f"{err.cls_name}: {err.message}"
    return ""


def _labels(storage, teacher):
    return storage.read_table(f"direct_labels_{teacher}").to_pylist()


def _write_labels(storage, teacher, rows):
    storage.write_table(f"direct_labels_{teacher}", pa.Table.from_pylist(rows, schema=LABELS_SCHEMA))


@pytest.mark.parametrize("bad", [float("nan"), None], ids=["nan", "null"])
def test_bad_design_weight_is_refused_naming_the_work(storage, bad):
    """A NaN or NULL design weight of an in-sample work: a clear error naming sample_design and the work,
    not sklearn's 'Input sample_weight contains NaN' or a TypeError inside fit_categorical."""
    write_inputs(storage)
    sd = storage.read_table("sample_design").to_pylist()
    sd[0]["design_weight"] = bad
    storage.write_table("sample_design", pa.Table.from_pylist(sd))
    result = run(storage, student_heads, raise_on_error=False)
    assert not result.success
    msg = _root_error(result)
    assert "design_weight" in msg and sd[0]["id"] in msg, msg


def test_path_with_a_quote_does_not_break_machine_scores(tmp_path):
    """A data folder named O'Brien: propose_next_batch pasted the Parquet globs into SQL unquoted
    (ParserException after machine_scores and the round's holdout scores were already written)."""
    storage = MetacanStorage(data_dir=str(tmp_path / "O'Brien" / "data"))
    write_inputs(storage)
    md = run(storage, machine_scores, label_batches).asset_materializations_for_node("machine_scores")[0].metadata
    assert md["rounds_run"].value == 1
    assert _sql(storage, "SELECT count(*) FROM machine_rounds")[0][0] == 1
    assert _sql(storage, "SELECT count(*) FROM label_batches WHERE batch = 'active_learning'")[0][0] == 25


def _move_holdout_works(storage, n=3) -> list[str]:
    """Give ``n`` frozen-holdout works a venue the holdout rule does not hold out (OpenAlex re-assigns a
    source, or a work without a venue gets one), and add a new gemma label so the student retrains."""
    held = sorted(r[0] for r in _sql(storage, "SELECT work_id FROM student_holdout"))
    free = next(
        f"https://openalex.org/S{k}" for k in range(9000, 10000) if not venue_held_out(f"https://openalex.org/S{k}")
    )
    moved = held[:n]
    frame = storage.read_table("frame").to_pylist()
    for r in frame:
        if r["id"] in moved:
            r["venue_id"] = free
    storage.write_table("frame", pa.Table.from_pylist(frame))
    g = _labels(storage, "gemma")
    g[1]["label_id"] = "relabelled"
    _write_labels(storage, "gemma", g)
    return moved


def test_frozen_holdout_work_whose_venue_changed_never_trains_the_heads(storage):
    """The frozen set is the holdout of every metric: a work in it must stay out of training even when its
    venue changes. Before: trained on it, then the blocking holdout check failed on every run."""
    write_inputs(storage)
    run(storage, student_heads)
    moved = _move_holdout_works(storage)
    result = run(storage, student_heads, raise_on_error=False)
    assert result.success, _root_error(result)
    trained = {r[0] for r in _sql(storage, "SELECT work_id FROM student_training_set")}
    assert not trained & set(moved)


def test_frozen_holdout_work_whose_venue_changed_never_trains_the_machine_arms(storage):
    """machine_scores: the arms trained on works whose holdout scores then fed the maturity gate (no check
    catches it there)."""
    write_inputs(storage)
    run(storage, machine_scores)
    held = {r[0] for r in _sql(storage, "SELECT work_id FROM student_holdout")}
    _move_holdout_works(storage)
    run(storage, machine_scores)
    labels = json.loads(_sql(storage, "SELECT training_labels FROM machine_rounds WHERE round = 2")[0][0])
    assert labels["gemma"] == N_WORKS - len(held)  # gemma labels every work: all but the frozen holdout


def test_absent_about_ca_labels_do_not_deflate_the_quota_rate(storage):
    """A teacher source may declare about_ca_* absent (NULL). The design-weighted rate (and so k) must be
    over the labels that carry the field; before, NULL counted as negative: rate 0.1 for a true 0.2, k halved."""
    write_inputs(storage)
    codex = _labels(storage, "codex")
    for i, r in enumerate(codex):
        if i % 2:
            r["about_ca_topic"] = None
    _write_labels(storage, "codex", codex)
    run(storage, student_heads, predictions)
    known = [r["about_ca_topic"] for r in codex if r["about_ca_topic"] is not None]
    true_rate = sum(known) / len(known)  # equal design weights
    ((rate, k),) = _sql(storage, "SELECT rate, k FROM prediction_thresholds WHERE target = 'about_ca_topic'")
    assert rate == pytest.approx(true_rate) and k == round(true_rate * N_WORKS)


def test_absent_gemma_about_ca_is_not_a_disagreement(storage):
    """teacher_disagreement_score is max |codex score - gemma label| over the targets gemma labelled: an
    absent (NULL) gemma about_ca value is unknown, not a 0 (SPEC section 8: absence is not a negative)."""
    write_inputs(storage)
    g = _labels(storage, "gemma")
    for r in g:
        r["about_ca_topic"] = r["about_ca_system"] = None
    _write_labels(storage, "gemma", g)
    run(storage, student_heads, predictions)
    gem = {r["work_id"]: r for r in g}
    for p in storage.read_table("predictions").to_pylist():
        cats = gem[p["id"]]["categories"]
        expected = max(abs(s - int(c in cats)) for s, c in zip(p["category_scores_codex"], _categories(), strict=False))
        assert p["teacher_disagreement_score"] == pytest.approx(expected), p["id"]


def _categories():
    from metacan_pipeline.vocab import CATEGORIES

    return CATEGORIES


def test_duplicate_labels_of_one_work_do_not_pass_the_support_gate(storage):
    """12 works labelled research_integrity, each stored twice per teacher: 12 positives, not 24. Before,
    the gate counted rows and passed (24 >= 20) with 12 works of support."""
    write_inputs(storage)
    for teacher in ("codex", "gemma"):
        rows = _labels(storage, teacher)
        keep = {r["work_id"] for r in rows if "research_integrity" in r["categories"]}
        keep = set(sorted(keep)[:12])
        for r in rows:
            if r["work_id"] not in keep:
                r["categories"] = [c for c in r["categories"] if c != "research_integrity"]
        rows += [{**r, "label_id": uuid.uuid4().hex} for r in rows if r["work_id"] in keep]
        _write_labels(storage, teacher, rows)
    run(storage, student_heads)
    ((positives, passed, reason),) = _sql(
        storage,
        "SELECT positives, gate_passed, gate_reason FROM student_heads "
        "WHERE teacher = 'codex' AND target = 'research_integrity'",
    )
    assert positives == 12 and passed is False and "codex positives 12 < 20" in reason


def test_teacher_with_only_failures_leaves_its_heads_constant(storage):
    """Every codex call failed: no codex training data. The gemma heads still train, the codex heads are
    constant and fail the gate (scores, no decision); before, a TfidfTransformer '0 sample(s)' crash."""
    write_inputs(storage)
    codex = _labels(storage, "codex")
    for r in codex:
        r.update(status="failed", categories=None, domain=None, study_design=None, genre=None, error="timeout")
    _write_labels(storage, "codex", codex)
    result = run(storage, student_heads, predictions, raise_on_error=False)
    assert result.success, _root_error(result)
    heads = {(r["teacher"], r["target"]): r for r in storage.read_table("student_heads").to_pylist()}
    assert heads[("gemma", "metaresearch")]["status"] == "trained"
    assert heads[("codex", "metaresearch")]["gate_passed"] is False
    preds = storage.read_table("predictions").to_pylist()
    assert len(preds) == N_WORKS and all(p["consensus_categories"] == [] for p in preds)


def test_teacher_with_only_failures_does_not_crash_machine_scores(storage):
    write_inputs(storage)
    codex = _labels(storage, "codex")
    for r in codex:
        r.update(status="failed", categories=None, domain=None, study_design=None, genre=None, error="timeout")
    _write_labels(storage, "codex", codex)
    result = run(storage, machine_scores, raise_on_error=False)
    assert result.success, _root_error(result)
    assert len(storage.read_table("machine_scores")) == N_WORKS


@pytest.mark.parametrize("case", ["empty_frame", "no_labelled_rows"])
def test_nothing_to_train_on_is_a_clear_error(storage, case):
    """An empty frame, or no labelled teacher call at all: an error that says there is nothing to train on
    (naming the label tables), not scikit-learn's 'empty vocabulary; perhaps the documents only contain stop words'."""
    write_inputs(storage)
    if case == "empty_frame":
        storage.write_table("frame", storage.read_table("frame").slice(0, 0))
    else:
        for teacher in ("codex", "gemma"):
            rows = _labels(storage, teacher)
            for r in rows:
                r.update(status="failed", categories=None, error="timeout")
            _write_labels(storage, teacher, rows)
    result = run(storage, student_heads, raise_on_error=False)
    assert not result.success
    msg = _root_error(result)
    assert "empty vocabulary" not in msg and "direct_labels_" in msg, msg


def test_work_ids_with_quotes_and_non_ascii_are_decided_by_score_then_id(storage):
    """Ids with a quote and non-ASCII characters reach the quota SQL as literals: the decisions must still
    be exactly the top k by (score desc, id asc)."""
    frame = write_inputs(storage)
    rename = {
        r["id"]: f"W{r['id'][1:]}" + ("O'Brien" if i % 3 == 0 else "é" if i % 3 == 1 else "")
        for i, r in enumerate(frame)
    }
    for name in ("frame", "sample_design"):
        t = storage.read_table(name).to_pylist()
        for r in t:
            r["id"] = rename[r["id"]]
        storage.write_table(name, pa.Table.from_pylist(t))
    for teacher in ("codex", "gemma"):
        rows = _labels(storage, teacher)
        for r in rows:
            r["work_id"] = rename[r["work_id"]]
        _write_labels(storage, teacher, rows)
    run(storage, student_heads, predictions)
    scores = {r["id"]: r["codex__metaresearch"] for r in storage.read_table("student_scores").to_pylist()}
    ((k, boundary),) = _sql(storage, "SELECT k, boundary_id FROM prediction_thresholds WHERE target = 'metaresearch'")
    order = sorted(scores, key=lambda w: (-scores[w], w.encode()))
    assert boundary == order[k - 1]
    gemma = {r["work_id"]: r["categories"] for r in _labels(storage, "gemma")}
    decided = set(order[:k])
    for p in storage.read_table("predictions").to_pylist():
        assert ("metaresearch" in p["candidate_categories"]) == (p["id"] in decided or "metaresearch" in gemma[p["id"]])


def test_holdout_venue_rule_applies_to_a_null_venue_work(storage):
    """A work without a venue is its own group: present in the frozen holdout only if its no-venue key is held out."""
    frame = write_inputs(storage)
    f = storage.read_table("frame").to_pylist()
    for r in f[:40]:
        r["venue_id"] = None
        r["venue_name"] = None
        r["title_text"] = None
    storage.write_table("frame", pa.Table.from_pylist(f))
    result = run(storage, student_heads, raise_on_error=False)
    assert result.success, _root_error(result)
    held = {r[0] for r in _sql(storage, "SELECT work_id FROM student_holdout")}
    assert held == {r["id"] for r in f if venue_held_out(venue_key(r["id"], r["venue_id"]))}
    assert len(frame) == N_WORKS
