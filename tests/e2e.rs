//! End-to-end tests (in progress).
