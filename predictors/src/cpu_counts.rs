//! What the CPU depthwise loop executes for a channel range: loop-trip counts of the row tasks
//! of `tandem_runtime::cpu::depthwise`, from the layer's geometry and the range.
//!
//! A row task covers its channels in blocks (full vectors with multiplier 1 and at least a
//! vector of channels, else blocks of 4 and single channels). A full-vector block of a 3×3
//! kernel with column dilation 1, column stride 1 or 2 and two or three kernel rows inside the
//! input runs the register-window loop: its weights load once per row, interior pixels go in
//! groups of four that share their input loads, border pixels skip the taps outside. Every
//! other block sums pixel by pixel over the taps inside the input, with an input and a weight
//! load per tap. Each count below is one kind of that work; `tandem train` fits a cost to each
//! (non-negative least squares, [`crate::forest::Additive`]) as the baseline under the
//! `cpu_dwconv_tN` forests, as it does for the GPU kernels ([`crate::kernel_counts`]).
//!
//! The counts are closed-form over row and column classes (the rows and columns whose kernel
//! window lies inside the input, and the few border ones), so that a sweep over a layer's
//! candidate splits stays fast; the tests check them against a literal walk over every row,
//! block and pixel of the loop.

use std::ops::Range;
use tandem_runtime::cpu::depthwise::{interior_columns, interior_positions, taps, DepthwiseParams};

/// The names of [`depthwise`]'s counts, in order.
pub const NAMES: [&str; 8] = [
    "cpu_dw_block_rows",
    "cpu_dw_window_block_rows",
    "cpu_dw_window_loads",
    "cpu_dw_window_fmas",
    "cpu_dw_vector_taps",
    "cpu_dw_quad_taps",
    "cpu_dw_scalar_taps",
    "cpu_dw_stores",
];

/// Interior pixels per group of the register-window loop (the runtime's `P`).
const GROUP: usize = 4;

/// The loop-trip counts ([`NAMES`] order) of the CPU depthwise loop computing output channels
/// `[c0, c1)` of `p` with vectors of `lanes` floats, summed over every output row of every
/// image:
/// - `cpu_dw_block_rows`: (output row, channel block) pairs, every kind of block;
/// - `cpu_dw_window_block_rows`: those in the register-window loop, each loading its weights;
/// - `cpu_dw_window_loads`, `cpu_dw_window_fmas`: that loop's input vector loads and FMAs;
/// - `cpu_dw_vector_taps`, `cpu_dw_quad_taps`, `cpu_dw_scalar_taps`: taps summed pixel by
///   pixel by full-vector, 4-channel and single-channel blocks;
/// - `cpu_dw_stores`: block-pixel stores, every kind of block.
///
/// Tensors are taken to start on a 64-byte line, as the runtime's arena places them, for the
/// leading block of a wide range's aligned run. All zeros for an empty range.
pub fn depthwise(p: &DepthwiseParams, c0: usize, c1: usize, lanes: usize) -> [f64; 8] {
    let mut counts = [0.0; 8];
    if c1 <= c0 || lanes == 0 {
        return counts;
    }
    let plan = Blocks::of(p, c0, c1, lanes);
    let columns = Columns::of(p);
    for (valid_rows, rows) in row_classes(p) {
        let per_row = row_counts(p, &plan, &columns, valid_rows);
        for (total, one) in counts.iter_mut().zip(per_row) {
            *total += one * (rows * p.output[0]) as f64;
        }
    }
    counts
}

/// How a row task covers a channel range with blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Blocks {
    /// Full-vector blocks (0 unless multiplier 1 and at least a vector of channels).
    vectors: usize,
    /// 4-channel blocks.
    quads: usize,
    /// Single-channel blocks.
    singles: usize,
}

impl Blocks {
    fn of(p: &DepthwiseParams, c0: usize, c1: usize, lanes: usize) -> Blocks {
        let width = c1 - c0;
        if p.multiplier == 1 && width >= lanes {
            // The aligned run starts at the first lane-aligned channel of a wide range of a
            // lane-aligned tensor; a block from c0 leads it when that is later, and one ending
            // at c1 trails it when it does not reach c1.
            let start = if p.input[3].is_multiple_of(lanes) && width >= 8 * lanes {
                c0.next_multiple_of(lanes)
            } else {
                c0
            };
            let run = (c1 - start) / lanes;
            let vectors = usize::from(start > c0) + run + usize::from(start + run * lanes < c1);
            return Blocks {
                vectors,
                quads: 0,
                singles: 0,
            };
        }
        let quads = if p.multiplier == 1 && lanes > 4 {
            width / 4
        } else {
            0
        };
        Blocks {
            vectors: 0,
            quads,
            singles: width - 4 * quads,
        }
    }
}

