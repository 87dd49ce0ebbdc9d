"""The student (issue 5, SPEC sections 6-7) on a synthetic frame large enough for gated heads.

Real components throughout: Parquet tables in a temporary data folder, DuckDB, scikit-learn, and
Dagster's executor (``dg.materialize``). The frame is synthetic so that the support gate passes and the
holdout has both classes; the assertions are computed independently in the tests (sorted top-k in
Python against the DuckDB quota, the SPEC formulas against the stored columns).
"""

import datetime as dt
import hashlib

import dagster as dg
import joblib
import numpy as np
import pyarrow as pa
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.assets import machine_scores, predictions, student_heads
from metacan_pipeline.student.checks import PREDICTION_CHECKS, holdout_leaks
from metacan_pipeline.student.evaluation import (
    binary_metrics,
    expected_calibration_error,
)
from metacan_pipeline.student.features import student_text
from metacan_pipeline.student.holdout import HOLDOUT_FRACTION, venue_held_out, venue_key
from metacan_pipeline.student.models import model_path
from metacan_pipeline.student.rounds import ACTIVE_BATCH, maturity_gate
from metacan_pipeline.student.scoring import student_texts
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.teachers.batches import label_batches
from metacan_pipeline.vocab import (
    CATEGORIES,
    PREDICTION_STATUS,
    SCORE_ONLY_IMMATURE,
    SCORE_ONLY_MATURE,
)

N_WORKS, N_VENUES = 480, 47  # 47: prime, so every venue mixes positive and negative titles
POS_TITLES = [
    "Meta-research audit of reporting quality in {} trials",
    "Reproducibility of published {} studies: a meta-research survey",
    "Research integrity and peer review in {} journals",
]
NEG_TITLES = [
    "Soil nitrogen cycling in {} boreal forests",
    "Catalytic oxidation of {} alcohols",
    "Ice sheet dynamics near {} glaciers",
]
WORDS = ["cardiology", "oncology", "ecology", "physics", "nursing", "surgery", "economics", "geology"]


def _frame_rows():
    rows = []
    for i in range(N_WORKS):
        pos = i % 4 == 0
        title = (POS_TITLES if pos else NEG_TITLES)[i % 3].format(WORDS[i % len(WORDS)])
        rows.append(
            {
                "id": f"W{100000 + i}",
                "title_text": title,
                "venue_name": f"Journal {i % N_VENUES}",
                "venue_id": f"https://openalex.org/S{500 + i % N_VENUES}",
                "topic": "Topic " + WORDS[(i // 3) % 8],
                "field": "Medicine" if i % 2 else "Earth Sciences",
                "type": "article",
                "language": "en",
            }
        )
    return rows


def _label(teacher: str, wid: str, title: str, flip: bool = False) -> dict:
    meta = ("meta-research" in title.lower() or "integrity" in title.lower()) != flip
    label_id = hashlib.sha256(f"{teacher}:{wid}:{flip}".encode()).hexdigest()[
        :32
    ]  # deterministic: sentinels hash the labels
    return {
        "label_id": label_id,
        "work_id": wid,
        "teacher": teacher,
        "model": "m",
        "prompt_version": "v2",
        "prompt_sha": "x",
        "record_view": "title_only",
        "view_hash": "h",
        "status": "labelled",
        "categories": ["metaresearch"] + (["research_integrity"] if "integrity" in title.lower() else [])
        if meta
        else [],
        "domain": "reproducibility" if meta else None,
        "study_design": "observational" if meta else "bench_or_experimental",
        "genre": "empirical" if int(wid[1:]) % 3 else "review",
        "about_ca_system": False,
        "about_ca_topic": int(wid[1:]) % 5 == 0,
        "confidence": "high",
        "reason": "synthetic",
        "error": None,
        "attempts": 1,
        "call_id": "c",
        "run_id": "r",
        "source": "teacher_call",
        "source_ref": None,
        "created_at": dt.datetime(2026, 11, 30),
    }


def write_inputs(
    storage: MetacanStorage, flip_holdout: bool = False, in_sample=lambda i, held: i % 2 == 0
) -> list[dict]:
    """Frame, sample design (weight 2; by default every other work in the sample), gemma labels on every
    work and codex labels on the sample. ``in_sample(index, held_out)`` chooses the sample."""
    frame = _frame_rows()
    storage.write_table("frame", pa.Table.from_pylist(frame))
    held = {r["id"] for r in frame if venue_held_out(venue_key(r["id"], r["venue_id"]))}
    sample = [in_sample(i, r["id"] in held) for i, r in enumerate(frame)]
    storage.write_table(
        "sample_design",
        pa.Table.from_pylist(
            [{"id": r["id"], "in_sample": sample[i], "design_weight": 2.0} for i, r in enumerate(frame)]
        ),
    )
    gemma = [_label("gemma", r["id"], r["title_text"], flip_holdout and r["id"] in held) for r in frame]
    codex = [
        _label("codex", r["id"], r["title_text"], flip_holdout and r["id"] in held)
        for i, r in enumerate(frame)
        if sample[i]
    ]
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(gemma, schema=LABELS_SCHEMA))
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    return frame


def run(storage: MetacanStorage, *assets, raise_on_error: bool = True) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [*assets, *PREDICTION_CHECKS],
        resources={"storage": storage},
        raise_on_error=raise_on_error,
        selection=dg.AssetSelection.assets(*assets),
    )


