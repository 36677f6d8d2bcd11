//! `tandem train --add-cpu`: the CPU rows of a second dataset of the same device join the
//! training set (configurations the main dataset has are not taken twice); a dataset of another
//! device is refused with an error naming it. `tandem train --drop-slow-joins`: the GPU rows of
//! configurations measured in a slow handoff phase are left out, their CPU rows kept.
//! `tandem train --corun`: the contention of split steps. `tandem train --base`: the predictors
//! of another host's profile corrected where cross-validation prefers it. `tandem train --add`:
//! further datasets pooled, each at the base's speed with `--base-speed`. `tandem train
//! --latency least`: the fastest repetitions fitted, and scored so by `tandem eval`. `tandem
//! train --speed-from`: the speed model fitted on later datasets; `--speed-of`: every dataset at
//! one profile's speed; `--point-speed`: each point at its dataset's median moment. `tandem
//! flatten`: long
//! forests distilled into short ones.
#![cfg(feature = "lightgbm")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use tandem_predictors::dataset::{self, Row};
use tandem_predictors::features::is_cpu;

fn tandem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
}

/// Runs `cmd`, which must succeed (its stderr shown when it does not); its output.
fn run_ok(cmd: &mut Command) -> std::process::Output {
    let run = cmd.output().expect("tandem runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    run
}

/// Runs `cmd`, which must succeed (its stderr shown when it does not); its stderr.
fn succeeds(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run_ok(cmd).stderr).into_owned()
}

/// Runs `cmd`, which must fail; its stderr (the error).
fn fails(cmd: &mut Command) -> String {
    let run = cmd.output().expect("tandem runs");
    assert!(!run.status.success(), "succeeded");
    String::from_utf8_lossy(&run.stderr).into_owned()
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

/// The rows of the first `n` configurations (in key order) of the shipped dataset `shipped`,
/// written to `dir/NAME.csv` beside a copy of the shipped device description `sidecar`: a
/// small training set. Returns its path and rows.
fn first_configs(
    shipped: &str,
    sidecar: &str,
    n: usize,
    dir: &Path,
    name: &str,
) -> (PathBuf, Vec<Row>) {
    let rows = dataset::read(&profiles().join(shipped)).expect("shipped data");
    let keep: BTreeSet<&str> = rows
        .iter()
        .map(|r| r.config.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .take(n)
        .collect();
    let some: Vec<Row> = rows
        .iter()
        .filter(|r| keep.contains(r.config.as_str()))
        .cloned()
        .collect();
    let data = dir.join(format!("{name}.csv"));
    dataset::write(&data, &some).expect("write");
    std::fs::copy(
        profiles().join(sidecar),
        dir.join(format!("{name}.device.json")),
    )
    .expect("sidecar");
    (data, some)
}

/// The host's processor signature that `tandem profile` records beside a dataset goes into the
/// profile's provenance, where `tandem compile` matches it against the machine's; a dataset
/// recorded before signatures gives a profile without one.
#[test]
fn the_profile_records_the_host_its_dataset_was_measured_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (sidecar, want) in [
        (
            "pocl-1core-epyc-zen4.device.json",
            Some("AuthenticAMD family 25 model 17 stepping 1"),
        ),
        ("pocl-1core-epyc.device.json", None),
    ] {
        let (data, _) = first_configs(
            "pocl-1core-epyc-zen4.fresh1.csv.gz",
            sidecar,
            30,
            dir.path(),
            "h",
        );
        let out = dir.path().join("h.profile");
        succeeds(tandem().arg("train").arg(&data).arg("-o").arg(&out));
        let profile = tandem_predictors::Profile::load(&out).expect("profile");
        assert_eq!(profile.provenance.host.as_deref(), want, "{sidecar}");
    }
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

/// `tandem train --corun` gives the profile the median contention of every op kind with enough
/// co-run configurations; a co-run dataset of another device, or one too small, is refused
/// before any training.
#[test]
fn corun_datasets_give_the_profile_its_contention() {
    use tandem_predictors::corun::{self, CorunRow, HEADER};
    use tandem_predictors::features::OpKind;
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, _) = first_configs(
        "pocl-1core.fresh.csv.gz",
        "pocl-1core.device.json",
        120,
        dir.path(),
        "d",
    );
    let sidecar = profiles().join("pocl-1core.device.json");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sidecar).expect("read")).expect("json");
    let device: tandem_runtime::gpu::device::DeviceInfo =
        serde_json::from_value(meta["device"].clone()).expect("device");
    let row = |op: OpKind, i: usize, device: &str| CorunRow {
        config: format!("{}:1x{}x8x16:{}x8x64:k3x3:s1:p1x1", op.name(), 8 + i, 8 + i),
        layer: tandem_predictors::dataset::layer_of_key(&format!(
            "{}:1x{}x8x16:{}x8x64:k3x3:s1:p1x1",
            op.name(),
            8 + i,
            8 + i
        ))
        .expect("a key"),
        device: device.to_string(),
        op,
        channels: 64,
        gpu_channels: 16,
        threads: 1,
        cpu_ms: 1.0,
        gpu_ms: 0.5,
        sync_ms: 0.0,
        // Excess 0.02 · i of the faster part.
        split_ms: 1.0 + 0.5 * 0.02 * i as f64,
    };
    let write = |name: &str, rows: &[CorunRow]| {
        let path = dir.path().join(name);
        let mut text = HEADER.join(",") + "\n";
        for r in rows {
            text += &format!(
                "{},\"{}\",{},{},{},{},{},{},{},{}\n",
                r.config,
                r.device,
                r.op.name(),
                r.channels,
                r.gpu_channels,
                r.threads,
                r.cpu_ms,
                r.gpu_ms,
                r.sync_ms,
                r.split_ms
            );
        }
        std::fs::write(&path, text).expect("write");
        assert_eq!(corun::read(&path).expect("readable").len(), rows.len());
        path
    };
    let label = device.label();
    // Conv: 9 configurations, excess 0.00 … 0.16, median 0.08; dwconv: too few to state one.
    let mut good: Vec<CorunRow> = (0..9).map(|i| row(OpKind::Conv, i, &label)).collect();
    good.extend((0..3).map(|i| row(OpKind::Depthwise, i, &label)));
    let good = write("good.csv", &good);
    let foreign = write(
        "foreign.csv",
        &(0..9)
            .map(|i| row(OpKind::Conv, i, "Other vendor other device"))
            .collect::<Vec<_>>(),
    );
    let small = write(
        "small.csv",
        &(0..3)
            .map(|i| row(OpKind::Conv, i, &label))
            .collect::<Vec<_>>(),
    );
    let train = |corun: &Path, out: &str| {
        tandem()
            .arg("train")
            .arg(&data)
            .arg("-o")
            .arg(dir.path().join(out))
            .arg("--corun")
            .arg(corun)
            .output()
            .expect("runs")
    };
    for (bad, says) in [(&foreign, "Other vendor"), (&small, "needs 8 of it")] {
        let out = train(bad, "bad.profile");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} accepted", bad.display());
        assert!(
            stderr.contains("--corun") && stderr.contains(says),
            "{stderr}"
        );
        assert!(!dir.path().join("bad.profile").exists());
    }
    let out = train(&good, "p.profile");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let profile = tandem_predictors::Profile::load(&dir.path().join("p.profile")).expect("profile");
    let conv = &profile.contention["conv_t1"];
    assert_eq!(conv.configs, 9);
    assert!((conv.excess - 0.08).abs() < 1e-9, "{conv:?}");
    assert_eq!(profile.contention.len(), 1, "{:?}", profile.contention);
    assert_eq!(
        profile.provenance.corun_datasets,
        vec!["good.csv".to_string()]
    );
}

