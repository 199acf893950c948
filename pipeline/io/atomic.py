"""Write a file under a temporary name beside its destination and rename it into place.

A crash or an error mid-way never leaves a half-written file under the final name, and an
existing file there stays as it was until the new one is complete. The rename is `os.replace`,
atomic on POSIX and on Windows within one volume, which is why the temporary file lives in the
destination's own directory.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from pipeline.errors import OutputError, UsageError

__all__ = ["atomic_path", "fsync_path", "scratch_dir"]


def describe_os_error(path: Path, exc: OSError) -> OutputError:
    """Our error for an OS failure on `path`, with what to try."""
    reason = exc.strerror or str(exc)
    hint = ""
    if isinstance(exc, PermissionError):
        hint = "; close the file if it is open in Excel or another program, and check permissions"
    elif isinstance(exc, IsADirectoryError):
        hint = "; the output path is a directory, give a file name"
    elif isinstance(exc, NotADirectoryError | FileExistsError):
        hint = "; a part of the output path is a file, not a directory"
    return OutputError(f"{path}: cannot write the output ({reason}){hint}")


NAME_MAX_BYTES = 255  # of a file name, on the file systems in use (ext4, XFS, APFS, NTFS)
PATH_MAX_BYTES = 4096
# What the temporary names below add to the output's (".NAME.<12 hex>.probe" and the like)
TEMPORARY_NAME_BYTES = 24


def check_name_fits(path: Path) -> None:
    """UsageError for an output whose name (with the temporary names' additions) or whole path
    is longer than a file system takes."""
    name = len(os.fsencode(path.name))
    if name + TEMPORARY_NAME_BYTES > NAME_MAX_BYTES:
        raise UsageError(
            f"{path}: its name is too long ({name} bytes; a file name holds {NAME_MAX_BYTES}, "
            f"{TEMPORARY_NAME_BYTES} of which the writer's temporary file needs); nothing was "
            "charged. Choose a shorter output name (-o)"
        )
    whole = len(os.fsencode(path.absolute()))
    if whole + TEMPORARY_NAME_BYTES > PATH_MAX_BYTES:
        raise UsageError(
            f"the output path is too long ({whole:,} bytes; a path holds {PATH_MAX_BYTES:,}); "
            "nothing was charged. Choose a shorter output (-o)"
        )


def check_writable(path: Path) -> None:
    """UsageError if no file can be made where `path` goes: in its folder, or in the nearest
    folder above it that exists (where its folders would be made), or a file stands in the
    way. Said before anything is charged; found only at the end, it left a night paid for and
    nothing delivered."""
    folder = next((p for p in Path(path).parents if p.exists()), None)
    if folder is None:
        return
    if not folder.is_dir():
        raise UsageError(f"{path}: cannot be written: {folder} is a file, not a folder")
    probe = folder / f".{Path(path).name}.{uuid.uuid4().hex[:12]}.probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as exc:
        raise UsageError(
            f"{path}: cannot be written: no file can be made in {folder} "
            f"({exc.strerror or exc}); nothing was charged. Check the folder's permissions, "
            "or choose another output (-o)"
        ) from exc
    _remove_quietly(probe)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; when the block ends cleanly, move it onto `path`.

    Parent directories are created. On any exception the temporary file is removed and the
    destination is left untouched; an `OSError` becomes `OutputError` naming `path`.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        # Created here (mode 0o666 less the umask) so the final file gets ordinary permissions;
        # the writer then overwrites it.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise describe_os_error(path, exc) from exc
    except BaseException:
        _remove_quietly(tmp)
        raise


@contextlib.contextmanager
def scratch_dir(path: Path) -> Iterator[Path]:
    """A hidden working directory beside `path` for a writer's parts, always removed after.

    Beside the output rather than in the system temp directory: an XLSX's uncompressed sheet
    can be several times the size of the file, and /tmp is often a small RAM disk.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".parts", dir=path.parent))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


# A temporary file or parts folder of an output untouched for this long belongs to a writer
# that died (killed, SIGKILL after a cron timeout): no workbook takes hours to write.
STALE_AFTER_S = 6 * 3600
# After ".NAME.": what atomic_path and check_writable add (12 hex digits, .tmp or .probe), and
# scratch_dir's mkdtemp (8 of its letters, digits and _, then .parts)
_TEMPORARY_NAME = r"(?:[0-9a-f]{12}\.(?:tmp|probe)|[a-z0-9_]{8}\.parts)"


def remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files and parts folders an earlier writer of `path` left behind
    when it was killed before it could (SIGKILL): an XLSX's parts are about its size again."""
    now = time.time()
    ours = re.compile(re.escape(f".{path.name}.") + _TEMPORARY_NAME)
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*"):
        if not ours.fullmatch(leftover.name):
            continue  # not named as this writer names its temporaries
        with contextlib.suppress(OSError):
            if now - leftover.stat().st_mtime < STALE_AFTER_S:
                continue
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink()


def fsync_path(path: Path) -> None:
    """A file's bytes, or a folder's entries (a rename in it), made durable: they survive a
    power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
