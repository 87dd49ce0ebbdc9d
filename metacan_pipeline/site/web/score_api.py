"""``POST /api/v1/score``: a bounded batch of works scored by the student model version the served release names, a
mixin of :class:`.app.Site` (:class:`ScoreEndpoints`).

The body is JSON, ``{"works": [...], "model_version": "..."}``: at most :data:`MAX_WORKS` works, each an ``id, title``
row (optional ``venue``, ``topic``, ``field``, ``type``, ``keywords``, ``language``) or an OpenAlex work record, as
``metacan score`` reads them (:mod:`metacan_pipeline.student.list_input`); ``model_version`` is needed only when the
release holds several classifier versions. The answer has the columns of ``metacan score``, one object per usable
work in body order, and a ``rejected`` list naming each refused work (its index in ``works`` and why).

The model file is the one registered for that version in the data folder's catalog, checked against its registered
SHA-256 when it is first loaded (:func:`metacan_pipeline.student.models.load_published`); percentiles come from that
folder's ``student_scores`` when they were written by the same version (else null, and ``percentile_note`` says
why). ``no_score`` maps each binary head that gives no score (null in every work) to the reason (its training
labels held one class, e.g. "no positive direct label to learn from (0 positives of 81 labels)"). A scorer is
loaded once per version and kept.

Refusals (JSON, ``{"error": {"status", "message"}}``): 400 for a body that is not JSON, not an object with a
``works`` list, an empty list, more than :data:`MAX_WORKS` works, a ``title`` or ``display_name`` over
:data:`MAX_TITLE_CHARS` characters as sent (the message names the work's index in ``works`` and its id), an unknown ``model_version`` or one missing where
the release holds several; 413 for a body over :data:`MAX_BODY_BYTES`. A body whose works are all refused is answered
200 with an empty ``works`` list and every refusal in ``rejected``, like a body of which some are; 503 when the data folder holds no usable model file for the version. The site's
per-client rate limit applies (:class:`.middleware.RateLimit`).
"""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...storage import MetacanStorage
from ...student.list_input import MAX_TITLE_CHARS, InputWork, Reject, iter_objects, read_items
from ...student.score_list import ListScorer, ScoringUnavailable, open_scorer
from ..build.release import ReleaseInfo
from .middleware import NO_STORE

#: Most works one request scores.
MAX_WORKS = 1_000
#: Largest body accepted (OpenAlex records with long author lists run to tens of kB each).
MAX_BODY_BYTES = 32 * 1024 * 1024
#: Body keys: anything else is refused (a misspelt key is an error, not silently ignored).
BODY_KEYS = ("works", "model_version")


def request_schema(release: ReleaseInfo | None = None) -> dict:
    """The JSON Schema of the body; with a release, ``model_version`` is one of its classifier versions."""
    version: dict = {
        "type": "string",
        "description": "One of the release's classifier versions (needed when it holds several).",
    }
    if release is not None:
        version["enum"] = list(release.classifier_versions)
    return {
        "type": "object",
        "required": ["works"],
        "additionalProperties": False,
        "properties": {
            "works": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_WORKS,
                "description": "Works to score: id,title objects (optional venue, topic, field, type, keywords, "
                "language) or OpenAlex work records. A work that cannot be scored is listed in the answer's rejected "
                "list with its index and why; the others are scored.",
                "items": {
                    "description": "An object (an id,title row or an OpenAlex work record); any other value is "
                    "answered in rejected, like an object that cannot be scored. A title (an OpenAlex record's title "
                    f"or display_name) holds at most {MAX_TITLE_CHARS:,} characters: a longer one refuses the request.",
                    "properties": {
                        "title": {"maxLength": MAX_TITLE_CHARS},
                        "display_name": {"maxLength": MAX_TITLE_CHARS},
                    },
                },
            },
            "model_version": version,
        },
    }


def _error(status: int, message: str, **extra) -> JSONResponse:
    return JSONResponse(
        {"error": {"status": status, "message": message}, **extra}, status_code=status, headers=NO_STORE
    )


def _long_title(works: list) -> JSONResponse | None:
    """The 400 refusing the first work whose ``title`` or ``display_name`` is a string over :data:`MAX_TITLE_CHARS`
    characters as sent (what the request schema bounds, so a request the schema accepts is never refused for it),
    naming its index in ``works`` and its id; None when every title is within the bound."""
    for i, work in enumerate(works):
        if not isinstance(work, dict):
            continue
        for key in ("title", "display_name"):
            value = work.get(key)
            if isinstance(value, str) and len(value) > MAX_TITLE_CHARS:
                wid = work.get("id")
                who = f" (id {wid!r})" if isinstance(wid, str) else ""
                return _error(
                    400,
                    f"the {key} of works[{i}]{who} holds {len(value):,} characters; at most {MAX_TITLE_CHARS:,} are "
                    "scored: send the title alone, without the abstract or body text.",
                )
    return None


