"""Typed values: a tool's result stored as JSON that says what it was, and rebuilt as that on replay.

:func:`encode` turns a value into JSON data (plus ``bytes``, which the log stores itself): JSON
scalars, lists and str-keyed dicts as they are; everything else as a *typed node*
``{"$type": "module:Qualname", "kind": K, "value": V, ...}`` naming its class and how it is rebuilt.
:func:`decode` is the inverse. The kinds (``docs/format.md`` is the reference):

==================  ==================================================================================
kind                value (and extra keys)
==================  ==================================================================================
``float``           ``"nan"``, ``"inf"`` or ``"-inf"`` (JSON has no such numbers)
``dict``            ``[[key, value], …]``: a dict with keys that are not all strings, or one that has
                    a ``"$type"`` key of its own (so no user data is ever read as a typed node)
``tuple``, ``set``,  the items (a set's sorted by their JSON, so equal sets are stored the same; and
``frozenset``,      ``order``, the order it iterated in when another: a replay's set iterates so)
``bytearray``
``mapping``         ``[[key, value], …]`` of an ``OrderedDict``, ``Counter`` or ``defaultdict``
                    (``factory``: the default factory's class)
``namedtuple``      the items
``enum`` /          the member's name / its value (a combination of flags has no name)
``enum_value``
``datetime``,       ISO 8601 text; an aware value's zone as ``zone`` (a ``ZoneInfo`` key) or ``tzname``
``date``, ``time``  (a named fixed offset), and ``fold`` when it is 1
``timedelta``       ``[days, seconds, microseconds]``
``decimal``,        the text form
``uuid``, ``path``
``dataclass``       the fields by name (every field, ``init=False`` ones too); other instance
                    attributes as ``attrs``
``pydantic``        the fields by name, ``fields_set``, and ``extra`` / ``private`` when present
``scalar``          a subclass of str, int or float (``numpy.float64``): the plain value
``encoded``         what the encoder registered for the class (:func:`register_encoder`) made of it,
                    given back to its decoder on replay
==================  ==================================================================================

Rebuilding never imports a module and never runs code a session names: a class is found only among
the modules the running program has already imported (``sys.modules``), and must be of the family
its kind says (a ``dataclass`` node naming something that is not a dataclass is refused).
Dataclasses are rebuilt without calling their ``__init__`` or ``__post_init__`` (the recorded
fields are set as they were; one the class has gained since, with a default, is given it; without
one, or a recorded field the class has lost, is refused), pydantic models with ``model_construct`` (no validation), named
tuples with ``_make``, enums by name or value, the standard types from their text form, and
``scalar`` subclasses by calling the class with the plain value. Anything else is refused at record
time (:class:`~forkpoint.errors.ToolResultError` naming the type, where it is, and the encoder hook).
"""

from __future__ import annotations

import base64
import builtins
import collections
import contextvars
import dataclasses
import datetime as dt
import decimal
import enum
import gc
import math
import pathlib
import sys
import uuid
import zoneinfo
from collections.abc import Callable
from itertools import compress, repeat
from operator import is_
from typing import Any

import orjson

from .errors import ToolResultError, UnrebuildableValue
from .log.codec import WIDEST_INT_BITS

#: The key of a typed node.
MARK = "$type"

#: ``cls`` → (encode, decode or None), by :func:`register_encoder`.
_ENCODERS: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any] | None]] = {}


def register_encoder(
    cls: type, encode: Callable[[Any], Any], decode: Callable[[Any], Any] | None = None
) -> None:
    """Record values of ``cls`` (and its subclasses) as ``encode(value)``, which must return data
    :func:`encode` can store. With ``decode``, a replay gives back ``decode(that data)``; without,
    the replay gives back the data itself. Register the same pair in the replayed program too."""
    _ENCODERS[cls] = (encode, decode)


def registered(t: type) -> tuple[Callable[[Any], Any], Callable[[Any], Any] | None] | None:
    """The (encode, decode) pair registered for ``t`` or its nearest base class, or None."""
    return next((_ENCODERS[k] for k in t.__mro__ if k in _ENCODERS), None)


def class_ref(cls: type) -> str:
    """``module:Qualname`` of ``cls``, the name a typed node gives its class."""
    return f"{cls.__module__}:{cls.__qualname__}"


def type_label(value: Any) -> str:
    """``module.Qualname`` of ``value``'s type, as messages name it."""
    return f"{type(value).__module__}.{type(value).__qualname__}"


