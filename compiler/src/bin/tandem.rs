//! The `tandem` command-line tool.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tandem_compiler::passes::RefactorDepthwise;
use tandem_compiler::{inspect, run as runner, tflite};

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
    /// Emulate the stock TFLite GPU delegate: the kernels, block sizes, grids and work groups it
    /// would run for every operator on a given GPU.
    Dispatch(tandem_compiler::dispatch::cli::DispatchArgs),
    /// Compile a .tflite model into a .tandem artifact.
    Compile {
        /// The `.tflite` model.
        model: PathBuf,
        /// Output artifact (default: the model's path with extension `.tandem`).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Place every operator on the CPU (the only placement available so far).
        #[arg(long)]
        cpu_only: bool,
        /// CPU threads to plan for.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Depthwise convolutions as block-diagonal convolutions: off, auto (planner's choice;
        /// native until the planner lands), full (one dense CONV_2D each) or a group size G.
        #[arg(long, default_value = "auto")]
        refactor_depthwise: RefactorDepthwise,
        /// Also write the graph that gets compiled (after the passes and the refactorization) as
        /// a .tflite file.
        #[arg(long, value_name = "OUT.tflite")]
        emit_tflite: Option<PathBuf>,
    },
    /// Run a .tandem artifact (or a .tflite model, compiled in memory) on .npy inputs.
    Run {
        /// The `.tandem` artifact or `.tflite` model.
        model: PathBuf,
        /// Input `.npy` files in the model's input order (default: seeded random inputs).
        #[arg(long = "input", num_args = 1..)]
        inputs: Vec<PathBuf>,
        /// Folder to write `output_0.npy`, `output_1.npy`, … into.
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// CPU threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Time this many runs after a warm-up and report min and median.
        #[arg(long, default_value_t = 0)]
        repeat: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// For a .tflite model: depthwise refactorization, as for `compile`.
        #[arg(long, default_value = "auto")]
        refactor_depthwise: RefactorDepthwise,
    },
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Dispatch(args) => tandem_compiler::dispatch::cli::run(&args)?,
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
        Command::Compile {
            model,
            output,
            cpu_only: _,
            threads,
            refactor_depthwise,
            emit_tflite,
        } => {
            if let Some(out) = &emit_tflite {
                let rewritten = runner::emit_tflite(&model, refactor_depthwise, out)?;
                println!(
                    "wrote {} ({rewritten} depthwise convolutions refactorized)",
                    out.display()
                );
            }
            let artifact = runner::compile_file(&model, threads, refactor_depthwise)?;
            let output = output.unwrap_or_else(|| model.with_extension("tandem"));
            let bytes = artifact.encode()?;
            std::fs::write(&output, &bytes)
                .with_context(|| format!("cannot write {}", output.display()))?;
            println!(
                "compiled {} → {} ({} steps, {:.1} MB, arena {:.1} MB)",
                model.display(),
                output.display(),
                artifact.steps.len(),
                bytes.len() as f64 / 1e6,
                artifact.arena_bytes as f64 / 1e6
            );
        }
        Command::Run {
            model,
            inputs,
            output_dir,
            threads,
            repeat,
            json,
            refactor_depthwise,
        } => {
            let loaded = runner::load_model(&model, threads, refactor_depthwise)?;
            let values = runner::inputs_for(&loaded, &inputs)?;
            let report =
                runner::run_model(&loaded, &values, threads, repeat, output_dir.as_deref())?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                for o in &report.outputs {
                    match &o.path {
                        Some(p) => println!("output '{}' {:?} → {}", o.name, o.shape, p.display()),
                        None => println!("output '{}' {:?}", o.name, o.shape),
                    }
                }
                if let Some(l) = &report.latency_ms {
                    println!(
                        "latency over {} runs ({} threads): median {:.3} ms, min {:.3} ms",
                        l.runs, threads, l.median, l.min
                    );
                }
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away (`| head`)
    // instead of failing to print.
    #[cfg(unix)]
    // SAFETY: restoring the default SIGPIPE disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
