//! The profiling driver behind `tandem profile`: which configurations and channel counts to
//! measure, in what order, with resume and a progress line.
//!
//! Configurations: random ones, each dimension drawn by first picking a power-of-two interval
//! `[2^k, 2^(k+1))` uniformly and then a value uniformly inside it (so small and large sizes are
//! equally represented), plus the configurations that occur in given models (the zoo). Layers
//! whose full computation exceeds [`Limits`] are skipped (single-core PoCL would spend minutes
//! on them). Per configuration: the GPU at up to `points` channel counts `g` (multiples of the
//! kernel's vector width, one drawn in each of `points` equal bins of `[1, C]`, and `C`), the
//! CPU at each thread count at as many counts, and the join overhead once.
//!
//! Grouped convolutions (`gconv`) are depthwise geometries refactorized diagonalwise
//! ([`grouped_variants`]): a random `gconv` draw is a depthwise layer as the `dwconv` sampler
//! draws it (channels a multiple of 4), expanded to one configuration per group size
//! `G ∈ {4, 8, 16, 32}` that divides `C` and is below it.

use crate::dataset::{self, config_key, Appender, DatasetError, Row};
use crate::features::{
    cpu_executor, cpu_variant, gpu_executor, gpu_variant, record, Layer, OpKind,
};
use crate::quiet::{gated_rounds, GateStats, MemoryProbe, QuietGate};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tandem_runtime::gpu::device::DeviceInfo;
use tandem_runtime::gpu::dispatch::{dispatch, vector_width, Variant};
use tandem_runtime::gpu::GpuError;
use tandem_runtime::profile::{MeasureOptions, Profiler};
use tandem_runtime::rng::Rng;

/// Size limits of measured layers.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest full-layer FLOPs.
    pub max_flops: f64,
    /// Largest weight count.
    pub max_weights: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_flops: 400e6,
            max_weights: 4 << 20,
        }
    }
}

/// What `tandem profile` measures.
#[derive(Debug, Clone)]
pub struct Plan {
    pub ops: Vec<OpKind>,
    /// Random configurations (in addition to the model configurations).
    pub samples: usize,
    pub threads: Vec<usize>,
    pub budget: Option<Duration>,
    pub seed: u64,
    /// Channel counts per executor and configuration.
    pub points: usize,
    /// Rounds over a configuration's points: each point is measured once per round, and its
    /// latency is the least of its round medians (see [`run`]).
    pub rounds: usize,
    /// Measurements of each configuration, a block of [`PASS_BLOCK`] configurations apart: a
    /// configuration's points move together by several percent with the machine's phases of
    /// about a minute, which rounds a few seconds apart share; passes a block apart do not,
    /// and readers pool them ([`dataset::pool_repeats`]). 1 measures each configuration once.
    pub passes: usize,
    /// Slack of the quiet gates ([`crate::quiet`]): a round is kept when the probes around it
    /// are within this fraction of the probe's quiet time; 0 keeps every round.
    pub quiet_slack: f64,
    /// Slack of the GPU side's second reading, the join (`sync_ms`), while the quiet gate is
    /// on: a round is kept only when the join timed before and after it is within this
    /// fraction of its quiet time too. On some hosts the CPU–GPU handoff has slow phases of
    /// tens of seconds that add µs to every short GPU part and that the reference layer does
    /// not show. 0 leaves the join out of the gate.
    pub sync_slack: f64,
    /// Slack of both sides' memory reading ([`crate::quiet::MemoryProbe`]) while the quiet
    /// gate is on: a round is kept only when a stream from memory timed before and after it is
    /// within this fraction of its quiet time too (other tenants' memory traffic slows large
    /// layers and not the reference layer). 0 leaves the memory out of the gate.
    pub memory_slack: f64,
    pub limits: Limits,
    pub measure: MeasureOptions,
    /// Description of the machine setting, recorded with the dataset.
    pub setting: String,
}

fn in_interval(rng: &mut Rng, lo_exp: u32, hi_exp: u32) -> usize {
    let k = lo_exp + (rng.next_u64() % u64::from(hi_exp - lo_exp + 1)) as u32;
    let lo = 1usize << k;
    lo + (rng.next_u64() % lo as u64) as usize
}

/// H and W in one power-of-two interval `[2^k, 2^(k+1))`, `k` drawn in `lo_exp..=hi_exp`.
fn near_square(rng: &mut Rng, lo_exp: u32, hi_exp: u32) -> (usize, usize) {
    let k = lo_exp + (rng.next_u64() % u64::from(hi_exp - lo_exp + 1)) as u32;
    let lo = 1usize << k;
    let h = lo + (rng.next_u64() % lo as u64) as usize;
    let w = lo + (rng.next_u64() % lo as u64) as usize;
    (h, w)
}

fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> T {
    v[(rng.next_u64() % v.len() as u64) as usize]
}

/// SAME padding geometry: output size and leading pad.
fn same(size: usize, k: usize, s: usize) -> (usize, usize) {
    let out = size.div_ceil(s);
    let total = ((out - 1) * s + k).saturating_sub(size);
    (out, total / 2)
}

/// Full-layer FLOPs and weight count.
pub fn cost(l: &Layer) -> (f64, usize) {
    let pixels = (l.n * l.oh * l.ow) as f64;
    match l.op {
        OpKind::Conv => (
            2.0 * pixels * (l.kh * l.kw * l.cin * l.cout) as f64,
            l.kh * l.kw * l.cin * l.cout,
        ),
        OpKind::Depthwise => (
            2.0 * pixels * (l.kh * l.kw * l.cout) as f64,
            l.kh * l.kw * l.cout,
        ),
        OpKind::Linear => (2.0 * (l.h * l.cin * l.cout) as f64, l.cin * l.cout),
        OpKind::GroupedConv => {
            let w = l.kh * l.kw * l.cin / l.groups.max(1) * l.cout;
            (2.0 * pixels * w as f64, w)
        }
    }
}

/// Group sizes (input channels per group) of the diagonalwise refactorization, besides `C`
/// (the compiler's `CANDIDATE_GROUP_SIZES`).
pub const GROUP_SIZES: [usize; 4] = [4, 8, 16, 32];

/// The grouped convolutions a depthwise layer becomes under the diagonalwise refactorization:
/// one `gconv` layer per `G` of [`GROUP_SIZES`] that divides `C` and is below it (`C / G`
/// groups), and with `full`, the dense `conv` layer of `G = C`. Empty for other layers.
pub fn grouped_variants(dw: &Layer, full: bool) -> Vec<Layer> {
    if dw.op != OpKind::Depthwise || dw.cin == 0 {
        return Vec::new();
    }
    let c = dw.cin;
    let mut out: Vec<Layer> = GROUP_SIZES
        .iter()
        .filter(|&&g| g < c && c.is_multiple_of(g))
        .map(|&g| Layer {
            op: OpKind::GroupedConv,
            groups: c / g,
            ..dw.clone()
        })
        .collect();
    if full {
        out.push(Layer {
            op: OpKind::Conv,
            groups: 1,
            ..dw.clone()
        });
    }
    out
}

/// The bytes a whole layer reads and writes once: its input and output activations and its
/// weights (f32). Past the core's L2 (2 MB here) they come from the shared L3 or from memory.
pub fn working_set_bytes(l: &Layer) -> usize {
    let activations = l.n * (l.h * l.w * l.cin + l.oh * l.ow * l.cout);
    4 * (activations + cost(l).1)
}

/// Bounds on a layer's working set ([`working_set_bytes`]), in MB (2^20 bytes): `tandem profile
/// --min-mb/--max-mb` measures only the layers within them, `tandem eval` scores only those.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeBounds {
    pub min_mb: f64,
    /// `None`: no upper bound.
    pub max_mb: Option<f64>,
}

impl SizeBounds {
    /// Bounds from the two options (`max_mb` 0: none); an error names the option whose value
    /// is not a size, or says that no layer can lie within them.
    pub fn new(min_mb: f64, max_mb: f64) -> Result<SizeBounds, String> {
        for (option, mb, example) in [("--min-mb", min_mb, 16), ("--max-mb", max_mb, 8)] {
            if !(mb >= 0.0 && mb.is_finite()) {
                return Err(format!(
                    "{option}: {mb} is not a size in MB; give e.g. {example}"
                ));
            }
        }
        let max_mb = (max_mb > 0.0).then_some(max_mb);
        if let Some(max) = max_mb.filter(|&max| max < min_mb) {
            return Err(format!(
                "--max-mb {max} is below --min-mb {min_mb}: no layer can pass both"
            ));
        }
        Ok(SizeBounds { min_mb, max_mb })
    }

    /// Whether either bound is set.
    pub fn is_bounded(&self) -> bool {
        self.min_mb > 0.0 || self.max_mb.is_some()
    }

    /// Whether `l`'s working set lies within the bounds (both included).
    pub fn contains(&self, l: &Layer) -> bool {
        let mb = working_set_bytes(l) as f64 / (1u64 << 20) as f64;
        mb >= self.min_mb && self.max_mb.is_none_or(|max| mb <= max)
    }
}

fn fits(l: &Layer, limits: &Limits) -> bool {
    let (f, w) = cost(l);
    f <= limits.max_flops && w <= limits.max_weights && l.cout > 0 && l.oh > 0 && l.ow > 0
}

