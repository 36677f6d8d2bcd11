// Transposed convolution and batched matrix products: one output element per work item.

typedef struct {
    int n, h, w, c;      // input
    int oh, ow, oc;      // output
    int kh, kw, sh, sw, pt, pl;
} TConvGeom;

// Weights [oc][kh][kw][c] (TFLite's layout); output (oy, ox) gathers input (iy, ix) where
// oy = iy * sh + ky - pt. `bias` may be a dummy when has_bias is 0. Grid: (n * oh * ow * oc).
__kernel void transpose_conv(__global const float* src, int src_off, __global const float* w,
                             __global const float* bias, int has_bias, __global float* dst,
                             int dst_off, TConvGeom g, int act) {
    const int i = get_global_id(0);
    if (i >= g.n * g.oh * g.ow * g.oc) return;
    const int co = i % g.oc;
    const int ox = (i / g.oc) % g.ow;
    const int oy = (i / (g.oc * g.ow)) % g.oh;
    const int n = i / (g.oc * g.ow * g.oh);
    float acc = has_bias ? bias[co] : 0.0f;
    for (int ky = 0; ky < g.kh; ky++) {
        const int ty = oy + g.pt - ky;
        if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.h) continue;
        const int iy = ty / g.sh;
        for (int kx = 0; kx < g.kw; kx++) {
            const int tx = ox + g.pl - kx;
            if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.w) continue;
            const int ix = tx / g.sw;
            __global const float* s = src + src_off + ((n * g.h + iy) * g.w + ix) * g.c;
            __global const float* wp = w + ((co * g.kh + ky) * g.kw + kx) * g.c;
            for (int ci = 0; ci < g.c; ci++) acc += s[ci] * wp[ci];
        }
    }
    dst[dst_off + i] = activate(acc, act);
}

typedef struct {
    int batch[4];        // output batch dimensions (leading 1s)
    int sl[4], sr[4];    // batch strides of lhs and rhs (0 where broadcast)
    int m, k, n;
    int lhs_row, lhs_col;  // strides of lhs along i and k (adjoint swaps them)
    int rhs_row, rhs_col;  // strides of rhs along k and j
} MatMul;

// Grid: (batches * m * n).
__kernel void batch_matmul(__global const float* a, int a_off, __global const float* b,
                           int b_off, __global float* dst, int dst_off, MatMul p, int total) {
    const int i = get_global_id(0);
    if (i >= total) return;
    const int col = i % p.n;
    const int row = (i / p.n) % p.m;
    int rest = i / (p.n * p.m), oa = a_off, ob = b_off;
    for (int d = 3; d >= 0; d--) {
        const int k = rest % p.batch[d];
        rest /= p.batch[d];
        oa += k * p.sl[d];
        ob += k * p.sr[d];
    }
    float acc = 0.0f;
    for (int k = 0; k < p.k; k++)
        acc += a[oa + row * p.lhs_row + k * p.lhs_col] * b[ob + k * p.rhs_row + col * p.rhs_col];
    dst[dst_off + i] = acc;
}
