//! Measurement datasets: one CSV row per measured point (one executor, one channel range of one
//! layer configuration), written by `tandem profile` and read by `tandem train` / `tandem eval`.
//!
//! Columns, in this order ([`COLUMNS`]):
//! `config` (the configuration's key, [`config_key`]), `device` (the OpenCL device label),
//! `cpu` (the CPU model), `op` (`conv`, `dwconv`, `linear`), `n h w cin oh ow cout kh kw stride
//! pad_t pad_l` (a linear layer is `n = 1, h = oh = rows, w = ow = 1, cin = depth, cout =
//! units`, kernel and stride 1), `executor` (`features::gpu_executor` and `cpu_executor` names), `threads` (CPU
//! threads, 0 for the GPU), `c0 c1` (the channel range measured), `variant` (how the row ran:
//! the GPU kernel variant, [`crate::features::gpu_variant`]; the CPU loop,
//! [`crate::features::cpu_variant`]), `bx by bc wg_x wg_y wg_z groups grid_x grid_y grid_z`
//! (the GPU's dispatch decision; zeros for the CPU),
//! `ms` (median latency), `reps` (timed repetitions), `sync_ms` (median join of the polling
//! protocol, measured with the configuration), `conv_groups` (convolution groups: 1 except for
//! `gconv` rows; `groups` is taken by the GPU's number of work groups), `probe_ms` (the
//! machine's speed: the quiet gate's reference layer), `least_ms` (the fastest single
//! repetition; see [`Latency`]).
//!
//! The last columns are optional when reading: a file whose header ends at `sync_ms` (written
//! before grouped convolutions were profiled) has one group per layer; one without `probe_ms`
//! records no speed; one without `least_ms` has only the median latency.
//!
//! Fields holding a comma, a quote or a newline are quoted (`"…"`, quotes doubled). A file that
//! does not parse gives a [`DatasetError`] naming the file, the line and the field.

use crate::features::{
    cpu_variant, gpu_channels_inner, gpu_executor, is_cpu, Layer, OpKind, CHANNELS_INNER_SUFFIX,
    CHANNELS_OUTER_SUFFIX,
};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use tandem_runtime::gpu::dispatch::Variant;
use tandem_runtime::profile::LayerOp;

/// The columns of a dataset, in order.
pub const COLUMNS: [&str; 37] = [
    "config",
    "device",
    "cpu",
    "op",
    "n",
    "h",
    "w",
    "cin",
    "oh",
    "ow",
    "cout",
    "kh",
    "kw",
    "stride",
    "pad_t",
    "pad_l",
    "executor",
    "threads",
    "c0",
    "c1",
    "variant",
    "bx",
    "by",
    "bc",
    "wg_x",
    "wg_y",
    "wg_z",
    "groups",
    "grid_x",
    "grid_y",
    "grid_z",
    "ms",
    "reps",
    "sync_ms",
    "conv_groups",
    "probe_ms",
    "least_ms",
];

/// The columns of files written before `conv_groups` existed (still read: one group).
const OLD_COLUMNS: usize = 34;

/// The columns of files written before `probe_ms` existed (still read: no speed recorded).
const NO_PROBE_COLUMNS: usize = 35;

/// The columns of files written before `least_ms` existed (still read: median latency only).
const NO_LEAST_COLUMNS: usize = 36;

/// The column counts of the headers [`parse`] reads (the current one first).
const HEADERS: [usize; 4] = [
    COLUMNS.len(),
    NO_LEAST_COLUMNS,
    NO_PROBE_COLUMNS,
    OLD_COLUMNS,
];

/// Which of a point's measured latencies is its label: what `tandem train` fits, and what a
/// profile trained on it predicts and is scored against (`tandem eval`, `tandem calibrate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Latency {
    /// The least over the rounds of each round's median repetition (`ms`): every dataset
    /// has it, and profiles trained before `least_ms` existed use it.
    #[default]
    Median,
    /// The fastest single repetition over all rounds and passes of one run (`least_ms`). On a
    /// shared machine a slow phase only ever adds time, so the fastest repetition is the most
    /// reproducible statistic: measured again minutes later it moves far less than the median
    /// does, given rounds spread over a minute or more. Separate runs (`tandem train --add`,
    /// `tandem eval --pool`) are pooled by the geometric mean of their labels, as medians are:
    /// a run's level is that of its hour.
    Least,
}

impl Latency {
    pub fn name(self) -> &'static str {
        match self {
            Latency::Median => "median",
            Latency::Least => "least",
        }
    }

    /// `median` or `least`.
    pub fn parse(s: &str) -> Option<Latency> {
        match s {
            "median" => Some(Latency::Median),
            "least" => Some(Latency::Least),
            _ => None,
        }
    }
}

