"""A local OpenAI-compatible STUB teacher for tests and benchmarks (no model: labels come from a hash).

Protocol (the batched teacher client's):

- ``POST /v1/chat/completions`` with an OpenAI body (``model``, ``messages``, ``temperature``,
  ``max_tokens``, optional ``response_format`` and ``logprobs``). The LAST user message carries the
  works as JSON lines between a line ``<records>`` and a line ``</records>``, each with an ``"id"``.
  The reply's ``choices[0].message.content`` is ``{"labels": [...]}``: one label per record, in order,
  deterministic from a hash of the id (about 10% ``metaresearch``), values from
  ``metacan_pipeline.vocab``. ``usage`` is approximate (characters / 4). With ``"logprobs": true``
  the choice carries ``logprobs.content``: a few ``{"token", "logprob", ...}`` entries.
- ``GET /v1/models`` lists the one model (``--model``, default ``stub-teacher``).
- ``GET /stats``: counters since start (summed over workers): ``calls`` (every chat request),
  ``works`` (records in calls answered HTTP 200, faulty content included), ``works_received``,
  ``status`` (``200``/``400``/``429``/``500``/``dropped``/``fail_status``: answered by ``--fail-status``), ``faults`` (calls per FAULT mode),
  ``prompt_tokens``/``completion_tokens``.

Faults (deterministic, for fault tests): a record whose ``title`` contains ``FAULT:<mode>`` makes every
call that includes it misbehave; see ``protocol.FAULT_MODES``. Several modes in one call: ``drop`` wins,
then ``http500``, then one content mode (``refusal`` > ``empty`` > ``malformed`` > ``truncated``); the
per-label modes (``wrong_id``, ``missing_id``, ``oov``) apply to their own records. An unknown mode is
an HTTP 400 (a typo in a test must not pass silently). Bad requests (no records block, a record line
that is not a JSON object with a string id, ``stream``) are HTTP 400 with an OpenAI error body.

Server-wide options: ``--latency-ms`` (an ``asyncio.sleep`` per call that reaches the "model", i.e.
after the 429 and 400 checks), ``--burst-429 N`` (the first N chat calls, over all workers, get 429 with
``Retry-After: 0``), ``--reject-json-schema`` (HTTP 400 to ``json_schema`` requests, to test the
fallback), ``--honour-max-tokens`` (cut a reply longer than ``max_tokens`` x 4 characters, with
``finish_reason`` ``length``, as a real server would; off by default), ``--fail-status N`` (every chat
call that reaches the "model" is answered HTTP N with an OpenAI error body, and a 429 or 503 with
``Retry-After: 0``: an upstream that is broken or overloaded, or a key the server refuses with 401, while
``/v1/models`` still answers), ``--hang-after N`` (chat calls after the first N that reach the "model" in a worker
never answer: a server that stopped mid-run, for a test that kills it then), ``--workers N``.

Run: ``python -m metacan_pipeline_tests.stub_teacher --port 0 --latency-ms 20 [--workers 1]``; prints
``STUB_URL http://127.0.0.1:<port>/v1`` on stdout once the socket listens. From Python,
``process.run_stub`` starts it as a subprocess (so a test can SIGKILL it) and always stops it.

The app is a raw ASGI callable (no framework: the stub must not be the bottleneck of a client
benchmark) served by uvicorn with httptools and uvloop, access log off. With ``--workers N`` the
counters live in a small shared memory-mapped file, one slot per worker, so ``/stats`` and
``--burst-429`` are global.

Modules: ``labels`` (the hash label and the oracle label), ``protocol`` (request parsing, FAULT modes, error
bodies), ``counters`` (the shared counters), ``app`` (the ASGI app and its options), ``process`` (``main``,
``run_stub``, ``stop_stub``); ``python -m`` runs ``__main__``.
"""
