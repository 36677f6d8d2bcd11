//! DEPTHWISE_CONV_2D: a direct kernel vectorised along channels, over an output-channel range.
//!
//! Tasks are output rows. A row is computed in channel blocks of `L` lanes (the innermost,
//! contiguous NHWC dimension) whose accumulators stay in registers. With multiplier 1 and at
//! least a vector's width of channels, every block is a full vector: blocks overlap, recomputing
//! identical values, to cover ranges that are not a multiple of the width, and a wide range
//! starts its run of blocks where the input is vector-aligned. Narrower ranges, and multipliers
//! above 1, use blocks of 4 and then single channels. For 3×3 kernels with column dilation 1, a
//! full-vector block keeps its weights in registers across the whole row: the interior columns
//! (kernel window inside the image horizontally) run in groups of pixels with no padding checks,
//! and the border columns skip the taps that fall outside. Other geometries sum, pixel by pixel,
//! over the taps that land inside the image. The loops are generic Rust, instantiated per
//! [`Isa`] and chosen at run time.
//!
//! A row task reads its input rows once per channel block, so rows that come from memory
//! rather than the caches cost a miss per block and pixel, one after the other. When a
//! range's input is large ([`prefetches_rows`]: at least [`PREFETCH_FROM_BYTES`]), each task
//! first asks the CPU to load the input rows the next output row adds, which then stream in
//! while the current row computes: up to 1.7x faster on such layers (`docs/benchmarks.md`), and
//! the same results, since prefetches change no value.

use super::shared::SharedOut;
use super::simd::{Isa, BASELINE_HAS_FMA};
use super::threads::ThreadPool;
use super::Activation;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Geometry of a depthwise convolution, NHWC; output channel `c` reads input channel
/// `c / multiplier`. Weights are TFLite's `[1, KH, KW, C_out]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DepthwiseParams {
    /// [N, H, W, C_in]
    pub input: [usize; 4],
    /// [N, H_out, W_out, C_in · multiplier]
    pub output: [usize; 4],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    /// (top, left) zero padding.
    pub pad: [usize; 2],
    pub multiplier: usize,
    pub activation: Activation,
}

impl DepthwiseParams {
    /// Bytes of the input that output channels `[c0, c1)` read (input channels
    /// `c0 / multiplier ..= (c1 - 1) / multiplier` over every pixel); 0 for an empty range.
    pub fn range_input_bytes(&self, c0: usize, c1: usize) -> usize {
        let [n, h, w, _] = self.input;
        let multiplier = self.multiplier.max(1);
        let channels = if c1 > c0 {
            (c1 - 1) / multiplier + 1 - c0 / multiplier
        } else {
            0
        };
        n.saturating_mul(h)
            .saturating_mul(w)
            .saturating_mul(channels)
            .saturating_mul(4)
    }

    /// Checks the geometry is consistent; the message says what is not.
    pub fn validate(&self) -> Result<(), String> {
        let [n, _, _, ci] = self.input;
        let [no, _, _, co] = self.output;
        if n != no || self.multiplier == 0 || ci.checked_mul(self.multiplier) != Some(co) {
            return Err(format!(
                "{:?} → {:?} is not a depthwise multiplier-{} shape",
                self.input, self.output, self.multiplier
            ));
        }
        super::conv::check_window(
            self.kernel,
            self.stride,
            self.dilation,
            self.pad,
            self.input,
            self.output,
        )
    }
}

/// Computes output channels `[c0, c1)` into `out` (the full output tensor).
///
/// Preconditions: `p.validate()` holds; slice lengths match the shapes; `c0 <= c1 <= C_out`.
/// Only the elements of channels `[c0, c1)` are written; `c0 >= c1` writes nothing. Panics if
/// an operand is shorter than its shape or `c1 > C_out`. Sums run in kernel-tap order, fused
/// multiply-adds where the CPU has them, so results may differ from unfused ones in the last
/// bits.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_conv2d(
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    p: &DepthwiseParams,
    c0: usize,
    c1: usize,
    pool: &ThreadPool,
) {
    let prefetch = prefetches_rows(p, c0, c1);
    depthwise_conv2d_prefetching(input, weights, bias, out, p, c0, c1, prefetch, pool);
}

/// [`depthwise_conv2d`] with row prefetching on or off whatever the range's size (benchmarks
/// of the threshold, `cargo xtask bench dwrows`); the results are the same either way.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_conv2d_prefetching(
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    p: &DepthwiseParams,
    c0: usize,
    c1: usize,
    prefetch: bool,
    pool: &ThreadPool,
) {
    depthwise_conv2d_on(
        Isa::detect(),
        input,
        weights,
        bias,
        out,
        p,
        c0,
        c1,
        prefetch,
        pool,
    );
}

/// Input bytes of a channel range from which [`depthwise_conv2d`] prefetches rows: past the
/// share of the L3 a layer can count on, where the loop's strided reads otherwise wait on
/// memory (8 MiB; on the Zen 4 host 1.0–1.7x faster above it, 8–16% slower on layers that
/// fit the caches).
pub const PREFETCH_FROM_BYTES: usize = 8 << 20;

