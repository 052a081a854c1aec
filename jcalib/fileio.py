"""Safe files: output paths checked before any work, atomic writes.

Every result file jcalib writes goes through `atomic_write_bytes` (a temporary file in the
same folder, then ``os.replace``), so an interrupted run never leaves a half-written file
that later loads as ordinary numbers. Output folders and figure paths are checked *before*
a long computation (`prepare_output_dir`, `check_figure_path`), so no finished work is lost
to a bad path.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

__all__ = ["atomic_write_bytes", "atomic_write_text", "check_figure_path", "check_output_file", "prepare_output_dir",
           "save_figure", "write_json"]


def prepare_output_dir(path: str | os.PathLike, what: str = "output folder") -> pathlib.Path:
    """Create ``path`` (with parents) or accept an existing writable folder.

    Call it before computing anything whose results go there.

    Raises:
        ValueError: ``path`` (or one of its parents) is an existing file, or the folder
            cannot be created or written to.
    """
    path = pathlib.Path(path)
    for parent in (path, *path.parents):
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"{what} {os.fspath(path)!r}: {os.fspath(parent)!r} is an existing file, not a "
                             "folder; choose another path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{what} {os.fspath(path)!r} cannot be created ({err.strerror}); choose a writable "
                         "path") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {os.fspath(path)!r} is not writable; choose another path")
    return path


def check_figure_path(path: str | os.PathLike, what: str = "figure") -> pathlib.Path:
    """Check, before any work, that ``path`` names a figure matplotlib can write (known
    extension) in a folder that exists or can be created.

    Raises:
        ValueError: no or unknown extension; the path is a folder; bad folder.
    """
    from matplotlib.figure import Figure

    path = pathlib.Path(path)
    supported = Figure().canvas.get_supported_filetypes()
    ext = path.suffix.lower().lstrip(".")
    if ext not in supported:
        raise ValueError(f"{what} {os.fspath(path)!r}: unknown figure type {path.suffix or '(none)'!r}; use one of "
                         f"{', '.join('.' + e for e in sorted(supported))}")
    if path.is_dir():
        raise ValueError(f"{what} {os.fspath(path)!r} is a folder; give a file name such as fit.png")
    prepare_output_dir(path.parent if str(path.parent) else ".", f"folder of the {what}")
    return path


def check_output_file(path: str | os.PathLike, what: str = "output file") -> pathlib.Path:
    """Check, before any work, that ``path`` can be written as a file (not a folder; its
    folder exists or can be created and is writable).

    Raises:
        ValueError: the path is a folder or its folder is unusable.
    """
    path = pathlib.Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {os.fspath(path)!r} is a folder; give a file name")
    prepare_output_dir(path.parent if str(path.parent) else ".", f"folder of the {what}")
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, then
    ``os.replace`` (readers see the old file or the new one, never a partial one)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` of UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj, indent: int | None = 1) -> None:
    """Write ``obj`` (already JSON-able, see `jcalib.jsonable.to_jsonable`) atomically as
    strict JSON (NaN and inf are refused, not written as invalid tokens)."""
    atomic_write_text(path, json.dumps(obj, indent=indent, allow_nan=False))


def save_figure(fig, path: str | os.PathLike, **savefig_kwargs) -> None:
    """``fig.savefig`` atomically (the format is taken from the extension)."""
    import io

    path = pathlib.Path(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lower().lstrip(".") or None, **savefig_kwargs)
    atomic_write_bytes(path, buffer.getvalue())
