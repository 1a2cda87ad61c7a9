"""Where a stage writes: checked before it starts, and a failed write told in words.

``check_output_dir(run_dir)`` runs before anything is built: the folder must be a folder (not a
file) and writable (probed with a temp file in it, or in its nearest existing parent when it does
not exist yet: nothing is created). ``write_failure(error, path)`` turns an ``OSError`` of a write
(a full disk, a read-only folder) into an ``OutputError`` that names the file and the fix;
``write_error(exception)`` finds that ``OSError`` behind what a writer library raises instead.
"""

from __future__ import annotations

import errno
import os
import re
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


#: torch.save's zip writer (``inline_container.cc``) on a full disk
ZIP_WRITE_FAILED = ("file write failed", "unexpected pos")
#: a Rust writer's I/O error (safetensors: ``I/O error: No space left on device (os error 28)``)
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def write_error(error: BaseException) -> OSError | None:
    """The user-caused ``OSError`` behind a failed save, else None: an ``OSError`` itself, torch's
    ``RuntimeError`` from its zip writer (what a full disk looks like from inside torch.save), or
    an error whose message carries a Rust ``(os error N)`` (safetensors' ``SafetensorError``)."""
    if isinstance(error, OSError):
        return error if error.errno in USER_ERRNOS else None
    if isinstance(error, RuntimeError) and any(s in str(error) for s in ZIP_WRITE_FAILED):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    match = RUST_OS_ERROR.search(str(error)) if isinstance(error, Exception) else None
    if match and int(match.group(1)) in USER_ERRNOS:
        code = int(match.group(1))
        return OSError(code, os.strerror(code))
    return None


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
