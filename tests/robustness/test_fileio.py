"""jcalib.fileio: atomic writes keep the usual permissions and name the target in every error
(never the temporary file); output paths are checked before any work."""

import os
import stat

import pytest

from jcalib import fileio


def test_atomic_write_gives_the_permissions_of_a_plain_write(tmp_path):
    plain, atomic = tmp_path / "plain.txt", tmp_path / "atomic.txt"
    plain.write_text("x")
    fileio.atomic_write_text(atomic, "x")
    assert stat.S_IMODE(os.stat(atomic).st_mode) == stat.S_IMODE(os.stat(plain).st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


@pytest.mark.parametrize(("target", "error", "fragment"), [
    ("folder", IsADirectoryError, "is a folder; give a file name"),
    ("file/x.msgpack", NotADirectoryError, "is a file, not a folder"),
])
def test_write_errors_name_the_target(tmp_path, target, error, fragment):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(error, match=fragment) as info:
        fileio.atomic_write_bytes(tmp_path / target, b"data")
    assert info.value.filename == os.fspath(tmp_path / target)


@pytest.mark.parametrize(("call", "fragment"), [
    (lambda p: fileio.prepare_output_dir(p / "file" / "sub"), "is an existing file, not a folder"),
    (lambda p: fileio.check_figure_path(p / "fig.unknownext"), "unknown figure type '.unknownext'"),
    (lambda p: fileio.check_figure_path(p / "folder"), "unknown figure type"),
    (lambda p: fileio.check_output_file(p / "folder"), "is a folder; give a file name"),
])
def test_output_paths_are_checked_before_work(tmp_path, call, fragment):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=fragment):
        call(tmp_path)