/// Checks a `--base` training report: every executor tried both ways (corrected and from
/// scratch) lists both with their costs, corrects `base` exactly when the correction was the
/// cheapest way within the tolerance of the best cross-validated MAPE (it evaluates the base's
/// trees too, so it costs more than the base alone), and reports the chosen one's MAPE.
/// Returns how many executors were tried both ways.
fn cheapest_way_won(report: &serde_json::Value, base: &str, base_profile: &Path) -> usize {
    let base_profile = tandem_predictors::Profile::load(base_profile).expect("base profile");
    let tolerance = 1.0 + tandem_predictors::train::CHEAPER_WAY_TOLERANCE;
    let mut tried = 0;
    for (name, e) in report["executors"].as_object().expect("executors") {
        let (Some(cv), Some(s), Some(c)) = (
            e["cv_mape"].as_f64(),
            e["cv_mape_from_scratch"].as_f64(),
            e["cv_mape_corrected"].as_f64(),
        ) else {
            continue;
        };
        tried += 1;
        let ways = e["ways"].as_array().expect("ways");
        let way = |corrects: Option<&str>| {
            let w = ways
                .iter()
                .find(|w| w["corrects"].as_str() == corrects)
                .unwrap_or_else(|| panic!("{name}: no way {corrects:?} in {ways:?}"));
            (
                w["cv_mape"].as_f64().expect("cv_mape"),
                w["tree_levels"].as_u64().expect("tree_levels"),
            )
        };
        let (scratch, corrected) = (way(None), way(Some(base)));
        assert_eq!(ways.len(), 2, "{name}");
        assert_eq!((scratch.0, corrected.0), (s, c), "{name}");
        assert!(
            corrected.1 > base_profile.executors[name].forest.evaluation_cost(),
            "{name}: a correction costs its base's trees and its own"
        );
        let best = s.min(c);
        let eligible = |w: (f64, u64)| w.0 <= best * tolerance;
        let takes_correction = eligible(corrected)
            && (!eligible(scratch)
                || corrected.1 < scratch.1
                || (corrected.1 == scratch.1 && c < s));
        assert_eq!(e["corrects"] == base, takes_correction, "{name}: {e:#}");
        assert_eq!(cv, if takes_correction { c } else { s }, "{name}");
    }
    tried
}

/// `tandem train --base`: a short measurement of another host corrects a profile of the same
/// device (the report and the profile say which executors it corrects and from which profile);
/// a base of another device is refused, naming both, unless `--base-other-device` accepts it.
#[test]
fn a_base_profile_of_the_same_device_is_corrected_and_another_device_only_when_asked() {
    // fresh17 was measured on a second Intel host, for which pocl-1core.profile is 10-40% off.
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, _) = first_configs(
        "pocl-1core.fresh17.csv.gz",
        "pocl-1core.fresh17.device.json",
        80,
        dir.path(),
        "host2",
    );
    let (out, rep) = (dir.path().join("h2.profile"), dir.path().join("h2.json"));
    let stderr = succeeds(
        tandem()
            .arg("train")
            .arg(&data)
            .arg("--base")
            .arg(profiles().join("pocl-1core.profile"))
            .arg("-o")
            .arg(&out)
            .arg("--report-json")
            .arg(&rep),
    );
    assert!(
        stderr.contains("cv MAPE correcting pocl-1core.profile"),
        "{stderr}"
    );
    let r = report(&rep);
    let execs = r["executors"].as_object().expect("executors");
    let corrected: Vec<&String> = execs
        .iter()
        .filter(|(_, e)| e["corrects"] == "pocl-1core.profile")
        .map(|(name, _)| name)
        .collect();
    assert!(!corrected.is_empty(), "{r:#}");
    assert!(
        cheapest_way_won(
            &r,
            "pocl-1core.profile",
            &profiles().join("pocl-1core.profile")
        ) > 0,
        "{r:#}"
    );
    let profile = tandem_predictors::Profile::load(&out).expect("profile");
    let base =
        tandem_predictors::Profile::load(&profiles().join("pocl-1core.profile")).expect("base");
    assert!(profile
        .provenance
        .base
        .as_deref()
        .is_some_and(|b| b.starts_with("pocl-1core.profile (dataset pocl-1core.csv.gz")));
    for name in &corrected {
        let (e, b) = (&profile.executors[*name], &base.executors[*name]);
        assert_eq!(e.forest.trees[..b.forest.trees.len()], b.forest.trees[..]);
        assert_eq!(e.params["base_trees"], b.forest.trees.len());
    }
    // The base was trained before the loop-trip counts (the GPU kernels', the CPU depthwise
    // loop's): its predictors read the leading features of the new rows, and every executor
    // with counts, corrected or not, reads them.
    for (name, e) in &profile.executors {
        let counted = !tandem_predictors::features::kernel_count_names(name).is_empty();
        let cpu = tandem_predictors::features::is_cpu(name);
        assert_eq!(counted, !cpu || name.starts_with("cpu_dwconv_"), "{name}");
        assert_eq!(e.kernel_counts, counted, "{name}");
        assert_eq!(
            e.features,
            tandem_predictors::features::feature_names(name, true),
            "{name}"
        );
        if counted {
            assert!(!base.executors[name].kernel_counts, "{name}");
        }
    }
    assert!(
        corrected
            .iter()
            .any(|n| !tandem_predictors::features::is_cpu(n)),
        "no GPU executor corrected: {corrected:?}"
    );

    // `tandem train` with `base`, which must fail: its stderr.
    let refused = |base: &Path| {
        let run = tandem()
            .arg("train")
            .arg(&data)
            .arg("--base")
            .arg(base)
            .arg("-o")
            .arg(dir.path().join("no.profile"))
            .output()
            .expect("tandem train");
        assert!(!run.status.success());
        String::from_utf8_lossy(&run.stderr).into_owned()
    };
    // The AMD host's profile is another device.
    let epyc = profiles().join("pocl-1core-epyc.profile");
    let stderr = refused(&epyc);
    assert!(
        stderr.contains("--base")
            && stderr.contains("AuthenticAMD")
            && stderr.contains("Intel")
            && stderr.contains("--base-other-device"),
        "{stderr}"
    );
    assert!(!dir.path().join("no.profile").exists());
    // `--base-other-device` accepts it, says so, and cross-validation still chooses per
    // executor between correcting it and a forest from scratch.
    let (other, other_rep) = (
        dir.path().join("other.profile"),
        dir.path().join("other.json"),
    );
    let stderr = succeeds(
        tandem()
            .arg("train")
            .arg(&data)
            .arg("--base")
            .arg(&epyc)
            .arg("--base-other-device")
            .arg("-o")
            .arg(&other)
            .arg("--report-json")
            .arg(&other_rep),
    );
    assert!(
        stderr.contains("cross-validation decides") && stderr.contains("AuthenticAMD"),
        "{stderr}"
    );
    let r = report(&other_rep);
    assert!(
        cheapest_way_won(&r, "pocl-1core-epyc.profile", &epyc) > 0,
        "{r:#}"
    );
    assert!(tandem_predictors::Profile::load(&other).is_ok());

    // A base that is not there is named.
    let stderr = refused(&dir.path().join("missing.profile"));
    assert!(stderr.contains("missing.profile"), "{stderr}");
}

