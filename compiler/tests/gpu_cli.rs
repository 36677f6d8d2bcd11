//! The CLI with GPU plans where the GPU is missing or is not the one the artifact was compiled
//! for: a clear error, or CPU execution with `--fallback-cpu`. Needs an OpenCL device (PoCL).

use std::path::Path;
use std::process::Command;
use tandem_runtime::gpu::device::GpuDevice;

/// `tandem profile` options for a run that only has to work, not to measure well: one point per
/// executor, one repetition, one round, no quiet gate, no pinning.
const QUICK_PROFILE: [&str; 11] = [
    "--points",
    "1",
    "--reps",
    "1",
    "--target-ms",
    "0",
    "--rounds",
    "1",
    "--quiet-gate",
    "0",
    "--no-pin",
];

fn tandem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
}

fn compile_cli(model: &Path, out: &Path, extra: &[&str]) {
    let status = tandem()
        .arg("compile")
        .arg(model)
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .expect("tandem runs");
    assert!(
        status.status.success(),
        "compile failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
}

#[test]
fn missing_device_and_foreign_artifacts_are_errors_unless_falling_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/fixtures/mobile_block_fp32.tflite");
    let plan = dir.path().join("split.tandem");
    compile_cli(&model, &plan, &["--split-fraction", "0.5"]);
    // A machine without OpenCL devices: the ICD loader finds no vendor.
    let empty = dir.path().join("no-vendors");
    std::fs::create_dir(&empty).expect("mkdir");
    let no_device = |args: &[&str]| {
        tandem()
            .arg("run")
            .arg(&plan)
            .args(args)
            .arg("--output-dir")
            .arg(dir.path().join("out"))
            .env("OCL_ICD_VENDORS", &empty)
            .output()
            .expect("tandem runs")
    };
    let out = no_device(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no GPU") && err.contains("OpenCL"), "{err}");
    let out = no_device(&["--fallback-cpu"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("ran on the CPU"));
    // An artifact compiled for another GPU.
    let mut other = GpuDevice::open()
        .expect("an OpenCL device (pocl-opencl-icd)")
        .info;
    other.name = "Adreno (TM) 740".into();
    let json = dir.path().join("other.json");
    std::fs::write(&json, serde_json::to_string(&other).expect("json")).expect("write");
    let foreign = dir.path().join("foreign.tandem");
    compile_cli(
        &model,
        &foreign,
        &["--gpu-only", "--gpu-device", json.to_str().expect("utf-8")],
    );
    let out = tandem().arg("run").arg(&foreign).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("compiled for") && err.contains("Adreno"),
        "{err}"
    );
    let out = tandem()
        .arg("run")
        .arg(&foreign)
        .arg("--fallback-cpu")
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--refactor-depthwise auto` (the default) with the shipped profile: the plan table lists the
/// form of each depthwise layer, `--report-json` has them with every form costed, and the
/// cheapest form is chosen. (A profile without grouped predictors: `tests/tests/dwauto.rs`.)
#[test]
fn auto_depthwise_forms_are_in_the_plan_table_and_report() {
    GpuDevice::open()
        .unwrap_or_else(|e| panic!("an OpenCL device is needed (pocl-opencl-icd): {e}"));
    let dir = tempfile::tempdir().expect("tempdir");
    let model =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/fixtures/mobile_block_fp32.tflite");
    let profile =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../predictors/profiles/pocl-1core.profile");
    let report = dir.path().join("r.json");
    let out = tandem()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(dir.path().join("m.tandem"))
        .arg("--profile")
        .arg(&profile)
        .arg("--report-json")
        .arg(&report)
        .output()
        .expect("tandem runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("depthwise forms"), "{stdout}");
    // The shipped profile has the grouped executors: every form is costed, none is left out.
    assert!(!stdout.contains("could not be costed"), "{stdout}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("JSON");
    let dw = r["depthwise"].as_array().expect("depthwise decisions");
    assert_eq!(dw.len(), 1);
    assert_eq!(dw[0]["node"], 3);
    assert_eq!(dw[0]["channels"], 16);
    let forms: Vec<&str> = dw[0]["alternatives"]
        .as_array()
        .expect("alternatives")
        .iter()
        .map(|a| a["form"].as_str().expect("form"))
        .collect();
    assert_eq!(forms, ["native", "G=4", "G=8", "G=C"]);
    let costs: Vec<f64> = dw[0]["alternatives"]
        .as_array()
        .expect("alternatives")
        .iter()
        .map(|a| a["ms"].as_f64().expect("every form costed"))
        .collect();
    // The chosen form is the cheapest one (ties keep native).
    let cheapest = costs
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| forms[i])
        .expect("forms");
    assert_eq!(dw[0]["chosen"].as_str(), Some(cheapest), "{costs:?}");
}

/// Filters that leave no layer to measure are an error naming them, not an empty dataset.
#[test]
fn profile_refuses_filters_that_leave_nothing_to_measure() {
    assert_profile_refused(
        &["--models", "none", "--samples", "3", "--min-mb", "100000"],
        &["--min-mb 100000", "widen the filters"],
    );
}

/// Asserts that `tandem profile --out D.csv ARGS` fails with an error saying every one of
/// `says`, before it writes anything.
fn assert_profile_refused(args: &[&str], says: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("d.csv");
    let run = tandem()
        .args(["profile", "--out"])
        .arg(&out)
        .args(args)
        .output()
        .expect("tandem runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "accepted: {stderr}");
    for said in says {
        assert!(stderr.contains(said), "no '{said}' in: {stderr}");
    }
    assert!(!out.exists(), "nothing measured");
}

/// `--min-mb` and `--max-mb` bound the working set of every layer measured, and a `--max-mb`
/// below `--min-mb` is refused before anything is measured.
#[test]
fn profile_measures_only_layers_within_the_working_set_bounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("d.csv");
    let profile = |bounds: &[&str]| {
        tandem()
            .args(["profile", "--out"])
            .arg(&out)
            .args([
                "--ops",
                "dwconv,linear",
                "--models",
                "none",
                "--samples",
                "6",
            ])
            .args(["--max-mflops", "5"])
            .args(QUICK_PROFILE)
            .args(bounds)
            .output()
            .expect("runs")
    };
    let (min_mb, max_mb) = (0.05, 0.25);
    let run = profile(&["--min-mb", "0.05", "--max-mb", "0.25"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rows = tandem_predictors::dataset::read_measurements(&out).expect("dataset");
    assert!(!rows.is_empty(), "nothing measured");
    for row in &rows {
        let mb =
            tandem_predictors::measure::working_set_bytes(&row.layer) as f64 / (1 << 20) as f64;
        assert!(
            (min_mb..=max_mb).contains(&mb),
            "{} streams {mb:.3} MB",
            row.config
        );
    }
    assert_profile_refused(
        &["--models", "none", "--min-mb", "16", "--max-mb", "8"],
        &["--max-mb 8", "--min-mb 16"],
    );
}

/// `tandem profile` records this host's processor signature beside the dataset and refuses to
/// resume a dataset whose description records another host, naming both, leaving it as it was.
#[test]
fn profile_records_the_host_and_refuses_to_resume_another_hosts_dataset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("d.csv");
    let sidecar = dir.path().join("d.device.json");
    let run = || {
        tandem()
            .args(["profile", "--out"])
            .arg(&out)
            .args(["--ops", "linear", "--models", "none", "--samples", "2"])
            .args(["--max-mflops", "1"])
            .args(QUICK_PROFILE)
            .output()
            .expect("runs")
    };
    let first = run();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let text = std::fs::read_to_string(&sidecar).expect("sidecar");
    let mut meta: serde_json::Value = serde_json::from_str(&text).expect("json");
    let here = tandem_runtime::profile::host_signature().expect("this host's signature");
    assert_eq!(meta["host"].as_str(), Some(here.as_str()));
    // Resuming on the same host is fine.
    assert!(run().status.success());
    meta["host"] = serde_json::json!("GenuineIntel family 6 model 85 stepping 7");
    std::fs::write(&sidecar, meta.to_string()).expect("write");
    let data = std::fs::read(&out).expect("dataset");
    let refused = run();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "resumed: {stderr}");
    assert!(
        stderr.contains("another host") && stderr.contains("model 85") && stderr.contains(&here),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&out).expect("dataset"),
        data,
        "left as it was"
    );
}

/// `tandem profile --corun` writes one co-run row per splittable configuration (its parts
/// apart and side by side), resumes instead of measuring again, and refuses a file that is not
/// a co-run dataset, naming it.
#[test]
fn profile_corun_measures_splits_side_by_side_and_resumes() {
    use tandem_predictors::corun;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("c.csv");
    let run = || {
        tandem()
            .args(["profile", "--corun", "--out"])
            .arg(&out)
            .args(["--ops", "conv,dwconv,linear", "--models", "none"])
            .args(["--samples", "12", "--max-mflops", "4", "--seed", "5"])
            .args(QUICK_PROFILE)
            .output()
            .expect("runs")
    };
    let first = run();
    let stdout = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let rows = corun::read(&out).expect("a co-run dataset");
    assert!(rows.len() >= 6, "{} rows: {stdout}", rows.len());
    for r in &rows {
        assert!(0 < r.gpu_channels && r.gpu_channels < r.channels, "{r:?}");
        assert_eq!(r.threads, 1);
        for ms in [r.cpu_ms, r.gpu_ms, r.split_ms] {
            assert!(ms > 0.0 && ms.is_finite(), "{r:?}");
        }
        assert!(r.excess().is_some_and(f64::is_finite), "{r:?}");
    }
    assert!(
        stdout.contains(&format!(
            "measured {} configurations side by side",
            rows.len()
        )),
        "{stdout}"
    );
    let again = run();
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success());
    assert!(
        stdout.contains(&format!(
            "measured 0 configurations side by side into {}; {} already there",
            out.display(),
            rows.len()
        )),
        "{stdout}"
    );
    assert_eq!(corun::read(&out).expect("read").len(), rows.len());
    std::fs::write(&out, "config,device,ms\nx,y,1\n").expect("write");
    let bad = run();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        stderr.contains("c.csv") && stderr.contains("tandem profile --corun"),
        "{stderr}"
    );
}
