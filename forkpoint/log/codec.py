"""The stored form of a session's lines: constants of the layout, and the encodings that keep a
log linear in the length of a conversation and let any value round-trip (``docs/format.md``).

* ``{"$blob": "<sha256>", "size": n}`` stands for a string of ``n`` bytes (UTF-8) kept in ``blobs/``;
  with ``"bytes": true`` for binary data. Equal payloads are stored once.
* ``{"$json": "<sha256>", "size": n}`` is a part of an event (:data:`JSON_BLOB_FIELDS`) kept as one
  JSON blob.
* ``{"$delta": {"base": S, "keep": K, "add": [...]}}`` stands for a list of a model call's request
  body (or a checkpoint's carried context): the first ``K`` items of the same field of event ``S``,
  then ``add``. With ``"set": [[I, item], ...]`` (format 3), item ``I`` of those ``K`` is replaced
  by ``item`` (indices ascending): a conversation whose first message changes at every call (a
  prompt stamped with the time) still costs only what each call adds.
* ``{"$dumps": {"seq": S, "of": "args"|"result", "style": "…"}}`` stands for a string that is the JSON
  text (Python's ``json.dumps`` in that style) of the arguments or result of tool call ``S``: what
  an agent sends back to the model is stored once, with the tool call.
* ``{"$same": S}`` stands for a checkpoint's field (:data:`SAME_FIELDS`) as stored in checkpoint
  ``S``; ``{"$same": S, "k": v, …}`` for that dict with the keys given replaced (or added).
* ``{"$b64": "…"}`` is short binary data; ``{"$u": "<base64>"}`` a string that is not valid Unicode
  (lone surrogates); ``{"$int": "<digits>"}`` an integer outside 64 bits; ``{"$kv": [[key, value], …]}``
  an object with a key that is not valid Unicode (keys literal: a string or a ``$u``); ``{"$lit": {…}}``
  user data that itself has one of these keys.

The in-memory (resolved) form represents binary data as :class:`bytes`.
"""

from __future__ import annotations

import base64
import json
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..canonical import digest, python_json
from ..deltalist import DeltaList, json_default
from ..errors import SessionError
from ..patterns import compiled_later
from .blobs import BlobStore

FORMAT = "forkpoint.session"
#: The version this forkpoint writes, and those it reads. 2: packed lines (:mod:`.packing`); 3: a
#: ``$delta`` may replace items (``set``), which a reader of 2 would silently leave out.
FORMAT_VERSION = 3
READ_VERSIONS = (1, 2, 3)
#: The first versions with packed lines and with ``set`` in a ``$delta``: a writer appending to an
#: older session keeps to what its version has.
PACKED_FROM = 2
DELTA_SET_FROM = 3
LOG_NAME = "session.jsonl"
BLOB_DIR = "blobs"
GIT_OBJECTS = "git-objects"
SIGNATURE_NAME = "signature.json"
#: What a session folder holds: its log, blob folder, git objects and signature (forkpoint.signing).
SESSION_ENTRIES = frozenset({LOG_NAME, BLOB_DIR, GIT_OBJECTS, SIGNATURE_NAME})
#: What a remote store's local mirror keeps in a session folder: that the copy is the complete
#: remote session, and (a lock) that a process is recording it. Bookkeeping: no part of the session,
#: never copied with it, and no stranger to it either (``verify`` says nothing of them).
MIRROR_DONE = ".remote"
MIRROR_RECORDING = ".recording"
#: The names inside ``blobs/`` and ``git-objects/``: two hex digits, then a content address.
_FANOUT = compiled_later(r"[0-9a-f]{2}")
_ADDRESS = compiled_later(r"[0-9a-f]{38,62}(?:\.zst)?")


def foreign(folder: str, names: list[str]) -> list[str]:
    """Of ``names`` in ``folder`` (relative to a session folder, ``""`` for itself), those no
    session holds there: anything a copy of the session leaves out (a ``conftest.py`` dropped into
    a shared store would otherwise be copied into a checkout by ``make-test``, and run by pytest).
    (A write's temporary file, ``.tmp-…``, is one too: it is no part of the session yet.)"""
    parts = [p for p in folder.replace("\\", "/").split("/") if p]
    if not parts:
        return [n for n in names if n not in SESSION_ENTRIES]
    if parts[0] not in (BLOB_DIR, GIT_OBJECTS) or len(parts) > 2:
        return list(names)
    pattern = _FANOUT if len(parts) == 1 else _ADDRESS
    return [n for n in names if not pattern.fullmatch(n)]