/// Which part of the convolution space a random configuration is drawn from. Most draws are
/// free; a share is aimed at the GPU variants that free draws rarely reach, so that every
/// executor gets enough configurations to learn from (and to be evaluated on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConvFamily {
    /// Every dimension free.
    Free,
    /// 3x3, stride 1, 8 to 1023 channels in and out, at least 8x8: where Winograd runs (from
    /// 8 channels and 4 output tiles on).
    Winograd,
    /// 1 to 4 input channels, a large kernel, few outputs: image stems, where the
    /// constant-weights kernel runs.
    Stem,
}

fn conv_family(rng: &mut Rng) -> ConvFamily {
    match rng.next_u64() % 10 {
        0 | 1 => ConvFamily::Winograd,
        2 => ConvFamily::Stem,
        _ => ConvFamily::Free,
    }
}

/// A spatial layer with input `h` x `w`, square kernel `k`, stride `s` and SAME padding.
pub fn spatial(
    op: OpKind,
    h: usize,
    w: usize,
    cin: usize,
    cout: usize,
    k: usize,
    s: usize,
) -> Layer {
    let (oh, pad_t) = same(h, k, s);
    let (ow, pad_l) = same(w, k, s);
    Layer {
        op,
        n: 1,
        h,
        w,
        cin,
        oh,
        ow,
        cout,
        kh: k,
        kw: k,
        stride: s,
        pad_t,
        pad_l,
        groups: 1,
    }
}

/// One random configuration of `op`: H and W in [4, 256) (Winograd-shaped convolutions at
/// least 8, stem convolutions at least 16); convolutions C_in in [4, 1024) and C_out in
/// [8, 1024), kernel 1/3/5/7; depthwise C in [8, 2048), kernel 3/5/7; stride 1 or 2; linear
/// rows in [1, 256), in in [16, 4096), out in [8, 4096). See `ConvFamily` for the aimed share
/// of convolutions.
pub fn random_layer(op: OpKind, rng: &mut Rng) -> Layer {
    match op {
        OpKind::Conv => {
            let family = conv_family(rng);
            let size_exp = match family {
                ConvFamily::Free => 2,
                ConvFamily::Winograd => 3,
                ConvFamily::Stem => 4,
            };
            let (h, w) = near_square(rng, size_exp, 7);
            match family {
                ConvFamily::Free => {
                    let k = pick(rng, &[1, 3, 5, 7]);
                    let s = pick(rng, &[1, 2]);
                    let (cin, cout) = (in_interval(rng, 2, 9), in_interval(rng, 3, 9));
                    spatial(op, h, w, cin, cout, k, s)
                }
                ConvFamily::Winograd => {
                    let (cin, cout) = (in_interval(rng, 3, 9), in_interval(rng, 3, 9));
                    spatial(op, h, w, cin, cout, 3, 1)
                }
                ConvFamily::Stem => {
                    let cin = 1 + (rng.next_u64() % 4) as usize;
                    let k = pick(rng, &[3, 5, 7]);
                    let s = pick(rng, &[1, 2]);
                    spatial(op, h, w, cin, in_interval(rng, 3, 6), k, s)
                }
            }
        }
        OpKind::Depthwise => {
            let (h, w) = near_square(rng, 2, 7);
            let k = pick(rng, &[3, 5, 7]);
            let s = pick(rng, &[1, 2]);
            let c = in_interval(rng, 3, 10);
            spatial(op, h, w, c, c, k, s)
        }
        OpKind::Linear => {
            let rows = in_interval(rng, 0, 7);
            let depth = in_interval(rng, 4, 11);
            Layer::linear(rows, depth, in_interval(rng, 3, 11))
        }
        OpKind::GroupedConv => {
            // A depthwise geometry with C a multiple of 4 (so that G = 4 divides it), then one
            // of its valid group sizes.
            let mut dw = random_layer(OpKind::Depthwise, rng);
            let c = (dw.cin / 4 * 4).max(8);
            dw.cin = c;
            dw.cout = c;
            let variants = grouped_variants(&dw, false);
            let i = (rng.next_u64() % variants.len() as u64) as usize;
            variants[i].clone()
        }
    }
}

/// `count` random configurations over `ops` (round robin; a `gconv` draw is one depthwise
/// geometry with one of its valid group sizes) within `limits`, deterministic in `seed`.
pub fn random_layers(ops: &[OpKind], count: usize, seed: u64, limits: &Limits) -> Vec<Layer> {
    random_layers_where(ops, count, seed, limits, |_| true)
}

