//! Matrix multiplication against a right-hand side packed once, ahead of time, into the layout the
//! micro-kernels read: the GEMM behind convolutions and fully connected layers, whose weights are
//! constants.
//!
//! # Packed layout
//!
//! A row-major `K × N` matrix `B` is stored as `⌈N / NR⌉` column panels, one after the other. Panel
//! `p` holds columns `[p·NR, p·NR + NR)` as `K` rows of [`NR`] contiguous values, so that
//!
//! ```text
//! packed[p·K·NR + k·NR + j] = B[k][p·NR + j]   (0 where p·NR + j >= N)
//! ```
//!
//! and the whole buffer has [`packed_len`]`(K, N) = ⌈N / NR⌉·NR·K` values. The layout depends
//! only on `K`, `N` and [`NR`]; it is the same on every instruction set, so a compiler can store
//! the packed values as plain `f32` constants ([`PackedB::into_vec`]) and hand them back to
//! [`gemm_packed`] as a slice.
//!
//! # Kernels
//!
//! [`gemm_packed`] splits the rows into blocks whose left-hand side fits in L2, and within a
//! block walks the output columns one panel at a time, in `K` blocks of a few hundred packed rows
//! that stay in L1/L2 while every row tile of the block passes over them. Each (row tile, panel,
//! `K` block) is one call of a register-blocked micro-kernel, instantiated per instruction set
//! ([`Isa`]) and picked once per process; tile heights are balanced so that no tile is much
//! shorter than the others.
//!
//! | [`Isa`] | largest tiles (rows × columns) |
//! |---|---|
//! | `Avx512` | 14 × 32; 24 × 16 on half a panel; 2 × 64 or 2 × 128 for one or two rows |
//! | `Avx2Fma` | 6 × 16; 12 × 8 on 8 columns of a half panel; 2 × 32 for one or two rows |
//! | `Baseline` | up to 4 × 16, portable Rust left to the auto-vectoriser |
//!
//! Every output element is one fused (or, on baseline without FMA, unfused) multiply-add chain
//! over `k = 0, 1, …` in order, so on a given [`Isa`] a column's values do not depend on the
//! column range `[n0, n1)` it was computed in.

use super::simd::{Isa, BASELINE_HAS_FMA};
use std::ops::Range;
use std::sync::OnceLock;

/// Columns per packed panel: two AVX-512 vectors.
pub const NR: usize = 32;

/// Half a panel: one AVX-512 vector, and the column block of the AVX2 and baseline kernels.
const HALF: usize = NR / 2;

/// Depth of one `K` block: a panel slice of `KC × NR` values (64 KiB) stays in L1/L2 while every
/// row tile of a row block passes over it.
pub const KC: usize = 512;

/// Bytes of left-hand side per row block, sized to stay in L2 while every panel passes over it.
const A_BLOCK_BYTES: usize = 1 << 20;

/// Values in the packed form of a `k × n` matrix: `⌈n / NR⌉ · NR · k`.
pub fn packed_len(k: usize, n: usize) -> usize {
    n.div_ceil(NR) * NR * k
}

/// A `K × N` matrix in the panel layout described in the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
pub struct PackedB {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl PackedB {
    /// Wraps values already in the packed layout (for instance read back from a compiled model).
    ///
    /// Panics if `data.len() != packed_len(k, n)`.
    pub fn from_vec(k: usize, n: usize, data: Vec<f32>) -> Self {
        assert_eq!(
            data.len(),
            packed_len(k, n),
            "packed {k} × {n} matrix needs {} values",
            packed_len(k, n)
        );
        PackedB { k, n, data }
    }

    /// Rows `K` of the matrix.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns `N` of the matrix (before padding to a multiple of [`NR`]).
    pub fn n(&self) -> usize {
        self.n
    }

    /// The packed values, [`packed_len`]`(K, N)` of them.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// The packed values, for storing.
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }
}

/// Packs the row-major `k × n` matrix whose element `(r, c)` is `b[r * row_stride + c]` into the
/// panel layout.
///
/// Panics if the matrix does not fit in `b`.
pub fn pack_b(b: &[f32], k: usize, n: usize, row_stride: usize) -> PackedB {
    if k > 0 && n > 0 {
        assert!(
            (k - 1) * row_stride + n <= b.len(),
            "{k} × {n} matrix with row stride {row_stride} does not fit {} values",
            b.len()
        );
    }
    let mut data = vec![0.0; packed_len(k, n)];
    if k > 0 {
        for (p, panel) in data.chunks_exact_mut(k * NR).enumerate() {
            let (c0, c1) = (p * NR, n.min(p * NR + NR));
            for (r, row) in panel.chunks_exact_mut(NR).enumerate() {
                row[..c1 - c0].copy_from_slice(&b[r * row_stride + c0..r * row_stride + c1]);
            }
        }
    }
    PackedB { k, n, data }
}

/// What each output of [`gemm_packed`] starts from and what is applied to it before it is stored:
///
/// ```text
/// dst[r][c] = clamp((accumulate ? dst[r][c] : 0) + bias[c] + Σ_i a[r][i] · B[i][c])
/// ```
///
/// with `bias[c] = 0` without a bias and `clamp` the identity without a clamp. The bias and the
/// clamp are applied in the micro-kernels' registers, so a fused layer writes its output once.
#[derive(Debug, Clone, Copy, Default)]
pub struct Epilogue<'a> {
    /// Add to what `dst` holds rather than overwrite it.
    pub accumulate: bool,
    /// One value per column of the whole matrix (`n` of them; only `[n0, n1)` are read).
    pub bias: Option<&'a [f32]>,
    /// `(lo, hi)`: each final value becomes `min(hi, max(lo, v))`; NaN stays NaN.
    pub clamp: Option<(f32, f32)>,
}

impl Epilogue<'_> {
    /// Overwrite `dst` with the plain product.
    pub const OVERWRITE: Epilogue<'static> = Epilogue {
        accumulate: false,
        bias: None,
        clamp: None,
    };
    /// Add the plain product to `dst`.
    pub const ACCUMULATE: Epilogue<'static> = Epilogue {
        accumulate: true,
        bias: None,
        clamp: None,
    };
}

/// The widest instruction set this CPU supports, detected once.
fn detected_isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(Isa::detect)
}

