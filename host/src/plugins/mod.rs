//! plugins (in progress).
