"""Which input header feeds which request field.

Aliases live in ``configs/columns.toml``; a ``--config`` TOML file can replace a field's aliases
(``[aliases]``) or name its header outright (``[columns]``; an empty string says the file has no
such column). Anything else in that file is refused, so a misspelt table name never leaves a
mapping unapplied.

A header matches a field when its normalised form equals one of the field's normalised aliases
(see :func:`header_key`); failing that, when it does after its bracketed parts and trailing unit
words are removed (:func:`loose_header_key`). Headers named under ``[columns]`` take no part in
alias matching. Two headers matching one field is an error: the mapping would be a guess.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.engine.schema import REQUEST_SCHEMA
from pipeline.errors import MissingColumnError, UnknownHeaderError, UsageError

__all__ = [
    "DEFAULT_CONFIG",
    "MAPPED_FIELDS",
    "REQUIRED_FIELDS",
    "ColumnConfig",
    "ColumnMap",
    "find_columns",
    "header_key",
    "load_column_config",
    "loose_header_key",
    "map_columns",
]

DEFAULT_CONFIG = Path(__file__).parents[2] / "configs" / "columns.toml"

# Every request field a spreadsheet column can feed (reasoning is a run option, not a column).
MAPPED_FIELDS: tuple[str, ...] = tuple(f for f in REQUEST_SCHEMA if f != "reasoning")
# Required by the spec: property.type, property.price, property.area, location.city.
REQUIRED_FIELDS: tuple[str, ...] = ("type", "price", "area", "city")

_ARABIC_MARKS = re.compile("[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]")
_LETTER_VARIANTS = str.maketrans(
    {
        "أ": "ا",
        "إ": "ا",
        "آ": "ا",
        "ٱ": "ا",
        "ة": "ه",
        "ى": "ي",
        **{chr(0x0660 + d): str(d) for d in range(10)},
        **{chr(0x06F0 + d): str(d) for d in range(10)},
    }
)
_BRACKETED = re.compile(r"\([^)]*\)|\[[^\]]*\]|\{[^}]*\}")
# Unit words a header may end with, per field whose values are in that unit. Only these are
# removed, so "Price m2" (a price per m2) never loosely matches price.
_UNIT_WORDS: dict[str, tuple[str, ...]] = {
    "price": ("sar", "sr", "riyal", "riyals", "in sar", "ريال", "بالريال", "ر س", "رس"),
    "area": (
        "m2", "sqm", "sq m", "in m2", "square meters", "square metres",
        "م2", "م", "متر", "متر مربع", "بالمتر", "بالمتر المربع",
    ),
    "age": ("years", "year", "yrs", "in years", "سنه", "سنوات", "بالسنوات"),
}  # fmt: skip
_TRAILING_UNIT = {
    name: re.compile(
        r"(?:^|\s)(?:" + "|".join(re.escape(w) for w in sorted(words, key=len)[::-1]) + r")$"
    )
    for name, words in _UNIT_WORDS.items()
}
# A header that speaks of a rate ("price per m2", "السعر لكل متر") is never matched loosely.
_RATE = re.compile(r"/|\bper\b|لكل|للمتر")
# A bracketed part naming another unit or scale than the field's ("Price (thousand SAR)",
# "Area (sq ft)", "Age (months)") keeps the header from matching loosely: scored as SAR, m2 or
# years its values would be wrong by a factor. Words after header_key (alef forms unified).
_OTHER_UNITS: dict[str, tuple[str, ...]] = {
    "price": (
        "usd", "us", "dollar", "dollars", "eur", "euro", "euros", "gbp", "aed", "dirham",
        "thousand", "thousands", "k", "000", "000s", "1000", "x1000", "ksar", "sar000", "m",
        "mn", "mm", "mil", "million", "millions", "msar", "sarm", "sar m", "sar k", "bn",
        "billion", "الف", "بالالف", "الاف", "بالاف", "مليون", "بالمليون", "ملايين", "دولار",
        "بالدولار", "درهم",
    ),
    "area": (
        "ft", "ft2", "feet", "foot", "sf", "sqf", "sqft", "sq ft", "square feet",
        "square foot", "acre", "acres", "ha", "hectare", "hectares", "dunam", "dunum",
        "donum", "km", "km2", "دونم", "هكتار", "فدان", "قدم", "كم", "كم2",
    ),
    "age": ("month", "months", "mo", "days", "day", "شهر", "اشهر", "بالاشهر", "يوم", "ايام"),
}  # fmt: skip
# A price of the metre or of a period (a rent), not the sale price: a bracketed part that
# names only that (and perhaps the currency), as "Price (m²)", "السعر (المتر)", "Price (SAR,
# monthly)"; a word of it in passing ("Price (SAR, year-end)", "(excl. rent)") is no unit.
_PRICE_OF_WHAT = frozenset(
    {
        "m2", "sqm", "sq m", "meter", "metre", "square meter", "square metre", "per m2",
        "م2", "م", "متر", "المتر", "بالمتر", "متر مربع", "للمتر المربع",
        "month", "monthly", "per month", "annual", "annually", "yearly", "per year", "year",
        "rent", "rental", "annual rent", "monthly rent", "yearly rent",
        "شهري", "شهريا", "سنوي", "سنويا", "ايجار", "الايجار", "ايجار سنوي", "ايجار شهري",
        "الايجار السنوي", "الايجار الشهري",
    }
)  # fmt: skip
_CURRENCY_WORDS = frozenset({"sar", "sr", "riyal", "riyals", "ريال", "بالريال", "رس", "ر س"})
_PRICE_SCALE = re.compile(r"[$€£]|000")  # a currency sign, or thousands ("SAR '000", "x1,000")
_CURRENCY_SIGN = re.compile(r"[$€£¥₹]")


def other_unit(header: str, name: str) -> str | None:
    """The part of ``header`` that names another unit than field ``name``'s, if any: a
    bracketed part, or for price a currency sign anywhere ("Price $", which header_key reads
    as "price")."""
    words = _OTHER_UNITS.get(name, ())
    for part in _BRACKETED.findall(header):
        key = f" {header_key(part)} "
        if (name == "price" and (_PRICE_SCALE.search(part) or _price_of_what(key))) or any(
            f" {word} " in key for word in words
        ):
            return part
    if name == "price" and (sign := _CURRENCY_SIGN.search(header)):
        return sign.group()
    return None


def _price_of_what(key: str) -> bool:
    """Whether a bracketed part (its header_key, spaced) names only a metre or a period."""
    words = [w for w in key.split() if w not in _CURRENCY_WORDS]
    return " ".join(words) in _PRICE_OF_WHAT


def header_key(header: str) -> str:
    """A header reduced to what matters for matching.

    NFKC (so ``m²`` is ``m2``), case-folded; BOM, bidi marks, Arabic diacritics and tatweel
    removed; alef, ta marbuta and alef maqsura variants unified; Arabic-Indic digits made ASCII;
    every run of characters that are not letters or digits (spaces, punctuation, brackets,
    underscores) becomes one space; trimmed.
    """
    text = unicodedata.normalize("NFKC", header).casefold()
    text = _ARABIC_MARKS.sub("", text).translate(_LETTER_VARIANTS)
    kept = [ch if unicodedata.category(ch)[0] in "LN" else " " for ch in text]
    return " ".join("".join(kept).split())


def loose_header_key(header: str, name: str) -> str | None:
    """:func:`header_key` without bracketed parts and trailing unit words of field ``name``.

    None when the header names a rate ("per", "/", "لكل") or, in brackets, another unit than
    the field's (:func:`other_unit`): those must match an alias exactly.
    """
    if _RATE.search(header_key(header)) or "/" in header or other_unit(header, name):
        return None
    key = header_key(_BRACKETED.sub(" ", header))
    trailing = _TRAILING_UNIT.get(name)
    while trailing is not None:
        shorter = trailing.sub("", key).strip()
        if shorter == key:
            break
        key = shorter
    return key or None


@dataclass(frozen=True, kw_only=True)
class ColumnConfig:
    """Aliases per field, and headers named outright (field -> header; "" = no such column)."""

    aliases: Mapping[str, tuple[str, ...]]
    explicit: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = None


@dataclass(frozen=True)
class ColumnMap:
    """Request field -> input header (None when the file has no column for it)."""

    fields: Mapping[str, str | None]

    def __getitem__(self, name: str) -> str | None:
        return self.fields[name]

    @property
    def mapped(self) -> dict[str, str]:
        """Only the fields that have a column."""
        return {f: h for f, h in self.fields.items() if h is not None}


def load_column_config(path: Path | None = None) -> ColumnConfig:
    """The default aliases, overridden by ``path``'s ``[aliases]`` and ``[columns]`` tables."""
    defaults = _read_toml(DEFAULT_CONFIG)
    aliases = _aliases(defaults.get("aliases", {}), DEFAULT_CONFIG)
    missing = [f for f in MAPPED_FIELDS if f not in aliases]
    if missing:
        raise UsageError(f"{DEFAULT_CONFIG}: [aliases] has no list for {', '.join(missing)}")
    explicit: dict[str, str] = {}
    if path is not None:
        override = _read_toml(path)
        _check_tables(override, path)
        aliases.update(_aliases(override.get("aliases", {}), path))
        explicit = _explicit(override.get("columns", {}), path)
    _check_aliases_distinct(aliases, path or DEFAULT_CONFIG)
    return ColumnConfig(aliases=aliases, explicit=explicit, source=path)