#: Strings at least this long (UTF-8 bytes) are stored as blobs.
BLOB_MIN_BYTES = 1024
#: Binary payloads at least this long are stored as blobs rather than base64 in the line.
BLOB_MIN_BINARY = 256
_RESERVED = frozenset({"$blob", "$b64", "$delta", "$lit", "$u", "$int", "$kv", "$json", "$dumps", "$same"})
#: The types a parsed line holds that :func:`decode` returns as they are (taken without a call: a
#: streamed response is mostly such leaves).
_LEAVES = frozenset({str, int, float, bool, type(None)})
#: Parts of an event stored as a ``$json`` blob once their JSON reaches :data:`JSON_BLOB_MIN` bytes:
#: a stream's chunks (every SSE frame repeats ids and model names, so they compress ~10x), the
#: request headers (the same at every call, so stored once) and a checkpoint's refs (hundreds of
#: tags: stored once for each state of them, compressed, where a new tag repeated them all).
JSON_BLOB_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "model_call": (("response", "chunks"), ("request", "headers")),
    "checkpoint": (("source", "refs"),),
}
JSON_BLOB_MIN = 256
#: Fields of an event that the writer stores as ``{"$same": S}`` when they repeat those of the last
#: event of that type it wrote (seq ``S``): between two model calls the repository, the untracked
#: files and the files the messages mention rarely change, and each costs hundreds of bytes.
SAME_FIELDS: dict[str, tuple[str, ...]] = {
    "checkpoint": ("source", "workspace", "referenced", "mentioned_absent", "uncaptured"),
}
_INT_RANGE = (-(1 << 63), (1 << 64) - 1)  # what orjson writes as a JSON integer
#: The widest integer a line holds (as ``$int``, about 4,200 digits): a reader reads its digits with
#: ``int()``, which Python refuses beyond 4,300 by default, whatever limit the writing program set.
WIDEST_INT_BITS = 14_000
#: ``$dumps`` styles: the ways ``json.dumps`` is commonly called to send a tool call's arguments or
#: result back to a model. ``c``: compact separators; ``s``: keys sorted; ``u``: not ASCII-escaped.
DUMPS_STYLES = ("", "s", "c", "cs", "u", "su", "cu", "csu")
#: Tool values whose JSON is shorter than this cost less inline than a ``$dumps`` reference; longer
#: than :data:`DUMPS_MAX`, comparing texts with them costs more than it saves.
DUMPS_MIN = 64
DUMPS_MAX = 1 << 16
#: From this size on (bytes of JSON), :func:`encode_field` looks at a container's JSON text first.
PLAIN_MIN = 1 << 20


def dumps_style(value: Any, style: str) -> str:
    """``json.dumps(value)`` in a ``$dumps`` style (see :data:`DUMPS_STYLES`). Raises ValueError
    for a style it does not know."""
    if style not in DUMPS_STYLES:
        raise ValueError(f"unknown $dumps style {style!r}")
    return json.dumps(
        value,
        sort_keys="s" in style,
        ensure_ascii="u" not in style,
        separators=(",", ":") if "c" in style else None,
    )


