// Fully connected: dst[r][u] = act(bias[u] + sum_k src[r][k] * w[u][k]). Weights blocked by 8
// units (`blocked`, depth rows per block), bias padded. A work item computes BR rows by BC units.
// Grid: (unit blocks from c_start, ceil(rows / BR)).
__kernel void fully_connected(__global const float* src, int src_off,
                              __global const float* w, __global const float* bias,
                              __global float* dst, int dst_off,
                              int rows, int depth, int units,
                              int c_start, int c0, int c1, int act) {
    const int co = c_start + get_global_id(0) * BC;
    const int r0 = get_global_id(1) * BR;
    if (co >= c1 || r0 >= rows) return;
    src += src_off;
    dst += dst_off;
    const VEC b = VLOAD(bias + co);
    VEC acc[BR];
    int row[BR];
    #pragma unroll
    for (int r = 0; r < BR; r++) {
        acc[r] = b;
        row[r] = min(r0 + r, rows - 1) * depth;
    }
    __global const float* wp = w + blocked(co, depth, 0);
    for (int k = 0; k < depth; k++) {
        const VEC wv = VLOAD(wp + k * 8);
        #pragma unroll
        for (int r = 0; r < BR; r++) acc[r] += src[row[r] + k] * wv;
    }
    #pragma unroll
    for (int r = 0; r < BR; r++) {
        if (r0 + r < rows) store_lanes(activate_vec(acc[r], act), dst + (r0 + r) * units + co, co, c0, c1);
    }
}
