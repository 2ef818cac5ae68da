//! A network partition between one client and the server, for tests of clients that must
//! notice they are cut off (a leader that cannot renew its Lease). Unlike the fault endpoints,
//! which affect every client, it sits in front of the server and only the clients pointed at
//! it are cut.

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy to a server that can stop forwarding: while cut, bytes go nowhere and new
/// connections hang, as across a partition (no resets, no errors, only silence).
pub struct PartitionProxy {
    url: String,
    cut: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl PartitionProxy {
    /// Proxies `http://127.0.0.1:<new port>` to `upstream` (an `http://host:port` URL).
    pub async fn start(upstream: &str) -> std::io::Result<PartitionProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let target = upstream.trim_start_matches("http://").to_string();
        let cut = Arc::new(watch::channel(false).0);
        let cut2 = cut.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut state = cut2.subscribe();
                let target = target.clone();
                tokio::spawn(async move {
                    if *state.borrow_and_update() {
                        // Partitioned: hold the connection open and answer nothing.
                        until(&mut state, false).await;
                        let _ = tokio::io::AsyncWriteExt::shutdown(&mut inbound).await;
                        return;
                    }
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let cut = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => false,
                        _ = until(&mut state, true) => true,
                    };
                    if cut {
                        // Drop the upstream side; the client side hangs until restored.
                        drop(outbound);
                        until(&mut state, false).await;
                    }
                });
            }
        });
        Ok(PartitionProxy { url, cut, task })
    }

    /// The URL clients behind the partition use.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Starts the partition.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Ends the partition; hung connections are closed, new ones are forwarded.
    pub fn restore(&self) {
        self.cut.send_replace(false);
    }
}

/// Returns once the partition state is `want` (or the proxy is gone).
async fn until(state: &mut watch::Receiver<bool>, want: bool) {
    loop {
        let now = *state.borrow_and_update();
        if now == want || state.changed().await.is_err() {
            return;
        }
    }
}

impl Drop for PartitionProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
