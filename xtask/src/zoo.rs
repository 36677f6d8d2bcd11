//! Zoo tasks: writing the models, regenerating reference outputs, and the demo.

use crate::setup::{python_env, run};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use tandem_compiler::ir::Graph;
use tandem_compiler::{inspect, tflite};

/// Writes the named zoo models (all when `names` is empty) to `out/<name>.tflite`.
pub fn write_zoo(out: &Path, names: &[String]) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let models = tandem_models::all();
    for name in names {
        if !models.iter().any(|m| m.name == name) {
            let known: Vec<&str> = models.iter().map(|m| m.name).collect();
            bail!("no zoo model '{name}'; the zoo has {}", known.join(", "));
        }
    }
    for model in models
        .iter()
        .filter(|m| names.is_empty() || names.iter().any(|n| n == m.name))
    {
        let path = out.join(format!("{}.tflite", model.name));
        let bytes = model
            .tflite()
            .with_context(|| format!("building {}", model.name))?;
        std::fs::write(&path, &bytes)?;
        eprintln!(
            "zoo: wrote {} ({:.1} MB)",
            path.display(),
            bytes.len() as f64 / 1e6
        );
    }
    Ok(())
}

/// Runs each small zoo model and each float fixture on its seeded input in the official
/// interpreter, and stores input and outputs under `models/refs/<name>/` and
/// `models/fixtures/refs/<name>/`.
pub fn write_references(root: &Path) -> Result<()> {
    let python = python_env(root)?;
    let tmp = tempfile::tempdir()?;
    for model in tandem_models::all()
        .into_iter()
        .filter(|m| m.small && m.runs_in_interpreter)
    {
        let graph = model.graph()?;
        let model_path = tmp.path().join(format!("{}.tflite", model.name));
        std::fs::write(&model_path, tflite::write_model(&graph)?)?;
        write_reference(
            &python,
            root,
            &model_path,
            &graph,
            &root.join("models/refs").join(model.name),
        )?;
    }
    for fixture in FLOAT_FIXTURES {
        let model_path = root
            .join("models/fixtures")
            .join(format!("{fixture}.tflite"));
        let graph = tflite::read_model(&std::fs::read(&model_path)?)
            .with_context(|| format!("reading {}", model_path.display()))?;
        write_reference(
            &python,
            root,
            &model_path,
            &graph,
            &root.join("models/fixtures/refs").join(fixture),
        )?;
    }
    Ok(())
}

/// Writes the seeded inputs of `graph` and the interpreter's outputs for them into `dir`.
fn write_reference(
    python: &Path,
    root: &Path,
    model_path: &Path,
    graph: &Graph,
    dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut inputs = Vec::new();
    for (i, array) in tandem_models::inputs::seeded_inputs(graph, tandem_models::SEED)
        .iter()
        .enumerate()
    {
        let path = dir.join(format!("input_{i}.npy"));
        std::fs::write(&path, array.to_bytes())?;
        inputs.push(path);
    }
    run(Command::new(python)
        .arg(root.join("tools/litert.py"))
        .arg("run")
        .arg(model_path)
        .arg(dir)
        .args(&inputs))?;
    eprintln!("refs: wrote {}", dir.display());
    Ok(())
}

/// Converter-produced float fixtures that the official interpreter runs (the int8 and custom-op
/// fixtures are for reading and inspection only).
pub const FLOAT_FIXTURES: [&str; 4] = [
    "mobile_block_fp16",
    "mobile_block_fp32",
    "sparse_fc",
    "dynamic_batch",
];

/// The main job on the bundled default (MobileNetV2): build it, inspect it, compile it, run it on
/// the CPU and in the official interpreter on the same seeded input, and compare; then compile
/// it with the shipped profile's plan, run CPU only, GPU only and the plan, check that their
/// outputs agree and print the plan table and the measured latencies.
pub fn demo(root: &Path) -> Result<()> {
    let python = python_env(root)?;
    let model =
        tandem_models::by_name("mobilenet_v2").context("mobilenet_v2 is missing from the zoo")?;
    let out = root.join("zoo");
    write_zoo(&out, &[model.name.to_string()])?;
    let path = out.join("mobilenet_v2.tflite");
    println!("== tandem inspect {}", path.display());
    let graph = tflite::read_model(&std::fs::read(&path)?)?;
    print!("{}", inspect::render_table(&inspect::report(&graph)?));

    let artifact_path = out.join("mobilenet_v2.tandem");
    let artifact = tandem_compiler::run::compile_file(&path, &Default::default())?;
    std::fs::write(&artifact_path, artifact.encode()?)?;
    println!(
        "\n== tandem compile → {} ({} steps, arena {:.1} MB)",
        artifact_path.display(),
        artifact.steps.len(),
        artifact.arena_bytes as f64 / 1e6
    );

    let loaded = tandem_runtime::session::Model::load_file(&artifact_path)?;
    let inputs = tandem_models::inputs::seeded_inputs(&graph, tandem_models::SEED);
    let report = tandem_compiler::run::run_model(
        &loaded,
        &inputs,
        &tandem_runtime::session::SessionOptions::default(),
        20,
        Some(&out.join("demo_outputs")),
    )?;
    let latency = report.latency_ms.context("no timing")?;
    let ours = tandem_runtime::npy::NpyArray::parse(&std::fs::read(
        out.join("demo_outputs/output_0.npy"),
    )?)?;

    let reference_dir = tempfile::tempdir()?;
    let mut args = vec![
        root.join("tools/litert.py").into_os_string(),
        "run".into(),
        path.clone().into_os_string(),
        reference_dir.path().into(),
    ];
    let input_path = reference_dir.path().join("input_0.npy");
    std::fs::write(&input_path, inputs[0].to_bytes())?;
    args.push(input_path.into_os_string());
    run(Command::new(&python).args(&args))?;
    let reference = tandem_runtime::npy::NpyArray::parse(&std::fs::read(
        reference_dir.path().join("output_0.npy"),
    )?)?;
    let (a, r) = (
        ours.to_f32().context("f32")?,
        reference.to_f32().context("f32")?,
    );
    let scale = r.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = a
        .iter()
        .zip(&r)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
        / scale;
    println!(
        "\n== tandem run (CPU, 1 thread): median {:.2} ms, min {:.2} ms over {} runs",
        latency.median, latency.min, latency.runs
    );
    println!(
        "== max relative difference from the official interpreter: {err:.2e} (tolerance 1e-4)"
    );
    if err > 1e-4 {
        bail!("the CPU result differs from the official interpreter by {err:e}");
    }
    println!("\n== co-execution: CPU only, GPU only and the planned split");
    // 41 interleaved rounds (about 2 s): with 5, this shared host's slow phases moved the
    // plan's ratio to CPU only between 0.94x and 1.08x from one demo to the next.
    crate::bench_coexec::demo_coexec(&path, &inputs, 41)?;
    Ok(())
}
