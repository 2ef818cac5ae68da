//! How many outgoing HTTP requests may be open: per plugin (`http-max-inflight`) and for the
//! whole host, so that no plugin can take the file descriptors the API server, the informers
//! and the endpoints need. A request holds a [`ConnectionPermit`] from before its DNS lookup
//! until its connection closes (its body read or dropped, or the call that sent it ended).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prometheus_client::metrics::gauge::Gauge;

/// Default for [`HttpPolicy::max_inflight`](super::HttpPolicy::max_inflight).
pub const DEFAULT_HTTP_MAX_INFLIGHT: usize = 32;
/// Share of the process's soft file-descriptor limit outgoing connections may use (one in
/// four); the rest stays for the API server, informers, endpoints and the compile cache.
const FD_SHARE: usize = 4;
/// Bounds of the derived host-wide limit.
const MIN_HOST_CONNECTIONS: usize = 16;
const MAX_HOST_CONNECTIONS: usize = 4096;

/// The host-wide bound when the configuration names none: a quarter of the soft
/// `RLIMIT_NOFILE` (256 at the common soft limit of 1024), between 16 and 4096.
pub fn default_host_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    (soft / FD_SHARE).clamp(MIN_HOST_CONNECTIONS, MAX_HOST_CONNECTIONS)
}

/// A count of open requests against a limit; clones share it.
#[derive(Clone, Debug)]
pub(crate) struct OpenCount {
    open: Arc<AtomicUsize>,
    limit: usize,
}

impl OpenCount {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            open: Arc::default(),
            limit,
        }
    }

    fn try_take(&self) -> bool {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_back(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Which bound refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The plugin's `http-max-inflight`.
    Plugin(usize),
    /// The host-wide bound.
    Host(usize),
}

impl Refused {
    /// The metric label.
    pub(crate) fn bound(self) -> &'static str {
        match self {
            Refused::Plugin(_) => "plugin",
            Refused::Host(_) => "host",
        }
    }

    /// The error text the guest and the log see.
    pub(crate) fn message(self) -> String {
        match self {
            Refused::Plugin(n) => {
                format!("connection limit reached: http-max-inflight ({n}) requests already open")
            }
            Refused::Host(n) => format!(
                "connection limit reached: the host's {n} outgoing connections are all open"
            ),
        }
    }
}

/// One open request's place in both counts and the plugin's gauge; given back on drop.
pub(crate) struct ConnectionPermit {
    plugin: OpenCount,
    host: Option<OpenCount>,
    gauge: Gauge,
}

impl ConnectionPermit {
    /// Takes a place in `plugin` and `host` (if the runtime keeps a host-wide count), or says
    /// which was full.
    pub(crate) fn take(
        plugin: &OpenCount,
        host: Option<&OpenCount>,
        gauge: &Gauge,
    ) -> Result<Self, Refused> {
        if !plugin.try_take() {
            return Err(Refused::Plugin(plugin.limit));
        }
        if let Some(host) = host
            && !host.try_take()
        {
            plugin.give_back();
            return Err(Refused::Host(host.limit));
        }
        gauge.inc();
        Ok(Self {
            plugin: plugin.clone(),
            host: host.cloned(),
            gauge: gauge.clone(),
        })
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.gauge.dec();
        self.plugin.give_back();
        if let Some(host) = &self.host {
            host.give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_bounded_per_plugin_and_host_wide_and_given_back() {
        let host = OpenCount::new(3);
        let (a, b) = (OpenCount::new(2), OpenCount::new(2));
        let gauge = Gauge::default();
        let a1 = ConnectionPermit::take(&a, Some(&host), &gauge).unwrap();
        let _a2 = ConnectionPermit::take(&a, Some(&host), &gauge).unwrap();
        assert_eq!(
            ConnectionPermit::take(&a, Some(&host), &gauge).err(),
            Some(Refused::Plugin(2))
        );
        let _b1 = ConnectionPermit::take(&b, Some(&host), &gauge).unwrap();
        assert_eq!(
            ConnectionPermit::take(&b, Some(&host), &gauge).err(),
            Some(Refused::Host(3)),
            "the host-wide bound holds across plugins"
        );
        assert_eq!(gauge.get(), 3);
        drop(a1);
        assert_eq!(gauge.get(), 2);
        assert!(ConnectionPermit::take(&b, Some(&host), &gauge).is_ok());
    }

    #[test]
    fn the_host_bound_is_a_share_of_the_fd_limit() {
        let n = default_host_connections();
        assert!(
            (MIN_HOST_CONNECTIONS..=MAX_HOST_CONNECTIONS).contains(&n),
            "{n}"
        );
    }
}
