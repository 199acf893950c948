"""Property decisions: the decision engine, the batch pipeline and the HTTP service.

The names a user imports; each is loaded on first use, so `import pipeline` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Engine": "pipeline.engine.engine",
    "BenchmarkTable": "pipeline.engine.benchmarks",
    "DecisionRequest": "pipeline.engine.models",
    "DecisionResponse": "pipeline.engine.models",
    "DecisionDesk": "pipeline.decisions",
    "SqliteLedger": "pipeline.ledger.sqlite",
    "BatchOptions": "pipeline.batch.options",
    "run_batch": "pipeline.batch.run",
    "LocalScorer": "pipeline.batch.scorers.local",
    "HttpScorer": "pipeline.batch.scorers.http",
    "Journal": "pipeline.batch.journal",
    "read_table": "pipeline.io.read",
    "write_output": "pipeline.io.write",
    "PipelineError": "pipeline.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
