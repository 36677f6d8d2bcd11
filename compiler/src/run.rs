//! `tandem compile` and `tandem run`: compiling to an artifact, and running a model on inputs
//! from `.npy` files (or seeded random inputs), with optional timing.

use crate::ir::Graph;
use crate::lower::{compile, CompileOptions, Plan};
use crate::passes::{self, RefactorDepthwise};
use crate::tflite;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tandem_runtime::artifact::Artifact;
use tandem_runtime::gpu::device::DeviceInfo;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::rng::Rng;
use tandem_runtime::session::{Model, Session, SessionOptions};
use tandem_runtime::DType;

/// Seed of the inputs `tandem run` makes up when given none (the zoo's seed).
pub const DEFAULT_INPUT_SEED: u64 = 0x7A_4D_E3;

/// Reads a `.tflite` file into the graph IR.
pub fn read_file(path: &Path) -> Result<Graph> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    tflite::read_model(&bytes).with_context(|| format!("invalid model {}", path.display()))
}

/// Reads a `.tflite` file and compiles it with `options` (the model name defaults to the file
/// name).
pub fn compile_file(path: &Path, options: &CompileOptions) -> Result<Artifact> {
    let graph = read_file(path)?;
    let mut options = options.clone();
    if options.model_name.is_empty() {
        options.model_name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    compile(graph, &options).with_context(|| format!("cannot compile {}", path.display()))
}

/// Name of the TFLite metadata entry that holds the plan in `--emit-tflite` output.
pub const PLAN_METADATA: &str = "tandem_plan";

/// The plan of `artifact` as the JSON stored in the [`PLAN_METADATA`] entry:
/// `{"format": "tandem-plan/1", "threads": N, "gpu": label?, "steps": [{"name", "placement",
/// "gpu_channels"?}, …]}` in execution order (step names carry the node index).
pub fn plan_metadata(artifact: &Artifact) -> Vec<u8> {
    use tandem_runtime::artifact::Placement;
    let steps: Vec<serde_json::Value> = artifact
        .steps
        .iter()
        .map(|s| match s.placement {
            Placement::Cpu => serde_json::json!({"name": s.name, "placement": "cpu"}),
            Placement::Gpu => serde_json::json!({"name": s.name, "placement": "gpu"}),
            Placement::Split { gpu_channels } => serde_json::json!({
                "name": s.name, "placement": "split", "gpu_channels": gpu_channels
            }),
        })
        .collect();
    serde_json::json!({
        "format": "tandem-plan/1",
        "threads": artifact.threads,
        "gpu": artifact.gpu.as_ref().map(|g| g.label()),
        "steps": steps,
    })
    .to_string()
    .into_bytes()
}

/// Writes the graph that [`compile_file`] lowers — the `.tflite` at `path` after the passes and
/// the depthwise refactorization `refactor` — as a `.tflite` file at `out`, which the official
/// interpreter loads; with `plan`, its placements are stored as the metadata entry
/// [`PLAN_METADATA`] (replacing one of that name). `forms` (per-node decisions of
/// `--refactor-depthwise auto`, [`crate::dwauto::forms_of`]) replaces `refactor` when given.
/// Returns how many depthwise convolutions were rewritten.
pub fn emit_tflite(
    path: &Path,
    refactor: RefactorDepthwise,
    forms: Option<&[(usize, RefactorDepthwise)]>,
    out: &Path,
    plan: Option<&Artifact>,
) -> Result<usize> {
    let mut graph = read_file(path)?;
    passes::prepare(&mut graph).with_context(|| format!("cannot prepare {}", path.display()))?;
    let rewritten = match forms {
        Some(f) => crate::dwauto::apply_forms(&mut graph, f),
        None => passes::refactor_depthwise(&mut graph, refactor),
    }
    .with_context(|| format!("cannot refactorize {}", path.display()))?;
    if let Some(artifact) = plan {
        graph.metadata.retain(|m| m.name != PLAN_METADATA);
        graph.metadata.push(crate::ir::Metadata {
            name: PLAN_METADATA.to_string(),
            data: plan_metadata(artifact),
        });
    }
    let bytes = tflite::write_model(&graph)?;
    std::fs::write(out, bytes).with_context(|| format!("cannot write {}", out.display()))?;
    Ok(rewritten)
}

/// Loads a `.tandem` artifact, or compiles a `.tflite` model in memory with `options`
/// (artifacts are already compiled and ignore them).
pub fn load_model(path: &Path, options: &CompileOptions) -> Result<Model> {
    if path.extension().is_some_and(|e| e == "tflite") {
        return Ok(Model::from_artifact(compile_file(path, options)?));
    }
    Model::load_file(path).with_context(|| format!("cannot load {}", path.display()))
}

/// Reads `.npy` inputs, or makes seeded uniform [-1, 1) inputs when `files` is empty.
pub fn inputs_for(model: &Model, files: &[PathBuf]) -> Result<Vec<NpyArray>> {
    if files.is_empty() {
        let mut rng = Rng::new(DEFAULT_INPUT_SEED);
        return Ok(model
            .inputs()
            .iter()
            .map(|t| NpyArray::from_f32(t.shape.clone(), &rng.uniform(t.elements(), 1.0)))
            .collect());
    }
    let expected = model.inputs().len();
    if files.len() != expected {
        bail!(
            "the model takes {expected} inputs, {} --input files were given",
            files.len()
        );
    }
    files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?;
            NpyArray::parse(&bytes)
                .with_context(|| format!("{} is not a valid .npy file", f.display()))
        })
        .collect()
}

