"""Label Studio for groups that code there: a protocol's coding tasks exported with a labeling config
(:mod:`.labelstudio_import` reads the finished codes back).

Formats followed (HumanSignal/label-studio documentation, ``docs/source/``):

- Tasks (``guide/tasks.md``, "Basic Label Studio JSON format"): a JSON list of ``{"data": {...}}``; the labeling
  config's object tags read ``data`` keys (``<Text value="$key">`` shows plain text). :func:`export_tasks` puts the
  task's evidence (only what :func:`metacan_pipeline.audit.coding.evidence.task_evidence` keeps) and ``work_id``,
  ``protocol_id`` and ``evidence_sha256`` in ``data``, one-line display strings of it (``line_*``), and the abstract
  the coding page shows (``abstract``: fetched through the abstract cascade when the export is written, by the
  ``abstracts`` callable the caller gives, or a sentence saying why there is none; ``abstract_source``: the line naming
  the source that gave it; ``abstract_sha256``: the SHA-256 under which the store archived it, which the import
  records with each answer). No prediction, score or label is exported
  (Label Studio's ``predictions`` key is never written), and no link to a page that shows a machine classification
  (no openalex.org address: OpenAlex's work pages show its topics), so coders stay masked as on the coding pages.
- Labeling config (``tags/choices.md``, ``tags/choice.md``, ``tags/textarea.md``, ``tags/header.md``):
  :func:`labeling_config` writes one ``<Choices>`` per SPEC section 3 field with every value of
  :mod:`metacan_pipeline.vocab` (``choice="multiple"`` for ``categories``), ``true``/``false`` for the booleans, a
  ``<Choices name="unresolved">`` with the one choice ``true``, and a ``<TextArea name="note">``
  (``maxSubmissions="1"``). A ``<Choice>`` shows its ``value`` and writes its ``alias`` into the annotation's result
  ("If used, the alias replaces the choice value in the annotation results. Alias does not display in the
  interface."), so ``value`` is the display name a coder reads (the coding page's, given as ``names``) and ``alias``
  the vocabulary code the import reads. The fields an answer needs (:data:`REQUIRED`) are ``required="true"``
  ("Validate whether a choice has been selected") and hidden once ``unresolved`` is chosen
  (``visibleWhen="choice-unselected"``, ``whenTagName="unresolved"``: an unresolved answer may leave them empty);
  ``domain`` is shown, and then required, only when ``metaresearch`` is chosen (``visibleWhen="choice-selected"``,
  ``whenTagName``, ``whenChoiceValue`` naming the choice's value). ``categories`` has one more choice, ``none`` (not
  meta-research), because Label Studio writes no result for a field left empty and an empty answer must not be read
  as a negative.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from xml.sax.saxutils import quoteattr

from ... import vocab
from .errors import CodingError
from .store import CodingStore

#: The extra ``categories`` choice that says "none of them: not meta-research" (mapped to ``[]`` on import).
NO_CATEGORY = "none"
#: The object tag every control labels (a ``<Text>`` showing the title).
OBJECT_TAG = "title"
#: The values of a boolean control.
BOOLEANS = ("true", "false")
BOOLEAN_CONTROLS = frozenset({"about_ca_system", "about_ca_topic", "unresolved"})
SINGLE_CHOICE: dict[str, tuple[str, ...]] = {
    "domain": tuple(d for d in vocab.DOMAINS if d != "not_metaresearch"),  # shown with metaresearch only
    "study_design": vocab.STUDY_DESIGNS,
    "genre": vocab.GENRES,
    "about_ca_system": BOOLEANS,
    "about_ca_topic": BOOLEANS,
    "confidence": vocab.CONFIDENCES,
    "unresolved": ("true",),
}
#: Control name -> result type, for every control of :func:`labeling_config`.
CONTROLS: dict[str, str] = {"categories": "choices", **dict.fromkeys(SINGLE_CHOICE, "choices"), "note": "textarea"}
#: The controls an answer that is not unresolved must give (:func:`metacan_pipeline.audit.coding.validate.validate_answer`),
#: ``domain`` only with ``metaresearch``.
REQUIRED = ("categories", "domain", "study_design", "genre", "about_ca_system", "about_ca_topic")
#: The names shown for a code when the caller gives none: the site's category names, yes/no, and the code itself.
DEFAULT_NAMES: dict[str, dict[str, str]] = {
    "categories": {**vocab.CATEGORY_DISPLAY, NO_CATEGORY: "None of these: not meta-research"},
    "about_ca_system": {"true": "Yes", "false": "No"},
    "about_ca_topic": {"true": "Yes", "false": "No"},
    "unresolved": {"true": "Unresolved: I cannot decide"},
}
_HEADERS = {
    "categories": "Categories (several allowed; 'None of these' means not meta-research)",
    "domain": "Domain (with Metaresearch)",
    "study_design": "Study design",
    "genre": "Genre",
    "about_ca_system": "Studies the Canadian research system itself",
    "about_ca_topic": "Canada is a substantive subject",
    "confidence": "Your confidence (optional)",
    "unresolved": "Unresolved: I cannot decide (the other fields may then stay empty; say why in the note)",
}
#: The display lines of a task, in order: data key -> (label, evidence keys).
_LINES: dict[str, tuple[str, tuple[str, ...]]] = {
    "line_record": ("", ("year", "language", "type", "venue")),
    "line_institutions": ("Canadian institutions", ("ca_institutions",)),
    "line_funders": ("Funders", ("funders",)),
    "line_keywords": ("Keywords", ("keywords",)),
    "line_links": ("Full text", ("full_text_url",)),
}
#: What a task's ``abstract`` says when there is no abstract text, by the fetcher's status, or, for an answer of the
#: abstract cascade that asked more than OpenAlex, by why no source gave one (the coding page's words).
ABSTRACT_SENTENCES: dict[str, str] = {
    "none": "OpenAlex holds no abstract of this work.",
    "missing": "OpenAlex has no record under this id.",
    "failed": "The abstract could not be fetched when these tasks were exported; follow the full-text link.",
    "not_fetched": "The abstract was not fetched for this export; follow the full-text link.",
    "no_ids": "No abstract: OpenAlex has none, and the work has no DOI or PMID by which to ask Europe PMC or Crossref. "
    "Follow the full-text link.",
    "none_had_one": "No abstract: none of the sources asked has one. Follow the full-text link.",
}
#: The sources' names, as a task's ``abstract_source`` line gives them.
SOURCE_NAMES = {"openalex": "OpenAlex", "europepmc": "Europe PMC", "crossref": "Crossref"}
#: Hosts whose pages show machine classifications of a work (OpenAlex's topics, concepts): never linked.
CLASSIFYING_HOSTS = ("openalex.org",)

#: ``abstracts(work ids)`` -> ``{work id: answer}``, an answer having ``status`` (``ok``, ``none``, ``missing``,
#: ``failed``) and ``text``, and from the abstract cascade ``source``, ``sections``, ``asked`` and ``why_none``
#: (:meth:`metacan_pipeline.publish.abstract_cascade.AbstractCascade.fetch`).
AbstractSource = Callable[[list[str]], Mapping[str, Any]]


def _classifying(url: object) -> bool:
    host = (urlsplit(url).hostname or "") if isinstance(url, str) else ""
    return any(host == h or host.endswith("." + h) for h in CLASSIFYING_HOSTS)


def _line(label: str, evidence: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    parts: list[str] = []
    for k in keys:
        v = evidence.get(k)
        if isinstance(v, list):
            parts.extend(v)
        elif v not in (None, ""):
            parts.append(str(v))
    text = ("; " if len(keys) == 1 else " · ").join(parts) or "(none in the record)"
    return f"{label}: {text}" if label else text


def _abstract_text(answer: Any) -> str:
    if answer is None:
        return ABSTRACT_SENTENCES["not_fetched"]
    if answer.status == "ok" and answer.text:
        return answer.text
    if answer.status != "failed" and len(getattr(answer, "asked", ())) > 1:
        return ABSTRACT_SENTENCES[answer.why_none]
    return ABSTRACT_SENTENCES.get(answer.status, ABSTRACT_SENTENCES["failed"])


def _abstract_shown(store: CodingStore, wid: str, answer: Any) -> dict[str, str | None]:
    """The task's ``abstract_source`` line and ``abstract_sha256``: the abstract archived as shown
    (:meth:`CodingStore.archive_abstract`, so an imported answer records it), when there is one and the store is
    writable (a read-only store exports the abstract without a hash)."""
    if answer is None or answer.status != "ok" or not answer.text:
        return {"abstract_source": "", "abstract_sha256": None}
    source = getattr(answer, "source", None) or "openalex"
    line = f"Abstract from {SOURCE_NAMES.get(source, source)}, fetched when these tasks were exported."
    if store.read_only:
        return {"abstract_source": line, "abstract_sha256": None}
    when = answer.fetched_at.isoformat(timespec="seconds") if answer.fetched_at else None
    sections = getattr(answer, "sections", ()) or ((None, answer.text),)
    return {
        "abstract_source": line,
        "abstract_sha256": store.archive_abstract(wid, answer.text, source, sections, when),
    }


def export_tasks(store: CodingStore, protocol_id: str, abstracts: AbstractSource | None = None) -> list[dict[str, Any]]:
    """The tasks of a protocol as Label Studio import JSON, in queue order (evidence and abstract only; see the
    module docstring). ``abstracts``: where the abstracts come from (None: none fetched, each task says so)."""
    tasks = store.tasks(protocol_id)
    fetched = abstracts([t["id"] for t in tasks]) if abstracts is not None and tasks else {}
    out = []
    for t in tasks:
        # a link to an openalex.org page (a landing page there) is dropped: it shows OpenAlex's topics
        ev = {k: (None if _classifying(v) else v) for k, v in t["evidence"].items()}
        data = {**ev, "work_id": t["id"], "protocol_id": protocol_id, "evidence_sha256": t["evidence_sha256"]}
        data["title"] = ev["title"] or "(no title)"
        data["abstract"] = _abstract_text(fetched.get(t["id"]))
        data.update(_abstract_shown(store, t["id"], fetched.get(t["id"])))
        data.update({key: _line(label, ev, keys) for key, (label, keys) in _LINES.items()})
        out.append({"data": data})
    return out


def _values(name: str) -> tuple[str, ...]:
    return (*vocab.CATEGORIES, NO_CATEGORY) if name == "categories" else SINGLE_CHOICE[name]


def choice_names(names: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """Per control, code -> the display name a coder reads: ``names`` (the coding page's), else
    :data:`DEFAULT_NAMES`, else the code. Raises ValueError when two codes of one control share a name, or a name is
    another code of the control (the import could not tell them apart)."""
    out: dict[str, dict[str, str]] = {}
    for name in ("categories", *SINGLE_CHOICE):
        given = {**DEFAULT_NAMES.get(name, {}), **((names or {}).get(name) or {})}
        shown = {code: (given.get(code) or code).strip() for code in _values(name)}
        seen: dict[str, str] = {}
        for code, text in shown.items():
            if text in seen or (text in shown and text != code):
                raise ValueError(f"labeling config: {name} {code!r} is shown as {text!r}, which names another choice")
            seen[text] = code
        out[name] = shown
    return out


def _choices(name: str, shown: Mapping[str, str]) -> list[str]:
    lines = []
    for code, text in shown.items():
        alias = "" if text == code else f" alias={quoteattr(code)}"
        hint = f" hint={quoteattr(code)}" if alias and name not in BOOLEAN_CONTROLS else ""  # the code, on hover
        lines.append(f"    <Choice value={quoteattr(text)}{alias}{hint}/>")
    return lines


def labeling_config(names: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The Label Studio labeling config (XML) of a coding project, generated from :mod:`metacan_pipeline.vocab`;
    ``names``: per control, code -> display name (:func:`choice_names`)."""
    shown = choice_names(names)
    unresolved_hidden = ' visibleWhen="choice-unselected" whenTagName="unresolved"'
    lines = ["<View>", f'  <Text name="{OBJECT_TAG}" value="$title"/>']
    lines += [f'  <Text name="{key}" value="${key}"/>' for key in _LINES]
    lines.append('  <Header value="Abstract"/>')
    lines.append('  <Text name="abstract" value="$abstract"/>')
    lines.append('  <Text name="abstract_source" value="$abstract_source"/>')
    lines.append(f"  <Header value={quoteattr(_HEADERS['unresolved'])}/>")
    lines.append(f'  <Choices name="unresolved" toName="{OBJECT_TAG}" choice="single">')
    lines += _choices("unresolved", shown["unresolved"])
    lines.append("  </Choices>")
    lines.append(f"  <Header value={quoteattr(_HEADERS['categories'])}/>")
    lines.append(
        f'  <Choices name="categories" toName="{OBJECT_TAG}" choice="multiple" required="true"{unresolved_hidden}>'
    )
    lines += _choices("categories", shown["categories"])
    lines.append("  </Choices>")
    for name in SINGLE_CHOICE:
        if name == "unresolved":
            continue
        if name == "domain":
            visible = (
                ' visibleWhen="choice-selected" whenTagName="categories" '
                f"whenChoiceValue={quoteattr(shown['categories']['metaresearch'])}"
            )
        else:
            visible = unresolved_hidden if name in REQUIRED else ""
        required = ' required="true"' if name in REQUIRED else ""
        lines.append(f"  <Header value={quoteattr(_HEADERS[name])}/>")
        lines.append(f'  <Choices name="{name}" toName="{OBJECT_TAG}" choice="single"{required}{visible}>')
        lines += _choices(name, shown[name])
        lines.append("  </Choices>")
    lines.append('  <Header value="Note (at most 1,000 characters)"/>')
    lines.append(f'  <TextArea name="note" toName="{OBJECT_TAG}" maxSubmissions="1" rows="3"/>')
    lines.append("</View>")
    return "\n".join(lines) + "\n"


def codes_of(names: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """Per control, what a result may hold -> the code: each code itself and its display name (:func:`choice_names`),
    so an export whose results carry the shown value (a project set up without aliases) still imports."""
    out: dict[str, dict[str, str]] = {}
    for name, shown in choice_names(names).items():
        out[name] = {**{text: code for code, text in shown.items()}, **{code: code for code in shown}}
    return out


def _file_stem(protocol_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", protocol_id)


def write_export(
    store: CodingStore,
    protocol_id: str,
    out_dir: Path,
    *,
    abstracts: AbstractSource | None = None,
    names: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[Path, Path, int]:
    """Write ``<protocol>-tasks.json`` and ``<protocol>-labeling-config.xml`` into ``out_dir``; returns both paths
    and the number of tasks. ``abstracts`` and ``names``: as :func:`export_tasks` and :func:`labeling_config`. A
    protocol without tasks is refused (CodingError)."""
    tasks = export_tasks(store, protocol_id, abstracts)
    if not tasks:
        raise CodingError("protocol_id", f"protocol {protocol_id!r} has no coding tasks in {store.path}")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = _file_stem(protocol_id)
    tasks_path, config_path = out_dir / f"{stem}-tasks.json", out_dir / f"{stem}-labeling-config.xml"
    tasks_path.write_text(json.dumps(tasks, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    config_path.write_text(labeling_config(names), encoding="utf-8")
    return tasks_path, config_path, len(tasks)
