//! Run the embedded API server standalone (same flags as `kubewasm apiserver`):
//! `cargo run --release -p apiserver --example serve -- --port 8011`.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: apiserver::cli::ApiserverArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    apiserver::cli::run(Cli::parse().args).await
}