/// `tandem train --base --base-speed`: the dataset's machine-wide offset against the base is
/// taken out before the corrections are fitted, so the profile keeps the base's speed and the
/// measurement's shape; the factor is the one `tandem eval` reports, and the profile names it.
/// Without `--base` the option is refused.
#[test]
fn base_speed_takes_the_datasets_machine_offset_out_before_correcting() {
    use tandem_predictors::eval::evaluate;
    // The second Intel host ran 10-40% off pocl-1core.profile: a large machine offset.
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, some) = first_configs(
        "pocl-1core.fresh17.csv.gz",
        "pocl-1core.fresh17.device.json",
        80,
        dir.path(),
        "host2",
    );
    let base_path = profiles().join("pocl-1core.profile");
    let base = tandem_predictors::Profile::load(&base_path).expect("base");
    let offset = evaluate(&base, &some).machine_offset;
    assert!(offset.abs() > 3.0, "{offset}");
    let out = dir.path().join("h2.profile");
    let stderr = succeeds(
        tandem()
            .arg("train")
            .arg(&data)
            .arg("--base")
            .arg(&base_path)
            .arg("--base-speed")
            .arg("-o")
            .arg(&out),
    );
    let factor = format!("{:.4}", 1.0 + offset / 100.0);
    assert!(
        stderr.contains(&format!("ran {offset:+.2}% against pocl-1core.profile"))
            && stderr.contains(&format!("divided by {factor}")),
        "{stderr}"
    );
    let profile = tandem_predictors::Profile::load(&out).expect("profile");
    assert!(
        profile
            .provenance
            .dataset
            .contains(&format!("at the speed of pocl-1core.profile (÷{factor})")),
        "{}",
        profile.provenance.dataset
    );
    // Fitted to the data at the base's speed: on the data as measured, the new profile is off
    // by about the same machine-wide factor as the base.
    let kept = evaluate(&profile, &some).machine_offset;
    assert!(
        (kept - offset).abs() < 0.3 * offset.abs(),
        "{kept} {offset}"
    );

    // Data that shares no executor with the base has no speed against it: an error.
    let mut strangers = some.clone();
    for r in &mut strangers {
        r.executor = format!("{}_elsewhere", r.executor);
    }
    let strange = dir.path().join("strange.csv");
    dataset::write(&strange, &strangers).expect("write");
    std::fs::copy(
        dir.path().join("host2.device.json"),
        dir.path().join("strange.device.json"),
    )
    .expect("sidecar");
    let stderr = fails(
        tandem()
            .arg("train")
            .arg(&strange)
            .arg("--base")
            .arg(&base_path)
            .arg("--base-speed")
            .arg("-o")
            .arg(dir.path().join("no.profile")),
    );
    assert!(
        stderr.contains("is in pocl-1core.profile, so it has no speed against it"),
        "{stderr}"
    );

    let stderr = fails(
        tandem()
            .arg("train")
            .arg(&data)
            .arg("--base-speed")
            .arg("-o")
            .arg(dir.path().join("no.profile")),
    );
    assert!(stderr.contains("--base"), "{stderr}");

    // --base-speed brings the data to one base's speed: with two bases it is refused, and so
    // is one base named twice (the report and provenance tell bases apart by file name).
    let xeon2 = profiles().join("pocl-1core-xeon2.profile");
    for (bases, speed, says) in [
        (
            [&base_path, &xeon2],
            true,
            "--base-speed takes exactly one --base (the speed to bring the data to), not 2; \
             --speed-of P brings the data to P's speed with several",
        ),
        (
            [&base_path, &base_path],
            false,
            "a second base named 'pocl-1core.profile'",
        ),
    ] {
        let mut cmd = tandem();
        cmd.arg("train").arg(&data);
        for b in bases {
            cmd.arg("--base").arg(b);
        }
        if speed {
            cmd.arg("--base-speed");
        }
        let stderr = fails(cmd.arg("-o").arg(dir.path().join("no.profile")));
        assert!(stderr.contains(says), "{stderr}");
    }
}

/// Checks a training that brought datasets `a.csv` and `b.csv` to the speed of
/// `pocl-1core.profile`, where they ran `offset` percent off it: `flag`'s message names each
/// one's offset, and the profile's provenance each one's factor. Returns the profile.
fn at_pocl_1core_speed(
    stderr: &str,
    flag: &str,
    out: &Path,
    datasets: [(&PathBuf, f64); 2],
) -> tandem_predictors::Profile {
    for (path, offset) in datasets {
        assert!(
            stderr.contains(&format!(
                "{flag}: {} ran {offset:+.2}% against pocl-1core.profile",
                path.display()
            )),
            "{stderr}"
        );
    }
    let [fa, fb] = datasets.map(|(_, offset)| 1.0 + offset / 100.0);
    let profile = tandem_predictors::Profile::load(out).expect("profile");
    let name = &profile.provenance.dataset;
    assert!(
        name.contains(&format!(
            "a.csv at the speed of pocl-1core.profile (÷{fa:.4}) + b.csv at the speed of \
             pocl-1core.profile (÷{fb:.4})"
        )),
        "{name}"
    );
    profile
}

