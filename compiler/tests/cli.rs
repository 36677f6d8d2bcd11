//! The `tandem` command line: `inspect` output and exit codes.

use std::path::PathBuf;
use std::process::Command;

fn tandem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/fixtures")
        .join(name)
}

#[test]
fn inspect_json_prints_op_counts_and_ops() {
    let out = tandem()
        .args(["inspect", "--json"])
        .arg(fixture("mobile_block_fp16.tflite"))
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["op_counts"]["DEQUANTIZE"], 8);
    assert_eq!(json["op_counts"]["PRELU"], 1);
    let ops = json["ops"].as_array().expect("ops");
    assert_eq!(ops.len(), 18);
    let conv = ops.iter().find(|o| o["type"] == "CONV_2D").expect("conv");
    assert_eq!(conv["outputs"][0], serde_json::json!([1, 16, 16, 16]));
    assert_eq!(conv["splittable"], true);
}

#[test]
fn inspect_table_lists_ops_and_totals() {
    let out = tandem()
        .arg("inspect")
        .arg(fixture("custom_op.tflite"))
        .output()
        .expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("CUSTOM:BesselK1e"), "{text}");
    assert!(text.contains("total: 4 ops"), "{text}");
}

#[test]
fn bad_files_exit_non_zero_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("broken.tflite");
    let mut bytes = std::fs::read(fixture("sparse_fc.tflite")).expect("fixture");
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&bad, bytes).expect("write");
    let out = tandem().arg("inspect").arg(&bad).output().expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken.tflite") && err.contains("corrupt TFLite flatbuffer"),
        "{err}"
    );

    let out = tandem()
        .args(["inspect", "/no/such/model.tflite"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /no/such/model.tflite"));
}
