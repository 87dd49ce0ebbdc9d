"""The teacher registry, the prompt lock, and the label store's keys and migration (real DuckDB)."""

import hashlib
import os
import subprocess
import sys
from importlib.resources import files

import duckdb
import pytest

from metacan_pipeline.tables import create_tables
from metacan_pipeline.teachers.registry import TeacherRunConfig, load_registry
from metacan_pipeline.teachers.rubric import USER_MARKER, load_prompt, prompt_lock
from metacan_pipeline.teachers.store import append_rows, current_labels_sql, existing_keys

EXTRA = """
[teachers.llama70b]
base_url = "http://vllm.internal:8000/v1"
model = "meta-llama/Llama-3.3-70B-Instruct"
api_key_env = "VLLM_KEY"
record_view = "title_abstract"
coverage = "batch:round_3"
works_per_call = 25
concurrency = 32
price_input_per_1k = 0.0005
price_output_per_1k = 0.0015
"""


def _registry(tmp_path, extra=EXTRA):
    text = files("metacan_pipeline.teachers").joinpath("teachers.toml").read_text() + extra
    path = tmp_path / "teachers.toml"
    path.write_text(text)
    return path


def test_packaged_registry_defaults():
    reg = load_registry(environ={})
    assert list(reg) == ["gemma", "codex"]
    assert reg["gemma"].embedded and reg["gemma"].record_view == "title_only" and reg["gemma"].coverage == "all"
    assert reg["codex"].record_view == "title_abstract" and reg["codex"].coverage == "sample"
    assert reg["gemma"].prompt_version == "v2" and 1 <= reg["gemma"].works_per_call <= 25


