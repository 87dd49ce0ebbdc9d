"""The cascade where a teacher is expensive, measured offline on the pilot's frontier labels: how many teacher calls
certified student decisions save, and how far the cascade's labels agree with a full census by the same teacher.

*The teacher* is a stub (:class:`StubTeacher`) that answers from the pilot's labels and counts its calls. *The heads*:
``metaresearch`` (the pilot's tiers, T1/T2 in scope) and ``about_ca_system`` (the frame1k arms' ``about_ca``), the
two targets the labels decide. Label sets (``--sets``):

- ``screening_a`` / ``screening_b``: the screening set's double-screened works (``labels_joined.json`` with text,
  :func:`metacan_pipeline.student.pilot_eval.pilot_works`), screener a's or b's labels, with their design weights
  (fitting, certification through the Kish effective size, and every rate below is design-weighted);
- ``frame1k``: the frame1k works' ``adjudicated`` labels (the verdict where the arms disagreed, else their shared
  scope: :func:`metacan_pipeline.student.pilot_frame1k.frame1k_works`), unweighted (the files carry no weights);
- ``frame1k_about_ca``: the other head these labels decide, ``about_ca_system``, on the same works, from the
  ``opus_r1`` arm (the most positives of the three, 12 of 750) as the import converts it
  (:func:`metacan_pipeline.teachers.imports.pilot.frame1k_imports`); no adjudication covers it.

*Procedure*, per set: the student's title-only texts, one feature backend (``--features``, any kind
:func:`metacan_pipeline.student.features.make_features` takes; fitted on the set's texts, no labels), then every work
scored out of fold by a logistic-regression head (``heads.fit_logreg``, the student's, design weights where any) under
5-fold ``GroupKFold`` (groups as the pilot evaluation's: titles for the screening set, venues for frame1k). Then
``--repeats`` random splits of the groups: a *calibration* share (``--calibration``, 0.5) the teacher labels, on which
:func:`metacan_pipeline.student.cascade.certify_head` certifies both thresholds (Clopper-Pearson) per target
(``--targets``: ``0.9``, or ``0.9:0.99`` for precision then NPV; the NPV target is the precision's unless given) and
scan (``--scans``: the fixed sequence on a grid of 25 works or on every score, or the lowest passing threshold), the
negative side capped or not by a certified recall (``--recalls``: ``none`` or a share, ``certify_recall``); on
the *rest*,
:func:`metacan_pipeline.student.cascade.plan_cascade` with a call budget per ``--budgets`` (a share of the rest;
``band``: the whole band) and band order (``--orders``: ``middle`` or ``top``), the stub teacher labels what the
plan sends it.

*Figures* per set x target x budget, means over the repeats (``rest`` = the works not in the calibration split):

- ``saved``: the share of the rest not sent to the teacher (1 - calls / rest); ``saved_all``: the same over every
  work, counting the calibration split's labels as calls;
- ``settled``: the (weighted) share of the rest with a label (a certified decision or the teacher's);
- ``agree``: the (weighted) share of settled rest works whose cascade label equals the census label (the teacher's
  on every work); ``prec`` / ``npv``: the census's positive (negative) rate among the certified positives (negatives),
  ``-`` when there are none; ``recall``: the (weighted) share of the census positives of the rest that the cascade
  labels positive (teacher or certified), which the budget limits too; ``kept``: the (weighted) share of them the
  negative side does not decide negative (what ``certify_recall`` bounds); ``miss``: repeats whose certified
  positives' or negatives' census rate, or ``kept``, fell below its target (the 95% bounds promise at most about 5%
  per side, on average over calibration draws);
  ``+cert`` / ``-cert``: splits with a positive / negative threshold (the negative one capped by the recall side when
  there is one); ``vac``: splits whose negative threshold in effect is the NPV side's and is vacuous (every
  calibration work together meets the NPV target: ``Certified.vacuous``).

Ratios: ``<set>_calls/census`` at the first scan, target, recall and order and a 10% budget (teacher calls of the
cascade, calibration included, over the census's calls: one per work). Columns ``target`` and ``rcl.tg`` are the
targets asked for; ``recall`` and ``kept`` are measured on the rest.

Usage: ``nice .venv/bin/python benchmarks/bench_cascade.py [--features tfidf] [--repeats 20]``;
``--smoke``: frame1k only, one repeat, one target, two budgets. Output: a table on stdout and
``benchmarks/out/cascade.json``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from _common import SHARED_DATA, add_smoke_arg, machine_line, ratio, record, run_info, say

SETS = ("screening_a", "screening_b", "frame1k", "frame1k_about_ca")


@dataclass
class LabelSet:
    """One set's works: texts, CV groups, the census's 1/0 labels, design weights (None: unweighted)."""

    name: str
    ids: list
    texts: list
    groups: list
    labels: object
    weights: object


class StubTeacher:
    """A census teacher that answers from saved labels (work id -> 1/0) and counts its calls (one per work)."""

    def __init__(self, labels: dict):
        self.labels, self.calls = labels, 0

    def label(self, ids) -> list[int]:
        self.calls += len(ids)
        missing = [i for i in ids if i not in self.labels]
        if missing:
            raise KeyError(f"the stub teacher has no label for {missing[:3]}")
        return [self.labels[i] for i in ids]


def load_set(name: str, pilot) -> LabelSet:
    import numpy as np

    from metacan_pipeline.student.pilot_eval import pilot_works
    from metacan_pipeline.student.pilot_frame1k import frame1k_works

    if name == "frame1k":
        works = [w for w in frame1k_works(pilot)[0] if w.labels["adjudicated"] is not None]
        y = np.array([w.labels["adjudicated"] for w in works])
        return LabelSet(name, [w.id for w in works], [w.text for w in works], [w.group for w in works], y, None)
    if name == "frame1k_about_ca":
        from metacan_pipeline.teachers.imports.pilot import FRAME1K_TEACHERS, frame1k_imports

        teacher = FRAME1K_TEACHERS["opus_r1"][0]
        (imp,) = [i for i in frame1k_imports(pilot) if i.spec.teacher == teacher]
        flag = {r.label["id"]: r.label["about_ca_system"] for r in imp.records if r.error is None}
        works = [w for w in frame1k_works(pilot)[0] if isinstance(flag.get(w.id), bool)]
        y = np.array([int(flag[w.id]) for w in works])
        return LabelSet(name, [w.id for w in works], [w.text for w in works], [w.group for w in works], y, None)
    attr = "y_a" if name == "screening_a" else "y_b"
    works = [w for w in pilot_works(pilot)[0] if w.stratum is not None and getattr(w, attr) is not None]
    y = np.array([getattr(w, attr) for w in works])
    w = np.array([w.weight for w in works], dtype=float)
    return LabelSet(name, [x.id for x in works], [x.text for x in works], [x.group for x in works], y, w)


def out_of_fold(ls: LabelSet, features: str, folds: int = 5):
    """Every work's score by a head that did not train on it (grouped CV), and the seconds it took."""
    import numpy as np
    from sklearn.model_selection import GroupKFold

    from metacan_pipeline.student.features import make_features
    from metacan_pipeline.student.heads import fit_logreg

    t = time.perf_counter()
    X = make_features(features).fit(ls.texts).transform(ls.texts)
    w = np.ones(len(ls.texts)) if ls.weights is None else ls.weights
    oof = np.full(len(ls.texts), np.nan)
    for train, test in GroupKFold(n_splits=folds).split(X, ls.labels, ls.groups):
        oof[test] = fit_logreg(X[train], ls.labels[train], w[train]).predict_proba(X[test])[:, 1]
    return oof, time.perf_counter() - t


