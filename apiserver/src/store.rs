//! The object store: every object of every resource, the global resourceVersion counter, the bounded event
//! history that watches read from, and list snapshots backing continue tokens.
//!
//! One `RwLock` guards objects + RV + history so that a write is atomic (new RV, new object, new event).
//! Objects are immutable `Arc<Obj>` carrying their compact JSON serialisation, made once per write; lists
//! and watches only copy those bytes. Watchers are woken through a `tokio::sync::watch` channel holding the
//! newest RV and then read history themselves, so writers never wait on slow watchers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;

use crate::persistence::Persistence;
use crate::status::ApiError;

/// An immutable stored object together with its compact JSON encoding.
#[derive(Debug)]
pub struct Obj {
    /// The object as JSON.
    pub value: Value,
    /// `value` serialised once, reused by every list and watch.
    pub json: Bytes,
    /// The object's resourceVersion.
    pub rv: u64,
}

impl Obj {
    /// Wrap a value whose `metadata.resourceVersion` is already `rv`.
    pub fn new(value: Value, rv: u64) -> Arc<Obj> {
        let json = Bytes::from(serde_json::to_vec(&value).expect("JSON values always serialise"));
        Arc::new(Obj { value, json, rv })
    }
}

/// The kind of a change, as it appears in watch events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One entry of the change history.
#[derive(Debug)]
pub struct Event {
    /// RV of the change.
    pub rv: u64,
    /// Storage key of the resource (`group/plural`).
    pub res: Arc<str>,
    /// Namespace (empty for cluster-scoped objects).
    pub ns: String,
    /// What happened.
    pub kind: EventType,
    /// New state; for deletions the last state stamped with the deletion RV.
    pub obj: Arc<Obj>,
    /// State before the change (absent for creations).
    pub prev: Option<Arc<Obj>>,
    /// The ready-made watch line `{"type":…,"object":…}\n`.
    pub line: Bytes,
    /// When the change happened (history age limit).
    pub at: Instant,
}

/// Build one watch-event line from an already serialised object.
pub fn event_line(kind: &str, json: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(json.len() + 32);
    v.extend_from_slice(b"{\"type\":\"");
    v.extend_from_slice(kind.as_bytes());
    v.extend_from_slice(b"\",\"object\":");
    v.extend_from_slice(json);
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

/// What a mutation closure decided.
#[derive(Debug)]
pub enum Change {
    /// Store this new state (metadata.resourceVersion is filled in by the store).
    Put(Value),
    /// Remove the object.
    Delete,
    /// Leave everything as it is (answer with the current object).
    Keep,
}

/// The result of a write.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// New state, the deleted object (with deletion RV), or the unchanged current object.
    pub obj: Option<Arc<Obj>>,
    /// The event emitted, or `None` for a no-op.
    pub event: Option<EventType>,
}

/// A requested RV is older than the retained history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    /// The RV the client asked for.
    pub requested: u64,
    /// The newest RV whose history is gone.
    pub oldest: u64,
}

/// Key of an object inside a collection: (namespace or "", name). Orders like the real server.
pub type ObjKey = (String, String);

/// Told of every committed change, in resourceVersion order, while the store lock is held (so
/// it sees each write before any client can see its answer). It must not call back into the
/// store; the controllers (`controllers.rs`) record what to do and do it on their own task.
pub trait Observer: Send + Sync {
    /// Object `key` of collection `res` went from `prev` to `next` (`None`: created / deleted).
    fn observe(&self, res: &str, key: &ObjKey, prev: Option<&Obj>, next: Option<&Obj>);
}

struct Inner {
    rv: u64,
    /// The newest RV of an event dropped from history: live watchers behind it missed something.
    dropped_through: u64,
    /// New watches and exact lists must start at or after this RV.
    min_start_rv: u64,
    collections: HashMap<Arc<str>, BTreeMap<ObjKey, Arc<Obj>>>,
    history: VecDeque<Arc<Event>>,
}

impl Inner {
    fn intern(&mut self, res: &str) -> Arc<str> {
        if let Some((k, _)) = self.collections.get_key_value(res) {
            return k.clone();
        }
        let k: Arc<str> = Arc::from(res);
        self.collections.insert(k.clone(), BTreeMap::new());
        k
    }
}

/// A consistent list result kept for continue tokens.
struct Snapshot {
    rv: u64,
    items: Arc<Vec<Arc<Obj>>>,
    created: Instant,
}

const MAX_SNAPSHOTS: usize = 64;

