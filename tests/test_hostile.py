"""Hostile input: a session is data from anywhere. Every bad input gets a clear error naming the file
and the place; nothing is written outside the target; nothing in a session is executed, imported or
unpickled; a 100 MB value is recorded and loaded without memory blowing up; no check hangs."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner

import forkpoint
from forkpoint import verify
from forkpoint.canonical import digest
from forkpoint.capture.targets import install_import_hook
from forkpoint.capture.tools import RecordedToolError, rebuild_exception
from forkpoint.checkpoint import CheckpointError, restore
from forkpoint.cli import main
from forkpoint.log import LOG_NAME, Session, SessionError, SessionWriter
from tests.gitutil import git
from tests.test_trust import flat, forge_header, forge_lines

# ----------------------------------------------------------------------------- helpers


def _session(store: Path, events: list[dict[str, Any]]) -> Path:
    w = SessionWriter.create(store, {"argv": ["agent.py"]}, fsync="never")
    for e in events:
        w.append(e)
    w.close()
    return w.path


def _events() -> list[dict[str, Any]]:
    big = "payload line\n" * 200  # a blob
    return [
        {"type": "note", "text": "one", "data": {"big": big}},
        {"type": "tool_call", "tool": "t", "args": {"q": 1}, "result": {"r": big + "!"}},
        {"type": "note", "text": "three", "data": {}},
        {"type": "end", "exit_code": 0},
    ]


def _snapshot(root: Path) -> dict[str, tuple[int, bytes | str]]:
    out: dict[str, tuple[int, bytes | str]] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (
            st.st_mode,
            os.readlink(p) if p.is_symlink() else (p.read_bytes() if p.is_file() else b""),
        )
    return out


def _rewrite_line(path: Path, lineno: int, new: bytes) -> None:
    log = path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    lines[lineno - 1] = new
    log.write_bytes(b"".join(lines))


# ----------------------------------------------------------------------------- malformed logs


@pytest.mark.parametrize(
    "garbage",
    [
        b"not json at all\n",
        b'{"seq": 2, "type": "note"\n',  # cut
        b"[1, 2, 3]\n",
        b'{"hello": "world"}\n',
        b"\n",
        b'{"seq": 2, "type": "note", "text": "\xff\xfe invalid utf-8", "hash": "x"}\n',
        b"\x00\x01\x02\x03\n",
    ],
    ids=["text", "cut", "array", "not-event", "empty", "invalid-utf8", "binary"],
)
def test_malformed_line_is_named_by_load_and_verify(tmp_path: Path, garbage: bytes) -> None:
    path = _session(tmp_path / "store", _events())
    _rewrite_line(path, 3, garbage)
    before = _snapshot(path)
    with pytest.raises(SessionError) as exc:
        Session.load(path)
    assert f"{path / LOG_NAME}:3:" in str(exc.value)
    v = verify(path)
    assert not v.ok and f"{path / LOG_NAME}:3:" in v.problems[0], v.problems
    assert _snapshot(path) == before  # reading never writes


def test_invalid_utf8_in_the_header_and_unknown_version(tmp_path: Path) -> None:
    path = _session(tmp_path / "store", _events())
    log = path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    head = orjson.loads(lines[0])
    for version, match in ((4, "version 4 is not supported"), ("1", "version '1' is not supported")):
        head["version"] = version
        head.pop("hash")
        head["hash"] = digest(head)
        log.write_bytes(orjson.dumps(head) + b"\n" + b"".join(lines[1:]))
        with pytest.raises(SessionError, match=rf"{re.escape(str(log))}:1: session format {match}"):
            Session.load(path)
        with pytest.raises(SessionError, match="not supported"):
            SessionWriter.open(path)
        assert "not supported" in verify(path).problems[0]
    log.write_bytes(lines[0].replace(b'"argv"', b'"\xffrgv"') + b"".join(lines[1:]))
    with pytest.raises(SessionError, match=rf"{re.escape(str(log))}:1: header is not valid JSON"):
        Session.load(path)
    log.write_bytes(b"")
    with pytest.raises(SessionError, match="empty session log"):
        Session.load(path)
    v = verify(path)  # an empty log is not an "incomplete" session: there is nothing to trust
    assert not v.ok and v.problems == [f"{log}: empty: a session log starts with its header"]
    log.write_bytes(lines[0][:40])
    v = verify(path)
    assert not v.ok and v.problems == [f"{log}:1: header line is incomplete"]
    log.unlink()
    log.mkdir()
    with pytest.raises(SessionError, match="is a directory"):
        Session.load(path)


def test_missing_blob_and_blob_not_matching_its_hash(tmp_path: Path) -> None:
    path = _session(tmp_path / "store", _events())
    blobs = sorted(p for p in (path / "blobs").rglob("*") if p.is_file())
    assert len(blobs) == 2
    first = blobs[0]
    data = first.read_bytes()
    first.write_bytes(data[:-1] + b"?")
    with pytest.raises(SessionError) as exc:
        Session.load(path)
    # A compressed blob (.zst) whose frame is damaged cannot even be decompressed; a raw one hashes wrong.
    assert str(first) in str(exc.value)
    assert re.search("does not match its hash|cannot be decompressed", str(exc.value))
    assert re.search(rf"referenced from {re.escape(str(path / LOG_NAME))}:\d+", str(exc.value))
    v = verify(path)
    assert not v.ok and str(first) in v.problems[0] and "referenced from" in v.problems[0]
    first.unlink()
    with pytest.raises(SessionError, match="is missing"):
        Session.load(path)
    assert "is missing" in verify(path).problems[0]


def test_a_compressed_blob_that_holds_more_than_its_reference_says_is_refused_early(tmp_path: Path) -> None:
    """A hostile session's compression bomb: a .zst blob that inflates to 64 MiB where its
    reference says a few KB. Loading it stops at the size the reference gives, with an error naming
    the blob and the line, instead of inflating it whole in memory (and then finding the hash wrong)."""
    import zstandard

    path = _session(tmp_path / "store", _events())
    packed = sorted(p for p in (path / "blobs").rglob("*.zst") if p.is_file())
    assert packed, "the test needs a compressed blob"
    with open(packed[0], "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as w:
        for _ in range(64):
            w.write(bytes(1 << 20))
    assert packed[0].stat().st_size < 1 << 16
    with pytest.raises(SessionError) as exc:
        Session.load(path)
    assert str(packed[0]) in str(exc.value) and "holds more than the" in str(exc.value)
    assert "bytes its reference says (referenced from" in str(exc.value)


def test_delta_pointing_nowhere_and_bad_reserved_values(tmp_path: Path) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    call = {
        "type": "model_call",
        "request": {
            "method": "POST",
            "url": "http://127.0.0.1/v1/x",
            "headers": [],
            "body_kind": "json",
            "body": body,
        },
        "response": None,
    }
    path = _session(tmp_path / "store", [call, call])
    log = path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    obj = orjson.loads(lines[2])

    def rewrite(line: dict[str, Any]) -> None:  # (as the last line, hashed again)
        line.pop("hash")
        line["hash"] = digest(line)
        log.write_bytes(lines[0] + lines[1] + orjson.dumps(line) + b"\n")

    assert "$delta" in obj["request"]["body"]["messages"]
    obj["request"]["body"]["messages"]["$delta"]["base"] = 7  # refers to a later, missing event
    rewrite(obj)
    with pytest.raises(SessionError, match=rf"{LOG_NAME}:3: request field 'messages' refers to event 7"):
        Session.load(path)
    v = verify(path)
    assert not v.ok and f"{LOG_NAME}:3:" in v.problems[0] and "refers to event 7" in v.problems[0]
    # Items replaced past those kept, twice, or in no [index, item] form.
    item = {"role": "user", "content": "x"}
    for replaced, loading in (
        ([[1, item]], "replaces items \\[1\\]: the indices must ascend, each below the 1 kept"),
        ([[0, item], [0, item]], "replaces items \\[0, 0\\]"),
        ("x", "cannot decode the event"),
        ([[0.5, item]], "cannot decode the event"),  # (an index read with int() would be 0)
        ([["0", item]], "cannot decode the event"),
        ({"0x": item}, "cannot decode the event"),  # (a dict's keys read as pairs: item 0 "x")
        (["0x"], "cannot decode the event"),
    ):
        obj["request"]["body"]["messages"]["$delta"] = {"base": 1, "keep": 1, "set": replaced, "add": []}
        rewrite(obj)
        with pytest.raises(SessionError, match=rf"{LOG_NAME}:3: .*{loading}"):
            Session.load(path)
        v = verify(path)
        assert (
            not v.ok
            and f"{LOG_NAME}:3:" in v.problems[0]
            and '"set" is not [index, item] pairs' in v.problems[0]
        )
    # A well-formed "set" in a session whose header says version 2, whose readers would leave it out.
    obj["request"]["body"]["messages"]["$delta"] = {"base": 1, "keep": 1, "set": [[0, item]], "add": []}
    rewrite(obj)
    assert Session.load(path).events[1]["request"]["body"]["messages"] == [item]
    head = orjson.loads(lines[0])
    head["version"] = 2
    head.pop("hash")
    head["hash"] = digest(head)
    lines[0] = orjson.dumps(head) + b"\n"
    for i in (1, 2):  # (chained again from the new header)
        line = orjson.loads(lines[i]) if i == 1 else obj
        line["prev"] = orjson.loads(lines[i - 1])["hash"]
        line.pop("hash")
        line["hash"] = digest(line)
        lines[i] = orjson.dumps(line) + b"\n"
    log.write_bytes(b"".join(lines))
    assert verify(path, deep=False).problems == [
        f"{log}:3: event seq 2: field 'messages': the delta has a \"set\", which came with "
        "format version 3, in a version-2 session"
    ]
    with pytest.raises(SessionError, match=rf"{LOG_NAME}:3: .*replaces items \[0\] in a version-2 session"):
        Session.load(path)
    obj["request"]["body"] = {"$b64": "not base64!!"}
    rewrite(obj)
    with pytest.raises(SessionError, match=rf"a \$b64 holds 'not base64!!', not base64 .*{LOG_NAME}:3\)"):
        Session.load(path)


# ----------------------------------------------------------------------------- restore stays inside


def _checkpoint_session(
    store: Path, rows: list[tuple[str, str, bytes]], source: Any = None
) -> tuple[Path, int]:
    w = SessionWriter.create(store, {"argv": ["agent.py"]}, fsync="never")
    manifest = []
    for rel, kind, data in rows:
        manifest.append([rel, kind, 0o644 if kind == "file" else 0o777, len(data), w.blobs.put(data)])
    seq = w.append(
        {
            "type": "checkpoint",
            "boundary": "resumable",
            "turn": 1,
            "source": source,
            "workspace": {"root": "/nowhere", "manifest": manifest, "fingerprint": digest(manifest)},
            "context": None,
            "context_digest": None,
        }
    )
    w.append({"type": "end", "exit_code": 0})
    w.close()
    return w.path, seq


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([("ok.txt", "file", b"1"), ("../escape.txt", "file", b"x")], "points outside the target"),
        ([("/tmp/abs.txt", "file", b"x")], "points outside the target"),
        ([("a/../../escape.txt", "file", b"x")], "points outside the target"),
        ([("link", "symlink", b"../outside"), ("link/pwned.txt", "file", b"x")], "lies under 'link'"),
        ([("link", "symlink", b"/"), ("link/etc/pwned", "file", b"x")], "lies under 'link'"),
        ([(".git/hooks/post-checkout", "file", b"#!/bin/sh\necho pwned\n")], "not a normal workspace path"),
    ],
    ids=["dotdot", "absolute", "dotdot-inside", "through-symlink", "through-root-symlink", "git-hook"],
)
def test_restore_refuses_entries_that_leave_the_target(
    tmp_path: Path, rows: list[tuple[str, str, bytes]], message: str
) -> None:
    path, seq = _checkpoint_session(tmp_path / "store", rows)
    arena = tmp_path / "arena"
    (arena / "outside").mkdir(parents=True)
    before = _snapshot(tmp_path)
    with pytest.raises(CheckpointError, match=message):
        restore(Session.load(path), seq, arena / "into")
    after = _snapshot(tmp_path)
    assert after == before  # nothing written anywhere, not even the (removed) target directory
    assert not Path("/tmp/abs.txt").exists()


def test_restore_refuses_to_write_through_a_tracked_symlink_pointing_outside(tmp_path: Path) -> None:
    """The repository itself holds ``out -> <outside>``; a manifest entry under ``out/`` must not be
    written through it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "out").symlink_to(outside)
    git(repo, "add", "out")
    git(repo, "commit", "-q", "-m", "a link")
    with forkpoint.record(store=tmp_path / "rec", workspace=repo) as rec:
        rec.checkpoint(reason="manual")
    real = Session.load(rec.session_path).by_type("checkpoint")[0]
    path, seq = _checkpoint_session(tmp_path / "store", [("out/pwned.txt", "file", b"x")], real["source"])
    # the crafted session names the real repository's objects: copy them over
    src_objects = rec.session_path / "git-objects"
    if src_objects.is_dir():
        import shutil

        shutil.copytree(src_objects, path / "git-objects")
    with pytest.raises(CheckpointError, match="through a symlink outside the target"):
        restore(Session.load(path), seq, tmp_path / "into")
    assert list(outside.iterdir()) == []


