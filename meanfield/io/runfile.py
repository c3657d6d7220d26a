"""Runs on disk: HDF5 files with the resolved config stored beside the arrays, readable while they are written.

Layout (a public contract, described in the README's *Data files*):

* attribute ``config`` — the resolved config as JSON;
* particles: dataset ``t`` (T,) and ``x`` (T, n, d);
* token masses, for particles that carry them (a run continued from a grid or weighted run): static
  ``token_masses`` (n,) (older files: the root dataset ``weights``; :mod:`meanfield.io.token_masses`);
* grid: ``t`` (T,), ``mass`` (T, N), plus static ``points`` (N, 3) and ``areas`` (N,);
* trackers' scalars: one (T,) dataset each under the group ``diagnostics``;
* time-dependent weights: the weight path under the group ``weights``;
* ``committed_frames`` (1,): how many frames are completely on disk;
* ``checksum`` (T,) int64: the CRC-32 of each frame's state as float64 bytes (−1: a frame written before
  checksums), checked by ``--resume`` on the frame it continues from and by every read of frames;
* attributes ``status`` (``running``, ``completed``, ``stopped``, ``failed``,
  ``interrupted``), ``stop_reason`` and ``threads`` (the kernels' thread count of the last session).

**Crash consistency.** A frame is written, flushed, and only then counted in
``committed_frames`` (flushed again): readers and ``--resume`` trust the committed
frames only, so a kill in the middle of a frame loses that frame and nothing else.

**Readable while running.** The writer switches the file to HDF5's single-writer /
multiple-reader mode (SWMR) after its first frame.  Readers open it with
``h5py.File(path, "r", swmr=True)`` (what :class:`RunReader`, ``meanfield info``
and :func:`meanfield.load` do) and see the frames committed so far.  A read that meets a header the
writer is updating at that moment is tried again (:func:`read_run_file`).

**One writer.** The writer holds an exclusive lock (:mod:`meanfield.io.lock`)
from before it truncates anything until the file is closed; a second writer is
refused, and a reader tells a running file from one whose writer died.
"""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import resource
import socket
import time
import warnings
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import h5py
import numpy as np

from meanfield.errors import ConfigError, MeanfieldWarning, StorageFailed
from meanfield.io.lock import WriterLock, followed, writer_alive, writer_state
from meanfield.io.signature import HDF5_SIGNATURE, file_head

T = TypeVar("T")

__all__ = ["RunWriter", "RunReader", "open_run_file", "read_run_file", "read_config", "run_status", "solver_settings", "last_frame", "STATE_NAMES",
           "COMMITTED", "CHECKSUM", "DamagedFrameWarning", "frame_checksum", "file_stamp"]

#: dataset that holds the evolving state, by solver family
STATE_NAMES = {"particle": "x", "grid": "mass"}
#: the dataset counting the frames that are completely on disk
COMMITTED = "committed_frames"
#: the dataset of the frames' CRC-32 checksums (:func:`frame_checksum`; −1 where a frame has none)
CHECKSUM = "checksum"
#: datasets with one entry per frame (besides the state and the diagnostics)
_PER_FRAME = ("t", CHECKSUM)


class DamagedFrameWarning(MeanfieldWarning):
    """Frames read from a run file do not match the checksums written with them: their bytes changed on disk."""


#: the damaged frames already named, by file, frames and file stamp (:meth:`RunReader.states`)
_DAMAGE_SAID: set[tuple[str, tuple[int, ...], Any]] = set()


def frame_checksum(state: np.ndarray) -> int:
    """The CRC-32 of a frame's state as C-ordered float64 bytes: what is written and what is read back."""
    return zlib.crc32(np.ascontiguousarray(state, dtype=np.float64))


#: free bytes kept beyond two frames before a frame is written: a full disk is met by us, never by HDF5
#: (a write that fails inside HDF5 leaves a file that its own close can crash on)
SPACE_RESERVE = 1 << 20


#: free bytes below which :meth:`RunWriter.finish` leaves the status unwritten: the space check keeps
#: :data:`SPACE_RESERVE` for it, and only another process can have taken that (HDF5 meeting a full disk in its
#: metadata flush had left the file unreadable, every committed frame lost)
STATUS_RESERVE = 64 << 10


#: what a write that finds no room was short of, and what frees it
DISK_FULL = ("no space left on device", "free some space")
SIZE_LIMIT = ("the file-size limit (ulimit -f) is reached", "raise the limit")


def _committed(count: int) -> str:
    """``the 1 committed frame is`` / ``the 28 committed frames are``."""
    return f"the {count} committed frame{'s are' if count != 1 else ' is'}"


def _room(path: Path, *, written: Path | None = None) -> tuple[int | None, tuple[str, str]]:
    """Bytes this process may still write for ``path``, and what runs out first (:data:`DISK_FULL` or
    :data:`SIZE_LIMIT`): the file system's free space, and under a file-size limit (``ulimit -f``, past which
    writes fail with EFBIG) the room left to the file ``written`` (a new file: the limit itself).  ``None`` bytes
    where neither can be told."""
    try:
        stat = os.statvfs(path.parent)
        free: int | None = stat.f_bavail * stat.f_frsize
    except OSError:
        free = None
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:
        try:
            size = written.stat().st_size if written is not None else 0
        except OSError:
            size = 0
        if free is None or limit - size < free:
            return max(limit - size, 0), SIZE_LIMIT
    return free, DISK_FULL


#: the write errors of a full disk, of a user's disk quota and of a file-size limit (``ulimit -f``)
_NO_ROOM = {errno.ENOSPC: DISK_FULL, errno.EDQUOT: ("disk quota exceeded", "free some space"), errno.EFBIG: SIZE_LIMIT}


def _no_space(exc: BaseException) -> tuple[str, str] | None:
    """What ran out and what frees it, where ``exc`` is a write that found no room (h5py's errors carry the errno
    in their text only); ``None`` otherwise."""
    code = getattr(exc, "errno", None)
    if code in _NO_ROOM:
        return _NO_ROOM[code]
    text = str(exc).lower()
    for number, words in _NO_ROOM.items():
        if f"errno = {number}," in text or os.strerror(number).lower() in text:
            return words
    return None


def _detach_from_disk(f: h5py.File) -> None:
    """Point the descriptor of ``f`` at the null device, at once after a write inside HDF5 failed: nothing HDF5
    writes later (the metadata it flushes as the frame's datasets are released, and at the close) reaches the file,
    which keeps what its last commit wrote and which readers open in SWMR mode (:func:`open_run_file`).

    Out of room, those later flushes fail as well, and the library had then crashed the process (a segmentation
    fault as the run ended).
    """
    try:
        handle = f.id.get_vfd_handle()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(null, handle)
        finally:
            os.close(null)
    except (OSError, RuntimeError, ValueError, TypeError):  # (a closed file, or a driver without a descriptor)
        pass


def _close_after_write_failure(f: h5py.File) -> None:
    """Close ``f`` after a write inside HDF5 failed, without writing to the file again (:func:`_detach_from_disk`)."""
    _detach_from_disk(f)
    with contextlib.suppress(OSError, RuntimeError):
        f.close()


