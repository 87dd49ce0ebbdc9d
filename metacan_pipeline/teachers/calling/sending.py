"""Sending the batches of one labelling run to a teacher's endpoints (SPEC section 4): the clients a
teacher's spec asks for (:func:`teacher_lanes`), the calls in flight, a progress bar and log line, and
the early stop of a run whose endpoints refuse it or keep failing (:data:`MAX_FAILED_BATCHES_IN_A_ROW`).
Used by :func:`~..core.labelling.call_teacher`.

A teacher calls one endpoint or several (:attr:`~..core.registry.TeacherSpec.lanes`). Each endpoint is a *lane*:
its own :class:`~.client.TeacherClient` (key, connections, structured-output mode) and ``concurrency``
workers, every worker of every lane pulling batches from one shared queue, so a fast endpoint takes more
batches than a slow one. The rules (:class:`LaneRun`):

- A lane is *up* until a call of it fails for good, its transport retries spent (timeouts, dropped or
  refused connections, 429, 5xx: its works' outcome is :data:`~..core.store.UNAVAILABLE`), or until
  :data:`MAX_FAILED_BATCHES_IN_A_ROW` of its batches in a row failed at the endpoint (:data:`~..core.store.NOT_FINAL`).
  Then it is *down*: it takes no new batch, its other calls in flight stop retrying, and while another
  lane is up, the works its failed calls held are not recorded: they go back to the front of the queue
  once the call holding them has ended, for the other lanes.
- A down lane rests ``endpoint_backoff_s`` (doubled each time it goes down again or a probe fails before
  it has labelled a work, at most :data:`~..core.registry.MAX_ENDPOINT_BACKOFF_S`), then one of its workers
  probes it (``GET /models``, :meth:`~.client.TeacherClient.probe`, nothing bought): an answer puts it up.
- When no lane is up, the down lanes send the batches themselves, as a teacher of one endpoint always did:
  a call that fails is recorded as its works' ``endpoint unavailable`` failure (the next run asks again),
  a call that labels puts its lane up again, and after :data:`MAX_FAILED_BATCHES_IN_A_ROW` batches in a
  row lost at the endpoints the run stops taking batches (:class:`~.client.EndpointUnavailableError`).
- A lane refused for its configuration (HTTP 401/404: URL, model or key) is out for the run; the works
  its call did not label go back to the queue for the other lanes. When no lane is left, the run stops
  with that error, as a teacher of one endpoint always did.
- Each work's outcome is recorded once: an outcome for a work already recorded is dropped, and a work goes
  back to the queue only after the call that held it has ended, so no two calls hold it at once.

A teacher of one endpoint is one lane and behaves as before lanes existed (the back-off never applies:
no other lane is ever up).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import httpx
from tqdm import tqdm

from ...http import public_url
from ..core.registry import EMBEDDED_ENDPOINT, MAX_ENDPOINT_BACKOFF_S, TeacherSpec
from ..core.rubric import Prompt
from ..core.stats import LabelRunStats, LaneStats
from ..core.store import NOT_FINAL, UNAVAILABLE
from .client import CallRecord, EndpointConfigurationError, EndpointUnavailableError, LabelOutcome, TeacherClient


class Progress:
    """A tqdm bar (shown on a terminal) plus a log line every ``every_s`` seconds: works done of total,
    calls, tokens, running cost and ETA (and the works of each endpoint, when there are several)."""

    def __init__(self, teacher: str, total: int, stats: LabelRunStats, log, every_s: float = 15.0) -> None:
        self.teacher, self.total, self.stats, self.log, self.every_s = teacher, total, stats, log, every_s
        self.bar = tqdm(total=total, desc=f"teacher {teacher}", unit="work", disable=None)
        self.t0 = self.last = time.monotonic()
        self.done = 0
        #: (time, works done) at the first answer: the ETA is the pace since then, because the first calls carry a
        #: cold server's warm-up, which would make the ETA far too long
        self.first: tuple[float, int] | None = None
        self.lanes: list[Lane] = []

    def eta(self, now: float) -> str:
        """Seconds left at the pace since the first answer; until there is a pace, when it will be known."""
        if self.first is None:
            return "after the first answer"
        if self.done <= self.first[1] or now <= self.first[0]:
            return "after the next answer"
        rate = (self.done - self.first[1]) / (now - self.first[0])
        return f"{(self.total - self.done) / rate:.0f}s"

    def line(self) -> str:
        now = time.monotonic()
        s, elapsed = self.stats, now - self.t0
        lanes = (
            "; endpoints " + ", ".join(f"{lane.name} {lane.stats.works} works ({lane.state})" for lane in self.lanes)
            if len(self.lanes) > 1
            else ""
        )
        return (
            f"teacher {self.teacher}: {self.done}/{self.total} works, {s.calls} calls, "
            f"{s.prompt_tokens + s.completion_tokens} tokens, ${s.cost_usd:.4f}, {elapsed:.0f}s elapsed, ETA {self.eta(now)}"
            + lanes
        )

    def update(self, works: int) -> None:
        if self.first is None:
            self.first = (time.monotonic(), self.done + works)
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


#: Batches in a row whose every work failed for a reason that is not about the work (:data:`~..core.store.NOT_FINAL`)
#: after which a lane is down, and with no lane up the run stops taking new batches: an endpoint that is
#: down or misconfigured costs a few calls.
MAX_FAILED_BATCHES_IN_A_ROW = 8


class Lane:
    """One endpoint of one run: its client, its workers' state, its statistics."""

    def __init__(self, name: str, concurrency: int, backoff_s: float) -> None:
        self.name, self.concurrency = name, concurrency
        self.stats = LaneStats(name, concurrency)
        self.client: TeacherClient | None = None
        self.run: LaneRun | None = None
        self.base_backoff_s = self.backoff_s = backoff_s
        self.probe_at = 0.0
        self.probing = False
        self.streak = 0

    @property
    def state(self) -> str:
        return self.stats.state

    @state.setter
    def state(self, value: str) -> None:
        self.stats.state = value

    def report(self, outcomes: list[LabelOutcome]) -> None:
        """The client's ``on_outcomes``: final outcomes of this lane's calls, judged by the run."""
        assert self.run is not None, "a lane reports to the run that sends its batches"
        self.run.outcomes(self, outcomes)

    def keep_retrying(self) -> bool:
        """The client's ``keep_retrying``: a call of a lane that is not up stops retrying while another lane
        is up (its works go there); with no lane up it retries as a teacher of one endpoint does."""
        return self.state == "up" or self.run is None or not self.run.any_up()

    def rest(self) -> None:
        """Wait ``backoff_s`` before the next probe, and twice as long after that (up to the cap)."""
        self.probe_at = time.monotonic() + self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, MAX_ENDPOINT_BACKOFF_S)


