//! Who this host is to the API server: the User-Agent on every request, the field manager of
//! every write it makes on its own behalf (Lease, Events), and the name of this replica.
//!
//! A real cluster names a write's manager after its User-Agent when the request names none, and
//! audit logs, `managedFields` and API Priority and Fairness all key on these names, so a host
//! that sends none shows up as `unknown` everywhere. This module sits below every other layer
//! (it knows only kube's `Config`), so informers, the election and the plugins share one name.

use http::{HeaderName, HeaderValue};
use kubewasm_apimachinery::validation::validate_dns1123_subdomain;

/// `kubewasm/<version>`: the User-Agent of every request the host makes, as kubectl sends
/// `kubectl/<version>`, so a server that names managers after it reads `kubewasm`.
pub const USER_AGENT: &str = concat!("kubewasm/", env!("CARGO_PKG_VERSION"));

/// The field manager of the host's own writes (the Lease, Events); plugin writes carry
/// `kubewasm:<plugin>` instead, so an object's `managedFields` tell the two apart.
pub const FIELD_MANAGER: &str = "kubewasm";

/// The real server's limit on an Event's `reportingInstance`.
const MAX_REPORTING_INSTANCE: usize = 128;

/// `config` that identifies itself as `agent`: the host's own clients pass [`USER_AGENT`];
/// the scenario runner and the test harness pass theirs, so their writes never read as the host's.
pub fn with_user_agent(mut config: kube::Config, agent: &'static str) -> kube::Config {
    let name = HeaderName::from_static("user-agent");
    config.headers.retain(|(h, _)| h != name);
    config.headers.push((name, HeaderValue::from_static(agent)));
    config
}

/// A kube client for `config` that identifies itself as [`USER_AGENT`]; every entry point
/// builds its client here.
pub fn client(config: kube::Config) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(with_user_agent(config, USER_AGENT))?)
}

/// This replica's name: the pod name from the downward API (`POD_NAME`), else `HOSTNAME`, else
/// the kernel's host name, else `kubewasm`. Events carry it as `reportingInstance` and the
/// leader-election identity starts with it, so replicas can be told apart.
pub fn replica_name() -> String {
    replica_name_from(
        std::env::var("POD_NAME").ok(),
        std::env::var("HOSTNAME").ok(),
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
    )
}

/// The first candidate that is a valid object name short enough for `reportingInstance`; a
/// pure function so the fallback order is testable without touching the environment.
fn replica_name_from(
    pod_name: Option<String>,
    env_hostname: Option<String>,
    kernel_hostname: Option<String>,
) -> String {
    [pod_name, env_hostname, kernel_hostname]
        .into_iter()
        .flatten()
        .map(|n| n.trim().to_string())
        .find(|n| n.len() <= MAX_REPORTING_INSTANCE && validate_dns1123_subdomain(n).is_ok())
        .unwrap_or_else(|| "kubewasm".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn the_pod_name_wins_then_the_host_names_and_invalid_names_are_skipped() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            replica_name_from(s("web-7d9f-abcde"), s("other"), s("node")),
            "web-7d9f-abcde"
        );
        assert_eq!(replica_name_from(None, s("host-a"), s("node")), "host-a");
        // An unexported HOSTNAME (a plain process) falls back to the kernel's name.
        assert_eq!(
            replica_name_from(None, None, s("node-1.example.com\n")),
            "node-1.example.com"
        );
        assert_eq!(
            replica_name_from(s("Bad_Name"), s(&"a".repeat(129)), None),
            "kubewasm"
        );
    }

    /// The header must reach the wire: a client built here sends it on a plain request.
    #[tokio::test]
    async fn every_request_carries_the_user_agent() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = sock.read(&mut buf).await.unwrap();
                assert!(n > 0, "connection closed before the request's head");
                head.extend_from_slice(&buf[..n]);
            }
            let body = b"{\"major\":\"1\",\"minor\":\"34\",\"gitVersion\":\"v1.34.0\",\"gitCommit\":\"\",\"gitTreeState\":\"\",\"buildDate\":\"\",\"goVersion\":\"\",\"compiler\":\"\",\"platform\":\"\"}";
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            sock.write_all(resp.as_bytes()).await.unwrap();
            sock.write_all(body).await.unwrap();
            String::from_utf8_lossy(&head).to_lowercase()
        });
        let c = client(kube::Config::new(url.parse().unwrap())).unwrap();
        let _ = c.apiserver_version().await;
        let head = server.await.unwrap();
        let want = format!("user-agent: {}", USER_AGENT.to_lowercase());
        assert!(head.contains(&want), "{head}");
        assert_eq!(head.matches("user-agent:").count(), 1, "{head}");
    }
}
