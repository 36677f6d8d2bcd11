//! Prints the slowest steps of a model on the CPU: `cargo run --release --example profile_steps -- MODEL.tflite [THREADS]`.
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
    let model = Model::from_artifact(compile_file(
        &path,
        &tandem_compiler::lower::CompileOptions::cpu(threads, ""),
    )?);
    let inputs = inputs_for(&model, &[])?;
    let mut session = Session::new(&model, threads);
    let mut total: Vec<(String, f64)> = session.step_times(&inputs)?;
    for _ in 0..4 {
        for (t, (_, ms)) in total.iter_mut().zip(session.step_times(&inputs)?) {
            t.1 += ms;
        }
    }
    let mut by_kind: std::collections::BTreeMap<String, f64> = Default::default();
    for (name, ms) in &total {
        *by_kind
            .entry(name.split(' ').next().unwrap_or("").to_string())
            .or_default() += ms / 5.0;
    }
    let sum: f64 = total.iter().map(|t| t.1 / 5.0).sum();
    println!("total {sum:.2} ms");
    for (k, ms) in &by_kind {
        println!("{k:20} {ms:8.2} ms");
    }
    total.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, ms) in total.iter().take(12) {
        println!("{name:30} {:8.3} ms", ms / 5.0);
    }
    Ok(())
}