def _rate(mask, y, w):

    total = float(w[mask].sum())
    return None if total == 0 else float((w[mask] * y[mask]).sum() / total)


def run_split(ls: LabelSet, scores, cal, rest, targets: str, budget: str, scan: str, order: str, recall: str) -> dict:
    """Certify on ``cal``, run the cascade on ``rest`` with the stub teacher; the figures of one split."""
    import numpy as np

    from metacan_pipeline.student.cascade import NEGATIVE, POSITIVE, TEACHER, certify_head, plan_cascade

    y = ls.labels
    w = np.ones(len(y)) if ls.weights is None else ls.weights
    teacher = StubTeacher({ls.ids[i]: int(y[i]) for i in range(len(y))})
    cal_labels = np.array(teacher.label([ls.ids[i] for i in cal]))  # the calibration split is labelled
    kind, _, step = scan.partition(":")
    target, _, npv_target = targets.partition(":")
    target, npv_target = float(target), float(npv_target or target)
    th = certify_head(
        scores[cal],
        cal_labels,
        target,
        negative_target=npv_target,
        weights=None if ls.weights is None else w[cal],
        scan="lowest" if kind == "lowest" else "fixed-sequence",
        step=int(step or 1),
        negative_recall=None if recall == "none" else float(recall),
    )
    calls_before = teacher.calls
    n_budget = len(rest) if budget == "band" else int(round(float(budget) * len(rest)))
    plan = plan_cascade(scores[rest], th, n_budget, order=order)
    sent = rest[plan.decisions == TEACHER]
    label = np.full(len(rest), -1)
    label[plan.decisions == POSITIVE], label[plan.decisions == NEGATIVE] = 1, 0
    label[plan.decisions == TEACHER] = teacher.label([ls.ids[i] for i in sent])
    yr, wr = y[rest], w[rest]
    settled = label >= 0
    pos, neg = plan.decisions == POSITIVE, plan.decisions == NEGATIVE
    prec, npv = _rate(pos, yr, wr), _rate(neg, 1 - yr, wr)
    census_pos = yr == 1
    # the census positives of the rest the negative side leaves undecided (teacher, unsettled or positive)
    kept = None if not census_pos.any() else float(wr[census_pos & ~neg].sum() / wr[census_pos].sum())
    return {
        "t_pos": th.positive.threshold,
        "t_neg": th.negative_threshold,
        # the negative threshold in effect is the NPV side's and that side is met by the base rate alone
        "vacuous_neg": int(
            th.negative_threshold is not None and th.negative.vacuous and th.negative_threshold == th.negative.threshold
        ),
        "calls": teacher.calls,
        "rest_calls": teacher.calls - calls_before,
        "saved": 1 - (teacher.calls - calls_before) / len(rest),
        "saved_all": 1 - teacher.calls / len(y),
        "settled": float(wr[settled].sum() / wr.sum()),
        "agree": _rate(settled, (label == yr).astype(float), wr),
        "prec": prec,
        "npv": npv,
        "n_pos": int(pos.sum()),
        "n_neg": int(neg.sum()),
        "recall": None if not census_pos.any() else float(wr[census_pos & (label == 1)].sum() / wr[census_pos].sum()),
        "kept": kept,
        "miss": int(
            (prec is not None and prec < target)
            or (npv is not None and npv < npv_target)
            or (recall != "none" and kept is not None and kept < float(recall))
        ),
    }