def _reason(exc: BaseException) -> str:
    """The useful part of an h5py ``OSError`` (e.g. 'file signature not found', 'unable to lock file')."""
    text = str(exc)
    for marker in ("file signature not found", "unable to lock file", "truncated file", "Permission denied",
                   "Is a directory", "already open for write"):
        if marker.lower() in text.lower():
            return marker
    return text.split("(")[-1].rstrip(")") if "(" in text else text


#: a read of a run file that its writer changes at the same moment is tried this many times in all
LIVE_READ_ATTEMPTS = 20
#: seconds between those tries
LIVE_READ_PAUSE = 0.02


class _TruncatedRunFile(ConfigError):
    """The file ends before its data: cut short, or caught while its writer closes it (then a second look reads it)."""


def open_run_file(path: str | Path, *, key: str = "OUT.h5", shown: str | Path | None = None) -> h5py.File:
    """Open a run file for reading, also while it is written; a :class:`ConfigError` says why it cannot be.

    The reasons: missing, a folder, not a regular file (a pipe, a device), not readable, not HDF5, truncated, or
    locked by a writer that has not committed its first frame yet.  The messages name the file ``shown`` (``path`` by
    default: a reader that opens an absolute path names it as it was given).
    """
    path = Path(path)
    name = path if shown is None else shown
    if not path.exists():
        raise ConfigError(key, f"file not found: {name}")
    if path.is_dir():
        raise ConfigError(key, f"{name} is a folder, not a run file")
    if not path.is_file():  # (a pipe with no writer had blocked the reader in open() for ever)
        raise ConfigError(key, f"{name} is not a regular file (a pipe or a device), not a run file")
    if not os.access(path, os.R_OK):
        raise ConfigError(key, f"cannot read {name}: permission denied")
    try:
        head = file_head(path)
    except OSError as exc:
        raise ConfigError(key, f"cannot read {name}: {exc.strerror or exc}") from None
    if head != HDF5_SIGNATURE:
        what = "an empty file" if not head else "not an HDF5 file"
        raise ConfigError(key, f"{name} is {what}, not a meanfield run")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        reason = _reason(exc)
    if reason == "already open for write" or (reason == "truncated file" and (writer_alive(path) or _swmr_marked(path))):
        # a writer in SWMR mode (live, killed, or stopped by a write that found no room): read what it committed; a
        # live writer's file may look truncated to a plain open, because its end is still being written, and so does
        # one whose last write failed (the file ends before the end its superblock names).  A truncated copy of a
        # closed file is not tried: a SWMR reader retries the metadata it lacks for minutes
        live = writer_alive(path)
        try:
            f = h5py.File(path, "r", swmr=True) if live else _open_swmr_unwritten(path)
        except OSError as exc:
            if reason != "truncated file":  # (a copy cut short is not a SWMR file: it stays truncated)
                reason = _reason(exc)
        else:
            if live or _all_committed_on_disk(f, path):
                return f
            f.close()
            reason = "truncated file"
    if reason == "unable to lock file" and writer_alive(path):
        raise ConfigError(key, f"{name} is being written and holds no complete frame yet; try again in a moment") from None
    if reason == "truncated file":
        raise _TruncatedRunFile(key, f"{name} is truncated (the file ends before its data: a copy cut short, or a full disk)") from None
    raise ConfigError(key, f"cannot open {name} as HDF5 ({reason})") from None


#: the superblock's file-consistency flag (version 3, byte 11) of a file in SWMR-write mode
_FLAG_SWMR = 0x04
#: where the fields after the flags of a version 2 or 3 superblock start: the signature (8), version (1), sizes of
#: offsets and lengths (1 each) and the flags (1); then the base address, the superblock extension's address and the
#: end-of-file address, one offset each (little-endian, of the size byte 9 gives: 8 as h5py writes them)
_EOA_AT = 12


