//! Logging macros over the host's log pipeline (tagged with the plugin's name, rate limited).

/// What the macros call: 0 trace … 4 error, to the exported world's `log` import.
#[doc(hidden)]
pub fn write(level: u8, message: &str) {
    (crate::world::imports().log)(level, message);
}

/// Logs at `trace`, `format!`-style.
#[macro_export]
macro_rules! trace { ($($t:tt)*) => { $crate::log::write(0, &::std::format!($($t)*)) }; }
/// Logs at `debug`, `format!`-style.
#[macro_export]
macro_rules! debug { ($($t:tt)*) => { $crate::log::write(1, &::std::format!($($t)*)) }; }
/// Logs at `info`, `format!`-style.
#[macro_export]
macro_rules! info { ($($t:tt)*) => { $crate::log::write(2, &::std::format!($($t)*)) }; }
/// Logs at `warn`, `format!`-style.
#[macro_export]
macro_rules! warn { ($($t:tt)*) => { $crate::log::write(3, &::std::format!($($t)*)) }; }
/// Logs at `error`, `format!`-style.
#[macro_export]
macro_rules! error { ($($t:tt)*) => { $crate::log::write(4, &::std::format!($($t)*)) }; }
