"""Safe files: output paths checked before any work, atomic writes, verified checksums.

Every result file jcalib writes goes through `atomic_write_bytes` (a temporary file in the
same folder, then ``os.replace``), so an interrupted run never leaves a half-written file
that later loads as ordinary numbers. Output folders and figure paths are checked *before*
a long computation (`prepare_output_dir`, `check_figure_path`), so no finished work is lost
to a bad path.

Every artefact jcalib can load again carries a SHA-256 checksum of its content, verified
on load, so a damaged file (flipped bits, a partial copy) is refused instead of giving
wrong numbers:

- msgpack files (trained networks, training checkpoints): an outer msgpack map
  ``{"format": "jcalib-checked/1", "sha256": <hex>, "payload": <inner msgpack bytes>}``
  (`pack_checked` / `unpack_checked`);
- ``.npz`` files (`PosteriorResult`, `Measurements`): a last 0-d string array ``sha256``
  over every byte of the file before it (all other members, headers included;
  `write_checked_npz` / `read_checked_npz`); the zip's own CRC-32 is checked as well;
- JSON files (workflow results): a top-level ``"sha256"`` entry over the canonical JSON of
  the rest (`write_checked_json` / `read_checked_json`).

A missing file raises `FileNotFoundError`; an unreadable, foreign or damaged one a
`ValueError` naming the path (with "checksum" when the content does not match its checksum).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import os
import pathlib
import tempfile
import zipfile
from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["CHECKED_FORMAT", "LOCK_NAME", "atomic_write_bytes", "atomic_write_text", "check_figure_path",
           "check_output_file", "lock_output_dir", "pack_checked", "prepare_output_dir", "read_checked_json",
           "read_checked_npz", "read_input_bytes", "save_figure", "sha256_hex", "unpack_checked",
           "write_checked_json", "write_checked_npz", "write_json"]

CHECKED_FORMAT = "jcalib-checked/1"
"""Format tag of the outer msgpack map of `pack_checked`."""
_CHECKSUM_KEY = "sha256"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members, an empty zip


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
    try:  # a real write: os.access says yes to root even where writes fail (read-only mounts, /proc)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".jcalib-write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(f"{what} {os.fspath(path)!r} is not writable ({err.strerror}); choose another "
                         "path") from None
    return path


LOCK_NAME = ".jcalib.lock"
"""The file `lock_output_dir` keeps in a folder while a run writes there (it holds the process id)."""


def lock_output_dir(path: str | os.PathLike, what: str = "output folder") -> Callable[[], None]:
    """Hold the folder ``path`` for this process while it writes there (a `LOCK_NAME` file with
    the process id; two runs writing one folder would silently replace each other's results).
    A lock whose process no longer runs is taken over. Returns the function that releases it.

    Raises:
        ValueError: another running process (or this one, not yet released) holds the folder.
    """
    lock = pathlib.Path(path) / LOCK_NAME
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _lock_owner(lock)
            if owner is not None and _running(owner):
                raise ValueError(f"{what} {os.fspath(path)!r} is being written by another jcalib run (process "
                                 f"{owner}); wait for it to finish or choose another folder") from None
            lock.unlink(missing_ok=True)  # left by a process that has ended
            continue
        with os.fdopen(fd, "w") as stream:
            stream.write(str(os.getpid()))
        return functools.partial(_release, lock)
    raise ValueError(f"{what} {os.fspath(path)!r}: could not take its lock {LOCK_NAME}; try again")


def _lock_owner(lock: pathlib.Path) -> int | None:
    try:
        return int(lock.read_text().strip())
    except (OSError, ValueError):
        return None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _release(lock: pathlib.Path) -> None:
    if _lock_owner(lock) == os.getpid():
        lock.unlink(missing_ok=True)


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
    ``os.replace`` (readers see the old file or the new one, never a partial one). The file
    gets the permissions of a plain ``open(path, "w")`` (0666 less the umask).

    Raises:
        IsADirectoryError: ``path`` is a folder.
        NotADirectoryError: a parent of ``path`` is a file.
        OSError: the folder cannot be written; ``filename`` is ``path``, never the temporary file.
    """
    path = pathlib.Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder; give a file name", os.fspath(path))
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{os.fspath(parent)!r} is a file, not a folder",
                                     os.fspath(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise type(err)(err.errno, err.strerror, os.fspath(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600
        os.replace(tmp, path)
    except OSError as err:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise type(err)(err.errno, err.strerror, os.fspath(path)) from None
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


@functools.cache
def _umask() -> int:
    """The process umask (read once: os.umask can only be read by setting it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` of UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj, indent: int | None = 1) -> None:
    """Write ``obj`` (already JSON-able, see `jcalib.jsonable.to_jsonable`) atomically as
    strict JSON (NaN and inf are refused, not written as invalid tokens)."""
    atomic_write_text(path, json.dumps(obj, indent=indent, allow_nan=False))


def save_figure(fig, path: str | os.PathLike, **savefig_kwargs) -> None:
    """``fig.savefig`` atomically (the format is taken from the extension)."""
    path = pathlib.Path(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lower().lstrip(".") or None, **savefig_kwargs)
    atomic_write_bytes(path, buffer.getvalue())


# --- checksums -------------------------------------------------------------------------------------
def sha256_hex(data: bytes) -> str:
    """The SHA-256 digest of ``data`` as 64 hexadecimal characters."""
    return hashlib.sha256(data).hexdigest()


def _checksum_error(path, what: str, detail: str = "") -> ValueError:
    return ValueError(f"{what} {os.fspath(path)!r}: checksum mismatch{detail}: the file is damaged (changed or "
                      "partly copied after it was written); restore it from a good copy or create it again")


def read_input_bytes(path: str | os.PathLike, what: str = "file") -> bytes:
    """The bytes of an existing file.

    Raises:
        FileNotFoundError: there is no such file.
        ValueError: ``path`` is a folder or cannot be read.
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} {os.fspath(path)!r} does not exist; check the path")
    if path.is_dir():
        raise ValueError(f"{what} {os.fspath(path)!r} is a folder; give the file")
    try:
        return path.read_bytes()
    except OSError as err:
        raise ValueError(f"{what} {os.fspath(path)!r} cannot be read ({err.strerror})") from None


def pack_checked(payload: bytes) -> bytes:
    """``payload`` (msgpack bytes) wrapped in a msgpack map with its SHA-256 checksum."""
    import msgpack

    return msgpack.packb({"format": CHECKED_FORMAT, _CHECKSUM_KEY: sha256_hex(payload), "payload": payload},
                         use_bin_type=True)


def unpack_checked(data: bytes, path: str | os.PathLike, what: str = "file") -> bytes:
    """The payload of `pack_checked` bytes, its checksum verified.

    Raises:
        ValueError: not such a file ("not a jcalib ..."), or a damaged one ("checksum").
    """
    import msgpack

    try:
        outer = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as err:  # msgpack raises several types on foreign or truncated bytes
        raise ValueError(f"{what} {os.fspath(path)!r}: not a jcalib {what}, or a damaged one (it does not decode: "
                         f"{_why(err)})") from None
    if not isinstance(outer, dict) or outer.get("format") != CHECKED_FORMAT:
        old = isinstance(outer, dict) and isinstance(outer.get("format"), str) and "jcalib" in outer["format"]
        hint = ("; it was written by an older jcalib without a checksum: create it again" if old else "")
        raise ValueError(f"{what} {os.fspath(path)!r}: not a jcalib {what}{hint}")
    payload, expected = outer.get("payload"), outer.get(_CHECKSUM_KEY)
    if not isinstance(payload, bytes) or not isinstance(expected, str):
        raise _checksum_error(path, what, " (no payload or checksum)")
    if sha256_hex(payload) != expected:
        raise _checksum_error(path, what)
    return payload


def write_checked_npz(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` (no object arrays) atomically as an ``.npz`` file whose last entry
    ``sha256`` is the checksum of every byte before it; any NumPy reads it with ``np.load``."""
    arrays = {str(k): np.asarray(v) for k, v in arrays.items()}
    if _CHECKSUM_KEY in arrays:
        raise ValueError(f"write_checked_npz: the array name {_CHECKSUM_KEY!r} is reserved for the checksum")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:  # as np.savez does

        def add(name, array):
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, array, allow_pickle=False)

        for name, array in arrays.items():
            add(name, array)
        add(_CHECKSUM_KEY, np.array(sha256_hex(buffer.getvalue())))  # the members written so far
    atomic_write_bytes(path, buffer.getvalue())


def read_checked_npz(path: str | os.PathLike, what: str = "file", required: tuple[str, ...] = ()
                     ) -> dict[str, np.ndarray]:
    """All arrays of a `write_checked_npz` file (without ``sha256``), checksum verified;
    never unpickles. ``required`` names arrays whose absence means another kind of file
    (reported before a missing checksum).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not an ``.npz`` file, unreadable, no checksum, or a damaged one ("checksum").
    """
    data = read_input_bytes(path, what)
    if not data.startswith(_ZIP_MAGIC):
        raise ValueError(f"{what} {os.fspath(path)!r}: not a jcalib {what} (not an .npz file"
                         f"{'; the file is empty' if not data else ''})")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: np.asarray(npz[name]) for name in npz.files}
            offsets = {info.filename: info.header_offset for info in npz.zip.infolist()}
    except zipfile.BadZipFile as err:
        if "CRC" in str(err):
            raise _checksum_error(path, what, f" ({err})") from None
        raise ValueError(f"{what} {os.fspath(path)!r}: not a jcalib {what}, or a damaged one (unreadable zip: "
                         f"{err})") from None
    except Exception as err:  # truncated members, bad .npy headers, object arrays
        raise ValueError(f"{what} {os.fspath(path)!r}: not a jcalib {what}, or a damaged one "
                         f"({_why(err)})") from None
    expected = arrays.pop(_CHECKSUM_KEY, None)
    missing = [name for name in required if name not in arrays]
    if missing:
        raise ValueError(f"{what} {os.fspath(path)!r} has no {', '.join(missing)} "
                         f"{'entries' if len(missing) > 1 else 'entry'}; not a jcalib {what}")
    if expected is None or expected.shape != () or expected.dtype.kind != "U":
        raise ValueError(f"{what} {os.fspath(path)!r}: no checksum; not written by jcalib (or by an older version "
                         "without checksums): create it again")
    start = offsets.get(f"{_CHECKSUM_KEY}.npy", -1)
    if start < max(offsets.values()) or sha256_hex(data[:start]) != str(expected):
        raise _checksum_error(path, what)
    return arrays


def _canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def write_checked_json(path: str | os.PathLike, obj: Mapping, indent: int | None = 1) -> None:
    """`write_json` of the mapping ``obj`` plus a top-level ``"sha256"`` entry over the
    canonical JSON of ``obj`` (sorted keys, no spaces)."""
    obj = dict(obj)
    if _CHECKSUM_KEY in obj:
        raise ValueError(f"write_checked_json: the key {_CHECKSUM_KEY!r} is reserved for the checksum")
    write_json(path, {**obj, _CHECKSUM_KEY: sha256_hex(_canonical_json(obj))}, indent)


def read_checked_json(path: str | os.PathLike, what: str = "file", expected_format: str | None = None) -> dict:
    """The mapping of a `write_checked_json` file (without ``sha256``), checksum verified.
    With ``expected_format``, a ``"format"`` entry of another value means another kind of
    file (reported before a missing checksum).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not JSON, not an object, no checksum, or a damaged one ("checksum").
    """
    data = read_input_bytes(path, what)
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{what} {os.fspath(path)!r}: not a jcalib {what}, or a damaged one (not JSON: "
                         f"{_why(err)})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what} {os.fspath(path)!r}: not a jcalib {what} (a JSON {type(obj).__name__}, not an "
                         "object)")
    expected = obj.pop(_CHECKSUM_KEY, None)
    if expected_format is not None and obj.get("format") != expected_format:
        raise ValueError(f"{what} {os.fspath(path)!r}: the file is not a {what} (format {obj.get('format')!r}; "
                         f"expected {expected_format!r})")
    if not isinstance(expected, str):
        raise ValueError(f"{what} {os.fspath(path)!r}: no checksum; not written by jcalib (or by an older version "
                         "without checksums): create it again")
    try:
        actual = sha256_hex(_canonical_json(obj))
    except ValueError:  # NaN/inf tokens: never written by write_json
        raise _checksum_error(path, what) from None
    if actual != expected:
        raise _checksum_error(path, what)
    return obj


def _why(err: BaseException, limit: int = 120) -> str:
    """``Type: message`` of a decoder's exception, shortened, for "damaged file" errors."""
    text = " ".join(str(err).split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