#[test]
fn add_pools_further_datasets_each_at_the_base_speed_and_refuses_another_device() {
    use tandem_predictors::eval::evaluate;
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, all) = first_configs(
        "pocl-1core.fresh17.csv.gz",
        "pocl-1core.fresh17.device.json",
        80,
        dir.path(),
        "all",
    );
    let configs: Vec<&str> = all
        .iter()
        .map(|r| r.config.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let of = |range: std::ops::Range<usize>| -> BTreeSet<&str> {
        configs[range].iter().copied().collect()
    };
    // The first session as measured; the second in an hour 10% slower, measuring the same
    // configurations again. (Sets of partly different configurations differ in their offsets
    // by those configurations' own as well, which the assertions below would read.)
    let (first, second) = (of(0..60), of(0..60));
    let a: Vec<Row> = all
        .iter()
        .filter(|r| first.contains(r.config.as_str()))
        .cloned()
        .collect();
    let b: Vec<Row> = all
        .iter()
        .filter(|r| second.contains(r.config.as_str()))
        .map(|r| Row {
            ms: r.ms * 1.1,
            ..r.clone()
        })
        .collect();
    let (pa, pb) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
    dataset::write(&pa, &a).expect("write");
    dataset::write(&pb, &b).expect("write");
    std::fs::copy(
        dir.path().join("all.device.json"),
        dir.path().join("a.device.json"),
    )
    .expect("sidecar");
    let base_path = profiles().join("pocl-1core.profile");
    let base = tandem_predictors::Profile::load(&base_path).expect("base");
    let (offset_a, offset_b) = (
        evaluate(&base, &a).machine_offset,
        evaluate(&base, &b).machine_offset,
    );
    let out = dir.path().join("ab.profile");
    let stderr = succeeds(
        tandem()
            .arg("train")
            .arg(&pa)
            .arg("--add")
            .arg(&pb)
            .arg("--base")
            .arg(&base_path)
            .arg("--base-speed")
            .arg("-o")
            .arg(&out),
    );
    // Each dataset's own offset is taken out: the slower one's is about 10 points more.
    let (fa, fb) = (1.0 + offset_a / 100.0, 1.0 + offset_b / 100.0);
    assert!((fb / fa - 1.1).abs() < 0.03, "{offset_a} {offset_b}");
    // The shared configurations' points are pooled into one each.
    let mut points: Vec<_> = a.iter().chain(&b).map(|r| r.point_key()).collect();
    let stored = points.len();
    points.sort();
    points.dedup();
    assert!(points.len() < stored);
    assert!(
        stderr.contains(&format!(
            "--add: {} points from {stored} rows of 2 datasets",
            points.len()
        )),
        "{stderr}"
    );
    let profile = at_pocl_1core_speed(
        &stderr,
        "--base-speed",
        &out,
        [(&pa, offset_a), (&pb, offset_b)],
    );
    // Both brought to the base's speed: on each dataset as measured, the profile is off by
    // about that dataset's own offset.
    for (rows, offset) in [(&a, offset_a), (&b, offset_b)] {
        let kept = evaluate(&profile, rows).machine_offset;
        assert!(
            (kept - offset).abs() < 0.3 * offset.abs().max(5.0),
            "{kept} {offset}"
        );
    }

    // A dataset of another device is refused, naming it.
    let other: Vec<Row> = b
        .iter()
        .map(|r| Row {
            device: "another GPU".into(),
            ..r.clone()
        })
        .collect();
    let po = dir.path().join("other.csv");
    dataset::write(&po, &other).expect("write");
    let stderr = fails(
        tandem()
            .arg("train")
            .arg(&pa)
            .arg("--add")
            .arg(&po)
            .arg("-o")
            .arg(dir.path().join("no.profile")),
    );
    assert!(
        stderr.contains(&format!(
            "--add {}: measured on 'another GPU'",
            po.display()
        )),
        "{stderr}"
    );
}

/// `tandem train --speed-of P`: every dataset (the main one and each `--add`) is brought to
/// P's speed, its own machine offset against P divided out, before training with any number of
/// `--base`: P is only the yardstick. A profile of another device or of another latency
/// statistic is refused, and so is `--speed-of` together with `--base-speed`.
#[test]
fn speed_of_brings_every_dataset_to_one_profiles_speed_with_several_bases() {
    use tandem_predictors::eval::evaluate;
    let dir = tempfile::tempdir().expect("tempdir");
    let (pa, a) = first_configs(
        "pocl-1core.fresh17.csv.gz",
        "pocl-1core.fresh17.device.json",
        60,
        dir.path(),
        "a",
    );
    // The same configurations measured again in an hour 10% slower.
    let b: Vec<Row> = a
        .iter()
        .map(|r| Row {
            ms: r.ms * 1.1,
            ..r.clone()
        })
        .collect();
    let pb = dir.path().join("b.csv");
    dataset::write(&pb, &b).expect("write");
    let yardstick_path = profiles().join("pocl-1core.profile");
    let yardstick = tandem_predictors::Profile::load(&yardstick_path).expect("yardstick");
    let (offset_a, offset_b) = (
        evaluate(&yardstick, &a).machine_offset,
        evaluate(&yardstick, &b).machine_offset,
    );
    let (fa, fb) = (1.0 + offset_a / 100.0, 1.0 + offset_b / 100.0);
    assert!((fb / fa - 1.1).abs() < 0.03, "{offset_a} {offset_b}");
    let train = |extra: &[&str], out: &Path| {
        let mut cmd = tandem();
        cmd.arg("train").arg(&pa).arg("--add").arg(&pb);
        for base in ["pocl-1core-xeon2.profile", "pocl-1core-xeon3.profile"] {
            cmd.arg("--base").arg(profiles().join(base));
        }
        cmd.args(extra).arg("-o").arg(out);
        cmd
    };
    let out = dir.path().join("ab.profile");
    let yardstick_arg = yardstick_path.to_string_lossy().into_owned();
    let stderr = succeeds(&mut train(&["--speed-of", &yardstick_arg], &out));
    let profile = at_pocl_1core_speed(
        &stderr,
        "--speed-of",
        &out,
        [(&pa, offset_a), (&pb, offset_b)],
    );
    // Both datasets at the yardstick's speed: the profile is off each one as measured by about
    // that dataset's own offset against the yardstick, 10 points apart. Pooled as measured, the
    // two hours would meet in the middle instead.
    for (rows, offset) in [(&a, offset_a), (&b, offset_b)] {
        let kept = evaluate(&profile, rows).machine_offset;
        assert!((kept - offset).abs() < 3.0, "{kept} {offset}");
    }
    let pooled_out = dir.path().join("pooled.profile");
    succeeds(&mut train(&[], &pooled_out));
    let pooled = tandem_predictors::Profile::load(&pooled_out).expect("profile");
    let (pooled_a, pooled_b) = (
        evaluate(&pooled, &a).machine_offset,
        evaluate(&pooled, &b).machine_offset,
    );
    assert!(pooled_a < -2.0 && pooled_b > 2.0, "{pooled_a} {pooled_b}");

    // Refused: a yardstick of another latency statistic, one that is not there, --speed-of
    // together with --base-speed, and a yardstick of another device.
    let no = dir.path().join("no.profile");
    for (yardstick, extra, says) in [
        (
            "pocl-1core-xeon4.profile",
            "",
            "fitted on the least latency, this training on the median; pass --latency least",
        ),
        ("missing.profile", "", "missing.profile"),
        ("pocl-1core.profile", "--base-speed", "--base-speed"),
    ] {
        let path = profiles().join(yardstick).to_string_lossy().into_owned();
        let mut args = vec!["--speed-of", path.as_str()];
        if !extra.is_empty() {
            args.push(extra);
        }
        let stderr = fails(&mut train(&args, &no));
        assert!(stderr.contains(says), "{yardstick}: {stderr}");
    }
    let stderr = fails(&mut train(
        &[
            "--speed-of",
            &profiles()
                .join("pocl-1core-epyc-zen4.profile")
                .to_string_lossy(),
        ],
        &no,
    ));
    assert!(
        stderr.contains("measured on 'AuthenticAMD") && stderr.contains("same device"),
        "{stderr}"
    );
    assert!(!no.exists());
}

