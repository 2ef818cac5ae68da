//! The `kubewasm` command line as a binary of this crate, so multi-process tests can start
//! replicas (`CARGO_BIN_EXE_kubewasm-replica`): the same entry point as the `kubewasm` binary.

fn main() -> std::process::ExitCode {
    kubewasm::cli::main()
}
