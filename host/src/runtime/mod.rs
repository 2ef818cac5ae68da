//! runtime (in progress).
