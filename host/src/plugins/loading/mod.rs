//! Loading: turns a plugin file (and its `NAME.toml`) into a running version, or refuses it
//! with an error that names the file.
//!
//! [`lifecycle`] orders load, hot swap and unload per plugin; [`describe`] compiles a file and
//! asks the guest what it wants; [`manifest`] reads the operator's settings; [`subscriptions`]
//! validates what `describe()` subscribes to; the grants room decides whether the operator's
//! grants cover what it asks; [`watcher`] keeps the set of plugins equal to the files in a folder;
//! [`sources`] keeps plugins equal to OCI artifacts a sources file names.
//!
//! Knows nothing of how notifications reach a guest (that is `delivery`) nor of what a guest
//! may do once running (that is `capabilities`): it hands both a described version.

pub(crate) mod describe;
pub(crate) mod error;
pub(crate) mod lifecycle;
pub(crate) mod manifest;
pub(crate) mod sources;
pub(crate) mod subscriptions;
pub(crate) mod watcher;
