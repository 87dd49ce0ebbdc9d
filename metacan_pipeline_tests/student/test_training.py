"""Tests of metacan_pipeline.student.training (student/assets.py before the split): fitting and evaluating the
heads, and the frozen holdout."""

import hashlib
import shutil
import uuid

import dagster as dg
import joblib
import numpy as np
import pyarrow as pa
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.assets import predictions, student_heads
from metacan_pipeline.student.holdout import venue_held_out, venue_key
from metacan_pipeline.student.models import ModelVersionError, load_published, model_path
from metacan_pipeline.student.training import TrainingInputs, design_weights
from metacan_pipeline_tests.builders.common import root_error, sql
from metacan_pipeline_tests.builders.student import N_WORKS, move_holdout_works, run_student, write_inputs
from metacan_pipeline_tests.builders.teachers import labels, write_labels


@pytest.mark.parametrize("bad", [float("nan"), None], ids=["nan", "null"])
def test_bad_design_weight_is_refused_naming_the_work(storage, bad):
    """A NaN or NULL design weight of an in-sample work: a clear error naming sample_design and the work,
    not sklearn's 'Input sample_weight contains NaN' or a TypeError inside fit_categorical."""
    write_inputs(storage)
    sd = storage.read_table("sample_design").to_pylist()
    sd[0]["design_weight"] = bad
    storage.write_table("sample_design", pa.Table.from_pylist(sd))
    result = run_student(storage, student_heads, raise_on_error=False)
    assert not result.success
    msg = root_error(result)
    assert "design_weight" in msg and sd[0]["id"] in msg, msg


def test_design_weights_reads_the_rows_of_the_labelled_works_only(storage):
    """The sampling frame is never read whole into Python: the rows of the works asked for, as the table has them."""
    write_inputs(storage)
    table = {r["id"]: r for r in storage.read_table("sample_design", ["id", "in_sample", "design_weight"]).to_pylist()}
    asked = set(sorted(table)[::3]) | {"W0-not-in-the-frame"}
    got = design_weights(storage, asked)
    assert len(table) > len(got) == len(asked) - 1 > 0
    assert got == {wid: table[wid] for wid in asked if wid in table}
    assert any(r["in_sample"] for r in got.values()) and any(not r["in_sample"] for r in got.values())
    assert design_weights(storage, set()) == {}


def test_training_inputs_build_the_text_of_each_labelled_work_once():
    """``texts`` is built once per inputs: the holdout metrics look up one text per evaluated label, and a dict
    rebuilt on each lookup made them quadratic (2,400 s of a 200,000-label student stage)."""
    frame_info = {f"W{i}": {"text": f"title {i}", "venue_key": "venue:S1"} for i in range(5)}
    inputs = TrainingInputs({}, {}, frame_info, set(), 0)
    assert inputs.texts is inputs.texts
    assert inputs.texts == {f"W{i}": f"title {i}" for i in range(5)}


def test_frozen_holdout_work_whose_venue_changed_never_trains_the_heads(storage):
    """The frozen set is the holdout of every metric: a work in it must stay out of training even when its
    venue changes, and the blocking holdout check then passes."""
    write_inputs(storage)
    run_student(storage, student_heads)
    moved = move_holdout_works(storage)
    result = run_student(storage, student_heads, raise_on_error=False)
    assert result.success, root_error(result)
    trained = {r[0] for r in sql(storage, "SELECT work_id FROM student_training_set")}
    assert not trained & set(moved)