def find_class(ref: str) -> type:
    """The class ``module:Qualname`` names, looked up in the modules already imported (never
    importing one). Raises :class:`~forkpoint.errors.UnrebuildableValue` saying why it is not there."""
    module, _, qualname = ref.partition(":")
    owner: Any = builtins if module == "builtins" else sys.modules.get(module)
    if owner is None:
        raise UnrebuildableValue(
            f"the recorded value is a {module}.{qualname}, but this run has not imported {module} "
            "(forkpoint never imports a module a session names): import it in the program before the call"
        )
    for part in qualname.split("."):
        owner = getattr(owner, part, None)
    if not isinstance(owner, type):
        what = "does not define" if owner is None else "defines, but not as a class"
        raise UnrebuildableValue(f"the recorded value is a {module}.{qualname}, which {module} {what}")
    return owner


def _mark(cls: type | str, kind: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {MARK: cls if isinstance(cls, str) else class_ref(cls), "kind": kind, "value": value, **extra}


# --------------------------------------------------------------------------- encode


def encode(value: Any, *, shared: bool = False) -> Any:
    """``value`` as stored JSON data (see the module docstring), in containers of its own. Raises
    :class:`~forkpoint.errors.ToolResultError` naming the first part that has no stored form and
    where it is (``where``: a Python-like path from ``result``).

    ``shared``: the caller writes the stored form before the program runs on, so it may share the
    program's own containers: a list or dict that is plain JSON data (:func:`_plain`) comes back as
    it is, checked in C, rather than walked and copied (a 20 MB result: ~50 against ~90 ms). Code
    that changes the value until it is written (another thread; a finalizer a collection runs in
    the write) changes what is stored, as it changed a walk's copy while the walk made it: the
    window is the scrub and the write rather than the walk."""
    if shared and type(value) in (dict, list) and _plain(value):
        return value
    return _Encoder().value(value)


#: What orjson must hand to ``default`` rather than write as JSON of its own: subclasses of str,
#: int, dict and list, dataclasses and datetimes (each has a typed node).
_HANDED_OVER = (
    orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)

#: The types of plain JSON data, stored as they are.
_PLAIN_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})


def _refuse(value: Any) -> Any:
    raise TypeError


def _plain(value: dict[Any, Any] | list[Any]) -> bool:
    """Whether :func:`encode` would store ``value`` as an equal copy of it: exact dicts with string
    keys, none of them ``"$type"``, exact lists, strings, integers within 64 bits, finite floats,
    booleans and None, no deeper than :data:`DEEPEST`. Checked without a walk in Python: orjson
    writes it (refusing other keys, wider integers, lone surrogates, cycles, and what
    :data:`_HANDED_OVER` hands over); every object it holds is listed, level by level, by the
    garbage collector's referents (in C), and must be of a plain type (orjson also writes tuples,
    enum members and UUIDs); and where orjson wrote a ``null`` (None, or a NaN or an infinity), the
    floats' sum is finite. Any doubt is a False: the walk decides."""
    try:
        data = orjson.dumps(value, option=_HANDED_OVER, default=_refuse)
    except (TypeError, orjson.JSONEncodeError):
        return False
    if b"$" in data and b'"$type"' in data:  # (a key, or a string equal to it: the walk tells)
        return False
    levels: list[list[Any]] = []
    level: list[Any] = [value]
    seen: set[type] = set()
    while level:
        kinds = set(map(type, level))
        # (before going on: an object of another type may lead to the whole heap; and the walk
        # refuses a container DEEPEST + 1 deep, an empty one too, which has no level below it)
        if not _PLAIN_TYPES.issuperset(kinds) or (
            len(levels) == DEEPEST and not kinds.isdisjoint((dict, list))
        ):
            return False
        seen |= kinds
        levels.append(level)
        # (a dict's referents are its values, and its keys when they are not all exact strings)
        level = gc.get_referents(*level)
    # orjson writes a NaN or an infinity as null, as it writes None: where it wrote one, the floats
    # of each level are summed in C (a sum that is not finite: one of them is not, or it overflowed).
    if float in seen and b"null" in data:
        return all(
            math.isfinite(sum(compress(held, map(is_, map(type, held), repeat(float))), 0.0))
            for held in levels
        )
    return True


class Encoded:
    """A value :func:`encode` has already turned into ``node``: encoding it again, alone or as a
    part of a larger value, gives ``node`` (a caller that tried the encoding keeps its result
    rather than walk the value twice)."""

    __slots__ = ("node",)

    def __init__(self, node: Any) -> None:
        self.node = node


