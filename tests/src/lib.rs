//! Shared helpers of tandem's end-to-end tests: the official interpreter as oracle, zoo model
//! files, fixtures, and output comparison.
//!
//! Tests that need the interpreter fail (they are never skipped) when it is missing; `cargo xtask
//! test` installs it into the project venv and points `TANDEM_PYTHON` at it.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use tandem_runtime::npy::NpyArray;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The Python that has the official interpreter (`TANDEM_PYTHON`, else the project venv).
pub fn python() -> PathBuf {
    let python = std::env::var_os("TANDEM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/python"));
    assert!(
        python.exists(),
        "the official interpreter is not installed ({} is missing): run `cargo xtask test`, which installs it",
        python.display()
    );
    python
}

fn litert(args: &[&std::ffi::OsStr]) -> Result<String> {
    let out = Command::new(python())
        .arg(repo_root().join("tools/litert.py"))
        .args(args)
        .output()
        .context("cannot start the official interpreter")?;
    if !out.status.success() {
        bail!(
            "official interpreter failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Operator names in the official interpreter's execution order (custom ops by custom name).
pub fn interpreter_ops(model: &Path) -> Result<Vec<String>> {
    let text = litert(&["ops".as_ref(), model.as_os_str()])?;
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).with_context(|| format!("bad ops listing {last}"))
}

/// Runs `model` once in the official interpreter (1 thread) on `inputs`; returns its outputs.
pub fn interpreter_run(model: &Path, inputs: &[NpyArray]) -> Result<Vec<NpyArray>> {
    let dir = tempfile::tempdir()?;
    let mut args: Vec<std::ffi::OsString> =
        vec!["run".into(), model.into(), dir.path().join("out").into()];
    for (i, input) in inputs.iter().enumerate() {
        let path = dir.path().join(format!("input_{i}.npy"));
        std::fs::write(&path, input.to_bytes())?;
        args.push(path.into());
    }
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    litert(&refs)?;
    read_outputs(&dir.path().join("out"))
}

/// Reads `output_0.npy`, `output_1.npy`, ... from `dir`.
pub fn read_outputs(dir: &Path) -> Result<Vec<NpyArray>> {
    let mut outputs = Vec::new();
    loop {
        let path = dir.join(format!("output_{}.npy", outputs.len()));
        if !path.exists() {
            return Ok(outputs);
        }
        outputs.push(NpyArray::parse(&std::fs::read(&path)?)?);
    }
}

/// Reads `input_*.npy` files from `dir` in order.
pub fn read_inputs(dir: &Path) -> Result<Vec<NpyArray>> {
    let mut inputs = Vec::new();
    loop {
        let path = dir.join(format!("input_{}.npy", inputs.len()));
        if !path.exists() {
            return Ok(inputs);
        }
        inputs.push(NpyArray::parse(&std::fs::read(&path)?)?);
    }
}

/// The committed converter-produced fixtures.
pub fn fixtures() -> Vec<PathBuf> {
    let dir = repo_root().join("models/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "tflite"));
    files.sort();
    files
}

/// Counts names (the shape of `op_counts`), mapping interpreter custom-op names to `CUSTOM:<name>`.
pub fn count_interpreter_ops(names: &[String]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for name in names {
        let builtin = name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        let key = if builtin {
            name.clone()
        } else {
            format!("CUSTOM:{name}")
        };
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

/// Largest |a − b| over the largest |b|, the relative error tandem reports everywhere.
pub fn relative_error(actual: &[f32], reference: &[f32]) -> f32 {
    assert_eq!(actual.len(), reference.len(), "output sizes differ");
    let scale = reference
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    let diff = actual
        .iter()
        .zip(reference)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}
