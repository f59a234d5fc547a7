"""Python programs a recording started and does not record: their calls never go missing silently.

A recorded program's Python subprocesses run as they would without forkpoint (docs/format.md: the
activation is taken out of the environment once read), so a model or tool call one of them makes
is not in the session, and a replay runs it again for real. While a recorder is active, a Python
audit hook (``sys.addaudithook``: the ``subprocess.Popen``, ``os.posix_spawn`` and ``os.system``
events, PEP 578) notes each Python program started outside a recorded tool's body (a tool's result
is recorded, and its body does not run on replay) and without forkpoint's activation in its
environment; at the end the recorder writes them into the session and says them
(:func:`forkpoint.api.finish_recording`), and a replay's verdict names them.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any

from .. import runtime

_lock = threading.Lock()
_installed = False
#: The command lines of the Python programs started while recording, in order, each once.
_started: dict[str, None] = {}
#: At most this many are kept (a program that starts one per item).
_KEPT = 20
#: Characters of a command line kept.
_SHOWN = 200
#: What a Python interpreter's file is called (``python``, ``python3``, ``python3.11``).
_PYTHON = re.compile(r"python[0-9.]*(?:\.exe)?")
#: The variable of forkpoint's activation: a child given it is recorded (forkpoint's own programs).
_ACTIVATION = "FORKPOINT_MODE"
#: True while a program is started whose calls forkpoint records another way (:func:`accounted`).
_accounted: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "forkpoint_program_accounted", default=False
)


@contextlib.contextmanager
def accounted() -> Iterator[None]:
    """The programs started in this context are accounted for: their calls are recorded where the
    program is talked to, and a replay does not start them (an MCP server an MCP stdio transport
    starts, whose requests are MCP calls). Not to be named as unrecorded."""
    token = _accounted.set(True)
    try:
        yield
    finally:
        _accounted.reset(token)


def _is_python(program: Any) -> bool:
    """Whether ``program`` (a command's first word) runs Python: an interpreter by its name or
    this one's path, a ``.py`` script, or a file whose ``#!`` line names Python (a script, a
    package's console script such as ``pytest``), found as the shell finds it."""
    try:
        word = os.fsdecode(program)
    except TypeError:
        return False
    name = os.path.basename(word)
    if _PYTHON.fullmatch(name) or name.endswith(".py"):
        return True
    import shutil  # (here: every process `forkpoint record` starts loads this module)

    path = shutil.which(word) if os.sep not in word else word
    if path is None:
        return False
    if os.path.realpath(path) == os.path.realpath(sys.executable):
        return True
    try:
        if not os.path.isfile(path):  # (a regular file's first line only: never a FIFO's wait)
            return False
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]


#: Shells, whose ``-c`` command runs programs of its own.
_SHELL = re.compile(r"(?:ba|da|k|z)?sh")
#: Programs that run the program named after them, past their options and a count or a duration
#: (``timeout 10s``, ``nice -n 5``).
_WRAPPERS = frozenset(
    {"env", "exec", "nohup", "time", "command", "nice", "stdbuf", "setsid", "timeout", "sudo"}
)
#: A wrapper's option, or the count or duration it takes.
_WRAPPER_WORD = re.compile(r"-.*|[0-9.]+[smhd]?|\w+=.*")
#: A wrapper's options whose value is the next word, which is no program (``timeout -s KILL 10``,
#: ``env -u NAME``, ``sudo -u USER``); not ``time -p``, a switch.
_WRAPPER_VALUES = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "sudo": frozenset(
        {"-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir", "-h", "--host", "-p"}
        | {"--prompt", "-r", "--role", "-t", "--type", "-U", "--other-user", "-R", "--chroot"}
    ),
}
#: A runner's options whose value is the next word (``uv run --python 3.12``, ``conda run -n NAME``).
_RUNNER_VALUES = frozenset(
    {"-n", "-p", "--name", "--prefix", "--with", "--with-editable", "--with-requirements", "--python"}
    | {"--project", "--directory", "--package", "--group", "--only-group", "--extra", "--env-file"}
    | {"--index", "--index-url"}
)
#: Runners whose ``run`` runs a command in a Python environment (``uv run pytest``, ``poetry run
#: python``), and those that run a Python package's program (``uvx mcp-server-fetch``).
_RUNNERS = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "rye", "conda"})
_PACKAGE_RUNNERS = frozenset({"uvx", "pipx"})
#: Shell words after which a command starts.
_STARTS = frozenset({"&&", "||", ";", "|", "&", "(", "{", "!", "then", "do", "else", "elif", "while", "if"})


