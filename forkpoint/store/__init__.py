"""Where sessions live: a store (a local directory, or any fsspec URL), its index, and finding a
session by path, id, prefix, name or ``last``.

A store is named by ``--store``, ``$FORKPOINT_STORE`` or defaults to ``./.forkpoint``:

* a directory path (or a ``file://`` URL): sessions are written there directly (``O_APPEND`` +
  ``flock``, see ``docs/format.md``): :class:`~forkpoint.store.local.LocalStore`;
* any other fsspec URL (``s3://bucket/prefix``, ``memory://…``): sessions are recorded into a local
  *mirror* directory (under ``$FORKPOINT_CACHE``, ``$XDG_CACHE_HOME/forkpoint`` or
  ``~/.cache/forkpoint``) and uploaded when they end; reading one downloads it into the same mirror:
  :class:`~forkpoint.store.fsspec.RemoteStore`, ``docs/store.md``.

Both implement :class:`~forkpoint.store.base.Store`; every session is written through
:meth:`Store.create`, which owns its life cycle (:class:`~forkpoint.store.base.Recording`).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import SessionError
from ..log import LOG_NAME
from ..patterns import compiled_later
from .base import (
    NAME_RULE,
    REMOTE_MARKER,
    Listing,
    Recording,
    SessionInfo,
    Store,
    entry_mismatch,
    info,
    name_problem,
    summarize_log,
)
from .index import ENTRIES, INDEX_DIR, IndexState, consolidate, read_index
from .local import LocalStore, session_dirs

#: Default store, relative to the current directory, unless ``FORKPOINT_STORE`` is set.
DEFAULT_STORE = ".forkpoint"
#: Set (to anything but 0) to accept a store another user owns or may write (``--allow-shared-store``).
ALLOW_SHARED_VAR = "FORKPOINT_ALLOW_SHARED_STORE"
_URL = compiled_later(r"^[A-Za-z][A-Za-z0-9+.-]*://")

__all__ = [
    "ALLOW_SHARED_VAR",
    "DEFAULT_STORE",
    "ENTRIES",
    "INDEX_DIR",
    "IndexState",
    "Listing",
    "LocalStore",
    "NAME_RULE",
    "Recording",
    "SessionInfo",
    "Store",
    "check_private",
    "consolidate",
    "default_store",
    "index_problem",
    "info",
    "is_store",
    "is_url",
    "list_sessions",
    "name_problem",
    "open_store",
    "read_index",
    "resolve",
    "session_dirs",
    "session_finished",
    "store_dir",
    "store_of",
    "summarize_log",
]


def is_url(spec: str | Path) -> bool:
    """True when ``spec`` is a URL (``scheme://…``) rather than a path."""
    return isinstance(spec, str) and bool(_URL.match(spec))


def store_dir(spec: str | Path | None = None) -> Path:
    """The local directory that sessions of store ``spec`` are written to and read from.

    ``spec`` is a path, a ``file://`` URL (that directory), another fsspec URL (its local mirror,
    created on first use), or None for ``$FORKPOINT_STORE`` or ``./.forkpoint``. Raises
    :class:`~forkpoint.errors.SessionError` for a path that is a file or a remote ``file://`` URL.
    """
    if spec is None or spec == "":
        spec = os.environ.get("FORKPOINT_STORE") or DEFAULT_STORE
    if isinstance(spec, Path):
        return _directory(spec)
    if is_url(spec):
        parts = urlsplit(spec)
        if parts.scheme.lower() == "file":
            if parts.netloc not in ("", "localhost"):
                raise SessionError(f"{spec}: a file:// store must be on this machine (file:///path)")
            return Path(unquote(parts.path))
        from .fsspec import mirror_dir

        return mirror_dir(spec)
    return _directory(Path(spec))


def _directory(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise SessionError(f"{path}: the store must be a directory, and this is a file")
    return path


def default_store() -> Path:
    """The directory of ``$FORKPOINT_STORE`` (a path or URL, see :func:`store_dir`) or ``./.forkpoint``."""
    return store_dir(None)


def open_store(spec: str | Path | None = None) -> Store:
    """The store ``spec`` names (see :func:`store_dir`): a :class:`LocalStore`, or a
    :class:`~forkpoint.store.fsspec.RemoteStore` when ``spec`` is a URL or a remote store's mirror.
    Raises :class:`~forkpoint.errors.SessionError` for a store directory another user could tamper
    with (:func:`check_private`)."""
    path = store_dir(spec)
    check_private(path)
    if (path / REMOTE_MARKER).is_file():
        from .fsspec import RemoteStore

        return RemoteStore.from_mirror(path)
    return LocalStore(path)


def check_private(path: Path) -> None:
    """Refuse the store directory ``path`` when another user could plant sessions or an index in
    it, or read what it holds: it is not owned by this user, it is writable by every user, or its
    ``index`` is a symbolic link (which forkpoint would follow). ``$FORKPOINT_ALLOW_SHARED_STORE=1``
    (``forkpoint --allow-shared-store``) accepts such a store. A store that does not exist yet is
    fine (forkpoint creates it owner-only). Raises :class:`~forkpoint.errors.SessionError`."""
    if os.environ.get(ALLOW_SHARED_VAR, "") not in ("", "0"):
        return
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    why = []
    if st.st_uid != os.getuid():
        why.append(f"it is owned by user id {st.st_uid}, not by you ({os.getuid()})")
    if st.st_mode & stat.S_IWOTH:
        why.append("every user may write into it")
    if os.path.islink(path / INDEX_DIR):
        why.append("its index is a symbolic link")
    if why:
        raise SessionError(
            f"{path}: refusing this store: {'; '.join(why)}; another user could plant sessions or an "
            "index there, or read what it holds. If it is meant to be shared, pass "
            f"--allow-shared-store (or set {ALLOW_SHARED_VAR}=1)"
        )


def is_store(path: Path) -> bool:
    """True when the directory ``path`` is a store: it has an index, or it is a remote store's
    mirror. (A folder of sessions that is neither, such as pytest cassettes, is not made one.)"""
    return (path / INDEX_DIR).is_dir() or (path / REMOTE_MARKER).is_file()


def store_of(session: Path) -> Store:
    """The store the session directory ``session`` is in (the folder that holds it)."""
    return open_store(Path(session).parent)


def session_finished(path: Path, *, quiet: bool = False) -> str:
    """Hand the complete, closed session ``path`` to the store it is in (see :meth:`Store.finished`);
    returns where it now lives. For sessions not written through :meth:`Store.create` (a scrubbed
    copy moved into place). Never raises: a problem is a warning unless ``quiet``."""
    path = Path(path)
    try:
        return store_of(path).finished(path, quiet=quiet)
    except SessionError as exc:
        if not quiet:
            sys.stderr.write(f"forkpoint: {exc}\n")
        return str(path)


def resolve(ref: str | Path, store: str | Path | None = None, *, refresh: bool = False) -> Path:
    """The local session directory that ``ref`` names: a path, a full id, a unique id prefix,
    ``last``, or a session name (the newest session recorded with ``--name`` ``ref``), in ``store``
    (a path or URL; default ``$FORKPOINT_STORE`` or ``.forkpoint``).

    A session of a remote store is downloaded into the local mirror first (once: a complete session
    never changes); ``refresh`` downloads it again (``forkpoint verify`` checks what the store holds).
    Raises :class:`~forkpoint.errors.SessionError` saying what was tried when nothing (or more than
    one) matches.
    """
    as_path = Path(ref)
    if (as_path / LOG_NAME).is_file():
        return as_path
    return open_store(store).resolve(ref, refresh=refresh)


def list_sessions(store: str | Path | None = None, *, reindex: bool = False) -> Listing:
    """The sessions of ``store``, oldest first, from its index (see :meth:`Store.listing`)."""
    return open_store(store).listing(reindex=reindex)


def index_problem(session: Path) -> str | None:
    """How the index entry of the session directory ``session`` misdescribes its log (a forged or
    damaged entry, which would change what a name resolves to), or None when the session is in no
    store, has no entry, or its entry describes it."""
    session = Path(session)
    if not is_store(session.parent):
        return None
    store = open_store(session.parent)
    state = read_index(store.io)  # type: ignore[attr-defined]  # (both stores keep their index in .io)
    real = info(session)
    entry = state.entries.get(session.name) or state.entries.get(real.session_id)
    if entry is None:
        return None
    problem = entry_mismatch(SessionInfo.from_entry(entry, local=session), real)
    if problem is None:
        return None
    return (
        f"{store.url}: the index entry of session {real.session_id} does not describe its log ({problem}): "
        "the index was changed or damaged; forkpoint ls --reindex rebuilds it"
    )
