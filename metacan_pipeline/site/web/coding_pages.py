"""The human coding pages of the audit study (SPEC section 10), served by the coding server alone
(:func:`.coding_app.create_coding_app`, ``metacan serve --coding``), never beside the public site.

Routes, in English under ``/coding/`` and in French under ``/fr/coding/`` (:func:`coding_routes`):

- ``sign-in`` (GET the form, POST the personal token ``metacan coders add NAME`` printed). The token travels only in
  the POST body; it is checked against the stored SHA-256 (:meth:`CodingStore.coder_for_token`), never logged and
  never put in a URL. A good token opens a server-side session (:meth:`CodingStore.open_session`: the cookie
  :data:`SESSION_COOKIE`, HttpOnly, SameSite=Strict, Secure over https; only its SHA-256 is stored), so signing out
  (POST ``sign-out``) or revoking the coder ends it at once. The sign-in form itself carries a double-submit token
  (cookie :data:`SIGNIN_COOKIE`), so another site cannot sign a browser in.
- ``/coding/`` the coder's queue: done and to do (:meth:`CodingStore.coder_progress`; with coder pairs, the works
  assigned to them), the next work, the works they coded, with titles (each can be opened and answered again: a new
  row, the latest counts).
- ``next`` hands the next task (:meth:`CodingStore.next_task`, which claims it) and redirects to ``works/<id>``: the
  work's evidence (the task's evidence version; the best abstract that can be ascertained, fetched live through the
  abstract cascade, :class:`metacan_pipeline.publish.abstract_cascade.AbstractCascade`, with its sections and a line
  naming its source, and archived in the coding store as shown, :meth:`CodingStore.archive_abstract`) and the answer
  form (the SPEC section 3 fields, ``unresolved``, a note). POST appends the answer (:meth:`CodingStore.submit`,
  with the evidence version and the SHA-256 of the abstract shown) and goes to ``next``. A refused answer shows the form again with what was entered and one sentence per
  field. The queue derives from the stored answers, so stopping and coming back resumes.
- ``adjudication`` (coders with the adjudicator role, ``metacan coders adjudicator NAME``): the disagreements they
  did not code themselves, with titles; ``adjudication/<id>`` shows both answers side by side with the evidence,
  under the labels "coder A" and "coder B" (coders in name order; never their names), and records the adjudicated
  code (:meth:`CodingStore.adjudicate`). Its form starts from what the pair agreed: the fields both answers give
  the same value are pre-filled (the categories both ticked are ticked), the others are blank and marked with both
  coders' answers.
- ``instructions``: the coder instructions the protocol locked (:func:`metacan_pipeline.audit.protocol.locked.load_instructions`).

What a coder sees is the task's evidence and their own answers only: no label, prediction, score, stratum, design
weight, teacher or release (the pages have their own layout, ``templates/coding/``), and never another coder's
answer (only an adjudicator sees the two answers of a work they did not code). Every POST carries the session's
CSRF token (an HMAC of the session value, :func:`csrf_token`), compared in constant time. Pages are
server-rendered forms without JavaScript; answers are fieldsets with legends and labels, in the order they are read.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import sqlite3
from functools import partial
from hashlib import sha256
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from jinja2 import Environment
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ... import settings
from ...audit.coding.errors import CodingError, CodingStoreError
from ...audit.coding.rules import SESSION_TTL
from ...audit.coding.store import CodingStore
from ...audit.protocol.locked import load_instructions
from ...i18n import LOCALES, N_, Sentence, translations
from ...openalex.ids import is_work_id
from ...publish.abstract_cascade import SOURCE_NAMES, AbstractCascade
from ...publish.abstracts import AbstractFetcher, WorkIds
from ...publish.pages import asked_line
from . import coding_strings as words
from . import languages
from .middleware import SECURITY_HEADERS

log = logging.getLogger(__name__)

SESSION_COOKIE = "metacan_coding_session"
SIGNIN_COOKIE = "metacan_coding_signin"
#: Largest form body read (a note is at most 1,000 characters; the whole form is far smaller).
MAX_FORM_BYTES = 32_768
HEADERS = {**SECURITY_HEADERS, "Cache-Control": "no-store"}
_CSRF_CONTEXT = b"metacan coding pages: csrf"


def csrf_token(secret: str) -> str:
    """The CSRF token of a session (or of a sign-in form's cookie): HMAC-SHA256 of a fixed context under it."""
    return hmac.new(secret.encode(), _CSRF_CONTEXT, sha256).hexdigest()


def _same(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(a.encode(), b.encode())


STORE_DOWN = N_(
    "The coding store cannot be used right now (it is damaged, read-only or busy); nothing was recorded. "
    "Tell the person who runs this server: the server log names the file and what to do."
)


class _Refused(Exception):
    """A request the pages answer with a sentence and a status (403, 404, 400, 413)."""

    def __init__(self, status: int, sentence: str) -> None:
        self.status, self.sentence = status, sentence


class CodingPages:
    """The coding pages over the coding store of ``data_dir``; templates from the site's environments."""

    def __init__(
        self, data_dir: str | Path, envs: dict[str, Environment], abstracts: AbstractCascade | AbstractFetcher | None
    ) -> None:
        self.store = CodingStore(settings.coding_store_path(str(data_dir)))
        self.envs = envs
        self.abstracts = abstracts

    # ---- rendering ---------------------------------------------------------------------------------------------
    def render(self, request: Request, lang: str, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        tr = translations(lang)
        html = (
            self.envs[lang]
            .get_template(f"coding/{name}")
            .render(
                lang=lang,
                base=languages.PREFIXES[lang] + "/coding",
                alternates=languages.alternates(request),
                switch=languages.switch(request, lang),
                t=tr.gettext,
                words=words,
                asked=partial(asked_line, gettext=tr.gettext),
                source_name=lambda source: SOURCE_NAMES.get(source or "openalex", source),
                **ctx,
            )
        )
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    def refused(self, request: Request, lang: str, exc: _Refused, coder: str | None = None) -> HTMLResponse:
        tr = translations(lang)
        message = exc.sentence.translate(tr) if isinstance(exc.sentence, Sentence) else tr.gettext(exc.sentence)
        return self.render(request, lang, "message.html.j2", exc.status, message=message, **self._who(request, coder))

    def _store_down(self, request: Request, lang: str, exc: Exception) -> HTMLResponse:
        """503 in the page's language when the coding store cannot be used (damaged, read-only, busy); the log gets
        the store's own sentence (the file and what to do). Rendered as signed out: the store is not asked again."""
        log.error("coding pages: %s", exc)
        return self.refused(request, lang, _Refused(503, STORE_DOWN), None)

    def _who(self, request: Request, coder: str | None) -> dict[str, Any]:
        session = request.cookies.get(SESSION_COOKIE)
        if coder is None or session is None:
            return {"coder": None}
        return {"coder": coder, "csrf": csrf_token(session), "adjudicator": self.store.has_role(coder)}

    def _base(self, lang: str) -> str:
        return languages.PREFIXES[lang] + "/coding"

    # ---- sessions ----------------------------------------------------------------------------------------------
    def _coder(self, request: Request) -> str | None:
        return self.store.session_coder(request.cookies.get(SESSION_COOKIE))

    def _protocol(self) -> dict[str, Any]:
        serving = self.store.serving_protocol()
        if serving is None:
            raise _Refused(
                404,
                N_("No coding tasks are loaded yet: the coordinator runs `metacan coding load-tasks` first."),
            )
        return serving

    @staticmethod
    async def _form(request: Request) -> list[tuple[str, str]]:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            raise _Refused(400, N_("This address takes the page's own form only."))
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise _Refused(413, N_("This form is too large: a note has at most 1,000 characters."))
        try:
            return parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=64, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            raise _Refused(400, N_("This address takes the page's own form only.")) from None

    def _check_csrf(self, request: Request, pairs: list[tuple[str, str]], secret: str | None) -> None:
        given = next((v for k, v in pairs if k == "csrf_token"), None)
        if secret is None or not _same(given, csrf_token(secret)):
            raise _Refused(
                403, N_("This form has expired or did not come from this site: open the page again and resubmit.")
            )

    # ---- handlers (sync: run in the thread pool) ---------------------------------------------------------------
    def sign_in_form(self, request: Request, lang: str, status: int = 200, error: str | None = None) -> Response:
        secret = request.cookies.get(SIGNIN_COOKIE)
        fresh = secret is None or not 16 <= len(secret) <= 128
        if fresh:
            secret = secrets.token_urlsafe(32)
        response = self.render(
            request, lang, "sign_in.html.j2", status, coder=None, csrf=csrf_token(secret), error=error
        )
        if fresh:
            self._cookie(request, response, SIGNIN_COOKIE, secret, max_age=3600)
        return response

    def sign_in(self, request: Request, lang: str, pairs: list[tuple[str, str]]) -> Response:
        self._check_csrf(request, pairs, request.cookies.get(SIGNIN_COOKIE))
        token = next((v for k, v in pairs if k == "token"), "").strip()
        coder = self.store.coder_for_token(token)
        if coder is None:
            log.info("coding sign-in refused (unknown or revoked token)")
            sentence = N_(
                "This token does not sign anyone in: it is mistyped, unknown or revoked. Ask the study's coordinator."
            )
            return self.sign_in_form(request, lang, 403, translations(lang).gettext(sentence))
        old = request.cookies.get(SESSION_COOKIE)
        if old:
            self.store.end_session(old)
        session = self.store.open_session(coder)
        response = RedirectResponse(self._base(lang) + "/", status_code=303, headers=HEADERS)
        self._cookie(request, response, SESSION_COOKIE, session, max_age=int(SESSION_TTL.total_seconds()))
        response.delete_cookie(SIGNIN_COOKIE, path="/")
        return response

    def sign_out(self, request: Request, lang: str, pairs: list[tuple[str, str]]) -> Response:
        session = request.cookies.get(SESSION_COOKIE)
        self._check_csrf(request, pairs, session)
        self.store.end_session(session)
        response = RedirectResponse(self._base(lang) + "/sign-in", status_code=303, headers=HEADERS)
        response.delete_cookie(SESSION_COOKIE, path="/", secure=request.url.scheme == "https", httponly=True)
        return response

    @staticmethod
    def _cookie(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def queue(self, request: Request, lang: str, coder: str) -> Response:
        serving = self._protocol()
        pid = serving["protocol_id"]
        return self.render(
            request,
            lang,
            "queue.html.j2",
            protocol=serving,
            progress=self.store.coder_progress(pid, coder),
            answers=self.store.coder_answers(pid, coder),
            titles=self.store.titles(pid),
            held_by_others=request.query_params.get("done") == "1",
            to_settle=len(self.store.adjudication_queue(pid, coder)[0]) if self.store.has_role(coder) else 0,
            **self._who(request, coder),
        )

    def next_work(self, request: Request, lang: str, coder: str) -> Response:
        pid = self._protocol()["protocol_id"]
        task = self.store.next_task(pid, coder)
        target = f"{self._base(lang)}/works/{task['id']}" if task else f"{self._base(lang)}/?done=1"
        return RedirectResponse(target, status_code=303, headers=HEADERS)

    def _task(self, pid: str, wid: str) -> dict[str, Any]:
        task = self.store.task(pid, wid) if is_work_id(wid) else None
        if task is None:
            raise _Refused(404, N_("This work is not a coding task of the current protocol."))
        return task

    def _held(self, pid: str, wid: str, coder: str) -> None:
        """Refuse a work the coder does not hold, with one answer whether it is another coder's, a drawn work of no
        task yet or no task at all: a coder cannot probe which works the audit sample holds."""
        if not (is_work_id(wid) and self.store.holds_task(pid, wid, coder)):
            raise _Refused(403, N_("This work is not in your queue: open your queue to get your next work."))

    def _abstract(self, task: dict[str, Any]) -> dict[str, Any]:
        """The abstract a work's page shows (the cascade's answer, by the work's id and the DOI of its evidence; None
        when this server fetches none) and, when it shows one, the SHA-256 under which the store archived it
        (:meth:`CodingStore.archive_abstract`), which the answer form carries back."""
        if self.abstracts is None:
            return {"abstract": None, "abstract_sha256": None}
        wid = task["id"]
        abstract = self.abstracts.fetch([WorkIds(wid, task["evidence"].get("doi"))])[wid]
        digest = None
        if abstract.status == "ok" and abstract.text:
            when = abstract.fetched_at.isoformat(timespec="seconds") if abstract.fetched_at else None
            digest = self.store.archive_abstract(
                wid, abstract.text, abstract.source or "openalex", abstract.shown_sections, when
            )
        return {"abstract": abstract, "abstract_sha256": digest}

    def work(
        self, request: Request, lang: str, coder: str, values: dict | None = None, problems: list | None = None
    ) -> Response:
        pid = self._protocol()["protocol_id"]
        wid = request.path_params["wid"]
        self._held(pid, wid, coder)
        task = self._task(pid, wid)
        if values is None:
            values = words.form_values(self.store.my_answer(pid, wid, coder))
        return self.render(
            request,
            lang,
            "work.html.j2",
            400 if problems else 200,
            task=task,
            **self._abstract(task),
            values=values,
            problems=problems or [],
            action=f"{self._base(lang)}/works/{wid}",
            answered=self.store.my_answer(pid, wid, coder) is not None,
            both=None,
            **self._who(request, coder),
        )

    def _problems(self, lang: str, exc: CodingError) -> list[dict[str, str]]:
        tr = translations(lang)
        sentence = tr.gettext(words.FIELD_PROBLEMS.get(exc.field, words.FIELD_PROBLEMS["answer"]))
        if "%(reason)s" in sentence:
            sentence = sentence % {"reason": str(exc)}
        return [{"field": exc.field, "sentence": sentence, "detail": str(exc)}]

    def submit(self, request: Request, lang: str, coder: str, pairs: list[tuple[str, str]]) -> Response:
        self._check_csrf(request, pairs, request.cookies.get(SESSION_COOKIE))
        pid = self._protocol()["protocol_id"]
        wid = request.path_params["wid"]
        self._held(pid, wid, coder)
        task = self._task(pid, wid)
        answer: dict | None = None
        try:
            answer, extra = words.answer_from_form(pairs)
            self.store.submit(
                pid,
                task["id"],
                coder,
                answer,
                evidence_sha256=extra.get("evidence_sha256") or None,
                abstract_sha256=extra.get("abstract_sha256") or None,
            )
        except CodingError as exc:
            values = words.form_values(answer) if answer is not None else None
            return self.work(request, lang, coder, values=values, problems=self._problems(lang, exc))
        return RedirectResponse(f"{self._base(lang)}/next", status_code=303, headers=HEADERS)

    def _adjudicator(self, coder: str) -> None:
        if not self.store.has_role(coder):
            raise _Refused(403, N_("The adjudication pages are for adjudicators: ask the study's coordinator."))

    def adjudication(self, request: Request, lang: str, coder: str) -> Response:
        self._adjudicator(coder)
        pid = self._protocol()["protocol_id"]
        items, own = self.store.adjudication_queue(pid, coder)
        return self.render(request, lang, "adjudication.html.j2", items=items, own=own, **self._who(request, coder))

    def adjudication_work(
        self, request: Request, lang: str, coder: str, values: dict | None = None, problems: list | None = None
    ) -> Response:
        self._adjudicator(coder)
        pid = self._protocol()["protocol_id"]
        wid = request.path_params["wid"]
        task = self._task(pid, wid)
        items, _ = self.store.adjudication_queue(pid, coder)
        item = next((d for d in items if d["id"] == wid), None)
        if item is None:
            raise _Refused(404, N_("This work has no disagreement for you to settle."))
        return self.render(
            request,
            lang,
            "work.html.j2",
            400 if problems else 200,
            task=task,
            **self._abstract(task),
            values=values or words.agreed_values(item["agreed"]),
            problems=problems or [],
            action=f"{self._base(lang)}/adjudication/{wid}",
            answered=False,
            both=item,
            **self._who(request, coder),
        )

    def adjudicate(self, request: Request, lang: str, coder: str, pairs: list[tuple[str, str]]) -> Response:
        self._check_csrf(request, pairs, request.cookies.get(SESSION_COOKIE))
        self._adjudicator(coder)
        pid = self._protocol()["protocol_id"]
        wid = request.path_params["wid"]
        task = self._task(pid, wid)
        answer: dict | None = None
        try:
            answer, extra = words.answer_from_form(pairs)
            shown = extra.get("evidence_sha256") or task["evidence_sha256"]
            self.store.adjudicate(
                pid,
                task["id"],
                coder,
                answer,
                evidence_sha256=shown,
                abstract_sha256=extra.get("abstract_sha256") or None,
            )
        except CodingError as exc:
            values = words.form_values(answer) if answer is not None else None
            return self.adjudication_work(request, lang, coder, values=values, problems=self._problems(lang, exc))
        return RedirectResponse(f"{self._base(lang)}/adjudication", status_code=303, headers=HEADERS)

    def instructions(self, request: Request, lang: str, coder: str) -> Response:
        serving = self._protocol()
        text = load_instructions(serving["instructions_version"])
        return self.render(request, lang, "instructions.html.j2", instructions=text, **self._who(request, coder))

    # ---- endpoints ---------------------------------------------------------------------------------------------
    def page(self, fn, lang: str):
        """A GET page of a signed-in coder (else a redirect to the sign-in form), run in the thread pool."""

        def endpoint(request: Request) -> Response:
            request.state.lang = lang
            coder = None
            try:
                coder = self._coder(request)
                if coder is None:
                    return RedirectResponse(self._base(lang) + "/sign-in", status_code=303, headers=HEADERS)
                return fn(request, lang, coder)
            except _Refused as exc:
                return self.refused(request, lang, exc, coder)
            except (CodingStoreError, sqlite3.DatabaseError) as exc:
                return self._store_down(request, lang, exc)

        return endpoint

    def post(self, fn, lang: str, signed_in: bool = True):
        """A POST of the pages: the form read (urlencoded, bounded), then ``fn`` in the thread pool."""

        async def endpoint(request: Request) -> Response:
            request.state.lang = lang
            coder = None
            try:
                pairs = await self._form(request)
                if not signed_in:
                    return await run_in_threadpool(fn, request, lang, pairs)
                coder = await run_in_threadpool(self._coder, request)
                if coder is None:
                    return RedirectResponse(self._base(lang) + "/sign-in", status_code=303, headers=HEADERS)
                return await run_in_threadpool(fn, request, lang, coder, pairs)
            except _Refused as exc:
                return await run_in_threadpool(self.refused, request, lang, exc, coder)
            except (CodingStoreError, sqlite3.DatabaseError) as exc:
                return await run_in_threadpool(self._store_down, request, lang, exc)

        return endpoint

    def close(self) -> None:
        self.store.close()
        if self.abstracts is not None:
            self.abstracts.close()


def coding_routes(pages: CodingPages) -> list[Route]:
    """Every route of the coding pages, in each language (module docstring)."""
    routes = []
    for lang in LOCALES:
        b = languages.PREFIXES[lang] + "/coding"
        page, post = partial(pages.page, lang=lang), partial(pages.post, lang=lang)
        routes += [
            Route(b, partial(_to_queue, base=b)),
            Route(b + "/", page(pages.queue), name=f"coding_{lang}"),
            Route(b + "/sign-in", partial(_sign_in_page, pages=pages, lang=lang), methods=["GET"]),
            Route(b + "/sign-in", post(pages.sign_in, signed_in=False), methods=["POST"]),
            Route(b + "/sign-out", post(pages.sign_out, signed_in=False), methods=["POST"]),
            Route(b + "/next", page(pages.next_work)),
            Route(b + "/works/{wid}", page(pages.work), methods=["GET"]),
            Route(b + "/works/{wid}", post(pages.submit), methods=["POST"]),
            Route(b + "/adjudication", page(pages.adjudication)),
            Route(b + "/adjudication/{wid}", page(pages.adjudication_work), methods=["GET"]),
            Route(b + "/adjudication/{wid}", post(pages.adjudicate), methods=["POST"]),
            Route(b + "/instructions", page(pages.instructions)),
            # any other address under the pages: their own 404, never the site's page (which names the release)
            Route(b + "/{rest:path}", partial(not_found_page, pages=pages, lang=lang), methods=["GET", "POST"]),
        ]
    return routes


def _to_queue(request: Request, base: str) -> Response:
    return RedirectResponse(base + "/", status_code=307)


def not_found_page(request: Request, pages: CodingPages, lang: str) -> Response:
    """The coding pages' own 404 page in ``lang`` (their layout; never the public site's page, which names the
    release)."""
    request.state.lang = lang
    coder = pages._coder(request)
    return pages.refused(request, lang, _Refused(404, N_("There is no coding page at this address.")), coder)


def _sign_in_page(request: Request, pages: CodingPages, lang: str) -> Response:
    request.state.lang = lang
    if pages._coder(request) is not None:
        return RedirectResponse(pages._base(lang) + "/", status_code=303, headers=HEADERS)
    return pages.sign_in_form(request, lang)


def default_abstracts() -> AbstractCascade:
    """The abstract cascade of a long-running server (the served work pages and the coding pages): short timeouts
    (3 s a request in all, two attempts at most, at most 0.5 s between them and 1 s for a Retry-After: one source
    takes about 7 s at worst), a budget of 6 s per page (a later source whose turn comes after it is not attempted, so
    a page waits about 14 s at worst before it says the abstract is unavailable), no breaker (it would stay open for
    the server's life); the sources and API roots of the settings (``$METACAN_ABSTRACT_SOURCES``,
    ``$METACAN_OPENALEX_API_URL``, ``$METACAN_EUROPEPMC_API_URL``, ``$METACAN_CROSSREF_API_URL``)."""
    return AbstractCascade(
        openalex_url=settings.openalex_api_url(),
        timeout_s=3.0,
        max_attempts=2,
        breaker_after=0,
        retry_wait_max_s=0.5,
        retry_after_max_s=1.0,
        budget_s=6.0,
    )
