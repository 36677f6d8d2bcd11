//! How a model's latency depends on the pause before each run: CPU only, GPU only and the
//! shipped profile's plan, each run after pauses from none to 300 ms (the thread spins through
//! the pause, so the core stays busy and touches no memory), in the one-core-each setting of
//! `cargo xtask demo`; then the three timed in the demo's interleaved order.
//!
//! `cargo run --release --example run_gaps -- MODEL.tflite [RUNS]` prints one line per plan
//! kind: the median of `RUNS` (default 25) runs after each pause.
//!
//! The predictors are trained on layers repeated back to back, so they predict the first
//! column. On the shared host this was written on, the caches (even the core's own L2) lose
//! the model's data within milliseconds of a pause, and a run after one is slower
//! (`docs/evaluation.md`).
use anyhow::{Context, Result};
use std::time::{Duration, Instant};
use tandem_compiler::lower::{CompileOptions, Plan};
use tandem_compiler::run::{compile_file, compile_planned, inputs_for, PlanSource};
use tandem_runtime::npy::NpyArray;
use tandem_runtime::profile::{median, split_cores};
use tandem_runtime::session::{Model, Session, SessionOptions};

/// The pauses before each run, in microseconds.
const PAUSES_US: [u64; 7] = [0, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000];

/// Runs `session` once and returns its wall time in ms.
fn timed(session: &mut Session, inputs: &[NpyArray]) -> Result<f64> {
    let start = Instant::now();
    session.run(inputs)?;
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

/// Spins for `us` microseconds: the core stays busy and touches no memory.
fn pause(us: u64) {
    let until = Instant::now() + Duration::from_micros(us);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

fn main() -> Result<()> {
    // SAFETY: no other thread exists yet; OpenCL has not started.
    unsafe { tandem_runtime::profile::limit_pocl_threads() };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = std::path::PathBuf::from(
        args.first()
            .context("usage: run_gaps MODEL.tflite [RUNS]")?,
    );
    let runs: usize = match args.get(1) {
        Some(r) => r
            .parse()
            .ok()
            .filter(|&r| r > 0)
            .context("RUNS: a positive count")?,
        None => 25,
    };
    let gpu = tandem_runtime::gpu::device::GpuDevice::open()
        .context("run_gaps needs an OpenCL device (pocl-opencl-icd)")?
        .info;
    let base = CompileOptions::cpu(1, "");
    let cpu = Model::from_artifact(compile_file(&path, &base)?);
    let gpu_only = Model::from_artifact(compile_file(
        &path,
        &CompileOptions {
            plan: Plan::GpuOnly,
            gpu: Some(gpu.clone()),
            ..base.clone()
        },
    )?);
    let plan = Model::from_artifact(
        compile_planned(&path, &base, &PlanSource::Default, Some(gpu))?.artifact,
    );
    let inputs = inputs_for(&cpu, &[])?;
    let options = SessionOptions {
        threads: 1,
        ..SessionOptions::default()
    };
    let names = ["CPU only", "GPU only", "plan"];
    let mut sessions = [&cpu, &gpu_only, &plan]
        .iter()
        .map(|m| Session::with_options(m, options.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    for s in &mut sessions {
        s.run(&inputs)?;
    }
    split_cores();
    println!(
        "median ms of {runs} runs after a pause of (ms): {}",
        PAUSES_US
            .map(|us| format!("{:>6}", us as f64 / 1e3))
            .join(" ")
    );
    for (name, s) in names.iter().zip(&mut sessions) {
        let mut line = format!("{name:>8}");
        for us in PAUSES_US {
            let mut t = Vec::with_capacity(runs);
            for _ in 0..runs {
                pause(us);
                t.push(timed(s, &inputs)?);
            }
            line += &format!(" {:>6.2}", median(&mut t));
        }
        println!("{line}");
    }
    let mut t = vec![Vec::with_capacity(runs); sessions.len()];
    for _ in 0..runs {
        for (s, t) in sessions.iter_mut().zip(&mut t) {
            t.push(timed(s, &inputs)?);
        }
    }
    let m: Vec<f64> = t.iter_mut().map(|t| median(t)).collect();
    println!(
        "interleaved as the demo times them: CPU only {:.2}, GPU only {:.2}, plan {:.2} ms",
        m[0], m[1], m[2]
    );
    Ok(())
}