/// `dst[r][c] = clamp((dst[r][c]) + bias[c] + Σ_i a[r][i] · B[i][c])` for rows `r < m` and columns
/// `c` in `[n0, n1)` (see [`Epilogue`]), with the best kernel for this CPU.
///
/// * `a` is row-major `m × k`: element `(r, i)` at `a[r * a_row_stride + i]`. Rows may overlap
///   (`a_row_stride < k`), for instance the sliding windows of a 1-D convolution.
/// * `b_packed` is a `k × n` matrix in the panel layout ([`pack_b`], [`PackedB::as_slice`]).
/// * `dst` element `(r, c)` is `dst[r * dst_row_stride + c]`; only columns `[n0, n1)` of rows
///   `0..m` are read (only with `epilogue.accumulate`) or written.
///
/// `n0` and `n1` need not be multiples of [`NR`]. Panics if `n0 > n1`, `n1 > n`,
/// `b_packed.len() != packed_len(k, n)`, `dst_row_stride < n1` (with `m > 1`), the bias has fewer
/// than `n1` values, or a view does not fit its slice.
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed(
    dst: &mut [f32],
    dst_row_stride: usize,
    a: &[f32],
    a_row_stride: usize,
    m: usize,
    k: usize,
    b_packed: &[f32],
    n: usize,
    n0: usize,
    n1: usize,
    epilogue: Epilogue<'_>,
) {
    gemm_packed_with_isa(
        detected_isa(),
        dst,
        dst_row_stride,
        a,
        a_row_stride,
        m,
        k,
        b_packed,
        n,
        n0,
        n1,
        epilogue,
    );
}

/// [`gemm_packed`] with the kernel for `isa`, which must be supported by this CPU.
///
/// Panics as [`gemm_packed`] does, and if `!isa.is_supported()`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed_with_isa(
    isa: Isa,
    dst: &mut [f32],
    dst_row_stride: usize,
    a: &[f32],
    a_row_stride: usize,
    m: usize,
    k: usize,
    b_packed: &[f32],
    n: usize,
    n0: usize,
    n1: usize,
    epilogue: Epilogue<'_>,
) {
    // SAFETY: `dst` is an exclusive borrow of `dst.len()` values.
    unsafe {
        gemm_packed_raw_with_isa(
            isa,
            dst.as_mut_ptr(),
            dst.len(),
            dst_row_stride,
            a,
            a_row_stride,
            m,
            k,
            0..k,
            b_packed,
            n,
            n0,
            n1,
            epilogue,
        )
    }
}

/// [`gemm_packed`] into `dst_len` values at `dst`, for tasks that write disjoint column ranges of
/// the same rows concurrently (which they could not do through overlapping `&mut` slices), over
/// the rows `depth` of `B` only: `a` has `depth.len()` columns, and the sum runs over
/// `i` in `depth` of `a[r][i - depth.start] · B[i][c]` (so a convolution can feed each kernel
/// row's taps straight from the input). Reads and writes only columns `[n0, n1)` of rows `0..m`.
///
/// Panics as [`gemm_packed`] does, with `dst_len` for the destination's length, and if
/// `depth.end > k` or `depth.start > depth.end`.
///
/// # Safety
/// `dst` must be valid for reads and writes of `dst_len` values, and nothing else may access
/// columns `[n0, n1)` of rows `0..m` of it while the call runs.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_packed_raw(
    dst: *mut f32,
    dst_len: usize,
    dst_row_stride: usize,
    a: &[f32],
    a_row_stride: usize,
    m: usize,
    k: usize,
    depth: Range<usize>,
    b_packed: &[f32],
    n: usize,
    n0: usize,
    n1: usize,
    epilogue: Epilogue<'_>,
) {
    // SAFETY: the caller's guarantee.
    unsafe {
        gemm_packed_raw_with_isa(
            detected_isa(),
            dst,
            dst_len,
            dst_row_stride,
            a,
            a_row_stride,
            m,
            k,
            depth,
            b_packed,
            n,
            n0,
            n1,
            epilogue,
        )
    }
}

/// [`gemm_packed_raw`] with the kernel for `isa`.
///
/// # Safety
/// As [`gemm_packed_raw`].
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_packed_raw_with_isa(
    isa: Isa,
    dst: *mut f32,
    dst_len: usize,
    dst_row_stride: usize,
    a: &[f32],
    a_row_stride: usize,
    m: usize,
    k: usize,
    depth: Range<usize>,
    b_packed: &[f32],
    n: usize,
    n0: usize,
    n1: usize,
    epilogue: Epilogue<'_>,
) {
    assert!(isa.is_supported(), "{isa:?} is not supported by this CPU");
    assert!(n0 <= n1 && n1 <= n, "column range {n0}..{n1} of {n}");
    assert_eq!(
        b_packed.len(),
        packed_len(k, n),
        "packed {k} × {n} matrix needs {} values",
        packed_len(k, n)
    );
    assert!(
        depth.start <= depth.end && depth.end <= k,
        "depth {depth:?} of {k}"
    );
    let (panel, k) = (k * NR, depth.len());
    if m == 0 || n0 == n1 {
        return;
    }
    assert!(
        m == 1 || dst_row_stride >= n1,
        "destination row stride {dst_row_stride} < {n1}"
    );
    assert!(
        (m - 1) * dst_row_stride + n1 <= dst_len,
        "{m} destination rows with stride {dst_row_stride} do not fit {dst_len} values"
    );
    if let Some(bias) = epilogue.bias {
        assert!(
            bias.len() >= n1,
            "bias of {} values for columns up to {n1}",
            bias.len()
        );
    }
    if k == 0 {
        for r in 0..m {
            // SAFETY: the assert above puts the row's columns [n0, n1) inside `dst`, and the
            // caller gives this call exclusive access to them.
            let row = unsafe {
                std::slice::from_raw_parts_mut(dst.add(r * dst_row_stride + n0), n1 - n0)
            };
            if !epilogue.accumulate {
                row.fill(0.0);
            }
            if let Some(bias) = epilogue.bias {
                row.iter_mut().zip(&bias[n0..n1]).for_each(|(d, b)| *d += b);
            }
            if let Some((lo, hi)) = epilogue.clamp {
                row.iter_mut().for_each(|d| *d = clamp(*d, lo, hi));
            }
        }
        return;
    }
    assert!(
        (m - 1) * a_row_stride + k <= a.len(),
        "{m} × {k} left-hand side with stride {a_row_stride} does not fit {} values",
        a.len()
    );
    let g = Gemm {
        dst,
        ldd: dst_row_stride,
        a: a.as_ptr(),
        lda: a_row_stride,
        k,
        b: b_packed[depth.start * NR..].as_ptr(),
        panel,
        accumulate: epilogue.accumulate,
        bias: epilogue.bias.map_or(std::ptr::null(), <[f32]>::as_ptr),
        clamp: epilogue.clamp,
    };
    let block_rows = (A_BLOCK_BYTES / (4 * k)).max(32);
    let blocks = m.div_ceil(block_rows);
    for blk in 0..blocks {
        let rows = blk * m / blocks..(blk + 1) * m / blocks;
        // SAFETY: the asserts above put rows `rows` (< m), columns [n0, n1) (<= n) and depth k
        // of every operand inside its slice, and `isa` is supported.
        unsafe {
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => x86::panels_avx512(&g, rows, n0..n1),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2Fma => x86::panels_avx2(&g, rows, n0..n1),
                _ => panels_baseline(&g, rows, n0..n1),
            }
        }
    }
}

