//! The `tandem` command-line tool.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tandem_compiler::lower::{CompileOptions, Plan};
use tandem_compiler::passes::RefactorDepthwise;
use tandem_compiler::{inspect, run as runner, tflite};
use tandem_runtime::session::{GpuMemory, SessionOptions, SyncMode};

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
    /// Measure conv, depthwise and linear layers on this machine (dataset for `tandem train`).
    Profile(tandem_compiler::predict_cli::ProfileArgs),
    /// Train a device profile (one LightGBM predictor per executor) from a dataset.
    Train(tandem_compiler::predict_cli::TrainArgs),
    /// Score a device profile's predictions on a dataset (MAPE, share within ±10%).
    Eval(tandem_compiler::predict_cli::EvalArgs),
    /// Calibrate a device profile to the device's speed today from a short recent measurement
    /// (one factor per executor).
    Calibrate(tandem_compiler::predict_cli::CalibrateArgs),
    /// Distil a profile's long forests (corrections of corrections) into short ones, so that
    /// the compile-time sweep stays fast.
    Flatten(tandem_compiler::predict_cli::FlattenArgs),
    /// Compile a .tflite model into a .tandem artifact.
    Compile {
        /// The `.tflite` model.
        model: PathBuf,
        /// Output artifact (default: the model's path with extension `.tandem`).
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        plan: PlanArgs,
        /// CPU threads to plan for.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Depthwise convolutions as block-diagonal convolutions: off, auto (planner's choice;
        /// native until the planner lands), full (one dense CONV_2D each) or a group size G.
        #[arg(long, default_value = "auto")]
        refactor_depthwise: RefactorDepthwise,
        /// Also write the graph that gets compiled (after the passes and the refactorization) as
        /// a .tflite file, with the plan stored as metadata entry `tandem_plan`.
        #[arg(long, value_name = "OUT.tflite")]
        emit_tflite: Option<PathBuf>,
        /// Write the plan (every step, its split and predicted costs, totals) as JSON.
        #[arg(long, value_name = "R.json")]
        report_json: Option<PathBuf>,
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
        /// The plan, when MODEL is a `.tflite` compiled in memory.
        #[command(flatten)]
        plan: PlanArgs,
        #[command(flatten)]
        exec: ExecArgs,
        /// For a .tflite model: depthwise refactorization, as for `compile`.
        #[arg(long, default_value = "auto")]
        refactor_depthwise: RefactorDepthwise,
    },
}

/// Which device runs each operator. Without a flag, `compile` plans with the shipped profile of
/// the GPU (CPU only, with a note, when none matches) and `run` of a .tflite runs on the CPU.
#[derive(clap::Args, Clone, Debug)]
struct PlanArgs {
    /// Every operator on the CPU.
    #[arg(long, conflicts_with_all = ["gpu_only", "split_fraction", "split", "profile", "oracle"])]
    cpu_only: bool,
    /// Plan with this device profile's predictions (default: the shipped profile of the GPU).
    #[arg(long, value_name = "P.profile", conflicts_with_all = ["gpu_only", "split_fraction", "split", "oracle"])]
    profile: Option<PathBuf>,
    /// Plan from measurements of every candidate split on this machine (grid search) instead
    /// of predictions. Sets POCL_MAX_PTHREAD_COUNT=1 when unset and pins the CPU side to core 0
    /// and PoCL to core 1 (the one-core-each setting).
    #[arg(long, conflicts_with_all = ["gpu_only", "split_fraction", "split"])]
    oracle: bool,
    /// Oracle mode: at most this many candidates per layer (0: every multiple of the GPU
    /// kernel's vector width).
    #[arg(long, default_value_t = 0, value_name = "N")]
    oracle_candidates: usize,
    /// Every operator on the GPU.
    #[arg(long, conflicts_with_all = ["split_fraction", "split"])]
    gpu_only: bool,
    /// Every conv, depthwise and fully-connected layer gets round(F·C) GPU output channels
    /// (rounded to the GPU kernel's vector width); other operators run on the CPU.
    #[arg(long, value_name = "F", conflicts_with = "split")]
    split_fraction: Option<f64>,
    /// GPU output channels for single nodes (node indices as `tandem inspect` prints them);
    /// other operators run on the CPU.
    #[arg(long, value_name = "NODE=G,…")]
    split: Option<String>,
    /// Compile for the GPU described in this JSON file instead of this machine's OpenCL device.
    #[arg(long, value_name = "FILE.json")]
    gpu_device: Option<PathBuf>,
    /// Plan at this machine's speed now: time the profile's reference layer on both sides (a
    /// few seconds) and scale each side's predictions by the profile's speed model (`tandem
    /// train` on several datasets). For a shared host whose speed moves between hours. Needs
    /// a profile with a speed model and this machine's OpenCL device; sets
    /// POCL_MAX_PTHREAD_COUNT=1 when unset and pins the sides like --oracle.
    #[arg(long, conflicts_with_all = ["cpu_only", "gpu_only", "split_fraction", "split", "oracle", "gpu_device"])]
    speed_probe: bool,
}

