"""How a routed message travels inside a lane or road message.

The message a flow sees is ``{"route": {"src", "dst"}, "tag", "stamp",
"data"}`` (docs/routing.md).  On the wire it is a *frame*, so that the
routers in between read only the small header and pass the rest on as it
came::

    u32 n (big-endian) | header: msgpack [src, dst, tag, stamp] (n bytes) | data: msgpack

``src`` and ``dst`` are arrays of four strings.  A manor forwarding a
message neither decodes its data nor packs it again; only the house the
message lands in decodes it.
"""

from __future__ import annotations

from typing import Any

import msgpack

from flowcast.errors import Error

__all__ = ["FrameError", "MAX_HEADER", "encode", "open_header", "open_data", "pack_message", "route_bytes"]

#: A header is two routes (at most ~700 bytes of names), a tag and a stamp.
MAX_HEADER = 2048
_ARRAY4 = b"\x94"


class FrameError(ValueError, Error):
    """A frame that cannot be read; the message says what is wrong."""


def route_bytes(route: Any) -> bytes:
    """A route packed once, to be reused in every header that carries it."""
    return msgpack.packb(list(route), use_bin_type=True)


def encode(pack: Any, src_dst: bytes, tag: str, stamp: float, data: bytes) -> bytes:
    """A frame from the packed routes (``route_bytes(src) + route_bytes(dst)``) and packed data."""
    head = b"".join((_ARRAY4, src_dst, pack(tag), pack(stamp)))
    return b"".join((len(head).to_bytes(4, "big"), head, data))


def open_header(frame: Any) -> tuple[Any, Any, Any, Any, int]:
    """``(src, dst, tag, stamp, data_offset)`` with src/dst as tuples, unchecked beyond shape."""
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise FrameError(f"a routed message is a frame of bytes, not {type(frame).__name__}")
    size = len(frame)
    if size < 5:
        raise FrameError("frame too short")
    n = int.from_bytes(frame[:4], "big")
    if n > MAX_HEADER or 4 + n > size:
        raise FrameError("frame header length out of range")
    try:
        head = msgpack.unpackb(frame[4 : 4 + n], use_list=False, raw=False)
    except Exception as error:  # noqa: BLE001 - any decoding failure is the frame's fault
        raise FrameError(f"frame header does not decode ({type(error).__name__})") from None
    if type(head) is not tuple or len(head) != 4:
        raise FrameError("frame header is not [src, dst, tag, stamp]")
    src, dst, tag, stamp = head
    return src, dst, tag, stamp, 4 + n


def open_data(frame: Any, offset: int) -> Any:
    try:
        return msgpack.unpackb(memoryview(frame)[offset:], raw=False)
    except Exception as error:  # noqa: BLE001
        raise FrameError(f"frame data does not decode ({type(error).__name__})") from None


def pack_message(src: Any, dst: Any, tag: str, stamp: float, data: Any) -> bytes:
    """A whole frame at once: for tools and tests that speak to routers from outside one."""
    pack = msgpack.Packer(use_bin_type=True).pack
    return encode(pack, route_bytes(src) + route_bytes(dst), tag, stamp, pack(data))