def _superblock(path: Path) -> bytes | None:
    """The first bytes of the version 2 or 3 superblock of ``path`` (those of SWMR files: signature, version, sizes,
    flags, then three addresses of up to 16 bytes); ``None`` for another version, an unreadable or too short file."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_EOA_AT + 3 * 16)
    except OSError:
        return None
    return head if len(head) >= _EOA_AT and head[:8] == HDF5_SIGNATURE and head[8] in (2, 3) else None


def _end_of_file_address(path: Path) -> int | None:
    """The end-of-file address the superblock of ``path`` names (version 2 or 3 superblocks, those of SWMR files);
    ``None`` for another version or a file too short to tell."""
    head = _superblock(path)
    if head is None:
        return None
    size = head[9]  # the size of an offset in the file (8 as written by h5py)
    at = _EOA_AT + 2 * size
    if size not in (2, 4, 8, 16) or len(head) < at + size:
        return None
    return int.from_bytes(head[at : at + size], "little")


def _hdf5_library() -> Any:
    """The HDF5 library h5py runs on, through ``ctypes`` (``None`` where it cannot be told which one that is: other
    packages, netCDF4 among them, may have loaded their own copy)."""
    import ctypes

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libhdf5" in line.rsplit("/", 1)[-1] and "hdf5_hl" not in line}
    except OSError:
        return None
    ours = [p for p in paths if "h5py" in p] or list(paths)
    if len(ours) != 1:
        return None
    try:
        return ctypes.CDLL(ours[0])
    except OSError:
        return None


#: metadata reads tried on a SWMR file whose writer is gone (HDF5 tries 100 times, sleeping twice as long each time)
_UNWRITTEN_READ_ATTEMPTS = 1


def _open_swmr_unwritten(path: Path) -> h5py.File:
    """Open ``path``, a SWMR file whose writer is gone, in SWMR mode, with metadata read once: HDF5's SWMR reader
    retries metadata that fails its checksum, with a back-off that doubles each time, for a writer to finish it, and
    on a copy cut short (the metadata missing for good) it slept in C code for ever, deaf to SIGTERM and Ctrl-C.

    Raises
    ------
    OSError
        The retries cannot be bounded (HDF5 not found through ``ctypes``) and the file ends before the end its
        superblock names, or h5py cannot open it.
    """
    import ctypes

    library = _hdf5_library()
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
    bounded = False
    if library is not None:
        try:
            bounded = library.H5Pset_metadata_read_attempts(ctypes.c_int64(fapl.id), ctypes.c_uint(_UNWRITTEN_READ_ATTEMPTS)) >= 0
        except AttributeError:
            bounded = False
    if not bounded:
        end = _end_of_file_address(path)
        if end is None or end > path.stat().st_size:
            raise OSError("truncated file")
        return h5py.File(path, "r", swmr=True)
    fid = h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ, fapl=fapl)
    return h5py.File(fid)


def _all_committed_on_disk(f: h5py.File, path: Path) -> bool:
    """Whether every committed frame of ``f`` (a SWMR file whose writer is gone) lies inside the file: always, unless
    the file ends before the end its superblock names.  That is a run whose last write failed (out of room: its
    committed frames are there, the frame it was writing is not) or a copy cut short, whose frames past the cut HDF5
    reads as zeros (or cannot read)."""
    end = _end_of_file_address(path)
    size = path.stat().st_size
    if end is not None and end <= size:
        return True
    try:
        committed = _member(f, COMMITTED)
        frames = None if committed is None else int(committed[0])
        series = [f[name] for name in (*STATE_NAMES.values(), *_PER_FRAME) if _member(f, name) is not None]
        group = _member(f, "diagnostics")
        series += [group[name] for name in group] if group is not None else []
        for data in series:
            if not isinstance(data, h5py.Dataset) or data.chunks is None or data.ndim == 0:
                continue
            count = data.shape[0] if frames is None else min(frames, data.shape[0])
            for k in (*range(0, count, data.chunks[0]), count - 1) if count else ():
                chunk = data.id.get_chunk_info_by_coord((k,) + (0,) * (data.ndim - 1))
                if chunk.byte_offset is None or chunk.byte_offset + chunk.size > size:
                    return False
    except (OSError, KeyError, RuntimeError, ValueError):  # metadata past the end (read once: it fails at once)
        return False
    return True


def _swmr_marked(path: Path) -> bool:
    """Whether the superblock of ``path`` says that a SWMR writer has it open (or had it, when it stopped without
    closing it): only such a file can be read in SWMR mode."""
    head = _superblock(path)
    return head is not None and head[8] >= 3 and bool(head[11] & _FLAG_SWMR)


def _member(group: h5py.Group, name: str) -> Any:
    """``group[name]``, or ``None`` where it does not exist.

    Not ``name in group`` or ``group.get``: on a group whose header the writer is updating, those
    answer "absent" (h5py turns the error into ``False`` or the default), where ``group[name]``
    raises, and :func:`read_run_file` tries again.
    """
    try:
        return group[name]
    except KeyError as exc:
        if "doesn't exist" in str(exc):
            return None
        raise


def _attribute(f: h5py.File, name: str, default: Any = None) -> Any:
    """The attribute ``name`` of the root group, or ``default`` where it has none (see :func:`_member`)."""
    try:
        return f.attrs[name]
    except KeyError as exc:
        if "can't locate attribute" in str(exc):
            return default
        raise


def file_stamp(path: str | Path) -> tuple[int, int, int] | None:
    """``(inode, size, mtime_ns)`` of ``path``, ``None`` where there is none: whether a file was replaced or written."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def read_run_file(path: str | Path, read: Callable[[h5py.File], T], *, key: str = "OUT.h5",
                  shown: str | Path | None = None) -> T:
    """``read(f)`` on the run file ``path``, opened for the time of the call (:func:`open_run_file`).

    A file that is being written can fail a read for a moment: HDF5's single-writer mode may show
    a reader a group whose header the writer is updating (h5py's ``KeyError`` "unable to determine
    object type" or "message type not found", or an ``OSError`` "len not positive after adjustment
    for EOA"), and a file caught while its writer closes it looks truncated.  Measured: 12 of 2739
    reads of a file written as fast as it can go.  Such a read is tried again, up to
    :data:`LIVE_READ_ATTEMPTS` times, as long as the writer is alive or the file changed under
    the read; a file nobody writes fails at once, as before.

    The messages name the file ``shown`` (``path`` by default).

    Raises
    ------
    ConfigError
        ``path`` is not a readable run file (:func:`open_run_file`), or a live file could not be
        read consistently in :data:`LIVE_READ_ATTEMPTS` tries.
    """
    path = Path(path)
    name = path if shown is None else shown
    for attempt in range(LIVE_READ_ATTEMPTS):
        before = file_stamp(path)
        opened = False
        try:
            with open_run_file(path, key=key, shown=shown) as f:
                opened = True
                return read(f)
        except (KeyError, OSError, RuntimeError, ConfigError) as exc:
            # open_run_file's verdicts are final (but a truncated look); read's may come from a half-updated header
            settled = isinstance(exc, ConfigError) and not opened and not isinstance(exc, _TruncatedRunFile)
            if settled or not (writer_alive(path) or file_stamp(path) != before):
                if isinstance(exc, (KeyError, OSError, RuntimeError)):  # no writer: the bytes themselves are bad (a
                    # KeyError or RuntimeError traceback, exit 1)
                    raise ConfigError(key, f"{name} is damaged: HDF5 cannot read it ({_reason(exc)})") from None
                raise
            if attempt == LIVE_READ_ATTEMPTS - 1:
                if isinstance(exc, ConfigError):
                    raise
                raise ConfigError(key, f"{name} is being written and could not be read consistently in "
                                       f"{LIVE_READ_ATTEMPTS} tries ({exc}); try again in a moment") from None
        time.sleep(LIVE_READ_PAUSE)
    raise AssertionError("unreachable")  # pragma: no cover


