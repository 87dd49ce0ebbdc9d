"""Tests of metacan_pipeline.audit.coding.labelstudio and labelstudio_import: export of tasks and config, import of a
Label Studio JSON export."""

from __future__ import annotations

import copy
import hashlib
import json
import sqlite3
import xml.etree.ElementTree as ET

import pytest

from metacan_pipeline import vocab
from metacan_pipeline.audit.coding.labelstudio import NO_CATEGORY, export_tasks, labeling_config, write_export
from metacan_pipeline.audit.coding.labelstudio_import import answer_from_result, import_export
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.cli.coding import choice_names
from metacan_pipeline.publish.abstracts import AbstractFetcher
from metacan_pipeline_tests.audit.test_coding import MACHINE, P, work_row
from metacan_pipeline_tests.builders.openalex import LoopbackOpenAlex


@pytest.fixture()
def store(tmp_path):
    s = CodingStore(tmp_path / "audit" / "coding.sqlite")
    s.load_tasks(P, [work_row(i) for i in range(3)])
    yield s
    s.close()


def choices(name: str, *values: str) -> dict:
    return {
        "id": f"r-{name}",
        "from_name": name,
        "to_name": "title",
        "type": "choices",
        "value": {"choices": list(values)},
    }


def note(text: str) -> dict:
    return {"id": "r-note", "from_name": "note", "to_name": "title", "type": "textarea", "value": {"text": [text]}}


META_RESULT = [
    choices("categories", "metaresearch", "research_integrity"),
    choices("domain", "evaluation"),
    choices("study_design", "observational"),
    choices("genre", "empirical"),
    choices("about_ca_system", "true"),
    choices("about_ca_topic", "false"),
    choices("confidence", "high"),
    note("audit of Canadian grant peer review"),
]
NONE_RESULT = [
    choices("categories", NO_CATEGORY),
    choices("study_design", "randomized_trial"),
    choices("genre", "empirical"),
    choices("about_ca_system", "false"),
    choices("about_ca_topic", "true"),
]


def annotation(ann_id: int, completed_by, result: list, *, cancelled: bool = False, updated: str = "") -> dict:
    return {
        "id": ann_id,
        "completed_by": completed_by,
        "result": result,
        "was_cancelled": cancelled,
        "ground_truth": False,
        "created_at": "2026-03-09T21:52:49.513742Z",
        "updated_at": updated or "2026-03-09T22:16:08.728378Z",
        "lead_time": 41.2,
        "task": None,
    }


def label_studio_export(exported: list[dict]) -> list[dict]:
    """What Label Studio's JSON export gives for the exported tasks after two annotators coded them."""
    alice = {"id": 11, "email": "Alice@Uni.ca", "first_name": "Alice", "last_name": "A"}
    tasks = []
    for i, t in enumerate(exported):
        task = {"id": 501 + i, "data": copy.deepcopy(t["data"]), "project": 7, "predictions": [], "drafts": []}
        task["created_at"] = task["updated_at"] = "2026-03-09T21:52:49.513742Z"
        task["annotations"] = []
        tasks.append(task)
    tasks[0]["annotations"] = [annotation(9001, alice, META_RESULT), annotation(9002, 12, META_RESULT)]
    tasks[1]["annotations"] = [
        annotation(9003, alice, NONE_RESULT),
        annotation(9004, 12, [], cancelled=True),  # skipped
        annotation(9005, 12, [choices("categories", NO_CATEGORY), *NONE_RESULT[1:], choices("domain", "methods")]),
    ]
    return tasks


