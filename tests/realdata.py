"""Where the shared real traffic lives: ``../shared/realdata`` beside the checkout (read in place).

``FORKPOINT_REALDATA`` overrides the location.
"""

from __future__ import annotations

import os
from pathlib import Path

REALDATA = Path(
    os.environ.get("FORKPOINT_REALDATA") or Path(__file__).resolve().parents[2] / "shared" / "realdata"
)
CASSETTES = REALDATA / "cassettes"
TRAJECTORIES = REALDATA / "trajectories"


def cassette_files() -> list[Path]:
    """The VCR cassettes, sorted; empty when the folder is absent."""
    return sorted(CASSETTES.glob("*.yaml")) if CASSETTES.is_dir() else []
