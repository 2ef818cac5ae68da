//! informer (in progress).
