//! CONV_2D (and grouped convolution): im2col plus GEMM, over an output-channel range.

use super::packed_gemm::{gemm_packed_raw, pack_b, packed_len, Epilogue, NR};
use super::shared::SharedOut;
use super::threads::ThreadPool;
use super::Activation;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;

/// Geometry of a 2-D convolution, NHWC. `[h, w]` order in every pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConvParams {
    /// [N, H, W, C_in]
    pub input: [usize; 4],
    /// [N, H_out, W_out, C_out]
    pub output: [usize; 4],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    /// Zeros before the first row and column (top, left); the rest of the SAME padding is after.
    pub pad: [usize; 2],
    /// Channel groups (1 for a standard convolution); C_in and C_out are multiples of it.
    pub groups: usize,
    pub activation: Activation,
}

impl ConvParams {
    /// Input channels per group.
    pub fn group_in(&self) -> usize {
        self.input[3] / self.groups
    }

    /// Output channels per group.
    pub fn group_out(&self) -> usize {
        self.output[3] / self.groups
    }

    /// Rows of one group's packed weight matrix: KH × KW × C_in per group.
    pub fn depth(&self) -> usize {
        self.kernel[0] * self.kernel[1] * self.group_in()
    }

    /// Elements of one group's packed weights.
    pub fn group_packed_len(&self) -> usize {
        packed_len(self.depth(), self.group_out())
    }

    /// Elements of the packed weights (every group).
    pub fn packed_len(&self) -> usize {
        self.groups * self.group_packed_len()
    }

    /// Checks the geometry is consistent; the message says what is not.
    pub fn validate(&self) -> Result<(), String> {
        let [n, _, _, ci] = self.input;
        let [no, _, _, co] = self.output;
        if n != no {
            return Err(format!("batch {n} in but {no} out"));
        }
        if self.groups == 0 || ci % self.groups != 0 || co % self.groups != 0 {
            return Err(format!(
                "{ci} → {co} channels do not divide into {} groups",
                self.groups
            ));
        }
        check_window(
            self.kernel,
            self.stride,
            self.dilation,
            self.pad,
            self.input,
            self.output,
        )?;
        Ok(())
    }
}

/// Checks a sliding window's geometry: non-zero kernel, stride and dilation, and every output
/// position's window starting inside the padded input (so out-of-range taps are padding only).
pub(crate) fn check_window(
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    pad: [usize; 2],
    input: [usize; 4],
    output: [usize; 4],
) -> Result<(), String> {
    if stride.contains(&0) || dilation.contains(&0) || kernel.contains(&0) {
        return Err("zero stride, dilation or kernel size".into());
    }
    for d in 0..2 {
        let (size, out) = (input[d + 1], output[d + 1]);
        if out > 0 && (out - 1).saturating_mul(stride[d]) >= size.saturating_add(pad[d]) {
            return Err(format!(
                "output size {out} does not fit input size {size} in dimension {d}"
            ));
        }
    }
    Ok(())
}

/// Packs TFLite conv weights `[C_out, KH, KW, C_in/groups]` into the layout [`conv2d`] reads:
/// per group, the `KH·KW·C_in/groups × C_out/groups` GEMM matrix in
/// [`super::packed_gemm`]'s panel layout, groups one after another.
pub fn pack_conv_weights(weights: &[f32], p: &ConvParams) -> Vec<f32> {
    let (k, gout) = (p.depth(), p.group_out());
    let mut matrix = vec![0.0; k * gout];
    let mut packed = Vec::with_capacity(p.packed_len());
    for g in 0..p.groups {
        for oc in 0..gout {
            let o = g * gout + oc;
            for r in 0..k {
                matrix[r * gout + oc] = weights[o * k + r];
            }
        }
        packed.extend(pack_b(&matrix, k, gout, gout).into_vec());
    }
    packed
}

