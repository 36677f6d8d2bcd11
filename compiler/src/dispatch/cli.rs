//! `tandem dispatch MODEL.tflite --gpu NAME_OR_JSON`: the stock TFLite GPU delegate's kernels for
//! every operator, as a table or as JSON.

use super::tflite_gpu::{dispatch_graph, Fate, Gpu, OpDispatch, Precision, Target};
use crate::tflite;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

/// Precision values accepted on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    /// F16 (the delegate with precision loss allowed).
    #[value(name = "f16")]
    F16,
    /// F32 (the delegate's default options).
    #[value(name = "f32")]
    F32,
    /// F16 storage with F32 accumulation.
    #[value(name = "f32_f16")]
    F32F16,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Precision {
        match p {
            PrecisionArg::F16 => Precision::F16,
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F32F16 => Precision::F32F16,
        }
    }
}

/// Arguments of `tandem dispatch`.
#[derive(Debug, Clone, clap::Args)]
pub struct DispatchArgs {
    /// The `.tflite` model.
    pub model: PathBuf,
    /// A built-in GPU (adreno-640, adreno-650, adreno-660, adreno-730, adreno-740,
    /// mali-g76-mp10, mali-g78-mp20, mali-g710-mp7, powervr-ge8320, powervr-bxm-8-256) or the
    /// path of a JSON GPU description.
    #[arg(long)]
    pub gpu: String,
    /// Delegate precision (default: the GPU description's, F32 for built-ins).
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// CL_KERNEL_WORK_GROUP_SIZE assumed for every kernel (default: the GPU description's).
    #[arg(long)]
    pub kernel_max_wg: Option<usize>,
    /// Print a JSON list of operators instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `tandem dispatch`: prints the table or the JSON list to stdout.
pub fn run(args: &DispatchArgs) -> Result<()> {
    let bytes = std::fs::read(&args.model)
        .with_context(|| format!("cannot read {}", args.model.display()))?;
    let graph = tflite::read_model(&bytes)
        .with_context(|| format!("invalid model {}", args.model.display()))?;
    let gpu = Gpu::resolve(&args.gpu)?;
    let mut target = Target::new(gpu, args.precision.map(Precision::from));
    if let Some(k) = args.kernel_max_wg {
        if k == 0 {
            bail!("--kernel-max-wg must be at least 1");
        }
        target = target.with_kernel_max_wg(k);
    }
    let ops = dispatch_graph(&graph, &target)?;
    if args.json {
        println!("{}", serde_json::to_string(&ops)?);
    } else {
        let requested = args.precision.map(Precision::from);
        print!("{}", render_table(&target, requested, &ops));
    }
    Ok(())
}

fn dims(v: &[usize]) -> String {
    v.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Renders the per-op dispatch as a fixed-width table: a header with the resolved GPU, one line
/// per kernel (approximate kernels marked `~`), one line per op without kernels, and totals.
pub fn render_table(target: &Target, requested: Option<Precision>, ops: &[OpDispatch]) -> String {
    let mut out = String::new();
    let gpu = &target.gpu;
    let mut precision = target.precision.to_string();
    if let Some(r) = requested.filter(|&r| r != target.precision) {
        let _ = write!(precision, " ({r} requested; no fp16)");
    }
    let _ = writeln!(
        out,
        "gpu: {} [{}], {} compute units, precision {precision}, storage {}, kernel work-group limit {}, fast tuning",
        gpu.name(),
        gpu.class(),
        gpu.compute_units(),
        target.storage,
        target.kernel_max_wg
    );
    let op_w = ops.iter().map(|o| o.op.len()).max().unwrap_or(2).max(2);
    let out_w = ops
        .iter()
        .map(|o| dims(&o.output).len() + 2)
        .max()
        .unwrap_or(6)
        .clamp(6, 20);
    let _ = writeln!(
        out,
        "{:>4}  {:op_w$}  {:out_w$}  {:24}  {:9}  {:14}  {:10}  {:11}  notes",
        "#", "op", "output", "kernel", "block", "grid", "work group", "groups"
    );
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut fates: BTreeMap<&str, usize> = BTreeMap::new();
    let mut rejected = Vec::new();
    for o in ops {
        *fates.entry(o.fate.label()).or_insert(0) += 1;
        if o.fate == Fate::Rejected {
            rejected.push(o.op_index);
        }
        let mut notes = o.notes.clone();
        if let Some(r) = &o.runs_as {
            notes.insert(0, format!("runs as {r}"));
        }
        let shape = format!("[{}]", dims(&o.output));
        if o.kernels.is_empty() {
            let what = match o.into {
                Some(i) => format!("({} #{i})", o.fate.label()),
                None => format!("({})", o.fate.label()),
            };
            let _ = writeln!(
                out,
                "{:>4}  {:op_w$}  {:out_w$}  {:24}  {:9}  {:14}  {:10}  {:11}  {}",
                o.op_index,
                o.op,
                shape,
                what,
                "",
                "",
                "",
                "",
                notes.join("; ")
            );
            continue;
        }
        for (i, k) in o.kernels.iter().enumerate() {
            *counts.entry(k.name.name()).or_insert(0) += 1;
            let name = if k.exact {
                k.name.name().to_string()
            } else {
                format!("~{}", k.name.name())
            };
            let (index, op, shape, note) = if i == 0 {
                (
                    o.op_index.to_string(),
                    o.op.as_str(),
                    shape.as_str(),
                    notes.join("; "),
                )
            } else {
                (String::new(), "", "", String::new())
            };
            let _ = writeln!(
                out,
                "{index:>4}  {op:op_w$}  {shape:out_w$}  {name:24}  {:9}  {:14}  {:10}  {:11}  {note}",
                k.block.map(|b| dims(&b)).unwrap_or_else(|| "-".to_string()),
                dims(&k.grid),
                dims(&k.work_group),
                dims(&k.groups),
            );
        }
    }
    let kernels: usize = counts.values().sum();
    let by_kernel: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let by_fate: Vec<String> = fates.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(
        out,
        "total: {} ops ({}), {kernels} kernels ({})",
        ops.len(),
        by_fate.join(", "),
        by_kernel.join(", ")
    );
    let _ = writeln!(
        out,
        "~ marks kernels outside the spec: output grid (W*B, H, ceil(C/4)) and the generic work-group picker"
    );
    if !rejected.is_empty() {
        let list: Vec<String> = rejected.iter().map(|i| format!("#{i}")).collect();
        let _ = writeln!(
            out,
            "warning: the delegate would fail to initialise on this model (ops {})",
            list.join(", ")
        );
    }
    out
}