class RunWriter:
    """Append frames of a run to an HDF5 file, each one committed before the next.

    Parameters
    ----------
    path : path-like
        Output file.  A symlink is written through, as the shell's ``>`` does: the run goes to the file it names (a new
        file is made beside the target and moved onto it), the link stays a link (it had been replaced by a regular
        file, the target left as it was); :func:`meanfield.io.output.check_output` refuses a link to a device or to
        a process's open file (``/dev/stdout``).
    config : mapping
        Resolved config, stored as the JSON attribute ``config``.
    state_name : {"x", "mass"}
        Name of the state dataset.
    state_shape : tuple
        Shape of one frame, e.g. ``(n, d)``.
    static : mapping, optional
        Arrays written once (``points``, ``areas``, weight paths …); keys with
        a ``/`` create groups.
    resume : bool
        Open the existing run, keep its committed frames and append after them;
        the stored config takes the new ``config`` (a later ``t_final``).
    resume_frames : int, optional
        With ``resume``: the committed frames the caller resumes after; a file that holds another number once the lock
        is taken (another writer added frames in between) is refused.
    replace : bool
        Without ``resume``: whether a file at ``path`` once the lock is taken may be replaced (``ConfigError`` naming
        ``key`` otherwise: another run wrote it after the caller's check).
    key : str
    info : mapping, optional
        The counters to store until :meth:`finish` stores the session's own: a session that never gets there (killed,
        out of disk) leaves these, which count it as unrecorded.

    Raises
    ------
    ConfigError
        Another process writes ``path`` (nothing is touched then): under this name or a symlink's (the lock), or,
        with ``resume``, under another hard link (the file's ``writer`` attribute names a process of this machine
        that has the file open).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        config: Mapping[str, Any],
        state_name: str,
        state_shape: tuple[int, ...],
        static: Mapping[str, np.ndarray] | None = None,
        resume: bool = False,
        info: Mapping[str, Any] | None = None,
        resume_frames: int | None = None,
        replace: bool = True,
        key: str = "out",
    ) -> None:
        self.path = Path(path)
        # the file itself: a new file is made and moved there, not onto a symlink (a loop stays as it is: opening it fails)
        self.target = followed(self.path) or self.path
        self.provisional_info = dict(info) if info else None
        self.resume_frames = resume_frames
        self.state_name = state_name
        self.broken: str | None = None
        self.damaged = False  # a write failed inside HDF5: the file is only closed, nothing more is written to it
        self.pending: Path | None = None
        self.kept_older = False  # finish() left an older file of that name in place: this run committed no frame
        self.discarded = False  # finish() removed the new file: its first frame failed inside HDF5, nothing was saved
        self.key = key
        self.lock = WriterLock(self.path, key=key).acquire()  # (its messages had named -o to the Python API too)
        try:
            if not resume and not replace and self.path.exists():  # another run wrote it since the caller looked
                raise ConfigError(key, f"{self.path} was written by another run while this one started; it is left as it "
                                       "is (replace it with --overwrite, or continue it with --resume)")
            if resume:
                self.file = self._reopen(config, static)
            else:
                self.file = self._create(config, state_name, state_shape, static)
        except BaseException:
            self.lock.release()
            raise
        self.count = int(self.file[COMMITTED][0])

    # ------------------------------------------------------------------ opening
    def _stamp(self, f: h5py.File, config: Mapping[str, Any]) -> None:
        from meanfield.kernels.jit import num_threads  # local: the kernels import numba

        f.attrs["config"] = json.dumps(config, sort_keys=True)
        f.attrs["status"] = "running"
        f.attrs["stop_reason"] = ""
        f.attrs["writer"] = f"pid {os.getpid()} on {socket.gethostname()}"
        f.attrs["threads"] = num_threads()  # the kernels' bits depend on it: --resume says when it changed
        if self.provisional_info is not None:
            f.attrs["info"] = json.dumps(self.provisional_info, default=float)

    def _create(self, config: Mapping[str, Any], state_name: str, state_shape: tuple[int, ...],
                static: Mapping[str, np.ndarray] | None) -> h5py.File:
        """A new file, written beside ``path`` and moved onto it once its first frame is committed.

        Until then ``path`` is untouched (an old file stays whole, a kill leaves nothing behind
        under that name), and afterwards the file is in SWMR mode, which readers can always open.
        """
        self.target.parent.mkdir(parents=True, exist_ok=True)
        arrays = sum(np.asarray(value).nbytes for value in (static or {}).values())
        free, (short, _) = _room(self.target)
        if free is not None and free < SPACE_RESERVE + arrays:  # HDF5 must never meet a full disk
            raise StorageFailed(f"{short} for a new run file {self.path} ({free} bytes left; its arrays written once "
                                f"take {arrays}, and {SPACE_RESERVE >> 20} MiB are kept free so that HDF5 never meets a "
                                "full disk); nothing was written")
        self.pending = self.target.with_name(f".{self.target.name}.new")
        try:
            f = h5py.File(self.pending, "w", libver="latest")
        except OSError as exc:
            self.pending = None
            raise StorageFailed(f"cannot create a run file beside {self.path} ({_reason(exc)}); nothing was written") from None
        try:
            self._stamp(f, config)
            held = [  # held until the flush: an object released writes its metadata, and a write that fails there
                f.create_dataset("t", shape=(0,), maxshape=(None,), dtype="f8", chunks=(1024,)),  # is only printed
                f.create_dataset(state_name, shape=(0, *state_shape), maxshape=(None, *state_shape), dtype="f8",
                                 chunks=(1, *state_shape)),
                f.create_dataset(COMMITTED, data=np.zeros(1, dtype=np.int64)),
                f.create_dataset(CHECKSUM, shape=(0,), maxshape=(None,), dtype="i8", chunks=(1024,)),
                f.create_group("diagnostics"),
            ]
            held += [f.create_dataset(key, data=np.asarray(value)) for key, value in (static or {}).items()]
            f.flush()
            del held
        except BaseException as exc:
            _close_after_write_failure(f)
            self.pending.unlink(missing_ok=True)  # nothing of a run that never began stays on the disk
            self.pending = None
            if isinstance(exc, (OSError, RuntimeError)):
                what = (_no_space(exc) or (_reason(exc),))[0]
                raise StorageFailed(f"{what} while creating the run file {self.path}; nothing was written") from None
            raise
        return f

    def _reopen(self, config: Mapping[str, Any], static: Mapping[str, np.ndarray] | None) -> h5py.File:
        """The committed frames of the existing file, in a file open for appending (rebuilt when a crash left it unopenable)."""
        reader = RunReader(self.path, key="--resume")
        if self.resume_frames is not None and reader.frames != self.resume_frames:  # read again under the lock
            raise ConfigError("--resume", f"{self.path} changed while this run started (another run wrote it: {reader.frames} "
                                          f"committed frames, not {self.resume_frames}); resume again")
        arrays = sum(np.asarray(value).nbytes for value in (static or {}).values()) + 8 * reader.frames  # (checksums)
        free, (short, remedy) = _room(self.target, written=self.target)
        if free is not None and free < SPACE_RESERVE + arrays:  # HDF5 must never meet a full disk: it had left the file
            raise StorageFailed(f"{short} to resume {self.path} ({free} bytes left, at least "  # unreadable
                                f"{SPACE_RESERVE + arrays} needed); the file is unchanged: {remedy} and resume again")
        try:
            f = h5py.File(self.path, "a", libver="latest")
        except OSError:  # a writer killed in SWMR mode leaves the file marked open: copy what is committed
            pid = _live_writer(self.target, reader.writer)
            if pid is not None:  # a writer alive under another name of the file (a hard link), which the lock of this
                # name cannot see: the rebuild had detached this name into a copy and run on in it, two runs diverging
                raise ConfigError(self.key, f"{self.path} is being written by another meanfield process (pid {pid} on "
                                        f"{socket.gethostname()}, under another name of the file: a hard link); wait for "
                                        "it to finish, or write to another file")
            _rebuild(reader, self.target)
            f = h5py.File(self.path, "a", libver="latest")
        try:
            frames = reader.frames
            if CHECKSUM not in f:  # a file written before checksums: its frames have none (−1), the new ones do
                f.create_dataset(CHECKSUM, data=np.full(frames, -1, dtype=np.int64), maxshape=(None,), chunks=(1024,))
            for name in (*_PER_FRAME, self.state_name):
                f[name].resize((frames, *f[name].shape[1:]))
            for name in f["diagnostics"]:
                series = f["diagnostics"][name]
                series.resize((min(frames, series.shape[0]),))
            if COMMITTED not in f:
                f.create_dataset(COMMITTED, data=np.zeros(1, dtype=np.int64))
            f[COMMITTED][0] = frames
            for key, value in (static or {}).items():  # e.g. a weight path extended to a later t_final
                if key in f:
                    del f[key]
                f.create_dataset(key, data=np.asarray(value))
            self._stamp(f, config)
            f.flush()
            f.swmr_mode = True
        except BaseException as exc:
            if not isinstance(exc, (OSError, RuntimeError)):  # (an interrupt: the close completes the reopening, and
                with contextlib.suppress(OSError, RuntimeError):  # the file stays readable)
                    f.close()
                raise
            _close_after_write_failure(f)  # e.g. another process filled the disk since the check
            what, remedy = _no_space(exc) or (_reason(exc), "free some space")
            raise StorageFailed(f"{what} while reopening {self.path} to resume it; {remedy} and resume again "
                                "(a file left unopenable is rebuilt from its committed frames)") from None
        return f

    @property
    def frames(self) -> int:
        """Frames committed to disk."""
        return self.count

    # ------------------------------------------------------------------ frames
    def append(self, t: float, state: np.ndarray, diagnostics: Mapping[str, float] | None = None) -> None:
        """Write one frame (and its tracker scalars), flush it, then count it as committed.

        Raises
        ------
        StorageFailed
            The disk is full (or another write error): the frames committed before stay intact.
        """
        if self.broken:
            raise StorageFailed(self.broken)
        state = np.asarray(state)
        free, (short, remedy) = _room(self.target, written=self.pending or self.target)
        if free is not None and free < SPACE_RESERVE + 2 * state.nbytes:  # HDF5 must never meet a full disk
            self.broken = (f"{short} for frame {self.count} of {self.path} ({free} bytes left, a frame needs "
                           f"{2 * state.nbytes} and {SPACE_RESERVE >> 20} MiB kept free); {_committed(self.count)} "
                           f"intact: {remedy} and continue with --resume")
            raise StorageFailed(self.broken)
        try:
            self._write(t, state, diagnostics or {})
        except (OSError, RuntimeError) as exc:
            _detach_from_disk(self.file)  # before the frame's datasets are released (they flush as they go)
            self.damaged = True
            what, remedy = _no_space(exc) or (f"cannot write to {self.path} ({_reason(exc)})", "free some space")
            kept = (f"{_committed(self.count)} intact: {remedy} and continue with --resume" if self.count
                    else f"no frame had been committed: {remedy} and run again")
            self.broken = f"{what} while writing frame {self.count} of {self.path}; {kept}"
            raise StorageFailed(self.broken) from None

    def _write(self, t: float, state: np.ndarray, diagnostics: Mapping[str, float]) -> None:
        self._write_frame(self.count, t, state, diagnostics)
        self._commit(self.count + 1)

    def _write_frame(self, k: int, t: float, state: np.ndarray, diagnostics: Mapping[str, float]) -> None:
        """Frame ``k``'s arrays, flushed to disk but not yet counted.

        Every dataset is held until the flush: one released writes its metadata, and a write that fails there is
        only printed by h5py (the run had gone on, and crashed at its end).
        """
        f = self.file
        group = f["diagnostics"]
        for key in diagnostics:
            if key not in group:
                group.create_dataset(key, data=np.full(k, math.nan), maxshape=(None,), chunks=(1024,))
        data, times, sums = f[self.state_name], f["t"], f[CHECKSUM]
        series = {key: group[key] for key in group}
        data.resize((k + 1, *data.shape[1:]))
        data[k] = state
        times.resize((k + 1,))
        times[k] = t
        sums.resize((k + 1,))
        sums[k] = frame_checksum(state)
        for key, values in series.items():
            old = values.shape[0]
            values.resize((k + 1,))
            if old < k:
                values[old:k] = math.nan
            values[k] = diagnostics.get(key, math.nan)
        f.flush()

    def _commit(self, frames: int) -> None:
        """Count the frames on disk: from now on readers and ``--resume`` trust them."""
        f = self.file
        committed = f[COMMITTED]  # (held until the flush, as in _write_frame)
        committed[0] = frames
        f.flush()
        self.count = frames
        if not f.swmr_mode:  # after the first frame every dataset exists: readers may follow from now on
            f.swmr_mode = True
        self._publish()

    def _publish(self) -> None:
        """Move a new file onto its path (atomically; the open file stays valid)."""
        if self.pending is not None:
            os.replace(self.pending, self.target)
            self.pending = None

    def finish(self, status: str, *, stop_reason: str = "", info: Mapping[str, Any] | None = None) -> None:
        """Record the final status, close the file and release the lock (after a write error inside HDF5: only close;
        a frame refused before any write for lack of space leaves the file whole, and its status is recorded in the
        space kept free for it)."""
        try:
            free, (short, _) = _room(self.target, written=self.pending or self.target)
            if free is not None and free < STATUS_RESERVE:  # the disk filled up since (another process): HDF5 must not meet it
                self.damaged = True  # the file stays as its last commit left it: a killed run's, which --resume continues
                self.broken = f"{short} to record the status of {self.path}"
            if not self.damaged:
                self.file.attrs["status"] = status
                self.file.attrs["stop_reason"] = stop_reason
                if info:
                    self.file.attrs["info"] = json.dumps(info, default=float)
                self.file.flush()
        except (OSError, RuntimeError) as exc:  # h5py raises RuntimeError for a failed flush
            self.damaged = True
            self.broken = f"could not record the status of {self.path} ({_reason(exc)})"
        finally:
            try:
                if self.damaged:  # the file keeps its last commit; HDF5 must not write to it again
                    _close_after_write_failure(self.file)
                else:
                    with contextlib.suppress(OSError, RuntimeError):
                        self.file.close()
                try:
                    if self.pending is not None and self.damaged and not self.path.exists():
                        self.pending.unlink()  # a new file whose first frame failed inside HDF5 holds nothing to keep
                        self.pending = None
                        self.discarded = True
                    elif self.pending is not None and self.path.exists():
                        self.pending.unlink()  # no frame committed: the older file of that name stays whole
                        self.pending = None
                        self.kept_older = True
                    else:
                        self._publish()  # a run that ended before its first frame still leaves its status behind
                except OSError:
                    pass
            finally:
                self.lock.release()  # whatever the file did: a stale lock had refused the --resume

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.file.id.valid:
            self.finish("failed" if exc[0] else "stopped", stop_reason="the writer was closed early")


def _live_writer(path: Path, writer: str) -> int | None:
    """The pid of a process of this machine that ``writer`` (the file's attribute) names and that has the file open.

    The lock is taken on a name; a hard link is another name of the same file, so before ``--resume`` rebuilds a
    file that HDF5 reports open for writing, this asks the file itself.  A pid that runs but does not have the file
    open is another program that got the number after the writer died (not a writer); where the open files of a
    process cannot be listed (no ``/proc``, another user's process) a running pid is taken for the writer.
    """
    try:
        held = os.stat(path)
    except OSError:
        return None
    match = re.fullmatch(r"pid (\d+) on (.+)", writer)
    if match is None or match[2] != socket.gethostname():
        return None
    pid = int(match[1])
    try:
        os.kill(pid, 0)
    except PermissionError:  # running, as another user
        pass
    except (OSError, OverflowError):
        return None
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return pid
    for descriptor in descriptors:
        try:
            opened = os.stat(descriptor)
        except OSError:
            continue
        if (opened.st_dev, opened.st_ino) == (held.st_dev, held.st_ino):
            return pid
    return None


def _rebuild(reader: RunReader, path: Path) -> None:
    """Replace ``path`` by a clean copy of its committed frames (atomically, through a temporary file).

    ``path`` is the file itself, not a symlink to it (the caller follows links: a link had been replaced by the copy).
    The caller makes sure no process writes the file under another name (:func:`_live_writer`).

    The copy is made only where the disk holds it, and read back against the file before it replaces it: on a
    nearly full disk HDF5 had dropped the copy's writes without an error, and the partial copy, moved over the
    file, had zeroed committed frames.

    Raises
    ------
    StorageFailed
        No room for the copy, or the copy does not read back equal; ``path`` is left as it was.
    """
    tmp = path.with_name(f".{path.name}.rebuild")
    (free, (short, remedy)), size = _room(path), path.stat().st_size
    if free is not None and free < size + SPACE_RESERVE:
        raise StorageFailed(f"--resume rebuilds {path} from its committed frames (the run was killed), which needs "
                            f"{size + SPACE_RESERVE} bytes beside it and {free} are left ({short}): {remedy} and resume "
                            "again; the file is unchanged")
    frames = reader.frames
    try:
        with reader._open() as src, h5py.File(tmp, "w", libver="latest") as dst:  # noqa: SLF001
            for key, value in src.attrs.items():
                dst.attrs[key] = value

            def copy(name: str, item: Any) -> None:
                if isinstance(item, h5py.Group):
                    dst.require_group(name)
                    return
                if _per_frame(name, reader.state_name):
                    dst.create_dataset(name, data=item[:frames], maxshape=(None, *item.shape[1:]), chunks=item.chunks)
                elif name == COMMITTED:
                    dst.create_dataset(name, data=np.array([frames], dtype=np.int64))
                else:
                    dst.create_dataset(name, data=item[()])

            src.visititems(copy)
        _check_copy(reader, tmp, frames)
    except BaseException as exc:
        with contextlib.suppress(OSError):  # (a name too long had raised here again, over the error that ended the copy)
            tmp.unlink(missing_ok=True)
        if isinstance(exc, (OSError, RuntimeError, ValueError)):
            raise StorageFailed(f"--resume could not rebuild {path} from its committed frames ({_reason(exc)}); the file "
                                "is unchanged") from None
        raise
    os.replace(tmp, path)


def _per_frame(name: str, state_name: str) -> bool:
    return name in (*_PER_FRAME, state_name) or name.startswith("diagnostics/")


def _check_copy(reader: RunReader, copy: Path, frames: int) -> None:
    """Raise ``ValueError`` unless ``copy`` reads back with every dataset of the file's committed frames."""
    with reader._open() as src, h5py.File(copy, "r") as dst:  # noqa: SLF001
        def same(name: str, item: Any) -> None:
            if isinstance(item, h5py.Group) or name == COMMITTED:
                return
            expected = np.asarray(item[:frames] if _per_frame(name, reader.state_name) else item[()])
            if name not in dst or not np.array_equal(dst[name][()], expected, equal_nan=expected.dtype.kind in "fc"):
                raise ValueError(f"the copy of {name!r} does not read back equal")

        src.visititems(same)


#: how the checks of a frame say that it failed (the frame is in files written before 0.2, not after)
FRAME_CHECKS = ("NaN/Inf in the state at t=", "tokens left the sphere at t=", "a token reached the origin at t=",
                "non-finite cell mass at t=", "negative cell mass", "mass not conserved at t=")


def _failed_its_checks(reason: str, t: float) -> bool:
    """Whether ``reason`` (a failed run's) names the frame at ``t`` as the one that failed its checks."""
    named = re.search(r"at t=([^\s;,()]+)", reason)
    return reason.startswith(FRAME_CHECKS) and named is not None and named.group(1) == f"{t:.6g}"


#: the stored config's values every reader uses, with their types (a hand-altered model.beta = "hot" had raised a
#: ValueError inside the summary, exit 1)
STORED_TYPES = {("model", "d"): (int,), ("model", "beta"): (int, float), ("solver", "kind"): (str,),
                ("solver", "t_final"): (int, float), ("solver", "save_every"): (int, float), ("model", "attention"): (str,)}


def _check_stored_values(config: dict[str, Any], key: str, path: Path) -> None:
    """The values of :data:`STORED_TYPES` present in a stored config have their types (``ConfigError`` naming ``key``)."""
    for (section, name), types in STORED_TYPES.items():
        if name not in config.get(section, {}):
            continue
        value = config[section][name]
        if isinstance(value, bool) or not isinstance(value, types):
            kind = {(int,): "an integer", (int, float): "a number", (str,): "a string"}[types]
            raise ConfigError(key, f"{path} is damaged: its stored config has {section}.{name} = {value!r}, not {kind}")


class RunReader:
    """Read a run file piece by piece, opening it only for the time of each read.

    The constructor checks that ``path`` is a meanfield run and says why not
    (missing, a folder, not HDF5, truncated, no ``config`` attribute, …) with a
    :class:`~meanfield.errors.ConfigError` naming ``key``.  A file still being
    written shows its committed frames and status ``running``; one whose writer
    died without closing it shows status ``interrupted``.

    Attributes
    ----------
    path : Path
    config : dict
        The resolved config stored with the run, as it is stored (what ``--resume`` compares; :meth:`Run.load
        <meanfield.run.Run.load>` fills in the keys added to the config since it was written).
    status, stop_reason : str
    writer : str
        Who wrote the file last: ``"pid N on HOST"`` (empty in files written before it was recorded).
    info : dict
        The counters the last session that finished recorded (those of every session before it added in).
    state_name : {"x", "mass"}
    frames : int
        Frames completely on disk.
    """

    def __init__(self, path: str | Path, *, key: str = "OUT.h5") -> None:
        self.path = Path(path)
        # what is read: absolute, so that a run loaded lazily still reads its file after os.chdir (it had said that
        # the file was removed, or replaced by another one of that name in the new folder)
        self._file = self.path.absolute()
        self.key = key
        stamp = file_stamp(self._file)  # before the header: a file moved onto the name during the read is caught
        self._inode: int | None = stamp[0] if stamp is not None else None
        self._read(self._header)
        if self.status == "running" and not writer_alive(self._file):
            self._read(self._header)  # the writer may have closed the file since the first read: a second one tells
            if (self.status == "running" and not (alive := writer_state(self._file))
                    and _live_writer(self._file, self.writer) is None):  # (a writer under another hard link of the file)
                self.status = "interrupted"
                self.stop_reason = "the writer stopped without closing the file (killed, or the machine went down)"
                if alive is None:  # a file system without flock (a file read over NFS): its lock cannot be asked
                    self.stop_reason += ("; or it writes the file still: this file system offers no locks, so a live "
                                         "writer cannot be told from a killed one")

    def _read(self, read: Callable[[h5py.File], T]) -> T:
        self._check_same_file()
        return read_run_file(self._file, read, key=self.key, shown=self.path)

    def _check_same_file(self) -> None:
        """Refuse to read frames of another file at this path: a run written over this one (``--overwrite`` moves a
        new file onto the name) would mix its frames with this one's header and times."""
        if self._inode is None:
            return
        stamp = file_stamp(self._file)
        if stamp is None or stamp[0] != self._inode:
            raise ConfigError(self.key, f"{self.path} was {'removed' if stamp is None else 'replaced by another file'} "
                                        "since this run was loaded; load it again")

    def _open(self) -> h5py.File:
        return open_run_file(self._file, key=self.key, shown=self.path)

    def _header(self, f: h5py.File) -> None:
        config = _attribute(f, "config")
        if config is None:
            raise ConfigError(self.key, f"{self.path} is an HDF5 file but not a meanfield run (no 'config' attribute)")
        try:
            self.config = json.loads(config)
        except (TypeError, ValueError) as exc:
            raise ConfigError(self.key, f"{self.path}: the stored config is not valid JSON ({exc})") from None
        if not isinstance(self.config, dict) or not all(isinstance(self.config.get(s), dict) for s in ("model", "solver")):
            raise ConfigError(self.key, f"{self.path}: the stored config lacks its [model] or [solver] section")
        _check_stored_values(self.config, self.key, self.path)
        states = [(name, data) for name in STATE_NAMES.values() if (data := _member(f, name)) is not None]
        times = _member(f, "t")
        if times is None or not states:
            raise ConfigError(self.key, f"{self.path} is not a meanfield run (no 't' and 'x' or 'mass' datasets)")
        self.state_name, data = states[0]
        status = _attribute(f, "status", "")
        if isinstance(status, bytes):  # (a fixed-length string attribute)
            status = status.decode(errors="replace")
        if not isinstance(status, str):  # (an array of numbers had been taken as the status "[1 2]")
            raise ConfigError(self.key, f"{self.path} is damaged: its 'status' attribute is {status!r}, not a word")
        self.status = status
        threads = _attribute(f, "threads")
        self.threads = int(threads) if isinstance(threads, (int, np.integer)) and not isinstance(threads, bool) else None
        self.stop_reason = str(_attribute(f, "stop_reason", ""))
        self.writer = str(_attribute(f, "writer", ""))
        try:
            self.info = json.loads(_attribute(f, "info", "{}"))
        except (TypeError, ValueError):
            self.info = None
        if not isinstance(self.info, dict):  # (a list or a number had raised TypeError in Run; text passed in silence)
            warnings.warn(f"{self.path}: its 'info' attribute (the run's counters: steps, wall time, …) is not a JSON "
                          "object; the counters are left out, the frames are read as they are", DamagedFrameWarning, stacklevel=2)
            self.info = {}
        self._check_shapes(f, times, data)
        self.state_shape = tuple(int(size) for size in data.shape[1:])  # (n, d) or (N,), known before any frame
        written = min(int(times.shape[0]), int(data.shape[0]))
        committed = _member(f, COMMITTED)  # files of the first version have none: every written frame counts
        if committed is not None and not 0 <= int(committed[0]) <= written:  # a damaged file (the writer never counts more)
            raise ConfigError(self.key, f"{self.path} is damaged: it counts {int(committed[0])} committed frames, and its "
                                        f"'t' and '{self.state_name}' hold {int(times.shape[0])} and {int(data.shape[0])}")
        self.frames = written if committed is None else int(committed[0])
        fault = _times_fault(np.asarray(times[: self.frames], dtype=float))  # (NaN or decreasing times had been taken
        if fault is not None:  # as they were: --resume then refused the frames as "off the save times")
            raise ConfigError(self.key, f"{self.path} is damaged: its saved times 't' are not finite and increasing ({fault})")
        if self.status == "failed" and self.frames and _failed_its_checks(self.stop_reason, float(times[self.frames - 1])):
            self.frames -= 1  # a failed run written before 0.2 kept the frame that failed (NaN, off the sphere): left out

    def _check_shapes(self, f: h5py.File, times: Any, data: Any) -> None:
        """The layout of the per-frame members (datasets of numbers, with one entry per frame) and the state dataset's
        shape against the config (a particle run's ``d``, a grid's ``points`` and ``areas``): a damaged or hand-altered
        file is refused here, where it had given tracebacks or a made-up summary."""
        members = [("t", times, "f", 1), (self.state_name, data, "f", None), (COMMITTED, _member(f, COMMITTED), "iu", None),
                   (CHECKSUM, _member(f, CHECKSUM), "iu", 1)]
        group = _member(f, "diagnostics")
        if group is not None and not isinstance(group, h5py.Group):
            raise ConfigError(self.key, f"{self.path} is damaged: its 'diagnostics' is a dataset, not a group of series")
        members += [(f"diagnostics/{name}", group[name], "f", 1) for name in (group if group is not None else ())]
        for name, member, kinds, ndim in members:
            if member is None:  # (files of the first version have no committed count and no checksums)
                continue
            fault = _layout_fault(member, kinds, ndim)
            if fault is None and name == COMMITTED and member.shape != (1,):
                fault = f"has shape {member.shape}, not (1,)"
            if fault is not None:
                raise ConfigError(self.key, f"{self.path} is damaged: its '{name}' {fault}")
        d = self.config["model"].get("d")
        if self.state_name == "x":
            if data.ndim != 3 or (isinstance(d, int) and data.shape[2] != d):
                raise ConfigError(self.key, f"{self.path} is damaged: its tokens 'x' have shape {data.shape}, not "
                                            f"(frames, n, d = {d}) as its config says")
            return
        if data.ndim != 2:
            raise ConfigError(self.key, f"{self.path} is damaged: its cell masses have shape {data.shape}, not (frames, N)")
        cells = int(data.shape[1])
        if _member(f, "points") is None:  # (every reader had failed with a bare KeyError: 'points', exit 1)
            raise ConfigError(self.key, f"{self.path} is damaged: a grid run needs its 'points' dataset (N, 3), and it "
                                        "has none")
        for name, shape in (("points", (cells, 3)), ("areas", (cells,))):
            member = _member(f, name)
            if member is not None and tuple(member.shape) != shape:
                raise ConfigError(self.key, f"{self.path} is damaged: '{name}' has shape {tuple(member.shape)}, not {shape} "
                                            f"for its {cells} cells")

    def times(self) -> np.ndarray:
        """The saved times, shape ``(frames,)``."""
        return self._read(lambda f: np.array(f["t"][: self.frames], dtype=float))

    def states(self, index: int | slice = slice(None)) -> np.ndarray:
        """Frames ``index`` of the state dataset (all committed frames by default).

        Each frame is checked against the checksum written with it (:data:`CHECKSUM`, read in the same opening of the
        file); frames whose bytes changed on disk since are returned as they read, with a :class:`DamagedFrameWarning`
        that names them (:meth:`checked_state` tells whether one frame matches).
        """
        frames, states, sums = self._read(lambda f: self._states(f, index))
        damaged = _damaged(frames, states, sums)
        # said once per file version and frames (info had said it twice)
        if damaged and (said := (str(self._file), tuple(damaged), file_stamp(self._file))) not in _DAMAGE_SAID:
            _DAMAGE_SAID.add(said)
            one = len(damaged) == 1
            warnings.warn(f"{self.path}: {_frames_named(damaged, self.times())} {'does' if one else 'do'} not match the "
                          f"checksum{'' if one else 's'} written with {'it' if one else 'them'}: {'its' if one else 'their'} "
                          f"bytes changed on disk after {'it was' if one else 'they were'} committed (a failing disk, or a "
                          f"copy gone wrong), and {'its' if one else 'their'} values cannot be trusted",
                          DamagedFrameWarning, stacklevel=2)
        return states if isinstance(index, slice) else states[0]

    def _states(self, f: h5py.File, index: int | slice) -> tuple[range, np.ndarray, np.ndarray | None]:
        """The frames ``index`` (their numbers and states) and the file's checksums (``None``: a file without any)."""
        data = f[self.state_name]
        if isinstance(index, slice):
            start, stop, step = index.indices(self.frames)
            frames, states = range(start, stop, step), np.array(data[start:stop:step], dtype=float)
        else:
            k = index + self.frames if index < 0 else index
            if not 0 <= k < self.frames:
                raise IndexError(f"frame {index} of a run with {self.frames} frames")
            frames, states = range(k, k + 1), np.array(data[k : k + 1], dtype=float)
        member = _member(f, CHECKSUM)
        return frames, states, None if member is None else np.array(member[: self.frames])

    def checked_state(self, index: int) -> tuple[np.ndarray, bool]:
        """Frame ``index`` and whether it matches the checksum written with it (what ``--resume`` and a run started
        from a stored frame continue from; frames written before checksums match)."""
        frames, states, sums = self._read(lambda f: self._states(f, index))
        return states[0], not _damaged(frames, states, sums)

    def damaged_frames(self, *, chunk_bytes: int = 1 << 27) -> list[int]:
        """The committed frames whose bytes do not match the checksums written with them, all of them read (in chunks
        of about ``chunk_bytes``; ``meanfield info --check``).  Frames written before checksums are taken as they are."""
        frame_bytes = 8 * max(1, int(np.prod(self._read(lambda f: f[self.state_name].shape[1:]))))
        step = max(1, chunk_bytes // frame_bytes)
        damaged: list[int] = []
        for start in range(0, self.frames, step):
            damaged += _damaged(*self._read(lambda f, start=start: self._states(f, slice(start, min(self.frames, start + step)))))
        return damaged

    def checksummed_frames(self) -> int:
        """How many of the committed frames have a checksum (frames written before checksums, and files without any,
        have none)."""
        def count(f: h5py.File) -> int:
            sums = _member(f, CHECKSUM)
            return 0 if sums is None else int(np.count_nonzero(np.asarray(sums[: self.frames]) >= 0))

        return self._read(count)

    def named_frames(self, frames: list[int]) -> str:
        """``frame 7 (t = 1.4)`` or ``frames 3 (t = 0.6), 7 (t = 1.4)``."""
        return _frames_named(frames, self.times())

    def diagnostics(self) -> dict[str, np.ndarray]:
        """The trackers' scalars, one ``(frames,)`` array each (NaN where a frame has none)."""
        return self._read(self._diagnostics)

    def _diagnostics(self, f: h5py.File) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        group = _member(f, "diagnostics")
        for name in group if group is not None else ():
            series = np.full(self.frames, math.nan)
            values = np.asarray(group[name][: self.frames], dtype=float)
            series[: values.size] = values
            out[name] = series
        return out

    def static(self) -> dict[str, np.ndarray]:
        """Arrays written once: ``points``, ``areas``, ``token_masses``, and the weight path as ``weights/<name>``."""
        return self._read(self._static)

    def _static(self, f: h5py.File) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name in f:
            item = f[name]
            if name in (*_PER_FRAME, self.state_name, "diagnostics", COMMITTED):
                continue
            if isinstance(item, h5py.Dataset):
                out[name] = item[()]
            else:
                for sub in item:
                    if isinstance(item[sub], h5py.Dataset):
                        out[f"{name}/{sub}"] = item[sub][()]
        return out


#: what the numbers of a dtype kind are called in the messages on a damaged file
_KINDS_NAMED = {"f": "floating-point numbers", "iu": "integers"}


def _layout_fault(member: Any, kinds: str, ndim: int | None) -> str | None:
    """What is wrong with ``member`` as a dataset of numbers of ``kinds`` (NumPy dtype kinds) with ``ndim`` dimensions
    (any where ``None``), in words that follow its name; ``None`` where nothing is."""
    if not isinstance(member, h5py.Dataset):
        return "is a group, not a dataset"
    if member.dtype.kind not in kinds:
        return f"holds {member.dtype} values, not {_KINDS_NAMED[kinds]}"
    if ndim is not None and member.ndim != ndim:
        return f"has shape {member.shape}, not (frames,)"
    return None


def _times_fault(times: np.ndarray) -> str | None:
    """The first of ``times`` that is not finite or does not come after the one before it, in words; ``None``."""
    bad = np.flatnonzero(~np.isfinite(times))
    if bad.size:
        return f"t[{int(bad[0])}] = {times[bad[0]]}"
    back = np.flatnonzero(np.diff(times) <= 0)
    if back.size:
        k = int(back[0]) + 1
        return f"t[{k}] = {times[k]:.6g} after t[{k - 1}] = {times[k - 1]:.6g}"
    return None


def _damaged(frames: range, states: np.ndarray, sums: np.ndarray | None) -> list[int]:
    """Those of ``frames`` whose ``states`` (as read) differ from the checksums ``sums`` written with them (frames
    written before checksums, marked −1, and files without any, ``None``, are taken as they are)."""
    if sums is None:
        return []
    return [k for k, state in zip(frames, states) if k < sums.shape[0] and sums[k] >= 0 and frame_checksum(state) != sums[k]]


def _frames_named(frames: list[int], times: np.ndarray) -> str:
    """``frame 7 (t = 1.4)`` or ``frames 3 (t = 0.6), 7 (t = 1.4)``."""
    named = ", ".join(f"{k} (t = {times[k]:.6g})" for k in frames)
    return f"frame {named}" if len(frames) == 1 else f"frames {named}"


def solver_settings(config: Mapping[str, Any] | None, info: Mapping[str, Any]) -> dict[str, Any]:
    """A run's ``[solver]`` settings: its config's section over ``info["solver_options"]``, which is all a run of
    :func:`meanfield.solve` (no config) has."""
    return {**(info.get("solver_options") or {}), **((config or {}).get("solver") or {})}


def run_status(path: str | Path) -> tuple[str, str]:
    """``(status, stop_reason)`` of a run file (``interrupted`` when its writer died)."""
    reader = RunReader(path)
    return reader.status, reader.stop_reason


def read_config(path: str | Path) -> dict[str, Any]:
    """The resolved config stored in a run file."""
    return RunReader(path).config


def last_frame(path: str | Path, state_name: str) -> tuple[int, float, np.ndarray]:
    """``(frames, t_last, state_last)``: the last committed frame, for ``--resume``.

    Raises
    ------
    ConfigError
        The run has no committed frame, or its last one is not finite or does not match its checksum.
    """
    reader = RunReader(path, key="--resume")
    if reader.state_name != state_name:
        raise ConfigError("--resume", f"{path} holds {reader.state_name!r} frames, this config makes {state_name!r}")
    if reader.frames == 0:
        raise ConfigError("--resume", f"{path}: no committed frame to resume from")
    state, intact = reader.checked_state(-1)
    if not intact:
        times = reader.times()
        # the path absolute (init.path is read from the config's folder) and the time to every digit (it must match)
        earlier = (f"Continue from the frame before it in a new file: --set init.kind=run --set init.path={Path(path).resolve()} "
                   f"--set init.time={float(times[-2])!r}" if reader.frames > 1 else "Start the run afresh")
        raise ConfigError("--resume", f"{path}: the last committed {_frames_named([reader.frames - 1], times)} does not match "
                                      f"the checksum written with it: its bytes changed on disk after it was committed, and "
                                      f"the run cannot continue from it (the file is unchanged). {earlier}")
    if not np.all(np.isfinite(state)):
        raise ConfigError("--resume", f"{path}: the last committed frame is not finite; the run cannot continue from it")
    return reader.frames, float(reader.times()[-1]), state
