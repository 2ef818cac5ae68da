//! Compiles in a child process, so Cranelift's memory and time are bounded by the kernel rather
//! than by whatever a component's author put in it.
//!
//! What a compile costs grows with the component's code, and nothing the plugin's own memory cap
//! covers: an 18 MB interpreter needs a few hundred MiB for a moment, and a component carrying a
//! large unused core module of straight-line functions took the host from 80 MiB to 1.5 GiB (in
//! the deploy's 512 MiB memory cgroup: OOM-killed 1.7 s after the file was dropped). So a fresh
//! compile runs in a child process:
//! - `RLIMIT_DATA` caps what it may allocate (heap and every writable private mapping): past it
//!   an allocation fails and the child aborts, whatever the component;
//! - `oom_score_adj` 1000 makes it the kernel's first choice when the container's memory cgroup
//!   is full anyway, so the child dies rather than the host;
//! - the parent kills it at the time limit, and `PR_SET_PDEATHSIG` kills it if the thread
//!   waiting for it dies;
//! - it runs [`compile_niceness`](super::handle) levels below the host, as compiles did in-process.
//!
//! The child is this same executable started with the hidden subcommand [`WORKER_SUBCOMMAND`]
//! (the runtime knows nothing of the command line: the CLI only dispatches it to
//! [`compile_worker`]). It reads the wasm on stdin and writes `Component::serialize`'s artifact on
//! stdout (`Engine::precompile_component`, the same format). The parent deserializes the artifact from memory: it came through a pipe only the
//! parent holds, from the parent's own executable (re-run through `/proc/self/exe`), and wasmtime
//! checks that a compatible engine made it. Its size is capped by the child's memory limit.
//!
//! A compile's limit grows with the component's size ([`CompileLimits::limit_for`]), up to the
//! per-compile maximum, and compiles run at once only while their limits together fit the compile
//! memory budget (in a child or, without a worker binary, in-process): the shipped Python and
//! JavaScript examples compiling side by side from an empty cache used to OOM the host, while a
//! small Rust handler still compiles beside the Python one instead of waiting for it.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// The hidden subcommand that makes the binary a compile worker (see [`compile_worker`]).
pub(crate) const WORKER_SUBCOMMAND: &str = "__compile";

/// The most memory one compile may use by default: the largest shipped examples peak at
/// 341 MiB (Python replicator, 18.5 MB) and 344 MiB (JavaScript notifier, 13.7 MB) of
/// `RLIMIT_DATA`-counted memory compiling on one thread (docs/limits.md, *Compiles*).
pub(crate) const DEFAULT_COMPILE_MEMORY_LIMIT: u64 = 384 << 20;

/// Memory all compiles at once may use by default: one compile at the limit and a small one
/// beside it (a Rust handler's limit is under 64 MiB), so a Rust handler does not wait for an
/// 18 MB Python one, while two large ones compile one after the other.
pub(crate) const DEFAULT_COMPILE_MEMORY_BUDGET: u64 = DEFAULT_COMPILE_MEMORY_LIMIT + (64 << 20);

/// Wall time one compile may take by default: the Python replicator took 111–138 s on a
/// two-core machine loaded 7 times over, 12 s on a quiet one.
pub(crate) const DEFAULT_COMPILE_TIME_LIMIT: Duration = Duration::from_secs(300);

/// Memory a compile of a tiny component needs: the worker process, its engine, the input and
/// the artifact (a 94 KB Rust handler peaked at 9 MiB).
pub const COMPILE_BASE_BYTES: u64 = 32 << 20;

/// Memory a compile needs per byte of component over [`COMPILE_BASE_BYTES`]: the shipped
/// examples needed 18–50 (docs/limits.md, *Compiles*).
pub const COMPILE_BYTES_PER_WASM_BYTE: u64 = 64;

/// Exit code of a worker whose component wasmtime refused (the reason is on stderr).
const EXIT_INVALID: u8 = 1;
/// Exit code of a worker that could not read its input or write its output.
const EXIT_IO: u8 = 2;
/// Exit code of a worker whose compile failed for want of memory without aborting.
const EXIT_NO_MEMORY: u8 = 3;
/// Most of the worker's stderr the parent keeps (a wasmtime error is one line).
const MAX_STDERR_BYTES: usize = 4096;

