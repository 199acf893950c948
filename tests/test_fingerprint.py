"""Request fingerprints are the journal's and the idempotency records' keys: their bytes must
never drift."""

import hashlib
import json

import polars as pl

from pipeline.batch.fingerprint import request_fingerprints
from pipeline.decisions import request_fingerprint
from pipeline.engine.request import parse_request
from pipeline.engine.schema import REQUEST_SCHEMA


def _frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=REQUEST_SCHEMA)


def test_fingerprint_is_sha256_of_the_version_and_the_canonical_cells():
    row = {
        "type": "apartment", "price": 950000.0, "area": 120.5, "bedrooms": 3.0,
        "bathrooms": None, "floor": 2.0, "age": None, "parking": True, "furnished": None,
        "city": "الرياض", "district": "الملقا", "lat": None, "lng": None, "reasoning": False,
    }  # fmt: skip
    cells = [
        "apartment", "950000.0", "120.5", "3.0", "\x00", "2.0", "\x00", "true", "\x00",
        "الرياض", "الملقا", "\x00", "\x00", "false",
    ]  # fmt: skip
    expected = hashlib.sha256(("engine-v1\x1e" + "\x1f".join(cells)).encode()).hexdigest()

    assert request_fingerprints(_frame([row]), "engine-v1").to_list() == [expected]


def test_equal_requests_share_a_fingerprint_and_the_version_separates_them():
    row = {name: None for name in REQUEST_SCHEMA} | {"type": "villa", "price": 2e6, "area": 400.0}
    other = row | {"area": 401.0}
    one = request_fingerprints(_frame([row, row, other]), "a").to_list()
    two = request_fingerprints(_frame([row]), "b").to_list()

    assert one[0] == one[1] != one[2]
    assert two[0] != one[0]


def test_a_batch_charge_is_fingerprinted_by_its_request_fingerprints_in_sending_order():
    # What the ledger entry records: checkable against the batch's journal rows file.
    from pipeline.batch.scorers.local import _fingerprint

    rows = pl.DataFrame({"fingerprint": ["f3", "f1", "f2"]})
    assert _fingerprint(rows) == hashlib.sha256(b"f3\nf1\nf2").hexdigest()


def test_a_service_request_keeps_the_fingerprint_its_idempotency_record_holds():
    # The ledger stores it under the request's Idempotency-Key for 24 hours: a replay after an
    # upgrade is compared with it, and a drift would refuse the same request as another body.
    body = json.dumps(
        {
            "property": {"type": "villa", "price": 2500000, "area": 400.5, "bedrooms": 5},
            "location": {"city": "الرياض", "district": "Al Malqa"},
            "reasoning": True,
            "note": "not a field of the request",
        },
        ensure_ascii=False,
    ).encode()
    request = parse_request(body)

    expected = "847db754f9927c0e2b9cb5ac631732e0872034063c1c5716e5339edb508f42b5"
    assert request_fingerprint(request) == expected
    assert request_fingerprint(request.model_dump()) == expected