class LaneRun:
    """One run's queue of batches and its lanes (the rules are in the module docstring)."""

    def __init__(
        self,
        lanes: list[Lane],
        batches: list[list[dict]],
        progress: Progress,
        record: Callable[[list[LabelOutcome]], None],
        log,
    ) -> None:
        self.lanes, self.progress, self.record, self.log = lanes, progress, record, log
        self.teacher = progress.teacher
        self.queue = deque(batches)
        self.done: set[str] = set()
        self.in_flight = 0
        self.stop: list[BaseException] = []
        self.streak = 0
        self._changed = asyncio.Event()
        for lane in lanes:
            lane.run = self

    # ---- state --------------------------------------------------------------------------------
    def any_up(self) -> bool:
        return any(lane.state == "up" for lane in self.lanes)

    def _notify(self) -> None:
        """Wake every worker waiting for a change (a lane's state, the queue, a call ending)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self, timeout_s: float | None) -> None:
        changed = self._changed
        try:
            await asyncio.wait_for(changed.wait(), timeout_s)
        except TimeoutError:
            pass

    def _down(self, lane: Lane, cause: str) -> None:
        if lane.state != "up":
            return
        lane.state, lane.stats.cause = "down", cause
        lane.stats.downs += 1
        lane.rest()
        others = self.any_up()
        if len(self.lanes) > 1:
            self.log.warning(
                f"teacher {self.teacher}: endpoint {lane.name} is down ({cause[:300]}); "
                + (
                    f"its batches go to the other endpoints, and it is probed again in {lane.probe_at - time.monotonic():.3g} s"
                    if others
                    else "no endpoint is up: every endpoint sends its batches until one answers"
                )
            )
        self._notify()

    def _up(self, lane: Lane) -> None:
        """The lane's call gave an outcome about the works: it answers, and its back-off starts again."""
        lane.backoff_s, lane.streak = lane.base_backoff_s, 0
        if lane.state == "down":
            lane.state = "up"
            if len(self.lanes) > 1:
                self.log.info(f"teacher {self.teacher}: endpoint {lane.name} answers again; it takes batches again")
            self._notify()

    def _refuse(self, lane: Lane, exc: EndpointConfigurationError) -> None:
        lane.state, lane.stats.cause = "refused", str(exc)
        if len(self.lanes) > 1:
            self.log.error(
                f"teacher {self.teacher}: endpoint {lane.name} refused the run ({str(exc)[:300]}); it is out for this "
                "run, the other endpoints take its batches"
            )
        self._notify()

    # ---- the client's callbacks ---------------------------------------------------------------
    def outcomes(self, lane: Lane, outs: list[LabelOutcome]) -> None:
        """Record the final outcomes of ``lane``'s call, once per work; an ``endpoint unavailable`` outcome
        puts the lane down and, while another lane is up, is not recorded (its work goes back to the queue
        when the call ends, :meth:`_send`)."""
        outs = [o for o in outs if o.work_id not in self.done]
        lost = {o.work_id for o in outs if o.error is not None and o.error.startswith(UNAVAILABLE)}
        if lost:
            self._down(lane, next(o.error for o in outs if o.work_id in lost))
            if self.any_up():
                outs = [o for o in outs if o.work_id not in lost]
        if any(o.error is None or not o.error.startswith(NOT_FINAL) for o in outs):
            self._up(lane)
        if not outs:
            return
        self.done.update(o.work_id for o in outs)
        lane.stats.works += len(outs)
        lane.stats.labelled += sum(o.label is not None for o in outs)
        lane.stats.failures += sum(o.label is None for o in outs)
        self.record(outs)
        self.progress.update(len(outs))

    # ---- the workers --------------------------------------------------------------------------
    async def worker(self, lane: Lane) -> None:
        while not self.stop and lane.state != "refused":
            if not self.queue:
                if self.in_flight == 0:
                    return
                await self._wait(None)  # a call in flight may give works back
                continue
            if lane.state == "down" and self.any_up():
                wait_s = lane.probe_at - time.monotonic()
                if lane.probing or wait_s > 0:
                    await self._wait(None if lane.probing else wait_s)
                    continue
                await self._probe(lane)
                continue
            batch = [v for v in self.queue.popleft() if v["id"] not in self.done]
            if batch:
                await self._send(lane, batch)

    async def _probe(self, lane: Lane) -> None:
        lane.probing = True
        lane.stats.probes += 1
        try:
            problem = await lane.client.probe()
        finally:
            lane.probing = False
        if lane.state == "down":  # not put up by a call in flight, nor refused, meanwhile
            if problem is None:
                lane.state = "up"
                self.log.info(
                    f"teacher {self.teacher}: endpoint {lane.name} answers GET /models; it takes batches again"
                )
            else:
                lane.stats.cause = problem
                lane.rest()
                self.log.info(
                    f"teacher {self.teacher}: endpoint {lane.name} is still down ({problem[:200]}); next probe in "
                    f"{lane.probe_at - time.monotonic():.3g} s"
                )
        self._notify()

    async def _send(self, lane: Lane, batch: list[dict]) -> None:
        self.in_flight += 1
        outcomes: list[LabelOutcome] | None = None
        try:
            outcomes = await lane.client.label(batch)
        except EndpointConfigurationError as exc:
            self._refuse(lane, exc)
            if all(other.state == "refused" for other in self.lanes):
                self.stop.append(exc)
        finally:
            self.in_flight -= 1
            left = [v for v in batch if v["id"] not in self.done]  # given back, or never asked (401)
            if left and not self.stop:
                self.queue.appendleft(left)
                lane.stats.given_back += len(left)
            self._notify()
        if outcomes is not None:
            self._count(lane, outcomes)

    def _count(self, lane: Lane, outcomes: list[LabelOutcome]) -> None:
        """The batches in a row lost at an endpoint: per lane (down at :data:`MAX_FAILED_BATCHES_IN_A_ROW`)
        and over the run (the run stops at as many when no lane is up)."""
        if not all(o.error is not None and o.error.startswith(NOT_FINAL) for o in outcomes):
            lane.streak = self.streak = 0
            return
        lane.streak += 1
        self.streak += 1
        if lane.streak >= MAX_FAILED_BATCHES_IN_A_ROW:
            self._down(lane, outcomes[0].error)
        if self.streak >= MAX_FAILED_BATCHES_IN_A_ROW and self.queue and not self.stop and not self.any_up():
            where = "the endpoint" if len(self.lanes) == 1 else f"every endpoint ({len(self.lanes)})"
            self.stop.append(
                EndpointUnavailableError(
                    f"{self.streak} batches in a row failed at {where} ({outcomes[0].error[:300]}); stopped with "
                    f"{len(self.queue)} batches not sent: they are asked for by the next run"
                )
            )
            self._notify()


