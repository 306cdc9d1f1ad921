"""How a routed message travels inside a lane or road message.

The message a flow sees is ``{"route": {"src", "dst"}, "tag", "stamp",
"data"}`` (docs/routing.md).  On the wire it is a *parcel*, so that the
routers in between read only the small header and pass the rest on as it
came::

    u32 n (big-endian) | header: msgpack [src, dst, tag, stamp(, ext)] (n bytes) | data: msgpack

``src`` and ``dst`` are arrays of four strings.  A manor forwarding a
message neither decodes its data nor packs it again; only the house the
message lands in decodes it.

``ext``, optional, is a small map of header extensions (a message id, a
sequence, dependencies, a signature, a lease...) for the layers above
routing.  It rides in the header, not the data, so a router can act on it
without decoding the data, and a manor passes it on byte for byte: a
signature over it still checks at the far end.  Keys a router does not know
it ignores, so a layer can add one without every estate upgrading first.
"""

from __future__ import annotations

import re
from typing import Any

import msgpack

from flowcast.errors import Error
from flowcast.transport.wire import unpack_untrusted

__all__ = [
    "ParcelError", "MAX_HEADER", "MAX_EXT", "HEADER_LIMITS", "encode", "open_header", "open_data", "open_ext",
    "pack_ext", "pack_message", "readdress", "route_bytes", "split_ext", "split_ext_map",
]

