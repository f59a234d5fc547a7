"""Match keys, and the structured diff that explains a divergence.

A recorded model call is found again at replay by its **match key**: the SHA-256 of the canonical
JSON of the *normalized* request, each item of its body's top-level lists replaced by its own digest
(:func:`model_key`). Normalizing keeps what decides the model's answer and drops what
varies between two runs of the same program:

* kept: method, URL path, query (sorted, scrubbed), the parsed body (scrubbed; in the key, a
  secret's placeholder by its kind only: :func:`~forkpoint.redact.secrets_by_kind`), and the few headers
  that change the meaning of a request (:func:`semantic_headers`, e.g. ``anthropic-version``, ``range``);
* dropped: credentials in the query (``?key=``, ``?api_key=``, ``?access_token=``… — the scrubber's
  credential parameters: a recording made with one key replays with another), scheme, host and port
  (a replay may run against another base URL), every other header —
  SDK telemetry such as ``x-stainless-*``, ``user-agent``, idempotency keys, request ids, retry
  counts, credentials — since none of them changes what the model sees.

Tool calls are keyed the same way on ``{"tool": name, "args": arguments}``, and a request to an MCP
server on its server's name too (``"server"``, once its ``initialize`` answer named it): two servers'
tools of one name with the same arguments are told apart (:func:`tool_request`).

Calls with the same key are answered in the order they were **sent** (:func:`in_send_order`), which
is the recorded order unless concurrent calls finished in another order than they started.

**Ignore rules** (``[match] ignore`` in the configuration, ``ignore=`` of the Python API and the
pytest plugin; :class:`IgnoreRule`) take parts the user knows to vary out of the key: the text a
regex matches inside the value a JSON path selects, or that whole value. They are applied by the
one function that computes a key (:func:`event_key`, :func:`model_key`, :func:`tool_key`), on the
recorded side and the live side alike, to a copy: what is stored or sent never changes.
:func:`suggest_ignore` proposes the rule for a divergence whose differences all look volatile
(timestamps, uuids, request ids).
"""

from __future__ import annotations

import base64
import functools
import os
import re
import threading
import zoneinfo
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import orjson

from . import jsonpath, redact
from .canonical import digest
from .config import anchor, load_table
from .errors import ConfigError, RuleError
from .events import process_of
from .patterns import compiled_later
from .redact import scrub_bytes, scrub_json, scrub_url, secrets_by_kind


@functools.cache
def semantic_headers() -> frozenset[str]:
    """Request headers that are part of the match key (lower-case). All others are ignored. For
    every request: content-type, and range and if-range (which part of a file a download asks for:
    the same URL answers other bytes); the rest name a provider's API version or features
    (``anthropic-version``, ``anthropic-beta``, ``openai-beta``: :func:`forkpoint.providers.semantic_headers`)."""
    # (here: `forkpoint record`'s own process computes a key spec, never a key, and loads no provider)
    from .providers import semantic_headers as providers_headers

    return frozenset({"content-type", "range", "if-range"}) | providers_headers()


def normalize_request(
    method: str, url: str, headers: dict[str, str] | list[list[str]] | None, body: Any
) -> dict[str, Any]:
    """The part of an HTTP request that its match key covers, as plain JSON data.

    ``body`` is already parsed (JSON value, text as ``str``, binary data as ``bytes``, which becomes
    ``{"$b64": str}``); it is scrubbed here, so callers may pass a live request. A multipart body's
    boundary, random for every request, is replaced by a fixed token.
    """
    parts = urlsplit(scrub_url(url))
    scrubber = redact.current()
    pairs = list(headers.items() if isinstance(headers, dict) else (headers or []))
    kept = {k.lower(): v.split(";")[0].strip() if k.lower() == "content-type" else v for k, v in pairs}
    ctype = next((v for k, v in pairs if k.lower() == "content-type"), "")
    return {
        "method": method.upper(),
        "path": parts.path,
        "query": sorted(
            (k, secrets_by_kind(v))
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if not scrubber.credential_param(k)
        ),
        "headers": {k: v for k, v in sorted(kept.items()) if k in semantic_headers()},
        "body": scrub_json(_stable_body(body, ctype)),
    }