/// The store shared by all handlers.
pub struct Store {
    inner: RwLock<Inner>,
    rv_tx: tokio::sync::watch::Sender<u64>,
    snapshots: Mutex<(u64, HashMap<u64, Snapshot>)>,
    history_max_events: usize,
    history_max_age: Duration,
    persist: Option<Persistence>,
    observer: OnceLock<Arc<dyn Observer>>,
}

impl Store {
    /// A store holding `objects` (restored from disk, or empty) at resourceVersion `rv`.
    pub fn new(
        rv: u64,
        objects: Vec<(String, ObjKey, Value)>,
        history_max_events: usize,
        history_max_age: Duration,
        persist: Option<Persistence>,
    ) -> Store {
        let mut inner = Inner {
            rv,
            dropped_through: rv,
            min_start_rv: rv,
            collections: HashMap::new(),
            history: VecDeque::new(),
        };
        for (res, key, value) in objects {
            let orv = value
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok())
                .unwrap_or(rv);
            let k = inner.intern(&res);
            inner
                .collections
                .get_mut(&k)
                .expect("interned")
                .insert(key, Obj::new(value, orv));
        }
        let (rv_tx, _) = tokio::sync::watch::channel(rv);
        Store {
            inner: RwLock::new(inner),
            rv_tx,
            snapshots: Mutex::new((0, HashMap::new())),
            history_max_events: history_max_events.max(1),
            history_max_age,
            persist,
            observer: OnceLock::new(),
        }
    }

    /// Install the one observer of every later write, after telling it of every stored object
    /// as if created (under the lock: no write falls between the two). A second call is ignored.
    pub fn set_observer(&self, observer: Arc<dyn Observer>) {
        let inner = self.inner.write();
        for (res, objects) in &inner.collections {
            for (key, obj) in objects {
                observer.observe(res, key, None, Some(&**obj));
            }
        }
        let _ = self.observer.set(observer);
    }

    /// The newest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.inner.read().rv
    }

    /// A receiver that changes whenever the RV advances (watchers wait on it).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    /// One object.
    pub fn get(&self, res: &str, ns: &str, name: &str) -> Option<Arc<Obj>> {
        let inner = self.inner.read();
        inner
            .collections
            .get(res)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Current objects of a collection (optionally one namespace), ordered by key, with the current RV.
    pub fn list(&self, res: &str, ns: Option<&str>) -> (u64, Vec<Arc<Obj>>) {
        let inner = self.inner.read();
        let items = match inner.collections.get(res) {
            None => Vec::new(),
            Some(c) => collect(c, ns),
        };
        (inner.rv, items)
    }

    /// The collection as it was at `rv`, rebuilt by undoing newer history; 410 when history is gone.
    pub fn list_at(
        &self,
        res: &str,
        ns: Option<&str>,
        rv: u64,
    ) -> Result<(u64, Vec<Arc<Obj>>), Expired> {
        let inner = self.inner.read();
        if rv >= inner.rv {
            let items = inner
                .collections
                .get(res)
                .map(|c| collect(c, ns))
                .unwrap_or_default();
            return Ok((inner.rv, items));
        }
        if rv < inner.min_start_rv {
            return Err(Expired {
                requested: rv,
                oldest: inner.min_start_rv,
            });
        }
        let mut map = inner.collections.get(res).cloned().unwrap_or_default();
        for ev in inner.history.iter().rev() {
            if ev.rv <= rv {
                break;
            }
            if &*ev.res != res {
                continue;
            }
            let name = ev
                .obj
                .value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let key = (ev.ns.clone(), name.to_string());
            match (&ev.kind, &ev.prev) {
                (EventType::Added, _) | (_, None) => {
                    map.remove(&key);
                }
                (_, Some(prev)) => {
                    map.insert(key, prev.clone());
                }
            }
        }
        Ok((rv, collect(&map, ns)))
    }

    /// Atomically read-modify-write one object. `f` sees the current object and decides the change; it runs
    /// under the store lock, so no other write can interleave. Identical results are no-ops.
    pub fn mutate<F>(&self, res: &str, ns: &str, name: &str, f: F) -> Result<Outcome, ApiError>
    where
        F: FnOnce(Option<&Arc<Obj>>) -> Result<Change, ApiError>,
    {
        let mut inner = self.inner.write();
        let res_key = inner.intern(res);
        let key: ObjKey = (ns.to_string(), name.to_string());
        let current = inner
            .collections
            .get(&res_key)
            .and_then(|c| c.get(&key))
            .cloned();
        let change = f(current.as_ref())?;
        let rv = inner.rv + 1;
        let (kind, obj, prev) = match change {
            Change::Keep => {
                return Ok(Outcome {
                    obj: current,
                    event: None,
                });
            }
            Change::Put(mut value) => {
                if let Some(cur) = &current {
                    set_rv(&mut value, cur.rv);
                    if value == cur.value {
                        return Ok(Outcome {
                            obj: current,
                            event: None,
                        });
                    }
                }
                set_rv(&mut value, rv);
                let obj = Obj::new(value, rv);
                let kind = if current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                inner
                    .collections
                    .get_mut(&res_key)
                    .expect("interned")
                    .insert(key.clone(), obj.clone());
                if let Some(p) = &self.persist {
                    p.put(res, &key, obj.json.clone(), rv);
                }
                (kind, obj, current)
            }
            Change::Delete => {
                let Some(cur) = current else {
                    return Ok(Outcome {
                        obj: None,
                        event: None,
                    });
                };
                inner
                    .collections
                    .get_mut(&res_key)
                    .expect("interned")
                    .remove(&key);
                let mut value = cur.value.clone();
                set_rv(&mut value, rv);
                if let Some(p) = &self.persist {
                    p.delete(res, &key, rv);
                }
                (EventType::Deleted, Obj::new(value, rv), Some(cur))
            }
        };
        inner.rv = rv;
        if let Some(o) = self.observer.get() {
            let next = (kind != EventType::Deleted).then_some(&*obj);
            o.observe(res, &key, prev.as_deref(), next);
        }
        let line = event_line(kind.as_str(), &obj.json);
        let now = Instant::now();
        inner.history.push_back(Arc::new(Event {
            rv,
            res: res_key,
            ns: key.0,
            kind,
            obj: obj.clone(),
            prev,
            line,
            at: now,
        }));
        self.trim(&mut inner, now);
        drop(inner);
        self.rv_tx.send_replace(rv);
        Ok(Outcome {
            obj: Some(obj),
            event: Some(kind),
        })
    }

    fn trim(&self, inner: &mut Inner, now: Instant) {
        while let Some(front) = inner.history.front() {
            let too_many = inner.history.len() > self.history_max_events;
            let too_old = now.duration_since(front.at) > self.history_max_age;
            if !(too_many || too_old) {
                break;
            }
            let rv = front.rv;
            inner.history.pop_front();
            inner.dropped_through = inner.dropped_through.max(rv);
            inner.min_start_rv = inner.min_start_rv.max(rv);
        }
    }

    /// Check that a new watch may start at `rv`.
    pub fn check_start(&self, rv: u64) -> Result<(), Expired> {
        let mut inner = self.inner.write();
        let now = Instant::now();
        self.trim(&mut inner, now);
        if rv < inner.min_start_rv {
            Err(Expired {
                requested: rv,
                oldest: inner.min_start_rv,
            })
        } else {
            Ok(())
        }
    }

    /// Up to `max` events after `cursor` and the cursor to continue from (the global RV once caught up).
    pub fn events_after(&self, cursor: u64, max: usize) -> Result<(Vec<Arc<Event>>, u64), Expired> {
        let inner = self.inner.read();
        if cursor < inner.dropped_through {
            return Err(Expired {
                requested: cursor,
                oldest: inner.min_start_rv,
            });
        }
        let start = inner.history.partition_point(|e| e.rv <= cursor);
        let end = start.saturating_add(max).min(inner.history.len());
        let out: Vec<Arc<Event>> = inner.history.range(start..end).cloned().collect();
        let next = if end == inner.history.len() {
            inner.rv.max(cursor)
        } else {
            out.last().map(|e| e.rv).unwrap_or(cursor)
        };
        Ok((out, next))
    }

    /// Drop all history and list snapshots; every RV older than "now" becomes too old (410).
    /// The RV advances by one (an RV with no object, as etcd compaction revisions), so lists done after the
    /// compaction return an RV that is still valid to watch from.
    pub fn compact(&self) {
        let mut inner = self.inner.write();
        inner.rv += 1;
        let rv = inner.rv;
        if let Some(last) = inner.history.back() {
            inner.dropped_through = inner.dropped_through.max(last.rv);
        }
        inner.history.clear();
        inner.min_start_rv = rv;
        if let Some(p) = &self.persist {
            p.set_rv(rv);
        }
        drop(inner);
        self.snapshots.lock().1.clear();
        self.rv_tx.send_replace(rv);
    }

    /// Keep a list result for continue tokens; returns its id.
    pub fn save_snapshot(&self, rv: u64, items: Arc<Vec<Arc<Obj>>>) -> u64 {
        let mut s = self.snapshots.lock();
        s.0 += 1;
        let id = s.0;
        let now = Instant::now();
        let max_age = self.history_max_age;
        s.1.retain(|_, snap| now.duration_since(snap.created) <= max_age);
        if s.1.len() >= MAX_SNAPSHOTS
            && let Some(oldest) = s.1.iter().min_by_key(|(_, v)| v.created).map(|(k, _)| *k)
        {
            s.1.remove(&oldest);
        }
        s.1.insert(
            id,
            Snapshot {
                rv,
                items,
                created: now,
            },
        );
        id
    }

    /// A saved list result, if still retained.
    pub fn snapshot(&self, id: u64) -> Option<(u64, Arc<Vec<Arc<Obj>>>)> {
        let s = self.snapshots.lock();
        let snap = s.1.get(&id)?;
        if snap.created.elapsed() > self.history_max_age {
            return None;
        }
        Some((snap.rv, snap.items.clone()))
    }

    /// Forget a snapshot once its last page has been served.
    pub fn drop_snapshot(&self, id: u64) {
        self.snapshots.lock().1.remove(&id);
    }

    /// Flush pending persistence writes.
    pub fn flush(&self) {
        if let Some(p) = &self.persist {
            p.flush();
        }
    }
}

