"""The English explanation reads as English: the article fits each property type."""

from __future__ import annotations

import pytest

from pipeline.engine.engine import Engine
from pipeline.engine.request import parse_request


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.default()


@pytest.mark.parametrize(
    ("kind", "phrase"),
    [
        ("apartment", "for an apartment in"),
        ("villa", "for a villa in"),
        ("land", "for land in"),
        ("office", "for an office in"),
        ("commercial", "for a commercial property in"),
    ],
)
def test_the_benchmark_sentence_names_the_type_with_its_article(
    engine: Engine, kind: str, phrase: str
) -> None:
    request = parse_request(
        {
            "property": {"type": kind, "price": 900000, "area": 150},
            "location": {"city": "Riyadh", "district": "Al Malqa"},
            "reasoning": True,
        }
    )
    reasoning_en = engine.evaluate(request)["reasoning"]["reasoning_en"]
    assert phrase in reasoning_en
