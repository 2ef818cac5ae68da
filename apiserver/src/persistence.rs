//! Optional durability: objects and the RV counter in an embedded redb database (`--data-dir`).
//!
//! Writes are queued to one background thread that commits them in batches, so the request path never
//! waits for an fsync. `flush()` (called on shutdown) waits until everything queued is committed.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use bytes::Bytes;
use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::Value;

use crate::store::ObjKey;

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const FILE_NAME: &str = "apiserver.redb";

enum Op {
    Put(String, Bytes, u64),
    Delete(String, u64),
    SetRv(u64),
    Flush(mpsc::SyncSender<()>),
}

/// Handle to the background writer.
pub struct Persistence {
    tx: Mutex<Option<mpsc::Sender<Op>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What was found on disk at start-up.
pub struct Loaded {
    /// The RV counter.
    pub rv: u64,
    /// (storage key, object key, object).
    pub objects: Vec<(String, ObjKey, Value)>,
}

fn db_key(res: &str, key: &ObjKey) -> String {
    format!("{res}\u{0}{}\u{0}{}", key.0, key.1)
}

impl Persistence {
    /// Open (or create) the database in `dir`, returning the writer and the stored state.
    pub fn open(dir: &Path) -> anyhow::Result<(Persistence, Loaded)> {
        std::fs::create_dir_all(dir)?;
        let db = Database::create(dir.join(FILE_NAME))?;
        {
            let w = db.begin_write()?;
            w.open_table(OBJECTS)?;
            w.open_table(META)?;
            w.commit()?;
        }
        let mut loaded = Loaded {
            rv: 1,
            objects: Vec::new(),
        };
        {
            let r = db.begin_read()?;
            let meta = r.open_table(META)?;
            if let Some(v) = meta.get("rv")? {
                loaded.rv = v.value();
            }
            let objects = r.open_table(OBJECTS)?;
            for row in objects.iter()? {
                let (k, v) = row?;
                let mut parts = k.value().splitn(3, '\u{0}');
                let (Some(res), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                let value: Value = serde_json::from_slice(v.value())?;
                let orv = value
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0);
                loaded.rv = loaded.rv.max(orv);
                loaded
                    .objects
                    .push((res.to_string(), (ns.to_string(), name.to_string()), value));
            }
        }
        let (tx, rx) = mpsc::channel::<Op>();
        let thread = std::thread::Builder::new()
            .name("apiserver-redb".into())
            .spawn(move || writer(db, rx))?;
        Ok((
            Persistence {
                tx: Mutex::new(Some(tx)),
                thread: Mutex::new(Some(thread)),
            },
            loaded,
        ))
    }

    fn send(&self, op: Op) {
        if let Some(tx) = self.tx.lock().as_ref() {
            let _ = tx.send(op);
        }
    }

    /// Record a new object state.
    pub fn put(&self, res: &str, key: &ObjKey, json: Bytes, rv: u64) {
        self.send(Op::Put(db_key(res, key), json, rv));
    }

    /// Record a deletion.
    pub fn delete(&self, res: &str, key: &ObjKey, rv: u64) {
        self.send(Op::Delete(db_key(res, key), rv));
    }

    /// Record an RV advance that has no object (compaction).
    pub fn set_rv(&self, rv: u64) {
        self.send(Op::SetRv(rv));
    }

    /// Wait until everything queued so far is committed.
    pub fn flush(&self) {
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        self.send(Op::Flush(done_tx));
        let _ = done_rx.recv();
    }
}

impl Drop for Persistence {
    fn drop(&mut self) {
        self.tx.lock().take();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

fn writer(db: Database, rx: mpsc::Receiver<Op>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < 10_000 {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        if let Err(e) = commit(&db, &batch) {
            tracing::error!("apiserver persistence: commit failed: {e}");
        }
        for op in batch {
            if let Op::Flush(done) = op {
                let _ = done.send(());
            }
        }
    }
}

fn commit(db: &Database, batch: &[Op]) -> anyhow::Result<()> {
    let w = db.begin_write()?;
    {
        let mut objects = w.open_table(OBJECTS)?;
        let mut meta = w.open_table(META)?;
        let mut rv = None;
        for op in batch {
            match op {
                Op::Put(k, v, r) => {
                    objects.insert(k.as_str(), v.as_ref())?;
                    rv = Some(*r);
                }
                Op::Delete(k, r) => {
                    objects.remove(k.as_str())?;
                    rv = Some(*r);
                }
                Op::SetRv(r) => rv = Some(*r),
                Op::Flush(_) => {}
            }
        }
        if let Some(r) = rv {
            meta.insert("rv", r)?;
        }
    }
    w.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_restores_objects_and_rv() {
        let dir = tempfile::tempdir().unwrap();
        let key = |n: &str| ("default".to_string(), n.to_string());
        {
            let (p, loaded) = Persistence::open(dir.path()).unwrap();
            assert_eq!((loaded.rv, loaded.objects.len()), (1, 0));
            let obj = |n: &str, rv: u64| {
                Bytes::from(
                    serde_json::to_vec(&serde_json::json!({"metadata": {"name": n, "resourceVersion": rv.to_string()}}))
                        .unwrap(),
                )
            };
            p.put("/configmaps", &key("a"), obj("a", 2), 2);
            p.put("/configmaps", &key("b"), obj("b", 3), 3);
            p.delete("/configmaps", &key("a"), 4);
            p.set_rv(7);
            p.flush();
        }
        let (_p, loaded) = Persistence::open(dir.path()).unwrap();
        assert_eq!(loaded.rv, 7);
        assert_eq!(loaded.objects.len(), 1);
        assert_eq!(loaded.objects[0].0, "/configmaps");
        assert_eq!(loaded.objects[0].1, key("b"));
    }
}
