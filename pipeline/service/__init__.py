"""The HTTP decision service: POST /v1/decisions over the engine, the ledger and the accounts."""

from pipeline.service.app import create_app
from pipeline.service.errors import ApiError

__all__ = ["ApiError", "create_app"]
