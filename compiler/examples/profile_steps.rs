//! Prints where a model's CPU time goes, per operator kind and for the slowest steps:
//! `cargo run --release --example profile_steps -- MODEL.tflite [THREADS] [RUNS]`.
//!
//! Each step's time is its minimum over `RUNS` runs (default 20): on a shared machine the minimum
//! is the least noisy estimate of what the step costs.
use tandem_compiler::run::{compile_file, inputs_for};
use tandem_runtime::session::{Model, Session};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = std::path::PathBuf::from(
        args.get(1)
            .map(String::as_str)
            .unwrap_or("zoo/mobilenet_v2.tflite"),
    );
    let threads = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(1);
    let runs: usize = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(20);
    let model = Model::from_artifact(compile_file(
        &path,
        &tandem_compiler::lower::CompileOptions::cpu(threads, ""),
    )?);
    let inputs = inputs_for(&model, &[])?;
    let mut session = Session::new(&model, threads);
    let mut best: Vec<(String, f64)> = session.step_times(&inputs)?;
    for _ in 1..runs.max(1) {
        for (t, (_, ms)) in best.iter_mut().zip(session.step_times(&inputs)?) {
            t.1 = t.1.min(ms);
        }
    }
    let mut whole = f64::INFINITY;
    for _ in 0..runs.max(1) {
        let start = std::time::Instant::now();
        session.run(&inputs)?;
        whole = whole.min(start.elapsed().as_secs_f64() * 1e3);
    }
    println!("whole run: minimum {whole:.2} ms over {runs} runs");
    let mut by_kind: std::collections::BTreeMap<String, f64> = Default::default();
    for (name, ms) in &best {
        *by_kind
            .entry(name.split(' ').next().unwrap_or("").to_string())
            .or_default() += ms;
    }
    let sum: f64 = best.iter().map(|t| t.1).sum();
    println!("total {sum:.2} ms (sum of per-step minima over {runs} runs, {threads} thread(s))");
    for (k, ms) in &by_kind {
        println!("{k:20} {ms:8.2} ms");
    }
    best.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, ms) in best.iter().take(15) {
        println!("{name:30} {ms:8.3} ms");
    }
    Ok(())
}
