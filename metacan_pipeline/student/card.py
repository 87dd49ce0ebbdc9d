"""The model card of a student model version: what it learned from, how it reads a work, how well each head ranks and
is calibrated on the frozen holdout (with 95% intervals, per language), what each head may claim, and its known limits.

:func:`build_card` assembles the card as a JSON-ready dict from the bundle, the holdout evaluation
(:class:`~.evaluation.HoldoutReport`) and the teachers' qualification standing; :func:`card_markdown` renders it;
:func:`write_card` writes both beside the reliability plots, ``data/reports/<model_version>/model_card.md`` and
``model_card.json``. The release bundle and the site read those files (:func:`card_files`, :func:`read_card`).

Training sets are the sources of ``bundle.training_ids``: the role teachers, and any *reference set* that
``bundle.reference_sets`` describes (:func:`~.training.reference_summaries`: model, source, works, weighted, ...;
read with ``getattr`` so a bundle without it is a bundle of role teachers only). A reference-set head gives machine
scores only; its figures are cross-validated on its own set (its ``student_heads`` row says so).

Sentences a reader sees (the claims and the limits) are :func:`~metacan_pipeline.i18n.N_` sentences: the card stores
the English text with its msgid and values (``{"text", "msgid", "values"}``), so the site says them in French too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from .. import __version__
from ..i18n import N_, Sentence
from ..storage import MetacanStorage
from ..teachers.core.registry import load_registry
from ..teachers.qualification import current_qualification, load_qualification, status_note
from ..vocab import BINARY_TARGETS, CONSTANT_HEAD_STATUS, PREDICTION_STATUS
from .cascade_card import card_cascade, cascade_markdown
from .evaluation import BOOTSTRAP_REPLICATES, BOOTSTRAP_SEED, CI_LEVEL, METRIC_LANGUAGES, HoldoutReport
from .features import STUDENT_FIELDS
from .heads import INNER_FOLDS
from .models import StudentBundle
from .roles import CENSUS, SAMPLE
from .training import STUDENT_CODE_VERSION

CARD_VERSION = 1
CARD_MD, CARD_JSON = "model_card.md", "model_card.json"
#: Below this many labelled holdout works a teacher's figures are called uncertain in the limits.
SMALL_HOLDOUT = 200

_CLAIM_DECIDES = N_(
    "Decides: its quota-calibrated decisions enter candidate and consensus, each with the status %(status)s."
)
_CLAIM_GATE = N_("Makes no decision; the support gate says: %(reason)s")
_CLAIM_CENSUS = N_("Scores only: the census teacher's direct labels, not this head, enter candidate and consensus.")
_CLAIM_REFERENCE = N_("Machine scores only, never a validated label: it learned from the reference set %(source)s.")
_CLAIM_NO_SCORE = N_("No score: %(reason)s; a head that saw one class ranks nothing, so it writes no score.")
_LIMIT_TEXT = N_(
    "The student reads only %(fields)s of a work, never its abstract or full text: a title that does not say what a "
    "work is about cannot be ranked well."
)
_LIMIT_NOT_QUALIFIED = N_(
    "The %(role)s teacher %(teacher)s is not qualified (%(note)s): the heads learned from its labels, so they "
    "inherit its errors."
)
_LIMIT_QUALIFIED = N_("The %(role)s teacher %(teacher)s passed its qualification test (%(note)s).")
_LIMIT_SMALL = N_(
    "The frozen holdout holds %(n)s labelled works of %(source)s: its figures are uncertain, as the wide intervals show."
)
_LIMIT_GATE = N_(
    "%(n)s of %(total)s heads of the sample teacher failed the support gate and make no decision: %(heads)s."
)
_LIMIT_REFERENCE = N_(
    "Heads learned from a reference set (%(sources)s) give machine scores only; they never validate a label."
)
_LIMIT_LANGUAGE = N_("The holdout has no labelled work in %(language)s: no figure is given for that language.")
_LIMIT_UNVALIDATED = N_(
    "Every machine output is unvalidated (%(status)s) unless a human validation of a locked protocol passed its head."
)


def report_dir(root: Path, model_version: str) -> Path:
    """``<data>/reports/<model_version>/``: the card, beside the reliability plots."""
    return Path(root) / "reports" / model_version


def card_files(root: Path, model_version: str) -> list[Path]:
    """The card's files of ``model_version`` under the data folder ``root`` that exist (Markdown, JSON, the
    reliability plots), in name order."""
    folder = report_dir(root, model_version)
    names = [CARD_JSON, CARD_MD]
    out = [folder / n for n in names if (folder / n).is_file()]
    return out + sorted(folder.glob("reliability_*.png"))


def read_card(root: Path, model_version: str) -> dict | None:
    """The card JSON of ``model_version`` (None when it was never written). Raises ValueError naming the file when
    it is not a card."""
    path = report_dir(root, model_version) / CARD_JSON
    if not path.is_file():
        return None
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON ({exc}): materialize student_heads to write the card again") from None
    if not isinstance(card, dict) or card.get("model_version") != model_version:
        raise ValueError(f"{path} is not the model card of {model_version}: materialize student_heads again")
    return card


def _said(sentence: str) -> dict:
    """A reader's sentence as the card stores it: the English text, and its msgid and values for translation."""
    if isinstance(sentence, Sentence):
        return {"text": str(sentence), "msgid": sentence.msgid, "values": dict(sentence.values)}
    return {"text": str(sentence), "msgid": str(sentence), "values": {}}


