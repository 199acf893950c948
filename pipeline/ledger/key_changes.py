"""How a running server learns that a key it remembers was revoked, for one stat() a request.

A server remembers who each key it has seen belongs to: looking it up again costs about 25 us
a request under load (every charge that another connection commits empties the reading
connection's page cache, so the lookup reads its pages again), a twentieth of a request's time
at concurrency 8. A revocation (`SqliteAccounts.revoke_key`, in any process) appends a byte to
a file beside the ledger once it is committed; a server compares the file's identity and size
with what they were when it looked the key up, and looks it up again when they differ. The
stamp is taken before the lookup, so a revocation committed during the lookup is seen by the
next request.

A change made another way (SQL by hand, a backup restored) or a revocation whose byte could
not be written is seen once the remembered answer is `REMEMBERED_S` old.
"""

from __future__ import annotations

import os
from pathlib import Path

REMEMBERED_S = 1.0

Stamp = tuple[int, int] | None  # (inode, size) of the file; None while there is none


class KeyChanges:
    """The file `<ledger>-keys`, made (empty) as the store opens: looking at a file that is
    not there costs an exception, three times the stat() of one that is."""

    def __init__(self, ledger: Path) -> None:
        # Resolved: a server and a command that name the ledger through different links
        # share one file.
        resolved = ledger.resolve()
        self.path = str(resolved.with_name(resolved.name + "-keys"))
        self._append(b"")

    def stamp(self) -> Stamp:
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        return (status.st_ino, status.st_size)

    def signal(self) -> bool:
        """Record that a key changed; False if the file could not be written (servers then
        see the change within REMEMBERED_S)."""
        return self._append(b".")

    def _append(self, data: bytes) -> bool:
        try:
            with open(self.path, "ab") as changes:
                changes.write(data)
        except OSError:
            return False
        return True