#[test]
fn datasets_of_several_hours_give_a_speed_model_that_eval_and_compile_use() {
    use tandem_predictors::eval::evaluate;
    let dir = tempfile::tempdir().expect("tempdir");
    // 12 configurations of each executor (a model's layers get predictions whichever kernel
    // they dispatch to).
    let rows = dataset::read(&profiles().join("pocl-1core-xeon2.fresh8.csv.gz")).expect("data");
    let mut per_executor: std::collections::BTreeMap<&str, BTreeSet<&str>> = Default::default();
    for r in &rows {
        let configs = per_executor.entry(r.executor.as_str()).or_default();
        if configs.len() < 12 {
            configs.insert(r.config.as_str());
        }
    }
    let keep: BTreeSet<&str> = per_executor.values().flatten().copied().collect();
    let some: Vec<Row> = rows
        .iter()
        .filter(|r| keep.contains(r.config.as_str()))
        .cloned()
        .collect();
    // The same configurations measured in four hours: the reference layer 10% faster to 10%
    // slower, the latencies moving half as much (elasticity 0.5).
    let hour = |p: f64| -> Vec<Row> {
        some.iter()
            .map(|r| Row {
                ms: r.ms * p.sqrt(),
                probe_ms: if is_cpu(&r.executor) { 0.18 } else { 0.9 } * p,
                ..r.clone()
            })
            .collect()
    };
    let mut paths = Vec::new();
    for (i, p) in [0.9, 0.95, 1.05, 1.1].into_iter().enumerate() {
        let path = dir.path().join(format!("hour{i}.csv"));
        dataset::write(&path, &hour(p)).expect("write");
        paths.push(path);
    }
    std::fs::copy(
        profiles().join("pocl-1core-xeon2.device.json"),
        dir.path().join("hour0.device.json"),
    )
    .expect("sidecar");
    let out = dir.path().join("hours.profile");
    let mut train = tandem();
    train.arg("train").arg(&paths[0]);
    for p in &paths[1..] {
        train.arg("--add").arg(p);
    }
    let run = train.arg("-o").arg(&out).output().expect("tandem train");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("speed model, CPU side: the level moves"),
        "{stderr}"
    );
    let profile = tandem_predictors::Profile::load(&out).expect("profile");
    for side in [profile.speed.gpu, profile.speed.cpu] {
        let s = side.expect("a model per side");
        assert!((s.elasticity - 0.5).abs() < 0.05, "{s:?}");
        assert_eq!(s.datasets, 4);
    }
    // Every executor moved alike here, so those with enough points have their own model at
    // the same elasticity.
    assert!(profile.speed.executors.len() >= 4, "{:?}", profile.speed);
    for (name, s) in &profile.speed.executors {
        assert!((s.elasticity - 0.5).abs() < 0.05, "{name}: {s:?}");
    }
    assert!(stderr.contains("speed model of "), "{stderr}");

    // A fifth hour, 15% slower: the speed model's predictions follow it, the plain ones not.
    let slow = hour(1.15);
    let e = evaluate(&profile, &slow);
    let [gpu, cpu] = e.speed_factor;
    for f in [gpu, cpu] {
        let f = f.expect("a factor");
        assert!((f / (1.15f64 / 1.0f64).sqrt() - 1.0).abs() < 0.03, "{f}");
    }
    let mape = |m: &std::collections::BTreeMap<String, tandem_predictors::bundle::Accuracy>| {
        m.values().map(|a| a.mape * a.n as f64).sum::<f64>()
            / m.values().map(|a| a.n as f64).sum::<f64>()
    };
    assert!(
        mape(&e.speed_scaled) + 3.0 < mape(&e.executors),
        "{} {}",
        mape(&e.speed_scaled),
        mape(&e.executors)
    );
    // Every row of a side read the same probe: point by point is the same scoring.
    assert_eq!(e.point_speed_scaled, e.speed_scaled);
    // A set whose first configurations ran in the fast hour and the rest in the slow one, as
    // each row's probe records: one factor at the median probe misses one of the two halves,
    // each point's own factor neither.
    let first_half: BTreeSet<&str> = keep.iter().copied().step_by(2).collect();
    let fast = hour(0.9);
    let mixed: Vec<Row> = slow
        .iter()
        .zip(&fast)
        .map(|(s, f)| {
            if first_half.contains(s.config.as_str()) {
                f.clone()
            } else {
                s.clone()
            }
        })
        .collect();
    let m = evaluate(&profile, &mixed);
    assert!(
        mape(&m.point_speed_scaled) + 3.0 < mape(&m.speed_scaled),
        "per point {} against one factor {}",
        mape(&m.point_speed_scaled),
        mape(&m.speed_scaled)
    );
    assert!(
        mape(&m.point_speed_scaled) < mape(&e.speed_scaled) + 1.0,
        "per point {} against the slow hour alone {}",
        mape(&m.point_speed_scaled),
        mape(&e.speed_scaled)
    );
    let slow_path = dir.path().join("slow.csv");
    dataset::write(&slow_path, &slow).expect("write");
    let run = tandem()
        .arg("eval")
        .arg(&out)
        .arg(&slow_path)
        .arg("--json")
        .output()
        .expect("tandem eval");
    assert!(run.status.success());
    let j: serde_json::Value = serde_json::from_slice(&run.stdout).expect("json");
    let cpu_factor = j["speed_model"]["factor"]["cpu"].as_f64().expect("factor");
    assert!((cpu_factor - cpu.expect("a CPU factor")).abs() < 1e-9);
    let each = j["speed_model"]["executor_factor"]
        .as_object()
        .expect("executor factors");
    assert_eq!(each.len(), e.executor_speed_factor.len());
    for (name, f) in each {
        let f = f.as_f64().expect("a factor");
        assert!((f / 1.15f64.sqrt() - 1.0).abs() < 0.03, "{name}: {f}");
    }
    assert_eq!(
        j["speed_model"]["executors"]
            .as_object()
            .expect("executors")
            .len(),
        e.speed_scaled.len()
    );
    let per_point = j["speed_model"]["per_point"]["overall"]["mape"]
        .as_f64()
        .expect("the per-point score");
    // (The file's latencies are rounded: the score agrees to within a hundredth of a point.)
    assert!(
        (per_point - mape(&e.point_speed_scaled)).abs() < 0.01,
        "{per_point} against {}",
        mape(&e.point_speed_scaled)
    );
    // The table says the same: the speed model's rows end with the point-by-point MAPE.
    let run = tandem()
        .arg("eval")
        .arg(&out)
        .arg(&slow_path)
        .output()
        .expect("tandem eval");
    assert!(run.status.success());
    let table = String::from_utf8_lossy(&run.stdout);
    let speed_table = table
        .split("At the machine's speed of the hour by the profile's speed model")
        .nth(1)
        .expect("a speed-model table");
    assert!(
        speed_table.contains("| each point at its own probe |"),
        "{table}"
    );
    for (name, a) in &e.point_speed_scaled {
        let row = speed_table
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row of {name} in {table}"));
        let last: f64 = row
            .trim_end_matches(['|', ' '])
            .rsplit("| ")
            .next()
            .and_then(|v| v.trim_end_matches('%').parse().ok())
            .unwrap_or_else(|| panic!("no per-point MAPE in {row:?}"));
        assert!(
            (last - a.mape).abs() < 0.1,
            "{name}: {row:?} against {}",
            a.mape
        );
    }

    // Planning at the speed of the hour times the reference layer here and says so.
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/fixtures/mobile_block_fp32.tflite");
    let stderr = succeeds(
        tandem()
            .arg("compile")
            .arg(&model)
            .arg("--profile")
            .arg(&out)
            .arg("--speed-probe")
            .arg("-o")
            .arg(dir.path().join("tiny.tandem")),
    );
    assert!(
        stderr.contains("planned at the machine's speed now by the reference layer (GPU side")
            && stderr.contains("predictions ×")
            && stderr.contains("executors by models of their own: "),
        "{stderr}"
    );
    // A profile without a speed model cannot be brought to it: an error naming it.
    let plain = dir.path().join("plain.profile");
    let run = tandem()
        .arg("train")
        .arg(&paths[0])
        .arg("-o")
        .arg(&plain)
        .output()
        .expect("tandem train");
    assert!(run.status.success());
    assert!(tandem_predictors::Profile::load(&plain)
        .expect("profile")
        .speed
        .is_empty());
    let stderr = fails(
        tandem()
            .arg("compile")
            .arg(&model)
            .arg("--profile")
            .arg(&plain)
            .arg("--speed-probe")
            .arg("-o")
            .arg(dir.path().join("no.tandem")),
    );
    assert!(
        stderr.contains("the profile plain.profile has no speed model"),
        "{stderr}"
    );

    // `--speed-from`: the speed model fitted on other datasets than the training set (here
    // one hour's training, the four hours as the later sets); fewer than four are refused.
    let later = dir.path().join("later.profile");
    let mut train = tandem();
    train.arg("train").arg(&paths[0]);
    for p in &paths {
        train.arg("--speed-from").arg(p);
    }
    let stderr = succeeds(train.arg("-o").arg(&later));
    assert!(stderr.contains("hour3.csv: GPU side probe"), "{stderr}");
    let fitted = tandem_predictors::Profile::load(&later).expect("profile");
    for side in [fitted.speed.gpu, fitted.speed.cpu] {
        let s = side.expect("a model per side");
        assert!((s.elasticity - 0.5).abs() < 0.05, "{s:?}");
        assert_eq!(s.datasets, 4);
    }
    let plain_profile = tandem_predictors::Profile::load(&plain).expect("profile");
    assert_eq!(
        fitted.executors, plain_profile.executors,
        "the same forests"
    );
    let mut train = tandem();
    train.arg("train").arg(&paths[0]);
    for p in &paths[1..] {
        train.arg("--speed-from").arg(p);
    }
    let stderr = fails(train.arg("-o").arg(dir.path().join("three.profile")));
    assert!(
        stderr.contains("--speed-from: 3 datasets, a speed model needs at least 4"),
        "{stderr}"
    );
    // A later set of another device is refused, naming it.
    let other = dir.path().join("other-device.csv");
    let moved: Vec<Row> = hour(1.0)
        .into_iter()
        .map(|r| Row {
            device: "another device".into(),
            ..r
        })
        .collect();
    dataset::write(&other, &moved).expect("write");
    let mut train = tandem();
    train.arg("train").arg(&paths[0]);
    for p in paths[1..].iter().chain([&other]) {
        train.arg("--speed-from").arg(p);
    }
    let stderr = fails(train.arg("-o").arg(dir.path().join("other.profile")));
    assert!(
        stderr.contains("--speed-from")
            && stderr.contains("other-device.csv: measured on 'another device'"),
        "{stderr}"
    );
}

