"""The explanation of a decision in English and Arabic, built from the row's own figures.

Deterministic text, no network and no model: the `Reasoner` protocol is the seam where a hosted
language model could take over later. Risk flags are stable codes (documented in
docs/scoring.md) so an analyst can filter on them; key factors are sentences.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.engine.aliases import english_name
from pipeline.engine.names import BIDI_CONTROLS
from pipeline.engine.scoring import AREA_RANGE, halala_row, type_adjusted_row

THIN_MARKET_DEEDS = 100
FALLING_MARKET_PCT = -3.0
FAR_BELOW_MARKET = 0.6  # price per m2 under 60% of the 25th percentile
OLD_BUILDING_YEARS = 25

_VERDICT_AR = {"match": "مناسب", "partial": "مناسب جزئياً", "no_match": "غير مناسب"}
_TYPE_EN = {  # "for ..."
    "apartment": "an apartment",
    "villa": "a villa",
    "land": "land",
    "commercial": "a commercial property",
    "office": "an office",
}
_TYPE_AR = {
    "apartment": "الشقة",
    "villa": "الفيلا",
    "land": "الأرض",
    "commercial": "العقار التجاري",
    "office": "المكتب",
}
_TYPE_AR_PLURAL = {
    "apartment": "الشقق",
    "villa": "الفلل",
    "land": "الأراضي",
    "commercial": "العقارات التجارية",
    "office": "المكاتب",
}
_BUILT_TYPES = ("apartment", "villa", "commercial", "office")


@dataclass(frozen=True)
class Explanation:
    reasoning_en: str
    reasoning_ar: str
    key_factors: list[str]
    risk_flags: list[str]


class Reasoner(Protocol):
    def explain(self, rows: Sequence[Mapping[str, Any]]) -> list[Explanation]:
        """One explanation per scored row (request fields, benchmark and score columns)."""
        ...


def _sar(value: float) -> str:
    """Whole riyals, halves rounded up as the scores are (format() would give 532 for 532.5);
    to the halala under a hundred, where a riyal is too large a step for the percentages said
    beside it to be checked (35.52 against 43.23 is 18% below; 36 against 43, 16%)."""
    if abs(value) < 100:
        return f"{halala_row(value):.2f}"
    return f"{math.floor(value + 0.5):,}"


def _years_ar(years: int) -> str:
    return _counted_ar(years, "سنة واحدة", "سنتان", "سنوات", "سنة", grouped=False)


def _counted_ar(
    count: int, one: str, two: str, plural: str, singular: str, *, grouped: bool = True
) -> str:
    """An Arabic count and its noun: 1 and 2 in words (سنة واحدة, سنتان); the plural after a
    number whose last two digits are 3 to 10 (5 سنوات, 103 سنوات, 1,206 صفقات); else the
    singular (11 سنة, 100 سنة, 432 صفقة)."""
    if count == 1:
        return one
    if count == 2:
        return two
    noun = plural if 3 <= count % 100 <= 10 else singular
    return f"{count:,} {noun}" if grouped else f"{count} {noun}"


def _pct_diff(value: float, reference: float) -> float:
    return (value / reference - 1.0) * 100.0


def _whole_pct(diff_pct: float) -> int:
    """A percentage in whole percent, halves rounded up as the other figures are (62.5 -> 63),
    first put back on the millionth of a percent: 201 against 200 computes as 0.49999...%."""
    return math.floor(round(abs(diff_pct), 6) + 0.5)


def _against(diff_pct: float, noun_en: str, noun_ar: str) -> tuple[str, str]:
    """'12% above the median' / 'أعلى بنسبة 12% من الوسيط', and 'at the median' / 'عند
    الوسيط' under half a percent (not '0% above')."""
    pct = _whole_pct(diff_pct)
    if pct == 0:
        return f"at the {noun_en}", f"عند {noun_ar}"
    side_en, side_ar = ("below", "أقل") if diff_pct < 0 else ("above", "أعلى")
    said_en = said_ar = f"{pct:,}%"
    if pct == 100 and -100 < diff_pct < 0:  # a price above nothing: "100% below" is free
        said_en, said_ar = "over 99%", "تزيد على 99%"
    return f"{said_en} {side_en} the {noun_en}", f"{side_ar} بنسبة {said_ar} من {noun_ar}"


