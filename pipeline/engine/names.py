"""Normalisation of city and district names, Arabic or English, into join keys.

Official files and users' spreadsheets spell the same place many ways: with or without
`حي`, alef with or without hamza, ya / alef maqsura, ta marbuta / ha, tatweel, diacritics,
Arabic-Indic digits, `Al Malqa` / `al-malqa`. `normalize_name` (one value) and
`normalize_name_expr` (a polars column) turn all of them into the same key; a test holds
the two to the same output.

The steps, in order (both implementations follow them exactly):

1. NFKD, lower-case, NFKD again (compatibility forms such as presentation-form ligatures
   and modifier capitals decompose; `أ إ آ ؤ ئ` become base letter + hamza/madda mark).
2. Drop every combining mark (tashkeel, hamza/madda marks, Latin accents) and the
   invisible characters (tatweel, zero-width and bidi controls). Decomposing rather than
   composing makes the result stable: nothing left can recombine on a second pass.
3. Fold letters and digits: `ٱ` -> `ا`, `ى ی` -> `ي`, `ک` -> `ك`, `ة` -> `ه`, a lone hamza
   `ء` is dropped (REGA writes الصفا where MOJ writes الصفاء), Arabic-Indic and Persian
   digits -> ASCII. Apostrophes vanish (`Ha'il` -> `hail`); hyphens, dots,
   commas, colons, semicolons, slashes and brackets become spaces (`حي: الملقا`). (The
   article typed apart, `ال ملقا`, is not joined: `آل` (a family's name) folds to the same
   letters, and districts are named so: `آل أبو شوحطة`.)
4. Collapse whitespace and trim.
5. Drop leading `حي` (`hay` in English) and English articles (`al`, `el` and the
   assimilated `ar as ash ad at az an adh ath`), and a trailing `district` / `dist` /
   `neighborhood` / `حي` or postal code (five digits).

The whitespace class is spelled out rather than `\\s`, because Python's and Rust's regex
engines disagree on a few control characters. Marks are judged by the Unicode database of
each engine; they agree on every character assigned up to Unicode 14.
"""

from __future__ import annotations

import re
import unicodedata

import polars as pl

# The marks of Unicode's bidirectional algorithm: LRM, RLM, the Arabic letter mark, and the
# embeddings, overrides and isolates. Invisible, and able to reorder the text around them.
BIDI_CONTROLS = "\u200e\u200f\u061c" + "".join(
    chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)
# Tatweel, zero-width characters, bidi controls, BOM, control characters (NUL... pasted from
# other systems) and the Hangul fillers (letters to Unicode, blank on screen).
_INVISIBLE = (
    "\u0640\ufeff\u115f\u1160\u3164\uffa0\x7f"
    + BIDI_CONTROLS
    + "".join(chr(c) for c in [*range(0x00, 0x09), *range(0x0E, 0x1C), *range(0x200B, 0x200E)])
)

_FOLD: dict[str, str] = {
    "\u0671": "\u0627",  # alef wasla -> alef (أ إ آ are handled by NFKD + mark removal)
    "\u0649": "\u064a",  # alef maqsura -> ya
    "\u06cc": "\u064a",  # Persian yeh -> ya
    "\u06a9": "\u0643",  # keheh -> kaf
    "\u0629": "\u0647",  # ta marbuta -> ha
    "\u0621": "",  # lone hamza: الصفاء / الصفا, غبيراء / غبيرا name the same place
    **{chr(0x0660 + i): str(i) for i in range(10)},  # Arabic-Indic digits
    **{chr(0x06F0 + i): str(i) for i in range(10)},  # Persian digits
    **dict.fromkeys("'`\u2018\u2019\u02bc\u02bb\u00b4", ""),
    **dict.fromkeys('-_.,\u060c/\\()[]"\u2010\u2011\u2012\u2013\u2014:;\u061b', " "),
}

# What polars' strip_chars() removes (Unicode White_Space): str.strip(STRIP_WHITESPACE)
# in Python matches it, for the one-row paths.
STRIP_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_WS = r"[\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+"
# `hay`: حي as English spells it ("Hay Al Malqa")
_PREFIX = r"^(?:(?:حي|hay|hayy|hai|al|el|ar|as|ash|ad|at|az|an|adh|ath) )+"
_SUFFIX_WORDS = ("district", "dist", "neighborhood", "neighbourhood", "حي")
_POSTCODE = "[0-9]{5}"  # a Saudi postal code after the name ("Al Malqa, Riyadh 13521")
_SUFFIX = rf"(?: (?:{'|'.join(_SUFFIX_WORDS)}|{_POSTCODE}))+$"

_TRANSLATE = str.maketrans({**_FOLD, **dict.fromkeys(_INVISIBLE, "")})
_WS_RE = re.compile(_WS)
_PREFIX_RE = re.compile(_PREFIX)
_POSTCODE_RE = re.compile(_POSTCODE)


def normalize_name(s: str | None) -> str | None:
    """The join key of one city or district name; None for None or a name that is empty."""
    if s is None:
        return None
    s = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", s).lower())
    s = "".join(ch for ch in s if not unicodedata.category(ch).startswith("M"))
    return strip_affixes(_WS_RE.sub(" ", s.translate(_TRANSLATE)).strip(" "))


def strip_affixes(s: str) -> str | None:
    """Step 5 alone, for a part of a name already normalised (words of its key)."""
    return _without_suffixes(_PREFIX_RE.sub("", s)) or None


def _without_suffixes(s: str) -> str:
    """`_SUFFIX` removed, word by word from the end: Python's regex engine tries the pattern
    from every position, which took seconds on a name of many `dist` words (polars' does not
    backtrack)."""
    while True:
        head, space, word = s.rpartition(" ")
        if not space or not (word in _SUFFIX_WORDS or _POSTCODE_RE.fullmatch(word)):
            return s
        s = head


def normalize_name_expr(expr: pl.Expr) -> pl.Expr:
    """`normalize_name` as a polars expression (string ops only, no Python per row)."""
    e = expr.str.normalize("NFKD").str.to_lowercase().str.normalize("NFKD")
    e = e.str.replace_all(r"\p{M}", "")
    e = e.str.replace_many([*_FOLD, *_INVISIBLE], [*_FOLD.values(), *([""] * len(_INVISIBLE))])
    return strip_affixes_expr(e.str.replace_all(_WS, " ").str.strip_chars(" "))


def strip_affixes_expr(expr: pl.Expr) -> pl.Expr:
    """`strip_affixes` as a polars expression."""
    e = expr.str.replace(_PREFIX, "").str.replace(_SUFFIX, "")
    return pl.when(e != "").then(e)