def _programs(argv: list[str]) -> list[str]:
    """The programs a command line runs: its first word past wrappers (``env``, ``nohup``) and
    ``VAR=value`` settings, and the commands of a shell's ``-c`` script (``sh -c``, ``bash -ec``,
    ``bash -o pipefail -c``)."""
    i = 0
    while i < len(argv) and (os.path.basename(argv[i]) in _WRAPPERS or re.match(r"\w+=", argv[i])):
        takes = _WRAPPER_VALUES.get(os.path.basename(argv[i]), frozenset())
        i += 1
        while i < len(argv) and _WRAPPER_WORD.fullmatch(argv[i]):
            i += 2 if argv[i] in takes else 1
    i = min(i, len(argv))
    if i == len(argv):
        return []
    name = os.path.basename(argv[i])
    if name in _PACKAGE_RUNNERS:
        return ["python"]
    if name in _RUNNERS and "run" in argv[i + 1 : i + 2]:
        rest = argv[i + 2 :]
        while rest and rest[0].startswith("-"):  # (its options; conda's -n NAME takes a word)
            rest = rest[2:] if rest[0] in _RUNNER_VALUES else rest[1:]
        return _programs(rest)
    out = [argv[i]]
    if _SHELL.fullmatch(os.path.basename(argv[i])):
        j = i + 1
        while j < len(argv) - 1 and argv[j][:1] in ("-", "+") and argv[j] != "--":
            if _COMMAND_OPTION.fullmatch(argv[j]):
                out += _script_programs(argv[j + 1])
                break
            j += 2 if argv[j] in ("-o", "+o", "-O", "+O") else 1  # (an option that takes a name)
    return out


#: A shell's options that include ``-c`` (``-c``, ``-ec``, ``-lc``, ``-xec``).
_COMMAND_OPTION = re.compile(r"-[A-Za-z]*c[A-Za-z]*")
#: The characters of the shell's operators (``;``, ``&&``, ``|``, ``(``, redirections) and the
#: newline, which ends a command as ``;`` does.
_OPERATOR_CHARS = "();<>|&\n"


def _separates(word: str) -> bool:
    """Whether ``word`` (as the lexer below splits a script) ends a command and starts the next:
    ``&&``, ``;``, a newline, or a run of them (``;\n``, ``)&&``); not a redirection (``>&``)."""
    if word in _STARTS:
        return True
    return (
        bool(word)
        and all(c in _OPERATOR_CHARS for c in word)
        and not word.startswith((">", "<"))
        and any(c in ";&|(\n" for c in word)
    )


def _script_programs(script: str) -> list[str]:
    """The programs a shell script runs: the first word of each of its commands (one a line, or
    joined by ``;``, ``&&``, ``|``...)."""
    import shlex

    lexer = shlex.shlex(script, posix=True, punctuation_chars=_OPERATOR_CHARS)
    lexer.whitespace = " \t\r"  # (a newline is an operator here, not a space)
    lexer.whitespace_split = True
    out: list[str] = []
    command: list[str] = []
    try:
        words = [*lexer, ";"]
    except ValueError:  # (an unbalanced quote: the shell will say so)
        return []
    for word in words:
        if _separates(word):
            out += _programs(command)
            command = []
        else:
            command.append(word)
    return out