/// One call's operands as raw pointers, after [`gemm_packed_with_isa`] has checked their bounds.
struct Gemm {
    dst: *mut f32,
    ldd: usize,
    a: *const f32,
    lda: usize,
    /// Depth of the product (rows of `B` it sums over).
    k: usize,
    /// The packed `B` at the first row of the depth range.
    b: *const f32,
    /// Values from one panel of `B` to the next.
    panel: usize,
    accumulate: bool,
    /// Null without a bias; otherwise `n1` values, column `c` at `bias + c`.
    bias: *const f32,
    clamp: Option<(f32, f32)>,
}

/// How one micro-kernel call starts and ends its accumulators.
#[derive(Clone, Copy)]
struct Ends {
    /// Start from `dst` (accumulating, or a later `K` block) rather than from zero.
    load: bool,
    /// Add the bias (the first `K` block of a call with a bias).
    bias: bool,
    /// Clamp before storing (the last `K` block of a call with a clamp).
    clamp: Option<(f32, f32)>,
}

impl Gemm {
    /// Calls `tile(rows, depth, ends, first)` for every `K` block (in order) and every tile of at
    /// most `mr` rows of `rows`, splitting `rows` into tiles of near-equal height. `ends` says how
    /// the tile's accumulators start and end; `first` marks the block's first tile, the one that
    /// brings the panel slice into cache.
    #[inline(always)]
    fn for_each_tile(
        &self,
        rows: Range<usize>,
        mr: usize,
        mut tile: impl FnMut(Range<usize>, Range<usize>, Ends, bool),
    ) {
        let tiles = rows.len().div_ceil(mr);
        let mut k0 = 0;
        while k0 < self.k {
            let depth = k0..self.k.min(k0 + KC);
            let ends = Ends {
                load: self.accumulate || k0 > 0,
                bias: k0 == 0 && !self.bias.is_null(),
                clamp: if depth.end == self.k {
                    self.clamp
                } else {
                    None
                },
            };
            for t in 0..tiles {
                let r0 = rows.start + t * rows.len() / tiles;
                let r1 = rows.start + (t + 1) * rows.len() / tiles;
                tile(r0..r1, depth.clone(), ends, t == 0);
            }
            k0 = depth.end;
        }
    }
}

/// `min(hi, max(lo, x))`, keeping NaN, as the vector kernels compute it.
#[inline(always)]
fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    if x.is_nan() {
        x
    } else {
        x.max(lo).min(hi)
    }
}

/// Expands to a `match` on a tile height with one arm per listed height, each evaluating `$body`
/// with the constant `$mr` bound to that height.
macro_rules! by_height {
    ($h:expr, [$($n:literal)*], |$mr:ident| $body:expr) => {
        match $h {
            $($n => {
                const $mr: usize = $n;
                $body
            })*
            h => unreachable!("tile height {h}"),
        }
    };
}

/// Rows per baseline tile.
const BASELINE_MR: usize = 4;

/// Columns `cols` of rows `rows` with the portable kernel, one tile row per half panel.
///
/// # Safety
/// Rows `rows`, columns `cols` and depth `g.k` must lie inside the operands `g` points to, and
/// `cols` inside the packed matrix's columns.
unsafe fn panels_baseline(g: &Gemm, rows: Range<usize>, cols: Range<usize>) {
    for q in cols.start / HALF..cols.end.div_ceil(HALF) {
        let first = q * HALF;
        let live = cols.start.max(first) - first..cols.end.min(first + HALF) - first;
        g.for_each_tile(rows.clone(), BASELINE_MR, |r, d, ends, _| {
            let (h, kc) = (r.len(), d.len());
            // SAFETY (slices below): the caller guarantees rows `r`, depth `d` and columns
            // `first + live` are inside the operands, and half panel `q` inside the packed matrix.
            let a = unsafe {
                std::slice::from_raw_parts(g.a.add(r.start * g.lda + d.start), (h - 1) * g.lda + kc)
            };
            let b = unsafe {
                std::slice::from_raw_parts(
                    g.b.add((q / 2) * g.panel + d.start * NR + (q % 2) * HALF),
                    (kc - 1) * NR + HALF,
                )
            };
            let c = unsafe {
                std::slice::from_raw_parts_mut(
                    g.dst.add(r.start * g.ldd + first + live.start),
                    (h - 1) * g.ldd + live.len(),
                )
            };
            // SAFETY: with a bias, the caller guarantees columns `first + live` are inside it.
            let bias = ends.bias.then(|| unsafe {
                std::slice::from_raw_parts(g.bias.add(first + live.start), live.len())
            });
            let t = Tile {
                a,
                lda: g.lda,
                b,
                kc,
                c,
                ldc: g.ldd,
                live: live.clone(),
                load: ends.load,
                bias,
                clamp: ends.clamp,
            };
            by_height!(h, [1 2 3 4], |MR| tile_baseline::<MR>(t));
        });
    }
}

