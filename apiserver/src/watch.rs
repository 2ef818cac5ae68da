//! Watch streams: newline-delimited JSON events read from the store's history.
//!
//! Each watch runs as one task that copies pre-serialised event lines into a chunked HTTP body. When several
//! events are pending they go out in one chunk (still one JSON object per line), which is what lets a
//! single watcher keep up with bursts of writes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::faults::Faults;
use crate::registry::ResourceType;
use crate::selectors::Selectors;
use crate::status::ApiError;
use crate::store::{Event, EventType, Expired, Obj, Store, event_line, set_rv};

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// RV absent or "0": synthetic ADDED events for the current state, then changes.
    CurrentState,
    /// RV X: every change after X, no synthetic events.
    After(u64),
}

/// A validated watch request.
pub struct WatchSpec {
    /// Resource being watched.
    pub rt: Arc<ResourceType>,
    /// Namespace filter (`None` = all namespaces or cluster-scoped).
    pub ns: Option<String>,
    /// Label/field selectors.
    pub selectors: Selectors,
    /// Start point.
    pub start: WatchStart,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `sendInitialEvents=true` (streaming list).
    pub send_initial: bool,
    /// When the server ends the stream.
    pub timeout: Duration,
    /// Period of progress bookmarks.
    pub bookmark_interval: Duration,
    /// Send one-row `meta.k8s.io/v1` Tables instead of objects (`kubectl get -w`).
    pub table: bool,
}

/// Lifecycle of one watch stream; the task moves strictly downwards through these phases
/// (Initial → InitialEnd → Live → Failing/Dropping/Done), skipping the ones that do not apply.
enum Phase {
    /// Sending synthetic ADDED events for the state captured at the start RV.
    Initial(std::vec::IntoIter<Arc<Obj>>),
    /// Sending the `k8s.io/initial-events-end` bookmark (streaming lists only).
    InitialEnd,
    /// Following the history from the cursor, with periodic bookmarks.
    Live,
    /// Sending one final ERROR event (410 Expired), then a clean end.
    Failing(Bytes),
    /// Cutting the connection without a clean end (fault injection).
    Dropping,
    /// Clean end of stream.
    Done,
}

const BATCH_EVENTS: usize = 2048;
const CHUNK_BYTES: usize = 256 * 1024;

fn expired_line(e: Expired) -> Bytes {
    let status = ApiError::expired(format!(
        "too old resource version: {} ({})",
        e.requested, e.oldest
    ))
    .to_status();
    event_line("ERROR", &serde_json::to_vec(&status).unwrap_or_default())
}

fn bookmark_line(rt: &ResourceType, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": meta});
    event_line("BOOKMARK", &serde_json::to_vec(&obj).unwrap_or_default())
}