def test_export_has_evidence_only_and_the_config_every_vocabulary_value(store, tmp_path):
    tasks = export_tasks(store, P)
    assert [t["data"]["work_id"] for t in tasks] == ["W100", "W101", "W102"]
    data = tasks[0]["data"]
    assert data["protocol_id"] == P and data["evidence_sha256"] == store.tasks(P)[0]["evidence_sha256"]
    assert data["line_institutions"] == "Canadian institutions: University of Toronto; McGill University"
    assert data["line_links"] == "Full text: https://doi.org/10.1234/w0"
    assert not set(MACHINE) & set(data) and set(tasks[0]) == {"data"}  # no predictions key, no machine field
    root = ET.fromstring(labeling_config())
    groups = {c.get("name"): c for c in root.iter("Choices")}
    want = {
        "categories": [*vocab.CATEGORIES, NO_CATEGORY],
        "domain": [d for d in vocab.DOMAINS if d != "not_metaresearch"],
        "study_design": list(vocab.STUDY_DESIGNS),
        "genre": list(vocab.GENRES),
        "about_ca_system": ["true", "false"],
        "about_ca_topic": ["true", "false"],
        "confidence": list(vocab.CONFIDENCES),
        "unresolved": ["true"],
    }
    # the result of a choice is its alias (the code) when it has one, else its value
    codes = {name: [c.get("alias") or c.get("value") for c in g.iter("Choice")] for name, g in groups.items()}
    assert codes == want
    assert groups["categories"].get("choice") == "multiple" and groups["genre"].get("choice") == "single"
    assert groups["domain"].get("whenChoiceValue") == "Metaresearch"  # the shown value of the metaresearch choice
    assert [t.get("name") for t in root.iter("TextArea")] == ["note"]
    text_vars = {t.get("value")[1:] for t in root.iter("Text")}
    assert text_vars <= set(data) and {c.get("toName") for c in groups.values()} == {"title"}
    tasks_path, config_path, n = write_export(store, P, tmp_path / "ls")
    assert n == 3 and json.loads(tasks_path.read_text()) == tasks and config_path.read_text() == labeling_config()
    assert tasks_path.name == "audit-v1-tasks.json" and config_path.name == "audit-v1-labeling-config.xml"


def test_round_trip_appends_valid_codes_with_provenance_and_refuses_the_rest(store, tmp_path):
    store.add_coder("alice")
    export = tmp_path / "project-7-at-2026-03-10.json"
    export.write_bytes(json.dumps(label_studio_export(export_tasks(store, P))).encode())
    sha = hashlib.sha256(export.read_bytes()).hexdigest()
    report = import_export(store, export, {"alice@uni.ca": "alice"})
    assert (report.tasks, report.annotations, report.appended, report.already_present, report.refused) == (
        3,
        5,
        3,
        0,
        2,
    )
    reasons = {r.annotation_id: (r.work_id, r.annotator, r.reason) for r in report.refusals}
    assert reasons[9004][:2] == ("W101", "12") and "cancelled" in reasons[9004][2]
    assert reasons[9005][:2] == ("W101", "12") and reasons[9005][2].startswith("domain")
    latest = {(a["id"], a["coder"]): a for a in store.latest_answers(P)}
    assert set(latest) == {("W100", "alice"), ("W100", "labelstudio:12"), ("W101", "alice")}
    a = latest[("W100", "alice")]
    assert a["categories"] == ["metaresearch", "research_integrity"] and a["domain"] == "evaluation"
    assert a["about_ca_system"] is True and a["note"] == "audit of Canadian grant peer review"
    assert a["source"] == f"label_studio:{sha[:16]}" and a["submitted_at"] == "2026-03-09T22:16:08.728378Z"
    assert a["provenance"] == {
        "file": export.name,
        "file_sha256": sha,
        "task_id": 501,
        "annotation_id": 9001,
        "completed_by": {"id": 11, "email": "Alice@Uni.ca"},  # no other personal field is kept
        "created_at": "2026-03-09T21:52:49.513742Z",
        "updated_at": "2026-03-09T22:16:08.728378Z",
        "imported_at": a["provenance"]["imported_at"],
    }
    assert latest[("W101", "alice")]["categories"] == []  # 'none' is an explicit "not meta-research"
    assert latest[("W100", "labelstudio:12")]["provenance"]["completed_by"] == {"id": 12}
    assert store.adjudicated_codes(P)[0]["basis"] == "agreed"
    again = import_export(store, export, {"alice@uni.ca": "alice"})
    assert (again.appended, again.already_present, again.refused) == (0, 3, 2)
    con = sqlite3.connect(store.path)
    assert con.execute("SELECT count(*) FROM coding_answers").fetchone()[0] == 3
    imports = con.execute(
        "SELECT file_sha256, appended, already_present, refused, refusals FROM coding_imports"
    ).fetchall()
    assert [r[:4] for r in imports] == [(sha, 3, 0, 2), (sha, 0, 3, 2)]
    assert {r["annotation_id"] for r in json.loads(imports[0][4])} == {9004, 9005}


