"""The teacher registry (SPEC section 4): which teachers exist and how each is called.

The registry is a TOML file: the packaged ``teachers/teachers.toml`` unless ``METACAN_TEACHERS_FILE``
names another. Each ``[teachers.<name>]`` table is one :class:`TeacherSpec`; every teacher becomes a
``direct_labels_<name>`` asset when the definitions load. A teacher is called at one endpoint
(``base_url`` + ``concurrency``) or at several (``endpoints = [{ base_url, concurrency, api_key_env, name
}, ...]``, one :class:`Endpoint` each: lanes racing one queue of batches, :mod:`..calling.sending`); the endpoint
is not part of the label key, so the same model behind several endpoints is one teacher. On top of the
file, the environment may override a teacher's endpoint without editing it (``METACAN_<NAME>_BASE_URL``,
``_MODEL``, ``_API_KEY_ENV``, ``_PROMPT_VERSION``; the base URL of a one-endpoint teacher only), and a
run may override more from the Dagster launchpad (:class:`TeacherRunConfig`).
"""

from __future__ import annotations

import re
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import dagster as dg
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ...http import public_url, shown_url
from ...settings import secret, teacher_overrides, teachers_file
from ...vocab import CENSUS_TEACHER, SAMPLE_TEACHER, TEACHER_ROLES
from .rubric import load_prompt
from .views import CURRENT_VIEW_VERSION

#: The teachers that fill the roles when a registry has no ``[roles]`` table.
DEFAULT_ROLES = {CENSUS_TEACHER: "gemma", SAMPLE_TEACHER: "codex"}
MAX_WORKS_PER_CALL = 25
#: The top-level tables a registry file may have (a typo such as ``[teacher.x]`` or ``[role]`` is refused, not ignored).
REGISTRY_TABLES = ("teachers", "roles", "qualification")
#: The most calls a teacher has in flight over all its endpoints (the sum of their ``concurrency``; one endpoint has
#: at most 256). Each call in flight is a worker holding its batch's works and prompt, and one connection of its lane's
#: client: 512 keeps a run's memory and sockets bounded (about 25 MB of prompts at 25 works per call) while leaving room
#: for, e.g., 8 GPU servers at 64 each.
MAX_CALLS_IN_FLIGHT = 512
#: The longest an endpoint that keeps failing rests between two probes (s).
MAX_ENDPOINT_BACKOFF_S = 300.0
#: The name the calls of the embedded llama.cpp server record as their endpoint (its port changes every run).
EMBEDDED_ENDPOINT = "embedded"
#: The model name the embedded llama.cpp server (:mod:`..calling.server`) serves Gemma 3 270M under.
EMBEDDED_MODEL_ALIAS = "gemma-3-270m-it-q4_k_m"
_ENDPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: An ``api_key_env``: the name of an environment variable (never the key itself).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _check_api_key_env(v: str) -> str:
    """``v`` when it is empty or an environment variable's name; the error never shows ``v`` (a key pasted there)."""
    if v and not _ENV_NAME.fullmatch(v):
        raise ValueError(
            "api_key_env must be the NAME of the environment variable that holds the key (letters, digits and _, "
            "not starting with a digit), never the key itself; the value given is not shown"
        )
    return v


def check_base_url(v: str) -> str:
    """``v`` when it is an endpoint's base URL: scheme http or https, a host, a valid port if any, no whitespace
    anywhere (a leading space is refused, not stripped). ValueError else, showing the URL only as
    :func:`~metacan_pipeline.http.shown_url` does (no user info or query)."""
    parts = urlsplit(v)
    if any(ch.isspace() for ch in v):
        problem = "contains whitespace (a space, tab or newline: a leading or trailing space?)"
    elif parts.scheme not in ("http", "https") or not v.lower().startswith(f"{parts.scheme}://"):
        problem = "the scheme is not http:// or https://"
    elif not parts.hostname:
        problem = "there is no host"
    else:
        try:
            parts.port  # noqa: B018 (raises ValueError for a port that is not a number in 0-65535)
            problem = ""
        except ValueError:
            problem = "the port is not a number in 0-65535"
    if problem:
        raise ValueError(
            f"base_url {shown_url(v)}: {problem}; expected an http(s) URL ending in /v1 such as http://host:8000/v1 "
            '(the embedded server is a teacher of one endpoint: base_url = "" without endpoints)'
        )
    return v


