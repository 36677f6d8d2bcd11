//! What a GPU part's work items execute: exact loop-trip counts of the kernel the dispatch
//! decision launches (`runtime/src/gpu/cl/*.cl`), from the layer's geometry, the block sizes
//! and the channel range.
//!
//! On a device that runs work items one after another (PoCL on a CPU core here; a phone GPU's
//! cores run them in waves), a kernel's time is close to a sum of these counts, each at its own
//! cost: a convolution's inner loop on the all-in-bounds path against the checked path at the
//! borders, the window positions whose pixel indices are computed, the lanes stored one by one
//! where a channel block straddles the range. `tandem train` fits those costs (non-negative
//! least squares, [`crate::forest::Additive`]) as the baseline under each GPU executor's
//! forest, which then learns only what the counts miss (caches, vectorisation). Measured on
//! the Zen 4 EPYC host, the counts alone predicted `conv_generic` within about 10% where the
//! log-linear trend in FLOPs and bytes was 30% off (`docs/predictors.md`).
//!
//! Every count is closed-form (a loop over the kernel window at most), so that a sweep over a
//! layer's candidate splits stays fast; the tests check each against a literal walk over
//! every work item of the kernel.

use crate::features::{Layer, OpKind};
use tandem_runtime::gpu::dispatch::Variant;

/// The names of [`counts`] for `variant`, in order (empty for a variant without counts).
pub fn names(variant: Variant) -> &'static [&'static str] {
    match variant {
        Variant::ConvGeneric => &[
            "kernel_items",
            "kernel_partial_stores",
            "kernel_windows",
            "kernel_window_pixels",
            "kernel_fast_loop",
            "kernel_edge_loop",
            "kernel_fast_fmas",
            "kernel_edge_fmas",
        ],
        Variant::ConvConstants => &[
            "kernel_items",
            "kernel_partial_stores",
            "kernel_item_blocks",
            "kernel_taps",
            "kernel_macs",
        ],
        Variant::DepthwiseGeneric => &[
            "kernel_items",
            "kernel_partial_stores",
            "kernel_taps",
            "kernel_gathered_taps",
        ],
        Variant::Depthwise3x3 => &[
            "kernel_items",
            "kernel_partial_stores",
            "kernel_rows",
            "kernel_loads",
            "kernel_fmas",
            "kernel_gathered_loads",
        ],
        Variant::FullyConnected => &[
            "kernel_items",
            "kernel_partial_stores",
            "kernel_loop",
            "kernel_fmas",
        ],
        Variant::ConvWinograd => &[
            "kernel_input_items",
            "kernel_gemm_items",
            "kernel_gemm_loop",
            "kernel_gemm_fmas",
            "kernel_output_items",
            "kernel_partial_stores",
            "kernel_output_pixels",
        ],
        Variant::Elementwise => &[],
    }
}

