"""Shared fixtures: the real OpenAlex records in ../shared/data (never copied into the repository)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("METACAN_SHARED_DIR", REPO.parent / "shared"))
OPENALEX = SHARED / "data" / "openalex"
SNAPSHOT = OPENALEX / "max-planck-innovation-competition__go-openalex__snapshot_sample"

# A small real input: the Canadian funder records, the current-schema Canadian works, one work seen in
# several versions and a page with an HTML title. Enough for every route the data supports.
SMALL_INPUT_FILES = (
    "choxos__MetaCan__funder_CIHR_F4320334506.json",
    "choxos__MetaCan__funder_NSERC_F4320334593.json",
    "choxos__MetaCan__funder_SSHRC_F4320334617.json",
    "choxos__MetaCan__funder_CFI_F4320319952.json",
    "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json",
    "choxos__MetaCan__works_ca_reproducibility_3406695ce49cc852.json",
    "Mearman__Academic-Explorer__work_W2741809807.json",
    "rkrug__openalexPro__fixture_keypaper_page_1.json",
)


@pytest.fixture(scope="session")
def openalex_dir() -> Path:
    if not OPENALEX.exists():
        pytest.fail(f"real data not found at {OPENALEX}: the tests need ../shared/data beside the checkout")
    return OPENALEX


@pytest.fixture()
def small_input(tmp_path: Path, openalex_dir: Path) -> Path:
    """A temporary input folder holding a few real OpenAlex files (copied at test time)."""
    dest = tmp_path / "openalex"
    dest.mkdir()
    for name in SMALL_INPUT_FILES:
        shutil.copy(openalex_dir / name, dest / name)
    return dest
