//! BATCH_MATMUL: `out[..., m, n] = Σ_k lhs[..., m, k] · rhs[..., k, n]` with broadcast batch
//! dimensions and optional transposes (adjoints) of either operand.

use super::gemm::{matmul, MatRef};
use serde::{Deserialize, Serialize};

/// Shapes of a batched matrix product; batch dimensions broadcast numpy-style.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchMatMulParams {
    pub lhs: Vec<usize>,
    pub rhs: Vec<usize>,
    pub out: Vec<usize>,
    pub adj_lhs: bool,
    pub adj_rhs: bool,
}

impl BatchMatMulParams {
    /// Checks ranks and the inner dimension; the message says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let (a, b, o) = (&self.lhs, &self.rhs, &self.out);
        if a.len() < 2 || b.len() < 2 || o.len() < 2 {
            return Err("operands need rank ≥ 2".into());
        }
        let k1 = if self.adj_lhs {
            a[a.len() - 2]
        } else {
            a[a.len() - 1]
        };
        let k2 = if self.adj_rhs {
            b[b.len() - 1]
        } else {
            b[b.len() - 2]
        };
        if k1 != k2 {
            return Err(format!("inner dimensions {k1} and {k2} differ"));
        }
        Ok(())
    }
}

/// Offset of the batch matrix `index` (over the output's batch dims) inside an operand whose batch
/// dims broadcast against the output's.
fn batch_offset(index: usize, out_batch: &[usize], shape: &[usize]) -> usize {
    let batch = &shape[..shape.len() - 2];
    let matrix = shape[shape.len() - 2] * shape[shape.len() - 1];
    let mut rem = index;
    let mut offset = 0;
    let mut stride = matrix;
    for d in (0..out_batch.len()).rev() {
        let i = rem % out_batch[d];
        rem /= out_batch[d];
        let skip = out_batch.len() - batch.len();
        if d >= skip {
            let size = batch[d - skip];
            if size != 1 {
                offset += i * stride;
            }
            stride *= size;
        }
    }
    offset
}

/// Computes the whole product. Preconditions: `p.validate()` holds; slice lengths match shapes.
pub fn batch_matmul(lhs: &[f32], rhs: &[f32], out: &mut [f32], p: &BatchMatMulParams) {
    let (a, b, o) = (&p.lhs, &p.rhs, &p.out);
    let (ar, ac) = (a[a.len() - 2], a[a.len() - 1]);
    let bc = b[b.len() - 1];
    let (m, n) = (o[o.len() - 2], o[o.len() - 1]);
    let k = if p.adj_lhs { ar } else { ac };
    let out_batch = &o[..o.len() - 2];
    let batches: usize = out_batch.iter().product();
    for i in 0..batches {
        let la = &lhs[batch_offset(i, out_batch, a)..];
        let lb = &rhs[batch_offset(i, out_batch, b)..];
        let lv = if p.adj_lhs {
            MatRef {
                data: la,
                rows: m,
                cols: k,
                row_stride: 1,
                col_stride: ac,
            }
        } else {
            MatRef::rows(la, m, k, ac)
        };
        let rv = if p.adj_rhs {
            MatRef {
                data: lb,
                rows: k,
                cols: n,
                row_stride: 1,
                col_stride: bc,
            }
        } else {
            MatRef::rows(lb, k, n, bc)
        };
        matmul(&mut out[i * m * n..(i + 1) * m * n], n, lv, rv, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::tests::Rng;

    #[test]
    fn matches_reference_with_broadcast_and_adjoints() {
        let mut rng = Rng(3);
        for case in 0..40 {
            let (m, k, n) = (1 + rng.below(6), 1 + rng.below(6), 1 + rng.below(6));
            let (adj_lhs, adj_rhs) = (case % 2 == 1, case % 4 >= 2);
            let (ba, bb) = (
                [[2, 3], [1, 3], [2, 1]][rng.below(3)],
                [[2, 3], [1, 3], [1, 1]][rng.below(3)],
            );
            let ob = [ba[0].max(bb[0]), ba[1].max(bb[1])];
            let lhs_shape = vec![
                ba[0],
                ba[1],
                if adj_lhs { k } else { m },
                if adj_lhs { m } else { k },
            ];
            let rhs_shape = vec![
                bb[0],
                bb[1],
                if adj_rhs { n } else { k },
                if adj_rhs { k } else { n },
            ];
            let p = BatchMatMulParams {
                lhs: lhs_shape.clone(),
                rhs: rhs_shape.clone(),
                out: vec![ob[0], ob[1], m, n],
                adj_lhs,
                adj_rhs,
            };
            p.validate().expect("valid");
            let lhs = rng.values(lhs_shape.iter().product());
            let rhs = rng.values(rhs_shape.iter().product());
            let mut got = vec![0.0; ob[0] * ob[1] * m * n];
            batch_matmul(&lhs, &rhs, &mut got, &p);
            for b0 in 0..ob[0] {
                for b1 in 0..ob[1] {
                    let la = ((b0 % ba[0]) * ba[1] + (b1 % ba[1])) * m * k;
                    let lb = ((b0 % bb[0]) * bb[1] + (b1 % bb[1])) * k * n;
                    for i in 0..m {
                        for j in 0..n {
                            let want: f32 = (0..k)
                                .map(|t| {
                                    let x = if adj_lhs {
                                        lhs[la + t * m + i]
                                    } else {
                                        lhs[la + i * k + t]
                                    };
                                    let y = if adj_rhs {
                                        rhs[lb + j * k + t]
                                    } else {
                                        rhs[lb + t * n + j]
                                    };
                                    x * y
                                })
                                .sum();
                            let a = got[((b0 * ob[1] + b1) * m + i) * n + j];
                            assert!(
                                (a - want).abs() <= 1e-5 * want.abs().max(1.0),
                                "case {case}: {a} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