_T = TypeVar("_T")


def run_interruptibly(coro: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(coro)``, where SIGINT and SIGTERM cancel ``coro`` at its next ``await`` and are then handed to
    the handler they had: Dagster's raises its ``DagsterExecutionInterruptedError`` (in a step) and Python's own
    ``KeyboardInterrupt``. Raised inside the event loop instead, an interrupt that is not a ``KeyboardInterrupt`` is
    logged and dropped by asyncio's transports ("Fatal write error on socket transport"), and the labelling went on
    after Ctrl-C. Replies of the calls cancelled in flight are not stored (the next run sends those works again).
    Off the main thread, where no signal handler can be set, it is ``asyncio.run``."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coro)
    caught: list[int] = []
    previous: dict[int, Any] = {}

    async def guarded() -> _T:
        task, loop = asyncio.current_task(), asyncio.get_running_loop()

        def on_signal(signo: int, _frame) -> None:
            caught.append(signo)
            loop.call_soon_threadsafe(task.cancel)

        for signo in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signo)
            if handler not in (signal.SIG_IGN, None):
                previous[signo] = handler
                signal.signal(signo, on_signal)
        try:
            return await coro
        finally:
            for signo, handler in previous.items():
                signal.signal(signo, handler)

    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if not caught:
            raise
        _hand_on(caught[0], previous[caught[0]])
    else:
        if not caught:
            return result
        _hand_on(caught[0], previous[caught[0]])
    raise KeyboardInterrupt  # the handler only noted the signal: the labelling stops all the same