/// As [`random_layers`], keeping only the draws `keep` accepts (e.g. those an executor under
/// study runs); gives up after `1000 · count` draws, so it may return fewer.
pub fn random_layers_where(
    ops: &[OpKind],
    count: usize,
    seed: u64,
    limits: &Limits,
    keep: impl Fn(&Layer) -> bool,
) -> Vec<Layer> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count);
    let mut i = 0;
    let mut tries = 0;
    while out.len() < count && !ops.is_empty() && tries < count * 1000 {
        tries += 1;
        let op = ops[i % ops.len()];
        let l = random_layer(op, &mut rng);
        if fits(&l, limits) {
            i += 1;
            if keep(&l) {
                out.push(l);
            }
        }
    }
    out
}

/// The executors that run `layer` whole: its GPU kernel variant's (as dispatched on `device`)
/// and its CPU op kind's at each of `threads`.
pub fn whole_layer_executors(layer: &Layer, device: &DeviceInfo, threads: &[usize]) -> Vec<String> {
    let d = dispatch(layer.to_op().gpu_op(), 0..layer.cout, device);
    let mut out = vec![gpu_executor(layer.op, d.variant)];
    out.extend(threads.iter().map(|&t| cpu_executor(layer.op, t)));
    out
}

/// Every executor a profile of `ops` at `threads` can have (for checking names a user gives).
pub fn possible_executors(ops: &[OpKind], threads: &[usize]) -> Vec<String> {
    let mut out = Vec::new();
    for &op in ops {
        out.extend(threads.iter().map(|&t| cpu_executor(op, t)));
        let variants: &[Variant] = match op {
            OpKind::Conv => &[
                Variant::ConvConstants,
                Variant::ConvGeneric,
                Variant::ConvWinograd,
            ],
            OpKind::GroupedConv => &[Variant::ConvConstants, Variant::ConvGeneric],
            OpKind::Depthwise => &[Variant::DepthwiseGeneric, Variant::Depthwise3x3],
            OpKind::Linear => &[Variant::FullyConnected],
        };
        out.extend(variants.iter().map(|&v| gpu_executor(op, v)));
    }
    out.sort();
    out.dedup();
    out
}

