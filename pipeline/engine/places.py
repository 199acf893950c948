"""The benchmark table's place for a name whose key the table does not hold as written.

`city_key` and `district_key` give the key of what was written. People also write a place of
the table in ways no alias lists; for a key the table does not hold, these are tried, in order
(a name the table holds as written always wins):

1. The Arabic article, which English spellings may already leave out (`Malqa`): `ملقا` finds
   `الملقا`, `رياض` finds `الرياض`, and `النمار` finds `نمار`. A spelling that is itself a
   place of the table keeps naming that place (`collisions` lists such pairs: a city with
   both `الX` and `X` as districts). Then a district's final alef written as alef maqsura
   (`الملقى`), where that spelling names nothing else in its city.
2. A district written with its city: `الملقا، الرياض`, `الرياض - الملقا`, `Al-Malqa, Riyadh`,
   `الملقا (شمال الرياض)`, `الملقا، مدينة الرياض، السعودية`. A known city's name at the end
   (after a direction word, `شمال`, `north`..., or not; with its `مدينة` / `city` and the
   country, or not) or at the start is dropped only when it names the row's own city, and
   only if what is left is a district of that city (as written, or by step 1).

`Places.city` / `Places.district` (one name, Python) and `Places.with_keys` (columns: each
city name once through `Places.city`, the districts by polars expressions) follow the same
steps; a test holds them to the same keys.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from functools import cached_property, lru_cache

import polars as pl

from pipeline.engine.aliases import (
    CITY_AFTER,
    CITY_BEFORE,
    COUNTRY,
    city_key,
    district_alias,
    district_alias_expr,
    district_key,
    load_aliases,
)
from pipeline.engine.names import (
    normalize_name,
    normalize_name_expr,
    strip_affixes,
    strip_affixes_expr,
)

_ARTICLE = "ال"
# Joins a city key and a district key into one string key; neither can contain it.
_SEP = "\x1f"
# Words placing a district in its city: "الملقا (شمال الرياض)", "Al Malqa, North Riyadh".
_DIRECTION = r"(?:(?:شمال|جنوب|شرق|غرب|وسط|(?:north|south|east|west|central)(?: of)?) )"
# The articles normalize_name drops before a name, here before a city after the district.
_ENGLISH_ARTICLE = r"(?:(?:al|el|ar|as|ash|ad|at|az|an|adh|ath) )"
_IN = r"(?:في|in)"  # "الملقا في الرياض", "Al Malqa in Riyadh"
# Spellings put into the patterns as they are: letters and digits in words (all normalised
# city names are); anything else would need escaping the two regex engines may read apart.
_PLAIN = re.compile(r"[^\W_]+(?: [^\W_]+)*")
# How alike a name and a known spelling must be (difflib's ratio) to suggest the one for the
# other: a letter left out, doubled or changed in a name of five or more (Riyadth, Dammmam).
NEAR = 0.8


def article_variant(key: str) -> str | None:
    """An Arabic key with its leading article dropped, or with one added; None for a key
    that is not Arabic or whose rest would be under two letters."""
    if key.startswith(_ARTICLE):
        rest = key[len(_ARTICLE) :]
        return rest if len(rest) >= 2 and not rest.startswith(" ") else None
    if "\u0620" <= key[:1] <= "\u064a":
        return _ARTICLE + key
    return None


def _variant_map(
    places: set[str], variant_of: Callable[[str], str | None] = article_variant
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """variant -> place for the places whose variant (`variant_of`: the article's, by
    default) names no other place, and the (variant, place) pairs left out because the
    variant is a place of its own or the variant of two."""
    named: dict[str, set[str]] = {}
    for place in places:
        variant = variant_of(place)
        if variant is not None:
            named.setdefault(variant, set()).add(place)
    found: dict[str, str] = {}
    clashes: list[tuple[str, str]] = []
    for variant, targets in sorted(named.items()):
        if variant in places or len(targets) > 1:
            clashes.extend((variant, target) for target in sorted(targets))
        else:
            found[variant] = next(iter(targets))
    return found, clashes


def final_letter_variant(key: str) -> str | None:
    """An Arabic key ending in alef, with the alef written as alef maqsura (ى, which folds to
    ي): a common slip (الملقى for الملقا, الصفى for الصفا). Not the other way: a name ending
    in ya (السويدي) written with alef is another name (السويداء). None for a key that is not
    Arabic or ends otherwise."""
    if not "\u0620" <= key[:1] <= "\u064a" or len(key) < 3 or not key.endswith("\u0627"):
        return None
    return key[:-1] + "\u064a"


class Places:
    """The cities and districts of one benchmark table, and the keys other spellings of
    them resolve to (see the module docstring)."""

    def __init__(self, city_keys: Iterable[str], district_keys: Iterable[tuple[str, str]]):
        cities = set(city_keys)
        self.city_keys = frozenset(cities)
        self.city_variants, self.collisions = _variant_map(cities)
        by_city: dict[str, set[str]] = {}
        for city, district in district_keys:
            by_city.setdefault(city, set()).add(district)
        # city<SEP>spelling -> district key: each district by its key and its article variant.
        self.districts: dict[str, str] = {}
        self.district_variants = 0
        self.final_letter_variants = 0
        for city, districts in sorted(by_city.items()):
            variants, clashes = _variant_map(districts)
            self.districts |= {f"{city}{_SEP}{d}": d for d in districts}
            self.districts |= {f"{city}{_SEP}{v}": d for v, d in variants.items()}
            self.district_variants += len(variants)
            self.collisions += [(f"{city}/{v}", f"{city}/{d}") for v, d in clashes]
            # Then by its final alef's slip, where that names no other spelling of its city
            # (its clashes left unlisted: `collisions` are the article's).
            slips, _ = _variant_map(districts, final_letter_variant)
            slips = {
                spelling: d
                for v, d in slips.items()
                if (spelling := f"{city}{_SEP}{v}") not in self.districts
            }
            self.districts |= slips
            self.final_letter_variants += len(slips)
        spellings = sorted(
            filter(_PLAIN.fullmatch, {*cities, *self.city_variants, *load_aliases().cities}),
            key=lambda s: (-len(s), s),
        )
        names = "|".join(spellings)
        # Tried in this order: the city at the end (a district may end with a direction
        # word: ظهرة العودة شرق), after a direction word, at the start. The district part is
        # lazy, so an English article goes with the city ("malqa ar riyadh"). The city may
        # follow "in": في الرياض, بالرياض, "in riyadh".
        at_end = (
            rf"(?:{_IN} )?(?:{CITY_BEFORE} )?(?:ب)?{_ENGLISH_ARTICLE}?(?P<city>{names})"
            rf"(?: {CITY_AFTER})?(?: {COUNTRY})?$"
        )
        self.patterns = (
            rf"^(?P<part>.+?) {at_end}",
            rf"^(?P<part>.+?) {_DIRECTION}{at_end}",
            rf"^(?P<city>{names}) (?P<part>.+)$",
        )
        self.city = lru_cache(maxsize=8192)(self._city)
        self.district = lru_cache(maxsize=8192)(self._district)
        # The city key of each spelling the patterns capture, looked up rather than computed.
        self._city_of = {spelling: self._city(spelling) for spelling in spellings}

    def nearest_city(self, name: str | None) -> str | None:
        """The key of the known city spelt most like `name`, one the table does not know (a
        slip: Riyadth, الرياظ); None when none is near, or when the table knows `name` (a city
        of the market averages alone has no benchmark, but is spelt right). For a note to the
        user, never to score: a guess must not decide which benchmark a listing is paid against."""
        key = city_key(name)
        if key is None or self.city(name) in self.city_keys:
            return None
        return _nearest(key, self._city_spellings)

    def nearest_district(self, name: str | None, city: str) -> str | None:
        """`nearest_city` for a district of `city` (a city key), among the table's districts
        and those the aliases name there: الملك عبد العزيز in Riyadh has no benchmark, but is
        no slip of الملك عبد الله, another district priced otherwise."""
        key = district_key(name, city)
        prefix = f"{city}{_SEP}"
        known = (*self.districts.items(), *load_aliases().districts_in_city.items())
        spellings = {
            spelling.removeprefix(prefix): district
            for spelling, district in known
            if spelling.startswith(prefix)
        }
        if key is None or key in spellings.values():
            return None
        return _nearest(key, spellings)

    @cached_property
    def _city_spellings(self) -> dict[str, str]:
        """Every spelling known to name a city of the table -> its key."""
        aliases = load_aliases().cities
        return {
            **{s: k for s, k in aliases.items() if k in self.city_keys},
            **self.city_variants,
            **{k: k for k in self.city_keys},
        }

    @cached_property
    def _compiled(self) -> tuple[re.Pattern[str], ...]:
        """The patterns for Python's engine, compiled when a name first needs them (0.04 s,
        which a large batch, resolved by polars' engine, never does)."""
        return tuple(re.compile(pattern) for pattern in self.patterns)

    def _city(self, name: str | None) -> str | None:
        """The city key of one name: the table's key where the name finds one."""
        key = city_key(name)
        return None if key is None else self.city_variants.get(key, key)

    def _district(self, name: str | None, city: str | None) -> str | None:
        """The district key of one name in `city` (a key from `Places.city`)."""
        key = district_key(name, city)
        if key is None or city is None:
            return key
        found = self.districts.get(f"{city}{_SEP}{key}")
        if found is not None:
            return found
        text = normalize_name(name) or ""
        for pattern in self._compiled:
            match = pattern.match(text)
            if match is not None and self._city_of[match["city"]] == city:
                part = district_alias(strip_affixes(match["part"]), city)
                found = self.districts.get(f"{city}{_SEP}{part}")
                if found is not None:
                    return found
        return key

    def with_keys(self, frame: pl.DataFrame, city: str, district: str) -> pl.DataFrame:
        """`frame` with `city_key` and `district_key`: `Places.city` and `Places.district` of
        its columns `city` and `district` (each name normalised once: the costly part)."""
        text = "_places_text"
        # Each city name once, in Python (`Places.city`, cached): a file's places name a few
        # cities many times over, and the expression's regexes cost more to build than that.
        names = frame[city].unique()
        cities = pl.DataFrame(
            {city: names, "city_key": pl.Series([self.city(n) for n in names], dtype=pl.String)}
        )
        return (
            frame.join(cities, on=city, how="left", maintain_order="left", nulls_equal=True)
            .with_columns(**{text: normalize_name_expr(pl.col(district))})
            .with_columns(district_key=self._district_expr(pl.col(text), pl.col("city_key")))
            .drop(text)
        )

    def _district_expr(self, text: pl.Expr, city: pl.Expr) -> pl.Expr:
        """`Places.district` over normalised district names, `city` a column of city keys."""

        def in_table(key: pl.Expr) -> pl.Expr:
            joined = pl.concat_str([city, pl.lit(_SEP), key])
            return joined.replace_strict(self.districts, default=None, return_dtype=pl.String)

        key = district_alias_expr(text, city)
        found = in_table(key)
        # Only the names not found as written are searched for a city (null: skipped).
        text = pl.when(found.is_null()).then(text)

        def without_city(pattern: str) -> pl.Expr:
            groups = text.str.extract_groups(pattern)
            named = groups.struct.field("city").replace_strict(
                self._city_of, default=None, return_dtype=pl.String
            )
            part = pl.when(named == city).then(groups.struct.field("part"))
            return in_table(district_alias_expr(strip_affixes_expr(part), city))

        return pl.coalesce(found, *map(without_city, self.patterns), key)


def _nearest(key: str, spellings: dict[str, str]) -> str | None:
    """The place of the spelling in `spellings` most like `key`, if one is near (see NEAR)."""
    found = difflib.get_close_matches(key, spellings, n=1, cutoff=NEAR)
    return spellings[found[0]] if found else None
