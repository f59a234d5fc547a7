"""Replayable checkpoints of a coding agent's state: take, restore in a fresh directory, validate.

A checkpoint holds the three layers a coherent continuation needs:

* **source state** — the tracked files (the entries of the repository's index) as they are in the
  working tree, as a git *tree*, and the canonical diff of that tree against the base commit (one
  section per changed path, each content-addressed, so a checkpoint where one file changed stores that
  file's section only). The tree is built with a private index and new objects go to the session's
  own object folder (``<session>/git-objects``; the repository's objects are only read, as
  alternates), so taking a checkpoint never writes into the user's repository. The tree hash names
  the state exactly (modes, symlinks, binary content, deletions) and does not depend on the user's
  git config: global and system config are ignored, the settings that change hashing or diffing are
  pinned, and no rename detection, external diff or textconv driver is used. Filter drivers (e.g.
  git-lfs) are the one exception: the repository's ``.gitattributes`` names them, so the user's
  ``filter.*`` settings are passed through. The staged state (``index_tree``) and HEAD are kept too,
  so a restored repository shows the same ``git status``.
* **workspace state** — the untracked files (``.gitignore`` respected unless ignored files are asked
  for; a plain folder when there is no repository), as a manifest of
  ``[path, "file"|"symlink", mode, size, sha256]`` sorted by path, with every file's bytes in the
  session's content-addressed blob store. The fingerprint is the SHA-256 of the canonical JSON of the
  manifest. There are no owners or times in it. Tracked files whose bytes a checkout of their
  content would not give back (``.gitattributes`` line-ending, ``ident`` or encoding conversions:
  :meth:`.source.SourceTracker.converted`), and those marked skip-worktree (git does not look at
  their edits), are in the manifest too; a restore writes them after the checkout.
* **carried context** — the message prefix the agent carries (the request body's ``messages`` /
  ``input`` / ``contents`` and its ``system`` / ``instructions``) and its digest, plus the files those
  messages refer to that existed at the checkpoint (they must exist after a restore).

A checkpoint is **resumable** only at an agent boundary: right before a model call, when every tool
result of the previous turn is in. One taken after a tool call that is not the last of its turn is
**observable**: a valid environment state, but resuming there would make the agent speak twice.

Taking a checkpoint is incremental and never writes into the user's repository: the private index
keeps its stat cache between checkpoints (``git add --update`` rehashes only files that changed; the
first checkpoint starts from a copy of the user's index when their git config cannot make its stat
data mean something else), git commands that write objects never see the repository's objects (git
would touch them instead of writing), trees are built in Python from the index entries (only the
folders that changed; the base commit's trees are never copied), the diff is recomputed only for
paths whose content changed, and untracked files that did not change are not read again. Objects
are synced to disk like the log (``FORKPOINT_FSYNC``).

Limits: a merge conflict's stages are not kept (a restored conflict is a plain modification), an
intent-to-add entry counts as an empty staged file in ``index_tree`` (a restore marks it again:
``intent_to_add``), an empty folder is not kept (as in git: finding
them would walk every ignored folder at every checkpoint), and paths that are not valid UTF-8 cannot be
checkpointed (the event then says ``error``).

One concept a module: :mod:`.git` (running git without the user's config), :mod:`.source` (the
tracked state: trees and the canonical diff), :mod:`.workspace` (the untracked files),
:mod:`.context` (carried context and the files it mentions), :mod:`.take` (a checkpoint event),
:mod:`.restore`, :mod:`.validate` and :mod:`.verify`.
"""

from typing import TYPE_CHECKING

from .._lazy import exports, from_submodules
from ..errors import CheckpointError

if TYPE_CHECKING:
    from .context import CONTEXT_FIELDS, carried_context, referenced_paths
    from .git import git, repo_root
    from .restore import find, restore
    from .source import SourceTracker, patch_bytes
    from .take import Workspace, checkpoint_event
    from .validate import Check, validate
    from .verify import check_checkpoints, verify_session
    from .workspace import ALWAYS_EXCLUDED, MANIFEST_FIELDS, META_DIR, manifest_rows, untracked_files

# Imported when first used: `forkpoint record` finds the repository (.git) and `forkpoint replay`
# verifies the session (.verify) without loading what takes, restores or validates checkpoints.
_SUBMODULES = {
    ".context": ["CONTEXT_FIELDS", "carried_context", "referenced_paths"],
    ".git": ["git", "repo_root"],
    ".restore": ["find", "restore"],
    ".source": ["SourceTracker", "patch_bytes"],
    ".take": ["Workspace", "checkpoint_event"],
    ".validate": ["Check", "validate"],
    ".verify": ["check_checkpoints", "verify_session"],
    ".workspace": ["ALWAYS_EXCLUDED", "MANIFEST_FIELDS", "META_DIR", "manifest_rows", "untracked_files"],
}
# Functions named like their submodules (the submodule, once imported, would hide them).
__getattr__ = exports(__name__, from_submodules(_SUBMODULES), shadowed=("git", "restore", "validate"))

__all__ = [
    "ALWAYS_EXCLUDED",
    "CONTEXT_FIELDS",
    "MANIFEST_FIELDS",
    "META_DIR",
    "Check",
    "CheckpointError",
    "SourceTracker",
    "Workspace",
    "carried_context",
    "check_checkpoints",
    "checkpoint_event",
    "find",
    "git",
    "manifest_rows",
    "patch_bytes",
    "referenced_paths",
    "repo_root",
    "restore",
    "untracked_files",
    "validate",
    "verify_session",
]