def _hand_on(signo: int, handler: Any) -> None:
    """Deliver ``signo`` to ``handler`` (restored already): call it, or for the default action raise the signal."""
    if callable(handler):
        handler(signo, None)
    else:
        signal.raise_signal(signo)


async def send_batches(
    lanes: list[Lane], batches: list[list[dict]], progress: Progress, record: Callable[[list[LabelOutcome]], None], log
) -> BaseException | None:
    """Send ``batches`` through ``lanes`` (``concurrency`` workers each, one shared queue; the rules are in
    the module docstring), passing each final outcome to ``record`` once. Returns the error that stopped
    the run early, or None.

    A stop (every lane refused for its configuration, such as HTTP 401, or :data:`MAX_FAILED_BATCHES_IN_A_ROW`
    batches lost with no lane up) ends the taking of new batches; calls in flight finish and are stored
    first, so no reply already paid for is lost. Works never sent have no outcome: the next run asks for them.
    """
    run = LaneRun(lanes, batches, progress, record, log)
    progress.lanes = lanes
    try:
        await asyncio.gather(
            *(run.worker(lane) for lane in lanes for _ in range(min(lane.concurrency, len(batches)) or 1))
        )
    finally:
        for lane in lanes:
            await lane.client.aclose()
    if len(lanes) > 1:
        for lane in lanes:
            log.info(lane.stats.line(progress.teacher))
    return run.stop[0] if run.stop else None


