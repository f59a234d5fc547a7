"""The scrubber: the one function family that every path writing or matching data goes through.

Rules (see docs/security.md for the full list and what is *not* promised):

* Credential headers (:data:`SECRET_HEADERS`, names that say they carry a token, secret, password or
  API key, and the user's ``headers``) are dropped, never written, except a request's, kept with
  the whole value a placeholder (:func:`request_credential`): which key a call sent, to tell apart
  on replay calls alike but for their keys.
* Values shaped like a known secret (:data:`PATTERNS`: provider and cloud API keys, tokens, JWTs, PEM
  private keys, bearer and basic credentials, passwords in URLs, ``?token=`` query values,
  ``DB_PASSWORD=…`` assignments, ``"api_key": "…"`` fields) and the user's regexes are replaced,
  wherever they occur in text (bodies, stream chunks, URLs, tool arguments and results, exception
  messages, workspace files), by a deterministic placeholder ``[REDACTED:<kind>:<8 hex of
  sha256(secret)>]``. The same secret always gives the same placeholder, so a scrubbed recording
  still matches a live request scrubbed the same way; eight hex digits of a hash of a high-entropy
  key do not help anyone recover it.
* In JSON data, the value of a key that names a credential (``password``, ``client_secret``,
  ``api_key``, ``access_token``…) and the values the user's JSON paths select are replaced the same way.
* Query parameters whose name says they carry a credential (``api_key``, ``key``, ``token``...) are
  replaced the same way, and so is the user-info part of a URL.

Scrubbing is idempotent (a placeholder never matches again) and deterministic. Bytes are scrubbed
as their UTF-8 text (undecodable bytes kept as they are), so ``scrub_bytes(t.encode()) ==
scrub_text(t).encode()``, and a stream scrubbed chunk by chunk equals the whole stream scrubbed:
``b"".join(scrub_chunks(cs)) == scrub_bytes(b"".join(cs))`` for any chunking.

The rules in force come from configuration (:mod:`forkpoint.config`), read once per process the
first time they are needed; :func:`reload` reads them again, :func:`use_rules` sets them for a block.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import builtins
import hashlib
import heapq
import itertools
import operator
import re
import shlex
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import orjson

from . import jsonpath, streamscrub
from .canonical import canonical_json, digest
from .config import anchor as config_anchor
from .config import load_table
from .deltalist import json_default
from .errors import ConfigError, RuleError
from .patterns import compiled_later, compiled_later_bytes

#: Headers whose values are credentials. Compared lower-case.
SECRET_HEADERS: frozenset[str] = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "x-auth-token",
        "x-amz-security-token",
        "openai-api-key",
        "anthropic-api-key",
        # services' keys under names that do not say key, token or secret in SECRET_HEADER_NAME's
        # words: Cloudflare, Fastly, Honeycomb, RapidAPI, Azure Functions, JSONBin, Adafruit IO,
        # Appwrite, Pivotal Tracker (not every "-key": Idempotency-Key, Sec-WebSocket-Key are none)
        "x-auth-key",
        "fastly-key",
        "x-honeycomb-team",
        "x-rapidapi-key",
        "x-functions-key",
        "x-master-key",
        "x-aio-key",
        "x-appwrite-key",
        "x-trackertoken",
    }
)

#: Request-signing headers (AWS SigV4 and the SDKs' per-request ids that go into the signature):
#: not credentials, but derived from them and different at every request; never stored.
SIGNING_HEADERS: frozenset[str] = frozenset(
    {"x-amz-date", "x-amz-content-sha256", "amz-sdk-invocation-id", "amz-sdk-request", "x-amz-client-context"}
)

#: Header names that say their value is a credential (any case): dropped like :data:`SECRET_HEADERS`.
#: ``x-ratelimit-remaining-tokens`` is not one ("tokens", plural, counts tokens of text).
SECRET_HEADER_NAME = re.compile(  # public: a real pattern (re.search(SECRET_HEADER_NAME, …) works)
    r"(?i)(?:^|[-_])(?:(?:token|secret|password|passwd|api[-_]?key|apikey|access[-_]?key|credentials?"
    r"|signature|session[-_]?id|subscription[-_]?key)(?:$|[-_])|(?:auth|authentication)$)"
)

#: A command-line option whose name says its value is a credential (``--token``, ``--api-key``,
#: ``--db-password``, ``--secret-key``), with the value after ``=`` if it has one. Not
#: ``--max-tokens`` (a count), ``--token-file`` (a path), ``--secret-name`` or ``--no-password`` (a
#: switch), nor ``--key`` alone (``sort --key``, a key file's path).
_SECRET_OPTION_NAME = (
    r"--?(?!no-)(?:[A-Za-z0-9]+[-_])*(?i:token|secret|password|passwd|passphrase|api[-_]?key|apikey"
    r"|access[-_]?key|private[-_]?key|secret[-_]?key|auth[-_]?key|master[-_]?key|credentials?)"
)
SECRET_OPTION = re.compile(_SECRET_OPTION_NAME + r"(?:=(?P<value>.+))?", re.DOTALL)


class _Client(NamedTuple):
    """A client whose password is an option's value on its command line, as an argv list holds it
    (a tool's ``["curl", "-u", "admin:PW"]``) and in text (a shell tool's command)."""

    #: The program's names (the first a prefix of the others: what its shape in text is found at).
    names: tuple[str, ...]
    #: The words after its name (``docker login``), as regexes (``openssl``'s cipher: ``aes-256-cbc``).
    words: tuple[str, ...]
    #: In argv: the options whose next item is the password, and those that may hold it glued on (``-pPW``).
    spaced: frozenset[str]
    glued: frozenset[str]
    #: Whether it runs a command given after its own options (whose options are not its own:
    #: ``sshpass -f F ssh -p 22``): in text, its options are read only before that command's.
    wraps: bool
    #: Whether the option's value is ``USER:PASSWORD``, the user kept (curl's ``admin:`` of
    #: ``admin:PW``; curl asks for the password of a user alone).
    user: bool
    #: In text: the option (after the name, within 500 characters, unless it ``wraps``) as a regex;
    #: the value after it, quoted or not.
    option: str


#: Clients whose password is an option's value on their command line, read in argv lists
#: (:meth:`Scrubber._list_secrets`) and in text (the shapes of kind ``command-password``). Curl's
#: -u and --user only (not -u elsewhere: ``docker run -u 1000:1000``); ``mysql -p DB`` asks for
#: DB's password (the MySQL clients' is glued on: -pPW).
_CLIENTS: tuple[_Client, ...] = (
    _Client(
        ("curl",),
        (),
        frozenset({"-u", "--user"}),
        frozenset({"-u"}),
        False,
        True,
        r"(?:-u(?:\s+|=)?|--user(?:\s+|=))",
    ),
    _Client(("mysql", "mysqldump", "mysqladmin"), (), frozenset(), frozenset({"-p"}), False, False, "-p"),
    _Client(("docker",), ("login",), frozenset({"-p"}), frozenset(), False, False, r"-p[ \t]*"),
    # (in text, its own options before -p: not ssh's -p PORT after sshpass -f FILE)
    _Client(
        ("sshpass",),
        (),
        frozenset({"-p"}),
        frozenset({"-p"}),
        True,
        False,
        r"(?:[ \t]+-[A-Za-oq-z]\S*)*[ \t]+-p[ \t]*",
    ),
    _Client(("redis-cli",), (), frozenset({"-a"}), frozenset(), False, False, r"(?:-a|--pass)[ \t]*"),
    # (a repository's secret's value: gh secret set NAME --body VALUE)
    _Client(
        ("gh",),
        ("secret", "set"),
        frozenset({"-b", "--body"}),
        frozenset({"-b"}),
        False,
        False,
        r"(?:--body(?:=|[ \t]+)|-b[ \t]*)",
    ),
    # (openssl enc's password, -k PASSWORD, and key, -K HEX, of enc or a cipher's command, openssl
    # aes-256-cbc: the only ones with a -k or -K; -kfile's value is a file's name)
    _Client(
        ("openssl",),
        (r"(?:enc|(?:aes|aria|camellia|des|sm4|bf|cast|rc2|rc4|seed|idea|chacha)[A-Za-z0-9\-]*)",),
        frozenset({"-k", "-K"}),
        frozenset(),
        False,
        False,
        r"-[kK][ \t]+",
    ),
)
_COMMAND_WORDS = max(1 + len(c.words) for c in _CLIENTS)


class _Wrapper(NamedTuple):
    """A command that runs the command after its own options and operands (``sudo docker login``)."""

    #: Its options whose value is the next item (``sudo -u USER``); any other is a switch, or its
    #: value glued on (``-uUSER``, ``--user=USER``).
    valued: frozenset[str]
    #: How many operands come before the command it runs (``timeout DURATION``).
    operands: int = 0
    #: Whether ``NAME=VALUE`` items may come before the command (``env X=1``, ``sudo X=1``).
    assignments: bool = False


#: Wrappers by name: a client after them (``["sudo", "docker", "login", "-p", PW]``,
#: ``["env", "X=1", "htpasswd", "-b", …]``) is read as at the list's start.
_WRAPPERS: dict[str, _Wrapper] = {
    "sudo": _Wrapper(
        frozenset(
            "-C -D -g -p -R -r -T -t -U -u --close-from --chdir --group --prompt --chroot --role"
            " --command-timeout --type --other-user --user".split()
        ),
        assignments=True,
    ),
    "doas": _Wrapper(frozenset({"-C", "-u"})),
    "env": _Wrapper(frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}), assignments=True),
    "timeout": _Wrapper(frozenset({"-s", "-k", "--signal", "--kill-after"}), operands=1),
    "nice": _Wrapper(frozenset({"-n", "--adjustment"})),
    "nohup": _Wrapper(frozenset()),
    "setsid": _Wrapper(frozenset()),
    "command": _Wrapper(frozenset()),
    "exec": _Wrapper(frozenset({"-a"})),
    "time": _Wrapper(frozenset({"-f", "-o", "--format", "--output"})),
    "stdbuf": _Wrapper(frozenset({"-i", "-o", "-e", "--input", "--output", "--error"})),
    "ionice": _Wrapper(frozenset({"-c", "-n", "--class", "--classdata"})),
    "xargs": _Wrapper(
        frozenset(
            "-a -d -E -I -L -n -P -s --arg-file --delimiter --max-lines --max-args --max-procs"
            " --max-chars --process-slot-var".split()
        )
    ),
    "watch": _Wrapper(frozenset({"-n", "--interval"})),
    "runuser": _Wrapper(frozenset({"-u", "-g", "-G", "--user", "--group", "--supp-group"})),
}


#: A shell variable's assignment before a command (``env X=1 cmd``).
_ASSIGNMENT = compiled_later(r"[A-Za-z_][A-Za-z0-9_]*=")


def _wrapped_command(items: Sequence[Any]) -> int:
    """The index of the command that the wrappers starting ``items`` run (:data:`_WRAPPERS`,
    ``["sudo", "-u", "ci", "timeout", "5", "mysql", …]``: 5), 0 where the first item is none; the
    list's length where they run nothing. A cluster of switches ends at an option that takes a
    value (``sudo -Eu ci``: ``-u``'s is the next item; ``-uci``: glued on), as getopt reads it."""
    at = 0
    while at < len(items) and type(items[at]) is str:
        wrapper = _WRAPPERS.get(items[at].rsplit("/", 1)[-1])
        if wrapper is None:
            return at
        at += 1
        while at < len(items) and type(items[at]) is str and items[at][:1] == "-":
            arg = items[at]
            at += 1
            if arg == "--":
                break
            if arg in wrapper.valued:
                at += 1
            elif arg[1:2] not in ("", "-"):  # (a cluster: the first letter that takes a value ends it)
                valued = [j for j in range(1, len(arg)) if "-" + arg[j] in wrapper.valued]
                if valued and valued[0] == len(arg) - 1:  # (its value the next item, not glued on)
                    at += 1
        at += wrapper.operands
        while (
            wrapper.assignments
            and at < len(items)
            and type(items[at]) is str
            and _ASSIGNMENT.match(items[at])
        ):
            at += 1
    return min(at, len(items))


#: openssl's options whose value is a password's source (``pass:PASSWORD``, ``env:VAR``, ``file:…``),
#: after one dash or two, the value the next argument or glued on with ``=``.
_OPENSSL_PASS_OPTIONS = frozenset({"pass", "passin", "passout", "password"})
#: aws configure set's names of a secret (after a profile's ``profile.NAME.``), and its value.
_AWS_SECRET_NAMES = frozenset({"aws_secret_access_key", "aws_session_token", "aws_security_token"})
_AWS_SECRET_VALUE = compiled_later(r"[A-Za-z0-9/+=]{16,}")


def _crossing(pieces: Sequence[str], spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Of ``spans`` of the joined text of ``pieces``, those that run over a boundary between two."""
    ends = list(itertools.accumulate(map(len, pieces)))
    return [s for s in spans if s[1] > ends[bisect.bisect_right(ends, s[0])]]


def _together(pieces: Sequence[str], spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Of ``spans`` of the joined text of ``pieces``, each scrubbed alone (a span is one they hold
    only together), those taken: the ones over a boundary (:func:`_crossing`), and a value that
    its name in a piece before makes one, but for a value that begins its piece right after a
    line break or glued to the piece before (``["password=", "hunter2xyz"]``: an ``.env`` file's
    lines, with or without their ends, each its own text). One after a space or tab, in its piece
    or the one before, is text cut inside a line (``["… login bob password", " pw1"]``)."""
    ends = list(itertools.accumulate(map(len, pieces)))
    text = "".join(pieces)
    taken = []
    for a, b, kind in spans:
        k = bisect.bisect_right(ends, a)
        if b > ends[k] or a > ends[k] - len(pieces[k]) or (a and text[a - 1] in " \t"):
            taken.append((a, b, kind))
    return taken


def _shared_until(shared: int) -> int:
    """Where a list's options may say another item is a credential (:meth:`Scrubber._list_secrets`)
    when its first ``shared`` items are a list's that holds none: from the last shared item (an
    option whose value comes now), or from the first where the command's words are not all shared."""
    return shared - 1 if shared >= _COMMAND_WORDS else 0


#: Such an option and its value inside one argument that is a shell's script (``sh -c "python
#: agent.py --token VALUE"``, ``os.system``'s command): the value one shell word, as the shell
#: reads it, quoted parts and escapes joined (``ab"c d"``, ``'a b'``, ``x\\ y``), after a line's
#: continuation too (a part alone left the rest of the secret in the text).
_SECRET_OPTION_WORD = compiled_later(
    r"(?<![^\s\"'(;&|])(?P<name>" + _SECRET_OPTION_NAME + r")(?:=|(?:[ \t]|\\\n)+)"
    r"(?P<value>(?:\"(?:[^\"\\]|\\.)*\"|'[^']*'|\\.|[^\s\"'\\;&|()<>])+)",
    re.DOTALL,
)

#: Query-string parameter names whose values are credentials. Compared lower-case.
SECRET_QUERY_PARAMS: frozenset[str] = frozenset(
    {
        "key",
        "api_key",
        "apikey",
        "api-key",
        "access_token",
        "refresh_token",
        "id_token",
        "token",
        "auth",
        "sig",
        "signature",
        "password",
        "secret",
        "client_secret",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",
        "subscription-key",  # Azure API Management's key in the query
    }
)

#: Keys ending in ``token`` that name no credential: a tokenizer's special tokens (``eos_token``:
#: ``"</s>"``), pagination cursors (``next_page_token``, ``nextPageToken``) and a .NET assembly's
#: public key token (``PublicKeyToken=b77a5c561934e089``: a hash of its public key, printed in
#: every reference to it). Scrubbed, a replay handed the program placeholders for them.
NOT_SECRET_TOKENS: tuple[str, ...] = (
    "eos_token", "bos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token",
    "page_token", "pagetoken", "publickeytoken", "public_key_token",
)  # fmt: skip

#: JSON object keys (compared lower-case, ``-`` read as ``_``) whose string values are credentials:
#: keys ending in one of these. A key that is just ``token`` is not one (logprobs have ``token``),
#: nor one of :data:`NOT_SECRET_TOKENS`.
SECRET_KEY_SUFFIXES: tuple[str, ...] = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "apikey",
    "api_key",
    "access_key",
    "accesskey",
    "private_key",
    "privatekey",
    "credential",
    "credentials",
    "authorization",
    "bearer",
    "secret_key",
    "secretkey",
    "_pass",
    "_pwd",
)
#: JSON object keys that are credentials' whole (a suffix of many a key that is none: bypass).
SECRET_KEYS = frozenset({"pass", "pwd"})

#: Before a name's ``token``: not one of :data:`NOT_SECRET_TOKENS`, in any case (``nextPageToken``).
_NOT_SECRET_TOKEN_BEFORE = (
    "(?i:" + "".join(f"(?<!{w.removesuffix('token')})" for w in NOT_SECRET_TOKENS) + ")"
)
_FIELD_WORDS = (
    r"(?i:password|passwd|passphrase|secret(?:[_\-]?key)?|(?<![A-Za-z0-9])(?:pass|(?P<d>pwd))"
    r"|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key"
    r"|credentials?|authorization|(?<=[A-Za-z0-9_.\-])" + _NOT_SECRET_TOKEN_BEFORE + r"token)"
)
#: An escaped line break or tab (see :meth:`Scrubber.find`), and what it stands for.
_ESCAPED_SPACE = compiled_later(r"\\[nrt]")
_UNESCAPED = {"n": "\n", "r": "\r", "t": "\t"}
_VALUE_END = r"(?=[\s\"'#;&,)\]}\\]|$)"  # a backslash: "\n" in JSON-escaped text ends a line
#: The first character of a credential on a command line (an option's value, curl's -u password,
#: mysql's -p one): not what the shell expands ($PW, ${PW}, `cat pw`), a template's ({password},
#: <password>, [MASKED]), an option, nor a quote or an operator.
_COMMAND_VALUE_FIRST = r"[^\s\"'\\;&|()<>$`\-\[{]"

#: curl -u's and mysql -p's password after its option (curl -uUSER:PASSWORD, mysql -p'PASSWORD' as
#: well): to the closing quote where the option's value opens with one (group ``q``), spaces and all.
_COMMAND_PASSWORD = r"(?P<s>(?(q)[^\"'\n]+|[^\s\"']+))"


def _command_password_text(client: _Client) -> str:
    """The shape of ``client``'s password on its command line in text (see :class:`_Client`)."""
    name = r"[ \t]+".join(["(?:" + "|".join(map(re.escape, client.names)) + ")", *client.words])
    within = "" if client.wraps else r"(?=\s)[^\n;&|]{0,500}?\s"
    user = r"[^\s:\"'\[]*:" if client.user else ""
    return (
        r"(?<![A-Za-z0-9_\-])" + name + within + client.option + r"(?P<q>[\"'])?" + user + _COMMAND_PASSWORD
    )


#: After a name's ``:``, a YAML plain scalar's value on the next line, indented under it: not a
#: key (``host: x``, a nested mapping or the same mapping's next key), a list's item or a comment,
#: nor an assignment (``HOME=/root``: after an escaped line break, ``\\n``, read as a break and a
#: space, the next line of an ``.env`` file looks indented). After ``=``, a value is on its line.
_NEXT_LINE_VALUE = (
    r"[ \t\r]*\n(?=[ \t])(?![ \t]*(?:-[ \t]|#|[^\s:\"']*:(?:\s|$)|[A-Za-z_][A-Za-z0-9_]*=(?!=)))"
)
#: A directory's path, the value of a name that ends in PWD (the shell's OLDPWD, a build's
#: SRC_PWD): the working directory, not a password.
_DIRECTORY = r"[\"']?[/~]"
#: Names of a credential assigned an unquoted value: in any case a password, else in capitals
#: (``DB_PASSWORD``, ``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``; ``DB_PASS``, ``MYSQL_PWD``, and the
#: clients' own SSHPASS and REDISCLI_AUTH).
_UNQUOTED_NAME = (
    r"(?<![a-z])(?:(?i:password|passwd|passphrase)|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|_KEY"
    r"|CREDENTIALS?|_PASS|_PWD(?![A-Za-z0-9]|\s*[=:][ \t]*"
    + _DIRECTORY
    + r")|SSHPASS|REDISCLI_AUTH)(?![A-Za-z0-9])"
)
#: A URL's password in its user info, to the first "@" (which a password's own "@" is read on
#: from): "/", "?" and "#" too, which a password holds unencoded (app:p#ss//w@127.0.0.1); not a
#: port and the path after it (127.0.0.1:8080/users/ada@localhost).
_URL_PASSWORD = r"(?![0-9]*[/?#])[^\s@\"'<>\\]+"
#: Names of a credential in lower case or camelCase (YAML's and INI's: see the table's shape).
_LOWER_NAME = (
    r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))(?i:api[_\-]?key|(?:client|access|auth|refresh|session"
    r"|bearer|secret)[_\-]?(?:secret|token|key)|secret|private[_\-]?key|"
    + _NOT_SECRET_TOKEN_BEFORE
    + r"token)"
    r"(?![A-Za-z0-9_])"
)
#: A shape of the table below searched for over the whole text (no anchor), and the literals it
#: starts with, one of which (case and all) a text it is in holds (:data:`_SCAN_LITERALS`).
_TWILIO_SID = r"(?:AC|SK)(?<![A-Za-z0-9][A-Z]{2})[0-9a-f]{32}(?![A-Za-z0-9])"
_TWILIO_PREFIXES = ("AC", "SK")
#: Three shapes of the table below (:data:`_DEAD_ENDS` names them).
_UNQUOTED_ASSIGNMENT = (
    _UNQUOTED_NAME + r"\s*(?:=|:(?:" + _NEXT_LINE_VALUE + r")?)[ \t]*[\"']?"
    r"(?P<s>(?![0-9]+(?:[\s\"'#;&]|$))(?!(?:None|null|true|false|True|False|undefined|nil|Final)(?:[\s\"'#;&\[]|$))"
    r"[^\s\"'#;&(){}\[\]<>,\\]{4,})" + _VALUE_END
)
#: A name that ends in a credential's word (DB_PASSWORD, api-token; not MAX_TOKENS, SECRET_NAME).
_CREDENTIAL_NAME = (
    r"[A-Za-z0-9_.\-]*?(?<![A-Za-z0-9])(?i:password|passwd|passphrase|secret|token|api_?key|access_?key"
    r"|private_?key|credentials?)"
)
#: A value that looks random: 16 characters or more with a letter and a digit among its first 65.
_RANDOM_VALUE = r"(?=[A-Za-z_\-+/=]{0,64}[0-9])(?=[0-9_\-+/=]{0,64}[A-Za-z])[A-Za-z0-9_\-+/=]{16,}"
_LOWER_ASSIGNMENT = (
    _LOWER_NAME + r"[ \t]*"
    r"(?:=|:(?=[ \t]*[A-Za-z0-9_\-+/=]+\.?[ \t]*(?:#[^\r\n\\]*)?(?:\\[nr]|[\r\n]|$)))[ \t]*"
    r"(?![a-z0-9]*_[a-z0-9_]*(?![A-Za-z0-9\-+/=]))(?![A-Z0-9]*_[A-Z0-9_]*(?![A-Za-z0-9\-+/=]))"
    r"(?!(?:[A-Z][a-z]*[0-9]*)*[A-Z][a-z]{2,}(?![A-Za-z0-9_\-+/=]))"
    r"(?P<s>" + _RANDOM_VALUE + r")\.?" + _VALUE_END
)
#: Where the names of :data:`_UNQUOTED_NAME` and :data:`_LOWER_NAME` are found (shapes' anchors).
_NAME_ANCHORS = tuple(
    "pass secret token api access private _key credential client auth refresh session bearer _pass _pwd"
    " sshpass rediscli_auth".split()
)
#: A type annotation between a name and its ``=`` (Python's ``password: str = …``, ``Final[str]``,
#: ``str | None``; TypeScript's and Kotlin's ``: string =``), not a comparison's ``==``.
_TYPE = r"[A-Za-z_][A-Za-z0-9_.]{0,60}(?:\[[A-Za-z0-9_., |\[\]]{0,80}\])?"
_ANNOTATED = r"[ \t]*:[ \t]*" + _TYPE + r"(?:[ \t]*\|[ \t]*" + _TYPE + r"){0,3}[ \t]*=(?!=)"
#: A character of a triple-quoted literal's value that is no blank (an escape as one).
_TRIPLE_QUOTED_CHAR = r"(?:(?!(?P=q))[^\\\s]|\\[\s\S])"
_OTHER_AUTHORIZATION = (
    r"(?i:authorization)[\"']?[ \t]*:[ \t]*[\"']?(?!(?i:bearer|basic|aws4-hmac-sha256)\s)"
    r"(?:[A-Za-z][A-Za-z0-9\-]*[ \t]+)?(?P<s>(?=[^\s\"',;]*[0-9])[^\s\"',;]{8,})"
)

#: An option of htpasswd's (-C and -r take a number), and an operand, quoted or not.
_HTPASSWD_OPTIONS = r"(?:[ \t]+-(?:[A-Za-z0-9]*[Cr][ \t]+[0-9]+|[A-Za-z0-9]+))"
_SHELL_WORD = r"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)"
#: Two shapes of the table below (:data:`_DEAD_ENDS` names them): a URL's user info, a token
#: (alone or with a password) and a user's password; the password to the last "@" before the host
#: (a password's own "@", p@ss, is seldom percent-encoded).
_URL_CREDENTIAL = (
    r"(?<=http|ttps)://(?P<s>(?=[A-Za-z_\-]*[0-9])(?=[0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{16,}"
    r"(?::" + _URL_PASSWORD + r")?)@"
)
_URL_USERINFO_PASSWORD = (
    r"(?<=[A-Za-z0-9+.\-])://[^\s/?#@:\"'<>\[\]\\]*:(?P<s>" + _URL_PASSWORD + r"(?:@[^\s/?#@\"'<>\\]+)*)@"
)
#: Built-in secret shapes: (kind, anchors, pattern). Every match starts at an occurrence of one of
#: its anchors (lower-case literals, found case-insensitively), which is what makes scanning long
#: text fast: the patterns only run where an anchor occurs. A pattern without anchors is searched
#: over the whole text instead (for a shape whose only literal is too common to anchor on). Where several match at one position, the
#: first in this list wins, so the more specific shapes come first. Group ``s``, where present, is
#: the part that is replaced.
_BUILTIN: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "private-key",
        ("-----begin ",),
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE"
        r" KEY(?: BLOCK)?-----|(?:\\[nr]|[\sA-Za-z0-9+/=:,.\-])*)",
    ),
    # Base64 of one (a kubeconfig's client-key-data, a Kubernetes secret's tls.key), on one line or
    # wrapped at 76 characters as base64(1) writes it (_valid_private_key: not a certificate's).
    (
        "private-key",
        ("ls0tls1crudjti",),
        r"(?<![A-Za-z0-9+/])LS0tLS1CRUdJTi(?:[A-Za-z0-9+/]{62}\r?\n(?:[A-Za-z0-9+/]{76}\r?\n)*)?"
        r"[A-Za-z0-9+/]{6,}={0,2}",
    ),
    ("anthropic-key", ("sk-",), r"(?<![A-Za-z0-9])sk-ant-[A-Za-z0-9_\-]{20,}"),
    ("openai-key", ("sk-",), r"(?<![A-Za-z0-9])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    (
        "stripe-key",
        ("sk_", "rk_", "whsec_"),  # (a webhook's signing secret too)
        r"(?<![A-Za-z0-9])(?:[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})",
    ),
    ("aws-access-key", ("akia", "asia", "abia", "acca"), r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    # An STS session token (the ``Token`` of instance and container credentials, ``SessionToken``
    # of AssumeRole): base64 that starts with the same bytes in every token of a generation.
    (
        "aws-session-token",
        ("iqojb3jpz2lux2vj", "fwogzxivyxdz", "aqodyxdz"),
        r"(?<![A-Za-z0-9+/])(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdz|AQoDYXdz)[A-Za-z0-9+/]{40,}={0,2}",
    ),
    # Amazon Bedrock API keys (AWS_BEARER_TOKEN_BEDROCK): a long-term one is ABSK and the base64 of
    # "BedrockAPIKey-…"; a short-term one, "bedrock-api-key-" and the base64 of a presigned URL.
    (
        "bedrock-key",
        ("absk", "bedrock-api-key-"),
        r"(?<![A-Za-z0-9+/])(?:ABSKQmVkcm9ja0FQSUtleS|bedrock-api-key-)[A-Za-z0-9+/]{20,}={0,2}"
        r"(?:&Version=1)?",
    ),
    ("google-api-key", ("aiza",), r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    ("google-oauth-token", ("ya29.",), r"\bya29\.[0-9A-Za-z_\-]{20,}"),
    (
        "github-token",
        ("gh", "github_pat_"),
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b",
    ),
    ("gitlab-token", ("glpat-",), r"\bglpat-[0-9A-Za-z_\-]{20,}"),
    # (and an app-level token, xapp-…, and a rotating token's refresh token, xoxe.xoxp-… or xoxe-…)
    ("slack-token", ("xox", "xapp-"), r"\b(?:xox[abposr]-|xoxe[.\-](?:xox[bp]-)?|xapp-)[0-9A-Za-z\-]{10,}"),
    ("slack-webhook", ("://",), r"(?<=https)://hooks\.slack\.com/services/[A-Za-z0-9/_\-]{20,}"),
    (
        "discord-webhook",
        ("discord",),
        r"\bdiscord(?:app)?\.com/api/webhooks/[0-9]{5,20}/(?P<s>[A-Za-z0-9_\-]{60,})",
    ),
    ("huggingface-token", ("hf_",), r"\bhf_[A-Za-z0-9]{30,}"),
    ("age-secret-key", ("age-secret-key-1",), r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b"),
    # HashiCorp Vault's service, batch and recovery tokens (hvs.…, hvb.…, hvr.…).
    ("vault-token", ("hvs.", "hvb.", "hvr."), r"\bhv[sbr]\.[A-Za-z0-9_\-]{24,}"),
    # A PyPI API token (a macaroon, base64: pypi.org's "AgEIcHlwaS5vcmc", TestPyPI's "AgENdGVzdC5weXBp…").
    ("pypi-token", ("pypi-age",), r"\bpypi-AgE[A-Za-z0-9_\-]{50,}"),
    # A Telegram bot's token in a Bot API URL's path (/bot<id>:<35 characters>/sendMessage); the
    # token alone in text is too plain a shape to anchor on (a TELEGRAM_BOT_TOKEN= is an assignment).
    ("telegram-bot-token", ("/bot",), r"/bot(?P<s>[0-9]{5,16}:A[A-Za-z0-9_\-]{34})(?![A-Za-z0-9_\-])"),
    ("npm-token", ("npm_",), r"\bnpm_[A-Za-z0-9]{36,}\b"),
    ("sendgrid-key", ("sg.",), r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"),
    ("provider-key", ("gsk_", "xai-", "pplx-", "r8_"), r"\b(?:gsk_|xai-|pplx-|r8_)[A-Za-z0-9]{20,}"),
    # Twilio: account SIDs (AC…) and API key SIDs (SK…), 32 lower-case hex digits after the prefix.
    # No anchor: "ac" and "sk" are everywhere in prose, and one regex search is faster.
    ("twilio-sid", (), _TWILIO_SID),
    ("jwt", ("eyj",), r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("bearer", ("bearer",), r"(?<![A-Za-z0-9_])(?i:bearer)\s+(?P<s>[A-Za-z0-9\-._~+/]{8,}=*)"),
    (
        "basic-auth",
        ("basic",),
        r"(?<![A-Za-z0-9_])(?i:basic)\s+(?P<s>[A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])",
    ),
    # Docker's config.json: a registry's "auth", base64 of user:password (_valid_registry_auth).
    (
        "registry-auth",
        ("auth",),
        r"(?<![A-Za-z0-9_\-])auth\\?[\"']\s*:\s*\\?[\"'](?P<s>[A-Za-z0-9+/]{6,}={0,2})\\?[\"']",
    ),
    # A token as an HTTP URL's user info (git clone https://TOKEN@HOST/…), alone or with a
    # password (GitHub's https://TOKEN:x-oauth-basic@…, which the password's shape below would take,
    # leaving the token): random-looking, 16 characters or more with a letter and a digit; not a
    # user's name, nor an SSH URL's user (ssh://git@…, ssh://<a job's id>@…: SSH authenticates with
    # a key).
    ("url-credential", ("://",), _URL_CREDENTIAL),
    ("url-password", ("://",), _URL_USERINFO_PASSWORD),
    # A password on a client's command line (a shell tool's command: _CLIENTS), the option within
    # 500 characters of the command's name (a minified line with "curl" at every turn stays linear).
    # Only the first such option after the name (its value checked: _valid_command_password), and
    # not a placeholder's (curl -u sk_test_…: is [REDACTED:stripe-key:…]: once scrubbed): what a
    # second scrub finds, the first found.
    *(("command-password", (c.names[0],), _command_password_text(c)) for c in _CLIENTS),
    # htpasswd -b's password, its last operand (after the file's and the user's names, or the
    # user's alone with -n, which writes no file; -bC 12: the cost's number is no operand), and an
    # openssl command's -pass, -passin, -passout pass:PASSWORD (--passin, -passin=: openssl 3's).
    (
        "command-password",
        ("htpasswd",),
        r"(?<![A-Za-z0-9_\-])htpasswd(?P<n>(?="
        + _HTPASSWD_OPTIONS
        + r"*?[ \t]+-[A-Za-z0-9]*n))?"
        + _HTPASSWD_OPTIONS
        + r"*?[ \t]+-[A-Za-z0-9]*b[A-Za-z0-9]*(?:(?<=[Cr])[ \t]+[0-9]+)?"
        + _HTPASSWD_OPTIONS
        + r"*(?(n)|[ \t]+"
        + _SHELL_WORD
        + r")[ \t]+"
        + _SHELL_WORD
        + r"[ \t]+(?P<q>[\"'])?"
        + _COMMAND_PASSWORD,
    ),
    (
        "command-password",
        ("pass",),
        r"(?<=-)(?:(?<![A-Za-z0-9_\-]-)|(?<=--)(?<![A-Za-z0-9_\-]--))pass(?:in|out|word)?(?:=|[ \t]+)"
        r"(?P<q>[\"'])?pass:" + _COMMAND_PASSWORD,
    ),
    (
        "secret-field",
        ("pass", "secret", "api", "access", "private", "credential", "auth", "token", "pwd"),
        # (unescaped, the value to its closing quote, escapes and all: "pa\"ss", "pa\\ss"; a pwd's
        # not a directory's path: the shell's PWD, in an environment's dump)
        _FIELD_WORDS + r"(?P<e>\\)?[\"']\s*:\s*\\?(?P<fq>[\"'])(?(d)(?!" + _DIRECTORY + r"))"
        r"(?P<s>(?(e)[^\"'\\\r\n]+|(?:(?!(?P=fq))[^\\\r\n]|\\[^\r\n])+))\\?(?P=fq)",
    ),
    # XML: an element named for a password or a secret (Maven's <password>, <db_password>,
    # <secretKey>), its text to its closing tag; not a property a build fills in (${env.PW}).
    (
        "secret-field",
        ("pass", "secret"),
        r"(?<=[<_\-.:])(?P<n>(?i:password|passwd|passphrase|secret(?:[_\-]?key)?))>[ \t\r\n]*"
        r"(?P<s>[^<>\s$](?:[^<>]*[^<>\s])?)\s*</[A-Za-z0-9_.:\-]*(?P=n)>",
    ),
    # Code: a name that says it holds a credential, assigned a quoted literal (password = "…",
    # self.auth_token = '…', apiKey: "…", Python's api_key = """…"""). Not any "…token" (a
    # tokenizer's eos_token = "</s>"). Spaces inside (a passphrase) but not at either end: that is
    # code around two literals ("Password: " + pw + "!"). On its name's line, or YAML's indented
    # under it, or Python's after a "\" ending the line ("\\" JSON-escaped) (two spaces or a tab:
    # one is what an escaped line break reads as; not triple-quoted: a docstring under
    # def f() -> PrivateKey:); not a quotation that starts the next line ("the secret:" and then "…").
    (
        "secret-assignment",
        ("pass", "secret", "api", "access", "auth", "refresh", "session", "private", "bearer"),
        r"(?i:password|passwd|passphrase|secret(?:_?key)?|(?:auth|access|api|bearer|refresh|session|secret)_?token"
        r"|api_?key|access_?key|private_?key)(?![A-Za-z0-9_])"
        r"(?:"
        + _ANNOTATED
        + r"|[ \t]*[=:])(?:[ \t]*(?P<t>(?:\\?\"){3}|''')|(?:[ \t]*\\{0,2}[ \t\r]*\n(?=\t|  ))?[ \t]*\\?(?P<q>[\"']))"
        r"(?P<s>(?=[^\"'\\\r\n]{6})[^\s\"'\\](?:[^\"'\\\r\n]*[^\s\"'\\])?)(?(t)(?P=t)|\\?(?P=q))",
    ),
    # Code: a token's name (token = "…", query_token = '…', refreshToken: "…", token = """…"""; not one of
    # NOT_SECRET_TOKENS) assigned a quoted literal that looks random, as an unquoted value must
    # (stop_token = "<|im_end|>" is none).
    (
        "secret-assignment",
        ("token",),
        r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))"
        + _NOT_SECRET_TOKEN_BEFORE
        + r"(?i:token)(?![A-Za-z0-9_])"
        r"(?:"
        + _ANNOTATED
        + r"|[ \t]*[=:])[ \t]*\\?(?P<q>\"\"\"|'''|[\"'])(?P<s>"
        + _RANDOM_VALUE
        + r")\\?(?P=q)",
    ),
    # Terraform: a variable named for a credential (variable "db_password" { … }), its default.
    (
        "secret-assignment",
        ("variable",),
        r"(?<![A-Za-z0-9_])variable[ \t]+\""
        + _CREDENTIAL_NAME
        + r"\"[ \t]*\{[^{}]*?\n[ \t]*default[ \t]*=[ \t]*"
        r"\"(?P<s>[^\"\r\n]+)\"",
    ),
    # PHP's define() of a credential's constant (wp-config.php's DB_PASSWORD, AUTH_KEY, …_SALT):
    # the quoted literal whatever it holds but its quote (WordPress's salts hold # & | < > and spaces).
    (
        "secret-assignment",
        ("define",),
        r"(?<![A-Za-z0-9_$>])(?i:define)[ \t]*\([ \t]*(?P<n>[\"'])[A-Z0-9_]*(?:PASSWORD|PASSWD|SECRET|TOKEN|_KEY|SALT)"
        r"(?P=n)[ \t]*,[ \t]*(?P<q>[\"'])(?P<s>(?:(?!(?P=q))[^\\\r\n]|\\.)+)(?P=q)",
    ),
    # A Kubernetes container's env entry in YAML (name: DB_PASSWORD, then value: … on the next
    # line), a name that ends in a credential's word (not MAX_TOKENS, SECRET_NAME); not a template
    # (<the token>, {{ .Values.key }}, $(KEY)).
    (
        "secret-assignment",
        ("name:",),
        r"name:[ \t]*[\"']?" + _CREDENTIAL_NAME + r"[\"']?[ \t]*\r?\n[ \t]+value:[ \t]*(?P<vq>\\?[\"'])?"
        r"(?P<s>(?(vq)(?:[^\"'\\\r\n]|\\[^\"'\r\n])+|[^\s\"'#<>{}\[$\\][^\s\"'#]*))(?(vq)(?P=vq))",
    ),
    # An ODBC connection string's Pwd= (Password= is an assignment below), its value in braces or
    # ending where the string's next part does (a ";"), or at its quote (escaped too: not the
    # backslash) or line's end if one word: a shell's "cd /x; PWD=/x ./configure …" is no
    # connection string.
    (
        "secret-assignment",
        ("pwd",),
        r"(?:(?<=;)|(?<=; ))(?i:pwd)[ \t]*=[ \t]*"
        r"(?P<s>\{[^}\r\n]*\}|[^;\s{\"'\\](?:[^;\s\"']*[^;\s\"'\\])?(?=\\*[\"']|[;\r\n]|$)"
        r"|[^;\s{\"'][^;\r\n\"']*(?=;))",
    ),
    # YAML: a block scalar's lines after a name of either unquoted shape below (token: |,
    # password: >-), whatever they hold: from the first line's indentation on, to the first line
    # indented less; not a key there (an empty value before the mapping's next key).
    (
        "secret-assignment",
        _NAME_ANCHORS,
        r"(?:" + _UNQUOTED_NAME + "|" + _LOWER_NAME + r")[ \t]*:[ \t]*[|>][1-9+\-]{0,2}(?:[ \t]+#[^\r\n]*)?"
        r"[ \t\r]*\n(?P<i>[ \t]+)(?![^\s:\"']*:(?:\s|$))(?P<s>\S(?:[^\r\n]*\S)?(?:[ \t\r]*\n(?P=i)[^\r\n]*\S)*)",
    ),
    # Python's triple-quoted literal over several lines assigned to such a name (password = """…""",
    # r'''…''' in a keyword argument, a dict's "password": """…"""), to its closing quotes, the
    # blanks inside them kept; the literal ends its expression. Not one whose quotes close another
    # literal (print("""… token = """) or """… token = """ then the next line's NEXT = """…"""):
    # what follows them is code.
    (
        "secret-assignment",
        _NAME_ANCHORS,
        r"(?:"
        + _UNQUOTED_NAME
        + "|"
        + _LOWER_NAME
        + r")(?:"
        + _ANNOTATED
        + r"|[ \t]*=|[\"'][ \t]*:)[ \t]*[rRbBuU]{0,2}(?P<q>\"\"\"|''')"
        r"(?=(?:(?!(?P=q))[^\n\\]|\\[^\n])*\n)(?![ \t]*[)\],;}+.])\s*"
        r"(?P<s>" + _TRIPLE_QUOTED_CHAR + r"(?:(?:(?!(?P=q))[^\\]|\\[\s\S])*?" + _TRIPLE_QUOTED_CHAR + r")?)"
        r"(?<!\s[=(\[{,:+])(?<![(\[{,])\s*(?P=q)(?=[ \t]*(?:[,)\]};#]|\r?\n|$))",
    ),
    # A quoted value over several lines (an .env file's PASSWORD="…" with a line break inside),
    # to its closing quote, which ends its line: the first line alone was taken, the rest kept.
    # (Not code from a quote in one literal to one in the next line's: "token:"+t then a="b".)
    (
        "secret-assignment",
        _NAME_ANCHORS,
        r"(?:" + _UNQUOTED_NAME + "|" + _LOWER_NAME + r")[ \t]*[=:][ \t]*(?P<q>[\"'])"
        r"(?P<s>[^\s\"'][^\"'\r\n]*\r?\n[^\"']*[^\s\"'])(?P=q)(?=[ \t]*(?:#[^\r\n]*)?(?:\r?\n|$))",
    ),
    (
        "secret-assignment",
        ("pass", "secret", "token", "api", "access", "private", "_key", "credential")
        + ("_pass", "_pwd", "sshpass", "rediscli_auth"),
        # (a password in any case: "login failed for bob, password=hunter22" in an exception's message)
        _UNQUOTED_ASSIGNMENT,
    ),
    # A credential option of a command in text (a shell tool's command, a script a tool runs):
    # --token=VALUE, --api-key VALUE (the option's name as in argv: not --max-tokens, --token-file or
    # --no-password). After a space, a value that looks random (a letter and a digit, 8 characters or
    # more), not prose ("use --password to log in"); never one the shell reads from a variable, nor a
    # template's ({password}, [MASKED]).
    (
        "secret-option",
        ("--",),
        r"(?<![^\s\"'(=])--(?!no-)(?:[A-Za-z0-9]+[-_])*(?i:token|secret|password|passwd|passphrase|api[-_]?key"
        r"|apikey|access[-_]?key|private[-_]?key|secret[-_]?key|auth[-_]?key|master[-_]?key|credentials?)"
        r"(?:=|[ \t]+(?=[^\s\"'\\;&|()<>`]*[0-9])(?=[^\s\"'\\;&|()<>`]*[A-Za-z])(?=[^\s\"'\\;&|()<>`]{8}))"
        r"(?P<s>" + _COMMAND_VALUE_FIRST + r"[^\s\"'\\;&|()<>`]*)",
    ),
    # YAML and INI: a lower-case or camelCase name of an API key, a client secret, a private key, a
    # secret or a token (api_key: …, clientSecret: …, webhook_secret: …, id_token: …, not one of
    # NOT_SECRET_TOKENS), its value unquoted. Code assigns such a name code (api_key =
    # args.key, apiKey: process.env.KEY): the value must look random, 16 characters or more with a
    # letter and a digit among its first 65 (looked for that far only: a run of such names glued
    # together, api_key=api_key=…, is not read to its end at each), no dot (but the full stop of a
    # sentence after it), not a snake_case name
    # (aws_session_token=s3_session_token) nor a class's CamelCase one, ending in a word
    # (private_key: Ed25519PrivateKey); after a colon, the rest of its line (a comment aside), not
    # a type in a signature (session_key: Ed25519Key, x).
    (
        "secret-assignment",
        ("api", "client", "access", "auth", "refresh", "session", "bearer", "secret", "private", "token"),
        _LOWER_ASSIGNMENT,
    ),
    # ~/.aws/credentials and ~/.aws/config (INI, names in lower case, values unquoted), and
    # aws configure set's NAME VALUE.
    (
        "aws-secret",
        ("aws_",),
        r"(?:aws_secret_access_key|aws_session_token|aws_security_token)(?:[\"']?\s*[=:][ \t]*[\"']?|[ \t]+)"
        r"(?P<s>[A-Za-z0-9/+=]{16,})",
    ),
    # Azure connection strings: AccountKey=… (storage), SharedAccessKey=… (Service Bus, Event Hubs).
    (
        "azure-key",
        ("accountkey", "sharedaccesskey"),
        r"(?i:AccountKey|SharedAccessKey)\s*=[ \t]*(?P<s>[A-Za-z0-9+/]{16,}={0,2})",
    ),
    # .netrc: "machine HOST login USER password SECRET" (over one line or several; with \\n escapes
    # inside a JSON string too).
    (
        "netrc-password",
        ("machine", "login"),
        r"(?<![A-Za-z0-9_])(?:machine|login)(?:\s|\\[nrt])+[^\s\\\"']+(?:\s|\\[nrt])+"
        r"(?:(?:login|account)(?:\s|\\[nrt])+[^\s\\\"']+(?:\s|\\[nrt])+)?"
        r"(?:password|passwd)(?:\s|\\[nrt])+(?P<s>[^\s\\\"']+)",
    ),
    (
        "header-credential",
        ("api", "token"),
        r"(?i:api-key|(?<=auth-)token|(?<=security-)token)[\"']?\s*:[ \t]*[\"']?(?P<s>[^\s\"',;]{6,})",
    ),
    # An Authorization header written in text under another scheme than Bearer, Basic or SigV4
    # (curl -H 'Authorization: Token …', GitHub's "token …", Discord's "Bot …"): a value with a digit,
    # not prose ("Authorization: required").
    (
        "header-credential",
        ("auth",),  # (an anchor other shapes have: each one is a pass over the text)
        _OTHER_AUTHORIZATION,
    ),
    ("cookie", ("cookie",), r"(?i:cookie)[\"']?\s*:[ \t]*[\"']?(?P<s>[^\r\n\"']{6,})"),
)

#: Where the first of some characters is looked for from each occurrence of a run (see _first).
_Reach = dict[re.Pattern[str], tuple[int, int]]


def _first(chars: re.Pattern[str], text: str, at: int, reach: _Reach) -> int:
    """Where the first of ``chars`` in ``text`` is from ``at`` on (the text's length: nowhere).
    ``reach`` keeps, by ``chars``, where it was last looked for from and what was found there: the
    same from every position up to it, so a run is read once, not from each of its occurrences."""
    since, end = reach.get(chars, (-1, -1))
    if not since <= at <= end:
        m = chars.search(text, at)
        end = m.start() if m is not None else len(text)
        reach[chars] = (at, end)
    return end


#: What an unquoted assignment's value cannot hold, and of that, what does not end one.
_NOT_UNQUOTED = compiled_later(r"[\s\"'#;&(){}\[\]<>,\\]", re.ASCII)
_NOT_AN_END = compiled_later(r"[({\[<>]")
#: What a lower-case assignment's value cannot hold, and of that, what does not end one (nor ``.``,
#: which may, nor ``:``, after which it is read otherwise).
_NOT_LOWER = compiled_later(r"[^A-Za-z0-9_\-+/=]", re.ASCII)
_NOT_A_LOWER_END = compiled_later(r"[^\s\"'#;&,)\]}\\.:]", re.ASCII)
#: What a URL's user info holds none of before its "@", and the "@".
_NOT_USERINFO = compiled_later(r"[\s@\"'<>\\]", re.ASCII)
_AUTHORIZATION_COLON = compiled_later(r"(?i:authorization):(?=[^\s\"',;])", re.ASCII)
_DIGIT_OR_NOT_VALUE = compiled_later(r"[0-9\s\"',;]", re.ASCII)
_SCHEME = compiled_later(r"[A-Za-z][A-Za-z0-9\-]*")


def _unquoted_fails(text: str, at: int, reach: _Reach) -> bool:
    # The first after the occurrence of what its value cannot hold does not end a value: no space
    # nor quote is before it (both end one), so the name, "=" or ":" and the value are, and the
    # value runs to it and fails there.
    return _NOT_AN_END.match(text, _first(_NOT_UNQUOTED, text, at, reach)) is not None


def _lower_fails(text: str, at: int, reach: _Reach) -> bool:
    # As _unquoted_fails: no space nor ":" (after which a value is read otherwise) before it, so
    # the name, "=" and the value are; nor "." (which may end a value) at it.
    return _NOT_A_LOWER_END.match(text, _first(_NOT_LOWER, text, at, reach)) is not None


def _userinfo_fails(text: str, at: int, reach: _Reach) -> bool:
    # The user info's user and password run from "://" to an "@" without one of _NOT_USERINFO
    # before it: the first of them after the occurrence is that "@", or the shape fails there.
    end = _first(_NOT_USERINFO, text, at, reach)
    return text[end : end + 1] != "@"


def _authorization_fails(text: str, at: int, reach: _Reach) -> bool:
    # With neither a space nor a quote about its ":", its value or its scheme starts right after:
    # a value holds a digit before its end (a space, a quote, a comma, a semicolon), a scheme is
    # a word that ends at a space or a tab.
    if _AUTHORIZATION_COLON.match(text, at) is None:
        return False
    at += len("authorization:")
    end = _first(_DIGIT_OR_NOT_VALUE, text, at, reach)
    if text[end : end + 1] not in (" ", "\t"):
        return not text[end : end + 1].isdigit()
    scheme = _SCHEME.match(text, at)  # (read to the next ":" at most: the next occurrence's)
    return scheme is None or scheme.end() != end


#: Shapes whose match at an occurrence of its anchor is known to fail without running it, where
#: it would read to the end of a long value first: a run of the anchor glued (password=password=…,
#: Authorization:Authorization:…, x://127.0.0.1:b/x://127.0.0.1:b/…) is one value to its end, read and failed at
#: each occurrence, quadratic in its length; now its end is found once (:func:`_first`). Each tells only where
#: matching would fail.
_DEAD_ENDS: dict[str, Callable[[str, int, _Reach], bool]] = {
    _UNQUOTED_ASSIGNMENT: _unquoted_fails,
    _LOWER_ASSIGNMENT: _lower_fails,
    _OTHER_AUTHORIZATION: _authorization_fails,
    _URL_CREDENTIAL: _userinfo_fails,
    _URL_USERINFO_PASSWORD: _userinfo_fails,
}

#: The built-in shapes searched for over the whole text that a text holding none of their literals
#: is not searched for (a search of the regex engine's tries every character; these are memchrs).
_SCAN_LITERALS: dict[str, tuple[str, ...]] = {_TWILIO_SID: _TWILIO_PREFIXES}

#: Built-in secret shapes as (kind, pattern), in the order they are tried.
PATTERNS: tuple[tuple[str, str], ...] = tuple((kind, p) for kind, _, p in _BUILTIN)

#: Kinds found by their context (a name, a scheme, a key) rather than by their shape: when the
#: value itself has a known shape (``OPENAI_API_KEY=sk-…``), that shape's kind names it.
_CONTEXT_KINDS = frozenset(
    {
        "bearer",
        "basic-auth",
        "registry-auth",
        "url-password",
        "url-credential",
        "command-password",
        "secret-option",
        "query-credential",
        "secret-field",
        "secret-assignment",
        "header-credential",
        "cookie",
        "json-path",
        "aws-secret",
        "azure-key",
        "netrc-password",
        "discord-webhook",
    }
)


def _same_secret(alone: str, together: str) -> bool:
    """Whether a secret of kind ``alone`` a list's item holds to its end, and one of kind
    ``together`` its text read on into the next item from the same place, are one secret: of one
    kind, or a value found by its context that the next item's text makes a known shape (as
    :meth:`Scrubber._refine` names it). Not a known shape alone that an assignment's value reads on
    from (``OPENAI_API_KEY=sk-…`` then ``AWS2_REGION=…``: the next line of an ``.env`` file)."""
    return alone == together or (alone in _CONTEXT_KINDS and together not in _CONTEXT_KINDS)


#: A placeholder (:func:`placeholder`), as a regular expression.
PLACEHOLDER_PATTERN = r"\[REDACTED:[a-z0-9-]+:[0-9a-f]{8}\]"
_PLACEHOLDER_RE = compiled_later(PLACEHOLDER_PATTERN)
_ENCODED_PLACEHOLDER = r"(?i:%5B)REDACTED(?i::|%3A)[a-z0-9-]+(?i::|%3A)[0-9a-f]{8}(?i:%5D)"
_TRAILING = compiled_later(r"[.,;:!?)\]}>]*")
#: A placeholder anywhere in a value a shape reads (text or percent-encoded): no secret's text. A
#: context rule (``&key=AIza….``) leaves a placeholder and trailing punctuation of a value of a known
#: shape (:meth:`Scrubber._refine`); a value that failed its shape whole (``Authorization: refresh``
#: and a private key) may pass it with the secret after it a placeholder: read as one value again,
#: a second scrub replaced the placeholder, and scrubbed recorded requests differed from live ones.
_PLACEHOLDER_INSIDE = compiled_later(PLACEHOLDER_PATTERN + "|" + _ENCODED_PLACEHOLDER)
#: A character before a secret that a shape may end at, refusing the secret's first character after
#: it and not a placeholder's bracket (see :meth:`Scrubber.find`): not a space, a quote, a bracket or
#: another character no shape takes in before a lookahead (``&`` after a query value is not one).
_GLUED_BEFORE = compiled_later(r"[^\s\"'`<>()\[\]{},;&#\\]")
#: A character after a secret that a shape may begin at, refusing the secret's last character before
#: it (``\bAKIA``, ``(?<![a-z])_KEY``): a letter, a digit or ``_``.
_GLUED_AFTER = compiled_later(r"\w", re.ASCII)
_PEM_BEGIN = "-----BEGIN"
_SPECIFIC_RE = compiled_later(
    "|".join(f"(?P<k{i}>{p})" for i, (kind, p) in enumerate(PATTERNS) if kind not in _CONTEXT_KINDS),
    re.ASCII,
)

#: Strings shorter than this are remembered with their scrubbed form (at most SHORT_ENTRIES of them).
SHORT_CHARS = 64
SHORT_ENTRIES = 32768
#: Strings at least this long are remembered with their scrubbed form (see :class:`Scrubber`).
CACHE_MIN_CHARS = 64
#: Strings longer than this are never remembered (their scan is cheap next to the memory).
CACHE_MAX_CHARS = 4 << 20
#: Total characters the string cache may hold (keys and changed values).
CACHE_BUDGET_CHARS = 64 << 20
#: Strings (and bytes) longer than CACHE_MAX_CHARS: how many of the last ones are remembered (held alive).
BIG_ENTRIES = 2
_Huge = TypeVar("_Huge", str, bytes)
#: How many of the last JSON lists scrubbed are kept to compare a new list with (see Scrubber.json).
LISTS_KEPT = 8
#: How many of the last results of Scrubber.json (and their lists) are known as already scrubbed.
RESULTS_KEPT = 64
#: How many distinct header lists :meth:`Scrubber.headers` remembers (an agent sends a few), and
#: the most text one of them may hold (an SDK's are 1-2 KB; h11 reads no header block over 16 KiB):
#: an agent that sends a big header of another value at each call is not held 256 times over.
HEADER_LISTS_KEPT = 256
HEADER_LIST_MAX_CHARS = 16 << 10
#: How many HTTP records built by the capture layer (:meth:`Scrubber.http_record`) are known as
#: scrubbed until they are logged: more calls in flight at once than this are scrubbed again.
RECORDS_KEPT = 256
#: The fields of an HTTP record that :meth:`Scrubber.http_record` is handed already scrubbed.
_SCRUBBED_PARTS = frozenset({"url", "headers", "body", "chunks"})


#: Types :meth:`Scrubber.json` hands back as they are (a ``bool`` is an ``int``, but not its type).
_SCALARS = frozenset({int, float, bool})


def _json_string(raw: bytes) -> str:
    """The text of a JSON string token's inside, as orjson writes it (escapes only where needed)."""
    return orjson.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode()


def _item_ends(items: Sequence[Any], known: Sequence[int] = ()) -> list[int]:
    """Where each item of ``items`` ends in their JSON list as orjson writes it (the offset of the
    ``,`` or ``]`` after it), those of the first ``len(known)`` given."""
    ends = list(known)
    pos = ends[-1] if ends else 1
    for v in items[len(ends) :]:
        pos += len(orjson.dumps(v, default=json_default)) + (1 if ends else 0)
        ends.append(pos)
    return ends


#: Items of a list, as the objects they were, and their digests (see :meth:`Scrubber.list_digests`).
_Digests = tuple[tuple[Any, ...], list[str]]


def _same_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items ``a`` and ``b`` have in common as the same objects, where those are
    a run from the start (lists that share items this way share a prefix: a resent conversation,
    with its last items changed or not); 0 where they are not."""
    n = shortest = min(len(a), len(b))
    if not n or a[0] is not b[0]:
        return 0
    if a[n - 1] is not b[n - 1]:  # (the last shared item is found by bisection, then checked)
        lo, hi = 1, n - 1  # a[lo - 1] is b[lo - 1]; a[hi] is not b[hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if a[mid - 1] is b[mid - 1]:
                lo = mid
            else:
                hi = mid - 1
        n = lo
    return n if all(map(operator.is_, a if n == shortest else a[:n], b)) else 0


def _same_objects(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


class _Scrubbed:
    """A list the scrubber scrubbed lately: its JSON (:meth:`data`), its scrubbed items (``out``:
    the scrubber's own, or, ``owned`` false, the caller's items of a list that was clean as given),
    and where each item ends in its JSON (:meth:`ends`). ``given``: the caller's list, kept where it
    was parsed data (which nobody changes: see :meth:`Scrubber.json`); the JSON and the ends of a
    list taken over by identity are worked out from it when first needed. ``finite``: its items hold
    no NaN or infinite float. ``digests``: the items ``out`` held (as objects) when their
    digests were asked for, and those digests (:meth:`Scrubber.list_digests`); ``base``: the
    ``digests`` of the list some of its items were taken from, when those were known, and which:
    ``(digests, start, stop)``, items ``start`` to ``stop`` (a prefix, or all after the first)."""

    __slots__ = ("_data", "_ends", "first", "out", "owned", "finite", "given", "digests", "base")

    def __init__(
        self,
        data: bytes | None,
        ends: list[int] | None,
        out: list[Any],
        *,
        owned: bool,
        finite: bool,
        given: list[Any] | None = None,
        base: tuple[_Digests, int, int] | None = None,
        first: bytes | None = None,
    ) -> None:
        self._data, self._ends, self.out, self.owned = data, ends, out, owned
        self.finite, self.given, self.base = finite, given, base
        #: The JSON of the first item, where the list's own is not written (see :meth:`may_share`).
        self.first = first
        self.digests: _Digests | None = None

    def data(self) -> bytes:
        if self._data is None:
            self._data = orjson.dumps(self.given, default=json_default)
        return self._data

    def may_share(self, data: bytes) -> bool:
        """Whether the list written as ``data`` may begin with items of this one: false where
        their first items differ, told without writing this list's JSON where it is not yet."""
        if self._data is not None or self.first is None:
            return True
        return data.startswith(self.first, 1)

    def ends(self) -> list[int]:
        if self._ends is None:
            self._ends = _item_ends(self.given if self.given is not None else self.out)
        return self._ends


def _first_json(items: list[Any]) -> bytes | None:
    """The JSON of a list's first item (:attr:`_Scrubbed.first`), None where orjson cannot write it
    (an integer beyond 64 bits, which a parsed body may hold: :func:`~forkpoint.capture.decoding.loads_exact`)."""
    try:
        return orjson.dumps(items[0], default=json_default)
    except TypeError:
        return None


def _shared_items(data: bytes, old: bytes, ends: list[int]) -> int:
    """How many leading items two JSON lists written by orjson (``data``, ``old``) have in common,
    by their exact JSON; ``ends[i]`` is where item ``i`` of ``old`` ends (the offset of the ``,``
    or ``]`` after it)."""

    def same(i: int) -> bool:
        e = ends[i]
        return len(data) > e and data[e] in b",]" and data.startswith(old[:e])

    if not ends or same(len(ends) - 1):
        return len(ends)
    lo, hi = 0, len(ends) - 1  # same(hi) is false; find the first i with same(i) false
    if not same(0):
        return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same(mid):
            lo = mid
        else:
            hi = mid
    return lo + 1


def _unescaped(secret: str) -> str:
    """The secret as it was before JSON escaping (a PEM key sent inside a JSON string has ``\\n``
    where the file had newlines), so both forms get the same placeholder."""
    for _ in range(3):
        if "\\" not in secret:
            break
        try:
            plain = orjson.loads(b'"' + secret.encode("utf-8", "surrogatepass") + b'"')
        except (orjson.JSONDecodeError, UnicodeEncodeError):
            break
        if not isinstance(plain, str) or plain == secret:
            break
        secret = plain
    return secret


def placeholder(kind: str, secret: str | bytes) -> str:
    """The deterministic stand-in for ``secret`` of the given ``kind``: eight hex digits of the
    SHA-256 of the secret (its UTF-8 bytes, JSON escapes undone)."""
    text = bytes(secret).decode("utf-8", "surrogateescape") if not isinstance(secret, str) else secret
    text = _unescaped(text)
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")
    return f"[REDACTED:{kind}:{hashlib.sha256(raw).hexdigest()[:8]}]"


#: A ``multipart/form-data`` content type's boundary, and a part's field name (its
#: ``Content-Disposition``).
_BOUNDARY = compiled_later(r'(?i)\bboundary=("[^"]+"|[^;\s]+)')
_FORM_NAME = compiled_later(r'(?i)content-disposition:[ \t]*form-data;[^\r\n]*?\bname="([^"\r\n]*)"')


def holds_placeholder(value: Any) -> bool:
    """True when JSON-like ``value`` (strings, bytes, lists, dicts) holds a placeholder this scrubber
    wrote: a recorded answer that, served back, hands the program the placeholder of a secret."""
    try:  # (in C: every served answer is looked at)
        text = orjson.dumps(value)
    except TypeError:  # bytes in it (a binary chunk): walked
        pass
    else:
        return b"[REDACTED:" in text and _PLACEHOLDER_RE.search(text.decode("utf-8", "replace")) is not None
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if "[REDACTED:" in v and _PLACEHOLDER_RE.search(v):
                return True
        elif isinstance(v, bytes | bytearray):
            if b"[REDACTED:" in v and _PLACEHOLDER_RE.search(bytes(v).decode("utf-8", "replace")):
                return True
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return False


# A placeholder, as text or percent-encoded (a form field, a query value), its kind in group 1 or 2.
_PLACEHOLDER_DIGEST_RE = compiled_later(
    r"(\[REDACTED:[a-z0-9-]+):[0-9a-f]{8}\]|(%5BREDACTED%3A[a-z0-9-]+)%3A[0-9a-f]{8}%5D", re.IGNORECASE
)


def _kind_only(m: re.Match[str]) -> str:
    return f"{m.group(1)}]" if m.group(1) else f"{m.group(2)}%5D"


def secrets_by_kind(value: Any) -> Any:
    """JSON-like ``value`` with every placeholder's digest left out (``[REDACTED:jwt]``): what a
    match key covers of a secret, so that a credential minted afresh at every run (a service
    account's signed JWT, a login's password) matches the recorded one, as credential headers and
    query parameters do by being left out. ``value`` itself when it holds none (the usual case:
    one C-level look), and otherwise every unchanged part kept as the same object."""
    try:
        text = orjson.dumps(value)
    except TypeError:  # (bytes or an int past 64 bits in it: walked)
        pass
    else:
        if b"REDACTED" not in text:
            return value
    return _by_kind(value)


def secret_placeholders(value: Any) -> list[str]:
    """The placeholders JSON-like ``value`` holds (text or percent-encoded), digests and all, in
    order: which secrets a request sent, where its match key says only of what kinds."""
    if isinstance(value, str):
        return [m.group(0) for m in _PLACEHOLDER_DIGEST_RE.finditer(value)] if "REDACTED" in value else []
    if isinstance(value, dict):  # (by key, as the match key reads an object: not in the order it was built)
        value = [v for _, v in sorted(value.items(), key=lambda item: str(item[0]))]
    if isinstance(value, list | tuple):
        return [p for v in value for p in secret_placeholders(v)]
    return []


def _by_kind(value: Any) -> Any:
    if isinstance(value, str):
        return _PLACEHOLDER_DIGEST_RE.sub(_kind_only, value) if "REDACTED" in value else value
    if isinstance(value, dict):
        items = {k: _by_kind(v) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, list):
        new = [_by_kind(v) for v in value]
        return value if all(a is b for a, b in zip(new, value, strict=True)) else new
    return value


def _is_placeholder(value: str) -> bool:
    if _PLACEHOLDER_RE.fullmatch(value):
        return True
    return "%" in value and _PLACEHOLDER_RE.fullmatch(unquote(value)) is not None


def _looks_random(token: str) -> bool:
    """Whether ``token`` looks like a key's random text: it has a digit, or is long and mixes cases
    (a bearer token; "Bearer authentication" in prose is not a credential)."""
    if any(c.isdigit() for c in token):
        return True
    return len(token) >= 20 and token.lower() != token and token.upper() != token


_PRIVATE_KEY_BEGIN = compiled_later_bytes(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")


def _valid_private_key(value: str) -> bool:
    """A PEM private key, or its base64 (``LS0tLS1CRUdJTi``: ``-----BEGIN``) whose first line is a
    private key's: not a certificate's (``client-certificate-data``, public)."""
    if not value.startswith("LS0t"):
        return True
    raw = _unbase64(value.replace("\r", "").replace("\n", "")[:64])
    return raw is not None and _PRIVATE_KEY_BEGIN.match(raw) is not None


def _valid_basic(value: str) -> bool:
    """Basic credentials are base64 of ``user:password``."""
    raw = _unbase64(value)
    return raw is not None and b":" in raw


def _valid_registry_auth(value: str) -> bool:
    """Docker's ``auth`` is base64 of ``user:password`` text: not a word that decodes to bytes with a
    colon among them (an ``"auth": "…"`` that names a scheme or a mode)."""
    raw = _unbase64(value)
    return raw is not None and raw.isascii() and raw.decode().isprintable() and raw.find(b":") > 0


def _unbase64(value: str) -> bytes | None:
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def basic_credentials(value: str) -> str | None:
    """The ``user:password`` a ``Basic`` authorization header's ``value`` carries, decoded (what a
    client sends for ``auth=(user, password)`` or a URL's ``user:password@``), or None."""
    scheme, _, token = value.strip().partition(" ")
    raw = _unbase64(token.strip()) if scheme.lower() == "basic" else None
    return raw.decode("utf-8", "replace") if raw is not None else None


_COMMAND_VALUE_START = compiled_later(_COMMAND_VALUE_FIRST)


def _valid_command_password(secret: str) -> bool:
    """Not what the shell expands or a template holds (:data:`_COMMAND_VALUE_FIRST`): refused, not
    looked for further on, so the command's first -u or -p is its only one, as once scrubbed."""
    return _COMMAND_VALUE_START.match(secret) is not None


_VALIDATORS = {
    "private-key": _valid_private_key,
    "bearer": _looks_random,
    "basic-auth": _valid_basic,
    "registry-auth": _valid_registry_auth,
    "command-password": _valid_command_password,
}


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rules:
    """User rules, on top of the built-in ones (which cannot be turned off).

    ``patterns``: ``(kind, regex)`` pairs; the whole match is replaced, or its group ``s`` if it has
    one. ``json_paths``: JSONPath expressions (``$.a.b``, ``$.list[0]``, ``[*]``, ``.*``, ``$..key``)
    evaluated against each payload (a request or response body, tool arguments, a tool result, note
    data, a checkpoint's carried context); the selected values are replaced whatever their type.
    ``headers``: more header names to drop. ``query_params``: more credential query parameters.
    ``source`` says where they were read from (for messages).
    """

    patterns: tuple[tuple[str, str], ...] = ()
    json_paths: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    query_params: tuple[str, ...] = ()
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The rules as JSON data (without ``source``)."""
        return {
            "patterns": [list(p) for p in self.patterns],
            "json_paths": list(self.json_paths),
            "headers": list(self.headers),
            "query_params": list(self.query_params),
        }

    def digest(self) -> str:
        """SHA-256 of the canonical rules, built-in pattern set included: what a header records."""
        data = {"builtin": [list(p) for p in PATTERNS], **self.to_json()}
        return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _compile_user_pattern(kind: str, pattern: str) -> re.Pattern[str]:
    """A user regex, checked: a valid kind name, a valid regex that cannot match the empty string."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", kind):
        raise RuleError(f"redaction kind {kind!r}: use lower-case letters, digits and '-'")
    try:
        compiled = re.compile(pattern, re.ASCII)
    except re.error as exc:
        raise RuleError(f"redaction pattern {pattern!r} is not a valid regex: {exc}") from None
    if compiled.fullmatch(""):
        raise RuleError(f"redaction pattern {pattern!r} matches the empty string")
    if any(compiled.search(d) for d in _DIGESTS):  # (the log writer scrubs every field it writes)
        raise RuleError(
            f"redaction pattern {pattern!r} matches a hex digest, as forkpoint's own hashes are (match keys, "
            "checkpoint fingerprints, blob names): a session recorded with it would not verify or restore. "
            "Give it the context the secret comes in, e.g. 'token=(?P<s>[0-9a-f]{64})' (only group s is replaced)"
        )
    return compiled


#: Digests of the kinds forkpoint writes into every session (SHA-256, and git's SHA-1), to check a
#: user's pattern against.
_DIGESTS = (hashlib.sha256(b"forkpoint").hexdigest(), hashlib.sha1(b"forkpoint").hexdigest())  # noqa: S324


# --------------------------------------------------------------------------- the scrubber


#: From this size on (bytes of JSON), a list is first checked for anything to scrub in its JSON text
#: (``Scrubber._clean``) before it is walked.
CLEAN_IN_TEXT_MIN = 1 << 20
#: One JSON string in orjson's output (the text between its quotes), and ``:`` after a key.
_STRING_TOKEN = compiled_later_bytes(rb'"([^"\\]*+(?:\\.[^"\\]*+)*+)"(:?)')

#: Stands in :attr:`Scrubber._pats` for a pattern not compiled yet (see ``Scrubber._pattern``).
_UNCOMPILED = re.compile("(?!)")


def _as_text(data: bytes) -> tuple[str, bool]:
    """``data`` as the text the rules read, and whether it is UTF-8: data that is not (binary, or
    text with a stray byte) is read as Latin-1, a character a byte, whose spans are byte offsets. A
    secret is ASCII, and reads the same either way; UTF-8 with escapes would take 2 to 4 bytes a
    character (a 50 MB binary download took 860 MB to record)."""
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("latin-1"), False


#: Characters lowercased at a time in non-ASCII text (:func:`_anchor_text`).
_LOWER_SLICE = 1 << 18


def _anchor_text(text: str) -> str:
    """``text`` lowercased character for character, to look for the (ASCII) anchors in. A long
    non-ASCII text is lowercased through bytes when it is Latin-1 (binary data read a byte a
    character), else a slice at a time: ``str.lower`` sets aside 12 bytes a character while it
    works. U+0130 lowercases to two characters: it is kept out of the way."""
    if text.isascii():
        return text.lower()
    if "\u0130" in text:
        text = text.replace("\u0130", "\0")
    if len(text) <= _LOWER_SLICE:
        return text.lower()
    try:
        return text.encode("latin-1").lower().decode("latin-1")
    except UnicodeEncodeError:
        return "".join([text[i : i + _LOWER_SLICE].lower() for i in range(0, len(text), _LOWER_SLICE)])


class Scrubber:
    """Built-in rules plus ``rules``, compiled. Thread-safe.

    Finding secrets: every built-in pattern starts at an *anchor*, a short literal (``sk-``,
    ``-----begin``, ``password``, ``://``…); the text is searched for the anchors (lower-cased, with
    ``str.find``, which runs at memory speed), each pattern is tried only where one of its anchors
    occurs, and of the matches the leftmost wins (at one position, the earliest pattern), then
    scanning goes on after it. User regexes (and the few built-in shapes without anchors) are searched over the whole text.

    Strings are remembered with their scrubbed form in bounded caches (short ones, under
    :data:`SHORT_CHARS`, by count; longer ones up to :data:`CACHE_MAX_CHARS` by total size), so an
    agent that resends its whole history at every turn, and a request scrubbed when captured, when
    matched and when logged, pays for scanning each message once, not once per use; the last
    :data:`BIG_ENTRIES` huge strings too, so a 100 MB tool result scrubbed by the tool wrapper is
    not scanned again when it is logged (``cache=False`` turns all that off, for benchmarks).
    """

    def __init__(self, rules: Rules | None = None, *, cache: bool = True) -> None:
        self.rules = rules or Rules()
        r = self.rules
        #: Header names whose values are credentials (the signing headers' are derived, no secret).
        self.credential_names = SECRET_HEADERS | {h.lower() for h in r.headers}
        given = SECRET_QUERY_PARAMS | {q.lower() for q in r.query_params}
        # (access_token and access-token: a server reads either spelling)
        self.query_params = (
            given | {q.replace("_", "-") for q in given} | {q.replace("-", "_") for q in given}
        )
        self.paths = tuple(jsonpath.parse(p) for p in r.json_paths)
        table: list[tuple[str | None, tuple[str, ...], str]] = [
            (None, ("[redacted:",), PLACEHOLDER_PATTERN),
            # Percent-encoded in a URL, its colons too or not (requests and aiohttp leave them):
            # ":ccaaeca8%5D&n=b" would read as a key's value and swallow the query after it.
            (None, ("%5bredacted",), _ENCODED_PLACEHOLDER),
        ]
        table.extend(_BUILTIN)
        names = sorted(self.query_params, key=len, reverse=True)
        table.append(
            (
                "query-credential",
                ("?", "&", ";"),
                rf"[?&;](?i:{'|'.join(re.escape(q) for q in names)})=(?P<s>[^&\s#\"'<>\\]+)",
            )
        )
        for steps in self.paths:
            if (
                len(steps) == 1
                and steps[0][0] == "desc"
                and isinstance(steps[0][1], str)
                and steps[0][1] != "*"
            ):
                name = steps[0][1]
                table.append(
                    (
                        "json-path",
                        (name.lower(),),
                        rf"(?<=[\"']){re.escape(name)}\\?[\"']\s*:\s*\\?[\"'](?P<s>[^\"'\\\r\n]+)\\?[\"']",
                    )
                )
        self._kinds: list[str | None] = []
        # An anchored pattern is compiled when its anchor first occurs (_pattern): most never do in
        # a process, and compiling them all costs more than the rest of a short recording's start.
        self._pats: list[re.Pattern[str]] = []
        self._sources: list[str] = []
        anchors: dict[str, list[int]] = {}
        for kind, lits, pattern in table:
            if lits:
                for lit in lits:
                    anchors.setdefault(lit, []).append(len(self._pats))
                self._kinds.append(kind)
                self._pats.append(_UNCOMPILED)
                self._sources.append(pattern)
        # (by pattern, None for most: indexed, not looked up, at every occurrence of an anchor)
        self._dead_ends = [_DEAD_ENDS.get(src) for src in self._sources]
        # A pattern anchored by one-character literals alone (the query credential's ``?``, ``&``
        # and ``;``) is searched for by the regex engine and kept where it starts at one of them:
        # found and matched at each occurrence instead, it cost seconds on binary data, where one
        # byte in 85 is one of those three.
        long_ = {i for lit, ids in anchors.items() if len(lit) > 1 for i in ids}
        searched = {i for lit, ids in anchors.items() if len(lit) == 1 for i in ids} - long_
        self._searched_chars = {
            i: frozenset(lit for lit, ids in anchors.items() if i in ids) for i in sorted(searched)
        }
        self._anchors = [
            (lit, kept)
            for lit, ids in anchors.items()
            if (kept := tuple(i for i in ids if i not in searched))
        ]
        # (each anchor's characters, and all of them: see _find_once)
        self._anchor_chars = tuple(frozenset(lit) for lit, _ in self._anchors)
        self._anchor_alphabet = "".join(sorted(frozenset().union(*self._anchor_chars)))
        # One pass over a short text says whether any anchor occurs in it at all (cheaper, there,
        # than looking for each anchor in turn; on long texts it is the other way round).
        self._any_anchor = re.compile(
            "|".join(re.escape(lit) for lit in sorted(anchors, key=len, reverse=True))
        )
        self._scan: list[int] = []  # searched over the whole text: these come last (see find)
        self._scan_literals: dict[int, tuple[str, ...]] = {}  # (built-in ones: _SCAN_LITERALS)
        for kind, lits, pattern in table:
            if not lits:
                if pattern in _SCAN_LITERALS:
                    self._scan_literals[len(self._pats)] = _SCAN_LITERALS[pattern]
                self._scan.append(len(self._pats))
                self._kinds.append(kind)
                self._pats.append(re.compile(pattern, re.ASCII))
                self._sources.append(pattern)
        for kind, pattern in r.patterns:
            self._scan.append(len(self._pats))
            self._kinds.append(kind)
            self._pats.append(_compile_user_pattern(kind, pattern))
            self._sources.append(pattern)
        self._has_s = [
            p.groupindex.get("s") is not None if p is not _UNCOMPILED else "(?P<s>" in source
            for p, source in zip(self._pats, self._sources, strict=True)
        ]
        self._cache_on = cache
        self._cache: dict[str, str] = {}
        self._cache_chars = 0
        self._short: dict[str, str] = {}
        #: Header lists scrubbed lately, by their pairs (of text alone) and ``request``: see headers().
        self._headers: dict[tuple[tuple[Any, ...], bool], list[list[str]]] = {}
        self._big: dict[str | builtins.bytes, str | builtins.bytes] = {}
        self._file_cache: dict[bytes, bytes | None] = {}
        self._file_cache_bytes = 0
        self._key_cache: dict[str, bool] = {}
        # Items of JSON lists by their JSON, and the items this scrubber returned (by id, held);
        # the last lists scrubbed (their JSON, where each item ends in it, their scrubbed items);
        # the last results of json() and their lists (by id, held): see json().
        self._items: dict[builtins.bytes, Any] = {}
        self._items_bytes = 0
        self._returned: dict[int, Any] = {}
        self._digests: dict[int, str] = {}  # of items in _returned: see item_digest()
        self._lists: deque[_Scrubbed] = deque(maxlen=LISTS_KEPT)
        self._results: dict[int, Any] = {}
        self._records: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # -- finding

    def _context_kind(self, kind: str, secret: str) -> str:
        if kind in _CONTEXT_KINDS:
            m = _SPECIFIC_RE.fullmatch(secret)
            if m is not None and m.lastgroup:
                return PATTERNS[int(m.lastgroup[1:])][0]
        return kind

    def _refine(self, kind: str, start: int, end: int, text: str) -> tuple[int, int, str]:
        """A value found by its context that is a known shape (``x-api-key: sk-ant-…``) is named by
        that shape; trailing punctuation after the shape ("…key!") is not part of it, and a shape
        that reads on past the value is taken whole (``PRIVATE_KEY=-----BEGIN … KEY-----``: the
        value ends at the first space, the PEM key at its END line)."""
        if kind not in _CONTEXT_KINDS:
            return start, end, kind
        # A PEM key, the one shape that holds what ends a value (a space), starting inside the value
        # (``password=password=-----BEGIN …``): the value took its place, its body was never read.
        pem = text.find(_PEM_BEGIN, start + 1, end)
        if pem >= 0 and (m := _SPECIFIC_RE.match(text, pem)) is not None and m.end() > end:
            return start, m.end(), "private-key"
        m = _SPECIFIC_RE.match(text, start)
        if m is None or m.end() <= end:
            m = _SPECIFIC_RE.match(text, start, end)
        if m is not None and m.lastgroup and (m.end() > end or _TRAILING.fullmatch(text, m.end(), end)):
            return start, m.end(), PATTERNS[int(m.lastgroup[1:])][0]
        return start, end, kind

    def _pattern(self, i: int) -> re.Pattern[str]:
        pat = self._pats[i] = re.compile(self._sources[i], re.ASCII)
        return pat

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """Spans ``(start, end, kind)`` of every secret in ``text``, in order, non-overlapping.

        A secret glued to another (``Basic dXNlcjpwYXNz=AKIA…``: the base64 does not end before
        an ``A``) may be a secret only once its neighbour is a placeholder, whose brackets end any
        shape: what the scrubbed text holds then is found here too, so that scrubbing twice gives
        what scrubbing once does (a scrubbed recorded request must equal a scrubbed live one).

        An escaped line break or tab (``\\n`` in JSON kept as text, a ``repr``) reads as the
        whitespace it stands for: its letter, glued to a secret that starts the next line, hid that
        secret from every shape's left edge."""
        if "\\" in text:
            # (as long: the spans are those of the text given; the break where the backslash was,
            # so a value running to its line's end never takes half an escape)
            text = _ESCAPED_SPACE.sub(lambda m: _UNESCAPED[m.group()[1]] + " ", text)
        spans, glued = self._find_once(text)
        while glued:
            # The text as scrubbed, and where each stretch between placeholders is in it and in text.
            out: list[str] = []
            clear: list[tuple[int, int, int]] = []  # (start in the scrubbed text, end there, start in text)
            at = pos = 0
            for start, end, kind in [*spans, (len(text), len(text), "")]:
                clear.append((at, at + start - pos, pos))
                out.append(text[pos:start])
                ph = placeholder(kind, text[start:end]) if kind else ""
                out.append(ph)
                at += start - pos + len(ph)
                pos = end
            new = []
            starts = [c[0] for c in clear]
            again, glued = self._find_once("".join(out))
            for a, b, kind in again:
                c0, c1, orig = clear[bisect.bisect_right(starts, a) - 1]
                if c0 <= a and b <= c1:  # (one that takes a placeholder in is not a secret's text)
                    new.append((a - c0 + orig, b - c0 + orig, kind))
            if not new:
                break
            spans = sorted(spans + new)
        return spans

    def _find_once(self, text: str) -> tuple[list[tuple[int, int, str]], bool]:
        """:meth:`find`'s spans of one pass over ``text``, and whether one of them is glued to what
        is beside it outside its shape's match (``AKIA…`` after ``=``: not a query value after its
        ``?token=``, which is the shape's own).

        Candidates are matched in the order of where they start, an anchored pattern at an
        occurrence of its anchor only once scanning has come to it, and none inside a secret taken:
        matched at every occurrence first, a run of glued anchors (``password=`` 20,000 times) was
        read to its end at each, quadratic in its length. A shape known to fail at an occurrence
        (:data:`_DEAD_ENDS`) is not matched there."""
        if not text:
            return [], False
        low = _anchor_text(text)
        pats = self._pats
        heap: list[tuple[int, int, int, re.Match[str]]] = []  # (start, pattern, tie, match)
        ahead: list[tuple[int, int]] = []  # (where an anchor occurs next, its index in _anchors)
        reach: _Reach = {}
        dead_ends = self._dead_ends
        if len(low) >= SHORT_CHARS or self._any_anchor.search(low) is not None:
            # An anchor with a character the text lacks is not in it: a search for each of the
            # anchors' characters (41, a memchr each) rules out most anchors (in code, 56-69 of 72),
            # where a search for each anchor is a slower pass of its own.
            alphabet = self._anchor_alphabet
            chars = set(itertools.compress(alphabet, map(low.__contains__, alphabet)))
            ahead = [
                (p, k)
                for k in itertools.compress(
                    range(len(self._anchors)), map(chars.issuperset, self._anchor_chars)
                )
                if (p := low.find(self._anchors[k][0])) >= 0
            ]
            heapq.heapify(ahead)
            for i, starts in self._searched_chars.items():
                # (a text without its characters: a memchr each, where a search tries every one)
                if not any(map(low.__contains__, starts)):
                    continue
                m = self._next_searched(i, text, low, 0)
                if m is not None:
                    heap.append((m.start(), i, len(heap), m))
        for i in self._scan:
            literals = self._scan_literals.get(i)
            if literals is not None and not any(map(text.__contains__, literals)):
                continue
            m = pats[i].search(text)
            if m is not None:
                heap.append((m.start(), i, len(heap), m))
        heapq.heapify(heap)
        tie = len(heap)
        out: list[tuple[int, int, str]] = []
        glued = False
        pos = 0
        first_scan = len(pats) - len(self._scan)
        while True:
            # Every anchor up to the next candidate is matched first: the leftmost match wins.
            while ahead and (not heap or ahead[0][0] <= heap[0][0]):
                p, k = heapq.heappop(ahead)
                lit, ids = self._anchors[k]
                if p >= pos:
                    for i in ids:
                        dead = dead_ends[i]
                        if dead is not None and dead(text, p, reach):
                            continue
                        pat = pats[i]
                        if pat is _UNCOMPILED:
                            pat = self._pattern(i)
                        m = pat.match(text, p)
                        if m is not None:
                            heapq.heappush(heap, (p, i, tie, m))
                            tie += 1
                p = low.find(lit, max(p + 1, pos))
                if p >= 0:
                    heapq.heappush(ahead, (p, k))
            if not heap:
                break
            start, i, _, m = heapq.heappop(heap)
            # (where a pattern searched over the whole text looks on: after this match, or after
            # the secret taken that this one started inside of)
            resume = max(m.end(), start + 1) if start >= pos else pos
            if start >= pos:
                if self._kinds[i] is None:  # a placeholder: never scrubbed again
                    pos = m.end()
                elif (span := self._span(i, m, text)) is not None:
                    a, b, _ = span
                    out.append(span)
                    glued = glued or bool(
                        (a == start and a and _GLUED_BEFORE.match(text, a - 1))
                        or (b >= m.end() and _GLUED_AFTER.match(text, b))
                    )
                    pos = max(resume, b)  # (past a shape the match's value is: _refine)
            nxt = None
            if i >= first_scan:
                nxt = pats[i].search(text, resume)
            elif i in self._searched_chars:  # every match of it from the next character on
                nxt = self._next_searched(i, text, low, max(start + 1, pos))
            if nxt is not None:
                heapq.heappush(heap, (nxt.start(), i, tie, nxt))
                tie += 1
        return out, glued

    def _next_searched(self, i: int, text: str, low: str, at: int) -> re.Match[str] | None:
        """The first match at or after ``at`` of the pattern ``i`` anchored by one-character
        literals that starts at one of them (where matching at each occurrence would find it)."""
        pat = self._pats[i]
        if pat is _UNCOMPILED:
            pat = self._pattern(i)
        chars = self._searched_chars[i]
        m = pat.search(text, at)
        while m is not None and low[m.start() : m.start() + 1] not in chars:
            m = pat.search(text, m.start() + 1)
        return m

    def _span(self, i: int, m: re.Match[str], text: str) -> tuple[int, int, str] | None:
        """The secret the match ``m`` of pattern ``i`` holds, ``(start, end, kind)``, or None when
        its value is empty, a placeholder or refused by its kind's check."""
        kind = cast(str, self._kinds[i])
        if self._has_s[i] and m.start("s") >= 0:
            a, b = m.start("s"), m.end("s")
        else:
            a, b = m.start(), m.end()
        secret = text[a:b]
        check = _VALIDATORS.get(kind)
        if (
            not secret
            or _is_placeholder(secret)
            or ("REDACTED" in secret and _PLACEHOLDER_INSIDE.search(secret))
            or (check is not None and not check(secret))
        ):
            return None
        return self._refine(kind, a, b, text)

    # -- text and bytes

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by its placeholder."""
        n = len(text)
        if not self._cache_on:
            return self._replace(text)
        if n < SHORT_CHARS:
            hit = self._short.get(text)
            if hit is None:
                hit = self._replace(text)
                if len(self._short) >= SHORT_ENTRIES:
                    self._short.clear()
                self._short[text] = hit
            return hit
        if CACHE_MIN_CHARS <= n <= CACHE_MAX_CHARS:
            hit = self._cache.get(text)
            if hit is None:
                hit = self._replace(text)
                self._remember(text, hit)
            return hit
        if n > CACHE_MAX_CHARS:
            return self._huge(text, self._replace)
        return self._replace(text)

    def _huge(self, value: _Huge, scrub: Callable[[_Huge], _Huge]) -> _Huge:
        """``scrub(value)`` for a string or bytes longer than :data:`CACHE_MAX_CHARS`, remembered for
        the last :data:`BIG_ENTRIES` of them: a tool's result is scrubbed when the call returns,
        then in the event that logs it. A scrubbed form that differs is not taken for its own: a
        second pass may find more (``password="hunter2#tail"`` leaves ``#tail`` to it)."""
        hit = self._big.get(value)
        if hit is None:
            hit = scrub(value)
            with self._lock:
                while len(self._big) >= BIG_ENTRIES:
                    self._big.pop(next(iter(self._big)))
                self._big[value] = hit
        return cast(_Huge, hit)

    def _replace(self, text: str) -> str:
        spans = self.find(text)
        if not spans:
            return text
        out: list[str] = []
        pos = 0
        for start, end, kind in spans:
            out.append(text[pos:start])
            out.append(placeholder(kind, text[start:end]))
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def _remember(self, text: str, result: str) -> None:
        cost = len(text) + (len(result) if result is not text else 0)
        with self._lock:
            if text in self._cache:
                return
            while self._cache and self._cache_chars + cost > CACHE_BUDGET_CHARS:
                old = next(iter(self._cache))
                old_result = self._cache.pop(old)
                self._cache_chars -= len(old) + (len(old_result) if old_result is not old else 0)
            self._cache[text] = result
            self._cache_chars += cost

    def bytes(self, data: bytes) -> bytes:
        """``data`` scrubbed as UTF-8 text; data that is not UTF-8 (binary) as bytes (:func:`_as_text`)."""
        raw = bytes(data)
        if self._cache_on and len(raw) > CACHE_MAX_CHARS:
            return self._huge(raw, self._bytes)
        return self._bytes(raw)

    def _bytes(self, raw: builtins.bytes) -> builtins.bytes:
        text, utf8 = _as_text(raw)
        if not utf8:  # (one chunk: the same spans and placeholders as a stream of it)
            return self._spread([raw], raw, text, utf8)[0]
        out = self.text(text)
        return raw if out is text else out.encode("utf-8")

    def file(self, data: builtins.bytes) -> builtins.bytes:
        """:meth:`bytes` for a workspace file, remembered by content hash (files repeat across
        checkpoints): returns ``data`` itself when there is nothing to replace."""
        h = hashlib.sha256(data).digest()
        if h in self._file_cache:
            hit = self._file_cache[h]
            return data if hit is None else hit
        out = self.bytes(data)
        changed = out if out != data else None
        with self._lock:
            cost = 64 + (len(changed) if changed is not None else 0)
            if self._file_cache_bytes + cost > CACHE_BUDGET_CHARS or len(self._file_cache) > 100_000:
                self._file_cache.clear()
                self._file_cache_bytes = 0
            self._file_cache[h] = changed
            self._file_cache_bytes += cost
        return data if changed is None else out

    def chunks(self, chunks: Sequence[builtins.bytes]) -> list[builtins.bytes]:
        """Scrub a stream given as chunks, catching secrets split across chunk boundaries.

        Returns as many chunks as it was given. A secret is replaced in the chunk where it starts;
        the rest of it is removed from the chunks it spilled into, so every other byte keeps its chunk.
        """
        joined = b"".join(chunks)
        return self._spread(chunks, joined, *_as_text(joined))

    def _spread(
        self, chunks: Sequence[builtins.bytes], joined: builtins.bytes, text: str, utf8: bool
    ) -> list[builtins.bytes]:
        """:meth:`chunks` of ``joined``, read as ``text`` (``utf8``, else a character a byte)."""
        spans = self.find(text)
        if not spans:
            return [bytes(c) for c in chunks]
        edits: list[streamscrub.Edit] = []
        cpos = bpos = 0
        for start, end, kind in spans:  # character offsets → byte offsets
            bpos += len(text[cpos:start].encode("utf-8")) if utf8 else start - cpos
            bend = bpos + (len(text[start:end].encode("utf-8")) if utf8 else end - start)
            edits.append((bpos, bend, placeholder(kind, joined[bpos:bend]).encode()))
            cpos, bpos = end, bend
        return streamscrub.spread(chunks, edits)

    def stream(self, chunks: Sequence[builtins.bytes], content_type: str = "") -> list[builtins.bytes]:
        """A stored stream's chunks scrubbed across its events first (a secret the model streams a
        few characters per event: :func:`forkpoint.streamscrub.scrub_events`; ``content_type``
        says how the events are framed), then across chunk boundaries (:meth:`chunks`). In that
        order: a piece of a secret found on its own would hide the rest of it from the first. No
        chunk is left empty that was not (:func:`forkpoint.streamscrub.refilled`)."""
        scrubbed = self.chunks(streamscrub.scrub_events(chunks, content_type, self.chunks))
        return streamscrub.refilled(chunks, scrubbed)

    # -- structured data

    def _secret_key(self, key: str) -> bool:
        hit = self._key_cache.get(key)
        if hit is None:
            k = key.lower().replace("-", "_")
            hit = (
                k.endswith(SECRET_KEY_SUFFIXES)
                or k in SECRET_KEYS
                or (k.endswith("token") and len(k) > 5 and not k.endswith(NOT_SECRET_TOKENS))
            )
            if len(self._key_cache) < 10_000:
                self._key_cache[key] = hit
        return hit

    def _secret_value(self, key: str, value: str) -> bool:
        """Whether ``value``, a string under ``key``, is a credential by its key's name: not a
        directory's path under a pwd's (the shell's PWD, in an environment's dump)."""
        return self._secret_key(key) and not (value.startswith(("/", "~")) and key.lower().endswith("pwd"))

    def _named_credential(self, value: dict[Any, Any]) -> bool:
        """Whether an object's ``"value"`` is a credential its ``"name"`` names (a credential-named
        key's or header's): a Kubernetes environment entry ``{"name": "API_KEY", "value": …}``, a
        HAR header ``{"name": "Authorization", "value": …}``; not a signing header's
        (``X-Amz-Date``: a time, in a HAR file's header list)."""
        name = value.get("name")
        if not isinstance(name, str) or not isinstance(value.get("value"), str):
            return False
        return self._secret_key(name) or self.credential_name(name)

    def _path_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return (
                value
                if _is_placeholder(value)
                else placeholder(self._context_kind("json-path", value), value)
            )
        if isinstance(value, builtins.bytes):
            return placeholder("json-path", value)
        try:  # (a file name's lone surrogates, an integer beyond 64 bits: as any other value)
            data = canonical_json(value, exotic=True)
        except (TypeError, ValueError):  # bytes inside, as a tool's raw result holds them
            data = repr(value).encode("utf-8", "backslashreplace")
        return placeholder("json-path", data)

    def json(self, value: Any, *, parsed: bool = False) -> Any:
        """A copy of JSON data with every string (values and keys) and ``bytes`` scrubbed, values of
        credential-named keys and of the user's JSON paths replaced. ``parsed``: the caller vouches
        that ``value`` is JSON it parsed and keeps to itself, so it holds no NaN or infinite float
        (``orjson.loads`` refuses them), which spares comparing a shared list's items where its JSON
        has a ``null``, and no list or dict of it is ever changed, so a list that begins with the
        very items of a recent parsed list (a resent conversation parsed by what it adds: see
        :mod:`forkpoint.capture.resent`) shares their scrubbed items without its JSON being written.

        An agent resends its whole conversation at every call, and one request is scrubbed when it
        is captured, when it is matched and when it is logged. So, when no JSON path is in force:
        a result of this scrubber (or one of its lists) given again comes back as it is (scrubbing
        is idempotent); a list (``value``, or a member of it) that begins with the items of one of
        the last :data:`LISTS_KEPT` lists, by their exact JSON, keeps their scrubbed items and
        scrubs only the rest; and items are remembered by their JSON (within
        :data:`CACHE_BUDGET_CHARS` bytes). Parts of the result may therefore be shared with
        earlier results: treat it as read-only.
        """
        if type(value) is str:  # (a scalar: no JSON path selects a whole payload)
            return self.text(value)
        if value is None or type(value) in _SCALARS:
            return value
        states = jsonpath.roots(self.paths)
        if states or not self._cache_on:
            return self._json(value, states)
        if self._known(value):
            return value
        if isinstance(value, list | tuple):
            out: Any = self._list(list(value), parsed)
        elif isinstance(value, dict) and not self._named_credential(value):  # (else its keys together)
            out = {}
            for k, v in value.items():
                if isinstance(v, list):
                    # (a loaded request's DeltaList as a list: the scrubber returns plain JSON)
                    out[self.text(k) if isinstance(k, str) else k] = self._list(
                        v if type(v) is list else list(v), parsed
                    )
                else:
                    out.update(self._json({k: v}, ()))
        else:
            return self._json(value, ())
        self._result(out)
        return out

    def _known(self, value: Any) -> bool:
        """Whether ``value`` is one of the last results of :meth:`json` (or one of their lists)."""
        return self._results.get(id(value)) is value

    def _result(self, value: Any) -> None:
        """Remember ``value`` as a result of :meth:`json` (see there)."""
        with self._lock:
            while len(self._results) >= RESULTS_KEPT:
                self._results.pop(next(iter(self._results)))
            self._results[id(value)] = value

    def _list(self, items: list[Any], parsed: bool) -> list[Any]:
        """A list no JSON path reaches, scrubbed: the items it shares with a recent list by their
        exact JSON (or, ``parsed``, as the same objects) are taken from there, the others scrubbed
        one by one (see :meth:`json`)."""
        if self._known(items):
            return items
        if parsed:
            out = self._resent(items)
            if out is not None:
                return out
        finite, given = parsed, items if parsed else None
        try:
            data = orjson.dumps(items, default=json_default)
        except (TypeError, orjson.JSONEncodeError):  # bytes, lone surrogates: item by item
            return [self._item(v) for v in items]
        keep, ends, base, owned, shared = 0, [], None, True, None
        for old in list(self._lists):
            if len(old.out) <= keep or not old.may_share(data):
                continue
            try:
                n = _shared_items(data, old.data(), old.ends())
            except TypeError:  # (parsed, it holds what orjson cannot write: an int beyond 64 bits)
                continue
            # orjson writes NaN and infinities as null, like None: where a null is, the items must be
            # equal to the scrubbed ones too (an item a secret was taken out of is then scrubbed
            # again), unless neither list can hold one.
            if n > keep and (
                (finite and old.finite)
                or b"null" not in old.data()[: old.ends()[n - 1]]
                or items[:n] == old.out[:n]
            ):
                # A list kept as it was given is the caller's, who may have changed it since.
                if old.owned or orjson.dumps(old.out[:n]) == old.data()[: old.ends()[n - 1]] + b"]":
                    keep, ends, owned, shared = n, old.ends(), old.owned, old
        # A large list met for the first time (a 20 MB tool result) may be clean as it is; a list
        # that goes on a recent one (a long conversation) is not checked whole again: its known
        # items are shared, as below, and not held twice by the caches. One that holds text (a
        # file's lines) is checked before its neighbours are read, which then know its items alone
        # hold nothing (its text is read a line each once); one that holds none, after the check
        # that it goes on a recent list but for its first item, which spares the check.
        big = not keep and len(data) >= CLEAN_IN_TEXT_MIN
        texts = big and str in map(type, items)
        # (a list of text alone, a file's lines, is read in order, a line each, which also reads
        # what a line holds for the next: token: | and its value)
        lines = texts and not self.rules.patterns and set(map(type, items)) == {str}
        clean = texts and (not self.find("\n".join(items)) if lines else self._clean(data))
        # A list whose items say another is a credential is scrubbed whole, neither taken from nor
        # kept for the lists items are shared with (an item alone is scrubbed without the one that
        # says so): none of those holds one, so only the items after the shared ones are read.
        if self._neighbour_secrets(items, keep, alone_clean=clean, lines_clean=clean and lines):
            return cast("list[Any]", self._json(items, ()))
        if not keep:
            out = self._after_first(items, data, finite, given)
            if out is not None:
                return out
        if clean or (big and not texts and self._clean(data)):
            with self._lock:  # (where its items end is worked out if a longer list comes)
                self._lists.appendleft(_Scrubbed(data, None, items, owned=False, finite=finite, given=given))
            return items  # nothing in it to scrub: the walk below would build an equal copy
        out = (shared.out[:keep] if shared else []) + [self._item(v) for v in items[keep:]]
        if shared is not None and owned and shared.digests is not None:
            base = (shared.digests, 0, keep)
        with self._lock:
            # (the caller's items, taken over from a list kept as given, are still the caller's)
            self._lists.appendleft(
                _Scrubbed(
                    data,
                    _item_ends(items, ends[:keep]),
                    out,
                    owned=owned,
                    finite=finite,
                    given=given,
                    base=base,
                )
            )
        self._result(out)
        return out

    def _after_first(
        self, items: list[Any], data: builtins.bytes, finite: bool, given: list[Any] | None
    ) -> list[Any] | None:
        """``items`` (written as ``data``) scrubbed where, after their first item, they begin with
        all the items after the first of a recent list of the scrubber's own, by their exact JSON:
        a conversation whose system prompt is stamped with the time at every call. Those items'
        scrubbed forms are taken over (one comparison of bytes, where scrubbing them one by one
        costs their JSON each); the first item and the items after them are scrubbed. None where no
        recent list whose JSON is written already shares them (a list taken over by identity is
        not written for this: an unrelated list would cost every recent list's JSON)."""
        if len(items) < 3:
            return None
        first_end = 1 + len(orjson.dumps(items[0], default=json_default))  # (its "," in data)
        for old in list(self._lists):
            if old._data is None or not old.owned or len(old.out) < 2 or len(old.out) > len(items):
                continue
            ends = old.ends()
            span = old._data[ends[0] : ends[-1]]  # from the "," after its first item to its end
            after = first_end + len(span)
            if not data.startswith(span, first_end) or data[after : after + 1] not in (b",", b"]"):
                continue
            # (where a null is, a NaN may have been written: only finite lists are taken by JSON)
            if not (finite and old.finite) and b"null" in span:
                continue
            n = len(ends)
            out = [self._item(items[0]), *old.out[1:n], *(self._item(v) for v in items[n:])]
            shift = first_end - ends[0]
            known = [first_end, *(e + shift for e in ends[1:])]
            base = (old.digests, 1, n) if old.digests is not None else None
            with self._lock:
                self._lists.appendleft(
                    _Scrubbed(
                        data, _item_ends(items, known), out, owned=True, finite=finite, given=given, base=base
                    )
                )
            self._result(out)
            return out
        return None

    def _resent(self, items: list[Any]) -> list[Any] | None:
        """Parsed ``items`` scrubbed, where they begin with items of a recent parsed list, as the
        same objects: those items are that list's, unchanged (see :meth:`json`), so their scrubbed
        items are taken over and only the items after them are scrubbed (the list's JSON is written
        only if a list equal by JSON alone comes). The list that shares the most wins; where none
        shares a prefix, one whose items after the first are ``items``' (a prompt stamped with the
        time at every call); None where none shares any."""
        most, best, after_first = 0, None, None
        for old in list(self._lists):
            given = old.given
            n = _same_prefix(given, items) if given else 0
            if n > most:
                most, best = n, old
                if n == len(given or ()):  # (all its items: an append, the common case)
                    break
            elif (  # the same items but the first (a prompt stamped with the time, capture.resent)
                not n
                and after_first is None
                and given
                and old.owned
                and 2 <= len(given) <= len(items)
                and given[1] is items[1]
                and _same_objects(given[1:], items[1 : len(given)])
            ):
                after_first = old
        if best is None and after_first is None:
            return None
        if self._neighbour_secrets(items, most):
            return None  # (scrubbed whole: see _list)
        if best is not None:
            out = best.out[:most] + [self._item(v) for v in items[most:]]
            base = (best.digests, 0, most) if best.owned and best.digests is not None else None
            # (the same first item as the list's it goes on, whose JSON is written once)
            first, owned = best.first or _first_json(items), best.owned
        elif after_first is not None:
            n = len(after_first.out)
            out = [self._item(items[0]), *after_first.out[1:], *(self._item(v) for v in items[n:])]
            base = (after_first.digests, 1, n) if after_first.digests is not None else None
            first, owned = _first_json(items), True
        taken = _Scrubbed(None, None, out, owned=owned, finite=True, given=items, base=base, first=first)
        with self._lock:
            self._lists.appendleft(taken)
        self._result(out)
        return out

    def _clean(self, data: builtins.bytes) -> bool:
        """Whether the walk would change nothing in the JSON data written as ``data`` (orjson's
        compact form): no key names a credential, and the scrubber changes none of its strings
        (keys and values), each scanned once however often it occurs. A large list (a 20 MB tool
        result) is checked in a fraction of the time the walk takes, and walked only when it must be."""
        if b'\\"' in data:  # an escaped quote: the strings are found by a (slower) regex
            found = _STRING_TOKEN.findall(data)
            keys = {raw for raw, colon in found if colon}
            strings = {raw for raw, _ in found}
        else:  # every other '"' opens or closes a string: split there, in C
            parts = data.split(b'"')
            strings = set(parts[1::2])
            keys = {parts[i] for i in range(1, len(parts) - 1, 2) if parts[i + 1][:1] == b":"}
        if any(self._secret_key(_json_string(raw)) for raw in keys):
            return False
        if self.rules.patterns:  # a user's regex may anchor at a string's ends: each string alone
            return all(self.text(t) == t for t in map(_json_string, strings))
        # Scanned as one text, a line each: every built-in pattern ends a secret at whitespace as it
        # does at the end of a text, and starts one after a newline as at its start (a match across
        # two lines only makes the check fail, and the walk decides), so a string holds a secret
        # alone exactly when it does on its line.
        plain = b"\n".join(raw for raw in strings if b"\\" not in raw).decode()
        escaped = [_json_string(raw) for raw in strings if b"\\" in raw]
        return not self.find("\n".join([plain, *escaped]))

    def _item(self, value: Any) -> Any:
        """One list item scrubbed (no JSON path reaching it), remembered (see :meth:`json`)."""
        if not isinstance(value, dict | list):
            return self._json(value, ())
        mine = self._returned.get(id(value))
        if mine is value:
            return value  # scrubbed by this scrubber, which is idempotent
        try:
            raw = orjson.dumps(value)  # strict: 1, 1.0 and true are three different items
        except (TypeError, orjson.JSONEncodeError):  # bytes, lone surrogates: walked every time
            return self._json(value, ())
        hit = self._items.get(raw)
        if hit is not None and (b"null" not in raw or hit == value):  # NaN is written as null too
            return hit
        out = self._json(value, ())
        with self._lock:
            while self._items and self._items_bytes + len(raw) > CACHE_BUDGET_CHARS:
                old = next(iter(self._items))
                gone = id(self._items.pop(old))
                self._returned.pop(gone, None)
                self._digests.pop(gone, None)
                self._items_bytes -= len(old)
            self._items[raw] = out
            self._items_bytes += len(raw)
            self._returned[id(out)] = out
        return out

    def list_digests(self, items: list[Any]) -> list[str]:
        """``[item_digest(x) for x in items]``, the digests of a list's items. For a list this
        scrubber returned lately (and owns), the digests of the items it took from an earlier list
        are that list's, computed once: a conversation resent at every call costs the digests of
        its new items, not a lookup for each of its items. Items are known by identity, so a list
        whose slots were filled with other objects since is hashed again where it changed."""
        for s in list(self._lists):
            if s.out is items and s.owned:
                known = s.digests
                if known is not None and _same_objects(known[0], items):
                    return known[1]
                done: list[str] = []
                if s.base is not None:
                    (seen, digests), start, stop = s.base
                    if stop <= len(items) and _same_objects(seen[start:stop], items[start:stop]):
                        done = [self.item_digest(x) for x in items[:start]] + digests[start:stop]
                    s.base = None  # (held no longer than needed)
                out = done + [self.item_digest(x) for x in items[len(done) :]]
                s.digests = (tuple(items), out)
                return out
        return [self.item_digest(x) for x in items]

    def item_digest(self, item: Any) -> str:
        """``digest(secrets_by_kind(item), exotic=True)`` (:func:`forkpoint.canonical.digest`), remembered for a dict or list this
        scrubber returned as a list item and still holds: a conversation resent at every call comes
        back as the same items (see :meth:`json`), each hashed once (:func:`forkpoint.match.model_key`).
        Forgotten with the item, so it holds no memory of its own."""
        key = id(item)
        if self._returned.get(key) is not item:
            return digest(secrets_by_kind(item), exotic=True)
        found = self._digests.get(key)
        if found is None:
            found = digest(secrets_by_kind(item), exotic=True)
            with self._lock:
                if self._returned.get(key) is item:
                    self._digests[key] = found
        return found

    def _json(self, value: Any, states: jsonpath.States) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            out = {}
            named = self._named_credential(value)
            for k, v in value.items():
                key = self.text(k) if isinstance(k, str) else k
                sub: tuple[tuple[int, int], ...] = ()
                if states:
                    done, sub = jsonpath.step(self.paths, states, k, 0)
                    if done:
                        out[key] = self._path_value(v)
                        continue
                if (
                    isinstance(v, str)
                    and isinstance(k, str)
                    and v
                    and (self._secret_value(k, v) or (named and k == "value"))
                ):
                    out[key] = (
                        v if _is_placeholder(v) else placeholder(self._context_kind("secret-field", v), v)
                    )
                elif k == "auth" and isinstance(v, str) and _valid_registry_auth(v):  # (docker's config.json)
                    out[key] = placeholder("registry-auth", v)
                else:
                    out[key] = self._json(v, sub)
            return out
        if isinstance(value, list | tuple):
            found = self._neighbour_secrets(value)
            if not states:
                return [found[i][0] if i in found else self._json(v, ()) for i, v in enumerate(value)]
            items = []
            for i, v in enumerate(value):
                done, sub = jsonpath.step(self.paths, states, i, len(value))
                if done:
                    items.append(self._path_value(v))
                else:
                    items.append(found[i][0] if i in found else self._json(v, sub))
            return items
        if isinstance(value, builtins.bytes | bytearray | memoryview):
            return self.bytes(bytes(value))
        return value

    # -- HTTP pieces

    def headers(self, headers: Iterable[Any], *, request: bool = False) -> list[list[str]]:
        """Header pairs with their values scrubbed and credential headers (:meth:`credential_header`)
        dropped, or, of a ``request``, kept with the whole value a placeholder
        (:func:`request_credential`). Names keep their case.

        A list of pairs of text scrubbed lately comes back scrubbed as it was then (a copy), found by
        its pairs: an SDK sends the same headers at every call, each scrubbed by a pass of several
        lookups (scrubbing is a function of the pairs alone, for one scrubber's rules)."""
        pairs = tuple(headers)
        if not self._cache_on:
            return self._headers_scrubbed(pairs, request)
        key = (pairs, request)
        try:
            seen = self._headers.get(key)
        except TypeError:  # (pairs given as lists: not remembered)
            return self._headers_scrubbed(pairs, request)
        if seen is not None:
            return [list(p) for p in seen]
        out = self._headers_scrubbed(pairs, request)
        # Only tuples of text: a key equal to theirs is tuples of text too (no other value equals a
        # str), so the same pairs are scrubbed the same way whatever types came in; and nothing
        # changes them after (a pair of another type may be an object a client changes in place,
        # hashed by its identity: found again, it would get what it held before).
        if (
            all(type(p) is tuple and type(p[0]) is str and type(p[1]) is str for p in pairs)
            and sum(len(p[0]) + len(p[1]) for p in pairs) <= HEADER_LIST_MAX_CHARS
        ):
            if len(self._headers) >= HEADER_LISTS_KEPT:
                self._headers.clear()
            self._headers[key] = [list(p) for p in out]
        return out

    def _headers_scrubbed(self, headers: Iterable[Any], request: bool) -> list[list[str]]:
        out = []
        for pair in headers:
            name, value = pair[0], pair[1]
            low = str(name).lower()
            if low == "set-cookie" and isinstance(value, str):
                # (kept, its value a placeholder: a replayed client keeps the cookies it was given)
                out.append([name, _set_cookie_scrubbed(value)])
                continue
            if self.credential_header(low):
                # (a response's are dropped: served back, a placeholder could be sent on as a key)
                kept = request_credential(low, value) if request else None
                if kept is not None:
                    out.append([name, kept])
                continue
            out.append([name, self.text(value) if isinstance(value, str) else value])
        return out

    def credential_header(self, name: str) -> bool:
        """Whether header ``name`` carries a credential (or a request signature derived from one):
        :meth:`credential_name`, :data:`SIGNING_HEADERS`."""
        return name.lower() in SIGNING_HEADERS or self.credential_name(name)

    def credential_name(self, name: str) -> bool:
        """Whether header ``name``'s value is a credential: :data:`SECRET_HEADERS`,
        :data:`SECRET_HEADER_NAME`, the user's."""
        low = name.lower()
        return low in self.credential_names or SECRET_HEADER_NAME.search(low) is not None

    def url(self, url: str) -> str:
        """``url`` with credential query parameters, user info and secret-shaped parts replaced."""
        try:
            parts = urlsplit(url)
            username, password = parts.username, parts.password
        except ValueError:  # not a URL we can take apart: scrub it as text
            return self.text(url)
        if parts.query:
            # (the names a form field's value is scrubbed by: ?access_key= is one as much as
            # access_key=… in a form body, or "access_key": … in JSON)
            query = self._query(parts.query, self.credential_param, "query-credential")
            if query is not None:
                parts = parts._replace(query=query)
        userinfo, _, host = parts.netloc.rpartition("@")
        if (username or password) and not _is_placeholder(unquote(userinfo)):
            # Percent-encoded: a bare "[...]" in the authority would read as an IPv6 host.
            ph = quote(placeholder("url-credential", parts.netloc), safe="")
            parts = parts._replace(netloc=f"{ph}@{host}")
        return self.text(urlunsplit(parts))

    def _query(self, query: str, secret_name: Callable[[str], bool], kind: str) -> str | None:
        """A query string (or a form body) with the values of parameters ``secret_name`` says are
        credentials replaced by placeholders of ``kind`` and the others scrubbed, or None when
        nothing changed (then the original is kept byte for byte)."""
        pairs = parse_qsl(query, keep_blank_values=True)
        # (a placeholder is left alone: scrubbing is idempotent)
        # Values are scrubbed decoded too: "a+b%3Dc" hides "a b=c" from a scan of the raw text.
        clean = [
            (k, placeholder(kind, v) if v and secret_name(k) and not _is_placeholder(v) else self.text(v))
            for k, v in pairs
        ]
        return urlencode(clean) if clean != pairs else None

    def body_text(self, text: str, content_type: str = "") -> str:
        """A text body scrubbed: a form's fields (``application/x-www-form-urlencoded``, and the
        fields of ``multipart/form-data``) whose names say they hold a credential (an OAuth
        ``client_secret``, a ``password``, an ``api_key``: :data:`SECRET_KEY_SUFFIXES` and the
        credential query parameters) are replaced whatever their values look like, then the text
        as :meth:`text` scrubs it."""
        ctype = content_type.split(";", 1)[0].strip().lower()
        if ctype == "application/x-www-form-urlencoded" and "=" in text:
            query = self._query(text.strip(), self.credential_param, "form-credential")
            if query is not None:
                text = query
        elif ctype == "multipart/form-data" and (boundary := _BOUNDARY.search(content_type)):
            text = self._form_fields(text, "--" + boundary.group(1).strip('"'))
        return self.text(text)

    def _form_fields(self, text: str, delimiter: str) -> str:
        """A ``multipart/form-data`` body with the values of the fields named as credentials
        replaced: split at its ``delimiter`` lines (one pass), each part's headers read up to its
        blank line. A part with a ``filename`` is a file, left to :meth:`text`."""
        parts = text.split(delimiter)
        for i, _, head, secret, rest in self.credential_parts(parts):
            if secret and not _is_placeholder(secret):
                parts[i] = head + placeholder("form-credential", secret) + rest
        return delimiter.join(parts)

    def credential_parts(self, parts: list[str]) -> Iterator[tuple[int, str, str, str, str]]:
        """The parts of a ``multipart/form-data`` body (split at its delimiter) that are fields
        named as credentials: (index, name, the part up to the value, the value, the line break
        after it). A part with a ``filename`` is a file, not one."""
        for i, part in enumerate(parts):
            head, blank, value = part.partition("\r\n\r\n")
            if not blank:
                head, blank, value = part.partition("\n\n")
            m = _FORM_NAME.search(head) if blank else None
            if m is None or "filename=" in head.lower() or not self.credential_param(m.group(1)):
                continue
            end = len(value) - len(value.rstrip("\r\n"))  # (the line break before the next delimiter)
            yield i, m.group(1), head + blank, value[: len(value) - end], value[len(value) - end :]

    def credential_param(self, name: str) -> bool:
        """Whether a query parameter or form field ``name`` holds a credential: a credential query
        parameter, or a name that says so as a JSON key would (``access_key``, ``auth_token``)."""
        return name.lower() in self.query_params or self._secret_key(name)

    def _chunk_list(self, chunks: list[Any], content_type: str = "") -> list[Any]:
        """Stored stream chunks ``[[ms, str | bytes], …]`` scrubbed across chunk boundaries, and
        across the stream's events (:func:`forkpoint.streamscrub.scrub_events`; ``content_type``
        says how they are framed)."""
        pairs = [c for c in chunks if isinstance(c, list | tuple) and len(c) == 2]
        raw = [c[1].encode("utf-8", "surrogateescape") if isinstance(c[1], str) else c[1] for c in pairs]
        if len(pairs) != len(chunks) or not all(isinstance(r, builtins.bytes | bytearray) for r in raw):
            scrubbed_json: list[Any] = self.json(chunks)
            return scrubbed_json
        scrubbed = self.stream(raw, content_type)
        out = []
        for (t, original), new in zip(pairs, scrubbed, strict=True):
            if isinstance(original, str):
                try:
                    value: Any = new.decode("utf-8")
                except UnicodeDecodeError:
                    value = new
            else:
                value = new
            out.append([t, value])
        return out

    def http_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """A request or response record as the capture layer builds it, whose ``url``, ``headers``,
        ``body`` (by its kind) and ``chunks`` this scrubber scrubbed already: its other fields
        scrubbed too, and the result remembered, so that :meth:`http` hands it back as it is when
        the call is logged instead of scrubbing it all again. Treat it as read-only."""
        out = {k: v if k in _SCRUBBED_PARTS else self.json(v) for k, v in record.items()}
        with self._lock:
            while len(self._records) >= RECORDS_KEPT:
                self._records.pop(next(iter(self._records)))
            self._records[id(out)] = out
        return out

    def forget_record(self, record: Mapping[str, Any]) -> None:
        """Stop remembering a record of :meth:`http_record` that will not be logged (a replay
        served the call): it would otherwise be held until :data:`RECORDS_KEPT` more came."""
        with self._lock:
            if self._records.get(id(record)) is record:
                del self._records[id(record)]

    def http(self, record: dict[str, Any], *, request: bool = False) -> dict[str, Any]:
        """A stored request (``request``) or response record scrubbed: URL, headers, body by its
        kind, chunks (a record of :meth:`http_record` comes back as it is, once)."""
        with self._lock:
            mine = self._records.pop(id(record), None)
        if mine is record:
            return record
        out: dict[str, Any] = {}
        kind = record.get("body_kind")
        pairs = record.get("headers")
        ctype = next(
            (
                str(p[1])
                for p in pairs or ()
                if isinstance(p, list | tuple) and len(p) == 2 and str(p[0]).lower() == "content-type"
            ),
            "",
        )
        for k, v in record.items():
            if k == "url" and isinstance(v, str):
                out[k] = self.url(v)
            elif (
                k == "headers"
                and isinstance(v, list)
                and all(isinstance(p, list | tuple) and len(p) == 2 for p in v)
            ):
                out[k] = self.headers(v, request=request)
            elif k == "body" and kind == "text" and isinstance(v, str):
                out[k] = self.body_text(v, ctype)
            elif k == "chunks" and isinstance(v, list):
                out[k] = self._chunk_list(v, ctype)
            else:
                out[k] = self.json(v)
        return out

    def argv(self, args: Sequence[str]) -> list[str]:
        """A command's arguments, each scrubbed as text, and the value of an option that names a
        credential (:data:`SECRET_OPTION`: ``--token VALUE``, ``--api-key=VALUE``) replaced
        whatever its shape, which no pattern of a secret's text would find."""
        return self.argv_options(args)[0]

    def argv_options(self, args: Sequence[str]) -> tuple[list[str], list[str]]:
        """:meth:`argv`, and the names of the options whose values it replaced, in order (what
        ``forkpoint record`` says: a value's own shape, ``dGVzdA==``, tells nothing)."""
        out: list[str] = []
        names: list[str] = []
        # (what the options say, and a secret cut over words, as in a tool's list of them:
        # ["--token=sk-proj-", "Q7pV…"] kept the key's rest once the option's value was replaced)
        said = self._list_secrets(args)
        found = self._neighbour_secrets(args, listed=said)
        for i, arg in enumerate(args):
            option = SECRET_OPTION.fullmatch(arg)
            value = option.group("value") if option is not None else None
            if i in found:
                out.append(found[i][0])
                if i in said:
                    names.append(said[i][1])
                elif option is not None and value is not None:
                    names.append(arg[: option.start("value") - 1])
                continue
            if option is not None and value is not None and not _PLACEHOLDER_RE.fullmatch(value):
                out.append(arg[: option.start("value")] + placeholder("secret-option", value))
                names.append(arg[: option.start("value") - 1])
            elif any(c.isspace() for c in arg):  # (a shell's script: its words are not arguments)
                out.append(_script_options(self.text(arg), names))
            else:
                out.append(self.text(arg))
        return out, names

    def _list_secrets(self, items: Sequence[Any], start: int = 0) -> dict[int, tuple[str, str]]:
        """The items of a list that its other items say are credentials, by index, as (what each is
        stored as, the name that says so): a command's (argv's) credential option's value
        (``--token VALUE``: :data:`SECRET_OPTION`; a client's password: :data:`_CLIENTS`), and
        the value of a ``[name, value]`` pair (a header list, as httpx takes it) whose name is a
        credential header's (:data:`SECRET_HEADERS`, the user's; not one by its words: a JSON
        schema's ``"required": ["client_secret", "x"]``). Each item alone tells nothing
        (``VALUE``): a list is scrubbed with these in every path. Only the options from ``start``
        on are read (the items before are a list's known to hold none)."""
        found: dict[int, tuple[str, str]] = {}
        if len(items) == 2 and type(items[0]) is str and type(items[1]) is str:
            if items[0].lower() in self.credential_names and items[1] and not _is_placeholder(items[1]):
                found[1] = (
                    placeholder(self._context_kind("header-credential", items[1]), items[1]),
                    items[0],
                )
                return found
        # (only an option tells: a list's other items are looked at only where one is; a list of
        # no text, a conversation's messages, is passed over in C)
        if str not in map(type, items[start:]):
            return found
        options = [i for i in range(start, len(items)) if type(items[i]) is str and items[i][:1] == "-"]
        # (the command a wrapper runs, sudo's or env's: its items are read as a list's from its start)
        begin = _wrapped_command(items)
        first = items[begin] if begin < len(items) else None
        command = [
            first.rsplit("/", 1)[-1] if type(first) is str else "",
            *items[begin + 1 : begin + _COMMAND_WORDS],
        ]
        if command[0] == "aws":  # (aws configure set NAME VALUE: no option tells)
            found |= self._aws_secrets(items)
        if not options:
            return found
        if command[0] == "htpasswd":
            found |= self._htpasswd_password(items, begin)
        spaced, glued, user, own = frozenset[str](), frozenset[str](), False, len(items)
        for client in _CLIENTS:
            if command[0] not in client.names:
                continue
            said = command[1 : 1 + len(client.words)]
            if len(said) == len(client.words) and all(
                type(c) is str and re.fullmatch(w, c) for w, c in zip(client.words, said, strict=True)
            ):
                spaced, glued, user = client.spaced, client.glued, client.user
                if client.wraps:  # (its own options end at the command it runs: the first other word)
                    operands = (
                        j
                        for j in range(begin + 1, own)
                        if str(items[j])[:1] != "-" and items[j - 1] not in spaced
                    )
                    own = next(operands, own)
        for i in options:
            arg = items[i]
            # (a blank item is no value: the option's is the first after it that is not one, as
            # a command line split by a shell that keeps the space between them as an item)
            at = i + 1
            while at < len(items) and type(items[at]) is str and not items[at].strip():
                at += 1
            nxt = items[at] if at < len(items) and type(items[at]) is str else ""
            short = arg[:2]
            name, eq, joined = arg.partition("=")
            # (a wrapper's own options are not the client's: sudo -p PROMPT)
            if begin < i < own and short in glued and len(arg) > 2 and arg[2] != "=" and i not in found:
                value = self._command_password(arg[2:], user=user)
                if value is not None:
                    found[i] = (short + value, short)
            elif begin < i < own and eq and joined and name in spaced and i not in found:  # (--body=VALUE)
                value = self._command_password(joined, user=user)
                if value is not None:
                    found[i] = (name + eq + value, name)
            elif begin < i < own and arg in spaced and nxt:
                value = self._command_password(nxt, user=user)
                if value is not None:
                    found[at] = (value, arg)
            elif (password := self._openssl_password(name, joined if eq else nxt)) is not None:
                if i not in found:
                    found[i if eq else at] = (name + eq + password if eq else password, name)
            elif nxt and not nxt.startswith("-") and not _is_placeholder(nxt):
                option = SECRET_OPTION.fullmatch(arg)
                if option is not None and option.group("value") is None:
                    found[at] = (placeholder("secret-option", nxt), arg)
                    found |= self._spilled(items, at, arg)
        return found

    def _openssl_password(self, option: str, value: str) -> str | None:
        """``value`` of openssl's password ``option`` (:data:`_OPENSSL_PASS_OPTIONS`) with the
        password of its ``pass:PASSWORD`` replaced; None where it holds none (``env:VAR``)."""
        if option[:3] == "---" or option.lstrip("-") not in _OPENSSL_PASS_OPTIONS or value[:5] != "pass:":
            return None
        password = self._command_password(value[5:], user=False)
        return "pass:" + password if password is not None else None

    def _htpasswd_password(self, items: Sequence[Any], begin: int = 0) -> dict[int, tuple[str, str]]:
        """htpasswd -b's password, by index, as (what it is stored as, ``-b``): its last operand,
        the third (``FILE USER PASSWORD``) or with -n the second; as in text (``command-password``),
        the options come first, -C's and -r's number after them. ``begin``: htpasswd's index (after
        a wrapper's items, :func:`_wrapped_command`)."""
        letters, i = "", begin + 1
        while i < len(items) and type(items[i]) is str and items[i][:1] == "-" and len(items[i]) > 1:
            letters += items[i][1:]
            if items[i][-1] in "Cr" and i + 1 < len(items) and str(items[i + 1]).isdigit():
                i += 1
            i += 1
        at = i + (1 if "n" in letters else 2)
        if "b" not in letters or at >= len(items) or type(items[at]) is not str:
            return {}
        password = self._command_password(items[at], user=False)
        return {at: (password, "-b")} if password is not None else {}

    def _aws_secrets(self, items: Sequence[Any]) -> dict[int, tuple[str, str]]:
        """The values that ``aws configure set`` names secrets (:data:`_AWS_SECRET_NAMES`), by
        index, as (what each is stored as, its name); as in text (``aws-secret``), the value's
        first 16 or more base64 characters are replaced."""
        found: dict[int, tuple[str, str]] = {}
        for i in range(1, len(items) - 1):
            name, value = items[i], items[i + 1]
            if type(name) is str and type(value) is str and name.rsplit(".", 1)[-1] in _AWS_SECRET_NAMES:
                m = _AWS_SECRET_VALUE.match(value)
                if m is not None:
                    secret = m.group()
                    kind = self._context_kind("aws-secret", secret)
                    found[i + 1] = (placeholder(kind, secret) + value[m.end() :], name)
        return found

    def _spilled(self, items: Sequence[Any], at: int, name: str) -> dict[int, tuple[str, str]]:
        """The items after ``items[at]``, a credential's value, that a secret starting in it runs
        into, by index, as (what each is stored as, ``name``): ``["--token", "sk-proj-", "Q7pV…"]``,
        the value a key cut over two items, kept the key's rest in the clear once the value alone
        was replaced (which hides where the key starts from :meth:`_split_secrets`)."""
        end = at
        while end < len(items) and type(items[end]) is str:
            end += 1
        cut = self._run_secrets(items[at:end], at, alone_clean=False)
        return {k: (v[0], name) for k, v in cut.items() if k > at} if at in cut else {}

    def _neighbour_secrets(
        self,
        items: Sequence[Any],
        shared: int = 0,
        *,
        alone_clean: bool = False,
        lines_clean: bool = False,
        listed: dict[int, tuple[str, str]] | None = None,
    ) -> dict[int, tuple[str, str]]:
        """The items of a list that its other items make secrets, by index, as (what each is stored
        as, a name or kind): :meth:`_list_secrets` and :meth:`_split_secrets` in turn, each over the
        items as the other left them (a placeholder makes new neighbours: ``["curl--secret", …]``
        cut to ``"--secret"`` is an option a second scrub reads), until neither finds more; read
        from where its first ``shared`` items (a list's known to hold none) stop. ``alone_clean``:
        its strings are known to hold nothing each alone (:meth:`_clean`); ``lines_clean``: nor
        read in order, a line each; ``listed``: :meth:`_list_secrets` of ``items`` from their
        first, when the caller has it."""
        start = _shared_until(shared)
        found: dict[int, tuple[str, str]] = {}
        if str not in map(type, items[start:]):  # (a list of no text, a conversation's messages: in C)
            return found
        turn = 0
        while True:
            if turn % 2:  # (what _clean said of the items as given: until they change)
                more = self._split_secrets(
                    items, start, alone_clean=alone_clean and not found, lines_clean=lines_clean and not found
                )
            elif turn == 0 and listed is not None and start == 0:
                more = listed
            else:
                more = self._list_secrets(items, start)
            more = {i: v for i, v in more.items() if v[0] != items[i]}  # (what changes the list)
            if more:
                found |= more
                items = [found[i][0] if i in found else v for i, v in enumerate(items)]
            elif turn:
                return found
            turn += 1

    def _split_secrets(
        self, items: Sequence[Any], start: int, *, alone_clean: bool, lines_clean: bool
    ) -> dict[int, tuple[str, str]]:
        """The text items of a list that a secret runs over, by index, as (what each is stored as,
        the secret's kind): a tool's pieces of text (``["… sk-proj-abc", "def…"]``, a file's lines
        of a PEM key) hold a secret no item holds whole, and each scrubbed alone kept its pieces (a
        key's body) in the clear. Adjacent strings are read as one text, as a stream's chunks are;
        the placeholder goes into the item where the secret starts, and the rest of it is removed
        from the items it spilled into. Only runs with a boundary after item ``start`` are read;
        ``alone_clean``, ``lines_clean``: see :meth:`_neighbour_secrets`."""
        found: dict[int, tuple[str, str]] = {}
        n = len(items)
        if n - start < 2:
            return found
        i = start
        while 0 < i < n and type(items[i]) is str and type(items[i - 1]) is str:
            i -= 1  # (the run item ``start`` is in: a secret may start items before it)
        while i < n - 1:
            j = i
            while j < n and type(items[j]) is str:
                j += 1
            if j - i > 1:
                found.update(
                    self._run_secrets(items[i:j], i, alone_clean=alone_clean, lines_clean=lines_clean)
                )
            i = j + 1
        return found

    def _run_secrets(
        self, run: Sequence[str], first: int, *, alone_clean: bool, lines_clean: bool = False
    ) -> dict[int, tuple[str, str]]:
        """:meth:`_split_secrets` of one run of adjacent strings, the first at index ``first``
        (``alone_clean``: none holds anything alone, as :meth:`_clean` found before;
        ``lines_clean``: nor read as lines, in order). Each
        item is scrubbed alone first, so a whole key at one item's end is not read on into the next
        (``["key: sk-…", "Done"]``, lines split from an ``.env`` file); then the items as scrubbed
        are read as one text, again after each secret taken (what a second scrub would read). A
        secret the item it starts in would keep alone is read over the items as given first
        (:meth:`_read_on`): a PEM key's header line alone is a key's shape (a key cut short), its
        body lines none, and so is a key's first 20 characters, its rest none."""
        raw = "".join(run)
        found = self.find(raw)
        # Lines without their ends (a file's text.splitlines()) are read as lines too: a value on a
        # line after its name (a YAML block scalar's, token: |; a .netrc password) is no secret's
        # shape over the items glued together.
        endless = not any("\n" in p or "\r" in p for p in run)
        by_line = self.find("\n".join(run)) if endless and not lines_clean else []
        # Nothing in their text, nor in any alone: the usual list of words or lines. Each alone is
        # scrubbed as the list's walk scrubs it next (then from the cache); a long list's items read
        # a line each, as one text (a secret ends at a line break as at a text's end, and starts
        # after one as at its start), as _clean checks a long list before its walk (and as there,
        # not with a user's regex, which may anchor at a string's ends), unless _clean read them so.
        if (
            not found
            and not by_line
            and (
                alone_clean
                or not (
                    (not endless and self.find("\n".join(run)))  # (else by_line read them so)
                    if len(raw) >= CLEAN_IN_TEXT_MIN and not self.rules.patterns
                    else any(self.text(p) != p for p in run)
                )
            )
        ):
            return {}
        taken: dict[int, str] = {}  # item → the kind of the secret it holds a part of
        pieces = self._cut(run, [s for s in _crossing(run, found) if self._read_on(run, raw, s)], taken)
        while spans := _together(pieces, self.find("".join(pieces))):
            pieces = self._cut(pieces, spans, taken)
        if by_line:
            # (each line's end given back, and taken off again where no secret took it)
            lines = [p + "\n" for p in pieces[:-1]] + pieces[-1:]
            while spans := _together(lines, self.find("".join(lines))):
                lines = self._cut(lines, spans, taken)
            pieces = [line.removesuffix("\n") for line in lines[:-1]] + lines[-1:]
        return {first + i: (pieces[i], kind) for i, kind in sorted(taken.items())}

    def _read_on(self, run: Sequence[str], raw: str, span: tuple[int, int, str]) -> bool:
        """Whether a secret of the items of ``run`` read as one text (``raw``), over a boundary
        between two, is read over the items as given, where the item it starts in, scrubbed alone,
        may keep it: a PEM key to its END line, or a secret the item holds alone to its end, of the
        same kind, whose rest looks random (:func:`_looks_random`: a key cut where an item ends,
        ``["sk-proj-…", "wxyz0123…"]``; not ``"Done"`` after a key, nor the next line of an ``.env``
        file, ``"AWS2_REGION=eu-west-1"``, which an assignment's value reads on into as another kind).
        So too where such a secret of an item the value runs through starts inside the value, of
        whatever kind (``["password=", "password=", "sk-proj-…", "wxyz…"]``: the first name's value
        hid the key; alone, its first piece was replaced and its rest kept). Both readings are
        honoured where the item alone finds a value by its context (a name, an option) and the items
        as one text a known shape that starts with it: ``["--token=sk-proj-", "Q7pV…"]``, the
        option's value alone, a key together, whose rest was kept once the value alone was replaced."""
        a, b, kind = span
        if kind == "private-key" and raw.find("-----END ", a, b) >= 0:
            return True
        ends = list(itertools.accumulate(map(len, run)))
        k = bisect.bisect_right(ends, a)
        for j in range(k, bisect.bisect_left(ends, b)):
            end, start = ends[j], ends[j] - len(run[j])
            if _looks_random(raw[end:b]) and any(
                e == len(run[j]) and (s + start > a or (s + start == a and _same_secret(x, kind)))
                for s, e, x in self.find(run[j])
            ):
                return True
        return False

    def _cut(
        self, pieces: Sequence[str], spans: list[tuple[int, int, str]], taken: dict[int, str]
    ) -> list[str]:
        """``pieces`` scrubbed, each of ``spans`` (secrets over their boundaries in their joined text)
        replaced by its placeholder in the piece where it starts and removed from those it spills
        into; the pieces it touched added to ``taken`` with its kind."""
        ends = list(itertools.accumulate(map(len, pieces)))
        text = "".join(pieces)
        out = list(pieces)
        for a, b, kind in reversed(spans):  # (from the end: offsets before an edit stay)
            k, m = bisect.bisect_right(ends, a), bisect.bisect_left(ends, b)
            head = out[k][: a - ends[k] + len(pieces[k])] + placeholder(kind, text[a:b])
            tail = out[m][b - ends[m] + len(pieces[m]) :]
            out[k : m + 1] = [head, *[""] * (m - k - 1), tail] if m > k else [head + tail]
            taken.update(dict.fromkeys(range(k, m + 1), kind))
        return [self.text(p) for p in out]

    def _command_password(self, value: str, *, user: bool) -> str | None:
        """A client's password option's value (:data:`_CLIENTS`) with the password replaced, the
        ``user`` of ``USER:PASSWORD`` kept where it has one; None where it holds none (a user
        alone; what the shell expands; a placeholder)."""
        name, colon, secret = value.partition(":") if user else ("", "", value)
        if user and not colon:
            return None
        if not _valid_command_password(secret):
            return None
        return name + colon + placeholder(self._context_kind("command-password", secret), secret)

    def event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """A session event (or header) with every payload scrubbed; ``seq``, ``prev``, ``hash`` kept;
        a header's command (``argv``) scrubbed as one (:meth:`argv`).

        Scrubbing is idempotent: an event built from scrubbed values (a checkpoint computes its
        fingerprints over its scrubbed manifest) comes back unchanged.
        """
        out: dict[str, Any] = {}
        is_call = event.get("type") == "model_call"
        for k, v in event.items():
            if k in ("seq", "prev", "hash"):
                out[k] = v
            elif is_call and k in ("request", "response") and isinstance(v, dict):
                out[k] = self.http(v, request=k == "request")
            elif k == "argv" and event.get("type") == "header" and isinstance(v, list):
                out[k] = self.argv([str(a) for a in v])
            elif k in ("source", "workspace") and event.get("type") == "checkpoint":
                # (forkpoint's own account of the state, not a payload: a user's JSON path such as
                # $..fingerprint or $..tree replaced its hashes, and the checkpoint never restored)
                out[k] = self._json(v, ())
            else:
                out[k] = self.json(v)
        return out


# --------------------------------------------------------------------------- the rules in force

_TABLE_KEYS = ("patterns", "json_paths", "headers", "query_params")


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return tuple(value)


def rules_from_table(table: Any, where: str) -> Rules:
    """:class:`Rules` from a parsed ``redact`` table (see :mod:`forkpoint.config`); ``where`` names
    it in errors. Raises :class:`~forkpoint.errors.ConfigError` naming the file and the key."""
    if table is None:
        return Rules(source=where or None)
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = sorted(set(table) - set(_TABLE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_TABLE_KEYS)})")
    patterns: list[tuple[str, str]] = []
    raw = table.get("patterns", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.patterns: expected a list")
    for i, p in enumerate(raw):
        if isinstance(p, str):
            patterns.append(("custom", p))
        elif isinstance(p, dict) and isinstance(p.get("regex"), str) and set(p) <= {"kind", "regex"}:
            kind = p.get("kind", "custom")
            if not isinstance(kind, str):
                raise ConfigError(f"{where}.patterns[{i}].kind: expected a string")
            patterns.append((kind, p["regex"]))
        else:
            raise ConfigError(f"{where}.patterns[{i}]: expected a regex string or {{kind = …, regex = …}}")
    rules = Rules(
        patterns=tuple(patterns),
        json_paths=_strings(table.get("json_paths", []), f"{where}.json_paths"),
        headers=_strings(table.get("headers", []), f"{where}.headers"),
        query_params=_strings(table.get("query_params", []), f"{where}.query_params"),
        source=where,
    )
    try:
        Scrubber(rules)  # compile now: a bad regex or path is reported with the file that holds it
    except RuleError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return rules


def load_rules(start: Path | None = None) -> Rules:
    """The user's redaction rules in force for ``start`` (default: the current directory); empty
    rules when no configuration file applies. Raises :class:`~forkpoint.errors.ConfigError`."""
    table, where = load_table("redact", start)
    if not where:
        return Rules()
    return rules_from_table(table, where)


_state_lock = threading.RLock()
_loaded: Scrubber | None = None
_override: list[Scrubber] = []
#: The scrubbers of anchored configuration searches (the pytest plugin's tests), by directory.
_anchored: dict[Path, Scrubber] = {}


def current() -> Scrubber:
    """The scrubber with the rules in force: set by :func:`use_rules`, else read from configuration
    once per process (see :mod:`forkpoint.config`), or once per :func:`~forkpoint.config.anchored`
    directory inside such a block. Raises ``ConfigError`` for bad configuration."""
    if _override:
        return _override[-1]
    start = config_anchor()
    if start is not None:
        found = _anchored.get(start)
        if found is None:
            with _state_lock:
                found = _anchored.get(start)
                if found is None:
                    found = _anchored[start] = Scrubber(load_rules(start))
        return found
    global _loaded
    scrubber = _loaded
    if scrubber is None:
        with _state_lock:
            if _loaded is None:
                _loaded = Scrubber(load_rules())
            scrubber = _loaded
    return scrubber


def reload() -> Scrubber:
    """Read the configuration again (e.g. after changing directory) and use it from now on."""
    global _loaded
    with _state_lock:
        _loaded = None
        _anchored.clear()
    return current()


@contextmanager
def use_rules(rules: Rules | Scrubber | None) -> Iterator[Scrubber]:
    """Scrub with ``rules`` (built-ins plus these; None: built-ins only) inside the block, in every
    thread of this process."""
    scrubber = rules if isinstance(rules, Scrubber) else Scrubber(rules)
    with _state_lock:
        _override.append(scrubber)
    try:
        yield scrubber
    finally:
        with _state_lock:
            _override.remove(scrubber)


# --------------------------------------------------------------------------- the functions callers use


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Spans ``(start, end, kind)`` of every secret in ``text``, in order, non-overlapping."""
    return current().find(text)


def scrub_text(text: str) -> str:
    """``text`` with every secret replaced by its placeholder."""
    return current().text(text)


def scrub_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """A session's tags (``--tag token=…``) with each value scrubbed as the ``name=value`` text it
    was given as: a credential-named tag's random-looking value is replaced as in a ``.env`` file
    (the header's JSON reads a bare ``token`` key as no credential: logprobs have one)."""
    out = {}
    for name, value in tags.items():
        text = scrub_text(f"{name}={value}")
        out[name] = text.removeprefix(f"{name}=") if text.startswith(f"{name}=") else scrub_text(value)
    return out


def _script_options(script: str, names: list[str]) -> str:
    """``script`` with the value of each credential option in it (:data:`_SECRET_OPTION_WORD`) a
    placeholder, and the options' names added to ``names``. Not a value the shell reads from a
    variable (``--token "$HF_TOKEN"``: no secret in the text, and a replay needs it as it is), nor
    what is an option (``--password --verbose``) or a placeholder already."""

    def replace(m: re.Match[str]) -> str:
        value = m.group("value")
        # What the shell expands is no text of a secret: "$HF_TOKEN", $KEY, $(cat f), `cat f`; a
        # literal is, single-quoted or ANSI-C quoted ('$ecret', $'…') too.
        if value.startswith(("-", '"$', "`")) or (value.startswith("$") and not value.startswith("$'")):
            return m.group(0)
        try:
            words = shlex.split(value[1:] if value.startswith("$'") else value)
        except ValueError:  # (an unclosed quote: the rest of the script is the value)
            words = []
        inner = words[0] if len(words) == 1 else value
        if not inner or _PLACEHOLDER_RE.fullmatch(inner):
            if inner.startswith("[REDACTED:secret-option:"):  # (replaced in the text already)
                names.append(m.group("name"))
            return m.group(0)
        names.append(m.group("name"))
        return m.group(0)[: m.start("value") - m.start()] + placeholder("secret-option", inner)

    return _SECRET_OPTION_WORD.sub(replace, script)


def scrub_argv(args: Sequence[str]) -> list[str]:
    """A command's arguments with every secret replaced, credential options' values whatever
    their shape (:meth:`Scrubber.argv`)."""
    return current().argv(args)


def secret_options(args: Sequence[str]) -> list[str]:
    """The names of the credential options whose values :func:`scrub_argv` replaces in ``args``
    (each once, in order)."""
    return list(dict.fromkeys(current().argv_options(args)[1]))


def scrub_bytes(data: bytes) -> bytes:
    """``data`` with every secret replaced (as UTF-8 text; non-UTF-8 bytes are kept as they are)."""
    return current().bytes(data)


def scrub_file(data: bytes) -> bytes:
    """The bytes of a workspace file as they are stored in a checkpoint: scrubbed like
    :func:`scrub_bytes`, remembered by content hash. Returns ``data`` itself when nothing changes."""
    return current().file(data)


def scrub_chunks(chunks: Sequence[bytes]) -> list[bytes]:
    """Scrub a stream given as chunks, catching secrets split across chunk boundaries (see
    :meth:`Scrubber.chunks`)."""
    return current().chunks(chunks)


def scrub_stream(chunks: Sequence[bytes], content_type: str = "") -> list[bytes]:
    """Scrub a stream's chunks across its events and its chunk boundaries (see
    :meth:`Scrubber.stream`)."""
    return current().stream(chunks, content_type)


def scrub_json(value: Any, *, parsed: bool = False) -> Any:
    """A copy of JSON data with every string (values and keys) scrubbed, credential-named keys'
    values and the user's JSON paths (rooted at ``value``) replaced (``parsed``: see
    :meth:`Scrubber.json`)."""
    return current().json(value, parsed=parsed)


_COOKIE_PLACEHOLDER = compiled_later(r"REDACTED-[0-9a-f]{8}")


def _set_cookie_scrubbed(value: str) -> str:
    """A ``Set-Cookie`` value with the cookie's value replaced by ``REDACTED-<8 hex of its
    SHA-256>`` (characters a cookie may hold, RFC 6265), its name and attributes kept."""
    first, sep, attrs = value.partition(";")
    name, eq, cookie = first.partition("=")
    cookie = cookie.strip().strip('"')
    if eq and cookie and not _COOKIE_PLACEHOLDER.fullmatch(cookie):
        cookie = "REDACTED-" + hashlib.sha256(cookie.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{name}={cookie}{sep}{attrs}" if eq else "REDACTED"


def form_credentials(content: bytes, content_type: str) -> list[tuple[str, str]]:
    """The fields of a form body (``application/x-www-form-urlencoded``, ``multipart/form-data``)
    whose names say they hold a credential (:meth:`Scrubber.credential_param`: a ``password``, an
    OAuth ``client_secret``), as (name, value) decoded, in order."""
    ctype = content_type.split(";", 1)[0].strip().lower()
    scrubber = current()
    if ctype == "application/x-www-form-urlencoded" and b"=" in content:
        fields = parse_qsl(content.decode("utf-8", "replace"), keep_blank_values=True)
        return [(k, v) for k, v in fields if scrubber.credential_param(k)]
    if ctype == "multipart/form-data" and (boundary := _BOUNDARY.search(content_type)):
        parts = content.decode("utf-8", "replace").split("--" + boundary.group(1).strip('"'))
        return [(name, value) for _, name, _, value, _ in scrubber.credential_parts(parts)]
    return []


def json_credentials(content: bytes, content_type: str) -> list[tuple[str, str]]:
    """The string members of a JSON body's objects whose names say they hold a credential (those
    the scrubber replaces: a login's ``password``, ``{"auth": {"api_key": …}}``), as (name, value),
    in order. Objects inside an array are not looked at: a model request's messages hold what the
    model sees (a tool call's arguments), not credentials the server is sent."""
    if "json" not in content_type.lower() or not content.lstrip().startswith(b"{"):
        return []
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return []
    scrubber = current()
    found: list[tuple[str, str]] = []
    objects = deque([data])
    while objects:
        obj = objects.popleft()
        for k, v in obj.items():
            if isinstance(v, dict):
                objects.append(v)
            elif isinstance(v, str) and scrubber._secret_value(k, v):
                found.append((k, v))
    return found


def cookie_placeholders(value: str) -> list[str]:
    """The cookies of a ``Cookie`` header ``value`` whose values are placeholders a scrubbed
    ``Set-Cookie`` handed a replayed client (``sid=REDACTED-…``), as ``name=value``, in order."""
    found = []
    for part in value.split(";"):
        name, eq, cookie = part.strip().partition("=")
        if eq and _COOKIE_PLACEHOLDER.fullmatch(cookie.strip().strip('"')):
            found.append(f"{name}={cookie.strip()}")
    return found


def scrub_headers(headers: Iterable[tuple[str, str]], *, request: bool = False) -> list[list[str]]:
    """Header pairs with their values scrubbed and credential headers dropped, or, of a
    ``request``, kept as placeholders (:meth:`Scrubber.headers`). Names keep their case."""
    return current().headers(headers, request=request)


#: Request headers whose credentials are dropped, not kept as placeholders: a cookie (session
#: state, several values in one header) and the AWS SigV4 headers, which change at every request
#: (the signing key's id is kept: :func:`request_credential`).
DROPPED_REQUEST_CREDENTIALS: frozenset[str] = SIGNING_HEADERS | {"cookie", "x-amz-security-token"}

#: The access key id in a SigV4 ``Authorization`` (``Credential=AKIA…/date/region/service/…``).
_SIGV4_KEY_ID = compiled_later(r"^AWS4-[A-Z0-9-]+ .*?\bCredential=([A-Z0-9]{16,128})/")


def request_credential(name: str, value: Any) -> str | None:
    """What a request's credential header ``name`` (lower-case) is stored as: its whole value's
    placeholder (kind ``header-credential``, one already left as it is), so that of recorded calls
    alike but for their keys a replay serves each its own; a SigV4 ``Authorization``, signed anew at
    every request, as its access key id's placeholder (``aws-access-key``, as in text); None to
    drop it (:data:`DROPPED_REQUEST_CREDENTIALS`)."""
    if not isinstance(value, str) or name in DROPPED_REQUEST_CREDENTIALS:
        return None
    if not value or _is_placeholder(value):
        return value
    if name == "authorization" and value.startswith("AWS4-"):
        key_id = _SIGV4_KEY_ID.search(value)
        return placeholder("aws-access-key", key_id.group(1)) if key_id is not None else None
    return placeholder("header-credential", value)


def scrub_url(url: str) -> str:
    """``url`` with credential query parameters and secret-shaped substrings replaced."""
    return current().url(url)