/// `rows` with their label (`ms`) the chosen latency: unchanged for [`Latency::Median`]; for
/// [`Latency::Least`], `ms` replaced by `least_ms` and the machine's speed (`probe_ms`) by the
/// one that goes with it (`least_probe_ms`). An error naming `path` and the first row without
/// a fastest repetition (a file written before `least_ms` existed).
pub fn with_latency(
    mut rows: Vec<Row>,
    latency: Latency,
    path: &Path,
) -> Result<Vec<Row>, DatasetError> {
    if latency == Latency::Least {
        for (i, r) in rows.iter_mut().enumerate() {
            if r.least_ms <= 0.0 {
                return Err(DatasetError::NoFastestRepetition {
                    path: path.to_path_buf(),
                    point: i + 1,
                    config: r.config.clone(),
                    executor: r.executor.clone(),
                    c0: r.c0,
                    c1: r.c1,
                });
            }
            r.ms = r.least_ms;
            r.probe_ms = r.least_probe_ms;
        }
    }
    Ok(rows)
}

/// Leaves out the rows measured with another loop or launch than the runtime runs for them now
/// ([`is_current`]): measurements of kernels since replaced, which would teach the predictors
/// their times. Returns how many rows it left out.
pub fn drop_superseded(rows: &mut Vec<Row>) -> usize {
    let before = rows.len();
    rows.retain(is_current);
    before - rows.len()
}

/// Whether `r` measured the loop (CPU) or launch (GPU) the runtime runs for it now. CPU rows:
/// their `variant` is [`cpu_variant`]'s loop. GPU depthwise rows: their recorded grid order
/// ([`CHANNELS_INNER_SUFFIX`], [`CHANNELS_OUTER_SUFFIX`]) is [`gpu_channels_inner`]'s; of the
/// rows measured before the order was recorded (the bare kernel name), only `depthwise_3x3`
/// ones of a part launched channels-outermost, which times as it did then, while
/// `depthwise_generic`'s kernel runs 8–11% faster since the launch order became a build option
/// (`docs/predictors.md`, *The GPU launch of a row*). Other GPU rows are current.
pub fn is_current(r: &Row) -> bool {
    if is_cpu(&r.executor) {
        return r.variant == cpu_variant(&r.layer, r.c0, r.c1);
    }
    if r.layer.op != OpKind::Depthwise {
        return true;
    }
    let inner = gpu_channels_inner(&r.layer, r.c0, r.c1);
    if r.variant.ends_with(CHANNELS_INNER_SUFFIX) {
        inner
    } else if r.variant.ends_with(CHANNELS_OUTER_SUFFIX) {
        !inner
    } else {
        !inner && r.executor == gpu_executor(OpKind::Depthwise, Variant::Depthwise3x3)
    }
}

/// The GPU's dispatch decision as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DispatchRecord {
    pub block: [usize; 3],
    pub work_group: [usize; 3],
    pub groups: usize,
    pub grid: [usize; 3],
}

/// One measured point.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub config: String,
    pub device: String,
    pub cpu: String,
    pub layer: Layer,
    pub executor: String,
    pub threads: usize,
    pub c0: usize,
    pub c1: usize,
    /// How the row ran: the GPU kernel variant's name, with
    /// [`CHANNELS_INNER_SUFFIX`] for a depthwise part launched channels-innermost
    /// ([`crate::features::gpu_variant`]); the CPU's loop ([`cpu_variant`]: empty, or
    /// `prefetch_rows`).
    pub variant: String,
    pub dispatch: DispatchRecord,
    pub ms: f64,
    pub reps: usize,
    pub sync_ms: f64,
    /// The machine's speed while the row was measured: the median time (ms) of the quiet
    /// gate's reference layer on the row's side (the GPU's for a GPU row, the CPU's for a CPU
    /// row) in the probes around the rounds kept (`crate::quiet::Rounds`); 0 when not
    /// recorded (the gate off, or a file older than the column).
    pub probe_ms: f64,
    /// The fastest single repetition over the rounds kept ([`Latency::Least`]); 0 when not
    /// recorded (a file older than the column).
    pub least_ms: f64,
    /// The reference layer's time that goes with `least_ms` ([`with_latency`] makes it the
    /// row's `probe_ms` with the fastest repetition): a measurement's own `probe_ms`, and for a
    /// point pooled over passes the least of their probes ([`Row::pooled_with`]). Not a
    /// column of the file: set where a row is read or measured.
    pub least_probe_ms: f64,
}