@pytest.fixture()
def storage(tmp_path) -> MetacanStorage:
    return MetacanStorage(data_dir=str(tmp_path / "data"))


def _sql(storage: MetacanStorage, query: str) -> list[tuple]:
    with storage.connect() as con:
        return con.execute(query).fetchall()


def test_holdout_rule_groups_whole_venues_and_holds_about_its_fraction():
    keys = [f"https://openalex.org/S{i}" for i in range(20_000)]
    share = sum(map(venue_held_out, keys)) / len(keys)
    assert abs(share - HOLDOUT_FRACTION) < 0.01
    assert venue_key("W1", None) == "no-venue:W1" and venue_key("W1", "S9") == "S9"
    assert [venue_held_out(k) for k in keys[:50]] == [
        venue_held_out(k) for k in keys[:50]
    ]  # stable, not random per call


def test_student_text_ignores_every_field_the_frame_cannot_supply():
    row = _frame_rows()[0]
    with_abstract = {**row, "abstract": "SECRET abstract words", "abstract_inverted_index": {"SECRET": [0]}}
    assert student_text(with_abstract) == student_text(row)
    assert "SECRET" not in student_texts(pa.Table.from_pylist([with_abstract]))[0]
    assert student_texts(pa.Table.from_pylist([row, {**row, "venue_name": None}])) == [
        student_text(row),
        student_text({**row, "venue_name": None}),
    ]


