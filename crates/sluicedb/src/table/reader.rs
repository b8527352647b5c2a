//! Opens a table file, answers point lookups and iterates it.

use std::path::PathBuf;
use std::sync::Arc;

use super::block::{Block, BlockIter};
use super::bloom;
use super::builder::TableProperties;
use super::cache::BlockCache;
use super::format::{verify_block, BlockHandle, Footer, FooterKind, BLOCK_TRAILER_LEN, FOOTER_LEN};
use crate::error::{Error, Result};
use crate::fs::{CountedReader, CountingFs, IoClass};
use crate::iter::InternalIterator;
use crate::key;

/// An open table. Index, filter and properties stay in memory; data blocks
/// go through the block cache.
pub(crate) struct Table {
    number: u64,
    path: Arc<PathBuf>,
    file: CountedReader,
    file_size: u64,
    index: Arc<Block>,
    filter: Vec<u8>,
    properties: TableProperties,
    cache: Arc<BlockCache>,
}

impl Table {
    pub(crate) fn open(
        fs: &CountingFs,
        path: PathBuf,
        number: u64,
        file_size: u64,
        cache: Arc<BlockCache>,
    ) -> Result<Table> {
        let (file, path, footer) = open_footer(fs, path, file_size, FooterKind::TABLE, 0)?;
        let read = |h: BlockHandle| read_raw(&file, &path, file_size, h, IoClass::UserRead);
        let index = Arc::new(Block::new(
            read(footer.index)?,
            path.clone(),
            footer.index.offset,
        )?);
        let filter = if footer.filter.size > 0 {
            read(footer.filter)?
        } else {
            Vec::new()
        };
        let properties = TableProperties::decode(&read(footer.properties)?).ok_or_else(|| {
            Error::corruption(
                path.as_path(),
                footer.properties.offset,
                "bad properties block",
            )
        })?;
        Ok(Table {
            number,
            path,
            file,
            file_size,
            index,
            filter,
            properties,
            cache,
        })
    }

    fn read_raw(&self, h: BlockHandle, class: IoClass) -> Result<Vec<u8>> {
        read_raw(&self.file, &self.path, self.file_size, h, class)
    }

    fn read_block(&self, h: BlockHandle, class: IoClass, fill_cache: bool) -> Result<Arc<Block>> {
        self.cache
            .get_or_read(self.number, h.offset, fill_cache, || {
                let data = self.read_raw(h, class)?;
                Ok(Arc::new(Block::new(data, self.path.clone(), h.offset)?))
            })
    }

    /// The first entry at or after `seek` (an internal key) if it has user
    /// key `user_key`; the bloom filter answers most misses without I/O.
    pub(crate) fn get(
        &self,
        seek: &[u8],
        user_key: &[u8],
        hash: u64,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if !self.filter.is_empty() && !bloom::may_contain(&self.filter, hash) {
            return Ok(None);
        }
        let mut index = self.index.iter();
        index.seek(seek);
        index.status()?;
        if !index.valid() {
            return Ok(None);
        }
        let h = self.decode_handle(index.value(), index.key())?;
        let block = self.read_block(h, IoClass::UserRead, true)?;
        let mut it = block.iter();
        it.seek(seek);
        it.status()?;
        if it.valid() && key::user_key(it.key()) == user_key {
            return Ok(Some((it.key().to_vec(), it.value().to_vec())));
        }
        Ok(None)
    }

    fn decode_handle(&self, v: &[u8], _k: &[u8]) -> Result<BlockHandle> {
        BlockHandle::decode(v).ok_or_else(|| {
            Error::corruption(self.path.as_path(), 0, "bad block handle in the index")
        })
    }

    /// An iterator reading blocks for `class`; `fill_cache` off keeps
    /// compactions from flushing the cache.
    pub(crate) fn iter(self: &Arc<Self>, class: IoClass, fill_cache: bool) -> TableIter {
        TableIter {
            table: self.clone(),
            index: self.index.iter(),
            data: None,
            data_handle: None,
            class,
            fill_cache,
            status: Ok(()),
        }
    }

    /// Reads every block and checks every checksum and entry (for `verify`).
    pub(crate) fn verify(self: &Arc<Self>) -> Result<u64> {
        let mut it = self.iter(IoClass::UserRead, false);
        it.seek_to_first();
        let mut n = 0;
        let mut last: Option<Vec<u8>> = None;
        while it.valid() {
            if let Some(l) = &last {
                if key::compare(l, it.key()).is_ge() {
                    return Err(Error::corruption(
                        self.path.as_path(),
                        0,
                        "keys out of order",
                    ));
                }
            }
            last = Some(it.key().to_vec());
            n += 1;
            it.next();
        }
        it.status()?;
        if n != self.properties.entries {
            return Err(Error::corruption(
                self.path.as_path(),
                0,
                format!(
                    "table holds {n} entries, its properties say {}",
                    self.properties.entries
                ),
            ));
        }
        Ok(n)
    }
}

