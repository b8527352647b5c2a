//! Iterates a sorted run of non-overlapping tables as one sequence, opening
//! each table only when the cursor reaches it.

use std::sync::Arc;

use crate::error::Result;
use crate::fs::IoClass;
use crate::iter::InternalIterator;
use crate::key;
use crate::table::{TableCache, TableIter};
use crate::version::FileMeta;

pub(crate) struct LevelIter {
    files: Vec<Arc<FileMeta>>,
    tables: Arc<TableCache>,
    index: usize,
    current: Option<TableIter>,
    class: IoClass,
    fill_cache: bool,
    status: Result<()>,
}

impl LevelIter {
    pub(crate) fn new(
        files: Vec<Arc<FileMeta>>,
        tables: Arc<TableCache>,
        class: IoClass,
        fill_cache: bool,
    ) -> Self {
        LevelIter {
            index: files.len(),
            files,
            tables,
            current: None,
            class,
            fill_cache,
            status: Ok(()),
        }
    }

    fn open(&mut self, i: usize) {
        self.index = i;
        self.current = None;
        if i >= self.files.len() || self.status.is_err() {
            return;
        }
        let f = &self.files[i];
        match self.tables.get(f.number, f.file_size, self.class) {
            Ok(t) => self.current = Some(t.iter(self.class, self.fill_cache)),
            Err(e) => self.status = Err(e),
        }
    }

    fn cur_valid(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.valid())
    }

    fn cur_failed(&mut self) -> bool {
        if let Some(Err(e)) = self.current.as_ref().map(|c| c.status()) {
            self.status = Err(e);
            self.current = None;
        }
        self.status.is_err()
    }

    fn skip_forward(&mut self) {
        while !self.cur_valid() {
            if self.cur_failed() || self.index + 1 >= self.files.len() {
                self.current = None;
                self.index = self.files.len();
                return;
            }
            self.open(self.index + 1);
            if let Some(c) = self.current.as_mut() {
                c.seek_to_first();
            }
        }
    }

    fn skip_backward(&mut self) {
        while !self.cur_valid() {
            if self.cur_failed() || self.index == 0 || self.index > self.files.len() {
                self.current = None;
                self.index = self.files.len();
                return;
            }
            self.open(self.index - 1);
            if let Some(c) = self.current.as_mut() {
                c.seek_to_last();
            }
        }
    }
}

impl InternalIterator for LevelIter {
    fn valid(&self) -> bool {
        self.status.is_ok() && self.cur_valid()
    }
    fn seek_to_first(&mut self) {
        self.open(0);
        if let Some(c) = self.current.as_mut() {
            c.seek_to_first();
        }
        self.skip_forward();
    }
    fn seek_to_last(&mut self) {
        match self.files.len().checked_sub(1) {
            Some(last) => {
                self.open(last);
                if let Some(c) = self.current.as_mut() {
                    c.seek_to_last();
                }
                self.skip_backward();
            }
            None => self.current = None,
        }
    }
    fn seek(&mut self, target: &[u8]) {
        let i = self
            .files
            .partition_point(|f| key::compare(&f.largest, target).is_lt());
        self.open(i);
        if let Some(c) = self.current.as_mut() {
            c.seek(target);
        }
        self.skip_forward();
    }
    fn next(&mut self) {
        if let Some(c) = self.current.as_mut() {
            c.next();
        }
        self.skip_forward();
    }
    fn prev(&mut self) {
        if let Some(c) = self.current.as_mut() {
            c.prev();
        }
        self.skip_backward();
    }
    fn key(&self) -> &[u8] {
        self.current.as_ref().expect("valid iterator").key()
    }
    fn value(&self) -> &[u8] {
        self.current.as_ref().expect("valid iterator").value()
    }
    fn status(&self) -> Result<()> {
        self.status.clone()?;
        match &self.current {
            Some(c) => c.status(),
            None => Ok(()),
        }
    }
}