#: A header is two routes (at most ~700 bytes of names), a tag, a stamp and the extensions.
MAX_HEADER = 2048
#: Packed bytes of the extension map at most.  Room for a message id, a
#: sequence, a 64-byte signature and about ten 32-byte dependency hashes,
#: and with the routes still well inside MAX_HEADER; anything bigger is
#: data and belongs in the payload, where it is segmented and not read by
#: every router on the way.
MAX_EXT = 512
#: Extension keys: short names, like tags.
MAX_EXT_KEY = 32
#: A list value holds at most this many scalars (dependency ids, say).
MAX_EXT_LIST = 32
#: What a header's decoder lets an array or map declare: as much as any header holds (two
#: four-name routes, an extension list, an extension map within MAX_EXT), and no more --
#: msgpack makes what is declared before reading it (wire.unpack_untrusted), and a header is
#: read by every router on the way, before policy.
HEADER_LIMITS = {"max_array_len": MAX_EXT_LIST, "max_map_len": MAX_EXT // 3, "max_ext_len": 0}
_ARRAY4 = b"\x94"
_ARRAY5 = b"\x95"
_SCALARS = (str, bytes, int, float, bool, type(None))


class ParcelError(ValueError, Error):
    """A parcel that cannot be read; the message says what is wrong."""


def route_bytes(route: Any) -> bytes:
    """A route packed once, to be reused in every header that carries it."""
    return msgpack.packb(list(route), use_bin_type=True)


def encode(pack: Any, src_dst: bytes, tag: str, stamp: float, data: bytes, ext: bytes = b"") -> bytes:
    """A parcel from the packed routes (``route_bytes(src) + route_bytes(dst)``) and packed data;
    ``ext`` is a packed extension map (:func:`pack_ext`), or empty for a four-element header."""
    head = b"".join((_ARRAY5 if ext else _ARRAY4, src_dst, pack(tag), pack(stamp), ext))
    return b"".join((len(head).to_bytes(4, "big"), head, data))


_EXT_KEY = re.compile(r"[A-Za-z0-9_.-]{1,%d}" % MAX_EXT_KEY)


class _Pairs(list):
    """A decoded map as its pairs, so that a repeated key is seen."""


def readdress(pack: Any, src_dst: bytes, tag: str, stamp: float, parcel: Any, offset: int) -> bytes:
    """``parcel`` under another ``src_dst`` header (a forward to another house), its extensions and data as they came."""
    view = memoryview(parcel)
    ext = split_ext(view[4:offset])[1] if parcel[4] == 0x95 else b""
    return encode(pack, src_dst, tag, stamp, bytes(view[offset:]), ext)


def check_ext(ext: Any) -> dict[str, Any]:
    """``ext`` as a header extension map, or ParcelError saying what is wrong with it."""
    if type(ext) is not dict:
        raise ParcelError(f"header extensions are a map, not {type(ext).__name__}")
    for key, value in ext.items():
        if type(key) is not str or not _EXT_KEY.fullmatch(key):
            raise ParcelError(f"header extension key {str(key)[:40]!r} is not a name of 1 to {MAX_EXT_KEY} letters, digits, '_', '.' or '-'")
        if isinstance(value, (list, tuple)):
            if len(value) > MAX_EXT_LIST or not all(isinstance(item, _SCALARS) for item in value):
                raise ParcelError(f"header extension {key!r}: a list of at most {MAX_EXT_LIST} scalars")
        elif not isinstance(value, _SCALARS):
            raise ParcelError(f"header extension {key!r}: a scalar, bytes or a short list, not {type(value).__name__}")
    return ext


def pack_ext(ext: Any) -> bytes:
    """The packed extension map for :func:`encode`; ParcelError if it is not one or is over MAX_EXT."""
    if not ext:
        return b""
    packed = msgpack.packb(check_ext(ext), use_bin_type=True)
    if len(packed) > MAX_EXT:
        raise ParcelError(f"header extensions of {len(packed)} bytes exceed the {MAX_EXT}-byte limit")
    return packed


def split_ext(head: Any) -> tuple[tuple, bytes]:
    """A five-element header's first four elements and its extension map's bytes as they came.

    Bytes, not the decoded map: a manor that rewrites a header (the source
    channel of a road arrival) must pass the extensions on untouched.
    """
    first, ext, _map = split_ext_map(head)
    return first, ext


def split_ext_map(head: Any) -> tuple[tuple, bytes, dict[str, Any]]:
    """As :func:`split_ext`, and the extension map decoded (and checked) besides."""
    unpacker = msgpack.Unpacker(raw=False, use_list=False, max_buffer_size=MAX_HEADER, **HEADER_LIMITS)
    unpacker.feed(head)
    try:
        if unpacker.read_array_header() != 5:
            raise ParcelError("parcel header is not [src, dst, tag, stamp, ext]")
        first = (unpacker.unpack(), unpacker.unpack(), unpacker.unpack(), unpacker.unpack())
        start = unpacker.tell()
    except ParcelError:
        raise
    except Exception as error:  # noqa: BLE001 - any decoding failure is the parcel's fault
        raise ParcelError(f"parcel header does not decode ({type(error).__name__})") from None
    ext = bytes(head[start:])
    if len(ext) > MAX_EXT:
        raise ParcelError(f"header extensions of {len(ext)} bytes exceed the {MAX_EXT}-byte limit")
    try:
        pairs = msgpack.unpackb(ext, raw=False, use_list=False, strict_map_key=True, object_pairs_hook=_Pairs, **HEADER_LIMITS)
        if type(pairs) is not _Pairs:
            raise ParcelError("header extensions are not a map")
        if len({key for key, _ in pairs}) != len(pairs):
            # Decoders disagree on which of two equal keys counts (Python keeps the
            # last): a signature over the map would not say what a reader sees.
            raise ParcelError("header extensions repeat a key")
        decoded = check_ext(dict(pairs))
    except ParcelError:
        raise
    except Exception as error:  # noqa: BLE001
        raise ParcelError(f"header extensions do not decode ({type(error).__name__})") from None
    return first, ext, decoded


def open_ext(parcel: Any) -> dict[str, Any]:
    """The extension map of a parcel (empty for a four-element header); ParcelError if malformed."""
    if len(parcel) < 5 or parcel[4] != 0x95:
        return {}
    n = int.from_bytes(parcel[:4], "big")
    if n > MAX_HEADER or 4 + n > len(parcel):
        raise ParcelError("parcel header length out of range")
    return split_ext_map(memoryview(parcel)[4 : 4 + n])[2]


def open_header(parcel: Any) -> tuple[Any, Any, Any, Any, int]:
    """``(src, dst, tag, stamp, data_offset)`` with src/dst as tuples, unchecked beyond shape."""
    if not isinstance(parcel, (bytes, bytearray, memoryview)):
        raise ParcelError(f"a routed message is a parcel of bytes, not {type(parcel).__name__}")
    size = len(parcel)
    if size < 5:
        raise ParcelError("parcel too short")
    n = int.from_bytes(parcel[:4], "big")
    if n > MAX_HEADER or 4 + n > size:
        raise ParcelError("parcel header length out of range")
    if parcel[4] == 0x95:
        src, dst, tag, stamp = split_ext(memoryview(parcel)[4 : 4 + n])[0]
        return src, dst, tag, stamp, 4 + n
    try:
        head = msgpack.unpackb(parcel[4 : 4 + n], use_list=False, raw=False, **HEADER_LIMITS)
    except Exception as error:  # noqa: BLE001 - any decoding failure is the parcel's fault
        raise ParcelError(f"parcel header does not decode ({type(error).__name__})") from None
    if type(head) is not tuple or len(head) != 4:
        raise ParcelError("parcel header is not [src, dst, tag, stamp] nor [src, dst, tag, stamp, ext]")
    src, dst, tag, stamp = head
    return src, dst, tag, stamp, 4 + n


def open_data(parcel: Any, offset: int) -> Any:
    try:
        return unpack_untrusted(memoryview(parcel)[offset:], raw=False)  # another estate's bytes
    except Exception as error:  # noqa: BLE001
        raise ParcelError(f"parcel data does not decode ({type(error).__name__})") from None


def pack_message(src: Any, dst: Any, tag: str, stamp: float, data: Any, ext: Any = None) -> bytes:
    """A whole parcel at once: for tools and tests that speak to routers from outside one."""
    pack = msgpack.Packer(use_bin_type=True).pack
    return encode(pack, route_bytes(src) + route_bytes(dst), tag, stamp, pack(data), pack_ext(ext))
