"""Every error forkpoint raises on purpose, in one hierarchy rooted at :class:`ForkpointError`.

The library never raises a command-line framework's exceptions: the ``forkpoint`` command turns a
:class:`UsageError` into a usage error (exit 2) and any other :class:`ForkpointError` into an error
message (exit 1). Each message names what was wrong and where (the file, line, session or option).

Each can be pickled, as ``multiprocessing`` sends a worker's exception to the process that waits
for it (a pool whose result cannot be unpickled waits for ever).

This module is the bottom of the package: it imports nothing of forkpoint.
"""

from __future__ import annotations

from typing import Any


class ForkpointError(Exception):
    """Base class of errors forkpoint raises on purpose."""


class UsageError(ForkpointError, ValueError):
    """A request that cannot be carried out as asked (a missing command, an option that does not
    apply to this session); the message says what to do instead."""


class ConfigError(ForkpointError, ValueError):
    """The configuration cannot be used; the message names the file and the key."""


class RuleError(ForkpointError, ValueError):
    """A redaction rule (a regex, a JSON path) that cannot be compiled."""


class SessionError(ForkpointError):
    """A session cannot be read or written; the message names the file and the place."""


class IdentityError(SessionError):
    """An encrypted session cannot be read: no identity is at hand, or the one given is not one of
    the session's recipients; the message names the session and where the identity came from."""


class CheckpointError(ForkpointError):
    """A checkpoint cannot be taken, restored or validated; the message says which and why."""


class OverrideError(ForkpointError, ValueError):
    """An override spec that cannot be parsed or does not fit the session."""


class ScrubError(ForkpointError):
    """A session cannot be re-scrubbed (it does not verify, or is still being recorded)."""


class ImportFormatError(ForkpointError, ValueError):
    """A file that is not in a format forkpoint imports, or is damaged; the message says which."""


class ExportError(ForkpointError):
    """An export that cannot be done (the OpenTelemetry extra is missing, the endpoint refused)."""


class ToolResultError(ForkpointError, TypeError):
    """A tool returned (or was given) a value forkpoint cannot store as JSON.

    ``type_name`` is the offending value's type (``module.Qualname``) and ``where`` the place in the
    result (``result["items"][2]``), when known.
    """

    def __init__(self, message: str, *, type_name: str = "", where: str = "") -> None:
        super().__init__(message)
        self.type_name, self.where = type_name, where

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self),), {"type_name": self.type_name, "where": self.where}


class UnrebuildableValue(ForkpointError, ValueError):
    """A recorded value that cannot be rebuilt as what it was in this process (its class is not
    imported here, or no longer accepts the recorded fields); the message names the class and why."""


class RecordedToolError(ForkpointError):
    """Raised on replay for a recorded tool exception whose class cannot be rebuilt.

    ``type_name``, ``module`` and ``message`` are those of the original exception. Its text is the
    original's, as a framework that sends a tool's error text to the model reads it (google-genai,
    LangChain, smolagents), so the replayed run sends what the recorded one did; a note (shown under
    a traceback) names the class.
    """

    def __init__(self, type_name: str, module: str, message: str) -> None:
        super().__init__(message)
        self.type_name, self.module, self.message = type_name, module, message
        self.add_note(
            f"forkpoint: recorded as a {module}.{type_name}, which this replay cannot rebuild "
            "(it imports no module to find a class)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.type_name, self.module, self.message)


class RecordedError(ForkpointError):
    """A recorded transport failure whose exception class cannot be rebuilt here."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"recorded {error.get('module')}.{error.get('type')}: {error.get('message')}")
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.error,)


class Divergence(ForkpointError):
    """The replayed run made a call that the recording does not have.

    ``report`` is the structured divergence report (JSON data, :class:`forkpoint.events.DivergenceReport`):
    ``kind``, ``position``, ``actual``, ``expected`` (the next unused recorded call of that kind),
    ``nearest``, ``diff`` (list of changes by JSON path, expected → actual) and ``reason``. The
    message is the report in words (:func:`forkpoint.replay.format_divergence`).
    """

    def __init__(self, report: Any, message: str) -> None:
        self.report = report
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.report, str(self))


class SigningError(ForkpointError):
    """A signing key or the trusted list cannot be used, or a session cannot be signed; the message
    names the file."""


class UntrustedSession(ForkpointError):
    """A session's recorded command would run, but the session is not signed by a trusted key; the
    message shows the command and how to run it anyway."""


class CannotRecord(SessionError):
    """No session can be created in the store (a full disk, a read-only one, a path through a
    file): ``forkpoint record`` then runs the command unrecorded, and says so."""


class NetworkBlocked(ForkpointError, ConnectionError):
    """A socket tried to reach the network during a replay."""


class ReplayWarning(UserWarning):
    """A replay went on where the recording did not reach, as the user's policy allowed (the pytest
    plugin's ``on_divergence="fifo"`` or ``"live"``): the test passes or fails on its own, and this
    warning says where and how the run left its cassette."""


class McpServerNotStarted(ForkpointError, ConnectionError):
    """A replay had to make a call to an MCP server live, but the session is not connected to it:
    the server is reached over a socket, which the replay did not open while it served the session
    (``--tools live`` connects from the start), or the stdio server it started for that (a replay
    that may go live starts it, kept apart while the session is served) did not accept the
    session's recorded ``initialize`` request, or ended."""
