"""Encryption at rest of a session: age (https://age-encryption.org/v1), through ``pyrage``.

An encrypted session keeps its *envelope* readable and seals everything else, so that the hash
chain and ``verify`` work without the identity:

* the header keeps :data:`CLEAR_HEADER` (format, version, id, creation time, name, the
  ``encryption`` table with the recipients' public keys, the signer's, ``hash``); every other field is sealed
  into ``"$enc"``;
* an event line keeps :data:`CLEAR_EVENT` (``seq``, ``type``, ``ts``, ``torn``, ``prev``, ``hash``)
  and ``"blobs"`` (the names of the blobs its sealed fields refer to); every other field is sealed
  into ``"$enc"`` (base64 of an age file);
* a blob file is an age file of the (possibly zstd-compressed) bytes, named by the SHA-256 of the
  *file*: a name tells nothing about the content, and ``verify`` checks each blob against its name.
  Lines still refer to a blob by the SHA-256 of its bytes; the sealed ``$files`` of a line says
  which file holds it.

Each ``$enc`` and each blob is one age file for all the session's recipients, so a writer needs
only the header (public keys) and never an identity; readers need one identity of a recipient.
"""

from __future__ import annotations

import base64
import functools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from ..config import find_config, load_table
from ..errors import ConfigError, IdentityError, SessionError, UsageError
from ..events import header_problem

#: The ``scheme`` of a header's ``encryption`` table.
SCHEME = "age"
#: The key holding a sealed payload in a line.
ENC = "$enc"
#: The key of a sealed payload mapping its blobs to their files (:class:`~.blobs.BlobStore`).
FILES = "$files"
#: Header fields an encrypted session keeps readable: what ``ls``, references by name and the chain
#: need, and what a recording process needs to append (its root span, the user's ``deterministic``
#: and ``match`` options), which is no recorded content, and the public key that signs it
#: (``signer``: ``verify`` tells a lost signature without the identity).
CLEAR_HEADER = (
    "type",
    "format",
    "version",
    "session_id",
    "created",
    "name",
    "encryption",
    "span_id",
    "deterministic",
    "match",
    "signer",
    "hash",
)
#: Event fields an encrypted session keeps readable (the chain, and what ``ls`` counts).
CLEAR_EVENT = ("seq", "type", "ts", "torn", "prev", "hash")
#: Where readers find the identity file when none is given.
IDENTITY_ENV = "FORKPOINT_IDENTITY"


def _pyrage() -> Any:
    try:
        import pyrage
    except ImportError:
        raise UsageError("encrypted sessions need pyrage: pip install 'forkpoint[encrypt]'") from None
    return pyrage


def encryption_table(recipients: list[str]) -> dict[str, Any]:
    """A header's ``encryption`` table for ``recipients`` (``age1…`` keys)."""
    return {"scheme": SCHEME, "recipients": list(recipients)}


def configured_recipients(start: Path | None = None) -> list[str]:
    """The recipients of ``[store] encrypt_to`` in the configuration in force (:mod:`forkpoint.config`),
    each an ``age1…`` key or a file of them (a relative path: from the configuration file's folder);
    ``[]`` when none. Raises :class:`ConfigError` naming
    the file for a value that is not a list of strings, :class:`UsageError` for a bad recipient."""
    table, where = load_table("store", start)
    if table is None:
        return []
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    values = table.get("encrypt_to", [])
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where}: encrypt_to must be a list of age recipients (age1…) or files of them")
    found = find_config(start)
    base = found[0].parent if found is not None else Path.cwd()
    # a file named by a relative path is found beside the configuration that names it
    values = [v if v.strip().startswith("age1") else str(base / v.strip()) for v in values]
    return parse_recipients(values, f"{where} encrypt_to") if values else []


