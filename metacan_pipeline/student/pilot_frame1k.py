"""Real-data evaluation on the pilot's frame1k set: the student's ``metaresearch`` head trained and tested on the
labels of three model arms (and their adjudication) over 750 works that name their venue, under cross-validation
grouped by venue (``metacan evaluate-pilot --set frame1k``). The screening set and the shared conventions (text,
features, CV) are in :mod:`.pilot_eval`.

frame1k
-------

Files (``<pilot>/frame1k``, SOURCES.md section 1): works ``chunks/chunk_NN.json`` (15 saved chunks of 50,
750 works); one label per work in ``opus_r1/``, ``codex_r1/``, ``grok_r1/`` ``labels_NN.json`` (paired
with ``chunk_NN.json`` by ``id``); the adjudicator's decisions ``adjudication/verdict_*.json``.

=========== ==========================================================================================
label       ``metaresearch`` from the record's ``tier`` (rubric v1.0, the same tiers and meaning as the
            screening set, so the same map :data:`..teachers.pilot.TIER_CATEGORIES`): positive for
            ``T1`` (core metaresearch) and ``T2`` (adjacent: STS, LIS, research infrastructure,
            history/philosophy of science, research-policy analysis), negative for ``T3``
            (contextual: editorials, policy documents, announcements) and ``OUT``. Any other tier
            value is no label (counted ``failed_<arm>``; none occurs). Nothing else of a label is
            read (``genre``, ``about_ca``, ``confidence``, ``reason`` feed no ``metaresearch`` head).
arms        ``opus_r1`` (Claude Opus 4.8), ``codex_r1`` (GPT-5.6 through the Codex CLI, "gpt" in the
            project), ``grok_r1`` (Grok 4.5): each arm's own ``tier``; 28, 20 and 14 positives of 750.
            ``adjudicated``: where ``verdict_*.json`` holds the work (24 of the 750: the 23 on which the
            arms disagree about scope, plus W2901282154, in scope for all three but T2/T2/T1), the
            verdict's ``tier``, same map (its ``seam``, ``confidence``, ``rubric_is_silent`` unused);
            otherwise the scope all three r1 arms share (726 works). A work without a verdict on which
            the arms disagree, or where an arm has no usable label, gets no ``adjudicated`` label
            (counted; none occurs). 16 positives (10 unanimous, 6 by verdict).
text        the student's title-only view, :func:`.features.student_text` of a frame-like row, all six
            student fields from the work record: ``title`` -> ``title_text`` (reduced with
            :func:`..openalex.abstract.markup_to_text`, as the frame does; 37 titles carry markup or
            entities), ``venue`` -> ``venue_name`` (absent for 44 works), ``topic`` -> ``topic`` and
            ``field`` -> ``field`` (absent for 42), ``type`` -> ``type``, ``lang`` -> ``language``. Never
            read into the text: ``abstract`` (587 works have one; the student is title-only, SPEC
            section 6), ``year``, ``ca_institutions``, ``funders`` (not student fields). A work with an
            empty title would be left out (none is).
group       :func:`.holdout.venue_key` (the student holdout's rule) of the work id and the venue name:
            the ``venue`` string as given (OpenAlex's source display name, which is what the frame's
            ``venue_name`` holds; the files carry no source id; 548 distinct names, none differ only
            by case or whitespace), or ``no-venue:<work id>`` for the 44 works without a venue, each
            its own group: 592 groups. Every venue lies in one test fold (``GroupKFold``).
folds       5, fewer when fewer than 5 venue groups hold a positive (then one per such group, at least
            2; :func:`.heads.grouped_cv_metrics` needs 2 positives); all four arms have 14 or more, so
            5 folds. ``GroupKFold`` balances folds by works, not positives: the positives per test fold
            are reported (:attr:`Frame1kEvaluation.fold_positives`).
weights     none: the sample is stratified with known selection probabilities (French oversampled), but
            the saved files carry neither probabilities nor weights, so fitting and AP/AUROC are
            unweighted and describe this sample, not the frame; the positive rate is the sample's.
left out    ``frame1k/v2`` (rubric v2 re-screen of the 179 contested works of all 112 chunks: only 24
            are among the 750, the rest exist only as adjudication batch records, a selected and not a
            random set, labelled under another rubric) and the batches' blinded opinions (they equal
            the r1 labels, SOURCES.md).
=========== ==========================================================================================
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..openalex.abstract import markup_to_text
from ..teachers.core.reference import FRAME1K_ARMS, frame1k_labels
from .features import make_features, student_text
from .heads import grouped_cv_metrics, weighted_rate
from .holdout import venue_key
from .pilot_eval import fmt


@dataclass(frozen=True)
class Frame1kWork:
    """One frame1k work: the student's ``text``, its CV ``group`` (:func:`.holdout.venue_key` of the venue
    name: ``<venue>``, or ``no-venue:<work id>``), ``venue`` (None when the record names none) and
    ``labels``: arm -> ``metaresearch`` 1/0, None where that arm has no usable label."""

    id: str
    text: str
    group: str
    venue: str | None
    labels: dict[str, int | None]


@dataclass
class Frame1kEvaluation:
    """What :func:`evaluate_frame1k` measured (unweighted: the files carry no selection probabilities).
    ``groups``: CV groups = ``venues`` distinct venue names + ``without_venue`` works that name none (one
    group each). ``positive_groups``: groups holding a positive. ``fold_positives``: positives per test
    fold. ``note``: why fewer folds than asked, if so. ``ap`` / ``auroc`` / ``cv`` as
    :class:`.pilot_eval.PilotEvaluation`. ``feature_seconds``: wall clock of the feature fit + transform when it was
    computed; ``features_reused``: this evaluation reused that matrix (same backend, same works)."""

    arm: str
    features: str
    n: int
    positives: int
    positive_rate: float
    groups: int
    venues: int
    without_venue: int
    positive_groups: int
    folds: int
    fold_positives: list[int]
    ap: float | None
    auroc: float | None
    cv: str
    note: str
    feature_seconds: float
    features_reused: bool
    cv_seconds: float


def frame1k_works(folder: Path) -> tuple[list[Frame1kWork], dict[str, int]]:
    """The frame1k works (``<folder>/frame1k/chunks/chunk_*.json``, in file order) with every arm's label
    (:func:`..teachers.reference.frame1k_labels`, whose counts of what was left out this returns, plus
    ``empty_title``: works dropped for an empty title).

    Raises FileNotFoundError without chunk files, ValueError naming a file that is not JSON.
    """
    ref = frame1k_labels(folder)
    records, labels = ref.records, ref.labels
    dropped = Counter(ref.dropped)
    dropped["empty_title"] = 0
    works = []
    for wid, rec in records.items():
        title = markup_to_text(rec.get("title"))
        if not title:
            dropped["empty_title"] += 1
            continue
        venue = (rec.get("venue") or "").strip() or None
        row = {
            "title_text": title,
            "venue_name": venue,
            "topic": rec.get("topic"),
            "field": rec.get("field"),
            "type": rec.get("type"),
            "language": rec.get("lang"),
        }
        works.append(
            Frame1kWork(
                wid,
                student_text(row),
                venue_key(wid, venue),
                venue,
                {arm: labels[arm].get(wid) for arm in FRAME1K_ARMS},
            )
        )
    return works, {k: int(v) for k, v in sorted(dropped.items())}


_MATRICES: dict[tuple[str, tuple[str, ...]], tuple[object, float]] = {}


def _frame1k_matrix(features: str, texts: tuple[str, ...], backend) -> tuple[object, float, bool]:
    """The feature matrix of ``texts`` (``backend`` fitted on them, no labels), its wall-clock seconds, and
    whether it was reused: the arms label the same works, so one backend's matrix serves every arm (the
    last two (backend, texts) pairs are kept)."""
    key = (features, texts)
    if key in _MATRICES:
        X, seconds = _MATRICES[key]
        return X, seconds, True
    t0 = time.perf_counter()
    X = backend.fit(list(texts)).transform(list(texts))
    seconds = time.perf_counter() - t0
    while len(_MATRICES) >= 2:
        _MATRICES.pop(next(iter(_MATRICES)))
    _MATRICES[key] = (X, seconds)
    return X, seconds, False


def evaluate_frame1k(
    folder: Path | str, features: str = "tfidf", arm: str = "adjudicated", folds: int = 5
) -> Frame1kEvaluation:
    """Train and evaluate the student's ``metaresearch`` head on one frame1k arm's labels under
    cross-validation grouped by venue (mapping in the module docstring, section frame1k).

    ``features``: ``tfidf`` (fitted on the evaluated works' texts, no labels) or any other kind of :func:`.features.make_features`. ``arm``: one
    of :data:`FRAME1K_ARMS`. ``folds``: at most this many, fewer when fewer groups, and fewer when fewer
    venue groups hold a positive (each fold can then still test one; said in ``note``). Unweighted.

    Raises ValueError for an unknown arm or backend, ImportError for a backend without its packages,
    FileNotFoundError / ValueError for missing or unreadable frame1k files.
    """
    if arm not in FRAME1K_ARMS:
        raise ValueError(f"frame1k arm {arm!r}: expected one of {', '.join(FRAME1K_ARMS)}")
    backend = make_features(features)
    pool, _ = frame1k_works(Path(folder))
    chosen = [w for w in pool if w.labels[arm] is not None]
    texts = [w.text for w in chosen]
    y = np.array([w.labels[arm] for w in chosen], dtype=int)
    wts = np.ones(len(chosen))
    groups = [w.group for w in chosen]
    sizes = Counter(groups)
    positive_groups = len({g for g, v in zip(groups, y, strict=False) if v})
    k, note = min(folds, len(sizes)), ""
    if 2 <= positive_groups < k:
        k, note = (
            positive_groups,
            f"{positive_groups} venue groups hold a positive: {positive_groups} folds instead of {folds}",
        )

    X, feature_seconds, reused = _frame1k_matrix(features, tuple(texts), backend)
    t1 = time.perf_counter()
    metrics = grouped_cv_metrics(X, y, groups, wts, k, group_name="venue")
    t2 = time.perf_counter()
    if metrics["ap"] is None:
        note = metrics["cv"]
    return Frame1kEvaluation(
        arm=arm,
        features=features,
        n=len(chosen),
        positives=int(y.sum()),
        positive_rate=weighted_rate(y, wts),
        groups=len(sizes),
        venues=len({w.venue for w in chosen if w.venue}),
        without_venue=sum(1 for w in chosen if w.venue is None),
        positive_groups=positive_groups,
        folds=len(metrics["fold_positives"]),
        fold_positives=metrics["fold_positives"],
        ap=metrics["ap"],
        auroc=metrics["auroc"],
        cv=metrics["cv"],
        note=note,
        feature_seconds=feature_seconds,
        features_reused=reused,
        cv_seconds=t2 - t1,
    )


def format_frame1k_table(results: list[Frame1kEvaluation]) -> str:
    """frame1k results as a fixed-width text table, one line per arm x backend; a reused feature matrix's
    seconds (computed once for an earlier line) are in parentheses."""
    head = (
        f"{'arm':<11} {'features':<8} {'n':>4} {'pos':>4} {'pos.rate':>8} {'groups':>6} {'venues':>6} {'no-venue':>8} "
        f"{'folds':>5} {'test pos/fold':<14} {'AP':>6} {'AUROC':>6} {'feat s':>7} {'cv s':>6}"
    )

    lines = [head, "-" * len(head)]
    for r in results:
        per_fold = "/".join(map(str, r.fold_positives)) or "-"
        feat = f"({r.feature_seconds:.1f})" if r.features_reused else f"{r.feature_seconds:.1f}"
        lines.append(
            f"{r.arm:<11} {r.features:<8} {r.n:>4} {r.positives:>4} {r.positive_rate:>8.4f} {r.groups:>6} {r.venues:>6} "
            f"{r.without_venue:>8} {r.folds:>5} {per_fold:<14} {fmt(r.ap):>6} {fmt(r.auroc):>6} "
            f"{feat:>7} {r.cv_seconds:>6.1f}"
        )
    return "\n".join(lines)
