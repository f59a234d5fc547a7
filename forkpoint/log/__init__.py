"""The session log: an append-only JSONL file with a hash chain, and a content-addressed blob folder.

Layout of a session directory (format 1, documented in ``docs/format.md``)::

    <session-id>/
        session.jsonl          line 1: header; then one event per line
        blobs/ab/cdef…         content-addressed payloads, named by the SHA-256 of their bytes
        git-objects/           git objects of checkpoints' source trees (see forkpoint.checkpoint)

Every line carries ``hash`` = SHA-256 of its own canonical JSON without ``hash``; every event also
carries ``prev`` = the ``hash`` of the line before it. Changing a byte anywhere breaks the chain.

One concept a module: :mod:`.codec` (the stored form and its encodings), :mod:`.blobs`,
:mod:`.writer`, :mod:`.reader`, :mod:`.verify`. This package imports only the foundations
(canonical JSON, errors, events) and the scrubber.
"""

from typing import TYPE_CHECKING

from .._lazy import exports, from_submodules
from ..errors import SessionError

if TYPE_CHECKING:
    from ..events import new_session_id, new_span_id, now_iso
    from .blobs import COMPRESS_MIN, ZSTD_SUFFIX, BlobStore
    from .codec import (
        BLOB_DIR,
        BLOB_MIN_BINARY,
        BLOB_MIN_BYTES,
        FORMAT,
        FORMAT_VERSION,
        GIT_OBJECTS,
        JSON_BLOB_FIELDS,
        LOG_NAME,
        MIRROR_DONE,
        MIRROR_RECORDING,
        SESSION_ENTRIES,
        SIGNATURE_NAME,
        delta_container,
        foreign,
        from_json,
        json_text,
        line_hash,
        read_json_text,
        to_json,
        with_deltas,
    )
    from .crypto import (
        IDENTITY_ENV,
        configured_recipients,
        encryption_table,
        identity_path,
        parse_recipients,
        use_identity,
    )
    from .reader import (
        LogTail,
        Session,
        add_deriver,
        check_header,
        has_end,
        is_session_id,
        open_session_header,
        read_header,
    )
    from .verify import Check, StoredLine, Verification, verify
    from .writer import FSYNC_POLICIES, SessionWriter

# Imported when first used: a recording (`forkpoint record`'s process, a recorded program's) writes
# and reads the log without loading what verifies one (.verify).
_SUBMODULES = {
    "forkpoint.events": ["new_session_id", "new_span_id", "now_iso"],
    ".blobs": ["COMPRESS_MIN", "ZSTD_SUFFIX", "BlobStore"],
    ".codec": [
        "BLOB_DIR",
        "BLOB_MIN_BINARY",
        "BLOB_MIN_BYTES",
        "FORMAT",
        "FORMAT_VERSION",
        "GIT_OBJECTS",
        "JSON_BLOB_FIELDS",
        "LOG_NAME",
        "MIRROR_DONE",
        "MIRROR_RECORDING",
        "SESSION_ENTRIES",
        "SIGNATURE_NAME",
        "delta_container",
        "foreign",
        "from_json",
        "json_text",
        "line_hash",
        "read_json_text",
        "to_json",
        "with_deltas",
    ],
    ".crypto": [
        "IDENTITY_ENV",
        "configured_recipients",
        "encryption_table",
        "identity_path",
        "parse_recipients",
        "use_identity",
    ],
    ".reader": [
        "LogTail",
        "Session",
        "add_deriver",
        "check_header",
        "has_end",
        "is_session_id",
        "open_session_header",
        "read_header",
    ],
    ".verify": ["Check", "StoredLine", "Verification", "verify"],
    ".writer": ["FSYNC_POLICIES", "SessionWriter"],
}
# The function named like its submodule (the submodule, once imported, would hide it).
__getattr__ = exports(__name__, from_submodules(_SUBMODULES), shadowed=("verify",))

__all__ = [
    "BLOB_DIR",
    "BLOB_MIN_BINARY",
    "BLOB_MIN_BYTES",
    "COMPRESS_MIN",
    "FORMAT",
    "FORMAT_VERSION",
    "FSYNC_POLICIES",
    "IDENTITY_ENV",
    "GIT_OBJECTS",
    "JSON_BLOB_FIELDS",
    "LOG_NAME",
    "MIRROR_DONE",
    "MIRROR_RECORDING",
    "SESSION_ENTRIES",
    "SIGNATURE_NAME",
    "ZSTD_SUFFIX",
    "BlobStore",
    "Check",
    "LogTail",
    "Session",
    "SessionError",
    "SessionWriter",
    "StoredLine",
    "Verification",
    "add_deriver",
    "check_header",
    "has_end",
    "configured_recipients",
    "encryption_table",
    "identity_path",
    "parse_recipients",
    "use_identity",
    "open_session_header",
    "delta_container",
    "foreign",
    "from_json",
    "json_text",
    "line_hash",
    "read_json_text",
    "new_session_id",
    "new_span_id",
    "now_iso",
    "read_header",
    "is_session_id",
    "to_json",
    "verify",
    "with_deltas",
]
