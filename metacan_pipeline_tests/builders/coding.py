"""The coding pages' world for the coding-app tests: an audit protocol locked on drawn works of a site release,
``coding_tasks`` materialized into a real SQLite coding store, its coders, and a loopback OpenAlex answering every
work's abstract; and the coding app over it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import dagster as dg

from metacan_pipeline import settings
from metacan_pipeline.audit.assets import coding_tasks
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.publish.abstracts import AbstractFetcher
from metacan_pipeline.site.web.coding_app import create_coding_app
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline_tests.builders.audit import lock_audit_sample
from metacan_pipeline_tests.builders.openalex import LoopbackOpenAlex


def inverted_index(text: str) -> dict[str, list[int]]:
    """``text`` as OpenAlex's ``abstract_inverted_index`` (words split on single spaces)."""
    out: dict[str, list[int]] = {}
    for i, word in enumerate(text.split(" ")):
        out.setdefault(word, []).append(i)
    return out


def abstracts_answer(abstract: str):
    """A :class:`LoopbackOpenAlex` handler answering ``abstract`` for every work a ``filter=ids.openalex:...``
    request names."""

    def answer(path, query):
        ids = query["filter"].removeprefix("ids.openalex:").split("|")
        return [{"id": f"https://openalex.org/{w}", "abstract_inverted_index": inverted_index(abstract)} for w in ids]

    return answer


@contextmanager
def coding_world(
    storage: MetacanStorage,
    frame: list[dict],
    drawn: list[str],
    coders: Iterable[str],
    abstract: str,
    adjudicators: Iterable[str] = (),
    revoked: Iterable[str] = (),
) -> Iterator[dict]:
    """Lock an audit protocol drawing ``drawn``, materialize ``coding_tasks``, add ``coders`` (``adjudicators`` get
    the role, ``revoked`` lose their token) and serve ``abstract`` for every work from a loopback OpenAlex. Yields
    ``storage``, ``pid``, ``tokens`` (coder -> sign-in token), ``path`` (the coding store), ``openalex``, ``drawn``."""
    pid = lock_audit_sample(storage, frame, drawn)
    result = dg.materialize([coding_tasks], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    assert result.success
    path = settings.coding_store_path(storage.data_dir)
    with CodingStore(path) as store:
        tokens = {name: store.add_coder(name) for name in coders}
        for name in adjudicators:
            store.grant_role(name)
        for name in revoked:
            store.revoke_coder(name)
    openalex = LoopbackOpenAlex(abstracts_answer(abstract))
    try:
        yield {"storage": storage, "pid": pid, "tokens": tokens, "path": path, "openalex": openalex, "drawn": drawn}
    finally:
        openalex.shutdown()


@contextmanager
def coding_app(world: dict):
    """The coding app over ``world`` (:func:`coding_world`), its abstracts from the world's loopback OpenAlex."""
    asgi = create_coding_app(world["storage"].root, abstracts=AbstractFetcher(world["openalex"].base_url))
    try:
        yield asgi
    finally:
        asgi.state.coding.close()
