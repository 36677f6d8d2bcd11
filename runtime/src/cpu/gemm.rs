//! Matrix multiplication on strided row-major views, through the `gemm` crate's micro-kernels.

/// A strided matrix view: element (r, c) is at `data[r * row_stride + c * col_stride]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// A dense row-major view (`col_stride` 1).
    pub fn rows(data: &'a [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        MatRef {
            data,
            rows,
            cols,
            row_stride,
            col_stride: 1,
        }
    }

    fn check(&self) {
        assert!(
            self.rows == 0
                || self.cols == 0
                || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                    < self.data.len(),
            "matrix view out of bounds"
        );
    }
}

/// `dst[r][c] (+)= Σ_k lhs[r][k] · rhs[k][c]` for `r < lhs.rows`, `c < rhs.cols`, where `dst`
/// has row stride `dst_row_stride`. With `accumulate` the product is added to what `dst` holds
/// (used to start from a bias), otherwise it overwrites it.
///
/// Panics if the views do not fit their slices or the inner dimensions differ.
pub fn matmul(
    dst: &mut [f32],
    dst_row_stride: usize,
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    accumulate: bool,
) {
    assert_eq!(lhs.cols, rhs.rows, "inner dimensions differ");
    lhs.check();
    rhs.check();
    let (m, n, k) = (lhs.rows, rhs.cols, lhs.cols);
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        (m - 1) * dst_row_stride + n <= dst.len(),
        "destination view out of bounds"
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[r * dst_row_stride..r * dst_row_stride + n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: the asserts above keep every access of the three views inside their slices.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_row_stride as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(lhs: &[f32], rhs: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for r in 0..m {
            for c in 0..n {
                out[r * n + c] = (0..k).map(|i| lhs[r * k + i] * rhs[i * n + c]).sum();
            }
        }
        out
    }

    #[test]
    fn matches_naive_on_odd_sizes_and_sub_views() {
        for (m, k, n) in [(1, 1, 1), (3, 5, 7), (17, 33, 9), (64, 3, 130)] {
            let lhs: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0)
                .collect();
            let rhs: Vec<f32> = (0..k * n)
                .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
                .collect();
            let want = naive(&lhs, &rhs, m, k, n);
            let mut got = vec![0.0; m * n];
            matmul(
                &mut got,
                n,
                MatRef::rows(&lhs, m, k, k),
                MatRef::rows(&rhs, k, n, n),
                false,
            );
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{a} vs {b}");
            }
            // A column range of rhs written into the matching columns of a wider destination,
            // accumulating onto a bias of 1.
            if n > 2 {
                let (c0, c1) = (1, n - 1);
                let mut wide = vec![1.0; m * n];
                let sub = MatRef::rows(&rhs[c0..], k, c1 - c0, n);
                matmul(&mut wide[c0..], n, MatRef::rows(&lhs, m, k, k), sub, true);
                for r in 0..m {
                    for c in 0..n {
                        let expected = if (c0..c1).contains(&c) {
                            want[r * n + c] + 1.0
                        } else {
                            1.0
                        };
                        assert!(
                            (wide[r * n + c] - expected).abs() <= 1e-4 * expected.abs().max(1.0)
                        );
                    }
                }
            }
            // The transpose of rhs, read through strides.
            let rhs_t: Vec<f32> = (0..n * k).map(|i| rhs[(i % k) * n + i / k]).collect();
            let mut got_t = vec![0.0; m * n];
            let view = MatRef {
                data: &rhs_t,
                rows: k,
                cols: n,
                row_stride: 1,
                col_stride: k,
            };
            matmul(&mut got_t, n, MatRef::rows(&lhs, m, k, k), view, false);
            assert!(got_t
                .iter()
                .zip(&want)
                .all(|(a, b)| (a - b).abs() <= 1e-4 * b.abs().max(1.0)));
        }
    }
}