def parse_recipients(values: Iterable[str], where: str) -> list[str]:
    """Age recipients from ``values``: each an ``age1…`` public key, or the path of a file of them
    (one a line; blank lines and ``#`` comments skipped, as ``age -R`` reads them). Returns the
    distinct keys in order. Raises :class:`UsageError` naming ``where`` and the bad value."""
    x25519 = _pyrage().x25519
    out: list[str] = []
    for value in values:
        value = str(value).strip()
        if value.startswith("age1"):
            keys = [(value, where)]
        else:
            try:
                text = Path(value).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(
                    f"{where}: {value!r} is neither an age recipient (age1…) nor a readable file of them ({exc})"
                ) from None
            keys = [
                (line.strip(), f"{value}:{n}")
                for n, line in enumerate(text.splitlines(), start=1)
                if line.strip() and not line.lstrip().startswith("#")
            ]
            if not keys:
                raise UsageError(f"{where}: {value} holds no recipient")
        for key, place in keys:
            try:
                x25519.Recipient.from_str(key)
            except Exception as exc:  # pyrage.RecipientError: not an X25519 age recipient
                raise UsageError(f"{place}: {key[:20]!r} is not an age recipient (age1…): {exc}") from None
            if key not in out:
                out.append(key)
    return out


@functools.lru_cache(maxsize=8)
def _identities(path: str, stamp: tuple[int, int]) -> tuple[Any, ...]:
    x25519 = _pyrage().x25519
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IdentityError(f"{path}: cannot read the identity file ({exc})") from None
    found = []
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            found.append(x25519.Identity.from_str(line))
        except Exception:  # pyrage.IdentityError; the message would not help, and must not echo the key
            raise IdentityError(f"{path}:{n}: not an age identity (AGE-SECRET-KEY-1…)") from None
    if not found:
        raise IdentityError(f"{path}: holds no age identity (AGE-SECRET-KEY-1…)")
    return tuple(found)


def identity_path() -> str | None:
    """The identity file readers use: ``$FORKPOINT_IDENTITY``, or None."""
    return os.environ.get(IDENTITY_ENV) or None


def use_identity(path: str | Path) -> None:
    """Make ``path`` the identity file of this process and the processes it starts (a replayed
    program reads its session too): sets ``$FORKPOINT_IDENTITY``."""
    os.environ[IDENTITY_ENV] = str(Path(path).resolve())


class Cipher:
    """Seals and opens one session's payloads. ``recipients`` are the header's public keys; the
    identity (``$FORKPOINT_IDENTITY``) is read on the first :meth:`open`, never to write.

    ``session`` names the session in messages."""

    def __init__(self, recipients: list[str], session: str) -> None:
        pyrage = _pyrage()
        self.session = session
        self.recipients_text = list(recipients)
        self._recipients = [pyrage.x25519.Recipient.from_str(r) for r in recipients]
        self._pyrage = pyrage

    def seal(self, data: bytes) -> bytes:
        """``data`` as one age file for every recipient."""
        return bytes(self._pyrage.encrypt(data, self._recipients))

    def identities(self) -> tuple[Any, ...]:
        """The identities read from ``$FORKPOINT_IDENTITY``. Raises :class:`IdentityError` naming the
        session when there is none or it cannot be read."""
        path = identity_path()
        if path is None:
            raise IdentityError(
                f"session {self.session} is encrypted: set {IDENTITY_ENV} to an age identity file of one "
                f"of its recipients, or pass --identity FILE"
            )
        try:
            st = os.stat(path)
        except OSError as exc:
            raise IdentityError(
                f"session {self.session} is encrypted, and its identity file {path} ({IDENTITY_ENV}) "
                f"cannot be read ({exc.strerror or exc})"
            ) from None
        return _identities(path, (st.st_mtime_ns, st.st_size))

    def can_open(self) -> bool:
        """True when an identity is at hand (it may still not be one of the recipients)."""
        try:
            self.identities()
        except IdentityError:
            return False
        return True

    def open(self, data: bytes, where: str) -> bytes:
        """The plaintext of the age file ``data`` (``where``: what it is, for messages). Raises
        :class:`IdentityError` when the identity is not a recipient's, :class:`SessionError` when
        ``data`` is not an intact age file."""
        identities = self.identities()
        try:
            return bytes(self._pyrage.decrypt(data, list(identities)))
        except self._pyrage.DecryptError as exc:
            if "No matching keys" in str(exc):
                raise IdentityError(
                    f"session {self.session}: the identity in {identity_path()} is not one of its "
                    f"recipients ({', '.join(r[:16] + '…' for r in self.recipients_text)})"
                ) from None
            raise SessionError(f"{where}: cannot be decrypted ({exc})") from None

    def seal_json(self, value: Any) -> str:
        """``value``'s JSON, sealed, as base64 text (a line's ``$enc``)."""
        return base64.b64encode(self.seal(orjson.dumps(value))).decode()

    def open_json(self, text: Any, where: str) -> Any:
        """The inverse of :meth:`seal_json`. Raises :class:`SessionError` naming ``where``."""
        if not isinstance(text, str):
            raise SessionError(f"{where}: {ENC} is not text")
        try:
            sealed = base64.b64decode(text, validate=True)
        except ValueError:
            raise SessionError(f"{where}: {ENC} is not base64") from None
        data = self.open(sealed, where)
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise SessionError(f"{where}: the decrypted payload is not JSON ({exc})") from None


