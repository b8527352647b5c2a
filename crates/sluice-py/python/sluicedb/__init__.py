"""sluicedb: a persistent, embeddable key-value storage engine.

The API follows plyvel's, with dict sugar::

    import sluicedb

    with sluicedb.DB("/tmp/example-db") as db:
        db[b"hello"] = b"world"
        for key, value in db.iterator(prefix=b"he"):
            print(key, value)

Keys and values are ``bytes``; a ``str`` is accepted and stored as its
UTF-8 encoding (so ``db["a"]`` and ``db[b"a"]`` are the same key). Values
are always returned as ``bytes``.
"""

from ._errors import (
    AlreadyExistsError,
    ClosedError,
    CorruptionError,
    Error,
    InvalidArgumentError,
    IOError,
    IteratorInvalidError,
    LockedError,
    NotFoundError,
    PoisonedError,
    ReadOnlyError,
    UnsupportedVersionError,
)
from ._sluicedb import DB, Iterator, PRESETS, RawIterator, Snapshot, WriteBatch

__all__ = [
    "DB",
    "Iterator",
    "PRESETS",
    "RawIterator",
    "Snapshot",
    "WriteBatch",
    "AlreadyExistsError",
    "ClosedError",
    "CorruptionError",
    "Error",
    "InvalidArgumentError",
    "IOError",
    "IteratorInvalidError",
    "LockedError",
    "NotFoundError",
    "PoisonedError",
    "ReadOnlyError",
    "UnsupportedVersionError",
]
