//! Outbound HTTP of 0.2.0 handlers against a local HTTP server standing in for an external
//! system, through `rust-http-fixture` (which reports what it saw as `retry(..)` or a log line).

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Uri};
use axum::routing::{get, post};

use super::*;

/// What the server saw: the `Host` header and the query of every request (tests tag their
/// requests with `?t=<plugin>`, since they run in parallel).
#[derive(Default)]
struct Seen {
    hosts: Mutex<Vec<String>>,
    queries: Mutex<Vec<String>>,
}

struct Server {
    addr: SocketAddr,
    seen: Arc<Seen>,
}

#[derive(serde::Deserialize)]
struct Size {
    n: usize,
}

#[derive(serde::Deserialize)]
struct Delay {
    ms: u64,
}

fn note(seen: &Seen, headers: &HeaderMap, uri: &Uri) {
    seen.queries
        .lock()
        .push(uri.query().unwrap_or_default().to_owned());
    let host = headers
        .get_all("host")
        .iter()
        .map(|v| v.to_str().unwrap_or("?").to_owned())
        .collect::<Vec<_>>()
        .join(",");
    seen.hosts.lock().push(host);
}

/// One server for all tests, on its own runtime thread (calls run on throw-away runtimes).
fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route(
                "/ok",
                get(async |State(s): State<Arc<Seen>>, h: HeaderMap, u: Uri| {
                    note(&s, &h, &u);
                    "hello"
                }),
            )
            .route(
                "/echo",
                post(
                    async |State(s): State<Arc<Seen>>, h: HeaderMap, u: Uri, body: String| {
                        note(&s, &h, &u);
                        body.len().to_string()
                    },
                ),
            )
            .route(
                // Chunked, no Content-Length: the cap has to count the bytes.
                "/stream",
                get(
                    async |State(s): State<Arc<Seen>>,
                           h: HeaderMap,
                           u: Uri,
                           Query(q): Query<Size>| {
                        note(&s, &h, &u);
                        let chunks = (0..q.n.div_ceil(1000)).map(move |i| {
                            let len = 1000.min(q.n - i * 1000);
                            Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'x'; len]))
                        });
                        Body::from_stream(futures::stream::iter(chunks))
                    },
                ),
            )
            .route(
                "/declared",
                get(
                    async |State(s): State<Arc<Seen>>,
                           h: HeaderMap,
                           u: Uri,
                           Query(q): Query<Size>| {
                        note(&s, &h, &u);
                        vec![b'x'; q.n]
                    },
                ),
            )
            .route(
                // The slow peer under test: answers after `ms`.
                "/slow",
                get(
                    async |State(s): State<Arc<Seen>>,
                           h: HeaderMap,
                           u: Uri,
                           Query(q): Query<Delay>| {
                        note(&s, &h, &u);
                        tokio::time::sleep(Duration::from_millis(q.ms)).await;
                        "late"
                    },
                ),
            )
            .route(
                "/never",
                get(async |State(s): State<Arc<Seen>>, h: HeaderMap, u: Uri| {
                    note(&s, &h, &u);
                    std::future::pending::<&'static str>().await
                }),
            )
            .with_state(seen.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Server {
            addr: rx.recv().unwrap(),
            seen,
        }
    })
}

fn port() -> u16 {
    server().addr.port()
}

/// Grants exactly the listed origins (`scheme://host:port`).
struct Grants(Vec<String>);

impl HttpGate for Grants {
    fn allows_origin(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.0.contains(&format!("{scheme}://{host}:{port}"))
    }
}

fn policy(grants: &[String]) -> HttpPolicy {
    HttpPolicy::new(Arc::new(Grants(grants.to_vec())))
}

fn local() -> String {
    format!("http://127.0.0.1:{}", port())
}

fn fixture() -> &'static CompiledHandler {
    static FIXTURE: OnceLock<CompiledHandler> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        shared()
            .runtime
            .compile(&guest_bytes("http-fixture"))
            .unwrap()
    })
}

/// A ConfigMap whose `data` tells the fixture what to send.
fn request(data: serde_json::Value) -> TestObject {
    let json = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "req", "namespace": "ns", "resourceVersion": "1"},
        "data": data,
    })
    .to_string();
    TestObject {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("ns".into()),
        name: "req".into(),
        uid: "uid-req".into(),
        resource_version: "1".into(),
        labels: Vec::new(),
        json,
    }
}