# ----------------------------------------------------------------------------- nothing is executed


EVIL = """
from pathlib import Path
Path({marker!r}).write_text("imported!")
class Boom(Exception):
    pass
def fn():
    pass
"""


def test_a_session_naming_modules_imports_none_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "marker"
    (tmp_path / "evil_forkpoint_mod.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("evil_forkpoint_mod", None)
    error = {"type": "Boom", "module": "evil_forkpoint_mod", "message": "recorded"}
    exc = rebuild_exception(error)
    assert isinstance(exc, RecordedToolError) and exc.module == "evil_forkpoint_mod"
    exc = rebuild_exception({"type": "os.system", "module": "builtins", "message": "x"})
    assert isinstance(exc, RecordedToolError)
    install_import_hook(["evil_forkpoint_mod:fn"])  # a session header's --tool target

    @forkpoint.tool(name="evil")
    def evil(path: str) -> str:
        raise AssertionError("a replayed tool body never runs")

    store = tmp_path / "store"
    path = _session(
        store,
        [
            {
                "type": "tool_call",
                "tool": "evil",
                "args": {"path": {"$type": "evil_forkpoint_mod.Boom"}},
                "error": error,
            },
            {
                "type": "model_call",
                "request": {
                    "method": "GET",
                    "url": "http://127.0.0.1:9/x",
                    "headers": [],
                    "body_kind": "empty",
                    "body": None,
                },
                "response": None,
                "error": {"type": "Boom", "module": "evil_forkpoint_mod", "message": "no"},
            },
            {"type": "end", "exit_code": 0},
        ],
    )
    with forkpoint.replay(path, tools="replay") as rp:
        with pytest.raises(RecordedToolError) as raised:
            evil({"$type": "evil_forkpoint_mod.Boom"})  # type: ignore[arg-type]
        assert str(raised.value) == "recorded" and "evil_forkpoint_mod.Boom" in raised.value.__notes__[0]
        with pytest.raises(Exception) as model_exc, httpx.Client() as client:
            client.get("http://127.0.0.1:9/x")
    assert "evil_forkpoint_mod" not in type(model_exc.value).__module__
    assert rp.report()["matched"] == 2
    assert not marker.exists() and "evil_forkpoint_mod" not in sys.modules


@pytest.mark.parametrize(
    ("result", "said"),
    [
        (
            {"$type": "evil_forkpoint_mod:Boom", "kind": "dataclass", "value": {}},
            "has not imported evil_forkpoint_mod",
        ),
        ({"$type": "os:system", "kind": "scalar", "value": "touch pwned"}, "defines, but not as a class"),
        (
            {"$type": "subprocess:Popen", "kind": "scalar", "value": "touch pwned"},
            "not a str or int or float",
        ),
        ({"$type": "subprocess:Popen", "kind": "encoded", "value": ["touch", "pwned"]}, "no decoder"),
        (
            {
                "$type": "builtins:generator",
                "kind": "generator",
                "value": [{"$type": "os:popen", "kind": "path", "value": "x"}],
            },
            "but not as a class",
        ),
    ],
)
def test_typed_results_of_a_session_import_and_call_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, result: dict[str, Any], said: str
) -> None:
    """A typed result names a class, but a session is data from anywhere: a class is only looked up
    among the modules already imported, must be of the family its kind says, and an ``encoded``
    value needs a decoder the program registered. Anything else stops the replay with a divergence
    naming why; nothing is imported, constructed or called."""
    marker = tmp_path / "marker"
    (tmp_path / "evil_forkpoint_mod.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("evil_forkpoint_mod", None)

    @forkpoint.tool(name="typed")
    def typed() -> Any:
        raise AssertionError("a replayed tool body never runs")

    path = _session(
        tmp_path / "store", [{"type": "tool_call", "tool": "typed", "args": {}, "result": result}]
    )
    with forkpoint.replay(path), pytest.raises(forkpoint.Divergence, match=said):
        out = typed()
        if inspect.isgenerator(out):
            list(out)
    assert not marker.exists() and "evil_forkpoint_mod" not in sys.modules
    assert not (tmp_path / "pwned").exists()


def test_forkpoint_never_unpickles_or_evals() -> None:
    """Static guard: no deserializer that runs code anywhere in the package."""
    root = Path(forkpoint.__file__).parent
    bad = re.compile(
        r"\b(?:pickle|marshal|shelve|dill|cloudpickle)\b|(?<![.\w])(?:eval|exec)\(|yaml\.unsafe_load"
        r"|yaml\.load\((?!.*Loader=)|Loader=yaml\.(?:Full|Unsafe)?Loader\b"
    )
    hits = [
        f"{p.relative_to(root)}:{i}: {line.strip()}"
        for p in root.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if bad.search(line) and not line.lstrip().startswith("#")
    ]
    assert hits == []


# ----------------------------------------------------------------------------- invalid UTF-8 bodies


def test_invalid_utf8_response_bodies_and_chunks_round_trip(server: Any, tmp_path: Path) -> None:
    with forkpoint.record(store=tmp_path / "store") as rec, httpx.Client(base_url=server.url) as client:
        body = client.get("/b", params={"kind": "binary", "size": 600}).content
        small = client.get("/b", params={"kind": "binary", "size": 40}).content
        with client.stream("POST", "/s", params={"kind": "sse", "n": 3}) as r:
            streamed = b"".join(r.iter_raw())
    s = Session.load(rec.session_path)
    calls = s.by_type("model_call")
    assert calls[0]["response"]["body_kind"] == "bytes" and calls[0]["response"]["body"] == body
    assert calls[1]["response"]["body"] == small
    assert (
        b"".join(c if isinstance(c, bytes) else c.encode() for _, c in calls[2]["response"]["chunks"])
        == streamed
    )
    assert verify(rec.session_path).ok
    # a non-UTF-8 chunk of a stream is kept as bytes, exactly
    w = SessionWriter.open(rec.session_path, fsync="never")
    w.append(
        {
            "type": "model_call",
            "request": {
                "method": "GET",
                "url": "http://127.0.0.1/x",
                "headers": [],
                "body_kind": "empty",
                "body": None,
            },
            "response": {
                "status": 200,
                "headers": [["content-type", "text/event-stream"]],
                "body_kind": "stream",
                "chunks": [[1.0, "data: é"], [2.0, b"\xc3"], [3.0, b"\xa9\xff\xfe data: x\n\n"]],
                "ended": "complete",
            },
        }
    )
    w.close()
    last = Session.load(rec.session_path).by_type("model_call")[-1]["response"]["chunks"]
    assert last == [[1.0, "data: é"], [2.0, b"\xc3"], [3.0, b"\xa9\xff\xfe data: x\n\n"]]


def test_strings_json_cannot_hold_survive_the_log_and_show(tmp_path: Path) -> None:
    """Lone surrogates (file names decoded with surrogateescape, as values and as keys) and integers
    beyond 64 bits: kept, and shown by ``show``, ``show --json`` (Python's JSON text) and ``show --html``."""
    data = {
        "name": "caf\udce9.txt",
        "big": 2**80,
        "neg": -(2**70),
        "nested": ["\ud800", {"k": 2**65}],
        "sizes": {"caf\udce9.txt": 3, "ok": 1},  # such a name as a key
    }
    tool = {"type": "tool_call", "tool": "stat", "args": {"path": "caf\udce9.txt"}, "result": data}
    path = _session(tmp_path / "store", [{"type": "note", "text": "odd \udcff", "data": data}, tool])
    note = Session.load(path).events[0]
    assert note["data"] == data and note["text"] == "odd \udcff"
    assert verify(path).ok
    runner = CliRunner()
    shown = runner.invoke(main, ["show", str(path)], env={"COLUMNS": "250"}, catch_exceptions=False)
    assert shown.exit_code == 0 and '"big":1208925819614629174706176' in shown.output
    as_json = runner.invoke(main, ["show", str(path), "--json"], catch_exceptions=False)
    assert as_json.exit_code == 0 and "\\udce9" in as_json.output
    assert [e["result"] for e in json.loads(as_json.output)["events"] if e["type"] == "tool_call"] == [data]
    page = tmp_path / "page.html"
    assert (
        runner.invoke(main, ["show", str(path), "--html", str(page)], catch_exceptions=False).exit_code == 0
    )
    assert "1208925819614629174706176" in page.read_text()


def test_escape_sequences_in_what_was_recorded_do_not_reach_the_terminal(tmp_path: Path) -> None:
    """A model's or a tool's output holding an escape sequence (clear the screen, set the window
    title, recolour) or a carriage return was printed raw by ``show`` and ``diff``: whoever read the
    session had their terminal steered by it. It is printed as ``\\x1b``-style escapes."""
    nasty = "\x1b[2J\x1b]0;pwned\x07\rover\x9b31m"
    tool = {"type": "tool_call", "tool": "out", "args": {"x": nasty}, "result": "red " + nasty}
    a = _session(tmp_path / "store", [{"type": "note", "text": "note " + nasty}, tool])
    b = _session(tmp_path / "store", [{"type": "note", "text": "note"}, {**tool, "result": "plain"}])
    runner = CliRunner()
    for args in (["show", str(a)], ["diff", str(a), str(b)]):
        shown = runner.invoke(main, args, env={"COLUMNS": "250"}, catch_exceptions=False)
        assert shown.exit_code == 0, shown.output
        assert not any(c in shown.output for c in "\x1b\x07\r\x9b"), ascii(shown.output)
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\rover" in runner.invoke(main, ["show", str(a)]).output


def test_a_model_name_stop_reason_or_tool_name_steers_no_terminal(tmp_path: Path) -> None:
    """The model's name (from the request), the stop reason (the server's word), a tool error's type
    and, in ``diff``'s summary, a tool's name were printed raw: escape sequences reached the terminal
    and rich markup in them was obeyed (``[link=…]`` made a hyperlink; ``[bold]`` vanished)."""
    nasty = "\x1b]0;pwned\x07\x1b[2J[bold]x[/bold][link=http://127.0.0.1/]y[/link]"
    request = {
        "method": "POST",
        "url": "http://127.0.0.1/v1/chat/completions",
        "headers": [["content-type", "application/json"]],
        "body_kind": "json",
        "body": {"model": "m" + nasty, "messages": [{"role": "user", "content": "hi"}]},
    }
    answer = {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "finish_reason": "stop" + nasty, "message": {"role": "assistant", "content": "ok"}}
        ],
    }
    response = {
        "status": 200,
        "reason": "OK",
        "headers": [["content-type", "application/json"]],
        "body_kind": "json",
        "body": answer,
        "ended": "complete",
    }
    error = {"type": "Boom" + nasty, "module": "x", "message": "m"}
    events = [
        {"type": "model_call", "request": request, "response": response},
        {"type": "tool_call", "tool": "t" + nasty, "args": {}, "error": error},
    ]
    a = _session(tmp_path / "store", events)
    b = _session(tmp_path / "store", [events[0], {**events[1], "tool": "other"}])
    runner = CliRunner()
    for args in (["show", str(a)], ["diff", str(a), str(b)]):
        shown = runner.invoke(main, args, env={"COLUMNS": "400"}, catch_exceptions=False)
        assert not any(c in shown.output for c in "\x1b\x07"), ascii(shown.output)
        assert "[bold]x[/bold][link=http://127.0.0.1/]y[/link]" in shown.output, shown.output
    shown = runner.invoke(main, ["show", str(a)], env={"COLUMNS": "400"}).output
    assert "stop=stop\\x1b]0;pwned" in shown and "raised Boom\\x1b]0;pwned" in shown, shown


