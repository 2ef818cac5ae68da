//! The one observer a host is built with sees everything a guest does: each call begin and
//! end, `kube` requests, Events, log lines and outbound HTTP, as it happens.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubewasm::host::HostBuilder;
use kubewasm::plugins::GrantPolicy;
use kubewasm::runtime::{
    ApiError, CallEnded, CallKind, EventCall, GuestLogLevel, HttpExchange, KubeCall, Observer,
};
use kubewasm_e2e::*;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::create;

/// Which observer method fired, with what it was shown (trimmed to what the test checks).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Started(CallKind),
    Ended(CallKind, Option<String>),
    Kube(&'static str, Result<(), u16>),
    Event(String),
    Line(String),
    Http(String, Result<u16, String>),
}

#[derive(Default)]
struct Everything {
    seen: Mutex<Vec<Seen>>,
    changed: Notify,
}

impl Everything {
    fn push(&self, s: Seen) {
        self.seen.lock().push(s);
        self.changed.notify_waiters();
    }

    /// Waits until `pred` holds for what was seen; panics after [`PATIENCE`].
    async fn wait(&self, what: &str, pred: impl Fn(&[Seen]) -> bool) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let notified = self.changed.notified();
            if pred(&self.seen.lock()) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "timed out waiting for {what}; seen: {:#?}",
                    self.seen.lock()
                );
            }
        }
    }
}

impl Observer for Everything {
    fn call_started(&self, plugin: &str, call: CallKind) {
        assert_eq!(plugin, "observed");
        self.push(Seen::Started(call));
    }

    fn call_ended(&self, plugin: &str, call: &CallEnded<'_>) {
        assert_eq!(plugin, "observed");
        self.push(Seen::Ended(
            call.call,
            call.object.map(|o| o.key.to_string()),
        ));
    }

    fn kube_request(&self, _plugin: &str, call: &KubeCall, result: Result<u16, &ApiError>) {
        let verb = match call {
            KubeCall::Get(_) => "get",
            _ => "write",
        };
        self.push(Seen::Kube(verb, result.map(drop).map_err(|e| e.code)));
    }

    fn event(&self, _plugin: &str, event: &EventCall) {
        self.push(Seen::Event(event.reason.clone()));
    }

    fn log_line(&self, _plugin: &str, _level: GuestLogLevel, message: &str) {
        self.push(Seen::Line(message.to_string()));
    }

    fn http_request(&self, _plugin: &str, exchange: &HttpExchange<'_>) {
        self.push(Seen::Http(
            exchange.url.to_string(),
            exchange.result.map_err(str::to_string),
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_built_with_an_observer_shows_it_every_kind_of_guest_activity() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = tempfile::tempdir().unwrap();
    // logger-v2 asking for Events and an HTTP origin; `kubewasm dev`'s policy grants them.
    std::fs::copy(
        guest("rust-logger-v2-asks.wasm"),
        dir.path().join("observed.wasm"),
    )
    .unwrap();
    let everything = Arc::new(Everything::default());
    let host = HostBuilder::new(client(&server))
        .grants(GrantPolicy::EverythingAsked)
        .plugins_dir(dir.path())
        .observer(everything.clone())
        .start()
        .await
        .expect("host starts");
    everything
        .wait("on-synced after the (empty) replay", |s| {
            s.contains(&Seen::Started(CallKind::Synced))
                && s.contains(&Seen::Ended(CallKind::Synced, None))
        })
        .await;

    for action in ["get", "event", "http"] {
        create(
            &api,
            &format!("try-{action}"),
            &[("kubewasm.io/try", action)],
        )
        .await;
    }
    everything
        .wait("every kind of activity", |s| {
            ["get", "event", "http"].iter().all(|a| {
                s.contains(&Seen::Ended(
                    CallKind::Add,
                    Some(format!("default/try-{a}")),
                ))
            }) && s.contains(&Seen::Kube("get", Ok(())))
                && s.contains(&Seen::Event("Seen".into()))
                && s.contains(&Seen::Http(
                    "http://127.0.0.1:9/".into(),
                    Err("denied".into()),
                ))
                && s.contains(&Seen::Line("try get default/try-get: ok found=true".into()))
        })
        .await;
    let seen = everything.seen.lock().clone();
    let started = seen
        .iter()
        .filter(|s| matches!(s, Seen::Started(_)))
        .count();
    let ended = seen.iter().filter(|s| matches!(s, Seen::Ended(..))).count();
    assert_eq!(started, ended, "every call that starts ends: {seen:#?}");
    // What a guest does during a call lies between that call's start and end.
    let get = seen
        .iter()
        .position(|s| *s == Seen::Kube("get", Ok(())))
        .unwrap();
    let began = seen[..get]
        .iter()
        .rposition(|s| *s == Seen::Started(CallKind::Add))
        .expect("the get happened during a call");
    assert!(
        !seen[began..get]
            .iter()
            .any(|s| matches!(s, Seen::Ended(..))),
        "{seen:#?}"
    );
    host.shutdown().await;
}
