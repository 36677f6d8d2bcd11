//! `cargo xtask bench cpu`: tandem's CPU runtime against the official interpreter (XNNPACK) on the
//! zoo, in the same run, interleaved round by round so that machine noise hits both alike.
//! Reports medians and the ratio, and writes the table to `docs/benchmarks.md`.

use crate::setup::python_env;
use anyhow::{bail, Context, Result};
use std::fmt::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use tandem_compiler::lower::{compile, CompileOptions};
use tandem_compiler::tflite;
use tandem_runtime::session::{Model, Session};

/// One model's result at one thread count.
pub struct Row {
    pub model: String,
    pub threads: usize,
    pub tandem_ms: f64,
    pub interpreter_ms: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn interpreter_times(
    python: &Path,
    root: &Path,
    model: &Path,
    runs: usize,
    threads: usize,
) -> Result<Vec<f64>> {
    let out = Command::new(python)
        .arg(root.join("tools/litert.py"))
        .arg("bench")
        .arg(model)
        .arg(runs.to_string())
        .arg(threads.to_string())
        .output()?;
    if !out.status.success() {
        bail!(
            "interpreter failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    let start = line.find('[').context("no times")?;
    let end = line.rfind(']').context("no times")?;
    line[start + 1..end]
        .split(',')
        .map(|v| v.trim().parse::<f64>().context("bad time"))
        .collect()
}

/// Benchmarks `models` (zoo names) at each thread count, `rounds` × `runs` timed runs each, and
/// writes the table into `docs/benchmarks.md` (between the `bench cpu` markers).
pub fn bench_cpu(
    root: &Path,
    models: &[String],
    thread_counts: &[usize],
    rounds: usize,
    runs: usize,
    json: bool,
) -> Result<()> {
    let python = python_env(root)?;
    let dir = tempfile::tempdir()?;
    let mut rows = Vec::new();
    for name in models {
        for &threads in thread_counts {
            let zoo =
                tandem_models::by_name(name).with_context(|| format!("no zoo model '{name}'"))?;
            let graph = zoo.graph()?;
            let path = dir.path().join(format!("{name}.tflite"));
            std::fs::write(&path, tflite::write_model(&graph)?)?;
            let artifact = compile(graph.clone(), &CompileOptions::cpu(threads, name))?;
            let model = Model::from_artifact(artifact);
            let inputs = tandem_models::inputs::seeded_inputs(&graph, tandem_models::SEED);
            let mut session = Session::new(&model, threads);
            session.run(&inputs)?;
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                for _ in 0..runs {
                    let start = Instant::now();
                    session.run(&inputs)?;
                    ours.push(start.elapsed().as_secs_f64() * 1e3);
                }
                theirs.extend(interpreter_times(&python, root, &path, runs, threads)?);
            }
            let row = Row {
                model: name.clone(),
                threads,
                tandem_ms: median(ours),
                interpreter_ms: median(theirs),
            };
            eprintln!("bench: {:<14} {threads} thread(s)  tandem {:8.2} ms   interpreter {:8.2} ms   ratio {:.2}", row.model, row.tandem_ms, row.interpreter_ms, row.tandem_ms / row.interpreter_ms);
            rows.push(row);
        }
    }
    let table = render(&rows, rounds * runs);
    write_machine_section(&root.join("docs/benchmarks.md"), "bench cpu", &table)?;
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"model\":\"{}\",\"threads\":{},\"tandem_ms\":{:.4},\"interpreter_ms\":{:.4},\"ratio\":{:.4}}}",
                    r.model,
                    r.threads,
                    r.tandem_ms,
                    r.interpreter_ms,
                    r.tandem_ms / r.interpreter_ms
                )
            })
            .collect();
        println!("{{\"results\":[{}]}}", items.join(","));
    } else {
        print!("{table}");
    }
    Ok(())
}

