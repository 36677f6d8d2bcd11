//! `cargo xtask`: tandem's single entry point for setup, code generation, the zoo, reference
//! outputs, the demo, the tests and fuzzing.

mod bench;
mod bench_coexec;
mod bench_depthwise;
mod bench_predictors;
mod bench_sync;
mod codegen;
mod fuzz;
mod setup;
mod zoo;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the project-local tools (Python venv with flatc and the official interpreter) and
    /// the OpenCL runtime (Debian's PoCL and ICD loader).
    Setup,
    /// Regenerate the TFLite bindings from compiler/schema/tflite.fbs with the pinned flatc.
    Codegen {
        /// Fail if the committed bindings differ from freshly generated ones.
        #[arg(long)]
        check: bool,
    },
    /// Write the zoo models as .tflite files.
    Zoo {
        /// Output folder.
        #[arg(long, default_value = "zoo")]
        out: PathBuf,
        /// Models to write (default: all).
        names: Vec<String>,
    },
    /// Regenerate the committed reference outputs of the small zoo models with the official
    /// interpreter.
    Refs,
    /// The main job on a bundled default model.
    Demo,
    /// Compile a .tflite model with the planner (shipped profile of this machine's GPU, else
    /// CPU only), print the plan table and write MODEL.tandem beside the model.
    Compile {
        /// The `.tflite` model.
        model: PathBuf,
        /// Output artifact (default: the model's path with extension `.tandem`).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Plan with this device profile instead of the shipped one.
        #[arg(long)]
        profile: Option<PathBuf>,
        /// CPU threads to plan for.
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// Run every test (installs what they need first).
    Test,
    /// Benchmarks (`cpu`: tandem's CPU runtime against the official interpreter on the zoo;
    /// `depthwise`: diagonalwise refactorization against native depthwise on MobileNetV1/V2;
    /// `sync`: per-wait CPU–GPU synchronisation overhead, SVM polling against event waits;
    /// `gemm`: the packed-weight GEMM kernels against the `gemm` crate, GFLOP/s;
    /// `dwrows`: the CPU depthwise loop with and without prefetching rows, large and small layers;
    /// `dwgrid`: GPU depthwise parts with the channel blocks outermost and innermost in the grid;
    /// `predictors`: time to sweep every candidate split of a layer with the shipped profile;
    /// `coexec`: planned and grid-search splits against single devices, per layer and end to
    /// end on resnet18, resnet34, inception_v3, vgg16; writes docs/evaluation.md).
    Bench {
        /// What to benchmark: `cpu`, `gemm`, `dwrows`, `dwgrid`, `depthwise`, `sync`,
        /// `predictors` or `coexec`.
        what: String,
        /// Zoo models (default: mobilenet_v2, resnet18, resnet34, inception_v3, vgg16).
        #[arg(long, value_delimiter = ',')]
        models: Vec<String>,
        /// Thread counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        threads: Vec<usize>,
        /// Interleaved rounds (each: `runs` runs of tandem, then of the interpreter); for `gemm`,
        /// ten times this many samples per kernel and shape.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// `coexec`: held-out random layers of each kind (conv, linear).
        #[arg(long, default_value_t = 12)]
        layers: usize,
        /// `depthwise`: a smoke run (one round of one run, two layers per model; writes no
        /// docs).
        #[arg(long)]
        quick: bool,
    },
    /// Fuzz with cargo-fuzz: the .tflite reader (read_tflite), the artifact loader and runtime
    /// (load_artifact), or both in turn (all).
    Fuzz {
        /// Target: read_tflite, load_artifact or all.
        #[arg(long, default_value = "all")]
        target: String,
        /// Seconds to run each target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
}

fn run(task: Task) -> Result<()> {
    let root = setup::repo_root();
    match task {
        Task::Setup => {
            setup::python_env(&root)?;
            setup::opencl()?;
            setup::lightgbm_build(&root)?;
        }
        Task::Codegen { check } => codegen::codegen(&root, check)?,
        Task::Zoo { out, names } => zoo::write_zoo(&root.join(out), &names)?,
        Task::Refs => zoo::write_references(&root)?,
        Task::Demo => {
            // One PoCL thread (the shipped profile's setting); before OpenCL starts.
            // SAFETY: no other thread exists yet in this process.
            unsafe { tandem_runtime::profile::limit_pocl_threads() };
            setup::opencl()?;
            zoo::demo(&root)?
        }
        Task::Compile {
            model,
            output,
            profile,
            threads,
        } => {
            let source = match profile {
                Some(p) => tandem_compiler::run::PlanSource::Profile(p),
                None => tandem_compiler::run::PlanSource::Default,
            };
            let gpu = tandem_compiler::run::gpu_for_planning(None)?;
            let base = tandem_compiler::lower::CompileOptions::cpu(threads, "");
            let planned = tandem_compiler::run::compile_planned(&model, &base, &source, gpu)?;
            if let Some(note) = &planned.note {
                eprintln!("note: {note}");
            }
            if let Some(r) = &planned.report {
                print!("{}", r.table());
            }
            let out = output.unwrap_or_else(|| model.with_extension("tandem"));
            std::fs::write(&out, planned.artifact.encode()?)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
            println!("compiled {} → {}", model.display(), out.display());
        }
        Task::Test => {
            let python = setup::python_env(&root)?;
            setup::opencl()?;
            let build_env = setup::lightgbm_build(&root)?;
            eprintln!(
                "test: cargo test --workspace (official interpreter: {})",
                python.display()
            );
            setup::run(
                Command::new(env!("CARGO"))
                    .args(["test", "--workspace", "--release"])
                    .env("TANDEM_PYTHON", &python)
                    .envs(build_env)
                    .current_dir(&root),
            )?;
        }
        Task::Fuzz { target, seconds } => fuzz::fuzz(&root, &target, seconds)?,
        Task::Bench {
            what,
            models,
            threads,
            rounds,
            runs,
            json,
            layers,
            quick,
        } => {
            match what.as_str() {
                "cpu" => {}
                "gemm" => return bench::bench_gemm(10 * rounds),
                "dwrows" => return bench::bench_depthwise_rows(10 * rounds),
                "dwgrid" => {
                    setup::opencl()?;
                    return bench::bench_depthwise_grid(2 * rounds);
                }
                "depthwise" => {
                    if !quick {
                        setup::opencl()?;
                    }
                    return bench_depthwise::bench_depthwise(&root, rounds, runs, json, quick);
                }
                "predictors" => return bench_predictors::bench_predictors(&root, json),
                "coexec" => {
                    setup::opencl()?;
                    let models = if models.is_empty() {
                        ["resnet18", "resnet34", "inception_v3", "vgg16"]
                            .map(String::from)
                            .to_vec()
                    } else {
                        models
                    };
                    return bench_coexec::bench_coexec(&root, &models, layers, rounds, json);
                }
                "sync" => {
                    setup::opencl()?;
                    return bench_sync::bench_sync(&root, rounds.max(3) * runs.max(1) * 4, json);
                }
                _ => anyhow::bail!(
                    "unknown benchmark '{what}'; available: cpu, gemm, dwrows, dwgrid, depthwise, sync, predictors, coexec"
                ),
            }
            let models = if models.is_empty() {
                [
                    "mobilenet_v2",
                    "resnet18",
                    "resnet34",
                    "inception_v3",
                    "vgg16",
                ]
                .map(String::from)
                .to_vec()
            } else {
                models
            };
            bench::bench_cpu(&root, &models, &threads, rounds, runs, json)?
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
