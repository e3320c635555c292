"""The dynamic section of an ELF executable or shared object: which libraries it needs, where it looks
for them, and moving that search path next to the file itself.

A packed environment (``packed_env``) carries an interpreter built with an absolute ``RUNPATH``
(pyenv's ``-Wl,-rpath,<prefix>/lib``). Unpacked elsewhere, that path either does not exist or, worse,
holds another build. ``retarget`` rewrites it in place to a path relative to the file (``$ORIGIN/..``),
as ``chrpath`` does: the new string takes the old one's bytes, so it may only be as long, and nothing
else in the file moves. Only 64-bit little-endian files (x86-64, aarch64), which is every Linux node
this project runs Spark on.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
ELF_CLASS_64 = 2
ELF_LITTLE_ENDIAN = 1
PT_LOAD = 1
PT_DYNAMIC = 2
DT_NULL = 0
DT_NEEDED = 1
DT_STRTAB = 5
DT_RPATH = 15
DT_RUNPATH = 29
# Elf64_Phdr: type, flags, offset, vaddr, paddr, filesz, memsz, align; Elf64_Dyn: tag, value.
PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")
DYNAMIC_ENTRY = struct.Struct("<qQ")


class ElfError(RuntimeError):
    """A file that looks like ELF but that this reader cannot handle, or a search path that won't fit."""


@dataclass(frozen=True)
class DynamicSection:
    """What the dynamic loader reads from a file: the libraries it needs (their sonames) and the
    search path for them (``RUNPATH``, or the older ``RPATH``), with where that string lies in the file."""

    needed: tuple[str, ...]
    search_path: str | None
    search_path_offset: int | None

    @property
    def search_path_capacity(self) -> int:
        """How many bytes a new search path may take: the old one's."""
        return len(self.search_path.encode()) if self.search_path is not None else 0


def is_elf(path: Path) -> bool:
    with path.open("rb") as stream:
        return stream.read(4) == ELF_MAGIC


def read_dynamic(path: Path) -> DynamicSection | None:
    """The dynamic section of ``path``, or None when it is not ELF or is statically linked."""
    if path.stat().st_size < 64:
        return None
    with path.open("rb") as stream, mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return dynamic_section(data, path)


def dynamic_section(data: bytes | mmap.mmap, source: Path | str = "<bytes>") -> DynamicSection | None:
    if data[:4] != ELF_MAGIC:
        return None
    if data[4] != ELF_CLASS_64 or data[5] != ELF_LITTLE_ENDIAN:
        raise ElfError(f"{source}: only 64-bit little-endian ELF files are supported")
    program_headers_at = struct.unpack_from("<Q", data, 0x20)[0]
    entry_size, count = struct.unpack_from("<HH", data, 0x36)
    segments = [
        PROGRAM_HEADER.unpack_from(data, program_headers_at + index * entry_size) for index in range(count)
    ]
    dynamic = next((segment for segment in segments if segment[0] == PT_DYNAMIC), None)
    if dynamic is None:
        return None
    _, _, dynamic_at, _, _, dynamic_size, _, _ = dynamic
    entries: list[tuple[int, int]] = []
    for at in range(dynamic_at, dynamic_at + dynamic_size, DYNAMIC_ENTRY.size):
        tag, value = DYNAMIC_ENTRY.unpack_from(data, at)
        if tag == DT_NULL:
            break
        entries.append((tag, value))
    string_table_address = next((value for tag, value in entries if tag == DT_STRTAB), None)
    if string_table_address is None:
        raise ElfError(f"{source}: a dynamic section without a string table")
    string_table = _file_offset(segments, string_table_address, source)

    def string_at(offset: int) -> str:
        start = string_table + offset
        return bytes(data[start : data.find(b"\0", start)]).decode()

    needed = tuple(string_at(value) for tag, value in entries if tag == DT_NEEDED)
    # RUNPATH wins over RPATH when a file has both (the loader then ignores RPATH).
    paths = {tag: value for tag, value in entries if tag in (DT_RUNPATH, DT_RPATH)}
    path_offset = paths.get(DT_RUNPATH, paths.get(DT_RPATH))
    if path_offset is None:
        return DynamicSection(needed, None, None)
    return DynamicSection(needed, string_at(path_offset), string_table + path_offset)


def retarget(data: bytes, section: DynamicSection, search_path: str) -> bytes:
    """``data`` (a file's bytes, whose ``section`` was read from it) with its search path replaced by
    ``search_path``, padded with zero bytes to the old one's length."""
    if section.search_path_offset is None:
        raise ElfError("the file has no RUNPATH or RPATH to replace")
    new = search_path.encode()
    capacity = section.search_path_capacity
    if len(new) > capacity:
        raise ElfError(f"search path {search_path!r} is longer than the {capacity} bytes of the old one")
    start = section.search_path_offset
    return data[:start] + new + b"\0" * (capacity - len(new)) + data[start + capacity :]


def _file_offset(segments: list[tuple[int, ...]], address: int, source: Path | str) -> int:
    """Where the loaded ``address`` comes from in the file (through the PT_LOAD segment that maps it)."""
    for kind, _, offset, virtual_address, _, file_size, _, _ in segments:
        if kind == PT_LOAD and virtual_address <= address < virtual_address + file_size:
            return address - virtual_address + offset
    raise ElfError(f"{source}: address {address:#x} lies in no loaded segment")
