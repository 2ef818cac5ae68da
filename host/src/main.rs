//! The `kubewasm` binary: everything lives in the library so tests and benchmarks share it.

fn main() -> std::process::ExitCode {
    kubewasm::cli::main()
}