/// Up to `points` channel counts in `[1, C]`: multiples of `step` (or `C`), one drawn in each
/// of `points - 1` equal bins, and `C`; sorted, without repeats.
pub fn channel_points(c: usize, step: usize, points: usize, rng: &mut Rng) -> Vec<usize> {
    let step = step.max(1);
    let mut out = vec![c];
    let bins = points.saturating_sub(1).max(1);
    for b in 0..bins {
        let lo = c * b / bins;
        let hi = (c * (b + 1) / bins).max(lo + 1);
        let v = lo + 1 + (rng.next_u64() % (hi - lo) as u64) as usize;
        let v = (v.div_ceil(step) * step).min(c);
        out.push(v.max(1));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Progress after each configuration.
#[derive(Debug, Clone)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub skipped: usize,
    pub elapsed: Duration,
    /// Estimated time left (by the mean time per configuration, capped by the budget).
    pub eta: Duration,
    pub current: String,
    /// What `done` and `total` count: `configs`, or `config passes` with [`Plan::passes`].
    pub unit: &'static str,
}

/// Renders a progress line: `[#####-----] 12/40 configs  1m02s elapsed  ETA 3m30s  conv:…`.
pub fn progress_line(p: &Progress) -> String {
    let width = 24;
    let filled = (p.done * width).checked_div(p.total).unwrap_or(width);
    let fmt = |d: Duration| {
        let s = d.as_secs();
        format!("{}m{:02}s", s / 60, s % 60)
    };
    format!(
        "[{}{}] {}/{} {}  {} elapsed  ETA {}  {}",
        "#".repeat(filled.min(width)),
        "-".repeat(width - filled.min(width)),
        p.done,
        p.total,
        p.unit,
        fmt(p.elapsed),
        fmt(p.eta),
        p.current
    )
}

/// Longest wait for a quiet phase before a round is measured anyway (and then re-measured).
pub const QUIET_MAX_WAIT: Duration = Duration::from_secs(2);

/// The quiet gates of the two sides: the GPU's core and the CPU's (its probe runs on one
/// thread, on the CPU side's core, whatever the thread counts measured). The GPU side's probe
/// also times the join ([`Plan::sync_slack`]); both may time a stream from memory
/// ([`Plan::memory_slack`]).
struct Gates {
    gpu: QuietGate,
    cpu: QuietGate,
    /// The readings each side's probe takes after the reference layer, in the order its gate
    /// judges them: the gate is built from this list and the probe reads it, so the two agree.
    gpu_extra: Vec<Extra>,
    cpu_extra: Vec<Extra>,
}

/// A reading of a side's probe after the reference layer's time.
#[derive(Clone)]
enum Extra {
    /// The join (GPU side only), with [`Plan::sync_slack`].
    Join,
    /// A stream from memory, with [`Plan::memory_slack`] (one buffer for both sides).
    Memory(Rc<MemoryProbe>),
}

impl Gates {
    /// The gates `plan` asks for: the join on the GPU side when `sync_slack` is set, the
    /// memory on both sides when `memory_slack` is set and the quiet gate is on.
    fn new(plan: &Plan) -> Gates {
        let memory = (plan.quiet_slack > 0.0 && plan.memory_slack > 0.0)
            .then(|| Extra::Memory(Rc::new(MemoryProbe::new())));
        let join = (plan.sync_slack > 0.0).then_some(Extra::Join);
        let gpu_extra: Vec<Extra> = join.into_iter().chain(memory.clone()).collect();
        let cpu_extra: Vec<Extra> = memory.into_iter().collect();
        let gate = |extra: &[Extra]| {
            extra
                .iter()
                .fold(QuietGate::new(plan.quiet_slack, QUIET_MAX_WAIT), |g, e| {
                    g.with_reading(match e {
                        Extra::Join => plan.sync_slack,
                        Extra::Memory(_) => plan.memory_slack,
                    })
                })
        };
        Gates {
            gpu: gate(&gpu_extra),
            cpu: gate(&cpu_extra),
            gpu_extra,
            cpu_extra,
        }
    }
}

/// A probe's readings for its gate: the reference layer's time `layer`, then each of `extra`
/// (`join` times the join).
fn probe_readings(
    layer: f64,
    extra: &[Extra],
    mut join: impl FnMut() -> Result<f64, GpuError>,
) -> Result<Vec<f64>, GpuError> {
    let mut readings = vec![layer];
    for e in extra {
        readings.push(match e {
            Extra::Join => join()?,
            Extra::Memory(m) => m.time_ms(),
        });
    }
    Ok(readings)
}

/// Why profiling stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProfileRunError {
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    #[error(transparent)]
    Corun(#[from] crate::corun::CorunError),
    #[error("measuring {config}: {source}")]
    Gpu { config: String, source: GpuError },
    #[error("{path} holds measurements of another device ({found}); this one is {this}: use another file")]
    OtherDevice {
        path: String,
        found: String,
        this: String,
    },
}

/// What a profiling run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub measured: usize,
    pub skipped: usize,
    pub rows: usize,
    pub out_of_budget: usize,
    /// What the quiet gates did.
    pub gate: GateStats,
}

/// Interleaves model configurations (first, deduplicated, within limits) with random ones.
pub fn schedule(models: &[Layer], random: &[Layer], ops: &[OpKind], limits: &Limits) -> Vec<Layer> {
    let mut seen = HashSet::new();
    let models: Vec<&Layer> = models
        .iter()
        .filter(|l| ops.contains(&l.op) && fits(l, limits))
        .filter(|l| seen.insert(config_key(l)))
        .collect();
    let mut out = Vec::new();
    let (mut a, mut b) = (models.iter(), random.iter());
    loop {
        let x = a.next();
        let y = b.next();
        if x.is_none() && y.is_none() {
            break;
        }
        if let Some(l) = x {
            out.push((*l).clone());
        }
        if let Some(l) = y {
            if seen.insert(config_key(l)) {
                out.push(l.clone());
            }
        }
    }
    out
}

/// Configurations measured in a block with [`Plan::passes`] above 1: each block is measured
/// once, then again in the same order, so that a configuration's passes lie one block apart
/// (about 1.3 minutes on the second Xeon host, whose slow phases stop correlating after some
/// 30–60 configurations). A run of fewer configurations, or the last block of a run, has its
/// passes only that block's length apart.
pub const PASS_BLOCK: usize = 64;

/// The measurements a run makes: per block of [`PASS_BLOCK`] configurations, each pass over
/// the block's configurations that `done` (passes already in the file) leaves short of
/// `passes`, in the block's order.
fn jobs<'a>(configs: &'a [Layer], done: &HashMap<&str, usize>, passes: usize) -> Vec<&'a Layer> {
    let mut out = Vec::new();
    for block in configs.chunks(PASS_BLOCK) {
        for pass in 0..passes {
            out.extend(
                block
                    .iter()
                    .filter(|l| done.get(config_key(l).as_str()).copied().unwrap_or(0) <= pass),
            );
        }
    }
    out
}