fn http_instance(plugin: &str, limits: Limits, policy: HttpPolicy) -> HandlerInstance {
    shared()
        .runtime
        .handler_instance(fixture(), plugin, limits, Arc::new(FakeCache))
        .unwrap()
        .with_http_policy(policy)
}

/// Sends what `data` describes with `policy`; the outcome the guest reported.
fn send(plugin: &str, policy: HttpPolicy, data: serde_json::Value) -> HandlerOutcome {
    let mut h = http_instance(plugin, Limits::default(), policy);
    block(h.on_add(&request(data), false)).unwrap()
}

fn retry(outcome: HandlerOutcome) -> String {
    match outcome {
        HandlerOutcome::Retry(msg) => msg,
        other => panic!("expected retry, got {other:?}"),
    }
}

/// Whether a request tagged `t=tag` reached the server.
fn reached(tag: &str) -> bool {
    let tagged = format!("t={tag}");
    server()
        .seen
        .queries
        .lock()
        .iter()
        .any(|q| q.split('&').any(|p| p == tagged))
}

#[test]
fn an_origin_granted_by_address_is_reached_with_its_own_host_header() {
    let url = format!("{}/ok", local());
    let out = send(
        "http-ok",
        policy(&[local()]),
        serde_json::json!({"url": url}),
    );
    assert_eq!(out, HandlerOutcome::Ok);
    assert_eq!(logged("http-ok"), ["status=200 bytes=5"]);
    assert!(
        server()
            .seen
            .hosts
            .lock()
            .contains(&format!("127.0.0.1:{}", port()))
    );
    assert_eq!(
        shared().metrics.http_requests("http-ok", &local(), "200"),
        1
    );
}

#[test]
fn an_origin_not_granted_is_denied_before_any_connection() {
    let other_port = format!("http://127.0.0.1:{}", port() + 1);
    let url = format!("{}/ok?t=http-denied", local());
    let out = send(
        "http-denied",
        policy(&[other_port]),
        serde_json::json!({"url": url}),
    );
    assert_eq!(retry(out), "ErrorCode::HttpRequestDenied");
    assert!(!reached("http-denied"), "nothing reached the server");
    assert_eq!(
        shared()
            .metrics
            .http_requests("http-denied", "denied", "denied"),
        1
    );
    // The metadata endpoint is just another origin nobody granted.
    let out = send(
        "http-metadata",
        policy(&[local()]),
        serde_json::json!({"url": "http://169.254.169.254/latest/meta-data/"}),
    );
    assert_eq!(retry(out), "ErrorCode::HttpRequestDenied");
}

#[test]
fn a_granted_name_that_resolves_to_loopback_needs_the_address_granted_too() {
    let by_name = format!("http://localhost:{}", port());
    let url = format!("{by_name}/ok?t=http-localhost");
    let out = send(
        "http-localhost",
        policy(std::slice::from_ref(&by_name)),
        serde_json::json!({"url": url}),
    );
    assert_eq!(retry(out), "ErrorCode::DestinationIpProhibited");
    assert!(!reached("http-localhost"), "nothing reached the server");
    assert_eq!(
        shared()
            .metrics
            .http_requests("http-localhost", &by_name, "ip_denied"),
        1
    );

    let out = send(
        "http-localhost-granted",
        policy(&[by_name, local()]),
        serde_json::json!({"url": url}),
    );
    assert_eq!(out, HandlerOutcome::Ok);
    assert!(
        server()
            .seen
            .hosts
            .lock()
            .contains(&format!("localhost:{}", port()))
    );
}

#[test]
fn a_guest_cannot_set_the_host_header() {
    let url = format!("{}/ok?t=http-host", local());
    let out = send(
        "http-host",
        policy(&[local()]),
        serde_json::json!({"url": url, "host-header": "evil.example"}),
    );
    assert_eq!(retry(out), "host header refused: HeaderError::Forbidden");
    assert!(!reached("http-host"));
    assert!(
        !server()
            .seen
            .hosts
            .lock()
            .iter()
            .any(|h| h.contains("evil"))
    );
}

#[test]
fn a_response_over_the_cap_is_an_error_the_guest_sees() {
    let mut p = policy(&[local()]);
    p.max_response_bytes = 10_000;
    let url = format!("{}/stream?n=9000", local());
    assert_eq!(
        send("http-under-cap", p.clone(), serde_json::json!({"url": url})),
        HandlerOutcome::Ok
    );
    let url = format!("{}/stream?n=1000000", local());
    let msg = retry(send("http-cap", p.clone(), serde_json::json!({"url": url})));
    assert!(
        msg.starts_with("body failed after 10000 bytes") && msg.contains("body size"),
        "{msg}"
    );
    assert_eq!(
        shared()
            .metrics
            .http_requests("http-cap", &local(), "too_large"),
        1
    );
    // A declared length over the cap fails at the headers.
    let url = format!("{}/declared?n=20000", local());
    let msg = retry(send("http-declared", p, serde_json::json!({"url": url})));
    assert_eq!(msg, "ErrorCode::HttpResponseBodySize(Some(20000))");
}

