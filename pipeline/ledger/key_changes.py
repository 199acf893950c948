"""How a running server learns that a key it remembers was revoked, for one stat() a request.

A server remembers who each key it has seen belongs to: looking it up again costs about 25 us
a request under load (every charge that another connection commits empties the reading
connection's page cache, so the lookup reads its pages again), a twentieth of a request's time
at concurrency 8. A revocation (`SqliteAccounts.revoke_key`, in any process) appends a byte to
a file beside the ledger once it is committed; a server compares the file's stamp (device,
inode, size, modification and change times) with what it was when it looked the key up, and
looks it up again when they differ. The stamp is taken before the lookup, so a revocation
committed during the lookup is seen by the next request. The change time is in the stamp as
no one can set it back: a file deleted and made again can reuse the inode (ext4 does at once),
and one copied back in place from a backup keeps it, each with the size it had when a server
last looked (QA 72).

A change made another way (SQL by hand, a backup restored) is seen once the remembered answer
is `REMEMBERED_S` old; a revocation whose byte could not be written waits that long before it
returns (see `SqliteAccounts.revoke_key`).

The file takes the ledger's permissions (and, made by root, its owner), as SQLite gives the
ledger's `-wal` and `-shm`: whoever may revoke a key in the ledger may also append to it. Like
those, it is never opened through a link (a link planted there would have a revocation run by
root append to, or `key list` make, the file it points at), nor if it is not a plain file (a
FIFO would hold every command that opens the ledger's accounts).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

REMEMBERED_S = 1.0

# (device, inode, size, mtime_ns, ctime_ns) of the file; None while there is none
Stamp = tuple[int, int, int, int, int] | None

_OPEN_FLAGS = (
    os.O_WRONLY
    | os.O_APPEND
    | os.O_CREAT
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


class KeyChanges:
    """The file `<ledger>-keys`, made (empty) as the store opens: looking at a file that is
    not there costs an exception, three times the stat() of one that is."""

    def __init__(self, ledger: Path) -> None:
        # Resolved: a server and a command that name the ledger through different links
        # share one file.
        resolved = ledger.resolve()
        self.path = str(resolved.with_name(resolved.name + "-keys"))
        self._ledger = str(resolved)
        self._append(b"")

    def stamp(self) -> Stamp:
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        return (
            status.st_dev,
            status.st_ino,
            status.st_size,
            status.st_mtime_ns,
            status.st_ctime_ns,
        )

    def signal(self) -> OSError | None:
        """Record that a key changed: None once done, else why the file could not be written
        (servers then see the change only once their answers are REMEMBERED_S old)."""
        return self._append(b".")

    def _append(self, data: bytes) -> OSError | None:
        try:
            descriptor = os.open(self.path, _OPEN_FLAGS, 0o644)
        except OSError as exc:
            return exc
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):
                return OSError(f"{self.path} is not a plain file")
            if status.st_size == 0:  # made now (or never written): as SQLite makes its -wal
                self._take_ledger_permissions(descriptor, status)
            if data:
                os.write(descriptor, data)
        except OSError as exc:
            return exc
        finally:
            os.close(descriptor)
        return None

    def _take_ledger_permissions(self, descriptor: int, status: os.stat_result) -> None:
        if os.name != "posix":
            return
        try:
            ledger = os.stat(self._ledger)
        except OSError:
            return
        mode = stat.S_IMODE(ledger.st_mode) & 0o666
        try:
            if stat.S_IMODE(status.st_mode) != mode:
                os.fchmod(descriptor, mode)  # whatever the umask of the process that made it
            if os.geteuid() == 0 and (status.st_uid, status.st_gid) != (
                ledger.st_uid,
                ledger.st_gid,
            ):
                os.fchown(descriptor, ledger.st_uid, ledger.st_gid)
        except OSError:
            pass  # not its owner: left as it is