# ----------------------------------------------------------------------------- 100 MB


_BIG = """
import resource, sys, time
from pathlib import Path
import forkpoint
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
line = "2026-11-29 18:19:03 INFO worker-7 processed request 12345 in 3.2 ms (status ok)\\n"
if sys.argv[1] == "record":
    @forkpoint.tool
    def dump() -> str:
        return line * (100_000_000 // len(line))
    base = rss()
    t = time.perf_counter()
    with forkpoint.record(store=Path(sys.argv[2])) as rec:
        n = len(dump())
    print(rss() - base, n, time.perf_counter() - t, rec.session_path)
else:
    from forkpoint.log import Session
    base = rss()
    t = time.perf_counter()
    s = Session.load(Path(sys.argv[2]))
    n = len(s.by_type("tool_call")[0]["result"])
    print(rss() - base, n, time.perf_counter() - t, "-")
"""

MB = 1 << 20


@pytest.mark.slow
def test_a_100mb_tool_result_is_recorded_and_loaded_in_a_few_times_its_size(tmp_path: Path) -> None:
    env = dict(os.environ, FORKPOINT_FSYNC="never")
    out = subprocess.run(
        [sys.executable, "-c", _BIG, "record", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    grew, n, seconds, session = out.stdout.split()
    assert int(n) >= 99_000_000
    # the result itself is 100 MB (a str, plus its JSON and UTF-8 forms while they are written)
    assert int(grew) < 6 * 100 * MB, f"recording grew the process by {int(grew) // MB} MB"
    path = Path(session)
    assert (path / LOG_NAME).stat().st_size < 100_000  # the string is a blob, not a line
    out = subprocess.run(
        [sys.executable, "-c", _BIG, "load", session], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    grew, n, seconds, _ = out.stdout.split()
    assert int(n) >= 99_000_000 and int(grew) < 4 * 100 * MB, (
        f"loading grew the process by {int(grew) // MB} MB"
    )

    # verification streams the blob; a damaged one is named quickly, never hangs
    t = time.perf_counter()
    assert verify(path).ok
    blob = max((p for p in (path / "blobs").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with open(blob, "r+b") as f:
        f.seek(50 * MB)
        f.write(b"#")
    v = verify(path)
    assert not v.ok and str(blob) in v.problems[0]
    with pytest.raises(SessionError, match="does not match its hash|cannot be decompressed"):
        Session.load(path)
    assert time.perf_counter() - t < 30


def test_a_huge_line_in_a_hostile_log_gets_a_clear_error(tmp_path: Path) -> None:
    path = _session(tmp_path / "store", _events())
    log = path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    lines.insert(2, b'{"seq": 2, "type": "note", "text": "' + b"A" * (20 * MB) + b"\n")  # never closed
    log.write_bytes(b"".join(lines))
    t = time.perf_counter()
    with pytest.raises(SessionError, match=rf"{LOG_NAME}:3: malformed event line"):
        Session.load(path)
    v = verify(path)
    assert not v.ok and f"{LOG_NAME}:3:" in v.problems[0]
    assert time.perf_counter() - t < 10


def test_a_log_of_one_huge_line_is_refused_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log that is one line without a newline (a hostile or garbled file) was read whole into
    memory, twice over (858 MB for a 400 MB line), before being refused as an incomplete header:
    the header line is read up to :data:`~forkpoint.log.reader.HEADER_MAX` only."""
    from forkpoint.log import reader

    path = _session(tmp_path / "store", _events())
    (path / LOG_NAME).write_bytes(b'{"type": "header", "x": "' + b"A" * 4096)
    monkeypatch.setattr(reader, "HEADER_MAX", 64, raising=False)
    assert [len(line.raw) for line in reader.event_lines(path / LOG_NAME, [])] == [64]
    with pytest.raises(SessionError, match=rf"{LOG_NAME}:1: header line is incomplete"):
        Session.load(path)


def test_config_file_that_is_not_toml_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forkpoint.errors import ConfigError
    from forkpoint.redact import load_rules

    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    (tmp_path / "forkpoint.toml").write_bytes(b"[redact\n\xff")
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "forkpoint.toml"))):
        load_rules(tmp_path)
    (tmp_path / "forkpoint.toml").write_text(
        textwrap.dedent(
            """
            [redact]
            patterns = [{ kind = "Bad Kind", regex = "x" }]
            """
        )
    )
    with pytest.raises(ConfigError, match="lower-case"):
        load_rules(tmp_path)
    (tmp_path / "forkpoint.toml").write_text('[redact]\npatterns = ["a*"]\n')
    with pytest.raises(ConfigError, match="matches the empty string"):
        load_rules(tmp_path)


def test_a_header_and_a_model_error_steer_no_terminal(tmp_path: Path) -> None:
    """The header's start time, git commit and branch, versions and parent, and a model call's error
    type were printed raw by show, as the model's name was."""
    nasty = "\x1b]0;pwned\x07[bold]x[/bold]"
    header = {
        "argv": ["agent.py"],
        "created": "2026" + nasty,
        "git": {"commit": "c" + nasty, "branch": "b" + nasty},
        "versions": {"python": "3" + nasty},
        "parent": {"session_id": "p" + nasty, "seq": 3},
    }
    w = SessionWriter.create(tmp_path / "store", header, fsync="never")
    request = {
        "method": "POST",
        "url": "http://127.0.0.1/v1/chat/completions",
        "body_kind": "json",
        "body": {},
    }
    w.append({"type": "model_call", "request": request, "error": {"type": "E" + nasty, "message": "m"}})
    w.close()
    shown = CliRunner().invoke(main, ["show", str(w.path)], env={"COLUMNS": "400"}, catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert not any(c in shown.output for c in "\x1b\x07"), ascii(shown.output)
    for field in ("2026", "b", "3", "p", "E"):
        assert field + "\\x1b]0;pwned\\x07[bold]x[/bold]" in shown.output, (field, shown.output)


@pytest.mark.parametrize(
    "stored",
    [
        {"tool_calls": 5},
        {"tool_calls": ["x"], "usage": "many"},
        {"server_tool_calls": {"name": "search"}, "model": ["m"]},
    ],
)
def test_a_model_calls_summary_of_the_wrong_shape_is_derived_again(tmp_path: Path, stored: Any) -> None:
    """A model call's ``summary`` is derived when a session is read, but one an event carries (an
    importer's) was kept as it was: a hand-edited ``"tool_calls": 5`` crashed ``show``, the page
    and the export with a TypeError. A summary of the wrong shape is derived again."""
    w = SessionWriter.create(tmp_path / "store", {"argv": ["agent.py"]}, fsync="never")
    body = {"model": "m", "messages": [{"role": "user", "content": "2 + 3?"}]}
    answer = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "5"}, "finish_reason": "stop"}]
    }
    w.append(
        {
            "type": "model_call",
            "request": {
                "method": "POST",
                "url": "http://127.0.0.1:9/v1/chat/completions",
                "headers": [],
                "body_kind": "json",
                "body": body,
            },
            "response": {"status": 200, "headers": [], "body_kind": "json", "body": answer},
            "summary": stored,
        }
    )
    w.append({"type": "end", "exit_code": 0})
    w.close()
    (call,) = Session.load(w.path).by_type("model_call")
    assert call["summary"]["tool_calls"] == [] and call["summary"]["stop_reason"] == "stop"
    runner = CliRunner()
    for args in (
        ["show", str(w.path)],
        ["show", str(w.path), "--html", str(tmp_path / "page.html")],
        ["export", str(w.path), "--file", str(tmp_path / "spans.jsonl"), "--content"],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output, result.exception)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": 5}),
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "assistant", "tool_calls": [5]}]}),
        ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": True}),
        ("/v1beta/models/g:generateContent", {"contents": 1.5}),
        ("/v1beta/models/g:generateContent", {"contents": [{"role": ["model"], "parts": 5}]}),
        ("/v1beta/models/g:generateContent", {"contents": [], "systemInstruction": {"parts": -1}}),
    ],
)
def test_a_request_body_of_the_wrong_shape_is_exported_without_a_traceback(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    """The export read a request's messages for the GenAI conventions as lists of objects: a
    hand-edited ``"messages": 5`` (or a part, a role, a system instruction of another shape) crashed
    ``export --content`` with a TypeError, where show and the page read the same body."""
    w = SessionWriter.create(tmp_path / "store", {"argv": ["agent.py"]}, fsync="never")
    request = {
        "method": "POST",
        "url": "http://127.0.0.1:9" + path,
        "headers": [],
        "body_kind": "json",
        "body": body,
    }
    w.append({"type": "model_call", "request": request, "response": {"status": 200, "headers": [], "body_kind": "json", "body": {}}})  # fmt: skip
    w.append({"type": "end", "exit_code": 0})
    w.close()
    out = tmp_path / "spans.jsonl"
    result = CliRunner().invoke(main, ["export", str(w.path), "--file", str(out), "--content"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert out.read_bytes()


@pytest.mark.parametrize("args", [[1, 2], "q", 5])
def test_a_tool_calls_arguments_of_the_wrong_shape_are_shown(tmp_path: Path, args: Any) -> None:
    """``show`` read a tool call's arguments as names and values: a hand-edited ``"args": [1, 2]``
    crashed it with an AttributeError. They are shown as they are."""
    w = SessionWriter.create(tmp_path / "store", {"argv": ["agent.py"]}, fsync="never")
    w.append({"type": "tool_call", "tool": "t", "args": args, "result": 1})
    w.append({"type": "end", "exit_code": 0})
    w.close()
    result = CliRunner().invoke(main, ["show", str(w.path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert "t(" in result.output


STREAM_URL = "http://127.0.0.1:9/v1/messages"


def _call(**changes: Any) -> dict[str, Any]:
    """A streamed model call as a recording writes it, with ``changes`` made to it."""
    event: dict[str, Any] = {
        "type": "model_call",
        "duration_ms": 3.5,
        "request": {
            "method": "POST",
            "url": STREAM_URL,
            "headers": [["content-type", "application/json"]],
            "body_kind": "json",
            "body": {},
        },
        "response": {
            "status": 200,
            "headers": [["content-type", "text/event-stream"]],
            "body_kind": "stream",
            "chunks": [[0.5, "event: ping\ndata: {}\n\n"]],
        },
    }
    for key, value in changes.items():
        holder, _, field = key.rpartition("__")
        (event[holder] if holder else event)[field] = value
    return event


@pytest.mark.parametrize(
    ("event", "said"),
    [
        (_call(response__chunks=[[0.0]]), "its response's chunks are not [ms, text] pairs"),
        (_call(response__chunks=[[0.0, 1.5]]), "its response's chunks are not [ms, text] pairs"),
        (_call(duration_ms=[1]), "its duration_ms is [1], not a number"),
        (_call(request__headers=[[5, "x"]]), "its request's headers are not [name, value] pairs of text"),
        # (the pairs are looked at in C first, by the exact types JSON gives: each of these fails there)
        (_call(response__chunks=[[0.1, "a"], [True, "b"]]), "its response's chunks are not [ms, text] pairs"),
        (_call(response__chunks=[[0.1, "a"], [0.2, None]]), "its response's chunks are not [ms, text] pairs"),
        (
            _call(request__headers=[["a", "b", "c"]]),
            "its request's headers are not [name, value] pairs of text",
        ),
        (
            _call(request__headers=[["a", "b"], ["c"]]),
            "its request's headers are not [name, value] pairs of text",
        ),
        (
            _call(response__headers=[["a", "b"], "cd"]),
            "its response's headers are not [name, value] pairs of text",
        ),
        (_call(request={}), "its request has no url"),
        ({"type": "tool_call", "tool": "t", "args": {}, "result": 1, "mcp": [1]}, "its mcp is not an object"),
    ],
)
def test_a_call_of_the_wrong_shape_is_named_not_crashed_on(tmp_path: Path, event: Any, said: str) -> None:
    """A hand-edited log whose calls' fields have the wrong shape (a chunk without its text, a
    duration that is a list, a header name that is a number, a request without its URL) crashed
    ``show``, ``diff`` and the export with a traceback; reading it names the line and what is wrong."""
    w = SessionWriter.create(tmp_path / "store", {"argv": ["agent.py"]}, fsync="never")
    w.append(event)
    w.append({"type": "end", "exit_code": 0})
    w.close()
    with pytest.raises(SessionError, match=re.escape(f"{LOG_NAME}:2: event 1 ({event['type']}): {said}")):
        Session.load(w.path)
    for args in (
        ["show", str(w.path)],
        ["diff", str(w.path), str(w.path)],
        ["export", str(w.path), "--file", "-"],
    ):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and said in result.output, (args, result.output, result.exception)
        assert not isinstance(result.exception, TypeError | ValueError | AttributeError | KeyError)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("tags", 5, "tags is 5, not an object"),
        ("argv", "python agent.py", "argv is 'python agent.py', not a list of texts"),
        ("cwd", 5, "cwd is 5, not text"),
        ("name", ["a"], "name is ['a'], not text or null"),
        ("versions", [1], "versions is [1], not an object"),
        ("git", 5, "git is 5, not an object or null"),
        ("deterministic", [1, "x"], "deterministic is [1, 'x'], not true, false or a list of module names"),
        ("hash_seed", "abc", "hash_seed is 'abc', not a whole number"),
    ],
)
def test_a_header_field_of_the_wrong_type_is_named_not_crashed_on(
    tmp_path: Path, field: str, value: Any, said: str
) -> None:
    """A hand-edited header (its chain recomputed) with a field of the wrong type crashed show, diff,
    export and check with a traceback (``tags: 5``, ``versions: [1]``, ``name: ["a"]``), stopped
    replay with a bare TypeError (``deterministic: [1, "x"]``, ``cwd: 5``), ran ``p`` for an
    ``argv`` that was text and replayed without a word under another hash seed than ``"abc"``.
    Every reader now names the header line and the field."""
    w = SessionWriter.create(tmp_path / "store", {"argv": ["agent.py"]}, fsync="never")
    w.append({"type": "end", "exit_code": 0})
    w.close()
    forge_header(w.path, **{field: value})
    with pytest.raises(SessionError, match=re.escape(f"{LOG_NAME}:1: the header's {said}")):
        Session.load(w.path)
    assert said in verify(w.path).problems[0]
    before = _snapshot(w.path)
    for args in (
        ["show", str(w.path)],
        ["show", str(w.path), "--html", str(tmp_path / "page.html")],
        ["diff", str(w.path), str(w.path)],
        ["export", str(w.path), "--file", "-"],
        ["replay", "--trust", str(w.path)],
        ["make-test", "--trust", "--into", str(tmp_path / "t"), str(w.path)],
        ["scrub", str(w.path)],
    ):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and said in result.output, (args, result.output, result.exception)
        assert not isinstance(result.exception, TypeError | ValueError | AttributeError | KeyError)
    assert _snapshot(w.path) == before


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({"type": "bogus"}, "2: event 1 (bogus): its type 'bogus' is no event type of a session log"),
        ({"type": 5}, "2: event 1 (5): its type 5 is no event type of a session log"),
        ({"seq": "1"}, "2: malformed event line: not an event: its seq '1' is not a whole number"),
        ({"duration_ms": "x"}, "3: event 2 (end): its duration_ms is 'x', not a number"),
        ({"exit_code": "zero"}, "3: event 2 (end): its exit_code is 'zero', not a whole number"),
        ({"uncaught": 5}, "3: event 2 (end): its uncaught is not a list of exceptions"),
        ({"uncaught": [5]}, "3: event 2 (end): its uncaught is not a list of exceptions"),
        ({"error": "boom"}, "2: event 1 (tool_call): its error is not an exception"),
    ],
)
def test_an_event_of_the_wrong_type_or_shape_is_named_not_left_out(
    tmp_path: Path, edit: dict[str, Any], said: str
) -> None:
    """A hand-edited event (its chain recomputed): a tool call whose type was no event type was left
    out of show's timeline without a word (and replay diverged at it); verify said of a seq ``"1"``
    that it was "out of order (expected seq 1)"; an end's duration_ms of ``"x"`` crashed show with a
    ValueError; an end's uncaught of ``5`` crashed show and make-test, a tool call's error of
    ``"boom"`` show, replay and the export. Each is named with its line."""
    w = SessionWriter.create(tmp_path / "store", {"argv": ["agent.py"]}, fsync="never")
    w.append({"type": "tool_call", "tool": "t", "args": {"q": 1}, "result": 2, "duration_ms": 1.0})
    w.append({"type": "end", "exit_code": 0, "duration_ms": 5.0})
    w.close()
    target = 2 if {"duration_ms", "exit_code", "uncaught"} & set(edit) else 1
    forge_lines(w.path, lambda lines: lines[target].update(edit))
    with pytest.raises(SessionError, match=re.escape(f"{LOG_NAME}:{said}")):
        Session.load(w.path)
    if "seq" in edit:
        assert said.partition("line: ")[2] in verify(w.path).problems[0]
    for args in (["show", str(w.path)], ["show", str(w.path), "--html", str(tmp_path / "p.html")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and said.partition(": ")[2] in flat(result.output), (args, result.output)
