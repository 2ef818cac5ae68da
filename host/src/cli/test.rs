//! `kubewasm test HANDLER.wasm SCENARIO.yaml...`: runs a handler through scenario files against
//! an in-process API server on a virtual clock, and compares what it did with what the files
//! expect (see [`crate::scenario`]). Exit status: 0 all passed, 1 a difference, 2 bad input.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use crate::scenario::{self, FileResult, RunConfig};

/// How results are printed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// Readable differences.
    Text,
    /// JUnit XML on stdout, for CI.
    Junit,
}

/// Arguments of `kubewasm test`.
#[derive(clap::Args, Debug)]
pub(crate) struct TestArgs {
    /// The handler component (`.wasm`); `NAME.toml` beside it grants what it may do (without
    /// one, everything its describe() asks for is granted, as in `kubewasm dev`).
    pub(crate) handler: PathBuf,
    /// Scenario files (YAML).
    #[arg(required = true)]
    pub(crate) scenarios: Vec<PathBuf>,
    /// Write each scenario's actual transcript back into the file as its expectations
    /// (golden files). Review the result: comments in the file are not kept.
    #[arg(long)]
    pub(crate) update: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) format: Format,
    /// Compiled-handler cache (default: the user's cache folder).
    #[arg(long)]
    pub(crate) cache_dir: Option<PathBuf>,
}

/// Runs the scenarios; see the module doc for the exit status.
pub(crate) fn test(args: TestArgs) -> ExitCode {
    if !args.handler.is_file() {
        eprintln!(
            "kubewasm test: {}: no such handler file",
            args.handler.display()
        );
        return ExitCode::from(2);
    }
    let mut scenarios = Vec::new();
    for path in &args.scenarios {
        match scenario::load(path) {
            Ok(s) => scenarios.push(s),
            Err(e) => {
                eprintln!("kubewasm test: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let config = RunConfig {
        handler: args.handler.clone(),
        cache_dir: args.cache_dir.clone().or_else(super::default_cache_dir),
    };
    let mut results = Vec::new();
    for s in &scenarios {
        let started = Instant::now();
        let outcome = scenario::run(&config, s);
        results.push(FileResult {
            scenario: s,
            outcome,
            elapsed: started.elapsed(),
        });
    }
    if args.update {
        for r in &results {
            if let Some(e) = &r.outcome.error {
                eprintln!(
                    "kubewasm test: not updating {}: {e}",
                    r.scenario.path.display()
                );
                continue;
            }
            match scenario::updated(r.scenario, &r.outcome) {
                Ok(text) => match std::fs::write(&r.scenario.path, text) {
                    Ok(()) => eprintln!("updated {}", r.scenario.path.display()),
                    Err(e) => eprintln!(
                        "kubewasm test: cannot write {}: {e}",
                        r.scenario.path.display()
                    ),
                },
                Err(e) => eprintln!(
                    "kubewasm test: cannot update {}: {e}",
                    r.scenario.path.display()
                ),
            }
        }
    }
    match args.format {
        Format::Text => print!("{}", scenario::text(&results)),
        Format::Junit => print!(
            "{}",
            scenario::junit(&args.handler.display().to_string(), &results)
        ),
    }
    let errors = results.iter().any(|r| r.outcome.error.is_some());
    let failed = results.iter().any(|r| !r.outcome.passed());
    match (args.update, errors, failed) {
        (_, true, _) => ExitCode::from(2),
        (true, false, _) | (false, false, false) => ExitCode::SUCCESS,
        (false, false, true) => ExitCode::FAILURE,
    }
}