class SentBack:
    """The ``args`` and ``result`` of a writer's last ``window`` tool calls, to find them again as the
    JSON text an agent sends back to the model (``$dumps``).

    Each is kept as a reader will get it back (NaN as null, tuples as lists), under its canonical
    JSON: a string is parsed once and looked up, and only a value it parses to is serialized, in the
    styles the text can be in, to compare byte for byte (serializing every value in all eight styles
    when it is recorded cost more than the rest of its line's encoding)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._values: dict[bytes, list[tuple[int, str, Any]]] = {}
        self._recent: deque[tuple[int, list[bytes]]] = deque()

    def __bool__(self) -> bool:
        return bool(self._values)

    def remember(self, seq: int, event: Mapping[str, Any]) -> None:
        """Keep tool call ``seq``'s ``args`` and ``result`` when they are plain JSON (not bytes, lone
        surrogates, huge integers, non-string keys) of :data:`DUMPS_MIN` to :data:`DUMPS_MAX` bytes;
        forget those of the tool call that leaves the window."""
        keys = []
        for field in ("args", "result"):
            try:
                data = orjson.dumps(event[field]) if field in event else b""
            except (TypeError, orjson.JSONEncodeError):
                continue
            if DUMPS_MIN <= len(data) <= DUMPS_MAX:
                loaded = orjson.loads(data)
                key = orjson.dumps(loaded, option=orjson.OPT_SORT_KEYS)
                self._values.setdefault(key, []).append((seq, field, loaded))
                keys.append(key)
        self._recent.append((seq, keys))
        if len(self._recent) > self.window:
            old, old_keys = self._recent.popleft()
            for key in old_keys:
                kept = [v for v in self._values.get(key, ()) if v[0] != old]
                if kept:
                    self._values[key] = kept
                else:
                    self._values.pop(key, None)

    def ref(self, text: str) -> dict[str, Any] | None:
        """The ``$dumps`` reference of ``text`` when it is exactly ``json.dumps`` of a kept value, in
        one of :data:`DUMPS_STYLES` (the oldest value, the first style, when several are)."""
        # (a value's text starts so; in any style it is at most three times its compact JSON)
        if not text.startswith(("{", "[", '"')) or len(text) > 3 * DUMPS_MAX:
            return None
        try:
            key = orjson.dumps(orjson.loads(text), option=orjson.OPT_SORT_KEYS)
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            return None
        # Not ASCII-escaped (``u``) is the only way to non-ASCII text, and gives ASCII text only
        # where the escaped style, tried first, gives the same.
        styles = [s for s in DUMPS_STYLES if ("u" in s) != text.isascii()]
        for seq, field, value in self._values.get(key, ()):
            for style in styles:
                if dumps_style(value, style) == text:
                    return {"seq": seq, "of": field, "style": style}
        return None


def encode(value: Any, blobs: BlobStore | None, sent_back: SentBack | None = None) -> Any:
    """Resolved form → stored form: big strings and bytes to blobs, reserved keys escaped.
    With ``blobs`` None everything stays inline (the content of a ``$json`` blob). A string that is
    the JSON text of a value ``sent_back`` keeps becomes its ``$dumps`` reference."""
    if isinstance(value, str):
        if sent_back and len(value) >= DUMPS_MIN:
            ref = sent_back.ref(value)
            if ref is not None:
                return {"$dumps": ref}
        if blobs is not None and len(value) >= BLOB_MIN_BYTES // 4:  # cheap pre-check before encoding
            raw = value.encode("utf-8", "surrogatepass")
            if len(raw) >= BLOB_MIN_BYTES:
                return {"$blob": blobs.put(raw), "size": len(raw)}
        return value
    if isinstance(value, dict):
        enc = {k: encode(v, blobs, sent_back) for k, v in value.items()}
        return {"$lit": enc} if _RESERVED.intersection(value) else enc
    if isinstance(value, list | tuple):
        return [encode(v, blobs, sent_back) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if blobs is not None and len(raw) >= BLOB_MIN_BINARY:
            return {"$blob": blobs.put(raw), "size": len(raw), "bytes": True}
        return {"$b64": base64.b64encode(raw).decode()}
    return value


_QUOTES_ONLY = bytes(c if c == ord('"') else ord("a") for c in range(256))
_LONG_RUN = b"a" * (BLOB_MIN_BYTES // 4)


def may_hold_stored_form(text: bytes) -> bool:
    """Whether JSON ``text`` may hold a stored form: an object key that starts with ``$`` (written
    ``"$``, or ``"\\u0024`` by a writer that escapes it). Each is looked for after a byte of it
    (``$``, ``\\``) is found at all: a search for one byte is a ``memchr``, where a search for
    ``"$`` stops at every quote (18 ms on a 20 MB result, against 1 ms)."""
    return (b"$" in text and b'"$' in text) or (b"\\" in text and b"\\u0024" in text)


def encode_field(value: Any, blobs: BlobStore | None, sent_back: SentBack | None = None) -> Any:
    """:func:`encode` of one field of an event. A container of :data:`PLAIN_MIN` bytes of JSON or
    more that has no reserved key and no string long enough for a blob is stored as it is, checked
    in its JSON text instead of walked (a 20 MB tool result). A string it holds that equals a recent
    tool call's JSON text then stays inline rather than a ``$dumps``: that only costs bytes."""
    if isinstance(value, dict | list):
        try:
            data = orjson.dumps(value)
        except (TypeError, orjson.JSONEncodeError):  # bytes, lone surrogates, huge integers
            data = b""
        if len(data) >= PLAIN_MIN and not may_hold_stored_form(data):
            # No run of BLOB_MIN_BYTES // 4 bytes between two quotes: no string near a blob's size.
            # (Mapping every other byte to one letter and searching for the run is ~6x faster on
            # 20 MB than splitting at the quotes.)
            if _LONG_RUN not in data.translate(_QUOTES_ONLY):
                return value
    return encode(value, blobs, sent_back)