/// How fresh compiles are bounded.
#[derive(Clone, Debug)]
pub struct CompileLimits {
    /// The executable to re-run as a compile worker (`kubewasm` itself); `None` compiles in
    /// this process, where only the budget bounds it (library tests; every host the CLI starts
    /// sets it).
    pub worker: Option<PathBuf>,
    /// The most memory any one compile may allocate (its child's `RLIMIT_DATA` is
    /// [`CompileLimits::limit_for`] its size, at most this).
    pub memory_limit_bytes: u64,
    /// Memory all compiles at once may use: a compile waits until its limit fits in what the
    /// running ones leave.
    pub memory_budget_bytes: u64,
    /// Wall time after which a compile's child is killed.
    pub time_limit: Duration,
    /// Compile a component's functions on all cores (wasmtime's parallel compilation) rather
    /// than one: 1.2–1.4 times faster on two cores, but the JavaScript notifier then peaked at
    /// 439 MiB instead of 344 (docs/limits.md), so off by default.
    pub parallel: bool,
}

impl Default for CompileLimits {
    fn default() -> Self {
        Self {
            worker: None,
            memory_limit_bytes: DEFAULT_COMPILE_MEMORY_LIMIT,
            memory_budget_bytes: DEFAULT_COMPILE_MEMORY_BUDGET,
            time_limit: DEFAULT_COMPILE_TIME_LIMIT,
            parallel: false,
        }
    }
}

impl CompileLimits {
    /// The memory limit of compiling a component of `wasm_bytes`: what its size needs
    /// ([`COMPILE_BASE_BYTES`] plus [`COMPILE_BYTES_PER_WASM_BYTE`] a byte), at most
    /// [`CompileLimits::memory_limit_bytes`].
    pub fn limit_for(&self, wasm_bytes: usize) -> u64 {
        COMPILE_BYTES_PER_WASM_BYTE
            .saturating_mul(wasm_bytes as u64)
            .saturating_add(COMPILE_BASE_BYTES)
            .min(self.memory_limit_bytes)
    }

    /// How many compiles at the full per-compile limit run at once: as many as fit in the
    /// budget, at least one (smaller components' compiles take less and fit more).
    pub fn concurrency(&self) -> usize {
        let n = self.memory_budget_bytes / self.memory_limit_bytes.max(1);
        usize::try_from(n).unwrap_or(usize::MAX).max(1)
    }

    fn threads(&self) -> usize {
        if self.parallel {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            1
        }
    }
}

/// Why a compile was stopped before it said whether the component is valid.
#[derive(Debug, thiserror::Error)]
pub enum CompileAborted {
    /// It needed more memory than one compile may have.
    #[error(
        "compiling it needed more than the compile memory limit of {} MiB; the compile was \
         stopped (a component this costly to compile is refused)",
        .limit_bytes >> 20
    )]
    MemoryLimit {
        /// The per-compile limit.
        limit_bytes: u64,
    },
    /// It ran past the time limit.
    #[error("compiling it took longer than the compile time limit of {}s; the compile was stopped", .limit.as_secs())]
    TimeLimit {
        /// The per-compile limit.
        limit: Duration,
    },
    /// Someone else killed the child: the kernel's OOM killer when the host's memory is full
    /// (the child is its first choice), or an operator. Not the component's doing alone, so
    /// worth another try.
    #[error(
        "the compile process was killed by signal {signal} (the OOM killer, when the host's memory is full)"
    )]
    Killed {
        /// The signal.
        signal: i32,
    },
    /// The child died another way; `detail` is the end of what it wrote on stderr.
    #[error("the compile process failed ({status}): {detail}")]
    Crashed {
        /// How it ended.
        status: String,
        /// What it said, truncated.
        detail: String,
    },
    /// Its artifact was larger than the child's memory limit: not something it could have made.
    #[error("the compile process sent more than {limit} bytes")]
    ArtifactTooLarge {
        /// The cap.
        limit: u64,
    },
    /// The worker could not be started.
    #[error("cannot start the compile process {}: {source}", .worker.display())]
    Spawn {
        /// The worker executable.
        worker: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reading the child's answer failed.
    #[error("cannot read from the compile process: {0}")]
    Pipe(#[source] std::io::Error),
}

impl CompileAborted {
    /// Whether the same bytes may compile on a later try (the machine's state, not the
    /// component, stopped it).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Killed { .. } | Self::Spawn { .. } | Self::Pipe(_)
        )
    }

    /// The `result` label of the compiles metric.
    pub(crate) fn metric(&self) -> &'static str {
        match self {
            Self::MemoryLimit { .. } | Self::ArtifactTooLarge { .. } => "memory_limit",
            Self::TimeLimit { .. } => "time_limit",
            Self::Killed { .. } => "killed",
            Self::Crashed { .. } | Self::Spawn { .. } | Self::Pipe(_) => "failed",
        }
    }
}

