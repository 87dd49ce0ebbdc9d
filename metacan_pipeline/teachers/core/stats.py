"""What a labelling run did, per run (:class:`LabelRunStats`) and per endpoint (:class:`LaneStats`): shown as
asset metadata, in the log and in the CLI summary."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class LabelRunStats:
    """What one labelling run did (shown as asset metadata and in the CLI summary)."""

    works: int = 0
    reused: int = 0
    rule_labels: int = 0
    deferred: int = 0
    sent: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)
    structured_output: str | None = None
    recovered: dict = field(default_factory=dict)
    view_hashes: dict[str, str] | Path = field(default_factory=dict)
    endpoints: dict[str, LaneStats] = field(default_factory=dict)


@dataclass
class LaneStats:
    """What one endpoint did in one run (asset metadata ``endpoints`` and the log). ``works``: works
    whose recorded outcome came from its calls (``labelled`` + ``failures``); ``given_back``: works its
    failed calls gave back to the queue for other endpoints; ``seconds``: its calls' time on the wire;
    ``downs``: times it went down; ``probes``: ``GET /models`` sent while down; ``state`` at the end (up,
    down, refused) and the ``cause`` of the last failure."""

    endpoint: str
    concurrency: int
    calls: int = 0
    works: int = 0
    labelled: int = 0
    failures: int = 0
    given_back: int = 0
    seconds: float = 0.0
    downs: int = 0
    probes: int = 0
    state: str = "up"
    cause: str | None = None

    def as_dict(self) -> dict:
        return {**asdict(self), "seconds": round(self.seconds, 3)}

    def line(self, teacher: str) -> str:
        return (
            f"teacher {teacher} endpoint {self.endpoint}: {self.calls} calls, {self.works} works ({self.labelled} "
            f"labelled, {self.failures} failed), {self.given_back} given back to other endpoints, {self.seconds:.1f} s "
            f"on the wire, down {self.downs} times, {self.probes} probes, {self.state} at the end"
            + (f" ({self.cause[:200]})" if self.cause and self.state != "up" else "")
        )