/// The loop-trip counts ([`names`] order) of `variant` computing output channels `[c0, c1)`
/// of `layer` with `block` (the dispatch decision's work per item).
pub fn counts(
    layer: &Layer,
    variant: Variant,
    block: [usize; 3],
    c0: usize,
    c1: usize,
) -> Vec<f64> {
    let bc = block[2].max(1);
    let channels = ChannelBlocks::of(c0, c1, bc);
    let blocks = channels.blocks;
    let n = layer.n;
    let group_in = layer.cin / layer.groups.max(1);
    let x = Axis::x(layer);
    let y = Axis::y(layer);
    let v: Vec<usize> = match variant {
        Variant::ConvGeneric => {
            let (bx, by) = (block[0].max(1), block[1].max(1));
            let (xb, yb) = (layer.ow.div_ceil(bx), layer.oh.div_ceil(by));
            let items = n * yb * xb * blocks;
            let windows = items * layer.kh * layer.kw;
            let inside = n * blocks * x.inside_blocks(bx) * y.inside_blocks(by);
            let edge = n * blocks * xb * layer.kw * yb * layer.kh - inside;
            vec![
                items,
                n * yb * xb * channels.partial,
                windows,
                windows * bx * by,
                inside * group_in,
                edge * group_in,
                inside * group_in * bx * by,
                edge * group_in * bx * by,
            ]
        }
        Variant::ConvConstants => {
            let items = n * layer.oh * layer.ow;
            let taps = blocks * n * y.taps() * x.taps();
            vec![
                items,
                items * channels.partial,
                items * blocks,
                taps,
                taps * group_in,
            ]
        }
        Variant::DepthwiseGeneric => {
            let pixels = n * layer.oh * layer.ow;
            let taps_per_block = n * y.taps() * x.taps();
            let gathered = if layer.cout != layer.cin {
                blocks
            } else {
                channels.past(layer.cout)
            };
            vec![
                pixels * blocks,
                pixels * channels.partial,
                taps_per_block * blocks,
                taps_per_block * gathered,
            ]
        }
        Variant::Depthwise3x3 => {
            let bx = block[0].max(1);
            let xb = layer.ow.div_ceil(bx);
            let rows = n * y.taps();
            let (loads, fmas) = x.row_window(bx);
            vec![
                n * layer.oh * xb * blocks,
                n * layer.oh * xb * channels.partial,
                blocks * rows * xb,
                blocks * rows * loads,
                blocks * rows * fmas,
                channels.past(layer.cout) * rows * loads,
            ]
        }
        Variant::FullyConnected => {
            let br = block[0].max(1);
            let row_blocks = layer.h.div_ceil(br);
            let items = blocks * row_blocks;
            vec![
                items,
                channels.partial * row_blocks,
                items * layer.cin,
                items * layer.cin * br,
            ]
        }
        Variant::ConvWinograd => {
            let bt = block[0].max(1);
            let tiles = n * layer.oh.div_ceil(4) * layer.ow.div_ceil(4);
            let gemm_items = tiles.div_ceil(bt) * blocks * 36;
            vec![
                layer.cin * tiles,
                gemm_items,
                gemm_items * layer.cin,
                gemm_items * layer.cin * bt,
                blocks * tiles,
                channels.partial * tiles,
                blocks * n * layer.oh * layer.ow,
            ]
        }
        Variant::Elementwise => Vec::new(),
    };
    debug_assert_eq!(v.len(), names(variant).len());
    // A fully-connected layer's rows sit in `h`: the linear mapping of `Layer`.
    debug_assert!(variant != Variant::FullyConnected || layer.op == OpKind::Linear);
    v.into_iter().map(|c| c as f64).collect()
}

/// The channel blocks of a range: a kernel's channel blocks start at `c0` rounded down to the
/// block, and a block that straddles either end of the range stores its lanes one by one.
struct ChannelBlocks {
    start: usize,
    blocks: usize,
    bc: usize,
    /// Blocks not wholly inside `[c0, c1)`.
    partial: usize,
}

impl ChannelBlocks {
    fn of(c0: usize, c1: usize, bc: usize) -> ChannelBlocks {
        let start = c0 / bc * bc;
        let blocks = c1.saturating_sub(start).div_ceil(bc);
        let partial = if blocks == 0 {
            0
        } else if blocks == 1 {
            usize::from(start < c0 || start + bc > c1)
        } else {
            usize::from(start < c0) + usize::from(start + blocks * bc > c1)
        };
        ChannelBlocks {
            start,
            blocks,
            bc,
            partial,
        }
    }

    /// Blocks that run past the tensor's last channel `channels` (their input lanes are
    /// gathered one by one).
    fn past(&self, channels: usize) -> usize {
        (0..self.blocks)
            .rev()
            .take_while(|b| self.start + (b + 1) * self.bc > channels)
            .count()
    }
}

/// One spatial axis of a windowed op: output size, input size, kernel extent, stride and
/// leading pad.
struct Axis {
    out: i64,
    inp: i64,
    k: i64,
    s: i64,
    pad: i64,
}

impl Axis {
    fn x(l: &Layer) -> Axis {
        Axis::new(l.ow, l.w, l.kw, l.stride, l.pad_l)
    }

    fn y(l: &Layer) -> Axis {
        Axis::new(l.oh, l.h, l.kh, l.stride, l.pad_t)
    }

    fn new(out: usize, inp: usize, k: usize, s: usize, pad: usize) -> Axis {
        let i = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        Axis {
            out: i(out),
            inp: i(inp),
            k: i(k),
            s: i(s.max(1)),
            pad: i(pad),
        }
    }

    /// The (output position, window offset) pairs whose input lies inside the tensor.
    fn taps(&self) -> usize {
        (0..self.k)
            .map(|t| {
                let lo = ceil_div(self.pad - t, self.s).max(0);
                let hi = floor_div(self.inp - 1 + self.pad - t, self.s).min(self.out - 1);
                usize::try_from(hi - lo + 1).unwrap_or(0)
            })
            .sum()
    }

