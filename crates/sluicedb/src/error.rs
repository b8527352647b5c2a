//! The one error type of sluicedb.
//!
//! Operating errors (I/O, damage on disk, bad input) are values of [`Error`];
//! programmer bugs are assertions. Nothing read from disk or given by a user
//! may cause a panic.

use std::fmt;
use std::path::PathBuf;

/// Result alias used throughout sluicedb.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in sluicedb.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation failed. `op` names what was being done (`"sync"`,
    /// `"append"`, ...) and `path` the file or directory it was done to.
    Io {
        op: &'static str,
        path: PathBuf,
        kind: std::io::ErrorKind,
        message: String,
    },
    /// Data on disk is damaged: a checksum mismatch, an impossible length, a
    /// missing file that the manifest references. `offset` is the byte offset
    /// in `file` where the damage was found.
    Corruption {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    /// The caller passed something unusable (an empty directory path, an
    /// option out of range, a key over the size limit, ...).
    InvalidArgument(String),
    /// A write to the journal or manifest could not be made durable earlier,
    /// so the database refuses further writes until it is reopened. The
    /// string is the original failure.
    Poisoned(String),
    /// Another process (or another `Db` in this process) holds the lock of the
    /// database directory.
    Locked(PathBuf),
    /// The database directory holds no database and `create_if_missing` is off.
    NotFound(PathBuf),
    /// The database exists and `error_if_exists` is on.
    AlreadyExists(PathBuf),
    /// The database was written by a newer, unknown format version.
    UnsupportedVersion { file: PathBuf, version: u32 },
    /// The database has been closed.
    Closed,
    /// A write, flush, compaction or GC on a database opened with
    /// [`crate::Options::read_only`].
    ReadOnly,
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }

    pub(crate) fn corruption(
        file: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io {
                op, path, message, ..
            } => write!(f, "I/O error during {op} on {}: {message}", path.display()),
            Error::Corruption {
                file,
                offset,
                reason,
            } => write!(
                f,
                "corruption in {} at offset {offset}: {reason}",
                file.display()
            ),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Poisoned(m) => write!(
                f,
                "database refuses writes after an earlier durability failure ({m}); reopen it"
            ),
            Error::Locked(p) => write!(
                f,
                "database {} is locked by another process or handle",
                p.display()
            ),
            Error::NotFound(p) => write!(
                f,
                "no database at {} (set create_if_missing to create one)",
                p.display()
            ),
            Error::AlreadyExists(p) => write!(f, "database {} already exists", p.display()),
            Error::UnsupportedVersion { file, version } => write!(
                f,
                "{} has format version {version}, which this build does not know",
                file.display()
            ),
            Error::Closed => write!(f, "database is closed"),
            Error::ReadOnly => write!(f, "database is open read-only"),
        }
    }
}

impl std::error::Error for Error {}