def query_credentials(url: str) -> list[str]:
    """The placeholders of the credentials ``url``'s query sent (``?api_key=…``), in order: out of
    the match key and the normalized request (a recording made with one key replays with another),
    but which secret a call sent when calls of one key were answered differently."""
    scrubber = redact.current()
    query = parse_qsl(urlsplit(scrub_url(url)).query, keep_blank_values=True)
    # (by name, as the key reads a query: not in the order it was built)
    return redact.secret_placeholders([v for k, v in sorted(query) if scrubber.credential_param(k)])


def header_credentials(headers: Iterable[Sequence[str]] | None) -> list[str]:
    """The placeholders of the credential headers a scrubbed request sent (``Authorization``,
    ``x-api-key``: :meth:`~forkpoint.redact.Scrubber.headers`), by name: out of the match key (a
    recording made with one key replays with another), but which key a call sent when calls of
    one key were answered differently."""
    scrubber = redact.current()
    pairs = sorted((str(p[0]).lower(), p[1]) for p in headers or () if scrubber.credential_header(str(p[0])))
    return redact.secret_placeholders([v for _, v in pairs])


def _stable_body(body: Any, content_type: str) -> Any:
    m = (
        re.search(r'boundary="?([^";]+)"?', content_type)
        if content_type.lower().startswith("multipart/")
        else None
    )
    if m and isinstance(body, str):
        body = body.replace(m.group(1), "forkpoint-boundary")
    elif m and isinstance(body, bytes):
        body = body.replace(m.group(1).encode(), b"forkpoint-boundary")
    if isinstance(body, bytes | bytearray):  # not JSON data: hashed (and diffed) as base64 text
        return {"$b64": base64.b64encode(scrub_bytes(bytes(body))).decode()}
    return body


def model_key(normalized: dict[str, Any], ignore: Ignore | None = None) -> str:
    """Match key (64 hex) of a normalized request from :func:`normalize_request`, less what the
    ``ignore`` rules take out (default: those of the configuration in force, :func:`configured`).

    The digest of the masked request with each item of the body's top-level lists (the
    conversation, the tools) replaced by the item's own digest: an agent resends its whole
    conversation at every call, and the scrubber hands back the items it has scrubbed before as
    the same objects, with their digests (:meth:`~forkpoint.redact.Scrubber.list_digests`), so a
    call costs its new items, not its whole history. As collision-proof as the digest of the
    request itself, since every such list is replaced whatever it holds.
    """
    masked = _in_force(ignore).mask(normalized)
    body = masked.get("body")
    if isinstance(body, dict) and any(isinstance(v, list) for v in body.values()):
        list_digests = redact.current().list_digests
        lists = {k: list_digests(v) for k, v in body.items() if isinstance(v, list)}
        masked = {**masked, "body": {**body, **lists}}
    # (a secret by its kind: here, on what is left once the lists are digests, and in each item's
    # digest, remembered: a resent conversation is not read again at every call)
    return digest(secrets_by_kind(masked), exotic=True)  # (a body may hold any int: a seed of 2**70)


def in_send_order(events: Iterable[_E]) -> list[_E]:
    """Recorded calls that share one match key, in the order they were sent.

    Events are written when a call *ends*, so concurrent identical requests (best-of-n sampling with
    ``asyncio.gather``) appear in the log in the order they finished, which depends on the server.
    Each model and tool call records ``sent``, its position among the calls its process started, and
    ``pid``. Calls are ordered process by process (a process before another when its first call
    here was logged first), and within a process by ``sent``; a call without ``sent`` keeps its
    place in the log.
    """
    out = list(events)
    if len(out) < 2 or not all(isinstance(e.get("sent"), int) for e in out):
        return out
    first_seq: dict[Any, int] = {}
    for e in out:
        first_seq.setdefault(process_of(e), int(e.get("seq") or 0))
    return sorted(out, key=lambda e: (first_seq[process_of(e)], e["sent"]))


