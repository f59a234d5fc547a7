"""A hook on ``os.exec*``: a recorded or replayed program that replaces itself with another ends
its part first (:func:`forkpoint._boot.start` hands the run on to the new program; a
``forkpoint.record()`` block ends its session there, saying so). Imported at every bootstrapped
start: nothing but ``os``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn


def around_exec(before: Callable[[str, list[str], dict[str, str]], Callable[[], None]]) -> Callable[[], None]:
    """Make ``os.execv`` and ``os.execve`` (every ``os.exec*`` goes through one of them) call
    ``before(file, args, env)`` first, once the tool calls running in this context were written as
    ended by the exec (:func:`forkpoint.capture.tools.execing`): ``env`` is the new program's
    environment (a copy of this one's, or of the one given to ``execve``), to which it may add;
    it returns what undoes it should the exec fail.
    An exec in a child forked from this process (a subprocess) or of a file that cannot be run
    (``execvp`` tries each folder of ``PATH``) goes through untouched. Returns what puts the
    previous functions back."""
    started, real_execv, real_execve = os.getpid(), os.execv, os.execve

    def execve(path: Any, args: Any, env: Mapping[str, str] | None = None) -> NoReturn:
        if os.getpid() != started or not (isinstance(path, int) or os.access(path, os.X_OK)):
            real_execve(path, args, os.environ if env is None else env)
        # (an environment of bytes, as execve takes too: a str key beside its bytes twin would be the
        # second of two entries of the same name, which the new program does not read)
        new = {os.fsdecode(k): os.fsdecode(v) for k, v in (os.environ if env is None else env).items()}
        file, argv = str(path) if isinstance(path, int) else os.fsdecode(path), [os.fsdecode(a) for a in args]
        tools = sys.modules.get("forkpoint.capture.tools")
        if tools is not None and not isinstance(path, int):  # (a tool body's exec: its call ends here)
            tools.execing(file, argv)
        undo = before(file, argv, new)
        try:
            real_execve(path, args, new)
        except BaseException:
            undo()
            raise

    def execv(path: Any, args: Any) -> NoReturn:
        execve(path, args)

    os.execv, os.execve = execv, execve  # type: ignore[assignment]

    def put_back() -> None:
        if os.execve is execve:
            os.execv, os.execve = real_execv, real_execve

    return put_back