impl PlanArgs {
    /// The planner's source when no hand-made plan flag is given.
    fn source(&self) -> Option<runner::PlanSource> {
        if self.cpu_only || self.gpu_only || self.split_fraction.is_some() || self.split.is_some() {
            return None;
        }
        let source = if self.oracle {
            runner::PlanSource::Oracle {
                max_candidates: self.oracle_candidates,
                options: Default::default(),
            }
        } else if let Some(p) = &self.profile {
            runner::PlanSource::Profile(p.clone())
        } else {
            runner::PlanSource::Default
        };
        Some(if self.speed_probe {
            runner::PlanSource::AtSpeedNow(Box::new(source))
        } else {
            source
        })
    }

    fn plan(&self) -> Result<Plan> {
        Ok(if self.gpu_only {
            Plan::GpuOnly
        } else if let Some(f) = self.split_fraction {
            Plan::SplitFraction(f)
        } else if let Some(nodes) = &self.split {
            Plan::parse_nodes(nodes)?
        } else {
            Plan::CpuOnly
        })
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum SyncArg {
    /// Flags in shared virtual memory polled by both devices.
    Polling,
    /// OpenCL events (clWaitForEvents).
    Event,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum MemoryArg {
    /// Fine-grained SVM when the device has it, else device buffers.
    Auto,
    /// Device buffers with explicit copies.
    Buffers,
}

/// How a plan runs.
#[derive(clap::Args, Clone, Debug)]
struct ExecArgs {
    /// How the devices wait for each other.
    #[arg(long, value_enum, default_value = "polling")]
    sync: SyncArg,
    /// Where activations live when the GPU is used.
    #[arg(long, value_enum, default_value = "auto")]
    gpu_memory: MemoryArg,
    /// Run on the CPU when the GPU is missing or fails (with a warning), instead of failing.
    #[arg(long)]
    fallback_cpu: bool,
    /// Longest wait for the other device, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    deadline_ms: u64,
}

impl ExecArgs {
    fn options(&self, threads: usize) -> SessionOptions {
        SessionOptions {
            threads,
            sync: match self.sync {
                SyncArg::Polling => SyncMode::Polling,
                SyncArg::Event => SyncMode::EventWait,
            },
            memory: match self.gpu_memory {
                MemoryArg::Auto => GpuMemory::Auto,
                MemoryArg::Buffers => GpuMemory::Buffers,
            },
            cpu_only: false,
            fallback_cpu: self.fallback_cpu,
            deadline: std::time::Duration::from_millis(self.deadline_ms),
            fault: None,
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Dispatch(args) => tandem_compiler::dispatch::cli::run(&args)?,
        Command::Profile(args) => tandem_compiler::predict_cli::profile(&args)?,
        Command::Train(args) => tandem_compiler::predict_cli::train(&args)?,
        Command::Eval(args) => tandem_compiler::predict_cli::eval(&args)?,
        Command::Calibrate(args) => tandem_compiler::predict_cli::calibrate(&args)?,
        Command::Flatten(args) => tandem_compiler::predict_cli::flatten(&args)?,
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
            plan,
            threads,
            refactor_depthwise,
            emit_tflite,
            report_json,
        } => {
            let base = CompileOptions {
                threads,
                refactor_depthwise,
                ..Default::default()
            };
            let (artifact, report) = match plan.source() {
                Some(source) => {
                    if matches!(
                        source,
                        runner::PlanSource::Oracle { .. } | runner::PlanSource::AtSpeedNow(_)
                    ) && std::env::var_os("POCL_MAX_PTHREAD_COUNT").is_none()
                    {
                        // SAFETY: no other thread exists yet; OpenCL has not started.
                        unsafe { tandem_runtime::profile::limit_pocl_threads() };
                    }
                    let gpu = runner::gpu_for_planning(plan.gpu_device.as_deref())?;
                    // A device described by a file is not known to be this host's.
                    let host = match plan.gpu_device {
                        Some(_) => None,
                        None => tandem_runtime::profile::host_signature(),
                    };
                    let planned =
                        runner::compile_planned_on(&model, &base, &source, gpu, host.as_deref())?;
                    if let Some(note) = &planned.note {
                        eprintln!("note: {note}");
                    }
                    if let Some(r) = &planned.report {
                        print!("{}", r.table());
                    }
                    (planned.artifact, planned.report)
                }
                None => {
                    let p = plan.plan()?;
                    let gpu = runner::resolve_gpu(&p, plan.gpu_device.as_deref())?;
                    let options = CompileOptions {
                        plan: p,
                        gpu,
                        ..base
                    };
                    (runner::compile_file(&model, &options)?, None)
                }
            };
            if let Some(path) = &report_json {
                let text = serde_json::to_string_pretty(&report)?;
                std::fs::write(path, text + "\n")
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            if let Some(out) = &emit_tflite {
                let forms = report
                    .as_ref()
                    .filter(|r| !r.depthwise.is_empty())
                    .map(|r| tandem_compiler::dwauto::forms_of(&r.depthwise));
                let rewritten = runner::emit_tflite(
                    &model,
                    refactor_depthwise,
                    forms.as_deref(),
                    out,
                    Some(&artifact),
                )?;
                println!(
                    "wrote {} ({rewritten} depthwise convolutions refactorized, plan as metadata \
                     '{}')",
                    out.display(),
                    runner::PLAN_METADATA
                );
            }
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
            plan,
            exec,
            refactor_depthwise,
        } => {
            if plan.profile.is_some() || plan.oracle || plan.speed_probe {
                anyhow::bail!(
                    "run takes hand-made plans only; plan with `tandem compile` (--profile, \
                     --oracle, --speed-probe) and run the .tandem it writes"
                );
            }
            let p = plan.plan()?;
            let is_tflite = model.extension().is_some_and(|e| e == "tflite");
            let gpu = if is_tflite {
                runner::resolve_gpu(&p, plan.gpu_device.as_deref())?
            } else {
                None
            };
            let compile_options = CompileOptions {
                threads,
                plan: p,
                gpu,
                refactor_depthwise,
                ..Default::default()
            };
            let loaded = runner::load_model(&model, &compile_options)?;
            let values = runner::inputs_for(&loaded, &inputs)?;
            let options = exec.options(threads);
            let report =
                runner::run_model(&loaded, &values, &options, repeat, output_dir.as_deref())?;
            if let Some(reason) = &report.fallback {
                eprintln!("warning: the plan's GPU steps ran on the CPU: {reason}");
            }
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