_E = TypeVar("_E", bound=Mapping[str, Any])


def relocated(value: Any, here: str, recorded: str) -> Any:
    """``value`` (JSON-like) with the directory ``here`` written as ``recorded`` in its strings,
    where it is a whole path (followed by ``/``, a quote, a space, punctuation or the end): what a
    run in another checkout sends that names its directory (``"You work in /ci/build"``, a tool's
    absolute path argument) is matched as what the recorded run sent from its own. The parts that
    change are copied; the rest is shared."""
    pattern = re.compile(re.escape(here) + r"(?=$|[/\\\s\"'`),;:!?\]}>]|\.(?:\s|$))")

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return pattern.sub(recorded.replace("\\", "\\\\"), v) if here in v else v
        if isinstance(v, dict):
            out = {k: walk(x) for k, x in v.items()}
            return v if all(out[k] is v[k] for k in v) else out
        if isinstance(v, Sequence) and not isinstance(v, str | bytes | bytearray):  # (a DeltaList too)
            items = [walk(x) for x in v]
            return v if all(a is b for a, b in zip(items, v, strict=True)) else items
        return v

    return walk(value)


def tool_request(name: str, args: Any, server: str | None = None) -> dict[str, Any]:
    """What a tool call's match key covers: ``{"tool", "args"}``, and ``"server"``, the name of the
    MCP server a request went to when it is known (:func:`mcp_server`)."""
    return {"tool": name, "args": args, **({"server": server} if server is not None else {})}


#: The MCP requests whose answer names the server: their ``mcp.server`` was not known when sent.
MCP_INTRODUCING = ("initialize", "server/discover")


def mcp_server(mcp: Any) -> str | None:
    """The name of the MCP server a request went to, from its ``mcp`` (``{"server", "method"}``),
    as known when it was sent, or None: an ``initialize`` (or ``server/discover``) is recorded
    with the name its answer gave, which its request could not have had."""
    if not isinstance(mcp, Mapping) or mcp.get("method") in MCP_INTRODUCING:
        return None
    server = mcp.get("server")
    return server if isinstance(server, str) else None


def tool_key(name: str, args: Any, ignore: Ignore | None = None, server: str | None = None) -> str:
    """Match key (64 hex) of a tool call: its name and its (scrubbed, JSON) arguments, less what the
    ``ignore`` rules about this tool take out (default: the configuration's, :func:`configured`),
    and the MCP ``server`` it went to, if any (:func:`tool_request`)."""
    keyed = _in_force(ignore).mask(tool_request(name, secrets_by_kind(scrub_json(args)), server), tool=name)
    return digest(keyed, exotic=True)  # (arguments may be any int, any str: a file name's surrogates)


def value_key(fn: str, args: Any = None) -> str:
    """Match key (64 hex) of a value the agent's own code read (``deterministic``): the function
    (``"time.time"``, ``"random.getrandbits"``…) and its arguments, if any."""
    return digest({"value": fn, "args": args}, exotic=True)  # (random.randrange(2**70))


def normalized(event: Mapping[str, Any]) -> dict[str, Any]:
    """What the match key of a recorded call covers: the normalized request of a model call
    (:func:`normalize_request`), :func:`tool_request` of a tool call, ``{"value", "args"}`` of a
    value read (before any ignore rule: :meth:`Ignore.mask` takes their parts out)."""
    if event.get("type") == "tool_call":
        return tool_request(event["tool"], event.get("args"), mcp_server(event.get("mcp")))
    if event.get("type") == "value":
        return {"value": event["fn"], "args": event.get("args")}
    r = event["request"]
    return normalize_request(r["method"], r["url"], r["headers"], keyed_body(r))


def keyed_body(request: Mapping[str, Any]) -> Any:
    """What the match key covers of a request's body: the body; for one not stored (withheld: it
    could not be scrubbed) the digest of its bytes as sent, ``{"$withheld": {sha256, length,
    codings}}``, so that the same body sent again matches, and no other body does."""
    withheld = request.get("withheld_digest")
    return request["body"] if withheld is None else {WITHHELD: withheld}