#: Containers nested deeper than this are not stored (a tool's result or arguments): each typed
#: level is two levels of JSON, and orjson, which writes the log, stops at 255.
DEEPEST = 120

#: What a dict's keys must all be for it to be stored as it is (a JSON object).
_STR_ONLY = frozenset({str})


def _rebuilt_alike(v: set[Any] | frozenset[Any], t: type) -> bool:
    """Whether a set that iterated in its items' sorted order is rebuilt iterating so from its
    sorted items in any process: its items' hashes are the same in every process (numbers but
    NaN, ``None``: not a string's, which ``PYTHONHASHSEED`` changes, nor an object's by its id)
    and the set of them inserted in that order iterates so here (it need not: ``0, 2, 3, 10`` added in that order iterate ``0, 10, 2, 3``, their sorted
    order, but inserted so they iterate ``0, 3, 10, 2``)."""
    live = list(v)
    if not all(type(x) in (int, float, bool, type(None)) and x == x for x in live):
        return False
    return list(t(live)) == live


class _Encoder:
    def __init__(self) -> None:
        self.open: set[int] = set()  # containers being encoded: a value that contains itself

    def value(self, v: Any) -> Any:
        t = type(v)
        if t is int and v.bit_length() > WIDEST_INT_BITS:  # (the log refuses it: recording would stop)
            raise ToolResultError("an integer of more than 4,000 digits", type_name="(int too long)")
        if v is None or t is str or t is bool or t is int or t is bytes:
            return v
        if t is float:
            return v if math.isfinite(v) else _mark(float, "float", repr(v))
        if t is list:
            return self.items(v, v)
        if t is dict:
            # (keys before values: a registered encoder inside must run once, on the one walk)
            if MARK not in v and _STR_ONLY.issuperset(map(type, v)):
                return self.fields(v, v)
            return _mark(dict, "dict", self.pairs(v))
        if t is Encoded:
            return v.node
        pair = registered(t)
        if pair is not None:
            return self.registered(v, pair)
        return self.typed(v, t)

    def typed(self, v: Any, t: type) -> Any:
        if t in (tuple, bytearray):
            return _mark(t, t.__name__, self.items(v, v) if t is tuple else bytes(v))
        if t in (set, frozenset):
            return self.unordered(v, t)
        if t in (collections.OrderedDict, collections.Counter, collections.defaultdict):
            extra = {}
            if t is collections.defaultdict:
                factory = v.default_factory
                if factory is not None and not isinstance(factory, type):
                    raise self.refused(v, "a defaultdict whose default_factory is not a class")
                extra["factory"] = None if factory is None else self.ref(factory, v)
            return _mark(t, "mapping", self.pairs(v), **extra)
        if isinstance(v, enum.Enum):
            name, members = v._name_, type(v).__members__
            if name is not None and members.get(name) is v:
                return _mark(self.ref(t, v), "enum", name)
            return _mark(self.ref(t, v), "enum_value", self.value(v._value_))
        if isinstance(v, tuple) and hasattr(t, "_fields") and hasattr(t, "_make"):
            return _mark(self.ref(t, v), "namedtuple", self.items(v, v))
        if isinstance(v, dt.datetime | dt.time):
            kind = "datetime" if isinstance(v, dt.datetime) else "time"
            return _mark(self.ref(t, v), kind, v.isoformat(), **self.zone(v))
        if isinstance(v, dt.date):
            return _mark(self.ref(t, v), "date", v.isoformat())
        if isinstance(v, dt.timedelta):
            return _mark(self.ref(t, v), "timedelta", [v.days, v.seconds, v.microseconds])
        for base, kind in _TEXT_KINDS:
            if isinstance(v, base):
                return _mark(self.ref(t, v), kind, str(v))
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return self.dataclass(v, t)
        pydantic = sys.modules.get("pydantic")
        if pydantic is not None and isinstance(v, pydantic.BaseModel):
            return self.pydantic(v, t)
        for base, plain in _PLAIN.items():
            if isinstance(v, base):
                return _mark(self.ref(t, v), "scalar", self.value(plain(v)))
        raise self.refused(v, f"a {type_label(v)}")

    def unordered(self, v: set[Any] | frozenset[Any], t: type) -> dict[str, Any]:
        """A set's items sorted (equal sets are stored the same), and, when the program iterated
        them in another order or a set rebuilt from them sorted may iterate otherwise
        (:func:`_rebuilt_alike`), that order (``order``: for each item met, its index in ``value``):
        a replay rebuilds a set that iterates the same, so that ``str()`` of it, or a prompt
        joined from it, is what the live run had."""
        items = self.items(v, list(v))
        keys = [_sort_key(x) for x in items]
        by_key = sorted(range(len(items)), key=keys.__getitem__)
        extra: dict[str, Any] = {}
        if len(items) > 1 and (by_key != sorted(by_key) or not _rebuilt_alike(v, t)):
            place = [0] * len(items)
            for i, k in enumerate(by_key):
                place[k] = i
            extra["order"] = place
        return _mark(t, t.__name__, [items[k] for k in by_key], **extra)

    # -- the parts

    # The containers: leaves (and finite floats: ``x - x`` is 0.0 for them alone) are taken as
    # they are without a call (most of a large result), and where a part sits is worked out only
    # when it fails.

    def items(self, owner: Any, values: Any) -> list[Any]:
        self.enter(owner)
        out: list[Any] = []
        try:
            for x in values:
                t = type(x)
                out.append(x if t in _LEAVES or (t is float and x - x == 0.0) else self.value(x))
        except ToolResultError as exc:
            exc.where = f"[{len(out)}]" + exc.where
            raise
        finally:
            self.open.discard(id(owner))
        return out

    def fields(self, owner: Any, values: dict[str, Any]) -> dict[str, Any]:
        self.enter(owner)
        out: dict[str, Any] = {}
        key = ""
        try:
            for key, x in values.items():
                t = type(x)
                out[key] = x if t in _LEAVES or (t is float and x - x == 0.0) else self.value(x)
        except ToolResultError as exc:
            exc.where = f"[{key!r}]" + exc.where
            raise
        finally:
            self.open.discard(id(owner))
        return out

    def pairs(self, v: dict[Any, Any]) -> list[list[Any]]:
        self.enter(v)
        out: list[list[Any]] = []
        where = ""
        try:
            for k, x in v.items():
                where = f"[{k!r}] (the key)"
                key = self.value(k)
                where = f"[{k!r}]"
                out.append([key, self.value(x)])
        except ToolResultError as exc:
            exc.where = where + exc.where
            raise
        finally:
            self.open.discard(id(v))
        return out

    def enter(self, owner: Any) -> None:
        """Mark a container as being encoded: one met again inside itself is refused."""
        if id(owner) in self.open:
            raise ToolResultError("a value that contains itself", type_name="(cycle)")
        if len(self.open) >= DEEPEST:  # (the log could not be written: the whole recording stopped)
            raise ToolResultError(f"a value nested more than {DEEPEST} deep", type_name="(too deep)")
        self.open.add(id(owner))

    def dataclass(self, v: Any, t: type) -> dict[str, Any]:
        names = [f.name for f in dataclasses.fields(v)]
        state = {n: getattr(v, n) for n in names if hasattr(v, n)}
        extra = {k: x for k, x in getattr(v, "__dict__", {}).items() if k not in state}
        node = _mark(self.ref(t, v), "dataclass", self.fields(v, state))
        if extra:
            node["attrs"] = self.named(v, extra)
        return node

    def pydantic(self, v: Any, t: type) -> dict[str, Any]:
        state = {n: v.__dict__[n] for n in t.model_fields if n in v.__dict__}  # type: ignore[attr-defined]
        node = _mark(self.ref(t, v), "pydantic", self.fields(v, state), fields_set=sorted(v.model_fields_set))
        for key, attr in (("extra", "__pydantic_extra__"), ("private", "__pydantic_private__")):
            more = getattr(v, attr, None)
            if more:
                node[key] = self.named(v, dict(more))
        return node

    def named(self, v: Any, values: dict[Any, Any]) -> dict[str, Any]:
        """An object's attributes by name (refused when one's name is not a string: set through
        ``__dict__``, it has no place in a JSON object)."""
        if not _STR_ONLY.issuperset(map(type, values)):
            raise self.refused(v, f"a {type_label(v)} with an attribute whose name is not a string")
        return self.fields(v, values)

    def registered(self, v: Any, pair: tuple[Callable[[Any], Any], Callable[[Any], Any] | None]) -> Any:
        encoder, decoder = pair
        owner = next(k for k in type(v).__mro__ if _ENCODERS.get(k) is pair)
        data = self.value(encoder(v))
        return data if decoder is None else _mark(owner, "encoded", data)

    def zone(self, v: dt.datetime | dt.time) -> dict[str, Any]:
        """How an aware value's zone is kept beyond the ISO text's offset (module docstring)."""
        extra: dict[str, Any] = {"fold": 1} if v.fold else {}
        tz = v.tzinfo
        if tz is None or tz is dt.UTC:
            return extra
        if isinstance(tz, zoneinfo.ZoneInfo) and tz.key:
            return {**extra, "zone": tz.key}
        if type(tz) is dt.timezone:
            offset = tz.utcoffset(None)
            if tz == dt.timezone(offset) and tz.tzname(None) == dt.timezone(offset).tzname(None):
                return extra
            return {**extra, "tzname": tz.tzname(None)}
        raise self.refused(
            v, f"a {type_label(v)} whose tzinfo is a {type_label(tz)} (not a ZoneInfo or timezone)"
        )

    def ref(self, cls: type, v: Any) -> str:
        """``cls``'s reference, checked to lead back to ``cls`` (not so for a class made inside a
        function, which a replay could never find)."""
        ref = class_ref(cls)
        try:
            found = find_class(ref)
        except UnrebuildableValue:
            found = None
        if found is not cls:
            raise self.refused(
                v, f"a {type_label(v)}, a class a replay cannot find by its name (defined inside a function?)"
            )
        return ref

    def refused(self, v: Any, what: str) -> ToolResultError:
        return ToolResultError(what, type_name=type_label(v))