def test_duplicate_labels_of_one_work_do_not_pass_the_support_gate(storage):
    """12 works labelled research_integrity, each stored twice per teacher: 12 positives, not 24, so the gate (20)
    counts works, not rows, and does not pass."""
    write_inputs(storage)
    for teacher in ("codex", "gemma"):
        rows = labels(storage, teacher)
        keep = {r["work_id"] for r in rows if "research_integrity" in r["categories"]}
        keep = set(sorted(keep)[:12])
        for r in rows:
            if r["work_id"] not in keep:
                r["categories"] = [c for c in r["categories"] if c != "research_integrity"]
        rows += [{**r, "label_id": uuid.uuid4().hex} for r in rows if r["work_id"] in keep]
        write_labels(storage, teacher, rows)
    run_student(storage, student_heads)
    ((positives, passed, reason),) = sql(
        storage,
        "SELECT positives, gate_passed, gate_reason FROM student_heads "
        "WHERE teacher = 'codex' AND target = 'research_integrity'",
    )
    assert positives == 12 and passed is False and "codex positives 12 < 20" in reason


def test_teacher_with_only_failures_leaves_its_heads_constant(storage):
    """Every codex call failed: no codex training data. The gemma heads still train, the codex heads are
    constant and fail the gate (scores, no decision); before, a TfidfTransformer '0 sample(s)' crash."""
    write_inputs(storage)
    codex = labels(storage, "codex")
    for r in codex:
        r.update(status="failed", categories=None, domain=None, study_design=None, genre=None, error="timeout")
    write_labels(storage, "codex", codex)
    result = run_student(storage, student_heads, predictions, raise_on_error=False)
    assert result.success, root_error(result)
    heads = {(r["teacher"], r["target"]): r for r in storage.read_table("student_heads").to_pylist()}
    assert heads[("gemma", "metaresearch")]["status"] == "trained"
    assert heads[("codex", "metaresearch")]["gate_passed"] is False
    preds = storage.read_table("predictions").to_pylist()
    assert len(preds) == N_WORKS and all(p["consensus_categories"] == [] for p in preds)


@pytest.mark.parametrize("case", ["empty_frame", "no_labelled_rows"])
def test_nothing_to_train_on_is_a_clear_error(storage, case):
    """An empty frame, or no labelled teacher call at all: an error that says there is nothing to train on
    (naming the label tables), not scikit-learn's 'empty vocabulary; perhaps the documents only contain stop words'."""
    write_inputs(storage)
    if case == "empty_frame":
        storage.write_table("frame", storage.read_table("frame").slice(0, 0))
    else:
        for teacher in ("codex", "gemma"):
            rows = labels(storage, teacher)
            for r in rows:
                r.update(status="failed", categories=None, error="timeout")
            write_labels(storage, teacher, rows)
    result = run_student(storage, student_heads, raise_on_error=False)
    assert not result.success
    msg = root_error(result)
    assert "empty vocabulary" not in msg and "direct_labels_" in msg, msg


def test_holdout_never_reaches_training(storage):
    frame = write_inputs(storage)
    result = run_student(storage, student_heads)
    assert all(c.passed for c in result.get_asset_check_evaluations())
    holdout = {r[0] for r in sql(storage, "SELECT work_id FROM student_holdout")}
    expected = {r["id"] for r in frame if venue_held_out(venue_key(r["id"], r["venue_id"]))}
    assert holdout == expected and 40 < len(holdout) < 160  # whole venues, about a fifth of 480 works
    training = sql(storage, "SELECT teacher, work_id FROM student_training_set")
    assert {t for t, _ in training} == {"gemma", "codex"}
    assert not {w for _, w in training} & holdout
    assert len([w for t, w in training if t == "gemma"]) == N_WORKS - len(holdout)
    v1 = result.asset_materializations_for_node("student_heads")[0].metadata["model_version"].value

    # flip every holdout label: the models (trained without them) are bit-identical, the version is new
    write_inputs(storage, flip_holdout=True)
    v2 = (
        run_student(storage, student_heads)
        .asset_materializations_for_node("student_heads")[0]
        .metadata["model_version"]
        .value
    )
    assert v1 != v2
    b1, b2 = joblib.load(model_path(storage, v1)), joblib.load(model_path(storage, v2))
    for teacher in ("gemma", "codex"):
        for target in ("metaresearch", "about_ca_topic"):
            assert np.array_equal(
                b1.heads[teacher][target].estimator_.coef_, b2.heads[teacher][target].estimator_.coef_
            )
    # ... while the holdout metrics see the flipped labels
    auroc = dict(sql(storage, "SELECT teacher, auroc FROM student_heads WHERE target = 'metaresearch'"))
    assert auroc["gemma"] == pytest.approx(0.0) and auroc["codex"] == pytest.approx(
        0.0
    )  # the ranking, exactly inverted