def _note(argv: list[str], env: Any, executable: Any = None) -> None:
    """Note the command line ``argv`` when it runs a Python program (``executable`` in its first
    word's place, when given) that this recording does not record."""
    if not runtime.may_be_active() or _accounted.get():  # (the hook stays once a recording ended)
        return
    if isinstance(env, dict) and (_ACTIVATION in env or os.fsencode(_ACTIVATION) in env):
        return
    # (the cheap checks first: this one looks programs up on PATH and reads their first line)
    programs = _programs(argv) + ([os.fsdecode(executable)] if executable is not None else [])
    if not any(_is_python(p) for p in programs):
        return
    # Asked only now: under `forkpoint record` the recorder is made when first asked for
    # (runtime.activate_later), and a program that runs `git status` and makes no call loads none.
    rt = runtime.active()
    # (a recording's for its session; a replay's for its verdict, and its what-if session if any)
    if rt is None:
        return
    from .tools import in_tool_body

    if in_tool_body():
        return
    # (imported here: every process `forkpoint record` starts loads this module, and few name one)
    from .. import redact

    line = " ".join(redact.current().argv(argv))
    line = line if len(line) <= _SHOWN else line[: _SHOWN - 1] + "…"
    with _lock:
        if len(_started) < _KEPT:
            _started.setdefault(line, None)


def _argv(args: Any) -> list[str]:
    if isinstance(args, str | bytes | os.PathLike):
        return [os.fsdecode(args)]
    return [os.fsdecode(a) for a in args]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Every audited operation of the process comes here (imports, opens): nothing but a compare for
    # them. An exception here would fail the program's own call: none leaves.
    if event not in ("subprocess.Popen", "os.posix_spawn", "os.system"):
        return
    try:
        if event == "subprocess.Popen":  # (executable, args, cwd, env); a shell's as [sh, -c, script]
            _note(_argv(args[1]), args[3], args[0])
        elif event == "os.posix_spawn":  # (path, argv, env)
            _note(_argv(args[1]), args[2], args[0])
        else:  # (command,): run by sh -c
            _note(["sh", "-c", os.fsdecode(args[0])], None)
    except Exception:  # noqa: BLE001 - noting is never worth failing the program's subprocess
        pass


def install() -> None:
    """Add the audit hook (once a process: an audit hook cannot be removed; it does nothing while no
    recorder is active)."""
    global _installed
    with _lock:
        if not _installed:
            sys.addaudithook(_audit)
            _installed = True


def reset() -> None:
    """Forget the programs noted so far (a new recording starts)."""
    with _lock:
        _started.clear()


def unrecorded() -> list[str]:
    """The command lines (secrets scrubbed, each cut at 200 characters, at most 20) of the Python
    programs started since :func:`reset` that the recording does not record."""
    with _lock:
        return list(_started)


def _program_key(line: str) -> str:
    """``line`` with each Python interpreter's path as ``python``: a replay run from another
    environment (or with ``python3`` for ``python``) starts the same program."""
    return " ".join("python" if _PYTHON.fullmatch(os.path.basename(w)) else w for w in line.split(" "))


def unrecorded_besides(recorded: list[str]) -> list[str]:
    """The programs :func:`unrecorded` names that ``recorded`` (a recording's note) does not: those
    a replay started and its recording did not (today's code)."""
    known = {_program_key(line) for line in recorded}
    return [line for line in unrecorded() if _program_key(line) not in known]


#: The text of the note that names them.
NOTE = "Python programs forkpoint did not record"


def child_note(parent_span_id: str | None) -> dict[str, Any] | None:
    """The note naming them (:func:`unrecorded`) for the what-if session a replay records (what
    :func:`forkpoint.api.finish_recording` writes into a recording), or None when there are none."""
    started = unrecorded()
    if not started:
        return None
    from ..events import new_span_id

    data = {"unrecorded_programs": started}
    return {
        "type": "note",
        "span_id": new_span_id(),
        "parent_span_id": parent_span_id,
        "pid": os.getpid(),
        "text": NOTE,
        "data": data,
    }
