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

/// The main job: for now, build the default zoo model (MobileNetV2) and print its inspection.
pub fn demo(root: &Path) -> Result<()> {
    let model =
        tandem_models::by_name("mobilenet_v2").context("mobilenet_v2 is missing from the zoo")?;
    let out = root.join("zoo");
    write_zoo(&out, &[model.name.to_string()])?;
    let path = out.join("mobilenet_v2.tflite");
    eprintln!("demo: tandem inspect {}", path.display());
    let bytes = std::fs::read(&path)?;
    let graph = tflite::read_model(&bytes)?;
    print!("{}", inspect::render_table(&inspect::report(&graph)?));
    Ok(())
}
