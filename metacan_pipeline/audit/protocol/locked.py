"""The audit protocol, locked before any coding (SPEC section 10).

A protocol (:class:`AuditProtocol`, frozen) records everything the audit's estimates will depend on: the classifier
version and decision rule under test, the heads evaluated (each with the support gate, quota rate, k and threshold
it had, and where its near/far threshold comes from), the gate thresholds, the audit sample design (frame build, the
strata in first-match order with their sizes and expected positive rates, the near-threshold band, the hash salt,
what happens to trained works), the minimum-n rule of the report (``min_n``: no rate on fewer coded cases) and the
coders' instructions (version and SHA-256 of the file). Its content is one
canonical JSON document (sorted keys, no whitespace, no NaN); ``content_sha256`` hashes it and the id is
``protocol-<first 12 hex>``: the same content always has the same id, any change is a new protocol.

Immutable in storage too: :func:`record_protocol` appends a protocol to ``audit_protocols`` only when its id is new
and never updates a row; every materialization is logged in ``audit_protocol_runs``, whose newest row names the
current protocol (so going back to an earlier configuration makes that earlier protocol current again, unchanged).
:func:`load_protocol` re-hashes the stored JSON and refuses a row that no longer matches its id.

Coder instructions are versioned files, ``audit/instructions/<version>.md``, like the teacher prompts;
``audit/instructions/versions.toml`` locks the full SHA-256 of each published version, and :func:`load_instructions`
refuses a file that does not match its lock or has none (publish a change as a new version).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from typing import Any

import duckdb

from ...storage import MetacanStorage
from ...vocab import BINARY_TARGETS

#: Bump when the meaning of a protocol field changes (it is part of the hashed content). Format 2 added ``min_n``;
#: a format-1 protocol (written before) keeps its content, hash and id and reports on at least
#: :data:`FORMAT_1_MIN_N` cases, the constant its reports used.
PROTOCOL_FORMAT = 2
PROTOCOL_FORMATS: tuple[int, ...] = (1, 2)
FORMAT_1_MIN_N = 30
DECISION_RULES: tuple[str, ...] = ("consensus", "candidate")
TRAINED_WORKS: tuple[str, ...] = ("own_stratum", "exclude")
#: Where a head's near/far threshold comes from: its quota threshold (a gated head), the score at the quota it
#: would have had (a head without decisions), or nowhere (no positive rate: the head adds nothing to near).
THRESHOLD_SOURCES: tuple[str, ...] = ("quota", "score_quantile", "none")
#: The strata a protocol plans, in the first-match order of :func:`metacan_pipeline.audit.protocol.design.stratum_sql`.
STRATA: tuple[str, ...] = (
    "trained_on",
    "consensus",
    "candidate_only",
    "negative_near",
    "french",
    "no_abstract",
    "about_ca_only",
    "negative_far",
)
#: The stratum of the works that trained or calibrated the classifier under test, when the protocol excludes them:
#: outside the audited population (selection probability 0, never drawn).
EXCLUDED_TRAINED = "excluded:trained_on"


@dataclass(frozen=True)
class GateThresholds:
    """The gate a head must pass (SPEC section 10 defaults): lower 95% bounds on precision and recall, fewest
    coded positives. The field names are those of :class:`metacan_pipeline.audit.estimates.gate.GateThresholds`."""

    precision_lower: float = 0.80
    recall_lower: float = 0.70
    min_coded_positives: int = 30

    def __post_init__(self) -> None:
        for name in ("precision_lower", "recall_lower"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"gate {name} must be in (0, 1), got {getattr(self, name)}")
        if self.min_coded_positives < 1:
            raise ValueError(f"gate min_coded_positives must be >= 1, got {self.min_coded_positives}")


@dataclass(frozen=True)
class HeadUnderTest:
    """One evaluated binary head of the classifier version: its support gate, the design-weighted teacher rate, the
    quota ``k`` (the k it would have had when it has no decisions), the threshold its near/far split uses and where
    that threshold comes from (:data:`THRESHOLD_SOURCES`)."""

    head: str
    gate_passed: bool
    gate_reason: str
    rate: float | None
    k: int | None
    threshold: float | None
    threshold_source: str

    def __post_init__(self) -> None:
        if self.head not in BINARY_TARGETS:
            raise ValueError(f"head {self.head!r} is not a binary head; expected one of {list(BINARY_TARGETS)}")
        if self.threshold_source not in THRESHOLD_SOURCES:
            raise ValueError(f"head {self.head}: threshold_source {self.threshold_source!r} not in {THRESHOLD_SOURCES}")
        if (self.threshold is None) != (self.threshold_source == "none"):
            raise ValueError(f"head {self.head}: a threshold needs a source and a source 'none' has no threshold")


@dataclass(frozen=True)
class StratumPlan:
    """How one stratum is drawn: ``n_h = max(min_n, round(fraction * N_h))`` capped at ``N_h`` (the SPEC section 5
    rule, :func:`metacan_pipeline.sampling.design.stratum_sample_size`; ``fraction = 0`` is a fixed size), and the
    positive rate expected there (a prior for the power note only; it changes no draw)."""

    name: str
    fraction: float
    min_n: int
    expected_positive_rate: float

    def __post_init__(self) -> None:
        if self.name not in STRATA:
            raise ValueError(f"stratum {self.name!r} unknown; the audit strata are {list(STRATA)}")
        if not 0 <= self.fraction <= 1:
            raise ValueError(f"stratum {self.name}: fraction {self.fraction} not in [0, 1]")
        if self.min_n < 1:
            raise ValueError(
                f"stratum {self.name}: min_n {self.min_n} < 1 would give its works selection probability 0"
            )
        if not 0 <= self.expected_positive_rate <= 1:
            raise ValueError(f"stratum {self.name}: expected_positive_rate {self.expected_positive_rate} not in [0, 1]")


@dataclass(frozen=True)
class Instructions:
    """One version of the coder instructions: its text and the full SHA-256 of the file."""

    version: str
    sha256: str
    text: str


@dataclass(frozen=True)
class AuditProtocol:
    """A locked audit protocol (module docstring). ``heads`` in :data:`BINARY_TARGETS` order, ``strata`` in
    :data:`STRATA` order (one plan each), so equal content is equal JSON."""

    classifier_version: str
    decision_rule: str
    heads: tuple[HeadUnderTest, ...]
    gate: GateThresholds
    strata: tuple[StratumPlan, ...]
    near_band: float
    salt: str
    trained_works: str
    frame_build_id: str
    instructions_version: str
    instructions_sha256: str
    min_n: int = FORMAT_1_MIN_N
    """The minimum-n rule: no rate, interval or PPI estimate is reported on fewer coded cases (it says so)."""
    protocol_format: int = PROTOCOL_FORMAT

    def __post_init__(self) -> None:
        if self.protocol_format not in PROTOCOL_FORMATS:
            raise ValueError(
                f"protocol format {self.protocol_format!r} not in {PROTOCOL_FORMATS}: written by other code"
            )
        if self.protocol_format == 1 and self.min_n != FORMAT_1_MIN_N:
            raise ValueError(f"a format-1 protocol has no min_n of its own (it is {FORMAT_1_MIN_N})")
        if self.min_n < 1:
            raise ValueError(f"min_n {self.min_n} must be >= 1")
        if self.decision_rule not in DECISION_RULES:
            raise ValueError(f"decision_rule {self.decision_rule!r} not in {DECISION_RULES}")
        if self.trained_works not in TRAINED_WORKS:
            raise ValueError(f"trained_works {self.trained_works!r} not in {TRAINED_WORKS}")
        names = [h.head for h in self.heads]
        if not names or names != [t for t in BINARY_TARGETS if t in names]:
            raise ValueError(f"heads {names} must be distinct binary heads in vocabulary order, at least one")
        if tuple(p.name for p in self.strata) != STRATA:
            raise ValueError(f"strata {[p.name for p in self.strata]} must plan each of {list(STRATA)} once, in order")
        if not 0 < self.near_band <= 1:
            raise ValueError(f"near_band {self.near_band} not in (0, 1]")
        if not self.salt or not self.classifier_version or not self.frame_build_id:
            raise ValueError("a protocol needs a salt, a classifier version and a frame build id")

    @property
    def head_names(self) -> list[str]:
        return [h.head for h in self.heads]

    def plan(self, stratum: str) -> StratumPlan:
        return next(p for p in self.strata if p.name == stratum)

    def content(self) -> dict[str, Any]:
        """What the hash covers: every field of the protocol's format, and the format (a format-1 protocol has no
        ``min_n`` key, so its content, hash and id are what they were when it was locked)."""
        data = asdict(self)
        fmt = data.pop("protocol_format")
        if fmt == 1:
            del data["min_n"]
        return {"protocol_format": fmt, **data}

    def canonical_json(self) -> str:
        return canonical_json(self.content())

    @cached_property
    def content_sha256(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    @cached_property
    def protocol_id(self) -> str:
        return f"protocol-{self.content_sha256[:12]}"

    def row(self, created_at: dt.datetime) -> dict[str, Any]:
        """The ``audit_protocols`` row of this protocol."""
        return {
            "protocol_id": self.protocol_id,
            "content_sha256": self.content_sha256,
            "created_at": created_at,
            "classifier_version": self.classifier_version,
            "decision_rule": self.decision_rule,
            "heads": self.head_names,
            "instructions_version": self.instructions_version,
            "instructions_sha256": self.instructions_sha256,
            "protocol_json": self.canonical_json(),
        }

    @classmethod
    def from_json(cls, text: str) -> AuditProtocol:
        """The protocol of a canonical JSON document (:meth:`canonical_json`). Raises ValueError for another format."""
        data = json.loads(text)
        fmt = data.pop("protocol_format", None)
        if fmt not in PROTOCOL_FORMATS:
            raise ValueError(f"protocol format {fmt!r} not in {PROTOCOL_FORMATS}: written by other code")
        return cls(
            **{
                **data,
                "protocol_format": fmt,
                "heads": tuple(HeadUnderTest(**h) for h in data["heads"]),
                "gate": GateThresholds(**data["gate"]),
                "strata": tuple(StratumPlan(**p) for p in data["strata"]),
            }
        )


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 characters as they are, NaN refused: one text per content."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# --- coder instructions -----------------------------------------------------------------------------------------------


def _instructions_dir(directory: str | Path | None):
    return Path(directory) if directory is not None else files("metacan_pipeline.audit").joinpath("instructions")


def instructions_lock(directory: str | Path | None = None) -> dict[str, str]:
    """``{version: sha256}`` from ``versions.toml`` of the instructions folder (default: the packaged one)."""
    return tomllib.loads(_instructions_dir(directory).joinpath("versions.toml").read_text(encoding="utf-8"))


def load_instructions(version: str, directory: str | Path | None = None) -> Instructions:
    """A version of the coder instructions. Raises FileNotFoundError (no such file) or ValueError (a version with no
    lock line, or whose file no longer matches it: a published version is never edited)."""
    folder = _instructions_dir(directory)
    path = folder.joinpath(f"{version}.md")
    if not path.is_file():
        raise FileNotFoundError(
            f"coder instructions {version!r} not found at {path}: add {version}.md beside versions.toml"
        )
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    locked = instructions_lock(directory).get(version)
    if locked is None:
        raise ValueError(
            f"coder instructions {version} at {path} (SHA-256 {sha}) have no line in versions.toml: lock a version "
            "before a protocol names it"
        )
    if locked != sha:
        raise ValueError(
            f"coder instructions {version} at {path} have SHA-256 {sha} but versions.toml locks {locked}: a published "
            "version is never edited; save the change as a new version (a new file and a new line in versions.toml)"
        )
    return Instructions(version, sha, raw.decode("utf-8"))


# --- storage ----------------------------------------------------------------------------------------------------------


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def record_protocol(storage: MetacanStorage, protocol: AuditProtocol, run_id: str) -> bool:
    """Append ``protocol`` to ``audit_protocols`` unless its id is stored (a stored row is never updated), and log
    this materialization in ``audit_protocol_runs``; returns True when the protocol is new. Raises ValueError when
    the stored row of the id holds other content (an id collision, or a row altered by hand)."""
    now = _now()
    row = protocol.row(now)
    with storage.connect() as con:
        stored = con.execute(
            "SELECT content_sha256 FROM audit_protocols WHERE protocol_id = ?", [row["protocol_id"]]
        ).fetchone()
        if stored is not None and stored[0] != row["content_sha256"]:
            raise ValueError(
                f"audit_protocols holds {row['protocol_id']} with content SHA-256 {stored[0]}, not {row['content_sha256']}"
            )
        if stored is None:
            con.execute(
                "INSERT INTO audit_protocols VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [row[k] for k in row],
            )
        con.execute(
            "INSERT INTO audit_protocol_runs VALUES (?, ?, ?, ?)", [run_id, row["protocol_id"], now, stored is None]
        )
    return stored is None


def current_protocol_id(con: duckdb.DuckDBPyConnection) -> str | None:
    """The protocol the newest ``audit_protocol`` materialization named, or None before the first."""
    row = con.execute(
        "SELECT protocol_id FROM audit_protocol_runs ORDER BY materialized_at DESC, run_id DESC LIMIT 1"
    ).fetchone()
    return row[0] if row else None


def load_protocol(con: duckdb.DuckDBPyConnection, protocol_id: str) -> AuditProtocol:
    """The stored protocol ``protocol_id``, re-hashed. Raises ValueError when it is not stored or its JSON no longer
    hashes to its id and content SHA-256."""
    row = con.execute(
        "SELECT content_sha256, protocol_json::VARCHAR FROM audit_protocols WHERE protocol_id = ?", [protocol_id]
    ).fetchone()
    if row is None:
        raise ValueError(f"protocol {protocol_id!r} is not in audit_protocols: materialize audit_protocol")
    protocol = AuditProtocol.from_json(row[1])
    if protocol.content_sha256 != row[0] or protocol.protocol_id != protocol_id:
        raise ValueError(f"protocol {protocol_id}: the stored JSON no longer hashes to its id: the row was altered")
    return protocol


def current_protocol(storage: MetacanStorage) -> AuditProtocol:
    """The current protocol (:func:`current_protocol_id`). Raises ValueError before any ``audit_protocol`` run."""
    with storage.connect() as con:
        pid = current_protocol_id(con)
        if pid is None:
            raise ValueError("no audit protocol yet: materialize audit_protocol before audit_sample")
        return load_protocol(con, pid)