/// `tandem train --latency least` fits each point's fastest repetition and records the choice;
/// `tandem eval` then scores the profile against the same latency. A dataset measured before
/// the fastest repetition was recorded is refused by both, naming the missing column.
#[test]
fn a_profile_trained_on_least_latencies_is_scored_on_them() {
    use tandem_predictors::dataset::{with_latency, Latency};
    use tandem_predictors::eval::evaluate;
    let dir = tempfile::tempdir().expect("tempdir");
    let (old, rows) = first_configs(
        "pocl-1core-epyc-zen4.fresh1.csv.gz",
        "pocl-1core-epyc-zen4.device.json",
        40,
        dir.path(),
        "old",
    );
    assert!(
        rows.iter().all(|r| r.least_ms == 0.0),
        "fresh1 predates least_ms"
    );
    let err = fails(
        tandem()
            .arg("train")
            .arg(&old)
            .args(["--latency", "least", "-o"])
            .arg(dir.path().join("x.profile")),
    );
    assert!(err.contains("least_ms") && err.contains("old.csv"), "{err}");

    // The same points with a fastest repetition of 60% of the median.
    let new_rows: Vec<Row> = rows
        .iter()
        .map(|r| Row {
            least_ms: r.ms * 0.6,
            ..r.clone()
        })
        .collect();
    let data = dir.path().join("new.csv");
    dataset::write(&data, &new_rows).expect("write");
    std::fs::copy(
        profiles().join("pocl-1core-epyc-zen4.device.json"),
        dir.path().join("new.device.json"),
    )
    .expect("sidecar");
    let (least, median) = (
        dir.path().join("least.profile"),
        dir.path().join("median.profile"),
    );
    succeeds(
        tandem()
            .arg("train")
            .arg(&data)
            .args(["--latency", "least", "-o"])
            .arg(&least),
    );
    succeeds(tandem().arg("train").arg(&data).arg("-o").arg(&median));
    let least_profile = tandem_predictors::Profile::load(&least).expect("profile");
    let median_profile = tandem_predictors::Profile::load(&median).expect("profile");
    assert_eq!(least_profile.provenance.latency, Latency::Least);
    assert_eq!(median_profile.provenance.latency, Latency::Median);
    // Fitted on 60% of the labels, it predicts about 60% of the latencies the median profile
    // predicts: the median latencies lie about 1/0.6 above it (machine offset +67%).
    let offset = |p: &tandem_predictors::Profile| evaluate(p, &new_rows).machine_offset;
    let (least_offset, median_offset) = (offset(&least_profile), offset(&median_profile));
    assert!(median_offset.abs() < 10.0, "{median_offset}");
    let ratio = (1.0 + median_offset / 100.0) / (1.0 + least_offset / 100.0);
    assert!(
        (0.5..0.7).contains(&ratio),
        "least / median predictions {ratio}"
    );

    // eval scores the least profile against least_ms, as the library does.
    let out = run_ok(tandem().args(["eval", "--json"]).arg(&least).arg(&data));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["latency"], "least");
    let expected = evaluate(
        &least_profile,
        // As stored (six decimals).
        &with_latency(dataset::read(&data).expect("read"), Latency::Least, &data)
            .expect("has least_ms"),
    );
    for (name, a) in &expected.executors {
        let mape = json["executors"][name]["mape"].as_f64().expect("mape");
        assert!((mape - a.mape).abs() < 1e-6, "{name}: {mape} vs {}", a.mape);
    }
    let err = fails(tandem().arg("eval").arg(&least).arg(&old));
    assert!(
        err.contains("least.profile predicts fastest repetitions")
            && err.contains("old.csv: point 1")
            && err.contains("has no least_ms"),
        "{err}"
    );

    // calibrate, too: refuses the older dataset, and keeps the latency it calibrates.
    let calibrated = dir.path().join("calibrated.profile");
    let err = fails(
        tandem()
            .arg("calibrate")
            .arg(&least)
            .arg(&old)
            .arg("-o")
            .arg(&calibrated),
    );
    assert!(err.contains("has no least_ms"), "{err}");
    succeeds(
        tandem()
            .arg("calibrate")
            .arg(&least)
            .arg(&data)
            .arg("-o")
            .arg(&calibrated),
    );
    let calibrated = tandem_predictors::Profile::load(&calibrated).expect("calibrated");
    assert_eq!(calibrated.provenance.latency, Latency::Least);
    // Calibrated on its own training data, the executors with enough configurations find a
    // factor near 1: they are scored on least_ms (on the medians it would be about 1/0.6).
    let c = calibrated
        .provenance
        .calibrations
        .last()
        .expect("a calibration");
    let sampled: Vec<f64> = c
        .executors
        .values()
        .filter(|e| e.configs >= 20)
        .map(|e| e.factor)
        .collect();
    assert!(!sampled.is_empty(), "{c:?}");
    assert!(sampled.iter().all(|f| (f - 1.0).abs() < 0.1), "{c:?}");
}

