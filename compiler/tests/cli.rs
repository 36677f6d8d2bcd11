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

#[test]
fn compile_then_run_writes_outputs_and_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let artifact = dir.path().join("fp16.tandem");
    let out = tandem()
        .args(["compile", "--cpu-only", "--threads", "2", "-o"])
        .arg(&artifact)
        .arg(fixture("mobile_block_fp16.tflite"))
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refs = fixture("refs/mobile_block_fp16");
    let outputs = dir.path().join("out");
    let out = tandem()
        .arg("run")
        .arg(&artifact)
        .arg("--input")
        .arg(refs.join("input_0.npy"))
        .arg("--output-dir")
        .arg(&outputs)
        .args(["--repeat", "3", "--json"])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let latency = &json["latency_ms"];
    assert!(latency["min"].as_f64().expect("min") > 0.0);
    assert!(latency["median"].as_f64().expect("median") >= latency["min"].as_f64().expect("min"));
    let ours = std::fs::read(outputs.join("output_0.npy")).expect("output written");
    let reference = std::fs::read(refs.join("output_0.npy")).expect("reference");
    let values = |b: &[u8]| {
        tandem_runtime::npy::NpyArray::parse(b)
            .expect("npy")
            .to_f32()
            .expect("f32")
    };
    let (a, r) = (values(&ours), values(&reference));
    let scale = r.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(a.iter().zip(&r).all(|(x, y)| (x - y).abs() <= 1e-4 * scale));
}

#[test]
fn run_on_a_tflite_compiles_in_memory_and_rejects_wrong_inputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = tandem()
        .arg("run")
        .arg(fixture("sparse_fc.tflite"))
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("[1, 32]"));
    let wrong = dir.path().join("wrong.npy");
    std::fs::write(
        &wrong,
        tandem_runtime::npy::NpyArray::from_f32(vec![1, 63], &[0.5; 63]).to_bytes(),
    )
    .expect("write");
    let out = tandem()
        .arg("run")
        .arg(fixture("sparse_fc.tflite"))
        .arg("--input")
        .arg(&wrong)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("input 0") && err.contains("[1, 64]") && err.contains("[1, 63]"),
        "{err}"
    );
    let out = tandem()
        .arg("run")
        .arg(fixture("conv_int8.tflite"))
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("quantized models are not supported yet"));
    let garbage = dir.path().join("garbage.tandem");
    std::fs::write(&garbage, b"TANDEM\0\x1a but then nothing sensible").expect("write");
    let out = tandem().arg("run").arg(&garbage).output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("garbage.tandem"));
}

#[test]
fn dispatch_json_lists_kernels_per_op() {
    let out = tandem()
        .args([
            "dispatch",
            "--gpu",
            "adreno-650",
            "--precision",
            "f16",
            "--json",
        ])
        .arg(fixture("mobile_block_fp32.tflite"))
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON list");
    let ops = json.as_array().expect("list");
    let conv = ops.iter().find(|o| o["op"] == "CONV_2D").expect("a conv");
    let kernel = &conv["kernels"][0];
    for field in ["name", "block", "grid", "work_group", "groups"] {
        assert!(!kernel[field].is_null(), "missing {field}: {kernel}");
    }
    let out = tandem()
        .args(["dispatch", "--gpu", "no-such-gpu"])
        .arg(fixture("sparse_fc.tflite"))
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("adreno-740"));
}

#[test]
fn refactor_depthwise_emits_a_tflite_without_depthwise_ops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let emitted = dir.path().join("grouped.tflite");
    // The fp16 fixture's depthwise filter sits behind DEQUANTIZE: the passes fold it first.
    let out = tandem()
        .arg("compile")
        .arg(fixture("mobile_block_fp16.tflite"))
        .arg("-o")
        .arg(dir.path().join("m.tandem"))
        .args(["--refactor-depthwise", "4", "--emit-tflite"])
        .arg(&emitted)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 depthwise convolutions refactorized"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = tandem()
        .args(["inspect", "--json"])
        .arg(&emitted)
        .output()
        .expect("runs");
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(
        json["op_counts"]["DEPTHWISE_CONV_2D"],
        serde_json::Value::Null
    );
    assert_eq!(json["op_counts"]["CONV_2D"], 3);
    let ops = json["ops"].as_array().expect("ops");
    let grouped = ops
        .iter()
        .find(|o| o["type"] == "CONV_2D" && o["inputs"][1] == serde_json::json!([16, 3, 3, 4]))
        .expect("a grouped conv with 4 input channels per group");
    assert_eq!(grouped["outputs"][0], serde_json::json!([1, 16, 16, 16]));
}

#[test]
fn a_group_size_that_does_not_divide_the_channels_fails_naming_the_operator() {
    let dir = tempfile::tempdir().expect("tempdir");
    for mode in ["3", "32"] {
        let out = tandem()
            .arg("run")
            .arg(fixture("mobile_block_fp32.tflite"))
            .args(["--refactor-depthwise", mode])
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("DEPTHWISE_CONV_2D")
                && err.contains(&format!(
                    "group size {mode} does not divide the 16 input channels"
                )),
            "{err}"
        );
    }
    let out = tandem()
        .arg("compile")
        .arg(fixture("mobile_block_fp32.tflite"))
        .arg("-o")
        .arg(dir.path().join("m.tandem"))
        .args(["--refactor-depthwise", "zero"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a depthwise refactorization mode"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn profile_rejects_a_quiet_gate_or_a_size_that_is_not_a_number_of_its_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    for option in [
        "--quiet-gate",
        "--sync-gate",
        "--memory-gate",
        "--min-mb",
        "--max-mb",
    ] {
        for bad in ["-1", "NaN", "inf"] {
            let out = tandem()
                .args(["profile", "--out"])
                .arg(dir.path().join("d.csv"))
                .arg(format!("{option}={bad}"))
                .output()
                .expect("runs");
            assert!(!out.status.success(), "{option} {bad} accepted");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(option), "{bad}: {stderr}");
            assert!(!dir.path().join("d.csv").exists(), "nothing measured");
        }
    }
}

#[test]
fn profile_rejects_a_focus_that_is_not_an_executor_of_the_ops() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A typo, and a real executor of an op kind not profiled.
    for (ops, bad) in [("conv,dwconv", "conv_wino"), ("conv", "depthwise_3x3")] {
        let out = tandem()
            .args(["profile", "--out"])
            .arg(dir.path().join("d.csv"))
            .args(["--ops", ops, "--focus", bad])
            .output()
            .expect("runs");
        assert!(!out.status.success(), "--focus {bad} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&format!("--focus: '{bad}'")), "{stderr}");
        assert!(
            stderr.contains("conv_winograd"),
            "lists the executors: {stderr}"
        );
        assert!(!dir.path().join("d.csv").exists(), "nothing measured");
    }
}
