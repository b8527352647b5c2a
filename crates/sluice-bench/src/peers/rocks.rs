//! RocksDB (feature `rocksdb`): leveled compaction with values inline, or
//! the integrated BlobDB (`enable_blob_files`, `min_blob_size`, blob GC
//! on).
//!
//! Its write amplification is taken from `/proc/self/io` only: RocksDB's
//! own tickers count flush, compaction and blob bytes in different places.

use std::path::Path;

use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, Direction, IteratorMode, Options,
    WaitForCompactOptions, WriteOptions, DB,
};

use crate::engine::{self, Engine, Result};
use crate::BenchConfig;

pub struct RocksEngine {
    db: DB,
    sync: bool,
    blob: bool,
}

impl RocksEngine {
    pub fn open(blob: bool, cfg: &BenchConfig, dir: &Path) -> Result<RocksEngine> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_write_buffer_size(engine::WRITE_BUFFER_BYTES);
        opts.set_compression_type(DBCompressionType::None);
        opts.set_max_background_jobs(engine::BACKGROUND_THREADS as i32);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&Cache::new_lru_cache(engine::BLOCK_CACHE_BYTES));
        table.set_bloom_filter(f64::from(engine::BLOOM_BITS_PER_KEY), false);
        opts.set_block_based_table_factory(&table);
        if blob {
            opts.set_enable_blob_files(true);
            opts.set_min_blob_size(cfg.peer_separation_threshold() as u64);
            opts.set_blob_compression_type(DBCompressionType::None);
            opts.set_enable_blob_gc(true);
        }
        Ok(RocksEngine {
            db: DB::open(&opts, dir)?,
            sync: cfg.sync,
            blob,
        })
    }
}

impl Engine for RocksEngine {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(self.sync);
        Ok(self.db.put_opt(key, value, &wo)?)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(self.sync);
        Ok(self.db.delete_opt(key, &wo)?)
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get_pinned(key)?.map(|v| v.len()))
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<(u64, u64)> {
        let (mut n, mut bytes) = (0u64, 0u64);
        let it = self
            .db
            .iterator(IteratorMode::From(start, Direction::Forward));
        for pair in it.take(limit) {
            let (k, v) = pair?;
            n += 1;
            bytes += (k.len() + v.len()) as u64;
        }
        Ok((n, bytes))
    }

    fn settle(&self) -> Result<()> {
        self.db.flush()?;
        Ok(self
            .db
            .wait_for_compact(&WaitForCompactOptions::default())?)
    }

    fn index_memory_bytes(&self) -> Option<u64> {
        // Index and filter blocks live in the table readers (not the block
        // cache) with `cache_index_and_filter_blocks` off, the default.
        self.db
            .property_int_value("rocksdb.estimate-table-readers-mem")
            .ok()
            .flatten()
    }

    fn report(&self) -> String {
        let prop = |name: &str| {
            self.db
                .property_value(name)
                .ok()
                .flatten()
                .unwrap_or_else(|| "?".into())
        };
        let mut s = format!(
            "rocksdb{}: sst bytes {}, live data estimate {}",
            if self.blob { " (blob)" } else { "" },
            prop("rocksdb.total-sst-files-size"),
            prop("rocksdb.estimate-live-data-size"),
        );
        if self.blob {
            s += &format!(
                ", blob bytes {}, live blob bytes {}",
                prop("rocksdb.total-blob-file-size"),
                prop("rocksdb.live-blob-file-size")
            );
        }
        s
    }
}
