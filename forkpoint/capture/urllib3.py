"""The urllib3 adapter: capture where a connection pool sends one request (``requests``, botocore).

``requests`` and botocore (so boto3, and Amazon Bedrock) send through urllib3's connection pools.
``HTTPConnectionPool.urlopen`` handles retries, redirects and pooling and calls
``_make_request(conn, method, url, …)`` once per attempt: that is the transport seam this adapter
wraps (once per process, on the base class, so ``HTTPSConnectionPool`` and every pool a
``PoolManager`` or ``ProxyManager`` makes are covered).

* **record**: the attempt is made for real with ``preload_content=False``; the response's raw reads
  (``_fp_read``, and ``_handle_chunk`` for chunked bodies streamed with ``stream()``) are teed into
  an :class:`~forkpoint.capture.exchange.Exchange`, chunk by chunk as the caller reads them; a
  caller that asked for a preloaded body gets it read the way urllib3 would have (``read()``).
  Bodies are stored decoded with forkpoint's own decoders, which handle the codings urllib3 does.
* **replay**: the recorded response is built as a ``urllib3.HTTPResponse`` over a
  :class:`~forkpoint.capture.exchange.ChunkReader`, so everything after the seam — retries on the
  status, redirects, decoding, ``requests``' and botocore's own reading — is urllib3's and the
  caller's own code; no connection is opened.

Errors: a failure raised by the attempt (``NewConnectionError``, a timeout) is recorded and raised
again as the same urllib3 class; a body that fails mid-way raises the recorded exception from the
socket read, which urllib3 turns into the same ``ProtocolError`` or ``ReadTimeoutError`` as live.
"""

from __future__ import annotations

import importlib
import inspect
import re
from types import ModuleType
from typing import Any

from .. import runtime
from . import seam
from .decoding import following_decoder, own_decoder
from .exchange import Exchange, body_content, built, live, request_record, serve
from .httpclient import recorded_response

#: The libraries this adapter captures.
LIBRARIES = ("urllib3",)
#: What is patched: ``_make_request`` with the parameters urllib3 2.x gives it.
PATCHED: seam.Patched = (
    (
        "connectionpool.HTTPConnectionPool",
        "_make_request",
        (
            "self",
            "conn",
            "method",
            "url",
            "body",
            "headers",
            "retries",
            "timeout",
            "chunked",
            "response_conn",
            "preload_content",
            "decode_content",
            "enforce_content_length",
        ),
    ),
)

_installed: dict[str, ModuleType] = {}
#: Where an HTTPS pool opens its tunnel through a proxy (``CONNECT``) on a new connection, before
#: ``_make_request``: deferred into it, so that a served request opens none and a tunnel that fails
#: is recorded as the exchange's failure.
_TUNNEL = ("connectionpool.HTTPSConnectionPool", "_prepare_proxy")
_PENDING_TUNNEL = "_forkpoint_tunnel"


def install() -> list[str]:
    """Wrap urllib3's ``HTTPConnectionPool._make_request`` (now, or when the program
    imports urllib3). Idempotent."""
    return seam.install_library("urllib3", _installed, signature_problem, _patch)


def installed() -> list[str]:
    """The libraries patched in this process."""
    return sorted(_installed)


def uninstall() -> None:
    """Restore the original methods (for tests of the capture layer itself)."""
    seam.stop_waiting(("urllib3",))
    for name, mod in list(_installed.items()):
        seam.unwrap(seam.find(mod, PATCHED[0][0]), "_make_request")
        seam.unwrap(seam.find(mod, _TUNNEL[0]), _TUNNEL[1])
        del _installed[name]


def signature_problem(mod: ModuleType) -> str | None:
    """What does not match :data:`PATCHED` in the installed urllib3 (None when all does)."""
    return seam.signature_problem(mod, PATCHED)


def full_url(pool: Any, url: str) -> str:
    """The absolute URL of a request a pool sends (``url`` is a path, or absolute through a proxy)."""
    if "://" in url:
        return url
    host = pool.host if ":" not in pool.host else f"[{pool.host}]"
    return f"{pool.scheme}://{host}:{pool.port}{url}" if pool.port else f"{pool.scheme}://{host}{url}"


#: How urllib3's IncompleteRead says its counts (``str()`` and ``repr()`` alike).
_INCOMPLETE = re.compile(r"IncompleteRead\((\d+) bytes read, (\d+) more expected\)")