/// Why a dataset could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// (`error`, not `source`: the message already states it, and a chain printing the
    /// source again would say it twice.)
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A point without a fastest repetition, asked for [`Latency::Least`].
    #[error(
        "{path}: point {point} ({config} {executor}, channels {c0}..{c1}) has no least_ms: the \
         file was measured before tandem recorded the fastest repetition, so it can only be used \
         with median latencies"
    )]
    NoFastestRepetition {
        path: PathBuf,
        /// 1-based, among the dataset's points (passes pooled).
        point: usize,
        config: String,
        executor: String,
        c0: usize,
        c1: usize,
    },
}

/// The key of a layer configuration: equal for every row of one configuration.
pub fn config_key(layer: &Layer) -> String {
    let l = layer;
    let groups = if l.groups > 1 {
        format!(":g{}", l.groups)
    } else {
        String::new()
    };
    format!(
        "{}:{}x{}x{}x{}:{}x{}x{}:k{}x{}:s{}:p{}x{}{groups}",
        l.op.name(),
        l.n,
        l.h,
        l.w,
        l.cin,
        l.oh,
        l.ow,
        l.cout,
        l.kh,
        l.kw,
        l.stride,
        l.pad_t,
        l.pad_l
    )
}

/// The layer of a configuration key ([`config_key`]'s inverse); `None` when `key` is not one.
pub fn layer_of_key(key: &str) -> Option<Layer> {
    let parts: Vec<&str> = key.split(':').collect();
    if !(6..=7).contains(&parts.len()) {
        return None;
    }
    let nums = |s: &str, n: usize| -> Option<Vec<usize>> {
        let v: Vec<usize> = s
            .split('x')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        (v.len() == n).then_some(v)
    };
    let input = nums(parts[1], 4)?;
    let output = nums(parts[2], 3)?;
    let kernel = nums(parts[3].strip_prefix('k')?, 2)?;
    let stride = parts[4].strip_prefix('s')?.parse().ok()?;
    let pad = nums(parts[5].strip_prefix('p')?, 2)?;
    let groups = match parts.get(6) {
        Some(g) => g.strip_prefix('g')?.parse().ok()?,
        None => 1,
    };
    let layer = Layer {
        op: crate::features::OpKind::parse(parts[0])?,
        n: input[0],
        h: input[1],
        w: input[2],
        cin: input[3],
        oh: output[0],
        ow: output[1],
        cout: output[2],
        kh: kernel[0],
        kw: kernel[1],
        stride,
        pad_t: pad[0],
        pad_l: pad[1],
        groups,
    };
    (config_key(&layer) == key).then_some(layer)
}

pub(crate) fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

impl Row {
    /// The row as one CSV line (no newline).
    pub fn to_csv(&self) -> String {
        let l = &self.layer;
        let d = &self.dispatch;
        let mut s = String::new();
        let _ = write!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},",
            quote(&self.config),
            quote(&self.device),
            quote(&self.cpu),
            l.op.name(),
            l.n,
            l.h,
            l.w,
            l.cin,
            l.oh,
            l.ow,
            l.cout,
            l.kh,
            l.kw,
            l.stride,
            l.pad_t,
            l.pad_l,
            quote(&self.executor),
            self.threads,
            self.c0,
            self.c1,
            quote(&self.variant),
        );
        let _ = write!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{:.6},{},{:.6},{},{:.6},{:.6}",
            d.block[0],
            d.block[1],
            d.block[2],
            d.work_group[0],
            d.work_group[1],
            d.work_group[2],
            d.groups,
            d.grid[0],
            d.grid[1],
            d.grid[2],
            self.ms,
            self.reps,
            self.sync_ms,
            l.groups.max(1),
            self.probe_ms,
            self.least_ms
        );
        s
    }
}