#: Types stored as they are, with nothing inside to look at.
_LEAVES = frozenset({str, int, bool, bytes, type(None)})
#: Kinds stored as their text form.
_TEXT_KINDS: tuple[tuple[type, str], ...] = (
    (decimal.Decimal, "decimal"),
    (uuid.UUID, "uuid"),
    (pathlib.PurePath, "path"),
)
#: A subclass of a JSON scalar type (``scalar``) and how its plain value is read (never through the
#: subclass's own ``__str__``/``__int__``, which may answer something else).
_PLAIN: dict[type, Callable[[Any], Any]] = {str: str.__str__, int: int.__int__, float: float.__float__}


def _sort_key(item: Any) -> bytes:
    """A set's items in a stable order: by their JSON (bytes as base64), else by repr."""
    try:
        return orjson.dumps(
            item,
            option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
            default=lambda b: base64.b64encode(b).decode() if isinstance(b, bytes) else repr(b),
        )
    except (TypeError, orjson.JSONEncodeError):
        return repr(item).encode()


# --------------------------------------------------------------------------- decode


def is_typed(node: Any) -> bool:
    """True for a typed node (a dict with a ``$type`` class name and a known ``kind``)."""
    return (
        isinstance(node, dict)
        and isinstance(node.get(MARK), str)
        and node.get("kind") in _REBUILD
        and "value" in node
    )