def map_columns(
    headers: list[str],
    config: ColumnConfig,
    *,
    source: str,
    as_written: Mapping[str, str] | None = None,
) -> ColumnMap:
    """Map every request field to at most one of ``headers`` (``source`` names the file);
    MissingColumnError when a required field finds none.

    ``as_written``: the headers the reader renamed (``Price_2`` -> ``Price``, a repeated
    header), matched as written: two columns both headed "Price" are as ambiguous as "Price"
    and "السعر"."""
    result = find_columns(headers, config, source=source, as_written=as_written)
    for name in REQUIRED_FIELDS:
        if result[name] is None:
            raise MissingColumnError(
                source,
                name,
                list(config.aliases[name]),
                list(headers),
                _unit_note(headers, name, config.aliases[name]),
            )
    return ColumnMap(result)


def find_columns(
    headers: list[str],
    config: ColumnConfig,
    *,
    source: str,
    as_written: Mapping[str, str] | None = None,
) -> dict[str, str | None]:
    """`map_columns` without the check for required fields: each field's header or None."""
    as_written = as_written or {}
    result: dict[str, str | None] = dict.fromkeys(MAPPED_FIELDS)
    claimed: set[str] = set()
    for name, wanted in config.explicit.items():
        if wanted == "":
            continue
        header = _find_explicit(headers, wanted)
        if header is None:
            raise UnknownHeaderError(
                f"{source}: the configuration maps field '{name}' to header {wanted!r}, which "
                f"the file does not have; the file has {_quoted(headers)}"
            )
        result[name] = header
        claimed.add(header)

    by_key = {header_key(a): f for f, names in config.aliases.items() for a in names}
    # Aliases that name a unit themselves ("Price (k)" in a --config): the header is meant.
    spelled_out = {
        header_key(a) for f, names in config.aliases.items() for a in names if other_unit(a, f)
    }
    candidates: dict[str, list[str]] = {}
    for header in headers:
        if header in claimed:
            continue
        written = as_written.get(header, header)
        matched = by_key.get(header_key(written))
        if (
            matched is not None
            and other_unit(written, matched)
            and header_key(written) not in spelled_out
        ):
            matched = None  # "Price ($)" has the key of alias "price", but not its unit
        else:
            matched = matched or _loose_match(written, by_key)
        if matched is not None and matched not in config.explicit:
            candidates.setdefault(matched, []).append(header)

    for name, found in candidates.items():
        if len(found) > 1:
            shown = ", ".join(
                f"{h!r} (also headed {as_written[h]!r})" if h in as_written else repr(h)
                for h in found
            )
            choices = " or ".join(f'"{h}"' for h in found)
            raise UsageError(
                f"{source}: {len(found)} headers match field '{name}' ({shown}); "
                f"keep one, or say which to use in a --config file: "
                f"[columns] {name} = {choices}"
            )
        result[name] = found[0]
    return result


