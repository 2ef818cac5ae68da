//! workqueue (in progress).