    /// The (block of `b` outputs, window offset) pairs in which every output of the block
    /// exists and reads inside the tensor: the iterations a blocked kernel runs on its
    /// unchecked path.
    fn inside_blocks(&self, b: usize) -> usize {
        let b = i64::try_from(b.max(1)).unwrap_or(1);
        (0..self.k)
            .map(|t| {
                // First output of the block: xb·b·s + t − pad ≥ 0.
                let lo = ceil_div(self.pad - t, b * self.s).max(0);
                // Last output: xb·b + b − 1 < out, and (xb·b + b − 1)·s + t − pad < inp.
                let last_in = floor_div(self.inp - 1 + self.pad - t, self.s);
                let hi = floor_div(self.out - b, b).min(floor_div(last_in - b + 1, b));
                usize::try_from(hi - lo + 1).unwrap_or(0)
            })
            .sum()
    }

    /// For `depthwise_3x3`'s rows of `b` outputs (a 3-wide window, stride 1), over every block
    /// of the axis: the input columns loaded (those inside the tensor of the `b + 2` a block
    /// reads) and the multiply-adds they feed (column `t` feeds the outputs `j < b` with
    /// `0 ≤ t − j < 3`, a fixed unrolled set).
    fn row_window(&self, b: usize) -> (usize, usize) {
        let bi = i64::try_from(b.max(1)).unwrap_or(1);
        let blocks = ceil_div(self.out, bi);
        let (mut loads, mut fmas) = (0, 0);
        for t in 0..bi + 2 {
            // Blocks xb with 0 ≤ xb·b + t − pad < inp.
            let lo = ceil_div(self.pad - t, bi).max(0);
            let hi = floor_div(self.inp - 1 + self.pad - t, bi).min(blocks - 1);
            let count = usize::try_from(hi - lo + 1).unwrap_or(0);
            let feeds = (0..bi).filter(|j| (0..3).contains(&(t - j))).count();
            loads += count;
            fmas += count * feeds;
        }
        (loads, fmas)
    }
}

fn floor_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b)
}

