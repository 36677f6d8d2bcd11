//! `tandem profile`, `tandem train`, `tandem eval` and `tandem calibrate`: measure a device,
//! train its latency predictors, score a profile on a dataset, and bring a profile to the
//! device's speed today.

use crate::lower::CompileOptions;
use crate::passes::RefactorDepthwise;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tandem_predictors::bundle::{Accuracy, ProbeSpeed};
use tandem_predictors::dataset::{self, Row};
use tandem_predictors::eval::{self, accuracies_json, evaluate, pooled, repeatability, to_json};
use tandem_predictors::features::{Layer, OpKind};
use tandem_predictors::measure::{self, progress_line, Limits, Plan, SizeBounds};
use tandem_predictors::Profile;
use tandem_predictors::{calibrate, corun};
use tandem_runtime::gpu::device::DeviceInfo;
use tandem_runtime::profile::{cpu_description, host_signature, LayerOp, MeasureOptions, Profiler};

/// `tandem profile`: measure layers on this machine's CPU and OpenCL device.
#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// The dataset to write (CSV); configurations already in it are skipped (resume).
    #[arg(long)]
    pub out: PathBuf,
    /// Op kinds to measure.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "conv,dwconv,linear,gconv"
    )]
    pub ops: Vec<String>,
    /// Random configurations (the model configurations come in addition).
    #[arg(long, default_value_t = 200)]
    pub samples: usize,
    /// CPU thread counts.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub threads: Vec<usize>,
    /// Stop starting new configurations after this many minutes.
    #[arg(long, value_name = "MINUTES")]
    pub time_budget: Option<f64>,
    /// Seed of the random configurations and channel counts.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Channel counts measured per executor and configuration.
    #[arg(long, default_value_t = 6)]
    pub points: usize,
    /// Rounds over each configuration's points; a point's latency (`ms`) is the least of its
    /// round medians (reproducible on a machine whose load changes), and its fastest
    /// repetition over the rounds is recorded too (`least_ms`, for `tandem train --latency
    /// least`).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Measurements of each configuration, a block of 64 configurations (a minute or two)
    /// apart (a block's length apart when the run or its last block is shorter): the
    /// machine's slow phases of about a minute move all of a configuration's points together,
    /// and rounds seconds apart share them; passes a block apart do not. `tandem train`,
    /// `eval` and `calibrate` pool a point's passes (the geometric mean of the medians, the
    /// fastest repetition of all). An interrupted run
    /// resumes with the passes still missing
    #[arg(long, default_value_t = 1)]
    pub passes: usize,
    /// Quiet gate, in percent: a round is kept only when a fixed reference layer, timed on the
    /// same core before and after it, is within this much of its quiet time; rounds measured
    /// in a slow phase of the machine are measured again (0 keeps every round).
    #[arg(long, default_value_t = 8.0, value_name = "PERCENT")]
    pub quiet_gate: f64,
    /// The quiet gate's second reading on the GPU side, in percent: a round is kept only when
    /// the join (the CPU–GPU handoff, `sync_ms`), timed before and after it, is also within
    /// this much of its quiet time. Some hosts have slow handoff phases of tens of seconds
    /// that add µs to every short GPU part (0 leaves the join out of the gate; with
    /// `--quiet-gate 0` there is no gate).
    #[arg(long, default_value_t = 60.0, value_name = "PERCENT")]
    pub sync_gate: f64,
    /// The quiet gate's memory reading on both sides, in percent: a round is kept only when a
    /// stream of 64 MB from memory, timed before and after it on the same core, is also within
    /// this much of its quiet time. Other tenants' memory traffic slows layers over about
    /// 8 MB by 1.3–2.7x for seconds and leaves the reference layer, which fits the cache,
    /// alone (0 leaves the memory out of the gate; with `--quiet-gate 0` there is no gate).
    #[arg(long, default_value_t = 15.0, value_name = "PERCENT")]
    pub memory_gate: f64,
    /// Models whose splittable layers are measured too (default: the zoo's `.tflite` files in
    /// `zoo/`, when that folder exists). `--models none` measures random layers only.
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<PathBuf>,
    /// Measure only layers that one of these executors runs whole (e.g.
    /// `conv_winograd,depthwise_3x3`: more data where a model is weak). Random draws that no
    /// named executor runs are skipped, and so are the models' layers.
    #[arg(long, value_delimiter = ',', value_name = "EXECUTORS")]
    pub focus: Vec<String>,
    /// Largest layer to measure, in MFLOPs of the whole layer.
    #[arg(long, default_value_t = 400.0)]
    pub max_mflops: f64,
    /// Measure only layers whose working set (input and output activations and weights) is at
    /// least this many MB: more data where layers stream from the shared L3 and memory. Draws
    /// below it are skipped (the draws above it are those of a run without this option), and
    /// so are the models' smaller layers.
    #[arg(long, default_value_t = 0.0, value_name = "MB")]
    pub min_mb: f64,
    /// Measure only layers whose working set is at most this many MB: more data where a
    /// layer's latency repeats from one session to the next. Over about 8 MB a layer's data
    /// competes with other tenants for the shared L3, and on a shared host its latency then
    /// changes with theirs (`docs/evaluation.md`). Draws above it are skipped (the draws
    /// below it are those of a run without this option), and so are the models' larger
    /// layers. 0: no bound.
    #[arg(long, default_value_t = 0.0, value_name = "MB")]
    pub max_mb: f64,
    /// Timed repetitions per point at least (after 2 warm-up runs; more for short points).
    #[arg(long, default_value_t = 7)]
    pub reps: usize,
    /// Timed work to aim for per point, in milliseconds: short points repeat (up to 41 runs)
    /// until they reach it.
    #[arg(long, default_value_t = 60.0)]
    pub target_ms: f64,
    /// Leave thread placement alone instead of the one-core-each setting (PoCL limited to one
    /// thread on core 1, the CPU side on core 0).
    #[arg(long)]
    pub no_pin: bool,
    /// Time each GPU part from an idle queue (its enqueue and the OpenCL runtime's wake-up
    /// included), as the Intel Xeon profile's data was measured, instead of from a queue
    /// already spinning in a wait kernel as in a session.
    #[arg(long)]
    pub gpu_from_idle: bool,
    /// Measure under SCHED_FIFO (real-time priority 10): on a machine busy with other work,
    /// preemptions otherwise add scheduler ticks (4 ms) to long GPU kernels.
    #[arg(long)]
    pub realtime: bool,
    /// Measure the contention of split steps instead: per configuration one split at a random
    /// GPU channel count, its CPU and GPU parts apart and side by side as a session runs them
    /// (`--rounds` rounds, no quiet gate). `--out` is then a co-run dataset for `tandem train
    /// --corun`; `--points` does not apply.
    #[arg(long)]
    pub corun: bool,
}