def test_an_annotation_edited_in_label_studio_is_a_new_answer_and_a_third_annotator_is_refused(store, tmp_path):
    tasks = label_studio_export(export_tasks(store, P))
    first = tmp_path / "first.json"
    first.write_text(json.dumps(tasks))
    import_export(store, first)
    edited = copy.deepcopy(tasks)
    ann = edited[0]["annotations"][1]
    ann["updated_at"] = "2026-03-11T09:00:00.000000Z"
    ann["result"] = [r if r["from_name"] != "domain" else choices("domain", "incentives") for r in ann["result"]]
    edited[0]["annotations"].append(annotation(9010, {"id": 13}, META_RESULT))
    later = tmp_path / "later.json"
    later.write_text(json.dumps(edited))
    report = import_export(store, later)
    assert (report.appended, report.already_present) == (1, 2)
    (third,) = [r for r in report.refusals if r.annotation_id == 9010]
    assert third.annotator == "13" and "has its 2 coders already" in third.reason
    latest = {(a["id"], a["coder"]): a["domain"] for a in store.latest_answers(P)}
    assert latest[("W100", "labelstudio:12")] == "incentives"
    assert latest[("W100", "labelstudio:alice@uni.ca")] == "evaluation"  # unmapped: the email names the coder


def test_tasks_not_exported_by_metacan_and_malformed_results_are_refused_with_a_reason(store, tmp_path):
    foreign = [{"id": 1, "data": {"text": "hello"}, "annotations": [annotation(1, 5, META_RESULT)]}]
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(foreign))
    (r,) = import_export(store, path).refusals
    assert "not exported by metacan coding export-labelstudio" in r.reason
    with pytest.raises(ValueError, match="list of tasks"):
        path.write_text("{}")
        import_export(store, path)
    for result, words in [
        ([choices("sentiment", "pos")], "not a control of the metacan labeling config"),
        ([choices("genre", "empirical", "review")], "2 choices"),
        ([choices("categories", NO_CATEGORY, "sts")], "not meta-research"),
        ([{**choices("note", "x"), "type": "choices"}], "expected 'textarea'"),
    ]:
        with pytest.raises(ValueError, match=words):
            answer_from_result(result)
    assert answer_from_result([choices("unresolved", "true"), note("cannot tell")]) == {
        "unresolved": True,
        "note": "cannot tell",
    }


def test_a_deeply_nested_export_or_coder_map_is_refused_naming_the_file(store, tmp_path):
    """``[[[[...]]]]`` 100,000 levels deep raised RecursionError out of json.loads (a traceback, nothing recorded)."""
    from metacan_pipeline.audit.coding.labelstudio_import import load_coder_map

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"deep.json: JSON nested too deeply to read .*not a Label Studio export"):
        import_export(store, deep)
    deep.write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(ValueError, match=r"coder map .*deep.json: JSON nested too deeply"):
        load_coder_map(deep)


