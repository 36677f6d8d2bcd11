// Depthwise convolution, NHWC, depth multiplier m: output channel o reads input channel o / m.
// Weights [kh][kw][oc_pad], bias [oc_pad] (oc_pad: the output channels rounded up to 8).

// Grid order (`depthwise_channels_inner` in dispatch.rs): channel blocks in dimension 0 with
// CHANNELS_INNER (large parts: the image is walked once), else in dimension 2.
#if CHANNELS_INNER
#define DIM_C 0
#define DIM_X 1
#define DIM_Y 2
#else
#define DIM_X 0
#define DIM_Y 1
#define DIM_C 2
#endif

typedef struct {
    int n, h, w, c;
    int oh, ow, oc, oc_pad;
    int kh, kw, sh, sw, dh, dw, pt, pl;
    int m;
} DwGeom;

// Loads the input vector feeding output channels [co, co + BC) at input pixel `p`.
inline VEC dw_input(__global const float* p, int co, int m) {
    if (m == 1) return VLOAD(p + co);
    float lanes[BC];
    #pragma unroll
    for (int l = 0; l < BC; l++) lanes[l] = p[(co + l) / m];
    return VLOAD(lanes);
}

// Any window, stride, dilation and multiplier: one output pixel by BC channels per work item.
// Grid: (ow, n * oh, channel blocks from c_start), channel blocks first with CHANNELS_INNER.
__kernel void depthwise_generic(__global const float* src, int src_off,
                                __global const float* w, __global const float* bias,
                                __global float* dst, int dst_off, DwGeom g,
                                int c_start, int c0, int c1, int act) {
    const int co = c_start + get_global_id(DIM_C) * BC;
    const int ox = get_global_id(DIM_X);
    const int n = get_global_id(DIM_Y) / g.oh;
    const int oy = get_global_id(DIM_Y) % g.oh;
    if (ox >= g.ow || n >= g.n || co >= c1) return;
    src += src_off;
    dst += dst_off;
    VEC acc = VLOAD(bias + co);
    for (int ky = 0; ky < g.kh; ky++) {
        const int iy = oy * g.sh + ky * g.dh - g.pt;
        if (iy < 0 || iy >= g.h) continue;
        for (int kx = 0; kx < g.kw; kx++) {
            const int ix = ox * g.sw + kx * g.dw - g.pl;
            if (ix < 0 || ix >= g.w) continue;
            __global const float* p = src + ((n * g.h + iy) * g.w + ix) * g.c;
            VEC x;
            if (co + BC <= g.oc) {
                x = dw_input(p, co, g.m);
            } else {
                float lanes[BC];
                #pragma unroll
                for (int l = 0; l < BC; l++) lanes[l] = co + l < g.oc ? p[(co + l) / g.m] : 0.0f;
                x = VLOAD(lanes);
            }
            acc += x * VLOAD(w + (ky * g.kw + kx) * g.oc_pad + co);
        }
    }
    const int o = ((n * g.oh + oy) * g.ow + ox) * g.oc + co;
    store_lanes(activate_vec(acc, act), dst + o, co, c0, c1);
}

// 3x3, stride 1, no dilation, multiplier 1: BX output pixels along x by BC channels per work
// item, reusing each input column across the pixels. Grid: (ceil(ow / BX), n * oh, blocks),
// channel blocks first with CHANNELS_INNER.
__kernel void depthwise_3x3(__global const float* src, int src_off,
                            __global const float* w, __global const float* bias,
                            __global float* dst, int dst_off, DwGeom g,
                            int c_start, int c0, int c1, int act) {
    const int co = c_start + get_global_id(DIM_C) * BC;
    const int ox0 = get_global_id(DIM_X) * BX;
    const int n = get_global_id(DIM_Y) / g.oh;
    const int oy = get_global_id(DIM_Y) % g.oh;
    if (ox0 >= g.ow || n >= g.n || co >= c1) return;
    src += src_off;
    dst += dst_off;
    const bool full = co + BC <= g.oc;
    VEC wk[9];
    #pragma unroll
    for (int k = 0; k < 9; k++) wk[k] = VLOAD(w + k * g.oc_pad + co);
    const VEC b = VLOAD(bias + co);
    VEC acc[BX];
    #pragma unroll
    for (int j = 0; j < BX; j++) acc[j] = b;
    for (int ky = 0; ky < 3; ky++) {
        const int iy = oy + ky - g.pt;
        if (iy < 0 || iy >= g.h) continue;
        __global const float* row = src + ((n * g.h + iy) * g.w) * g.c;
        for (int t = 0; t < BX + 2; t++) {
            const int ix = ox0 + t - g.pl;
            if (ix < 0 || ix >= g.w) continue;
            VEC x;
            if (full) {
                x = VLOAD(row + ix * g.c + co);
            } else {
                float lanes[BC];
                #pragma unroll
                for (int l = 0; l < BC; l++) lanes[l] = co + l < g.oc ? row[ix * g.c + co + l] : 0.0f;
                x = VLOAD(lanes);
            }
            #pragma unroll
            for (int j = 0; j < BX; j++) {
                const int kx = t - j;
                if (kx >= 0 && kx < 3) acc[j] += x * wk[ky * 3 + kx];
            }
        }
    }
    #pragma unroll
    for (int j = 0; j < BX; j++) {
        if (ox0 + j < g.ow) {
            const int o = ((n * g.oh + oy) * g.ow + ox0 + j) * g.oc + co;
            store_lanes(activate_vec(acc[j], act), dst + o, co, c0, c1);
        }
    }
}