thread_local! {
    static IM2COL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Output pixels per task: an output tile of about 128 KB (which stays in L2 for the activation
/// pass of an activation that is not a clamp); im2col convolutions also keep their im2col buffer
/// near 4 MB. There is at least one task per thread.
fn tile_pixels(pixels: usize, depth: usize, cout: usize, pointwise: bool, threads: usize) -> usize {
    let per_thread = pixels.div_ceil(threads.max(1)).max(1);
    let output_rows = ((1 << 15) / cout.max(1)).max(64);
    let rows = if pointwise {
        output_rows
    } else {
        output_rows.min(((1 << 20) / depth.max(1)).max(64))
    };
    rows.min(per_thread)
}

/// How [`conv2d`] computes its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvPath {
    /// 1x1, stride 1, no padding, one group: one GEMM straight on the input.
    Pointwise,
    /// Kernel rows of at most 32 values (stems): one GEMM per kernel row on the input, im2col
    /// only for the border columns.
    Direct,
    /// im2col into a per-thread buffer, then one GEMM per group.
    Im2col,
}

/// What [`conv2d`] does for channels `[c0, c1)` with `threads` threads: its path and its task
/// tiling (`tiles` tiles of `tile` output pixels by `chunks` chunks of `chunk` channels, per
/// image). The latency predictors read it as white-box features of the CPU part, as they read
/// the GPU's dispatch decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvPlan {
    pub path: ConvPath,
    pub tile: usize,
    pub chunk: usize,
    pub tiles: usize,
    pub chunks: usize,
}

/// [`conv2d`]'s plan for channels `[c0, c1)` (an empty range is planned as one channel).
pub fn plan(p: &ConvParams, c0: usize, c1: usize, threads: usize) -> ConvPlan {
    let cin = p.input[3];
    let [_, ho, wo, cout] = p.output;
    let pixels = ho * wo;
    let width = c1.saturating_sub(c0).max(1);
    let pointwise = p.kernel == [1, 1] && p.stride == [1, 1] && p.pad == [0, 0] && p.groups == 1;
    let direct = !pointwise && p.groups == 1 && p.dilation[1] == 1 && p.kernel[1] * cin <= 32;
    let path = match (pointwise, direct) {
        (true, _) => ConvPath::Pointwise,
        (false, true) => ConvPath::Direct,
        (false, false) => ConvPath::Im2col,
    };
    // Few pixels and many channels (the late layers): the weights outweigh the output, so the
    // threads split the channels, each streaming only its share of the weights, rather than the
    // pixels.
    let by_channels = threads > 1 && width > pixels && width >= 2 * NR;
    let (tile, chunk) = if by_channels {
        (pixels.max(1), width.div_ceil(threads).next_multiple_of(NR))
    } else {
        (
            tile_pixels(pixels, p.depth(), cout, pointwise, threads),
            width,
        )
    };
    ConvPlan {
        path,
        tile,
        chunk,
        tiles: pixels.div_ceil(tile),
        chunks: width.div_ceil(chunk),
    }
}

/// Output columns whose kernel window reaches into the left or right padding.
pub fn border_columns(p: &ConvParams) -> usize {
    p.output[2] - interior_columns(p).len()
}