/// Whether [`depthwise_conv2d`] prefetches the input rows of output channels `[c0, c1)` of
/// `p`: when the input those channels read is at least [`PREFETCH_FROM_BYTES`]. The latency
/// predictors record it with each measurement (`tandem profile`), since the two loops time
/// differently.
pub fn prefetches_rows(p: &DepthwiseParams, c0: usize, c1: usize) -> bool {
    p.range_input_bytes(c0, c1) >= PREFETCH_FROM_BYTES
}

/// [`depthwise_conv2d`] with its loops instantiated for `isa`, which must be supported.
#[allow(clippy::too_many_arguments)]
fn depthwise_conv2d_on(
    isa: Isa,
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    p: &DepthwiseParams,
    c0: usize,
    c1: usize,
    prefetch: bool,
    pool: &ThreadPool,
) {
    if c0 >= c1 {
        return;
    }
    assert!(isa.is_supported(), "{isa:?} is not supported by this CPU");
    let [n, h, w, cin] = p.input;
    let [_, ho, wo, cout] = p.output;
    let [kh, kw] = p.kernel;
    assert!(
        c1 <= cout && p.multiplier * cin == cout,
        "channel range {c0}..{c1} of {cout}"
    );
    assert!(
        input.len() >= n * h * w * cin && weights.len() >= kh * kw * cout,
        "operands too short"
    );
    assert!(out.len() >= n * ho * wo * cout, "output too short");
    if let Some(bias) = bias {
        assert!(bias.len() >= cout, "bias too short");
    }
    let conv = Conv {
        input,
        weights,
        bias,
        p,
        c0,
        c1,
        interior: interior_columns(p),
    };
    let shared = SharedOut::new(out);
    let flops = 2 * n * ho * p.output[2] * (c1 - c0) * p.kernel[0] * p.kernel[1];
    pool.run_sized(n * ho, flops, &|task| {
        let (b, oy) = (task / ho, task % ho);
        // SAFETY: each task owns output row oy of image b.
        let dst = unsafe { shared.range((b * ho + oy) * wo * cout, wo * cout) };
        if prefetch {
            conv.prefetch_next_row(b, oy);
        }
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        match isa {
            // SAFETY (both arms): `isa.is_supported()` was asserted above.
            Isa::Avx512 => return unsafe { row_avx512(&conv, b, oy, dst) },
            Isa::Avx2Fma => return unsafe { row_avx2(&conv, b, oy, dst) },
            Isa::Baseline => {}
        }
        row::<BASELINE_LANES, 4, BASELINE_HAS_FMA>(&conv, b, oy, dst);
    });
}

/// Channel block width of baseline code: NEON's 32 registers hold a 3×3 kernel's weights for
/// two vectors per tap; SSE2's 16 hold them for one.
const BASELINE_LANES: usize = if cfg!(target_arch = "aarch64") { 8 } else { 4 };

/// [`row`] for AVX-512.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_avx512(conv: &Conv<'_>, b: usize, oy: usize, dst: &mut [f32]) {
    row::<16, 4, true>(conv, b, oy, dst);
}

/// [`row`] for AVX2 with FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2(conv: &Conv<'_>, b: usize, oy: usize, dst: &mut [f32]) {
    row::<8, 4, true>(conv, b, oy, dst);
}

/// One channel block of a [`Conv::row_window`]: its weights, bias and input offsets.
struct Window<'a, const KH: usize, const KW: usize, const L: usize> {
    k: &'a [[[f32; L]; KW]; KH],
    start: [f32; L],
    /// Input offset of the first window row's column 0, at the block's first channel.
    row0: usize,
    /// Input offset between window rows.
    row_step: usize,
    /// The block's first output channel.
    c: usize,
}

/// One call's operands and the geometry every row task shares.
struct Conv<'a> {
    input: &'a [f32],
    weights: &'a [f32],
    bias: Option<&'a [f32]>,
    p: &'a DepthwiseParams,
    c0: usize,
    c1: usize,
    /// Output columns whose every kernel column lands inside the input (possibly empty).
    interior: Range<usize>,
}

/// The kernel taps `t < k` for which `o·stride + t·dilation - pad` lies in `0..size`: a range,
/// since that position grows with `t`.
pub fn taps(
    o: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
    k: usize,
    size: usize,
) -> Range<usize> {
    let at = o * stride;
    let lo = pad.saturating_sub(at).div_ceil(dilation).min(k);
    let hi = (pad + size).saturating_sub(at).div_ceil(dilation).min(k);
    lo..hi.max(lo)
}

/// The output columns whose whole kernel window lies inside the input, as `lo..hi` with
/// `lo <= hi <= W_out`.
pub fn interior_columns(p: &DepthwiseParams) -> Range<usize> {
    interior_positions(
        p.input[2],
        p.output[2],
        p.stride[1],
        p.dilation[1],
        p.pad[1],
        p.kernel[1],
    )
}

/// Along one dimension (input `size`, `out` outputs, a kernel of `k` taps), the outputs whose
/// every tap `o·stride + t·dilation - pad` lands inside `0..size`, as `lo..hi` with
/// `lo <= hi <= out`: [`interior_columns`] for columns, and the same for rows.
pub fn interior_positions(
    size: usize,
    out: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
    k: usize,
) -> Range<usize> {
    let lo = pad.div_ceil(stride).min(out);
    let reach = (k - 1) * dilation;
    // Last output: o·stride + reach - pad <= size - 1.
    let hi = match (size + pad).checked_sub(reach + 1) {
        Some(last) => (last / stride + 1).min(out),
        None => 0,
    };
    lo..hi.max(lo)
}