/// Latency summary of repeated runs.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub median: f64,
    pub min: f64,
    pub runs: usize,
}

/// What `tandem run --json` prints.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub model: String,
    pub threads: usize,
    /// The OpenCL device used, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Why the plan's GPU steps ran on the CPU (`--fallback-cpu`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    pub outputs: Vec<OutputReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<Latency>,
}

/// One output in the run report.
#[derive(Debug, Serialize)]
pub struct OutputReport {
    pub name: String,
    pub shape: Vec<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
}

/// The plan a compilation asks for, and the GPU it is for: `gpu_device` (a JSON
/// [`DeviceInfo`]) or this machine's OpenCL device when the plan uses the GPU.
pub fn resolve_gpu(plan: &Plan, gpu_device: Option<&Path>) -> Result<Option<DeviceInfo>> {
    if let Plan::SplitFraction(f) = plan {
        if !(0.0..=1.0).contains(f) || f.is_nan() {
            bail!("--split-fraction must be between 0 and 1, not {f}");
        }
    }
    if let Some(path) = gpu_device {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let info: DeviceInfo = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a GPU description", path.display()))?;
        return Ok(Some(info));
    }
    if *plan == Plan::CpuOnly {
        return Ok(None);
    }
    match tandem_runtime::gpu::device::GpuDevice::open() {
        Ok(dev) => Ok(Some(dev.info)),
        Err(e) => bail!(
            "this plan uses the GPU, but there is no OpenCL device to compile for ({e}); \
             give --gpu-device FILE.json to compile for another device, or --cpu-only"
        ),
    }
}