def _problems(exc: ValidationError, fields: dict) -> str:
    """A pydantic error as one line of ``<where>: <message>`` per problem, without the ``input_value`` pydantic's own
    text shows (a base URL with ``user:key@``, a key): every message of this module's validators is redacted."""
    return "; ".join(f"{_where(e['loc'], fields)}: {e['msg']}" if e["loc"] else e["msg"] for e in exc.errors())


class Endpoint(BaseModel):
    """One OpenAI-compatible endpoint of a teacher (a *lane*): where calls go, how many are in flight there,
    which environment variable holds its key, and the name its calls record (``teacher_calls.endpoint``).

    ``api_key_env = ""`` takes the teacher's; ``name = ""`` is the base URL without credentials or query
    (:func:`metacan_pipeline.http.public_url`). Two endpoints at one URL (two keys of one hosted API) need names.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    base_url: str
    concurrency: int = Field(default=1, ge=1, le=256)
    api_key_env: str = ""
    name: str = ""

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str) -> str:
        return check_base_url(v)

    @field_validator("api_key_env")
    @classmethod
    def _api_key_env(cls, v: str) -> str:
        return _check_api_key_env(v)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if v and not _ENDPOINT_NAME.fullmatch(v):
            raise ValueError(
                f"endpoint name {v[:64]!r}: letters, digits, '_', '.' and '-', at most 64, starting with a letter or digit"
            )
        if v.lower() == EMBEDDED_ENDPOINT:
            raise ValueError(
                f"endpoint name {v!r} is reserved for the embedded llama.cpp server (its calls record it in "
                "teacher_calls.endpoint): give this endpoint another name"
            )
        return v

    @property
    def lane(self) -> str:
        """The name the endpoint's calls record: ``name``, else the public form of ``base_url``."""
        return self.name or public_url(self.base_url)