/// What a child compile came to.
#[derive(Debug)]
pub(crate) enum ChildOutcome {
    /// The serialized component.
    Artifact(Vec<u8>),
    /// wasmtime refused the component; its message.
    Invalid(String),
}

/// Compiles `wasm` in a child running `worker`, `nice` levels below this process, with `memory`
/// bytes and `limits`' time; blocks until the child is done or killed.
pub(crate) fn compile_in_child(
    worker: &Path,
    limits: &CompileLimits,
    memory: u64,
    nice: i32,
    wasm: &[u8],
) -> Result<ChildOutcome, CompileAborted> {
    let mut command = Command::new(worker);
    command
        .arg(WORKER_SUBCOMMAND)
        .arg("--threads")
        .arg(limits.threads().to_string())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs between fork and exec, so it only makes system calls (no
    // allocation, no locks): setrlimit, open/write/close of a constant path, prctl,
    // get/setpriority.
    unsafe {
        command.pre_exec(move || limit_this_process(memory, nice));
    }
    let mut child = command.spawn().map_err(|source| CompileAborted::Spawn {
        worker: worker.to_path_buf(),
        source,
    })?;
    let pid = child.id() as libc::pid_t;
    let (mut stdin, mut stdout, mut stderr) = (
        child.stdin.take().expect("piped"),
        child.stdout.take().expect("piped"),
        child.stderr.take().expect("piped"),
    );
    let timed_out = AtomicBool::new(false);
    let (done, finished) = mpsc::channel::<()>();
    let (answer, detail) = std::thread::scope(|s| {
        // A child that dies before reading everything makes this write fail: its status says
        // why, so the error is not needed.
        s.spawn(move || {
            let _ = stdin.write_all(wasm);
        });
        let detail = s.spawn(move || read_stderr(&mut stderr));
        let timed_out = &timed_out;
        s.spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(limits.time_limit) {
                timed_out.store(true, Ordering::Release);
                kill(pid);
            }
        });
        let answer = read_capped(&mut stdout, memory);
        if !matches!(answer, Ok(Some(_))) {
            kill(pid);
        }
        // Not waited for yet, so the pid cannot have been reused by the time the watchdog
        // reads this and stands down.
        let _ = done.send(());
        (answer, detail.join().unwrap_or_default())
    });
    let status = child.wait().map_err(CompileAborted::Pipe)?;
    let artifact = match answer {
        Ok(Some(a)) => a,
        Ok(None) => return Err(CompileAborted::ArtifactTooLarge { limit: memory }),
        Err(e) if status.success() => return Err(CompileAborted::Pipe(e)),
        Err(_) => Vec::new(),
    };
    if timed_out.load(Ordering::Acquire) {
        return Err(CompileAborted::TimeLimit {
            limit: limits.time_limit,
        });
    }
    classify(status, artifact, detail, memory)
}

/// Maps how the worker ended to an outcome.
fn classify(
    status: ExitStatus,
    artifact: Vec<u8>,
    detail: String,
    limit_bytes: u64,
) -> Result<ChildOutcome, CompileAborted> {
    // Rust reports a failed allocation on stderr and aborts.
    let out_of_memory = detail.contains("memory allocation of");
    match (status.code(), status.signal()) {
        (Some(0), _) if !artifact.is_empty() => Ok(ChildOutcome::Artifact(artifact)),
        (Some(c), _) if c == i32::from(EXIT_INVALID) => Ok(ChildOutcome::Invalid(detail)),
        (Some(c), _) if c == i32::from(EXIT_NO_MEMORY) => {
            Err(CompileAborted::MemoryLimit { limit_bytes })
        }
        (None, Some(libc::SIGABRT)) if out_of_memory => {
            Err(CompileAborted::MemoryLimit { limit_bytes })
        }
        (None, Some(signal @ libc::SIGKILL)) => Err(CompileAborted::Killed { signal }),
        _ => Err(CompileAborted::Crashed {
            status: status.to_string(),
            detail,
        }),
    }
}

