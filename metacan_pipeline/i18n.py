"""Interface languages: English and French through gettext catalogues read with Babel.

English is the source language. Every interface string is written in English where it is used (templates through
``_()``, Python through :func:`N_`), and that English text is the msgid. The French catalogue is
``metacan_pipeline/site/locale/fr/LC_MESSAGES/messages.po`` (package data); ``babel.cfg`` at the repository root
says which files are extracted (the site's and the work page's templates, the site's Python, ``vocab.py``,
``publish/pages.py``); ``make messages`` extracts them and merges the result into the ``.po``.

The ``.po`` is compiled in memory the first time a language is asked for (:func:`translations`: Babel's
``read_po`` then ``write_mo`` into a buffer, fuzzy entries left out), so there is no compiled ``.mo`` to build,
commit or forget. Babel is imported only when a language is first asked for (``vocab.py`` imports :func:`N_`, and
every code-location load imports ``vocab.py``). Data values (titles, names, vocabulary codes, statuses, parameter names) are never translated.
"""

from __future__ import annotations

import functools
import io
import unicodedata
from gettext import NullTranslations
from pathlib import Path

LOCALES = ("en", "fr")
DEFAULT_LOCALE = "en"
#: The Babel locale whose conventions format numbers in each language (grouping: 1,234 and 1 234).
NUMBER_LOCALES = {"en": "en_CA", "fr": "fr_CA"}
#: The language each language's name is written in, for the switch link (``lang`` attribute).
LANGUAGE_NAMES = {"en": "English", "fr": "Français"}
LOCALE_DIR = Path(__file__).resolve().parent / "site" / "locale"
DOMAIN = "messages"


class Sentence(str):
    """An English sentence that remembers its msgid and values, so it can be said again in another language.

    ``str(Sentence(msgid, **values))`` is ``msgid % values`` (the msgid alone when there are no values), so a
    :class:`Sentence` goes wherever English text goes (exception messages, JSON); :meth:`translate` formats the
    translated msgid with the same values.
    """

    msgid: str
    values: dict

    def __new__(cls, msgid: str, **values) -> Sentence:
        self = super().__new__(cls, msgid % values if values else msgid)
        self.msgid, self.values = msgid, values
        return self

    def translate(self, tr: NullTranslations) -> str:
        text = tr.gettext(self.msgid)
        return text % self.values if self.values else text


def N_(msgid: str, **values) -> str:
    """Mark ``msgid`` as an interface string (Babel extracts ``N_`` calls): the msgid itself, or with values a
    :class:`Sentence` (the English sentence that can be translated later)."""
    return Sentence(msgid, **values) if values else msgid


def catalog_path(locale: str) -> Path:
    return LOCALE_DIR / locale / "LC_MESSAGES" / f"{DOMAIN}.po"


@functools.cache
def translations(locale: str) -> NullTranslations:
    """The gettext translations of ``locale`` (one of :data:`LOCALES`; English is the msgids themselves).

    The ``.po`` catalogue is compiled in memory (fuzzy entries are left out, so a fuzzy entry shows English).
    Raises ValueError for a locale the site does not have, naming the catalogue it looked for.
    """
    if locale not in LOCALES:
        raise ValueError(f"no interface language {locale!r}: the languages are {', '.join(LOCALES)}")
    if locale == DEFAULT_LOCALE:
        return NullTranslations()
    from babel.messages.mofile import write_mo  # Babel loads when a language is first asked for: module doc
    from babel.messages.pofile import read_po
    from babel.support import Translations

    path = catalog_path(locale)
    with path.open("rb") as fh:
        catalog = read_po(fh, locale=locale, domain=DOMAIN)
    buf = io.BytesIO()
    write_mo(buf, catalog, use_fuzzy=False)
    buf.seek(0)
    return Translations(buf, domain=DOMAIN)


def accept_language_tags(header: str | None) -> list[str]:
    """The language tags of an ``Accept-Language`` header, most preferred first (RFC 9110 section 12.5.4).

    Each element is ``tag`` or ``tag;q=<weight>``; a weight that is not a number counts as 0, weight 0 means
    "not this one", ``*`` is dropped (it names no language), equal weights keep the header's order.
    """
    weighted = []
    for i, part in enumerate((header or "").split(",")[:32]):
        tag, _, params = part.strip().partition(";")
        tag = tag.strip()
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if tag and tag != "*" and q > 0:
            weighted.append((-q, i, tag))
    return [tag for _, _, tag in sorted(weighted)]


def negotiate(header: str | None) -> str | None:
    """The interface language a browser's ``Accept-Language`` header prefers (``fr-CA`` -> ``fr``), or None when
    it names neither (Babel's ``negotiate_locale``)."""
    from babel.core import negotiate_locale  # lazily, as above

    # language tags are case-insensitive, and negotiate_locale answers in the header's own spelling ("FR")
    return negotiate_locale([t.lower() for t in accept_language_tags(header)], LOCALES, sep="-")


@functools.cache
def language_name(code: str | None, locale: str = DEFAULT_LOCALE) -> str | None:
    """The name of the language whose ISO 639 code (or BCP 47 tag: ``zh-cn``, ``sr_Latn``) OpenAlex gives, said in
    the interface language ``locale``, from CLDR through Babel: ``en`` is "English" in English and "anglais" in
    French. A tag with a script or region names them ("chinois (simplifié, Chine)"). A value CLDR does not know
    (not a language code) is returned as it is, and so are None and the empty string: a data value is never
    hidden."""
    if not code:
        return code
    from babel.core import Locale, UnknownLocaleError  # lazily, as above

    ui = Locale.parse(NUMBER_LOCALES[locale].split("_")[0])
    tag = code.strip().replace("_", "-").lower()
    if tag in ui.languages:  # the CLDR name of the code itself ("und": "langue indéterminée"), never a guess
        return ui.languages[tag]
    try:
        parsed = Locale.parse(tag, sep="-")
    except (ValueError, UnknownLocaleError):
        return code
    if parsed.language != tag.split("-")[0]:  # Babel filled in a likely language: not what the data says
        return code
    return parsed.get_display_name(ui) or code


def format_number(n: int | float, locale: str) -> str:
    """A count as written in ``locale`` (``1,234`` in English, ``1 234`` in French)."""
    from babel.numbers import format_decimal  # lazily, as above

    return format_decimal(n, locale=NUMBER_LOCALES[locale])


def fold(value: str) -> str:
    """``value`` as the site compares text: accents stripped (Unicode NFD without its combining marks) and
    lower-cased, as DuckDB's ``lower(strip_accents(value))`` folds a release's values (``facet_codes.norm``) and
    FTS5's ``remove_diacritics`` its index."""
    decomposed = unicodedata.normalize("NFD", value)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()
