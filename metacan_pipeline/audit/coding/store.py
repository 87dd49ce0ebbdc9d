"""The coding store of the audit study (SPEC section 10): coders, their queues, every answer.

One SQLite file, ``<data dir>/audit/coding.sqlite`` (:func:`metacan_pipeline.settings.coding_store_path`), whose tables
are declared in :mod:`metacan_pipeline.tables.coding` and created from the catalog's DDL. :class:`CodingStore` is one
object over one connection; each responsibility is a mixin in its own module over :class:`.base.StoreBase` (the file
and its transactions):

- :mod:`.coders`: coders, their roles and sign-in sessions (tokens and sessions stored as SHA-256 only);
- :mod:`.tasks`: tasks (evidence only, :mod:`.evidence`), their loads and the coders' queues and claims;
- :mod:`.assignments`: the coder pair of each work (balanced, drawn from the protocol's hash) and the protocol's
  evaluated heads;
- :mod:`.answers`: answers given on the site (:func:`.validate.validate_answer`), appended, never overwritten;
- :mod:`.imports`: answers made elsewhere (Label Studio, :mod:`.labelstudio_import`), appended once each;
- :mod:`.adjudication`: agreement, disagreements, adjudication and the final human codes;
- :mod:`.machine_codes`: machine adjudicators' codes, kept beside the human codes, never as one;
- :mod:`.pseudonyms`: the coders' pseudonyms and a protocol's answers and tasks as a release holds them;
- :mod:`.abstracts`: the abstracts shown to coders, archived under the SHA-256 of their text;
- :mod:`.backup`: a consistent copy of the whole store.
"""

from __future__ import annotations

from .abstracts import AbstractsMixin
from .adjudication import AdjudicationMixin
from .answers import AnswersMixin
from .assignments import AssignmentsMixin
from .backup import BackupMixin
from .base import StoreBase
from .coders import CodersMixin
from .imports import ImportsMixin
from .machine_codes import MachineCodesMixin
from .pseudonyms import PseudonymsMixin
from .tasks import TasksMixin


class CodingStore(
    AdjudicationMixin,
    ImportsMixin,
    AnswersMixin,
    TasksMixin,
    AssignmentsMixin,
    CodersMixin,
    MachineCodesMixin,
    PseudonymsMixin,
    BackupMixin,
    AbstractsMixin,
    StoreBase,
):
    """The coding store: one SQLite connection (WAL mode), guarded by a lock, as site requests run on threads.

    Usable as a context manager (closes the connection). ``read_only=True`` (the CLI's read commands) opens an existing
    file read-only and writes nothing (no folder, no table, no journal mode), so a store on a read-only medium can be
    read; a write is then refused. Any SQLite failure of the file (missing in read-only mode, not a database, read-only,
    busy) is a :class:`.errors.CodingStoreError` naming the file and what to do, never a bare ``sqlite3`` error."""