/// Start a watch and return its streaming body. Errors that happen after validation are ERROR events.
pub fn start(store: Arc<Store>, faults: &Faults, spec: WatchSpec) -> Body {
    if faults.take_short() {
        return Body::empty();
    }
    let drop_stream = faults.take_drop();
    let end_rx = faults.end_receiver();
    let pause_rx = faults.pause_receiver();
    let mut bookmark_rx = faults.bookmark_receiver();
    bookmark_rx.borrow_and_update();
    let rv_rx = store.subscribe();
    let (phase, cursor) = match spec.start {
        WatchStart::After(rv) if !spec.send_initial && rv > store.current_rv() => {
            // Only a server restarted without persistence hands out RVs lower than a client has seen. The real
            // server would time out ("Too large resource version"); a 410 makes clients relist right away
            // instead of silently skipping every event up to their RV.
            let status = ApiError::expired(format!(
                "too large resource version: {rv}, current: {} (the server restarted without persistence; relist)",
                store.current_rv()
            ))
            .to_status();
            let line = event_line("ERROR", &serde_json::to_vec(&status).unwrap_or_default());
            (Phase::Failing(line), rv)
        }
        WatchStart::After(rv) if !spec.send_initial => match store.check_start(rv) {
            Ok(()) => (Phase::Live, rv),
            Err(e) => (Phase::Failing(expired_line(e)), rv),
        },
        _ => {
            let (rv, items) = store.list(&spec.rt.storage_key(), spec.ns.as_deref());
            let items: Vec<Arc<Obj>> = if spec.selectors.is_empty() {
                items
            } else {
                items
                    .into_iter()
                    .filter(|o| spec.selectors.matches(&o.value))
                    .collect()
            };
            (Phase::Initial(items.into_iter()), rv)
        }
    };
    let phase = if drop_stream && matches!(phase, Phase::Live) {
        Phase::Dropping
    } else {
        phase
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let signals = Signals {
        rv: rv_rx,
        end: end_rx,
        pause: pause_rx,
        bookmark: bookmark_rx,
    };
    tokio::spawn(run(store, spec, phase, cursor, drop_stream, signals, tx));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Body::from_stream(stream)
}

/// Render one history event for this watch, applying namespace and selector filters and transitions.
fn render(spec: &WatchSpec, res: &str, ev: &Event) -> Option<Bytes> {
    if &*ev.res != res {
        return None;
    }
    if let Some(ns) = &spec.ns
        && ev.ns != *ns
    {
        return None;
    }
    if spec.selectors.is_empty() {
        return Some(ev.line.clone());
    }
    let now = spec.selectors.matches(&ev.obj.value);
    match ev.kind {
        EventType::Added | EventType::Deleted => now.then(|| ev.line.clone()),
        EventType::Modified => {
            let before = ev
                .prev
                .as_ref()
                .is_some_and(|p| spec.selectors.matches(&p.value));
            match (before, now) {
                (true, true) => Some(ev.line.clone()),
                (false, true) => Some(event_line("ADDED", &ev.obj.json)),
                (true, false) => {
                    let mut last = ev.prev.as_ref().expect("matched").value.clone();
                    set_rv(&mut last, ev.rv);
                    Some(event_line(
                        "DELETED",
                        &serde_json::to_vec(&last).unwrap_or_default(),
                    ))
                }
                (false, false) => None,
            }
        }
    }
}

/// Convert an object event line into a one-row Table event (column definitions only in the first one).
fn as_table(spec: &WatchSpec, line: Bytes, headers: &mut bool) -> Bytes {
    if !spec.table {
        return line;
    }
    let Ok(mut ev) = serde_json::from_slice::<serde_json::Value>(&line) else {
        return line;
    };
    let obj = ev["object"].take();
    let meta = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""))});
    ev["object"] = crate::table::table(&spec.rt, meta, std::iter::once(&obj), *headers);
    *headers = false;
    let mut out = serde_json::to_vec(&ev).unwrap_or_default();
    out.push(b'\n');
    Bytes::from(out)
}

/// What wakes a watch task besides its deadline: the store's new writes and the fault
/// injector's controls, subscribed to before the task starts so nothing is missed.
struct Signals {
    /// The store's current resourceVersion: changes on every write.
    rv: tokio::sync::watch::Receiver<u64>,
    /// Changes when every open watch is to end cleanly.
    end: tokio::sync::watch::Receiver<u64>,
    /// True while watch streams are held back.
    pause: tokio::sync::watch::Receiver<bool>,
    /// Changes when a progress bookmark is to be sent at once.
    bookmark: tokio::sync::watch::Receiver<u64>,
}