fn collect(c: &BTreeMap<ObjKey, Arc<Obj>>, ns: Option<&str>) -> Vec<Arc<Obj>> {
    match ns {
        None => c.values().cloned().collect(),
        Some(ns) => c
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
            .map(|(_, v)| v.clone())
            .collect(),
    }
}

/// Stamp `metadata.resourceVersion` with `rv` (as a string, as the wire requires).
pub fn set_rv(value: &mut Value, rv: u64) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store(max: usize) -> Store {
        Store::new(1, vec![], max, Duration::from_secs(900), None)
    }

    fn put(s: &Store, name: &str, data: &str) -> Outcome {
        s.mutate("/configmaps", "default", name, |_| {
            Ok(Change::Put(
                json!({"metadata": {"name": name, "namespace": "default"}, "data": {"v": data}}),
            ))
        })
        .unwrap()
    }

    #[test]
    fn rv_is_global_monotonic_and_noop_writes_do_not_bump() {
        let s = store(100);
        assert_eq!(put(&s, "a", "1").obj.unwrap().rv, 2);
        assert_eq!(put(&s, "b", "1").obj.unwrap().rv, 3);
        let same = put(&s, "a", "1");
        assert!(same.event.is_none());
        assert_eq!(same.obj.unwrap().rv, 2);
        assert_eq!(s.current_rv(), 3);
        let del = s
            .mutate("/configmaps", "default", "a", |_| Ok(Change::Delete))
            .unwrap();
        assert_eq!(del.event, Some(EventType::Deleted));
        assert_eq!(del.obj.unwrap().value["metadata"]["resourceVersion"], "4");
    }

    #[test]
    fn list_at_rebuilds_past_state_and_expires() {
        let s = store(100);
        put(&s, "a", "1"); // rv 2
        put(&s, "b", "1"); // rv 3
        put(&s, "a", "2"); // rv 4
        let (rv, items) = s.list_at("/configmaps", Some("default"), 3).unwrap();
        assert_eq!(rv, 3);
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].value["data"]["v"], "1");
        assert_eq!(s.list_at("/configmaps", None, 1).unwrap().1.len(), 0);
        s.compact();
        assert!(s.list_at("/configmaps", None, 3).is_err());
        assert!(s.check_start(4).is_err());
        assert!(s.check_start(s.current_rv()).is_ok());
    }

    #[test]
    fn history_is_bounded_and_live_cursor_survives_compaction() {
        let s = store(2);
        for i in 0..5 {
            put(&s, &format!("n{i}"), "x");
        } // rv 2..=6, history keeps 5,6
        assert!(s.events_after(3, 10).is_err());
        let (evs, next) = s.events_after(4, 10).unwrap();
        assert_eq!(evs.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![5, 6]);
        assert_eq!(next, 6);
        s.compact();
        // a watcher that had seen everything keeps going; a new watch from 6 is too old
        assert!(s.events_after(6, 10).is_ok());
        assert!(s.check_start(6).is_err());
    }
}
