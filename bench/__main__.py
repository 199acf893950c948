"""`make bench`: every benchmark, or the ones named (engine, batch, service)."""

import sys
from importlib import import_module

SECTIONS = {
    "engine": "bench.bench_engine",
    "batch": "bench.bench_batch",
    "journal": "bench.bench_journal",
    "service": "bench.bench_service",
    "remote": "bench.bench_remote",
}

wanted = sys.argv[1:] or list(SECTIONS)
for name in wanted:
    import_module(SECTIONS[name]).run()
    print()