/// Output row `oy` of image `b` (`dst`, all its channels) for channels `[c0, c1)`, with
/// vectors of `V` floats, interior pixels in groups of `P`, and `FMA` saying whether
/// `f32::mul_add` is a single instruction.
#[inline(always)]
fn row<const V: usize, const P: usize, const FMA: bool>(
    conv: &Conv<'_>,
    b: usize,
    oy: usize,
    dst: &mut [f32],
) {
    let p = conv.p;
    let rows = taps(
        oy,
        p.stride[0],
        p.dilation[0],
        p.pad[0],
        p.kernel[0],
        p.input[1],
    );
    let (c0, c1) = (conv.c0, conv.c1);
    if p.multiplier == 1 && c1 - c0 >= V {
        // Full-width blocks only, overlapping where needed (overlaps recompute identical
        // values): one from c0 when the aligned run starts later, one ending at c1.
        let start = conv.aligned_start::<V>();
        if start > c0 {
            conv.blocks::<V, P, FMA, true>(b, oy, &rows, c0, 1, dst);
        }
        let count = (c1 - start) / V;
        conv.blocks::<V, P, FMA, true>(b, oy, &rows, start, count, dst);
        if start + count * V < c1 {
            conv.blocks::<V, P, FMA, true>(b, oy, &rows, c1 - V, 1, dst);
        }
        return;
    }
    let mut c = c0;
    if p.multiplier == 1 && V > 4 {
        let count = (c1 - c) / 4;
        conv.blocks::<4, P, FMA, false>(b, oy, &rows, c, count, dst);
        c += count * 4;
    }
    conv.blocks::<1, P, FMA, false>(b, oy, &rows, c, c1 - c, dst);
}