/// Computes output channels `[c0, c1)` of the convolution into `out` (the full output tensor),
/// leaving other channels untouched. `weights` is [`pack_conv_weights`]'s layout; `bias` has C_out
/// entries.
///
/// Preconditions (checked by the artifact loader): `p.validate()` holds, slice lengths match the
/// shapes, `c0 <= c1 <= C_out`.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    p: &ConvParams,
    c0: usize,
    c1: usize,
    pool: &ThreadPool,
) {
    let [n, _, _, cin] = p.input;
    let [_, ho, wo, cout] = p.output;
    debug_assert_eq!(out.len(), n * ho * wo * cout);
    debug_assert_eq!(weights.len(), p.packed_len());
    if c0 >= c1 {
        return;
    }
    let pixels = ho * wo;
    let ConvPlan {
        path,
        tile,
        chunk,
        tiles,
        chunks,
    } = plan(p, c0, c1, pool.threads());
    let (pointwise, direct) = (path == ConvPath::Pointwise, path == ConvPath::Direct);
    let interior = interior_columns(p);
    let shared = SharedOut::new(out);
    // Clamp activations are applied in the GEMM's epilogue; others in a pass over the tile.
    let clamp = match p.activation {
        Activation::None => None,
        a => a.clamp_range(),
    };
    let flops = 2 * n * p.output[1] * p.output[2] * (c1 - c0) * p.depth();
    pool.run_sized(n * tiles * chunks, flops, &|task| {
        let (b, t, ch) = (
            task / (tiles * chunks),
            task / chunks % tiles,
            task % chunks,
        );
        let p0 = t * tile;
        let rows = tile.min(pixels - p0);
        let (c0, c1) = (c0 + ch * chunk, c1.min(c0 + (ch + 1) * chunk));
        let len = rows * cout;
        // Each task owns channels [c0, c1) of output pixels [p0, p0 + rows) of image b.
        let dst = shared.ptr_range((b * pixels + p0) * cout, len);
        let image =
            &input[b * p.input[1] * p.input[2] * cin..(b + 1) * p.input[1] * p.input[2] * cin];
        if pointwise {
            let a = &image[p0 * cin..(p0 + rows) * cin];
            let epilogue = Epilogue {
                accumulate: false,
                bias,
                clamp,
            };
            // SAFETY: `dst` is valid for `len` values, and only this task touches its channels.
            unsafe {
                gemm_packed_raw(
                    dst,
                    len,
                    cout,
                    a,
                    cin,
                    rows,
                    cin,
                    0..cin,
                    weights,
                    cout,
                    c0,
                    c1,
                    epilogue,
                )
            };
        } else if direct {
            // Output row by output row: the interior pixels straight from the input, the border
            // pixels (whose windows reach into the left or right padding) through im2col.
            let mut q = p0;
            while q < p0 + rows {
                let (oy, ox) = (q / wo, q % wo);
                let end = (p0 + rows).min((oy + 1) * wo);
                let (lo, hi) = (interior.start.clamp(ox, end - q + ox), interior.end);
                let hi = hi.clamp(lo, end - q + ox);
                // SAFETY (all three): pixels [q, end) are this task's, `q - p0` pixels into `dst`.
                unsafe {
                    let at = |x: usize| (oy * wo + x - p0) * cout;
                    im2col_rows(
                        image,
                        weights,
                        bias,
                        clamp,
                        p,
                        q..oy * wo + lo,
                        c0,
                        c1,
                        dst.add(at(ox)),
                        len - at(ox),
                    );
                    if !direct_rows(
                        image,
                        weights,
                        bias,
                        clamp,
                        p,
                        oy,
                        lo..hi,
                        c0,
                        c1,
                        dst.add(at(lo)),
                        len - at(lo),
                    ) {
                        im2col_rows(
                            image,
                            weights,
                            bias,
                            clamp,
                            p,
                            oy * wo + lo..oy * wo + hi,
                            c0,
                            c1,
                            dst.add(at(lo)),
                            len - at(lo),
                        );
                    }
                    im2col_rows(
                        image,
                        weights,
                        bias,
                        clamp,
                        p,
                        oy * wo + hi..end,
                        c0,
                        c1,
                        dst.add(at(hi)),
                        len - at(hi),
                    );
                }
                q = end;
            }
        } else {
            // SAFETY: as above.
            unsafe {
                im2col_rows(
                    image,
                    weights,
                    bias,
                    clamp,
                    p,
                    p0..p0 + rows,
                    c0,
                    c1,
                    dst,
                    len,
                )
            };
        }
        if clamp.is_none() && p.activation != Activation::None {
            for r in 0..rows {
                // SAFETY: row r's channels [c0, c1) are inside `dst` and owned by this task.
                let row =
                    unsafe { std::slice::from_raw_parts_mut(dst.add(r * cout + c0), c1 - c0) };
                p.activation.apply_slice(row);
            }
        }
    });
}