/// Runs the model once (after `repeat` timed runs when `repeat > 0`) and writes the outputs.
pub fn run_model(
    model: &Model,
    inputs: &[NpyArray],
    options: &SessionOptions,
    repeat: usize,
    output_dir: Option<&Path>,
) -> Result<RunReport> {
    let threads = options.threads;
    let mut session = Session::with_options(model, options.clone())?;
    for (i, (value, desc)) in inputs.iter().zip(model.inputs()).enumerate() {
        if value.dtype != DType::F32 || value.shape != desc.shape {
            bail!(
                "input {i} '{}' must be {} {:?}, the file holds {} {:?}",
                desc.name,
                desc.dtype,
                desc.shape,
                value.dtype,
                value.shape
            );
        }
    }
    let outputs = session.run(inputs)?;
    let latency_ms = (repeat > 0)
        .then(|| -> Result<Latency> {
            session.run(inputs)?; // warm-up
            let mut times = Vec::with_capacity(repeat);
            for _ in 0..repeat {
                let start = Instant::now();
                session.run(inputs)?;
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
            times.sort_by(f64::total_cmp);
            Ok(Latency {
                median: times[times.len() / 2],
                min: times[0],
                runs: repeat,
            })
        })
        .transpose()?;
    let mut reports = Vec::new();
    if let Some(dir) = output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    for (i, (value, desc)) in outputs.iter().zip(model.outputs()).enumerate() {
        let path = output_dir.map(|d| d.join(format!("output_{i}.npy")));
        if let Some(path) = &path {
            std::fs::write(path, value.to_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        reports.push(OutputReport {
            name: desc.name.clone(),
            shape: value.shape.clone(),
            path,
        });
    }
    Ok(RunReport {
        model: model.artifact().model.clone(),
        threads,
        gpu: session.gpu_device().map(|d| d.label()),
        fallback: session.fallback_reason().map(str::to_string),
        outputs: reports,
        latency_ms,
    })
}

/// Where a planned compilation takes its costs from.
#[derive(Debug, Clone)]
pub enum PlanSource {
    /// The shipped profile of the target GPU ([`tandem_predictors::bundle::default_for`]); when
    /// none matches (or there is no GPU), CPU only with a note.
    Default,
    /// This device profile's predictions.
    Profile(PathBuf),
    /// Measure every candidate on this machine (grid search, at most `max_candidates` per
    /// layer; 0 for every multiple of the vector width), with `options` per point.
    Oracle {
        max_candidates: usize,
        options: tandem_runtime::profile::MeasureOptions,
    },
    /// The profile of `Default` or `Profile` at this machine's speed now: the reference layer
    /// is timed on both sides (a few seconds; [`tandem_predictors::speed::probe_now`]) and each
    /// side's predictions are scaled by the profile's speed model for that time. An error for
    /// a profile without a speed model, or when this machine's OpenCL device is not the one
    /// planned for.
    AtSpeedNow(Box<PlanSource>),
}

/// A compiled model with the planner's report and what the caller should know.
pub struct Planned {
    pub artifact: Artifact,
    pub report: Option<crate::planner::PlanReport>,
    /// Why the plan is not the one asked for (e.g. no profile for this GPU).
    pub note: Option<String>,
}

/// Compiles `path` with a planned placement from `source` for `gpu` (`None`: no GPU known —
/// the plan is CPU only, with a note), a device of this machine: [`compile_planned_on`] with
/// this host's processor signature. `base` gives threads, name and refactorization; its plan
/// and GPU are replaced.
///
/// The oracle opens this machine's OpenCL device and pins the calling thread to core 0 and
/// PoCL's threads to core 1 ([`tandem_runtime::profile::split_cores`]); set
/// `POCL_MAX_PTHREAD_COUNT` before OpenCL starts for the one-core-each setting.
pub fn compile_planned(
    path: &Path,
    base: &CompileOptions,
    source: &PlanSource,
    gpu: Option<DeviceInfo>,
) -> Result<Planned> {
    let host = tandem_runtime::profile::host_signature();
    compile_planned_on(path, base, source, gpu, host.as_deref())
}

/// [`compile_planned`] for `gpu` on the host whose processor signature is `host`
/// ([`tandem_runtime::profile::host_signature`]; `None`: unknown, for a device described by a
/// file), which chooses among the shipped profiles of that device and decides the note about
/// a profile of another host.
pub fn compile_planned_on(
    path: &Path,
    base: &CompileOptions,
    source: &PlanSource,
    gpu: Option<DeviceInfo>,
    host: Option<&str>,
) -> Result<Planned> {
    let cpu_only = |note: String| -> Result<Planned> {
        let options = CompileOptions {
            plan: Plan::CpuOnly,
            gpu: None,
            ..base.clone()
        };
        Ok(Planned {
            artifact: compile_file(path, &options)?,
            report: None,
            note: Some(note),
        })
    };
    let Some(gpu) = gpu else {
        return cpu_only(
            "no OpenCL device to plan for: every step runs on the CPU (give --gpu-device \
             FILE.json to plan for another device)"
                .into(),
        );
    };
    let (source, speed_now) = match source {
        PlanSource::AtSpeedNow(inner) => (inner.as_ref(), true),
        other => (other, false),
    };
    if speed_now && !matches!(source, PlanSource::Default | PlanSource::Profile(_)) {
        bail!(
            "the speed of the hour scales a profile's predictions: plan with the shipped \
             profile or --profile"
        );
    }
    let profile_path = match source {
        PlanSource::AtSpeedNow(_) => bail!("the speed of the hour is read once per plan"),
        PlanSource::Oracle {
            max_candidates,
            options,
        } => {
            let profiler = tandem_runtime::profile::Profiler::open(true)
                .context("oracle mode measures on this machine's OpenCL device")?;
            if !profiler.device().same_device(&gpu) {
                bail!(
                    "oracle mode measures this machine's {}, not the requested {}",
                    profiler.device().label(),
                    gpu.label()
                );
            }
            let mut costs = crate::planner::Measured::new(profiler, *options, *max_candidates)?;
            // Auto: measure each depthwise layer's forms (native and refactorized) the same way,
            // keep the fastest, then plan the rewritten graph.
            let mut base = base.clone();
            let mut decided = None;
            if base.refactor_depthwise == RefactorDepthwise::Auto && base.depthwise_forms.is_none()
            {
                let mut graph = read_file(path)?;
                passes::prepare(&mut graph)
                    .with_context(|| format!("cannot prepare {}", path.display()))?;
                let d = crate::dwauto::choose(&graph, &mut costs, base.threads.max(1))?;
                base.depthwise_forms = Some(d.forms());
                decided = Some(d);
            }
            let plain = compile_file(
                path,
                &CompileOptions {
                    plan: Plan::CpuOnly,
                    gpu: None,
                    ..base.clone()
                },
            )?;
            let mut report = crate::planner::plan(
                &plain.steps,
                &plain.tensors,
                &mut costs,
                base.threads.max(1),
            )?;
            if let Some(d) = decided {
                report.depthwise = d.layers;
                report.notes.extend(d.notes);
            }
            let options = CompileOptions {
                plan: Plan::Steps(report.placements()),
                gpu: Some(gpu),
                ..base.clone()
            };
            return Ok(Planned {
                artifact: compile_file(path, &options)?,
                report: Some(report),
                note: None,
            });
        }
        PlanSource::Profile(p) => p.clone(),
        PlanSource::Default => match tandem_predictors::bundle::default_for(&gpu, host) {
            Some(p) => p,
            None => {
                let advice = match tandem_predictors::bundle::explicit_for(&gpu, host) {
                    Some(p) => format!(
                        "{} was measured on this device but is not a default, its plans having \
                         lost there (docs/predictors.md); give --profile to use it anyway",
                        p.display()
                    ),
                    None => "measure one with `tandem profile` + `tandem train` and give \
                             --profile"
                        .to_string(),
                };
                return cpu_only(format!(
                    "no shipped profile matches {}: every step runs on the CPU ({advice})",
                    gpu.label()
                ));
            }
        },
    };
    let profile = tandem_predictors::Profile::load(&profile_path)?;
    let name = profile_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut note = profile_note(
        &name,
        profile.device(),
        profile.provenance.host.as_deref(),
        &gpu,
        host,
    );
    let profile = if speed_now {
        let (profile, line) = at_speed_now(&profile, &name, &gpu)?;
        note = Some(match note {
            Some(n) => format!("{n}; {line}"),
            None => line,
        });
        profile
    } else {
        profile
    };
    let options = CompileOptions {
        plan: Plan::Predicted {
            profile: std::sync::Arc::new(profile),
            source: name,
        },
        gpu: Some(gpu),
        ..base.clone()
    };
    let graph = read_file(path)?;
    let mut options = options;
    if options.model_name.is_empty() {
        options.model_name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    let (artifact, report) = crate::lower::compile_with_report(graph, &options)
        .with_context(|| format!("cannot compile {}", path.display()))?;
    Ok(Planned {
        artifact,
        report,
        note,
    })
}

/// `profile` (called `name`) at this machine's speed now ([`PlanSource::AtSpeedNow`]), with a
/// line saying what the reference layer read and the factors it gave.
fn at_speed_now(
    profile: &tandem_predictors::Profile,
    name: &str,
    gpu: &DeviceInfo,
) -> Result<(tandem_predictors::Profile, String)> {
    if profile.speed.is_empty() {
        bail!(
            "the profile {name} has no speed model (train it on several datasets measured at \
             different hours: tandem train … --add MORE.csv)"
        );
    }
    let mut profiler = tandem_runtime::profile::Profiler::open(true)
        .context("timing the reference layer needs this machine's OpenCL device")?;
    if !profiler.device().same_device(gpu) {
        bail!(
            "the speed of the hour is read on this machine's {}, not on the planned {}",
            profiler.device().label(),
            gpu.label()
        );
    }
    let probe = tandem_predictors::speed::probe_now(&mut profiler)
        .context("cannot time the reference layer")?;
    let (scaled, factors, each) = profile.at_probe_speed(probe);
    let side =
        |i: usize, what: &str, model: Option<&tandem_predictors::speed::SideSpeed>| match model {
            Some(s) => format!(
                "{what} {:.4} ms against {:.4} ms: predictions ×{:.4}",
                probe[i], s.probe_ms, factors[i]
            ),
            None => format!(
                "{what} {:.4} ms: no model of the side, predictions as trained but for \
                 executors with models of their own",
                probe[i]
            ),
        };
    let own: Vec<String> = profile
        .speed
        .executors
        .keys()
        .filter_map(|name| Some(format!("{name} ×{:.4}", each.get(name)?)))
        .collect();
    let mut line = format!(
        "planned at the machine's speed now by the reference layer ({}; {})",
        side(0, "GPU side", profile.speed.gpu.as_ref()),
        side(1, "CPU side", profile.speed.cpu.as_ref())
    );
    if !own.is_empty() {
        line.push_str(&format!(
            "; executors by models of their own: {}",
            own.join(", ")
        ));
    }
    Ok((scaled, line))
}

/// This machine's OpenCL device, or the one described by `gpu_device`; `None` when neither.
pub fn gpu_for_planning(gpu_device: Option<&Path>) -> Result<Option<DeviceInfo>> {
    if gpu_device.is_some() {
        return resolve_gpu(&Plan::GpuOnly, gpu_device);
    }
    Ok(tandem_runtime::gpu::device::GpuDevice::open()
        .ok()
        .map(|d| d.info))
}
/// What a plan's user should know about the profile `name` (measured on the device `measured`
/// of the host `measured_host`, [`tandem_runtime::profile::host_signature`]) for the device
/// `gpu` of the host `host`: that it is of another device, or of the same device on another
/// host (hosts of one device description ran 9-150% apart, `docs/predictors.md`): another
/// processor signature where both are known, else a reported memory that differs by over
/// 10%; `None` when it matches.
pub fn profile_note(
    name: &str,
    measured: &DeviceInfo,
    measured_host: Option<&str>,
    gpu: &DeviceInfo,
    host: Option<&str>,
) -> Option<String> {
    let (theirs, ours) = (measured.global_mem_bytes, gpu.global_mem_bytes);
    let advice = format!(
        "whose speed it may not predict (measure this one with `tandem profile`, then \
         `tandem train --base {name}`)"
    );
    if !measured.same_device(gpu) {
        Some(format!(
            "the profile {name} was measured on {}, the plan is for {}",
            measured.label(),
            gpu.label()
        ))
    } else if let (Some(theirs), Some(ours)) = (measured_host, host) {
        (theirs != ours).then(|| {
            format!(
                "the profile {name} was measured on another host ({theirs}; this one is \
                 {ours}), {advice}"
            )
        })
    } else if theirs.abs_diff(ours) > theirs.max(ours) / 10 {
        Some(format!(
            "the profile {name} was measured on a host whose device reported {:.1} GB of \
             memory, this one reports {:.1} GB: likely another host, {advice}",
            theirs as f64 / 1e9,
            ours as f64 / 1e9
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped_device(sidecar: &str) -> DeviceInfo {
        let path = tandem_predictors::bundle::shipped_dir().join(sidecar);
        let text = std::fs::read_to_string(&path).expect("a shipped device description");
        let meta: serde_json::Value = serde_json::from_str(&text).expect("json");
        serde_json::from_value(meta["device"].clone()).expect("a device")
    }

    #[test]
    fn a_profile_of_another_device_or_host_gets_a_note() {
        let first = shipped_device("pocl-1core.device.json");
        let second = shipped_device("pocl-1core.fresh17.device.json");
        let amd = shipped_device("pocl-1core-epyc.device.json");
        assert_eq!(profile_note("p.profile", &first, None, &first, None), None);
        let near = DeviceInfo {
            global_mem_bytes: first.global_mem_bytes / 100 * 95,
            ..first.clone()
        };
        assert_eq!(profile_note("p.profile", &first, None, &near, None), None);
        let host = profile_note("p.profile", &first, None, &second, None).expect("another host");
        assert!(
            host.contains("22.0 GB")
                && host.contains("8.1 GB")
                && host.contains("--base p.profile"),
            "{host}"
        );
        let device = profile_note("p.profile", &first, None, &amd, None).expect("another device");
        assert!(device.contains("AuthenticAMD"), "{device}");
        // Processor signatures, where both are known, decide instead of the memory.
        let (zen4, zen5) = (
            Some("AuthenticAMD family 25 model 17 stepping 1"),
            Some("AuthenticAMD family 26 model 2 stepping 0"),
        );
        assert_eq!(profile_note("p.profile", &first, zen4, &second, zen4), None);
        let other = profile_note("p.profile", &first, zen5, &first, zen4).expect("another host");
        assert!(
            other.contains("family 26") && other.contains("family 25") && other.contains("--base"),
            "{other}"
        );
        // One side unknown: the memory rule.
        assert!(profile_note("p.profile", &first, None, &second, zen4).is_some());
    }
}