/// `tandem flatten`: the fourth Intel host's profile S' (corrections of corrections, kept in
/// `bases/`) flattened to 100 trees prints a table of what it flattened, writes a loadable
/// profile whose forests have at most 100 trees and whose provenance records it; with a long
/// forest of a rare kernel it says that it drew further rounds for it; a missing profile, a
/// dataset that is not one and `--max-trees 0` are refused with errors naming them.
#[test]
fn flatten_shortens_the_forests_and_refuses_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shipped = profiles().join("bases/pocl-1core-xeon4-sprime.profile");
    let out = dir.path().join("flat.profile");
    let run = run_ok(
        tandem()
            .arg("flatten")
            .arg(&shipped)
            .args(["--max-trees", "100", "--configs", "200", "-o"])
            .arg(&out),
    );
    let table = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(table.contains("| cpu_conv_t1 |"), "{table}");
    let flat = tandem_predictors::Profile::load(&out).expect("a loadable profile");
    assert!(flat.executors.values().all(|e| e.forest.trees.len() <= 100));
    let recorded = flat.provenance.flattened.expect("recorded");
    assert_eq!(recorded.max_trees, 100);
    assert!(recorded.executors.contains_key("cpu_conv_t1"));
    assert_eq!(recorded.extra_rounds, 0, "no rare kernel is long in S'");

    // A long constant-weights forest (S''s own made long; the shipped profile has one), a kernel few
    // random layers dispatch to: the run says it drew further rounds for it.
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&shipped).expect("read")).expect("json");
    let forest = &mut json["executors"]["conv_constants"]["forest"]["trees"];
    let trees = forest.as_array().expect("trees").clone();
    let mut long = Vec::new();
    while long.len() <= 400 {
        long.extend(trees.iter().cloned());
    }
    *forest = serde_json::Value::Array(long);
    let rare = dir.path().join("rare.profile");
    std::fs::write(&rare, json.to_string()).expect("write");
    let run = run_ok(
        tandem()
            .arg("flatten")
            .arg(&rare)
            .args(["--max-trees", "400", "--configs", "200", "-o"])
            .arg(&out),
    );
    let said = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        said.contains("| conv_constants |")
            && said.contains("further rounds of 200 random configurations per op kind"),
        "{said}"
    );

    let missing = dir.path().join("nothing.profile");
    let err = fails(tandem().arg("flatten").arg(&missing).arg("-o").arg(&out));
    assert!(err.contains("nothing.profile"), "{err}");
    let not_data = dir.path().join("notes.csv");
    std::fs::write(&not_data, "just,some\nwords,here\n").expect("write");
    let err = fails(
        tandem()
            .arg("flatten")
            .arg(&shipped)
            .arg("--data")
            .arg(&not_data)
            .arg("-o")
            .arg(&out),
    );
    assert!(err.contains("notes.csv"), "{err}");
    let err = fails(
        tandem()
            .arg("flatten")
            .arg(&shipped)
            .args(["--max-trees", "0", "-o"])
            .arg(&out),
    );
    assert!(err.contains("--max-trees"), "{err}");
    // Keeping as many trees as the bound leaves none to distil into.
    let err = fails(
        tandem()
            .arg("flatten")
            .arg(&shipped)
            .args(["--max-trees", "50", "--keep", "50", "-o"])
            .arg(&out),
    );
    assert!(
        err.contains("--keep (50) must be below --max-trees (50)"),
        "{err}"
    );
    // A dataset of another host's device would bring another dispatch's features.
    let zen4 = profiles().join("pocl-1core-epyc-zen4.fresh4.csv.gz");
    let err = fails(
        tandem()
            .arg("flatten")
            .arg(&shipped)
            .arg("--data")
            .arg(&zen4)
            .arg("-o")
            .arg(&out),
    );
    assert!(
        err.contains("--data") && err.contains("pocl-1core-epyc-zen4.fresh4.csv.gz: measured on"),
        "{err}"
    );
    // No forest over the bound: said, and the forests stay.
    let same = dir.path().join("same.profile");
    let run = run_ok(
        tandem()
            .arg("flatten")
            .arg(&shipped)
            .args(["--max-trees", "100000", "-o"])
            .arg(&same),
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("nothing to flatten"));
    let original = tandem_predictors::Profile::load(&shipped).expect("shipped");
    let kept = tandem_predictors::Profile::load(&same).expect("written");
    assert_eq!(kept.executors, original.executors);
}