/// The output columns `ox` whose kernel windows lie inside the input row (no left or right
/// padding), given `dilation[1] == 1`.
fn interior_columns(p: &ConvParams) -> std::ops::Range<usize> {
    let (w, wo, kw) = (p.input[2], p.output[2], p.kernel[1]);
    let (s, pad) = (p.stride[1], p.pad[1]);
    let lo = pad.div_ceil(s).min(wo);
    let hi = if w + pad >= kw {
        ((w + pad - kw) / s + 1).min(wo)
    } else {
        0
    };
    lo..hi.max(lo)
}

/// Channels `[c0, c1)` of output pixels `pixels` (of one image, consecutive) through im2col and
/// one GEMM per group, written `dst` onwards (row stride C_out).
///
/// # Safety
/// `dst` must be valid for `dst_len` values, which cover the pixels' rows, and nothing else may
/// touch their channels `[c0, c1)` meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn im2col_rows(
    image: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    clamp: Option<(f32, f32)>,
    p: &ConvParams,
    pixels: std::ops::Range<usize>,
    c0: usize,
    c1: usize,
    dst: *mut f32,
    dst_len: usize,
) {
    if pixels.is_empty() {
        return;
    }
    let (rows, cout) = (pixels.len(), p.output[3]);
    IM2COL.with(|buf| {
        let mut buf = buf.borrow_mut();
        let k = p.depth();
        buf.resize(rows * k, 0.0);
        let (gin, gout) = (p.group_in(), p.group_out());
        for g in (c0 / gout)..c1.div_ceil(gout) {
            let (l0, l1) = (
                c0.max(g * gout) - g * gout,
                c1.min((g + 1) * gout) - g * gout,
            );
            im2col(image, p, g * gin, pixels.start, rows, &mut buf);
            let group = p.group_packed_len();
            let w = &weights[g * group..(g + 1) * group];
            let epilogue = Epilogue {
                accumulate: false,
                bias: bias.map(|b| &b[g * gout..]),
                clamp,
            };
            // SAFETY: the caller's guarantee; group g's columns start `g·gout` values in.
            unsafe {
                gemm_packed_raw(
                    dst.add(g * gout),
                    dst_len - g * gout,
                    cout,
                    &buf,
                    k,
                    rows,
                    k,
                    0..k,
                    w,
                    gout,
                    l0,
                    l1,
                    epilogue,
                );
            }
        }
    });
}

/// Channels `[c0, c1)` of output pixels `columns` (inside [`interior_columns`]) of output row
/// `oy`, written `dst` onwards, for an ungrouped convolution with `dilation[1] == 1`: one GEMM per
/// kernel row inside the input, whose left-hand side is the input row itself (row `r` of it starts
/// `r·stride·C_in` values on, and its `KW·C_in` taps are contiguous). Returns false, writing
/// nothing, when every kernel row falls in the padding.
///
/// # Safety
/// As [`im2col_rows`].
#[allow(clippy::too_many_arguments)]
unsafe fn direct_rows(
    image: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    clamp: Option<(f32, f32)>,
    p: &ConvParams,
    oy: usize,
    columns: std::ops::Range<usize>,
    c0: usize,
    c1: usize,
    dst: *mut f32,
    dst_len: usize,
) -> bool {
    if columns.is_empty() {
        return true;
    }
    let [_, h, w, cin] = p.input;
    let cout = p.output[3];
    let run = p.kernel[1] * cin;
    let valid: Vec<(usize, usize)> = (0..p.kernel[0])
        .filter_map(|ky| {
            let iy = (oy * p.stride[0] + ky * p.dilation[0]).checked_sub(p.pad[0])?;
            (iy < h).then_some((ky, iy))
        })
        .collect();
    let Some(&(last, _)) = valid.last() else {
        return false;
    };
    let m = columns.len();
    let lda = p.stride[1] * cin;
    for (j, &(ky, iy)) in valid.iter().enumerate() {
        let ix0 = columns.start * p.stride[1] - p.pad[1];
        let start = (iy * w + ix0) * cin;
        let a = &image[start..start + (m - 1) * lda + run];
        let epilogue = Epilogue {
            accumulate: j > 0,
            bias: if j == 0 { bias } else { None },
            clamp: if ky == last { clamp } else { None },
        };
        // SAFETY: the caller's guarantee.
        unsafe {
            gemm_packed_raw(
                dst,
                dst_len,
                cout,
                a,
                lda,
                m,
                p.depth(),
                ky * run..(ky + 1) * run,
                weights,
                cout,
                c0,
                c1,
                epilogue,
            );
        }
    }
    true
}

