//! `/metrics`, `/healthz` and `/readyz`, served like controller-runtime's managers serve them,
//! plus `/plugins` (every plugin's state as JSON) and `/leader` (this replica's leadership).
//!
//! Under leader election a standby is ready — its plugins are loaded and its caches synced, so
//! it can take over at once — and its readiness detail says it stands by.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::plugins::PluginManager;

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    manager: PluginManager,
    starting: Arc<AtomicBool>,
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn healthz() -> &'static str {
    "ok"
}

/// Every plugin's state, version, subscriptions and queue depth, as JSON.
async fn plugins(State(s): State<AppState>) -> impl IntoResponse {
    axum::Json(s.manager.status().await)
}

/// `{"leaderElection": bool, "leader": bool}`: whether this replica competes for a Lease and
/// whether it delivers events (always, without leader election).
async fn leader(State(s): State<AppState>) -> impl IntoResponse {
    let leadership = s.manager.leadership();
    axum::Json(serde_json::json!({
        "leaderElection": leadership.is_some(),
        "leader": leadership.unwrap_or(true),
    }))
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    if s.starting.load(Ordering::Acquire) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: loading the plugins directory".to_string(),
        );
    }
    let mut not_ready = s.manager.not_ready().await;
    for key in s.manager.factory().keys() {
        if !s.manager.factory().has_synced(&key) {
            not_ready.push(format!("informer {key} has not synced"));
        }
    }
    if not_ready.is_empty() {
        let detail = match s.manager.leadership() {
            Some(false) => {
                "ok: standby (plugins loaded, caches warm; another replica holds the leader Lease)"
            }
            Some(true) => "ok: leader",
            None => "ok",
        };
        (StatusCode::OK, detail.to_string())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, not_ready.join("\n"))
    }
}

/// Binds the endpoints. When both addresses are equal one listener serves all three paths;
/// `None` disables a group. Returns the bound addresses (useful with port 0).
pub(super) async fn serve(
    metrics_addr: Option<SocketAddr>,
    health_addr: Option<SocketAddr>,
    registry: Arc<Registry>,
    manager: PluginManager,
    starting: Arc<AtomicBool>,
    stop: CancellationToken,
) -> anyhow::Result<(Option<SocketAddr>, Option<SocketAddr>)> {
    let state = AppState {
        registry,
        manager,
        starting,
    };
    let metrics_router = Router::new().route("/metrics", get(metrics));
    let health_router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/plugins", get(plugins))
        .route("/leader", get(leader));
    let mut bound = (None, None);
    let spawn = |addr: SocketAddr, router: Router<AppState>| -> anyhow::Result<SocketAddr> {
        let std_listener = std::net::TcpListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("cannot bind endpoint address {addr}: {e}"))?;
        std_listener.set_nonblocking(true)?;
        let local = std_listener.local_addr()?;
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let app = router.with_state(state.clone());
        let stop = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        Ok(local)
    };
    match (metrics_addr, health_addr) {
        (Some(m), Some(h)) if m == h => {
            let a = spawn(m, metrics_router.merge(health_router))?;
            bound = (Some(a), Some(a));
        }
        (m, h) => {
            if let Some(m) = m {
                bound.0 = Some(spawn(m, metrics_router)?);
            }
            if let Some(h) = h {
                bound.1 = Some(spawn(h, health_router)?);
            }
        }
    }
    Ok(bound)
}
