// Convolutions, NHWC. Weights blocked by 8 output channels (`blocked`), rows in (ky, kx, ci)
// order; bias padded to the blocked width. Groups: output channel o reads input channels
// [(o / ocg) * cg, (o / ocg + 1) * cg). A work item computes output channels [co, co + BC).

typedef struct {
    int n, h, w, c;         // input
    int oh, ow, oc;         // output
    int kh, kw, sh, sw, dh, dw, pt, pl;
    int cg, ocg;            // input channels per group, output channels per group
} ConvGeom;

// Generic convolution: a block of BY x BX output pixels by BC channels per work item.
// Grid: (ceil(ow / BX), n * ceil(oh / BY), channel blocks from c_start).
__kernel void conv_generic(__global const float* src, int src_off,
                           __global const float* w, __global const float* bias,
                           __global float* dst, int dst_off, ConvGeom g,
                           int c_start, int c0, int c1, int act) {
    const int ox0 = get_global_id(0) * BX;
    const int oh_blocks = (g.oh + BY - 1) / BY;
    const int n = get_global_id(1) / oh_blocks;
    const int oy0 = (get_global_id(1) % oh_blocks) * BY;
    const int co = c_start + get_global_id(2) * BC;
    if (ox0 >= g.ow || n >= g.n || co >= c1) return;
    const int ci0 = (co / g.ocg) * g.cg;
    const int depth = g.kh * g.kw * g.cg;
    src += src_off;
    dst += dst_off;
    VEC acc[BY][BX];
    const VEC b = VLOAD(bias + co);
    #pragma unroll
    for (int i = 0; i < BY; i++)
        #pragma unroll
        for (int j = 0; j < BX; j++) acc[i][j] = b;
    for (int ky = 0; ky < g.kh; ky++) {
        for (int kx = 0; kx < g.kw; kx++) {
            int pix[BY][BX];
            bool all = true;
            #pragma unroll
            for (int i = 0; i < BY; i++) {
                #pragma unroll
                for (int j = 0; j < BX; j++) {
                    const int iy = (oy0 + i) * g.sh + ky * g.dh - g.pt;
                    const int ix = (ox0 + j) * g.sw + kx * g.dw - g.pl;
                    const bool ok = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w &&
                                    oy0 + i < g.oh && ox0 + j < g.ow;
                    pix[i][j] = ok ? ((n * g.h + iy) * g.w + ix) * g.c + ci0 : -1;
                    all = all && ok;
                }
            }
            __global const float* wp = w + blocked(co, depth, (ky * g.kw + kx) * g.cg);
            if (all) {
                for (int ci = 0; ci < g.cg; ci++) {
                    const VEC wv = VLOAD(wp + ci * 8);
                    #pragma unroll
                    for (int i = 0; i < BY; i++)
                        #pragma unroll
                        for (int j = 0; j < BX; j++) acc[i][j] += src[pix[i][j] + ci] * wv;
                }
            } else {
                for (int ci = 0; ci < g.cg; ci++) {
                    const VEC wv = VLOAD(wp + ci * 8);
                    #pragma unroll
                    for (int i = 0; i < BY; i++)
                        #pragma unroll
                        for (int j = 0; j < BX; j++)
                            if (pix[i][j] >= 0) acc[i][j] += src[pix[i][j] + ci] * wv;
                }
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < BY; i++) {
        #pragma unroll
        for (int j = 0; j < BX; j++) {
            if (oy0 + i < g.oh && ox0 + j < g.ow) {
                const int o = ((n * g.oh + oy0 + i) * g.ow + ox0 + j) * g.oc + co;
                store_lanes(activate_vec(acc[i][j], act), dst + o, co, c0, c1);
            }
        }
    }
}

// Small convolutions (few input channels, weights that fit in constant memory): one output
// pixel per work item, looping over every channel block of [c_start, c1).
// Grid: (ow, n * oh).
__kernel void conv_constants(__global const float* src, int src_off,
                             __constant float* w, __constant float* bias,
                             __global float* dst, int dst_off, ConvGeom g,
                             int c_start, int c0, int c1, int act) {
    const int ox = get_global_id(0);
    const int n = get_global_id(1) / g.oh;
    const int oy = get_global_id(1) % g.oh;
    if (ox >= g.ow || n >= g.n) return;
    src += src_off;
    dst += dst_off;
    const int depth = g.kh * g.kw * g.cg;
    for (int co = c_start; co < c1; co += BC) {
        const int ci0 = (co / g.ocg) * g.cg;
        VEC acc = VLOAD(bias + co);
        for (int ky = 0; ky < g.kh; ky++) {
            const int iy = oy * g.sh + ky * g.dh - g.pt;
            if (iy < 0 || iy >= g.h) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                const int ix = ox * g.sw + kx * g.dw - g.pl;
                if (ix < 0 || ix >= g.w) continue;
                __global const float* s = src + ((n * g.h + iy) * g.w + ix) * g.c + ci0;
                const size_t r = blocked(co, depth, (ky * g.kw + kx) * g.cg);
                for (int ci = 0; ci < g.cg; ci++) acc += s[ci] * VLOAD(w + r + ci * 8);
            }
        }
        const int o = ((n * g.oh + oy) * g.ow + ox) * g.oc + co;
        store_lanes(activate_vec(acc, act), dst + o, co, c0, c1);
    }
}