def json_blobs(stored: dict[str, Any], event: dict[str, Any], blobs: BlobStore) -> None:
    """Move the big, repetitive parts of an event (see :data:`JSON_BLOB_FIELDS`) into ``$json``
    blobs: compressed, and stored once when identical (request headers usually are)."""
    for outer, inner in JSON_BLOB_FIELDS.get(stored["type"], ()):
        part = event.get(outer)
        if not isinstance(part, dict) or inner not in part or not isinstance(part[inner], list | dict):
            continue
        try:
            data = orjson.dumps(encode(part[inner], None))
        except TypeError:  # lone surrogates or huge integers: left in the line, stored in their own way
            continue
        if len(data) >= JSON_BLOB_MIN:
            stored[outer] = {**stored[outer], inner: {"$json": blobs.put(data), "size": len(data)}}


def same_refs(
    stored: dict[str, Any], bases: Mapping[str, tuple[int, Any]]
) -> tuple[dict[str, Any], set[str]]:
    """``stored`` (a line's fields, stored form) with each of its :data:`SAME_FIELDS` that repeats
    its base (``bases``: field → the seq of the line that holds it, and its stored value, references
    resolved) as a ``$same`` reference: ``{"$same": S}`` when equal, ``{"$same": S, <changed
    keys>}`` when a dict kept every key of the base's — whichever is shorter than the value itself.
    Also returns the names of the fields that became a whole reference (``{"$same": S}``)."""
    out = dict(stored)
    referred = set()
    for name in SAME_FIELDS.get(stored["type"], ()):
        if name in stored and name in bases:
            seq, base = bases[name]
            ref = _same_ref(stored[name], base, seq)
            if ref is not None:
                out[name] = ref
                if len(ref) == 1:
                    referred.add(name)
    return out, referred


def _same_ref(value: Any, base: Any, base_seq: int) -> dict[str, Any] | None:
    try:
        data = dumps(value)
        if data == dumps(base):
            ref: dict[str, Any] = {"$same": base_seq}
        elif isinstance(value, dict) and isinstance(base, dict) and base.keys() <= value.keys():
            changed = {k: v for k, v in value.items() if k not in base or dumps(v) != dumps(base[k])}
            ref = {"$same": base_seq, **changed}
        else:
            return None
        return ref if len(dumps(ref)) < len(data) else None
    except TypeError:  # lone surrogates or huge integers: stored in full, in their own way
        return None


class Repeats:
    """The :data:`SAME_FIELDS` of the lines of one log seen so far (stored form, by seq), to
    resolve the ``$same`` references of the next lines: every reader of stored lines goes through
    :meth:`resolve`, so they all see each field whole."""

    def __init__(self) -> None:
        self.fields: dict[int, dict[str, Any]] = {}

    def resolve(self, obj: dict[str, Any], where: str) -> dict[str, Any]:
        """``obj`` (an opened stored line) with its ``$same`` references replaced by the values
        they name, remembered for the lines after it. Raises :class:`SessionError` naming ``where``
        and the event when a reference names no earlier event of its type that has the field."""
        names = SAME_FIELDS.get(str(obj.get("type")), ())
        if not names:
            return obj
        out = dict(obj)
        for name in names:
            value = obj.get(name)
            if not (isinstance(value, dict) and "$same" in value):
                continue
            seq = value["$same"]
            base = self.fields.get(seq) if type(seq) is int else None
            if base is None or name not in base or (len(value) > 1 and not isinstance(base[name], dict)):
                raise SessionError(
                    f"{where}: event seq {obj.get('seq')}: field {name!r} refers to event {seq!r}, "
                    f"which is no earlier {obj['type']} with that field"
                )
            out[name] = (
                base[name]
                if len(value) == 1
                else {**base[name], **{k: v for k, v in value.items() if k != "$same"}}
            )
        if isinstance(out.get("seq"), int):
            self.fields[out["seq"]] = {k: out[k] for k in names if k in out}
        return out


def encode_exotic(fields: dict[str, Any], where: str) -> dict[str, Any]:
    """A line's ``fields`` (stored form) with the values orjson cannot write made writable: strings
    with lone surrogates as ``$u``, integers outside 64 bits as ``$int``, an object with such a
    string as a key as ``$kv`` pairs. Only used when a line failed. Raises :class:`SessionError`,
    naming ``where``, for a field name that is not valid Unicode (a line's fields are never pairs),
    an object key that is not a string, or a value that is not JSON data."""
    for name in fields:
        if not (isinstance(name, str) and _unicode(name)):
            raise SessionError(f"{where}: field name {name!r} is not valid Unicode")
    return {k: _exotic(v, where) for k, v in fields.items()}