/// A small pseudo-random drift per point, 0.92–1.08 (not a function of the layer, so no
/// forest can learn it).
fn drift_of(point: usize, seed: usize) -> f64 {
    let x = (point * 2_654_435_761 + seed * 40_503) % 1_000_003;
    0.92 + 0.16 * (x as f64 / 1_000_003.0)
}

/// `rows` measured in an hour of `level` (the reference layer `level` times its base, the
/// latencies `√level`), each point at a moment of its own: its probe `drift` times the hour's,
/// its latency `drift^0.6` ([`drift_of`], by `seed`).
fn drifting_hour(rows: &[Row], level: f64, seed: usize) -> Vec<Row> {
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let d = drift_of(i, seed);
            Row {
                ms: r.ms * level.sqrt() * d.powf(0.6),
                probe_ms: if is_cpu(&r.executor) { 0.18 } else { 0.9 } * level * d,
                ..r.clone()
            }
        })
        .collect()
}

/// `tandem train --point-speed`: each training point is brought to its dataset's median moment
/// by its own reference-layer time, by the within-set elasticity fitted on the `--speed-from`
/// sets against the yardstick; the drift then no longer reaches the forests. It needs a
/// yardstick and later sets, and says so.
#[test]
fn point_speed_takes_each_points_own_moment_out_of_the_training_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (clean, some) = first_configs(
        "pocl-1core-xeon2.fresh8.csv.gz",
        "pocl-1core-xeon2.device.json",
        60,
        dir.path(),
        "clean",
    );
    // The yardstick: the same points measured without drift, every probe at its base.
    let steady: Vec<Row> = some
        .iter()
        .map(|r| Row {
            probe_ms: if is_cpu(&r.executor) { 0.18 } else { 0.9 },
            ..r.clone()
        })
        .collect();
    dataset::write(&clean, &steady).expect("write");
    let yardstick = dir.path().join("yardstick.profile");
    succeeds(tandem().arg("train").arg(&clean).arg("-o").arg(&yardstick));
    // Four later hours and the training set, each drifting point by point.
    let mut later = Vec::new();
    for (i, level) in [0.9, 0.95, 1.05, 1.1].into_iter().enumerate() {
        let path = dir.path().join(format!("later{i}.csv"));
        dataset::write(&path, &drifting_hour(&some, level, i + 1)).expect("write");
        later.push(path);
    }
    let drifting = dir.path().join("drifting.csv");
    dataset::write(&drifting, &drifting_hour(&some, 1.0, 9)).expect("write");
    std::fs::copy(
        profiles().join("pocl-1core-xeon2.device.json"),
        dir.path().join("drifting.device.json"),
    )
    .expect("sidecar");
    let train = |name: &str, point_speed: bool| {
        let mut cmd = tandem();
        cmd.arg("train")
            .arg(&drifting)
            .arg("--speed-of")
            .arg(&yardstick);
        for p in &later {
            cmd.arg("--speed-from").arg(p);
        }
        if point_speed {
            cmd.arg("--point-speed");
        }
        let out = dir.path().join(format!("{name}.profile"));
        let stderr = succeeds(cmd.arg("-o").arg(&out));
        (out, stderr)
    };
    let (plain, _) = train("plain", false);
    let (out, stderr) = train("moved", true);
    for side in ["GPU", "CPU"] {
        let line = stderr
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "--point-speed, {side} side: a point's latency moves"
                ))
            })
            .unwrap_or_else(|| panic!("no {side} side fit in {stderr}"));
        let b: f64 = line
            .split("moves ")
            .nth(1)
            .and_then(|v| v.split('x').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no elasticity in {line:?}"));
        assert!((b - 0.6).abs() < 0.05, "{line}");
    }
    assert!(
        stderr.contains("--point-speed: ") && stderr.contains("drifting.csv brought to its median"),
        "{stderr}"
    );
    let profile = tandem_predictors::Profile::load(&out).expect("profile");
    assert!(
        profile
            .provenance
            .dataset
            .contains("with each point at its median probe (GPU side ^0."),
        "{}",
        profile.provenance.dataset
    );
    // The drift (±5% on each latency) no longer reaches the forests: they predict what the
    // steady measurement taught the yardstick's, where those trained on the drifting points
    // as measured learned some of it.
    let plain = tandem_predictors::Profile::load(&plain).expect("profile");
    let steady_profile = tandem_predictors::Profile::load(&yardstick).expect("profile");
    let predict = |p: &tandem_predictors::Profile| {
        tandem_predictors::eval::evaluate(p, &steady)
            .predicted
            .into_iter()
            .map(|x| x.expect("a prediction"))
            .collect::<Vec<f64>>()
    };
    let steady_ms = predict(&steady_profile);
    let apart = |p: &tandem_predictors::Profile| {
        let ms = predict(p);
        100.0
            * ms.iter()
                .zip(&steady_ms)
                .map(|(a, b)| (a / b - 1.0).abs())
                .sum::<f64>()
            / ms.len() as f64
    };
    assert!(
        apart(&profile) + 1.0 < apart(&plain),
        "with --point-speed {}% from the steady forests, without {}%",
        apart(&profile),
        apart(&plain)
    );

    // Without a yardstick, or without later sets, it is refused.
    let mut cmd = tandem();
    cmd.arg("train").arg(&drifting).arg("--point-speed");
    for p in &later {
        cmd.arg("--speed-from").arg(p);
    }
    let stderr = fails(cmd.arg("-o").arg(dir.path().join("no.profile")));
    assert!(
        stderr.contains("--point-speed reads each point's speed against a profile of the host"),
        "{stderr}"
    );
    let stderr = fails(
        tandem()
            .arg("train")
            .arg(&drifting)
            .arg("--speed-of")
            .arg(&yardstick)
            .arg("--point-speed")
            .arg("-o")
            .arg(dir.path().join("no.profile")),
    );
    assert!(stderr.contains("--speed-from"), "{stderr}");
}
