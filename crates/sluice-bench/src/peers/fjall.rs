//! fjall v3 (feature `fjall`): one keyspace, values inline or separated.
//!
//! fjall separates values of at least its threshold (default 1 KiB) into
//! blob files; the benchmark lowers it to the peers' threshold so that the
//! 992-byte values of the update workload really are separated, and checks
//! that the keyspace is a blob tree.

use std::path::Path;

use fjall::config::BloomConstructionPolicy;
use fjall::config::{CompressionPolicy, FilterPolicy, FilterPolicyEntry};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions, PersistMode};

use crate::engine::{self, Engine, Result};
use crate::BenchConfig;

pub struct FjallEngine {
    db: Database,
    tree: Keyspace,
    sync: bool,
}

impl FjallEngine {
    pub fn open(separate: bool, cfg: &BenchConfig, dir: &Path) -> Result<FjallEngine> {
        let db = Database::builder(dir)
            .cache_size(engine::BLOCK_CACHE_BYTES as u64)
            .worker_threads(engine::BACKGROUND_THREADS)
            .open()?;
        let threshold = cfg.peer_separation_threshold() as u32;
        let tree = db.keyspace("bench", || {
            let opts = KeyspaceCreateOptions::default()
                .max_memtable_size(engine::WRITE_BUFFER_BYTES as u64)
                .data_block_compression_policy(CompressionPolicy::disabled())
                .filter_policy(FilterPolicy::all(FilterPolicyEntry::Bloom(
                    BloomConstructionPolicy::BitsPerKey(engine::BLOOM_BITS_PER_KEY as f32),
                )));
            if separate {
                opts.with_kv_separation(Some(
                    KvSeparationOptions::default().separation_threshold(threshold),
                ))
            } else {
                opts
            }
        })?;
        if tree.is_kv_separated() != separate {
            return Err(format!(
                "fjall keyspace in {} is {}separated; clear the directory",
                dir.display(),
                if separate { "not " } else { "" }
            )
            .into());
        }
        Ok(FjallEngine {
            db,
            tree,
            sync: cfg.sync,
        })
    }
}

impl Engine for FjallEngine {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.tree.insert(key, value)?;
        if self.sync {
            self.db.persist(PersistMode::SyncAll)?;
        }
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.tree.remove(key)?;
        if self.sync {
            self.db.persist(PersistMode::SyncAll)?;
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.tree.get(key)?.map(|v| v.len()))
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<(u64, u64)> {
        let (mut n, mut bytes) = (0u64, 0u64);
        for guard in self.tree.range(start..).take(limit) {
            let (k, v) = guard.into_inner()?;
            n += 1;
            bytes += (k.len() + v.len()) as u64;
        }
        Ok((n, bytes))
    }

    fn settle(&self) -> Result<()> {
        // fjall has no call that waits for compactions; a flush it has.
        Ok(self.tree.rotate_memtable_and_wait()?)
    }

    fn report(&self) -> String {
        format!(
            "fjall: {} tables ({} in L0), {} blob files, {} fragmented blob bytes, disk space {} bytes",
            self.tree.table_count(),
            self.tree.l0_table_count(),
            self.tree.blob_file_count(),
            self.tree.fragmented_blob_bytes(),
            self.db.disk_space().unwrap_or(0),
        )
    }
}