def _exotic(value: Any, where: str) -> Any:
    if isinstance(value, str):
        if _unicode(value):
            return value
        return {"$u": base64.b64encode(value.encode("utf-8", "surrogatepass")).decode()}
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        if _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            return value
        if value.bit_length() > WIDEST_INT_BITS:
            raise SessionError(
                f"{where}: an integer of more than 4,000 digits, which no reader could read back"
            )
        return {"$int": str(value)}
    if isinstance(value, dict):
        # Escaped user data: its keys are the data's own, never encodings (nor is its dict an escape).
        escaped = len(value) == 1 and isinstance(value.get("$lit"), dict)
        data = value["$lit"] if escaped else value
        for k in data:
            if not isinstance(k, str):
                raise SessionError(f"{where}: object key {k!r} is not a string")
        if not all(_unicode(k) for k in data):  # a file name as os.listdir gives it, as a key
            return {"$kv": [[_exotic(k, where), _exotic(v, where)] for k, v in data.items()]}  # (literal)
        out = {k: _exotic(v, where) for k, v in data.items()}
        return {"$lit": out} if escaped else out
    if isinstance(value, list):
        return [_exotic(v, where) for v in value]
    raise SessionError(f"{where}: a {type(value).__name__} is not JSON data")


def _unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate), as orjson and UTF-8 need it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: How many of the blobs read last a reader hands back as the same object when referred to again
#: (:attr:`BlobStore.recent`): a checkpoint's manifest is stored as changes to a base manifest that
#: the checkpoints after it refer to too; read again for each, a session of N checkpoints would
#: hold N copies of it (quadratic in the length when the workspace grows a file a turn).
RECENT_BLOBS = 8


#: The keys of every stored form :func:`decode` reads.
_STORED = frozenset({"$blob", "$b64", "$u", "$int", "$kv", "$json", "$dumps", "$delta", "$lit"})


def decode(
    value: Any, blobs: BlobStore, where: str, tools: Mapping[int, Mapping[str, Any]] | None = None
) -> Any:
    """Stored form → resolved form (the inverse of :func:`encode`; ``$delta`` is handled by the reader).
    ``tools``: the resolved tool calls read so far, by seq, for ``$dumps``. Raises
    :class:`SessionError` for a ``$dumps`` naming no earlier tool call, ValueError for its unknown style."""
    if isinstance(value, dict):
        # (most objects hold none: looked at in C, rather than key by key below)
        if not _STORED.isdisjoint(value):
            if "$blob" in value:
                recent, key = blobs.recent, (str(value["$blob"]), bool(value.get("bytes")), value.get("size"))
                if recent is not None and (hit := recent.get(key)) is not None:
                    return hit
                data = blobs.get(key[0], where=where, size=key[2])
                out = data if key[1] else data.decode("utf-8", "surrogatepass")
                if recent is not None:
                    recent[key] = out
                    if len(recent) > RECENT_BLOBS:
                        del recent[next(iter(recent))]
                return out
            if "$b64" in value:
                return _bytes_of(value["$b64"], where)
            if "$u" in value and len(value) == 1:
                return _unicode_of(value["$u"], where)
            if "$int" in value and len(value) == 1:
                return int(value["$int"])
            if "$kv" in value and (pairs := _kv_pairs(value)) is not None:
                return _pairs(pairs, blobs, where, tools)
            if "$json" in value and isinstance(value["$json"], str):
                try:
                    inner = orjson.loads(blobs.get(value["$json"], where=where, size=value.get("size")))
                except orjson.JSONDecodeError as exc:
                    raise SessionError(
                        f"{blobs.path(value['$json'])}: JSON blob is not JSON ({exc}){where}"
                    ) from None
                return decode(inner, blobs, where, tools)
            if "$dumps" in value and len(value) == 1:
                ref = value["$dumps"]
                source = (tools or {}).get(int(ref["seq"]))
                if source is None or ref["of"] not in ("args", "result") or ref["of"] not in source:
                    raise SessionError(
                        f"a $dumps refers to the {ref['of']!r} of event {ref['seq']}, which is no earlier tool call{where}"
                    )
                return dumps_style(source[ref["of"]], str(ref["style"]))
            if "$delta" in value:
                d = value["$delta"]
                replaced = d.get("set", [])
                # (what a writer writes, exactly: a float, a string or a dict read as an index would
                # load a list other than the one verify checked)
                if not (
                    type(d["base"]) is int
                    and type(d["keep"]) is int
                    and isinstance(d.get("add", []), list)
                    and isinstance(replaced, list)
                    and all(isinstance(p, list) and len(p) == 2 and type(p[0]) is int for p in replaced)
                ):
                    raise ValueError(
                        'a $delta needs integers "base" and "keep", "add" a list, and "set" [index, item] pairs'
                    )
                replace = tuple((i, decode(v, blobs, where, tools)) for i, v in replaced)
                return Delta(d["base"], d["keep"], decode(d.get("add", []), blobs, where, tools), replace)
            if "$lit" in value and len(value) == 1:
                value = value["$lit"]
        return {k: v if type(v) in _LEAVES else decode(v, blobs, where, tools) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _LEAVES else decode(v, blobs, where, tools) for v in value]
    return value