/// Splits one CSV line into fields (quoted fields may hold commas and doubled quotes).
pub(crate) fn split_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(ch) = chars.next() {
        if quoted {
            if ch == '"' {
                if chars.peek() == Some(&'"') {
                    cur.push('"');
                    chars.next();
                } else {
                    quoted = false;
                }
            } else {
                cur.push(ch);
            }
        } else if ch == '"' && at_start {
            quoted = true;
            at_start = false;
        } else if ch == ',' {
            fields.push(std::mem::take(&mut cur));
            at_start = true;
        } else {
            cur.push(ch);
            at_start = false;
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    fields.push(cur);
    Ok(fields)
}

/// Parses a row from its fields; the error names the field.
fn parse_row(fields: &[String], columns: usize) -> Result<Row, String> {
    if fields.len() != columns {
        return Err(format!(
            "{} fields, expected {} ({})",
            fields.len(),
            columns,
            COLUMNS[..columns].join(",")
        ));
    }
    let f = |i: usize| fields[i].as_str();
    let int = |i: usize| -> Result<usize, String> {
        f(i).trim().parse::<usize>().map_err(|_| {
            format!(
                "field '{}' (column {}): '{}' is not a non-negative integer",
                COLUMNS[i],
                i + 1,
                f(i)
            )
        })
    };
    let num = |i: usize| -> Result<f64, String> {
        let v = f(i).trim().parse::<f64>().map_err(|_| {
            format!(
                "field '{}' (column {}): '{}' is not a number",
                COLUMNS[i],
                i + 1,
                f(i)
            )
        })?;
        if !v.is_finite() || v < 0.0 {
            return Err(format!(
                "field '{}' (column {}): {v} is not a finite non-negative number",
                COLUMNS[i],
                i + 1
            ));
        }
        Ok(v)
    };
    let op = crate::features::OpKind::parse(f(3)).ok_or_else(|| {
        format!(
            "field 'op' (column 4): '{}' is not conv, dwconv, linear or gconv",
            f(3)
        )
    })?;
    let layer = Layer {
        op,
        n: int(4)?,
        h: int(5)?,
        w: int(6)?,
        cin: int(7)?,
        oh: int(8)?,
        ow: int(9)?,
        cout: int(10)?,
        kh: int(11)?,
        kw: int(12)?,
        stride: int(13)?,
        pad_t: int(14)?,
        pad_l: int(15)?,
        groups: if columns > OLD_COLUMNS { int(34)? } else { 1 },
    };
    if layer.groups == 0
        || (layer.groups > 1
            && (op != crate::features::OpKind::GroupedConv
                || !layer.cin.is_multiple_of(layer.groups)
                || !layer.cout.is_multiple_of(layer.groups)))
    {
        return Err(format!(
            "field 'conv_groups' (column 35): {} groups for a {} layer of {} -> {} channels",
            layer.groups,
            op.name(),
            layer.cin,
            layer.cout
        ));
    }
    // A geometry no layer has (a zero kernel or stride, an output the input cannot give) would
    // reach the features' window arithmetic: refuse it here, naming it.
    let geometry = match layer.to_op() {
        LayerOp::Conv(p) => p.validate(),
        LayerOp::Depthwise(p) => p.validate(),
        LayerOp::Linear(p) if p.rows == 0 || p.depth == 0 || p.units == 0 => {
            Err("an empty dimension".to_string())
        }
        LayerOp::Linear(_) => Ok(()),
    };
    if let Err(why) = geometry {
        return Err(format!(
            "fields 'n'..'pad_l' (columns 5-16): not a {} layer: {why}",
            op.name()
        ));
    }
    let (c0, c1) = (int(18)?, int(19)?);
    if c0 > c1 || c1 > layer.cout {
        return Err(format!(
            "fields 'c0', 'c1' (columns 19, 20): range {c0}..{c1} is not within 0..{} (cout)",
            layer.cout
        ));
    }
    let executor = f(16).to_string();
    if executor.is_empty() {
        return Err("field 'executor' (column 17) is empty".into());
    }
    let probe_ms = if columns > NO_PROBE_COLUMNS {
        num(35)?
    } else {
        0.0
    };
    Ok(Row {
        config: f(0).to_string(),
        device: f(1).to_string(),
        cpu: f(2).to_string(),
        layer,
        executor,
        threads: int(17)?,
        c0,
        c1,
        variant: f(20).to_string(),
        dispatch: DispatchRecord {
            block: [int(21)?, int(22)?, int(23)?],
            work_group: [int(24)?, int(25)?, int(26)?],
            groups: int(27)?,
            grid: [int(28)?, int(29)?, int(30)?],
        },
        ms: num(31)?,
        reps: int(32)?,
        sync_ms: num(33)?,
        probe_ms,
        least_ms: if columns > NO_LEAST_COLUMNS {
            num(36)?
        } else {
            0.0
        },
        least_probe_ms: probe_ms,
    })
}

/// Reads a dataset (plain CSV, or gzip-compressed when the name ends in `.gz`) with one row
/// per point of the runtime as it is: the measurements of a point taken in several passes
/// (`tandem profile --passes`) are pooled into one ([`pool_repeats`]), and the rows of a CPU
/// loop or GPU launch the runtime has since replaced for them are left out ([`drop_superseded`];
/// [`read_measurements`] keeps them).
pub fn read(path: &Path) -> Result<Vec<Row>, DatasetError> {
    let mut rows = read_measurements(path)?;
    drop_superseded(&mut rows);
    Ok(pool_repeats(rows))
}

/// Reads every row of a dataset as stored, a point measured in several passes once per pass.
pub fn read_measurements(path: &Path) -> Result<Vec<Row>, DatasetError> {
    parse(&read_text(path)?, path)
}

/// What identifies a measured point: its configuration, executor, threads and channel range.
pub type PointKey<'a> = (&'a str, &'a str, usize, usize, usize);

impl Row {
    /// The point this row measures ([`PointKey`]).
    pub fn point_key(&self) -> PointKey<'_> {
        (
            self.config.as_str(),
            self.executor.as_str(),
            self.threads,
            self.c0,
            self.c1,
        )
    }

    /// This measurement pooled with `others` of the same point: the fastest repetition of them
    /// all (when every measurement recorded one: the statistic is the fastest repetition of
    /// all a point's rounds, and more rounds spread in time find it more reliably), the
    /// geometric mean of the median latencies (the noise of `k` independent measurements is
    /// about `1/√k` of one's, and the geometric mean keeps the typical latency, unlike the
    /// least), repetitions summed, the
    /// joins' and the reference layer's times by their geometric means too (the reference
    /// layer's over the measurements that recorded it).
    ///
    /// The reference layer's time that goes with the fastest repetition (`least_probe_ms`) is
    /// the least of the measurements' probes instead: a pass measured in a slow phase of the
    /// machine does not move the fastest repetition, so it must not move its speed either.
    pub fn pooled_with(&self, others: &[&Row]) -> Row {
        let mut p = self.clone();
        if others.is_empty() {
            return p;
        }
        let all = || std::iter::once(self).chain(others.iter().copied());
        let geomean = |v: Vec<f64>| {
            let n = v.len() as f64;
            (v.iter().map(|x| x.ln()).sum::<f64>() / n).exp()
        };
        p.ms = geomean(all().map(|r| r.ms).collect());
        p.reps = all().map(|r| r.reps).sum();
        let joins: Vec<f64> = all().map(|r| r.sync_ms).filter(|&x| x > 0.0).collect();
        if !joins.is_empty() {
            p.sync_ms = geomean(joins);
        }
        let probes: Vec<f64> = all().map(|r| r.probe_ms).filter(|&x| x > 0.0).collect();
        p.least_probe_ms = probes.iter().copied().reduce(f64::min).unwrap_or(0.0);
        p.probe_ms = if probes.is_empty() {
            0.0
        } else {
            geomean(probes)
        };
        p.least_ms = if all().all(|r| r.least_ms > 0.0) {
            all().map(|r| r.least_ms).fold(f64::INFINITY, f64::min)
        } else {
            0.0
        };
        p
    }
}

