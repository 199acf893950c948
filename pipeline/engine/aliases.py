"""City and district keys: user text (Arabic or English) -> the key the benchmark table uses.

A key is `normalize_name` of the Arabic name the official files use. English spellings and
Arabic variants come from `pipeline/data/aliases.toml`. A name with no alias maps to its
normalised form, so an unknown place simply finds no benchmark.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources

import polars as pl

from pipeline.engine.names import (
    normalize_name,
    normalize_name_expr,
    strip_affixes,
    strip_affixes_expr,
)

# Joins a city key and a district key into one string key; neither can contain it.
_SEP = "\x1f"
# Words around a city's name that name no other city: "مدينة الرياض", "محافظة الخرج",
# "Riyadh City", "City of Riyadh", "Al Kharj Governorate", and the region named after its
# capital ("منطقة الرياض", "Riyadh Region": its capital's benchmark, the one the table has)
# (normalised: ة -> ه, lower case).
# No city of the table begins or ends so; districts can ("مدينة العمال"), so they keep them.
# The country after a city: "الرياض، السعودية", "Riyadh, Saudi Arabia", "Riyadh City, KSA".
COUNTRY = r"(?:saudi arabia|kingdom of saudi arabia|ksa|السعوديه|المملكه العربيه السعوديه)"
CITY_BEFORE = r"(?:مدينه|محافظه|منطقه|city of|governorate of|region of|province of)"
CITY_AFTER = r"(?:city|governorate|region|province)"
_CITY_WORDS = rf"^{CITY_BEFORE} | {CITY_AFTER}(?: {COUNTRY})?$| {COUNTRY}$"


@dataclass(frozen=True)
class Aliases:
    """Normalised spelling -> key. `districts_in_city` is keyed by `city_key<SEP>spelling`;
    `districts` holds the spellings that name one district only, whatever the city."""

    cities: dict[str, str]
    districts_in_city: dict[str, str]
    districts: dict[str, str]
    # city key, or `city_key<SEP>district_key` -> the place's first English spelling
    english: dict[str, str] = field(default_factory=dict)


def _key(name: str) -> str:
    key = normalize_name(name)
    if key is None:
        raise ValueError(f"alias {name!r} normalises to nothing")
    return key


def _variants(spelling: str) -> set[str]:
    """Keys a spelling is known by: `Al Malqa` also as `almalqa`, as users type it."""
    key = _key(spelling)
    out = {key}
    if key.isascii():
        out.add(key.replace(" ", ""))
        squashed = normalize_name(re.sub(r"[\s\-]+", "", spelling))
        if squashed:
            out.add(squashed)
    return out


def _add(mapping: dict[str, str], spelling: str, target: str, where: str) -> None:
    previous = mapping.setdefault(spelling, target)
    if previous != target:
        raise ValueError(f"alias {spelling!r} in {where} names both {previous!r} and {target!r}")


def parse_aliases(text: str) -> Aliases:
    """Build the lookup maps from the TOML text; a spelling naming two places is an error."""
    data = tomllib.loads(text)
    cities: dict[str, str] = {}
    english: dict[str, str] = {}
    for arabic, spellings in data.get("cities", {}).items():
        target = _key(arabic)
        _first_english(english, target, spellings)
        for spelling in spellings:
            for variant in _variants(spelling) - {target}:
                _add(cities, variant, target, "cities")

    in_city: dict[str, str] = {}
    anywhere: dict[str, set[str]] = {}
    for city, districts in data.get("districts", {}).items():
        city_key = _key(city)
        for arabic, spellings in districts.items():
            target = _key(arabic)
            _first_english(english, f"{city_key}{_SEP}{target}", spellings)
            for spelling in spellings:
                for variant in _variants(spelling) - {target}:
                    _add(in_city, f"{city_key}{_SEP}{variant}", target, f"districts of {city}")
                    anywhere.setdefault(variant, set()).add(target)
    unambiguous = {k: next(iter(v)) for k, v in anywhere.items() if len(v) == 1}
    return Aliases(cities=cities, districts_in_city=in_city, districts=unambiguous, english=english)


def _first_english(english: dict[str, str], key: str, spellings: list[str]) -> None:
    found = next((s for s in spellings if s.isascii()), None)
    if found is not None:
        english.setdefault(key, found)


def english_name(city_key: str | None, district_key: str | None = None) -> str | None:
    """The English name of a city (or of a district of it) by their keys, if one is known."""
    if city_key is None:
        return None
    english = load_aliases().english
    if district_key is None:
        return english.get(city_key)
    return english.get(f"{city_key}{_SEP}{district_key}")


@cache
def load_aliases() -> Aliases:
    """The aliases shipped with the package."""
    text = resources.files("pipeline.data").joinpath("aliases.toml").read_text(encoding="utf-8")
    return parse_aliases(text)


# A city written in both scripts ("Riyadh - الرياض", "جدة Jeddah"): each half is looked up,
# and the name is the city when both name the same one.
_LATIN = r"[a-z0-9]+"
_ARABIC = r"[\u0600-\u06ff]+"


@lru_cache(maxsize=8192)  # the service sees the same few hundred places again and again
def city_key(name: str | None) -> str | None:
    """The benchmark-table city key of one city name."""
    key = normalize_name(name)
    if key is None:
        return None
    if re.search(_LATIN, key) and re.search(_ARABIC, key):
        latin = _city_alias(_again(re.sub(_ARABIC, " ", key)))
        if latin is not None and latin == _city_alias(_again(re.sub(_LATIN, " ", key))):
            return latin
    return _city_alias(key)


def _city_alias(key: str | None) -> str | None:
    """The city key of a name already normalised, the words around a city's name left out."""
    if key is None:
        return None
    bare = re.sub(_CITY_WORDS, "", key)
    if bare and bare != key:  # normalised again: "governorate of al kharj" -> "kharj"
        key = _again(bare) or key
    return load_aliases().cities.get(key, key)


