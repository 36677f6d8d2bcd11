//! `cargo xtask fuzz`: runs the cargo-fuzz target for the .tflite reader, installing cargo-fuzz
//! if needed. Crashes land in fuzz/artifacts/; fix them and add them to the regression tests.

use crate::setup::run;
use anyhow::Result;
use std::path::Path;
use std::process::Command;

pub fn fuzz(root: &Path, seconds: u64) -> Result<()> {
    let has_cargo_fuzz = Command::new(env!("CARGO"))
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_cargo_fuzz {
        eprintln!("fuzz: installing cargo-fuzz from crates.io");
        run(Command::new(env!("CARGO")).args(["install", "--locked", "cargo-fuzz"]))?;
    }
    crate::zoo::write_zoo(
        &root.join("fuzz/corpus/read_tflite"),
        &[
            "tiny_elementwise".into(),
            "tiny_conv".into(),
            "tiny_shape".into(),
            "tiny_weights".into(),
            "tiny_transpose_conv_bias".into(),
        ],
    )?;
    // cargo-fuzz needs unstable rustc flags; RUSTC_BOOTSTRAP lets the stable toolchain accept them.
    run(Command::new(env!("CARGO"))
        .args([
            "fuzz",
            "run",
            "read_tflite",
            "--",
            &format!("-max_total_time={seconds}"),
            "-max_len=65536",
        ])
        .env("RUSTC_BOOTSTRAP", "1")
        .current_dir(root))
}
