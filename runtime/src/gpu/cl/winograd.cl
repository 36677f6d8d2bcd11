// Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions without dilation or groups, in three
// kernels: input transform (6x6 tiles -> u[36][tiles][c]), 36 matrix products
// (m[e] = u[e] x wt[e]; wt[e] is G g G^T, blocked by 8 output channels), and output
// transform (A^T m A, bias, activation) into the NHWC output. `tiles` = n * th * tw, where
// th = ceil(oh / 4), tw = ceil(ow / 4).

typedef struct {
    int n, h, w, c;
    int oh, ow, oc, oc_pad;
    int pt, pl;
    int th, tw;
} WinoGeom;

// B^T applied to the 6 values v[0], v[s], …, v[5s] (floats).
#define BT_ROWS(d0, d1, d2, d3, d4, d5, r)              \
    r[0] = 4.0f * d0 - 5.0f * d2 + d4;                  \
    r[1] = -4.0f * d1 - 4.0f * d2 + d3 + d4;            \
    r[2] = 4.0f * d1 - 4.0f * d2 - d3 + d4;             \
    r[3] = -2.0f * d1 - d2 + 2.0f * d3 + d4;            \
    r[4] = 2.0f * d1 - d2 - 2.0f * d3 + d4;             \
    r[5] = 4.0f * d1 - 5.0f * d3 + d5;

// Grid: (c, tw, n * th). One tile of one input channel per work item; neighbouring work items
// take neighbouring channels, so their loads and stores are contiguous.
__kernel void winograd_input(__global const float* src, int src_off, __global float* u,
                             WinoGeom g) {
    const int ci = get_global_id(0);
    const int tx = get_global_id(1);
    const int n = get_global_id(2) / g.th;
    const int ty = get_global_id(2) % g.th;
    if (tx >= g.tw || n >= g.n || ci >= g.c) return;
    src += src_off;
    float d[6][6];
    #pragma unroll
    for (int i = 0; i < 6; i++) {
        const int iy = ty * 4 + i - g.pt;
        #pragma unroll
        for (int j = 0; j < 6; j++) {
            const int ix = tx * 4 + j - g.pl;
            d[i][j] = (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
                          ? src[((n * g.h + iy) * g.w + ix) * g.c + ci]
                          : 0.0f;
        }
    }
    float t[6][6];
    #pragma unroll
    for (int j = 0; j < 6; j++) {
        float r[6];
        BT_ROWS(d[0][j], d[1][j], d[2][j], d[3][j], d[4][j], d[5][j], r);
        #pragma unroll
        for (int i = 0; i < 6; i++) t[i][j] = r[i];
    }
    const int tiles = g.n * g.th * g.tw;
    const int tile = (n * g.th + ty) * g.tw + tx;
    #pragma unroll
    for (int i = 0; i < 6; i++) {
        float r[6];
        BT_ROWS(t[i][0], t[i][1], t[i][2], t[i][3], t[i][4], t[i][5], r);
        #pragma unroll
        for (int j = 0; j < 6; j++) u[((size_t)(i * 6 + j) * tiles + tile) * g.c + ci] = r[j];
    }
}

// Grid: (ceil(tiles / BT), channel blocks from c_start, 36). BT tiles by BC channels per item.
__kernel void winograd_gemm(__global const float* u, __global const float* wt,
                            __global float* m, int tiles, int c, int oc_pad,
                            int c_start, int c1) {
    const int t0 = get_global_id(0) * BT;
    const int co = c_start + get_global_id(1) * BC;
    const int e = get_global_id(2);
    if (t0 >= tiles || co >= c1 || e >= 36) return;
    __global const float* up = u + (size_t)e * tiles * c;
    __global const float* wp = wt + (size_t)e * oc_pad * c + blocked(co, c, 0);
    VEC acc[BT];
    int row[BT];
    #pragma unroll
    for (int t = 0; t < BT; t++) {
        acc[t] = (VEC)(0.0f);
        row[t] = min(t0 + t, tiles - 1) * c;
    }
    for (int k = 0; k < c; k++) {
        const VEC wv = VLOAD(wp + k * 8);
        #pragma unroll
        for (int t = 0; t < BT; t++) acc[t] += up[row[t] + k] * wv;
    }
    #pragma unroll
    for (int t = 0; t < BT; t++) {
        if (t0 + t < tiles) VSTORE(acc[t], m + ((size_t)e * tiles + t0 + t) * oc_pad + co);
    }
}

// A^T applied to 6 vectors.
#define AT_ROWS(m0, m1, m2, m3, m4, m5, r)                  \
    r[0] = m0 + m1 + m2 + m3 + m4;                          \
    r[1] = m1 - m2 + 2.0f * m3 - 2.0f * m4;                 \
    r[2] = m1 + m2 + 4.0f * m3 + 4.0f * m4;                 \
    r[3] = m1 - m2 + 8.0f * m3 - 8.0f * m4 + m5;

// Grid: (channel blocks from c_start, tw, n * th). One tile by BC channels per work item;
// neighbouring work items take neighbouring channel blocks.
__kernel void winograd_output(__global const float* m, __global const float* bias,
                              __global float* dst, int dst_off, WinoGeom g,
                              int c_start, int c0, int c1, int act) {
    const int co = c_start + get_global_id(0) * BC;
    const int tx = get_global_id(1);
    const int n = get_global_id(2) / g.th;
    const int ty = get_global_id(2) % g.th;
    if (tx >= g.tw || n >= g.n || co >= c1) return;
    dst += dst_off;
    const int tiles = g.n * g.th * g.tw;
    const int tile = (n * g.th + ty) * g.tw + tx;
    VEC v[6][6];
    #pragma unroll
    for (int e = 0; e < 36; e++) v[e / 6][e % 6] = VLOAD(m + ((size_t)e * tiles + tile) * g.oc_pad + co);
    VEC t[4][6];
    #pragma unroll
    for (int j = 0; j < 6; j++) {
        VEC r[4];
        AT_ROWS(v[0][j], v[1][j], v[2][j], v[3][j], v[4][j], v[5][j], r);
        #pragma unroll
        for (int i = 0; i < 4; i++) t[i][j] = r[i];
    }
    const VEC b = VLOAD(bias + co);
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        VEC r[4];
        AT_ROWS(t[i][0], t[i][1], t[i][2], t[i][3], t[i][4], t[i][5], r);
        const int oy = ty * 4 + i;
        if (oy >= g.oh) break;
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            const int ox = tx * 4 + j;
            if (ox >= g.ow) break;
            const int o = ((n * g.oh + oy) * g.ow + ox) * g.oc + co;
            store_lanes(activate_vec(r[j] + b, act), dst + o, co, c0, c1);
        }
    }
}
