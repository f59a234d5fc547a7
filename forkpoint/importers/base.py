"""The importer seam: what an importer is, what it makes of a file, and how that is written."""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..errors import ImportFormatError, ToolResultError
from ..events import iso_time, new_span_id, now_iso, parse_time
from ..match import event_key
from ..record import make_header
from ..redact import scrub_json
from ..store import open_store
from ..values import encode as encode_value


@dataclass(frozen=True)
class Importer:
    """One file format forkpoint imports: its ``name`` (``forkpoint import --format``), what such a
    file looks like (``description``, for messages), ``detect(doc)`` (parsed JSON/YAML → is it
    one?) and ``convert(path, doc)`` (→ :class:`Imported`; raises
    :class:`~forkpoint.errors.ImportFormatError` naming the file and what is wrong)."""

    name: str
    description: str
    detect: Callable[[Any], bool]
    convert: Callable[[Path, Any], Imported]


@dataclass
class Imported:
    """What an importer made of a file, before it is written as a session.

    ``events`` are ``model_call`` / ``tool_call`` / ``note`` events in resolved form (no seq, no
    hashes); ``missing`` says, one item each, what the source does not hold; ``adjusted`` what the
    importer had to infer or fill in; ``end_reason`` and ``exit_code`` go to the ``end`` event;
    ``details`` are extra ``imported_from`` header fields; ``versions`` those of Python and the
    packages that made the calls, as far as the file says (the header's ``versions``, beside the
    ``forkpoint`` that wrote the session: never the importing environment's).
    """

    format: str
    events: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    adjusted: list[str] = field(default_factory=list)
    end_reason: str | None = None
    exit_code: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def load_document(path: Path, raw: bytes, expected: str) -> Any:
    """Parse ``raw`` as JSON, else as YAML (VCR.py's default serializer); a gzip-compressed file
    (``.yaml.gz``, as langchain's cassette serializer writes) is decompressed first. Raises
    :class:`~forkpoint.errors.ImportFormatError` when it is neither, saying what was ``expected``."""
    if raw[:2] == b"\x1f\x8b":
        raw = gunzip(path, raw)
    try:
        # One parse, which refuses a key set twice as it builds each object: orjson's, then another
        # to check, doubled an import's time. Python's json reads an integer beyond 64 bits as
        # itself; what orjson refused (NaN, Infinity, a number too large for a float, UTF-16) is
        # still left to YAML.
        return json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=lambda pairs: _unique_json_keys(path, pairs),
            parse_constant=_no_constant,
            parse_float=_finite_float,
        )
    except RecursionError:  # (JSON it is: YAML, tried next, would recurse until it crashed)
        raise ImportFormatError(f"{path}: JSON nested too deep to import; expected {expected}") from None
    except ImportFormatError:
        raise
    except ValueError:  # (no JSON: a JSONDecodeError, text that is no UTF-8, a number orjson refused)
        pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ImportFormatError(f"{path}: not a text file; expected {expected}") from None
    return load_yaml(path, text, expected)