def _mean(rows: list[dict], key: str):
    vals = [r[key] for r in rows if r[key] is not None]
    return None if not vals else sum(vals) / len(vals)


def _share(value: str) -> bool:
    """``value`` is a number strictly between 0 and 1."""
    try:
        return 0 < float(value) < 1
    except ValueError:
        return False


def check_args(args) -> None:
    """SystemExit naming the first option value the benchmark cannot run."""
    for r in args.recalls:
        if r != "none" and not _share(r):
            raise SystemExit(f"--recalls {r}: expected a share in (0, 1), or none")
    for s in args.scans:
        if s != "lowest" and not (s.startswith("fixed:") and s[6:].isdigit() and int(s[6:]) >= 1):
            raise SystemExit(f"--scans {s}: expected fixed:<step> (a whole number of works, 1 or more) or lowest")
    for tg in args.targets:
        if tg.count(":") > 1 or not all(_share(x) for x in tg.split(":")):
            raise SystemExit(f"--targets {tg}: expected a precision in (0, 1), or <precision>:<npv>")
    for b in args.budgets:
        if b != "band" and not (_share(b) or b.strip() in ("0", "0.0", "1", "1.0")):
            raise SystemExit(f"--budgets {b}: expected a share of the rest between 0 and 1, or 'band'")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--features", default="tfidf", help="feature backend (features.make_features kinds)")
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument(
        "--targets",
        nargs="+",
        default=["0.8", "0.9", "0.9:0.99"],
        help="precision targets; <precision>:<npv> sets the NPV target apart (default: the same)",
    )
    ap.add_argument("--budgets", nargs="+", default=["0", "0.1", "0.2", "band"])
    ap.add_argument(
        "--scans",
        nargs="+",
        default=["fixed:25", "fixed:1", "lowest"],
        help="certify's scan: fixed:<step> (fixed sequence, sets every <step> works) or lowest",
    )
    ap.add_argument(
        "--recalls",
        nargs="+",
        default=["none", "0.5"],
        help="recall the negative side must keep (certify_recall), or none",
    )
    ap.add_argument("--orders", nargs="+", default=["middle", "top"], choices=["middle", "top"], help="band order")
    ap.add_argument("--calibration", type=float, default=0.5, help="share of the groups the teacher labels first")
    ap.add_argument("--repeats", type=int, default=20, help="random calibration/rest splits")
    ap.add_argument("--pilot", default=str(SHARED_DATA / "metacan_pilot"))
    ap.add_argument("--name", default="", help="suffix of the result file")
    add_smoke_arg(ap, "frame1k only, one repeat, target 0.9, budgets 0 and 0.1")
    args = ap.parse_args()
    if args.smoke:
        args.sets, args.repeats, args.targets, args.budgets = ["frame1k"], 1, ["0.9"], ["0", "0.1"]
        args.scans, args.orders, args.recalls = ["fixed:25"], ["middle"], ["none", "0.5"]
    check_args(args)
    from pathlib import Path

    from sklearn.model_selection import GroupShuffleSplit

    started = run_info()
    say(machine_line())
    figures: dict = {"features": args.features, "repeats": args.repeats, "calibration": args.calibration, "sets": {}}
    rows = []
    for name in args.sets:
        ls = load_set(name, Path(args.pilot))
        scores, seconds = out_of_fold(ls, args.features)
        say(f"{name}: {len(ls.ids)} works, {int(ls.labels.sum())} positives, out-of-fold scores in {seconds:.1f} s")
        splits = list(
            GroupShuffleSplit(n_splits=args.repeats, train_size=args.calibration, random_state=0).split(
                scores, ls.labels, ls.groups
            )
        )
        per = {}
        combos = [
            (s, t, r, o, b)
            for s in args.scans
            for t in args.targets
            for r in args.recalls
            for o in args.orders
            for b in args.budgets
        ]
        for scan, target, recall, order, budget in combos:
            runs = [run_split(ls, scores, cal, rest, target, budget, scan, order, recall) for cal, rest in splits]
            summary = {k: _mean(runs, k) for k in runs[0]}
            summary["miss"] = sum(r["miss"] for r in runs)
            summary["certified_pos_splits"] = sum(r["t_pos"] is not None for r in runs)
            summary["certified_neg_splits"] = sum(r["t_neg"] is not None for r in runs)
            summary["vacuous_neg"] = sum(r["vacuous_neg"] for r in runs)
            per[f"{scan}/{target}/{recall}/{order}/{budget}"] = summary
            rows.append((name, scan, target, recall, order, budget, summary))
        figures["sets"][name] = {
            "works": len(ls.ids),
            "positives": int(ls.labels.sum()),
            "weighted": ls.weights is not None,
            "score_seconds": seconds,
            "runs": per,
        }

    def f(v, spec=".3f"):
        return "-" if v is None else format(v, spec)

    head = (
        f"{'set':<12} {'scan':<8} {'target':>8} {'rcl.tg':>6} {'order':<6} {'budget':>6} {'t-':>6} {'t+':>6} "
        f"{'+cert':>5} "
        f"{'-cert':>5} {'vac':>3} {'calls':>6} {'saved':>6} {'sv.all':>6} {'settled':>7} {'agree':>6} {'prec':>6} "
        f"{'npv':>6} {'recall':>6} {'kept':>6} {'miss':>4}"
    )
    print(f"cascade, features {args.features}, {args.repeats} splits, calibration {args.calibration}: {machine_line()}")
    print(head)
    print("-" * len(head))
    for name, scan, target, recall, order, budget, s in rows:
        print(
            f"{name:<12} {scan:<8} {target:>8} {recall:>6} {order:<6} {budget:>6} {f(s['t_neg']):>6} "
            f"{f(s['t_pos']):>6} "
            f"{s['certified_pos_splits']:>5} {s['certified_neg_splits']:>5} {s['vacuous_neg']:>3} "
            f"{f(s['rest_calls'], '.1f'):>6} {f(s['saved']):>6} {f(s['saved_all']):>6} "
            f"{f(s['settled']):>7} {f(s['agree']):>6} {f(s['prec']):>6} {f(s['npv']):>6} {f(s['recall']):>6} "
            f"{f(s['kept']):>6} "
            f"{s['miss']:>4}"
        )
    headline = {}
    for name in args.sets:
        s = figures["sets"][name]["runs"].get(
            f"{args.scans[0]}/{args.targets[0]}/{args.recalls[0]}/{args.orders[0]}/0.1"
        )
        if s is not None:
            headline[f"{name}_calls/census"] = ratio(s["calls"], figures["sets"][name]["works"])
    record("cascade", figures, ratios=headline, name=args.name, started=started, smoke=args.smoke)


if __name__ == "__main__":
    main()
