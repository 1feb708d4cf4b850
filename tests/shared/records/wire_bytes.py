"""Hand-written wire writers (big-endian), for spelling expected bytes out from Kafka's JSON schemas without the dev
kit's encoders: an encoder and decoder that agree on a wrong layout cannot pass a test built with these."""

from __future__ import annotations


def i8(n: int) -> bytes:
    return n.to_bytes(1, "big", signed=True)


def i16(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def u16(n: int) -> bytes:
    return n.to_bytes(2, "big")


def i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def i64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def s(text: str | None) -> bytes:
    """Classic string: int16 length, -1 for null."""
    if text is None:
        return i16(-1)
    data = text.encode()
    return i16(len(data)) + data


def uv(n: int) -> bytes:
    """Unsigned varint, 7 bits per byte, low bits first."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cs(text: str | None) -> bytes:
    """Compact string: uvarint length + 1, 0 for null."""
    if text is None:
        return uv(0)
    data = text.encode()
    return uv(len(data) + 1) + data


def carray(*items: bytes) -> bytes:
    """Compact array: uvarint count + 1, then the items."""
    return uv(len(items) + 1) + b"".join(items)


def tags(*fields: tuple[int, bytes]) -> bytes:
    """A tagged-fields section: count, then tag, size and data per field."""
    return uv(len(fields)) + b"".join(uv(tag) + uv(len(data)) + data for tag, data in fields)


NO_TAGS = tags()
