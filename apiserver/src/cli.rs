//! `kubewasm apiserver …`: run the embedded API server as a standalone process.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use crate::{ApiServer, Config, WorkloadConfig};

/// Default port: near kubectl proxy's 8001 but distinct from it and from a real apiserver's 6443.
pub const DEFAULT_PORT: u16 = 8011;

/// The workload switches `kubewasm apiserver` and `kubewasm dev` share: workloads are on
/// there (a stand-in for a cluster), unlike `Config::default()`.
#[derive(clap::Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Do not run the workload controllers and the fake node: Deployments get no ReplicaSets,
    /// Pods stay Pending (as before workloads were simulated).
    #[arg(long)]
    pub no_workloads: bool,
    /// How long a simulated Pod stays Pending before it is Running and Ready (a Job's Pod
    /// runs as long again before it succeeds), e.g. `0s`, `100ms`, `2s`.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub pod_ready_delay: std::time::Duration,
}

impl WorkloadArgs {
    /// `Config::workloads` as the flags ask.
    pub fn config(&self) -> Option<WorkloadConfig> {
        (!self.no_workloads).then_some(WorkloadConfig {
            pod_ready_delay: self.pod_ready_delay,
        })
    }
}

/// Command-line options of `kubewasm apiserver`.
#[derive(clap::Args, Debug, Clone)]
pub struct ApiserverArgs {
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Keep objects and resourceVersions in this directory (redb); without it state is in memory only.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Where to write the kubeconfig (default: `<data-dir>/kubeconfig`, else `./kubewasm.kubeconfig`).
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// Required to bind a non-loopback address: a client without a token is the superuser.
    #[arg(long)]
    pub allow_remote: bool,
    /// Serve `POST /_kubewasm/faults/{compact,end-watches,short-watches,drop-streams,fail,latency}`.
    #[arg(long)]
    pub enable_fault_endpoints: bool,
    /// Enforce RBAC on requests with a ServiceAccount token (`kubectl create token`) and on
    /// requests that impersonate (`Impersonate-User`), taking an impersonating client without a
    /// token to be this user (its `impersonate` rights are checked); a client without a token
    /// that does not impersonate stays unchecked (the superuser).
    #[arg(long, value_name = "USER", num_args = 0..=1, default_missing_value = "system:serviceaccount:kubewasm:kubewasm")]
    pub authorize: Option<String>,
    /// Write the audit log here, as kube-apiserver's flag of that name does (`-` is stdout):
    /// one `audit.k8s.io/v1` Event per request at level Metadata.
    #[arg(long, value_name = "PATH")]
    pub audit_log_path: Option<PathBuf>,
    /// The simulated workloads (on by default).
    #[command(flatten)]
    pub workloads: WorkloadArgs,
}

/// Start the server, write the kubeconfig, print `export KUBECONFIG=…`, and serve until Ctrl-C.
pub async fn run(args: ApiserverArgs) -> anyhow::Result<()> {
    if !args.bind_address.is_loopback() {
        if !args.allow_remote {
            anyhow::bail!(
                "--bind-address {} is not a loopback address; pass --allow-remote to expose an API server whose clients without a token are the superuser",
                args.bind_address
            );
        }
        eprintln!(
            "WARNING: serving on {} where a client without a token is the superuser: anyone who can reach this port can read and change every object",
            args.bind_address
        );
    }
    let audit = match &args.audit_log_path {
        Some(path) => Some(
            crate::AuditSink::open(path)
                .map_err(|e| anyhow::anyhow!("--audit-log-path {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let config = Config {
        audit,
        bind: SocketAddr::new(args.bind_address, args.port),
        data_dir: args.data_dir.clone(),
        enable_fault_endpoints: args.enable_fault_endpoints,
        allow_non_loopback: args.allow_remote,
        authorization: args
            .authorize
            .clone()
            .map(|impersonator| crate::Authorization { impersonator }),
        // A standalone server stands in for a cluster: namespaces get their default objects.
        namespace_defaults: true,
        workloads: args.workloads.config(),
        ..Config::default()
    };
    let server = ApiServer::start(config).await?;
    let path = args
        .kubeconfig_out
        .clone()
        .unwrap_or_else(|| match &args.data_dir {
            Some(d) => d.join("kubeconfig"),
            None => PathBuf::from("kubewasm.kubeconfig"),
        });
    server.write_kubeconfig(&path)?;
    let abs = std::fs::canonicalize(&path).unwrap_or(path);
    eprintln!("kubewasm apiserver listening on {}", server.url());
    println!("export KUBECONFIG={}", abs.display());
    wait_for_stop_signal().await?;
    server.shutdown().await;
    Ok(())
}

/// Ctrl-C, or SIGTERM on Unix (so service managers get a clean, flushed shutdown too).
async fn wait_for_stop_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ApiserverArgs,
    }

    #[test]
    fn defaults_are_loopback_and_documented_port() {
        let w = Wrapper::parse_from(["kubewasm"]);
        assert_eq!(w.args.port, DEFAULT_PORT);
        assert!(w.args.bind_address.is_loopback());
        assert!(!w.args.allow_remote && !w.args.enable_fault_endpoints);
        let workloads = w.args.workloads.config().expect("workloads on by default");
        assert_eq!(
            workloads.pod_ready_delay,
            std::time::Duration::from_millis(100)
        );
        let w = Wrapper::parse_from(["kubewasm", "--no-workloads"]);
        assert!(w.args.workloads.config().is_none());
        let w = Wrapper::parse_from(["kubewasm", "--pod-ready-delay", "2s"]);
        assert_eq!(
            w.args.workloads.config().unwrap().pod_ready_delay,
            std::time::Duration::from_secs(2)
        );
        let w = Wrapper::parse_from([
            "kubewasm",
            "--port",
            "0",
            "--data-dir",
            "/tmp/x",
            "--bind-address",
            "0.0.0.0",
            "--allow-remote",
        ]);
        assert_eq!(
            w.args.data_dir.as_deref(),
            Some(std::path::Path::new("/tmp/x"))
        );
        assert!(w.args.allow_remote);
    }
}