/// Measures every configuration of `configs` [`Plan::passes`] times, less the passes already
/// in `out` (resume), appending rows per configuration and pass; stops when the budget is
/// spent. `cpu` describes the CPU for the rows.
pub fn run(
    profiler: &mut Profiler,
    out: &Path,
    configs: &[Layer],
    plan: &Plan,
    cpu: &str,
    mut progress: impl FnMut(&Progress),
) -> Result<Summary, ProfileRunError> {
    let device = profiler.device().label();
    let existing = if out.exists() && std::fs::metadata(out).is_ok_and(|m| m.len() > 0) {
        dataset::read_measurements(out)?
    } else {
        Vec::new()
    };
    if let Some(r) = existing.iter().find(|r| r.device != device) {
        return Err(ProfileRunError::OtherDevice {
            path: out.display().to_string(),
            found: r.device.clone(),
            this: device,
        });
    }
    let passes = plan.passes.max(1);
    let done = dataset::passes_per_config(&existing);
    let todo = jobs(configs, &done, passes);
    let unit = if passes > 1 {
        "config passes"
    } else {
        "configs"
    };
    let skipped = configs
        .iter()
        .filter(|l| {
            done.get(config_key(l).as_str())
                .is_some_and(|&n| n >= passes)
        })
        .count();
    let mut appender = Appender::open(out)?;
    let start = Instant::now();
    let mut summary = Summary {
        measured: 0,
        skipped,
        rows: 0,
        out_of_budget: 0,
        gate: GateStats::default(),
    };
    let mut gates = Gates::new(plan);
    let (gpu_extra, cpu_extra) = (gates.gpu_extra.clone(), gates.cpu_extra.clone());
    let sync_options = MeasureOptions {
        min_reps: 15,
        max_reps: 31,
        target_ms: 0.0,
        ..plan.measure
    };
    for (i, layer) in todo.iter().enumerate() {
        let key = config_key(layer);
        let Some(mut line) =
            progress_before(start, i, todo.len(), plan.budget, skipped * passes, &key)
        else {
            summary.out_of_budget = todo.len() - i;
            break;
        };
        line.unit = unit;
        progress(&line);
        let gpu_err = |source| ProfileRunError::Gpu {
            config: key.clone(),
            source,
        };
        let op = layer.to_op();
        let c = layer.cout;
        let mut rng = Rng::new(plan.seed ^ fnv(&key));
        let step = vector_width(op.gpu_op());
        let gpu_points = channel_points(c, step, plan.points, &mut rng);
        let cpu_points = channel_points(c, step, plan.points, &mut rng);
        let bench = if plan.quiet_slack > 0.0 {
            profiler.layer_with_probe(&op, &gpu_points, 1)
        } else {
            profiler.layer(&op, &gpu_points, 1)
        };
        let mut bench = bench.map_err(gpu_err)?;
        // Rounds over the points, each between two probes of the reference layer on the
        // same side (see `crate::quiet`): a slow phase of a core lasts seconds, longer than a
        // configuration, so it shifts every point measured in it; rounds measured in one are
        // measured again.
        let mut rows = Vec::new();
        let mut dispatches = Vec::new();
        let gpu_rounds = gated_rounds(
            &mut bench,
            &mut gates.gpu,
            plan.rounds,
            &plan.measure,
            &mut summary.gate,
            |b, options| {
                let mut times = Vec::with_capacity(gpu_points.len());
                dispatches.clear();
                for &g in &gpu_points {
                    let (d, t) = b.gpu(g, options)?;
                    dispatches.push(d);
                    times.push(t);
                }
                Ok(times)
            },
            |b| {
                let layer = b.probe_gpu()?;
                probe_readings(layer, &gpu_extra, || Ok(b.sync(&sync_options)?.median_ms))
            },
        )
        .map_err(gpu_err)?;
        // The join recorded with the rows is timed right after the GPU rounds, in the phase
        // they were measured in (`tandem train --drop-slow-joins` judges them by it).
        let sync = bench.sync(&sync_options).map_err(gpu_err)?;
        let base = |executor: String, threads: usize, c0: usize, c1: usize| Row {
            config: key.clone(),
            device: device.clone(),
            cpu: cpu.to_string(),
            layer: (*layer).clone(),
            executor,
            threads,
            c0,
            c1,
            variant: String::new(),
            dispatch: Default::default(),
            ms: 0.0,
            reps: 0,
            sync_ms: sync.median_ms,
            probe_ms: 0.0,
            least_ms: 0.0,
            least_probe_ms: 0.0,
        };
        for ((&g, d), t) in gpu_points.iter().zip(&dispatches).zip(&gpu_rounds.times) {
            let mut r = base(gpu_executor(layer.op, d.variant), 0, c - g, c);
            r.variant = gpu_variant(layer, d);
            r.dispatch = record(d);
            r.ms = t.median_ms;
            r.least_ms = t.least_ms;
            r.reps = t.reps;
            r.probe_ms = gpu_rounds.probe_ms.unwrap_or(0.0);
            r.least_probe_ms = r.probe_ms;
            rows.push(r);
        }
        for &t in &plan.threads {
            let cpu_rounds = gated_rounds(
                &mut bench,
                &mut gates.cpu,
                plan.rounds,
                &plan.measure,
                &mut summary.gate,
                |b, options| {
                    Ok::<_, GpuError>(cpu_points.iter().map(|&cc| b.cpu(cc, t, options)).collect())
                },
                |b| {
                    let layer = b.probe_cpu()?;
                    probe_readings(layer, &cpu_extra, || Ok(b.sync(&sync_options)?.median_ms))
                },
            )
            .map_err(gpu_err)?;
            for (&cc, timing) in cpu_points.iter().zip(&cpu_rounds.times) {
                let mut r = base(cpu_executor(layer.op, t), t, 0, cc);
                r.variant = cpu_variant(layer, 0, cc).to_string();
                r.ms = timing.median_ms;
                r.least_ms = timing.least_ms;
                r.reps = timing.reps;
                r.probe_ms = cpu_rounds.probe_ms.unwrap_or(0.0);
                r.least_probe_ms = r.probe_ms;
                rows.push(r);
            }
        }
        appender.append(&rows)?;
        summary.measured += 1;
        summary.rows += rows.len();
    }
    progress(&Progress {
        done: skipped * passes + summary.measured,
        total: skipped * passes + todo.len(),
        skipped,
        elapsed: start.elapsed(),
        eta: Duration::ZERO,
        current: "done".into(),
        unit,
    });
    Ok(summary)
}

