"""xdistill.io: atomic writes leave either the old file or the new one, readable as open() would make it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

import xdistill.io as xio


def test_atomic_writes_get_the_umasks_modes_not_private_temp_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(xio, "_UMASK", 0o022)
    written = xio.write_text_atomic(tmp_path / "report.md", "hello\n")
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    with xio.atomic_path(tmp_path / "export", is_dir=True) as folder:
        (folder / "model.onnx").write_bytes(b"graph")
    assert stat.S_IMODE((tmp_path / "export").stat().st_mode) == 0o755  # a serving account can read in


def test_a_failed_atomic_write_keeps_the_old_content_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = xio.write_text_atomic(tmp_path / "scores.json", "old")
    with pytest.raises(RuntimeError), xio.atomic_path(target) as tmp:
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("killed mid-write")
    assert target.read_text(encoding="utf-8") == "old" and [p.name for p in tmp_path.iterdir()] == ["scores.json"]