class TeacherSpec(BaseModel):
    """One teacher: OpenAI-compatible endpoint(s) + model + prompt version + record view + coverage.

    Prices are USD per 1,000 tokens; ``concurrency`` is the number of calls in flight at ``base_url``.
    A teacher with ``endpoints`` has no ``base_url`` or ``concurrency`` of its own: each endpoint has its
    own (:attr:`lanes`); ``endpoint_backoff_s`` is how long an endpoint that failed rests before it is
    probed again (doubling while it stays down, at most :data:`MAX_ENDPOINT_BACKOFF_S`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    name: str
    base_url: str = ""
    model: str = EMBEDDED_MODEL_ALIAS
    api_key_env: str = ""
    prompt_version: str = "v3"
    record_view: Literal["title_only", "title_abstract"] = "title_only"
    view_version: Literal[1, 2] = CURRENT_VIEW_VERSION
    coverage: str = "all"
    works_per_call: int = Field(default=1, ge=1, le=MAX_WORKS_PER_CALL)
    concurrency: int = Field(default=1, ge=1, le=256)
    price_input_per_1k: float = Field(default=0.0, ge=0, strict=False)  # TOML 0 (an integer) is a price too
    price_output_per_1k: float = Field(default=0.0, ge=0, strict=False)
    structured_output: Literal["auto", "json_schema", "json_object_schema", "gbnf", "none"] = "auto"
    system_role: Literal["auto", "yes", "no"] = "auto"
    logprobs: bool = False
    temperature: float = Field(default=0.0, ge=0, le=2, strict=False)
    max_tokens_per_work: int = Field(default=160, ge=32)
    timeout_s: float = Field(default=300.0, gt=0, le=3600, strict=False)
    max_invalid_retries: int = Field(default=2, ge=0, le=5)
    max_transport_attempts: int = Field(default=6, ge=1, le=20)
    endpoints: tuple[Endpoint, ...] = Field(default=(), strict=False)  # TOML gives a list of tables
    endpoint_backoff_s: float = Field(default=30.0, gt=0, le=MAX_ENDPOINT_BACKOFF_S, strict=False)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", v):
            raise ValueError(f"teacher name {v!r} must be lower-case letters, digits and _ (it becomes an asset name)")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _api_key_env(cls, v: str) -> str:
        return _check_api_key_env(v)

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str) -> str:
        return v if v == "" else check_base_url(v)  # "" = the embedded server

    @field_validator("coverage")
    @classmethod
    def _coverage(cls, v: str) -> str:
        if v not in ("all", "sample") and not re.fullmatch(r"(sample\+)?batch:[A-Za-z0-9_.-]+", v):
            raise ValueError(f"coverage {v!r}: expected all, sample, batch:<name> or sample+batch:<name>")
        return v

    @model_validator(mode="after")
    def _one_form(self) -> TeacherSpec:
        if not self.endpoints:
            return self
        if self.base_url or self.concurrency != 1:
            raise ValueError(
                "endpoints: give base_url and concurrency, or endpoints (each with its own base_url and concurrency), not both"
            )
        seen: dict[str, int] = {}
        for i, e in enumerate(self.endpoints):
            if e.lane in seen:
                raise ValueError(
                    f"endpoints[{seen[e.lane]}] and endpoints[{i}] are both {e.lane!r}: give each endpoint a distinct name"
                )
            seen[e.lane] = i
        total = sum(e.concurrency for e in self.endpoints)
        if total > MAX_CALLS_IN_FLIGHT:
            raise ValueError(
                f"endpoints: {total} calls in flight in all (the sum of the endpoints' concurrency), at most "
                f"{MAX_CALLS_IN_FLIGHT}: lower the endpoints' concurrency"
            )
        return self

    @property
    def lanes(self) -> tuple[Endpoint, ...]:
        """The endpoints calls go to: ``endpoints``, or the one endpoint ``base_url`` + ``concurrency`` +
        ``api_key_env`` (for the embedded server: base URL ``""``, named :data:`EMBEDDED_ENDPOINT`)."""
        if self.endpoints:
            return self.endpoints
        if self.embedded:
            return (
                Endpoint.model_construct(
                    base_url="", concurrency=self.concurrency, api_key_env=self.api_key_env, name=EMBEDDED_ENDPOINT
                ),
            )
        return (Endpoint(base_url=self.base_url, concurrency=self.concurrency, api_key_env=self.api_key_env),)

    @property
    def calls_in_flight(self) -> int:
        """Calls in flight at once over every endpoint."""
        return sum(e.concurrency for e in self.lanes)

    @property
    def where(self) -> str:
        """Where the calls go, for a description or a log line."""
        if self.endpoints:
            return f"{len(self.endpoints)} endpoints ({', '.join(e.lane for e in self.endpoints)})"
        return public_url(self.base_url) if self.base_url else "the embedded llama.cpp server"

    @property
    def batch(self) -> str | None:
        """The ``label_batches`` batch this teacher covers (``batch:<name>`` or ``sample+batch:<name>``), or None."""
        return self.coverage.split("batch:", 1)[1] if "batch:" in self.coverage else None

    @property
    def covers_sample(self) -> bool:
        """True when the teacher covers the design-weighted sample (``sample`` or ``sample+batch:<name>``)."""
        return self.coverage.startswith("sample")

    @property
    def view_name(self) -> str:
        """The record view and its version as labels and calls store it, e.g. ``title_only@v2``."""
        return f"{self.record_view}@v{self.view_version}"

    @property
    def embedded(self) -> bool:
        """True when calls go to the embedded llama.cpp server."""
        return not self.base_url and not self.endpoints

    def cost_usd(self, prompt_tokens: int | None, completion_tokens: int | None) -> float:
        """The price of one call from its token counts (USD)."""
        return (
            (prompt_tokens or 0) * self.price_input_per_1k + (completion_tokens or 0) * self.price_output_per_1k
        ) / 1000.0

    def api_key(self, endpoint: Endpoint | None = None) -> str:
        """The key of ``endpoint`` (its ``api_key_env``, else the teacher's), or of the teacher; raises
        ValueError naming the teacher, the endpoint and the variable when it is unset."""
        env = (endpoint.api_key_env if endpoint is not None else "") or self.api_key_env
        if not env:
            return ""
        key = secret(env)
        if not key:
            where = f" endpoint {endpoint.lane}" if endpoint is not None and self.endpoints else ""
            raise ValueError(f"teacher {self.name!r}{where}: environment variable {env} (api_key_env) is not set")
        return key


class TeacherRunConfig(dg.Config):
    """Launchpad overrides for one labelling run (empty or 0 = the registry's value)."""

    base_url: str = Field(default="", description="OpenAI-compatible base URL ending in /v1 (overrides the registry).")
    model: str = Field(default="", description="Model name (part of the label key).")
    works_per_call: int = Field(default=0, description="Works per call, 1-25.")
    concurrency: int = Field(default=0, description="Calls in flight.")
    max_works: int = Field(
        default=0,
        ge=0,
        description="Send at most this many works this run (a budget; 0 = no limit); the rest wait for the next run.",
    )

    def apply(self, spec: TeacherSpec) -> TeacherSpec:
        """``spec`` with this run's overrides (validated again). Raises ValueError for a ``base_url`` or
        ``concurrency`` override of a teacher with ``endpoints`` (each endpoint has its own: edit the registry), and
        for an override the teacher refuses, naming the field; the message never shows a URL's user info or query."""
        if spec.endpoints and (self.base_url or self.concurrency):
            raise ValueError(
                f"teacher {spec.name!r} lists {len(spec.endpoints)} endpoints, each with its own base_url and concurrency: "
                "a run cannot override them (edit the endpoints in the registry file, METACAN_TEACHERS_FILE)"
            )
        changes = {
            k: v
            for k, v in {
                "base_url": self.base_url,
                "model": self.model,
                "works_per_call": self.works_per_call,
                "concurrency": self.concurrency,
            }.items()
            if v
        }
        if not changes:
            return spec
        try:
            return TeacherSpec(**{**spec.model_dump(), **changes})
        except ValidationError as exc:  # not chained: pydantic's text shows each input (a URL with its user:key@)
            raise ValueError(
                f"teacher {spec.name!r}: launchpad config (TeacherRunConfig): {_problems(exc, changes)}"
            ) from None


def direct_labels_table(teacher: str) -> str:
    """The warehouse table and the asset key of a registry teacher's direct labels: ``direct_labels_<teacher>``."""
    return f"direct_labels_{teacher}"


def default_registry_path() -> Path:
    """``$METACAN_TEACHERS_FILE``, else the packaged ``teachers/teachers.toml``."""
    env = teachers_file()
    return Path(env) if env else Path(str(files("metacan_pipeline.teachers").joinpath("teachers.toml")))


def load_registry(path: str | Path | None = None, environ: dict[str, str] | None = None) -> dict[str, TeacherSpec]:
    """``{name: TeacherSpec}`` from the registry file plus ``METACAN_<NAME>_*`` overrides, in file order.

    Raises ValueError naming the file and the field for a malformed registry (a top-level table other than
    :data:`REGISTRY_TABLES` included), a view or coverage out of
    vocabulary, or a ``[roles]`` table that does not name two different registry teachers for the census
    and the sample role; FileNotFoundError for a missing file.
    """
    path = Path(path) if path else default_registry_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"teacher registry {path} not found (METACAN_TEACHERS_FILE): copy metacan_pipeline/teachers/teachers.toml"
        )
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"teacher registry {path}: not valid TOML ({exc})") from exc
    unknown = [k for k in doc if k not in REGISTRY_TABLES]
    if unknown:
        raise ValueError(
            f"teacher registry {path}: unknown top-level key(s) {', '.join(repr(k[:64]) for k in unknown[:5])}: a registry "
            f"has only the tables {', '.join(f'[{t}]' for t in REGISTRY_TABLES)} (a teacher is [teachers.<name>])"
        )
    tables = doc.get("teachers")
    if not isinstance(tables, dict) or not tables:
        raise ValueError(f"teacher registry {path}: no [teachers.<name>] tables")
    out: dict[str, TeacherSpec] = {}
    for name, fields in tables.items():
        if not isinstance(fields, dict):
            raise ValueError(f"teacher registry {path}: teachers.{name} is not a table")
        if "name" in fields:
            raise ValueError(
                f"teacher registry {path}: teachers.{name} has a 'name' key; the table's name is the teacher's name "
                f"([teachers.{fields['name']}] to call it {fields['name']!r})"
            )
        overrides = teacher_overrides(name, environ)
        _check_endpoint_form(path, name, fields, overrides)
        merged = {**fields, **overrides}
        try:
            out[name] = TeacherSpec(name=name, **merged)
        except ValidationError as exc:  # not chained: pydantic's text shows each input (a URL with its user:key@)
            problems = _problems(exc, fields)
            env = [
                f"METACAN_{name.upper()}_{k.upper()}"
                for k in overrides
                if any(e["loc"][:1] == (k,) for e in exc.errors())
            ]
            if env:
                problems += f" (set by the environment: {', '.join(env)})"
            raise ValueError(f"teacher registry {path}: teachers.{name}: {problems}") from None
        _check_reply_format(path, out[name])
    _check_roles(path, _roles(path, doc), out)
    return out