def test_a_new_teacher_is_configuration_and_becomes_an_asset(tmp_path):
    path = _registry(tmp_path)
    spec = load_registry(path, environ={})["llama70b"]
    assert spec.coverage == "batch:round_3" and spec.concurrency == 32 and not spec.embedded
    assert spec.cost_usd(2000, 1000) == pytest.approx(0.0025)  # 2 x 0.0005 + 1 x 0.0015 USD
    with pytest.raises(ValueError, match="VLLM_KEY"):
        spec.api_key()
    code = (
        "from metacan_pipeline.definitions import defs; "
        "print(sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys() if 'direct_labels' in k.to_user_string()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "METACAN_TEACHERS_FILE": str(path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "['direct_labels_codex', 'direct_labels_gemma', 'direct_labels_llama70b']"


def test_environment_and_launchpad_override_the_file(tmp_path):
    env = {
        "METACAN_CODEX_BASE_URL": "https://api.openai.com/v1",
        "METACAN_CODEX_MODEL": "gpt-4.1-mini",
        "METACAN_CODEX_API_KEY_ENV": "OPENAI_API_KEY",
    }
    codex = load_registry(environ=env)["codex"]
    assert (codex.base_url, codex.model, codex.api_key_env, codex.embedded) == (
        "https://api.openai.com/v1",
        "gpt-4.1-mini",
        "OPENAI_API_KEY",
        False,
    )
    run = TeacherRunConfig(works_per_call=10, concurrency=8).apply(codex)
    assert (run.works_per_call, run.concurrency, run.model) == (10, 8, "gpt-4.1-mini")
    with pytest.raises(ValueError, match="less than or equal to 25"):
        TeacherRunConfig(works_per_call=40).apply(codex)


@pytest.mark.parametrize(
    "extra, message",
    [
        ('\n[teachers.bad]\nrecord_view = "full_text"\n', "teachers.bad: record_view"),
        ('\n[teachers.bad]\ncoverage = "half"\n', "coverage 'half'"),
        ("\n[teachers.bad]\nworks_per_call = 0\n", "teachers.bad: works_per_call"),
        ("\n[teachers.bad]\ntemprature = 0.2\n", "temprature: Extra inputs are not permitted"),
        ("\n[teachers.Bad-Name]\n", "must be lower-case"),
        ("\n[teachers.bad\n", "not valid TOML"),
    ],
)
def test_a_bad_registry_names_the_file_and_the_field(tmp_path, extra, message):
    path = _registry(tmp_path, extra)
    with pytest.raises(ValueError, match=message) as info:
        load_registry(path, environ={})
    assert str(path) in str(info.value)


def test_the_registry_needs_both_roles(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("[teachers.gemma]\n")
    with pytest.raises(ValueError, match=r"no \[teachers.<name>\] table: \{'sample': 'codex'\}"):
        load_registry(path, environ={})
    path.write_text('[roles]\ncensus = "gemma"\n\n[teachers.gemma]\n')
    with pytest.raises(ValueError, match=r"\[roles\] must name one teacher for each of \['census', 'sample'\]"):
        load_registry(path, environ={})
    path.write_text('[roles]\ncensus = "a"\nsample = "b"\n\n[teachers.a]\n\n[teachers.b]\n')
    from metacan_pipeline.teachers.registry import load_roles

    assert load_roles(path) == {"census": "a", "sample": "b"}


def test_every_prompt_matches_its_lock_and_v1_cannot_be_sent():
    lock = prompt_lock()
    folder = files("metacan_pipeline.teachers").joinpath("prompts")
    for version, sha in lock.items():
        assert hashlib.sha256(folder.joinpath(f"{version}.md").read_bytes()).hexdigest()[:16] == sha, (
            f"{version}.md was edited"
        )
    prompt = load_prompt("v2")
    assert prompt.sha == lock["v2"] and USER_MARKER not in prompt.rubric
    for rule in ("Polysemy", "Using a method is not studying it", "Absent vocabulary is not absent content"):
        assert rule in prompt.rubric
    assert all(c in prompt.rubric for c in ("metaepi_narrow:", "research_integrity:", "insufficient_payload:"))
    with pytest.raises(ValueError, match="predates batched calls"):
        load_prompt("v1")
    with pytest.raises(FileNotFoundError, match="v999"):
        load_prompt("v999")


def _label(wid, status="labelled", error=None, sha="s1", label_id=None, created="2026-01-01 00:00:00"):
    import datetime as dt

    return {
        "label_id": label_id or f"{wid}-{status}-{sha}-{created}",
        "work_id": wid,
        "teacher": "gemma",
        "model": "m",
        "prompt_version": "v2",
        "prompt_sha": sha,
        "view_hash": "vh",
        "status": status,
        "error": error,
        "categories": [] if status == "labelled" else None,
        "created_at": dt.datetime.fromisoformat(created),
    }


def test_an_unavailable_endpoint_is_asked_again_an_invalid_reply_is_not_and_a_new_prompt_text_is_a_new_key():
    con = duckdb.connect()
    create_tables(con)
    append_rows(
        con,
        [],
        [
            _label("W1", "failed", "endpoint unavailable after 6 attempts: ReadTimeout"),
            _label("W2", "failed", "invalid reply: W2: genre='novel' is not in the vocabulary (after 3 attempts)"),
            _label("W3"),
        ],
    )
    assert existing_keys(con, "gemma", "m", "v2", "s1") == {("W2", "vh"), ("W3", "vh")}
    assert existing_keys(con, "gemma", "m", "v2", "s2") == set()  # same version name, other text: nothing reused
    append_rows(con, [], [_label("W1", created="2026-01-02 00:00:00")])
    current = dict(
        con.execute(f"SELECT work_id, status FROM ({current_labels_sql()})", ["gemma", "m", "v2", "s1"]).fetchall()
    )
    assert current == {"W1": "labelled", "W2": "failed", "W3": "labelled"}
    # a replayed archive inserts nothing twice
    call = {"call_id": "c1", "teacher": "gemma", "cost_usd": 0.5, "work_ids": ["W1"]}
    append_rows(con, [call], [_label("W4", label_id="L4")])
    append_rows(con, [call], [_label("W4", label_id="L4")])
    assert con.execute("SELECT count(*), sum(cost_usd) FROM teacher_calls").fetchone() == (1, 0.5)
    assert con.execute("SELECT count(*) FROM teacher_labels WHERE work_id = 'W4'").fetchone()[0] == 1


def test_a_store_of_the_first_layout_is_migrated_without_loss():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE teacher_calls (call_id VARCHAR PRIMARY KEY, run_id VARCHAR, request_json VARCHAR, response_text VARCHAR)"
    )
    con.execute("INSERT INTO teacher_calls VALUES ('c0', 'r0', '{}', 'reply')")
    con.execute(
        "CREATE TABLE teacher_labels (label_id VARCHAR PRIMARY KEY, work_id VARCHAR, teacher VARCHAR, model VARCHAR, "
        "prompt_version VARCHAR, record_view VARCHAR, view_hash VARCHAR, status VARCHAR, categories VARCHAR[], domain VARCHAR, "
        "study_design VARCHAR, genre VARCHAR, about_ca_system BOOLEAN, about_ca_topic BOOLEAN, confidence VARCHAR, "
        "reason VARCHAR, error VARCHAR, attempts INTEGER, call_id VARCHAR, run_id VARCHAR, source VARCHAR, created_at TIMESTAMP)"
    )
    con.execute(
        "INSERT INTO teacher_labels (label_id, work_id, teacher, model, prompt_version, view_hash, status, categories) "
        "VALUES ('L0', 'W9', 'gemma', 'm', 'v1', 'vh', 'labelled', ['sts'])"
    )
    create_tables(con, legacy_prompt_shas={"v1": prompt_lock()["v1"]})
    assert con.execute("SELECT response_text FROM teacher_calls_v1").fetchone()[0] == "reply"
    assert con.execute("SELECT count(*) FROM teacher_calls").fetchone()[0] == 0
    assert existing_keys(con, "gemma", "m", "v1", prompt_lock()["v1"]) == {("W9", "vh")}
    assert con.execute("SELECT categories FROM teacher_labels").fetchone()[0] == ["sts"]
    create_tables(con)  # idempotent
    assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 1


def test_sample_plus_batch_coverage_labels_the_sample_and_the_proposed_batch(tmp_path):
    """``sample+batch:active_learning``: codex labels its sample and what machine_scores rounds propose."""
    import pyarrow as pa

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.teachers.labelling import select_works

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    storage.write_table("frame", pa.table({"id": [f"W{i}" for i in range(6)]}))
    storage.write_table(
        "sample_design",
        pa.table({"id": [f"W{i}" for i in range(6)], "in_sample": [True, True, False, False, False, False]}),
    )
    base = load_registry(environ={})["codex"]
    both = base.model_copy(update={"coverage": "sample+batch:active_learning"})
    only = base.model_copy(update={"coverage": "batch:active_learning"})
    assert (
        type(base).model_validate(both.model_dump()).batch == "active_learning"
        and both.covers_sample
        and not only.covers_sample
    )
    assert [w["id"] for w in select_works(storage, both)] == ["W0", "W1"]  # no batch yet: the sample alone
    with pytest.raises(ValueError, match="names a batch with no works"):
        select_works(storage, only)
    with storage.connect() as con:
        con.execute(
            "INSERT INTO label_batches VALUES ('active_learning', 'W4', now(), 'test'), ('other', 'W5', now(), 'test')"
        )
    assert [w["id"] for w in select_works(storage, both)] == ["W0", "W1", "W4"]
    assert [w["id"] for w in select_works(storage, only)] == ["W4"]
    with pytest.raises(ValueError, match="sample\\+batch:<name>"):
        type(base).model_validate({**base.model_dump(), "coverage": "batch+sample:x"})


def test_the_role_assets_are_the_teachers_the_registry_names_and_depend_on_the_frame_by_key():
    """census_direct_labels / sample_direct_labels follow [roles]; each direct-label asset reads frame (and the
    sample teacher sample_design) by key, and its coverage check is attached to the table it reads."""
    import dagster as dg

    from metacan_pipeline.teachers.assets import ROLES, TEACHER_CHECKS, census_direct_labels, sample_direct_labels
    from metacan_pipeline.teachers.registry import direct_labels_table, load_roles

    assert ROLES == load_roles() == {"census": "gemma", "sample": "codex"}
    assert (
        census_direct_labels.key
        == dg.AssetKey(direct_labels_table(ROLES["census"]))
        == dg.AssetKey("direct_labels_gemma")
    )
    assert {k.path[-1] for k in census_direct_labels.asset_deps[census_direct_labels.key]} == {"frame"}
    assert {k.path[-1] for k in sample_direct_labels.asset_deps[sample_direct_labels.key]} == {"frame", "sample_design"}
    assert {spec.asset_key.path[-1] for check in TEACHER_CHECKS for spec in check.check_specs} == {
        "direct_labels_gemma",
        "direct_labels_codex",
    }


def test_plan_run_reuses_stored_labels_gives_rule_labels_and_defers_beyond_max_works(tmp_path):
    """plan_run: a work whose label key is stored is reused, a work outside the sampling frame gets the rule
    label (stored by store_frame_rule_labels, then reused too), and max_works defers the rest in frame order."""
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.teachers.labelling import plan_run, store_frame_rule_labels

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    spec = load_registry(environ={})["gemma"]
    prompt = load_prompt(spec.prompt_version)
    works = [
        {"id": f"W{i}", "title_text": f"Study {i}", "publication_year": 2020, "language": "en", "type": "article"}
        | {"venue_name": None, "topic": None, "field": None, "has_abstract": False}
        | {"in_sampling_frame": i != 1, "sampling_frame_exclusion": None if i != 1 else "no_title"}
        for i in range(6)
    ]
    plan = plan_run(storage, spec, prompt, works, None, max_works=3)
    assert (plan.reused, [w["id"] for w in plan.rule], plan.deferred) == (0, ["W1"], 2)
    assert [w["id"] for w in plan.to_call] == ["W0", "W2", "W3"] and set(plan.hashes) == {w["id"] for w in works}
    store_frame_rule_labels(storage, spec, prompt, plan, "run-1")
    with storage.connect() as con:
        stored = con.execute("SELECT work_id, status, source, categories, reason FROM teacher_labels").fetchall()
    assert [(w, s, src, c) for w, s, src, c, _ in stored] == [
        ("W1", "labelled", "frame_rule", ["insufficient_payload"])
    ]
    assert "outside the sampling frame (no_title)" in stored[0][4]
    again = plan_run(storage, spec, prompt, works, None, max_works=0)
    assert (again.reused, again.rule, again.deferred, len(again.to_call)) == (1, [], 0, 5)