def _as_written(text: str | None) -> str:
    """A name the user wrote, spaces tidied ('  riyadh ' -> 'riyadh') and without direction
    marks and overrides, which would reorder the sentence around it."""
    return " ".join(_DIRECTION_MARKS.sub("", text or "").split())


_DIRECTION_MARKS = re.compile(f"[{BIDI_CONTROLS}]")


def _official_ar(name: str) -> str:
    """An official Arabic name for a sentence: without tatweel, and without the word for
    district that some registry names start with (حى العزيزية), since the text adds its own."""
    return " ".join(_DISTRICT_WORD.sub("", name.replace("\u0640", "")).split())


_DISTRICT_WORD = re.compile(r"^\s*ح[يى]\s+")


def _place(row: Mapping[str, Any]) -> str:
    """The place for an English sentence: as the user wrote it, or, written in Arabic, by its
    English name where one is known (Al Malqa, Riyadh)."""
    city = _city_en(row)
    if not (row.get("district") and row.get("benchmark_level") == "district"):
        return city
    district_key = row.get("district_key")
    english = english_name(row.get("city_key"), district_key)
    district = _in_english(row.get("district"), english)
    city_names = (_as_written(row.get("city")), english_name(row.get("city_key")))
    if english is not None and (
        "," in district or any(_names_city(district, name) for name in city_names)
    ):
        # written with its city ("Al Malqa, Riyadh", or a third spelling of it after a comma,
        # "Al Malqa, Riyadth"): the city is said once
        district = english
    return f"{district}, {city}"


def _city_en(row: Mapping[str, Any]) -> str:
    return _in_english(row.get("city"), english_name(row.get("city_key")))


def _names_city(district: str, city: str | None) -> bool:
    """Whether a district as written names its city too, as a word of its own (by the city as
    written, or by its English name: "Al Malqa, Riyadh" with the city written الرياض)."""
    return bool(city) and re.search(rf"(?<!\w){re.escape(city)}(?!\w)", district, re.I) is not None


def _in_english(written: str | None, english: str | None) -> str:
    text = _as_written(written)
    return english if english is not None and not text.isascii() else text


def _city_word_ar(city: str) -> str:
    """'مدينة X', unless the name as written begins with the word already (مدينة الملك عبدالله
    الاقتصادية)."""
    return city if city.split(" ", 1)[0] == "مدينة" else f"مدينة {city}"


def _place_ar(row: Mapping[str, Any]) -> str:
    city = _city_ar(row)
    district = row.get("benchmark_district_ar") or row.get("district")
    if district and row.get("benchmark_level") == "district":
        return f"حي {_official_ar(district)} في {city}"
    return f"مدينة {city}"


def _city_ar(row: Mapping[str, Any]) -> str:
    official = row.get("benchmark_city_ar")
    return _official_ar(official) if official else _as_written(row["city"])


def adjusted(row: Mapping[str, Any], name: str) -> float:
    """A benchmark percentile scaled to the property type, as the price bucket uses it and the
    answer reports it."""
    value = type_adjusted_row(row, name)
    assert value is not None  # only asked of a row with a benchmark
    return value


