//! The real `kubewasm run` as a child process, logging JSON lines, in a 512 MiB memory cgroup
//! (below the deploy's limit) where the machine allows one: how the attack tests run the host as
//! `deploy/deployment.yaml` does and watch what the kernel sees (OOM kills, peak memory).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Notify;

use crate::PATIENCE;
use crate::cgroup::{DEPLOY_MEMORY_LIMIT, MemoryCgroup, rss_bytes};

/// What a [`HostProcess`] runs: `BINARY run --plugins PLUGINS --kubeconfig KUBECONFIG
/// --cache-dir CACHE --log-format=json` plus `args`, with `env`.
pub struct HostCommand<'a> {
    /// The `kubewasm` entry point (a test's `env!("CARGO_BIN_EXE_kubewasm-replica")`).
    pub binary: &'a Path,
    /// The plugins directory.
    pub plugins: &'a Path,
    /// The kubeconfig the host reads.
    pub kubeconfig: &'a Path,
    /// The compile cache.
    pub cache_dir: PathBuf,
    /// Names the cgroup (made unique per test process).
    pub name: &'a str,
    /// Further arguments of `run`.
    pub args: Vec<String>,
    /// Further environment.
    pub env: Vec<(String, String)>,
}

/// A `kubewasm run` process, killed (with its cgroup) on drop.
pub struct HostProcess {
    child: tokio::process::Child,
    lines: Arc<Mutex<Vec<Value>>>,
    changed: Arc<Notify>,
    cgroup: Option<MemoryCgroup>,
    peak_rss: Arc<Mutex<u64>>,
    oom_kills_at_start: u64,
    /// Set once the host's stderr closed: it exited.
    closed: Arc<std::sync::atomic::AtomicBool>,
}

/// A free loopback port, for an endpoint of a host process (the host does not log what it
/// bound; the port is free again by the time the host binds it, barring a rare race).
pub fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

impl HostProcess {
    /// `kubewasm run` with the `dir/cache` compile cache and no endpoints: what the compile
    /// tests start.
    pub async fn start_plain(
        binary: &Path,
        dir: &Path,
        plugins: &Path,
        kubeconfig: &Path,
        name: &str,
    ) -> HostProcess {
        HostProcess::start(HostCommand {
            binary,
            plugins,
            kubeconfig,
            cache_dir: dir.join("cache"),
            name,
            args: vec![
                "--metrics-bind-address=0".into(),
                "--health-probe-bind-address=0".into(),
            ],
            env: Vec::new(),
        })
        .await
    }

