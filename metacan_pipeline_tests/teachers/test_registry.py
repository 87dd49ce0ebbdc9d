"""Tests of metacan_pipeline.teachers.core.registry: the teacher registry file, its overrides and its errors."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

from metacan_pipeline.teachers.core.registry import TeacherRunConfig, default_registry_path, load_registry


def _minimal_registry(tmp_path, extra: str) -> Path:
    text = '[teachers.gemma]\n\n[teachers.codex]\ncoverage = "sample"\n\n' + extra
    path = tmp_path / "teachers.toml"
    path.write_text(text)
    return path


def test_a_teacher_table_with_a_name_key_is_a_clear_error(tmp_path):
    """``[teachers.gpt] name = "gpt"`` (a natural thing to write) is a ValueError naming the file and
    the field, like any other bad field."""
    path = _minimal_registry(tmp_path, '[teachers.gpt]\nname = "gpt"\nbase_url = "http://x/v1"\n')
    with pytest.raises(ValueError, match="teachers.gpt"):
        load_registry(path, environ={})


@pytest.mark.parametrize("field, value", [("works_per_call", '"25"'), ("logprobs", '"yes"'), ("timeout_s", "inf")])
def test_registry_values_of_the_wrong_type_are_refused(tmp_path, field, value):
    """Strings where numbers/booleans belong are not coerced, and ``timeout_s = inf`` (a valid TOML float,
    a call that may never end) is refused: ValueError naming the field."""
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
    from metacan_pipeline.teachers.core.registry import load_roles

    assert load_roles(path) == {"census": "a", "sample": "b"}


LANES = """
[teachers.vllm]
model = "meta-llama/Llama-3.3-70B-Instruct"
api_key_env = "VLLM_KEY"
prompt_version = "v3"
coverage = "batch:round_3"
works_per_call = 10
endpoint_backoff_s = 15
endpoints = [
  { base_url = "http://gpu1:8000/v1", concurrency = 8 },
  { base_url = "http://gpu2:8000/v1", concurrency = 4, api_key_env = "GPU2_KEY" },
  { base_url = "https://ops:secret@api.example.com/v1?key=k", concurrency = 16, name = "hosted" },
]
"""


def test_a_teacher_may_list_several_endpoints_each_with_its_own_concurrency_and_key(tmp_path):
    """The endpoints form: one lane per entry, named by ``name`` or by its URL without credentials or
    query; the key variable is the entry's, else the teacher's; the one-endpoint teachers load as before."""
    from metacan_pipeline.teachers.core.registry import EMBEDDED_ENDPOINT

    reg = load_registry(_registry(tmp_path, LANES), environ={})
    spec = reg["vllm"]
    assert [(e.lane, e.concurrency) for e in spec.lanes] == [
        ("http://gpu1:8000/v1", 8),
        ("http://gpu2:8000/v1", 4),
        ("hosted", 16),
    ]
    assert (spec.calls_in_flight, spec.endpoint_backoff_s, spec.embedded, spec.base_url) == (28, 15.0, False, "")
    assert spec.where == "3 endpoints (http://gpu1:8000/v1, http://gpu2:8000/v1, hosted)"
    env = {"VLLM_KEY": "k1", "GPU2_KEY": "k2"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        assert [spec.api_key(e) for e in spec.lanes] == ["k1", "k2", "k1"]
        mp.delenv("GPU2_KEY")
        with pytest.raises(
            ValueError, match=r"teacher 'vllm' endpoint http://gpu2:8000/v1: environment variable GPU2_KEY"
        ):
            spec.api_key(spec.lanes[1])
    # a teacher of one endpoint is one lane, named by its URL (the embedded server: 'embedded')
    gemma, llama = reg["gemma"], load_registry(_registry(tmp_path), environ={})["llama70b"]
    assert [(e.lane, e.concurrency) for e in gemma.lanes] == [(EMBEDDED_ENDPOINT, 4)] and gemma.embedded
    assert [(e.lane, e.concurrency, e.api_key_env) for e in llama.lanes] == [
        ("http://vllm.internal:8000/v1", 32, "VLLM_KEY")
    ]
    # the launchpad may not override what each endpoint sets; works_per_call and the model it may
    with pytest.raises(ValueError, match="lists 3 endpoints, each with its own base_url and concurrency"):
        TeacherRunConfig(base_url="http://other/v1").apply(spec)
    with pytest.raises(ValueError, match="lists 3 endpoints"):
        TeacherRunConfig(concurrency=2).apply(spec)
    run = TeacherRunConfig(works_per_call=5, model="m2").apply(spec)
    assert (run.works_per_call, run.model, run.lanes) == (5, "m2", spec.lanes)
    # built in code, the two forms are refused together too
    from metacan_pipeline.teachers.core.registry import TeacherSpec

    with pytest.raises(ValueError, match="give base_url and concurrency, or endpoints"):
        TeacherSpec(name="x", concurrency=2, endpoints=[{"base_url": "http://b/v1"}])


@pytest.mark.parametrize(
    "table, message",
    [
        (
            'base_url = "http://a/v1"\nendpoints = [{ base_url = "http://b/v1" }]',
            r"teachers.two: base_url beside endpoints: .*not both; remove base_url",
        ),
        (
            'concurrency = 4\nendpoints = [{ base_url = "http://b/v1" }]',
            r"teachers.two: concurrency beside endpoints",
        ),
        ("endpoints = []", r"teachers.two: endpoints must be a non-empty list of tables"),
        ('endpoints = "http://b/v1"', r"teachers.two: endpoints must be a non-empty list of tables"),
        (
            'endpoints = [{ base_url = "http://a/v1" }, { base_url = "http://b:8000/v1", concurrency = 0 }]',
            r"teachers.two: endpoints\[1\] \(http://b:8000/v1\): concurrency: Input should be greater than or equal to 1",
        ),
        (
            'endpoints = [{ base_url = "http://a/v1", concurency = 2 }]',
            r"teachers.two: endpoints\[0\] \(http://a/v1\): concurency: Extra inputs are not permitted",
        ),
        ("endpoints = [{ concurrency = 2 }]", r"teachers.two: endpoints\[0\]: base_url: Field required"),
        (
            'endpoints = [{ base_url = "" }]',
            r"teachers.two: endpoints\[0\]: base_url: .*the embedded server is a teacher of one endpoint",
        ),
        (
            'endpoints = [{ base_url = "gpu1:8000/v1" }]',
            r"endpoints\[0\]: base_url: .*without scheme://, not shown.*expected an http\(s\) URL",
        ),
        (
            'endpoints = [{ base_url = "http://a/v1", concurrency = "4" }]',
            r"endpoints\[0\] \(http://a/v1\): concurrency: Input should be a valid integer",
        ),
        (
            'endpoints = [{ base_url = "http://a/v1", name = "my lane" }]',
            r"endpoints\[0\] \(http://a/v1\): name: .*endpoint name 'my lane'",
        ),
        (
            'endpoints = [{ base_url = "http://k1@a/v1" }, { base_url = "http://k2@a/v1/" }]',
            r"teachers.two: Value error, endpoints\[0\] and endpoints\[1\] are both 'http://a/v1': give each endpoint a distinct name",
        ),
    ],
)
def test_a_bad_endpoints_entry_names_the_teacher_and_the_entry(tmp_path, table, message):
    path = _registry(tmp_path, f'\n[teachers.two]\nprompt_version = "v3"\n{table}\n')
    with pytest.raises(ValueError, match=message) as info:
        load_registry(path, environ={})
    assert str(path) in str(info.value)


def test_environment_overrides_keep_working_for_one_endpoint_and_refuse_to_replace_several(tmp_path):
    path = _registry(tmp_path, LANES)
    env = {"METACAN_VLLM_MODEL": "other-model", "METACAN_VLLM_API_KEY_ENV": "OTHER_KEY"}
    spec = load_registry(path, environ=env)["vllm"]
    assert (spec.model, [e.api_key_env or spec.api_key_env for e in spec.lanes]) == (
        "other-model",
        ["OTHER_KEY", "GPU2_KEY", "OTHER_KEY"],
    )
    with pytest.raises(ValueError, match=r"teachers.vllm lists endpoints, so METACAN_VLLM_BASE_URL .* cannot apply"):
        load_registry(path, environ={"METACAN_VLLM_BASE_URL": "http://elsewhere/v1"})
    llama = load_registry(_registry(tmp_path), environ={"METACAN_LLAMA70B_BASE_URL": "http://elsewhere:9/v1"})
    assert [e.lane for e in llama["llama70b"].lanes] == ["http://elsewhere:9/v1"]


SECRET = "s3cr3t-Key-0042"


@pytest.mark.parametrize(
    "table, message",
    [
        (
            f'endpoints = "https://ops:{SECRET}@api.example.com/v1"',
            r"endpoints must be a non-empty list.*got a TOML string",
        ),
        (
            f'endpoints = {{ base_url = "https://api.example.com/v1", api_key = "{SECRET}" }}',
            r"endpoints must be a non-empty list.*got a TOML table",
        ),
        (
            f'endpoints = [{{ base_url = "htps://ops:{SECRET}@api.example.com/v1" }}]',
            r"base_url 'htps://api.example.com/v1'",
        ),
        (f'endpoints = [{{ base_url = " https://ops:{SECRET}@api.example.com/v1" }}]', r"endpoints\[0\].*base_url"),
        (
            f'endpoints = [{{ base_url = "htps://api.example.com/v1?key={SECRET}" }}]',
            r"base_url 'htps://api.example.com/v1'",
        ),
        (
            f'endpoints = [{{ base_url = "{SECRET}" }}]',
            r"base_url \(a value of 15 characters without scheme://, not shown\)",
        ),
        (
            f'endpoints = [{{ base_url = "http://a:{SECRET}@h/v1" }}, {{ base_url = "http://b:{SECRET}@h/v1" }}]',
            r"endpoints\[0\] and endpoints\[1\] are both 'http://h/v1'",
        ),
        (
            f'base_url = "http://h/v1"\napi_key_env = "{SECRET}"',
            r"api_key_env must be the NAME of the environment variable",
        ),
        (
            f'endpoints = [{{ base_url = "http://h/v1", api_key_env = "{SECRET}" }}]',
            r"endpoints\[0\] \(http://h/v1\): api_key_env",
        ),
    ],
)
def test_a_registry_error_never_shows_a_credential(tmp_path, table, message):
    """A key in a URL's user info or query, a key pasted where a URL or a variable name belongs: the error names the
    file, the teacher and the field and shows the URL without credentials, and no chained exception (pydantic's own
    text echoes every input) carries the key into a traceback (the Dagster code location's load error)."""
    import traceback

    path = _registry(tmp_path, f'\n[teachers.two]\nprompt_version = "v3"\n{table}\n')
    with pytest.raises(ValueError, match=message) as info:
        load_registry(path, environ={})
    assert str(path) in str(info.value) and "teachers.two" in str(info.value)
    assert SECRET not in "".join(traceback.format_exception(info.value))


@pytest.mark.parametrize(
    "base_url, problem",
    [
        ("htps://gpu1:8000/v1", "the scheme is not http:// or https://"),
        (" http://gpu1:8000/v1", "contains whitespace"),
        ("http://gpu1:8000/v1 ", "contains whitespace"),
        ("http://gpu1:8000/v 1", "contains whitespace"),
        ("http:///v1", "there is no host"),
        ("http://ops:key@/v1", "there is no host"),
        ("http://gpu1:80000/v1", "the port is not a number"),
        ("ftp://gpu1/v1", "the scheme is not http:// or https://"),
    ],
)
def test_the_base_url_of_every_endpoint_is_checked_at_load(tmp_path, base_url, problem):
    """A one-endpoint teacher's ``base_url`` was not checked at all (a typo failed only when the run called it), and the
    endpoints' check matched a prefix (``http://h/v 1`` passed). Both forms, the environment override and the launchpad
    get one rule: http or https, a host, a valid port, no whitespace."""
    one = _registry(tmp_path, f'\n[teachers.one]\nprompt_version = "v3"\nbase_url = "{base_url}"\n')
    with pytest.raises(ValueError, match=rf"teachers.one: base_url: .*: {problem}"):
        load_registry(one, environ={})
    several = _registry(
        tmp_path, f'\n[teachers.two]\nprompt_version = "v3"\nendpoints = [{{ base_url = "{base_url}" }}]\n'
    )
    with pytest.raises(ValueError, match=rf"teachers.two: endpoints\[0\].*: base_url: .*: {problem}"):
        load_registry(several, environ={})
    good = _registry(tmp_path)
    with pytest.raises(ValueError, match=rf"{problem}.*\(set by the environment: METACAN_LLAMA70B_BASE_URL\)"):
        load_registry(good, environ={"METACAN_LLAMA70B_BASE_URL": base_url})
    llama = load_registry(good, environ={})["llama70b"]
    with pytest.raises(
        ValueError, match=rf"teacher 'llama70b': launchpad config \(TeacherRunConfig\): base_url: .*{problem}"
    ):
        TeacherRunConfig(base_url=base_url).apply(llama)


def test_a_launchpad_error_never_shows_a_credential():
    """The launchpad override went through pydantic, whose error text shows the input (``input_value='htps://ops:key@...'``)."""
    import traceback

    codex = load_registry(environ={"METACAN_CODEX_PROMPT_VERSION": "v3"})["codex"]
    with pytest.raises(ValueError, match=r"base_url 'htps://api.example.com/v1': the scheme") as info:
        TeacherRunConfig(base_url=f"htps://ops:{SECRET}@api.example.com/v1?key={SECRET}").apply(codex)
    assert SECRET not in "".join(traceback.format_exception(info.value))
    assert "input_value" not in str(info.value)


@pytest.mark.parametrize(
    "extra", ['\n[teacher.gpt]\nbase_url = "http://x/v1"\n', '\n[role]\ncensus = "codex"\n', 'census = "gemma"\n']
)
def test_an_unknown_top_level_table_is_refused_naming_the_allowed_ones(tmp_path, extra):
    """``[teacher.gpt]`` (a missing s) or ``[role]`` was ignored: the teacher silently did not exist."""
    path = _registry(tmp_path, extra) if extra.startswith("\n") else tmp_path / "t.toml"
    if not extra.startswith("\n"):
        path.write_text(extra + _registry(tmp_path).read_text())
    with pytest.raises(
        ValueError, match=r"unknown top-level key.*only the tables \[teachers\], \[roles\], \[qualification\]"
    ) as info:
        load_registry(path, environ={})
    assert str(path) in str(info.value)


@pytest.mark.parametrize("name", ["embedded", "Embedded"])
def test_a_remote_endpoint_may_not_take_the_embedded_servers_name(tmp_path, name):
    """``teacher_calls.endpoint = 'embedded'`` says a call went to the embedded llama.cpp server: a remote endpoint
    named so would pass for it in every table and summary."""
    path = _registry(
        tmp_path,
        f'\n[teachers.two]\nprompt_version = "v3"\nendpoints = [{{ base_url = "http://h/v1", name = "{name}" }}]\n',
    )
    with pytest.raises(
        ValueError, match=rf"teachers.two: endpoints\[0\] \(http://h/v1\): name: .*'{name}' is reserved"
    ):
        load_registry(path, environ={})


def test_the_calls_in_flight_over_all_endpoints_are_capped(tmp_path):
    """Each endpoint was capped at 256, the teacher not at all (100 endpoints x 256 = 25,600 workers and connections)."""
    from metacan_pipeline.teachers.core.registry import MAX_CALLS_IN_FLIGHT

    def endpoints(n: int, concurrency: int) -> str:
        entries = ", ".join(f'{{ base_url = "http://gpu{i}:8000/v1", concurrency = {concurrency} }}' for i in range(n))
        return f'\n[teachers.many]\nprompt_version = "v3"\nendpoints = [{entries}]\n'

    assert (
        load_registry(_registry(tmp_path, endpoints(8, 64)), environ={})["many"].calls_in_flight == MAX_CALLS_IN_FLIGHT
    )
    with pytest.raises(ValueError, match=r"teachers.many: .*endpoints: 25600 calls in flight in all .*at most 512"):
        load_registry(_registry(tmp_path, endpoints(100, 256)), environ={})