#: The member of the normalized body a withheld body's digest is under (:func:`keyed_body`).
WITHHELD = "$withheld"


#: The version of what the key functions compute (:func:`normalize_request`, :func:`model_key`,
#: :func:`tool_key`, :func:`value_key`). Raise it whenever a key of the same call would change:
#: a replay then recomputes the keys a session stored instead of trusting them (:func:`key_spec`).
#: 3: range and if-range are in the key; 4: Bedrock InvokeModel's x-amzn-bedrock-* headers; 5: query
#: parameters named like credentials (?access_key=, ?auth_token=) are out of the key; 6: a secret's
#: placeholder counts by its kind, not its digest (a JWT signed afresh at every run); 7: an MCP
#: request's server name.
KEY_VERSION = 7


def key_spec(ignore: Ignore | None = None) -> str:
    """What a match key depends on besides the call, as 16 hex digits: :data:`KEY_VERSION`, the
    redaction rules in force (keys cover the scrubbed request) and the ``ignore`` rules (default:
    the configuration's). A key stored under the same spec equals the one computed now, so a replay
    uses it as it is (a session header's ``keys``, or an event's own when it differs)."""
    rules = [r.to_json() for r in _in_force(ignore).rules]
    return digest({"version": KEY_VERSION, "redaction": redact.current().rules.digest(), "ignore": rules})[
        :16
    ]


def stored_key(event: Mapping[str, Any], spec: str, header_spec: Any) -> str | None:
    """The ``key`` stored in a recorded ``event`` when it was computed under ``spec`` (the event's
    own ``keys``, else its session header's ``header_spec``), else None (compute it again)."""
    key = event.get("key")
    if isinstance(key, str) and event.get("keys", header_spec) == spec:
        return key
    return None


def event_key(event: Mapping[str, Any], ignore: Ignore | None = None) -> str:
    """The match key of a recorded model call, tool call or value, computed from its request or
    arguments: the one function every reader and writer of ``key`` uses. ``ignore``: the rules in
    force (default: the configuration's, :func:`configured`)."""
    if event.get("type") == "tool_call":
        return tool_key(event["tool"], event.get("args"), ignore, mcp_server(event.get("mcp")))
    if event.get("type") == "value":
        return value_key(event["fn"], event.get("args"))
    return model_key(normalized(event), ignore)


# --------------------------------------------------------------------------- ignore rules

#: What the text a rule's regex matches, or a list item a rule selects whole, becomes in the key.
IGNORED = "[ignored]"
#: The members a model call's rule path may start with: the fields of :func:`normalize_request`.
MODEL_FIELDS = ("method", "path", "query", "headers", "body")
#: The members a tool call's rule path may start with.
TOOL_FIELDS = ("tool", "args")
_RULE_KEYS = ("path", "regex", "tool")


#: The ``source`` of the rules forkpoint adds itself (the pytest plugin's for ``tmp_path``): kept in
#: the header with them, and never said to take nothing out (no one wrote them to be mistyped).
OWN_RULES = "pytest's tmp_path"


@dataclass(frozen=True)
class IgnoreRule:
    """One ignore rule (``{ path = "$.body.metadata.request_id" }``, ``docs/matching.md``).

    ``path``: a JSON path (:mod:`forkpoint.jsonpath`) into what the match key covers — the
    normalized request ``{"method", "path", "query", "headers", "body"}`` of a model call, or
    ``{"tool", "args"}`` of a tool call. ``regex``: only the text it matches in every string of
    the selected value does not count; without one, the whole value does not count (a member is
    left out of the key, present or not; a list item counts as a placeholder, so the items after
    it keep their places). ``tool``: the rule is about the arguments of this tool (``"*"``: of
    every tool); without one it is about model calls (every HTTP call, in fact). ``source`` says
    where the rule was read, for messages; it is not part of the rule.
    """

    path: str
    regex: str | None = None
    tool: str | None = None
    source: str | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, str]:
        """The rule as the configuration writes it."""
        out = {"path": self.path}
        if self.regex is not None:
            out["regex"] = self.regex
        if self.tool is not None:
            out["tool"] = self.tool
        return out

    def toml(self) -> str:
        """The rule as an inline TOML table, ready to paste into ``ignore = [...]``."""
        return "{ " + ", ".join(f"{k} = {_toml_string(v)}" for k, v in self.to_json().items()) + " }"


