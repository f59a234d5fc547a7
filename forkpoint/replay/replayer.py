"""The replay runtime: every model and tool call served from a session by match key.

Identical keys are served in the order they were sent; a call that matches nothing is a
divergence, and the policy decides what follows (stop, go live, or serve the next recorded call of
that endpoint anyway). Several processes of one replay share a :class:`~forkpoint.replay.ledger.Ledger`.

Not every recorded HTTP exchange is expected again (:mod:`forkpoint.providers.kinds`):

* calls made while a recorded tool ran (HTTP exchanges, nested tool calls) belong to that tool: the
  tool is not run on replay, so they are not asked for; serving the tool *covers* them (and when
  tools run live, what they send goes live too);
* telemetry and metadata (trace uploads, price lists) and MCP session management (the background
  ``GET``, the closing ``DELETE``) are *aside*: answered from the recording when it has them, else
  with the neutral answer the client expects, and never a divergence or an unused call;
* plain HTTP (no provider, no MCP) that matches nothing but differs from an unused recorded request
  of the same endpoint only in ids, timestamps or nonces is served that recording and reported,
  unless ``strict``.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
import re
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from operator import itemgetter, not_
from typing import Any, Literal, cast
from urllib.parse import parse_qsl, urlsplit

import orjson

from .. import override, plugins, runtime, values
from .._version import __version__
from ..canonical import canonical_json
from ..children import SIGNALS
from ..errors import Divergence, NetworkBlocked, UnrebuildableValue
from ..events import (
    FIRST_VALUE_FNS,
    Call,
    CallKind,
    DivergenceReport,
    ErrorRecord,
    HttpRequest,
    HttpResponse,
    McpCall,
    ModelCallEvent,
    Served,
    ToolCallEvent,
    ToolInstance,
    ValueEvent,
    endpoint,
    is_tool_call,
    new_span_id,
)
from ..jsondiff import Change, json_diff, similarity
from ..log import Session, SessionWriter
from ..match import (
    IgnoreRule,
    absent_tool_rules,
    configured,
    event_key,
    header_credentials,
    header_rules,
    in_send_order,
    inert_rules,
    key_spec,
    keyed_body,
    mcp_server,
    model_key,
    normalize_request,
    normalized,
    query_credentials,
    relocated,
    stamped_before,
    stored_key,
    suggest_ignore,
    tool_key,
    tool_request,
    value_key,
)
from ..override import Override
from ..patterns import compiled_later
from ..providers import PLACEHOLDER_KEY, api_key_vars, call_kind, classify, kinds, summary
from ..redact import cookie_placeholders, holds_placeholder, scrub_json, secret_placeholders, secrets_by_kind
from ..runtime import POLICIES, SOURCES
from . import pools
from .ledger import Ledger
from .report import ambiguous, blocked_fields, conclude, divergence

#: Environment variables SDKs insist on; set to a placeholder during replay when unset.
API_KEY_VARS = api_key_vars()


def placeholder_env(session: Session) -> dict[str, str]:
    """The environment a replay of ``session`` sets where this one leaves it unset, so that an SDK
    starts as it did when recorded: each API-key variable the recording had set (its header's
    ``api_keys`` and its notes of keys set later; for a session that does not say, every one, Azure
    OpenAI's only where its calls went there) as
    :data:`PLACEHOLDER_KEY` (an SDK refuses to start without its key), and ``AWS_DEFAULT_REGION``
    (the variable botocore reads; it reads no ``AWS_REGION``) as the region of the recorded Bedrock
    calls' hosts (botocore builds no client without a region: a recording that took it from the
    environment or ``~/.aws/config`` would raise ``NoRegionError`` on a machine without them; set,
    it comes before ``~/.aws/config``'s, as the recorded calls went to that region)."""
    said = session.header.get("api_keys")
    if isinstance(said, list):
        later = {k for n in session.by_type("note") for k in ((n.get("data") or {}).get("api_keys") or [])}
        keys = [k for k in API_KEY_VARS if k in said or k in later]
    else:  # (Azure OpenAI's beside OpenAI's: openai's module-level client refuses to start)
        keys = [k for k in API_KEY_VARS if k != "AZURE_OPENAI_API_KEY" or _to_azure_openai(session)]
    out = {k: PLACEHOLDER_KEY for k in keys if not os.environ.get(k)}
    if not os.environ.get("AWS_DEFAULT_REGION"):
        region = _aws_region(session)
        if region is not None:
            out["AWS_DEFAULT_REGION"] = region
    return out


def drop_placeholder_env(added: Mapping[str, str]) -> None:
    """Undo, at a replay's end, what :func:`placeholder_env` ``added``: each variable still as it set
    it is unset, and the SDKs' process-wide clients forget a placeholder they read: boto3's default
    session (``boto3.client()``'s credentials) and openai's module-level client (``openai.api_key``).
    Each reads its key once and keeps it for the process: every call after the block, by a live run
    or a recording, went out with the placeholder (a call the provider refuses) instead of the key
    the environment then had."""
    for k, v in added.items():
        if os.environ.get(k) == v:
            del os.environ[k]
    core: Any = getattr(getattr(sys.modules.get("boto3"), "DEFAULT_SESSION", None), "_session", None)
    cached = getattr(core, "_credentials", None)  # (botocore's cache: no public way to clear it)
    # (read from the instance: a refreshable one's ``access_key`` is a property that may fetch)
    held = vars(cached) if cached is not None else {}
    if PLACEHOLDER_KEY in (held.get("access_key"), held.get("secret_key")):
        core._credentials = None
    sdk: Any = sys.modules.get("openai")
    if getattr(sdk, "api_key", None) == PLACEHOLDER_KEY:
        sdk.api_key = None
        sdk._client = None  # (built again, from the environment, at its next call)


#: An AWS region as a label of an endpoint's host: us-east-1, eu-central-2, us-gov-west-1, cn-north-1.
_AWS_REGION = compiled_later(r"[a-z]{2}(?:-[a-z]+)+-\d+")


def _to_azure_openai(session: Session) -> bool:
    """Whether a recorded call went to Azure OpenAI: its host (``*.openai.azure.com``), or what its
    SDK sends to any endpoint (a deployment's path, an ``api-version``)."""
    for event in session.by_type("model_call"):
        url = urlsplit(str((event.get("request") or {}).get("url") or ""))
        host = (url.hostname or "").lower()
        if host.endswith(".openai.azure.com") or url.path.startswith("/openai/deployments/"):
            return True
        if "api-version=" in url.query:
            return True
    return False


def _aws_region(session: Session) -> str | None:
    """The region of the first recorded call to a Bedrock endpoint of AWS
    (``bedrock-runtime.<region>.amazonaws.com``, its FIPS and VPC-endpoint forms, ``.com.cn``), or
    None (no such call; an ``endpoint_url`` of the program's own names none)."""
    for event in session.by_type("model_call"):
        url = str((event.get("request") or {}).get("url") or "")
        if "bedrock" not in url:  # (every model call of a long session: the cheap test first)
            continue
        host = (urlsplit(url).hostname or "").lower()
        if "bedrock" not in host or not host.endswith((".amazonaws.com", ".amazonaws.com.cn")):
            continue
        for part in host.split("."):
            if _AWS_REGION.fullmatch(part):
                return part
    return None


def label(event: Mapping[str, Any]) -> str:
    """How a report names a recorded call: ``tool NAME``, ``value time.time``, or ``POST /path, model M``."""
    if event["type"] == "tool_call":
        return f"tool {event['tool']}"
    if event["type"] == "value":
        return f"value {event['fn']}"
    model = summary(event).get("model")
    return endpoint(event) + (f", model {model}" if model else "")


def unrecorded_asks(session: Session) -> list[tuple[int, str]]:
    """``(seq, name)`` of each tool call the recording's model asked for (by the model call's seq)
    of a tool the recording has no calls of (its end's ``unrecorded_tools``)."""
    ends = session.by_type("end")
    names = (ends[-1].get("unrecorded_tools") if ends else None) or {}
    if not isinstance(names, dict) or not names:
        return []
    return [
        (e["seq"], str(call.get("name")))
        for e in session.by_type("model_call")
        for call in summary(e).get("tool_calls") or []
        if call.get("name") in names
    ]


def _answered_aside(event: ModelCallEvent) -> bool:
    """A recorded telemetry call or MCP session request (answered aside on replay)."""
    kind = call_kind(event)
    return kind == "telemetry" or kinds.is_session_management(event["request"]["method"], kind)


def unreached_prefix(recorded: Session, live_from: int, run: Iterable[Mapping[str, Any]]) -> list[int]:
    """The seqs of the recorded calls before checkpoint ``live_from`` that a fork's run, whose
    session's events are ``run``, was never served, when it made no live call: it never reached
    its checkpoint, so it never went live (empty once it did). The calls are those a
    :class:`Replayer` with that ``live_from`` serves before it goes live (telemetry and MCP session
    exchanges, answered aside, are not among them)."""
    served, live = set(), False
    for e in run:
        if e.get("source") == "live":
            live = True
        elif e.get("source") in ("replay", "override") and isinstance(e.get("recorded_seq"), int):
            served.add(e["recorded_seq"])
    if live:
        return []
    return [
        e["seq"]
        for e in recorded.events
        if e["seq"] < live_from
        and e["type"] in ("model_call", "tool_call", "value")
        and not (e["type"] == "model_call" and _answered_aside(e))
        and e["seq"] not in served
    ]


#: A value that differs between two runs of the same program without changing what is asked,
#: whatever its key: a UUID, a token with a per-run prefix (``req_…``, ``chatcmpl-…``), an ISO
#: timestamp.
_VOLATILE = compiled_later(
    r"(?ix)^(?:"
    r"[a-z]{0,12}[_-]?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}"
    r"|(?:req|request|msg|run|sess|session|trace|span|call|chatcmpl|resp|evt|idem|nonce)[_-][A-Za-z0-9]{16,}"
    r"|\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(z|[+-]\d{2}:?\d{2})?"
    r")$"
)
#: Bare hex of 16 digits or more, or any token of 16 letters and digits with a prefix: an id only
#: under a key that names a per-run id (a trace, a request, a nonce), as a git commit, a customer
#: id (``cus_…``) or a branch name is content.
_TOKEN = compiled_later(r"(?i)^(?:[0-9a-f]{16,}|[a-z]{1,12}[_-][A-Za-z0-9]{16,})$")
_RUN_ID_KEY = compiled_later(
    r"(?i)(?:^|[_-])(?:(?:request|req|session|trace|span|correlation|idempotency|run|client[_-]?msg)[_-]?id"
    r"|nonce|idempotency[_-]?key|traceparent)$"
)
_DIGITS = compiled_later(r"^\d{10,}(?:\.\d+)?$")
#: A name ending in a clock reading (``botocore-session-1796503461``), and the keys whose values
#: are such names of a run's session (STS's ``RoleSessionName``, which botocore makes so).
_NAME_AT = compiled_later(r"^[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*[-_](\d{10,19})$")
_SESSION_NAME_KEY = compiled_later(r"(?i)session[_-]?name$")
#: A key whose string of digits is a clock reading (a phone or a card number is not).
_TIME_KEY = compiled_later(r"(?i)(?:^|[_-])(?:ts|time|timestamp|date|at|since|until|expires?|nonce|t)$")


#: 2015-01-01 and 2050-01-01 in seconds since the epoch: a number between them, read as seconds,
#: milliseconds, microseconds or nanoseconds, is taken for a clock reading.
_CLOCK_FROM, _CLOCK_TO = 1_420_070_400, 2_524_608_000


def volatile(value: Any, key: str = "") -> bool:
    """Whether ``value`` (under the object key ``key``) is an id, a timestamp or a nonce
    (:data:`_VOLATILE`), not content. A number is one only where it reads as a clock of these years
    (:data:`_CLOCK_FROM`): an amount of 9,999,999,999 is content, which any ten digits or more once
    were; a string of digits only so, and under a key of a time (:data:`_TIME_KEY`): a phone or a
    card number is content; bare hex, or a prefixed token, only under a key of a per-run id
    (:data:`_RUN_ID_KEY`): a git commit, a customer id or a branch name is content."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str) and _DIGITS.match(value):
        if not _TIME_KEY.search(key):
            return False
        value = float(value)
    if isinstance(value, int | float):
        return any(_CLOCK_FROM <= abs(value) / unit < _CLOCK_TO for unit in (1, 1e3, 1e6, 1e9))
    if not isinstance(value, str):
        return False
    if _SESSION_NAME_KEY.search(key) and (named := _NAME_AT.match(value)):
        return volatile(int(named[1]))
    return bool(_VOLATILE.match(value)) or bool(_TOKEN.match(value) and _RUN_ID_KEY.search(key))


def _volatile_change(change: Change) -> bool:
    """Both sides of ``change`` are ids (:func:`volatile`), under the key its path ends with; a
    query parameter (a ``[name, value]`` pair) under its name."""
    before, after = change.expected, change.actual
    if (
        isinstance(before, list | tuple)
        and isinstance(after, list | tuple)
        and len(before) == len(after) == 2
    ):
        if before[0] != after[0]:
            return False
        key, before, after = str(before[0]), before[1], after[1]
    else:
        key = re.split(r"[.\[\]'\"]+", change.path.rstrip("]'\""))[-1]
    if _SESSION_NAME_KEY.search(key) and isinstance(before, str) and isinstance(after, str):
        a, b = _NAME_AT.match(before), _NAME_AT.match(after)
        # (only the clock reading is the id: alice-<time> is another session than bob-<time>)
        if a is not None and b is not None and before[: a.start(1)] != after[: b.start(1)]:
            return False
    return volatile(before, key) and volatile(after, key)


def _key_diff(expected: Any, actual: Any) -> list[Change]:
    """The differences of two normalized calls that count in their match keys: a secret's
    placeholder by its kind (:func:`~forkpoint.redact.secrets_by_kind`), not its digest."""
    return json_diff(secrets_by_kind(expected), secrets_by_kind(actual))


def _form_fields(changes: list[Change], norm: dict[str, Any]) -> list[Change]:
    """``changes``, a form body's (``application/x-www-form-urlencoded``, text in the key) change
    made one change per field (a ``[name, value]`` pair, as a query's), so that each is told an id
    or not under its name; one that adds, drops or reorders a field stays as it is."""
    if str((norm.get("headers") or {}).get("content-type")).lower() != "application/x-www-form-urlencoded":
        return changes
    out: list[Change] = []
    for c in changes:
        if c.path == "$.body" and isinstance(c.expected, str) and isinstance(c.actual, str):
            before = parse_qsl(c.expected, keep_blank_values=True)
            after = parse_qsl(c.actual, keep_blank_values=True)
            if [k for k, _ in before] == [k for k, _ in after]:
                out += [
                    Change("changed", f"$.body[{i}]", list(a), list(b))
                    for i, (a, b) in enumerate(zip(before, after, strict=True))
                    if a != b
                ]
                continue
        out.append(c)
    return out


#: The name asyncio gives a task it is not given one for.
_TASK_NAME = re.compile(r"Task-(\d+)")


def _alike(queues: Iterable[Collection[Served]]) -> dict[int, int]:
    """Seq → group (its first seq) of the recorded calls that were asked the same (one match key)
    and answered differently: served to several threads, tasks or processes, which got which
    cannot be told from the recording (:func:`~forkpoint.replay.report.conclude` says so)."""
    out: dict[int, int] = {}
    for queue in queues:
        if len(queue) < 2:
            continue
        answers = {_answer(e) for e in queue}
        if len(answers) > 1:
            first = min(e["seq"] for e in queue)
            out.update((e["seq"], first) for e in queue)
    return out


def _own_id(call_id: Any, mcp: Any) -> str | None:
    """What tells a tool call apart from identical ones: ``call_id``, the id the model gave it, else
    for a request to an MCP server the transport its session was opened on (``mcp.via``: a stdio
    server's command line, another's URL), which tells apart two servers' ``initialize``, sent before
    either named itself, and two servers of one name."""
    via = mcp.get("via") if isinstance(mcp, Mapping) else None
    own = call_id if call_id is not None else via
    return own if isinstance(own, str) else None


def _own_call_ids(queues: Iterable[Collection[Mapping[str, Any]]]) -> dict[int, str]:
    """Seq → own id (:func:`_own_id`) of the recorded calls whose id no other call of their match
    key has: the id tells that call apart from the identical ones. Ids a framework gives calls of
    its own accord, alike in every run, tell nothing."""
    out: dict[int, str] = {}
    for queue in queues:
        ids = {e["seq"]: _own_id(e.get("call_id"), e.get("mcp")) for e in queue}
        counted = Counter(ids.values())
        out.update((seq, own) for seq, own in ids.items() if own is not None and counted[own] == 1)
    return out


def _named_groups(recorded: Iterable[Mapping[str, Any]], alike: Mapping[int, int]) -> frozenset[int]:
    """The groups of ``alike`` (:func:`_alike`) whose recorded calls each name the task that made
    them (``caller``), no name twice: which task got which answer can be told by the names."""
    names: dict[int, list[Any]] = {}
    for e in recorded:
        group = alike.get(e["seq"])
        if group is not None:
            names.setdefault(group, []).append(e.get("caller"))
    return frozenset(g for g, n in names.items() if None not in n and len(set(n)) == len(n))


def _answered(event: Mapping[str, Any]) -> dict[str, Any]:
    """What a recorded call handed the program: a tool's result or error, a response, a value read."""
    return {k: event.get(k) for k in ("result", "error", "unrecorded", "response", "value")}


def _pieces_lost(event: Mapping[str, Any]) -> int:
    """How many chunks of a recorded stream are stored empty where nothing encodes them again: each
    came with bytes live (a piece that decoded to nothing came under a coding), and was emptied by
    the scrubbing (a secret filled it, nothing after it to take a byte from), and no HTTP library
    hands a program an empty piece."""
    response = event.get("response") if event.get("type") == "model_call" else None
    if not isinstance(response, Mapping) or response.get("decoded_from") or not response.get("chunks"):
        return 0
    # (counted in C: every served stream is looked at, chunk by chunk)
    return sum(map(not_, map(itemgetter(1), response["chunks"])))


def _answer(event: Mapping[str, Any]) -> bytes:
    """What a recorded call answered, as bytes to compare."""
    answer = _answered(event)
    try:
        return canonical_json(answer)
    except TypeError:  # (bytes of a binary body, a huge integer)
        return repr(answer).encode()


def _live_kind(kind: CallKind, call: str | None) -> str:
    """The ``live_calls`` counter a call made live counts in: its kind, but an HTTP exchange a
    provider does not recognize by what it is (``call``: plain HTTP, MCP, telemetry), as a
    recording's summary names them, not as a model's call."""
    return call if kind == "model_call" and call in ("http", "mcp", "telemetry") else kind


def _origin(url: str) -> str:
    """The ``host:port`` a request went to (lowercase), or ``""``."""
    try:
        return urlsplit(url).netloc.lower()
    except ValueError:
        return ""


def _sent_to(event: Mapping[str, Any]) -> str:
    """The ``host:port`` a recorded call's request went to, ``""`` for a tool call or a value."""
    request = event.get("request")
    return _origin(str(request.get("url") or "")) if isinstance(request, Mapping) else ""


class Left:
    """Recorded calls left to serve (of one match key, or of one function or object of it), in the
    order to serve them. Taking any one out, and asking whether one is left, cost the same however
    many are left: out of a deque, a call served past thousands of others (an object's whose calls
    were all recorded after another's) cost a look at each."""

    __slots__ = ("_calls",)

    def __init__(self, calls: Iterable[Any] = ()) -> None:
        self._calls: OrderedDict[int, Any] = OrderedDict((e["seq"], e) for e in calls)

    def __len__(self) -> int:
        return len(self._calls)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._calls.values())

    def __contains__(self, event: Any) -> bool:
        return self._calls.get(event["seq"]) is event

    def popleft(self) -> Any:
        return self._calls.popitem(last=False)[1]

    def remove(self, event: Any) -> None:
        del self._calls[event["seq"]]


def _first(calls: Iterable[Any]) -> Any:
    """The first of ``calls`` (not empty)."""
    return next(iter(calls))


def _first_for(events: Collection[Any], origin: str | None) -> Any:
    """The first of ``events`` (recorded calls in the order to serve them; not empty), or the first
    sent to ``origin`` when the first was sent elsewhere. Host and port are not in the match key (a
    test's server has another port each run); two servers asked the same thing are still told
    apart when both were recorded."""
    first = _first(events)
    if origin and len(events) > 1 and _sent_to(first) != origin:
        return next((e for e in events if _sent_to(e) == origin), first)
    return first


def _next_in(queue: Left, origin: str | None, among: Collection[Any] | None = None) -> Any:
    """The next of the recorded calls with one match key to serve (of ``among`` them, when given),
    taken out of ``queue`` (:func:`_first_for`)."""
    chosen = _first_for(among or queue, origin)
    queue.remove(chosen)
    return chosen


def _same_function(
    queue: Left,
    function: str | None,
    recorded: set[str],
    every: bool,
    left: Callable[[Callable[[Any], bool]], Left],
) -> Left | None:
    """The calls of ``queue`` (one match key) that the function ``function`` made when recorded,
    none among them included, when ``function`` is one of the ``recorded`` functions of the tool's
    name: two functions recorded under one tool name (two agents' ``search``) were served each
    other's answers when the program called them in another order, or called one of them where the
    other was recorded. None else (a recording without functions, a function renamed since: the
    recorded order). ``every``: whether each recorded call of the tool has its function; ``left``
    gives those of ``queue`` a test keeps, found once and kept as calls are served
    (:meth:`Replayer._left`: filtered from every call left at each, 20,000 calls took 16 s)."""
    if function is None or function not in recorded:
        return None
    if every and len(recorded) == 1:  # (all of them, not copied: thousands of calls copied them at each)
        return queue
    return left(lambda e: e.get("function") == function)


def _by_fingerprint(
    objects: Mapping[tuple[Any, Any], Any],
) -> dict[Any, tuple[set[tuple[Any, Any]], bool, bool, bool]]:
    """Of a function's recorded objects (:func:`_object`) with their fingerprints (None: not
    kept), by each fingerprint, what :meth:`Replayer._told` says of it: worked out once, as a
    program making an alike object for each call had each call gather thousands of them again."""
    by_fp: dict[Any, list[tuple[Any, Any]]] = {}
    for k, fp in objects.items():
        if fp is not None:
            by_fp.setdefault(fp, []).append(k)
    kept = {pid for pid, _ in (k for ks in by_fp.values() for k in ks)}
    unknown = {k for k in objects if k[0] not in kept}  # (the processes that kept none: one object each)
    told = {fp: {*ks, *unknown} for fp, ks in by_fp.items()}
    return {
        fp: (
            told[fp],
            len({pid for pid, _ in ks}) < len(ks),
            len(told[fp]) == len(objects),
            len({pid for pid, _ in told[fp]}) == 1,
        )
        for fp, ks in by_fp.items()
    }


def _object(event: Mapping[str, Any]) -> tuple[Any, Any]:
    """The object a recorded method call was made on: its process, and its ordinal there
    (:class:`~forkpoint.events.ToolInstance`, whose shape a session's reading checked; 0, the first
    object's, for a call kept without one). Each process numbers its own objects."""
    mark = event.get("instance")
    return _pid(event), mark["n"] if isinstance(mark, Mapping) else 0


def _pid(event: Mapping[str, Any]) -> int | None:
    """The process an event was recorded in; None when its ``pid`` is no int (a session's is data
    from anywhere: a list's stopped the replay at its start, unhashable)."""
    pid = event.get("pid")
    return pid if isinstance(pid, int) else None


#: The waits made at one place a recording noted (:func:`_noted_waits`): their ordinals, sorted,
#: and what each got (how many finished futures, None: the usual number; how many of them the
#: program's own) and whether that holds for the waits after it too.
NotedWaits = tuple[list[int], list[tuple[int | None, int, bool]]]


def _noted_waits(notes: Iterable[Mapping[str, Any]]) -> dict[tuple[int | None, str, str], NotedWaits]:
    """The waits a recording's notes say got another number of finished futures than the one made
    before them (:data:`~forkpoint.replay.pools.AT_ONCE`), by process, kind and place."""
    noted: dict[tuple[int | None, str, str], list[tuple[int, int | None, int, bool]]] = {}
    for n in notes:
        got = (n.get("data") or {}).get("finished_at_once")
        if (
            not isinstance(got, dict)
            or not isinstance(got.get("waits"), str)
            or not isinstance(got.get("at"), str)
        ):
            continue
        wait, done, onward = got.get("wait"), got.get("done"), got.get("onward") is True
        own = got.get("own", 0)
        if (
            isinstance(wait, int)
            and isinstance(own, int)
            and (isinstance(done, int) or (onward and done is None))
        ):
            noted.setdefault((_pid(n), got["waits"], got["at"]), []).append((wait, done, own, onward))
    return {
        place: ([w for w, *_ in waits], [(d, o, on) for _, d, o, on in waits])
        for place, waits in ((p, sorted(w, key=itemgetter(0))) for p, w in noted.items())
    }


def _got(noted: NotedWaits | None, wait: int, usual: int) -> tuple[int, int]:
    """How many finished futures the ``wait``-th wait made at a place got live, and how many of them
    the program's own, by the notes of that place (:func:`_noted_waits`): the one for it, or the
    last before it that holds onward; else ``usual``, none."""
    if noted is None:
        return usual, 0
    waits, got = noted
    i = bisect.bisect_right(waits, wait) - 1
    if i < 0 or (waits[i] != wait and not got[i][2]):
        return usual, 0
    done, own, _ = got[i]
    return (usual if done is None else done), own


def neutral_answer(request: HttpRequest, kind: str) -> ModelCallEvent:
    """The answer a client expects from a telemetry endpoint or an MCP session request the recording
    does not have (:data:`forkpoint.providers.kinds.TELEMETRY`; MCP: ``405 Method Not Allowed``,
    which the MCP specification lets a server answer to both)."""
    body = request["body"] if request.get("body_kind") == "json" else None
    found = kinds.telemetry_endpoint(request["method"], request["url"], body, request.get("headers"))
    answer = found.answer if found is not None and kind == "telemetry" else kinds.Answer(405, None, None)
    headers = [["content-type", answer.content_type]] if answer.content_type else []
    return {
        "type": "model_call",
        "request": request,
        "response": {
            "status": answer.status,
            "reason": "",
            "http_version": "HTTP/1.1",
            "headers": headers,
            "body_kind": "empty" if answer.body is None else "json",
            "body": answer.body,
            "ended": "complete",
        },
    }


def _unexpired(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """The recorded ``response`` to serve again aside, with the ``Expiration`` of the AWS credentials
    botocore fetched moved an hour past now: they expire hours after the recording, and botocore
    refreshes them when they have, so a later replay (without credentials of its own) fetched them
    again and failed the run on the neutral answer. They only sign requests no one receives."""
    body = response.get("body")
    if not (isinstance(body, dict) and isinstance(body.get("Expiration"), str) and "AccessKeyId" in body):
        return response
    found = kinds.telemetry_endpoint(request["method"], request["url"], None, request.get("headers"))
    if found is None or not found.name.startswith("aws "):
        return response
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    return {**response, "body": {**body, "Expiration": later}}


def _same_json(a: Any, b: Any) -> bool:
    """Whether two argument values are the same JSON, as their match keys see them (``==`` takes
    ``1``, ``1.0`` and ``True``, and ``10**20`` and ``1e20``, for one another)."""
    try:
        return canonical_json(a, exotic=True) == canonical_json(b, exotic=True)
    except TypeError:  # (not JSON data: an edited session's; never taken for another value)
        return False


class _Latest:
    """The latest of a measure (when a call was served, or when it ended when recorded) of each
    caller's calls, and the two callers of the latest (:meth:`Replayer._raced`: so that the latest
    of every caller's but one is one look, not one for each call served before)."""

    def __init__(self) -> None:
        self.of: dict[Any, float] = {}
        self.top: list[Any] = []

    def add(self, caller: Any, value: float) -> None:
        if value <= self.of.get(caller, -math.inf):
            return
        self.of[caller] = value
        if all(c is not caller for c in self.top):
            self.top.append(caller)
        self.top.sort(key=self.of.__getitem__, reverse=True)
        del self.top[2:]

    def but(self, caller: Any) -> float | None:
        """The latest of every caller's calls but ``caller``'s, None when no other has any."""
        return next((self.of[c] for c in self.top if c is not caller), None)


class _ServedTo:
    """Who the calls of one group of identical calls served here were served to (:meth:`Replayer._raced`)."""

    def __init__(self) -> None:
        #: The recorded processes of the calls.
        self.pids: set[int | None] = set()
        #: When each thread's calls were served (the count of threads and tasks started then), and
        #: when they ended when recorded (``finished``).
        self.threads = (_Latest(), _Latest())
        #: The same for each asyncio task of a thread (what it ran outside any task is not here).
        self.tasks: dict[threading.Thread, tuple[_Latest, _Latest]] = {}


class Replayer:
    """The replay runtime: serves recorded model and tool calls of one :class:`~forkpoint.log.Session`.

    ``models`` / ``tools`` say where each kind of call comes from: ``"replay"`` (the session) or
    ``"live"`` (really made). ``on_divergence`` is the policy after a call that matches nothing:
    ``"stop"`` raises :class:`Divergence`; ``"live"`` switches every later call to live;
    ``"fifo"`` serves the next unused recorded call of the same endpoint or tool and notes the drift.
    ``overrides`` replace single recorded results (see :mod:`forkpoint.override`). With
    ``live_from`` (a checkpoint's seq) only the calls before it are served; once all of them have
    been, every later call is live (a fork's continuation). ``live_tools`` names tools that run
    for real whatever ``tools`` says (a test that asserts on a tool's side effect); their recorded
    calls are not expected to be served. ``ignore`` adds match rules
    (:class:`~forkpoint.match.IgnoreRule`) to those of the configuration and of the session's
    header. A session recorded with ``deterministic`` has its values served too (the agent's own
    clock and randomness, :mod:`forkpoint.capture.clock`).

    ``strict``: a plain HTTP call that differs from an unused recording of its endpoint only in ids is
    a divergence too (by default it is served that recording and listed in the report's ``id_drift``).

    When ``child`` is given, every call of this run — served, overridden or live — is written to it:
    the what-if run as a session of its own, linked to its parent (telemetry and MCP session calls
    answered aside are not). ``hand_over``: ``session`` was loaded for this replay alone, so a tool
    result served as recorded is the loaded value itself, not a copy (:meth:`served_result`).
    Thread-safe.
    """

    mode: Literal["replay"] = "replay"

    def __init__(
        self,
        session: Session,
        *,
        allow_hosts: Sequence[str] = (),
        models: str = "replay",
        tools: str = "replay",
        on_divergence: str = "stop",
        overrides: Sequence[Override] = (),
        child: SessionWriter | None = None,
        live_from: int | None = None,
        ledger: Ledger | None = None,
        live_tools: Sequence[str] = (),
        ignore: Sequence[IgnoreRule] = (),
        strict: bool = False,
        hand_over: bool = False,
    ) -> None:
        for name, value, allowed in (
            ("models", models, SOURCES),
            ("tools", tools, SOURCES),
            ("on_divergence", on_divergence, POLICIES),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        self._session = session
        self.root_span: str = (
            (child.header.get("span_id") if child else None) or session.header.get("span_id") or ""
        )
        self.allow_hosts = frozenset(allow_hosts)
        self.sources: dict[str, str] = {"model_call": models, "tool_call": tools, "value": "replay"}
        self.live_tools = frozenset(live_tools)
        self.ignore = configured() + (*header_rules(session.header), *ignore)
        self.deterministic = bool(session.header.get("deterministic"))
        #: The reads the recording served from the session (the others it made for real).
        reads = session.header.get("deterministic_reads")
        self.value_fns = frozenset(map(str, reads) if isinstance(reads, list) else FIRST_VALUE_FNS)
        self.policy = on_divergence
        self.child = child
        self.hand_over = hand_over
        #: By seq, the tool calls whose result was handed over as loaded, with its JSON.
        self._handed: dict[int, tuple[ToolCallEvent, bytes]] = {}
        # A fork replays the prefix before its checkpoint, then goes live once that prefix is used up.
        self.live_from = live_from
        in_range = [e for e in session.events if live_from is None or e["seq"] < live_from]
        calls = [e for e in in_range if e["type"] == "model_call" or e["type"] == "tool_call"]
        #: Telemetry and MCP session exchanges: answered aside, never required (module docstring).
        self.aside: list[ModelCallEvent] = [
            e for e in calls if e["type"] == "model_call" and _answered_aside(e)
        ]
        aside = {e["seq"] for e in self.aside}
        self.recorded: list[Served] = [
            e for e in in_range if e["type"] in ("model_call", "tool_call", "value") and e["seq"] not in aside
        ]
        #: A fork's recorded model call at its checkpoint, when the recording ran what it holds no
        #: calls of before it (tools the model asked for before the checkpoint, Python programs): the
        #: first live call to its endpoint must be that request, or those ran again to another state
        #: than the checkpoint's (:meth:`_off_checkpoint`). Without them, the served prefix made that
        #: state, and a first request that differs (a prompt stamped with the time) is the arm's own.
        unrecorded = live_from is not None and (
            any(asked < live_from for asked, _ in unrecorded_asks(session))
            or any((n.get("data") or {}).get("unrecorded_programs") for n in session.by_type("note"))
        )
        self._at_checkpoint: ModelCallEvent | None = next(
            (
                e
                for e in session.events
                if live_from is not None
                and unrecorded
                and e["seq"] > live_from
                and e["type"] == "model_call"
                and not _answered_aside(e)
            ),
            None,
        )
        self.strict = strict
        self.aside_served: list[int] = []
        self.aside_answered: list[str] = []
        #: Set in the thread that flushes the program's telemetry as the replay ends (:meth:`ending`).
        self._ending = threading.local()
        self.id_drift: list[DivergenceReport] = []
        self.overrides = override.resolve(list(overrides), self.recorded)
        self.applied: dict[int, bool] = dict.fromkeys(self.overrides, False)
        by_seq = {e["seq"]: e for e in self.recorded} if self.overrides else {}
        #: What each override drops that the model's API needs back (override.losses): said with it.
        self.losses = {seq: override.losses(by_seq[seq], o) for seq, o in self.overrides.items()}
        #: Overrides whose value could not be handed over as given (a field that fails validation): why.
        self.refused: dict[int, str] = {}
        # A key stored under the spec in force now is the key computed now (match.key_spec): used as
        # it is; the others are computed again. Should a call match nothing, the stored keys are
        # checked before that is called a divergence (_verify_keys).
        spec = key_spec(self.ignore)
        self._child_keys = None if child is None or spec == child.header.get("keys") else spec
        self._unverified: set[int] = set()
        self._keys: dict[int, str] = {}
        for e in self.recorded:
            key = stored_key(e, spec, session.header.get("keys"))
            if key is None:
                key = event_key(e, self.ignore)
            else:
                self._unverified.add(e["seq"])
            self._keys[e["seq"]] = key
        self._queues = self._queued(self.recorded)
        #: Tool name → the functions recorded under it (:func:`_same_function`), and the names of
        #: which a call was recorded without one.
        self._functions: dict[str, set[str]] = {}
        self._unnamed: set[str] = set()
        fps: dict[str, dict[tuple[Any, Any], Any]] = {}  # function → object → fingerprint (None: not kept)
        #: Seq → the object its call was made on (:func:`_object`), of a call with its function.
        self._made_on: dict[int, tuple[Any, Any]] = {}
        #: (Function, fingerprint) of which a recorded object was not made alone (``alone``: another
        #: alike lived at its first call), or not known to be: which is which was but a guess.
        self._together: set[tuple[str, Any]] = set()
        for e in self.recorded:
            if e["type"] == "tool_call" and e.get("function"):
                self._functions.setdefault(e["tool"], set()).add(e["function"])
                objects = fps.setdefault(e["function"], {})
                made = self._made_on[e["seq"]] = _object(e)
                objects.setdefault(made, None)
                if isinstance(mark := e.get("instance"), Mapping):
                    objects[made] = mark["fp"]
                    if "first" in mark:
                        objects[made[0], 0] = mark["first"]
                    if mark["n"] and not mark.get("alone"):
                        self._together.add((e["function"], mark["fp"]))
            elif e["type"] == "tool_call":
                self._unnamed.add(e["tool"])
        #: The rules about a tool this session has no call of (a mistyped name): said, never applied.
        self.ignore_warnings = absent_tool_rules(self.ignore, {*self._functions, *self._unnamed})
        #: Function → fingerprint → its recorded objects (:func:`_by_fingerprint`), of a function
        #: some process called on several.
        self._objects = {f: _by_fingerprint(o) for f, o in fps.items() if any(o.values())}
        #: Function → recorded object → its fingerprint (None: not kept), of those of :attr:`_objects`.
        self._fps = {f: o for f, o in fps.items() if f in self._objects}
        #: The tools whose calls of several recorded objects were served to objects that could not be
        #: told apart, answered differently (report ``objects_untold``).
        self.objects_untold: set[str] = set()
        #: The calls (their group in :attr:`_alike`) found answered alike for an object
        #: (a fingerprint), or made on one object: those left of them are too (:meth:`_same_object`).
        self._told_alike: set[tuple[int, str]] = set()
        #: The tools of which an object was served its own ordinal's recorded call among alike
        #: objects' calls answered differently: served another's later, it is said (:meth:`_same_object`).
        self._by_ordinal: set[str] = set()
        #: (function, fingerprint) → the seqs of the calls made on its recorded objects (:meth:`_told`).
        self._told_seqs: dict[tuple[str, str], set[int]] = {}
        #: (match key, function, fingerprint or recorded object) → the calls of that key left to
        #: serve, made on its recorded objects, in recorded order (:meth:`_same_object`; with None,
        #: all of the function's, :func:`_same_function`): found once,
        #: not among every call left at each call, and kept as calls are taken out (:meth:`_taken_out`).
        self._told_left: dict[tuple[str, str, Any], Left] = {}
        #: Seq → those of :attr:`_told_left` that hold its call.
        self._told_in: dict[int, list[Left]] = {}
        #: Seq → its group (first seq): identical calls whose recorded answers differ (_alike).
        self._alike = _alike(self._queues.values())
        #: Seq → the call's own id (:func:`_own_call_ids`; :meth:`_same_call_id`).
        self._call_ids = _own_call_ids(self._queues.values())
        #: (Match key, own id) → its recorded calls (:meth:`_by_call_id`; :meth:`_same_call_id`).
        self._with_id = self._by_call_id()
        #: Match key → the own ids of its recorded calls (:meth:`_same_call_id`).
        self._key_ids: dict[str, set[str]] = {}
        for seq, own in self._call_ids.items():
            self._key_ids.setdefault(self._keys[seq], set()).add(own)
        #: Recorded call → the secrets it sent (:meth:`_same_secrets`), once looked at.
        self._sent_secrets: dict[int, tuple[list[str], list[str]]] = {}
        #: The groups of :attr:`_alike` whose calls were made by as many named tasks (:meth:`_certain`).
        self._named_groups = _named_groups(self.recorded, self._alike)
        #: [group, seq, pid, raced (:meth:`_raced`), when served, when the process started] for each
        #: such call served.
        self.alike_served: list[list[Any]] = []
        #: For each of :attr:`alike_served`: whether it went to the caller of the recorded call's name.
        self._same_caller: list[bool] = []
        #: Whether some call served here went to another caller than the recorded call's.
        self.callers_differ = False
        #: How far this run's asyncio task numbers are from the recording's (:meth:`_same_task`).
        self._task_offset: int | None = None
        #: Served calls whose recorded answer holds a scrubbed secret's placeholder (the program got it).
        self.placeholders_served: list[int] = []
        #: Served streams holding chunks stored empty, which no HTTP library hands a program: each
        #: as its seq and how many (a chunk a scrubbed secret filled: :func:`_pieces_lost`).
        self.pieces_lost: list[dict[str, int]] = []
        #: Group → who the calls of the group served here were served to (:meth:`_raced`).
        self._served_to: dict[int, _ServedTo] = {}
        self.used: list[int] = []
        #: Tool calls taken whose result or exception could not be handed back (not recorded, or not
        #: rebuilt here): the program got nothing of them (:meth:`diverged`), so they are not served.
        self.unservable: list[int] = []
        #: The calls recorded inside those tool calls' bodies: never served with them, nor asked for.
        self.unservable_inner: set[int] = set()
        # Served by the other processes of this replay (a recording made by several processes).
        self.ledger = ledger
        self.started = time.time()  # orders the reports of a replay's processes (merge_reports)
        self.others: set[int] = set()
        self._events = {e["seq"]: e for e in self.recorded}
        self.positions = {"model_call": 0, "tool_call": 0, "value": 0}
        #: The positions among model_call events of this run's HTTP exchanges that are no model's
        #: call (plain HTTP, MCP, telemetry): a divergence's model call is said by its own count.
        self._not_models: list[int] = []
        #: Calls made live, by kind; a model_call event's HTTP by what it is (:func:`_live_kind`).
        self.live_calls = {"model_call": 0, "tool_call": 0, "value": 0, "http": 0, "mcp": 0, "telemetry": 0}
        self.divergence: DivergenceReport | None = None
        self.drift: list[DivergenceReport] = []
        self._versions: list[list[str]] | None = None  # _changed_versions, read once
        self._in_place: list[dict[str, Any]] | None = None  # every _changed_in_place, read once
        #: The calls answered with a Divergence instead of a recorded answer (report ``unanswered``).
        self.unanswered: list[DivergenceReport] = []
        self.gone_live = False
        #: Called as a call is made live: a model or HTTP call about to be sent (not telemetry, nor one
        #: kept from the network), a tool run for real (a fork's arm marks that it went live: _boot).
        self.on_live: Callable[[], None] | None = None
        self.network_blocked: list[str] = []
        self.pending: set[Any] = set()
        self.cache_answers: Counter[str] = Counter()
        self.stored_states: dict[str, list[str | None]] = {}
        self._lock = threading.Lock()
        # Calls made inside a tool's body: served with that tool, never asked for on their own.
        self._children: dict[str, list[Call]] = {}
        for e in self.recorded:
            parent = e.get("parent_span_id")
            if parent and e["type"] != "value":  # values are read by the agent's code, never a tool's
                self._children.setdefault(parent, []).append(e)
        self.covered: set[int] = set()
        # Tool results are released in the order they finished live (see release_order).
        self._after = release_order([e for e in self.recorded if is_tool_call(e)], self._descendants)
        self._released: dict[int, int] = {}  # seq → the thread it was handed over in
        self._turns = threading.Condition()
        self.out_of_order: list[dict[str, Any]] = []
        #: The waits for finished futures that got fewer than live (finished_at_once).
        self.waits_short: list[dict[str, Any]] = []
        #: The waits it could not tell which recorded process's they were (finished_at_once).
        self.waits_untold: list[dict[str, Any]] = []
        #: The waits that got fewer futures of the program's own than live (own_short).
        self.waits_own: list[dict[str, Any]] = []
        #: The as_completed and waits that took a process pool's futures, or the futures asyncio
        #: made of a thread pool's, once each (not_held).
        self.process_pools: list[dict[str, str]] = []
        self.thread_pools: list[dict[str, str]] = []
        self._pools_noted: set[tuple[Any, Any]] | None = None
        #: The recording's AT_ONCE notes, read once (finished_at_once, _noted_waits).
        self._at_once: dict[tuple[int | None, str, str], NotedWaits] | None = None
        #: The recorded processes of the calls served here (:meth:`_serve`): kept as they are served,
        #: not read off every call served at each wait (a graph's every step waits).
        self._pids_served: set[int | None] = set()
        #: How this run ended (:meth:`finish`), and the uncaught exceptions it raised.
        self.exit_code: int | None = None
        self.uncaught: list[ErrorRecord] = []
        # Called after each call this process is asked for (a forked child's report: see forked).
        self._after_call: Callable[[], None] | None = None

    def forked(self, report: Callable[[], None]) -> None:
        """In a child made by ``fork()`` without ``exec`` (a ``multiprocessing`` worker): from now on
        this copy reports what the child does, and only that (what the parent served before the fork
        counts as served elsewhere), and ``report()`` is called after each call the child is asked
        for and at a divergence: the child may leave through ``os._exit``, which runs no exit
        handler, so its report could not wait for the end."""
        # The child has one thread: a lock another thread held at the fork would never be released.
        self._lock = threading.Lock()
        if self.ledger is not None:
            self.ledger.reopen()
        self._turns = threading.Condition()
        self.others |= set(self.used) | self.covered
        self.used = []
        self.covered = set()
        # (the parent asked for them, and its own report says so)
        self.unservable, self.unservable_inner = [], set()
        self.started = time.time()
        self.live_calls = dict.fromkeys(self.live_calls, 0)
        self.divergence = None
        self.drift, self.id_drift, self.out_of_order, self.uncaught = [], [], [], []
        self.waits_short, self.waits_untold, self.waits_own = [], [], []
        self.process_pools, self.thread_pools = [], []
        self._pids_served = set()
        self.unanswered = []
        self.alike_served, self.placeholders_served, self._same_caller = [], [], []
        self.pieces_lost = []
        # (the tools whose objects the parent's calls could not tell apart: said in its report; what
        # the parent was served by ordinal, _by_ordinal, still holds here)
        self.objects_untold = set()
        self.callers_differ, self._task_offset = False, None
        self.aside_served, self.aside_answered, self.network_blocked = [], [], []
        self.applied = dict.fromkeys(self.applied, False)
        self.refused = {}
        self.cache_answers = Counter()  # (summed over the processes' reports: merge_reports)
        self.report_each_call(report)

    def report_each_call(self, report: Callable[[], None]) -> None:
        """Call ``report()`` after each call this process is asked for and at a divergence (a
        process that may end without running its exit handlers: see :meth:`forked`)."""
        self._after_call = report

    def _reported(self) -> None:
        if self._after_call is not None:
            self._after_call()

    # -- the capture layer asks these

    def network_allowed(self) -> bool:
        """True when some call may go live, so sockets must not be blocked."""
        return self.gone_live or "live" in self.sources.values()

    def placeholder_refused(self, request: HttpRequest, carrier: str, placeholder: str) -> NetworkBlocked:
        """See :class:`forkpoint.runtime.Serving`: the call is not counted as made live."""
        where = f"{request['method']} {request['url']}"
        if placeholder == PLACEHOLDER_KEY:
            unset = [k for k in API_KEY_VARS if os.environ.get(k) == PLACEHOLDER_KEY] or [
                "an API-key variable"
            ]
            said = f"the placeholder key set for {', '.join(unset)}"
            why = (
                f"{PLACEHOLDER_KEY!r}, the placeholder this replay set for {' and '.join(unset)} (unset here, "
                "so that the SDK would start), which the server would refuse. Set the key to make live calls."
            )
        elif cookie_placeholders(placeholder):
            said = f"{placeholder}, a cookie's placeholder"
            why = (
                f"{placeholder}, the placeholder of a cookie a recorded response set (a Set-Cookie is "
                "stored with its value scrubbed), which the server would refuse: the session it names "
                "exists only in the recorded run."
            )
        elif placeholder.startswith("[REDACTED:aws-"):
            # (not placeholders_served: the credentials botocore fetched are served aside, unsaid)
            # (botocore hands the program its own error, not this one's: the remedy is said here too)
            said = f"{placeholder}, an AWS credential's placeholder: set AWS credentials to make live calls"
            why = (
                f"{placeholder}, the placeholder of an AWS credential scrubbed when recorded, which "
                "botocore signed with: the credentials it fetched from an instance or container "
                "endpoint are served from the recording (or a recorded answer handed them to the "
                "program), and AWS would refuse them. Set AWS credentials (AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY) to make live calls."
            )
        else:
            said = f"{placeholder}, a secret's placeholder"
            # (a fork's arm runs on the checkpoint's files, which a checkpoint keeps scrubbed)
            source = (
                "the checkpoint's restored files hold in its place (a checkpoint keeps files scrubbed: give "
                "the agent its secrets again, docs/security.md), or a recorded answer handed the program,"
                if self.live_from is not None
                else "a recorded answer handed the program (the report's placeholders_served)"
            )
            why = (
                f"{placeholder}, the placeholder of a secret scrubbed when recorded, which {source} and the "
                "server would refuse."
            )
        kind = classify(request["method"], request["url"], request["body"], request["headers"])
        with self._lock:
            self.live_calls[_live_kind("model_call", kind)] -= 1
            self.network_blocked.append(
                # (the host without the URL's user info: its placeholder says nothing here)
                f"{urlsplit(request['url']).netloc.rpartition('@')[2]} (not sent: {carrier} carried {said})"
            )
        return NetworkBlocked(f"forkpoint replay did not send {where} live: {carrier} carried {why}")

    def runs_live(self, kind: CallKind) -> bool:
        """True when the next call of ``kind`` is made live (see :class:`forkpoint.runtime.Serving`)."""
        return self.gone_live or self.sources[kind] == "live"

    def may_go_live(self) -> bool:
        """See :class:`forkpoint.runtime.Serving`."""
        return self.policy == "live" or self.live_from is not None

    def _relocated(self, value: Any) -> Any:
        """``value`` as the recorded run would have sent it, when this run's directory is another
        than the recording's (another checkout, a test's): this one's path in it is the recorded one
        (:func:`~forkpoint.match.relocated`). Neither folder inside the other: else as it is. A call
        is matched as sent first: a path that was the same in the recording stays matched."""
        recorded = self._session.header.get("cwd")
        try:
            here = os.getcwd()
        except OSError:  # (the folder it ran in was removed)
            return value
        if not isinstance(recorded, str) or here == recorded or len(here) < 2 or len(recorded) < 2:
            return value
        if (here + os.sep).startswith(recorded + os.sep) or (recorded + os.sep).startswith(here + os.sep):
            return value
        return relocated(value, here, recorded)

    def take_model_call(self, request: HttpRequest) -> tuple[ModelCallEvent, int] | None:
        """The event answering ``request`` and this call's position among the run's model calls, or
        None to make the call live. Raises :class:`~forkpoint.errors.Divergence`."""
        body = keyed_body(request)
        norm = normalize_request(request["method"], request["url"], request["headers"], body)
        key = model_key(norm, self.ignore)
        if not self._queues.get(key):  # (as sent, if recorded so: then nothing more to look at)
            moved = self._relocated(body)
            if moved is not body:
                norm = normalize_request(request["method"], request["url"], request["headers"], moved)
                key = model_key(norm, self.ignore)
        where = f"{norm['method']} {norm['path']}"
        kind = classify(request["method"], request["url"], request["body"], request["headers"])
        if runtime.current_span.get() is not None and self.sources["tool_call"] == "live":
            with self._lock:  # a tool running live: what it sends is live too
                self.live_calls[_live_kind("model_call", kind)] += 1
            return None
        ending = getattr(self._ending, "active", False)
        if kind == "telemetry" or kinds.is_session_management(request["method"], kind) or ending:
            return self._take_aside(request, key, where, kind), self.positions["model_call"]
        origin = _origin(request["url"])
        event, position = self._take(
            "model_call",
            key,
            norm,
            alternatives=(lambda: self._undigested(request)) if "withheld_digest" in request else None,
            endpoint=where,
            origin=origin,
            plain=kind == "http",
            request=request,
            call=kind,
        )
        if event is None:
            return None
        if self.child is not None:
            self._log_served(event, {"request": request})
        return cast(ModelCallEvent, event), position

    def _undigested(self, request: HttpRequest) -> list[str]:
        """For a request whose body was withheld, the match key it had in a session recorded before
        withheld bodies had their digest (:func:`~forkpoint.match.keyed_body`), when such a call of
        it is the next left there: served it, the replay stops at it saying why
        (:func:`forkpoint.capture.exchange.serve`). ``[]`` else: a call recorded with an empty body
        answers no withheld one."""
        norm = normalize_request(request["method"], request["url"], request["headers"], request["body"])
        key = model_key(norm, self.ignore)
        queue = self._queues.get(key)
        recorded = _first(queue).get("request") if queue else None
        undigested = (
            isinstance(recorded, Mapping) and "withheld" in recorded and "withheld_digest" not in recorded
        )
        return [key] if undigested else []

    @contextmanager
    def ending(self) -> Iterator[None]:
        """While this thread flushes the program's telemetry as the replay ends, after the run:
        what an exporter sends then (a Zipkin exporter's ``POST /api/v2/spans``, no call forkpoint
        knows for telemetry) is answered aside, not taken for the run's next call (a divergence)."""
        self._ending.active = True
        try:
            yield
        finally:
            self._ending.active = False

    def _take_aside(self, request: HttpRequest, key: str, where: str, kind: str) -> ModelCallEvent:
        """The answer to a telemetry call or an MCP session request: the recorded one with the same
        key, else with the same endpoint, else the neutral answer the client expects. Its recorded
        stream ends where it was recorded (a background stream the recorded run left open is not a
        divergence)."""
        with self._lock, self._shared():
            unused = [e for e in self.aside if e["seq"] not in set(self.aside_served)]
            found = next((e for e in unused if event_key(e) == key), None) or next(
                (e for e in unused if endpoint(e) == where), None
            )
            if found is not None:
                self.aside_served.append(found["seq"])
                served: ModelCallEvent = {**found}
                response = found.get("response")
                if response is not None:
                    served["response"] = {**_unexpired(request, response), "ended": "complete"}
                return served
            self.aside_answered.append(where)
        return neutral_answer(request, kind)

    def _count_models(self, report: DivergenceReport) -> None:
        """A divergence at a model's call after HTTP exchanges that were none (a login, an MCP
        server): ``model_position``, its place among this run's model calls, which ``position``
        counts those exchanges among (as the what-if ``end`` and ``model#K`` do)."""
        if report["kind"] == "model_call" and not report.get("call"):
            before = sum(1 for p in self._not_models if p < report["position"])
            if before:
                report["model_position"] = report["position"] - before

    def diverged(
        self, event: Call, kind: CallKind, position: int, reason: str, *, handed_nothing: bool = False
    ) -> Divergence:
        """A divergence about a recorded call that was served (see :class:`forkpoint.runtime.Serving`),
        noted as this replay's divergence when it is the first."""
        where = endpoint(event)
        report: DivergenceReport = {
            "kind": kind,
            "endpoint": where,
            "position": position,
            "reason": reason,
            "key": event.get("key"),
            "actual": None,
            "expected": {"seq": event.get("seq"), "label": where},
            "nearest": None,
            "diff": [],
        }
        request = event.get("request")
        if kind == "model_call" and isinstance(request, Mapping):
            call = classify(request["method"], request["url"], request.get("body"), request.get("headers"))
            if call in ("http", "mcp"):  # (counted among model calls, as model#K overrides are not)
                report["call"] = call
        self._count_models(report)
        with self._lock:
            if handed_nothing and event.get("seq") in self.used:
                self.used.remove(event["seq"])
                self.unservable.append(event["seq"])
                inner = {e["seq"] for e in self._descendants(event)} & self.covered
                self.covered -= inner
                self.unservable_inner |= inner
            if self.divergence is None:
                self.divergence = report
                self._wake()
        self._reported()
        return divergence(report)

    def take_tool_call(
        self,
        name: str,
        args: dict[str, Any],
        *,
        defaulted: frozenset[str] = frozenset(),
        call_id: str | None = None,
        mcp: McpCall | None = None,
        function: str | None = None,
        instance: str | None = None,
        kept: ToolInstance | None = None,
    ) -> tuple[ToolCallEvent, int] | None:
        """The event of this tool call and its position among the run's tool calls, or None to run
        the tool live. Raises :class:`Divergence`.

        ``defaulted`` names arguments the caller did not pass (filled in from the signature): when
        nothing matches the call as it is, a recorded call of the tool whose arguments are these
        less some of the defaulted ones is taken, so a tool that gained optional parameters since
        the recording still gets its recorded answers. ``call_id``: the id the model gave the call
        (:meth:`_same_call_id`); ``mcp``: where a request to an MCP server went (its server's name is
        in the key, its transport tells identical calls apart: :func:`_own_id`); ``function``: the
        ``module:qualname`` a wrapper runs (:meth:`_same_function`); ``instance``: the fingerprint of
        the object it was called on, a method's (:meth:`_same_object`), and ``kept`` what a recording
        keeps of it (a child session, of this run's objects)."""
        server = mcp_server(mcp)

        def without_defaults() -> list[str]:
            """Keys of recorded calls of this tool whose arguments are these less some defaulted ones."""
            alt: list[str] = []
            scrubbed = scrub_json(args)
            for e in self.recorded:
                rec = e.get("args")
                if (
                    e["type"] != "tool_call"
                    or (e["tool"], mcp_server(e.get("mcp"))) != (name, server)
                    or not isinstance(rec, dict)
                ):
                    continue
                if (
                    set(rec) <= set(scrubbed)
                    and set(scrubbed) - set(rec) <= defaulted
                    and all(_same_json(scrubbed[k], v) for k, v in rec.items())
                    and self._keys[e["seq"]] not in alt
                ):
                    alt.append(self._keys[e["seq"]])
            return alt

        key = tool_key(name, args, self.ignore, server)
        if not self._queues.get(key):  # (as called, if recorded so: then nothing more to look at)
            moved = self._relocated(args)
            if moved is not args:
                args, key = moved, tool_key(name, moved, self.ignore, server)
        norm = tool_request(name, args, server)
        alternatives = without_defaults if defaulted & set(args) else None
        live = name in self.live_tools
        event, position = self._take(
            "tool_call",
            key,
            norm,
            alternatives=alternatives,
            live=live,
            call_id=_own_id(call_id, mcp),
            function=function,
            instance=instance,
            ordinal=kept["n"] if kept else 0,
            name=name,
        )
        if event is None:
            on_live = self.on_live
            if on_live is not None:
                on_live()
            return None
        if self.child is not None:
            # (with the function and object that asked: a child's served calls are its calls, replayed as such)
            asked = {"call_id": call_id, "function": function, "instance": kept}
            self._log_served(event, {"tool": name, "args": args, **{k: v for k, v in asked.items() if v}})
        return cast(ToolCallEvent, event), position

    def take_value(self, fn: str, args: list[Any] | None = None) -> ValueEvent | None:
        """The recorded value the agent's own code reads next from ``fn`` (``deterministic``), or
        None to read it for real (after the run went live). Raises :class:`Divergence` when the
        recording has no more values of ``fn``: the run read it more often than when recorded.
        A read the recording made for real (a forkpoint that did not record ``fn`` yet) is made for
        real again."""
        if fn not in self.value_fns:
            return None
        norm = {"value": fn, "args": args}
        event, _ = self._take("value", value_key(fn, args), norm, name=fn)
        if event is not None and self.child is not None:
            self._log_served(event, {"fn": fn, **({"args": args} if args is not None else {})})
        return cast(ValueEvent | None, event)

    def before_model_call(self, request: HttpRequest) -> None:
        """Live calls of a replay take no checkpoints (the recording has them): one about to be sent
        is said to :attr:`on_live`, telemetry aside (not the agent's call)."""
        on_live = self.on_live
        if (
            on_live is not None
            and classify(request["method"], request["url"], request["body"], request["headers"])
            != "telemetry"
        ):
            on_live()

    def model_call_done(self, event: ModelCallEvent) -> None:
        """A live model call finished: write it to the child session."""
        self._log_live(event)

    def tool_call_done(self, event: ToolCallEvent) -> None:
        """A live tool call finished: write it to the child session."""
        self._log_live(event)

    def value_done(self, event: ValueEvent) -> None:
        """A value read for real (the run went live): write it to the child session."""
        self._log_live(event)

    # -- internals

    @contextmanager
    def _shared(self) -> Iterator[None]:
        """Hold the ledger while choosing a recorded call: learn what the other processes served
        since the last look (never served here again), and tell them what this one served."""
        if self.ledger is None:
            yield
            return
        with self.ledger.exclusive() as served_elsewhere:
            for seq in served_elsewhere:
                event = self._events.get(seq)
                if event is None or seq in self.others:
                    continue
                self.others.add(seq)
                queue = self._queues.get(self._keys[seq])
                if queue and event in queue:
                    queue.remove(event)
                    self._taken_out(event)
            before = len(self.used)
            try:
                yield
            finally:
                self.ledger.claim(self.used[before:])

    def _take(
        self,
        kind: CallKind,
        key: str,
        norm: dict[str, Any],
        *,
        alternatives: Callable[[], list[str]] | None = None,
        live: bool = False,
        plain: bool = False,
        request: HttpRequest | None = None,
        call_id: str | None = None,
        function: str | None = None,
        instance: str | None = None,
        ordinal: int = 0,
        **what: str,
    ) -> tuple[Served | None, int]:
        """The recorded call to serve for a call with match ``key`` (``alternatives()``: keys to try
        when none is left under ``key``; ``plain``: a plain HTTP request, which may be served a
        recording that differs only in ids; ``request``: the HTTP request, whose query's and
        headers' credentials are not in ``norm``; ``call_id``: a tool call's id from the model,
        :meth:`_same_call_id`; ``function``: a tool's function, :meth:`_same_function`) or None to go live (always with ``live``), and this call's position
        among the run's calls of its kind; raises :class:`Divergence`."""
        try:
            with self._lock, self._shared():
                self.positions[kind] += 1
                if kind == "model_call" and what.get("call") in ("http", "mcp", "telemetry"):
                    self._not_models.append(self.positions[kind])
                chosen = self._choose(
                    kind,
                    key,
                    norm,
                    alternatives,
                    what,
                    live=live,
                    plain=plain,
                    request=request,
                    call_id=call_id,
                    function=function,
                    instance=instance,
                    ordinal=ordinal,
                )
                position = self.positions[kind]
            # (out of the lock: an answer is read whole, and other threads' calls need not wait)
            if (
                chosen is not None
                and chosen["seq"] not in self.overrides
                and holds_placeholder(_answered(chosen))
            ):
                self.placeholders_served.append(chosen["seq"])
            if chosen is not None and chosen["seq"] not in self.overrides and (lost := _pieces_lost(chosen)):
                self.pieces_lost.append({"seq": chosen["seq"], "pieces": lost})
            return chosen, position
        finally:
            self._reported()

    def _choose(
        self,
        kind: CallKind,
        key: str,
        norm: dict[str, Any],
        alternatives: Callable[[], list[str]] | None,
        what: dict[str, str],
        *,
        live: bool,
        plain: bool,
        request: HttpRequest | None = None,
        call_id: str | None = None,
        function: str | None = None,
        instance: str | None = None,
        ordinal: int = 0,
    ) -> Served | None:
        if live or self.gone_live or self.sources[kind] == "live":
            if self.gone_live:  # (a call to another endpoint may have gone live first)
                self._check_checkpoint(kind, key, norm, what)
            self.live_calls[_live_kind(kind, what.get("call"))] += 1
            return None
        # (looked up again once a key taken as stored was computed anew and differed)
        while True:
            queue = self._queues.get(key)
            # (a function the recording knows under this name is served its own calls only: none left
            # of them is a divergence, not another function's answer)
            name = what.get("name", "")
            mine = (
                _same_function(
                    queue,
                    function,
                    self._functions.get(name, set()),
                    name not in self._unnamed,
                    functools.partial(self._left, (key, function or "", None), queue),
                )
                if queue
                else None
            )
            # (and an object the recording tells apart, its own calls only)
            mine = self._same_object(mine, key, function, (instance, ordinal), name) if mine else mine
            by_id = self._same_call_id(queue if mine is None else mine, key, call_id) if queue else []
            # (an id the recording told a call of this key apart by, whose call was served: an MCP
            # server's transport asking once more is not served another server's answer)
            if queue and (mine is None or mine) and (by_id or call_id not in self._key_ids.get(key, ())):
                # (of its own function's calls, the one that sent its secrets: :meth:`_same_secrets`)
                among = by_id or self._same_secrets(mine or queue, kind, norm, request) or mine
                return self._serve(_next_in(queue, what.get("origin"), among), by_id=bool(by_id))
            for alt in alternatives() if alternatives else ():
                queue = self._queues.get(alt)
                if queue:
                    return self._serve(queue.popleft())
            if not self._verify_keys():
                break
        if self.live_from is not None and len(self._taken()) == len(self.recorded):
            self._check_checkpoint(kind, key, norm, what)
            self.gone_live = True  # the recorded prefix is done: the fork continues live
            self.live_calls[_live_kind(kind, what.get("call"))] += 1
            return None
        report = self._divergence_report(kind, key, norm, what, function, call_id, instance)
        if plain and not self.strict:
            same = self._differing_in_ids(norm, what.get("endpoint"), what.get("origin"))
            if same is not None:
                self._queues[self._keys[same["seq"]]].remove(same)
                self.id_drift.append(
                    {
                        **report,
                        "served_seq": same["seq"],
                        "diff": [c.to_json() for c in _key_diff(normalized(same), norm)],
                    }
                )
                return self._serve(same)
        first = self.divergence is None
        if first:
            self.divergence = report
            self._wake()  # tool results waiting for their turn wait no longer: no order is kept now
        if self.policy == "live":
            self.gone_live = True
            self.live_calls[_live_kind(kind, what.get("call"))] += 1
            return None
        if self.policy == "fifo":
            where = what.get("endpoint") or what.get("name")
            taken = self._taken()
            nxt = next(
                (
                    e
                    for e in self.recorded
                    if e["seq"] not in taken and e["type"] == kind and endpoint(e) == where
                ),
                None,
            )
            if nxt is not None:
                self._queues[self._keys[nxt["seq"]]].remove(nxt)
                drift: DivergenceReport = {
                    **report,
                    "served_seq": nxt["seq"],
                    "diff": self._explained(
                        normalized(nxt), norm, what.get("name") if kind == "tool_call" else None
                    ),
                }
                self.drift.append(drift)
                if first:
                    self.divergence = drift
                return self._serve(nxt)
        # The replay stopped at the first divergence: a call made after it (an SDK retrying the
        # failed one, a program that caught it) is told where, not of a 2nd or 3rd call of its own.
        # Every call answered so is kept: under fifo, a call with nothing left to serve is no drift
        # the run went on from, although the divergence it reports is the first drift's.
        self.unanswered.append(report)
        raise divergence(report if first or self.divergence is None else self.divergence)

    def _same_call_id(self, queue: Collection[Any], key: str, call_id: str | None) -> list[Any]:
        """The call of ``queue`` (match ``key``'s left; the calls its function made,
        :func:`_same_function`) recorded with ``call_id``, the id the model gave the tool call asked
        now, as its own (:func:`_own_call_ids`), or none: the model's answer that asked for it was
        served from the recording, so its id names the recorded call that answered it, whichever of
        concurrent runs asks first (an MCP request's transport, :func:`_own_id`, likewise names its
        server's). A framework that makes its own ids each run, or a call with none, is served in the
        order of the recording. Looked up by the id (:attr:`_with_id`), not among every call left:
        20,000 calls asked in reverse took 37 s."""
        if call_id is None:
            return []
        return [e for e in self._with_id.get((key, call_id), ()) if e in queue]

    def _told(
        self, function: str | None, instance: str | None
    ) -> tuple[set[tuple[Any, Any]], bool, bool, bool] | None:
        """The recorded objects (:func:`_object`) of ``function`` that are the object of fingerprint
        ``instance``: those with that fingerprint (a forked worker's are its parent's) and those
        whose fingerprint is not known (a process that called it on one object only); whether
        several of one process have it, which cannot be told from each other; whether they are
        all of its objects; and whether they are of one process. None when none has it, or the
        recording has no objects of it."""
        return self._objects.get(function or "", {}).get(instance) if instance is not None else None

    def _same_object(
        self,
        calls: Left,
        key: str,
        function: str | None,
        live: tuple[str | None, int],
        tool: str,
    ) -> Left:
        """Of ``calls`` (match ``key``'s, one function's), those made on the objects of the fingerprint
        the method's object ``live`` (fingerprint, ordinal) has now (:meth:`_told`): two objects'
        identical calls (``web.search("x")``, ``docs.search("x")``) were served to each other when a
        replay asked in another order; all of them when no recorded object has it. Of several objects
        of one process with that fingerprint, those of the one of the live object's ordinal while any
        is left. Served in recorded order, and ``tool`` is said (:attr:`objects_untold`) when such a
        call is another recorded object's than the one of the live object's ordinal and fingerprint,
        or that ordinal's of objects that lived together when recorded (:attr:`_together`: known
        only by the order of their first calls, which the program may have changed), among several
        objects' calls answered differently: which got which is not certain then."""
        instance, ordinal = live
        if function not in self._objects or instance is None:
            return calls
        told = self._told(function, instance)
        # (not when it is all of them: each call of a loop making an alike object sorted them all)
        if told is not None and not told[2]:
            seqs = self._told_seqs.get((function, instance))
            if seqs is None:  # (once: each call looking up each call's object took 5,000 calls 1.5 s)
                seqs = self._told_seqs[function, instance] = {
                    q for q, m in self._made_on.items() if m in told[0]
                }
            calls = self._left((key, function, instance), calls, lambda e: e["seq"] in seqs)
        if not calls or not (told is None or told[1]):
            return calls
        fps = self._fps[function]

        def own(e: Any) -> bool:
            """Whether ``e`` was made on the recorded object of the live one's ordinal and
            fingerprint (of one process: another's objects of that ordinal are not its own)."""
            made = self._made_on[e["seq"]]
            return made[1] == ordinal and fps.get(made) == instance

        # (its own ordinal's calls: served as a plain function's repeated calls are, in recorded
        # order, though another object's were asked before them when recorded)
        mine = Left()
        if told is not None and told[3]:
            pid = next(iter(told[0]))[0]
            mine = calls if own(_first(calls)) else self._left((key, function, (pid, ordinal)), calls, own)
        if tool in self.objects_untold:
            return mine or calls  # (said once is enough: answers are not compared again)
        group = self._alike.get(_first(calls)["seq"])
        # (its own ordinal's, of objects each made alone: as certain as a function's repeated calls)
        by_ordinal = bool(mine) and (function, instance) not in self._together
        if not mine and tool in self._by_ordinal:  # (the ordinals it was served by do not hold)
            self.objects_untold.add(tool)
        elif (
            group is not None
            and (group, instance) not in self._told_alike
            and not (by_ordinal and tool in self._by_ordinal)
        ):
            if len({self._made_on[e["seq"]] for e in calls}) > 1 and len({_answer(e) for e in calls}) > 1:
                (self._by_ordinal if by_ordinal else self.objects_untold).add(tool)
            else:  # (compared once: the calls left of them later are fewer, alike still)
                self._told_alike.add((group, instance))
        return mine or calls

    def _same_secrets(
        self, queue: Collection[Any], kind: CallKind, norm: dict[str, Any], request: HttpRequest | None
    ) -> list[Any] | None:
        """The calls of ``queue`` (one match key, answered differently) that sent the secrets this
        call sends (in ``norm``, and in the query of its ``request``), then of those the ones that
        sent its credential headers, each only when some did and others not: a key counts a secret
        by its kind only (a JWT signed afresh each run matches), and a query's credential or a
        header not at all, so two calls each with a key of its own (a set of keys checked in the
        order their hashes fall in) were served each other's answers. None else. (A replay with
        another key than the recording's sends secrets none sent: it is served as before.)"""
        if len(queue) < 2 or _first(queue)["seq"] not in self._alike:
            return None
        sent = secret_placeholders(norm if kind == "model_call" else scrub_json(norm))
        sent += query_credentials(request["url"]) if request else []
        mine = (sent, header_credentials(request["headers"]) if request else [])
        if not any(mine):  # (none to tell them by: not copied, as 20,000 alike calls were at each)
            return None
        among = list(queue)
        for i, secrets in enumerate(mine):
            if secrets:
                among = [e for e in among if self._secrets_sent(e)[i] == secrets] or among
        return among if len(among) < len(queue) else None

    def _secrets_sent(self, event: Any) -> tuple[list[str], list[str]]:
        """The secrets recorded call ``event`` sent, as :meth:`_same_secrets` compares them: in its
        normalized request and its query, and in its credential headers."""
        seq = event["seq"]
        if seq not in self._sent_secrets:
            request = event.get("request")
            self._sent_secrets[seq] = (
                secret_placeholders(normalized(event))
                + (query_credentials(request["url"]) if request else []),
                header_credentials(request.get("headers")) if request else [],
            )
        return self._sent_secrets[seq]

    def _check_checkpoint(self, kind: CallKind, key: str, norm: dict[str, Any], what: dict[str, str]) -> None:
        """Of a fork going live: raise :class:`Divergence` (record it, under policy live) when this
        call is its first to the endpoint of the checkpoint's model call and not that request
        (:meth:`_off_checkpoint`)."""
        off = self._off_checkpoint(kind, key, norm, what)
        if off is not None and self.divergence is None:
            self.divergence = off
            if self.policy != "live":  # (fifo has nothing of the prefix left to serve: it stops)
                self.unanswered.append(off)
                raise divergence(off)

    def _off_checkpoint(
        self, kind: CallKind, key: str, norm: dict[str, Any], what: dict[str, str]
    ) -> DivergenceReport | None:
        """A divergence report when this first live call of a fork, to the endpoint of the model call
        recorded at its checkpoint, is not that request (the messages differ): the replayed prefix
        matched, but the run reached another state than the checkpoint's (a shell command the model
        gave, no recorded tool, ran again on the restored files), and an arm going live from there
        was measured as if it were the checkpoint's. None when it is, or when an override changed
        the prefix (then a changed request is what was asked for)."""
        at = self._at_checkpoint
        if at is None or kind != "model_call" or what.get("endpoint") != endpoint(at):
            return None
        self._at_checkpoint = None  # (only the first such call is the checkpoint's)
        if any(self.applied.values()) or key == event_key(at, self.ignore):
            return None
        report: DivergenceReport = {
            "kind": kind,
            "position": self.positions[kind],
            "reason": (
                f"it is not the request recorded at checkpoint seq {self.live_from}: the replayed calls before it "
                "matched, but the run reached another state than the checkpoint's (something it did before "
                "the checkpoint and forkpoint did not record ran again)"
            ),
            "key": key,
            "actual": norm,
            "expected": {"seq": at["seq"], "label": label(at)},
            "nearest": None,
            "diff": self._explained(normalized(at), norm, None),
            "endpoint": what["endpoint"],
        }
        return report

    def _queued(self, events: Sequence[Served]) -> dict[str, Left]:
        """``events`` by match key, identical requests in the order they were sent, not finished
        (:func:`~forkpoint.match.in_send_order`)."""
        queues: dict[str, list[Served]] = {}
        for e in events:
            queues.setdefault(self._keys[e["seq"]], []).append(e)
        return {k: Left(in_send_order(q)) for k, q in queues.items()}

    def _by_call_id(self) -> dict[tuple[str, str], list[Served]]:
        """(match key, own id) → the calls of :attr:`_queues` under that key recorded with that id as
        their own (:func:`_own_call_ids`), in the order to serve them (:meth:`_same_call_id`)."""
        out: dict[tuple[str, str], list[Served]] = {}
        for key, queue in self._queues.items():
            for e in queue:
                own = self._call_ids.get(e["seq"])
                if own is not None:
                    out.setdefault((key, own), []).append(e)
        return out

    def _verify_keys(self) -> bool:
        """Compute again every key that was taken as stored (once); True when one differed, and the
        calls not served yet are queued under the keys computed now."""
        if not self._unverified:
            return False
        changed = False
        for seq in self._unverified:
            key = event_key(self._events[seq], self.ignore)
            changed = changed or key != self._keys[seq]
            self._keys[seq] = key
        self._unverified = set()
        if changed:
            left = sorted((e for q in self._queues.values() for e in q), key=lambda e: e["seq"])
            self._queues = self._queued(left)
            self._with_id = self._by_call_id()
            self._told_left.clear()  # (of the keys that were: found again under the new ones)
            self._told_in.clear()
        return changed

    def _left(self, where: tuple[str, str, Any], calls: Iterable[Any], keep: Callable[[Any], bool]) -> Left:
        """The calls left of ``where`` (:attr:`_told_left`): those of ``calls`` it ``keep``s, found
        at its first call only (at each, 20,000 calls in turn on two objects took 12 s)."""
        left = self._told_left.get(where)
        if left is None:
            left = self._told_left[where] = Left(e for e in calls if keep(e))
            for e in left:
                self._told_in.setdefault(e["seq"], []).append(left)
        return left

    def _taken_out(self, event: Served) -> None:
        """``event``, taken out of its queue (served, or no longer to be), out of the calls left of
        its object (:attr:`_told_left`) too."""
        for left in self._told_in.pop(event["seq"], ()):
            left.remove(event)

    def _taken(self) -> set[int]:
        """Recorded calls no longer to be served: served here or by another process of this
        replay, or made inside the body of a tool call that was served."""
        return set(self.used) | self.others | self.covered

    def _differing_in_ids(self, norm: dict[str, Any], where: str | None, origin: str | None) -> Served | None:
        """The first unused recorded plain HTTP call of endpoint ``where`` whose request differs from
        ``norm`` only in values that are ids, timestamps or nonces (:func:`volatile`), the first
        sent to ``origin`` (host and port) when there is one."""
        taken = self._taken()
        found: list[Served] = []
        for e in self.recorded:
            if e["seq"] in taken or e["type"] != "model_call" or endpoint(e) != where:
                continue
            changes = _form_fields(_key_diff(normalized(e), norm), norm)
            if changes and all(c.op == "changed" and _volatile_change(c) for c in changes):
                found.append(e)
        return _first_for(found, origin) if found else None

    def _same_task(self, recorded: Any, now: str | None) -> bool:
        """Whether a call made now by the asyncio task named ``now`` is made by the task that made
        the recorded call (whose ``caller`` is ``recorded``). asyncio numbers its tasks from one
        counter per process, so a replay in a process that made tasks before (a test runner's)
        numbers them from elsewhere: ``Task-N`` names are compared by how far each is from the
        first the run served."""
        a = _TASK_NAME.fullmatch(recorded) if isinstance(recorded, str) else None
        b = _TASK_NAME.fullmatch(now) if now is not None else None
        if a is None or b is None:
            return bool(recorded == now)
        apart = int(b[1]) - int(a[1])
        if self._task_offset is None:
            self._task_offset = apart
        return apart == self._task_offset

    def _certain(self) -> list[list[Any]]:
        """:attr:`alike_served`, each call that raced another (:meth:`_raced`) no longer said to
        when which task got which answer can be told after all: every call this process served
        went to the asyncio task of the name that made it when recorded, or to none when none did
        (the names line up: :func:`forkpoint.runtime.caller`), and the recorded calls of its group
        were made by as many tasks as there are calls (a name made twice, as a program may name
        its tasks, tells nothing; threads have no such names)."""
        if self.callers_differ:
            return list(self.alike_served)
        return [
            [group, seq, pid, raced and not (same and group in self._named_groups), *rest]
            for (group, seq, pid, raced, *rest), same in zip(
                self.alike_served, self._same_caller, strict=True
            )
        ]

    def _raced(self, group: int, seq: int) -> bool:
        """Whether this call of ``group`` (identical calls answered differently), served recorded
        call ``seq``, may have raced one served before in this process, when recorded: it was made
        in another thread, or in another asyncio task of this thread (what ran at once while
        recording need not now, so the replay's order says nothing). This thread's code outside any
        task (a call before ``asyncio.run``) never ran beside its tasks, nor did a thread or task
        started after the other call had ended, both when recorded and now (:meth:`_started_after`)."""
        me = threading.current_thread()
        task = runtime.running_task()
        served = self._served_to.setdefault(group, _ServedTo())
        scopes = [(served.threads, me)]
        if task is not None:
            scopes.append((served.tasks.setdefault(me, (_Latest(), _Latest())), task))
        others = [(started.but(c), ended.but(c)) for (started, ended), c in scopes]
        now = self._events[seq]
        raced = any(started is not None for started, _ in others) and not self._started_after(
            runtime.caller_born(self), now, served, others
        )
        finished = now.get("finished")
        served.pids.add(_pid(now))
        for (started, ended), c in scopes:
            started.add(c, runtime.starts())
            ended.add(c, finished if isinstance(finished, int) else math.inf)
        return raced

    def _started_after(
        self, born: runtime.Born | None, now: Mapping[str, Any], served: _ServedTo, others: list[Any]
    ) -> bool:
        """Whether the thread or task asking now (started as ``born`` says) was started after the
        calls of its group served to others here were (the latest when ``started`` threads and tasks
        had been, of ``others``), and the one that made recorded call ``now``, served to it, after
        theirs had ended when recorded (the latest ``finished``): each time, one made its call
        before the other was there to (a LangGraph ``ToolNode`` runs each step's tools in a pool of
        its own; two agent runs in turn, each ``asyncio.run`` or a task of its own), so which got
        which answer is told. Recorded processes' counters tell nothing of each other's."""
        made = now.get("born")
        if born is None or not isinstance(made, int) or not served.pids <= {_pid(now)}:
            return False
        return all(started is None or (born.order >= started and ended <= made) for started, ended in others)

    def _serve(self, event: Served, *, by_id: bool = False) -> Served:
        """``event`` served (``by_id``: chosen by its ``call_id``, so it went to the call it answered
        when recorded, whoever asked first: no race to say of it)."""
        self.used.append(event["seq"])
        self._pids_served.add(_pid(event))
        self._taken_out(event)
        same_caller = self._same_task(event.get("caller"), runtime.caller())
        if not same_caller:
            self.callers_differ = True
        group = None if by_id else self._alike.get(event["seq"])
        if group is not None:
            served = [
                group,
                event["seq"],
                os.getpid(),
                self._raced(group, event["seq"]),
                time.time(),
                self.started,
            ]
            self.alike_served.append(served)
            self._same_caller.append(same_caller)
        if event["type"] == "tool_call":
            # The calls its body made are in its recorded result; the body does not run now.
            for inner in self._descendants(event):
                if inner["seq"] in self.covered or inner["seq"] in self.used:
                    continue
                self.covered.add(inner["seq"])
                queue = self._queues.get(self._keys[inner["seq"]])
                if queue and inner in queue:
                    queue.remove(inner)
                    self._taken_out(inner)
        o = self.overrides.get(event["seq"])
        if o is None:
            return event
        self.applied[event["seq"]] = True
        return cast(Served, override.apply(event, o))

    def _descendants(self, event: Mapping[str, Any]) -> list[Call]:
        """The recorded calls made inside ``event``'s span (a tool's body), at any depth."""
        out: list[Call] = []
        spans = [event.get("span_id")]
        while spans:
            span = spans.pop()
            for inner in self._children.get(span, []) if span else []:
                out.append(inner)
                spans.append(inner.get("span_id"))
        return out

    # -- tool results in the order they finished live

    def turn_of(self, event: ToolCallEvent) -> list[int]:
        """The recorded tool calls that finished, live, while ``event`` was running and before it
        (:func:`release_order`): its result is released only after theirs."""
        return self._after.get(event["seq"], [])

    def ready(self, event: ToolCallEvent) -> bool:
        """True when every call :meth:`turn_of` names has been released (or the run diverged, after
        which no order is kept)."""
        with self._turns:
            return self.divergence is not None or all(s in self._released for s in self.turn_of(event))

    def wait_turn(self, event: ToolCallEvent, timeout: float) -> None:
        """Block until :meth:`ready`, at most ``timeout`` seconds (then :meth:`late` is noted)."""
        with self._turns:
            if not self._turns.wait_for(lambda: self.ready(event), timeout):
                self.late(event)

    def late(self, event: ToolCallEvent) -> None:
        """Note that ``event``'s result is released before calls that finished before it live,
        because this run did not ask for them in time."""
        with self._turns:
            missing = [s for s in self.turn_of(event) if s not in self._released]
            self.out_of_order.append({"seq": event["seq"], "tool": event["tool"], "before": missing})

    def own_short(self, short: dict[str, Any]) -> None:
        """Note that a wait got fewer futures of the program's own than live (:mod:`~forkpoint.replay.pools`:
        a served call's future finished first, where live one of the program's own did)."""
        with self._turns:
            self.waits_own.append(short)

    def not_held(self, pools: str, how: str, at: str) -> None:
        """Note that an ``as_completed`` or ``wait`` (``how``) made ``at`` took a process pool's
        futures (``pools``: ``processes``), whose order and number are not held, or the futures
        asyncio made of a thread pool's (``threads``), whose order is not (:mod:`~forkpoint.replay.pools`)."""
        with self._turns:
            taken = self.process_pools if pools == "processes" else self.thread_pools
            if (waited := {"waits": how, "at": at}) not in taken:
                taken.append(waited)

    def pools_noted(self, how: str, at: str) -> bool:
        """Whether the recording noted that an ``as_completed`` or ``wait`` (``how``) made ``at`` took
        a thread pool's futures whose order it does not keep (:mod:`~forkpoint.replay.pools`: their
        work went on after their calls), which a replay cannot see: its calls are served at once."""
        with self._turns:
            if self._pools_noted is None:
                self._pools_noted = {
                    (w.get("waits"), w.get("at"))
                    for n in self._session.by_type("note")
                    for w in (n.get("data") or {}).get("thread_pools") or ()
                    if isinstance(w, dict)
                }
            return (how, at) in self._pools_noted

    def finished_at_once(self, waits: str, at: str, wait: int, finished: int, usual: int) -> tuple[int, int]:
        """How many finished futures this process's ``wait``-th wait of ``waits``' kind made
        ``at`` that may return before all have finished hands back (:mod:`~forkpoint.replay.pools`), and how many
        of them the program's own: as many as it got live, ``usual`` unless the recording noted otherwise in the process this one replays
        (the one the calls served to it were recorded in; before any, the recording's only one):
        for that wait, or for an earlier one made there, onward. When fewer than that had finished
        now (``finished``), the program may go another way than live, and when which recorded
        process this is cannot be told and theirs differ, it gets ``usual``: the report says so
        (``waits_short``, ``waits_untold``)."""
        with self._turns:
            if self._at_once is None:
                self._at_once = _noted_waits(self._session.by_type("note"))
            # (a copy, taken at once: another thread's call may be served meanwhile)
            mine = set(self._pids_served) or {_pid(e) for e in self.recorded} | {
                pid for pid, *_ in self._at_once
            }
            counts = {_got(self._at_once.get((pid, waits, at)), wait, usual) for pid in mine} or {(usual, 0)}
            live, own = counts.pop() if len(counts) == 1 else (usual, 0)
            if counts:  # (the processes it may be got other numbers)
                self.waits_untold.append({"waits": waits, "at": at, "wait": wait})
            elif finished < live:
                self.waits_short.append(
                    {"waits": waits, "at": at, "wait": wait, "live": live, "replay": finished}
                )
            return live, own

    def served_result(self, event: ToolCallEvent, part: Any = runtime.WHOLE) -> Any:
        """:meth:`forkpoint.runtime.Serving.served_result`. With ``hand_over``, a plain result
        served as recorded (not overridden) to a run that writes no child session is the loaded
        value itself: each recorded call is served once, and nothing here reads its result after;
        its JSON is kept so that :attr:`session` can give it back as recorded."""
        whole = part is runtime.WHOLE
        stored = event.get("result") if whole else part
        if whole and self.hand_over and self.child is None and event["seq"] not in self.overrides:
            text = values.plain_json(stored)
            if text is not None:
                with self._turns:  # (unless the session was read meanwhile)
                    if self.hand_over:
                        self._handed[event["seq"]] = (event, text)
                        return stored
                return orjson.loads(text)
        if event["seq"] not in self.overrides:
            return values.decode(stored)
        try:
            return values.decode(stored, validate=True)
        except UnrebuildableValue as exc:  # (the program gets a divergence, not the value)
            self.applied[event["seq"]] = False
            self.refused[event["seq"]] = str(exc)
            raise

    @property
    def session(self) -> Session:
        """The session being replayed, as recorded: the results handed over so far are put back
        (rebuilt from their JSON), and later ones are served as copies."""
        with self._turns:
            self.hand_over = False
            handed, self._handed = self._handed, {}
        for event, text in handed.values():
            event["result"] = orjson.loads(text)
        return self._session

    def release(self, event: ToolCallEvent) -> None:
        """``event``'s result has been handed to the program."""
        with self._turns:
            self._released[event["seq"]] = threading.get_ident()
            pools.released()  # (in the order released: a pool's futures are taken in that order)
            self._turns.notify_all()

    def released_elsewhere(self, event: ToolCallEvent) -> bool:
        """:meth:`forkpoint.runtime.Serving.released_elsewhere`."""
        here = threading.get_ident()
        with self._turns:
            return any(self._released.get(s, here) != here for s in self.turn_of(event))

    def _wake(self) -> None:
        with self._turns:
            self._turns.notify_all()

    def _log_served(self, event: Served, actual: dict[str, Any]) -> None:
        keep = {
            "model_call": ("duration_ms", "response", "error", "result"),
            # (an MCP request's server, method and what the server sent meanwhile, and what a
            # tool emitted: served again when the child is replayed)
            "tool_call": ("duration_ms", "result", "error", "mcp", "emitted"),
            "value": ("value",),
        }[event["type"]]
        recorded = cast(Mapping[str, Any], event)
        out = {"type": event["type"], **actual, **{k: recorded[k] for k in keep if k in recorded}}
        seq = event["seq"]
        out.update(
            source="override" if seq in self.overrides else "replay",
            recorded_seq=seq,
            span_id=new_span_id(),
            parent_span_id=runtime.current_span.get() or self.root_span,
            pid=os.getpid(),
        )
        if event["type"] != "value":
            # Served as it starts, numbered with the calls made live (which are logged as they end),
            # so that show and diff put the child's calls in the order they started.
            out["sent"] = runtime.next_sent(self)
        if seq in self.overrides:
            out["override"] = self.overrides[seq].spec
        out["key"] = event_key(out, self.ignore)
        if self._child_keys is not None:
            out["keys"] = self._child_keys
        assert self.child is not None
        self.child.append(out)

    def _log_live(self, event: ModelCallEvent | ToolCallEvent | ValueEvent) -> None:
        if self.child is None:
            return
        event["key"] = event_key(event, self.ignore)
        if self._child_keys is not None:
            event["keys"] = self._child_keys
        event["pid"] = os.getpid()
        event["source"] = "live"
        self.child.append(event)

    def _cut_short(self) -> str:
        """Why the recording may end before the run does: the recorded run was killed, or its
        recording stopped early (said after a divergence past its last call), or ``""``."""
        end = self._session.end()
        if end is None:
            return "; the recording has no end: the recorded run was killed, or is still being recorded"
        if end.get("incomplete"):
            return f"; the recording stopped early ({end['incomplete']}): the rest of the run is not in it"
        code = end.get("exit_code")
        if isinstance(code, int) and code > 128 and code - 128 in SIGNALS:
            return f"; the recorded run ended there, killed by {SIGNALS[code - 128]} (exit {code})"
        return ""

    def _cached_when_recorded(self) -> str:
        """Why a model request may be missing from the recording: a framework answered requests from
        its own cache while recording (the session's note), so they were never made, or ``""``."""
        counts: Counter[str] = Counter()
        for n in self._session.by_type("note"):
            found = (n.get("data") or {}).get("answered_from_cache")
            if isinstance(found, dict):
                counts.update({str(k): int(v) for k, v in found.items()})
        cached = runtime.cached_answers_text(counts)
        if not cached:
            return ""
        return (
            f"; when recorded, {cached}, never made, so not in the session: this may be one of them "
            f"(record with the cache off, {runtime.cache_off_text(counts)})"
        )

    def _stored_state_differs(self) -> str:
        """Why a model request may differ from every recorded one: the state a framework keeps on
        disk (its stored conversation) was not, when this replay opened it, what it was when the
        recorded run did (the session's notes: :func:`~forkpoint.runtime.opened_store`), or ``""``.
        The n-th opening of a store is compared with the recorded n-th: a program that opens it
        again finds what its own run wrote there."""
        said, told = "", set()
        recorded: Counter[str] = Counter()
        for n in self._session.by_type("note"):
            found = (n.get("data") or {}).get("stored_state")
            if not isinstance(found, dict) or not isinstance(path := found.get("path"), str):
                continue
            recorded[path] += 1
            opened = self.stored_states.get(path, [])
            if len(opened) < recorded[path] or path in told:  # (not opened so often yet; said)
                continue
            then, now = found.get("digest"), opened[recorded[path] - 1]
            if then == now:
                continue
            told.add(path)
            how = (
                "different now from when recorded"
                if then and now
                else ("there when recorded, absent now" if then else "absent when recorded, there now")
            )
            said += (
                f"; {found.get('store')}'s stored state at {path} was {how}: the agent may have started "
                "from another conversation than the recorded run's (replay where it is as it was when "
                "recorded: move it away, or restore it)"
            )
        return said

    def _divergence_report(
        self,
        kind: CallKind,
        key: str,
        norm: dict[str, Any],
        what: dict[str, str],
        function: str | None = None,
        call_id: str | None = None,
        instance: str | None = None,
    ) -> DivergenceReport:
        used = set(self.used) | self.others  # served here, or by another process of this replay
        same_kind = [e for e in self.recorded if e["type"] == kind]
        unused = [e for e in same_kind if e["seq"] not in used]
        seen = [e for e in same_kind if self._keys[e["seq"]] == key]
        others: list[Served] = []
        by = ""
        told = None
        if seen and function in self._functions.get(what.get("name", ""), set()):
            by = f" by {function}"
            others = [e for e in seen if e.get("function") != function]
            seen = [e for e in seen if e.get("function") == function]
            told = self._told(function, instance)
            if told is not None:
                by += " on its object"
                others = [e for e in seen if _object(e) not in told[0]] or others
                seen = [e for e in seen if _object(e) in told[0]]
        if call_id in self._key_ids.get(key, ()):
            by += f" for {call_id}"
            seen = [e for e in seen if self._call_ids.get(e["seq"]) == call_id]
            others = [e for e in others if self._call_ids.get(e["seq"]) == call_id] or others
        if seen and told is not None and what.get("name") in self.objects_untold:
            reason = (
                f"the request matches recorded event seq {seen[0]['seq']}, but all {len(seen)} recorded "
                f"answer(s) to it{by} were already served, maybe to another object of {function} that could "
                "not be told apart from the one it was recorded on (report objects_untold)"
            )
        elif seen:
            # (past the end of a recording that stopped early, the run need not have asked more)
            cut = self._cut_short() if not unused else ""
            reason = (
                f"the request matches recorded event seq {seen[0]['seq']}, but all {len(seen)} recorded "
                f"answer(s) to it{by} were already served{cut or '; the run asked once more than it did when recorded'}"
            )
        elif others and others[0].get("function") == function:
            reason = (
                f"the request matches recorded event seq {others[0]['seq']}, a call of {function} on another "
                "object: the object it was called on now (told by its attributes at its first call) made no "
                "such call when recorded"
            )
        elif others:
            reason = (
                f"the request matches recorded event seq {others[0]['seq']}, a call of another function of "
                f"that tool name ({others[0].get('function')}): {function} made no such call when recorded"
            )
        elif not unused:
            reason = (
                f"the recording has no {kind.replace('_', ' ')} left "
                f"({len(same_kind)} {'was' if len(same_kind) == 1 else 'were'} recorded){self._cut_short()}"
            )
            imported = self._session.header.get("imported_from")
            if kind == "tool_call" and not same_kind and isinstance(imported, dict):
                reason += (
                    f"; the session was imported from a {imported.get('format')} file, which holds no tool "
                    "call: run the tools live (forkpoint replay --tools live; live_tools=[...] in forkpoint.replay or pytest)"
                )
        else:
            reason = "no recorded request has the same match key"
            imported = self._session.header.get("imported_from")
            if kind == "model_call" and isinstance(imported, dict) and imported.get("format") != "vcr":
                # (the diff then shows the model's provider prefix and the missing tools: not a bug)
                reason += (
                    f"; the session was imported from a {imported.get('format')} trajectory, whose requests "
                    "forkpoint rebuilt from what the file holds (the model as its config names it, no tool "
                    "definitions: docs/import.md), not from what the agent sent"
                )
        if kind == "model_call" and not seen:
            reason += self._cached_when_recorded() + self._stored_state_differs()
        where = what.get("endpoint") or what.get("name")
        candidates = [e for e in unused if endpoint(e) == where]
        expected: Served | None = next(iter(candidates or unused), None)
        nearest, best = None, -1.0
        for e in (candidates or unused)[:50]:
            score = similarity(normalized(e), norm)
            if score > best:
                best, nearest = score, e
        # Several unused calls of this tool or endpoint (a parallel batch, asked in any order): the
        # diff is against the closest, not the next in the log (get_weather("PARIS") against Rome).
        base = nearest if len(candidates) > 1 else expected or nearest
        tool = what.get("name") if kind == "tool_call" else None
        report: DivergenceReport = {
            "kind": kind,
            "position": self.positions[kind],
            "reason": reason,
            "key": key,
            "actual": norm,
            "expected": {"seq": expected["seq"], "label": label(expected)} if expected else None,
            "nearest": {"seq": nearest["seq"], "label": label(nearest), "similarity": round(best, 4)}
            if nearest
            else None,
            "diff": self._explained(normalized(base), norm, tool) if base else [],
        }
        if base is not None:
            report["diff_against"] = base["seq"]
        # After an override the run saw what the recording did not: a difference may be its doing,
        # the what-if leaving the recording, which no ignore rule or --deterministic should hide.
        overridden = [self.overrides[seq].spec for seq, done in self.applied.items() if done]
        if overridden:
            report["after_overrides"] = overridden
        elif (
            base is not None
            and kind != "value"
            and (rules := suggest_ignore(normalized(base), norm, self.ignore, tool))
        ):
            report["suggest"] = [r.to_json() for r in rules]
            # (rules the user wrote for this that did nothing: a typo there, not a missing rule)
            inert = inert_rules(normalized(base), norm, self.ignore, tool)
            if inert:
                report["inert"] = [{**r.to_json(), "source": r.source or ""} for r in inert]
            # The time or a uuid the program's own code read may be it: not in a header alone (an
            # SDK's anthropic-version, openai-beta: it sent another after an upgrade).
            if any(not r.path.startswith("$.headers") for r in rules):
                if self.live_calls["tool_call"]:  # (a tool run live may have returned it, not the program)
                    report["after_live_tools"] = self.live_calls["tool_call"]
                else:
                    header = self._session.header
                    started = header.get("created")
                    if before := stamped_before(report["diff"], started, header.get("timezone")):
                        report["read_before_recording"] = {"stamp": before, "started": str(started)}
                    chosen = header.get("deterministic")
                    select = chosen if isinstance(chosen, list) else True
                    if not self.deterministic:
                        report["hint_deterministic"] = True
                    else:  # (recorded deterministic all the same: code it did not count as the program's)
                        report["hint_deterministic_modules"] = select
                    from ..callsite import writers_here
                    from ..capture.clock import to_name

                    # Which code that is cannot be known, but this call was made through it.
                    left_out, selection = to_name(select, writers_here())
                    if left_out:
                        report["left_out_modules"] = left_out
                        report["deterministic_selection"] = selection
        if "endpoint" in what:
            report["endpoint"] = what["endpoint"]
        if "name" in what:
            report["name"] = what["name"]
        if what.get("call") in ("http", "mcp"):
            report["call"] = what["call"]
        self._count_models(report)
        if kind == "model_call" and (changed := self._changed_versions()):
            report["versions"] = changed
        if in_place := self._changed_in_place(expected["seq"] if expected else None):
            report["changed_in_place"] = in_place
        if raced := ambiguous(self._certain()):
            report["raced"] = raced
        from ..callsite import agent_call_site_here

        # Taken now: a program that catches the Divergence (run_command does) leaves no traceback.
        if site := agent_call_site_here():
            report["site"] = site
        return report

    def _mcp_received(self, mark: str) -> list[int]:
        """The recorded MCP requests with a message of their server marked ``mark`` (``shared``,
        ``beside``: :mod:`forkpoint.integrations.mcp`)."""
        return [
            e["seq"]
            for e in self._session.by_type("tool_call")
            if "mcp" in e and any(m.get(mark) for m in e["mcp"].get("received") or ())
        ]

    def _changed_in_place(self, before: int | None) -> list[dict[str, Any]]:
        """What the recording's notes say tools changed in place (the Agents SDK's run context, an
        argument, a method's object) before the recorded call ``before`` (any, when None): a replay
        does not run a tool's body, so the program did not see that change now."""
        return [
            dict(found)
            for n in self._session.by_type("note")
            if (before is None or n["seq"] < before)
            and isinstance(found := (n.get("data") or {}).get("changed_in_place"), dict)
        ]

    def _in_place_all(self) -> list[dict[str, Any]]:
        """:meth:`_changed_in_place` of the whole recording, read once (a report is written after
        every call in a forked child)."""
        if self._in_place is None:
            self._in_place = self._changed_in_place(None)
        return self._in_place

    def _changed_versions(self) -> list[list[str]]:
        """``[name, recorded, now]`` for each package of the header's ``versions`` installed at
        another version now (``now`` ``""``: no longer installed): an SDK or framework upgrade that
        changed what it sends explains a model call's divergence the diff alone does not."""
        if self._versions is None:
            recorded = self._session.header.get("versions") or {}
            names = [n for n in recorded if n not in ("python", "forkpoint")]
            now = {"python": sys.version.split()[0], "forkpoint": __version__, **plugins.versions(names)}
            self._versions = [
                [name, str(was), now.get(name, "")] for name, was in recorded.items() if now.get(name) != was
            ]
        return self._versions

    def _explained(
        self, expected: dict[str, Any], actual: dict[str, Any], tool: str | None
    ) -> list[dict[str, Any]]:
        """The differences between a recorded and a live call, each marked ``ignored`` when an
        ignore rule took it out of the match key (the key then differs for another reason)."""
        changes = _key_diff(expected, actual)
        if not self.ignore or "value" in actual:
            return [c.to_json() for c in changes]
        seen = {c.path for c in json_diff(self.ignore.mask(expected, tool), self.ignore.mask(actual, tool))}
        return [Change(c.op, c.path, c.expected, c.actual, c.path not in seen).to_json() for c in changes]

    def finish(self, exit_code: int | None, uncaught: Sequence[ErrorRecord] = ()) -> None:
        """How the replayed run ended: its exit code (None when this process cannot know it: the
        command line adds it) and the uncaught exceptions it raised. :meth:`report` compares them
        with the recording's end."""
        self.exit_code = exit_code
        self.uncaught.extend(uncaught)

    def report(self) -> dict[str, Any]:
        """Outcome as JSON data: matched/recorded counts, unused seqs, divergence, drift (fifo),
        overrides and whether each was reached, live calls, the child session, blocked connects,
        the aside calls served from the recording or answered neutrally, the plain HTTP calls served a
        recording that differed only in ids (``id_drift``), calls served with the tool call whose body
        made them (``covered``), tool results released out of their recorded order, and how the run
        ended against how the recording did (:func:`~forkpoint.replay.report.conclude`)."""
        served = set(self.used)
        taken = served | self.covered
        unused = [e for e in self.recorded if e["seq"] not in taken]
        # Recorded calls of a kind served from the session that the run never asked for: it ended
        # early, which is as much a failure to reproduce as a divergence. (Live kinds, and anything
        # after a divergence the policy went live on, are expected to leave recorded calls unused.)
        # (a call asked for whose result was not stored was not served, but it was not skipped either)
        unserved = [
            e["seq"]
            for e in unused
            if self._expected(e)
            and not self.gone_live
            and e["seq"] not in self.unservable
            and e["seq"] not in self.unservable_inner
        ]
        end = self._session.end()
        from ..capture import programs  # (the hook's notes: loaded with the capture, not before)

        recorded_programs = [
            program
            for n in self._session.by_type("note")
            for program in (n.get("data") or {}).get("unrecorded_programs") or ()
        ]
        return conclude(
            {
                "session": self._session.id,
                "session_path": str(self._session.path),
                "reproduced": False,
                "processes": 1,
                "process_started": self.started,
                "served": sorted(self.used),
                "unservable": sorted(self.unservable),
                "unservable_inner": sorted(self.unservable_inner),
                "covered": sorted(self.covered),
                "unserved": unserved,
                "matched": len(taken),
                "recorded": len(self.recorded),
                "unused": [e["seq"] for e in unused],
                "ended_early": bool(unserved) and self.divergence is None,
                "divergence": self.divergence,
                "policy": self.policy,
                "sources": {"models": self.sources["model_call"], "tools": self.sources["tool_call"]},
                "drift": self.drift,
                "unanswered": list(self.unanswered),
                "overrides": [
                    {
                        **o.to_json(),
                        "seq": seq,
                        "applied": self.applied[seq],
                        **({"losses": self.losses[seq]} if self.losses[seq] else {}),
                        **({"refused": self.refused[seq]} if seq in self.refused else {}),
                    }
                    for seq, o in self.overrides.items()
                ],
                "live_calls": {
                    "models": self.live_calls["model_call"],
                    "tools": self.live_calls["tool_call"],
                    **{k: self.live_calls[k] for k in ("http", "mcp", "telemetry") if self.live_calls[k]},
                    **({"values": self.live_calls["value"]} if self.deterministic else {}),
                },
                "child_session": str(self.child.path) if self.child else None,
                "live_from": self.live_from,
                **blocked_fields(Counter(self.network_blocked)),
                "answered_from_cache": {k: n for k, n in self.cache_answers.items() if n},
                "aside": {
                    "recorded": len(self.aside),
                    "served": len(self.aside_served),
                    "answered": self.aside_answered,
                },
                "id_drift": self.id_drift,
                # (a custom event a run inside a served tool dispatched: dispatched again from the tool's)
                "emitted_inner": [
                    {"seq": e["seq"], "tool": e["tool"], "events": n}
                    for e in self._session.by_type("tool_call")
                    if e["seq"] in self.used
                    and (
                        n := sum(1 for m in e.get("emitted") or () if isinstance(m, dict) and m.get("inner"))
                    )
                ],
                "mcp_shared": self._mcp_received("shared"),
                "mcp_beside": self._mcp_received("beside"),
                "unrecorded_mcp": [
                    n["data"]["unrecorded_mcp"]
                    for n in self._session.by_type("note")
                    if "unrecorded_mcp" in (n.get("data") or {})
                ],
                "unrecorded_programs": recorded_programs,
                # (a Python program this run started that the recording names not: today's code's,
                # run as without forkpoint, its calls neither served nor recorded)
                "started_programs": programs.unrecorded_besides(recorded_programs),
                # (a gRPC channel connects past the network guard: its calls go out again, live;
                # one through Python's sockets is refused, and said, or is the program's own server
                # in the replay's namespace)
                "unrecorded_connections": [
                    where
                    for n in self._session.by_type("note")
                    for where in (n.get("data") or {}).get("past_guard") or ()
                ],
                # (a tool served from the session: the change its body made is not made again)
                "changed_in_place": [
                    c
                    for c in self._in_place_all()
                    if self.sources["tool_call"] == "replay" and c.get("tool") not in self.live_tools
                ],
                "alike_served": self._certain(),
                "placeholders_served": sorted(set(self.placeholders_served)),
                "pieces_lost": self.pieces_lost,
                # (a request body withheld when recorded, which this run sent again: same bytes)
                "digest_matched": [
                    e["seq"]
                    for e in self._session.by_type("model_call")
                    if e["seq"] in served and "withheld_digest" in e["request"]
                ],
                "objects_untold": sorted(self.objects_untold),
                "ignore_warnings": self.ignore_warnings,
                "strict": self.strict,
                "out_of_order": list(self.out_of_order),
                "waits_short": list(self.waits_short),
                "waits_untold": list(self.waits_untold),
                "waits_own": list(self.waits_own),
                "process_pools": list(self.process_pools),
                "thread_pools": list(self.thread_pools),
                # (answered at once on replay: the order their answers came in live is not held)
                "model_order": (
                    answered_before_earlier(
                        [e for e in self.recorded if e["type"] == "model_call" and e["seq"] in taken]
                    )
                    if self.sources["model_call"] == "replay"
                    else []
                ),
                "exit_code": self.exit_code,
                "uncaught": list(self.uncaught),
                "recorded_end": {
                    "exit_code": end.get("exit_code"),
                    "uncaught": end.get("uncaught"),
                    "unrecorded_tools": end.get("unrecorded_tools") or {},
                    "fewer_calls": end.get("fewer_calls") or {},
                }
                if end is not None and self.live_from is None
                else None,
                # (how the recorded run ended is not known: a replay cannot be said to end as it did)
                "recording_unended": end is None and self.live_from is None,
            }
        )

    def _expected(self, event: Served) -> bool:
        """True when a recorded call is expected to be served: its kind comes from the session and
        it is not a call of a tool that runs live."""
        if event["type"] == "tool_call" and event["tool"] in self.live_tools:
            return False
        return self.sources[event["type"]] == "replay"


def answered_before_earlier(calls: Sequence[Call]) -> list[int]:
    """The seqs of the model calls among ``calls`` whose answer came live before that of a call
    of the same process sent earlier, still running then. Events are written as their calls end,
    so ``seq`` is the order the answers came in, and ``sent`` the order the calls were sent in."""
    by_pid: dict[Any, list[Call]] = {}
    for e in calls:
        if isinstance(e.get("sent"), int):
            by_pid.setdefault(_pid(e), []).append(e)
    out = []
    for group in by_pid.values():
        group.sort(key=lambda e: e["sent"])
        latest = 0  # (the last answer to come of the calls sent before)
        for e in group:
            if e["seq"] < latest:
                out.append(e["seq"])
            latest = max(latest, e["seq"])
    return sorted(out)


def release_order(
    tools: Sequence[ToolCallEvent], inside: Callable[[ToolCallEvent], Sequence[Call]]
) -> dict[int, list[int]]:
    """For each recorded tool call, the tool calls that finished live while it was running and
    before it did (same process; ``inside(call)``, the calls made in its own body, left out: they
    are not asked for when it is served). Its result is released only after theirs, so results
    gathered in parallel come back in the order they finished live.

    Calls that finished before it started are not waited for: a program that asks for the same
    calls in another order (a loop over a set) would wait at each. Read from ``sent`` and
    ``finished``, ordinals of one counter per process (a call's start and its end); sessions
    recorded without ``finished`` keep no order."""
    by_pid: dict[Any, list[ToolCallEvent]] = {}
    for e in tools:
        if isinstance(e.get("sent"), int) and isinstance(e.get("finished"), int):
            by_pid.setdefault(_pid(e), []).append(e)
    out: dict[int, list[int]] = {}
    for group in by_pid.values():
        group.sort(key=lambda e: e["finished"])
        ends = [e["finished"] for e in group]
        for e in group:
            during = group[bisect.bisect_right(ends, e["sent"]) : bisect.bisect_left(ends, e["finished"])]
            if during:
                own = {x["seq"] for x in inside(e)}
                after = [x["seq"] for x in during if x["seq"] not in own]
                if after:
                    out[e["seq"]] = after
    return out
