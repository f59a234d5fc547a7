"""Files forkpoint writes for the user outside a store (reports, exports, pages): owner-only, and
whole or not at all."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .patterns import compiled_later

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def lock_held(path: Path) -> bool | None:
    """Whether a process holds a flock(2) on the file at ``path`` (asked by taking it exclusively
    without waiting, and letting it go); None when there is no such file to open."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def write_private(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` with mode 0600 whatever the umask, atomically (see
    :func:`private_file`). Returns ``path``. Raises ``OSError``; ``path`` is left as it was."""
    with private_file(path) as f:
        f.write(data)
    return Path(path)


@contextmanager
def private_file(path: str | Path) -> Iterator[BinaryIO]:
    """A file to write ``path`` through, piece by piece, with mode 0600 whatever the umask: a new
    temporary file in the same folder (created exclusively, never through a symlink), renamed over
    ``path`` (a symlink there is replaced, not followed) when the block ends without an exception.
    Raises ``OSError``; on any exception the temporary file is removed and ``path`` left as it was.

    A device or a pipe at ``path`` (``/dev/null``, ``/dev/stdout``, a FIFO of this user's) is
    written to as it is: renamed over, a device file was replaced by a regular one (``/dev/null``
    itself, for root), and what a reader waited on never came."""
    path = Path(path)
    if _stream_target(path):  # (appending: a descriptor's file a shell opened with >> is not overwritten)
        with open(os.open(path, os.O_WRONLY | os.O_APPEND), "wb") as f:
            yield f
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with open(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # the umask may have taken the owner's bits too
            yield f
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename is None and exc.strerror:  # (a write that failed: a full disk, ulimit -f)
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


#: A process's open descriptors by name: ``/dev/stdout`` is a link to ``/proc/self/fd/1``, which
#: links to whatever the shell opened (a regular file, under ``> out.json``).
_DESCRIPTOR = compiled_later(r"/dev/(?:stdout|stderr|fd/\d+)|/proc/(?:self|thread-self|\d+)/fd/\d+")


def _stream_target(path: Path) -> bool:
    """Whether ``path`` names one of this process's descriptors, or is (or links to) a character
    device (``/dev/null``, a terminal) or a FIFO this user owns (a shell's pipe): what is written
    to, not replaced (renamed over, ``/dev/stdout`` itself became a regular file, for root).
    Another user's FIFO is not (it may have been put in a shared folder to read what forkpoint
    writes)."""
    import stat

    if _DESCRIPTOR.fullmatch(os.path.abspath(path)):
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) or (stat.S_ISFIFO(st.st_mode) and st.st_uid == os.getuid())


def private_dirs(path: str | Path) -> Path:
    """Create the folder ``path`` and each missing folder above it owner-only (0700, whatever the
    umask: ``mkdir(parents=True)`` gives the folders above the default mode). Returns ``path``."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.is_dir()]
    for p in reversed(missing):
        p.mkdir(mode=0o700, exist_ok=True)
    return path


def user_temp_dir(name: str) -> Path:
    """This user's folder ``NAME-UID`` of the temporary folder (created on first use): ``0700``, owned
    by the user and not a symlink. The temporary folder is shared, so another user may have made a
    folder or a link of that name first, to read or swap what forkpoint puts there: such a folder is
    refused. Raises ``OSError`` naming the folder (``PermissionError`` when it is not this user's)."""
    import stat
    import tempfile

    folder = Path(tempfile.gettempdir()) / f"{name}-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise PermissionError(f"{folder} is not a folder of this user's (a symlink, or another user's)")
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)  # made before under a looser umask
    return folder


def exchange_dirs(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` atomically. False when the system cannot (then nothing moved)."""
    import ctypes
    import ctypes.util
    import errno

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")


def scratch_dir(
    owner: object, prefix: str, where: str | None = None
) -> tuple[Path, weakref.finalize[[str, int], object]]:
    """A new private folder (0700) in ``where`` (default: the temporary folder), and the finalizer
    that removes it (call it to remove the folder now), run when ``owner`` is collected or the
    process exits. It removes the folder in this process only: a child forked from it (a recorded
    program may fork, and the child exit normally) runs its copy of the finalizer too, and would
    otherwise remove a folder the parent goes on using."""
    import tempfile  # (here: it imports shutil, see copy_dir_into_place)

    path = tempfile.mkdtemp(prefix=prefix, dir=where)
    return Path(path), weakref.finalize(owner, _remove_own_dir, path, os.getpid())


def _remove_own_dir(path: str, pid: int) -> None:
    if os.getpid() == pid:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


def copy_dir_into_place(
    source: Path, target: Path, leave_out: Callable[[str, list[str]], list[str]] | None = None
) -> Path:
    """Copy the directory ``source`` to ``target``, replacing a directory there whole or not at all:
    the copy is made beside ``target`` first, the old one moved aside, the copy renamed into place,
    and only then the old one removed. ``leave_out(folder, names)``: of the ``names`` in ``folder``
    (relative to ``source``, ``""`` for itself), those not to copy. Returns ``target``. Raises
    ``OSError`` (``ValueError`` when ``source`` is ``target``, or inside it); ``target`` is then
    left as it was."""
    import shutil  # (here: every recording process imports this module, and shutil costs 1 ms)

    source, target = Path(source), Path(target)
    if target.exists() and source.resolve().is_relative_to(target.resolve()):
        raise ValueError(f"{target}: cannot be replaced by a copy of {source}, which is inside it")
    tag = f"{os.getpid()}.{os.urandom(4).hex()}"
    new, aside = target.with_name(f".{target.name}.new-{tag}"), target.with_name(f".{target.name}.old-{tag}")
    try:
        ignore = None
        if leave_out is not None:

            def ignore(folder: str, names: list[str]) -> list[str]:
                rel = os.path.relpath(folder, source)
                return leave_out("" if rel == "." else rel, names)

        try:
            shutil.copytree(source, new, symlinks=True, ignore=ignore)
        except shutil.Error as exc:  # (every file that failed, in a list: the first one, said)
            src, _, why = exc.args[0][0]
            raise OSError(0, f"cannot copy {src} there: {why}", str(target)) from None
        if target.exists():
            os.rename(target, aside)
        try:
            os.rename(new, target)
        except BaseException:
            if aside.exists():
                os.rename(aside, target)
            raise
    finally:
        shutil.rmtree(new, ignore_errors=True)
    if aside.is_symlink():  # (a link the target was: removed, never what it names; rmtree refuses it)
        aside.unlink()
    shutil.rmtree(aside, ignore_errors=True)
    return target
