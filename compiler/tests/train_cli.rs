//! `tandem train --add-cpu`: the CPU rows of a second dataset of the same device join the
//! training set (configurations the main dataset has are not taken twice); a dataset of another
//! device is refused with an error naming it. `tandem train --drop-slow-joins`: the GPU rows of
//! configurations measured in a slow handoff phase are left out, their CPU rows kept.
#![cfg(feature = "lightgbm")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use tandem_predictors::dataset::{self, Row};
use tandem_predictors::features::is_cpu;

fn tandem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
}

fn profiles() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../predictors/profiles")
}

fn report(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("json")
}

/// Training rows (train + held-out) per executor in a report.
fn rows_of(r: &serde_json::Value, executor: &str) -> u64 {
    let e = &r["executors"][executor];
    e["train_rows"].as_u64().unwrap_or(0) + e["test_rows"].as_u64().unwrap_or(0)
}

#[test]
fn add_cpu_takes_the_other_datasets_cpu_rows_of_new_configurations_only() {
    // The shipped fresh measurement, split by configuration: A and B overlap in a few.
    let rows = dataset::read(&profiles().join("pocl-1core.fresh.csv.gz")).expect("shipped data");
    let configs: Vec<&str> = rows
        .iter()
        .map(|r| r.config.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let (a_keys, b_keys): (BTreeSet<&str>, BTreeSet<&str>) = (
        configs[..160].iter().copied().collect(),
        configs[150..300].iter().copied().collect(),
    );
    let pick = |keys: &BTreeSet<&str>| -> Vec<Row> {
        rows.iter()
            .filter(|r| keys.contains(r.config.as_str()))
            .cloned()
            .collect()
    };
    let (a, b) = (pick(&a_keys), pick(&b_keys));
    let dir = tempfile::tempdir().expect("tempdir");
    let (pa, pb) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
    dataset::write(&pa, &a).expect("write a");
    dataset::write(&pb, &b).expect("write b");
    std::fs::copy(
        profiles().join("pocl-1core.device.json"),
        dir.path().join("a.device.json"),
    )
    .expect("sidecar");

    let train = |extra: &[&Path], name: &str| {
        let mut cmd = tandem();
        cmd.arg("train")
            .arg(&pa)
            .arg("-o")
            .arg(dir.path().join(format!("{name}.profile")));
        cmd.arg("--report-json")
            .arg(dir.path().join(format!("{name}.json")));
        for e in extra {
            cmd.arg("--add-cpu").arg(e);
        }
        cmd.output().expect("runs")
    };
    let alone = train(&[], "alone");
    assert!(
        alone.status.success(),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );
    let both = train(&[&pb], "both");
    assert!(
        both.status.success(),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
    let (ra, rb) = (
        report(&dir.path().join("alone.json")),
        report(&dir.path().join("both.json")),
    );
    let added: Vec<&Row> = b
        .iter()
        .filter(|r| is_cpu(&r.executor) && !a_keys.contains(r.config.as_str()))
        .collect();
    assert!(!added.is_empty());
    for executor in [
        "cpu_conv_t1",
        "cpu_linear_t1",
        "conv_generic",
        "fully_connected",
    ] {
        let n_added = added.iter().filter(|r| r.executor == executor).count() as u64;
        assert_eq!(
            rows_of(&rb, executor),
            rows_of(&ra, executor) + n_added,
            "{executor}"
        );
        if !is_cpu(executor) {
            assert_eq!(n_added, 0);
        }
    }
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert!(
        stderr.contains(&format!("{} CPU rows", added.len())),
        "{stderr}"
    );

    // A dataset of another device is refused, naming the file.
    let mut other = b.clone();
    for r in &mut other {
        r.device = "some other GPU".into();
    }
    let po = dir.path().join("other.csv");
    dataset::write(&po, &other).expect("write other");
    let missing = train(&[&dir.path().join("nowhere.csv")], "missing");
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("nowhere.csv"), "{stderr}");
    let refused = train(&[&po], "refused");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("other.csv") && stderr.contains("some other GPU"),
        "{stderr}"
    );
}

#[test]
fn drop_slow_joins_leaves_out_the_gpu_rows_of_slow_handoff_configurations_only() {
    // A shipped fresh set of the AMD EPYC, which has a slow handoff phase: 150 configurations.
    let rows = dataset::read(&profiles().join("pocl-1core-epyc.fresh4.csv.gz")).expect("data");
    let configs: BTreeSet<&str> = rows.iter().map(|r| r.config.as_str()).collect();
    let keep: BTreeSet<&str> = configs.into_iter().step_by(3).take(150).collect();
    let rows: Vec<Row> = rows
        .iter()
        .filter(|r| keep.contains(r.config.as_str()))
        .cloned()
        .collect();
    let mut expected = rows.clone();
    let slow = tandem_predictors::quiet::drop_slow_join_gpu_rows(&mut expected, 0.6);
    assert!(slow > 0, "the sample has slow joins");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("d.csv");
    dataset::write(&data, &rows).expect("write");
    std::fs::copy(
        profiles().join("pocl-1core-epyc.device.json"),
        dir.path().join("d.device.json"),
    )
    .expect("sidecar");
    let json = dir.path().join("r.json");
    let out = tandem()
        .arg("train")
        .arg(&data)
        .arg("-o")
        .arg(dir.path().join("p.profile"))
        .arg("--report-json")
        .arg(&json)
        .args(["--drop-slow-joins", "60"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "left out {} short GPU parts of {slow} configurations",
            rows.len() - expected.len()
        )),
        "{stderr}"
    );
    let r = report(&json);
    assert!(
        r["dataset"]
            .as_str()
            .is_some_and(|d| d.ends_with("without the short GPU parts of slow joins (+60%)")),
        "the profile's provenance names the filter: {}",
        r["dataset"]
    );
    let names: BTreeSet<&str> = rows.iter().map(|r| r.executor.as_str()).collect();
    for name in names {
        let count = |v: &[Row]| v.iter().filter(|r| r.executor == name).count() as u64;
        let trained = rows_of(&r, name);
        if trained > 0 {
            assert_eq!(trained, count(&expected), "{name}");
        }
        if is_cpu(name) {
            assert_eq!(count(&expected), count(&rows), "{name} keeps every row");
        }
    }

    for value in ["-5", "NaN", "inf"] {
        let bad = tandem()
            .arg("train")
            .arg(&data)
            .arg("-o")
            .arg(dir.path().join("q.profile"))
            .arg(format!("--drop-slow-joins={value}"))
            .output()
            .expect("runs");
        assert!(!bad.status.success(), "{value} accepted");
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert!(stderr.contains("--drop-slow-joins: "), "{value}: {stderr}");
        assert!(!dir.path().join("q.profile").exists());
    }
}