/// The child's side of the limits, between fork and exec: only system calls.
fn limit_this_process(memory: u64, nice: i32) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: memory as libc::rlim_t,
        rlim_max: memory as libc::rlim_t,
    };
    // SAFETY: plain system calls on this (single-threaded, just forked) process; the pointers
    // are to a local and to constant strings.
    unsafe {
        if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        #[cfg(target_os = "linux")]
        {
            // Raising one's own score needs no privilege; a failure only leaves the default.
            let fd = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if fd >= 0 {
                libc::write(fd, b"1000".as_ptr().cast(), 4);
                libc::close(fd);
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        }
        if nice > 0 {
            let current = libc::getpriority(libc::PRIO_PROCESS, 0);
            libc::setpriority(libc::PRIO_PROCESS, 0, (current + nice).min(19));
        }
    }
    Ok(())
}

fn kill(pid: libc::pid_t) {
    // SAFETY: kill(2) of our own child, not yet reaped (see the callers).
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Everything on `pipe` if it is at most `cap` bytes, `None` (having stopped reading) if more.
fn read_capped(pipe: &mut impl Read, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    pipe.take(cap.saturating_add(1)).read_to_end(&mut out)?;
    Ok((out.len() as u64 <= cap).then_some(out))
}

/// The first [`MAX_STDERR_BYTES`] of `pipe` as text, the rest drained so the child never
/// blocks on it.
fn read_stderr(pipe: &mut impl Read) -> String {
    let mut kept = Vec::new();
    let _ = pipe
        .by_ref()
        .take(MAX_STDERR_BYTES as u64)
        .read_to_end(&mut kept);
    let _ = std::io::copy(pipe, &mut std::io::sink());
    let text = String::from_utf8_lossy(&kept);
    // wasmtime's and wasmparser's messages quote the component (export names, say): escaped,
    // so `kubewasm check`'s terminal and the log get one line whatever the component holds.
    crate::text::foreign(text.trim_end(), MAX_STDERR_BYTES)
}

/// The worker's side: reads a component on stdin, compiles it with the runtime's engine
/// settings, writes the serialized artifact on stdout. `args` are those after
/// [`WORKER_SUBCOMMAND`] (`--threads N`). The CLI calls this before setting up logging: stderr
/// carries only the error, for the parent.
pub(crate) fn compile_worker(args: &[OsString]) -> ExitCode {
    let threads = match args {
        [flag, n] if flag == "--threads" => n.to_str().and_then(|n| n.parse::<usize>().ok()),
        _ => None,
    };
    let Some(threads) = threads.filter(|n| *n > 0) else {
        eprintln!("usage: {WORKER_SUBCOMMAND} --threads N (internal: the host starts it)");
        return ExitCode::from(EXIT_IO);
    };
    let mut wasm = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut wasm) {
        eprintln!("cannot read the component: {e}");
        return ExitCode::from(EXIT_IO);
    }
    match compile_to_artifact(&wasm, threads) {
        Ok(artifact) => {
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(&artifact).and_then(|()| out.flush()) {
                eprintln!("cannot send the artifact: {e}");
                return ExitCode::from(EXIT_IO);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let message = format!("{e:#}");
            eprintln!("{message}");
            // ENOMEM from mmap, or wasmtime's own `OutOfMemory`, both under RLIMIT_DATA.
            if message.contains("Cannot allocate memory") || message.contains("out of memory (") {
                ExitCode::from(EXIT_NO_MEMORY)
            } else {
                ExitCode::from(EXIT_INVALID)
            }
        }
    }
}

/// Compiles on `threads` threads with an engine of the runtime's settings. Only the pool's size
/// differs from the host's engine, and it is no part of an artifact's compatibility.
fn compile_to_artifact(wasm: &[u8], threads: usize) -> anyhow::Result<Vec<u8>> {
    let engine =
        super::engine::build_engine(1, super::handle::RuntimeConfig::default().max_memory_bytes)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("kubewasm-compile-{i}"))
        .build()?;
    // The artifact directly, as for ahead-of-time compiles: no loaded copy of the code beside it.
    Ok(pool.install(|| engine.precompile_component(wasm))?)
}