def _toml_string(text: str) -> str:
    """A TOML string for ``text``: a literal string (no escapes: regexes stay readable) when it can
    be one, else a basic string (JSON's escapes are TOML's)."""
    if "'" not in text and not any(c in text for c in "\n\r\t"):
        return f"'{text}'"
    return orjson.dumps(text).decode()


def ignore_rules(items: Any, where: str) -> tuple[IgnoreRule, ...]:
    """Ignore rules from ``items`` (tables ``{path, regex?, tool?}`` as in the configuration, or
    :class:`IgnoreRule` objects), each checked: known keys, a JSON path that starts at a field of what
    the key covers, a regex that compiles and cannot match the empty string. Raises
    :class:`~forkpoint.errors.ConfigError` naming ``where`` (a file and table, or an argument), the
    rule's place in the list and the rule."""
    if items is None:
        return ()
    if not isinstance(items, list | tuple):
        raise ConfigError(
            f'{where}: ignore must be a list of rules like {{ path = "$.body.metadata.request_id" }}'
        )
    out = []
    for i, item in enumerate(items):
        here = f"{where}: ignore[{i}]"
        source = where
        if isinstance(item, IgnoreRule):
            source = OWN_RULES if item.source == OWN_RULES else where
            item = item.to_json()
        if not isinstance(item, Mapping):
            raise ConfigError(f"{here} = {item!r}: expected a table {{ path = …, regex = …, tool = … }}")
        shown = _shown_rule(item)
        unknown = sorted(set(item) - set(_RULE_KEYS))
        if unknown:
            raise ConfigError(
                f"{here} {shown}: unknown key(s) {', '.join(map(str, unknown))} (known: path, regex, tool)"
            )
        if not all(isinstance(item.get(k, ""), str) for k in _RULE_KEYS):
            raise ConfigError(f"{here} {shown}: path, regex and tool are strings")
        if not item.get("path"):
            raise ConfigError(f'{here} {shown}: a rule needs a path, e.g. "$.body.metadata.request_id"')
        rule = IgnoreRule(str(item["path"]), item.get("regex"), item.get("tool"), source=source)
        try:
            _check(rule)
        except RuleError as exc:
            raise ConfigError(f"{here} {shown}: {exc}") from None
        out.append(rule)
    return tuple(out)


def _shown_rule(item: Mapping[str, Any]) -> str:
    return "{ " + ", ".join(f"{k} = {v!r}" for k, v in item.items()) + " }"


def _check(rule: IgnoreRule) -> None:
    steps = jsonpath.parse(rule.path)
    fields = TOOL_FIELDS if rule.tool is not None else MODEL_FIELDS
    mode, first = steps[0]
    if mode == "child" and first not in fields and first != "*":
        what = f"tool {rule.tool!r}'s calls" if rule.tool is not None else "a model call"
        raise RuleError(
            f"path {rule.path!r} must start at a field of what the match key of {what} covers: "
            + ", ".join(f"$.{f}" for f in fields)
            + (
                ""
                if rule.tool is not None
                else ' (the request body is $.body; for tool arguments add tool = "NAME")'
            )
        )
    if rule.regex is not None:
        try:
            compiled = re.compile(rule.regex)
        except re.error as exc:
            raise RuleError(f"regex {rule.regex!r} is not a valid regex: {exc}") from None
        if compiled.fullmatch(""):
            raise RuleError(f"regex {rule.regex!r} matches the empty string")
    if rule.tool == "":
        raise RuleError('tool is a tool\'s name, or "*" for every tool')