def _unique_json_keys(path: Path, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The JSON object of ``pairs``; refused when it sets a key twice (:func:`_key_twice`)."""
    obj = dict(pairs)
    if len(obj) < len(pairs):  # (the key looked for only then: the common case is one comparison)
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _key_twice(path, key, "in one object")
            seen.add(key)
    return obj


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # (1e400: orjson refused it)
        raise ValueError(f"{text} is too large for a float")
    return value


def _key_twice(path: Path, key: str, where: str) -> ImportFormatError:
    """The error for a key set twice in one mapping ``where``: a reader keeps the last one, so a
    bad merge that kept both sides of a cassette would lose one side's calls without a word."""
    return ImportFormatError(
        f"{path}: the key {key!r} is set twice {where} (a bad merge?); a reader would keep only the "
        "last one. Not read"
    )


#: The most a compressed file may expand to (a bigger one is refused, not read into memory).
MAX_UNCOMPRESSED = 1 << 30


def gunzip(path: Path, raw: bytes) -> bytes:
    """The decompressed content of a gzip file, every member of it in order (as ``gzip -d`` reads
    one written a member at a time). Raises :class:`~forkpoint.errors.ImportFormatError` for a
    corrupt one, one with bytes after its members, or one that expands beyond
    :data:`MAX_UNCOMPRESSED` bytes."""
    parts: list[bytes] = []
    left, rest = MAX_UNCOMPRESSED, raw
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            parts.append(d.decompress(rest, left + 1))
        except zlib.error as exc:
            raise ImportFormatError(f"{path}: a gzip file that does not decompress ({exc})") from None
        left -= len(parts[-1])
        if d.unconsumed_tail or left < 0:
            raise ImportFormatError(f"{path}: decompresses to more than {MAX_UNCOMPRESSED} bytes; not read")
        if not d.eof:  # (cut short: what it holds would be read as a file of another kind)
            raise ImportFormatError(f"{path}: a gzip file that does not decompress (it ends before its end)")
        rest = d.unused_data
        if not rest.strip(b"\0"):  # (zero padding after the last member, which gzip -d accepts too)
            return b"".join(parts)
        if rest[:2] != b"\x1f\x8b":
            raise ImportFormatError(
                f"{path}: {len(rest)} bytes after its gzip data are not gzip; a file cut or appended to? Not read"
            )


#: The most characters of YAML forkpoint parses (PyYAML's safe loader reads ~1 MB/s).
MAX_YAML_CHARS = 64 << 20
#: The most nodes a YAML document may have once its aliases are expanded: a "billion laughs"
#: document (aliases of aliases, a few hundred bytes naming 10**9 strings) is refused before any
#: of it is built, instead of growing every later walk of the document without bound.
MAX_YAML_NODES = 2_000_000
#: The most items (steps, messages, interactions) a list of an imported document may have. A
#: trajectory's n-th model request carries the n-1 messages before it, so an import does work in
#: the square of the steps: 10,000 steps import in seconds, a million would take days.
MAX_ITEMS = 10_000


def check_items(path: Path, doc: Any) -> None:
    """Refuse a document with a top-level list (or a list under a top-level key) longer than
    :data:`MAX_ITEMS`, before it is converted. Raises :class:`~forkpoint.errors.ImportFormatError`."""
    lists = (
        [doc]
        if isinstance(doc, list)
        else [v for v in doc.values() if isinstance(v, list)]
        if isinstance(doc, dict)
        else []
    )
    longest = max((len(v) for v in lists), default=0)
    if longest > MAX_ITEMS:
        raise ImportFormatError(
            f"{path}: has a list of {longest:,} steps/messages; forkpoint imports at most {MAX_ITEMS:,} "
            "(each step's request carries the conversation before it: split the file)"
        )


def _checked(root: Any, yaml: Any, path: Path) -> None:
    """Count the nodes of a composed YAML document as if its aliases were expanded (each node once,
    memoized: linear in the document), and refuse one above :data:`MAX_YAML_NODES`, with an alias
    inside itself, or with a key twice in one mapping."""
    sizes: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node, yaml.MappingNode):
            children = [x for pair in node.value for x in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        if done:
            sizes[key] = min(MAX_YAML_NODES + 1, 1 + sum(sizes[id(c)] for c in children))
            if sizes[key] > MAX_YAML_NODES:
                raise ImportFormatError(
                    f'{path}: YAML aliases expand to more than {MAX_YAML_NODES:,} nodes (a "billion '
                    f'laughs" document, near line {node.start_mark.line + 1}); refused'
                )
            continue
        if key in sizes:
            continue
        if key in entered:
            raise ImportFormatError(
                f"{path}: a YAML alias refers to a node that contains it (near line "
                f"{node.start_mark.line + 1}); refused"
            )
        entered.add(key)
        if isinstance(node, yaml.MappingNode):
            _unique_keys(node, yaml, path)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)


def _unique_keys(node: Any, yaml: Any, path: Path) -> None:
    """Refuse a mapping node that sets a key twice (:func:`_key_twice`); a key a merge (``<<``)
    brings in may be set again, as merges are meant to be used (the node is not flattened yet:
    only its own keys)."""
    seen: set[tuple[str, str]] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        if (key_node.tag, key_node.value) in seen:
            at = f"at line {key_node.start_mark.line + 1}, in the mapping at line {node.start_mark.line + 1}"
            raise _key_twice(path, key_node.value, at)
        seen.add((key_node.tag, key_node.value))