/// One row per point: the rows of a point measured more than once (`tandem profile
/// --passes`) pooled by [`Row::pooled_with`] at the place of its first row; other rows as they
/// are, in their order.
pub fn pool_repeats(rows: Vec<Row>) -> Vec<Row> {
    let mut index: std::collections::HashMap<PointKey<'_>, Vec<usize>> =
        std::collections::HashMap::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        index.entry(r.point_key()).or_default().push(i);
    }
    if index.len() == rows.len() {
        return rows;
    }
    let mut out = Vec::with_capacity(index.len());
    for (i, r) in rows.iter().enumerate() {
        let same = &index[&r.point_key()];
        if same[0] == i {
            let others: Vec<&Row> = same[1..].iter().map(|&j| &rows[j]).collect();
            out.push(r.pooled_with(&others));
        }
    }
    out
}

/// A dataset measured in passes (`tandem profile --passes`) as two measurements of the same
/// points: the first row of every point, and its later rows pooled into one ([`pool_repeats`]).
/// Points measured once are only in the first; both keep the rows' order. For
/// [`crate::eval::repeatability`]: how far a dataset's own passes lie apart.
pub fn first_pass_and_rest(rows: Vec<Row>) -> (Vec<Row>, Vec<Row>) {
    let is_first: Vec<bool> = {
        let mut seen = std::collections::HashSet::with_capacity(rows.len());
        rows.iter().map(|r| seen.insert(r.point_key())).collect()
    };
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for (r, is_first) in rows.into_iter().zip(is_first) {
        if is_first {
            first.push(r);
        } else {
            rest.push(r);
        }
    }
    (first, pool_repeats(rest))
}

/// How many times each configuration of `rows` was measured: the most rows any one of its
/// points has (a pass measures every point of a configuration once).
pub fn passes_per_config(rows: &[Row]) -> std::collections::HashMap<&str, usize> {
    let mut points: std::collections::HashMap<PointKey<'_>, usize> =
        std::collections::HashMap::new();
    for r in rows {
        *points.entry(r.point_key()).or_default() += 1;
    }
    let mut passes = std::collections::HashMap::new();
    for (key, n) in points {
        let e = passes.entry(key.0).or_insert(0);
        *e = n.max(*e);
    }
    passes
}

/// The text of a file, decompressed when its name ends in `.gz`.
pub(crate) fn read_text(path: &Path) -> Result<String, DatasetError> {
    let io = |error| DatasetError::Io {
        path: path.to_path_buf(),
        error,
    };
    let bytes = std::fs::read(path).map_err(io)?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out)
            .map_err(io)?;
        Ok(out)
    } else {
        String::from_utf8(bytes).map_err(|e| DatasetError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message: format!("not UTF-8 text: {e}"),
        })
    }
}

