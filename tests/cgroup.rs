//! A memory cgroup for one test's host process, so attack tests run the host under 512 MiB
//! (tighter than the 768 MiB `deploy/deployment.yaml` gives it) and observe what the kernel observes: whether the
//! limit was hit, whether the OOM killer fired, the peak. Works on cgroup v2 (the unified
//! hierarchy, where this process's cgroup delegates the memory controller) and on cgroup v1
//! (a writable `memory` hierarchy); where neither is writable, [`MemoryCgroup::create`] answers
//! `None` and a test falls back to [`rss_bytes`] assertions.

use std::fs;
use std::path::{Path, PathBuf};

/// The memory limit attack tests run the host under: 512 MiB, below the 768 MiB of the host's
/// container in `deploy/deployment.yaml`, so surviving here leaves the deploy room to spare.
pub const DEPLOY_MEMORY_LIMIT: u64 = 512 << 20;

/// Which cgroup interface a [`MemoryCgroup`] speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// A child memory cgroup with a hard limit; removed (its processes killed) on drop.
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
    version: Version,
}

impl MemoryCgroup {
    /// A new cgroup `name` (made unique with this process's id) under this process's own
    /// memory cgroup, limited to `limit_bytes` of memory and no swap; `None` where the machine
    /// does not let this process make one.
    pub fn create(name: &str, limit_bytes: u64) -> Option<MemoryCgroup> {
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        let leaf = format!("kubewasm-test-{name}-{}", std::process::id());
        // v1: "N:memory:/path"; v2: "0::/path".
        let v1 = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')))
        });
        if let Some(parent) = v1
            && let Some(cg) = Self::make(&parent.join(&leaf), Version::V1, limit_bytes)
        {
            return Some(cg);
        }
        let v2 = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(|p| Path::new("/sys/fs/cgroup").join(p.trim_start_matches('/')))?;
        Self::make(&v2.join(&leaf), Version::V2, limit_bytes)
    }

    fn make(dir: &Path, version: Version, limit: u64) -> Option<MemoryCgroup> {
        fs::create_dir(dir).ok()?;
        let cg = MemoryCgroup {
            dir: dir.to_path_buf(),
            version,
        };
        // The limit must hold; the swap limit only where the kernel accounts swap, so the
        // process has no swap to hide in (its failure is not an error).
        let limited = match version {
            Version::V1 => {
                let ok = cg.write("memory.limit_in_bytes", &limit.to_string());
                cg.write("memory.memsw.limit_in_bytes", &limit.to_string());
                ok
            }
            Version::V2 => {
                let ok = cg.write("memory.max", &limit.to_string());
                cg.write("memory.swap.max", "0");
                ok
            }
        };
        limited.then_some(cg)
    }

    fn write(&self, file: &str, value: &str) -> bool {
        fs::write(self.dir.join(file), value).is_ok()
    }

    fn read(&self, file: &str) -> String {
        fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    /// Moves process `pid` (and what it forks later) into the cgroup.
    pub fn add(&self, pid: u32) -> std::io::Result<()> {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }

    /// How many processes the OOM killer killed in the cgroup.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        counter(&self.read(file), "oom_kill")
    }

    /// Highest memory use the cgroup saw, in bytes (0 where the kernel does not say).
    pub fn peak_bytes(&self) -> u64 {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        self.read(file).trim().parse().unwrap_or(0)
    }

    /// Current memory use, in bytes.
    pub fn usage_bytes(&self) -> u64 {
        let file = match self.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        };
        self.read(file).trim().parse().unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for pid in self.read("cgroup.procs").lines() {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                // SAFETY: kill(2) with a pid read from the cgroup; no memory is touched.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        // The kernel removes a cgroup only once its processes are gone; a few tries suffice.
        for _ in 0..100 {
            if fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::yield_now();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// `key N` from a flat-keyed cgroup file (`memory.events`); 0 when the key is absent.
pub fn counter(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Resident set size of process `pid` in bytes (`VmRSS`), for machines without a writable
/// memory cgroup; 0 once the process is gone.
pub fn rss_bytes(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib << 10)
}
