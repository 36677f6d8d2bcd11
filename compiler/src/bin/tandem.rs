//! The `tandem` command-line tool.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tandem_compiler::{inspect, tflite};

#[derive(Parser)]
#[command(
    name = "tandem",
    version,
    about = "Ahead-of-time compiler for TFLite models that co-executes layers on CPU and GPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every operator of a model with shapes, key parameters, MFLOPs and splittability.
    Inspect {
        /// The `.tflite` model.
        model: PathBuf,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Inspect { model, json } => {
            let bytes = std::fs::read(&model)
                .with_context(|| format!("cannot read {}", model.display()))?;
            let graph = tflite::read_model(&bytes)
                .with_context(|| format!("invalid model {}", model.display()))?;
            let report = inspect::report(&graph)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", inspect::render_table(&report));
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