class _Selection:
    """The compiled paths and regexes of the rules about one kind of call."""

    def __init__(self, rules: Sequence[IgnoreRule]) -> None:
        self.paths = tuple(jsonpath.parse(r.path) for r in rules)
        self.regexes = tuple(re.compile(r.regex) if r.regex is not None else None for r in rules)

    def mask(self, value: Any, states: jsonpath.States) -> Any:
        if not states:
            return value
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                done, sub = jsonpath.step(self.paths, states, k, 0)
                if done and any(self.regexes[r] is None for r in done):
                    continue  # the whole value does not count: the member is left out
                out[k] = self.mask(self._sub(v, done), sub)
            return out
        if isinstance(value, list):
            items = []
            for i, v in enumerate(value):
                done, sub = jsonpath.step(self.paths, states, i, len(value))
                if done and any(self.regexes[r] is None for r in done):
                    items.append(IGNORED)
                    continue
                items.append(self.mask(self._sub(v, done), sub))
            return items
        return value

    def _sub(self, value: Any, done: tuple[int, ...]) -> Any:
        if not done:
            return value
        if isinstance(value, str):
            for r in done:
                pattern = self.regexes[r]
                if pattern is not None:
                    value = pattern.sub(IGNORED, value)
            return value
        if isinstance(value, dict):
            return {k: self._sub(v, done) for k, v in value.items()}
        if isinstance(value, list):
            return [self._sub(v, done) for v in value]
        return value


class Ignore:
    """A set of :class:`IgnoreRule` objects, compiled: what :meth:`mask` takes out of the normalized
    form of a call before its key is computed. Rules are kept once each, in order."""

    def __init__(self, rules: Iterable[IgnoreRule] = ()) -> None:
        self.rules: tuple[IgnoreRule, ...] = tuple(dict.fromkeys(rules))
        self._model = _Selection([r for r in self.rules if r.tool is None])
        self._tools: dict[str, _Selection] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __add__(self, more: Iterable[IgnoreRule]) -> Ignore:
        return Ignore((*self.rules, *more))

    def _selection(self, tool: str | None) -> _Selection:
        if tool is None:
            return self._model
        sel = self._tools.get(tool)
        if sel is None:
            with self._lock:
                sel = self._tools[tool] = _Selection([r for r in self.rules if r.tool in (tool, "*")])
        return sel

    def mask(self, normalized: dict[str, Any], tool: str | None = None) -> dict[str, Any]:
        """A copy of ``normalized`` (of a model call; of a call of ``tool`` when given) without what
        the rules ignore; ``normalized`` itself when no rule is about it."""
        if not self.rules:
            return normalized
        sel = self._selection(tool)
        if not sel.paths:
            return normalized
        masked: dict[str, Any] = sel.mask(normalized, jsonpath.roots(sel.paths))
        return masked