/// `tandem train`: one LightGBM predictor per executor.
#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    /// The dataset (CSV, or .csv.gz) from `tandem profile`.
    pub dataset: PathBuf,
    /// The profile to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Also write the training report (per-executor accuracy and ablations) as JSON.
    #[arg(long, value_name = "R.json")]
    pub report_json: Option<PathBuf>,
    /// Add every row of another dataset of the same device and CPU: another session's
    /// measurement, say, or a fresh set already scored. A point measured in several of the
    /// datasets is pooled like the passes of one (geometric mean); `--drop-slow-joins` and
    /// `--base-speed` apply to each dataset on its own (its joins' percentile, its machine
    /// offset), so with `--base-speed` sessions measured in faster and slower hours are
    /// brought to the base's speed before they are pooled. Repeatable.
    #[arg(long, value_name = "MORE.csv")]
    pub add: Vec<PathBuf>,
    /// Add the CPU rows of another dataset of the same device and CPU (configurations the
    /// main dataset has are not taken twice). For an earlier run measured without the quiet
    /// gate: its CPU side repeats within 3%, its GPU side does not. Repeatable.
    #[arg(long, value_name = "OTHER.csv")]
    pub add_cpu: Vec<PathBuf>,
    /// Leave out the short GPU parts of configurations whose join (`sync_ms`) took more than
    /// this many percent over the 10th percentile of the dataset's joins (before `--add-cpu`):
    /// measured in a slow phase of the CPU–GPU handoff (data profiled before `--sync-gate`, or
    /// whose rounds found no quiet phase), which adds about twice the join's excess to every
    /// part. Parts it changes by under 1% stay. Off by default.
    #[arg(long, value_name = "PERCENT")]
    pub drop_slow_joins: Option<f64>,
    /// A co-run dataset of the same device (`tandem profile --corun`): the profile then states
    /// the contention of split steps per op kind, and the planner charges it. Repeatable.
    #[arg(long, value_name = "CORUN.csv")]
    pub corun: Vec<PathBuf>,
    /// A profile of the same device measured on another host, whose predictors this training
    /// may correct: per executor, a forest on the residuals of the base's predictions where
    /// that cross-validates better than one from scratch. A profile for a new host from a short
    /// measurement of it. Repeatable: each executor then corrects the base whose correction
    /// cross-validates best (hosts differ by side: one base may describe this host's CPU
    /// best, another its GPU kernels).
    #[arg(long, value_name = "BASE.profile")]
    pub base: Vec<PathBuf>,
    /// With `--base`: take the dataset's machine-wide speed out first, so that the corrections
    /// learn the shape of this measurement and keep the base's speed. The dataset's latencies
    /// are divided by one factor, its machine offset against the base (the median of the
    /// executors' median measured / predicted, as `tandem eval` reports it); the executors'
    /// speeds relative to one another stay this measurement's. Each `--add` dataset gets its
    /// own factor. For a host whose whole speed moves by several percent between hours, where
    /// a short measurement's level is that of its hour. The factors are recorded in the
    /// profile's dataset name. Takes exactly one `--base` (`--speed-of` brings the data to one
    /// profile's speed with any number).
    #[arg(long, requires = "base")]
    pub base_speed: bool,
    /// Bring every dataset (the main one and each `--add`) to this profile's speed before
    /// training: like `--base-speed`, each dataset's latencies are divided by its machine
    /// offset against it, but the profile is only the yardstick (it is not corrected) and any
    /// number of `--base` may be given. For pooling sessions of a host measured in faster and
    /// slower hours without teaching the forests the difference: the profile's speed model
    /// (`--speed-from`) then carries the hour. It must be of the same device and fitted on the
    /// same `--latency`.
    #[arg(long, value_name = "PROFILE", conflicts_with = "base_speed")]
    pub speed_of: Option<PathBuf>,
    /// With `--base`: accept a base measured on another OpenCL device (PoCL compiled for
    /// another instruction set, say, on a host of another CPU generation). Its forests then
    /// only start the search: cross-validation on this dataset still decides per executor
    /// whether correcting them beats a forest from scratch. Without it such a base is refused.
    #[arg(long, requires = "base")]
    pub base_other_device: bool,
    /// Which latency of each point to fit: `median` (the least of the rounds' median
    /// repetitions, every dataset has it) or `least` (the fastest single repetition, which
    /// repeats far better on a shared machine; datasets measured before tandem recorded it
    /// are refused). The profile records it, and `tandem eval` and `tandem calibrate` score it
    /// against the same latency.
    #[arg(long, default_value = "median", value_parser = parse_latency)]
    pub latency: dataset::Latency,
    /// Fit the profile's speed model on these datasets of the device instead of on the
    /// datasets it is trained on: sets measured at other hours that the forests have not seen,
    /// whose levels against the new profile show how its predictions move with the reference
    /// layer (a fit on the training sets sees the levels the forests already absorbed).
    /// Needs at least 4. Repeatable.
    #[arg(long, value_name = "LATER.csv")]
    pub speed_from: Vec<PathBuf>,
    /// With `--speed-of` (or `--base-speed`) and `--speed-from`: also take each point's own
    /// moment out before training. Within one dataset the host's speed drifts (a long
    /// measurement spans slow and fast phases), and each point's reference-layer time records
    /// its moment; a point's latency is multiplied by `(median / its probe)^b`, the median
    /// its dataset's on its side, so that every point of a dataset stands at its median
    /// moment and the machine offset then brings the dataset to the yardstick's speed. `b` per
    /// side is fitted on the `--speed-from` sets against the yardstick: how far one point's
    /// latency moves with its own probe about its set's (`speed::point_elasticity`), below the
    /// elasticity across sets because one reading is noisier than a set's median. A side
    /// whose points do not follow their probes is left as measured.
    #[arg(long, requires = "speed_from")]
    pub point_speed: bool,
}

fn parse_latency(s: &str) -> Result<dataset::Latency, String> {
    dataset::Latency::parse(s)
        .ok_or_else(|| format!("'{s}' is not a latency; give median or least"))
}

/// `tandem eval`: MAPE and ±10% share of a profile's predictions per executor.
#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    /// The profile.
    pub profile: PathBuf,
    /// A dataset measured on the same device (CSV or .csv.gz).
    pub dataset: PathBuf,
    /// Print `{"executors": {NAME: {"mape": …, "within10": …, "n": …}}, "overall": {the
    /// same, points-weighted over every executor}, "at_target": {"target": 5.0, "executors":
    /// how many executors reach it, "of": …}, "offset": {NAME: …},
    /// "machine_offset": …, "speed_adjusted": {NAME: …}}` (MAPE in percent; offset: the median
    /// of measured / predicted, minus 1, in percent; machine_offset: the median of the
    /// executors' offsets; speed_adjusted: the executors' accuracy with every prediction scaled
    /// by that one factor; `"probe"`: the reference layer's speed of the dataset and of the
    /// profile's data per side, and its change; `"probe_scaled"`: the accuracy with each side's
    /// predictions scaled by that change, where both recorded it; `"speed_model"`: the
    /// factor per side of the profile's speed model at the dataset's reference-layer time and
    /// the accuracy with it, where the profile has one, and in `"per_point"` the accuracy with
    /// each point scaled at its own row's reference-layer time; with `--repeat` or
    /// `--repeat-passes`, also `"repeatability"` of the executors' shape,
    /// `"repeatability_overall"` and `"repeatability_at_target"`; `"latency"`: `median` or
    /// `least`, the latency of each point the profile predicts and is scored against, as
    /// trained with `--latency`).
    #[arg(long)]
    pub json: bool,
    /// A second measurement of (some of) the dataset's points, e.g. `tandem profile` run again
    /// with the same seed: also prints how far the two measurements lie apart per executor (as
    /// a MAPE), the floor under any predictor's MAPE on this dataset.
    #[arg(long, value_name = "AGAIN.csv")]
    pub repeat: Option<PathBuf>,
    /// For a dataset measured in passes (`tandem profile --passes 2` or more): how far its own
    /// passes lie apart, as `--repeat` reports it, each point's later passes pooled and scored
    /// as if they were a prediction of its first pass. Where an executor misses, this says
    /// whether its points' own measurements lie as far apart.
    #[arg(long, conflicts_with = "repeat")]
    pub repeat_passes: bool,
    /// Further measurements of the dataset's points taken at other times (repeatable): each
    /// point is scored against the geometric mean of all its measurements, whose noise is
    /// about `1/√k` of one run's. Points that one of them lacks are left out.
    #[arg(long, value_name = "AGAIN.csv")]
    pub pool: Vec<PathBuf>,
    /// Also write every point's prediction to this CSV (`config, executor, threads, c0, c1,
    /// ms, predicted_ms, error_percent`; error = predicted / measured − 1): where the errors
    /// lie.
    #[arg(long, value_name = "POINTS.csv")]
    pub points: Option<PathBuf>,
    /// Score only the points of layers whose working set (input and output activations and
    /// weights) is at least this many MB.
    #[arg(long, default_value_t = 0.0, value_name = "MB")]
    pub min_mb: f64,
    /// Score only the points of layers whose working set is at most this many MB (0: no
    /// bound): e.g. 8 for the layers whose latency does not follow what other tenants of a
    /// shared host leave of the L3 (`docs/evaluation.md`).
    #[arg(long, default_value_t = 0.0, value_name = "MB")]
    pub max_mb: f64,
}

