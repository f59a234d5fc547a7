"""forkpoint reads installed distributions without importlib.metadata where it can (it reads every
distribution's metadata, tens of milliseconds at every bootstrapped start): the versions in a
session header and the check for entry-point plugins must say what importlib.metadata says."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest

from forkpoint import plugins


def test_versions_are_those_importlib_metadata_reads() -> None:
    names = sorted({d.metadata["Name"] for d in metadata.distributions()})
    assert len(names) > 20  # the test extra installs many
    expected = {n: metadata.version(n) for n in names}
    assert plugins.versions([*names, "surely-not-installed-dist"]) == expected


def test_a_development_install_without_a_version_in_its_folder_name_is_read_by_importlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    egg = tmp_path / "Some_Tool.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: some-tool\nVersion: 4.5.6\n")
    newer = tmp_path / "later"
    (newer / "some_tool-9.9.9.dist-info").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(newer), *sys.path])
    # The first on the path is the one Python imports: the egg-info's, not the later dist-info's.
    assert plugins.versions(["some-tool"]) == {"some-tool": "4.5.6"}


def test_an_entry_point_group_is_declared_only_where_a_distribution_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not plugins.declared("forkpoint.no-such-group")
    info = tmp_path / "a_plugin-1.0.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_text("[forkpoint.no-such-group]\nx = a_plugin:X\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert plugins.declared("forkpoint.no-such-group")
