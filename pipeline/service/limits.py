"""How long a request may take to arrive and how many connections may be open (see
`connections`), and the file descriptors that many connections need."""

from __future__ import annotations

import resource
from dataclasses import dataclass

from pipeline.errors import UsageError

HEAD_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
# Under the default `ulimit -n` of 1024: these, up to 32 more being turned away, the sockets
# asyncio accepts before their protocol sees them (up to BACKLOG a wake-up, a few wake-ups) and
# the ledger's own files stay under 1024 (a flood of 2,000 connections: 718 at most).
MAX_CONNECTIONS = 512
TURNING_AWAY_MAX = 32
BACKLOG = 128
# Beyond the connections: the listening socket, the ledger's database, WAL and shared-memory
# files for each thread, the standard streams, the interpreter's own (measured: 17 at rest).
OWN_DESCRIPTORS = 64


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    head_timeout_s: float = HEAD_TIMEOUT_S
    request_timeout_s: float = REQUEST_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS


DEFAULT_LIMITS = ConnectionLimits()


def descriptors_needed(max_connections: int) -> int:
    return max_connections + TURNING_AWAY_MAX + BACKLOG + OWN_DESCRIPTORS


def allow_descriptors_for(max_connections: int) -> None:
    """Raise the process's soft limit on open files as far as `max_connections` needs (up to
    the hard limit); UsageError if the hard limit is too low. Past the limit, accepting a
    connection fails (EMFILE) and every client is locked out, which the connection limit is
    there to prevent."""
    needed = descriptors_needed(max_connections)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise UsageError(
            f"--max-connections {max_connections} needs {needed} file descriptors, and this "
            f"process may open at most {hard} (`ulimit -Hn`): lower --max-connections to "
            f"{max(hard - descriptors_needed(0), 1)} or raise the limit"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
