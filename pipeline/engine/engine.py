"""The decision engine: market benchmarks, scoring and reasoning over a request frame.

No balance here: charging is the ledger's job (`pipeline.decisions`). The batch path calls
`score` on a whole validated frame (polars expressions); the single-request path calls
`evaluate`, which runs the same formulas over one row in plain Python (see `scoring`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

import polars as pl

from pipeline.engine.benchmarks import BenchmarkTable, attach_benchmarks, attached_row
from pipeline.engine.reasoning import Explanation, Reasoner, TemplateReasoner
from pipeline.engine.rules import first_violation
from pipeline.engine.schema import BENCHMARK_FIELDS
from pipeline.engine.scoring import reported_percentiles_row, score_frame, score_row
from pipeline.errors import RequestValidationError

if TYPE_CHECKING:  # pydantic's models cost a batch run 0.15 s to import and it needs none
    from pipeline.engine.models import DecisionRequest

# Bump when a formula or threshold changes: stored results of another version are stale.
# 2: the benchmark's percentiles are reported scaled to the property type.
# 3: a benchmark scaled to the type stands for it only where it can describe the type's market
#    (benchmarks.CREDIBLE_BAND, HOME_FLOOR): else the city's, else none.
FORMULA_VERSION = "3"


class Engine:
    def __init__(self, benchmarks: BenchmarkTable, reasoner: Reasoner | None = None) -> None:
        """`benchmarks`: the tables (`BenchmarkTable.read`, whose lookups a rerun answered
        from the journal never builds, or `load`)."""
        self.benchmarks = benchmarks
        self.reasoner: Reasoner = reasoner or TemplateReasoner(lambda: self.benchmarks.city_trends)
        # `evaluate` is pure computation in microseconds (formulas, dict look-ups, templates):
        # the service may run it on its event loop. A reasoner that calls out (a language
        # model) makes it slow, and the service then runs it in a worker thread.
        self.inline = isinstance(self.reasoner, TemplateReasoner)

    @classmethod
    def default(cls) -> Engine:
        return cls(BenchmarkTable.default())

    @cached_property
    def version(self) -> str:
        """Formula and benchmark version; part of every result's fingerprint."""
        return f"formula-{FORMULA_VERSION}+benchmarks-{self.benchmarks.version}"

    def score(self, requests: pl.DataFrame) -> pl.DataFrame:
        """Valid request rows in, the same rows out with benchmark and score columns added."""
        return score_frame(attach_benchmarks(requests, self.benchmarks))

    def explain(self, scored: pl.DataFrame) -> list[Explanation]:
        return self.reasoner.explain(scored.to_dicts())

    def evaluate(
        self, request: DecisionRequest, *, checked_row: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The response body of one request, without the two balance fields; raises
        RequestValidationError for an invalid request. `checked_row`: the request's row
        (`request_row`) that the caller has already checked, so it is not checked twice."""
        row = checked_row
        if row is None:
            from pipeline.engine.request import request_row

            row = request_row(request)
            rule = first_violation(row)
            if rule is not None:
                raise RequestValidationError(rule.field, rule.message)
        row = dict(row)
        row |= attached_row(row["city"], row["district"], row["type"], self.benchmarks)
        row |= score_row(row)
        explanation = self.reasoner.explain([row])[0] if request.reasoning else None
        return decision_body(row, explanation)


def benchmark_body(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The spec's `benchmark` object of a scored row, its percentiles scaled to the type; None
    without a benchmark, or without one that stands for the type (`CREDIBLE_BAND`)."""
    if row.get("benchmark_median_sqm") is None:
        return None
    reported = {**row, **reported_percentiles_row(row)}
    return {name: reported[f"benchmark_{name}"] for name in BENCHMARK_FIELDS}


def decision_body(row: Mapping[str, Any], explanation: Explanation | None) -> dict[str, Any]:
    """The spec's response body (section 2.2) from a scored row, balance fields excluded."""
    body: dict[str, Any] = {
        "verdict": row["verdict"],
        "score": row["score"],
        "breakdown": {
            bucket: {"score": row[f"{bucket}_score"], "status": row[f"{bucket}_status"]}
            for bucket in ("price", "location", "size", "details")
        },
        "price_per_sqm": row["price_per_sqm"],
        "benchmark": benchmark_body(row),
    }
    if explanation is not None:
        body["reasoning"] = {
            "reasoning_en": explanation.reasoning_en,
            "reasoning_ar": explanation.reasoning_ar,
            "key_factors": explanation.key_factors,
            "risk_flags": explanation.risk_flags,
        }
    return body