/// Fills `buf` (`rows × KH·KW·C_in/groups`) with the receptive fields of output pixels
/// `[p0, p0 + rows)` of one image, reading channels `[ch0, ch0 + C_in/groups)`.
fn im2col(image: &[f32], p: &ConvParams, ch0: usize, p0: usize, rows: usize, buf: &mut [f32]) {
    let [_, h, w, cin] = p.input;
    let wo = p.output[2];
    let gin = p.group_in();
    let k = p.depth();
    for r in 0..rows {
        let (oy, ox) = ((p0 + r) / wo, (p0 + r) % wo);
        let row = &mut buf[r * k..(r + 1) * k];
        for ky in 0..p.kernel[0] {
            let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize - p.pad[0] as isize;
            let taps = &mut row[ky * p.kernel[1] * gin..(ky + 1) * p.kernel[1] * gin];
            if iy < 0 || iy >= h as isize {
                taps.fill(0.0);
                continue;
            }
            let ix0 = (ox * p.stride[1]) as isize - p.pad[1] as isize;
            let span = (p.kernel[1] - 1) * p.dilation[1];
            if p.dilation[1] == 1 && gin == cin && ix0 >= 0 && ix0 as usize + span < w {
                // The whole kernel row is one contiguous run of the input row.
                let src = (iy as usize * w + ix0 as usize) * cin;
                taps.copy_from_slice(&image[src..src + taps.len()]);
                continue;
            }
            for kx in 0..p.kernel[1] {
                let ix = ix0 + (kx * p.dilation[1]) as isize;
                let dst = &mut taps[kx * gin..(kx + 1) * gin];
                if ix < 0 || ix >= w as isize {
                    dst.fill(0.0);
                } else {
                    let src = (iy as usize * w + ix as usize) * cin + ch0;
                    dst.copy_from_slice(&image[src..src + gin]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::tests::Rng;

    /// Direct convolution from the definition, on TFLite's weight layout.
    fn reference(input: &[f32], weights: &[f32], bias: &[f32], p: &ConvParams) -> Vec<f32> {
        let [n, h, w, cin] = p.input;
        let [_, ho, wo, cout] = p.output;
        let (gin, gout) = (p.group_in(), p.group_out());
        let mut out = vec![0.0; n * ho * wo * cout];
        for b in 0..n {
            for oy in 0..ho {
                for ox in 0..wo {
                    for o in 0..cout {
                        let g = o / gout;
                        let mut acc = bias[o];
                        for ky in 0..p.kernel[0] {
                            for kx in 0..p.kernel[1] {
                                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize
                                    - p.pad[0] as isize;
                                let ix = (ox * p.stride[1] + kx * p.dilation[1]) as isize
                                    - p.pad[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                for ci in 0..gin {
                                    let x = input[((b * h + iy as usize) * w + ix as usize) * cin
                                        + g * gin
                                        + ci];
                                    acc += x * weights
                                        [((o * p.kernel[0] + ky) * p.kernel[1] + kx) * gin + ci];
                                }
                            }
                        }
                        out[((b * ho + oy) * wo + ox) * cout + o] = p.activation.apply(acc);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn matches_reference_on_random_geometries_and_channel_ranges() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let pool = ThreadPool::new(2);
        for case in 0..80 {
            let groups = [1, 1, 1, 2, 3][rng.below(5)];
            let gin = 1 + rng.below(6);
            let gout = 1 + rng.below(7);
            let kernel = [1 + rng.below(4), 1 + rng.below(4)];
            let stride = [1 + rng.below(3), 1 + rng.below(3)];
            let dilation = [1 + rng.below(2), 1 + rng.below(2)];
            let (h, w) = (
                kernel[0] * dilation[0] + rng.below(9),
                kernel[1] * dilation[1] + rng.below(9),
            );
            let same = rng.below(2) == 0;
            let dim = |size: usize, d: usize| -> (usize, usize) {
                let eff = (kernel[d] - 1) * dilation[d] + 1;
                if same {
                    let out = size.div_ceil(stride[d]);
                    let total = ((out - 1) * stride[d] + eff).saturating_sub(size);
                    (out, total / 2)
                } else {
                    ((size - eff) / stride[d] + 1, 0)
                }
            };
            let ((ho, pt), (wo, pl)) = (dim(h, 0), dim(w, 1));
            let n = 1 + rng.below(2);
            let p = ConvParams {
                input: [n, h, w, gin * groups],
                output: [n, ho, wo, gout * groups],
                kernel,
                stride,
                dilation,
                pad: [pt, pl],
                groups,
                activation: [
                    Activation::None,
                    Activation::Relu,
                    Activation::Relu6,
                    Activation::ReluN1To1,
                    Activation::Tanh,
                ][case % 5],
            };
            check(&p, &mut rng, &pool, case);
        }
    }

    /// Runs `p` on random operands over the whole channel range and over two ranges split at
    /// random, and checks both against [`reference`] (and each other, bit for bit).
    fn check(p: &ConvParams, rng: &mut Rng, pool: &ThreadPool, case: usize) {
        p.validate().expect("valid geometry");
        let [n, h, w, _] = p.input;
        let input = rng.values(n * h * w * p.input[3]);
        let weights = rng.values(p.output[3] * p.depth());
        let bias = rng.values(p.output[3]);
        let want = reference(&input, &weights, &bias, p);
        let packed = pack_conv_weights(&weights, p);
        let cout = p.output[3];
        let run = |out: &mut [f32], c0: usize, c1: usize| {
            conv2d(&input, &packed, Some(&bias), out, p, c0, c1, pool);
        };
        let mut got = vec![f32::NAN; want.len()];
        run(&mut got, 0, cout);
        let split = rng.below(cout + 1);
        let mut halves = vec![f32::NAN; want.len()];
        run(&mut halves, 0, split);
        run(&mut halves, split, cout);
        for (i, ((a, b), c)) in got.iter().zip(&halves).zip(&want).enumerate() {
            assert!(
                (a - c).abs() <= 1e-4 * c.abs().max(1.0),
                "case {case} {p:?} at {i}: {a} vs {c}"
            );
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "case {case}: split at {split} changes element {i}"
            );
        }
    }

    /// Stem shapes, few input channels (read straight from the input but for the border pixels),
    /// with SAME and VALID padding, strides 1 and 2, several images, one and two threads.
    #[test]
    fn stem_convolutions_match_reference() {
        let mut rng = Rng(0x57e3);
        let geometries = [
            // (input [h, w, cin], cout, kernel, stride, pad [top, left], output [h, w])
            ([17, 19, 3], 32, [3, 3], [2, 2], [0, 0], [9, 10]),
            ([16, 16, 3], 40, [3, 3], [2, 2], [1, 1], [8, 8]),
            ([23, 21, 3], 64, [7, 7], [2, 2], [3, 3], [12, 11]),
            ([9, 8, 4], 20, [3, 3], [1, 1], [1, 1], [9, 8]),
            ([6, 30, 1], 9, [5, 5], [1, 3], [2, 2], [6, 10]),
            ([5, 5, 2], 33, [5, 5], [1, 1], [0, 0], [1, 1]),
        ];
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            for (case, (input, cout, kernel, stride, pad, [ho, wo])) in
                geometries.into_iter().enumerate()
            {
                let [h, w, cin] = input;
                let p = ConvParams {
                    input: [2, h, w, cin],
                    output: [2, ho, wo, cout],
                    kernel,
                    stride,
                    dilation: [1, 1],
                    pad,
                    groups: 1,
                    activation: [Activation::Relu6, Activation::None, Activation::Relu][case % 3],
                };
                check(&p, &mut rng, &pool, case);
            }
        }
    }

    /// The shapes the diagonalwise refactorization produces: many groups of a few input channels,
    /// with `group_out` = 1 or 2 × `group_in` (depth multiplier 1 or 2) and channel ranges that
    /// cut through groups.
    #[test]
    fn many_small_groups_match_reference_over_any_channel_range() {
        let mut rng = Rng(0x5eed_d1a6);
        let pool = ThreadPool::new(2);
        for (groups, gin, mult, stride, dilation, pad) in [
            (16, 4, 1, 1, 1, 1),
            (8, 8, 2, 2, 1, 1),
            (4, 32, 1, 1, 2, 2),
            (12, 2, 2, 2, 1, 0),
            (1, 24, 1, 1, 1, 1),
        ] {
            let (h, w) = (9, 7);
            let eff = 2 * dilation + 1;
            let out = |size: usize| (size + 2 * pad - eff) / stride + 1;
            let p = ConvParams {
                input: [1, h, w, groups * gin],
                output: [1, out(h), out(w), groups * gin * mult],
                kernel: [3, 3],
                stride: [stride; 2],
                dilation: [dilation; 2],
                pad: [pad; 2],
                groups,
                activation: Activation::Relu6,
            };
            p.validate().expect("valid geometry");
            let cout = p.output[3];
            let input = rng.values(h * w * p.input[3]);
            let weights = rng.values(cout * 9 * gin);
            let bias = rng.values(cout);
            let want = reference(&input, &weights, &bias, &p);
            let packed = pack_conv_weights(&weights, &p);
            // Three ranges whose bounds fall inside groups.
            let cuts = [0, 1 + rng.below(cout - 1), cout];
            let cuts = [
                cuts[0],
                cuts[1],
                cuts[1] + rng.below(cout - cuts[1] + 1),
                cuts[2],
            ];
            let mut got = vec![f32::NAN; want.len()];
            for range in cuts.windows(2) {
                conv2d(
                    &input,
                    &packed,
                    Some(&bias),
                    &mut got,
                    &p,
                    range[0],
                    range[1],
                    &pool,
                );
            }
            for (i, (a, c)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - c).abs() <= 1e-4 * c.abs().max(1.0),
                    "{p:?} cuts {cuts:?} at {i}: {a} vs {c}"
                );
            }
        }
    }

    /// Late-layer shapes, more channels than pixels, which the threads split by channel.
    #[test]
    fn few_pixels_and_many_channels_match_reference() {
        let mut rng = Rng(0x51ab);
        let pool = ThreadPool::new(2);
        let geometries = [
            // (input [h, w, cin], cout, kernel, stride, pad, groups)
            ([2, 3, 20], 100, [1, 1], [1, 1], [0, 0], 1),
            ([3, 3, 8], 70, [3, 3], [1, 1], [1, 1], 1),
            ([4, 4, 6], 130, [3, 3], [2, 2], [0, 0], 2),
            ([1, 1, 40], 257, [1, 1], [1, 1], [0, 0], 1),
        ];
        for (case, (input, cout, kernel, stride, pad, groups)) in geometries.into_iter().enumerate()
        {
            let [h, w, cin] = input;
            let out = |size: usize, d: usize| (size + 2 * pad[d] - kernel[d]) / stride[d] + 1;
            let activation = [Activation::Relu6, Activation::None, Activation::Tanh][case % 3];
            let p = ConvParams {
                input: [2, h, w, cin],
                output: [2, out(h, 0), out(w, 1), cout],
                kernel,
                stride,
                dilation: [1, 1],
                pad,
                groups,
                activation,
            };
            check(&p, &mut rng, &pool, case);
        }
    }

    #[test]
    fn a_range_leaves_other_channels_untouched() {
        let p = ConvParams {
            input: [1, 4, 4, 3],
            output: [1, 4, 4, 8],
            kernel: [3, 3],
            stride: [1, 1],
            dilation: [1, 1],
            pad: [1, 1],
            groups: 1,
            activation: Activation::None,
        };
        let mut rng = Rng(7);
        let packed = pack_conv_weights(&rng.values(8 * 9 * 3), &p);
        let mut out = vec![-5.0; 4 * 4 * 8];
        conv2d(
            &rng.values(48),
            &packed,
            None,
            &mut out,
            &p,
            2,
            5,
            &ThreadPool::new(1),
        );
        for (i, v) in out.iter().enumerate() {
            assert_eq!(*v == -5.0, !(2..5).contains(&(i % 8)), "element {i}");
        }
    }

    #[test]
    fn plan_names_the_path_and_tiles_cover_every_pixel_and_channel() {
        let conv = |input: [usize; 4], cout: usize, k: usize, stride: usize, groups: usize| {
            let pad = k / 2;
            let out = |x: usize| (x + 2 * pad - k) / stride + 1;
            ConvParams {
                input,
                output: [input[0], out(input[1]), out(input[2]), cout],
                kernel: [k, k],
                stride: [stride, stride],
                dilation: [1, 1],
                pad: [pad, pad],
                groups,
                activation: Activation::None,
            }
        };
        let pointwise = conv([1, 14, 14, 64], 128, 1, 1, 1);
        let stem = conv([1, 32, 32, 3], 16, 3, 2, 1);
        let general = conv([1, 14, 14, 64], 128, 3, 1, 1);
        let grouped = conv([1, 14, 14, 64], 64, 3, 1, 8);
        assert_eq!(plan(&pointwise, 0, 128, 1).path, ConvPath::Pointwise);
        assert_eq!(plan(&stem, 0, 16, 1).path, ConvPath::Direct);
        assert_eq!(plan(&general, 0, 128, 1).path, ConvPath::Im2col);
        assert_eq!(plan(&grouped, 0, 64, 1).path, ConvPath::Im2col);
        // A stride-1 1x1 with padding is not pointwise.
        let padded = ConvParams {
            pad: [1, 1],
            output: [1, 16, 16, 128],
            ..pointwise.clone()
        };
        assert_eq!(plan(&padded, 0, 128, 1).path, ConvPath::Im2col);
        for p in [&pointwise, &stem, &general, &grouped] {
            let pixels = p.output[1] * p.output[2];
            let cout = p.output[3];
            for threads in [1, 2, 4] {
                for (c0, c1) in [(0, cout), (3, cout - 1), (0, 1)] {
                    let q = plan(p, c0, c1, threads);
                    assert!(q.tile * q.tiles >= pixels && q.tile * (q.tiles - 1) < pixels);
                    assert!(q.chunk * q.chunks >= c1 - c0 && q.chunk * (q.chunks - 1) < c1 - c0);
                    assert!(q.tiles * q.chunks >= threads.min(pixels), "{q:?}");
                }
            }
        }
        // 3x3 with padding 1 and stride 1: the first and last output columns touch the padding.
        assert_eq!(border_columns(&general), 2);
        assert_eq!(border_columns(&pointwise), 0);
    }
}