fn ceil_div(a: i64, b: i64) -> i64 {
    -(-a).div_euclid(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_runtime::gpu::dispatch::{dispatch, Dispatch};
    use tandem_runtime::rng::Rng;

    /// The OpenCL device of the shipped Zen 4 profile (its dataset's sidecar): the layers
    /// dispatch as they do on that host.
    fn test_device() -> tandem_runtime::gpu::device::DeviceInfo {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("profiles/pocl-1core-epyc-zen4.device.json");
        let text = std::fs::read_to_string(&path).expect("the shipped sidecar");
        let meta: serde_json::Value = serde_json::from_str(&text).expect("json");
        serde_json::from_value(meta["device"].clone()).expect("a device description")
    }

    /// Walks every work item of the kernel `d` launches, as its source does, and tallies the
    /// same counts: the naive reference of [`counts`].
    fn walk(l: &Layer, d: &Dispatch, c0: usize, c1: usize) -> Vec<usize> {
        let [bx, by, bc] = d.block;
        let cg = l.cin / l.groups.max(1);
        let inside = |iy: i64, ix: i64| iy >= 0 && iy < l.h as i64 && ix >= 0 && ix < l.w as i64;
        let s = l.stride as i64;
        let (pt, pl) = (l.pad_t as i64, l.pad_l as i64);
        let partial = |co: usize| !(co >= c0 && co + bc <= c1);
        let mut c = vec![0usize; names(d.variant).len()];
        // A depthwise grid is (x, rows, blocks), or (blocks, x, rows) launched channels-innermost.
        let (x_dim, blocks_dim) = if crate::features::gpu_channels_inner(l, c0, c1) {
            (d.grid[1], d.grid[0])
        } else {
            (d.grid[0], d.grid[2])
        };
        match d.variant {
            Variant::ConvGeneric => {
                for gx in 0..d.grid[0] {
                    for gy in 0..d.grid[1] {
                        for gz in 0..d.grid[2] {
                            let ox0 = gx * bx;
                            let yb = l.oh.div_ceil(by);
                            let (n, oy0) = (gy / yb, (gy % yb) * by);
                            let co = d.c_start + gz * bc;
                            if ox0 >= l.ow || n >= l.n || co >= c1 {
                                continue;
                            }
                            c[0] += 1;
                            c[1] += usize::from(partial(co));
                            for ky in 0..l.kh as i64 {
                                for kx in 0..l.kw as i64 {
                                    c[2] += 1;
                                    let mut all = true;
                                    for i in 0..by {
                                        for j in 0..bx {
                                            c[3] += 1;
                                            let iy = ((oy0 + i) as i64) * s + ky - pt;
                                            let ix = ((ox0 + j) as i64) * s + kx - pl;
                                            all &=
                                                inside(iy, ix) && oy0 + i < l.oh && ox0 + j < l.ow;
                                        }
                                    }
                                    let (loop_at, fma_at) = if all { (4, 6) } else { (5, 7) };
                                    c[loop_at] += cg;
                                    c[fma_at] += cg * bx * by;
                                }
                            }
                        }
                    }
                }
            }
            Variant::ConvConstants => {
                for ox in 0..l.ow {
                    for gy in 0..l.n * l.oh {
                        let oy = gy % l.oh;
                        c[0] += 1;
                        let mut co = d.c_start;
                        while co < c1 {
                            c[1] += usize::from(partial(co));
                            c[2] += 1;
                            for ky in 0..l.kh as i64 {
                                for kx in 0..l.kw as i64 {
                                    if inside(oy as i64 * s + ky - pt, ox as i64 * s + kx - pl) {
                                        c[3] += 1;
                                        c[4] += cg;
                                    }
                                }
                            }
                            co += bc;
                        }
                    }
                }
            }
            Variant::DepthwiseGeneric => {
                for gz in 0..blocks_dim {
                    let co = d.c_start + gz * bc;
                    if co >= c1 {
                        continue;
                    }
                    for gy in 0..l.n * l.oh {
                        for ox in 0..l.ow {
                            let oy = gy % l.oh;
                            c[0] += 1;
                            c[1] += usize::from(partial(co));
                            for ky in 0..l.kh as i64 {
                                for kx in 0..l.kw as i64 {
                                    if inside(oy as i64 * s + ky - pt, ox as i64 * s + kx - pl) {
                                        c[2] += 1;
                                        let gathered = l.cout != l.cin || co + bc > l.cout;
                                        c[3] += usize::from(gathered);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            Variant::Depthwise3x3 => {
                for gx in 0..x_dim {
                    for gy in 0..l.n * l.oh {
                        for gz in 0..blocks_dim {
                            let ox0 = gx * bx;
                            let oy = gy % l.oh;
                            let co = d.c_start + gz * bc;
                            if ox0 >= l.ow || co >= c1 {
                                continue;
                            }
                            c[0] += 1;
                            c[1] += usize::from(partial(co));
                            for ky in 0..3i64 {
                                let iy = oy as i64 + ky - pt;
                                if iy < 0 || iy >= l.h as i64 {
                                    continue;
                                }
                                c[2] += 1;
                                for t in 0..(bx + 2) as i64 {
                                    let ix = ox0 as i64 + t - pl;
                                    if ix < 0 || ix >= l.w as i64 {
                                        continue;
                                    }
                                    c[3] += 1;
                                    c[5] += usize::from(co + bc > l.cout);
                                    for j in 0..bx as i64 {
                                        c[4] += usize::from((0..3).contains(&(t - j)));
                                    }
                                }
                            }
                        }
                    }
                }
            }
            Variant::FullyConnected => {
                let br = bx;
                for gx in 0..d.grid[0] {
                    for gy in 0..d.grid[1] {
                        let co = d.c_start + gx * bc;
                        if co >= c1 || gy * br >= l.h {
                            continue;
                        }
                        c[0] += 1;
                        c[1] += usize::from(partial(co));
                        c[2] += l.cin;
                        c[3] += l.cin * br;
                    }
                }
            }
            Variant::ConvWinograd => {
                let tiles = l.n * l.oh.div_ceil(4) * l.ow.div_ceil(4);
                // Input transform: one tile of one input channel per item.
                c[0] = l.cin * tiles;
                // Products: grid (ceil(tiles / BT), channel blocks, 36).
                for t in 0..tiles.div_ceil(bx) {
                    for b in 0..d.grid[1] {
                        let co = d.c_start + b * bc;
                        if t * bx >= tiles || co >= c1 {
                            continue;
                        }
                        c[1] += 36;
                        c[2] += 36 * l.cin;
                        c[3] += 36 * l.cin * bx;
                    }
                }
                // Output transform: one tile by BC channels per item.
                let mut co = d.c_start;
                while co < c1 {
                    c[4] += tiles;
                    c[5] += tiles * usize::from(partial(co));
                    c[6] += l.n * l.oh * l.ow;
                    co += bc;
                }
            }
            Variant::Elementwise => {}
        }
        c
    }

    /// Uniform in `[0, n)`.
    fn below(rng: &mut Rng, n: usize) -> usize {
        (rng.next_u64() % n.max(1) as u64) as usize
    }

    fn random_layer(rng: &mut Rng) -> Layer {
        let op = match below(rng, 4) {
            0 => OpKind::Conv,
            1 => OpKind::GroupedConv,
            2 => OpKind::Depthwise,
            _ => OpKind::Linear,
        };
        if op == OpKind::Linear {
            return Layer::linear(1 + below(rng, 9), 1 + below(rng, 40), 1 + below(rng, 40));
        }
        let k = [1, 2, 3, 3, 5, 7][below(rng, 6)];
        let kw = if below(rng, 4) == 0 { 1 } else { k };
        let stride = 1 + below(rng, 2);
        let (h, w) = (1 + below(rng, 17), 1 + below(rng, 17));
        let (pad_t, pad_l) = (below(rng, k), below(rng, kw));
        let oh = (h + 2 * pad_t).saturating_sub(k) / stride + 1;
        let ow = (w + 2 * pad_l).saturating_sub(kw) / stride + 1;
        let groups = if op == OpKind::GroupedConv {
            2 + below(rng, 3)
        } else {
            1
        };
        let cin = match op {
            OpKind::Depthwise => 1 + below(rng, 20),
            _ => groups * (1 + below(rng, 12)),
        };
        let cout = match op {
            OpKind::Depthwise => cin * [1, 1, 1, 2][below(rng, 4)],
            _ => groups * (1 + below(rng, 20)),
        };
        Layer {
            op,
            n: 1 + below(rng, 2),
            h,
            w,
            cin,
            oh,
            ow,
            cout,
            kh: k,
            kw: if op == OpKind::Depthwise { k } else { kw },
            stride,
            pad_t,
            pad_l,
            groups,
        }
    }

    fn assert_counts_equal_the_walk(l: &Layer, d: &Dispatch, c0: usize, c1: usize) {
        assert_eq!(
            counts(l, d.variant, d.block, c0, c1),
            walk(l, d, c0, c1)
                .into_iter()
                .map(|v| v as f64)
                .collect::<Vec<_>>(),
            "{l:?} channels {c0}..{c1}: {d:?}"
        );
    }

    #[test]
    fn closed_form_counts_equal_a_walk_over_every_work_item() {
        let device = test_device();
        let mut rng = Rng::new(11);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3000 {
            let l = random_layer(&mut rng);
            if l.oh == 0 || l.ow == 0 {
                continue;
            }
            let op = l.to_op();
            let c0 = below(&mut rng, l.cout);
            let c1 = c0 + 1 + below(&mut rng, l.cout - c0);
            let d = dispatch(op.gpu_op(), c0..c1, &device);
            seen.insert(d.variant.name());
            assert_counts_equal_the_walk(&l, &d, c0, c1);
        }
        // Parts large enough to launch channels-innermost (few channels, so the walk stays short).
        for (hw, cin, cout, k, stride) in [
            (300, 13, 13, 3, 1),
            (260, 20, 20, 5, 2),
            (250, 18, 36, 3, 1),
        ] {
            let pad = (k - 1) / 2;
            let out = (hw + 2 * pad - k) / stride + 1;
            let l = Layer {
                op: OpKind::Depthwise,
                n: 1,
                h: hw,
                w: hw,
                cin,
                oh: out,
                ow: out,
                cout,
                kh: k,
                kw: k,
                stride,
                pad_t: pad,
                pad_l: pad,
                groups: 1,
            };
            assert!(crate::features::gpu_channels_inner(&l, 0, cout), "{l:?}");
            for (c0, c1) in [(0, cout), (1, cout), (0, cout - 3)] {
                let d = dispatch(l.to_op().gpu_op(), c0..c1, &device);
                assert_counts_equal_the_walk(&l, &d, c0, c1);
            }
        }
        // Every kernel with counts was reached.
        for v in Variant::ALL {
            assert!(
                names(v).is_empty() || seen.contains(v.name()),
                "{} never dispatched",
                v.name()
            );
        }
    }

    #[test]
    fn the_partial_blocks_are_those_that_straddle_the_range() {
        let b = ChannelBlocks::of(0, 16, 8);
        assert_eq!((b.blocks, b.partial), (2, 0));
        let b = ChannelBlocks::of(3, 16, 8);
        assert_eq!((b.start, b.blocks, b.partial), (0, 2, 1));
        let b = ChannelBlocks::of(3, 13, 8);
        assert_eq!((b.blocks, b.partial), (2, 2));
        let b = ChannelBlocks::of(3, 5, 8);
        assert_eq!((b.blocks, b.partial), (1, 1));
        // Channels 16..21 of a 21-channel tensor: the one block runs past the last channel.
        assert_eq!(ChannelBlocks::of(16, 21, 8).past(21), 1);
        assert_eq!(ChannelBlocks::of(0, 24, 8).past(24), 0);
    }
}
