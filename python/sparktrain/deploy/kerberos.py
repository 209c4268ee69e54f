"""The Kerberos credentials this process would reach HDFS with, looked up the way sparktrain's
HDFS client does. Runs on the driver and in the ``sparktrain`` command.

That client (hdfs-native) authenticates to a Kerberized NameNode in one of two ways: with a
delegation token from the file ``HADOOP_TOKEN_FILE_LOCATION`` names (what YARN gives each
container), or through MIT Kerberos' ``libgssapi_krb5.so.2``, loaded at run time, with the
process's default credentials: the ticket cache (``KRB5CCNAME``, else the default cache of
``KRB5_CONFIG``'s krb5.conf) or a client keytab (``KRB5_CLIENT_KTNAME``). This module asks that
same library, through ``ctypes``, for those default credentials, so that a check says what a
connection would find; a cache file that exists but holds no valid ticket does not count.

Acquiring credentials from a client keytab contacts the KDC and stores the ticket in the
default cache, as the HDFS client's first connection would.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import cache
from typing import Final

#: The library hdfs-native loads (the ``.so.2`` name: Debian ships no unversioned link).
GSSAPI_LIBRARY: Final = "libgssapi_krb5.so.2"
#: Hadoop's token storage file starts with these bytes (``Credentials.TOKEN_STORAGE_MAGIC``).
TOKEN_STORAGE_MAGIC: Final = b"HDTS"

# RFC 2744's C bindings: the values and the status fields the calls below use.
_GSS_C_INITIATE: Final = 1
_GSS_C_INDEFINITE: Final = 0xFFFFFFFF
_GSS_C_GSS_CODE: Final = 1
_GSS_C_MECH_CODE: Final = 2
_GSS_ERROR_MASK: Final = 0xFFFF0000  # the calling and routine error fields


class _Buffer(ctypes.Structure):
    """``gss_buffer_desc``."""

    _fields_ = [("length", ctypes.c_size_t), ("value", ctypes.c_void_p)]


@dataclass(frozen=True)
class Credentials:
    """Default Kerberos credentials: ``principal`` (``alice@EXAMPLE.COM``) and the seconds
    they stay valid (``lifetime_s``; None when GSSAPI calls them indefinite)."""

    principal: str
    lifetime_s: int | None


class NoCredentials(Exception):
    """GSSAPI found no usable credentials, or the library is missing; the message is the
    library's own words (which cache it looked at, which KDC it could not reach)."""


@cache
def _library() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(GSSAPI_LIBRARY)
    except OSError:
        return None
    u32p = ctypes.POINTER(ctypes.c_uint32)
    vpp = ctypes.POINTER(ctypes.c_void_p)
    buf = ctypes.POINTER(_Buffer)
    # Arguments in the order of RFC 2744's prototypes.
    voidp, u32, int_ = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int
    lib.gss_acquire_cred.argtypes = [u32p, voidp, u32, voidp, int_, vpp, voidp, u32p]
    lib.gss_inquire_cred.argtypes = [u32p, ctypes.c_void_p, vpp, u32p, ctypes.c_void_p, ctypes.c_void_p]
    lib.gss_display_name.argtypes = [u32p, ctypes.c_void_p, buf, ctypes.c_void_p]
    lib.gss_display_status.argtypes = [u32p, ctypes.c_uint32, ctypes.c_int, ctypes.c_void_p, u32p, buf]
    lib.gss_release_buffer.argtypes = [u32p, buf]
    lib.gss_release_name.argtypes = [u32p, vpp]
    lib.gss_release_cred.argtypes = [u32p, vpp]
    for name in ("gss_acquire_cred", "gss_inquire_cred", "gss_display_name", "gss_display_status"):
        getattr(lib, name).restype = ctypes.c_uint32
    return lib


def gssapi_available() -> bool:
    """Whether MIT Kerberos' GSSAPI library can be loaded, as the HDFS client needs it to."""
    return _library() is not None


def default_credentials() -> Credentials:
    """The credentials a Kerberos connection from this process would use; raises
    :class:`NoCredentials` saying why there are none."""
    lib = _library()
    if lib is None:
        raise NoCredentials(f"{GSSAPI_LIBRARY} (MIT Kerberos) cannot be loaded")
    minor = ctypes.c_uint32()
    cred = ctypes.c_void_p()
    major = lib.gss_acquire_cred(
        ctypes.byref(minor), None, _GSS_C_INDEFINITE, None, _GSS_C_INITIATE, ctypes.byref(cred), None, None
    )
    if major & _GSS_ERROR_MASK:
        raise NoCredentials(_status_text(lib, major, minor.value))
    name = ctypes.c_void_p()
    try:
        lifetime = ctypes.c_uint32()
        major = lib.gss_inquire_cred(
            ctypes.byref(minor), cred, ctypes.byref(name), ctypes.byref(lifetime), None, None
        )
        if major & _GSS_ERROR_MASK:
            raise NoCredentials(_status_text(lib, major, minor.value))
        text = _Buffer()
        major = lib.gss_display_name(ctypes.byref(minor), name, ctypes.byref(text), None)
        if major & _GSS_ERROR_MASK:
            raise NoCredentials(_status_text(lib, major, minor.value))
        principal = _take(lib, text)
    finally:
        ignored = ctypes.c_uint32()
        if name.value:
            lib.gss_release_name(ctypes.byref(ignored), ctypes.byref(name))
        lib.gss_release_cred(ctypes.byref(ignored), ctypes.byref(cred))
    if lifetime.value == 0:
        # Reported as valid but with no time left: an expired ticket in the cache.
        raise NoCredentials(f"the ticket of {principal} has expired")
    return Credentials(principal, None if lifetime.value == _GSS_C_INDEFINITE else lifetime.value)


def _take(lib: ctypes.CDLL, buffer: _Buffer) -> str:
    """The text of a buffer GSSAPI allocated, which is released."""
    try:
        return ctypes.string_at(buffer.value, buffer.length).decode("utf-8", "replace")
    finally:
        lib.gss_release_buffer(ctypes.byref(ctypes.c_uint32()), ctypes.byref(buffer))


def _status_text(lib: ctypes.CDLL, major: int, minor: int) -> str:
    """GSSAPI's words for a failure: the generic major status, then the mechanism's detail."""
    parts = [_display_status(lib, major, _GSS_C_GSS_CODE)]
    if minor:
        parts.append(_display_status(lib, minor, _GSS_C_MECH_CODE))
    return ": ".join(p for p in parts if p) or f"GSSAPI status {major:#x}/{minor}"


def _display_status(lib: ctypes.CDLL, code: int, kind: int) -> str:
    messages = []
    context = ctypes.c_uint32(0)
    for _ in range(8):  # one message per call; the context says when the last one came
        text = _Buffer()
        if lib.gss_display_status(
            ctypes.byref(ctypes.c_uint32()), code, kind, None, ctypes.byref(context), ctypes.byref(text)
        ):
            break
        messages.append(_take(lib, text))
        if context.value == 0:
            break
    return ": ".join(m for m in messages if m)


def token_file() -> str | None:
    """``HADOOP_TOKEN_FILE_LOCATION`` when it names a Hadoop token storage file (a YARN
    container's, or one written with ``hdfs fetchdt``); None otherwise."""
    path = os.environ.get("HADOOP_TOKEN_FILE_LOCATION")
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return path if f.read(len(TOKEN_STORAGE_MAGIC)) == TOKEN_STORAGE_MAGIC else None
    except OSError:
        return None


__all__ = ["Credentials", "NoCredentials", "default_credentials", "gssapi_available", "token_file"]