impl Conv<'_> {
    /// Asks the CPU to load the input of channels `[c0, c1)` that output row `oy + 1` of image
    /// `b` reads and row `oy` does not, into its L2 cache. Prefetches are hints: they change
    /// no value and never fault.
    fn prefetch_next_row(&self, b: usize, oy: usize) {
        let p = self.p;
        let [_, h, w, cin] = p.input;
        if oy + 1 >= p.output[1] {
            return;
        }
        let [sy, dy, pt, kh] = [p.stride[0], p.dilation[0], p.pad[0], p.kernel[0]];
        // Padded row of this row's last tap; `None` when it reads no input row at all.
        let current_last = taps(oy, sy, dy, pt, kh, h)
            .last()
            .map(|ky| oy * sy + ky * dy);
        let (ci0, ci1) = (self.c0 / p.multiplier, (self.c1 - 1) / p.multiplier + 1);
        let base = self.input.as_ptr() as usize;
        for ky in taps(oy + 1, sy, dy, pt, kh, h) {
            let at = (oy + 1) * sy + ky * dy;
            if Some(at) <= current_last {
                continue;
            }
            let row = (b * h + at - pt) * w * cin;
            // Cache lines in address order; a line shared by two pixels is asked for once.
            let mut next_line = 0;
            for x in 0..w {
                let first = (base + (row + x * cin + ci0) * 4) / 64;
                let last = (base + (row + x * cin + ci1 - 1) * 4) / 64;
                for line in first.max(next_line)..=last {
                    prefetch_line(line * 64);
                }
                next_line = last + 1;
            }
        }
    }

    /// The first channel of the run of full-width blocks in [`row`]: the first channel from
    /// `c0` whose input vectors are `V`-float aligned in every pixel, when the range is wide
    /// enough for the extra block this costs to be cheaper than the split loads it saves;
    /// otherwise `c0`.
    #[inline(always)]
    fn aligned_start<const V: usize>(&self) -> usize {
        if !self.p.input[3].is_multiple_of(V) || self.c1 - self.c0 < 8 * V {
            return self.c0;
        }
        // An f32 slice is 4-byte aligned, so this counts whole floats.
        let lane = (self.input.as_ptr() as usize / 4 + self.c0) % V;
        self.c0 + (V - lane) % V
    }

    /// Computes `blocks` blocks of `L` channels from channel `c` (within `[c0, c1)`), for
    /// output row `oy` of image `b`, whose valid kernel rows are `rows`. `L > 1` requires
    /// multiplier 1. `WINDOWS` enables the loops specialised for common kernel shapes.
    #[inline(always)]
    fn blocks<const L: usize, const P: usize, const FMA: bool, const WINDOWS: bool>(
        &self,
        b: usize,
        oy: usize,
        rows: &Range<usize>,
        c: usize,
        blocks: usize,
        dst: &mut [f32],
    ) {
        debug_assert!(self.c0 <= c && c + blocks * L <= self.c1);
        if blocks == 0 {
            return;
        }
        let p = self.p;
        let span = (b, oy, c, blocks);
        let windowed = WINDOWS
            && p.dilation[1] == 1
            && match (p.kernel, rows.len(), p.stride[1]) {
                ([3, 3], 3, 1) => self.row_window::<3, 3, 1, L, P, FMA>(span, rows.start, dst),
                ([3, 3], 3, 2) => self.row_window::<3, 3, 2, L, P, FMA>(span, rows.start, dst),
                ([3, 3], 2, 1) => self.row_window::<2, 3, 1, L, P, FMA>(span, rows.start, dst),
                ([3, 3], 2, 2) => self.row_window::<2, 3, 2, L, P, FMA>(span, rows.start, dst),
                _ => false,
            };
        if !windowed {
            let kw = p.kernel[1];
            let interior = self.interior.clone();
            for ox in (0..interior.start).chain(interior.end..p.output[2]) {
                let cols = taps(ox, p.stride[1], p.dilation[1], p.pad[1], kw, p.input[2]);
                self.span_taps::<L, FMA>(span, ox..ox + 1, rows.clone(), cols, dst);
            }
            if !interior.is_empty() {
                self.span_taps::<L, FMA>(span, interior, rows.clone(), 0..kw, dst);
            }
        }
    }

    /// Output pixels `oxs` of the span `(b, oy, c, blocks)`: row `oy` of image `b`, channels
    /// `[c, c + blocks·L)`, summing the kernel taps `rows × cols`, which must land inside the
    /// input for every pixel of `oxs`.
    #[inline(always)]
    fn span_taps<const L: usize, const FMA: bool>(
        &self,
        (b, oy, c, blocks): (usize, usize, usize, usize),
        oxs: Range<usize>,
        rows: Range<usize>,
        cols: Range<usize>,
        dst: &mut [f32],
    ) {
        let p = self.p;
        let [_, h, w, cin] = p.input;
        let cout = p.output[3];
        let kw = p.kernel[1];
        let ([sy, sx], [dy, dx], [pt, pl]) = (p.stride, p.dilation, p.pad);
        let taps_inside = !oxs.is_empty() && !rows.is_empty() && !cols.is_empty();
        if taps_inside {
            let rows_at = (oy * sy + rows.start * dy, oy * sy + (rows.end - 1) * dy);
            self.check_reads::<L>(b, rows_at, &oxs, &cols, c, blocks);
        }
        for block in 0..blocks {
            let c = c + block * L;
            let ci = if L > 1 { c } else { c / p.multiplier };
            let start = self.bias_block::<L>(c);
            for ox in oxs.clone() {
                let mut acc = start;
                if taps_inside {
                    for ky in rows.clone() {
                        let iy = oy * sy + ky * dy - pt;
                        let first = ((b * h + iy) * w + ox * sx + cols.start * dx - pl) * cin + ci;
                        for (j, kx) in cols.clone().enumerate() {
                            // SAFETY: `check_reads` bounded every tap of every pixel of the span,
                            // and `depthwise_conv2d_on` checked the weights hold KH·KW·C_out values.
                            let (x, k) = unsafe {
                                (
                                    load::<L>(self.input, first + j * dx * cin),
                                    load::<L>(self.weights, (ky * kw + kx) * cout + c),
                                )
                            };
                            madd::<L, FMA>(&mut acc, &x, &k);
                        }
                    }
                }
                store(&mut dst[ox * cout + c..], cout, &[acc], p.activation);
            }
        }
    }

    /// The whole output row of the span `(b, oy, c, blocks)`, for a kernel `KW` wide with column
    /// stride `S` and column dilation 1 whose rows `ky0..ky0 + KH` are the ones that land inside
    /// the input. Each block keeps its `KH × KW` weights in registers across the row: interior
    /// pixels run in groups of `P` with no padding checks, border pixels skip the columns that
    /// fall outside. Returns true.
    #[inline(always)]
    fn row_window<
        const KH: usize,
        const KW: usize,
        const S: usize,
        const L: usize,
        const P: usize,
        const FMA: bool,
    >(
        &self,
        (b, oy, c, blocks): (usize, usize, usize, usize),
        ky0: usize,
        dst: &mut [f32],
    ) -> bool {
        let p = self.p;
        let [_, h, w, cin] = p.input;
        let [_, _, wo, cout] = p.output;
        let ([sy, _], [dy, _], [pt, pl]) = (p.stride, p.dilation, p.pad);
        debug_assert!(p.kernel[1] == KW && p.stride[1] == S && p.dilation[1] == 1);
        debug_assert!(ky0 + KH <= p.kernel[0]);
        let first_row = oy * sy + ky0 * dy;
        let rows_at = (first_row, first_row + (KH - 1) * dy);
        let interior = self.interior.clone();
        // The window columns of border pixel `ox` that land inside the input.
        let cols = |ox: usize| {
            let lo = pl.saturating_sub(ox * S).min(KW);
            lo..(pl + w).saturating_sub(ox * S).min(KW).max(lo)
        };
        for ox in (0..interior.start).chain(interior.end..wo) {
            if !cols(ox).is_empty() {
                self.check_reads::<L>(b, rows_at, &(ox..ox + 1), &cols(ox), c, blocks);
            }
        }
        if !interior.is_empty() {
            self.check_reads::<L>(b, rows_at, &interior, &(0..KW), c, blocks);
        }
        let row_step = dy * w * cin;
        for block in 0..blocks {
            let c = c + block * L;
            // Multi-channel blocks only occur with multiplier 1.
            let ci = if L > 1 { c } else { c / p.multiplier };
            let mut k = [[[0.0f32; L]; KW]; KH];
            for (ky, k_row) in k.iter_mut().enumerate() {
                for (kx, k_tap) in k_row.iter_mut().enumerate() {
                    // SAFETY: `depthwise_conv2d_on` checked the weights hold KH·KW·C_out values,
                    // and `c + L <= C_out`.
                    *k_tap = unsafe { load::<L>(self.weights, ((ky0 + ky) * KW + kx) * cout + c) };
                }
            }
            let start = self.bias_block::<L>(c);
            // Input offset of the first window row's column 0 at channel `ci`.
            let row0 = ((b * h + first_row - pt) * w) * cin + ci;
            let window = Window {
                k: &k,
                start,
                row0,
                row_step,
                c,
            };
            for ox in 0..interior.start {
                self.pixel_masked::<KH, KW, S, L, FMA>(&window, ox, cols(ox), dst);
            }
            let mut ox = interior.start;
            while ox + P <= interior.end {
                self.group::<KH, KW, S, L, P, FMA>(&window, ox, dst);
                ox += P;
            }
            for ox in ox..interior.end {
                self.group::<KH, KW, S, L, 1, FMA>(&window, ox, dst);
            }
            for ox in interior.end..wo {
                self.pixel_masked::<KH, KW, S, L, FMA>(&window, ox, cols(ox), dst);
            }
        }
        true
    }

    /// Interior output pixels `ox..ox + G` of one block of a [`Self::row_window`]: `G`
    /// independent accumulation chains, with each input vector loaded once for all the taps
    /// that read it.
    #[inline(always)]
    fn group<
        const KH: usize,
        const KW: usize,
        const S: usize,
        const L: usize,
        const G: usize,
        const FMA: bool,
    >(
        &self,
        window: &Window<'_, KH, KW, L>,
        ox: usize,
        dst: &mut [f32],
    ) {
        let [cin, cout, pl] = [self.p.input[3], self.p.output[3], self.p.pad[1]];
        let pixel = window.row0 + (ox * S - pl) * cin;
        let mut acc = [window.start; G];
        for (ky, k_row) in window.k.iter().enumerate() {
            let row = pixel + ky * window.row_step;
            // Input pixel `i` of the row feeds pixel `j` through tap `kx = i - j·S`: load it
            // once and apply all its taps, so that only one input vector is live at a time.
            for i in 0..(G - 1) * S + KW {
                // SAFETY: `row_window` checked the reads of every interior pixel.
                let x = unsafe { load::<L>(self.input, row + i * cin) };
                for (j, acc) in acc.iter_mut().enumerate() {
                    if let Some(k_tap) = i.checked_sub(j * S).and_then(|kx| k_row.get(kx)) {
                        madd::<L, FMA>(acc, &x, k_tap);
                    }
                }
            }
        }
        store(
            &mut dst[ox * cout + window.c..],
            cout,
            &acc,
            self.p.activation,
        );
    }

    /// Border output pixel `ox` of one block of a [`Self::row_window`], summing the window
    /// columns `cols` only.
    #[inline(always)]
    fn pixel_masked<
        const KH: usize,
        const KW: usize,
        const S: usize,
        const L: usize,
        const FMA: bool,
    >(
        &self,
        window: &Window<'_, KH, KW, L>,
        ox: usize,
        cols: Range<usize>,
        dst: &mut [f32],
    ) {
        let [cin, cout, pl] = [self.p.input[3], self.p.output[3], self.p.pad[1]];
        let mut acc = window.start;
        for (ky, k_row) in window.k.iter().enumerate() {
            let row = window.row0 + ky * window.row_step;
            for (kx, k_tap) in k_row.iter().enumerate() {
                if cols.contains(&kx) {
                    // SAFETY: `row_window` checked the reads of every border pixel's `cols`.
                    let x = unsafe { load::<L>(self.input, row + (ox * S + kx - pl) * cin) };
                    madd::<L, FMA>(&mut acc, &x, k_tap);
                }
            }
        }
        store(
            &mut dst[ox * cout + window.c..],
            cout,
            &[acc],
            self.p.activation,
        );
    }

    /// Panics unless every input read of a span lies inside `input`: taps `rows × cols`, where
    /// the kernel rows span padded input rows `rows_at = (first, last)` (`oy·stride +
    /// ky·dilation`), of pixels `oxs` (non-empty), for channel blocks `[c, c + blocks·L)`.
    #[inline(always)]
    fn check_reads<const L: usize>(
        &self,
        b: usize,
        (first_row, last_row): (usize, usize),
        oxs: &Range<usize>,
        cols: &Range<usize>,
        c: usize,
        blocks: usize,
    ) {
        let p = self.p;
        let [_, h, w, cin] = p.input;
        let ([_, sx], [_, dx], [pt, pl]) = (p.stride, p.dilation, p.pad);
        debug_assert!(blocks > 0 && !oxs.is_empty() && !cols.is_empty());
        let first_col = oxs.start * sx + cols.start * dx;
        let last_col = (oxs.end - 1) * sx + (cols.end - 1) * dx;
        let last_channel = (c + blocks * L - 1) / p.multiplier;
        debug_assert!(last_row < h + pt && last_col < w + pl && last_channel < cin);
        assert!(
            first_row >= pt
                && first_col >= pl
                && ((b * h + last_row - pt) * w + last_col - pl) * cin + last_channel
                    < self.input.len(),
            "depthwise span reads outside the input"
        );
    }

    /// The bias of channels `[c, c + L)`, or zeros.
    #[inline(always)]
    fn bias_block<const L: usize>(&self, c: usize) -> [f32; L] {
        let mut start = [0.0; L];
        if let Some(bias) = self.bias {
            start.copy_from_slice(&bias[c..c + L]);
        }
        start
    }
}