def columns_in_other_units(headers: list[str], mapping: ColumnMap, config: ColumnConfig) -> str:
    """Why a column that names an optional field in another unit ("Age (months)") was not
    taken for it: that field then goes unscored, which the run must say. "" if none."""
    return "".join(
        _unit_note(headers, name, config.aliases[name])
        for name in _UNITS
        if name not in REQUIRED_FIELDS and mapping[name] is None
    ).strip()


def _unit_note(headers: list[str], name: str, aliases: tuple[str, ...]) -> str:
    """Why a header that would otherwise have matched field ``name`` was not taken."""
    keys = {header_key(a) for a in aliases}
    for header in headers:
        part = other_unit(header, name)
        if part and header_key(_BRACKETED.sub(" ", header)) in keys:
            return (
                f" Header {header!r} is not taken for '{name}': {part} is not its unit "
                f"({_UNITS[name]}); convert the values, or map it with --config if they are."
            )
    return ""


_UNITS = {"price": "SAR, the whole sale price", "area": "m2", "age": "years"}


def _loose_match(header: str, by_key: Mapping[str, str]) -> str | None:
    for name in MAPPED_FIELDS:
        key = loose_header_key(header, name)
        if key is not None and by_key.get(key) == name:
            return name
    return None


def _find_explicit(headers: list[str], wanted: str) -> str | None:
    if wanted in headers:
        return wanted
    matches = [h for h in headers if header_key(h) == header_key(wanted)]
    return matches[0] if len(matches) == 1 else None