def _patch(mod: ModuleType) -> None:
    pool_cls = seam.find(mod, PATCHED[0][0])
    exceptions = importlib.import_module("urllib3.exceptions")
    response_cls = importlib.import_module("urllib3.response").HTTPResponse

    def library_error(name: str, message: str, os_error: OSError | None) -> BaseException | None:
        """A urllib3 exception by name (their constructors want a pool or a connection, which a
        recording does not have: built without them, with the recorded message)."""
        cls = getattr(exceptions, name, None)
        if not (isinstance(cls, type) and issubclass(cls, exceptions.HTTPError)):
            return None
        counts = _INCOMPLETE.fullmatch(message) if cls is exceptions.IncompleteRead else None
        if counts:  # (its str() reads its two counts, which a bare instance lacks)
            incomplete: BaseException = cls(int(counts[1]), int(counts[2]))
            return incomplete
        return built(cls, message)

    def recorded(pool: Any, rt: runtime.Runtime, taken: Any, args: dict[str, Any]) -> Any:
        """urllib3's response to a recorded call, built as urllib3 builds one around the standard
        library's (which parses the recorded answer from memory: :func:`.httpclient.recorded_response`),
        so reading it — chunk by chunk with ``stream()``, or whole — takes urllib3's own paths."""
        event, position = taken
        raw = recorded_response(rt, event, position, args["method"], library_error)
        response = response_cls(
            body=raw,
            headers=list(raw.msg.items()),
            status=raw.status,
            version=raw.version,
            version_string=f"HTTP/{raw.version // 10}.{raw.version % 10}",
            reason=raw.reason,
            preload_content=args["preload_content"],
            decode_content=args["decode_content"],
            original_response=raw,
            enforce_content_length=args["enforce_content_length"],
            request_method=args["method"],
            request_url=args["url"],
        )
        response.retries = args["retries"]
        response._connection = args["response_conn"]
        response._pool = pool
        return response

    def teed(response: Any, call: Exchange, preload: bool, decode: bool) -> Any:
        """A live response whose raw reads are recorded as they happen."""
        version = {10: "HTTP/1.0", 11: "HTTP/1.1", 20: "HTTP/2", 30: "HTTP/3"}.get(
            response.version, "HTTP/1.1"
        )
        call.respond(response.status, response.reason or "", version, list(response.headers.items()))
        fp_read, handle_chunk = response._fp_read, response._handle_chunk
        update_chunk_length, close = response._update_chunk_length, response.close

        # urllib3 closes the response itself before raising some errors (a cut chunked body): the
        # error, not the close, is how that read ended.
        state = {"reading": False, "closed": False}

        def guarded(read: Any, *args: Any, **kwargs: Any) -> bytes:
            state["reading"] = True
            try:
                data: bytes = read(*args, **kwargs)
            except BaseException as exc:
                call.error = exc
                call.finish()
                raise
            finally:
                state["reading"] = False
            if data:
                call.chunk(data)
            if state["closed"]:
                call.finish()
            return data

        def _fp_read(amt: int | None = None, *, read1: bool = False) -> bytes:
            data = guarded(fp_read, amt, read1=read1)
            fp = response._fp
            if (amt is None and not read1) or (amt != 0 and not data) or fp is None or fp.isclosed():
                # Shorter than its Content-Length: urllib3 raises IncompleteRead once this read is
                # counted, outside these hooks (requests: ChunkedEncodingError). That is the ending.
                left = response.length_remaining
                if response.enforce_content_length and left is not None and left - len(data) > 0:
                    done = response._fp_bytes_read + len(data)
                    call.error = exceptions.IncompleteRead(done, left - len(data))
                    call.finish()
                else:
                    call.whole(b"")  # read to the end: written now
            return data

        def _update_chunk_length() -> None:
            guarded(lambda: update_chunk_length() or b"")
            if response.chunk_left == 0:
                call.whole(b"")

        def _close() -> None:
            try:
                close()
            finally:
                state["closed"] = True
                if not state["reading"]:
                    call.finish()

        response._fp_read = _fp_read
        response._handle_chunk = lambda amt: guarded(handle_chunk, amt)
        response._update_chunk_length = _update_chunk_length
        response.close = _close
        if preload:  # what urllib3's constructor does when asked to preload
            response._body = response.read(decode_content=decode)
        return response

    def make(original: Any) -> Any:
        sig = inspect.signature(original)

        def _make_request(self: Any, *args: Any, **kwargs: Any) -> Any:
            rt = runtime.active_for_http()
            if rt is None:
                return original(self, *args, **kwargs)
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            a = dict(bound.arguments)
            content, a["body"] = body_content(a["body"])
            headers = list((a["headers"] or {}).items())
            rec = request_record(a["method"], full_url(self, a["url"]), headers, content)
            tunnel = vars(a["conn"]).pop(_PENDING_TUNNEL, None)
            taken = serve(rt, rec)
            if taken is not None:
                return recorded(self, rt, taken, a)
            # (a program reading the body raw never inflates it: then forkpoint stops where it must)
            call = live(rt, rec, following_decoder if a["decode_content"] else own_decoder)
            preload, a["preload_content"] = a["preload_content"], False
            try:
                if tunnel is not None:
                    tunnel()
                response = original(**a)
            except BaseException as exc:  # no response: the attempt failed (connect, timeout…)
                call.error = exc
                call.finish()
                raise
            return teed(response, call, preload, a["decode_content"])

        return _make_request

    seam.wrap(pool_cls, "_make_request", make)

    def make_tunnel(original: Any) -> Any:
        def _prepare_proxy(self: Any, conn: Any) -> Any:
            if runtime.active_for_http() is None:
                return original(self, conn)
            setattr(conn, _PENDING_TUNNEL, lambda: original(self, conn))  # (see _TUNNEL)
            return None

        return _prepare_proxy

    seam.wrap(seam.find(mod, _TUNNEL[0]), _TUNNEL[1], make_tunnel)
