//! Delayed adds (client-go delaying queue). Instead of a background goroutine, waiting items
//! are promoted by whoever looks at the queue (`get`, `len`), and a waiting `get` sleeps until
//! the earliest ready time, so no task has to be spawned and a paused clock drives it exactly.

use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::queue::QueueState;

/// Schedules `item` after `d`; `d == 0` is an immediate add. Returns true if waiters must wake.
pub(crate) fn add_after<T: Clone + Eq + Hash>(
    st: &mut QueueState<T>,
    item: T,
    d: Duration,
) -> bool {
    if st.shutting_down {
        return false;
    }
    if d.is_zero() {
        return st.add(item);
    }
    st.add_waiting(item, Instant::now() + d);
    // A new earliest deadline must re-arm sleeping getters.
    true
}