/// Asks the CPU to bring the cache line at address `at` into its L2 cache; a hint that never
/// faults and changes no value (nothing on other architectures).
#[inline(always)]
fn prefetch_line(at: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        _mm_prefetch::<_MM_HINT_T1>(at as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// `L` consecutive values of `data` from index `at`.
///
/// # Safety
/// `at + L <= data.len()`.
#[inline(always)]
unsafe fn load<const L: usize>(data: &[f32], at: usize) -> [f32; L] {
    debug_assert!(at + L <= data.len());
    data.as_ptr().add(at).cast::<[f32; L]>().read()
}

/// `acc += x · k`, lane by lane; fused when `FMA` (which must then be a single instruction).
#[inline(always)]
fn madd<const L: usize, const FMA: bool>(acc: &mut [f32; L], x: &[f32; L], k: &[f32; L]) {
    for ((a, x), k) in acc.iter_mut().zip(x).zip(k) {
        *a = if FMA { x.mul_add(*k, *a) } else { *a + x * k };
    }
}

/// Writes `activation(acc[j])` to `out[j·stride..][..L]` for each `j`.
#[inline(always)]
fn store<const L: usize, const P: usize>(
    out: &mut [f32],
    stride: usize,
    acc: &[[f32; L]; P],
    activation: Activation,
) {
    // Each arm passes a constant, so `apply` folds to one operation that vectorises.
    let mut lanes = |activation: Activation| {
        for (j, acc) in acc.iter().enumerate() {
            for (o, a) in out[j * stride..][..L].iter_mut().zip(acc) {
                *o = activation.apply(*a);
            }
        }
    };
    match activation {
        Activation::None => lanes(Activation::None),
        Activation::Relu => lanes(Activation::Relu),
        Activation::ReluN1To1 => lanes(Activation::ReluN1To1),
        Activation::Relu6 => lanes(Activation::Relu6),
        Activation::Tanh => lanes(Activation::Tanh),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::tests::Rng;

    fn reference(input: &[f32], weights: &[f32], bias: &[f32], p: &DepthwiseParams) -> Vec<f32> {
        let [n, h, w, cin] = p.input;
        let [_, ho, wo, cout] = p.output;
        let mut out = vec![0.0; n * ho * wo * cout];
        for b in 0..n {
            for oy in 0..ho {
                for ox in 0..wo {
                    for c in 0..cout {
                        let mut acc = bias[c];
                        for ky in 0..p.kernel[0] {
                            for kx in 0..p.kernel[1] {
                                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize
                                    - p.pad[0] as isize;
                                let ix = (ox * p.stride[1] + kx * p.dilation[1]) as isize
                                    - p.pad[1] as isize;
                                if iy >= 0 && ix >= 0 && iy < h as isize && ix < w as isize {
                                    let x = input[((b * h + iy as usize) * w + ix as usize) * cin
                                        + c / p.multiplier];
                                    acc += x * weights[(ky * p.kernel[1] + kx) * cout + c];
                                }
                            }
                        }
                        out[((b * ho + oy) * wo + ox) * cout + c] = p.activation.apply(acc);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn matches_reference_on_random_geometries_and_ranges() {
        let mut rng = Rng(0x1234_5678);
        let pool = ThreadPool::new(2);
        for case in 0..60 {
            let kernel = [1 + rng.below(5), 1 + rng.below(5)];
            let stride = [1 + rng.below(3), 1 + rng.below(3)];
            let dilation = [1 + rng.below(2), 1 + rng.below(2)];
            let multiplier = [1, 1, 2, 3][rng.below(4)];
            let cin = 1 + rng.below(9);
            let (h, w) = (
                kernel[0] * dilation[0] + rng.below(8),
                kernel[1] * dilation[1] + rng.below(8),
            );
            let same = rng.below(2) == 0;
            let dim = |size: usize, d: usize| {
                let eff = (kernel[d] - 1) * dilation[d] + 1;
                if same {
                    let out = size.div_ceil(stride[d]);
                    (out, ((out - 1) * stride[d] + eff).saturating_sub(size) / 2)
                } else {
                    ((size - eff) / stride[d] + 1, 0)
                }
            };
            let ((ho, pt), (wo, pl)) = (dim(h, 0), dim(w, 1));
            let n = 1 + rng.below(2);
            let cout = cin * multiplier;
            let p = DepthwiseParams {
                input: [n, h, w, cin],
                output: [n, ho, wo, cout],
                kernel,
                stride,
                dilation,
                pad: [pt, pl],
                multiplier,
                activation: [Activation::None, Activation::Relu6, Activation::ReluN1To1][case % 3],
            };
            p.validate().expect("valid");
            let input = rng.values(n * h * w * cin);
            let weights = rng.values(kernel[0] * kernel[1] * cout);
            let bias = rng.values(cout);
            let want = reference(&input, &weights, &bias, &p);
            let split = rng.below(cout + 1);
            let mut got = vec![f32::NAN; want.len()];
            depthwise_conv2d(&input, &weights, Some(&bias), &mut got, &p, 0, split, &pool);
            depthwise_conv2d(
                &input,
                &weights,
                Some(&bias),
                &mut got,
                &p,
                split,
                cout,
                &pool,
            );
            for (a, b) in got.iter().zip(&want) {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "case {case} {p:?}: {a} vs {b}"
                );
            }
        }
    }

    /// Runs `p` on every supported instruction set with 1 and 2 threads, for each channel
    /// range, checking the range against [`reference`] and that nothing outside it is written.
    fn check_case(p: &DepthwiseParams, with_bias: bool, ranges: &[(usize, usize)], rng: &mut Rng) {
        p.validate().expect("valid");
        let [n, h, w, cin] = p.input;
        let [_, ho, wo, cout] = p.output;
        // Operands start at arbitrary offsets from a cache line, as tensors in an arena do.
        let (skip_in, skip_out) = (rng.below(16), rng.below(16));
        let input_buffer = rng.values(skip_in + n * h * w * cin);
        let input = &input_buffer[skip_in..];
        let weights = rng.values(p.kernel[0] * p.kernel[1] * cout);
        let bias = if with_bias {
            rng.values(cout)
        } else {
            vec![0.0; cout]
        };
        let want = reference(input, &weights, &bias, p);
        let pools = [ThreadPool::new(1), ThreadPool::new(2)];
        for isa in Isa::ALL.into_iter().filter(|isa| isa.is_supported()) {
            for pool in &pools {
                for (&(c0, c1), prefetch) in ranges.iter().flat_map(|r| [(r, false), (r, true)]) {
                    let mut out_buffer = vec![f32::NAN; skip_out + n * ho * wo * cout];
                    let got = &mut out_buffer[skip_out..];
                    let b = with_bias.then_some(bias.as_slice());
                    depthwise_conv2d_on(isa, input, &weights, b, got, p, c0, c1, prefetch, pool);
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        let ok = if (c0..c1).contains(&(i % cout)) {
                            (a - b).abs() <= 1e-5 * b.abs().max(1.0)
                        } else {
                            a.is_nan()
                        };
                        let threads = pool.threads();
                        assert!(
                            ok,
                            "{isa:?}, {threads} threads, channels {c0}..{c1} (prefetching rows: \
                             {prefetch}), element {i}: got {a}, want {b} (NaN outside the range) \
                             for {p:?}"
                        );
                    }
                }
            }
        }
    }

    /// A 3×3 depthwise convolution of an `n × h × w × c` input with TFLite's SAME padding
    /// (or VALID), and ReLU6.
    fn params_3x3(
        n: usize,
        h: usize,
        w: usize,
        c: usize,
        stride: usize,
        same: bool,
    ) -> DepthwiseParams {
        let dim = |size: usize| {
            if same {
                let out = size.div_ceil(stride);
                (out, ((out - 1) * stride + 3).saturating_sub(size) / 2)
            } else {
                ((size - 3) / stride + 1, 0)
            }
        };
        let ((ho, pt), (wo, pl)) = (dim(h), dim(w));
        DepthwiseParams {
            input: [n, h, w, c],
            output: [n, ho, wo, c],
            kernel: [3, 3],
            stride: [stride, stride],
            dilation: [1, 1],
            pad: [pt, pl],
            multiplier: 1,
            activation: Activation::Relu6,
        }
    }

    #[test]
    fn fast_3x3_paths_match_reference_for_strides_sizes_and_channel_ranges() {
        let mut rng = Rng(0x0bad_cafe);
        // Channel counts around the vector widths (16, 8, 4) and their tails.
        for (case, c) in [1, 3, 4, 8, 16, 20, 24, 35, 48].into_iter().enumerate() {
            for stride in [1, 2] {
                for (h, w) in [(1, 1), (2, 3), (3, 3), (5, 4), (6, 9), (9, 7), (12, 13)] {
                    for same in [true, false] {
                        if !same && (h < 3 || w < 3) {
                            continue;
                        }
                        let mut p = params_3x3(1 + case % 2, h, w, c, stride, same);
                        p.activation =
                            [Activation::Relu6, Activation::None, Activation::Relu][case % 3];
                        let inner = if c > 2 { (1, c - 1) } else { (0, 1) };
                        let ranges = [(0, c), (0, c / 2), (c / 2, c), inner];
                        check_case(&p, case % 4 != 3, &ranges, &mut rng);
                    }
                }
            }
        }
    }

    #[test]
    fn mobilenet_like_shapes_match_reference() {
        let mut rng = Rng(0x5eed);
        for (size, c, stride) in [
            (16, 32, 1),
            (16, 48, 2),
            (7, 64, 1),
            (8, 96, 2),
            (15, 16, 2),
        ] {
            let p = params_3x3(1, size, size, c, stride, true);
            check_case(&p, true, &[(0, c), (16, c - 16)], &mut rng);
        }
    }

    #[test]
    fn padding_edges_and_other_geometries_match_reference() {
        let mut rng = Rng(0xfeed_f00d);
        let base = params_3x3(1, 6, 7, 20, 1, true);
        let cases = [
            // Asymmetric and large padding: rows and columns with no tap inside the image.
            DepthwiseParams {
                pad: [0, 1],
                output: [1, 4, 7, 20],
                ..base.clone()
            },
            DepthwiseParams {
                pad: [2, 2],
                output: [1, 8, 9, 20],
                ..base.clone()
            },
            // Strides and dilations outside the specialised loops.
            DepthwiseParams {
                stride: [2, 3],
                output: [1, 3, 3, 20],
                ..base.clone()
            },
            DepthwiseParams {
                dilation: [2, 2],
                pad: [2, 2],
                ..base.clone()
            },
            DepthwiseParams {
                dilation: [1, 2],
                pad: [1, 2],
                ..base.clone()
            },
            // Other kernel sizes.
            DepthwiseParams {
                kernel: [1, 1],
                pad: [0, 0],
                ..base.clone()
            },
            DepthwiseParams {
                kernel: [5, 5],
                pad: [2, 2],
                ..base.clone()
            },
            DepthwiseParams {
                kernel: [3, 5],
                pad: [1, 2],
                ..base.clone()
            },
            DepthwiseParams {
                kernel: [2, 2],
                pad: [0, 0],
                output: [1, 5, 6, 20],
                ..base.clone()
            },
        ];
        for (i, mut p) in cases.into_iter().enumerate() {
            p.activation = [Activation::None, Activation::ReluN1To1, Activation::Tanh][i % 3];
            check_case(&p, i % 2 == 0, &[(0, 20), (3, 19), (17, 20)], &mut rng);
        }
    }

    #[test]
    fn multipliers_above_one_match_reference() {
        let mut rng = Rng(0xabcd);
        for (multiplier, stride) in [(2, 1), (3, 2), (4, 1)] {
            let cin = 5;
            let mut p = params_3x3(2, 7, 6, cin * multiplier, stride, true);
            p.input[3] = cin;
            p.multiplier = multiplier;
            let cout = cin * multiplier;
            check_case(
                &p,
                true,
                &[(0, cout), (1, cout - 2), (multiplier, 2 * multiplier + 1)],
                &mut rng,
            );
        }
    }

    #[test]
    fn empty_channel_range_writes_nothing() {
        let mut rng = Rng(0x77);
        let p = params_3x3(1, 5, 5, 24, 1, true);
        check_case(&p, true, &[(0, 0), (7, 7), (24, 24)], &mut rng);
        let mut out = vec![f32::NAN; 5 * 5 * 24];
        let (input, weights) = (rng.values(5 * 5 * 24), rng.values(9 * 24));
        depthwise_conv2d(
            &input,
            &weights,
            None,
            &mut out,
            &p,
            9,
            3,
            &ThreadPool::new(2),
        );
        assert!(out.iter().all(|x| x.is_nan()));
    }

    #[test]
    fn wide_channel_ranges_at_various_alignments_match_reference() {
        // Wide enough for the aligned run of blocks with a leading and a trailing block.
        let mut rng = Rng(0x600d);
        for (i, stride) in [1, 2, 1, 2, 1, 2, 1, 2].into_iter().enumerate() {
            let c = 160;
            let p = params_3x3(1, 5, 6, c, stride, true);
            check_case(
                &p,
                true,
                &[(0, c), (i + 1, c - 2 * i), (3, 3 + 137)],
                &mut rng,
            );
        }
    }

    #[test]
    fn rows_are_prefetched_from_the_threshold_on_counting_the_ranges_input_channels() {
        let mut p = params_3x3(1, 128, 128, 160, 1, true);
        // 128 · 128 · 4 bytes per input channel: 128 channels are 8 MiB exactly.
        assert_eq!(PREFETCH_FROM_BYTES, 128 * 128 * 4 * 128);
        assert!(prefetches_rows(&p, 0, 128));
        assert!(prefetches_rows(&p, 32, 160));
        assert!(!prefetches_rows(&p, 0, 127));
        assert!(!prefetches_rows(&p, 5, 5));
        // Multiplier 2: output channels 1..257 read input channels 0..=128, 129 of them; 0..255
        // read 128, 0..254 127.
        p.input[3] = 160;
        p.output[3] = 320;
        p.multiplier = 2;
        assert!(prefetches_rows(&p, 1, 257));
        assert!(prefetches_rows(&p, 0, 255));
        assert!(!prefetches_rows(&p, 0, 254));
    }

    #[test]
    fn interior_columns_are_those_with_the_whole_window_inside() {
        for (w, stride, pad, k, dilation) in [
            (7, 1, 1, 3, 1),
            (8, 2, 0, 3, 1),
            (2, 1, 1, 3, 1),
            (9, 2, 2, 3, 2),
            (1, 1, 0, 1, 1),
        ] {
            let wo = (w + 2 * pad - (k - 1) * dilation - 1) / stride + 1;
            let p = DepthwiseParams {
                input: [1, 1, w, 1],
                output: [1, 1, wo, 1],
                kernel: [1, k],
                stride: [1, stride],
                dilation: [1, dilation],
                pad: [0, pad],
                multiplier: 1,
                activation: Activation::None,
            };
            let interior = interior_columns(&p);
            for ox in 0..wo {
                let cols = taps(ox, stride, dilation, pad, k, w);
                assert_eq!(interior.contains(&ox), cols == (0..k), "{p:?} column {ox}");
                for t in 0..k {
                    let at = (ox * stride + t * dilation) as isize - pad as isize;
                    assert_eq!(
                        cols.contains(&t),
                        at >= 0 && at < w as isize,
                        "{p:?} column {ox} tap {t}"
                    );
                }
            }
        }
    }
}