def plain_json(stored: Any) -> bytes | None:
    """The JSON of a stored list or dict that holds no typed node (:func:`decode` gives it back as
    a plain copy), else None."""
    if not isinstance(stored, list | dict):
        return None
    try:
        text = orjson.dumps(stored)
    except (TypeError, orjson.JSONEncodeError):  # a big int, a lone surrogate: decode walks it
        return None
    return text if f'"{MARK}"'.encode() not in text else None


def decode(stored: Any, *, validate: bool = False) -> Any:
    """The value :func:`encode` stored, rebuilt (see the module docstring): a new value each time.
    Plain JSON data comes back as it is. ``validate``: the value was not recorded but written by
    hand (a what-if override), so a pydantic model is validated (its fields converted to their
    types) rather than rebuilt as it was. Raises :class:`~forkpoint.errors.UnrebuildableValue` for
    a class this process has not imported, one that is not what the node says it is, or (with
    ``validate``) a model the value does not validate as."""
    # Typed nodes are rare: look for one in the value's JSON first (a 20 MB tool result is then
    # copied in C in tens of milliseconds, not walked in Python in a second).
    text = plain_json(stored)
    if text is not None:
        return orjson.loads(text)
    token = _VALIDATE.set(validate)
    try:
        return _decode(stored)
    finally:
        _VALIDATE.reset(token)


#: Whether the value being decoded was written by hand (:func:`decode`'s ``validate``).
_VALIDATE: contextvars.ContextVar[bool] = contextvars.ContextVar("forkpoint_values_validate", default=False)


def _decode(stored: Any) -> Any:
    if isinstance(stored, list):
        return [_decode(x) for x in stored]
    if isinstance(stored, dict):
        if is_typed(stored):
            return _rebuild(stored)
        return {k: _decode(x) for k, x in stored.items()}
    return stored