def _num(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _figure(m: Mapping, name: str) -> dict:
    return {
        "value": _num(m.get(name)),
        "ci_low": _num(m.get(f"{name}_ci_low")),
        "ci_high": _num(m.get(f"{name}_ci_high")),
    }


def _figures(m: Mapping, kind: str) -> dict:
    names = ("ap", "auroc", "ece") if kind == "binary" else ("accuracy", "ece")
    return {n: _figure(m, n) for n in names}


def _json_safe(value):
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return getattr(value, "__name__", None) or str(value)


def feature_description(bundle: StudentBundle) -> dict:
    """``{kind, params, text_fields}``: the backend, the parameters that define its features (a backend's
    ``params``, else a scikit-learn vectorizer's ``get_params``; for TF-IDF also the fitted vocabulary size)."""
    v = bundle.vectorizer
    params = getattr(v, "params", None)
    if params is None and hasattr(v, "get_params"):
        params = v.get_params(deep=False)
    params = dict(_json_safe(params or {}))
    if hasattr(v, "vocabulary_"):
        params["vocabulary_size"] = len(v.vocabulary_)
    return {"kind": bundle.feature_kind, "params": params, "text_fields": list(STUDENT_FIELDS)}


def regularisation(bundle: StudentBundle) -> dict:
    """``{c_grid, inner_folds}`` of the binary heads: the C values each head chose from by inner grouped
    cross-validation (one value: that C, fixed); the categorical heads keep ``PARAMS["logreg"]["C"]``."""
    binary = [h for heads in bundle.heads.values() for h in heads.values() if hasattr(h, "c_grid")]
    grid = sorted({float(c) for h in binary[:1] for c in h.c_grid})
    return {"c_grid": grid, "inner_folds": INNER_FOLDS if len(grid) > 1 else 0}


def qualification_standing(storage: MetacanStorage) -> dict[str, dict]:
    """``{teacher: {status, kappa, note}}`` of the two role teachers (newest ``teacher_qualification`` row of their
    current configuration; ``status`` None when never tested)."""
    registry, cfg = load_registry(), load_qualification()
    out = {}
    for name in (SAMPLE, CENSUS):
        row = current_qualification(storage, registry[name], cfg)
        out[name] = {
            "status": None if row is None else row["status"],
            "kappa": None if row is None else _num(row.get("kappa")),
            "note": status_note(row),
        }
    return out


def _training_sets(bundle: StudentBundle, rows: list[dict], standing: Mapping[str, dict]) -> list[dict]:
    references = getattr(bundle, "reference_sets", None) or {}
    out = []
    for source, ids in bundle.training_ids.items():
        heads = [r for r in rows if r["teacher"] == source]
        counts = {r["target"]: {"labels": r.get("labels"), "positives": r.get("positives")} for r in heads}
        if source in references:
            ref = dict(references[source])
            entry = {
                "name": source,
                "kind": "reference_set",
                "description": f"{ref.get('model')} labels imported from {ref.get('source')}",
                "works": ref.get("works"),
                "design_weights": bool(ref.get("weighted", False)),
                "qualification": None,
            }
        else:
            role = "sample" if source == SAMPLE else "census" if source == CENSUS else None
            entry = {
                "name": source,
                "kind": f"{role}_teacher" if role else "teacher",
                "description": None,
                "works": None,
                "design_weights": source == SAMPLE,
                "qualification": standing.get(source),
            }
        out.append({**entry, "training_works": len(ids), "label_counts": counts})
    return out


def _claim(source: str, row: Mapping, references: Mapping, standing: Mapping[str, dict]) -> dict:
    """What one head may claim: ``{decides, status, sentence}``."""
    if no_score(row):
        return {"decides": False, "status": None, **_said(N_(_CLAIM_NO_SCORE, reason=no_score(row)))}
    if source in references:
        return {"decides": False, "status": None, **_said(N_(_CLAIM_REFERENCE, source=source))}
    if source != SAMPLE:
        return {"decides": False, "status": None, **_said(_CLAIM_CENSUS)}
    sample = standing.get(SAMPLE) or {}
    if sample.get("status") != "qualified":
        reason = (
            f"sample {sample.get('note')}"  # as predictions states the gate reason of a head it does not let decide
        )
        return {"decides": False, "status": None, **_said(N_(_CLAIM_GATE, reason=reason))}
    if row.get("gate_passed"):
        return {"decides": True, "status": PREDICTION_STATUS, **_said(N_(_CLAIM_DECIDES, status=PREDICTION_STATUS))}
    return {"decides": False, "status": None, **_said(N_(_CLAIM_GATE, reason=row.get("gate_reason") or "no gate"))}


def no_score(row: Mapping) -> str | None:
    """Why the binary head of a ``student_heads`` row gives no score (its status ``constant: <reason>``), else None."""
    status = row.get("status") or ""
    if row.get("kind", "binary") != "binary" or not status.startswith(CONSTANT_HEAD_STATUS):
        return None
    return status.removeprefix(CONSTANT_HEAD_STATUS)


def _heads(bundle: StudentBundle, report: HoldoutReport, standing: Mapping[str, dict]) -> list[dict]:
    references = getattr(bundle, "reference_sets", None) or {}
    out = []
    for r in report.rows:
        source, target, kind = r["teacher"], r["target"], r["kind"]
        languages = report.by_language.get((source, target), {})
        out.append(
            {
                "source": source,
                "target": target,
                "kind": kind,
                "status": r["status"],
                "labels": r.get("labels"),
                "positives": r.get("positives") if kind == "binary" else None,
                "n_train": r.get("n_train"),
                "holdout_n": r.get("holdout_n"),
                "holdout_positives": r.get("holdout_positives") if kind == "binary" else None,
                "metrics": _figures(r, kind),
                "metric_note": r.get("metric_note"),
                "by_language": {
                    code: {
                        "n": m.get("n"),
                        "positives": m.get("positives") if kind == "binary" else None,
                        "metrics": _figures(m, kind),
                        "note": m.get("note"),
                    }
                    for code, m in languages.items()
                },
                "support_gate": None
                if r.get("gate_passed") is None
                else {"passed": bool(r["gate_passed"]), "reason": r.get("gate_reason")},
                "no_score": no_score(r),
                "regularisation": (getattr(bundle.heads.get(source, {}).get(target), "c_choice_", None) or {}).get(
                    "how"
                ),
                "claim": _claim(source, r, references, standing),
            }
        )
    return out


def _limits(card: dict, holdout_by_source: Mapping[str, int]) -> list[dict]:
    out = [_said(N_(_LIMIT_TEXT, fields=", ".join(card["features"]["text_fields"])))]
    for t in card["training_sets"]:
        q = t.get("qualification")
        if q is None:
            continue
        role = "sample" if t["kind"] == "sample_teacher" else "census"
        sentence = _LIMIT_QUALIFIED if q["status"] == "qualified" else _LIMIT_NOT_QUALIFIED
        out.append(_said(N_(sentence, role=role, teacher=t["name"], note=q["note"])))
    for source, n in holdout_by_source.items():
        if n < SMALL_HOLDOUT:
            out.append(_said(N_(_LIMIT_SMALL, n=n, source=source)))
    refs = [t["name"] for t in card["training_sets"] if t["kind"] == "reference_set"]
    sample_heads = [h for h in card["heads"] if h["support_gate"] is not None and h["source"] not in refs]
    failed = [h["target"] for h in sample_heads if not h["support_gate"]["passed"]]
    if failed:
        out.append(_said(N_(_LIMIT_GATE, n=len(failed), total=len(sample_heads), heads=", ".join(failed))))
    if refs:
        out.append(_said(N_(_LIMIT_REFERENCE, sources=", ".join(refs))))
    seen = {code for h in card["heads"] for code in h["by_language"]}
    out += [_said(N_(_LIMIT_LANGUAGE, language=code)) for code in METRIC_LANGUAGES if code not in seen]
    out.append(_said(N_(_LIMIT_UNVALIDATED, status=PREDICTION_STATUS)))
    return out


def build_card(
    bundle: StudentBundle,
    report: HoldoutReport,
    standing: Mapping[str, dict],
    *,
    created_at: str | None,
    code_version: str,
    holdout_works: int,
) -> dict:
    """The model card of ``bundle`` (module docstring) as a JSON-ready dict. ``standing``: the role teachers'
    qualification (:func:`qualification_standing`); ``created_at``: when the version was published (ISO 8601);
    ``code_version``: the student code version the version names; ``holdout_works``: frame works in the frozen
    holdout."""
    references = getattr(bundle, "reference_sets", None) or {}
    holdout_by_source = {
        r["teacher"]: r["holdout_n"]
        for r in report.rows
        if r["target"] == BINARY_TARGETS[0] and r["teacher"] not in references
    }
    card = {
        "card_version": CARD_VERSION,
        "model_version": bundle.model_version,
        "created_at": created_at,
        "code_version": {"package": __version__, "student": code_version},
        "holdout": {
            "version": bundle.holdout_version,
            "frame_works": holdout_works,
            "labelled_works": holdout_by_source,
            "interval": {
                "level": CI_LEVEL,
                "method": "percentile bootstrap over holdout works, design weights kept",
                "replicates": BOOTSTRAP_REPLICATES,
                "seed": BOOTSTRAP_SEED,
            },
            "languages": list(METRIC_LANGUAGES),
        },
        "training_sets": _training_sets(bundle, report.rows, standing),
        "features": feature_description(bundle),
        "regularisation": regularisation(bundle),
        "distillation": dict(getattr(bundle, "distillation", {}) or {}),
        "heads": _heads(bundle, report, standing),
        "reliability_plots": {t: f"reliability_{t}.png" for t in report.curves},
    }
    card["limits"] = _limits(card, holdout_by_source)
    return card


def _fmt(f: Mapping | None) -> str:
    if not f or f.get("value") is None:
        return "n/a"
    if f.get("ci_low") is None:
        return f"{f['value']:.3f}"
    return f"{f['value']:.3f} [{f['ci_low']:.3f}, {f['ci_high']:.3f}]"


def distillation_line(d: dict) -> str:
    """The card's line on how the binary heads were distilled (:mod:`.distill`), or that they were not."""
    if not d:
        return "- Distillation: none (every head learned from its labels alone)"
    return (
        f"- Distillation: each trained binary head is the mean of its label fit and a ridge regression (alpha "
        f"{d['ridge_alpha']:g}) of a `{d['encoder']}` head's log-odds (same labels) over {d['transfer_works']} "
        f"unlabelled transfer texts ({d['frame_transfer_works']} of them a sample of the frame)"
    )


def card_markdown(card: dict) -> str:
    """The card as Markdown (the Dagster metadata, ``model_card.md`` and the release bundle's copy)."""
    lines = [
        f"# Model card: {card['model_version']}",
        "",
        f"- Published: {card['created_at'] or 'not recorded'}",
        f"- Code version: metacan_pipeline {card['code_version']['package']}, {card['code_version']['student']}",
        f"- Features: `{card['features']['kind']}` on {', '.join(card['features']['text_fields'])}; parameters "
        f"`{json.dumps(card['features']['params'], sort_keys=True)}`",
        "- Binary heads: logistic regression, "
        + (
            f"C chosen per head among {', '.join(f'{c:g}' for c in card['regularisation']['c_grid'])} by "
            f"{card['regularisation']['inner_folds']}-fold grouped cross-validation on its training works"
            if len(card["regularisation"]["c_grid"]) > 1
            else f"C = {card['regularisation']['c_grid'][0]:g}"
            if card["regularisation"]["c_grid"]
            else "none"
        ),
        distillation_line(card.get("distillation") or {}),
        f"- Frozen holdout {card['holdout']['version']}: {card['holdout']['frame_works']} frame works; labelled: "
        + ", ".join(f"{s} {n}" for s, n in card["holdout"]["labelled_works"].items()),
        f"- Intervals: {card['holdout']['interval']['level']:.0%} {card['holdout']['interval']['method']} "
        f"({card['holdout']['interval']['replicates']} replicates, seed {card['holdout']['interval']['seed']})",
        "",
        "## Training sets",
        "",
        "| source | kind | training works | design weights | qualification |",
        "|---|---|---|---|---|",
    ]
    for t in card["training_sets"]:
        q = t["qualification"]
        qual = "n/a (not a teacher)" if q is None else f"{q['status'] or 'not tested'}: {q['note']}"
        weights = "used" if t["design_weights"] else "not used"
        lines.append(f"| {t['name']} | {t['kind']} | {t['training_works']} | {weights} | {qual} |")
    lines += [
        "",
        "## Heads",
        "",
        "Binary heads: AP, AUROC and ECE on the frozen holdout, 95% interval in brackets; categorical heads: "
        "accuracy and ECE. A reference set's heads: AP and AUROC under 5-fold grouped cross-validation on the set "
        "itself (holdout n 0: the frame's holdout holds none of its labels).",
        "",
        "| source | head | labels (positives) | holdout n | AP / accuracy | AUROC | ECE | may claim |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for h in card["heads"]:
        m = h["metrics"]
        first = m.get("ap") if h["kind"] == "binary" else m.get("accuracy")
        labels = f"{h['labels']} ({h['positives']})" if h["kind"] == "binary" else f"{h['labels']}"
        lines.append(
            f"| {h['source']} | {h['target']} | {labels} | {h['holdout_n']} | {_fmt(first)} | {_fmt(m.get('auroc'))} | "
            f"{_fmt(m.get('ece'))} | {h['claim']['text']} |"
        )
    per_lang = [(h, code, m) for h in card["heads"] for code, m in h["by_language"].items()]
    if per_lang:
        lines += [
            "",
            "## Per language",
            "",
            "| source | head | language | holdout n | AP / accuracy | AUROC | ECE |",
            "|---|---|---|---|---|---|---|",
        ]
        for h, code, m in per_lang:
            f = m["metrics"]
            first = f.get("ap") if h["kind"] == "binary" else f.get("accuracy")
            lines.append(
                f"| {h['source']} | {h['target']} | {code} | {m['n']} | {_fmt(first)} | {_fmt(f.get('auroc'))} | "
                f"{_fmt(f.get('ece'))} |"
            )
    lines += ["", "## Reliability", ""]
    lines += [f"![reliability of the {t} heads]({name})" for t, name in card["reliability_plots"].items()]
    lines += cascade_markdown(card.get("cascade") or [])
    lines += ["", "## Known limits", ""]
    lines += [f"- {limit['text']}" for limit in card["limits"]]
    return "\n".join(lines) + "\n"


def write_card(root: Path, card: dict) -> tuple[Path, Path]:
    """Write ``model_card.json`` and ``model_card.md`` of ``card`` under :func:`report_dir` (each atomically);
    returns their paths."""
    folder = report_dir(root, card["model_version"])
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, text in (
        (CARD_JSON, json.dumps(card, indent=2, sort_keys=True, allow_nan=False) + "\n"),
        (CARD_MD, card_markdown(card)),
    ):
        path = folder / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        out.append(path)
    return out[0], out[1]


def add_cascade(root: Path, model_version: str, rows: list[dict]) -> tuple[Path, Path] | None:
    """Write the cascade's certified thresholds (``cascade_thresholds`` rows of one run, :func:`.cascade_card.card_cascade`)
    into the card of ``model_version`` as its ``cascade`` (JSON) and "## Cascade" section (Markdown), replacing the
    last run's; returns the card's paths, or None when the version has no card (trained before cards existed). The
    card's other content is untouched; ``student_heads`` writing the card again drops the section until the cascade
    runs again."""
    card = read_card(root, model_version)
    if card is None:
        return None
    card["cascade"] = card_cascade(rows)
    return write_card(root, card)


def published_at(storage: MetacanStorage, model_version: str) -> str | None:
    """When ``model_version`` was published (``model_versions.created_at``, ISO 8601), or None when unregistered."""
    with storage.connect(read_only=True) as con:
        row = con.execute("SELECT created_at FROM model_versions WHERE model_version = ?", [model_version]).fetchone()
    return None if row is None or row[0] is None else row[0].isoformat(timespec="seconds")


def model_card(
    storage: MetacanStorage, bundle: StudentBundle, report: HoldoutReport, holdout_works: int
) -> tuple[dict, str, tuple[Path, Path]]:
    """Build and write the card of ``bundle`` (:func:`build_card`, :func:`write_card`) under ``storage``'s data
    folder; returns ``(card, its Markdown, (json path, md path))``. The same version, labels and holdout give the
    same card, byte for byte (the date is the version's publication)."""
    card = build_card(
        bundle,
        report,
        qualification_standing(storage),
        created_at=published_at(storage, bundle.model_version),
        code_version=STUDENT_CODE_VERSION,
        holdout_works=holdout_works,
    )
    paths = write_card(storage.root, card)
    return card, card_markdown(card), paths