/// The output columns of a row by the kernel columns inside the input.
struct Columns {
    /// Output columns whose whole kernel window lies inside the input.
    interior: usize,
    /// Kernel columns inside the input, summed over the other (border) output columns.
    border_taps: usize,
    /// Every output column.
    all: usize,
}

impl Columns {
    fn of(p: &DepthwiseParams) -> Columns {
        let interior = interior_columns(p);
        let border_taps = border(&interior, p.output[2])
            .map(|ox| column_taps(p, ox).len())
            .sum();
        Columns {
            interior: interior.len(),
            border_taps,
            all: p.output[2],
        }
    }
}

/// The kernel columns of output column `ox` that land inside the input.
fn column_taps(p: &DepthwiseParams, ox: usize) -> Range<usize> {
    taps(
        ox,
        p.stride[1],
        p.dilation[1],
        p.pad[1],
        p.kernel[1],
        p.input[2],
    )
}

/// The positions of `0..len` outside `interior`.
fn border(interior: &Range<usize>, len: usize) -> impl Iterator<Item = usize> {
    (0..interior.start).chain(interior.end..len)
}

/// The output rows by how many kernel rows land inside the input: `(valid rows, output rows)`
/// pairs, the interior rows (all `KH` inside) as one class, each border row on its own.
fn row_classes(p: &DepthwiseParams) -> Vec<(usize, usize)> {
    let [kh, sy, dy, pt, h, ho] = [
        p.kernel[0],
        p.stride[0],
        p.dilation[0],
        p.pad[0],
        p.input[1],
        p.output[1],
    ];
    let interior = interior_positions(h, ho, sy, dy, pt, kh);
    let mut classes = vec![(kh, interior.len())];
    classes.extend(border(&interior, ho).map(|oy| (taps(oy, sy, dy, pt, kh, h).len(), 1)));
    classes
}

