"""Where the parts of a frame build are built: in this process, on a local Dask cluster of worker processes, or on
the Dask scheduler that ``METACAN_DASK_SCHEDULER`` names (one task per input file, :func:`.parts.build_part`).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .entities import EntityLists
from .parts import PartJob, build_part

if TYPE_CHECKING:
    from distributed import Client


class ClusterError(RuntimeError):
    """The part builds could not go on: the Dask scheduler did not answer, or every worker given a part died."""


def build_parts(
    jobs: list[tuple[PartJob, str]],
    parts_root: Path | str,
    entities: EntityLists,
    run_id: str,
    workers: int,
    fast: bool = True,
    scheduler: str | None = None,
    on_cluster: Callable[[str], None] | None = None,
) -> Iterator[dict]:
    """Build every ``(job, key)``, largest file first so the last busy worker is not left with the biggest part;
    yields manifest rows as parts finish.

    Where: on the Dask scheduler at ``scheduler`` when given (``METACAN_DASK_SCHEDULER``: its workers must import this
    package and reach ``parts_root`` (a shared folder, or the object storage of ``METACAN_PARTS_URL``) and the input
    files), else on a ``LocalCluster`` of ``workers`` processes of one
    thread each, started for this call and closed after it (:func:`dask_client`), else (``workers`` <= 1 or a single
    part, no scheduler) in this process; nothing at all when ``jobs`` is empty. ``on_cluster`` hears one sentence
    saying which.

    A worker that dies mid-part (killed, out of memory) loses nothing finished: its part's temporary folder is never
    renamed into place and the scheduler hands the part to another worker, whose :func:`build_part` removes that
    folder under the part's lock and builds the part whole; the part's row is yielded once. A part that kills
    ``distributed.scheduler.allowed-failures`` + 1 workers (3 + 1 by default) stops the build with a ClusterError
    naming its file. Any other error of a part build (InputChanged, OSError) is raised here as it was raised there;
    the parts still building are then abandoned with the cluster (their temporary folders are removed by the next
    build of the same part)."""
    order = sorted(jobs, key=lambda jk: -jk[0].bytes)
    if not order:  # nothing to build: no cluster started, no scheduler asked
        return
    if scheduler is None and (workers <= 1 or len(order) <= 1):
        if on_cluster:
            on_cluster("this process (no cluster)")
        for job, key in order:
            yield build_part(job, str(parts_root), entities, key, run_id, fast=fast)
        return
    # distributed is heavy to import (about a second, and it starts threads): only a build on a cluster needs it.
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    with dask_client(min(workers, len(order)), scheduler) as (client, where):
        if on_cluster:
            on_cluster(where)
        # the entity lists once, as a task the scheduler can run again if the worker holding them dies
        lists = client.submit(_same, entities, key=f"frame-entities-{run_id}-{uuid.uuid4().hex[:8]}", pure=False)
        futures = {
            client.submit(
                build_part,
                job,
                str(parts_root),
                lists,
                key,
                run_id,
                fast=fast,
                key=f"frame-part-{key}",
                pure=False,
                priority=len(order) - i,
            ): job
            for i, (job, key) in enumerate(order)
        }
        for fut in as_completed(futures, loop=client.loop):
            try:
                row = fut.result()
            except KilledWorker:
                raise ClusterError(
                    f"{futures[fut].source_file}: every worker that built its part died ({fut.key}); a part that "
                    f"needs more memory than a worker has? Its finished parts are kept: raise the workers' memory or "
                    f"build with fewer workers, then materialize frame_parts again"
                ) from None
            yield row


def _same(value):
    """``value`` itself: a task that holds the entity lists on the cluster."""
    return value


#: Seconds to wait for a Dask scheduler named by METACAN_DASK_SCHEDULER to answer, its handshake included.
SCHEDULER_CONNECT_S = 30.0


def _connect(client_class, scheduler: str, timeout_s: float):
    """A client of ``scheduler``, or ClusterError naming the address within ``timeout_s``. The client is made in a
    daemon thread: distributed's own timeout does not cover the handshake, and a service that is not a scheduler (a
    dashboard's HTTP port, say) accepted the connection and held it for good."""
    got: dict = {}

    def connect() -> None:
        try:
            got["client"] = client_class(scheduler, set_as_default=False, timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - any failure to connect is reported as one, below
            got["error"] = exc

    thread = threading.Thread(target=connect, name="metacan-dask-connect", daemon=True)
    thread.start()
    thread.join(timeout_s + 2)
    if "client" in got:
        return got["client"]
    exc = got.get("error")
    why = f"{type(exc).__name__}" if exc is not None else f"no answer within {timeout_s:g} s"
    raise ClusterError(
        f"the Dask scheduler at {scheduler} (METACAN_DASK_SCHEDULER) did not answer ({why}): start it, or unset "
        f"METACAN_DASK_SCHEDULER to build the parts on a local cluster"
    )


@contextmanager
def dask_client(workers: int, scheduler: str | None = None) -> Iterator[tuple[Client, str]]:
    """``(client, where)``: a client of the scheduler at ``scheduler`` (left running on exit), else of a new
    ``LocalCluster`` of ``workers`` worker processes with one thread each and no dashboard, closed on exit; ``where``
    says which in one sentence. Raises ClusterError naming the address when the scheduler does not answer within
    ``distributed.comm.timeouts.connect`` (30 s)."""
    from distributed import Client, LocalCluster  # heavy (about a second): imported only when a cluster is used

    if scheduler is not None:
        client = _connect(Client, scheduler, SCHEDULER_CONNECT_S)
        with client:
            n = len(client.scheduler_info().get("workers", {}))
            yield client, f"the Dask scheduler at {scheduler} ({n} worker(s) now)"
        return
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=None,  # no dashboard (bokeh is not needed) ...
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},  # ... and its plain HTTP routes on a free port, not 8787
        worker_dashboard_address=None,
    )
    with cluster, Client(cluster, set_as_default=False) as client:
        yield (
            client,
            f"a local Dask cluster of {workers} worker process(es), 1 thread each ({cluster.scheduler_address})",
        )


def default_workers(configured: int) -> int:
    """``configured``, or one per CPU core when 0."""
    return configured or os.cpu_count() or 1
