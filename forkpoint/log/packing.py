"""Packed lines: an event's fields, all but its envelope, as one zstd frame compressed against the
same writer's recent lines (``docs/format.md``, format version 2).

An agent's calls repeat one another: the same headers, ids and model names in every SSE frame, a
test run's output that grows by a line a turn, the arguments of a tool the model just streamed. Each
line alone compresses poorly; against the lines before it, about tenfold. A packed line is::

    {"seq", "type", "ts", ["torn"], "$zstd": "<base64 of a zstd frame>", ["$dict": [seq, …]], "prev", "hash"}

The frame holds the JSON of the line's other fields (its *payload*, in the stored form: blobs,
``$delta``… as in a plain line); ``$dict`` names the earlier packed lines whose payloads, joined in
that order, are its raw-content dictionary. The envelope is a sealed line's (:data:`.crypto.CLEAR_EVENT`):
the chain and ``ls`` need nothing unpacked, and the hash covers the frame, hence the payload.

:class:`Packer` is the writer's side, :class:`Unpacker` the readers' (the reader and ``verify``):
both keep payloads by seq, so that a dictionary is only ever a line at most :data:`PACK_WINDOW`
lines back, of at most :data:`DICT_MAX` bytes.
"""

from __future__ import annotations

import base64
from collections import deque
from typing import Any

import orjson

from ..errors import SessionError
from .blobs import HUGE_BLOB
from .codec import encode_exotic
from .crypto import CLEAR_EVENT

#: The key of a packed line's frame, and of the seqs of its dictionary lines.
PACKED = "$zstd"
PACK_DICT = "$dict"
#: How many of its own latest packed lines of the same type a writer packs a line against (an agent
#: alternates tools, so the last one is often another tool's). It also packs against its latest line
#: of another type: the model call whose arguments a tool call has, the tool call whose result the
#: next request sends back.
PACK_KEEP = 3
#: A dictionary line is at most this many lines before the line it packs: readers keep no more.
PACK_WINDOW = 128
#: Payloads longer than this serve as no dictionary (the readers' memory stays bounded).
DICT_MAX = 1 << 16
#: Payloads longer than this are not packed, and a reader refuses a frame that says it is longer
#: (a few hostile bytes must not unpack to more than a gigabyte).
PACK_MAX = 1 << 30
#: Lines never packed: ``end``, whose exit code the store's listings read without a reader.
UNPACKED_TYPES = frozenset({"end"})


class Packer:
    """The writer's side: packs its lines, and keeps its last :data:`PACK_KEEP` packed payloads of
    each type for the next lines' dictionaries. Not thread-safe (the writer holds its lock)."""

    def __init__(self) -> None:
        self._recent: dict[str, deque[tuple[int, bytes]]] = {}
        self._context: _Context | None = None

    def pack(self, seq: int, stored: dict[str, Any], where: str) -> tuple[dict[str, Any], bytes] | None:
        """The packed form of the stored line ``stored`` (``type``, ``ts`` and fields; it will be
        line ``seq``) without its chain fields, and its payload for :meth:`keep` once it is written;
        None when packing does not pay (or the type is never packed)."""
        kind = stored["type"]
        if kind in UNPACKED_TYPES:
            return None
        fields = {k: v for k, v in stored.items() if k not in CLEAR_EVENT}
        try:
            payload = orjson.dumps(fields)
        except TypeError:  # lone surrogates or huge integers: stored in their own way
            payload = orjson.dumps(encode_exotic(fields, where))
        if len(payload) > PACK_MAX:
            return None
        refs = list(self._recent.get(kind, ()))
        others = [recent[-1] for other, recent in self._recent.items() if other != kind and recent]
        if others:
            refs.append(max(others))
        refs = sorted(r for r in refs if r[0] >= seq - PACK_WINDOW)
        dictionary = b"".join(p for _, p in refs)
        frame = None
        if _zstd_c() is not None:
            try:
                self._context = self._context or _Context()
                frame = self._context.compress(payload, dictionary)
            except Exception:  # (bindings not python-zstandard's API: another release's may differ)
                _no_bindings()
        if frame is None:
            frame = _compressor(dictionary, len(payload)).compress(payload)
        text = base64.b64encode(frame).decode()
        if len(text) + 8 * len(refs) + 12 >= len(payload):  # 12: the keys' own cost
            return None
        packed = {k: v for k, v in stored.items() if k in CLEAR_EVENT}
        packed[PACKED] = text
        if refs:
            packed[PACK_DICT] = [s for s, _ in refs]
        return packed, payload

    def keep(self, seq: int, kind: str, payload: bytes) -> None:
        """Remember the payload of packed line ``seq``, now written, as a dictionary of later ones."""
        if len(payload) <= DICT_MAX:
            self._recent.setdefault(kind, deque(maxlen=PACK_KEEP)).append((seq, payload))


