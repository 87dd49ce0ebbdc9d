"""Input settings shared by several assets (where the OpenAlex records are)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from . import settings

#: The real records the project ships against (../shared/data/openalex beside the checkout).
DEFAULT_OPENALEX_DIR = settings.DEFAULT_OPENALEX_DIR
#: ``source_file`` prefix of the files in the API archive.
API_PREFIX = "api/"


def default_openalex_dir() -> str:
    return settings.openalex_dir()


class OpenAlexFiles(dg.ConfigurableResource):
    """A local folder of OpenAlex records in any shape (API pages, single works, archived responses,
    JSON Lines, snapshot layout). Default ``$METACAN_OPENALEX_DIR`` or ``../shared/data/openalex``."""

    input_dir: str = Field(default=DEFAULT_OPENALEX_DIR, description="Folder of OpenAlex JSON/JSONL/snapshot files.")
    api_archive_dir: str = Field(
        default="",
        description=(
            "Folder of archived OpenAlex API pages written by the API refresh (one window=<from>_<to> folder per refresh); "
            "read as part of the input, under the source_file prefix 'api/'. Empty: no API archive."
        ),
    )

    @property
    def root(self) -> Path:
        return Path(self.input_dir).resolve()

    @property
    def api_root(self) -> Path | None:
        return Path(self.api_archive_dir).resolve() if self.api_archive_dir else None

    def path_of(self, source_file: str) -> Path:
        """The file behind a ``source_file`` as the frame records it (``api/...`` = the API archive)."""
        if source_file.startswith(API_PREFIX) and self.api_root is not None:
            return self.api_root / source_file[len(API_PREFIX) :]
        return self.root / source_file