/// The counts of one output row whose kernel rows inside the input number `valid_rows`.
fn row_counts(
    p: &DepthwiseParams,
    plan: &Blocks,
    columns: &Columns,
    valid_rows: usize,
) -> [f64; 8] {
    let [kw, sx] = [p.kernel[1], p.stride[1]];
    let windowed = p.dilation[1] == 1
        && p.kernel == [3, 3]
        && matches!(valid_rows, 2 | 3)
        && matches!(sx, 1 | 2);
    // Taps of one block over the row, pixel by pixel.
    let taps = (valid_rows * (columns.interior * kw + columns.border_taps)) as f64;
    let stores = (columns.all * (plan.vectors + plan.quads + plan.singles)) as f64;
    let blocks = (plan.vectors + plan.quads + plan.singles) as f64;
    let mut c = [0.0; 8];
    c[0] = blocks;
    if windowed {
        let groups = columns.interior / GROUP;
        let rest = columns.interior % GROUP;
        let loads_per_row = groups * ((GROUP - 1) * sx + kw) + rest * kw + columns.border_taps;
        c[1] = plan.vectors as f64;
        c[2] = (plan.vectors * valid_rows * loads_per_row) as f64;
        c[3] = plan.vectors as f64 * taps;
    } else {
        c[4] = plan.vectors as f64 * taps;
    }
    c[5] = plan.quads as f64 * taps;
    c[6] = plan.singles as f64 * taps;
    c[7] = stores;
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_runtime::cpu::Activation;

    /// The counts by walking every image, output row, block and pixel as the runtime's loop
    /// does.
    fn walk(p: &DepthwiseParams, c0: usize, c1: usize, lanes: usize) -> [f64; 8] {
        let mut c = [0.0; 8];
        if c1 <= c0 {
            return c;
        }
        let [_, ho, wo, _] = p.output;
        let [kh, kw] = p.kernel;
        let width = c1 - c0;
        // The blocks of a row, by width, as `row` lays them out.
        let mut widths = Vec::new();
        if p.multiplier == 1 && width >= lanes {
            let mut start = c0;
            if p.input[3].is_multiple_of(lanes) && width >= 8 * lanes {
                while !start.is_multiple_of(lanes) {
                    start += 1;
                }
            }
            if start > c0 {
                widths.push(lanes);
            }
            let mut at = start;
            while at + lanes <= c1 {
                widths.push(lanes);
                at += lanes;
            }
            if at < c1 {
                widths.push(lanes);
            }
        } else {
            let mut at = c0;
            if p.multiplier == 1 && lanes > 4 {
                while at + 4 <= c1 {
                    widths.push(4);
                    at += 4;
                }
            }
            while at < c1 {
                widths.push(1);
                at += 1;
            }
        }
        for _image in 0..p.output[0] {
            for oy in 0..ho {
                let rows = taps(oy, p.stride[0], p.dilation[0], p.pad[0], kh, p.input[1]).len();
                for &l in &widths {
                    c[0] += 1.0;
                    let windowed = l == lanes
                        && p.multiplier == 1
                        && p.dilation[1] == 1
                        && p.kernel == [3, 3]
                        && (rows == 2 || rows == 3)
                        && (p.stride[1] == 1 || p.stride[1] == 2);
                    let interior = interior_columns(p);
                    let mut ox = 0;
                    while ox < wo {
                        let cols = column_taps(p, ox).len();
                        if windowed && interior.contains(&ox) && ox + GROUP <= interior.end {
                            c[2] += (rows * ((GROUP - 1) * p.stride[1] + kw)) as f64;
                            c[3] += (rows * kw * GROUP) as f64;
                            c[7] += GROUP as f64;
                            ox += GROUP;
                            continue;
                        }
                        let tap_count = (rows * cols) as f64;
                        if windowed {
                            c[2] += tap_count;
                            c[3] += tap_count;
                        } else if l == lanes {
                            c[4] += tap_count;
                        } else if l == 4 {
                            c[5] += tap_count;
                        } else {
                            c[6] += tap_count;
                        }
                        c[7] += 1.0;
                        ox += 1;
                    }
                    if windowed {
                        c[1] += 1.0;
                    }
                }
            }
        }
        c
    }

    fn params(
        input: [usize; 4],
        kernel: [usize; 2],
        stride: [usize; 2],
        dilation: [usize; 2],
        pad: [usize; 2],
        multiplier: usize,
    ) -> DepthwiseParams {
        let out = |d: usize| {
            let eff = (kernel[d] - 1) * dilation[d] + 1;
            (input[1 + d] + 2 * pad[d]).saturating_sub(eff) / stride[d] + 1
        };
        DepthwiseParams {
            input,
            output: [input[0], out(0), out(1), input[3] * multiplier],
            kernel,
            stride,
            dilation,
            pad,
            multiplier,
            activation: Activation::None,
        }
    }

    #[test]
    fn closed_form_counts_match_a_walk_over_the_loop() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut below = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for case in 0..400 {
            let kernel = [[3, 3], [3, 3], [5, 5], [7, 7], [1 + below(4), 1 + below(4)]][case % 5];
            let stride = [1 + below(2), 1 + below(2)];
            let dilation = if case % 7 == 0 {
                [2, 1 + below(2)]
            } else {
                [1, 1]
            };
            let multiplier = if case % 9 == 0 { 2 } else { 1 };
            let cin = 1 + below(80);
            let sizes = [
                (kernel[0] - 1) * dilation[0] + 1 + below(12),
                (kernel[1] - 1) * dilation[1] + 1 + below(12),
            ];
            let pad = [below(kernel[0]), below(kernel[1])];
            let p = params(
                [1 + below(2), sizes[0], sizes[1], cin],
                kernel,
                stride,
                dilation,
                pad,
                multiplier,
            );
            p.validate().expect("valid");
            let cout = p.output[3];
            let c0 = below(cout);
            let c1 = c0 + 1 + below(cout - c0);
            for lanes in [16, 8] {
                for (a, b) in [(c0, c1), (0, cout), (0, 0)] {
                    assert_eq!(
                        depthwise(&p, a, b, lanes),
                        walk(&p, a, b, lanes),
                        "case {case}: channels {a}..{b}, {lanes} lanes, {p:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_mobilenet_layer_counts_by_hand() {
        // 112×112×32 3x3 stride 1 SAME: 112 rows (2 border ones with two kernel rows), 2 vector
        // blocks per row, 110 interior columns in 27 groups of four and 2 more.
        let p = params([1, 112, 112, 32], [3, 3], [1, 1], [1, 1], [1, 1], 1);
        let c = depthwise(&p, 0, 32, 16);
        assert_eq!(c[0], 224.0);
        assert_eq!(c[1], 224.0);
        let taps_per_row = |rows: usize| rows * (110 * 3 + 2 * 2);
        let fmas = 2.0 * (110.0 * taps_per_row(3) as f64 + 2.0 * taps_per_row(2) as f64);
        assert_eq!(c[3], fmas);
        let loads = |rows: usize| rows * (27 * 6 + 2 * 3 + 2 * 2);
        assert_eq!(c[2], 2.0 * (110 * loads(3) + 2 * loads(2)) as f64);
        assert_eq!(c[4] + c[5] + c[6], 0.0);
        assert_eq!(c[7], 2.0 * 112.0 * 112.0);
        // 12 channels: three blocks of four, pixel by pixel.
        let c = depthwise(&p, 0, 12, 16);
        assert_eq!([c[0], c[1], c[4], c[6]], [336.0, 0.0, 0.0, 0.0]);
        assert_eq!(
            c[5],
            3.0 * (110.0 * taps_per_row(3) as f64 + 2.0 * taps_per_row(2) as f64)
        );
    }
}
