"""Versioned prompts (SPEC section 3's rubric, expanded): ``teachers/prompts/<version>.md``.

A prompt file holds the rubric (sent as the system message, or at the head of the user message for
models without a system role), a line ``---- user ----``, and the user-message template with the
placeholders ``{n}`` (works in the call) and ``{records}`` (one JSON line per work). Every character
sent to a teacher, apart from the records themselves, is in this file, so the file's SHA-256 names the
instructions exactly. ``prompts/versions.toml`` locks the SHA of every published version.

A file may open with a line ``reply: <format>`` (not sent) naming the reply shape the prompt asks for:
``labels`` (the default: ``{"labels": [{"id": ..., "categories": ..., ...}]}``) or ``rows`` (a JSON list
of one row per work, in the order asked, each row the SPEC section 3 label fields in
:data:`metacan_pipeline.vocab.LABEL_FIELDS` order, without names or id: about half the generated tokens). The stored label is the same full SPEC label either way.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from importlib.resources import files

import orjson

USER_MARKER = "---- user ----"
REPLY_FORMATS = ("labels", "rows")


@dataclass(frozen=True)
class Prompt:
    """One prompt version: ``sha`` is the first 16 hex digits of the file's SHA-256."""

    version: str
    sha: str
    rubric: str
    user_template: str
    reply: str = "labels"

    def messages(self, views: list[dict], system_role: bool = True) -> list[dict]:
        """The chat messages for one call about ``views`` (record views, SPEC section 4).

        Each view is one line of JSON inside ``<records>``; ``<`` and ``>`` are escaped (``\\u003c``,
        ``\\u003e``) and newlines cannot occur in a JSON line, so no title or abstract can close the
        data block or open a new one: untrusted text stays data.
        """
        lines = "\n".join(orjson.dumps(v).decode().replace("<", "\\u003c").replace(">", "\\u003e") for v in views)
        user = self.user_template.format(n=len(views), records=lines)
        if system_role:
            return [{"role": "system", "content": self.rubric}, {"role": "user", "content": user}]
        return [{"role": "user", "content": self.rubric + "\n\n" + user}]


def _prompt_dir():
    return files("metacan_pipeline.teachers").joinpath("prompts")


def prompt_lock() -> dict[str, str]:
    """``{version: sha}`` from ``prompts/versions.toml``."""
    return tomllib.loads(_prompt_dir().joinpath("versions.toml").read_text(encoding="utf-8"))


def load_prompt(version: str) -> Prompt:
    """Load a prompt version. Raises FileNotFoundError (no such file), ValueError (a locked version whose
    text changed: publish the change as a new version instead; or a file without a user template)."""
    path = _prompt_dir().joinpath(f"{version}.md")
    if not path.is_file():
        raise FileNotFoundError(f"prompt version {version!r} not found at {path}: add teachers/prompts/{version}.md")
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()[:16]
    locked = prompt_lock().get(version)
    if locked is not None and locked != sha:
        raise ValueError(
            f"prompt {version} at {path} has SHA {sha} but versions.toml locks it at {locked}: a published prompt "
            f"is never edited; save the change as a new version (a new file and a new line in versions.toml)"
        )
    text = raw.decode("utf-8")
    reply = "labels"
    first, _, rest = text.partition("\n")
    if first.startswith("reply:"):
        reply, text = first.removeprefix("reply:").strip(), rest
        if reply not in REPLY_FORMATS:
            raise ValueError(
                f"prompt {version} at {path} asks for reply format {reply!r}; expected one of {REPLY_FORMATS}"
            )
    if USER_MARKER not in text:
        raise ValueError(
            f"prompt {version} has no {USER_MARKER!r} section: it predates batched calls and cannot be sent; use v2 or later"
        )
    rubric, template = text.split(USER_MARKER, 1)
    return Prompt(version, sha, rubric.strip(), template.strip(), reply)