def decode_fields(
    fields: dict[str, Any],
    blobs: BlobStore,
    where: str,
    tools: Mapping[int, Mapping[str, Any]] | None = None,
    *,
    whole: Iterable[str] = (),
) -> dict[str, Any]:
    """``{k: decode(v) for k, v in fields.items()}`` for a line's fields as parsed, equal field for
    field, but a part whose JSON holds no ``"$`` is kept as parsed rather than copied (a model
    call's response and request headers, where only its body holds a ``$delta``): every stored form
    is an object key that starts with ``$``, so such a part decodes to an equal copy of itself. A
    field and its members are looked at so, a level below that decoded whole. ``whole``: fields
    decoded whole, copied in any case (a checkpoint's fields that later lines refer to as
    ``$same``: :class:`Repeats` keeps them as stored, and an event must not share them)."""
    keep = set(whole)
    return {
        k: v
        if type(v) in _LEAVES
        else decode(v, blobs, where, tools)
        if k in keep
        else _decoded_part(v, blobs, where, tools, 1)
        for k, v in fields.items()
    }


def _decoded_part(
    value: Any, blobs: BlobStore, where: str, tools: Mapping[int, Mapping[str, Any]] | None, depth: int
) -> Any:
    """:func:`decode` of ``value``, ``value`` itself where its JSON holds no stored form (see
    :func:`decode_fields`), an object of no ``$`` key member by member ``depth`` levels down."""
    if type(value) in _LEAVES:
        return value
    try:
        plain = not may_hold_stored_form(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):  # (parsed JSON always writes; decoded whole if not)
        plain = False
    if plain:
        return value
    if depth and type(value) is dict and not any(k[:1] == "$" for k in value):
        return {k: _decoded_part(v, blobs, where, tools, depth - 1) for k, v in value.items()}
    return decode(value, blobs, where, tools)


def _bytes_of(text: Any, where: str) -> bytes:
    """The bytes a ``$b64`` holds. (Validated: base64 skips what is not of its alphabet, and would
    read a damaged one as other bytes, silently.)"""
    try:
        return base64.b64decode(text, validate=True)
    except (TypeError, ValueError):  # (binascii.Error is a ValueError)
        raise SessionError(f"a $b64 holds {text!r:.80}, not base64{where}") from None


def _unicode_of(text: Any, where: str) -> str:
    """The string a ``$u`` holds (base64 of its UTF-8, surrogates passed)."""
    try:
        return base64.b64decode(text, validate=True).decode("utf-8", "surrogatepass")
    except (TypeError, ValueError):  # (binascii.Error and UnicodeDecodeError are ValueErrors)
        raise SessionError(f"a $u holds {text!r}, not base64 of a string{where}") from None


def _kv_pairs(value: dict[str, Any]) -> list[list[Any]] | None:
    """The pairs of a ``$kv`` as a writer writes one: a list of ``[key, value]``, each key a string
    or a ``$u``, one at least a ``$u`` (it is written only for such a key); else None, and the dict
    is data (a forkpoint from before ``$kv`` wrote user data with that key as it was)."""
    pairs = value["$kv"]
    if len(value) != 1 or not isinstance(pairs, list):
        return None
    odd = False
    for pair in pairs:
        if not isinstance(pair, list) or len(pair) != 2:
            return None
        key = pair[0]
        if isinstance(key, dict) and len(key) == 1 and "$u" in key:
            odd = True
        elif not isinstance(key, str):
            return None
    return pairs if odd else None


def _pairs(
    pairs: list[list[Any]], blobs: BlobStore, where: str, tools: Mapping[int, Mapping[str, Any]] | None
) -> dict[str, Any]:
    """A ``$kv``'s dict (:func:`_kv_pairs`): its keys literal, its values decoded. Raises
    :class:`SessionError` for a key given twice."""
    out = {}
    for key, item in pairs:
        name = key if isinstance(key, str) else _unicode_of(key["$u"], where)
        if name in out:
            raise SessionError(f"a $kv gives the key {name!r} twice{where}")
        out[name] = decode(item, blobs, where, tools)
    return out


