//! The embedded Kubernetes API server (in progress).