fn render(rows: &[Row], samples: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "CPU only, median of {samples} runs each, interleaved rounds (`cargo xtask bench cpu`):\n"
    );
    let _ = writeln!(s, "| model | threads | tandem (ms) | official interpreter, XNNPACK (ms) | tandem / interpreter |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.2} | {:.2} |",
            r.model,
            r.threads,
            r.tandem_ms,
            r.interpreter_ms,
            r.tandem_ms / r.interpreter_ms
        );
    }
    s
}

/// Replaces the text between `<!-- BEGIN {marker} -->` and `<!-- END {marker} -->` in `path`
/// (appending the section if it is missing).
pub(crate) fn write_section(path: &Path, marker: &str, body: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n".to_string());
    std::fs::write(path, with_section(&text, marker, body))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// `text` with the section `marker` holding `body`: replaced where it is, else appended.
fn with_section(text: &str, marker: &str, body: &str) -> String {
    let (begin, end) = (
        format!("<!-- BEGIN {marker} -->"),
        format!("<!-- END {marker} -->"),
    );
    let section = format!("{begin}\n{body}{end}");
    match (text.find(&begin), text.find(&end)) {
        (Some(b), Some(e)) if b < e => format!("{}{section}{}", &text[..b], &text[e + end.len()..]),
        _ => format!("{}\n{section}\n", text.trim_end()),
    }
}

/// The machine a benchmark ran on, as its sections are named: the CPU's model name without
/// trademark signs (`Intel Xeon Processor`, `AMD EPYC`).
pub(crate) fn machine_name() -> String {
    let description = tandem_runtime::profile::cpu_description();
    let model = description
        .rsplit_once(" (")
        .map_or(description.as_str(), |(m, _)| m);
    model
        .replace("(R)", "")
        .replace("(TM)", "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// [`write_section`] for results that depend on the machine: one section per machine, marked
/// `{marker} on {machine}` ([`machine_name`]) and opened by a line naming the CPU.
pub(crate) fn write_machine_section(path: &Path, marker: &str, body: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n".to_string());
    let body = format!(
        "Machine: {}.\n\n{body}",
        tandem_runtime::profile::cpu_description()
    );
    std::fs::write(
        path,
        with_machine_section(&text, marker, &machine_name(), &body),
    )
    .with_context(|| format!("cannot write {}", path.display()))
}

/// `text` with the section `{marker} on {machine}` holding `body`. A machine's first section
/// goes right after the last section of the same benchmark on another machine (at the end of
/// the text when there is none).
fn with_machine_section(text: &str, marker: &str, machine: &str, body: &str) -> String {
    let full = format!("{marker} on {machine}");
    if !text.contains(&format!("<!-- BEGIN {full} -->")) {
        if let Some(at) = text.rfind(&format!("<!-- END {marker} on ")) {
            let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i + 1);
            let head = &text[..line_end];
            let sep = if head.ends_with('\n') { "" } else { "\n" };
            return format!(
                "{head}{sep}<!-- BEGIN {full} -->\n{body}<!-- END {full} -->\n{}",
                &text[line_end..]
            );
        }
    }
    with_section(text, &full, body)
}

/// CPU time of the calling thread in seconds (wall time where that is not available), so that
/// time the thread spends descheduled on a shared machine does not count.
fn thread_seconds() -> f64 {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        #[repr(C)]
        struct Timespec {
            sec: i64,
            nsec: i64,
        }
        extern "C" {
            fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
        }
        const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
        let mut time = Timespec { sec: 0, nsec: 0 };
        // SAFETY: `time` is a valid, writable `struct timespec` on 64-bit Linux.
        if unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut time) } == 0 {
            return time.sec as f64 + time.nsec as f64 * 1e-9;
        }
    }
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// `cargo xtask bench gemm`: single-thread GFLOP/s of the packed-weight GEMM
/// (`runtime/src/cpu/packed_gemm.rs`) with every kernel this CPU supports, and of the `gemm`
/// crate as the same-run baseline, on convolution shapes of ResNet-18 and MobileNetV2. Medians of
/// `samples` samples of about 2 ms of thread CPU time each, the kernels taking turns so that all
/// see the same load. Prints a Markdown table.
pub fn bench_gemm(samples: usize) -> Result<()> {
    use tandem_runtime::cpu::gemm::{matmul, MatRef};
    use tandem_runtime::cpu::packed_gemm::{gemm_packed_with_isa, pack_b, Epilogue};
    use tandem_runtime::cpu::simd::Isa;
    use tandem_runtime::rng::Rng;

    let shapes = [
        (12544, 147, 64),
        (3136, 576, 64),
        (784, 1152, 128),
        (196, 2304, 256),
        (49, 4608, 512),
        (12544, 32, 16),
        (3136, 144, 24),
        (784, 192, 32),
        (196, 384, 64),
        (49, 960, 160),
        (49, 960, 320),
        (1, 1280, 1000),
    ];
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.is_supported()).collect();
    let mut rng = Rng::new(5);
    let mut header = String::from("| m×k×n |");
    for isa in &isas {
        let _ = write!(header, " {isa:?} (ours) |");
    }
    println!("{header} gemm crate |");
    println!("|---|{}---:|", "---:|".repeat(isas.len()));
    for (m, k, n) in shapes {
        let a = rng.uniform(m * k, 1.0);
        let b = rng.uniform(k * n, 1.0);
        let packed = pack_b(&b, k, n, n);
        let mut dst = vec![0.0; m * n];
        let flops = 2.0 * (m * k * n) as f64;
        let reps = ((2e8 / flops) as usize).max(1);
        let mut rates = vec![Vec::new(); isas.len() + 1];
        // One warm-up round, then `samples` timed ones.
        for round in 0..=samples.max(1) {
            for (i, rates) in rates.iter_mut().enumerate() {
                let t = thread_seconds();
                for _ in 0..reps {
                    match isas.get(i) {
                        Some(&isa) => gemm_packed_with_isa(
                            isa,
                            &mut dst,
                            n,
                            &a,
                            k,
                            m,
                            k,
                            packed.as_slice(),
                            n,
                            0,
                            n,
                            Epilogue::OVERWRITE,
                        ),
                        None => {
                            let lhs = MatRef::rows(&a, m, k, k);
                            matmul(&mut dst, n, lhs, MatRef::rows(&b, k, n, n), false);
                        }
                    }
                }
                let seconds = thread_seconds() - t;
                if round > 0 && seconds > 0.0 {
                    rates.push(flops * reps as f64 / seconds / 1e9);
                }
            }
        }
        let mut row = format!("| {m}×{k}×{n} |");
        for rates in rates {
            let _ = write!(row, " {:.1} |", median(rates));
        }
        println!("{row}");
    }
    Ok(())
}