/// `tandem calibrate`: per-executor factors from a recent measurement.
#[derive(Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// The profile to calibrate.
    pub profile: PathBuf,
    /// A short measurement of the same device made now (`tandem profile --time-budget 4`, a
    /// seed of its own): each executor's predictions are scaled by the median of measured /
    /// predicted on it.
    pub dataset: PathBuf,
    /// Further recent measurements of the device pooled with DATASET (repeatable): more
    /// configurations give factors with smaller standard errors, and reach the rare kernels.
    #[arg(long, value_name = "DATASET.csv")]
    pub add: Vec<PathBuf>,
    /// The calibrated profile to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Configurations an executor needs in the dataset for its factor to be applied (fewer:
    /// its predictions are left as they are; so are they when the factor is within two
    /// standard errors of 1).
    #[arg(long, default_value_t = calibrate::DEFAULT_MIN_CONFIGS)]
    pub min_configs: usize,
    /// Fit the calibrated profile's speed model ([`tandem_predictors::speed`]) on these
    /// datasets of the device, measured at different hours (at least 4): how its calibrated
    /// predictions' level follows the reference layer's time, for `tandem compile
    /// --speed-probe` and `tandem eval`. Without it the calibrated profile has no speed model:
    /// one fitted before was against the predictions before calibration, and scaling by both
    /// would count the hour's speed twice. Repeatable.
    #[arg(long, value_name = "HOUR.csv")]
    pub speed_from: Vec<PathBuf>,
}

/// `tandem flatten`: distil a profile's long forests into short ones.
#[derive(Args, Debug, Clone)]
pub struct FlattenArgs {
    /// The profile whose long forests to flatten (corrections of corrections, say).
    pub profile: PathBuf,
    /// The flattened profile to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// The most trees a forest may keep: longer ones are replaced by a forest of at most this
    /// many, fit to their predictions. A sweep over a layer's splits costs about in
    /// proportion to the trees (200: the training grid's bound).
    #[arg(long, default_value_t = 200)]
    pub max_trees: u32,
    /// Keep each long forest's first N trees as they are and distil only the trees after them,
    /// into max-trees − N (a correction's base trees carry most of its prediction, so the
    /// distilled part is small). 0: distil the whole forest.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keep: u32,
    /// Random configurations drawn per op kind (each at 8 channel counts) whose features the
    /// new forests are fit on. A kernel left with fewer rows than this by them (few random
    /// layers dispatch to it) gets further rounds of as many draws (at most 16), whose rows go
    /// to it alone; one left under 100 rows is refused. The student follows its teacher closer
    /// with more rows (Z10's CPU forests, held out: median 1.9% at 3000, 1.6% at 30000; 99th
    /// percentile 5–14% → 4–10%), at about 40 s and 1.3 GB for four long forests.
    #[arg(long, default_value_t = tandem_predictors::flatten::DEFAULT_CONFIGS_PER_OP)]
    pub configs: usize,
    /// Seed of the random configurations (and of LightGBM).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A dataset of the device whose rows' features join the random ones (its latencies are
    /// not used: the old forest is the target). Repeatable.
    #[arg(long, value_name = "DATASET.csv")]
    pub data: Vec<PathBuf>,
}

/// An error naming `flag` and `path` when a row of `rows` was measured on another device or
/// CPU than `main` (device, CPU), those of `main_path` (the main dataset, or the profile).
#[cfg(feature = "lightgbm")]
fn refuse_other_device(
    flag: &str,
    path: &Path,
    rows: &[dataset::Row],
    main: &(String, String),
    main_path: &Path,
) -> Result<()> {
    let (device, cpu) = main;
    if let Some(r) = rows.iter().find(|r| &r.device != device || &r.cpu != cpu) {
        bail!(
            "{flag} {}: measured on '{}' with '{}', {} on '{device}' with '{cpu}'",
            path.display(),
            r.device,
            r.cpu,
            main_path.display()
        );
    }
    Ok(())
}

/// [`dataset::read`] of `path`, saying how many rows of a CPU loop or GPU launch the runtime
/// has since replaced it left out.
fn read_dataset(path: &Path) -> Result<Vec<dataset::Row>> {
    let mut rows = dataset::read_measurements(path)?;
    say_superseded(dataset::drop_superseded(&mut rows), path);
    Ok(dataset::pool_repeats(rows))
}

/// Says that `dropped` rows of `path` were left out as measurements of a replaced CPU loop or
/// GPU launch.
fn say_superseded(dropped: usize, path: &Path) {
    if dropped > 0 {
        eprintln!(
            "{}: left out {dropped} rows measured with a CPU loop or GPU launch the runtime no \
             longer runs for them (their `variant`; docs/predictors.md)",
            path.display()
        );
    }
}

/// The sidecar of a dataset that records the full device description: `DATASET.device.json`.
pub fn device_sidecar(dataset: &Path) -> PathBuf {
    let name = dataset
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".gz")
        .unwrap_or(&name)
        .strip_suffix(".csv")
        .unwrap_or(&name)
        .to_string();
    dataset.with_file_name(format!("{stem}.device.json"))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Sidecar {
    device: DeviceInfo,
    cpu: String,
    /// The host's processor signature (`host_signature`); absent in datasets measured before
    /// it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    setting: String,
}

/// An error when `dataset` exists and its device description `sidecar` records another host
/// than `host`: resuming it here would mix two hosts' measurements under this one's name (the
/// OpenCL device, which the dataset's rows check, can read the same on both). Nothing to check
/// where either signature is unknown.
fn refuse_another_hosts_dataset(dataset: &Path, sidecar: &Path, host: Option<&str>) -> Result<()> {
    if !dataset.exists() {
        return Ok(());
    }
    let recorded = std::fs::read_to_string(sidecar)
        .ok()
        .and_then(|text| serde_json::from_str::<Sidecar>(&text).ok())
        .and_then(|meta| meta.host);
    if let (Some(recorded), Some(host)) = (recorded, host) {
        if recorded != host {
            bail!(
                "{} was measured on another host ({recorded}, by {}); this one is {host}: \
                 profile into another file",
                dataset.display(),
                sidecar.display()
            );
        }
    }
    Ok(())
}

/// The splittable layers of the models in `paths` (standard convolutions, depthwise and fully
/// connected); layers the predictors do not model are left out. With `grouped`, each
/// depthwise layer is followed by its diagonalwise refactorizations
/// ([`measure::grouped_variants`]: a `gconv` layer per valid `G`, and the dense `G = C` conv).
pub fn model_layers(paths: &[PathBuf], grouped: bool) -> Result<Vec<Layer>> {
    let mut out = Vec::new();
    for path in paths {
        let options = CompileOptions {
            refactor_depthwise: RefactorDepthwise::Off,
            ..CompileOptions::cpu(1, "")
        };
        let artifact = crate::run::compile_file(path, &options)
            .with_context(|| format!("reading the layers of {}", path.display()))?;
        for step in &artifact.steps {
            if let Some(op) = LayerOp::from_kernel(&step.kernel) {
                if let Ok(l) = Layer::from_op(&op) {
                    let variants = if grouped {
                        measure::grouped_variants(&l, true)
                    } else {
                        Vec::new()
                    };
                    out.push(l);
                    out.extend(variants);
                }
            }
        }
    }
    Ok(out)
}

