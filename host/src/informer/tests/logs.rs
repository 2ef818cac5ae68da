//! The informer's warnings name objects (name, namespace, kind, resourceVersion) and say why;
//! they never carry object content, whatever arrives from the server.

use super::*;
use crate::test_support::LogCapture;

const PAYLOAD: &str = "c3VwZXItc2VjcmV0LXBhc3N3b3Jk";

fn secret(name: &str, rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "kube-system", "resourceVersion": rv,
            "annotations": {"note": PAYLOAD}},
        "data": {"password": PAYLOAD}})
}

#[tokio::test(start_paused = true)]
async fn warnings_never_carry_object_content() {
    let out = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(out.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    // The test runtime is single-threaded: every informer task logs through this default.
    let _guard = tracing::subscriber::set_default(subscriber);

    let fake = Fake::new();
    // List items of the wrong kind and without a name.
    fake.set_list(
        vec![
            secret("token-one", "5"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "ns"},
                "data": {"password": PAYLOAD}}),
            v("a", "1"),
        ],
        "10",
    );
    let inf = informer(&fake);
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    rec.wait_len(1).await;
    fake.wait_live_watch(2).await;
    // Watch events of the wrong kind and without metadata.
    fake.send(Ok(WatchEvent::Added(secret("token-two", "11"))));
    fake.send(Ok(WatchEvent::Modified(
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"resourceVersion": "4711"}, "spec": {"token": PAYLOAD}}),
    )));
    fake.send(Ok(WatchEvent::Added(v("b", "13"))));
    rec.wait_len(2).await;
    // An undecodable event whose decoder message quotes the payload.
    fake.send(Err(SourceError::new(
        SourceErrorKind::Malformed,
        format!("invalid type: string \"{PAYLOAD}\", expected i64"),
    )));
    fake.wait_live_watch(4).await;

    let text = out.text();
    assert!(
        !text.contains(PAYLOAD),
        "object content in the log:\n{text}"
    );
    assert!(
        !text.contains("password"),
        "object content in the log:\n{text}"
    );
    for expected in [
        "token-one",
        "token-two",
        "Secret",
        "kube-system",
        "4711",
        "undecodable",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
}