/// Opens a table-shaped file (a key table, or a value table with its
/// `header_len` bytes of header): checks its length against the manifest's
/// and reads and checks its footer.
pub(crate) fn open_footer(
    fs: &CountingFs,
    path: PathBuf,
    file_size: u64,
    kind: FooterKind,
    header_len: usize,
) -> Result<(CountedReader, Arc<PathBuf>, Footer)> {
    let file = fs.open(&path)?;
    let path = Arc::new(path);
    let what = kind.what;
    if file.len() != file_size {
        return Err(Error::corruption(
            path.as_path(),
            file.len(),
            format!(
                "{what} is {} bytes, the manifest says {file_size}",
                file.len()
            ),
        ));
    }
    if file_size < (header_len + FOOTER_LEN) as u64 {
        return Err(Error::corruption(
            path.as_path(),
            0,
            format!("{what} shorter than its header and footer"),
        ));
    }
    let footer_at = file_size - FOOTER_LEN as u64;
    let raw = file.read_at(footer_at, FOOTER_LEN, IoClass::UserRead)?;
    let footer = Footer::decode_as(&raw, &path, footer_at, kind)?;
    Ok((file, path, footer))
}

/// Reads and checks a block (without the cache).
pub(crate) fn read_raw(
    file: &CountedReader,
    path: &Arc<PathBuf>,
    file_size: u64,
    h: BlockHandle,
    class: IoClass,
) -> Result<Vec<u8>> {
    let limit = file_size - FOOTER_LEN as u64;
    let end = h
        .offset
        .checked_add(h.size)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN as u64));
    if end.is_none_or(|e| e > limit) {
        return Err(Error::corruption(
            path.as_path(),
            h.offset,
            format!("block handle ({}, {}) outside the table", h.offset, h.size),
        ));
    }
    let raw = file.read_at(h.offset, h.size as usize + BLOCK_TRAILER_LEN, class)?;
    verify_block(raw, path, h.offset)
}

/// Two-level iterator: the index block selects data blocks.
pub(crate) struct TableIter {
    table: Arc<Table>,
    index: BlockIter,
    data: Option<BlockIter>,
    data_handle: Option<BlockHandle>,
    class: IoClass,
    fill_cache: bool,
    status: Result<()>,
}

