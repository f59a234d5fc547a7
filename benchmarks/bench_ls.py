"""How long ``forkpoint ls`` takes on a store of 10,000 sessions: a local directory, and S3 (moto).

    python benchmarks/bench_ls.py                 # 10,000 sessions, local and S3
    python benchmarks/bench_ls.py --sessions 2000 --skip-s3

Each session is a small but well-formed log (header, 3 model calls, 2 tool calls, end; ~2 KiB) with
a valid hash chain, written straight to disk so that building the store takes seconds. Measured:

local   ``ls`` with no index (the walk that rebuilds it), then ``ls`` from the index: in-process
        (the call that the command makes, plus rendering the table) and ``forkpoint ls`` as a
        subprocess (wall time, Python start-up included); then again after 40 more sessions were
        recorded (40 loose index entries beside the snapshot).
s3      the same store uploaded to a moto S3 server this script starts on 127.0.0.1 (logs and a
        snapshot of the index as a consolidation writes it, plus 40 sessions published one by one:
        loose entries), then ``ls`` in-process and as a subprocess, and ``ls --reindex`` (a walk
        of every key of the store; index entries whose log size matches are kept).

No request leaves the machine: the AWS variables point botocore at the local server with dummy
credentials, without profile, config file or instance metadata.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from forkpoint.canonical import digest
from forkpoint.log import FORMAT, FORMAT_VERSION, LOG_NAME
from forkpoint.show import render_listing
from forkpoint.store import ENTRIES, list_sessions, open_store, read_index, session_finished

FORKPOINT = [str(Path(sys.executable).with_name("forkpoint"))]
if not Path(FORKPOINT[0]).exists():  # pragma: no cover
    FORKPOINT = [sys.executable, "-m", "forkpoint.cli"]


def _line(obj: dict[str, Any]) -> bytes:
    obj["hash"] = digest({k: v for k, v in obj.items() if k != "hash"})
    return orjson.dumps(obj) + b"\n"


def write_session(root: Path, i: int, t0: float) -> Path:
    """One session directory, written directly in format 1 (what SessionWriter would write)."""
    t = t0 + i
    sid = time.strftime("%Y%m%d-%H%M%S", time.gmtime(t)) + "-" + secrets.token_hex(3)
    created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".000Z"
    header = {
        "type": "header",
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "session_id": sid,
        "created": created,
        "name": f"bench-{i}",
        "argv": ["python", "agent.py", "--task", str(i)],
        "cwd": "/home/me/agent",
        "tags": {"agent_version": "1.4", "prompt_version": None},
        "versions": {"python": "3.11.7", "forkpoint": "0.1.0"},
        "git": None,
        "parent": None,
        "span_id": secrets.token_hex(8),
        "platform": "linux",
    }
    lines = [_line(header)]
    prev = header["hash"]
    events: list[dict[str, Any]] = []
    for k in range(3):
        events.append(
            {
                "type": "model_call",
                "ts": created,
                "duration_ms": 12.5,
                "request": {
                    "method": "POST",
                    "url": "http://127.0.0.1:8765/v1/chat/completions",
                    "body_kind": "json",
                    "body": {
                        "model": "m",
                        "messages": [{"role": "user", "content": f"turn {k} of task {i}"}],
                    },
                },
                "response": {"status": 200, "body_kind": "json", "body": {"choices": [{"text": f"ok {k}"}]}},
                "pid": 1,
            }
        )
        if k < 2:
            events.append(
                {
                    "type": "tool_call",
                    "ts": created,
                    "tool": "run_tests",
                    "args": {"k": k},
                    "result": 0,
                    "pid": 1,
                }
            )
    events.append({"type": "end", "ts": created, "exit_code": 0, "duration_ms": 100.0, "reason": None})
    for seq, e in enumerate(events, start=1):
        obj = {"seq": seq, **e, "prev": prev}
        lines.append(_line(obj))
        prev = obj["hash"]
    d = root / sid
    d.mkdir(mode=0o700)
    (d / LOG_NAME).write_bytes(b"".join(lines))
    return d


def build_store(root: Path, n: int) -> list[Path]:
    root.mkdir(parents=True, mode=0o700)
    t0 = time.time() - n - 10
    return [write_session(root, i, t0) for i in range(n)]


def timed(fn: Any, repeat: int = 1) -> tuple[Any, Any]:
    """Seconds (one run: a float; several: {"median", "min"}; the machine may be shared, and the
    minimum is the least disturbed run), and the last result."""
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    if repeat == 1:
        return round(times[0], 3), out
    return {"median": round(statistics.median(times), 3), "min": round(min(times), 3)}, out


def ls_inprocess(spec: str | Path) -> int:
    listing = list_sessions(spec)
    render_listing(listing.rows)
    return len(listing.rows)


def ls_subprocess(spec: str, env: dict[str, str]) -> int:
    p = subprocess.run(
        [*FORKPOINT, "ls", "--store", spec], capture_output=True, text=True, env=env, timeout=300
    )
    if p.returncode != 0:
        raise SystemExit(f"forkpoint ls failed: {p.stderr}")
    return len(p.stdout.splitlines()) - 1


def bench_local(root: Path, n: int, env: dict[str, str]) -> dict[str, Any]:
    t, _ = timed(lambda: build_store(root, n))
    print(f"local: built {n} sessions in {t} s", flush=True)
    out: dict[str, Any] = {}
    out["cold_walk_s"], rows = timed(lambda: ls_inprocess(root))
    assert rows == n, rows
    out["warm_inprocess_s"], rows = timed(lambda: ls_inprocess(root), repeat=5)
    assert rows == n
    out["warm_cli_s"], rows = timed(lambda: ls_subprocess(str(root), env), repeat=5)
    assert rows == n
    extra = build_store(root / "_more", 40)
    for d in extra:
        d.rename(root / d.name)
        session_finished(root / d.name)  # what the end of a recording does: one loose entry
    (root / "_more").rmdir()
    io = open_store(root).io
    out["loose_entries"] = len(io.names(ENTRIES))
    out["with_loose_inprocess_s"], rows = timed(lambda: ls_inprocess(root), repeat=5)
    assert rows == n + 40
    out["with_loose_cli_s"], rows = timed(lambda: ls_subprocess(str(root), env), repeat=5)
    return out


def bench_s3(root: Path, n: int, env: dict[str, str]) -> dict[str, Any]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        aws = {
            "AWS_ACCESS_KEY_ID": "forkpoint-bench",
            "AWS_SECRET_ACCESS_KEY": "forkpoint-bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ENDPOINT_URL_S3": endpoint,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
            "FORKPOINT_STORE_OPTIONS": json.dumps({"client_kwargs": {"endpoint_url": endpoint}}),
        }
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[k]
        os.environ.update(aws)
        env = {k: v for k, v in env.items() if not k.startswith("AWS_")} | aws
        url = "s3://forkpoint-bench/team/sessions"
        rs = open_store(url)
        fs = rs.fs
        fs.mkdir("forkpoint-bench")
        dirs = sorted(p for p in root.iterdir() if (p / LOG_NAME).is_file())
        start = time.perf_counter()
        fs.put([str(d / LOG_NAME) for d in dirs], [f"{rs.root}/{d.name}/{LOG_NAME}" for d in dirs])
        print(f"s3: uploaded {len(dirs)} logs in {time.perf_counter() - start:.1f} s", flush=True)
        # The index as a consolidation leaves it: one snapshot (the local store's, same entries).
        local_entries = read_index(open_store(root).io).entries
        from forkpoint.store import IndexState, consolidate

        consolidate(rs.io, IndexState(), extra=local_entries.values())
        # 40 more sessions published the way a recording's end publishes them: loose entries.
        more = build_store(root.parent / "s3-more", 40)
        mirror = rs.path
        for d in more:
            shutil.move(str(d), mirror / d.name)
            rs.upload(mirror / d.name)
        total = len(dirs) + 40
        out: dict[str, Any] = {"loose_entries": len(rs.io.names(ENTRIES))}
        out["first_inprocess_s"], rows = timed(lambda: ls_inprocess(url), repeat=1)
        assert rows == total, (rows, total)
        out["inprocess_s"], rows = timed(lambda: ls_inprocess(url), repeat=5)
        out["cli_s"], rows = timed(lambda: ls_subprocess(url, env), repeat=5)
        assert rows == total, rows
        out["reindex_s"], _ = timed(lambda: open_store(url).listing(reindex=True))
        out["after_reindex_cli_s"], rows = timed(lambda: ls_subprocess(url, env), repeat=5)
        assert rows == total
        return out
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--skip-s3", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="forkpoint-bench-ls-"))
    os.environ["FORKPOINT_CACHE"] = str(tmp / "cache")
    os.environ["FORKPOINT_FSYNC"] = "never"
    os.environ.pop("FORKPOINT_STORE", None)
    env = dict(os.environ)
    try:
        results: dict[str, Any] = {"sessions": args.sessions}
        results["local"] = bench_local(tmp / "store", args.sessions, env)
        print("local:", json.dumps(results["local"]), flush=True)
        if not args.skip_s3:
            results["s3"] = bench_s3(tmp / "store", args.sessions, env)
            print("s3:", json.dumps(results["s3"]), flush=True)
        print(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
