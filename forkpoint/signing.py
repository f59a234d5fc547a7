"""Signed sessions: who closed a session, and whether this machine trusts them.

The hash chain (:mod:`forkpoint.log.verify`) has no key: anyone who can edit a session can
recompute it. A signature has one. When a session is closed, forkpoint signs the SHA-256 of its log
(which names every blob and event it holds) with an Ed25519 key of this user, created on first use
(:func:`own_key`), and writes ``signature.json`` beside the log::

    {"format": 1, "session_id": "...", "log_size": N, "log_sha256": "hex", "key": "ed25519:BASE64",
     "signed_at": "2026-12-01T23:50:00Z", "signature": "BASE64"}

``signature`` is Ed25519 (RFC 8032, through the ``cryptography`` package) over the canonical JSON
(sorted keys, no spaces) of the other fields. Keys are written ``ed25519:`` + the standard base64 of
the 32 raw public key bytes.

A session says in its header, from its first line on, which key will sign it when it closes
(:data:`SIGNER`, :func:`promise`): one that says so and has no ``signature.json`` lost its signature
(``lost``), where one that does not is a session older than signing (``unsigned``).

Keys live in forkpoint's configuration folder: ``$FORKPOINT_KEYS_DIR``, else
``$XDG_CONFIG_HOME/forkpoint``, else ``~/.config/forkpoint`` (0700): ``signing-key.pem`` (PKCS#8,
0600), ``signing-key.id`` (its id, kept for :func:`promise`, 0600) and ``trusted-keys`` (one
``ed25519:… NAME`` a line, 0600). The own key is always trusted.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

# cryptography is imported where a key is used (preload: what closing a recording needs). Only
# its Ed25519 module: ``cryptography.hazmat.primitives.serialization`` costs ~25 ms to import, paid
# by every ``forkpoint record``; the key file is read and written below in its fixed PKCS#8 form.
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .errors import SessionError, SigningError, UntrustedSession
from .events import now_iso
from .log import LOG_NAME, SIGNATURE_NAME, has_end, read_header
from .text import visible

#: Beside a session's log.
KEY_NAME = "signing-key.pem"
TRUSTED_NAME = "trusted-keys"
KEY_PREFIX = "ed25519:"
#: Beside the key: its id, and the key file's inode, size and modification time it is the id of
#: (:func:`promise`).
KEY_ID_NAME = "signing-key.id"
#: The name the own key goes by in ``verify`` and ``keys``.
OWN_NAME = "this user (own key)"
#: The header field naming the key that signs the session when it closes (kept readable in an
#: encrypted session: :data:`forkpoint.log.crypto.CLEAR_HEADER`).
SIGNER = "signer"


def keys_dir() -> Path:
    """The folder of the own key and the trusted list (module docstring)."""
    if os.environ.get("FORKPOINT_KEYS_DIR"):
        return Path(os.environ["FORKPOINT_KEYS_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "forkpoint"


def _private_folder(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.stat(d, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise SigningError(f"{d}: the key folder must be a directory owned by this user")
    os.chmod(d, 0o700)


def _write_private(path: Path, data: bytes, *, exclusive: bool) -> None:
    """Write ``data`` to ``path`` as a 0600 file, whole or not at all (never through a symlink)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)  # two first uses at once: one key wins, the other reads it
        else:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _check_private(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SigningError(f"{path}: must be a regular file of this user, readable by no one else (0600)")


def _read_private(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        _check_private(path, os.fstat(f.fileno()))
        return f.read()


#: PKCS#8 DER of an Ed25519 private key, before its 32 raw bytes (RFC 8410, section 7: the form
#: ``openssl genpkey -algorithm ed25519`` and ``cryptography`` write, without a public key).
_PKCS8_ED25519 = bytes.fromhex("302e020100300506032b657004220420")
_PEM_BEGIN, _PEM_END = b"-----BEGIN PRIVATE KEY-----", b"-----END PRIVATE KEY-----"


def _to_pem(key: Ed25519PrivateKey) -> bytes:
    body = base64.encodebytes(_PKCS8_ED25519 + key.private_bytes_raw())
    return _PEM_BEGIN + b"\n" + body + _PEM_END + b"\n"


class _NotEd25519(ValueError):
    """A private key of another algorithm."""


def _from_pem(pem: bytes) -> Ed25519PrivateKey:
    """The key of a PEM ``PRIVATE KEY`` file. The form forkpoint writes (one block, RFC 8410's
    PKCS#8) is read here; anything else (several blocks, headers, a key with its public key,
    another algorithm, an encrypted key) goes through ``cryptography``'s PEM loader. Raises
    ValueError (:class:`_NotEd25519` for another algorithm) or TypeError (an encrypted key)."""
    text = pem.strip()
    body = text[len(_PEM_BEGIN) : -len(_PEM_END)]
    if text.startswith(_PEM_BEGIN) and text.endswith(_PEM_END) and b"-" not in body and b":" not in body:
        try:
            der = base64.b64decode(b"".join(body.split()), validate=True)
        except ValueError:
            der = b""  # not plain base64: the loader below says what it is
        if len(der) == len(_PKCS8_ED25519) + 32 and der.startswith(_PKCS8_ED25519):
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

            return Ed25519PrivateKey.from_private_bytes(der[len(_PKCS8_ED25519) :])
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except UnsupportedAlgorithm as exc:
        raise _NotEd25519(f"a key of an algorithm cryptography does not support ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise _NotEd25519("not an Ed25519 key")
    return key


def own_key() -> Ed25519PrivateKey:
    """This user's signing key, created on first use. Raises :class:`~forkpoint.errors.SigningError`
    for a key file that cannot be written or read, is open to others, or holds no usable key."""
    d = keys_dir()
    path = d / KEY_NAME
    try:
        _private_folder(d)
        if not path.exists():
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

            try:
                _write_private(path, _to_pem(Ed25519PrivateKey.generate()), exclusive=True)
            except FileExistsError:
                pass
        return _from_pem(_read_private(path))
    except OSError as exc:
        raise SigningError(f"{path}: the signing key cannot be used: {exc.strerror or exc}") from None
    except _NotEd25519 as exc:
        raise SigningError(f"{path}: {exc}") from None
    except ValueError as exc:
        raise SigningError(f"{path}: not a PEM private key: {exc}") from None
    except TypeError as exc:  # cryptography: "Password was not given but private key is encrypted"
        raise SigningError(
            f"{path}: the signing key is encrypted; forkpoint needs it unencrypted ({exc})"
        ) from None


def key_id(key: Ed25519PublicKey) -> str:
    """``ed25519:`` + the base64 of the raw public key."""
    return KEY_PREFIX + base64.b64encode(key.public_bytes_raw()).decode()


def parse_key(text: str) -> Ed25519PublicKey:
    """The public key ``text`` (``ed25519:BASE64``) names. Raises :class:`SigningError`."""
    text = text.strip()
    try:
        if not text.startswith(KEY_PREFIX):
            raise ValueError("it does not start with ed25519:")
        raw = base64.b64decode(text[len(KEY_PREFIX) :], validate=True)
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError as exc:
        raise SigningError(
            f"{text!r} is not an Ed25519 public key (ed25519:BASE64 of 32 bytes): {exc}"
        ) from None


def _own_key_id() -> str | None:
    """The own key's id, or None when this user has no key yet (none is made for asking)."""
    return key_id(own_key().public_key()) if (keys_dir() / KEY_NAME).exists() else None


def trusted_keys() -> dict[str, str]:
    """The keys this user trusts: key id → name. The own key, when it exists, is one of them."""
    own = _own_key_id()
    out: dict[str, str] = {own: OWN_NAME} if own is not None else {}
    path = keys_dir() / TRUSTED_NAME
    if not path.exists():
        return out
    try:
        text = _read_private(path).decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise SigningError(f"{path}: cannot be read: {exc}") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        key, name = _split_line(line)
        try:
            parse_key(key)
        except SigningError as exc:
            raise SigningError(f"{path}:{lineno}: {exc}") from None
        out.setdefault(key, name)
    return out


def trust(key: str, name: str) -> str:
    """Add the public key ``key`` to this user's trusted list under ``name`` (a key already there
    gets the new name). Returns the key id. Raises :class:`SigningError` (for the own key too: it is
    always trusted, and is not in the list)."""
    kid = key_id(parse_key(key))
    name = " ".join(name.split())
    if not name:
        raise SigningError("a trusted key needs a name (--name), to say who signed a session")
    if name == OWN_NAME:  # (verify would say a teammate's session is your own)
        raise SigningError(f"{name!r} is the name of your own key: give the key's owner another one")
    if kid == _own_key_id():
        # (a line for it would never be listed by `keys`, nor taken off by `keys untrust`)
        raise SigningError(f"{kid} is your own key: it is always trusted; nothing was added")
    _rewrite_trusted(lambda key_id, _name: key_id != kid, [f"{kid} {name}"])
    return kid


def untrust(which: str) -> list[str]:
    """Take the trusted keys that ``which`` names (a key id, or the name it was trusted as) off this
    user's trusted list; returns their ids. Raises :class:`SigningError` when none is named (the
    own key, always trusted, is not in the list)."""
    own = _own_key_id()
    named = [k for k, n in trusted_keys().items() if which in (k, n) and k != own]
    if not named:
        raise SigningError(
            f"no trusted key is {which!r} (your own key cannot be untrusted); forkpoint keys lists them"
        )
    _rewrite_trusted(lambda key_id, _name: key_id not in named, [])
    return named


def _rewrite_trusted(keep: Callable[[str, str], bool], added: list[str]) -> None:
    """Rewrite the trusted list with the lines whose (key id, name) ``keep`` keeps, then ``added``."""
    d = keys_dir()
    path = d / TRUSTED_NAME
    try:
        _private_folder(d)
        lines = _read_private(path).decode().splitlines() if path.exists() else []
        kept = [line for line in lines if keep(*_split_line(line))]
        _write_private(path, ("\n".join([*kept, *added]) + "\n").encode(), exclusive=False)
    except (OSError, UnicodeDecodeError) as exc:
        raise SigningError(f"{path}: the trusted keys cannot be written: {exc}") from None


def _split_line(line: str) -> tuple[str, str]:
    key, _, name = line.strip().partition(" ")
    return key, name.strip() or key


def _payload_bytes(payload: dict[str, object]) -> bytes:
    return orjson.dumps({k: v for k, v in payload.items() if k != "signature"}, option=orjson.OPT_SORT_KEYS)


def _log_digest(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path / LOG_NAME, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def preload() -> None:
    """Import what signing and checking a signature need (cryptography's Ed25519: ~25 M
    instructions), where that overlaps other work: the recorded program's start."""
    from cryptography.exceptions import InvalidSignature  # noqa: F401
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: F401


def promise(header: dict[str, Any]) -> None:
    """Name in a new session's ``header`` (:data:`SIGNER`) the own key, which signs the session when
    it closes: a ``signature.json`` removed later (after an edit) is then said, not taken for a
    session older than signing. None when the key cannot be used (the session closes unsigned, and
    says so then).

    The key's id is kept beside it (:data:`KEY_ID_NAME`, with the key file's inode, size and
    modification time): a recording names its signer before its program starts, and loading the key
    (cryptography) there would delay the program; it is loaded while the program runs instead."""
    path = keys_dir() / KEY_NAME
    try:
        # The key as own_key() would take it (its folder and file this user's, the file 0600): a key
        # that cannot sign names no signer, or the session would read as one that lost its signature.
        _private_folder(path.parent)
        st = os.stat(path, follow_symlinks=False)
        _check_private(path, st)
        stamp = f"{st.st_ino} {st.st_size} {st.st_mtime_ns}"
        kept = _read_private(path.with_name(KEY_ID_NAME)).decode().split(" ", 1)
        if len(kept) == 2 and kept[1].strip() == stamp and kept[0].startswith(KEY_PREFIX):
            header[SIGNER] = kept[0]
            return
    except (OSError, UnicodeDecodeError, SigningError):
        pass  # (no key yet, or its id not kept: from the key itself)
    try:
        header[SIGNER] = kid = key_id(own_key().public_key())
    except SigningError:
        header.pop(SIGNER, None)
        return
    with contextlib.suppress(OSError):
        st = os.stat(path)
        _write_private(
            path.with_name(KEY_ID_NAME),
            f"{kid} {st.st_ino} {st.st_size} {st.st_mtime_ns}\n".encode(),
            exclusive=False,
        )


def sign_session(path: Path, session_id: str) -> str:
    """Sign the closed session at ``path`` with the own key (``signature.json``, replacing an older
    one). Returns the key id. Raises :class:`SigningError`."""
    key = own_key()
    try:
        size, digest = _log_digest(path)
        payload: dict[str, object] = {
            "format": 1,
            "session_id": session_id,
            "log_size": size,
            "log_sha256": digest,
            "key": key_id(key.public_key()),
            "signed_at": now_iso(),
        }
        payload["signature"] = base64.b64encode(key.sign(_payload_bytes(payload))).decode()
        _write_private(path / SIGNATURE_NAME, orjson.dumps(payload), exclusive=False)
    except OSError as exc:
        raise SigningError(f"{path}: the session could not be signed: {exc.strerror or exc}") from None
    return str(payload["key"])


@dataclass(frozen=True)
class Signed:
    """Who signed a session: ``state`` is ``signed`` (the signature is good for the log as it is),
    ``unsigned`` (no signature, and its header names no key that would sign it: older than signing;
    or no ``end`` yet), ``lost`` (no signature, though it ended and its header names the key that
    signs it when it closes: ``key``)
    or ``bad`` (a signature that does not match the log or its key: ``problem`` says how). ``key``
    is the signer's key id, ``name`` the name this user trusts it under (None: not trusted)."""

    state: str
    key: str | None = None
    name: str | None = None
    problem: str | None = None

    @property
    def trusted(self) -> bool:
        """Signed, the signature good, by a key this user trusts."""
        return self.state == "signed" and self.name is not None

    @property
    def fails(self) -> bool:
        """A signature that does not verify, or was lost: ``verify`` fails."""
        return self.state in ("bad", "lost")

    def describe(self) -> str:
        """In words, for ``verify`` and the refusal of an untrusted command."""
        if self.state == "unsigned":
            return "not signed"
        if self.state == "bad":
            return f"its signature is not valid: {self.problem}"
        if self.state == "lost":
            return f"not signed any more: {self.problem}"
        who = f"{self.name} ({self.key})" if self.name else f"{self.key}, a key this user does not trust"
        return f"signed by {who}"


def signature(path: Path, session_id: str) -> Signed:
    """Check the signature of the session at ``path`` against its log as it is now, and its signer
    against the trusted keys. Raises :class:`SigningError` only for an unreadable trusted list."""
    sig_path = path / SIGNATURE_NAME
    if not sig_path.exists():
        try:
            claimed = read_header(path / LOG_NAME).get(SIGNER)
        except SessionError:  # (an unreadable header: verify and the loaders say what is wrong)
            claimed = None
        if not claimed or not has_end(path / LOG_NAME):  # (no end: it may still be recording, verify says so)
            return Signed("unsigned")
        return Signed(
            "lost",
            str(claimed),
            problem=f"its header says {visible(str(claimed), one_line=True)} signs it when it closes, but it has "
            f"no {SIGNATURE_NAME} (removed after it was signed, or not written when it closed)",
        )
    from cryptography.exceptions import InvalidSignature

    try:
        fd = os.open(sig_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return Signed("bad", problem=f"{sig_path} is not a regular file")
            payload = orjson.loads(f.read(1 << 16))
        if not isinstance(payload, dict) or not all(
            isinstance(payload.get(k), str) for k in ("key", "signature")
        ):
            # (a KeyError's text, "'key'", was the whole reason given)
            return Signed(
                "bad", problem=f"{sig_path}: not a signature (an object with a key and a signature, as text)"
            )
        key = parse_key(payload["key"])
        key.verify(base64.b64decode(payload["signature"]), _payload_bytes(payload))
        size, digest = _log_digest(path)
    except (OSError, ValueError, KeyError, TypeError, SigningError, InvalidSignature) as exc:
        kind = "the signature does not match its content" if isinstance(exc, InvalidSignature) else str(exc)
        return Signed("bad", problem=f"{sig_path}: {kind}")
    kid = payload["key"]
    if payload.get("session_id") != session_id:
        return Signed("bad", kid, problem=f"{sig_path} is for session {payload.get('session_id')}")
    if (payload.get("log_size"), payload.get("log_sha256")) != (size, digest):
        return Signed("bad", kid, problem=f"the log changed after it was signed ({sig_path})")
    return Signed("signed", kid, trusted_keys().get(kid))


def doubt(path: Path, session_id: str) -> str | None:
    """What a command that only reads the session (``show``, ``export``, ``diff``, ``restore``…), or
    runs a command the user trusts on it (``replay -- CMD``, ``--trust``), says of its signature
    before it goes on: one that does not verify (the log edited after it was signed), one lost (its
    header names the key that signs it, and it has no signature), or a signer this user does not
    trust. None when a trusted key signed it, or nobody did (sessions older than signing: ``verify``
    says so)."""
    sid = visible(session_id, one_line=True)
    # (by the folder read: a copy outside the store, a cassette, shares its id with the original)
    where = visible(str(path), one_line=True)
    try:
        signed = signature(path, session_id)
    except SigningError as exc:  # (an unreadable trusted list: reading the session goes on)
        return f"whether a key you trust signed session {sid} cannot be told: {exc}"
    if signed.trusted or signed.state == "unsigned":
        return None
    if signed.state == "bad":
        return (
            f"the signature of session {sid} does not verify: {signed.problem}, so what follows may not be "
            f"what was recorded (see: forkpoint verify {where})"
        )
    if signed.state == "lost":
        return (
            f"session {sid} has lost its signature: {signed.problem}, so what follows may not be what was "
            f"recorded (see: forkpoint verify {where})"
        )
    return (
        f"session {sid} is signed by {signed.key}, a key this user does not trust, so what follows is "
        "only what that key's holder says was recorded (a teammate's key is trusted with: forkpoint "
        "keys trust KEY --name NAME)"
    )


def require_trusted(path: Path, session_id: str, argv: list[str] | None) -> Signed:
    """Return the session's :class:`Signed` when its recorded command ``argv`` (None: a command of
    the user's, run on the files a fork restores from its checkpoints) may run here: signed by a
    trusted key. Otherwise raise :class:`~forkpoint.errors.UntrustedSession`, showing what would run
    and the ways to run it anyway."""
    signed = signature(path, session_id)
    if signed.trusted:
        return signed
    import shlex

    sid = visible(session_id, one_line=True)
    if argv is None:  # (the arm's files are the session's: `python agent.py` there runs its agent.py)
        raise UntrustedSession(
            f"session {sid}: {signed.describe()}, so forkpoint will not run a command on the files it "
            "restores from it (a program there runs the code its checkpoint holds, not yours). Read them "
            f"first (forkpoint restore {visible(str(path), one_line=True)}@SEQ --into DIR); fork anyway "
            "with --trust. A teammate's key is trusted with: forkpoint keys trust KEY --name NAME"
        )
    # (escaped: a carriage return or an escape sequence in it would hide what comes before it)
    raise UntrustedSession(
        f"session {sid}: {signed.describe()}, so forkpoint will not run "
        f"the command it recorded:\n    {visible(shlex.join(argv))}\nRead it; run it anyway with --trust, or give the command to run "
        f"after --. A teammate's key is trusted with: forkpoint keys "
        "trust KEY --name NAME"
    )