def _check_endpoint_form(path: Path, name: str, fields: dict, overrides: dict[str, str]) -> None:
    """A teacher table gives ``base_url`` + ``concurrency`` (one endpoint) or ``endpoints``, never both; the
    environment's ``METACAN_<NAME>_BASE_URL`` overrides the one endpoint, so it is refused for a teacher
    with ``endpoints`` (which it would silently replace or join)."""
    if "endpoints" not in fields:
        return
    both = [k for k in ("base_url", "concurrency") if k in fields]
    if both:
        raise ValueError(
            f"teacher registry {path}: teachers.{name}: {' and '.join(both)} beside endpoints: a teacher gives "
            f"base_url and concurrency (one endpoint) or endpoints = [{{ base_url = ..., concurrency = ... }}, ...], "
            f"not both; remove {' and '.join(both)}"
        )
    if "base_url" in overrides:
        raise ValueError(
            f"teacher registry {path}: teachers.{name} lists endpoints, so METACAN_{name.upper()}_BASE_URL (which "
            "overrides the base_url of a teacher of one endpoint) cannot apply: unset it, or edit the endpoints in a copy "
            "of the registry (METACAN_TEACHERS_FILE)"
        )
    if not isinstance(fields["endpoints"], list) or not fields["endpoints"]:
        raise ValueError(
            f"teacher registry {path}: teachers.{name}: endpoints must be a non-empty list of tables "
            f'(endpoints = [{{ base_url = "http://host:8000/v1", concurrency = 4 }}, ...]), got '
            + (
                "an empty list"
                if fields["endpoints"] == []
                else f"a TOML {_toml_type(fields['endpoints'])} (not shown)"
            )
        )