#[test]
fn a_peer_that_does_not_answer_times_out() {
    let mut p = policy(&[local()]);
    p.timeout = Duration::from_millis(300);
    let url = format!("{}/never", local());
    let msg = retry(send("http-timeout", p, serde_json::json!({"url": url})));
    assert_eq!(msg, "ErrorCode::HttpResponseTimeout");
    assert_eq!(
        shared()
            .metrics
            .http_requests("http-timeout", &local(), "timeout"),
        1
    );
}

#[test]
fn dry_run_refuses_writes_and_lets_reads_through() {
    let mut p = policy(&[local()]);
    p.dry_run = true;
    let url = format!("{}/echo?t=http-dry", local());
    let msg = retry(send(
        "http-dry",
        p.clone(),
        serde_json::json!({"url": url, "method": "POST", "body": "x"}),
    ));
    assert_eq!(
        msg,
        format!(
            "ErrorCode::InternalError(Some(\"{}: POST refused (dry run): only GET and HEAD \
             requests are sent\"))",
            local()
        )
    );
    assert!(!reached("http-dry"));
    let url = format!("{}/ok", local());
    assert_eq!(
        send("http-dry-get", p, serde_json::json!({"url": url})),
        HandlerOutcome::Ok
    );
    // Without dry run the POST goes out.
    let url = format!("{}/echo", local());
    assert_eq!(
        send(
            "http-post",
            policy(&[local()]),
            serde_json::json!({"url": url, "method": "POST", "body": "abc"})
        ),
        HandlerOutcome::Ok
    );
    assert_eq!(logged("http-post"), ["status=200 bytes=1"]);
}

#[test]
fn https_goes_through_tls() {
    // The local server speaks plain HTTP, so the handshake fails: but it is attempted, with
    // the platform's roots and the origin's name.
    let origin = format!("https://127.0.0.1:{}", port());
    let msg = retry(send(
        "http-tls",
        policy(std::slice::from_ref(&origin)),
        serde_json::json!({"url": format!("{origin}/ok")}),
    ));
    assert_eq!(msg, "ErrorCode::TlsProtocolError");
}

#[test]
fn waiting_on_a_slow_response_does_not_count_against_the_deadline() {
    let limits = Limits {
        deadline: Duration::from_millis(200),
        wall_limit: Duration::from_secs(20),
        ..Limits::default()
    };
    let mut h = http_instance("http-slow", limits, policy(&[local()]));
    let url = format!("{}/slow?ms=600", local());
    let out = block(h.on_add(&request(serde_json::json!({"url": url})), false)).unwrap();
    assert_eq!(out, HandlerOutcome::Ok, "3x the deadline spent waiting");
    assert_eq!(logged("http-slow"), ["status=200 bytes=4"]);
}

#[test]
fn a_call_still_waiting_at_the_wall_limit_is_interrupted() {
    let limits = Limits {
        deadline: Duration::from_millis(200),
        wall_limit: Duration::from_millis(600),
        ..Limits::default()
    };
    let mut h = http_instance("http-wall", limits, policy(&[local()]));
    let url = format!("{}/never", local());
    let started = Instant::now();
    let err = block(h.on_add(&request(serde_json::json!({"url": url})), false)).unwrap_err();
    assert_eq!(err, CallError::DeadlineExceeded);
    // Not a timing goal: the HTTP timeout (10 s) did not end it.
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[test]
fn computing_while_a_request_is_in_flight_is_guest_time() {
    let limits = Limits {
        deadline: Duration::from_millis(200),
        wall_limit: Duration::from_secs(30),
        ..Limits::default()
    };
    let mut h = http_instance("http-busy", limits, policy(&[local()]));
    let url = format!("{}/never", local());
    let started = Instant::now();
    let err = block(h.on_add(
        &request(serde_json::json!({"url": url, "then": "loop"})),
        false,
    ))
    .unwrap_err();
    assert_eq!(err, CallError::DeadlineExceeded);
    // Stopped by the deadline, not by the 30 s wall-clock limit.
    assert!(started.elapsed() < Duration::from_secs(15));
}