/// Shares the compile memory budget out: a compile enters once its limit fits in what the
/// running ones leave (a single compile always fits eventually: its share is capped at the whole
/// budget).
pub(crate) struct CompileGate {
    budget: u64,
    free: parking_lot::Mutex<u64>,
    freed: parking_lot::Condvar,
}

/// One compile's share of the budget; given back on drop.
pub(crate) struct CompilePermit<'a> {
    gate: &'a CompileGate,
    bytes: u64,
}

impl CompileGate {
    pub(crate) fn new(budget: u64) -> Self {
        Self {
            budget,
            free: parking_lot::Mutex::new(budget),
            freed: parking_lot::Condvar::new(),
        }
    }

    /// Blocks until `bytes` (at most the whole budget) are free, and takes them.
    pub(crate) fn enter(&self, bytes: u64) -> CompilePermit<'_> {
        let bytes = bytes.min(self.budget);
        let mut free = self.free.lock();
        while *free < bytes {
            self.freed.wait(&mut free);
        }
        *free -= bytes;
        CompilePermit { gate: self, bytes }
    }
}

impl Drop for CompilePermit<'_> {
    fn drop(&mut self) {
        *self.gate.free.lock() += self.bytes;
        // Waiters need different amounts: each checks whether its own now fits.
        self.gate.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_is_how_many_limits_fit_the_budget() {
        let mib = 1 << 20;
        let limits = |limit: u64, budget: u64| CompileLimits {
            memory_limit_bytes: limit * mib,
            memory_budget_bytes: budget * mib,
            ..CompileLimits::default()
        };
        assert_eq!(limits(300, 300).concurrency(), 1);
        assert_eq!(limits(300, 899).concurrency(), 2);
        assert_eq!(limits(300, 100).concurrency(), 1, "at least one");
        assert_eq!(limits(0, 100).concurrency(), 100 * mib as usize);
    }

    #[test]
    fn the_gate_lets_in_what_fits_the_budget() {
        let gate = std::sync::Arc::new(CompileGate::new(300));
        let python = gate.enter(250);
        let rust = gate.enter(40);
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let _js = gate.enter(200);
                tx.send(()).unwrap();
            })
        };
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a second large compile waits while the first runs"
        );
        drop(python);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("enters once the first is done");
        waiter.join().unwrap();
        drop(rust);
        // A request over the whole budget is cut to it, so it enters once all is free.
        let _whole = gate.enter(u64::MAX);
    }

    #[test]
    fn exits_are_classified() {
        let exit = |code: i32| ExitStatus::from_raw(code << 8);
        let signal = ExitStatus::from_raw;
        let limit = 64 << 20;
        assert!(matches!(
            classify(exit(0), vec![1], String::new(), limit),
            Ok(ChildOutcome::Artifact(_))
        ));
        assert!(matches!(
            classify(exit(0), vec![], String::new(), limit),
            Err(CompileAborted::Crashed { .. })
        ));
        assert!(matches!(
            classify(exit(1), vec![], "bad section".into(), limit),
            Ok(ChildOutcome::Invalid(m)) if m == "bad section"
        ));
        assert!(matches!(
            classify(exit(3), vec![], String::new(), limit),
            Err(CompileAborted::MemoryLimit { .. })
        ));
        let oom = "memory allocation of 4096 bytes failed".to_string();
        assert!(matches!(
            classify(signal(libc::SIGABRT), vec![], oom, limit),
            Err(CompileAborted::MemoryLimit { .. })
        ));
        assert!(matches!(
            classify(signal(libc::SIGABRT), vec![], "other".into(), limit),
            Err(CompileAborted::Crashed { .. })
        ));
        let killed = classify(signal(libc::SIGKILL), vec![], String::new(), limit).unwrap_err();
        assert!(killed.is_transient(), "{killed}");
    }
}