/// Parses dataset text; `path` is for messages.
pub fn parse(text: &str, path: &Path) -> Result<Vec<Row>, DatasetError> {
    let err = |line: usize, message: String| DatasetError::Parse {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut lines = text.lines().enumerate();
    let header = match lines.next() {
        Some((_, h)) => h,
        None => return Err(err(1, "empty file, expected a header line".into())),
    };
    let expected = COLUMNS.join(",");
    let Some(columns) = header_columns(header) else {
        return Err(err(
            1,
            format!("header is not a tandem dataset header; expected: {expected}"),
        ));
    };
    let mut rows = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let fields = split_fields(line).map_err(|m| err(i + 1, m))?;
        rows.push(parse_row(&fields, columns).map_err(|m| err(i + 1, m))?);
    }
    Ok(rows)
}

/// The column count of a dataset header: the current one or an older one ([`HEADERS`]).
fn header_columns(header: &str) -> Option<usize> {
    HEADERS
        .into_iter()
        .find(|&n| header.trim_end() == COLUMNS[..n].join(","))
}

/// Appends rows to a dataset file, writing the header first when the file is new or empty.
pub struct Appender {
    file: std::fs::File,
    path: PathBuf,
}

impl Appender {
    /// Opens `path` for appending. A file written before the `conv_groups`, `probe_ms` or
    /// `least_ms` columns existed is rewritten with them first (its rows keep one group, no
    /// recorded speed and no fastest repetition), so that old and new rows share a header.
    pub fn open(path: &Path) -> Result<Appender, DatasetError> {
        let io = |error| DatasetError::Io {
            path: path.to_path_buf(),
            error,
        };
        if let Ok(text) = std::fs::read_to_string(path) {
            let header = text.lines().next().unwrap_or("");
            if header_columns(header).is_some_and(|n| n < COLUMNS.len()) {
                let rows = parse(&text, path)?;
                write(path, &rows)?;
            }
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        if file.metadata().map_err(io)?.len() == 0 {
            writeln!(file, "{}", COLUMNS.join(",")).map_err(io)?;
        }
        Ok(Appender {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Appends and flushes `rows` (one configuration at a time, so an interrupted run loses at
    /// most the configuration in progress).
    pub fn append(&mut self, rows: &[Row]) -> Result<(), DatasetError> {
        let mut text = String::new();
        for r in rows {
            text.push_str(&r.to_csv());
            text.push('\n');
        }
        self.file
            .write_all(text.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|error| DatasetError::Io {
                path: self.path.clone(),
                error,
            })
    }
}

/// Writes `rows` as a complete dataset (gzip when the name ends in `.gz`).
pub fn write(path: &Path, rows: &[Row]) -> Result<(), DatasetError> {
    let mut text = COLUMNS.join(",");
    text.push('\n');
    for r in rows {
        text.push_str(&r.to_csv());
        text.push('\n');
    }
    let io = |error| DatasetError::Io {
        path: path.to_path_buf(),
        error,
    };
    if path.extension().is_some_and(|e| e == "gz") {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(text.as_bytes()).map_err(io)?;
        let bytes = enc.finish().map_err(io)?;
        std::fs::write(path, bytes).map_err(io)
    } else {
        std::fs::write(path, text).map_err(io)
    }
}

/// A GPU row of a linear layer measured `ms` (tests of the readers and the evaluation).
#[cfg(test)]
pub(crate) fn test_point(config: &str, c1: usize, ms: f64, probe_ms: f64) -> Row {
    Row {
        config: config.into(),
        device: "gpu".into(),
        cpu: "cpu".into(),
        layer: Layer::linear(1, 16, c1),
        executor: "fully_connected".into(),
        threads: 0,
        c0: 0,
        c1,
        variant: "fully_connected".into(),
        dispatch: Default::default(),
        ms,
        reps: 3,
        sync_ms: 0.002,
        probe_ms,
        least_ms: 0.0,
        least_probe_ms: probe_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_of_an_impossible_layer_is_refused_naming_its_fields_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.csv");
        let mut dw = test_point("dw", 8, 1.0, 0.0);
        dw.layer = Layer {
            op: OpKind::Depthwise,
            n: 1,
            h: 8,
            w: 8,
            cin: 8,
            oh: 8,
            ow: 8,
            cout: 8,
            kh: 3,
            kw: 3,
            stride: 1,
            pad_t: 1,
            pad_l: 1,
            groups: 1,
        };
        dw.executor = "cpu_dwconv_t1".into();
        dw.threads = 1;
        dw.variant = String::new();
        dw.config = config_key(&dw.layer);
        write(&path, std::slice::from_ref(&dw)).expect("write");
        assert_eq!(read(&path).expect("a valid layer reads")[0].layer, dw.layer);
        let bad = |change: fn(&mut Layer)| {
            let mut r = dw.clone();
            change(&mut r.layer);
            r.config = config_key(&r.layer);
            write(&path, &[dw.clone(), r]).expect("write");
            read(&path).expect_err("impossible layer").to_string()
        };
        for e in [
            bad(|l| l.kh = 0),
            bad(|l| l.stride = 0),
            bad(|l| l.oh = 20),
            bad(|l| l.cout = 12),
        ] {
            assert!(
                e.contains(":3:") && e.contains("columns 5-16") && e.contains("dwconv layer"),
                "{e}"
            );
        }
        let mut linear = test_point("fc", 8, 1.0, 0.0);
        linear.layer = Layer::linear(0, 16, 8);
        linear.config = config_key(&linear.layer);
        write(&path, &[linear]).expect("write");
        let e = read(&path).expect_err("empty linear").to_string();
        assert!(e.contains("not a linear layer: an empty dimension"), "{e}");
    }

    #[test]
    fn rows_of_a_replaced_loop_or_launch_are_left_out_and_the_rest_stay() {
        // A 5x5 depthwise layer of 200x200 pixels: 53 channels of input are 8.09 MiB, over
        // the runtime's prefetch threshold; 52 are 7.93 MiB, under it. On the GPU, 27 channels
        // (4.12 MiB) launch channels-innermost, 26 (3.97 MiB) do not.
        let layer = Layer {
            op: crate::features::OpKind::Depthwise,
            n: 1,
            h: 200,
            w: 200,
            cin: 64,
            oh: 200,
            ow: 200,
            cout: 64,
            kh: 5,
            kw: 5,
            stride: 1,
            pad_t: 2,
            pad_l: 2,
            groups: 1,
        };
        let cpu = |c1: usize, variant: &str| Row {
            layer: layer.clone(),
            executor: "cpu_dwconv_t1".into(),
            threads: 1,
            variant: variant.into(),
            ..test_point("dw", c1, 1.0, 0.0)
        };
        let gpu = |g: usize, variant: &str| Row {
            layer: layer.clone(),
            executor: "depthwise_generic".into(),
            c0: 64 - g,
            variant: variant.into(),
            ..test_point("dw", 64, 1.0, 0.0)
        };
        let layer3 = Layer {
            kh: 3,
            kw: 3,
            pad_t: 1,
            pad_l: 1,
            ..layer.clone()
        };
        let gpu3 = |g: usize, variant: &str| Row {
            layer: layer3.clone(),
            executor: "depthwise_3x3".into(),
            variant: variant.into(),
            ..gpu(g, "")
        };
        let (inner, outer) = (
            "depthwise_generic/channels_inner",
            "depthwise_generic/channels_outer",
        );
        let mut rows = vec![
            cpu(52, ""),
            cpu(53, ""),
            cpu(64, ""),
            cpu(53, "prefetch_rows"),
            cpu(52, "prefetch_rows"),
            gpu(64, "depthwise_generic"),
            gpu(64, inner),
            gpu(27, inner),
            gpu(27, "depthwise_generic"),
            gpu(26, "depthwise_generic"),
            gpu(26, inner),
            gpu(26, outer),
            gpu3(26, "depthwise_3x3"),
            gpu3(27, "depthwise_3x3"),
            test_point("fc", 8, 1.0, 0.0),
        ];
        assert_eq!(drop_superseded(&mut rows), 8);
        // Kept: the current loops and launches, depthwise_3x3's bare rows of a part launched
        // channels-outermost (that kernel times as before), and rows of other ops.
        assert_eq!(
            rows,
            vec![
                cpu(52, ""),
                cpu(53, "prefetch_rows"),
                gpu(64, inner),
                gpu(27, inner),
                gpu(26, outer),
                gpu3(26, "depthwise_3x3"),
                test_point("fc", 8, 1.0, 0.0)
            ]
        );
    }

    #[test]
    fn repeated_points_pool_at_their_first_place_and_others_stay_as_they_are() {
        let rows = vec![
            test_point("a", 8, 1.0, 1.0),
            test_point("a", 16, 5.0, 0.0),
            test_point("b", 8, 3.0, 0.0),
            test_point("a", 8, 4.0, 4.0),
            test_point("a", 8, 2.0, 0.0),
        ];
        let counts = passes_per_config(&rows);
        assert_eq!((counts["a"], counts["b"]), (3, 1));
        let pooled = pool_repeats(rows.clone());
        assert_eq!(pooled.len(), 3);
        // (1 · 4 · 2)^(1/3) = 2; repetitions summed; the reference layer over the two
        // measurements that recorded it: (1 · 4)^(1/2) = 2.
        assert_eq!((pooled[0].config.as_str(), pooled[0].c1), ("a", 8));
        assert!((pooled[0].ms - 2.0).abs() < 1e-12, "{:?}", pooled[0]);
        assert!((pooled[0].probe_ms - 2.0).abs() < 1e-12, "{:?}", pooled[0]);
        // The speed that goes with the fastest repetition: the least of the probes recorded.
        assert_eq!(pooled[0].least_probe_ms, 1.0);
        assert!((pooled[0].sync_ms - 0.002).abs() < 1e-15);
        assert_eq!(pooled[0].reps, 9);
        assert_eq!(pooled[1..], rows[1..3]);
        // Without repeats, nothing changes.
        assert_eq!(pool_repeats(rows[..3].to_vec()), rows[..3].to_vec());
    }

    #[test]
    fn a_dataset_in_passes_splits_into_its_first_pass_and_the_rest_pooled() {
        let rows = vec![
            test_point("a", 8, 1.0, 1.0),
            test_point("a", 16, 5.0, 0.0),
            test_point("b", 8, 3.0, 0.0),
            test_point("a", 8, 4.0, 4.0),
            test_point("a", 16, 7.0, 0.0),
            test_point("a", 8, 9.0, 0.0),
        ];
        let (first, rest) = first_pass_and_rest(rows.clone());
        assert_eq!(first, rows[..3]);
        // Point (a, 8) twice more, pooled: (4 · 9)^(1/2) = 6; (a, 16) once more; b never.
        assert_eq!(rest.len(), 2);
        assert_eq!((rest[0].config.as_str(), rest[0].c1), ("a", 8));
        assert!((rest[0].ms - 6.0).abs() < 1e-12, "{:?}", rest[0]);
        assert_eq!(rest[1], rows[4]);
        // One pass: everything is first, nothing is left to compare.
        assert_eq!(
            first_pass_and_rest(rows[..3].to_vec()),
            (rows[..3].to_vec(), vec![])
        );
    }

    #[test]
    fn the_fastest_repetition_round_trips_pools_and_replaces_the_median_when_chosen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.csv");
        let mut a = test_point("a", 8, 2.0, 1.0);
        a.least_ms = 1.5;
        // The second pass ran in a slow phase: its probe took three times as long.
        let mut a2 = test_point("a", 8, 8.0, 3.0);
        a2.least_ms = 6.0;
        let b = test_point("b", 8, 3.0, 1.0);
        write(&path, &[a.clone(), a2, b.clone()]).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text
            .lines()
            .next()
            .expect("header")
            .ends_with(",probe_ms,least_ms"));
        let rows = read(&path).expect("parse");
        // Pooled: the fastest repetition of both, 1.5; the medians' geometric mean (2 · 8)^(1/2).
        assert!((rows[0].ms - 4.0).abs() < 1e-9 && rows[0].least_ms == 1.5);
        assert_eq!(rows[1], b);
        let median = with_latency(rows.clone(), Latency::Median, &path).expect("median");
        assert_eq!(median, rows);
        // With the median, the probes' geometric mean (1 · 3)^(1/2); with the fastest
        // repetition, the least probe.
        assert!(
            (median[0].probe_ms - 3f64.sqrt()).abs() < 1e-9,
            "{:?}",
            median[0]
        );
        // b has no fastest repetition: the least latency is refused, naming the point.
        let Err(err) = with_latency(rows.clone(), Latency::Least, &path) else {
            panic!("b has no least_ms")
        };
        let msg = err.to_string();
        assert!(
            msg.contains("d.csv: point 2 (b fully_connected, channels 0..8) has no least_ms"),
            "{msg}"
        );
        let least = with_latency(rows[..1].to_vec(), Latency::Least, &path).expect("least");
        assert_eq!((least[0].ms, least[0].probe_ms), (1.5, 1.0));
        // A measurement without it pools to none.
        let mut c = test_point("c", 8, 1.0, 1.0);
        c.least_ms = 0.5;
        let pooled = c.pooled_with(&[&test_point("c", 8, 1.0, 1.0)]);
        assert_eq!(pooled.least_ms, 0.0);
    }

    #[test]
    fn a_file_from_before_the_fastest_repetition_reads_without_it() {
        let row = test_point("a", 8, 2.0, 1.5);
        let line = row.to_csv();
        let old = line.rsplit_once(',').expect("a last field").0;
        let text = format!("{}\n{old}\n", COLUMNS[..NO_LEAST_COLUMNS].join(","));
        let rows = parse(&text, Path::new("old.csv")).expect("the older header");
        assert_eq!(rows, vec![row]);
        assert_eq!(Latency::parse("least"), Some(Latency::Least));
        assert_eq!(Latency::parse("fastest"), None);
    }
}