def _quoted(items: list[str]) -> str:
    return ", ".join(repr(i) for i in items)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = Path(path).read_bytes()
        return tomllib.loads(raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{path}: is not UTF-8 text (byte {exc.start}); save it as UTF-8 (in Notepad: "
            "Save As, Encoding UTF-8)"
        ) from None
    except FileNotFoundError:
        raise UsageError(f"{path}: configuration file not found") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, not a configuration file") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None


_TABLES = ("aliases", "columns")


def _check_tables(config: dict[str, Any], path: Path) -> None:
    for name, value in config.items():
        if name in _TABLES:
            continue
        if isinstance(value, dict):
            raise UsageError(
                f"{path}: unknown table [{name}]; a --config file has [aliases] and [columns]"
            )
        hint = " under [columns]" if name in MAPPED_FIELDS else ""
        raise UsageError(
            f"{path}: {name!r} is outside any table; a --config file has [aliases] and "
            f"[columns] (put it{hint} there)"
        )


def _aliases(table: object, path: Path) -> dict[str, tuple[str, ...]]:
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [aliases] must be a table of field = [header, ...]")
    result: dict[str, tuple[str, ...]] = {}
    for name, names in table.items():
        _check_field(name, path, "aliases")
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise UsageError(f"{path}: [aliases] {name} must be a list of non-empty strings")
        result[name] = tuple(names)
    return result


def _explicit(table: object, path: Path) -> dict[str, str]:
    if not isinstance(table, dict):
        raise UsageError(f'{path}: [columns] must be a table of field = "header"')
    result: dict[str, str] = {}
    for name, header in table.items():
        _check_field(name, path, "columns")
        if not isinstance(header, str):
            raise UsageError(f'{path}: [columns] {name} must be a header name in quotes ("...")')
        if header == "" and name in REQUIRED_FIELDS:
            raise UsageError(f"{path}: [columns] {name} is required and cannot be left unmapped")
        result[name] = header
    headers = [h for h in result.values() if h]
    repeated = sorted({h for h in headers if headers.count(h) > 1})
    if repeated:
        raise UsageError(f"{path}: [columns] maps header(s) {_quoted(repeated)} to two fields")
    return result


def _check_field(name: str, path: Path, table: str) -> None:
    if name not in MAPPED_FIELDS:
        raise UsageError(
            f"{path}: [{table}] has unknown field {name!r}; fields are {', '.join(MAPPED_FIELDS)}"
        )


def _check_aliases_distinct(aliases: Mapping[str, tuple[str, ...]], path: Path) -> None:
    owner: dict[str, str] = {}
    for name, names in aliases.items():
        for alias in names:
            key = header_key(alias)
            if owner.get(key, name) != name:
                raise UsageError(
                    f"{path}: alias {alias!r} is listed for both '{owner[key]}' and '{name}'"
                )
            owner[key] = name