def _toml_type(value: object) -> str:
    """The TOML name of a parsed value's type (what an error says instead of showing a value that may hold a key)."""
    return {str: "string", dict: "table", list: "array", bool: "boolean", int: "integer", float: "float"}.get(
        type(value), "date or time"
    )


def _where(loc: tuple, fields: dict) -> str:
    """A validation error's location, naming the endpoint entry by index and URL (``endpoints[1]
    (http://b:8000/v1): concurrency``)."""
    parts = [str(p) for p in loc]
    if len(loc) >= 2 and loc[0] == "endpoints" and isinstance(loc[1], int):
        entries = fields.get("endpoints") or []
        entry = entries[loc[1]] if loc[1] < len(entries) else None
        url = entry.get("base_url") if isinstance(entry, dict) else None
        shown = public_url(url) if isinstance(url, str) and "://" in url and len(url) <= 500 else ""
        head = f"endpoints[{loc[1]}]" + (f" ({shown})" if shown else "")
        return ": ".join([head, *parts[2:]])
    return ".".join(parts)


def _check_reply_format(path: Path, spec: TeacherSpec) -> None:
    """A prompt that asks for ``rows`` (a list of values per work, no names: :mod:`.rubric`) needs a grammar
    to hold the model to it: the embedded server (auto = ``gbnf``), or ``gbnf``, ``json_object_schema`` or
    ``none`` named for another llama.cpp-style endpoint. ``auto`` and ``json_schema`` elsewhere are refused:
    strict JSON schema has no tuples, and JSON-object modes force an object."""
    try:
        reply = load_prompt(spec.prompt_version).reply
    except FileNotFoundError:
        return  # named when the teacher runs, as before
    if reply == "rows" and not spec.embedded and spec.structured_output in ("auto", "json_schema"):
        raise ValueError(
            f"teacher registry {path}: teachers.{spec.name}: prompt {spec.prompt_version} asks for rows (values "
            f"without names), which only a grammar holds a model to; structured_output = "
            f'{spec.structured_output!r} cannot. Set structured_output = "gbnf" for a llama.cpp server, or '
            f'prompt_version = "v3" (labels with names; METACAN_{spec.name.upper()}_PROMPT_VERSION=v3) for any other endpoint'
        )


