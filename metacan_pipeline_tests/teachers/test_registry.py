"""Tests of metacan_pipeline.teachers.registry: the teacher registry file, its overrides and its errors."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

from metacan_pipeline.teachers.registry import TeacherRunConfig, default_registry_path, load_registry


def _minimal_registry(tmp_path, extra: str) -> Path:
    text = '[teachers.gemma]\n\n[teachers.codex]\ncoverage = "sample"\n\n' + extra
    path = tmp_path / "teachers.toml"
    path.write_text(text)
    return path


def test_a_teacher_table_with_a_name_key_is_a_clear_error(tmp_path):
    """``[teachers.gpt] name = "gpt"`` (a natural thing to write). Expected: ValueError naming the file and
    the field, like any other bad field. Seen: TypeError "got multiple values for keyword argument 'name'"
    with no file, raised at import of the Dagster definitions."""
    path = _minimal_registry(tmp_path, '[teachers.gpt]\nname = "gpt"\nbase_url = "http://x/v1"\n')
    with pytest.raises(ValueError, match="teachers.gpt"):
        load_registry(path, environ={})


@pytest.mark.parametrize("field, value", [("works_per_call", '"25"'), ("logprobs", '"yes"'), ("timeout_s", "inf")])
def test_registry_values_of_the_wrong_type_are_refused(tmp_path, field, value):
    """Strings where numbers/booleans belong are coerced (pydantic lax mode), and ``timeout_s = inf`` (a
    valid TOML float) is accepted: a call that may never end. Expected: ValueError naming the field."""
    path = _minimal_registry(tmp_path, f'[teachers.gpt]\nbase_url = "http://x/v1"\n{field} = {value}\n')
    with pytest.raises(ValueError, match=field):
        load_registry(path, environ={})


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
    assert reg["gemma"].prompt_version == "v4" and 1 <= reg["gemma"].works_per_call <= 25
    assert reg["gemma"].view_name == "title_only@v2" and reg["codex"].view_name == "title_abstract@v2"
    assert reg["gemma"].concurrency == reg["codex"].concurrency == 4  # the embedded server's 4 slots


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
    # the packaged prompt v4 asks for rows, which only a grammar enforces: a hosted endpoint needs v3
    with pytest.raises(ValueError, match=r"teachers.codex: prompt v4 asks for rows.*METACAN_CODEX_PROMPT_VERSION=v3"):
        load_registry(environ=env)
    env["METACAN_CODEX_PROMPT_VERSION"] = "v3"
    codex = load_registry(environ=env)["codex"]
    # a llama.cpp server elsewhere keeps v4 when the grammar is named
    other = tmp_path / "teachers.toml"
    other.write_text(
        default_registry_path()
        .read_text(encoding="utf-8")
        .replace(
            '[teachers.codex]\nbase_url = ""',
            '[teachers.codex]\nbase_url = "http://gpu-box:8080/v1"\nstructured_output = "gbnf"',
        )
    )
    remote = load_registry(other, environ={})["codex"]
    assert (remote.base_url, remote.prompt_version, remote.structured_output) == (
        "http://gpu-box:8080/v1",
        "v4",
        "gbnf",
    )
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