def test_nan_in_an_export_and_a_task_id_that_is_no_id_are_refused(store, tmp_path):
    """``"id": NaN`` (Python's json reads it) was accepted and stored as ``NaN`` in the provenance, which is not JSON."""
    tasks = label_studio_export(export_tasks(store, P))
    path = tmp_path / "nan.json"
    path.write_text(json.dumps([{**tasks[0], "id": float("nan")}]))
    with pytest.raises(ValueError, match=r"nan.json: NaN is not JSON \(RFC 8259\)"):
        import_export(store, path)
    for bad, what in [
        (501.0, "a JSON number"),
        ([501], "a JSON array"),
        ("x" * 10_000, "a string of 10000 characters"),
    ]:
        path.write_text(json.dumps([{**tasks[0], "id": bad}]))
        report = import_export(store, path)
        assert report.appended == 0 and [r.reason for r in report.refusals] == [
            f"task 1: its id is {what}; a Label Studio task id is an integer"
        ]
    con = sqlite3.connect(store.path)
    assert con.execute("SELECT count(*) FROM coding_answers").fetchone()[0] == 0
    assert max(len(r[0]) for r in con.execute("SELECT refusals FROM coding_imports")) < 500


def test_a_huge_value_is_refused_and_never_echoed_or_stored_in_full(store, tmp_path):
    """A 10 MB value was echoed whole in the refusal (and so stored in coding_imports) or kept in the provenance."""
    from metacan_pipeline.audit.coding.validate import validate_answer

    big = "x" * 10_000_000
    task = label_studio_export(export_tasks(store, P))[2]
    created_big = {**annotation(6, 61, NONE_RESULT), "created_at": big}
    cases = [
        (
            annotation(1, 11, [*(r for r in NONE_RESULT if r["from_name"] != "genre"), choices("genre", big)]),
            "genre has",
        ),
        (annotation(2, 12, [{**choices("genre"), "value": {"choices": big}}]), "genre: value {'choices': 'xxx"),
        (annotation(3, 13, [{**choices("genre"), "from_name": big}]), "result from 'xxx"),
        (annotation(4, {"email": big}, NONE_RESULT), "names no annotator"),
        (annotation(5, big, NONE_RESULT), "names no annotator"),
        (created_big, "created_at is a string of 10,000,000 characters"),
        ({**annotation(7, 71, NONE_RESULT), "id": big}, "not an object with an id"),
    ]
    path = tmp_path / "big.json"
    path.write_text(json.dumps([{**task, "annotations": [a for a, _ in cases]}]))
    report = import_export(store, path)
    assert report.appended == 0 and len(report.refusals) == len(cases)
    for refusal, (_, words) in zip(report.refusals, cases, strict=True):
        assert words in refusal.reason and len(refusal.reason) < 600, refusal.reason[:200]
        assert refusal.annotator is None or len(refusal.annotator) < 300
    con = sqlite3.connect(store.path)
    assert con.execute("SELECT max(length(refusals)) FROM coding_imports").fetchone()[0] < 10_000
    path.write_text(json.dumps([{**task, "data": {**task["data"], "protocol_id": big}, "annotations": [cases[0][0]]}]))
    (refusal,) = import_export(store, path).refusals
    assert "lacks protocol_id" in refusal.reason
    with pytest.raises(ValueError, match=r"categories has 1,000,000 items") as info:
        validate_answer({**dict.fromkeys(("study_design", "genre")), "categories": ["sts"] * 1_000_000}, "W1")
    assert len(str(info.value)) < 200
    with pytest.raises(ValueError, match=r"'xxxxx.*\.\.\. \(10,000,000 characters\) is not an answer field") as info:
        validate_answer({big: 1}, "W1")
    assert len(str(info.value)) < 400


def test_an_import_naming_a_revoked_coder_is_refused(store, tmp_path):
    """A revoked coder cannot sign in, but an import mapping an annotator to them was appended."""
    store.add_coder("alice")
    store.revoke_coder("alice")
    tasks = label_studio_export(export_tasks(store, P))
    path = tmp_path / "export.json"
    path.write_text(json.dumps([tasks[0]]))
    report = import_export(store, path, {"alice@uni.ca": "alice"})
    assert report.appended == 1  # annotator 12 is not mapped to alice
    (refusal,) = report.refusals
    assert refusal.annotator == "alice@uni.ca" and "coder 'alice' was revoked at 20" in refusal.reason
    assert {a["coder"] for a in store.latest_answers(P)} == {"labelstudio:12"}