/// The progress line before the `i`-th of `todo` configurations to measure (`total` left at
/// `skipped + todo`), with the ETA by the mean time per configuration so far, capped by the
/// budget; `None` once the budget is spent.
pub(crate) fn progress_before(
    start: Instant,
    i: usize,
    todo: usize,
    budget: Option<Duration>,
    skipped: usize,
    key: &str,
) -> Option<Progress> {
    let elapsed = start.elapsed();
    if budget.is_some_and(|b| elapsed >= b) {
        return None;
    }
    let per = if i > 0 {
        elapsed / i as u32
    } else {
        Duration::ZERO
    };
    let mut eta = per * (todo - i) as u32;
    if let Some(b) = budget {
        eta = eta.min(b.saturating_sub(elapsed));
    }
    Some(Progress {
        done: skipped + i,
        total: skipped + todo,
        skipped,
        elapsed,
        eta,
        current: key.to_string(),
        unit: "configs",
    })
}

/// FNV-1a of `s`: a seed per configuration.
pub(crate) fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gated_plan(quiet: f64, sync: f64, memory: f64) -> Plan {
        Plan {
            ops: vec![OpKind::Conv],
            samples: 0,
            threads: vec![1],
            budget: None,
            seed: 1,
            points: 1,
            rounds: 1,
            passes: 1,
            quiet_slack: quiet,
            sync_slack: sync,
            memory_slack: memory,
            limits: Limits::default(),
            measure: MeasureOptions::default(),
            setting: String::new(),
        }
    }

    #[test]
    fn each_probe_gives_its_gate_one_value_per_reading_in_its_order() {
        let mut gates = Gates::new(&gated_plan(0.08, 0.6, 0.15));
        assert!(matches!(
            gates.gpu_extra.as_slice(),
            [Extra::Join, Extra::Memory(_)]
        ));
        assert!(matches!(gates.cpu_extra.as_slice(), [Extra::Memory(_)]));
        let gpu = probe_readings(1.0, &gates.gpu_extra, || Ok(0.001)).expect("readings");
        assert_eq!(gpu.len(), 3);
        assert_eq!((gpu[0], gpu[1]), (1.0, 0.001));
        assert!(gpu[2] > 0.0, "the memory stream's time: {gpu:?}");
        gates.gpu.record(&gpu);
        assert_eq!(
            gates.gpu.quiet(1),
            Some(0.001),
            "the join is the second reading"
        );
        assert_eq!(gates.gpu.quiet(2), Some(gpu[2]), "the memory the third");
        let mut joined = false;
        let cpu = probe_readings(2.0, &gates.cpu_extra, || {
            joined = true;
            Ok(0.0)
        })
        .expect("readings");
        assert!(!joined, "the CPU side does not time the join");
        gates.cpu.record(&cpu);
        assert_eq!(cpu.len(), 2);
        assert_eq!(gates.cpu.quiet(1), Some(cpu[1]));
        assert_eq!(gates.cpu.quiet(2), None);

        // No memory reading without its slack, nor without the quiet gate.
        for plan in [gated_plan(0.08, 0.6, 0.0), gated_plan(0.0, 0.6, 0.15)] {
            let g = Gates::new(&plan);
            assert!(matches!(g.gpu_extra.as_slice(), [Extra::Join]));
            assert!(g.cpu_extra.is_empty());
        }
        assert!(Gates::new(&gated_plan(0.08, 0.0, 0.0)).gpu_extra.is_empty());
    }

    fn depthwise(h: usize, c: usize) -> Layer {
        spatial(OpKind::Depthwise, h, h, c, c, 3, 1)
    }

    #[test]
    fn size_bounds_hold_layers_by_working_set_and_refuse_what_no_layer_passes() {
        // 64x64x256 in and out: 8 MB of activations and 9 KB of weights.
        let layer = depthwise(64, 256);
        let mb = working_set_bytes(&layer) as f64 / (1u64 << 20) as f64;
        assert!(mb > 8.0 && mb < 8.01, "{mb}");
        let within =
            |min: f64, max: f64| SizeBounds::new(min, max).expect("bounds").contains(&layer);
        assert!(within(0.0, 0.0) && within(8.0, 0.0) && within(0.0, 8.01) && within(mb, mb));
        assert!(!within(8.01, 0.0) && !within(0.0, 8.0));
        assert!(!SizeBounds::new(0.0, 0.0).expect("bounds").is_bounded());
        assert!(SizeBounds::new(0.0, 8.0).expect("bounds").is_bounded());
        let err = SizeBounds::new(16.0, 8.0).expect_err("no layer passes");
        assert!(
            err.contains("--max-mb 8") && err.contains("--min-mb 16"),
            "{err}"
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(SizeBounds::new(bad, 0.0)
                .expect_err("bad")
                .starts_with("--min-mb"));
            assert!(SizeBounds::new(0.0, bad)
                .expect_err("bad")
                .starts_with("--max-mb"));
        }
    }

    #[test]
    fn working_set_counts_activations_in_and_out_and_weights() {
        // 100x100x64 in and out, 3x3x64 weights, 4 bytes each.
        assert_eq!(
            working_set_bytes(&depthwise(100, 64)),
            4 * (2 * 100 * 100 * 64 + 9 * 64)
        );
        let fc = Layer::linear(2, 1000, 500);
        assert_eq!(
            working_set_bytes(&fc),
            4 * (2 * 1000 + 2 * 500 + 1000 * 500)
        );
    }

    #[test]
    fn a_working_set_filter_keeps_the_large_draws_of_the_unfiltered_run() {
        let ops = [OpKind::Conv, OpKind::Depthwise, OpKind::Linear];
        let limits = Limits::default();
        let all = random_layers(&ops, 300, 7, &limits);
        let large = |l: &Layer| working_set_bytes(l) >= 16 << 20;
        let expected: Vec<Layer> = all.iter().filter(|l| large(l)).cloned().collect();
        assert!(expected.len() >= 5, "{} large draws", expected.len());
        let filtered = random_layers_where(&ops, expected.len(), 7, &limits, large);
        assert_eq!(filtered, expected);
    }

    #[test]
    fn passes_go_block_by_block_and_skip_what_the_file_has() {
        let layers: Vec<Layer> = (1..=PASS_BLOCK + 6).map(|c| depthwise(8, c)).collect();
        let keys: Vec<String> = layers.iter().map(config_key).collect();
        let order = |done: &HashMap<&str, usize>, passes| -> Vec<usize> {
            jobs(&layers, done, passes).iter().map(|l| l.cout).collect()
        };
        let none = HashMap::new();
        let once: Vec<usize> = (1..=PASS_BLOCK + 6).collect();
        assert_eq!(order(&none, 1), once);
        // Each block twice in its order: a configuration's passes lie one block apart.
        let mut twice: Vec<usize> = (1..=PASS_BLOCK).chain(1..=PASS_BLOCK).collect();
        twice.extend((PASS_BLOCK + 1..=PASS_BLOCK + 6).chain(PASS_BLOCK + 1..=PASS_BLOCK + 6));
        assert_eq!(order(&none, 2), twice);
        // Configuration 1 measured once, configuration 2 twice: only their missing passes.
        let done: HashMap<&str, usize> = [(keys[0].as_str(), 1), (keys[1].as_str(), 2)].into();
        let got = order(&done, 2);
        assert_eq!(got.len(), twice.len() - 3);
        assert_eq!(got.iter().filter(|&&c| c == 1).count(), 1);
        assert!(!got.contains(&2));
        assert_eq!(order(&done, 1), once[2..].to_vec());
    }
}