def teacher_lanes(
    spec: TeacherSpec,
    prompt: Prompt,
    urls: list[str],
    *,
    api_keys: list[str],
    transport: httpx.AsyncBaseTransport | None,
    on_call: Callable[[CallRecord], None],
) -> list[Lane]:
    """One :class:`Lane` per endpoint of ``spec`` (:attr:`~..core.registry.TeacherSpec.lanes`), at ``urls`` with
    ``api_keys`` (in the same order), each with its client. A lane is named by its endpoint's ``name``, else
    the public form of its URL (no credentials, no query); the embedded server's is
    :data:`~..core.registry.EMBEDDED_ENDPOINT`. ``on_call`` sees every call (``CallRecord.endpoint`` names its lane)."""
    lanes = []
    for endpoint, url, key in zip(spec.lanes, urls, api_keys, strict=True):
        name = endpoint.name or (EMBEDDED_ENDPOINT if spec.embedded else public_url(url))
        lane = Lane(name, endpoint.concurrency, spec.endpoint_backoff_s)

        def counted(rec: CallRecord, lane: Lane = lane) -> None:
            lane.stats.calls += 1
            lane.stats.seconds += rec.latency_s
            on_call(rec)

        lane.client = teacher_client(
            spec,
            prompt,
            url,
            api_key=key,
            transport=transport,
            on_call=counted,
            on_outcomes=lane.report,
            concurrency=endpoint.concurrency,
            endpoint=name,
            keep_retrying=lane.keep_retrying,
        )
        lanes.append(lane)
    return lanes


def teacher_client(
    spec: TeacherSpec,
    prompt: Prompt,
    url: str,
    *,
    api_key: str,
    transport: httpx.AsyncBaseTransport | None,
    on_call: Callable[[CallRecord], None],
    on_outcomes: Callable[[list[LabelOutcome]], None],
    concurrency: int | None = None,
    endpoint: str = "",
    keep_retrying: Callable[[], bool] | None = None,
) -> TeacherClient:
    """The client for ``spec`` at ``url`` (``concurrency`` connections, the spec's by default).
    ``structured_output = auto`` is ``gbnf`` (the compact reply grammar) on the embedded server and ``auto``
    (probed) elsewhere; ``system_role = auto`` sends a system message except to the embedded Gemma, whose
    chat template has none."""
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
        concurrency=concurrency or spec.concurrency,
        transport=transport,
        on_call=on_call,
        on_outcomes=on_outcomes,
        endpoint=endpoint,
        keep_retrying=keep_retrying,
    )


def structured_modes(lanes: list[Lane]) -> str:
    """The structured-output mode in use: one mode, or ``<endpoint>=<mode>`` per lane when they differ."""
    modes = {lane.name: lane.client.structured for lane in lanes if lane.client is not None}
    if len(set(modes.values())) <= 1:
        return next(iter(modes.values()), "")
    return ", ".join(f"{name}={mode}" for name, mode in modes.items())
