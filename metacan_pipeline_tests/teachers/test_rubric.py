"""Tests of metacan_pipeline.teachers.core.rubric: prompts and their lock."""

import hashlib
from importlib.resources import files

import pytest

from metacan_pipeline.teachers.core.rubric import USER_MARKER, load_prompt, prompt_lock


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
