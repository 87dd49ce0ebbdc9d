"""Input settings shared by several assets (where the OpenAlex records are)."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from pydantic import Field

#: The real records the project ships against (../shared/data/openalex beside the checkout).
DEFAULT_OPENALEX_DIR = "../shared/data/openalex"


def default_openalex_dir() -> str:
    return os.environ.get("METACAN_OPENALEX_DIR", DEFAULT_OPENALEX_DIR)


class OpenAlexFiles(dg.ConfigurableResource):
    """A local folder of OpenAlex records in any shape (API pages, single works, archived responses,
    JSON Lines, snapshot layout). Default ``$METACAN_OPENALEX_DIR`` or ``../shared/data/openalex``."""

    input_dir: str = Field(default=DEFAULT_OPENALEX_DIR, description="Folder of OpenAlex JSON/JSONL/snapshot files.")

    @property
    def root(self) -> Path:
        return Path(self.input_dir).resolve()