class Unpacker:
    """The readers' side: opens the packed lines of one log, read in order, and keeps the payloads a
    later line may use as its dictionary."""

    def __init__(self) -> None:
        self._payloads: dict[int, bytes] = {}
        self._context: _Context | None = None

    def open(self, obj: dict[str, Any], where: str) -> tuple[dict[str, Any], bytes | None]:
        """The stored line ``obj`` with its packed fields opened (itself when not packed), in the
        order a plain line has them, and the JSON of those fields (None when not packed). Raises
        :class:`SessionError` naming ``where`` for a frame that cannot be opened, or a dictionary
        line that is not an earlier packed line in the window."""
        if PACKED not in obj:
            return obj, None
        seq, refs, text = obj.get("seq"), obj.get(PACK_DICT, []), obj[PACKED]
        if not isinstance(seq, int) or not isinstance(text, str) or not isinstance(refs, list):
            raise SessionError(
                f"{where}: a packed line needs an integer seq, {PACKED} text and a {PACK_DICT} list"
            )
        dictionary = []
        for ref in refs:
            payload = (
                self._payloads.get(ref) if isinstance(ref, int) and seq - PACK_WINDOW <= ref < seq else None
            )
            if payload is None:
                raise SessionError(
                    f"{where}: packed against line seq {ref!r}, which is no packed line of the "
                    f"{PACK_WINDOW} before it"
                )
            dictionary.append(payload)
        try:
            frame = base64.b64decode(text, validate=True)
        except ValueError:
            raise SessionError(f"{where}: {PACKED} is not base64") from None
        payload = self._unpack(frame, b"".join(dictionary), where)
        try:
            fields = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise SessionError(f"{where}: the packed fields are not JSON ({exc})") from None
        if not isinstance(fields, dict) or not _CLEAR.isdisjoint(fields):
            raise SessionError(f"{where}: the packed fields are not an object of event fields")
        if len(payload) <= DICT_MAX:
            self._payloads[seq] = payload
        while self._payloads and next(iter(self._payloads)) < seq - PACK_WINDOW:
            del self._payloads[next(iter(self._payloads))]
        out = {"seq": seq, "type": obj.get("type"), "ts": obj.get("ts"), **fields}
        for k in ("torn", "prev", "hash"):
            if k in obj:
                out[k] = obj[k]
        return out, payload

    def _unpack(self, frame: bytes, dictionary: bytes, where: str) -> bytes:
        import zstandard

        try:
            size = zstandard.frame_content_size(frame)
            if not 0 <= size <= PACK_MAX:
                raise SessionError(f"{where}: a packed frame must say its size, at most {PACK_MAX} bytes")
            if _zstd_c() is not None:
                try:
                    self._context = self._context or _Context()
                    return self._context.decompress(frame, dictionary, size)
                except zstandard.ZstdError:
                    raise
                except Exception:  # (bindings not python-zstandard's API: another release's may differ)
                    _no_bindings()
            if not dictionary:
                return zstandard.ZstdDecompressor().decompress(frame)
            raw = zstandard.ZstdCompressionDict(dictionary, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
            return zstandard.ZstdDecompressor(dict_data=raw).decompress(frame)
        except zstandard.ZstdError as exc:
            raise SessionError(f"{where}: the packed frame cannot be decompressed ({exc})") from None


#: :data:`CLEAR_EVENT` as a set: no packed field may be one of them.
_CLEAR = frozenset(CLEAR_EVENT)


def _level(size: int) -> int:
    # A line of megabytes (a big tool result) is packed fast rather than small, as blobs are: still
    # cheaper than hashing and writing it whole.
    return 3 if size < HUGE_BLOB else 1


def _compressor(dictionary: bytes, size: int) -> Any:
    import zstandard  # (imported on first use: a session that packs nothing never loads it)

    level = _level(size)
    if not dictionary:
        return zstandard.ZstdCompressor(level=level, write_checksum=False)
    raw = zstandard.ZstdCompressionDict(dictionary, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdCompressor(level=level, dict_data=raw, write_checksum=False)


def _zstd_c() -> Any:
    """python-zstandard's bindings of zstd's C API (its cffi backend: ``(ffi, lib)``), or None where
    they cannot be loaded (no ``cffi``)."""
    global _ZSTD_C
    if _ZSTD_C is False:
        try:
            from zstandard._cffi import ffi, lib  # (on first use, as zstandard itself)
        except ImportError:
            _ZSTD_C = None
        else:
            _ZSTD_C = (ffi, lib)
    return _ZSTD_C


_ZSTD_C: Any = False


def _no_bindings() -> None:
    # python-zstandard's public API from now on, which fails loudly if zstd does.
    global _ZSTD_C
    _ZSTD_C = None


class _Context:
    """One zstd context for all of a writer's lines (compression) or a reader's (decompression),
    each line against its dictionary referenced as a single-use *prefix*: a prefix is read as a
    raw-content dictionary, so the frame is the one a raw-content dictionary gives and opens with
    the same bytes as its dictionary. A context made per line (as ``zstandard.ZstdCompressor`` and
    ``ZstdDecompressor`` do) asks the CPU for its features each time, which in a virtual machine
    traps to the hypervisor (some 7 µs a line), and digests its dictionary in full first (a
    ``CDict`` or ``DDict``). Not thread-safe: each writer and reader has its own."""

    def __init__(self) -> None:
        ffi, lib = _ZSTD_C
        self._ffi, self._lib = ffi, lib
        self._new = ffi.new_allocator(should_clear_after_alloc=False)  # (written over by zstd)
        self._cctx: Any = None
        self._dctx: Any = None

    def _made(self, create: Any, free: Any, what: str) -> Any:
        made = self._ffi.gc(create(), free)
        if made == self._ffi.NULL:
            raise MemoryError(f"zstd: no {what} context")
        return made

    def _check(self, code: int) -> int:
        if self._lib.ZSTD_isError(code):
            import zstandard

            raise zstandard.ZstdError(self._ffi.string(self._lib.ZSTD_getErrorName(code)).decode())
        return code

    def compress(self, payload: bytes, dictionary: bytes) -> bytes:
        """One frame of ``payload`` (its size in its header), against ``dictionary`` (raw content)."""
        ffi, lib = self._ffi, self._lib
        if (cctx := self._cctx) is None:
            cctx = self._cctx = self._made(lib.ZSTD_createCCtx, lib.ZSTD_freeCCtx, "compression")
            self._check(lib.ZSTD_CCtx_setParameter(cctx, lib.ZSTD_c_checksumFlag, 0))
        self._check(lib.ZSTD_CCtx_reset(cctx, lib.ZSTD_reset_session_only))
        self._check(lib.ZSTD_CCtx_setParameter(cctx, lib.ZSTD_c_compressionLevel, _level(len(payload))))
        prefix = ffi.from_buffer(dictionary)  # (held to the end: zstd reads it where it lies)
        if dictionary:
            self._check(
                lib.ZSTD_CCtx_refPrefix_advanced(cctx, prefix, len(dictionary), lib.ZSTD_dct_rawContent)
            )
        bound = lib.ZSTD_compressBound(len(payload))
        out = self._new("char[]", bound)
        n = self._check(lib.ZSTD_compress2(cctx, out, bound, ffi.from_buffer(payload), len(payload)))
        return bytes(ffi.buffer(out, n))

    def decompress(self, frame: bytes, dictionary: bytes, size: int) -> bytes:
        """The ``size`` bytes ``frame`` holds (its header says so), against ``dictionary`` (raw
        content). Raises ``zstandard.ZstdError`` for a frame that does not open to that size."""
        ffi, lib = self._ffi, self._lib
        if (dctx := self._dctx) is None:
            dctx = self._dctx = self._made(lib.ZSTD_createDCtx, lib.ZSTD_freeDCtx, "decompression")
        self._check(lib.ZSTD_DCtx_reset(dctx, lib.ZSTD_reset_session_only))
        prefix = ffi.from_buffer(dictionary)  # (held to the end, as in compress)
        if dictionary:
            self._check(
                lib.ZSTD_DCtx_refPrefix_advanced(dctx, prefix, len(dictionary), lib.ZSTD_dct_rawContent)
            )
        out = self._new("char[]", max(size, 1))
        n = self._check(lib.ZSTD_decompressDCtx(dctx, out, size, ffi.from_buffer(frame), len(frame)))
        if n != size:
            import zstandard

            raise zstandard.ZstdError(f"the frame opens to {n} bytes, not the {size} its header says")
        return bytes(ffi.buffer(out, n))
