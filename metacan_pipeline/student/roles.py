"""The teachers the student learns from, by role (SPEC sections 5-6), as the registry's ``[roles]`` names them.

- :data:`SAMPLE` (codex by default): the sample teacher, covering the design-weighted sample; its heads
  are trained with design weights, carry the support gate and make the quota-calibrated decisions.
- :data:`CENSUS` (gemma by default): the census teacher, covering every frame work; its heads are
  unweighted and its direct labels enter the candidate and consensus of every prediction.

:data:`ROLE_TEACHERS` (the registry names of the two role teachers, sample first) is the order of the heads,
of the model-version hash and of the machine-score arms, as the published columns. The published column names (``score_codex``,
``category_scores_gemma``, ... in :mod:`metacan_pipeline.tables.student`) keep the default teacher names.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..storage import MetacanStorage
from ..teachers.core.registry import load_registry, load_roles
from ..teachers.qualification import counts, current_qualification, load_qualification, status_note
from ..vocab import CENSUS_TEACHER, SAMPLE_TEACHER

ROLES: dict[str, str] = load_roles()
SAMPLE: str = ROLES[SAMPLE_TEACHER]
CENSUS: str = ROLES[CENSUS_TEACHER]
ROLE_TEACHERS: tuple[str, str] = (SAMPLE, CENSUS)


def direct_labels_key(teacher: str) -> str:
    """The asset key (and warehouse table) of a registry teacher's direct labels: ``direct_labels_<name>``."""
    return f"direct_labels_{teacher}"


@dataclass(frozen=True)
class TeacherStanding:
    """Why each role teacher's labels may not decide (its qualification note), or None when they may."""

    sample_not_qualified: str | None = None
    census_not_qualified: str | None = None


def teacher_standing(storage: MetacanStorage) -> TeacherStanding:
    """The qualification standing of the two role teachers (``teacher_qualification``, newest row of each
    teacher's current configuration under the registry's ``[qualification]``; no row: not tested, does not
    count)."""
    registry, cfg = load_registry(), load_qualification()
    notes = {}
    for name in (SAMPLE, CENSUS):
        row = current_qualification(storage, registry[name], cfg)
        notes[name] = None if counts(row) else status_note(row)
    return TeacherStanding(notes[SAMPLE], notes[CENSUS])
