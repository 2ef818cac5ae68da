//! The `kubewasm` command line: `run`, `dev`, `apiserver`, `check`, `rbac`, `test`, `new`,
//! `push`, `pull` and `generate-key-pair`.

mod check;
mod dev;
mod keys;
mod logging;
mod new;
mod pull;
mod push;
mod rbac;
mod registry;
mod run;
#[cfg(feature = "scenario")]
mod test;

pub use logging::init_for_tests as init_logging_for_tests;

use clap::{Parser, Subcommand};

/// Kubernetes event handlers as sandboxed WebAssembly components.
#[derive(Parser, Debug)]
#[command(name = "kubewasm", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the handlers in a plugins directory against a cluster (kubeconfig or in-cluster).
    Run(run::RunArgs),
    /// Run an embedded API server and the handlers together; no cluster needed.
    Dev(dev::DevArgs),
    /// Run only the embedded Kubernetes API server.
    Apiserver(apiserver::cli::ApiserverArgs),
    /// Validate handler components and print their describe(), grants and what is missing as JSON.
    Check(check::CheckArgs),
    /// Print the RBAC (Roles, ClusterRole, bindings) the host needs for a plugins directory.
    Rbac(rbac::RbacArgs),
    /// Run a handler through scenario files on an in-process API server with a virtual clock.
    #[cfg(feature = "scenario")]
    Test(test::TestArgs),
    /// Not in this build: `kubewasm test` needs a virtual clock the production binary leaves
    /// out; build with `--features scenario` (the workspace's test command does).
    #[cfg(not(feature = "scenario"))]
    Test {
        /// Whatever was given; only the refusal is printed.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Create a handler folder (source, build script, manifest, scenario) in a language.
    New(new::NewArgs),
    /// Publish a handler component as a wasm OCI artifact; prints the reference pinned by digest.
    Push(push::PushArgs),
    /// Fetch a handler component from a registry, every digest checked.
    Pull(pull::PullArgs),
    /// Write an ECDSA P-256 key pair (`cosign.key`, `cosign.pub`) to sign pushes with.
    GenerateKeyPair(keys::GenerateKeyPairArgs),
    /// Internal: compiles one component for a running host, which starts it (see
    /// `runtime::compile_worker`).
    #[command(name = crate::runtime::WORKER_SUBCOMMAND, hide = true)]
    CompileWorker {
        /// The worker's own arguments, read by the runtime.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// Entry point of the binary: parses arguments, runs the subcommand, maps errors to exit code 1.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Before logging is set up: the worker's stderr carries only its error, for the host.
    if let Command::CompileWorker { args } = &cli.command {
        return crate::runtime::compile_worker(args);
    }
    let format = match &cli.command {
        Command::Run(a) => a.host.log_format,
        Command::Dev(a) => a.host.log_format,
        _ => logging::LogFormat::Text,
    };
    #[cfg(feature = "scenario")]
    if let Command::Test(args) = cli.command {
        // Only errors: the transcript is the output; the host's own lines would bury it.
        logging::init_quiet(format);
        return test::test(args);
    }
    #[cfg(not(feature = "scenario"))]
    if let Command::Test { .. } = cli.command {
        eprintln!(
            "kubewasm test: not in this build of kubewasm (a production build leaves out the \
             virtual clock it needs); build it with `--features scenario`, e.g. \
             `cargo run --release -p kubewasm --features scenario -- test ...`"
        );
        return std::process::ExitCode::from(2);
    }
    logging::init(format);
    let result = match cli.command {
        Command::Check(args) => check::check(args),
        Command::Rbac(args) => rbac::rbac(args),
        Command::New(args) => new::new(args),
        Command::GenerateKeyPair(args) => keys::generate_key_pair(args),
        command => match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => {
                let result = rt.block_on(async move {
                    match command {
                        Command::Run(a) => run::run(a).await,
                        Command::Dev(a) => dev::dev(a).await,
                        Command::Apiserver(a) => apiserver::cli::run(a).await,
                        Command::Push(a) => push::push(a).await,
                        Command::Pull(a) => pull::pull(a).await,
                        #[cfg(feature = "scenario")]
                        Command::Test(_) => unreachable!("handled above"),
                        #[cfg(not(feature = "scenario"))]
                        Command::Test { .. } => unreachable!("handled above"),
                        Command::Check(_)
                        | Command::Rbac(_)
                        | Command::New(_)
                        | Command::GenerateKeyPair(_)
                        | Command::CompileWorker { .. } => {
                            unreachable!("handled above")
                        }
                    }
                });
                // A compile still running on a blocking thread must not hold the exit.
                rt.shutdown_timeout(std::time::Duration::from_secs(1));
                result
            }
            Err(e) => Err(e.into()),
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubewasm: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The per-user compile cache directory (`$XDG_CACHE_HOME/kubewasm` or `~/.cache/kubewasm`).
pub(crate) fn default_cache_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
        .map(|d| d.join("kubewasm"))
}

/// The executable to re-run as a compile worker: this one. On Linux through `/proc/self/exe`,
/// which names the running binary even after it was replaced or removed on disk (a different
/// binary would compile for another engine).
pub(crate) fn compile_worker_binary() -> Option<std::path::PathBuf> {
    let own = std::path::Path::new("/proc/self/exe");
    if cfg!(target_os = "linux") && own.exists() {
        return Some(own.to_path_buf());
    }
    std::env::current_exe().ok()
}

/// Runs a host's shutdown; a second SIGTERM/SIGINT meanwhile cuts it short.
pub(crate) async fn shutdown_or_second_signal(shutdown: impl std::future::Future<Output = ()>) {
    tracing::info!("shutting down");
    tokio::select! {
        _ = shutdown => tracing::info!("shut down"),
        _ = wait_for_signal() => tracing::warn!("second signal: exiting without waiting for plugins"),
    }
}

/// Resolves on Ctrl-C or SIGTERM (what Kubernetes sends a pod).
pub(crate) async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