#: The encodings ``show --json`` writes (the rest are resolved): user data with one of these keys
#: is written ``{"$lit": {…}}`` there, as in the log.
SHOWN = frozenset({"$b64", "$delta", "$lit"})


class Encoded(dict[str, Any]):
    """A dict that is one of forkpoint's encodings (:func:`with_deltas`' ``$delta``), never user data."""


def to_json(value: Any, *, escape: bool = False) -> Any:
    """Resolved form → plain JSON (``bytes`` become ``{"$b64": …}``), e.g. for ``show --json``.
    With ``escape``, a dict of the data with a key in :data:`SHOWN` becomes ``{"$lit": {…}}``,
    so that nothing the data holds reads as an encoding."""
    if isinstance(value, bytes):
        return {"$b64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        out = {k: to_json(v, escape=escape) for k, v in value.items()}
        return {"$lit": out} if escape and type(value) is dict and SHOWN.intersection(value) else out
    if isinstance(value, list):
        return [to_json(v, escape=escape) for v in value]
    return value


def from_json(value: Any) -> Any:
    """Plain JSON as :func:`to_json` with ``escape`` writes it → resolved form: ``{"$b64": …}`` is
    bytes again, ``{"$lit": {…}}`` the data it holds (an override copied from ``show``). Raises
    ``ValueError`` for a ``$b64`` that is not base64."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get("$b64"), str):
            return base64.b64decode(value["$b64"], validate=True)
        if len(value) == 1 and isinstance(value.get("$lit"), dict):
            value = value["$lit"]
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def json_text(value: Any, *, indent: bool = False, sort_keys: bool = False) -> bytes:
    """``value`` (plain JSON data, :class:`DeltaList` views as lists) as JSON text (RFC 8259) for
    people and pages, ``indent`` by two spaces: orjson's, else, for what orjson refuses and a
    session may hold (:func:`encode_exotic`), :func:`~forkpoint.canonical.python_json`'s. Raises
    ``TypeError`` for what is not JSON data."""
    options = (orjson.OPT_INDENT_2 if indent else 0) | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    try:
        return orjson.dumps(value, default=json_default, option=options)
    except TypeError:  # (orjson's JSONEncodeError: what is not JSON data is refused again below)
        return python_json(value, indent=indent, sort_keys=sort_keys)


def read_json_text(data: bytes | str) -> Any:
    """The value of JSON text (as :func:`json_text` writes it), by Python's reading: orjson's reads
    an integer beyond 64 bits as a float and refuses a lone surrogate's escape. Raises
    ``ValueError`` (``json.JSONDecodeError``) naming where the text is not JSON."""
    return json.loads(data)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def blob_refs(value: Any, out: dict[str, int], lineno: int) -> None:
    """Add the names of the blobs the stored value ``value`` refers to (``$blob``, ``$json``) to
    ``out``, each with the first line (``lineno``) that refers to it."""
    if isinstance(value, dict):
        if "$lit" in value and len(value) == 1 and isinstance(value["$lit"], dict):
            # Escaped user data: its keys are literal ({"$blob": ...} there is no reference).
            for v in value["$lit"].values():
                blob_refs(v, out, lineno)
            return
        for ref in ("$blob", "$json"):
            if ref in value:
                out.setdefault(str(value[ref]), lineno)
        for v in value.values():
            blob_refs(v, out, lineno)
    elif isinstance(value, list):
        for v in value:
            blob_refs(v, out, lineno)


def line_hash(obj: dict[str, Any]) -> str:
    return digest({k: v for k, v in obj.items() if k != "hash"})


def valid_line(raw: bytes) -> dict[str, Any] | None:
    """The parsed line if it is a JSON object whose ``hash`` matches its content, else None."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("hash"), str):
        return None
    try:
        return obj if obj["hash"] == line_hash(obj) else None
    except TypeError:
        return None


def delta_container(event: dict[str, Any]) -> dict[str, Any] | None:
    """The dict whose top-level lists are delta-encoded: a model call's JSON request body, or a
    checkpoint's carried ``context``. None for other events."""
    if event.get("type") == "model_call":
        request = event.get("request") or {}
        body = request.get("body")
        return body if request.get("body_kind") == "json" and isinstance(body, dict) else None
    if event.get("type") == "checkpoint":
        context = event.get("context")
        return context if isinstance(context, dict) else None
    return None


def same_item(a: Any, b: Any) -> bool:
    """Whether two items (resolved form) are the same JSON: the same object, or equal with the
    same exact JSON (``==`` alone takes ``1``, ``1.0`` and ``true`` for one another)."""
    if a is b:
        return True
    try:
        return bool(a == b) and orjson.dumps(a, default=to_json) == orjson.dumps(b, default=to_json)
    except (TypeError, orjson.JSONEncodeError):  # not JSON data: never taken for another item
        return False


@dataclass(frozen=True)
class Delta:
    """A decoded ``$delta``: the first ``keep`` items of field of event ``base``, with item ``i``
    replaced by ``v`` for each ``(i, v)`` of ``replace``, then ``add``."""

    base: int
    keep: int
    add: list[Any]
    replace: tuple[tuple[int, Any], ...] = ()


#: Of one event, the lists that were stored as a ``$delta``: field name → (base seq, keep, the
#: indices of the items it replaces).
Deltas = dict[str, tuple[int, int, tuple[int, ...]]]


def resolve_deltas(
    event: dict[str, Any],
    lists: dict[int, dict[str, Sequence[Any]]],
    log_path: Path,
    lineno: int,
    *,
    share: bool = False,
    version: int = FORMAT_VERSION,
) -> Deltas:
    """Rebuild the ``$delta`` lists of ``event`` in place from ``lists`` (the lists of the earlier
    events, by seq): as lists of their own, or with ``share`` as
    :class:`~forkpoint.deltalist.DeltaList` views that share their items' slots along the
    conversation. Returns which they were. Raises :class:`SessionError` naming the line when a base
    is missing or too short, or the items replaced are not at ascending indices below ``keep``, or
    replaced at all in a session of format ``version`` before :data:`DELTA_SET_FROM` (whose readers
    would leave them out)."""
    body = delta_container(event)
    found: Deltas = {}
    if body is None:
        return found
    for name, value in body.items():
        if isinstance(value, Delta):
            base = lists.get(value.base, {}).get(name)
            if base is None or len(base) < value.keep or value.keep < 0:
                raise SessionError(
                    f"{log_path}:{lineno}: request field {name!r} refers to event {value.base}, "
                    "which is missing or shorter than the delta says"
                )
            at = tuple(i for i, _ in value.replace)
            if at and version < DELTA_SET_FROM:
                raise SessionError(
                    f"{log_path}:{lineno}: request field {name!r} replaces items {list(at)} in a "
                    f'version-{version} session: a delta\'s "set" came with version {DELTA_SET_FROM}'
                )
            if any(not 0 <= i < value.keep for i in at) or list(at) != sorted(set(at)):
                raise SessionError(
                    f"{log_path}:{lineno}: request field {name!r} replaces items {list(at)}: the "
                    f"indices must ascend, each below the {value.keep} kept"
                )
            if share:
                body[name] = DeltaList.from_delta(base, value.keep, value.add, value.replace)
            else:
                items = [*base[: value.keep], *value.add]
                for i, v in value.replace:
                    items[i] = v
                body[name] = items
            found[name] = (value.base, value.keep, at)
    return found


def delta_form(base: int, keep: int, replace: Iterable[tuple[int, Any]], add: list[Any]) -> dict[str, Any]:
    """What ``{"$delta": ...}`` holds: the first ``keep`` items of the same field of event ``base``,
    item ``i`` replaced by ``v`` for each ``(i, v)`` of ``replace`` (``set``, left out when none),
    then ``add``."""
    form: dict[str, Any] = {"base": base, "keep": keep}
    replaced = [[i, v] for i, v in replace]
    if replaced:
        form["set"] = replaced
    form["add"] = add
    return form


def with_deltas(event: dict[str, Any], deltas: Deltas) -> dict[str, Any]:
    """``event`` (resolved) with the lists ``deltas`` names in their ``$delta`` form again —
    ``{"$delta": {"base": S, "keep": K, "add": [...]}}`` (and ``set``), the items resolved — so that a whole
    session written out grows linearly with the conversation, as the log does. A shallow copy;
    ``event`` itself when ``deltas`` is empty."""
    body = delta_container(event)
    if body is None or not deltas:
        return event
    stored = {
        k: Encoded(
            {
                "$delta": delta_form(
                    deltas[k][0], deltas[k][1], ((i, v[i]) for i in deltas[k][2]), v[deltas[k][1] :]
                )
            }
        )
        if k in deltas
        else v
        for k, v in body.items()
    }
    if event.get("type") == "model_call":
        return {**event, "request": {**event["request"], "body": stored}}
    return {**event, "context": stored}
