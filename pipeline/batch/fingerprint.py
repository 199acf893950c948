"""Stable fingerprints of normalised requests: equal requests, equal fingerprints, on any run.

sha256 over a canonical text of the request columns and the scorer's version, so a result
stored by one run is reused by the next only when both the request and the formulas/benchmarks
(or the remote service) are the same. Not a polars hash: that is not stable across versions,
and a library upgrade must not make a customer pay again.
"""

from __future__ import annotations

import hashlib

import polars as pl

from pipeline.engine.schema import REQUEST_SCHEMA

_NULL = "\x00"


def canonical_text(frame: pl.DataFrame) -> pl.Series:
    return frame.select(
        pl.concat_str(
            [pl.col(c).cast(pl.String).fill_null(_NULL) for c in REQUEST_SCHEMA], separator="\x1f"
        )
    ).to_series()


def request_fingerprints(frame: pl.DataFrame, version: str) -> pl.Series:
    prefix = version.encode() + b"\x1e"
    digests = [hashlib.sha256(prefix + text.encode()).hexdigest() for text in canonical_text(frame)]
    return pl.Series("fingerprint", digests, dtype=pl.String)
