//! The embedded server driven from outside, as clients use it: kube-rs and kube-runtime, the real
//! `kubectl`, ServiceAccount tokens, the kinds it serves and those deploying kubewasm needs, the
//! controllers it runs (garbage collector, namespace lifecycle) and its one Event store. One
//! test binary (one link of kube-rs and the server) holding each suite as a module.

mod controllers;
mod deploy_kinds;
mod events;
mod kinds;
// Not `mod kube`: that name is the kube-rs crate's.
#[path = "kube.rs"]
mod kube_rs;
mod kubectl;
mod kubectl_workloads;
mod tokens;
mod workloads;