def test_a_future_dated_annotation_is_refused_so_later_answers_still_count(store, tmp_path):
    """An ``updated_at`` in 2999 was stored as the answer's time; the latest answer counts by time, so every answer the
    coder gave after it (on the site, or in a later export) was hidden behind it."""
    import datetime as dt

    tasks = label_studio_export(export_tasks(store, P))
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    tasks[0]["annotations"] = [
        annotation(1, 11, META_RESULT, updated="2999-01-01T00:00:00Z"),
        annotation(2, 12, NONE_RESULT, updated=soon),  # within the clock skew allowed
    ]
    path = tmp_path / "future.json"
    path.write_text(json.dumps([tasks[0]]))
    report = import_export(store, path)
    (refusal,) = report.refusals
    assert report.appended == 1 and refusal.annotation_id == 1
    assert "2999-01-01T00:00:00.000000Z is in the future" in refusal.reason
    assert [a["coder"] for a in store.latest_answers(P)] == ["labelstudio:12"]


def test_one_person_is_one_coder_across_imports_coder_maps_and_letter_case(store, tmp_path):
    """Re-importing a file with a coder map appended every annotation again under the mapped name (one person, two
    coders on a work), and ``Alice`` / ``alice`` were two coders."""
    from metacan_pipeline.audit.coding.labelstudio_import import load_coder_map

    tasks = label_studio_export(export_tasks(store, P))
    export = tmp_path / "export.json"
    export.write_text(json.dumps(tasks))
    assert import_export(store, export).appended == 3
    before = sorted((a["id"], a["coder"]) for a in store.latest_answers(P))
    again = import_export(store, export, {"alice@uni.ca": "alice", "12": "bob"})
    assert (again.appended, again.already_present) == (0, 3)
    assert sorted((a["id"], a["coder"]) for a in store.latest_answers(P)) == before
    # a new annotation of an annotator imported before under another name is refused, saying what to do
    tasks[2]["annotations"] = [annotation(9100, {"id": 11, "email": "ALICE@uni.ca"}, NONE_RESULT)]
    later = tmp_path / "later.json"
    later.write_text(json.dumps([tasks[2]]))
    (refusal,) = import_export(store, later, {"alice@uni.ca": "alice"}).refusals
    assert "annotator 'alice@uni.ca' was imported as coder 'labelstudio:alice@uni.ca' before" in refusal.reason
    assert "leave them out of the coder map" in refusal.reason
    # letter case: the spelling the store knows wins
    store.add_coder("carol")
    tasks[2]["annotations"] = [annotation(9200, 31, NONE_RESULT), annotation(9201, 32, NONE_RESULT)]
    later.write_text(json.dumps([tasks[2]]))
    report = import_export(store, later, {"31": "CAROL", "32": "Dave"})
    assert report.appended == 2, report.refusals
    tasks[1]["annotations"] = [annotation(9300, 32, NONE_RESULT)]
    later.write_text(json.dumps([tasks[1]]))
    assert import_export(store, later, {"32": "dave"}).appended == 1
    coders = {(a["id"], a["coder"]) for a in store.latest_answers(P) if a["id"] in ("W101", "W102")}
    assert coders == {("W101", "labelstudio:alice@uni.ca"), ("W101", "Dave"), ("W102", "carol"), ("W102", "Dave")}
    # keys equal but for letter case are refused, naming the file
    cmap = tmp_path / "coders.json"
    cmap.write_text('{"Alice@Uni.ca": "alice", "alice@uni.ca": "bob"}')
    with pytest.raises(
        ValueError, match=r"coder map .*coders.json: the keys 'Alice@Uni.ca' and 'alice@uni.ca' name one"
    ):
        load_coder_map(cmap)
    with pytest.raises(ValueError, match=r"two keys name the annotator 'a@x.ca'"):
        import_export(store, later, {"A@x.ca": "a", "a@x.ca ": "b"})


