"""Teacher configuration (SPEC section 4): which endpoint, model, prompt version, view and coverage.

Each teacher is a Dagster resource, so every field can be changed from the launchpad or from the
environment (``METACAN_<TEACHER>_BASE_URL``, ``..._MODEL``, ``..._API_KEY_ENV``, ``..._PROMPT_VERSION``)
without a code change. An empty ``base_url`` means the embedded llama.cpp Gemma server.
"""

from __future__ import annotations

import os

import dagster as dg
from pydantic import Field

from .client import TeacherClient, load_prompt
from .server import EMBEDDED_MODEL_ALIAS, EmbeddedLlamaServer


def _env(teacher: str, key: str, default: str) -> str:
    return os.environ.get(f"METACAN_{teacher.upper()}_{key}", default)


class TeacherSettings(dg.ConfigurableResource):
    """One teacher: an OpenAI-compatible endpoint + model + prompt version + record view + coverage."""

    name: str = Field(description="Teacher name, e.g. gemma or codex; part of every label key.")
    base_url: str = Field(default="", description="OpenAI-compatible base URL ending in /v1; empty = embedded Gemma server.")
    model: str = Field(default=EMBEDDED_MODEL_ALIAS, description="Model name sent to the endpoint; part of the label key.")
    api_key_env: str = Field(default="", description="Name of the environment variable holding the API key (never the key itself).")
    prompt_version: str = Field(default="v1", description="Prompt file teachers/prompts/<version>.md; part of the label key.")
    record_view: str = Field(default="title_only", description="title_only | title_abstract.")
    coverage: str = Field(default="all", description="all (every frame work) | sample (the design-weighted sample).")
    structured_output: str = Field(default="auto", description="auto | json_schema | json_object_schema | none.")
    system_role: str = Field(default="auto", description="auto | yes | no: send the rubric as a system message (auto: no for the embedded Gemma).")
    temperature: float = 0.0
    max_tokens: int = 320
    timeout_s: float = 120.0
    max_invalid_retries: int = Field(default=2, description="Re-asks after an invalid reply before recording a failure.")

    @classmethod
    def from_env(cls, name: str, record_view: str, coverage: str) -> "TeacherSettings":
        return cls(
            name=name,
            base_url=_env(name, "BASE_URL", ""),
            model=_env(name, "MODEL", EMBEDDED_MODEL_ALIAS),
            api_key_env=_env(name, "API_KEY_ENV", ""),
            prompt_version=_env(name, "PROMPT_VERSION", "v1"),
            record_view=record_view,
            coverage=coverage,
        )

    def client(self, server: EmbeddedLlamaServer, log=None) -> TeacherClient:
        """A client for this teacher; starts the embedded server when ``base_url`` is empty."""
        base = self.base_url or server.base_url(log)
        mode = self.structured_output
        if mode == "auto":
            mode = "json_object_schema" if not self.base_url else "json_schema"
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if self.api_key_env and not key:
            raise ValueError(f"teacher {self.name!r}: environment variable {self.api_key_env} (api_key_env) is not set")
        return TeacherClient(base, self.model, load_prompt(self.prompt_version), api_key=key, structured=mode,
                             temperature=self.temperature, max_tokens=self.max_tokens, timeout_s=self.timeout_s,
                             max_invalid_retries=self.max_invalid_retries,
                             system_role=self.system_role == "yes" or (self.system_role == "auto" and bool(self.base_url)))