def _rebuild(node: dict[str, Any]) -> Any:
    try:
        return _REBUILD[node["kind"]](node)
    except UnrebuildableValue:
        raise
    except Exception as exc:  # recorded fields the class no longer takes, a decoder that failed…
        raise UnrebuildableValue(
            f"the recorded {node['kind']} {node[MARK]} cannot be rebuilt here: {type(exc).__name__}: {exc}"
        ) from None


def _family(node: dict[str, Any], *bases: type) -> Any:
    """The node's class, refused unless it is one of ``bases`` or derives from one."""
    cls = find_class(node[MARK])
    if not issubclass(cls, bases):
        want = " or ".join(b.__name__ for b in bases)
        raise UnrebuildableValue(f"the recorded {node['kind']} names {node[MARK]}, which is not a {want}")
    return cls


def _exact(node: dict[str, Any], *allowed: type) -> Any:
    cls = find_class(node[MARK])
    if cls not in allowed:
        raise UnrebuildableValue(f"the recorded {node['kind']} names {node[MARK]}, which is not one")
    return cls


def _pairs(node: dict[str, Any]) -> list[tuple[Any, Any]]:
    return [(decode(k), decode(v)) for k, v in node["value"]]


def _with_zone(value: Any, node: dict[str, Any]) -> Any:
    if node.get("zone"):
        value = value.replace(tzinfo=zoneinfo.ZoneInfo(str(node["zone"])))
    elif node.get("tzname") is not None:
        value = value.replace(tzinfo=dt.timezone(value.utcoffset(), str(node["tzname"])))
    return value.replace(fold=1) if node.get("fold") else value


def _dataclass(node: dict[str, Any]) -> Any:
    cls = find_class(node[MARK])
    if not dataclasses.is_dataclass(cls):
        raise UnrebuildableValue(f"the recorded dataclass names {node[MARK]}, which is not a dataclass")
    # Every field, and only fields, as its __init__ would have: a value written by hand, or one
    # recorded before the class gained or lost a field (rebuilt as it was, it would lack an
    # attribute the code now reads: an AttributeError far from the call that served it).
    given = _dataclass_fields(node, cls, decode(node["value"]))
    obj = cls.__new__(cls)
    for name, value in {**decode(node.get("attrs") or {}), **given}.items():
        object.__setattr__(obj, name, value)  # frozen ones too: this is their recorded state
    return obj


