"""Input settings shared by several assets (where the OpenAlex records are)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from . import settings
from .openalex.folders import API_PREFIX, InputFolder, input_folders, locate

__all__ = ["API_PREFIX", "DEFAULT_OPENALEX_DIRS", "OpenAlexFiles", "default_openalex_dirs"]

#: The real records the project ships against (../shared/data/openalex and openalex_more beside the checkout).
DEFAULT_OPENALEX_DIRS = settings.DEFAULT_OPENALEX_DIRS


def default_openalex_dirs() -> list[str]:
    return settings.openalex_dirs()


class OpenAlexFiles(dg.ConfigurableResource):
    """Local folders of OpenAlex records in any shape (API pages, single works, archived responses,
    JSON Lines, snapshot layout, tar archives), read together. Default ``$METACAN_OPENALEX_DIR`` (one
    folder, or several separated by ``os.pathsep``) or ``../shared/data/openalex`` and ``openalex_more``.

    ``source_file`` names (:mod:`metacan_pipeline.openalex.folders`): the first folder's files by their
    path relative to it, each further folder's as ``<folder name>/<path>``, the API archive's as ``api/<path>``.
    """

    input_dirs: list[str] = Field(
        default=list(DEFAULT_OPENALEX_DIRS),
        description=(
            "Folders of OpenAlex JSON/JSONL/snapshot files, read together. The first folder's files are recorded "
            "by their path relative to it; each further folder's as <folder name>/<path> (folders must have "
            "distinct names and not lie inside one another)."
        ),
    )
    api_archive_dir: str = Field(
        default="",
        description=(
            "Folder of archived OpenAlex API pages written by the API refresh (one window=<from>_<to> folder per refresh); "
            "read as part of the input, under the source_file prefix 'api/'. Empty: no API archive."
        ),
    )

    @property
    def folders(self) -> list[InputFolder]:
        """The input folders with their ``source_file`` prefixes; ValueError naming a bad list
        (:func:`metacan_pipeline.openalex.folders.input_folders`)."""
        return input_folders(self.input_dirs)

    @property
    def api_root(self) -> Path | None:
        return Path(self.api_archive_dir).resolve() if self.api_archive_dir else None

    def path_of(self, source_file: str) -> Path | str:
        """The file behind a ``source_file`` as the frame records it (``api/...`` = the API archive,
        ``<folder name>/...`` = a further input folder); a URL under an ``s3://`` (fsspec) input folder."""
        return locate(self.folders, self.api_root, source_file)