impl TableIter {
    fn load_block(&mut self) {
        if !self.index.valid() {
            self.data = None;
            self.data_handle = None;
            return;
        }
        let h = match self
            .table
            .decode_handle(self.index.value(), self.index.key())
        {
            Ok(h) => h,
            Err(e) => {
                self.fail(e);
                return;
            }
        };
        if self.data.is_some() && self.data_handle == Some(h) {
            return;
        }
        match self.table.read_block(h, self.class, self.fill_cache) {
            Ok(b) => {
                self.data = Some(b.iter());
                self.data_handle = Some(h);
            }
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: Error) {
        if self.status.is_ok() {
            self.status = Err(e);
        }
        self.data = None;
        self.data_handle = None;
    }

    fn data_valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn data_failed(&mut self) -> bool {
        if let Some(Err(e)) = self.data.as_ref().map(|d| d.status()) {
            self.fail(e);
            return true;
        }
        self.status.is_err()
    }

    fn skip_empty_forward(&mut self) {
        while !self.data_valid() {
            if self.data_failed() || !self.index.valid() {
                self.data = None;
                return;
            }
            self.index.next();
            self.load_block();
            if let Some(d) = self.data.as_mut() {
                d.seek_to_first();
            }
        }
    }

    fn skip_empty_backward(&mut self) {
        while !self.data_valid() {
            if self.data_failed() || !self.index.valid() {
                self.data = None;
                return;
            }
            self.index.prev();
            self.load_block();
            if let Some(d) = self.data.as_mut() {
                d.seek_to_last();
            }
        }
    }
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.status.is_ok() && self.data_valid()
    }
    fn seek_to_first(&mut self) {
        self.index.seek_to_first();
        self.load_block();
        if let Some(d) = self.data.as_mut() {
            d.seek_to_first();
        }
        self.skip_empty_forward();
    }
    fn seek_to_last(&mut self) {
        self.index.seek_to_last();
        self.load_block();
        if let Some(d) = self.data.as_mut() {
            d.seek_to_last();
        }
        self.skip_empty_backward();
    }
    fn seek(&mut self, target: &[u8]) {
        self.index.seek(target);
        self.load_block();
        if let Some(d) = self.data.as_mut() {
            d.seek(target);
        }
        self.skip_empty_forward();
    }
    fn next(&mut self) {
        if let Some(d) = self.data.as_mut() {
            d.next();
        }
        self.skip_empty_forward();
    }
    fn prev(&mut self) {
        if let Some(d) = self.data.as_mut() {
            d.prev();
        }
        self.skip_empty_backward();
    }
    fn key(&self) -> &[u8] {
        self.data.as_ref().expect("valid iterator").key()
    }
    fn value(&self) -> &[u8] {
        self.data.as_ref().expect("valid iterator").value()
    }
    fn status(&self) -> Result<()> {
        self.status.clone()?;
        self.index.status()?;
        match &self.data {
            Some(d) => d.status(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{Fs, MemFs};
    use crate::table::builder::{TableBuilder, TableOptions};
    use std::path::Path;

    const OPTS: TableOptions = TableOptions {
        block_size_bytes: 256,
        restart_interval: 4,
        bloom_bits_per_key: 10,
    };

    fn build(mem: &MemFs, n: usize) -> (CountingFs, u64, Vec<Vec<u8>>) {
        let fs = CountingFs::new(Arc::new(mem.clone()));
        mem.create_dir_all(Path::new("/db")).unwrap();
        let w = fs
            .create(Path::new("/db/000001.sst"), IoClass::Flush)
            .unwrap();
        let mut b = TableBuilder::new(w, OPTS);
        let mut keys = vec![];
        for i in 0..n {
            let k = key::encode(format!("k{i:05}").as_bytes(), 100 + i as u64, 1);
            b.add(&k, format!("value{i}").as_bytes()).unwrap();
            keys.push(k);
        }
        let built = b.finish().unwrap();
        assert_eq!(built.properties.entries, n as u64);
        (fs, built.file_size, keys)
    }

    fn open(fs: &CountingFs, size: u64) -> Result<Arc<Table>> {
        Table::open(
            fs,
            "/db/000001.sst".into(),
            1,
            size,
            Arc::new(BlockCache::new(1 << 20)),
        )
        .map(Arc::new)
    }

    #[test]
    fn get_and_iterate() {
        let mem = MemFs::new();
        let (fs, size, keys) = build(&mem, 500);
        let t = open(&fs, size).unwrap();
        assert!(t.properties.data_blocks > 10);
        for (i, k) in keys.iter().enumerate() {
            let uk = key::user_key(k);
            let seek = key::encode(uk, key::MAX_SEQUENCE, key::KIND_SEEK);
            let got = t.get(&seek, uk, bloom::key_hash(uk)).unwrap().unwrap();
            assert_eq!(got.1, format!("value{i}").into_bytes());
        }
        let miss = b"k00010x";
        let seek = key::encode(miss, key::MAX_SEQUENCE, key::KIND_SEEK);
        assert_eq!(t.get(&seek, miss, bloom::key_hash(miss)).unwrap(), None);
        let mut it = t.iter(IoClass::UserRead, true);
        it.seek_to_last();
        for k in keys.iter().rev() {
            assert_eq!(it.key(), k.as_slice());
            it.prev();
        }
        assert!(!it.valid());
        it.seek(&keys[123]);
        for k in &keys[123..] {
            assert_eq!(it.key(), k.as_slice());
            it.next();
        }
        assert!(!it.valid() && it.status().is_ok());
        assert_eq!(t.verify().unwrap(), 500);
    }

    #[test]
    fn every_bit_flip_is_detected_or_harmless() {
        let mem = MemFs::new();
        let (fs, size, keys) = build(&mem, 60);
        let p = Path::new("/db/000001.sst");
        let orig = mem.contents(p).unwrap();
        for i in 0..orig.len() {
            let mut d = orig.clone();
            d[i] ^= 1 << (i % 8);
            mem.set_contents(p, d);
            match open(&fs, size) {
                Err(e) => assert!(
                    e.is_corruption() || matches!(e, Error::UnsupportedVersion { .. }),
                    "{e}"
                ),
                Ok(t) => {
                    // Whatever is returned must be the right value or an error.
                    for (j, k) in keys.iter().enumerate() {
                        let uk = key::user_key(k);
                        let seek = key::encode(uk, key::MAX_SEQUENCE, key::KIND_SEEK);
                        if let Ok(Some((_, v))) = t.get(&seek, uk, bloom::key_hash(uk)) {
                            assert_eq!(v, format!("value{j}").into_bytes());
                        }
                    }
                    if t.verify().is_ok() {
                        // A flip that verify accepts must be in a harmless
                        // spot; then every key must read back.
                        for k in &keys {
                            let uk = key::user_key(k);
                            let seek = key::encode(uk, key::MAX_SEQUENCE, key::KIND_SEEK);
                            let r = t.get(&seek, uk, bloom::key_hash(uk)).unwrap();
                            assert!(r.is_some(), "flip at {i} lost a key but verified");
                        }
                    }
                }
            }
        }
    }
}
