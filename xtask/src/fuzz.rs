//! `cargo xtask fuzz`: runs the cargo-fuzz targets, installing cargo-fuzz if needed, after seeding
//! their corpora from the zoo's tiny models. Crashes land in fuzz/artifacts/<target>/; fix them
//! and add them to the regression tests (compiler/tests/regressions/ for the reader,
//! runtime/tests/regressions/ for the artifact loader).

use crate::setup::run;
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use tandem_compiler::lower::{compile, CompileOptions};

/// The fuzz targets, in the order `--target all` runs them.
pub const TARGETS: [&str; 2] = ["read_tflite", "load_artifact"];

/// The zoo models whose `.tflite` files (read_tflite) and compiled artifacts (load_artifact) seed
/// the corpora: small enough for `-max_len=65536`.
const SEEDS: [&str; 5] = [
    "tiny_elementwise",
    "tiny_conv",
    "tiny_shape",
    "tiny_weights",
    "tiny_transpose_conv_bias",
];

/// Runs `target` (one of [`TARGETS`], or `all` for each in turn) for `seconds` seconds each.
pub fn fuzz(root: &Path, target: &str, seconds: u64) -> Result<()> {
    let targets: Vec<&str> = match target {
        "all" => TARGETS.to_vec(),
        t if TARGETS.contains(&t) => vec![t],
        t => bail!(
            "no fuzz target '{t}'; the targets are {} (or all)",
            TARGETS.join(", ")
        ),
    };
    let has_cargo_fuzz = Command::new(env!("CARGO"))
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_cargo_fuzz {
        eprintln!("fuzz: installing cargo-fuzz from crates.io");
        run(Command::new(env!("CARGO")).args(["install", "--locked", "cargo-fuzz"]))?;
    }
    for target in targets {
        let corpus = root.join("fuzz/corpus").join(target);
        seed(target, &corpus)?;
        // cargo-fuzz needs unstable rustc flags; RUSTC_BOOTSTRAP lets the stable toolchain
        // accept them.
        run(Command::new(env!("CARGO"))
            .args(["fuzz", "run", target])
            .arg(&corpus)
            .args([
                "--",
                &format!("-max_total_time={seconds}"),
                "-max_len=65536",
                "-timeout=10",
            ])
            .env("RUSTC_BOOTSTRAP", "1")
            .current_dir(root))?;
    }
    Ok(())
}

/// Writes the seed inputs of `target` into `corpus` (the same bytes every time).
fn seed(target: &str, corpus: &Path) -> Result<()> {
    let names: Vec<String> = SEEDS.iter().map(|s| s.to_string()).collect();
    if target == "read_tflite" {
        return crate::zoo::write_zoo(corpus, &names);
    }
    std::fs::create_dir_all(corpus)?;
    for name in SEEDS {
        let graph = tandem_models::by_name(name)
            .with_context(|| format!("zoo model {name}"))?
            .graph()?;
        let artifact = compile(graph, &CompileOptions::cpu(1, name))
            .with_context(|| format!("compiling {name}"))?;
        let path = corpus.join(format!("{name}.tandem"));
        std::fs::write(&path, artifact.encode()?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "fuzz: seeded {} with {} artifacts",
        corpus.display(),
        SEEDS.len()
    );
    Ok(())
}
