"""The machine scores' note in the page's language.

The active-learning student writes one note per scoring run (``student/rounds.py``: ``NOTE_IMMATURE`` with the
maturity gate's reasons, or ``NOTE_MATURE``, each followed by "Scores rank; they never assert a category."), and
every record carries it as written. A French page says it in French: :func:`machine_note_words` reads the note
sentence by sentence, and each reason of the gate, against the wordings below (msgids, with the note's figures as
values). A sentence it does not know (a future wording) stays as written; in English the note is returned verbatim,
so a static page is unchanged.
"""

from __future__ import annotations

import re
from gettext import NullTranslations

from ..i18n import N_

CLOSING = N_("Scores rank; they never assert a category.")
IMMATURE = N_(
    "Baseline scores from an immature model (maturity gate not passed after %(rounds)s training rounds: %(reason)s)."
)
MATURE = N_(
    "The maturity gate passed after %(rounds)s training rounds: the scores stopped moving on the frozen holdout, "
    "which does not make them right."
)
#: Each reason the maturity gate gives for an arm, as ``(pattern of the English, msgid)``.
GATE_REASONS: tuple[tuple[re.Pattern, str], ...] = (
    (
        re.compile(r"(?P<arm>[\w.-]+): (?P<n>\d+) round\(s\) of the (?P<need>\d+) the AP rule needs"),
        N_("%(arm)s: %(n)s round(s) of the %(need)s the AP rule needs"),
    ),
    (
        re.compile(
            r"(?P<arm>[\w.-]+): AP not evaluable on the frozen holdout \(needs positive and negative teacher labels there\)"
        ),
        N_("%(arm)s: AP not evaluable on the frozen holdout (needs positive and negative teacher labels there)"),
    ),
    (
        re.compile(r"(?P<arm>[\w.-]+): AP gain (?P<gain>\S+) over the last (?P<n>\d+) rounds >= (?P<max>\S+)"),
        N_("%(arm)s: AP gain %(gain)s over the last %(n)s rounds >= %(max)s"),
    ),
    (
        re.compile(r"(?P<arm>[\w.-]+): churn of the positive set not < (?P<max>\S+) for (?P<n>\d+) rounds running"),
        N_("%(arm)s: churn of the positive set not < %(max)s for %(n)s rounds running"),
    ),
    (
        re.compile(r"(?P<arm>[\w.-]+): Spearman rho not > (?P<min>\S+) for (?P<n>\d+) rounds running"),
        N_("%(arm)s: Spearman rho not > %(min)s for %(n)s rounds running"),
    ),
)
_IMMATURE = re.compile(
    r"Baseline scores from an immature model \(maturity gate not passed after (?P<rounds>\d+) training rounds?: "
    r"(?P<reason>.+)\)\.",
    re.S,
)
_MATURE = re.compile(
    r"The maturity gate passed after (?P<rounds>\d+) training rounds: the scores stopped moving on the frozen "
    r"holdout, which does not make them right\."
)


def gate_reason_words(reason: str, tr: NullTranslations) -> str:
    """The maturity gate's reasons (``; ``-separated, one per failing rule and arm) in the language of ``tr``."""
    said = []
    for part in reason.split("; "):
        for pattern, msgid in GATE_REASONS:
            if m := pattern.fullmatch(part):
                said.append(tr.gettext(msgid) % m.groupdict())
                break
        else:
            said.append(part)
    return "; ".join(said)


def machine_note_words(note: str | None, tr: NullTranslations) -> str | None:
    """A machine-scores note in the language of ``tr``: its known sentences translated with their figures, anything
    else as written; the note itself when ``tr`` says English (the msgids are the English)."""
    if not note or tr.gettext(CLOSING) == CLOSING:
        return note
    out = note.replace(CLOSING, tr.gettext(CLOSING))
    if m := _IMMATURE.search(out):
        values = {"rounds": m["rounds"], "reason": gate_reason_words(m["reason"], tr)}
        out = out[: m.start()] + tr.gettext(IMMATURE) % values + out[m.end() :]
    elif m := _MATURE.search(out):
        out = out[: m.start()] + tr.gettext(MATURE) % {"rounds": m["rounds"]} + out[m.end() :]
    return out