def test_frozen_holdout_does_not_move_when_the_frame_grows(storage):
    write_inputs(storage)
    run_student(storage, student_heads)
    before = sql(storage, "SELECT work_id, frozen_at FROM student_holdout ORDER BY work_id")
    frame = storage.read_table("frame").to_pylist()
    extra = [{**frame[i], "id": f"W9{i:05d}"} for i in range(100)]  # new works, in the same venues
    storage.write_table("frame", pa.Table.from_pylist(frame + extra))
    run_student(storage, student_heads)
    assert sql(storage, "SELECT work_id, frozen_at FROM student_holdout ORDER BY work_id") == before


def test_heads_report_holdout_metrics_and_reliability_plots(storage):
    write_inputs(storage)
    md = run_student(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    rows = {(r["teacher"], r["target"]): r for r in storage.read_table("student_heads").to_pylist()}
    assert len(rows) == 28
    g = rows[("gemma", "metaresearch")]
    assert g["status"] == "trained" and g["labels"] == N_WORKS and g["positives"] == 120  # every 4th title
    assert g["holdout_n"] > 40 and 0 < g["holdout_positives"] < g["holdout_n"]
    assert g["ap"] == pytest.approx(1.0) and g["auroc"] == pytest.approx(1.0)  # separable titles, unseen venues
    assert 0 <= g["ece"] <= 1
    c = rows[("codex", "metaresearch")]
    assert c["gate_passed"] and c["kish_ess_positive"] == pytest.approx(120.0)  # 120 positives of equal weight 2
    assert (
        rows[("codex", "metaepi_narrow")]["gate_passed"] is False
        and "gemma positives 0 < 20" in rows[("codex", "metaepi_narrow")]["gate_reason"]
    )
    assert rows[("gemma", "genre")]["kind"] == "categorical" and rows[("gemma", "genre")]["accuracy"] is not None
    assert md["reliability_plot_gemma"].value.startswith("![reliability of the gemma heads](data:image/png;base64,")
    png = storage.root / "reports" / md["model_version"].value / "reliability_gemma.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_model_version_is_published_once_and_never_altered(storage):
    write_inputs(storage)
    r1 = run_student(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    path = model_path(storage, r1["model_version"].value)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    r2 = run_student(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    assert r2["model_version"].value == r1["model_version"].value and r2["model_reused"].value is True
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    path.write_bytes(path.read_bytes() + b"tampered")
    result = run_student(storage, predictions, raise_on_error=False)
    assert not result.success
    assert "was altered after publication" in str(result.all_events)


def test_a_moved_data_folder_keeps_its_model_versions(storage, tmp_path):
    """model_versions names the file under the data folder, so a moved folder still loads (and checks) its model."""
    write_inputs(storage)
    version = run_student(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    version = version["model_version"].value
    with storage.connect() as con:
        assert con.execute("SELECT file FROM model_versions").fetchall() == [(f"models/{version}.joblib",)]
    moved = MetacanStorage(data_dir=str(tmp_path / "moved"))
    shutil.move(storage.root, moved.root)
    assert load_published(moved, version).model_version == version
    model_path(moved, version).write_bytes(b"not the model")
    with pytest.raises(ModelVersionError, match="altered after publication"):
        load_published(moved, version)


@pytest.mark.slow
def test_student_heads_on_the_minilm_backend(storage):
    """The sentence-embedding variant is a launchpad choice: same heads, a different version, real embeddings."""
    write_inputs(storage)
    tfidf = run_student(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    result = dg.materialize(
        [student_heads],
        resources={"storage": storage},
        run_config={"ops": {"student_heads": {"config": {"features": "minilm"}}}},
    )
    md = result.asset_materializations_for_node("student_heads")[0].metadata
    assert md["feature_backend"].value == "minilm" and md["model_version"].value != tfidf["model_version"].value
    bundle = joblib.load(model_path(storage, md["model_version"].value))
    assert bundle.heads["gemma"]["metaresearch"].estimator_.coef_.shape == (1, 384)
    rows = {(r["teacher"], r["target"]): r for r in storage.read_table("student_heads").to_pylist()}
    assert rows[("gemma", "metaresearch")]["auroc"] > 0.95  # separable titles, unseen venues
    with pytest.raises(Exception, match="student feature backend 'bert'"):
        dg.materialize(
            [student_heads],
            resources={"storage": storage},
            run_config={"ops": {"student_heads": {"config": {"features": "bert"}}}},
        )


def _newest_in_python(rows: list[dict]) -> list[dict]:
    """The rule teacher_call_labels computed in Python before it moved into DuckDB: sort every row by (created_at,
    label_id), the last labelled teacher call of a work wins (a stable sort: on a tie, the later row), rows kept in
    the table's order."""
    import datetime as dt

    newest: dict[str, dict] = {}
    for r in sorted(rows, key=lambda r: (r["created_at"] or dt.datetime.min, r["label_id"] or "")):
        if r["status"] == "labelled" and r["source"] == "teacher_call":
            newest[r["work_id"]] = r
    return [r for r in rows if newest.get(r["work_id"]) is r]


def test_teacher_call_labels_keeps_the_newest_label_of_each_work_and_caps_by_a_salted_hash(storage):
    """Duplicates (older, newer, same time with another label id, a NULL time), failures and imports: the same rows
    in the same order as the Python rule; with ``most`` the ``most`` works of smallest salted SHA-256 of the id."""
    import datetime as dt

    from metacan_pipeline.student.training import CENSUS_SUBSAMPLE_SALT, teacher_call_labels

    write_inputs(storage)
    rows = labels(storage, "gemma")
    t0 = max(r["created_at"] for r in rows)
    extra = []
    for i, r in enumerate(rows[:40]):
        kind = i % 5
        if kind == 0:  # a newer label with other categories: it wins
            extra.append({**r, "label_id": f"z{i}", "created_at": t0 + dt.timedelta(days=1), "categories": ["sts"]})
        elif kind == 1:  # an older one: it loses
            extra.append({**r, "label_id": f"a{i}", "created_at": t0 - dt.timedelta(days=400)})
        elif kind == 2:  # a newer failure: not a label, the older labelled call stays
            extra.append({**r, "label_id": f"f{i}", "created_at": t0 + dt.timedelta(days=2), "status": "failed"})
        elif kind == 3:  # a newer import: not a teacher call
            extra.append({**r, "label_id": f"i{i}", "created_at": t0 + dt.timedelta(days=2), "source": "import"})
        else:  # no time at all: older than any dated label
            extra.append({**r, "label_id": f"n{i}", "created_at": None, "categories": ["bibliometrics"]})
    extra.append({**rows[0], "label_id": "nowork", "work_id": None, "created_at": t0})  # no work: not training data
    mixed = rows[:20] + extra + rows[20:]
    write_labels(storage, "gemma", mixed)
    expected = _newest_in_python([r for r in labels(storage, "gemma") if r["work_id"] is not None])
    got = teacher_call_labels(storage, "gemma")
    assert len(got) == len({r["work_id"] for r in rows}) == len(expected)
    assert [(r["work_id"], r["label_id"], r["categories"]) for r in got] == [
        (r["work_id"], r["label_id"], r["categories"]) for r in expected
    ]
    assert sum(r["label_id"].startswith("z") for r in got) == 8  # the 8 newer labels won
    capped = teacher_call_labels(storage, "gemma", most=25)
    first = sorted(expected, key=lambda r: hashlib.sha256((CENSUS_SUBSAMPLE_SALT + r["work_id"]).encode()).digest())
    assert {r["work_id"] for r in capped} == {r["work_id"] for r in first[:25]}
    assert [r["label_id"] for r in capped] == [r["label_id"] for r in expected if r in capped]  # the table's order
    assert teacher_call_labels(storage, "gemma", most=10_000) == got
    with pytest.raises(ValueError, match="most must be 0 or more"):
        teacher_call_labels(storage, "gemma", most=-1)
    run_student(storage, student_heads)  # a label without a work id does not stop the fit


def test_a_c_grid_is_chosen_per_head_on_its_own_training_works_and_makes_another_version(storage):
    """``head_c`` with two values: every trained binary head fits the C its inner grouped CV (by venue) picks, the
    version differs from the fixed default's, and the model card says how each C was chosen."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import average_precision_score
    from sklearn.model_selection import GroupKFold

    from metacan_pipeline.student.card import read_card
    from metacan_pipeline.student.training import outside_holdout, target_value

    write_inputs(storage)
    run_student(storage, student_heads)
    default = sql(storage, "SELECT DISTINCT model_version FROM student_heads")[0][0]
    result = dg.materialize(
        [student_heads],
        resources={"storage": storage},
        run_config={"ops": {"student_heads": {"config": {"head_c": [0.01, 100.0]}}}},
    )
    assert result.success
    version = sql(storage, "SELECT DISTINCT model_version FROM student_heads")[0][0]
    assert version != default
    bundle = load_published(storage, version)
    head = bundle.heads["codex"]["metaresearch"]
    assert head.status_ == "trained" and head.estimator_.C == head.C_ and head.c_choice_["folds"] == 3
    # the same choice, written out: 3 GroupKFold folds over the training works' venues, design-weighted AP
    from metacan_pipeline.student.training import load_training_inputs

    inputs, _ = load_training_inputs(storage, "test")
    rows = outside_holdout(inputs.labels["codex"], inputs.labelled_holdout, inputs.frame_info)
    X = bundle.vectorizer.transform([inputs.texts[r["work_id"]] for r in rows])
    y = np.array([target_value(r, "metaresearch") for r in rows])
    w = inputs.row_weights("codex", rows)
    groups = [inputs.frame_info[r["work_id"]]["venue_key"] for r in rows]
    aps = {}
    for c in (0.01, 100.0):
        oof = np.empty(len(y))
        for train, test in GroupKFold(n_splits=3).split(X, y, groups):
            m = LogisticRegression(C=c, max_iter=2000).fit(X[train], y[train], sample_weight=w[train])
            oof[test] = m.predict_proba(X[test])[:, 1]
        aps[c] = average_precision_score(y, oof, sample_weight=w)
    assert head.c_choice_["C"] == pytest.approx(aps) and head.C_ == max(aps, key=lambda c: (aps[c], -c))
    card = read_card(storage.root, version)
    assert card["regularisation"] == {"c_grid": [0.01, 100.0], "inner_folds": 3}
    shown = next(h for h in card["heads"] if (h["source"], h["target"]) == ("codex", "metaresearch"))
    assert shown["regularisation"] == head.c_choice_["how"] and shown["regularisation"].startswith(
        f"C = {head.C_:g} by 3"
    )
    text = (storage.root / "reports" / version / "model_card.md").read_text()
    assert "- Binary heads: logistic regression, C chosen per head among 0.01, 100 by 3-fold grouped" in text
    # a bad grid is refused naming the setting
    bad = dg.materialize(
        [student_heads],
        resources={"storage": storage},
        run_config={"ops": {"student_heads": {"config": {"head_c": [0.0]}}}},
        raise_on_error=False,
    )
    assert not bad.success and "head regularisation grid [0.0]" in root_error(bad)
