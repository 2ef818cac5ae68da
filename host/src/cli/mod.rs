//! The `kubewasm` command line (in progress).

/// Entry point of the binary.
pub fn main() -> std::process::ExitCode {
    std::process::ExitCode::SUCCESS
}
