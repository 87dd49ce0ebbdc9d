"""Sending the batches of one labelling run to a teacher (SPEC section 4): the client a teacher's spec
asks for (:func:`teacher_client`), ``concurrency`` calls in flight, a progress bar and log line, and the
early stop of a run whose endpoint refuses it or keeps failing (:data:`MAX_FAILED_BATCHES_IN_A_ROW`).
Used by :func:`~.labelling.call_teacher`."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx
from tqdm import tqdm

from .client import CallRecord, EndpointConfigurationError, EndpointUnavailableError, LabelOutcome, TeacherClient
from .registry import TeacherSpec
from .rubric import Prompt
from .store import NOT_FINAL

if TYPE_CHECKING:
    from .labelling import LabelRunStats


class Progress:
    """A tqdm bar (shown on a terminal) plus a log line every ``every_s`` seconds: works done of total,
    calls, tokens, running cost and ETA."""

    def __init__(self, teacher: str, total: int, stats: LabelRunStats, log, every_s: float = 15.0) -> None:
        self.teacher, self.total, self.stats, self.log, self.every_s = teacher, total, stats, log, every_s
        self.bar = tqdm(total=total, desc=f"teacher {teacher}", unit="work", disable=None)
        self.t0 = self.last = time.monotonic()
        self.done = 0

    def line(self) -> str:
        s, elapsed = self.stats, time.monotonic() - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        return (
            f"teacher {self.teacher}: {self.done}/{self.total} works, {s.calls} calls, "
            f"{s.prompt_tokens + s.completion_tokens} tokens, ${s.cost_usd:.4f}, {elapsed:.0f}s elapsed, ETA {eta:.0f}s"
        )

    def update(self, works: int) -> None:
        self.done += works
        self.bar.update(works)
        self.bar.set_postfix(
            calls=self.stats.calls,
            tokens=self.stats.prompt_tokens + self.stats.completion_tokens,
            cost=f"${self.stats.cost_usd:.4f}",
            refresh=False,
        )
        now = time.monotonic()
        if now - self.last >= self.every_s or self.done == self.total:
            self.last = now
            self.log.info(self.line())

    def close(self) -> None:
        self.bar.close()


#: Batches in a row whose every work failed for a reason that is not about the work (:data:`~.store.NOT_FINAL`)
#: after which a run stops taking new batches: an endpoint that is down or misconfigured costs a few calls.
MAX_FAILED_BATCHES_IN_A_ROW = 8


async def send_batches(
    client: TeacherClient, batches: list[list[dict]], concurrency: int, progress: Progress
) -> BaseException | None:
    """Send ``batches`` with ``concurrency`` workers. Returns the error that stopped the run early, or None.

    A stop (a configuration error such as HTTP 401, or :data:`MAX_FAILED_BATCHES_IN_A_ROW` batches lost
    to the endpoint) ends the taking of new batches; calls in flight finish and are stored first, so no
    reply already paid for is lost. Works never sent have no outcome: the next run asks for them.
    """
    queue = deque(batches)
    stop: list[BaseException] = []
    streak = 0

    async def worker() -> None:
        nonlocal streak
        while queue and not stop:
            batch = queue.popleft()
            try:
                outcomes = await client.label(batch)
            except EndpointConfigurationError as exc:
                stop.append(exc)
                return
            progress.update(len(batch))
            if all(o.error is not None and o.error.startswith(NOT_FINAL) for o in outcomes):
                streak += 1
                if streak >= MAX_FAILED_BATCHES_IN_A_ROW and queue and not stop:
                    stop.append(
                        EndpointUnavailableError(
                            f"{streak} batches in a row failed at the endpoint ({outcomes[0].error[:300]}); stopped with "
                            f"{len(queue)} batches not sent: they are asked for by the next run"
                        )
                    )
            else:
                streak = 0

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(batches)) or 1)))
    finally:
        await client.aclose()
    return stop[0] if stop else None


def teacher_client(
    spec: TeacherSpec,
    prompt: Prompt,
    url: str,
    *,
    api_key: str,
    transport: httpx.AsyncBaseTransport | None,
    on_call: Callable[[CallRecord], None],
    on_outcomes: Callable[[list[LabelOutcome]], None],
) -> TeacherClient:
    """The client for ``spec`` at ``url``. ``structured_output = auto`` is ``gbnf`` (the compact reply
    grammar) on the embedded server and ``auto`` (probed) elsewhere; ``system_role = auto`` sends a system message except
    to the embedded Gemma, whose chat template has none."""
    structured = spec.structured_output
    if structured == "auto":
        structured = "gbnf" if spec.embedded else "auto"
    return TeacherClient(
        url,
        spec.model,
        prompt,
        api_key=api_key,
        structured=structured,
        system_role=spec.system_role == "yes" or (spec.system_role == "auto" and not spec.embedded),
        logprobs=spec.logprobs,
        temperature=spec.temperature,
        max_tokens_per_work=spec.max_tokens_per_work,
        timeout_s=spec.timeout_s,
        max_invalid_retries=spec.max_invalid_retries,
        max_transport_attempts=spec.max_transport_attempts,
        concurrency=spec.concurrency,
        transport=transport,
        on_call=on_call,
        on_outcomes=on_outcomes,
    )
