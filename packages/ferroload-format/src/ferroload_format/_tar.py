"""USTAR shards written with exact member offsets (docs/format.md §3)."""

from __future__ import annotations

from dataclasses import dataclass, field

import xxhash

from ferroload_store import ObjectWriter

BLOCK = 512
END_OF_ARCHIVE = bytes(2 * BLOCK)
#: USTAR's 11-digit octal size field holds sizes below 8 GiB.
MAX_MEMBER_SIZE = 8**11 - 1
_ZERO_BLOCK = bytes(BLOCK)


def _template() -> tuple[bytes, int]:
    h = bytearray(BLOCK)
    h[100:108] = b"0000644\x00"  # mode
    h[108:116] = b"0000000\x00"  # uid
    h[116:124] = b"0000000\x00"  # gid
    h[136:148] = b"00000000000\x00"  # mtime
    h[148:156] = b"        "  # checksum field counts as spaces while summing
    h[156:157] = b"0"  # regular file
    h[257:263] = b"ustar\x00"
    h[263:265] = b"00"
    return bytes(h), sum(h)


_TEMPLATE, _TEMPLATE_SUM = _template()


def ustar_header(name: bytes, size: int, *, kind: bytes = b"0") -> bytes:
    """One 512-byte USTAR header for a member `name` of `size` bytes (`kind` "0": a
    regular file; "x": a PAX extended header).

    Every field but name, size, type and checksum is constant (mode 0644, uid/gid 0,
    mtime 0), so a shard's bytes depend only on its samples.
    """
    if len(name) > 100:
        raise ValueError(f"tar member name {name!r} is longer than 100 bytes")
    if not 0 <= size <= MAX_MEMBER_SIZE:
        raise ValueError(f"tar member {name!r} is {size} bytes; USTAR holds at most 8 GiB - 1")
    size_field = b"%011o\x00" % size
    # The size field in the template is all zero bytes: its sum adds to the template's.
    chksum = _TEMPLATE_SUM + sum(name) + sum(size_field) + kind[0] - ord("0")
    return b"".join(
        (
            name,
            _TEMPLATE[len(name) : 124],
            size_field,
            _TEMPLATE[136:148],
            b"%06o\x00 " % chksum,
            kind,
            _TEMPLATE[157:],
        )
    )


def member_header(name: str, size: int) -> bytes:
    """The header blocks of a regular file member `name` of `size` bytes: one USTAR
    header, after a PAX extended header holding the whole name when its UTF-8 does not
    fit USTAR's 100 bytes (what tarfile, GNU tar and WebDataset read). The one tar
    writer of ferroload: shards here, WebDataset and folder exports in ferroload-convert.
    """
    raw = name.encode()
    if len(raw) <= 100:
        return ustar_header(raw, size)
    body = b" path=" + raw + b"\n"
    length = len(body) + 1
    while len(body) + len(str(length)) != length:
        length = len(body) + len(str(length))
    record = str(length).encode() + body
    return b"".join(
        (
            ustar_header(b"././@PaxHeader", len(record), kind=b"x"),
            record,
            bytes(padding(len(record))),
            ustar_header(raw[:100], size),
        )
    )


def padding(size: int) -> int:
    """Zero bytes after `size` bytes of member data, up to the next block."""
    return -size % BLOCK


@dataclass
class ShardMembers:
    """Columns of what one shard holds, in member order (the side index)."""

    names: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    checksums: list[int] = field(default_factory=list)


class ShardWriter:
    """Appends members to one tar shard, recording where each member's data lands.

    Small writes are gathered into a buffer of `buffer_size` bytes before they reach the
    object writer; payloads larger than the buffer go straight through.
    """

    def __init__(self, out: ObjectWriter, path: str, *, buffer_size: int = 8 << 20) -> None:
        self.path = path
        self.members = ShardMembers()
        self.num_samples = 0
        self._out = out
        self._buf = bytearray()
        self._buffer_size = buffer_size
        self._pos = 0

    @property
    def size(self) -> int:
        """Bytes written so far (without the end-of-archive blocks)."""
        return self._pos

    def add(self, name: str, data: bytes | bytearray | memoryview) -> tuple[int, int, int]:
        """Append a member; returns (data offset, data length, xxh3-64 checksum)."""
        length = len(data) if not isinstance(data, memoryview) else data.nbytes
        checksum = xxhash.xxh3_64_intdigest(data)
        buf = self._buf
        buf += ustar_header(name.encode("ascii"), length)
        offset = self._pos + BLOCK
        pad = padding(length)
        if length >= self._buffer_size:
            self._flush()
            self._out.write(data)
            self._out.write(_ZERO_BLOCK[:pad])
        else:
            buf += data
            buf += _ZERO_BLOCK[:pad]
            if len(buf) >= self._buffer_size:
                self._flush()
        self._pos = offset + length + pad
        m = self.members
        m.names.append(name)
        m.offsets.append(offset)
        m.lengths.append(length)
        m.checksums.append(checksum)
        return offset, length, checksum

    def _flush(self) -> None:
        if self._buf:
            self._out.write(self._buf)
            self._buf = bytearray()

    def close(self) -> int:
        """Write the end-of-archive blocks and finish the object; returns its size."""
        self._buf += END_OF_ARCHIVE
        self._flush()
        self._out.close()
        self._pos += len(END_OF_ARCHIVE)
        return self._pos

    def abort(self) -> None:
        """Drop the shard (nothing becomes visible)."""
        self._buf = bytearray()
        self._out.abort()