def load_yaml(path: Path, text: str, expected: str) -> Any:
    """Parse a YAML document with a safe loader (no code runs). ``!!python/unicode`` and
    ``!!python/str`` tags of cassettes written by old VCR.py versions read as strings. Raises
    :class:`~forkpoint.errors.ImportFormatError` for text beyond :data:`MAX_YAML_CHARS`, a document
    whose aliases expand beyond :data:`MAX_YAML_NODES` nodes, or one that is not YAML."""
    try:
        import yaml
    except ImportError:
        raise ImportFormatError(
            f"{path}: not JSON, and reading YAML (VCR.py cassettes) needs PyYAML: pip install pyyaml"
        ) from None

    if len(text) > MAX_YAML_CHARS:
        raise ImportFormatError(
            f"{path}: {len(text):,} characters of YAML; forkpoint reads at most {MAX_YAML_CHARS:,} "
            "(convert it to JSON to import a bigger file)"
        )

    class Loader(yaml.SafeLoader):
        def compose_document(self) -> Any:
            node = super().compose_document()
            _checked(node, yaml, path)  # before any of it is built: aliases expanded are bounded
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            # JSON, which every format imported here is the YAML form of, has string keys only: an
            # unquoted `50256:` (a hand-edited `logit_bias`) is an int, which no session can hold.
            mapping = super().construct_mapping(node, deep=deep)
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, str):
                    raise ImportFormatError(
                        f"{path}: line {key_node.start_mark.line + 1}: the mapping key {key!r} "
                        f"({type(key).__name__}) is not a string (JSON has string keys only: quote it); "
                        f"expected {expected}"
                    )
            return mapping

    def as_str(loader: Any, node: Any) -> str:
        return str(loader.construct_scalar(node))

    def no_set(loader: Any, node: Any) -> Any:
        raise ImportFormatError(
            f"{path}: line {node.start_mark.line + 1}: a YAML set (!!set) is not JSON data; expected {expected}"
        )

    Loader.add_constructor("tag:yaml.org,2002:set", no_set)

    def as_int(loader: Any, node: Any) -> int:
        try:
            return int(yaml.SafeLoader.construct_yaml_int(loader, node))
        except ValueError:  # (more digits than Python converts: sys.get_int_max_str_digits())
            raise ImportFormatError(
                f"{path}: line {node.start_mark.line + 1}: an integer of {len(str(node.value)):,} digits, "
                f"more than forkpoint reads; expected {expected}"
            ) from None

    Loader.add_constructor("tag:yaml.org,2002:int", as_int)

    for tag in ("tag:yaml.org,2002:python/unicode", "tag:yaml.org,2002:python/str"):
        Loader.add_constructor(tag, as_str)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise ImportFormatError(f"{path}: YAML nested too deep to import; expected {expected}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ImportFormatError(f"{path}: neither JSON nor YAML ({first}); expected {expected}") from None


#: The longest duration an imported call may have (a year): a longer one is no time a call took.
_MAX_DURATION_MS = 365 * 86400 * 1000.0


def no_time(field: str, items: str, ids: list[Any], first: Any) -> str:
    """The ``adjusted`` note for the ``items`` ``ids`` whose ``field`` is given but is no time
    (``first``: the first such value): taken as given none, and placed as :func:`one_clock` says."""
    shown = ", ".join(map(str, ids[:10])) + (" …" if len(ids) > 10 else "")
    return f"the {field} of {items} {shown} is no time ({first!r:.40}): taken as none"


def one_clock(events: list[dict[str, Any]]) -> tuple[str, str, str | None]:
    """Put every event of an import on one clock, the source's; returns (the start, the end, what
    was inferred to do it, or None).

    An event keeps the time the file gives it (``ts``). An event without one is placed right after
    the event before it (its ``ts`` plus its duration, when known): at the first dated event when
    none came before, or, in a file with no time at all, one after another from the time of the
    import. Durations are never invented: a call whose file gives none has ``duration_ms`` null
    (an export marks its span's duration unknown). The start is the earliest event, the end the
    latest end of one, so nothing spans the time between the recorded run and its import.
    """
    dated = [t for e in events if (t := parse_time(e.get("ts"))) is not None]
    cursor = min(dated) if dated else parse_time(now_iso())
    assert cursor is not None
    start = end = cursor
    placed = 0
    for e in events:
        at = parse_time(e.get("ts"))
        if at is None:
            # to the next whole millisecond (the log's precision): never before the event before ends
            at = cursor + timedelta(microseconds=-cursor.microsecond % 1000)
            e["ts"] = iso_time(at)
            placed += 1
        ms = e.get("duration_ms")
        cursor = at + timedelta(milliseconds=ms if isinstance(ms, int | float) and ms > 0 else 0)
        start, end = min(start, at), max(end, cursor)
    note = None
    if placed and dated:
        note = f"the time of {placed} event(s) the file gives none for: right after the event before each"
    elif placed:
        note = (
            "no times in the file: the events follow one another from the time of the import, each "
            "lasting the duration the file gives it (none where it gives none)"
        )
    return iso_time(start), iso_time(end), note


def write_session(
    imported: Imported, *, path: Path, raw: bytes, store: Path, name: str | None = None
) -> Path:
    """Write ``imported`` as a new session of ``store`` (indexed, or uploaded to a remote store):
    header with ``imported_from`` ``{format, path, sha256, missing, adjusted, …}``, a ``note`` saying
    what is missing, the events, ``end`` (no duration: the import's own time says nothing). The
    header's ``created``, the note and ``end`` sit on the events' clock (:func:`one_clock`)."""
    for n, event in enumerate(imported.events, 1):
        ms = event.get("duration_ms")
        if ms is not None and not (isinstance(ms, int | float) and 0 <= ms < _MAX_DURATION_MS):
            raise ImportFormatError(
                f"{path}: event {n} made of the file ({event.get('type')}) has a duration of {ms!r} ms: "
                "not a time a call can have taken"
            )
        if event.get("type") == "tool_call" and "result" in event:
            # As a recording stores a result (user data with a `$type` key of its own is kept as
            # data, never read back as a typed node); before the session exists, so that a value
            # with no stored form leaves no half-written session behind.
            try:
                event["result"] = encode_value(event["result"])
            except ToolResultError as exc:
                raise ImportFormatError(f"{path}: event {n} made of the file (tool_call): {exc}") from None
    start, end, placed = one_clock(imported.events)
    if placed:
        imported.adjusted.append(placed)
    header = make_header(
        argv=["forkpoint", "import", str(path)],
        name=name or f"{imported.format} import of {path.name}",
        tags={"imported_from": imported.format},
    )
    header["git"] = None  # the importing checkout says nothing about the run that was imported
    # Nor does the importing machine say where the run was made (a cassette does not): with no
    # `timezone`, a replay keeps the TZ it runs in instead of moving the program into the importer's;
    # with no `api_keys`, it sets every placeholder key an SDK insists on, not only the importer's.
    for unknown in ("platform", "timezone", "api_keys"):
        header.pop(unknown, None)
    # Nor do the importing environment's packages: a replay that diverges names the packages now at
    # another version than the run's (an SDK upgrade that changed what it sends); compared with the
    # importer's own, it would name none, or the wrong ones on another machine.
    header["versions"] = {"forkpoint": header["versions"]["forkpoint"], **imported.versions}
    header["created"] = start
    header["tools"] = []
    header["imported_from"] = {
        "format": imported.format,
        "path": str(path.resolve()),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "missing": list(imported.missing),
        "adjusted": list(imported.adjusted),
        **imported.details,
    }
    session = open_store(store).create(header)
    try:
        writer = session.writer
        root = header["span_id"]
        text = f"imported from {imported.format} file {path.name}"
        if imported.missing:
            text += "; not in that file, so not in this session: " + "; ".join(imported.missing)
        if imported.adjusted:
            text += "; inferred while importing: " + "; ".join(imported.adjusted)
        writer.append(
            {
                "type": "note",
                "ts": start,
                "span_id": new_span_id(),
                "parent_span_id": root,
                "text": text,
                "data": {
                    "imported_from": imported.format,
                    "missing": list(imported.missing),
                    "adjusted": list(imported.adjusted),
                },
            }
        )
        for event in imported.events:
            event.setdefault("span_id", new_span_id())
            event.setdefault("parent_span_id", root)
            if event["type"] == "tool_call":
                event["args"] = scrub_json(event.get("args") or {})
                if "result" in event:
                    event["result"] = scrub_json(event["result"])
                event["key"] = event_key(event)
            writer.append(event)
    except BaseException:  # (half an import would read as a run that ended with exit code 1)
        session.discard()
        raise
    session.end(imported.exit_code, reason=imported.end_reason, timed=False, ts=end)
    session.close(quiet=True)
    return session.path
