"""The exceptions sluicedb raises; every one is a subclass of :class:`Error`.

Where a builtin exception means the same thing, the class derives from it
too, so that code written against the builtins keeps working:
``IOError`` is an ``OSError`` and ``InvalidArgumentError`` a ``ValueError``.
"""


class Error(Exception):
    """Base class of every sluicedb error."""


class CorruptionError(Error):
    """Data on disk is damaged; the message names the file and the offset."""


class IOError(Error, OSError):  # noqa: A001 - sluicedb.IOError, on purpose
    """An I/O operation failed; the message names the operation and the file."""


class InvalidArgumentError(Error, ValueError):
    """An argument the engine cannot use (an option out of range, a key over
    the size limit, ...)."""


class ClosedError(Error):
    """The database, snapshot or iterator was closed."""


class LockedError(IOError):
    """Another process, or another open DB in this one, holds the database."""


class NotFoundError(Error):
    """No database at the path, and ``create_if_missing`` is off."""


class AlreadyExistsError(Error):
    """A database exists at the path, and ``error_if_exists`` is on."""


class PoisonedError(Error):
    """An earlier write could not be made durable: the database refuses
    writes until it is reopened."""


class ReadOnlyError(Error):
    """A write to a database opened with ``read_only=True``."""


class UnsupportedVersionError(Error):
    """The database was written by a newer format this build does not know."""


class IteratorInvalidError(Error):
    """``key()``, ``value()``, ``next()`` or ``prev()`` on a raw iterator that
    is not positioned on a pair."""


__all__ = [
    "Error",
    "CorruptionError",
    "IOError",
    "InvalidArgumentError",
    "ClosedError",
    "LockedError",
    "NotFoundError",
    "AlreadyExistsError",
    "PoisonedError",
    "ReadOnlyError",
    "UnsupportedVersionError",
    "IteratorInvalidError",
]