fn default_models() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir("zoo")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|e| e == "tflite")
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("tiny"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs `tandem profile`.
///
/// With pinning (the default) this sets `POCL_MAX_PTHREAD_COUNT=1` for the process, so it must
/// run before any other thread or OpenCL use in the process.
pub fn profile(args: &ProfileArgs) -> Result<()> {
    let ops: Vec<OpKind> = args
        .ops
        .iter()
        .map(|s| {
            OpKind::parse(s.trim())
                .with_context(|| format!("--ops: '{s}' is not conv, dwconv, linear or gconv"))
        })
        .collect::<Result<_>>()?;
    if args.threads.is_empty() || args.threads.contains(&0) {
        bail!("--threads: give thread counts of at least 1, e.g. 1,2");
    }
    if !(args.quiet_gate >= 0.0 && args.quiet_gate.is_finite()) {
        bail!(
            "--quiet-gate: {} is not a percentage; give e.g. 8, or 0 to keep every round",
            args.quiet_gate
        );
    }
    if !(args.sync_gate >= 0.0 && args.sync_gate.is_finite()) {
        bail!(
            "--sync-gate: {} is not a percentage; give e.g. 60, or 0 to leave the join out",
            args.sync_gate
        );
    }
    if !(args.memory_gate >= 0.0 && args.memory_gate.is_finite()) {
        bail!(
            "--memory-gate: {} is not a percentage; give e.g. 15, or 0 to leave the memory out",
            args.memory_gate
        );
    }
    let sizes = SizeBounds::new(args.min_mb, args.max_mb).map_err(anyhow::Error::msg)?;
    let models = match args.models.as_slice() {
        [] => default_models(),
        [one] if one.as_os_str() == "none" => vec![],
        list => list.to_vec(),
    };
    let limits = Limits {
        max_flops: args.max_mflops * 1e6,
        ..Limits::default()
    };
    let possible = measure::possible_executors(&ops, &args.threads);
    if let Some(bad) = args.focus.iter().find(|e| !possible.contains(e)) {
        bail!(
            "--focus: '{bad}' is not an executor of --ops {}; they are {}",
            args.ops.join(","),
            possible.join(", ")
        );
    }
    let mut setting = if args.no_pin {
        format!("threads {:?}; no pinning", args.threads)
    } else {
        format!(
            "CPU side on core 0 with threads {:?}; OpenCL device limited to one thread \
             (POCL_MAX_PTHREAD_COUNT=1) on core 1",
            args.threads
        )
    };
    if args.realtime {
        setting.push_str("; SCHED_FIFO");
    }
    if args.realtime {
        tandem_runtime::profile::realtime(10).map_err(anyhow::Error::msg)?;
    }
    if !args.no_pin {
        // SAFETY: `tandem profile` calls this first, before any thread or OpenCL use.
        unsafe { tandem_runtime::profile::limit_pocl_threads() };
    }
    let mut profiler = Profiler::open(!args.no_pin).context(
        "tandem profile needs an OpenCL device with fine-grained SVM (pocl-opencl-icd here)",
    )?;
    let focused = |l: &Layer| {
        (args.focus.is_empty()
            || measure::whole_layer_executors(l, profiler.device(), &args.threads)
                .iter()
                .any(|e| args.focus.contains(e)))
            && sizes.contains(l)
    };
    let mut model_layers = model_layers(&models, ops.contains(&OpKind::GroupedConv))?;
    model_layers.retain(|l| focused(l));
    let random =
        measure::random_layers_where(&ops, args.samples, args.seed, &limits, |l| focused(l));
    let configs = measure::schedule(&model_layers, &random, &ops, &limits);
    if configs.is_empty() && args.samples > 0 && (!args.focus.is_empty() || sizes.is_bounded()) {
        bail!(
            "no layer of --ops {} within --max-mflops {} passes --focus {}, --min-mb {} and \
             --max-mb {} ({} random draws tried): widen the filters",
            args.ops.join(","),
            args.max_mflops,
            if args.focus.is_empty() {
                "(none)".to_string()
            } else {
                args.focus.join(",")
            },
            args.min_mb,
            args.max_mb,
            args.samples * 1000
        );
    }
    let cpu = cpu_description();
    let plan = Plan {
        ops,
        samples: args.samples,
        threads: args.threads.clone(),
        budget: args
            .time_budget
            .map(|m| Duration::from_secs_f64((m * 60.0).max(0.0))),
        seed: args.seed,
        points: args.points.max(1),
        rounds: args.rounds.max(1),
        passes: args.passes.max(1),
        quiet_slack: args.quiet_gate / 100.0,
        sync_slack: args.sync_gate / 100.0,
        memory_slack: args.memory_gate / 100.0,
        limits,
        measure: MeasureOptions {
            min_reps: args.reps.max(1),
            target_ms: args.target_ms.max(0.0),
            gpu_from_idle: args.gpu_from_idle,
            ..MeasureOptions::default()
        },
        setting: setting.clone(),
    };
    let progress = |p: &measure::Progress| {
        eprint!("\r{:<140}", progress_line(p));
        let _ = std::io::stderr().flush();
    };
    if args.corun {
        eprintln!(
            "measuring {} configurations side by side on {} and {}",
            configs.len(),
            profiler.device().label(),
            cpu
        );
        let s = corun::measure(&mut profiler, &args.out, &configs, &plan, progress)?;
        eprintln!();
        println!(
            "measured {} configurations side by side into {}; {} already there; {} too \
             narrow to split; {} left for lack of time",
            s.measured,
            args.out.display(),
            s.skipped,
            s.unsplittable,
            s.out_of_budget
        );
        return Ok(());
    }
    let sidecar = device_sidecar(&args.out);
    let host = host_signature();
    refuse_another_hosts_dataset(&args.out, &sidecar, host.as_deref())?;
    let meta = Sidecar {
        device: profiler.device().clone(),
        cpu: cpu.clone(),
        host,
        setting: setting.clone(),
    };
    std::fs::write(&sidecar, serde_json::to_string_pretty(&meta)? + "\n")
        .with_context(|| format!("cannot write {}", sidecar.display()))?;
    eprintln!(
        "profiling {} configurations ({} from {} models) on {} and {}",
        configs.len(),
        model_layers.len(),
        models.len(),
        profiler.device().label(),
        cpu
    );
    let summary = measure::run(&mut profiler, &args.out, &configs, &plan, &cpu, progress)?;
    eprintln!();
    if plan.passes > 1 {
        println!(
            "measured {} passes over configurations ({} rows) into {}; {} configurations \
             already measured {} times; {} passes left for lack of time",
            summary.measured,
            summary.rows,
            args.out.display(),
            summary.skipped,
            plan.passes,
            summary.out_of_budget
        );
    } else {
        println!(
            "measured {} configurations ({} rows) into {}; {} already there; {} left for lack \
             of time",
            summary.measured,
            summary.rows,
            args.out.display(),
            summary.skipped,
            summary.out_of_budget
        );
    }
    if plan.quiet_slack > 0.0 {
        let g = summary.gate;
        println!(
            "quiet gate ({}%, join {}, memory {}): {} rounds measured again after a slow phase; {} \
             configuration sides without a quiet round (their least round kept); {:.1} s spent \
             waiting",
            args.quiet_gate,
            if args.sync_gate > 0.0 {
                format!("{}%", args.sync_gate)
            } else {
                "off".to_string()
            },
            if args.memory_gate > 0.0 {
                format!("{}%", args.memory_gate)
            } else {
                "off".to_string()
            },
            g.discarded,
            g.noisy,
            g.waited.as_secs_f64()
        );
    }
    Ok(())
}

/// Runs `tandem flatten`.
#[cfg(not(feature = "lightgbm"))]
pub fn flatten(_args: &FlattenArgs) -> Result<()> {
    bail!("this tandem was built without LightGBM (feature `lightgbm`); rebuild with it to flatten")
}

/// Runs `tandem flatten`.
#[cfg(feature = "lightgbm")]
pub fn flatten(args: &FlattenArgs) -> Result<()> {
    use tandem_predictors::flatten::{flatten, FlattenOptions};
    let profile = Profile::load(&args.profile)?;
    if args.configs == 0 {
        bail!("--configs must be at least 1");
    }
    // Rows of another device would carry another dispatch's features.
    let main = (profile.device().label(), profile.provenance.cpu.clone());
    let mut datasets = Vec::new();
    for path in &args.data {
        let rows = read_dataset(path)?;
        refuse_other_device("--data", path, &rows, &main, &args.profile)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        datasets.push((name, rows));
    }
    let opts = FlattenOptions {
        max_trees: args.max_trees,
        keep: args.keep,
        configs_per_op: args.configs,
        seed: args.seed,
        ..FlattenOptions::default()
    };
    let (flat, report) = flatten(&profile, &datasets, &opts)
        .with_context(|| format!("cannot flatten {}", args.profile.display()))?;
    flat.save(&args.output)?;
    println!(
        "| executor | trees before | trees after | fit rows | held-out rows | median error | \
         99th percentile |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    for (name, e) in &report.executors {
        println!(
            "| {name} | {} | {} | {} | {} | {:.2}% | {:.2}% |",
            e.trees_before, e.trees_after, e.rows, e.held_out, e.median_error, e.p99_error
        );
    }
    if report.executors.is_empty() {
        println!(
            "no forest has more than {} trees: nothing to flatten",
            args.max_trees
        );
    }
    if report.extra_rounds > 0 {
        println!(
            "{} further rounds of {} random configurations per op kind drawn for the kernels \
             that few random layers dispatch to",
            report.extra_rounds, args.configs
        );
    }
    println!("flattened profile → {}", args.output.display());
    Ok(())
}

/// Runs `tandem train`.
#[cfg(not(feature = "lightgbm"))]
pub fn train(_args: &TrainArgs) -> Result<()> {
    bail!("this tandem was built without LightGBM (feature `lightgbm`); rebuild with it to train")
}

/// Runs `tandem train`.
#[cfg(feature = "lightgbm")]
pub fn train(args: &TrainArgs) -> Result<()> {
    use tandem_predictors::train::{self, DeviceMeta};
    if let Some(percent) = args.drop_slow_joins {
        if !(percent >= 0.0 && percent.is_finite()) {
            bail!("--drop-slow-joins: {percent} is not a percentage; give e.g. 60");
        }
    }
    let sidecar = device_sidecar(&args.dataset);
    let text = std::fs::read_to_string(&sidecar).with_context(|| {
        format!(
            "cannot read {} (written by tandem profile next to the dataset)",
            sidecar.display()
        )
    })?;
    let meta: Sidecar = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a device description", sidecar.display()))?;
    let contention = if args.corun.is_empty() {
        Default::default()
    } else {
        contention_of(&args.corun, &meta.device.label())?
    };
    if args.base_speed && args.base.len() != 1 {
        bail!(
            "--base-speed takes exactly one --base (the speed to bring the data to), not {}; \
             --speed-of P brings the data to P's speed with several",
            args.base.len()
        );
    }
    let mut bases: Vec<(Profile, String)> = Vec::new();
    for path in &args.base {
        let name = file_name_of(path);
        if bases.iter().any(|(_, n)| *n == name) {
            bail!("--base {}: a second base named '{name}'", path.display());
        }
        bases.push({
            let profile = tandem_predictors::Profile::load(path)?;
            if !profile.device().same_device(&meta.device) {
                if !args.base_other_device {
                    bail!(
                        "--base {}: measured on '{}', the dataset on '{}' (--base-other-device \
                         lets cross-validation decide whether its forests still help)",
                        path.display(),
                        profile.device().label(),
                        meta.device.label()
                    );
                }
                eprintln!(
                    "--base {}: measured on '{}', the dataset on '{}'; cross-validation decides \
                     per executor whether correcting it beats a forest from scratch",
                    path.display(),
                    profile.device().label(),
                    meta.device.label()
                );
            }
            (profile, name)
        });
    }
    let yardstick = match &args.speed_of {
        Some(path) => Some(speed_yardstick(path, &meta.device, args.latency)?),
        None => None,
    };
    let speed_base = match (&yardstick, args.base_speed, bases.first()) {
        (Some((profile, name)), _, _) => Some(SpeedBase {
            profile,
            name,
            flag: "--speed-of",
        }),
        (None, true, Some((profile, name))) => Some(SpeedBase {
            profile,
            name,
            flag: "--base-speed",
        }),
        _ => None,
    };
    // Every training dataset as measured, checked to be of one device.
    let mut read = Vec::new();
    let mut first: Option<(String, String)> = None;
    for path in std::iter::once(&args.dataset).chain(&args.add) {
        let (these, name) = training_rows(path, args.drop_slow_joins, args.latency)?;
        let Some(r) = these.first() else {
            bail!("{}: no measurements", path.display());
        };
        match &first {
            None => first = Some((r.device.clone(), r.cpu.clone())),
            Some(main) => refuse_other_device("--add", path, &these, main, &args.dataset)?,
        }
        read.push((path, these, name));
    }
    // The speed model's datasets, read (and checked) before the training they follow.
    let mut later = Vec::new();
    if !args.speed_from.is_empty() {
        check_speed_set_count(args.speed_from.len())?;
        let main = first.clone().unwrap_or_default();
        for path in &args.speed_from {
            let rows = dataset::with_latency(read_dataset(path)?, args.latency, path)?;
            refuse_other_device("--speed-from", path, &rows, &main, &args.dataset)?;
            later.push((path, rows));
        }
    }
    let point_elasticity = if args.point_speed {
        Some(point_speed_elasticity(speed_base, &later)?)
    } else {
        None
    };
    let mut rows = Vec::new();
    let mut names = Vec::new();
    // Each dataset as measured, for the speed model.
    let mut measured = Vec::new();
    for (path, mut these, mut name) in read {
        let as_measured = these.clone();
        if let Some(elasticity) = point_elasticity {
            at_median_moment(path, &mut these, &mut name, elasticity);
        }
        if let Some(base) = speed_base {
            at_base_speed(path, &mut these, &mut name, base)?;
        }
        rows.extend(these);
        names.push(name);
        measured.push((path, as_measured));
    }
    if !args.add.is_empty() {
        // A point measured in several of the datasets is one point, their geometric mean.
        let stored = rows.len();
        rows = dataset::pool_repeats(rows);
        eprintln!(
            "--add: {} points from {stored} rows of {} datasets",
            rows.len(),
            names.len()
        );
    }
    let mut name = names.join(" + ");
    for other in &args.add_cpu {
        let added = cpu_rows_of(other, &rows, args.latency)?;
        eprintln!(
            "{}: {} CPU rows of configurations {} lacks",
            other.display(),
            added.len(),
            args.dataset.display()
        );
        name.push_str(&format!(" + CPU rows of {}", file_name_of(other)));
        rows.extend(added);
    }
    let bases: Vec<train::Base> = bases
        .iter()
        .map(|(profile, name)| train::Base {
            profile,
            name: name.clone(),
        })
        .collect();
    let (mut profile, report) = train::train_from(
        &rows,
        DeviceMeta {
            device: meta.device,
            cpu: meta.cpu,
            host: meta.host,
            setting: meta.setting,
        },
        &name,
        &bases,
        |line| eprintln!("{line}"),
    )?;
    if !later.is_empty() {
        profile.speed = speed_model(&profile, &later);
    } else if measured.len() >= tandem_predictors::speed::MIN_DATASETS {
        profile.speed = speed_model(&profile, &measured);
    }
    profile.contention = contention;
    profile.provenance.latency = args.latency;
    profile.provenance.corun_datasets = args
        .corun
        .iter()
        .map(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    profile.save(&args.output)?;
    if let Some(r) = &args.report_json {
        std::fs::write(r, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("cannot write {}", r.display()))?;
    }
    println!(
        "trained {} executors on {} rows ({} configurations) → {}",
        profile.executors.len(),
        rows.len(),
        report.configs,
        args.output.display()
    );
    Ok(())
}

/// The file name of `path`, for provenance (empty when it has none).
#[cfg(feature = "lightgbm")]
fn file_name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The profile whose speed a training brings its datasets to (`--base-speed`: the base;
/// `--speed-of`: a yardstick), its file name, and the option that named it (for messages).
#[cfg(feature = "lightgbm")]
#[derive(Clone, Copy)]
struct SpeedBase<'a> {
    profile: &'a Profile,
    name: &'a str,
    flag: &'static str,
}

/// Loads `--speed-of`'s profile: one of `device`, fitted on the `latency` the training fits
/// (a machine offset against predictions of another statistic would carry the gap between
/// the two). Returns it with its file name.
#[cfg(feature = "lightgbm")]
fn speed_yardstick(
    path: &Path,
    device: &tandem_runtime::gpu::device::DeviceInfo,
    latency: dataset::Latency,
) -> Result<(Profile, String)> {
    let profile = tandem_predictors::Profile::load(path)?;
    if !profile.device().same_device(device) {
        bail!(
            "--speed-of {}: measured on '{}', the dataset on '{}'; a speed is read against a \
             profile of the same device",
            path.display(),
            profile.device().label(),
            device.label()
        );
    }
    if profile.provenance.latency != latency {
        bail!(
            "--speed-of {}: fitted on the {} latency, this training on the {}; pass --latency {}",
            path.display(),
            profile.provenance.latency.name(),
            latency.name(),
            profile.provenance.latency.name()
        );
    }
    Ok((profile, file_name_of(path)))
}

/// The rows `tandem train` takes from one dataset, and how its provenance names them: its
/// points (passes pooled) with the `latency` fitted, without the short GPU parts of slow joins
/// when `drop_slow_joins` (a percentage over the dataset's own 10th percentile) is given.
#[cfg(feature = "lightgbm")]
fn training_rows(
    path: &Path,
    drop_slow_joins: Option<f64>,
    latency: dataset::Latency,
) -> Result<(Vec<dataset::Row>, String)> {
    let mut rows = dataset::with_latency(read_dataset(path)?, latency, path)?;
    let mut name = file_name_of(path);
    if let Some(percent) = drop_slow_joins {
        let before = rows.len();
        let configs = tandem_predictors::quiet::drop_slow_join_gpu_rows(&mut rows, percent / 100.0);
        eprintln!(
            "--drop-slow-joins {percent}: left out {} short GPU parts of {configs} \
             configurations of {} measured in a slow handoff phase",
            before - rows.len(),
            path.display()
        );
        name.push_str(&format!(
            " without the short GPU parts of slow joins (+{percent}%)"
        ));
    }
    Ok((rows, name))
}

/// Divides one dataset's latencies (`rows`, of `path`) by its machine offset against
/// `base` (`--base-speed`'s base or `--speed-of`'s profile), so that datasets measured in
/// hours of different speeds agree, and says so in `name`.
#[cfg(feature = "lightgbm")]
fn at_base_speed(
    path: &Path,
    rows: &mut [dataset::Row],
    name: &mut String,
    base: SpeedBase,
) -> Result<()> {
    let SpeedBase {
        profile,
        name: base_name,
        flag,
    } = base;
    let e = evaluate(profile, rows);
    if e.offset.is_empty() {
        bail!(
            "{flag}: none of the executors of {} is in {base_name}, so it has no speed \
             against it",
            path.display()
        );
    }
    let offset = e.machine_offset;
    let factor = 1.0 + offset / 100.0;
    if !(factor > 0.0 && factor.is_finite()) {
        bail!(
            "{flag}: the machine offset of {} against {base_name} is {offset}%",
            path.display()
        );
    }
    for r in rows.iter_mut() {
        r.ms /= factor;
    }
    eprintln!(
        "{flag}: {} ran {offset:+.2}% against {base_name}; its latencies divided by \
         {factor:.4}",
        path.display()
    );
    name.push_str(&format!(" at the speed of {base_name} (÷{factor:.4})"));
    Ok(())
}

/// `--point-speed`'s elasticity per side (GPU, CPU): fitted on the `--speed-from` sets
/// (`later`) against the yardstick ([`tandem_predictors::speed::point_elasticity`]). An error
/// without a yardstick; a side without a fit is said and left as measured (`None`).
#[cfg(feature = "lightgbm")]
fn point_speed_elasticity(
    speed_base: Option<SpeedBase>,
    later: &[(&PathBuf, Vec<dataset::Row>)],
) -> Result<[Option<f64>; 2]> {
    let Some(SpeedBase {
        profile,
        name,
        flag,
    }) = speed_base
    else {
        bail!(
            "--point-speed reads each point's speed against a profile of the host: give it \
             with --speed-of (or --base-speed with one --base)"
        );
    };
    let sets: Vec<&[dataset::Row]> = later.iter().map(|(_, rows)| rows.as_slice()).collect();
    let fits = tandem_predictors::speed::point_elasticity(profile, &sets);
    for (side, fit) in ["GPU", "CPU"].iter().zip(&fits) {
        match fit {
            Some(f) => eprintln!(
                "--point-speed, {side} side: a point's latency moves {:.3}x (±{:.3}) its own \
                 reference layer's time about its dataset's ({} points of {} --speed-from sets \
                 against {flag} {name})",
                f.elasticity, f.se, f.points, f.datasets
            ),
            None => eprintln!(
                "--point-speed, {side} side: its points do not follow their own reference \
                 layer's time in the --speed-from sets against {flag} {name} (too few points \
                 with a probe, or a slope not {} standard errors above zero): left as measured",
                tandem_predictors::speed::MIN_T
            ),
        }
    }
    Ok(fits.map(|f| f.map(|f| f.elasticity)))
}

/// Brings each point of one dataset (`rows`, of `path`) to the dataset's median moment by its
/// own reference-layer time (`--point-speed`, [`tandem_predictors::speed::at_median_probe`])
/// and says so in `name`.
#[cfg(feature = "lightgbm")]
fn at_median_moment(
    path: &Path,
    rows: &mut [dataset::Row],
    name: &mut String,
    elasticity: [Option<f64>; 2],
) {
    let (moved, typical) = tandem_predictors::speed::at_median_probe(rows, elasticity);
    eprintln!(
        "--point-speed: {moved} points of {} brought to its median reference-layer time \
         (median change {typical:.2}%)",
        path.display()
    );
    let side = |b: Option<f64>| b.map_or("as measured".to_string(), |b| format!("^{b:.3}"));
    name.push_str(&format!(
        " with each point at its median probe (GPU side {}, CPU side {})",
        side(elasticity[0]),
        side(elasticity[1])
    ));
}

/// The speed model of `profile` ([`tandem_predictors::speed`]) on datasets of several hours,
/// each as measured (those a profile was trained on, or `--speed-from`'s): per side, how their
/// levels against it follow their reference layer's times. Prints each dataset's speed and the
/// fit, or why a side has none.
fn speed_model(
    profile: &Profile,
    measured: &[(&PathBuf, Vec<dataset::Row>)],
) -> tandem_predictors::speed::SpeedModel {
    use tandem_predictors::speed::{self, DatasetSpeed, MIN_DATASETS, MIN_T};
    let speeds: Vec<DatasetSpeed> = measured
        .iter()
        .map(|(path, rows)| {
            let s = DatasetSpeed::of(profile, rows);
            let side = |i: usize| match (s.probe_ms[i], s.level[i]) {
                (Some(p), Some(l)) => format!("probe {p:.4} ms, level {:+.2}%", 100.0 * (l - 1.0)),
                _ => "no probe".into(),
            };
            eprintln!(
                "speed of {}: GPU side {}; CPU side {}",
                path.display(),
                side(0),
                side(1)
            );
            s
        })
        .collect();
    let model = speed::fit(&speeds);
    for (name, side) in [("GPU", &model.gpu), ("CPU", &model.cpu)] {
        match side {
            Some(s) => eprintln!(
                "speed model, {name} side: the level moves {:.2}x the reference layer's time \
                 (over {} datasets; their levels' spread {:.2}% → {:.2}% with it; at {:.4} ms \
                 ×{:.4})",
                s.elasticity, s.datasets, s.spread_percent, s.residual_percent, s.probe_ms, s.level
            ),
            None => eprintln!(
                "speed model, {name} side: none (it needs {MIN_DATASETS} datasets with the \
                 reference layer whose levels follow its time by at least {MIN_T} standard \
                 errors)"
            ),
        }
    }
    for (name, s) in &model.executors {
        eprintln!(
            "speed model of {name}: its level moves {:.2}x its side's reference layer's time \
             (over {} datasets; spread {:.2}% → {:.2}%; at {:.4} ms ×{:.4})",
            s.elasticity, s.datasets, s.spread_percent, s.residual_percent, s.probe_ms, s.level
        );
    }
    model
}

/// The contention fitted on the co-run datasets `paths` (printed), which must be of the device
/// `device`; an error when no op kind has enough configurations.
#[cfg(feature = "lightgbm")]
fn contention_of(
    paths: &[PathBuf],
    device: &str,
) -> Result<std::collections::BTreeMap<String, corun::Contention>> {
    let mut rows = Vec::new();
    for path in paths {
        let these = corun::read(path)?;
        if let Some(r) = these.iter().find(|r| r.device != device) {
            bail!(
                "--corun {}: measured on '{}', the dataset on '{device}'",
                path.display(),
                r.device
            );
        }
        rows.extend(these);
    }
    let fit = corun::fit(&rows);
    if fit.is_empty() {
        bail!(
            "--corun: {} configurations; the contention of an op kind needs {} of it at one \
             thread count whose faster part takes at least {} ms",
            rows.len(),
            corun::MIN_CONFIGS,
            corun::MIN_PART_MS
        );
    }
    for (key, c) in &fit {
        let bins: Vec<String> = c
            .by_intensity
            .iter()
            .map(|b| format!("from {}: {:.1}% ({})", b.from, 100.0 * b.excess, b.configs))
            .collect();
        eprintln!(
            "contention {key}: a split's overlapped time stretches by {:.1}% (median of {} \
             configurations); by FLOPs per byte, {}",
            100.0 * c.excess,
            c.configs,
            if bins.is_empty() {
                "no bin with enough configurations".to_string()
            } else {
                bins.join(", ")
            }
        );
    }
    Ok(fit)
}

/// The CPU rows of dataset `other` whose configurations `main` lacks; an error when `other`
/// was measured on another device or CPU than `main`.
#[cfg(feature = "lightgbm")]
fn cpu_rows_of(
    other: &Path,
    main: &[dataset::Row],
    latency: dataset::Latency,
) -> Result<Vec<dataset::Row>> {
    use tandem_predictors::features::is_cpu;
    let rows = dataset::with_latency(read_dataset(other)?, latency, other)?;
    if let Some(a) = main.first() {
        if let Some(r) = rows.iter().find(|r| r.device != a.device || r.cpu != a.cpu) {
            bail!(
                "--add-cpu {}: measured on '{}' with '{}', the dataset on '{}' with '{}'",
                other.display(),
                r.device,
                r.cpu,
                a.device,
                a.cpu
            );
        }
    }
    let have: std::collections::HashSet<&str> = main.iter().map(|r| r.config.as_str()).collect();
    Ok(rows
        .into_iter()
        .filter(|r| is_cpu(&r.executor) && !have.contains(r.config.as_str()))
        .collect())
}

/// Runs `tandem eval`.
pub fn eval(args: &EvalArgs) -> Result<()> {
    let sizes = SizeBounds::new(args.min_mb, args.max_mb).map_err(anyhow::Error::msg)?;
    let profile = Profile::load(&args.profile)?;
    let latency = profile.provenance.latency;
    let mut measurements = dataset::read_measurements(&args.dataset)?;
    say_superseded(dataset::drop_superseded(&mut measurements), &args.dataset);
    let stored = measurements.len();
    let passes = args
        .repeat_passes
        .then(|| dataset::first_pass_and_rest(measurements.clone()));
    let mut rows =
        dataset::with_latency(dataset::pool_repeats(measurements), latency, &args.dataset)
            .with_context(|| format!("{} predicts fastest repetitions", args.profile.display()))?;
    if stored > rows.len() {
        eprintln!(
            "{}: {} points from {stored} rows (the passes of a point pooled: {})",
            args.dataset.display(),
            rows.len(),
            match latency {
                dataset::Latency::Median => "the geometric mean of their medians",
                dataset::Latency::Least => "the fastest repetition of them all",
            }
        );
    }
    if sizes.is_bounded() {
        let all = rows.len();
        rows.retain(|r| sizes.contains(&r.layer));
        eprintln!(
            "scoring the {} of {all} points whose layer's working set lies within --min-mb {} \
             and --max-mb {}",
            rows.len(),
            args.min_mb,
            if args.max_mb > 0.0 {
                args.max_mb.to_string()
            } else {
                "(none)".into()
            }
        );
        if rows.is_empty() {
            bail!(
                "no point of {} lies within the working-set bounds",
                args.dataset.display()
            );
        }
    }
    let device = profile.device().label();
    if let Some(r) = rows.iter().find(|r| r.device != device) {
        eprintln!(
            "warning: {} has rows measured on '{}'; the profile is for '{device}' (its \
             predictions are for another device)",
            args.dataset.display(),
            r.device
        );
    }
    let others = args
        .pool
        .iter()
        .map(|p| Ok(dataset::with_latency(read_dataset(p)?, latency, p)?))
        .collect::<Result<Vec<_>>>()?;
    if let Some(first) = rows.first() {
        for (path, other) in args.pool.iter().zip(&others) {
            if let Some(r) = other.iter().find(|r| r.device != first.device) {
                bail!(
                    "--pool {}: measured on '{}', {} on '{}' (pool measurements of one device)",
                    path.display(),
                    r.device,
                    args.dataset.display(),
                    first.device
                );
            }
        }
    }
    let pool = pooled(&rows, &others);
    if !others.is_empty() {
        if pool.rows.is_empty() {
            bail!(
                "none of the points of {} is in every --pool measurement (measure them with \
                 the same seed and options)",
                args.dataset.display()
            );
        }
        eprintln!(
            "scored against the geometric mean of {} measurements per point: {} points ({} of \
             {} left out, not in every measurement)",
            1 + others.len(),
            pool.rows.len(),
            pool.dropped,
            args.dataset.display()
        );
    }
    let e = evaluate(&profile, &pool.rows);
    let floor = match (&args.repeat, passes) {
        (Some(path), _) => Some(repeatability(
            &rows,
            &dataset::with_latency(read_dataset(path)?, latency, path)?,
        )),
        (None, Some((first, rest))) => {
            if rest.is_empty() {
                bail!(
                    "--repeat-passes: every point of {} was measured once (measure with \
                     `tandem profile --passes 2` or more)",
                    args.dataset.display()
                );
            }
            let mut first = dataset::with_latency(first, latency, &args.dataset)?;
            first.retain(|r| sizes.contains(&r.layer));
            Some(repeatability(
                &first,
                &dataset::with_latency(rest, latency, &args.dataset)?,
            ))
        }
        (None, None) => None,
    };
    let profile_probe = profile.provenance.probe.as_ref();
    let probe_change = e.probe_change;
    if args.json {
        let mut j = to_json(&e);
        j["latency"] = latency.name().into();
        if let Some(floor) = &floor {
            j["repeatability"] = accuracies_json(floor);
            j["repeatability_overall"] = eval::accuracy_json(&eval::overall(floor));
            j["repeatability_at_target"] = eval::at_target_json(floor);
        }
        j["probe"] = serde_json::json!({
            "dataset": e.probe,
            "profile": profile_probe,
            "change_percent": {"gpu": probe_change[0], "cpu": probe_change[1]},
        });
        println!("{j}");
    } else if let Some(floor) = &floor {
        println!(
            "| executor | n | MAPE | within ±10% | median offset | repeated points | repeat MAPE | \
             repeat within ±10% |\n|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (name, a) in &e.executors {
            let f = floor.get(name);
            println!(
                "| {name} | {} | {:.2}% | {:.1}% | {:+.1}% | {} | {} | {} |",
                a.n,
                a.mape,
                a.within10 * 100.0,
                e.offset.get(name).copied().unwrap_or(0.0),
                f.map_or(0, |f| f.n),
                f.map_or("–".into(), |f| format!("{:.2}%", f.mape)),
                f.map_or("–".into(), |f| format!("{:.1}%", f.within10 * 100.0)),
            );
        }
        let (all, again) = (eval::overall(&e.executors), eval::overall(floor));
        println!(
            "| all (points-weighted) | {} | {:.2}% | {:.1}% | | {} | {:.2}% | {:.1}% |",
            all.n,
            all.mape,
            all.within10 * 100.0,
            again.n,
            again.mape,
            again.within10 * 100.0
        );
        println!(
            "\n{}\nrepeat MAPE: {}; {} of {} executors' repeat MAPE is at most {}%.",
            target_line(&e.executors),
            if args.repeat_passes {
                "each point's later passes pooled, scored as if they were a prediction of its \
                 first pass: how far this dataset's own measurements lie apart"
            } else {
                "the second measurement scored as if it were a prediction of this one, the \
                 floor under any predictor's MAPE here"
            },
            eval::at_target(floor, eval::TARGET_MAPE),
            floor.len(),
            eval::TARGET_MAPE
        );
    } else {
        println!(
            "| executor | n | MAPE | within ±10% | median offset | speed-adjusted MAPE |\n\
             |---|---:|---:|---:|---:|---:|"
        );
        for (name, a) in &e.executors {
            println!(
                "| {name} | {} | {:.2}% | {:.1}% | {:+.1}% | {:.2}% |",
                a.n,
                a.mape,
                a.within10 * 100.0,
                e.offset.get(name).copied().unwrap_or(0.0),
                e.speed_adjusted.get(name).map_or(0.0, |s| s.mape)
            );
        }
        let (all, adjusted) = (
            eval::overall(&e.executors),
            eval::overall(&e.speed_adjusted),
        );
        println!(
            "| all (points-weighted) | {} | {:.2}% | {:.1}% | | {:.2}% |",
            all.n,
            all.mape,
            all.within10 * 100.0,
            adjusted.mape
        );
        println!("\n{}", target_line(&e.executors));
    }
    if !args.json {
        println!(
            "\nlatency: {} (the profile's; {})",
            latency.name(),
            match latency {
                dataset::Latency::Median => "the least of each point's round medians, `ms`",
                dataset::Latency::Least => "each point's fastest repetition, `least_ms`",
            }
        );
        println!(
            "\nmachine offset {:+.1}%: the median of the executors' offsets, how much slower (+) \
             or faster (−) the whole machine ran than when the profile's data were measured. \
             Speed-adjusted MAPE (JSON: speed_adjusted): every prediction scaled by that one \
             factor (a diagnosis fitted on this dataset; MAPE is the accuracy).",
            e.machine_offset
        );
        println!(
            "{}",
            probe_line(profile_probe, e.probe.as_ref(), probe_change)
        );
        if !e.probe_scaled.is_empty() {
            println!(
                "\nScaled by the reference layer's change on each side (not fitted on these \
                 latencies):\n\n| executor | probe-scaled MAPE | within ±10% |\n|---|---:|---:|"
            );
            for (name, a) in &e.probe_scaled {
                println!("| {name} | {:.2}% | {:.1}% |", a.mape, a.within10 * 100.0);
            }
        }
        if !e.speed_scaled.is_empty() {
            let factor = |f: Option<f64>| f.map_or("none".into(), |f| format!("×{f:.4}"));
            println!(
                "\nAt the machine's speed of the hour by the profile's speed model (GPU side \
                 {}, CPU side {}, from this dataset's reference layer; fitted on the \
                 profile's datasets; an executor with a model of its own by that):\n\n\
                 | executor | factor | speed-model MAPE | within ±10% | each point at its own \
                 probe |\n|---|---:|---:|---:|---:|",
                factor(e.speed_factor[0]),
                factor(e.speed_factor[1])
            );
            for (name, a) in &e.speed_scaled {
                let own = if profile.speed.executors.contains_key(name) {
                    " (own)"
                } else {
                    ""
                };
                let per_point = e
                    .point_speed_scaled
                    .get(name)
                    .map_or("—".into(), |p| format!("{:.2}%", p.mape));
                println!(
                    "| {name} | {}{own} | {:.2}% | {:.1}% | {per_point} |",
                    factor(e.executor_speed_factor.get(name).copied()),
                    a.mape,
                    a.within10 * 100.0
                );
            }
        }
    }
    for (name, n) in &e.unknown {
        eprintln!("warning: {n} rows of executor '{name}' have no predictor in the profile");
    }
    if let Some(path) = &args.points {
        write_points(path, &pool.rows, &e.predicted)?;
    }
    Ok(())
}

/// How many executors reach the MAPE target ([`eval::TARGET_MAPE`]) and which do not.
fn target_line(executors: &BTreeMap<String, Accuracy>) -> String {
    let missed: Vec<&str> = executors
        .iter()
        .filter(|(_, a)| a.mape > eval::TARGET_MAPE)
        .map(|(k, _)| k.as_str())
        .collect();
    let mut line = format!(
        "{} of {} executors at or under the {}% MAPE target",
        executors.len() - missed.len(),
        executors.len(),
        eval::TARGET_MAPE
    );
    if !missed.is_empty() {
        line += &format!(" (over it: {})", missed.join(", "));
    }
    line + "."
}

/// What the quiet gate's reference layer says of the machine's speed: per side, its time
/// for the dataset and for the profile's training data, and the change.
fn probe_line(
    profile: Option<&ProbeSpeed>,
    dataset: Option<&ProbeSpeed>,
    change: [Option<f64>; 2],
) -> String {
    let Some(d) = dataset else {
        return "reference layer: not recorded in this dataset (measured before tandem \
                recorded it, or without the quiet gate)"
            .into();
    };
    let side = |name: &str, now: Option<f64>, then: Option<f64>, change: Option<f64>| match (
        now, then, change,
    ) {
        (Some(n), Some(t), Some(c)) => format!("{name} {n:.4} ms against {t:.4} ms ({c:+.1}%)"),
        (Some(n), _, _) => format!("{name} {n:.4} ms (the profile's data did not record it)"),
        _ => format!("{name} not recorded"),
    };
    format!(
        "reference layer (the machine's speed by the quiet gate's probe, this dataset against \
         the profile's training data): {}; {}",
        side(
            "GPU side",
            d.gpu_ms,
            profile.and_then(|p| p.gpu_ms),
            change[0]
        ),
        side(
            "CPU side",
            d.cpu_ms,
            profile.and_then(|p| p.cpu_ms),
            change[1]
        ),
    )
}

/// Runs `tandem calibrate`.
pub fn calibrate(args: &CalibrateArgs) -> Result<()> {
    let profile = Profile::load(&args.profile)?;
    let files: Vec<&PathBuf> = std::iter::once(&args.dataset).chain(&args.add).collect();
    let mut rows = Vec::new();
    for path in &files {
        let these = dataset::with_latency(read_dataset(path)?, profile.provenance.latency, path)
            .with_context(|| format!("{} predicts fastest repetitions", args.profile.display()))?;
        calibrate::check_rows(&profile, &these)
            .with_context(|| format!("cannot calibrate with {}", path.display()))?;
        rows.extend(these);
    }
    // The record names every file, in the order given.
    let name = files
        .iter()
        .map(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(" + ");
    let (calibrated, c) = calibrate::calibrate(
        &profile,
        &rows,
        &name,
        &tandem_predictors::bundle::today(),
        args.min_configs,
    )
    .with_context(|| {
        let shown: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        format!("cannot calibrate with {}", shown.join(" + "))
    })?;
    let mut calibrated = calibrated;
    if args.speed_from.is_empty() {
        if !profile.speed.is_empty() {
            eprintln!(
                "the speed model of {} is not kept: it was fitted against the predictions \
                 before this calibration (refit it with --speed-from)",
                args.profile.display()
            );
        }
    } else {
        calibrated.speed = speed_model(&calibrated, &speed_sets(&calibrated, &args.speed_from)?);
    }
    calibrated.save(&args.output)?;
    println!(
        "| executor | points | configurations | measured / predicted | standard error | applied \
         |\n|---|---:|---:|---:|---:|---|"
    );
    for (name, e) in &c.executors {
        let applied = if e.applied {
            "yes"
        } else if e.configs < c.min_configs {
            "no: too few configurations"
        } else {
            "no: within 2 standard errors of 1"
        };
        println!(
            "| {name} | {} | {} | {:.3} | {} | {applied} |",
            e.points,
            e.configs,
            e.factor,
            e.standard_error
                .map_or("–".into(), |se| format!("{:.1}%", 100.0 * se))
        );
    }
    for name in profile.executors.keys() {
        if !c.executors.contains_key(name) {
            println!("| {name} | 0 | 0 | – | – | no: no points |");
        }
    }
    println!("calibrated profile → {}", args.output.display());
    Ok(())
}

/// Refuses `count` `--speed-from` datasets when a speed model needs more
/// ([`tandem_predictors::speed::MIN_DATASETS`]).
fn check_speed_set_count(count: usize) -> Result<()> {
    let need = tandem_predictors::speed::MIN_DATASETS;
    if count < need {
        bail!("--speed-from: {count} datasets, a speed model needs at least {need}");
    }
    Ok(())
}

/// `tandem calibrate --speed-from`: the datasets `paths` (at least
/// [`tandem_predictors::speed::MIN_DATASETS`]), each at `profile`'s latency statistic and
/// checked to be of its device; an error names the file that is not.
fn speed_sets<'a>(
    profile: &Profile,
    paths: &'a [PathBuf],
) -> Result<Vec<(&'a PathBuf, Vec<dataset::Row>)>> {
    check_speed_set_count(paths.len())?;
    paths
        .iter()
        .map(|path| {
            let rows =
                dataset::with_latency(read_dataset(path)?, profile.provenance.latency, path)?;
            calibrate::check_rows(profile, &rows)
                .with_context(|| format!("cannot fit the speed model on {}", path.display()))?;
            Ok((path, rows))
        })
        .collect()
}

/// Writes `tandem eval --points`: one line per row that has a prediction.
fn write_points(path: &Path, rows: &[Row], predicted: &[Option<f64>]) -> Result<()> {
    let mut out = String::from("config,executor,threads,c0,c1,ms,predicted_ms,error_percent\n");
    for (r, p) in rows.iter().zip(predicted) {
        if let Some(p) = p {
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{:.3}\n",
                r.config,
                r.executor,
                r.threads,
                r.c0,
                r.c1,
                r.ms,
                p,
                100.0 * (p / r.ms.max(1e-12) - 1.0)
            ));
        }
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}
