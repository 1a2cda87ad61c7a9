"""Where a stage writes: checked before it starts, and a failed write told in words.

``check_output_dir(run_dir)`` runs before anything is built: the folder must be a folder (not a
file) and writable (probed with a temp file in it, or in its nearest existing parent when it does
not exist yet: nothing is created). ``write_failure(error, path)`` turns an ``OSError`` of a write
(a full disk, a read-only folder) into an ``OutputError`` that names the file and the fix.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from toolbox.core.errors import OutputError

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
DENIED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
IN_THE_WAY = frozenset({errno.EEXIST, errno.ENOTDIR})
#: errnos a user causes (where they point a run), told as one line instead of a traceback
USER_ERRNOS = FULL | DENIED | IN_THE_WAY


def describe(error: OSError, path: str | Path) -> str:
    """One line naming the file that could not be written, why, and the fix."""
    target = error.filename or path
    if error.errno in FULL:
        return (
            f"{target}: no space left on the device; free some space or write the run elsewhere (--out DIR)."
        )
    if error.errno in DENIED:
        return (
            f"{target}: cannot write here ({error.strerror}); choose a folder you can write to "
            "(--out DIR) or change its permissions."
        )
    if error.errno in IN_THE_WAY:
        return f"{target}: a file is in the way ({error.strerror}); remove it or choose another --out."
    return f"{target}: {error.strerror or error}."


def write_failure(error: OSError, path: str | Path) -> OutputError:
    return OutputError(describe(error, path))


def check_output_dir(path: str | Path, what: str = "run_dir (--out)") -> None:
    """Fail now, with the fix, if ``path`` cannot become a folder this process writes into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(
            f"{what}: {path} is a file, not a folder; name a folder for the outputs (it is created)."
        )
    probe_in = path
    while not probe_in.exists():
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        raise OutputError(f"{what}: {probe_in} is a file, so {path} cannot be a folder; choose another path.")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=probe_in)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputError(f"{what}: {describe(OSError(e.errno, e.strerror), probe_in)}") from None