def _rejected(r: Reject) -> dict:
    return {"index": r.row - 1, "id": r.id, "reason": r.reason}


class ScoreEndpoints:
    """The scoring endpoint (module docstring). Reads the host's ``info`` (the release) and ``release``."""

    _scorers: dict[str, ListScorer]
    _scorer_lock: threading.Lock

    def scorer(self, version: str) -> ListScorer:
        """The scorer of ``version``, loaded (and its file checked) once. Raises ScoringUnavailable."""
        if not hasattr(self, "_scorers"):
            self._scorers, self._scorer_lock = {}, threading.Lock()
        with self._scorer_lock:
            if version not in self._scorers:
                storage = MetacanStorage(data_dir=str(self.release.data_dir))
                self._scorers[version] = open_scorer(storage, version)
            return self._scorers[version]

    def api_post(self, route):
        """A POST endpoint of the API: no query parameter, no cache, the answer computed in a worker thread."""
        fn = getattr(self, route.endpoint)

        async def endpoint(request: Request) -> Response:
            if request.query_params:
                return _error(400, f"{route.path} takes no query parameter; send the works in the JSON body.")
            length = request.headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
                return _error(413, f"the body holds {int(length):,} bytes; at most {MAX_BODY_BYTES:,} are accepted.")
            chunks, size = [], 0
            async for chunk in request.stream():  # read no further than the bound, whatever the headers said
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    return _error(413, f"the body holds more than {MAX_BODY_BYTES:,} bytes, the most accepted.")
                chunks.append(chunk)
            return await run_in_threadpool(fn, b"".join(chunks))

        return endpoint

    def api_score(self, body: bytes) -> Response:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return _error(400, f'the body is not JSON ({exc}); send {{"works": [...]}}.')
        if not isinstance(doc, dict) or not isinstance(doc.get("works"), list):
            return _error(
                400,
                'the body must be a JSON object with a "works" list, e.g. {"works": [{"id": "a", "title": "..."}]}.',
            )
        unknown = sorted(set(doc) - set(BODY_KEYS))
        if unknown:
            return _error(
                400, f"unknown body keys {', '.join(map(repr, unknown))}; the body takes {', '.join(BODY_KEYS)}."
            )
        works = doc["works"]
        if not works:
            return _error(400, '"works" is empty: send at least one work.')
        if len(works) > MAX_WORKS:
            return _error(
                400,
                f'"works" holds {len(works):,} works; at most {MAX_WORKS:,} per request (split the list, or '
                "use `metacan score` on a copy of the data for a long list).",
            )
        versions = self.info.classifier_versions
        version = doc.get("model_version")
        if "model_version" in doc and (not isinstance(version, str) or version not in versions):
            return _error(
                400,
                f"model_version {orjson.dumps(version).decode()[:80]} is not a classifier version of release "
                f"{self.info.release_id} ({', '.join(versions) or 'none'}).",
            )
        if version is None:
            if not versions:
                return _error(400, f"release {self.info.release_id} holds no classifier version to score with.")
            if len(versions) > 1:
                return _error(
                    400,
                    f"release {self.info.release_id} holds {len(versions)} classifier versions: name one in "
                    f"model_version ({', '.join(versions)}).",
                )
            version = versions[0]
        try:
            scorer = self.scorer(version)
        except ScoringUnavailable as exc:
            # the reason names files under the data folder: said without the server's paths
            why = (
                str(exc)
                .replace(str(Path(self.data_dir).resolve()), "<data folder>")
                .replace(str(self.data_dir), "<data folder>")
            )
            return _error(503, f"scoring with {version} is unavailable on this server: {why}")
        if (long := _long_title(works)) is not None:
            return long
        items = list(read_items(iter_objects(works)))
        usable = [x for x in items if isinstance(x, InputWork)]
        rejected = [_rejected(x) for x in items if isinstance(x, Reject)]
        table = scorer.score(usable) if usable else None
        return JSONResponse(
            {
                "release_id": self.info.release_id,
                "model_version": scorer.model_version,
                "columns": scorer.columns,
                "percentile_note": scorer.percentile_note,
                "no_score": scorer.no_score,
                "works": table.to_pylist() if table is not None else [],
                "rejected": rejected,
            },
            headers=NO_STORE,
        )