def load_ignore(start: Path | None = None) -> tuple[IgnoreRule, ...]:
    """The ``[match] ignore`` rules of the configuration in force for ``start`` (default: the
    current directory; :mod:`forkpoint.config` says where it looks). Raises
    :class:`~forkpoint.errors.ConfigError` naming the file, the table and the rule."""
    table, where = load_table("match", start)
    if table is None:
        return ()
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = sorted(set(table) - {"ignore"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: ignore)")
    return ignore_rules(table.get("ignore"), where)


_configured: dict[tuple[str, str], Ignore] = {}
_configured_lock = threading.Lock()


def configured() -> Ignore:
    """The rules of the configuration in force for the current directory (or the
    :func:`~forkpoint.config.anchored` one), read once per directory (and ``$FORKPOINT_CONFIG``) in
    a process. Raises :class:`~forkpoint.errors.ConfigError`."""
    start = anchor()  # (asked at every call: the current directory as a string, no Path made)
    where = (str(start) if start is not None else os.getcwd(), os.environ.get("FORKPOINT_CONFIG", ""))
    found = _configured.get(where)
    if found is None:
        with _configured_lock:
            found = _configured[where] = Ignore(load_ignore(Path(where[0])))
    return found


def header_rules(header: Mapping[str, Any]) -> tuple[IgnoreRule, ...]:
    """The ignore rules a session was recorded with beyond its configuration's (header ``match``:
    those given to the Python API or the pytest plugin), re-applied when it is replayed."""
    match = header.get("match")
    items = match.get("ignore") if isinstance(match, dict) else None
    if not isinstance(items, list):
        return ignore_rules(items, "the session header's match")
    own = [isinstance(item, dict) and item.get("source") == OWN_RULES for item in items]
    rules = ignore_rules(
        [
            {k: v for k, v in item.items() if k != "source"} if mine else item
            for item, mine in zip(items, own, strict=True)
        ],
        "the session header's match",
    )
    return tuple(replace(r, source=OWN_RULES) if mine else r for r, mine in zip(rules, own, strict=True))


def header_json(rules: Iterable[IgnoreRule]) -> list[dict[str, str]]:
    """``rules`` as a session header's ``match.ignore`` holds them (:func:`header_rules` reads them
    back): as the configuration writes them, forkpoint's own marked by their ``source``."""
    return [{**r.to_json(), "source": OWN_RULES} if r.source == OWN_RULES else r.to_json() for r in rules]


def _in_force(ignore: Ignore | None) -> Ignore:
    return ignore if ignore is not None else configured()


# --------------------------------------------------------------------------- suggesting a rule

#: What differs between two runs of the same program without meaning anything: name → regex.
VOLATILE: dict[str, str] = {
    "timestamp": r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?",
    "epoch": r"(?<![\d.])1\d{9}(?:\d{3})?(?:\.\d+)?(?![\d.])",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    # (bare hex with a letter in it: sixteen digits after a point are a number's, a score or a price)
    "id": r"\b(?:req|msg|run|sess|session|trace|span|call|chatcmpl|resp|evt)[-_][A-Za-z0-9]{6,}\b"
    # (a tool call id a client made up, urlsafe base64: strands' Gemini model's)
    r"|\btooluse_[A-Za-z0-9_-]{6,}(?![A-Za-z0-9_-])"
    r"|(?<![0-9A-Za-z.])(?=[0-9]*[a-f])[0-9a-f]{16,}(?![0-9A-Za-z])",
}
_VOLATILE_RE = compiled_later("|".join(f"(?P<{k}>{v})" for k, v in VOLATILE.items()))
_ID_KEY = compiled_later(
    r"(?i)(?:^|[_-])(?:request|req|session|trace|span|correlation|idempotency|run)[_-]?id$"
)


def _volatile_kinds(text: str) -> list[str]:
    return [k for m in _VOLATILE_RE.finditer(text) for k, v in m.groupdict().items() if v is not None]


def _epoch(value: Any) -> bool:
    return type(value) in (int, float) and (1e9 <= value < 1e10 or 1e12 <= value < 1e13)


def _volatile_rule(change: Mapping[str, Any], tool: str | None) -> IgnoreRule | None:
    """The rule that ignores one difference when it looks volatile, else None."""
    if change.get("op") != "changed":
        return None
    path, expected, actual = str(change["path"]), change.get("expected"), change.get("actual")
    if path.startswith(f"$.body['{WITHHELD}']"):  # (hex, but of content: ignored, any body would match)
        return None
    if _epoch(expected) and _epoch(actual):
        return IgnoreRule(path, tool=tool)
    if not (isinstance(expected, str) and isinstance(actual, str)):
        return None
    last = re.split(r"[.\[\]']+", path.rstrip("]'"))[-1]
    kinds = _volatile_kinds(expected) + _volatile_kinds(actual)
    whole = all(_VOLATILE_RE.fullmatch(v) for v in (expected, actual))
    if whole or (_ID_KEY.search(last) and min(len(expected), len(actual)) >= 6):
        return IgnoreRule(path, tool=tool)
    if not kinds or _VOLATILE_RE.sub("", expected) != _VOLATILE_RE.sub("", actual):
        return None
    return IgnoreRule(path, "|".join(VOLATILE[k] for k in dict.fromkeys(kinds)), tool)


def inert_rules(
    expected: dict[str, Any], actual: dict[str, Any], ignore: Ignore, tool: str | None = None
) -> list[IgnoreRule]:
    """The rules of ``ignore`` about this kind of call (a model call's, or ``tool``'s) that take
    nothing out of either normalized call: a path that selects nothing there (``$.body.mesages``)
    or a regex that matches nothing it selects (forkpoint's own, :data:`OWN_RULES`, are not said)."""
    out = []
    for rule in ignore.rules:
        if rule.source == OWN_RULES:
            continue
        if (rule.tool is None) != (tool is None) or (tool is not None and rule.tool not in (tool, "*")):
            continue
        one = Ignore([rule])
        if one.mask(expected, tool) == expected and one.mask(actual, tool) == actual:
            out.append(rule)
    return out


def stamped_before(changes: Iterable[Mapping[str, Any]], started: Any, zone: Any) -> str | None:
    """The first date and time in a recorded value of ``changes`` (a divergence's diff; what a rule
    ignored left out) from before ``started`` (a session's ``created``) however it is read: by its
    own offset, a naive one both as UTC and as the recording's ``zone`` (``datetime.now()``, or
    ``utcnow()``; UTC where none was said); None when there is none, or the header does not say
    when the session began or in what zone."""
    try:
        start = datetime.fromisoformat(started)
        local = zoneinfo.ZoneInfo(zone) if zone else UTC
    except (TypeError, ValueError, zoneinfo.ZoneInfoNotFoundError):
        return None
    for change in changes:
        if change.get("ignored") or not isinstance(recorded := change.get("expected"), str):
            continue
        for m in _VOLATILE_RE.finditer(recorded):
            stamp = m.group("timestamp")
            if stamp is None or len(stamp) <= len("2026-12-07"):  # (a date alone: midnight, no read)
                continue
            try:
                t = datetime.fromisoformat(stamp)
            except ValueError:  # (a time alone)
                continue
            readings = [t] if t.tzinfo else [t.replace(tzinfo=UTC), t.replace(tzinfo=local)]
            if all(r < start for r in readings):
                return stamp
    return None


def absent_tool_rules(ignore: Ignore, tools: Collection[str]) -> list[str]:
    """A warning for each rule of ``ignore`` about a tool none of ``tools`` (those a session has calls
    of) is: it takes nothing out of any call, and its name is likely mistyped (``serch``). Says
    where the rule was read and the tools there are."""
    names = ", ".join(sorted(tools)) or "none"
    return [
        f"the ignore rule {rule.toml()}{f' ({rule.source})' if rule.source else ''} names tool "
        f"{rule.tool!r}, which this session has no call of (its tools: {names}): it takes nothing out"
        for rule in ignore.rules
        if rule.tool not in (None, "*", *tools)
    ]


def suggest_ignore(
    expected: dict[str, Any], actual: dict[str, Any], ignore: Ignore, tool: str | None = None
) -> list[IgnoreRule]:
    """The rules that would make two normalized calls (of a model call, or of ``tool``) match, when
    every difference the rules in force leave looks volatile (a timestamp, a uuid, a request id);
    else ``[]``. Each suggestion is checked: with it, the two give the same key."""
    from .jsondiff import json_diff  # (here: only a divergence is diffed, never a recording)

    # (a secret by its kind, as the key counts it: two keys of a kind are no difference)
    left, right = secrets_by_kind(ignore.mask(expected, tool)), secrets_by_kind(ignore.mask(actual, tool))
    changes = [c.to_json() for c in json_diff(left, right)]
    if not changes:
        return []
    rules = [_volatile_rule(c, tool) for c in changes]
    if any(r is None for r in rules):
        return []
    found = [r for r in dict.fromkeys(rules) if r is not None]
    both = ignore + found
    same = secrets_by_kind(both.mask(expected, tool)) == secrets_by_kind(both.mask(actual, tool))
    return found if same else []