def test_holdout_never_reaches_training(storage):
    frame = write_inputs(storage)
    result = run(storage, student_heads)
    assert all(c.passed for c in result.get_asset_check_evaluations())
    holdout = {r[0] for r in _sql(storage, "SELECT work_id FROM student_holdout")}
    expected = {r["id"] for r in frame if venue_held_out(venue_key(r["id"], r["venue_id"]))}
    assert holdout == expected and 40 < len(holdout) < 160  # whole venues, about a fifth of 480 works
    training = _sql(storage, "SELECT teacher, work_id FROM student_training_set")
    assert {t for t, _ in training} == {"gemma", "codex"}
    assert not {w for _, w in training} & holdout
    assert len([w for t, w in training if t == "gemma"]) == N_WORKS - len(holdout)
    v1 = result.asset_materializations_for_node("student_heads")[0].metadata["model_version"].value

    # flip every holdout label: the models (trained without them) are bit-identical, the version is new
    write_inputs(storage, flip_holdout=True)
    v2 = run(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata["model_version"].value
    assert v1 != v2
    b1, b2 = joblib.load(model_path(storage, v1)), joblib.load(model_path(storage, v2))
    for teacher in ("gemma", "codex"):
        for target in ("metaresearch", "about_ca_topic"):
            assert np.array_equal(
                b1.heads[teacher][target].estimator_.coef_, b2.heads[teacher][target].estimator_.coef_
            )
    # ... while the holdout metrics see the flipped labels
    auroc = dict(_sql(storage, "SELECT teacher, auroc FROM student_heads WHERE target = 'metaresearch'"))
    assert auroc["gemma"] == pytest.approx(0.0) and auroc["codex"] == pytest.approx(
        0.0
    )  # the ranking, exactly inverted


def test_holdout_check_catches_a_leak(storage):
    write_inputs(storage)
    run(storage, student_heads)
    with storage.connect() as con:
        assert holdout_leaks(con) == {"training_rows_in_frozen_holdout": 0, "training_rows_in_held_out_venues": 0}
    leak = _sql(storage, "SELECT work_id FROM student_holdout LIMIT 1")[0][0]
    rows = storage.read_table("student_training_set").to_pylist()
    rows.append({**rows[0], "work_id": leak, "venue_key": "https://openalex.org/S-leak"})
    storage.write_table("student_training_set", pa.Table.from_pylist(rows))
    with storage.connect() as con:
        assert holdout_leaks(con)["training_rows_in_frozen_holdout"] == 1


def test_frozen_holdout_does_not_move_when_the_frame_grows(storage):
    write_inputs(storage)
    run(storage, student_heads)
    before = _sql(storage, "SELECT work_id, frozen_at FROM student_holdout ORDER BY work_id")
    frame = storage.read_table("frame").to_pylist()
    extra = [{**frame[i], "id": f"W9{i:05d}"} for i in range(100)]  # new works, in the same venues
    storage.write_table("frame", pa.Table.from_pylist(frame + extra))
    run(storage, student_heads)
    assert _sql(storage, "SELECT work_id, frozen_at FROM student_holdout ORDER BY work_id") == before


def test_heads_report_holdout_metrics_and_reliability_plots(storage):
    write_inputs(storage)
    md = run(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
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


def test_binary_metrics_and_ece_by_hand():
    y = np.array([1, 0, 1, 0])
    s = np.array([0.95, 0.85, 0.15, 0.05])
    # bins [0.9,1): score .95 rate 1; [0.8,.9): .85 vs 0; [0.1,.2): .15 vs 1; [0,.1): .05 vs 0
    assert expected_calibration_error(y, s, np.ones(4)) == pytest.approx((0.05 + 0.85 + 0.85 + 0.05) / 4)
    m = binary_metrics(y, s)
    assert m["ap"] == pytest.approx((1 + 2 / 3) / 2) and m["auroc"] == pytest.approx(0.75)
    assert binary_metrics(np.array([0, 0]), np.array([0.1, 0.2]))["ap"] is None
    assert binary_metrics(np.array([]), np.array([]))["note"].startswith("not evaluated")


def test_model_version_is_published_once_and_never_altered(storage):
    write_inputs(storage)
    r1 = run(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    path = model_path(storage, r1["model_version"].value)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    r2 = run(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    assert r2["model_version"].value == r1["model_version"].value and r2["model_reused"].value is True
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    path.write_bytes(path.read_bytes() + b"tampered")
    result = run(storage, predictions, raise_on_error=False)
    assert not result.success
    assert "was altered after publication" in str(result.all_events)


def test_predictions_follow_spec_section_6(storage):
    write_inputs(storage)
    result = run(storage, student_heads, predictions)
    assert all(c.passed for c in result.get_asset_check_evaluations())
    scores = {r["id"]: r for r in storage.read_table("student_scores").to_pylist()}
    preds = {r["id"]: r for r in storage.read_table("predictions").to_pylist()}
    gemma = {r["work_id"]: r for r in storage.read_table("direct_labels_gemma").to_pylist()}
    thresholds = {r["target"]: r for r in storage.read_table("prediction_thresholds").to_pylist()}
    assert len(preds) == N_WORKS and {r["prediction_status"] for r in preds.values()} == {PREDICTION_STATUS}

    t = thresholds["metaresearch"]
    assert t["gate_passed"] and t["rate"] == 0.5  # 120 positives among the 240 sample labels, equal weights
    assert t["k"] == round(t["rate"] * N_WORKS)
    order = sorted(scores, key=lambda w: (-scores[w]["codex__metaresearch"], w))
    decided = set(order[: t["k"]])
    assert t["boundary_id"] == order[t["k"] - 1] and t["threshold"] == scores[order[t["k"] - 1]]["codex__metaresearch"]
    assert thresholds["metaepi_narrow"]["k"] is None  # failed the gate: no quota, no decision
    for wid, p in preds.items():
        g_meta = "metaresearch" in gemma[wid]["categories"]
        assert ("metaresearch" in p["candidate_categories"]) == (wid in decided or g_meta)
        assert ("metaresearch" in p["consensus_categories"]) == (wid in decided and g_meta)
        assert "metaepi_narrow" not in p["consensus_categories"]
        g_bin = [int(c in gemma[wid]["categories"]) for c in CATEGORIES] + [
            int(gemma[wid]["about_ca_system"]),
            int(gemma[wid]["about_ca_topic"]),
        ]
        c_s = p["category_scores_codex"] + [p["about_ca_system_score_codex"], p["about_ca_topic_score_codex"]]
        assert p["teacher_disagreement_score"] == pytest.approx(
            max(abs(a - b) for a, b in zip(c_s, g_bin, strict=False))
        )
        s_meta, thr = scores[wid]["codex__metaresearch"], t["threshold"]
        tu = [
            max(
                0.0,
                min(
                    1.0,
                    1
                    - abs(scores[wid][f"codex__{h}"] - thresholds[h]["threshold"])
                    / (
                        thresholds[h]["threshold"]
                        if scores[wid][f"codex__{h}"] < thresholds[h]["threshold"]
                        else 1 - thresholds[h]["threshold"]
                    ),
                ),
            )
            for h in thresholds
            if thresholds[h]["k"]
        ]
        assert p["threshold_uncertainty_score"] == pytest.approx(max(tu))
        assert p["genre_candidate"] == gemma[wid]["genre"]
        assert p["genre_consensus"] == (gemma[wid]["genre"] if p["genre_codex"] == gemma[wid]["genre"] else None)
        assert s_meta == p["category_scores_codex"][0] and thr is not None
    assert sum("metaresearch" in p["candidate_categories"] for p in preds.values()) >= t["k"]


def _history(rounds: int, drift: float = 0.0, seed: int = 1):
    rng = np.random.default_rng(seed)
    base = {f"W{i}": float(s) for i, s in enumerate(rng.random(200))}
    return {
        r: {arm: {w: min(1.0, s + drift * r * (int(w[1:]) % 7)) for w, s in base.items()} for arm in ("codex", "gemma")}
        for r in range(1, rounds + 1)
    }


def test_maturity_gate_needs_five_still_rounds_on_the_frozen_holdout():
    labels = {arm: {f"W{i}": int(i % 3 == 0) for i in range(200)} for arm in ("codex", "gemma")}
    still = maturity_gate(_history(5), labels)
    assert still.passed and still.reason == "passed"
    assert still.series["codex"]["churn"] == [0.0] * 4 and still.series["codex"]["rho"] == [1.0] * 4
    four = maturity_gate(_history(4), labels)
    assert not four.passed and "4 round(s) of the 5" in four.reason
    moving = maturity_gate(_history(6, drift=0.05), labels)
    assert not moving.passed and "churn" in moving.reason and "Spearman" in moving.reason
    one_class = maturity_gate(_history(5), {arm: {f"W{i}": 0 for i in range(200)} for arm in ("codex", "gemma")})
    assert not one_class.passed and "AP not evaluable" in one_class.reason


def test_machine_scores_rounds_count_only_new_labels_and_propose_fresh_batches(storage):
    frame = write_inputs(storage)
    design = storage.read_table("sample_design").to_pylist()
    outside = {r["id"] for r in design[1::4]}  # out of the sampling frame: a rule label, never a teacher call
    storage.write_table("sample_design", pa.Table.from_pylist([r for r in design if r["id"] not in outside]))
    md1 = run(storage, machine_scores, label_batches).asset_materializations_for_node("machine_scores")[0].metadata
    assert md1["rounds_run"].value == 1 and md1["new_round"].value is True
    ms = storage.read_table("machine_scores").to_pylist()
    assert len(ms) == N_WORKS and {r["validation_status"] for r in ms} == {SCORE_ONLY_IMMATURE}
    assert all(r["score_spread"] == pytest.approx(abs(r["score_codex"] - r["score_gemma"])) for r in ms)
    held = {r[0] for r in _sql(storage, "SELECT work_id FROM student_holdout")}
    codex_labelled = {r["work_id"] for r in storage.read_table("direct_labels_codex").to_pylist()}
    batch1 = _sql(storage, f"SELECT work_id, source FROM label_batches WHERE batch = '{ACTIVE_BATCH}'")
    ids1 = {w for w, _ in batch1}
    assert len(batch1) == len(ids1) == 25 and not ids1 & held and not ids1 & codex_labelled and not ids1 & outside
    assert {s.split(": ")[1] for _, s in batch1} == {"largest arm spread", "closest to 0.5", "random sentinel"}

    md2 = run(storage, machine_scores, label_batches).asset_materializations_for_node("machine_scores")[0].metadata
    assert md2["rounds_run"].value == 1 and md2["new_round"].value is False  # nothing new: not a round
    assert len(_sql(storage, "SELECT * FROM label_batches")) == 25

    # the teacher labels the proposed batch: the next materialization is round 2, from a fresh reservoir
    titles = {r["id"]: r["title_text"] for r in frame}
    codex = storage.read_table("direct_labels_codex").to_pylist() + [_label("codex", w, titles[w]) for w in ids1]
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    md3 = run(storage, machine_scores, label_batches).asset_materializations_for_node("machine_scores")[0].metadata
    assert md3["rounds_run"].value == 2 and md3["new_round"].value is True
    ids2 = {r[0] for r in _sql(storage, "SELECT work_id FROM machine_round_proposals WHERE round = 2")}
    assert len(ids2) == 25 and not ids2 & ids1 and not ids2 & held
    assert _sql(storage, "SELECT count(DISTINCT round) FROM machine_round_scores")[0][0] == 2
    assert {r["rounds_run"] for r in storage.read_table("machine_scores").to_pylist()} == {2}


def test_machine_scores_mature_after_five_still_rounds(storage):
    """Five rounds whose labels grow but whose holdout ranking barely moves pass the gate: 'stopped moving'.

    Codex labels the whole holdout here, so its positive set on the holdout is exactly the positive titles
    (k = their count) and does not churn; about 128 works outside the holdout are left for the proposals."""
    frame = write_inputs(storage, in_sample=lambda i, held: held or i % 3 != 1)
    titles = {r["id"]: r["title_text"] for r in frame}
    for round_no in range(1, 6):
        md = run(storage, machine_scores).asset_materializations_for_node("machine_scores")[0].metadata
        assert md["rounds_run"].value == round_no
        assert md["maturity_gate_passed"].value is (round_no == 5), md["maturity_gate_reason"].value
        # the teacher labels the first proposed work (its title decides it): a new round, the same ranking
        first = _sql(storage, f"SELECT min(work_id) FROM machine_round_proposals WHERE round = {round_no}")[0][0]
        codex = storage.read_table("direct_labels_codex").to_pylist() + [_label("codex", first, titles[first])]
        storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    rows = storage.read_table("machine_scores").to_pylist()
    assert {(r["validation_status"], r["rounds_run"], r["maturity_gate_passed"]) for r in rows} == {
        (SCORE_ONLY_MATURE, 5, True)
    }
    assert "stopped moving" in rows[0]["note"] and "never assert a category" in rows[0]["note"]


def test_student_heads_on_the_minilm_backend(storage):
    """The sentence-embedding variant is a launchpad choice: same heads, a different version, real embeddings."""
    write_inputs(storage)
    tfidf = run(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
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


def test_heads_are_estimators_and_a_one_class_head_is_a_prior_dummy_classifier():
    from sklearn.base import clone
    from sklearn.dummy import DummyClassifier

    from metacan_pipeline.student.heads import BinaryHead, CategoricalHead

    X = np.eye(4)
    head = BinaryHead("metaresearch")
    assert head.fit(X, np.array([1, 1, 1, 1]), sample_weight=np.array([1.0, 2.0, 3.0, 4.0])) is head
    assert isinstance(head.estimator_, DummyClassifier) and head.estimator_.strategy == "prior"
    assert head.status_.startswith("constant") and head.score_samples(X).tolist() == [1.0] * 4
    assert clone(head).get_params() == {"target": "metaresearch"} and not hasattr(clone(head), "status_")
    none = BinaryHead("about_ca_topic").fit(X[:0], np.array([], dtype=int))
    assert none.estimator_ is None and none.score_samples(X).tolist() == [0.0] * 4  # no label: rate 0
    cat = CategoricalHead("genre", ("empirical", "review", "other")).fit(X, ["review", None, "review", None])
    assert cat.status_.startswith("constant") and cat.predict_proba(X).tolist() == [[0.0, 1.0, 0.0]] * 4
    empty = CategoricalHead("genre", ("empirical", "review")).fit(X, [None] * 4)
    assert empty.predict_proba(X[:1]).tolist() == [[0.5, 0.5]]  # no value: uniform
    trained = CategoricalHead("genre", ("empirical", "review", "other")).fit(X, ["review", "other"] * 2)
    assert trained.status_ == "trained" and trained.predict_proba(X)[:, 0].tolist() == [0.0] * 4


def test_label_batches_adds_every_round_proposal_once_and_leaves_other_batches(storage):
    from metacan_pipeline.teachers.batches import add_round_proposals

    with storage.connect() as con:
        con.execute("INSERT INTO label_batches VALUES ('by_hand', 'W1', now(), 'loaded by hand')")
        con.execute(
            "INSERT INTO machine_round_proposals VALUES (1, 'W1', 'largest arm spread', 0.9, 0.1, 0.8), "
            "(1, 'W2', 'random sentinel', 0.5, 0.5, 0.0)"
        )
        assert add_round_proposals(con) == 2 and add_round_proposals(con) == 0
        con.execute("INSERT INTO machine_round_proposals VALUES (2, 'W3', 'closest to 0.5', 0.4, 0.6, 0.2)")
        assert add_round_proposals(con) == 1
        rows = con.execute("SELECT batch, work_id, source FROM label_batches ORDER BY batch, work_id").fetchall()
    assert rows == [
        (ACTIVE_BATCH, "W1", "machine_scores round 1: largest arm spread"),
        (ACTIVE_BATCH, "W2", "machine_scores round 1: random sentinel"),
        (ACTIVE_BATCH, "W3", "machine_scores round 2: closest to 0.5"),
        ("by_hand", "W1", "loaded by hand"),
    ]