/// The task behind one watch response: moves through the phases (see [`Phase`]) until the
/// client goes, the watch times out or the server ends every watch.
async fn run(
    store: Arc<Store>,
    spec: WatchSpec,
    mut phase: Phase,
    cursor: u64,
    drop_stream: bool,
    signals: Signals,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let Signals {
        rv: mut rv_rx,
        end: mut end_rx,
        pause: mut pause_rx,
        bookmark: mut bookmark_rx,
    } = signals;
    let deadline = Instant::now() + spec.timeout;
    let mut next_bookmark = Instant::now() + spec.bookmark_interval;
    end_rx.borrow_and_update();
    let mut s = Stream {
        res: spec.rt.storage_key(),
        store,
        spec,
        cursor,
        headers: true,
        sent_any: false,
        tx,
    };
    // After the initial phases the stream is live; a fault may cut it there instead.
    let live = || {
        if drop_stream {
            Phase::Dropping
        } else {
            Phase::Live
        }
    };
    loop {
        phase = match phase {
            Phase::Initial(mut items) => {
                let chunk = s.initial_chunk(&mut items);
                if !chunk.is_empty() {
                    if !s.send(chunk.freeze()).await {
                        return;
                    }
                    Phase::Initial(items)
                } else if s.spec.send_initial {
                    Phase::InitialEnd
                } else {
                    live()
                }
            }
            Phase::InitialEnd => {
                if !s.send(bookmark_line(&s.spec.rt, s.cursor, true)).await {
                    return;
                }
                live()
            }
            Phase::Live if *pause_rx.borrow() => {
                tokio::select! {
                    _ = pause_rx.wait_for(|p| !*p) => Phase::Live,
                    _ = end_rx.changed() => Phase::Done,
                    _ = s.tx.closed() => return,
                }
            }
            Phase::Live => {
                rv_rx.borrow_and_update();
                match s.render_after(BATCH_EVENTS) {
                    Err(e) => Phase::Failing(expired_line(e)),
                    Ok((lines, read)) => {
                        if !lines.is_empty() && !s.send(lines.freeze()).await {
                            return;
                        }
                        if read == BATCH_EVENTS {
                            // More history is waiting: no need to wait for a write.
                            Phase::Live
                        } else {
                            let bookmark = tokio::select! {
                                _ = rv_rx.changed() => false,
                                _ = tokio::time::sleep_until(next_bookmark) => true,
                                _ = bookmark_rx.changed() => true,
                                _ = tokio::time::sleep_until(deadline) => return,
                                _ = end_rx.changed() => return,
                                _ = s.tx.closed() => return,
                            };
                            if bookmark {
                                next_bookmark = Instant::now() + s.spec.bookmark_interval;
                                if s.spec.bookmarks && !s.bookmark().await {
                                    return;
                                }
                            }
                            Phase::Live
                        }
                    }
                }
            }
            Phase::Failing(line) => {
                let _ = s.tx.send(Ok(line)).await;
                Phase::Done
            }
            Phase::Dropping => {
                if !s.sent_any {
                    // Let the response head reach the client first so the cut is "mid-stream".
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let _ =
                    s.tx.send(Err(std::io::Error::other(
                        "connection dropped by fault injection",
                    )))
                    .await;
                return;
            }
            Phase::Done => return,
        };
        if Instant::now() >= deadline || end_rx.has_changed().unwrap_or(true) {
            if let Phase::Failing(line) = phase {
                let _ = s.tx.send(Ok(line)).await;
            }
            return;
        }
    }
}

/// One watch stream's sending side: where it stands in the store's history and what it has sent.
struct Stream {
    store: Arc<Store>,
    spec: WatchSpec,
    /// The resource's storage key, which history events are matched against.
    res: String,
    /// The resourceVersion after which the next history event is sent.
    cursor: u64,
    /// A Table stream still owes its column definitions (sent with the first row only).
    headers: bool,
    /// Something reached the client (the fault injector waits for that before cutting).
    sent_any: bool,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
}

impl Stream {
    /// Sends `chunk`; false once the client has gone.
    async fn send(&mut self, chunk: Bytes) -> bool {
        if self.tx.send(Ok(chunk)).await.is_err() {
            return false;
        }
        self.sent_any = true;
        true
    }

    /// A line of a stored object in the form this watch's resource serves (`events.rs`).
    fn convert(&self, line: Bytes) -> Bytes {
        if crate::events::is_events_v1(&self.spec.rt) {
            crate::events::v1_line(line)
        } else {
            line
        }
    }

    /// The next chunk of synthetic ADDED events (about `CHUNK_BYTES`), empty when none is left.
    fn initial_chunk(&mut self, items: &mut std::vec::IntoIter<Arc<Obj>>) -> BytesMut {
        let mut chunk = BytesMut::new();
        for obj in items {
            let line = self.convert(event_line("ADDED", &obj.json));
            chunk.extend_from_slice(&as_table(&self.spec, line, &mut self.headers));
            if chunk.len() >= CHUNK_BYTES {
                break;
            }
        }
        chunk
    }

    /// This watch's lines for at most `limit` history events after the cursor, and how many
    /// events were read; the cursor moves past them.
    fn render_after(&mut self, limit: usize) -> Result<(BytesMut, usize), Expired> {
        let (events, next) = self.store.events_after(self.cursor, limit)?;
        let mut lines = BytesMut::new();
        for ev in &events {
            if let Some(line) = render(&self.spec, &self.res, ev) {
                let line = self.convert(line);
                lines.extend_from_slice(&as_table(&self.spec, line, &mut self.headers));
            }
        }
        self.cursor = next;
        Ok((lines, events.len()))
    }

    /// A progress bookmark, after whatever arrived meanwhile, so its resourceVersion never skips
    /// an event this watcher has not been sent; false once the client has gone.
    async fn bookmark(&mut self) -> bool {
        let Ok((mut lines, _)) = self.render_after(usize::MAX) else {
            return true;
        };
        lines.extend_from_slice(&bookmark_line(&self.spec.rt, self.cursor, false));
        self.send(lines.freeze()).await
    }
}