# ---- what a Label Studio coder sees: the coding page's evidence and abstract, display names, required fields ----

ABSTRACT = "We compared trial registrations with the published reports of 212 Canadian surgical trials."


def _inverted(text: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, word in enumerate(text.split(" ")):
        out.setdefault(word, []).append(i)
    return out


@pytest.fixture()
def openalex():
    """A loopback OpenAlex: W100 has the abstract, W101 has none, W102 is unknown to it."""

    def answer(path, query):
        ids = query["filter"].removeprefix("ids.openalex:").split("|")
        index = {"W100": _inverted(ABSTRACT), "W101": None}
        return [{"id": f"https://openalex.org/{w}", "abstract_inverted_index": index[w]} for w in ids if w in index]

    server = LoopbackOpenAlex(answer)
    yield server
    server.shutdown()


def _config_choices(config: str) -> dict[str, list[ET.Element]]:
    return {c.get("name"): list(c.iter("Choice")) for c in ET.fromstring(config).iter("Choices")}


def test_export_carries_the_abstract_and_the_evidence_of_the_coding_page_and_no_openalex_link(tmp_path, openalex):
    s = CodingStore(tmp_path / "audit" / "coding.sqlite")
    try:
        rows = [work_row(0), work_row(1), work_row(2, doi=None, landing_page_url="https://openalex.org/W102")]
        s.load_tasks(P, rows)
        with AbstractFetcher(openalex.base_url) as fetcher:
            tasks = export_tasks(s, P, fetcher.fetch)
        hits = [h["filter"] for h in openalex.hits]
        shown = {t["id"]: t["evidence"] for t in s.tasks(P)}
    finally:
        s.close()
    assert hits == ["ids.openalex:W100|W101|W102"]  # one request for the export
    data = {t["data"]["work_id"]: t["data"] for t in tasks}
    assert data["W100"]["abstract"] == ABSTRACT
    assert data["W101"]["abstract"] == "OpenAlex holds no abstract of this work."
    assert data["W102"]["abstract"] == "OpenAlex has no record under this id."
    for wid, d in data.items():  # the coding page's evidence: title, venue, year, ...
        ev = shown[wid]
        assert d["title"] == ev["title"] and d["venue"] == ev["venue"] == "Canadian Journal of Meta-Research"
        assert d["year"] == ev["year"] and str(ev["year"]) in d["line_record"] and ev["venue"] in d["line_record"]
    assert data["W100"]["line_links"] == "Full text: https://doi.org/10.1234/w0"  # a DOI link is fine
    assert data["W102"]["landing_url"] is None and data["W102"]["line_links"] == "Full text: (none in the record)"
    assert "openalex.org" not in json.dumps(tasks)  # OpenAlex's pages show its topic classification
    assert not {k for t in tasks for k in t["data"]} & set(MACHINE)
    # without a source of abstracts every task says the abstract was not fetched, and nothing is asked
    s = CodingStore(tmp_path / "audit" / "coding.sqlite")
    try:
        bare = export_tasks(s, P)
    finally:
        s.close()
    assert {t["data"]["abstract"] for t in bare} == {
        "The abstract was not fetched for this export; follow the full-text link."
    }
    config = ET.fromstring(labeling_config())
    assert ("abstract", "$abstract") in {(t.get("name"), t.get("value")) for t in config.iter("Text")}
    assert "openalex" not in labeling_config().lower()


def test_the_config_shows_display_names_requires_the_fields_an_answer_needs_and_keeps_codes_in_results():
    names = choice_names()  # the coding page's names, as `metacan coding export-labelstudio` gives them
    config = labeling_config(names)
    root = ET.fromstring(config)
    groups = {c.get("name"): c for c in root.iter("Choices")}
    choices = _config_choices(config)
    shown = {name: {c.get("alias") or c.get("value"): c.get("value") for c in cs} for name, cs in choices.items()}
    assert shown["categories"]["metaresearch"] == "Metaresearch"
    assert shown["categories"]["insufficient_payload"] == "Insufficient payload (the record is too thin to judge)"
    assert shown["categories"][NO_CATEGORY] == "None of these: not meta-research"
    assert shown["domain"]["reporting"] == "Reporting (how research is reported)"
    assert shown["study_design"]["randomized_trial"] == "Randomized trial" and shown["genre"]["methods"] == "Methods"
    assert shown["about_ca_system"] == {"true": "Yes", "false": "No"}
    for name in ("categories", "domain", "study_design", "genre"):  # every vocabulary choice shows its name
        assert all(text != code for code, text in shown[name].items()), name
        assert all(shown[name][code] == text for code, text in names[name].items()), name
    required = {name for name, g in groups.items() if g.get("required") == "true"}
    assert required == {"categories", "domain", "study_design", "genre", "about_ca_system", "about_ca_topic"}
    assert groups["confidence"].get("required") is None and groups["unresolved"].get("required") is None
    for name in required - {"domain"}:  # an unresolved answer may leave them empty: they hide once it is chosen
        assert (groups[name].get("visibleWhen"), groups[name].get("whenTagName")) == ("choice-unselected", "unresolved")
    assert groups["domain"].get("whenChoiceValue") == shown["categories"]["metaresearch"]


def _ls_result(config: str, name: str, *texts: str) -> dict:
    """The result Label Studio writes when a coder ticks the choices showing ``texts``: each choice's alias (the
    code) when it has one, else its value."""
    by_text = {c.get("value"): c.get("alias") or c.get("value") for c in _config_choices(config)[name]}
    return choices(name, *(by_text[t] for t in texts))


def test_round_trip_through_the_display_names_imports_the_codes(store, tmp_path):
    names = choice_names()
    config = labeling_config(names)
    result = [
        _ls_result(config, "categories", "Metaresearch", "Research integrity"),
        _ls_result(config, "domain", "Evaluation (how research is assessed, reviewed or funded)"),
        _ls_result(config, "study_design", "Observational"),
        _ls_result(config, "genre", "Empirical"),
        _ls_result(config, "about_ca_system", "Yes"),
        _ls_result(config, "about_ca_topic", "No"),
        _ls_result(config, "confidence", "high"),
        note("audit of Canadian grant peer review"),
    ]
    assert result[0]["value"]["choices"] == ["metaresearch", "research_integrity"]  # the aliases, as LS writes them
    exported = export_tasks(store, P)
    tasks = label_studio_export(exported)
    for t in tasks:
        t["annotations"] = []
    tasks[0]["annotations"] = [annotation(9101, {"id": 11, "email": "alice@uni.ca"}, result)]
    # a project whose config had no aliases writes the shown values: they are read back as codes too
    shown_values = [
        choices("categories", "None of these: not meta-research"),
        choices("study_design", "Randomized trial"),
        choices("genre", "Methods"),
        choices("about_ca_system", "No"),
        choices("about_ca_topic", "Yes"),
    ]
    tasks[1]["annotations"] = [annotation(9102, {"id": 11, "email": "alice@uni.ca"}, shown_values)]
    tasks[2]["annotations"] = [
        annotation(9103, 11, [choices("genre", "Not a genre"), *shown_values[:2], *shown_values[3:]])
    ]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks))
    store.add_coder("alice")
    report = import_export(store, path, {"alice@uni.ca": "alice", "11": "alice"}, names=names)
    assert (report.appended, report.refused) == (2, 1), report.refusals
    assert report.refusals[0].work_id == "W102" and "Not a genre" in report.refusals[0].reason
    latest = {a["id"]: a for a in store.latest_answers(P)}
    assert latest["W100"]["categories"] == ["metaresearch", "research_integrity"]
    assert (latest["W100"]["domain"], latest["W100"]["about_ca_system"], latest["W100"]["confidence"]) == (
        "evaluation",
        True,
        "high",
    )
    assert (latest["W101"]["categories"], latest["W101"]["study_design"], latest["W101"]["genre"]) == (
        [],
        "randomized_trial",
        "methods",
    )