def _dataclass_fields(node: dict[str, Any], cls: Any, given: Any) -> dict[str, Any]:
    """The fields of a dataclass value written by hand (an override) or recorded, its defaults
    filled in; :class:`UnrebuildableValue` naming a field it lacks (one without a default) or a
    name that is not one of its fields: rebuilt without ``__init__``, it would be an object no run
    could make."""
    by_hand = _VALIDATE.get()
    if by_hand:
        what, why = f"the value given for {node[MARK]}", ""
    else:
        what = f"the recorded {node[MARK]}"
        why = " (the class has changed since the recording)"
    if not isinstance(given, dict):
        raise UnrebuildableValue(f"{what} is not an object of its fields")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [name for name in given if name not in fields]
    if unknown:
        raise UnrebuildableValue(f"{what} has no field {unknown[0]!r}{why}")
    out = dict(given)
    # (a recorded value may lack a field its run never set: one the class's __init__ does not set)
    inits = by_hand or cls.__dataclass_params__.init
    for name, f in fields.items():
        if name in out:
            continue
        if f.default is not dataclasses.MISSING:
            out[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[name] = f.default_factory()
        elif inits and f.init:
            raise UnrebuildableValue(f"{what} lacks its field {name!r}{why}")
    return out


def _pydantic(node: dict[str, Any]) -> Any:
    pydantic = sys.modules.get("pydantic")
    cls = find_class(node[MARK])
    if pydantic is None or not issubclass(cls, pydantic.BaseModel):
        raise UnrebuildableValue(f"the recorded pydantic model names {node[MARK]}, which is not one")
    fields = _decode(node["value"])
    if _VALIDATE.get():
        data = {**fields, **(_decode(node["extra"]) if node.get("extra") else {})}
        try:
            return _validated(cls, data)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {}
            where = ".".join(str(p) for p in first.get("loc") or ())
            raise UnrebuildableValue(
                f"the value given for {node[MARK]} does not validate as one: {where or 'the model'}: "
                f"{first.get('msg') or exc}"
            ) from None
    fields_set = set(node["fields_set"] if isinstance(node.get("fields_set"), list) else fields)
    obj = cls.model_construct(_fields_set=fields_set, **fields)  # type: ignore[attr-defined]
    if node.get("extra"):
        object.__setattr__(obj, "__pydantic_extra__", decode(node["extra"]))
    if node.get("private"):
        object.__setattr__(obj, "__pydantic_private__", decode(node["private"]))
    return obj


def _validated(cls: Any, data: dict[str, Any]) -> Any:
    """``cls.model_validate(data)`` with ``data`` keyed by field name, as a model is stored (an
    aliased field too: ``user_id``, not ``userId``)."""
    try:
        return cls.model_validate(data, by_alias=True, by_name=True)
    except TypeError:  # (pydantic before 2.11 takes neither: the names are given as their aliases)
        fields = getattr(cls, "model_fields", {})
        return cls.model_validate({(getattr(fields.get(k), "alias", None) or k): v for k, v in data.items()})


def _mapping(node: dict[str, Any]) -> Any:
    cls = _exact(node, collections.OrderedDict, collections.Counter, collections.defaultdict)
    pairs = _pairs(node)
    if cls is collections.defaultdict:
        factory = node.get("factory")
        return cls(find_class(factory) if isinstance(factory, str) else None, pairs)
    return cls(dict(pairs))


def _encoded(node: dict[str, Any]) -> Any:
    decoder = next(
        (pair[1] for cls, pair in _ENCODERS.items() if class_ref(cls) == node[MARK] and pair[1] is not None),
        None,
    )
    if decoder is None:
        raise UnrebuildableValue(
            f"the recorded value was stored by the encoder registered for {node[MARK]}, and this run has "
            "registered no decoder for it: forkpoint.register_encoder(cls, encode, decode=...) before the call"
        )
    return decoder(decode(node["value"]))


def _float(node: dict[str, Any]) -> float:
    text = str(node["value"])
    if text not in ("nan", "inf", "-inf"):
        raise UnrebuildableValue(f"the recorded float {text!r} is not nan, inf or -inf")
    return float(text)


def _unordered(node: dict[str, Any], cls: type[set[Any]] | type[frozenset[Any]]) -> Any:
    """A ``set`` or ``frozenset`` node rebuilt; with ``order``, iterating in that order when a
    construction of the set reproduces it (:func:`ordered_set`)."""
    items = decode(node["value"])
    order = node.get("order")
    if order is None:
        return cls(items)
    if not (
        isinstance(order, list)
        and all(type(o) is int for o in order)
        and sorted(order) == list(range(len(items)))
    ):
        raise UnrebuildableValue(f"the recorded order of a {cls.__name__} is not a permutation of its items")
    return ordered_set(cls, [items[i] for i in order])


#: How much searching for a set's insertion order may cost (items inserted, over every try).
_ORDER_BUDGET = 200_000
#: The largest set whose insertion order is searched for (beyond, its items in order only).
_ORDER_SEARCHED = 256


def ordered_set(cls: type[set[Any]] | type[frozenset[Any]], wanted: list[Any]) -> Any:
    """A ``cls`` of the items ``wanted`` that iterates in that order, when one can be built.

    A set iterates in the order of its hash table's slots, and which slot an item takes depends
    on the table's size and on the items inserted before it (a collision sends the later one
    elsewhere), so a set built from the sorted items iterates otherwise than the live one did, even
    under the same ``PYTHONHASHSEED``. Tried: the items inserted in that order; then, for each
    table size the live set may have had, a search for an insertion order under which every
    prefix already iterates as ``wanted`` does (items inserted later never move earlier ones in a
    table that does not grow), the size a set grown an item at a time has first, each size
    bounded by its share of :data:`_ORDER_BUDGET`. When nothing found reproduces the order: the
    set of the items inserted in that order, the nearest there is, and a line on stderr saying so
    (``str()`` of it differs from the live run's)."""
    plain = cls(wanted)
    if len(wanted) < 2 or list(plain) == wanted:
        return plain
    if len(wanted) <= _ORDER_SEARCHED:
        smallest = 8  # (the table a dict of the items presizes)
        while smallest <= 2 * len(wanted):
            smallest *= 2
        sizes = [8] if len(wanted) <= 4 else []
        if cls is set:  # (a frozenset of a dict of the items has the smallest table, and no other)
            grown = _grown(len(wanted))  # (a set built an item at a time: the likeliest)
            sizes += [grown] if grown >= smallest else []
            sizes += [n for n in (smallest, 2 * smallest, 4 * smallest) if n != grown]
        else:
            sizes.append(smallest)
        for size in sizes:  # (each its share of the budget: one that leads nowhere takes no more)
            order = _insertion_order(wanted, size, [_ORDER_BUDGET // len(sizes)])
            if order is not None:
                built = (
                    _in_table(order, size)
                    if cls is set
                    else cls(order if size == 8 else dict.fromkeys(order))
                )
                if list(built) == wanted:
                    return built
    from .text import say

    say(
        f"forkpoint: a recorded {cls.__name__} of {len(wanted)} items cannot be rebuilt here iterating "
        "in the order it did live (its items' hashes differ in this process, or no insertion order "
        "was found in time): it iterates otherwise, so str() of it, or a list made from it, is not "
        "what the recording had"
    )
    return plain


def _grown(n: int) -> int:
    """The table size of a set ``n`` items were added to one at a time (CPython: a table grows
    when three fifths full, to the power of two above four times the items, above 50,000 two)."""
    size = 8
    for used in range(1, n + 1):
        if used * 5 >= (size - 1) * 3:
            want, size = (used * 2 if used > 50_000 else used * 4), 8
            while size <= want:
                size *= 2
    return size


def _in_table(order: list[Any], size: int) -> set[Any]:
    """A set of ``order``, inserted in that order into a table of ``size`` slots (presized by a
    dict of at least ``size // 4`` keys, the placeholders after the items then discarded)."""
    extra = [object() for _ in range(max(0, size // 4 - len(order)))]
    if len(order) + len(extra) < 5:  # (a fresh set's table has 8 slots: no presizing)
        return set(order)
    built = set(dict.fromkeys([*order, *extra]))
    for x in extra:
        built.discard(x)
    return built


def _insertion_order(wanted: list[Any], size: int, budget: list[int]) -> list[Any] | None:
    """An order of ``wanted`` that, inserted into a table of ``size`` slots, iterates as
    ``wanted``: a depth-first search over prefixes that iterate in ``wanted``'s relative order,
    each build's items counted against ``budget``. None when not found within it."""
    rank = {id(x): i for i, x in enumerate(wanted)}
    taken = [False] * len(wanted)
    order: list[int] = []  # (indices into wanted)
    tried = [0]  # at each depth, the next index of wanted to try there
    while tried:
        if len(order) == len(wanted):
            return [wanted[j] for j in order]
        j = tried[-1]
        while j < len(wanted) and taken[j]:
            j += 1
        if j == len(wanted) or budget[0] <= 0:  # (this prefix leads nowhere: back one)
            tried.pop()
            if not order or budget[0] <= 0:
                return None
            taken[order.pop()] = False
            continue
        tried[-1] = j + 1
        prefix = [wanted[k] for k in order] + [wanted[j]]
        budget[0] -= max(len(prefix), size // 4)
        ranks = [rank[id(y)] for y in _in_table(prefix, size)]
        if all(a < b for a, b in zip(ranks, ranks[1:], strict=False)):
            taken[j] = True
            order.append(j)
            tried.append(0)
    return None


def _scalar(node: dict[str, Any]) -> Any:
    cls = _family(node, str, int, float)
    return cls(decode(node["value"]))


_REBUILD: dict[str, Callable[[dict[str, Any]], Any]] = {
    "float": _float,
    "dict": lambda n: dict(_pairs(n)),
    "tuple": lambda n: tuple(decode(n["value"])),
    "set": lambda n: _unordered(n, set),
    "frozenset": lambda n: _unordered(n, frozenset),
    "bytearray": lambda n: bytearray(n["value"]),
    "mapping": _mapping,
    "namedtuple": lambda n: _family(n, tuple)._make(decode(n["value"])),
    "enum": lambda n: _family(n, enum.Enum)[str(n["value"])],
    "enum_value": lambda n: _family(n, enum.Enum)(decode(n["value"])),
    "datetime": lambda n: _with_zone(_family(n, dt.datetime).fromisoformat(n["value"]), n),
    "time": lambda n: _with_zone(_family(n, dt.time).fromisoformat(n["value"]), n),
    "date": lambda n: _family(n, dt.date).fromisoformat(n["value"]),
    "timedelta": lambda n: _family(n, dt.timedelta)(*n["value"]),
    "decimal": lambda n: _family(n, decimal.Decimal)(n["value"]),
    "uuid": lambda n: _family(n, uuid.UUID)(n["value"]),
    "path": lambda n: _family(n, pathlib.PurePath)(n["value"]),
    "dataclass": _dataclass,
    "pydantic": _pydantic,
    "scalar": _scalar,
    "encoded": _encoded,
}
