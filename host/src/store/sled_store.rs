//! The embedded default backend: one sled database in the home directory.

use std::path::Path;

use sled::{Batch, Db, Tree};

use super::{Commit, NewRun, RunSummary, Store, StoreError};

/// Runs in a sled database. One process may open it at a time.
pub struct SledStore {
    db: Db,
    data: Tree,
}

fn backend(e: sled::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn key(kind: u8, run: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(run.len() + 2);
    k.push(kind);
    k.extend_from_slice(run.as_bytes());
    k.push(0);
    k
}

fn seq_key(kind: u8, run: &str, n: u64) -> Vec<u8> {
    let mut k = key(kind, run);
    k.extend_from_slice(&n.to_be_bytes());
    k
}

const SNAPSHOT: u8 = b's';
const SNAPSHOT_POS: u8 = b'q';
const BASE: u8 = b'b';
const DEFINITION: u8 = b'd';
const SUMMARY: u8 = b'r';
const EVENT: u8 = b'e';
const LOG: u8 = b'o';
const PLUGIN: u8 = b'p';

impl SledStore {
    /// Opens (or creates) the database in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(|e| match e {
                sled::Error::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock => {
                    StoreError::Held(dir.display().to_string())
                }
                other => backend(other),
            })?;
        let data = db.open_tree("weft").map_err(backend)?;
        Ok(SledStore { db, data })
    }

    fn summary_bytes(s: &RunSummary) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(s).map_err(|e| StoreError::Backend(e.to_string()))
    }

    fn scan(&self, kind: u8, run: &str, from: u64) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let prefix = key(kind, run);
        let start = seq_key(kind, run, from);
        let mut out = Vec::new();
        for kv in self.data.range(start..) {
            let (k, v) = kv.map_err(backend)?;
            if !k.starts_with(&prefix) {
                break;
            }
            let Ok(n) = <[u8; 8]>::try_from(&k[prefix.len()..]) else {
                continue;
            };
            out.push((u64::from_be_bytes(n), v.to_vec()));
        }
        Ok(out)
    }
}

impl Store for SledStore {
    fn create_run(&self, run: NewRun<'_>) -> Result<(), StoreError> {
        let id = &run.summary.run_id;
        if self.data.contains_key(key(SUMMARY, id)).map_err(backend)? {
            return Err(StoreError::RunExists(id.clone()));
        }
        let mut batch = Batch::default();
        batch.insert(key(SUMMARY, id), Self::summary_bytes(run.summary)?);
        batch.insert(key(DEFINITION, id), run.definition);
        batch.insert(key(SNAPSHOT, id), run.snapshot);
        batch.insert(key(SNAPSHOT_POS, id), &0u64.to_be_bytes());
        batch.insert(key(BASE, id), run.snapshot);
        for (digest, bytes) in run.plugins {
            let k = key(PLUGIN, digest);
            if !self.data.contains_key(&k).map_err(backend)? {
                batch.insert(k, *bytes);
            }
        }
        self.data.apply_batch(batch).map_err(backend)
    }

    fn commit(&self, c: Commit<'_>) -> Result<(), StoreError> {
        let mut batch = Batch::default();
        if let Some((index, event)) = c.event {
            batch.insert(seq_key(LOG, c.run_id, index), event);
        }
        if let Some((last, bytes)) = c.events {
            batch.insert(seq_key(EVENT, c.run_id, last), bytes);
        }
        if let Some((snapshot, covers)) = c.snapshot {
            batch.insert(key(SNAPSHOT, c.run_id), snapshot);
            batch.insert(key(SNAPSHOT_POS, c.run_id), &covers.to_be_bytes());
        }
        if let Some(summary) = c.summary {
            batch.insert(key(SUMMARY, c.run_id), Self::summary_bytes(summary)?);
        }
        self.data.apply_batch(batch).map_err(backend)
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.db.flush().map(|_| ()).map_err(backend)
    }

    fn snapshot(&self, run_id: &str) -> Result<Option<(Vec<u8>, u64)>, StoreError> {
        let Some(state) = self.data.get(key(SNAPSHOT, run_id)).map_err(backend)? else {
            return Ok(None);
        };
        let pos = self
            .data
            .get(key(SNAPSHOT_POS, run_id))
            .map_err(backend)?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_be_bytes);
        Ok(Some((state.to_vec(), pos)))
    }

    fn base(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .data
            .get(key(BASE, run_id))
            .map_err(backend)?
            .map(|v| v.to_vec()))
    }

    fn definition(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .data
            .get(key(DEFINITION, run_id))
            .map_err(backend)?
            .map(|v| v.to_vec()))
    }

    fn plugin(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .data
            .get(key(PLUGIN, digest))
            .map_err(backend)?
            .map(|v| v.to_vec()))
    }

    fn events(&self, run_id: &str, from: u64) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self
            .scan(EVENT, run_id, from)?
            .into_iter()
            .map(|(_, v)| v)
            .collect())
    }

    fn last_seq(&self, run_id: &str) -> Result<u64, StoreError> {
        let prefix = key(EVENT, run_id);
        match self.data.scan_prefix(&prefix).next_back() {
            None => Ok(0),
            Some(kv) => {
                let (k, _) = kv.map_err(backend)?;
                Ok(<[u8; 8]>::try_from(&k[prefix.len()..])
                    .map(u64::from_be_bytes)
                    .unwrap_or(0))
            }
        }
    }

    fn log(&self, run_id: &str, from: u64) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self
            .scan(LOG, run_id, from)?
            .into_iter()
            .map(|(_, v)| v)
            .collect())
    }

    fn summary(&self, run_id: &str) -> Result<Option<RunSummary>, StoreError> {
        match self.data.get(key(SUMMARY, run_id)).map_err(backend)? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| StoreError::Corrupt {
                    key: format!("summary of {run_id}"),
                    message: e.to_string(),
                }),
        }
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        let mut out = Vec::new();
        for kv in self.data.scan_prefix([SUMMARY]) {
            let (k, v) = kv.map_err(backend)?;
            let s: RunSummary = serde_json::from_slice(&v).map_err(|e| StoreError::Corrupt {
                key: String::from_utf8_lossy(&k).into_owned(),
                message: e.to_string(),
            })?;
            out.push(s);
        }
        out.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.run_id.cmp(&a.run_id))
        });
        Ok(out)
    }
}