/// The operands of one baseline micro-kernel call.
struct Tile<'a> {
    /// `MR × kc` left-hand side with row stride `lda`.
    a: &'a [f32],
    lda: usize,
    /// `kc` rows of a half panel, [`NR`] apart.
    b: &'a [f32],
    kc: usize,
    /// The destination, starting at column `live.start` of the half panel.
    c: &'a mut [f32],
    ldc: usize,
    /// Columns of the half panel to write.
    live: Range<usize>,
    load: bool,
    /// The bias of the live columns, to add first.
    bias: Option<&'a [f32]>,
    clamp: Option<(f32, f32)>,
}

/// `c (+)= a · b` for an `MR × HALF` tile, in portable Rust.
#[inline(always)]
fn tile_baseline<const MR: usize>(t: Tile<'_>) {
    let mut acc = [[0.0f32; HALF]; MR];
    if t.load {
        for (r, acc) in acc.iter_mut().enumerate() {
            let row = &t.c[r * t.ldc..r * t.ldc + t.live.len()];
            acc[t.live.clone()].copy_from_slice(row);
        }
    }
    if let Some(bias) = t.bias {
        for acc in acc.iter_mut() {
            for (acc, &b) in acc[t.live.clone()].iter_mut().zip(bias) {
                *acc = if t.load { *acc + b } else { b };
            }
        }
    }
    let rows: [&[f32]; MR] = std::array::from_fn(|r| &t.a[r * t.lda..r * t.lda + t.kc]);
    for (i, b) in t.b.chunks(NR).take(t.kc).enumerate() {
        let b = &b[..HALF];
        for (acc, a) in acc.iter_mut().zip(&rows) {
            let x = a[i];
            for (acc, &y) in acc.iter_mut().zip(b) {
                *acc = if BASELINE_HAS_FMA {
                    x.mul_add(y, *acc)
                } else {
                    x * y + *acc
                };
            }
        }
    }
    if let Some((lo, hi)) = t.clamp {
        for acc in acc.iter_mut() {
            acc.iter_mut().for_each(|x| *x = clamp(*x, lo, hi));
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        t.c[r * t.ldc..r * t.ldc + t.live.len()].copy_from_slice(&acc[t.live.clone()]);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Ends, Gemm, HALF, NR};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Depth steps per iteration of the micro-kernels' inner loop.
    const UNROLL: usize = 4;
    /// How far ahead (in packed rows) the first row tile of a `K` block prefetches the panel,
    /// which it is the first to read from beyond L2.
    const PREFETCH_ROWS: usize = 32;
    /// Rows per AVX-512 tile covering a whole panel (two vectors per row, 28 accumulators).
    const MR_512: usize = 14;
    /// Rows per AVX-512 tile covering half a panel (one vector per row).
    const MR_512_HALF: usize = 24;
    /// Rows up to which AVX-512 tiles cover two or four panels (up to 16 accumulators): enough
    /// independent accumulators to hide the FMA latency, and several streams of the packed
    /// matrix in flight.
    const MR_512_GROUP: usize = 2;
    /// Rows per AVX2 tile covering 16 columns (two vectors per row, 12 accumulators).
    const MR_256: usize = 6;
    /// Rows per AVX2 tile covering 8 columns.
    const MR_256_HALF: usize = 12;
    /// Rows up to which AVX2 tiles cover a whole panel (up to 8 accumulators).
    const MR_256_GROUP: usize = 2;

    /// Columns `cols` of rows `rows` with AVX-512 kernels: one tile row covers a whole panel, or
    /// half of one when the panel's columns in `cols` lie within one half, or two or four panels
    /// when `rows` is short enough to leave registers for them.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; rows `rows`, columns `cols` and depth `g.k` must lie inside
    /// the operands `g` points to, and `cols` inside the packed matrix's columns.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn panels_avx512(g: &Gemm, rows: Range<usize>, cols: Range<usize>) {
        let (mut p, end) = (cols.start / NR, cols.end.div_ceil(NR));
        while p < end {
            let lanes = |v: usize| lane_mask(p * NR + HALF * v, &cols);
            // Groups hold only panels that end inside `cols`: the kernel reads all their values.
            let full = cols.end / NR;
            if rows.len() <= MR_512_GROUP && p + 2 <= full {
                // SAFETY: the group's panels are below `end`, inside the packed matrix; the
                // caller guarantees the rest.
                unsafe {
                    if p + 4 <= full {
                        tiles_avx512::<8>(
                            g,
                            rows.clone(),
                            p,
                            0,
                            [0, 1, 2, 3, 4, 5, 6, 7].map(lanes),
                        );
                        p += 4;
                    } else {
                        tiles_avx512::<4>(g, rows.clone(), p, 0, [0, 1, 2, 3].map(lanes));
                        p += 2;
                    }
                }
                continue;
            }
            let (lo, hi) = (lanes(0), lanes(1));
            // SAFETY: as above, for panel `p`.
            unsafe {
                if hi == 0 {
                    tiles_avx512::<1>(g, rows.clone(), p, 0, [lo]);
                } else if lo == 0 {
                    tiles_avx512::<1>(g, rows.clone(), p, HALF, [hi]);
                } else {
                    tiles_avx512::<2>(g, rows.clone(), p, 0, [lo, hi]);
                }
            }
            p += 1;
        }
    }

    /// The lanes `j < 16` with `first + j` in `cols`.
    fn lane_mask(first: usize, cols: &Range<usize>) -> u16 {
        let lo = cols.start.clamp(first, first + HALF) - first;
        let hi = cols.end.clamp(first, first + HALF) - first;
        ((1u32 << hi) - (1u32 << lo)) as u16
    }

    /// Rows `rows` of the `16·NV` columns starting at column `off` of panel `p` (vectors past the
    /// first two continue into panels `p + 1, …`), writing the lanes in `masks`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; the panels must lie inside the packed matrix, rows `rows`
    /// and depth `g.k` inside the operands, and the masked columns inside `dst`.
    #[target_feature(enable = "avx512f")]
    unsafe fn tiles_avx512<const NV: usize>(
        g: &Gemm,
        rows: Range<usize>,
        p: usize,
        off: usize,
        masks: [u16; NV],
    ) {
        let mr = match NV {
            1 => MR_512_HALF,
            2 => MR_512,
            _ => MR_512_GROUP,
        };
        g.for_each_tile(rows, mr, |r, d, ends, first| {
            // SAFETY: row `r.start`, depth `d.start` and panel `p` are inside the operands, and
            // column `p·NR + off` is at or before a masked column of each row, so these pointers
            // stay inside their allocations; the kernel reads and writes only rows `r`, depth
            // `d`, the panels' values and the masked columns.
            unsafe {
                let a = g.a.add(r.start * g.lda + d.start);
                let b = g.b.add(p * g.panel + d.start * NR + off);
                let c = g.dst.add(r.start * g.ldd + p * NR + off);
                let bias = g.bias.wrapping_add(p * NR + off);
                let (lda, ldc, panel, kc) = (g.lda, g.ldd, g.panel, d.len());
                match NV {
                    1 => by_height!(
                        r.len(),
                        [1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24],
                        |MR| tile_avx512::<MR, NV>(
                            a, lda, b, panel, kc, c, ldc, masks, bias, &ends, first
                        )
                    ),
                    2 => by_height!(
                        r.len(),
                        [1 2 3 4 5 6 7 8 9 10 11 12 13 14],
                        |MR| tile_avx512::<MR, NV>(
                            a, lda, b, panel, kc, c, ldc, masks, bias, &ends, first
                        )
                    ),
                    _ => by_height!(
                        r.len(),
                        [1 2],
                        |MR| tile_avx512::<MR, NV>(
                            a, lda, b, panel, kc, c, ldc, masks, bias, &ends, first
                        )
                    ),
                }
            }
        });
    }

    /// `c (+)= a · b` for an `MR × 16·NV` tile. `a` is `MR × kc` with row stride `lda`; `b` is
    /// `kc` rows [`NR`] apart of vectors whose `v`-th starts at `(v / 2)·panel + (v % 2)·16`
    /// (so consecutive panels when `panel` is a panel's length); `c` has row stride `ldc` and
    /// vector `v` of each of its rows starts at `16·v` and is read (when `load`) and written only
    /// in the lanes set in `masks[v]`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; the `a` and `b` elements named above and the masked `c`
    /// lanes must be inside their allocations.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_avx512<const MR: usize, const NV: usize>(
        a: *const f32,
        lda: usize,
        b: *const f32,
        panel: usize,
        kc: usize,
        c: *mut f32,
        ldc: usize,
        masks: [u16; NV],
        bias: *const f32,
        ends: &Ends,
        first: bool,
    ) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        if ends.load {
            for (r, acc) in acc.iter_mut().enumerate() {
                for (v, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_maskz_loadu_ps(masks[v], c.wrapping_add(r * ldc + 16 * v));
                }
            }
        }
        if ends.bias {
            for v in 0..NV {
                let b = _mm512_maskz_loadu_ps(masks[v], bias.wrapping_add(16 * v));
                for acc in acc.iter_mut() {
                    acc[v] = if ends.load {
                        _mm512_add_ps(acc[v], b)
                    } else {
                        b
                    };
                }
            }
        }
        // One step of depth: `acc += a[·][i] ⊗ b[i]` at `a = a₀ + i`, `b = b₀ + i·NR`.
        #[inline(always)]
        unsafe fn step<const MR: usize, const NV: usize>(
            acc: &mut [[__m512; NV]; MR],
            a: *const f32,
            lda: usize,
            b: *const f32,
            panel: usize,
        ) {
            let mut y = [_mm512_setzero_ps(); NV];
            for (v, y) in y.iter_mut().enumerate() {
                *y = _mm512_loadu_ps(b.add((v / 2) * panel + (v % 2) * 16));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*a.add(r * lda));
                for (acc, &y) in acc.iter_mut().zip(&y) {
                    *acc = _mm512_fmadd_ps(x, y, *acc);
                }
            }
        }
        let (mut a, mut b) = (a, b);
        for _ in 0..kc / UNROLL {
            if first {
                for u in 0..UNROLL {
                    for v in 0..NV {
                        let ahead = (PREFETCH_ROWS + u) * NR + (v / 2) * panel + (v % 2) * 16;
                        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(ahead) as *const i8);
                    }
                }
            }
            for u in 0..UNROLL {
                step(&mut acc, a.add(u), lda, b.add(u * NR), panel);
            }
            a = a.wrapping_add(UNROLL);
            b = b.wrapping_add(UNROLL * NR);
        }
        for _ in 0..kc % UNROLL {
            step(&mut acc, a, lda, b, panel);
            a = a.wrapping_add(1);
            b = b.wrapping_add(NR);
        }
        if let Some((lo, hi)) = ends.clamp {
            let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
            // `max` and `min` return their second operand when either is NaN.
            for acc in acc.iter_mut() {
                for acc in acc.iter_mut() {
                    *acc = _mm512_min_ps(hi, _mm512_max_ps(lo, *acc));
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (v, &acc) in acc.iter().enumerate() {
                _mm512_mask_storeu_ps(c.wrapping_add(r * ldc + 16 * v), masks[v], acc);
            }
        }
    }

    /// Columns `cols` of rows `rows` with AVX2 kernels: one tile row covers half a panel, or 8
    /// columns when the half's columns in `cols` lie within one 8-column group, or a whole panel
    /// when `rows` is short enough to leave registers for it.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; rows `rows`, columns `cols` and depth `g.k` must lie
    /// inside the operands `g` points to, and `cols` inside the packed matrix's columns.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn panels_avx2(g: &Gemm, rows: Range<usize>, cols: Range<usize>) {
        let (mut q, end) = (cols.start / HALF, cols.end.div_ceil(HALF));
        while q < end {
            // Live lanes of the `v`-th 8-column group from the start of half panel `q`.
            let lanes = |v: usize| {
                let first = q * HALF + 8 * v;
                let (lo, hi) = (
                    cols.start.clamp(first, first + 8),
                    cols.end.clamp(first, first + 8),
                );
                (lo - first, hi - first)
            };
            let (p, half) = (q / 2, (q % 2) * HALF);
            // SAFETY: panel `p` is inside the packed matrix (as are the columns read by a whole
            // panel tile, which requires the panel to end inside `cols`); the caller guarantees
            // the rest.
            unsafe {
                if rows.len() <= MR_256_GROUP && half == 0 && (p + 1) * NR <= cols.end {
                    tiles_avx2::<4>(g, rows.clone(), p, 0, [0, 1, 2, 3].map(lanes));
                    q += 2;
                    continue;
                }
                let (first, second) = (lanes(0), lanes(1));
                if second.0 == second.1 {
                    tiles_avx2::<1>(g, rows.clone(), p, half, [first]);
                } else if first.0 == first.1 {
                    tiles_avx2::<1>(g, rows.clone(), p, half + 8, [second]);
                } else {
                    tiles_avx2::<2>(g, rows.clone(), p, half, [first, second]);
                }
            }
            q += 1;
        }
    }

    /// Rows `rows` of the `8·NV` columns starting at column `off` of panel `p` (`off + 8·NV <=
    /// NR`), writing lanes `lanes[v].0..lanes[v].1` of each vector `v`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; the panel must lie inside the packed matrix, rows
    /// `rows` and depth `g.k` inside the operands, and the live columns inside `dst`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tiles_avx2<const NV: usize>(
        g: &Gemm,
        rows: Range<usize>,
        p: usize,
        off: usize,
        lanes: [(usize, usize); NV],
    ) {
        let mr = match NV {
            1 => MR_256_HALF,
            2 => MR_256,
            _ => MR_256_GROUP,
        };
        g.for_each_tile(rows, mr, |r, d, ends, first| {
            // SAFETY: as in `tiles_avx512`.
            unsafe {
                let a = g.a.add(r.start * g.lda + d.start);
                let b = g.b.add(p * g.panel + d.start * NR + off);
                let c = g.dst.add(r.start * g.ldd + p * NR + off);
                let bias = g.bias.wrapping_add(p * NR + off);
                let (lda, ldc, kc) = (g.lda, g.ldd, d.len());
                match NV {
                    1 => by_height!(
                        r.len(),
                        [1 2 3 4 5 6 7 8 9 10 11 12],
                        |MR| tile_avx2::<MR, NV>(a, lda, b, kc, c, ldc, lanes, bias, &ends, first)
                    ),
                    2 => by_height!(
                        r.len(),
                        [1 2 3 4 5 6],
                        |MR| tile_avx2::<MR, NV>(a, lda, b, kc, c, ldc, lanes, bias, &ends, first)
                    ),
                    _ => by_height!(
                        r.len(),
                        [1 2],
                        |MR| tile_avx2::<MR, NV>(a, lda, b, kc, c, ldc, lanes, bias, &ends, first)
                    ),
                }
            }
        });
    }

    /// `c (+)= a · b` for an `MR × 8·NV` tile, as [`tile_avx512`] with 8-lane vectors (vector `v`
    /// at `8·v` in `b` and `c`, `NV <= 4`); vector `v` of each `c` row is read (when `load`) and
    /// written only in lanes `lanes[v].0..lanes[v].1`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; the `a` and `b` elements and the live `c` lanes must be
    /// inside their allocations.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_avx2<const MR: usize, const NV: usize>(
        a: *const f32,
        lda: usize,
        b: *const f32,
        kc: usize,
        c: *mut f32,
        ldc: usize,
        lanes: [(usize, usize); NV],
        bias: *const f32,
        ends: &Ends,
        first: bool,
    ) {
        let index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mut masks = [_mm256_setzero_si256(); NV];
        let mut full = [false; NV];
        for v in 0..NV {
            let (lo, hi) = lanes[v];
            let at_least_lo = _mm256_cmpgt_epi32(index, _mm256_set1_epi32(lo as i32 - 1));
            let below_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi as i32), index);
            masks[v] = _mm256_and_si256(at_least_lo, below_hi);
            full[v] = lo == 0 && hi == 8;
        }
        let mut acc = [[_mm256_setzero_ps(); NV]; MR];
        if ends.load {
            for (r, acc) in acc.iter_mut().enumerate() {
                for (v, acc) in acc.iter_mut().enumerate() {
                    let p = c.wrapping_add(r * ldc + 8 * v);
                    *acc = if full[v] {
                        _mm256_loadu_ps(p)
                    } else {
                        _mm256_maskload_ps(p, masks[v])
                    };
                }
            }
        }
        if ends.bias {
            for v in 0..NV {
                let p = bias.wrapping_add(8 * v);
                let b = if full[v] {
                    _mm256_loadu_ps(p)
                } else {
                    _mm256_maskload_ps(p, masks[v])
                };
                for acc in acc.iter_mut() {
                    acc[v] = if ends.load {
                        _mm256_add_ps(acc[v], b)
                    } else {
                        b
                    };
                }
            }
        }
        // One step of depth: `acc += a[·][i] ⊗ b[i]` at `a = a₀ + i`, `b = b₀ + i·NR`.
        #[inline(always)]
        unsafe fn step<const MR: usize, const NV: usize>(
            acc: &mut [[__m256; NV]; MR],
            a: *const f32,
            lda: usize,
            b: *const f32,
        ) {
            let mut y = [_mm256_setzero_ps(); NV];
            for (v, y) in y.iter_mut().enumerate() {
                *y = _mm256_loadu_ps(b.add(8 * v));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_set1_ps(*a.add(r * lda));
                for (acc, &y) in acc.iter_mut().zip(&y) {
                    *acc = _mm256_fmadd_ps(x, y, *acc);
                }
            }
        }
        let (mut a, mut b) = (a, b);
        for _ in 0..kc / UNROLL {
            if first {
                for u in 0..UNROLL {
                    for v in (0..NV).step_by(2) {
                        let ahead = (PREFETCH_ROWS + u) * NR + 8 * v;
                        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(ahead) as *const i8);
                    }
                }
            }
            for u in 0..UNROLL {
                step(&mut acc, a.add(u), lda, b.add(u * NR));
            }
            a = a.wrapping_add(UNROLL);
            b = b.wrapping_add(UNROLL * NR);
        }
        for _ in 0..kc % UNROLL {
            step(&mut acc, a, lda, b);
            a = a.wrapping_add(1);
            b = b.wrapping_add(NR);
        }
        if let Some((lo, hi)) = ends.clamp {
            let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
            // `max` and `min` return their second operand when either is NaN.
            for acc in acc.iter_mut() {
                for acc in acc.iter_mut() {
                    *acc = _mm256_min_ps(hi, _mm256_max_ps(lo, *acc));
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (v, &acc) in acc.iter().enumerate() {
                let p = c.wrapping_add(r * ldc + 8 * v);
                if full[v] {
                    _mm256_storeu_ps(p, acc);
                } else {
                    _mm256_maskstore_ps(p, masks[v], acc);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// `Σ_i a[r][i] · b[i][c]` in f64, row-major `m × n`.
    fn naive(a: &[f32], lda: usize, b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for r in 0..m {
            for c in 0..n {
                out[r * n + c] = (0..k)
                    .map(|i| a[r * lda + i] as f64 * b[i * n + c] as f64)
                    .sum();
            }
        }
        out
    }

    fn supported_isas() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
    }

    /// Random index below `n`.
    fn below(rng: &mut Rng, n: usize) -> usize {
        (rng.next_u64() % n as u64) as usize
    }

    /// One product to check: its shape, the column range, the row strides of `a` and `dst`, and
    /// the epilogue (with `bias`, a random one).
    #[derive(Debug, Clone, Copy)]
    struct Case {
        m: usize,
        k: usize,
        n: usize,
        n0: usize,
        n1: usize,
        accumulate: bool,
        lda: usize,
        ldd: usize,
        bias: bool,
        clamp: Option<(f32, f32)>,
    }

    /// Clamps the epilogue tests use: ReLU, ReLU6, [-1, 1], and one that cuts most values.
    const CLAMPS: [Option<(f32, f32)>; 5] = [
        None,
        Some((0.0, f32::INFINITY)),
        Some((0.0, 6.0)),
        Some((-1.0, 1.0)),
        Some((-0.25, 0.5)),
    ];

    impl Case {
        /// A case whose rows of `a` and `dst` are `pad` values longer than needed.
        fn new(
            m: usize,
            k: usize,
            n: usize,
            cols: Range<usize>,
            accumulate: bool,
            pad: usize,
        ) -> Self {
            Case {
                m,
                k,
                n,
                n0: cols.start,
                n1: cols.end,
                accumulate,
                lda: k + pad,
                ldd: n + pad,
                bias: false,
                clamp: None,
            }
        }

        /// The same case with a random bias (or none) and `clamp`.
        fn with_epilogue(self, bias: bool, clamp: Option<(f32, f32)>) -> Self {
            Case {
                bias,
                clamp,
                ..self
            }
        }

        /// Runs the case on `isa` with random operands and checks every destination value:
        /// columns `[n0, n1)` of rows `0..m` against [`naive`], everything else untouched.
        fn check(self, isa: Isa, rng: &mut Rng) {
            let Case {
                m,
                k,
                n,
                n0,
                n1,
                accumulate,
                lda,
                ldd,
                bias,
                clamp,
            } = self;
            let a = rng.uniform(m.saturating_sub(1) * lda + k, 1.0);
            let b = rng.uniform(k * n, 1.0);
            let bias = bias.then(|| rng.uniform(n, 4.0));
            let packed = pack_b(&b, k, n, n);
            let len = m.saturating_sub(1) * ldd + ldd;
            let mut dst = if accumulate {
                rng.uniform(len, 1.0)
            } else {
                vec![1234.5; len]
            };
            let before = dst.clone();
            gemm_packed_with_isa(
                isa,
                &mut dst,
                ldd,
                &a,
                lda,
                m,
                k,
                packed.as_slice(),
                n,
                n0,
                n1,
                Epilogue {
                    accumulate,
                    bias: bias.as_deref(),
                    clamp,
                },
            );
            let want = naive(&a, lda, &b, m, k, n);
            for (i, (&got, &old)) in dst.iter().zip(&before).enumerate() {
                let (r, c) = (i / ldd, i % ldd);
                if r < m && (n0..n1).contains(&c) {
                    let start = if accumulate { old as f64 } else { 0.0 };
                    let bias = bias.as_ref().map_or(0.0, |b| b[c] as f64);
                    let mut expected = want[r * n + c] + start + bias;
                    if let Some((lo, hi)) = clamp {
                        expected = expected.max(lo as f64).min(hi as f64);
                    }
                    // Relative to the magnitude of the terms summed.
                    let scale: f64 = (0..k)
                        .map(|i| (a[r * lda + i] as f64 * b[i * n + c] as f64).abs())
                        .sum::<f64>()
                        + start.abs()
                        + bias.abs();
                    assert!(
                        (got as f64 - expected).abs() <= 1e-4 * scale.max(1.0),
                        "{isa:?} {self:?} at ({r}, {c}): {got} vs {expected}"
                    );
                } else {
                    assert_eq!(
                        got.to_bits(),
                        old.to_bits(),
                        "{isa:?} {self:?} wrote ({r}, {c})"
                    );
                }
            }
        }
    }

    #[test]
    fn packed_layout_matches_the_documented_formula() {
        let (k, n, stride) = (3, 37, 40);
        let b: Vec<f32> = (0..(k - 1) * stride + n).map(|i| i as f32).collect();
        let packed = pack_b(&b, k, n, stride);
        assert_eq!(packed.as_slice().len(), packed_len(k, n));
        assert_eq!(packed_len(k, n), 2 * NR * k);
        for p in 0..n.div_ceil(NR) {
            for r in 0..k {
                for j in 0..NR {
                    let c = p * NR + j;
                    let want = if c < n { b[r * stride + c] } else { 0.0 };
                    assert_eq!(packed.as_slice()[p * k * NR + r * NR + j], want);
                }
            }
        }
        let round_trip = PackedB::from_vec(k, n, packed.clone().into_vec());
        assert_eq!(round_trip, packed);
        assert_eq!((round_trip.k(), round_trip.n()), (k, n));
    }

    #[test]
    fn every_isa_matches_naive_on_edge_shapes() {
        let mut rng = Rng::new(1);
        let sizes = [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65];
        for isa in supported_isas() {
            for &m in &[1, 2, 5, 6, 7, 12, 13, 14, 15, 24, 25, 29] {
                for &n in &sizes {
                    let k = sizes[below(&mut rng, sizes.len())];
                    Case::new(m, k, n, 0..n, false, 0).check(isa, &mut rng);
                    Case::new(m, k, n, 0..n, true, 3).check(isa, &mut rng);
                }
            }
            // Short left-hand sides, whose tiles span several panels.
            for m in [1, 2, 3] {
                let n = 9 * NR + 5;
                for (n0, n1) in [(0, n), (5, n - 3), (NR + 7, 6 * NR), (HALF, 5 * NR + HALF)] {
                    Case::new(m, 37, n, n0..n1, m == 2, 1).check(isa, &mut rng);
                }
            }
            // Depths around the K block.
            for k in [KC - 1, KC, KC + 1, 2 * KC + 5] {
                Case::new(17, k, 40, 3..39, true, 1).check(isa, &mut rng);
                Case::new(3, k, 8, 0..8, false, 0).check(isa, &mut rng);
            }
            // More than one row block.
            let k = 2100;
            assert!(A_BLOCK_BYTES / (4 * k) < 130);
            Case::new(130, k, 40, 3..39, true, 0).check(isa, &mut rng);
            // Overlapping rows of `a`: the windows of a 1-D convolution, 4 taps of 3 channels.
            let windows = Case {
                lda: 3,
                ..Case::new(50, 12, 45, 0..45, true, 0)
            };
            windows.check(isa, &mut rng);
        }
    }

    #[test]
    fn every_isa_matches_naive_on_random_shapes_and_column_ranges() {
        let mut rng = Rng::new(0x5eed);
        for isa in supported_isas() {
            for _ in 0..150 {
                let pick = |rng: &mut Rng| match below(rng, 4) {
                    0 => 1 + below(rng, 4),
                    1 => [NR - 1, NR, NR + 1, HALF - 1, HALF + 1][below(rng, 5)],
                    _ => 1 + below(rng, 300),
                };
                let (m, k, n) = (pick(&mut rng), pick(&mut rng), pick(&mut rng));
                let (n0, n1) = match below(&mut rng, 5) {
                    0 => (0, n),
                    1 => {
                        let c = below(&mut rng, n);
                        (c, c + 1)
                    }
                    2 => {
                        let c = below(&mut rng, n + 1);
                        (c, c)
                    }
                    _ => {
                        let (x, y) = (below(&mut rng, n + 1), below(&mut rng, n + 1));
                        (x.min(y), x.max(y))
                    }
                };
                let accumulate = below(&mut rng, 2) == 0;
                let pad = [0, 1, 5][below(&mut rng, 3)];
                let (bias, clamp) = (below(&mut rng, 2) == 0, CLAMPS[below(&mut rng, 5)]);
                Case::new(m, k, n, n0..n1, accumulate, pad)
                    .with_epilogue(bias, clamp)
                    .check(isa, &mut rng);
            }
        }
    }

    #[test]
    fn every_isa_applies_each_epilogue_on_edge_shapes() {
        let mut rng = Rng::new(17);
        for isa in supported_isas() {
            for clamp in CLAMPS {
                for bias in [false, true] {
                    for accumulate in [false, true] {
                        for (m, k, n, cols) in [
                            (29, 33, 65, 0..65),
                            (13, 9, 40, 3..39),
                            (2, 37, 9 * NR + 5, 5..9 * NR),
                            (1, 20, 4 * NR, 0..4 * NR),
                            (7, 5, 17, 16..17),
                            (3, 2 * KC + 5, 40, 3..39),
                        ] {
                            Case::new(m, k, n, cols, accumulate, 1)
                                .with_epilogue(bias, clamp)
                                .check(isa, &mut rng);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn zero_depth_applies_the_epilogue_to_the_range() {
        for isa in supported_isas() {
            let bias = [1.0, -2.0, 3.0, 8.0, 5.0];
            let mut dst = vec![2.0; 2 * 5];
            let epilogue = Epilogue {
                accumulate: true,
                bias: Some(&bias),
                clamp: Some((0.0, 6.0)),
            };
            gemm_packed_with_isa(isa, &mut dst, 5, &[], 0, 2, 0, &[], 5, 1, 4, epilogue);
            assert_eq!(dst, [2.0, 0.0, 5.0, 6.0, 2.0, 2.0, 0.0, 5.0, 6.0, 2.0]);
        }
    }

    #[test]
    fn zero_depth_clears_or_keeps_the_range() {
        for isa in supported_isas() {
            let mut dst = vec![2.0; 2 * 5];
            gemm_packed_with_isa(
                isa,
                &mut dst,
                5,
                &[],
                0,
                2,
                0,
                &[],
                5,
                1,
                3,
                Epilogue::ACCUMULATE,
            );
            assert!(dst.iter().all(|&v| v == 2.0));
            gemm_packed_with_isa(
                isa,
                &mut dst,
                5,
                &[],
                0,
                2,
                0,
                &[],
                5,
                1,
                3,
                Epilogue::OVERWRITE,
            );
            for (i, &v) in dst.iter().enumerate() {
                assert_eq!(v == 0.0, (1..3).contains(&(i % 5)), "element {i}");
            }
        }
    }

    #[test]
    fn a_column_does_not_depend_on_the_range_it_is_computed_in() {
        let mut rng = Rng::new(9);
        for (m, k, n) in [(37, 300, 75), (2, 300, 200)] {
            let a = rng.uniform(m * k, 1.0);
            let packed = pack_b(&rng.uniform(k * n, 1.0), k, n, n);
            for isa in supported_isas() {
                let run = |dst: &mut [f32], cols: Range<usize>| {
                    let b = packed.as_slice();
                    gemm_packed_with_isa(
                        isa,
                        dst,
                        n,
                        &a,
                        k,
                        m,
                        k,
                        b,
                        n,
                        cols.start,
                        cols.end,
                        Epilogue::OVERWRITE,
                    );
                };
                let mut whole = vec![0.0; m * n];
                run(&mut whole, 0..n);
                for split in [1, 15, 16, 17, 40, 74, 130].into_iter().filter(|&s| s < n) {
                    let mut parts = vec![0.0; m * n];
                    run(&mut parts, 0..split);
                    run(&mut parts, split..n);
                    assert!(
                        whole
                            .iter()
                            .zip(&parts)
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{isa:?} {m}×{k}×{n} split at {split}"
                    );
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "column range")]
    fn a_range_past_n_panics() {
        let packed = pack_b(&[1.0; 4], 2, 2, 2);
        gemm_packed(
            &mut [0.0; 4],
            2,
            &[1.0; 4],
            2,
            2,
            2,
            packed.as_slice(),
            2,
            1,
            3,
            Epilogue::OVERWRITE,
        );
    }
}
