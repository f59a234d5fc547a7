"""Files forkpoint writes for the user outside a store (reports, exports, pages): owner-only, and
whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` with mode 0600 whatever the umask, atomically: a new temporary file
    in the same folder (created exclusively, never through a symlink), renamed over ``path`` (a
    symlink there is replaced, not followed). Returns ``path``. Raises ``OSError``; the temporary
    file is removed and ``path`` left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with open(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # the umask may have taken the owner's bits too
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
