"""The 200 body of the real engine over HTTP: the spec's fields and JSON types."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.engine.engine import Engine
from pipeline.engine.models import DecisionResponse
from tests.test_service_fixtures import Service, body, start_service


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from start_service(tmp_path_factory.mktemp("real"), Engine.default(), balance=20)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def test_scoring_only_body(real: Service) -> None:
    before = real.balance()
    response = real.post(body(location={"city": "الرياض", "district": "الملقا"}))
    assert response.status_code == 200, response.text
    payload = response.json()
    DecisionResponse.model_validate(payload)
    assert set(payload) == {
        "verdict", "score", "breakdown", "price_per_sqm", "benchmark",
        "decisions_used", "decisions_remaining",
    }  # fmt: skip
    assert payload["verdict"] in ("match", "partial", "no_match")
    assert _number(payload["score"]) and 0 <= payload["score"] <= 100
    assert set(payload["breakdown"]) == {"price", "location", "size", "details"}
    for bucket in payload["breakdown"].values():
        assert _number(bucket["score"]) and bucket["status"] in ("pass", "warn", "fail")
    assert payload["price_per_sqm"] == pytest.approx(900000 / 150)
    benchmark = payload["benchmark"]
    assert benchmark is None or {"median_sqm", "p25_sqm", "p75_sqm", "year"} <= set(benchmark)
    assert (payload["decisions_used"], payload["decisions_remaining"]) == (1, before - 1)


def test_reasoning_body(real: Service) -> None:
    before = real.balance()
    payload = real.post(body(reasoning=True)).json()
    DecisionResponse.model_validate(payload)
    reasoning = payload["reasoning"]
    assert isinstance(reasoning["reasoning_en"], str) and reasoning["reasoning_ar"]
    assert isinstance(reasoning["key_factors"], list) and isinstance(reasoning["risk_flags"], list)
    assert (payload["decisions_used"], payload["decisions_remaining"]) == (3, before - 3)


def test_unknown_city_has_a_null_benchmark(real: Service) -> None:
    payload = real.post(body(location={"city": "Atlantis"})).json()
    assert payload["benchmark"] is None
    assert 0 <= payload["score"] <= 100
