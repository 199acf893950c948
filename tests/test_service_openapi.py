"""The served OpenAPI document, and schemathesis fuzzing the real server from it."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from pipeline.engine.engine import Engine
from tests.test_service_fixtures import Service, start_service

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("openapi")
    yield from start_service(tmp, Engine.default(), balance=1_000_000)


def test_document_names_every_status_and_body(live: Service) -> None:
    document = httpx.get(f"{live.url}/openapi.json").json()
    operation = document["paths"]["/v1/decisions"]["post"]
    assert set(operation["responses"]) == {
        "200", "400", "401", "402", "408", "409", "413", "415", "422", "429", "431", "500", "501",
        "503"
    }  # fmt: skip
    schemas = document["components"]["schemas"]
    assert {"DecisionRequest", "DecisionResponse", "ErrorBody", "Property", "Location"} <= set(
        schemas
    )
    assert schemas["DecisionRequest"]["required"] == ["property", "location", "reasoning"]
    error = schemas["ErrorBody"]
    assert error["required"] == ["error", "message"]
    assert error["properties"]["field"]["type"] == "string"  # absent when not said, not null
    assert error["properties"]["balance"]["type"] == "integer"
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for scores in (schemas["DecisionResponse"], schemas["Bucket"]):  # the spec: 0 to 100
        assert (
            scores["properties"]["score"] | {"minimum": 0, "maximum": 100}
            == scores["properties"]["score"]
        )
    assert "/_bench/bare" not in document["paths"]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_fuzz_no_5xx_and_responses_match_the_schema(live: Service, mode: GenerationMode) -> None:
    # schemathesis' pytest plugin (`@schema.parametrize`) does not run under pytest 9, so its
    # strategy drives a plain hypothesis test here, against the document the server serves.
    schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
    operation = schema["/v1/decisions"]["POST"]
    authorized = {"Authorization": f"Bearer {live.key}"}
    statuses: Counter[int] = Counter()

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    def fuzz(case: schemathesis.Case) -> None:
        # A request the document allows is accepted: its rules are the service's rules (with
        # an Idempotency-Key of its own: a key sent again with another body is refused).
        checks, headers = CHECKS, authorized
        if mode is GenerationMode.POSITIVE:
            checks = [*CHECKS, positive_data_acceptance]
            headers = {**authorized, "Idempotency-Key": uuid.uuid4().hex}
        response = case.call_and_validate(base_url=live.url, headers=headers, checks=checks)
        statuses[response.status_code] += 1

    fuzz()
    assert statuses, "no request was sent"
    if mode is GenerationMode.POSITIVE:
        assert statuses[200] > 0, statuses