def header_cipher(head: dict[str, Any], where: Path) -> Cipher | None:
    """The :class:`Cipher` of a session whose stored header is ``head``; None when it is not
    encrypted. Raises :class:`SessionError` for an ``encryption`` table this version cannot use."""
    enc = head.get("encryption")
    if enc is None:
        return None
    recipients = enc.get("recipients") if isinstance(enc, dict) else None
    if (
        not isinstance(enc, dict)
        or enc.get("scheme") != SCHEME
        or not isinstance(recipients, list)
        or not recipients
        or not all(isinstance(r, str) for r in recipients)
    ):
        raise SessionError(f"{where}:1: an encryption table this forkpoint cannot use: {enc!r}")
    try:
        return Cipher(recipients, str(head.get("session_id")))
    except UsageError:
        raise
    except Exception as exc:  # pyrage.RecipientError
        raise SessionError(f"{where}:1: a recipient of the encryption table is not valid ({exc})") from None


def seal_header(head: dict[str, Any], cipher: Cipher) -> dict[str, Any]:
    """The stored form of an encrypted session's header (without ``hash``)."""
    clear = {k: head[k] for k in CLEAR_HEADER if k in head and k != "hash"}
    clear[ENC] = cipher.seal_json({k: v for k, v in head.items() if k not in CLEAR_HEADER})
    return clear


def open_header(head: dict[str, Any], cipher: Cipher | None, where: Path) -> dict[str, Any]:
    """The whole header of a session from its stored form (itself when not encrypted)."""
    if cipher is None or ENC not in head:
        return head
    sealed = cipher.open_json(head[ENC], f"{where}:1 (header)")
    if not isinstance(sealed, dict):
        raise SessionError(f"{where}:1: the decrypted header is not an object")
    problem = header_problem(sealed)
    if problem is not None:
        raise SessionError(f"{where}:1: the decrypted header's {problem}")
    return {**{k: v for k, v in head.items() if k != ENC}, **sealed}


def open_event(obj: dict[str, Any], cipher: Cipher | None, where: str) -> dict[str, Any]:
    """A stored event line with its sealed fields opened (itself when not sealed). Raises
    :class:`SessionError` (:class:`IdentityError` without a usable identity)."""
    if ENC not in obj:
        return obj
    if cipher is None:
        raise SessionError(f"{where}: an encrypted event in a session whose header is not encrypted")
    sealed = cipher.open_json(obj[ENC], where)
    if not isinstance(sealed, dict):
        raise SessionError(f"{where}: the decrypted event is not an object")
    return {**{k: v for k, v in obj.items() if k in CLEAR_EVENT}, **sealed}