def risk_flags(row: Mapping[str, Any]) -> list[str]:
    flags: list[str] = []
    ppsqm, level = row["price_per_sqm"], row.get("benchmark_level")
    if level is None:
        flags.append("no_benchmark")
    else:
        priced = row["benchmark_median_sqm"] is not None
        if level == "city":  # the location bucket's cut, with or without the type's percentiles
            flags.append("city_level_benchmark")
        if row["benchmark_transaction_count"] < THIN_MARKET_DEEDS:
            flags.append("thin_market")
        if not priced:
            flags.append("no_type_benchmark")
        else:
            if ppsqm > adjusted(row, "p75"):
                flags.append("price_above_p75")
            if ppsqm < FAR_BELOW_MARKET * adjusted(row, "p25"):
                flags.append("price_far_below_market")
        yoy = row.get("benchmark_yoy_pct")
        if yoy is not None and yoy <= FALLING_MARKET_PCT:
            flags.append("falling_market")
    low, high = AREA_RANGE[row["type"]]
    if not low <= row["area"] <= high:
        flags.append("area_unusual_for_type")
    if row["type"] in _BUILT_TYPES:
        age = row.get("age")
        if age is not None and age > OLD_BUILDING_YEARS:
            flags.append("old_building")
        if age is None:
            flags.append("age_unknown")
    return flags


def _benchmark_sentences(
    row: Mapping[str, Any], city_yoy: float | None = None
) -> tuple[list[str], list[str]]:
    ppsqm = row["price_per_sqm"]
    if row.get("benchmark_level") is None:
        return (
            [
                f"No official benchmark exists for {_as_written(row['city'])}: the price "
                f"could not be compared with recorded sales (price per m2 {_sar(ppsqm)} SAR)."
            ],
            [
                f"لا يوجد مؤشر رسمي ل{_city_word_ar(_as_written(row['city']))}، فلم تُقارن قيمة "
                f"العقار بالصفقات المسجلة (سعر المتر {_sar(ppsqm)} ريال)."
            ],
        )
    if row["benchmark_median_sqm"] is None:
        return _no_type_benchmark_sentences(row)
    median, p25, p75 = (adjusted(row, k) for k in ("median", "p25", "p75"))
    against_en, against_ar = _against(_pct_diff(ppsqm, median), "median", "الوسيط")
    if ppsqm <= p25:
        band_en = "at or below the 25th percentile (well priced)"
        band_ar = "عند الربيع الأدنى أو دونه (سعر جيد)"
    elif ppsqm <= p75:
        band_en, band_ar = "between the 25th and 75th percentiles", "بين الربيعين الأدنى والأعلى"
    else:
        band_en = "above the 75th percentile (expensive for the area)"
        band_ar = "فوق الربيع الأعلى (مرتفع للمنطقة)"
    count, year, kind = row["benchmark_transaction_count"], row["benchmark_year"], row["type"]
    factor = row.get("type_factor") or 1.0
    all_deeds = row["benchmark_median_sqm"]
    where_en, where_ar = _factor_where(row)
    en = (
        f"The asking price of {_sar(ppsqm)} SAR per m2 is {against_en} "
        f"of {_sar(median)} SAR/m2 for {_TYPE_EN[kind]} in {_place(row)}, {band_en}. That "
        f"median is the area's median over all {count:,} deeds of {year} "
        f"({_sar(all_deeds)} SAR/m2) times {factor:.3f}, the price level of {_sales_en(kind)} "
        f"against all sales {where_en}."
    )
    ar = (
        f"سعر المتر المطلوب {_sar(ppsqm)} ريال، أي {against_ar} "
        f"البالغ {_sar(median)} ريال للمتر لل{_TYPE_AR[kind][2:]} في {_place_ar(row)}، {band_ar}. "
        f"وهذا الوسيط هو وسيط جميع الصفقات في المنطقة "
        f"({_counted_ar(count, 'صفقة واحدة', 'صفقتان', 'صفقات', 'صفقة')} في {year}، "
        f"{_sar(all_deeds)} ريال للمتر) مضروباً في {factor:.3f}، وهو مستوى أسعار "
        f"{_sales_ar(kind)} مقارنة بجميع الصفقات {where_ar}."
    )
    sentences_en, sentences_ar = [en], [ar]
    yoy = row.get("benchmark_yoy_pct")
    if yoy is not None:
        trend_en = "rose" if yoy >= 0 else "fell"
        trend_ar = "ارتفعت" if yoy >= 0 else "انخفضت"
        # A district's trend that is its city's figure (none published for the district, or
        # the same) is said to be the city's, not the area's.
        citywide = row.get("benchmark_level") == "district" and yoy == city_yoy
        where_en = _city_en(row) if citywide else "the area"
        where_ar = _city_ar(row) if citywide else "المنطقة"
        sentences_en.append(f"Prices in {where_en} {trend_en} {abs(yoy):.1f}% year over year.")
        sentences_ar.append(f"{trend_ar} الأسعار في {where_ar} بنسبة {abs(yoy):.1f}% خلال عام.")
    return sentences_en, sentences_ar


