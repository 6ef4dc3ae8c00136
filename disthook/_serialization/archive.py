"""torch's zip layout: ``<prefix>/data.pkl`` (the pickled object), ``<prefix>/data/<key>``
(each storage's raw bytes, stored uncompressed, 64-byte aligned), ``byteorder``, ``version``.

Reading never trusts a size the file declares before checking it against the bytes the file
holds: a record is read into a buffer of the size the pickle needs, only after the zip
directory agrees with it and the record's bytes lie inside the file (or, compressed, could
inflate to it); a record that inflates past its declared size, or whose CRC is wrong, fails.
"""
from __future__ import annotations

import mmap
import os
import secrets
import struct
import zipfile
import zlib

import numpy as np

from disthook._serialization.rebuild import CheckpointError

ALIGNMENT = 64
MAX_DEFLATE_RATIO = 1032  # the most deflate can compress: declared sizes beyond it are lies
CHUNK = 1 << 24
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")


class ArchiveReader:
    """One torch zip archive, opened for reading records by name."""

    def __init__(self, archive: zipfile.ZipFile, prefix: str, length: int, path=None) -> None:
        self.zip = archive
        self.prefix = prefix
        self.length = length  # bytes in the whole file
        self.path = path  # for mmap
        self._mapped = None

    def _name(self, record: str) -> str:
        return f"{self.prefix}/{record}" if self.prefix else record

    def has(self, record: str) -> bool:
        try:
            self.zip.getinfo(self._name(record))
            return True
        except KeyError:
            return False

    def _info(self, record: str, expected: int | None) -> zipfile.ZipInfo:
        name = self._name(record)
        try:
            info = self.zip.getinfo(name)
        except KeyError:
            raise CheckpointError(f"the archive has no record {name!r}, which it "
                                  "names") from None
        if expected is not None and info.file_size != expected:
            raise CheckpointError(f"record {name!r} holds {info.file_size} bytes where its "
                                  f"tensor needs {expected}: the file declares more (or less) "
                                  "than it holds")
        if info.header_offset + info.compress_size > self.length:
            raise CheckpointError(f"record {name!r} reaches past the end of the file "
                                  "(truncated?)")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.compress_size != info.file_size:
                raise CheckpointError(f"record {name!r} is stored with {info.compress_size} "
                                      f"bytes but declares {info.file_size}")
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            if info.file_size > info.compress_size * MAX_DEFLATE_RATIO + 1024:
                raise CheckpointError(f"record {name!r} declares {info.file_size} bytes from "
                                      f"{info.compress_size} compressed, more than deflate can "
                                      "produce")
        else:
            raise CheckpointError(f"record {name!r} uses zip compression method "
                                  f"{info.compress_type}; torch checkpoints are stored or "
                                  "deflated")
        return info

    def read(self, record: str, expected: int | None = None) -> np.ndarray:
        """The record's bytes (a uint8 array), ``expected`` long when given."""
        info = self._info(record, expected)
        out = np.empty(info.file_size, np.uint8)
        view = memoryview(out)
        done = 0
        try:
            member = self.zip.open(info)
        except (ValueError, OSError) as e:  # a local header that points nowhere
            raise CheckpointError(f"record {info.filename!r} cannot be read: the file is "
                                  f"damaged ({e})") from None
        with member:
            while done < info.file_size:
                chunk = member.read(min(CHUNK, info.file_size - done))
                if not chunk:
                    break
                view[done:done + len(chunk)] = chunk
                done += len(chunk)
            if done != info.file_size or member.read(1):
                raise CheckpointError(f"record {info.filename!r} does not hold the "
                                      f"{info.file_size} bytes it declares")
        return out

    def mmap(self, record: str, expected: int) -> np.ndarray:
        """The record's bytes mapped copy-on-write from the file (it must be stored)."""
        info = self._info(record, expected)
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"mmap=True needs stored records; {info.filename!r} is "
                                  "compressed")
        with open(self.path, "rb") as f:
            f.seek(info.header_offset)
            header = f.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise CheckpointError(f"record {info.filename!r} has no valid local header")
        fields = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1]
        if start + expected > self.length:
            raise CheckpointError(f"record {info.filename!r} reaches past the end of the file")
        if expected == 0:
            return np.empty(0, np.uint8)
        if self._mapped is None:  # one copy-on-write map of the whole file
            with open(self.path, "rb") as f:
                self._mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        # each record an array of its own over the map (not a slice of one array of the
        # whole file), so that its tensors' storage_offset() and untyped_storage() are the
        # record's, as in torch
        return np.frombuffer(self._mapped, np.uint8, expected, start)


def torch_prefix(names: list) -> str | None:
    """The directory holding ``data.pkl`` in a torch archive, or None."""
    found = [n[:-len("/data.pkl")] for n in names
             if n.endswith("/data.pkl") and n.count("/") == 1]
    return found[0] if len(found) == 1 else None


def archive_errors() -> tuple:
    return (zipfile.BadZipFile, zlib.error, EOFError, struct.error, NotImplementedError)


class ArchiveWriter:
    """Writes records as torch does: stored, each one's bytes aligned to 64 in the file."""

    def __init__(self, target, prefix: str = "archive") -> None:
        self.zip = zipfile.ZipFile(target, "w", zipfile.ZIP_STORED, allowZip64=True)
        self.prefix = prefix

    def write(self, record: str, data) -> None:
        data = memoryview(data).cast("B")
        name = f"{self.prefix}/{record}"
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_STORED
        info.file_size = data.nbytes
        # an extra field pads the local header so that the bytes start on ALIGNMENT
        start = self.zip.fp.tell() + _LOCAL_HEADER.size + len(name.encode()) + 4
        if data.nbytes > zipfile.ZIP64_LIMIT:
            start += 20  # the zip64 sizes zipfile adds to the local header
        pad = -start % ALIGNMENT
        info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        with self.zip.open(info, "w", force_zip64=data.nbytes > zipfile.ZIP64_LIMIT) as out:
            for begin in range(0, data.nbytes, CHUNK):
                out.write(data[begin:begin + CHUNK])

    def write_trailer(self) -> None:
        self.write("version", b"3\n")
        self.write(".data/serialization_id", str(secrets.randbits(128)).zfill(40).encode())

    def close(self) -> None:
        self.zip.close()


def file_length(source) -> int:
    if isinstance(source, (str, os.PathLike)):
        return os.path.getsize(source)
    here = source.tell()
    source.seek(0, os.SEEK_END)
    end = source.tell()
    source.seek(here)
    return end