/// A depthwise layer of `h`×`w`×`c`, a `k`×`k` kernel and stride `s`, SAME padding, no
/// activation.
fn same_depthwise(
    h: usize,
    w: usize,
    c: usize,
    k: usize,
    s: usize,
) -> tandem_runtime::cpu::depthwise::DepthwiseParams {
    let (ho, wo) = (h.div_ceil(s), w.div_ceil(s));
    let pad = |size: usize, out: usize| ((out - 1) * s + k).saturating_sub(size) / 2;
    tandem_runtime::cpu::depthwise::DepthwiseParams {
        input: [1, h, w, c],
        output: [1, ho, wo, c],
        kernel: [k, k],
        stride: [s, s],
        dilation: [1, 1],
        pad: [pad(h, ho), pad(w, wo)],
        multiplier: 1,
        activation: tandem_runtime::cpu::Activation::None,
    }
}

/// `cargo xtask bench dwrows`: the CPU depthwise loop (one thread) with and without prefetching
/// the next output row's input rows, on large layers from the profiler's fresh sets and on
/// MobileNet-sized ones that fit the caches, whole. The two take turns, one call each per
/// round, after a warm-up round; medians of `samples` rounds. The runtime prefetches from
/// `PREFETCH_FROM_BYTES` of input on (the column "runtime"). Prints a Markdown table.
pub fn bench_depthwise_rows(samples: usize) -> Result<()> {
    use std::time::Instant;
    use tandem_runtime::cpu::depthwise::{depthwise_conv2d_prefetching, prefetches_rows};
    use tandem_runtime::cpu::threads::ThreadPool;
    use tandem_runtime::rng::Rng;

    // (H, W, C, kernel, stride), SAME padding.
    let layers: [(usize, usize, usize, usize, usize); 12] = [
        (219, 206, 109, 5, 2),
        (209, 248, 122, 5, 2),
        (143, 237, 131, 5, 2),
        (96, 71, 573, 5, 2),
        (76, 68, 1039, 5, 1),
        (99, 101, 1023, 7, 2),
        (110, 103, 802, 3, 1),
        (199, 132, 766, 3, 1),
        (112, 112, 96, 3, 2),
        (56, 56, 144, 3, 1),
        (28, 28, 512, 5, 1),
        (14, 14, 960, 3, 1),
    ];
    let pool = ThreadPool::new(1);
    let mut rng = Rng::new(7);
    println!("| layer (H×W×C, kernel, stride) | input MB | runtime | without (ms) | with (ms) | without / with |");
    println!("|---|---:|---|---:|---:|---:|");
    for (h, w, c, k, s) in layers {
        let p = same_depthwise(h, w, c, k, s);
        let [_, ho, wo, _] = p.output;
        let input = rng.uniform(h * w * c, 1.0);
        let weights = rng.uniform(k * k * c, 1.0);
        let bias = rng.uniform(c, 1.0);
        let mut out = vec![0.0; ho * wo * c];
        let mut times = [Vec::new(), Vec::new()];
        for round in 0..=samples.max(1) {
            for (prefetch, times) in [false, true].into_iter().zip(&mut times) {
                let t = Instant::now();
                depthwise_conv2d_prefetching(
                    &input,
                    &weights,
                    Some(&bias),
                    &mut out,
                    &p,
                    0,
                    c,
                    prefetch,
                    &pool,
                );
                if round > 0 {
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        let [without, with] = times.map(median);
        println!(
            "| {h}×{w}×{c}, {k}x{k}, {s} | {:.1} | {} | {without:.3} | {with:.3} | {:.2}x |",
            (h * w * c * 4) as f64 / (1 << 20) as f64,
            if prefetches_rows(&p, 0, c) {
                "with"
            } else {
                "without"
            },
            without / with
        );
    }
    Ok(())
}

/// `cargo xtask bench dwgrid`: GPU depthwise parts (PoCL, one thread, the GPU side's core)
/// launched with the channel blocks outermost (the device walks the image once per 8-channel
/// block) and innermost (once in all), on MobileNet-sized layers that fit the caches and on large
/// layers like the profiler's, whole and half. The two take turns, one measurement each per round
/// (the fastest of its repetitions, as the profiler's `least_ms`); medians of `samples` rounds.
/// The runtime launches channels-innermost from `CHANNELS_INNER_FROM_BYTES` of input on (the
/// column "runtime"). Prints a Markdown table.
pub fn bench_depthwise_grid(samples: usize) -> Result<()> {
    use anyhow::Context;
    use std::time::Duration;
    use tandem_runtime::gpu::dispatch::{depthwise_channels_inner, DepthwiseGrid};
    use tandem_runtime::profile::{LayerOp, MeasureOptions, Profiler};

    // (H, W, C, kernel, stride), SAME padding.
    let layers: [(usize, usize, usize, usize, usize); 14] = [
        (56, 56, 144, 3, 1),
        (28, 28, 192, 3, 1),
        (14, 14, 960, 3, 1),
        (40, 40, 256, 3, 1),
        (28, 28, 512, 5, 1),
        (120, 120, 64, 3, 1),
        (112, 112, 96, 3, 2),
        (80, 80, 256, 3, 1),
        (56, 56, 512, 5, 1),
        (60, 60, 600, 3, 2),
        (100, 100, 512, 5, 2),
        (84, 102, 1134, 3, 1),
        (64, 64, 2048, 3, 1),
        (150, 150, 384, 7, 1),
    ];
    // SAFETY: no other thread exists yet in this process; OpenCL has not started.
    unsafe { tandem_runtime::profile::limit_pocl_threads() };
    let mut profiler =
        Profiler::open(true).context("bench dwgrid needs an OpenCL device (pocl-opencl-icd)")?;
    let options = MeasureOptions {
        warmup: 2,
        min_reps: 5,
        max_reps: 15,
        target_ms: 30.0,
        deadline: Duration::from_secs(20),
        gpu_from_idle: false,
    };
    println!(
        "| layer (H×W×C, kernel, stride) | GPU channels | input MB | runtime | outermost (ms) | innermost (ms) | outermost / innermost |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|");
    for (h, w, c, k, s) in layers {
        let p = same_depthwise(h, w, c, k, s);
        let half = c / 16 * 8;
        let op = LayerOp::Depthwise(p.clone());
        let mut bench = profiler.layer(&op, &[c, half], 7)?;
        for g in [c, half] {
            let mut times = [Vec::new(), Vec::new()];
            for _ in 0..samples.max(1) {
                for (grid, times) in [DepthwiseGrid::ChannelsOuter, DepthwiseGrid::ChannelsInner]
                    .into_iter()
                    .zip(&mut times)
                {
                    bench.set_depthwise_grid(grid);
                    times.push(bench.gpu(g, &options)?.1.least_ms);
                }
            }
            let [outer, inner] = times.map(median);
            println!(
                "| {h}×{w}×{c}, {k}x{k}, {s} | {g} | {:.1} | {} | {outer:.3} | {inner:.3} | {:.2}x |",
                p.range_input_bytes(c - g, c) as f64 / (1 << 20) as f64,
                if depthwise_channels_inner(&p, c - g..c) {
                    "innermost"
                } else {
                    "outermost"
                },
                outer / inner
            );
        }
        bench.set_depthwise_grid(DepthwiseGrid::BySize);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str =
        "# Doc\n<!-- BEGIN bench cpu on A -->\nold A\n<!-- END bench cpu on A -->\nafter\n";

    #[test]
    fn a_machine_rewrites_only_its_own_section() {
        let out = with_machine_section(DOC, "bench cpu", "A", "new A\n");
        assert_eq!(
            out,
            "# Doc\n<!-- BEGIN bench cpu on A -->\nnew A\n<!-- END bench cpu on A -->\nafter\n"
        );
    }

    #[test]
    fn a_new_machine_goes_after_the_other_machines_section() {
        let out = with_machine_section(DOC, "bench cpu", "B", "B's\n");
        assert_eq!(
            out,
            "# Doc\n<!-- BEGIN bench cpu on A -->\nold A\n<!-- END bench cpu on A -->\n\
             <!-- BEGIN bench cpu on B -->\nB's\n<!-- END bench cpu on B -->\nafter\n"
        );
        // And the next run on B rewrites it in place.
        let again = with_machine_section(&out, "bench cpu", "B", "B2\n");
        assert!(
            again.contains("<!-- BEGIN bench cpu on B -->\nB2\n<!-- END bench cpu on B -->\nafter")
        );
        assert!(again.contains("old A"));
    }

    #[test]
    fn a_benchmark_without_sections_is_appended() {
        let out = with_machine_section("# Doc\n", "bench sync", "A", "x\n");
        assert_eq!(
            out,
            "# Doc\n<!-- BEGIN bench sync on A -->\nx\n<!-- END bench sync on A -->\n"
        );
    }
}