def _roles(path: Path, doc: dict) -> dict[str, str]:
    roles = doc.get("roles", DEFAULT_ROLES)
    if (
        not isinstance(roles, dict)
        or set(roles) != set(TEACHER_ROLES)
        or not all(isinstance(v, str) for v in roles.values())
    ):
        raise ValueError(
            f"teacher registry {path}: [roles] must name one teacher for each of {list(TEACHER_ROLES)} "
            f'(e.g. census = "gemma", sample = "codex"), got {roles!r}'
        )
    return dict(roles)


def _check_roles(path: Path, roles: dict[str, str], teachers: dict[str, TeacherSpec]) -> None:
    missing = {role: name for role, name in roles.items() if name not in teachers}
    if missing:
        raise ValueError(
            f"teacher registry {path}: [roles] names teachers with no [teachers.<name>] table: {missing}; the student "
            f"needs a census teacher and a sample teacher"
        )
    if roles[CENSUS_TEACHER] == roles[SAMPLE_TEACHER]:
        raise ValueError(
            f"teacher registry {path}: the census and the sample teacher must differ, both are {roles[CENSUS_TEACHER]!r}"
        )


def load_roles(path: str | Path | None = None) -> dict[str, str]:
    """``{role: teacher name}`` for :data:`metacan_pipeline.vocab.TEACHER_ROLES`, from the registry's
    ``[roles]`` table (default: census = gemma, sample = codex). Raises ValueError as :func:`load_registry`."""
    path = Path(path) if path else default_registry_path()
    teachers = load_registry(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"teacher registry {path}: not valid TOML ({exc})") from exc
    roles = _roles(path, doc)
    _check_roles(path, roles, teachers)
    return roles