def _again(text: str) -> str | None:
    """`normalize_name` of a normalised name with words taken out: spaces and affixes."""
    return strip_affixes(re.sub(" +", " ", text).strip(" "))


@lru_cache(maxsize=8192)
def district_key(name: str | None, city: str | None = None) -> str | None:
    """The district key of one district name; `city` is a city key (see `city_key`)."""
    return district_alias(normalize_name(name), city)


def district_alias(key: str | None, city: str | None = None) -> str | None:
    """`district_key` of a name already normalised (`normalize_name`)."""
    if key is None:
        return None
    aliases = load_aliases()
    if city is not None:
        found = aliases.districts_in_city.get(f"{city}{_SEP}{key}")
        if found is not None:
            return found
    return aliases.districts.get(key, key)


def city_key_expr(expr: pl.Expr) -> pl.Expr:
    """`city_key` over a column of city names."""
    key = normalize_name_expr(expr)
    # only names in both scripts are split (null elsewhere: the string functions skip nulls)
    mixed = pl.when(key.str.contains(_LATIN) & key.str.contains(_ARABIC)).then(key)
    latin = _city_alias_expr(_again_expr(mixed.str.replace_all(_ARABIC, " ")))
    arabic = _city_alias_expr(_again_expr(mixed.str.replace_all(_LATIN, " ")))
    return pl.when(latin == arabic).then(latin).otherwise(_city_alias_expr(key))


def _city_alias_expr(key: pl.Expr) -> pl.Expr:
    """`_city_alias` over a column."""
    bare = key.str.replace_all(_CITY_WORDS, "")
    stripped = pl.when(bare == key).then(key).otherwise(_again_expr(bare))
    return pl.when(bare != "").then(stripped).otherwise(key).replace(load_aliases().cities)


def _again_expr(text: pl.Expr) -> pl.Expr:
    """`_again` over a column."""
    return strip_affixes_expr(text.str.replace_all(" +", " ").str.strip_chars(" "))


def district_key_expr(expr: pl.Expr, city_key: pl.Expr | None = None) -> pl.Expr:
    """`district_key` over a column of district names, `city_key` a column of city keys."""
    return district_alias_expr(normalize_name_expr(expr), city_key)


def district_alias_expr(key: pl.Expr, city_key: pl.Expr | None = None) -> pl.Expr:
    """`district_key_expr` over names already normalised (`normalize_name_expr`)."""
    aliases = load_aliases()
    anywhere = key.replace(aliases.districts)
    if city_key is None:
        return anywhere
    in_city = pl.concat_str([city_key, pl.lit(_SEP), key]).replace_strict(
        aliases.districts_in_city, default=None, return_dtype=pl.String
    )
    return pl.coalesce(in_city, anywhere)