    /// Starts `cmd`, in a memory cgroup of [`DEPLOY_MEMORY_LIMIT`] where the machine allows one
    /// (else its resident size is sampled); its stderr is collected as JSON lines.
    pub async fn start(cmd: HostCommand<'_>) -> HostProcess {
        let cgroup = MemoryCgroup::create(cmd.name, DEPLOY_MEMORY_LIMIT);
        if cgroup.is_none() {
            eprintln!(
                "no writable memory cgroup on this machine: {} runs without one, its resident \
                 size checked instead",
                cmd.name
            );
        }
        let mut child = tokio::process::Command::new(cmd.binary)
            .arg("run")
            .arg("--plugins")
            .arg(cmd.plugins)
            .arg("--kubeconfig")
            .arg(cmd.kubeconfig)
            .arg("--cache-dir")
            .arg(&cmd.cache_dir)
            .arg("--log-format=json")
            .args(&cmd.args)
            .env("RUST_LOG", "info")
            .envs(cmd.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("host starts");
        let pid = child.id().expect("running");
        if let Some(cg) = &cgroup {
            cg.add(pid).expect("host joins its cgroup");
        }
        let lines = Arc::new(Mutex::new(Vec::new()));
        let changed = Arc::new(Notify::new());
        let stderr = child.stderr.take().unwrap();
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let (lines, changed, closed) = (lines.clone(), changed.clone(), closed.clone());
            tokio::spawn(async move {
                let mut r = BufReader::new(stderr).lines();
                while let Ok(Some(text)) = r.next_line().await {
                    let json = serde_json::from_str(&text).unwrap_or(json!({"unparsed": text}));
                    lines.lock().push(json);
                    changed.notify_waiters();
                }
                closed.store(true, std::sync::atomic::Ordering::SeqCst);
                changed.notify_waiters();
            });
        }
        // Without a cgroup, the resident size is the bound checked (sampled, so a lower bound of
        // the true peak; the cgroup's own peak is exact).
        let peak_rss = Arc::new(Mutex::new(0));
        if cgroup.is_none() {
            let peak = peak_rss.clone();
            tokio::spawn(async move {
                loop {
                    let rss = rss_bytes(pid);
                    if rss == 0 {
                        return;
                    }
                    {
                        let mut p = peak.lock();
                        *p = (*p).max(rss);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
        }
        let oom_kills_at_start = cgroup.as_ref().map_or(0, MemoryCgroup::oom_kills);
        HostProcess {
            child,
            lines,
            changed,
            cgroup,
            peak_rss,
            oom_kills_at_start,
            closed,
        }
    }

    /// The host's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Every line so far (a line that is not JSON as `{"unparsed": text}`).
    pub fn lines(&self) -> Vec<Value> {
        self.lines.lock().clone()
    }

    /// How many lines so far.
    pub fn line_count(&self) -> usize {
        self.lines.lock().len()
    }

    /// Lines from the `from`-th on.
    pub fn lines_since(&self, from: usize) -> Vec<Value> {
        self.lines.lock().iter().skip(from).cloned().collect()
    }

    /// The first line from the `from`-th on that `pred` accepts, awaited up to `patience`;
    /// `None` when none came in time or the host exited.
    pub async fn find_line_since(
        &self,
        from: usize,
        patience: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let notified = self.changed.notified();
            if let Some(l) = self.lines.lock().iter().skip(from).find(|l| pred(l)) {
                return Some(l.clone());
            }
            if self.exited() || tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Like [`HostProcess::find_line_since`], but panics with the last lines and the memory
    /// figures when no line came.
    pub async fn wait_line_since(
        &self,
        from: usize,
        what: &str,
        patience: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        if let Some(l) = self.find_line_since(from, patience, pred).await {
            return l;
        }
        let lines = self.lines.lock();
        let last: Vec<_> = lines.iter().rev().take(30).collect();
        panic!(
            "waiting for {what} (host exited: {}, {}); last lines: {last:#?}",
            self.exited(),
            self.memory_report()
        );
    }

    /// The first line `pred` accepts; panics after three times [`PATIENCE`] (compiles of the
    /// large examples included) or when the host exits.
    pub async fn wait_line(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_line_since(0, what, PATIENCE * 3, pred).await
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Whether the process closed its stderr (it exited): [`HostProcess::alive`] for a shared
    /// borrow.
    pub fn exited(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// OOM kills in the host's cgroup since it started (0 without a cgroup).
    pub fn oom_kills(&self) -> u64 {
        self.cgroup
            .as_ref()
            .map_or(0, |cg| cg.oom_kills() - self.oom_kills_at_start)
    }

    /// The highest memory use seen: the cgroup's peak, else the sampled resident size.
    pub fn peak_bytes(&self) -> u64 {
        match &self.cgroup {
            Some(cg) => cg.peak_bytes(),
            None => *self.peak_rss.lock(),
        }
    }

    /// Memory use now: the cgroup's, else the resident size.
    pub fn current_bytes(&self) -> u64 {
        match &self.cgroup {
            Some(cg) => cg.usage_bytes(),
            None => rss_bytes(self.pid()),
        }
    }

    /// Whether a memory cgroup bounds the process.
    pub fn in_cgroup(&self) -> bool {
        self.cgroup.is_some()
    }

    fn memory_report(&self) -> String {
        format!(
            "memory {} MiB now, peak {} MiB, {} OOM kills, {}",
            self.current_bytes() >> 20,
            self.peak_bytes() >> 20,
            self.oom_kills(),
            if self.in_cgroup() {
                "in a 512 MiB cgroup"
            } else {
                "no cgroup"
            }
        )
    }

    /// Panics unless the host runs, the OOM killer never fired and the peak stayed under the
    /// deploy's limit.
    pub fn assert_alive_and_within_the_limit(&mut self) {
        let report = self.memory_report();
        assert!(self.alive(), "the host process died ({report})");
        assert_eq!(
            self.oom_kills(),
            0,
            "the cgroup's OOM killer fired ({report})"
        );
        assert!(
            self.peak_bytes() < DEPLOY_MEMORY_LIMIT,
            "the host's memory reached the deploy's limit ({report})"
        );
    }

    /// Sends SIGTERM and waits up to `patience` for the exit; the exit status, or `None` when
    /// the host did not stop in time.
    pub async fn terminate(&mut self, patience: Duration) -> Option<std::process::ExitStatus> {
        let pid = self.pid();
        if pid != 0 {
            // SAFETY: kill(2) on our own child's pid; no memory is touched.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        tokio::time::timeout(patience, self.child.wait())
            .await
            .ok()
            .map(|r| r.expect("wait for the host"))
    }
}

/// The string field `name` of a JSON log line (`""` when absent).
pub fn field<'a>(line: &'a Value, name: &str) -> &'a str {
    line.get(name).and_then(Value::as_str).unwrap_or("")
}

/// Matches the line a host writes once `plugin` loaded.
pub fn loaded(plugin: &str) -> impl Fn(&Value) -> bool + '_ {
    move |l| field(l, "plugin") == plugin && field(l, "message") == "plugin loaded"
}

/// `GET path` on `addr` over HTTP/1.0: the status code and body, or `None` when nothing
/// answered within [`PATIENCE`].
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let ask = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: h\r\n\r\n").as_bytes())
            .await?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(PATIENCE, ask).await.ok()?.ok()?;
    let code = answer.get(9..12)?.parse().ok()?;
    let body = answer
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    Some((code, body))
}

/// What `binary rbac` prints for `args` (a plugins folder, options); panics with its stderr
/// when it fails. The one way the tests read the printed RBAC.
pub async fn printed_rbac<S: AsRef<std::ffi::OsStr>>(binary: &str, args: &[S]) -> String {
    let out = tokio::process::Command::new(binary)
        .arg("rbac")
        .args(args)
        .output()
        .await
        .expect("kubewasm rbac runs");
    assert!(
        out.status.success(),
        "kubewasm rbac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("kubewasm rbac prints UTF-8")
}
