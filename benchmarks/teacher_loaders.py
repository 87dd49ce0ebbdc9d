"""The teacher benchmark's inputs and its bare loaders: synthetic title-only record views, the batched
protocol's request bodies, and the two loaders the client is measured against (a bare ``httpx.AsyncClient``
and raw keep-alive HTTP/1.1 sockets on uvloop). See bench_teacher.py's docstring.
"""

from __future__ import annotations

import asyncio
import random
import time
from urllib.parse import urlsplit

import httpx
import orjson
from _common import REPO, synthetic_title

RUBRIC = (REPO / "metacan_pipeline" / "teachers" / "prompts" / "v2.md").read_text()


# ------------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------------
def make_works(n: int, seed: int = 11) -> list[dict]:
    """``n`` synthetic title-only record views (the shape of teachers.core.views.record_view), ids W1..Wn."""
    rng = random.Random(seed)
    return [
        {
            "id": f"W{4_000_000_000 + i}",
            "title": synthetic_title(rng),
            "year": rng.randint(1990, 2025),
            "language": "en",
            "type": "article",
            "venue": rng.choice(("Canadian Medical Association Journal", "PLOS ONE", None)),
            "topic": rng.choice(("Meta-analysis and systematic reviews", "Soil microbiology", None)),
            "field": rng.choice(("Medicine", "Agricultural and Biological Sciences", None)),
        }
        for i in range(n)
    ]


def request_body(batch: list[dict], model: str = "stub-teacher") -> bytes:
    """One chat request of the batched protocol (``<`` and ``>`` escaped inside records)."""
    lines = "\n".join(orjson.dumps(w).decode().replace("<", "\\u003c").replace(">", "\\u003e") for w in batch)
    user = (
        f'Label each of the {len(batch)} records below. Reply with one JSON object {{"labels": [...]}}, '
        f"one label per record, in order.\n<records>\n{lines}\n</records>"
    )
    return orjson.dumps(
        {
            "model": model,
            "temperature": 0,
            "max_tokens": 120 * len(batch),
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": RUBRIC}, {"role": "user", "content": user}],
        }
    )


# ------------------------------------------------------------------------------------------------
# the bare loaders
# ------------------------------------------------------------------------------------------------
async def _post_all(base_url: str, bodies: list[bytes], concurrency: int) -> dict[int, int]:
    statuses: dict[int, int] = {}
    it = iter(bodies)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as client:

        async def worker() -> None:
            for body in it:  # one shared iterator: each body is sent once
                r = await client.post("/chat/completions", content=body, headers={"content-type": "application/json"})
                await r.aread()
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def run_baseline(base_url: str, works: list[dict], concurrency: int, works_per_call: int) -> float:
    """Bare httpx over prebuilt bodies (built before the clock starts); returns wall seconds."""
    bodies = [request_body(works[i : i + works_per_call]) for i in range(0, len(works), works_per_call)]
    t0 = time.perf_counter()
    statuses = asyncio.run(_post_all(base_url, bodies, concurrency))
    seconds = time.perf_counter() - t0
    if statuses != {200: len(bodies)}:
        raise RuntimeError(f"baseline: unexpected statuses {statuses}")
    return seconds


async def _raw_post_all(base_url: str, bodies: list[bytes], concurrency: int) -> dict[int, int]:
    u = urlsplit(base_url)
    path = f"{u.path}/chat/completions".encode()
    statuses: dict[int, int] = {}
    it = iter(bodies)

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(u.hostname, u.port)
        for body in it:
            writer.write(
                b"POST %b HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                % (path, u.netloc.encode(), len(body), body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            at = head.lower().index(b"content-length:") + 15
            await reader.readexactly(int(head[at : head.index(b"\r\n", at)]))
            status = int(head[9:12])
            statuses[status] = statuses.get(status, 0) + 1
        writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def run_capacity(base_url: str, works: list[dict], concurrency: int, works_per_call: int, rounds: int = 1) -> float:
    """The stub's own throughput: prebuilt bodies, ``rounds`` times, over raw sockets; returns wall seconds."""
    import uvloop

    bodies = [request_body(works[i : i + works_per_call]) for i in range(0, len(works), works_per_call)] * rounds
    t0 = time.perf_counter()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        statuses = runner.run(_raw_post_all(base_url, bodies, concurrency))
    seconds = time.perf_counter() - t0
    if statuses != {200: len(bodies)}:
        raise RuntimeError(f"capacity: unexpected statuses {statuses}")
    return seconds


def frame_rows(works: list[dict]) -> list[dict]:
    """The synthetic views as frame rows (the columns :func:`metacan_pipeline.teachers.core.views.record_view` reads)."""
    return [
        {
            "id": w["id"],
            "title_text": w["title"],
            "publication_year": w["year"],
            "language": w["language"],
            "type": w["type"],
            "venue_name": w["venue"],
            "topic": w["topic"],
            "field": w["field"],
            "in_sampling_frame": True,
            "sampling_frame_exclusion": None,
            "has_abstract": False,
        }
        for w in works
    ]