def _no_type_benchmark_sentences(row: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """A place whose deeds, scaled to the row's type, would not describe the type's market
    (`benchmarks.CREDIBLE_BAND`): said so, and the price compared with nothing."""
    kind, count, year = row["type"], row["benchmark_transaction_count"], row["benchmark_year"]
    ppsqm = _sar(row["price_per_sqm"])
    return (
        [
            f"No benchmark exists for {_TYPE_EN[kind]} in {_place(row)}: its {count:,} recorded "
            f"deeds of {year} describe another market than the type's, so the price could not "
            f"be compared with them (price per m2 {ppsqm} SAR)."
        ],
        [
            f"لا يوجد مؤشر لل{_TYPE_AR_PLURAL[kind][2:]} في {_place_ar(row)}: الصفقات "
            f"المسجلة هناك ({_counted_ar(count, 'صفقة واحدة', 'صفقتان', 'صفقات', 'صفقة')} في "
            f"{year}) تصف سوقاً غير سوق هذا النوع، فلم تُقارن قيمة العقار بها "
            f"(سعر المتر {ppsqm} ريال)."
        ],
    )


def _sales_en(kind: str, *, said: bool = False) -> str:
    # No source publishes office sales: offices take the commercial figures (BENCHMARKS.md).
    # `said`: the explanation has said so already.
    if kind == "office":
        return "commercial sales" + " (no figure is published for offices)" * (not said)
    return f"{kind} sales"


def _sales_ar(kind: str, *, said: bool = False) -> str:
    if kind == "office":
        return "العقارات التجارية" + " (لا تُنشر أرقام للمكاتب)" * (not said)
    return _TYPE_AR_PLURAL[kind]


def _factor_where(row: Mapping[str, Any]) -> tuple[str, str]:
    """Where the type factor was measured, in English and Arabic: the benchmark's own area,
    its city or the country (where the area has too few sales of the type)."""
    level = row.get("type_factor_level")
    if level == "national":
        return "in Saudi Arabia", "في المملكة"
    if level == "city" and row.get("benchmark_level") == "district":
        return f"in {_city_en(row)}", f"في مدينة {_city_ar(row)}"
    return "there", "هناك"


def _market_average_sentences(row: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    average = row.get("market_avg_sqm")
    if average is None:
        return [], []
    against_en, against_ar = _against(_pct_diff(row["price_per_sqm"], average), "average", "متوسط")
    level = row.get("market_avg_level")
    where_en = {"district": _place(row), "city": _city_en(row)}.get(level, "Saudi Arabia")
    where_ar = {"district": _place_ar(row), "city": f"مدينة {_city_ar(row)}"}.get(level, "المملكة")
    kind = row["type"]
    said = row.get("benchmark_median_sqm") is not None  # by the benchmark sentence
    return (
        [
            f"It is {against_en} of {_sar(average)} SAR/m2 "
            f"for {_sales_en(kind, said=said)} in {where_en}."
        ],
        [
            f"وهو {against_ar} {_sar(average)} ريال للمتر لصفقات "
            f"{_sales_ar(kind, said=said)} في {where_ar}."
        ],
    )


def _detail_sentences(row: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    en: list[str] = []
    ar: list[str] = []
    age = row.get("age")
    if row["type"] in _BUILT_TYPES and age is not None:
        years = round(age)
        if years == 0:
            en.append("The building is new (under a year old).")
            ar.append("المبنى جديد (أقل من سنة).")
        else:
            en.append(f"The building is {years} year{'s' * (years != 1)} old.")
            ar.append(f"عمر المبنى {_years_ar(years)}.")
    if row.get("parking") is False and row["type"] != "land":
        en.append("No parking is available.")
        ar.append("لا يتوفر موقف للسيارات.")
    return en, ar


_FLAG_TEXT: dict[str, tuple[str, str]] = {
    "no_benchmark": ("no official benchmark for this city", "لا يوجد مؤشر رسمي لهذه المدينة"),
    "city_level_benchmark": (
        "the district is unknown or thinly traded, or its sales do not price this type, so the "
        "city benchmark was used",
        "الحي غير معروف أو قليل الصفقات أو لا تعبّر صفقاته عن هذا النوع فاستُخدم مؤشر المدينة",
    ),
    "no_type_benchmark": (
        "no benchmark for this type here: the recorded sales describe another market",
        "لا يوجد مؤشر لهذا النوع هنا: الصفقات المسجلة تصف سوقاً آخر",
    ),
    "thin_market": ("few recorded sales behind the benchmark", "عدد الصفقات خلف المؤشر قليل"),
    "price_above_p75": ("priced above the 75th percentile", "السعر أعلى من الربيع الأعلى"),
    "price_far_below_market": (
        "price far below the market: check the figures or the title",
        "السعر أدنى بكثير من السوق: تحقق من الأرقام أو من الصك",
    ),
    "falling_market": ("prices in the area are falling", "الأسعار في المنطقة تنخفض"),
    "area_unusual_for_type": ("the area is unusual for this type", "المساحة غير معتادة لهذا النوع"),
    "old_building": ("old building", "مبنى قديم"),
    "age_unknown": ("building age not given", "عمر المبنى غير مذكور"),
}


def _key_factors(row: Mapping[str, Any]) -> list[str]:
    buckets = ("price", "location", "size", "details")
    ranked = sorted(buckets, key=lambda b: abs(row[f"{b}_score"] - 50), reverse=True)
    return [f"{b} {row[f'{b}_score']}/100 ({row[f'{b}_status']})" for b in ranked]


class TemplateReasoner:
    """The default reasoner: sentences filled in from the figures of the row.

    `city_trends`: each city's own price change (`BenchmarkTable.city_trends`), to say whose
    figure a district's trend is when it is its city's."""

    def __init__(self, city_trends: Callable[[], Mapping[str, float]] | None = None) -> None:
        self._city_trends = city_trends

    def explain(self, rows: Sequence[Mapping[str, Any]]) -> list[Explanation]:
        return [self._explain(row) for row in rows]

    def _explain(self, row: Mapping[str, Any]) -> Explanation:
        verdict, score = row["verdict"], row["score"]
        head_en = f"Verdict: {verdict.replace('_', ' ')} (score {score}/100)."
        head_ar = f"الحكم: {_VERDICT_AR[verdict]} (النتيجة {score} من 100)."
        trends = self._city_trends() if self._city_trends is not None else {}
        parts = [
            _benchmark_sentences(row, trends.get(row.get("city_key") or "")),
            _market_average_sentences(row),
            _detail_sentences(row),
        ]
        flags = risk_flags(row)
        en = [head_en] + [s for p in parts for s in p[0]]
        ar = [head_ar] + [s for p in parts for s in p[1]]
        if flags:
            en.append("Risks: " + "; ".join(_FLAG_TEXT[f][0] for f in flags) + ".")
            ar.append("المخاطر: " + "؛ ".join(_FLAG_TEXT[f][1] for f in flags) + ".")
        factors = [parts[0][0][0]] + parts[1][0] + _key_factors(row)
        return Explanation(" ".join(en), " ".join(ar), factors, flags)
