"""`make bench`: every benchmark, or the ones named (engine, batch, journal, service, remote)."""

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
unknown = [name for name in wanted if name not in SECTIONS]
if unknown:
    names = ", ".join(map(repr, unknown))
    sys.exit(f"bench: no section {names}; the sections: {', '.join(SECTIONS)}")
for name in wanted:
    import_module(SECTIONS[name]).run()
    print()
