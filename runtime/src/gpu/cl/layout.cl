// One strided copy serves every data-movement op (copy, transpose, strided slice, pad, concat,
// depth-to-space, space-to-depth): for each index i of a rank-6 destination view,
//   dst[dst_off + sum(i[d] * ds[d])] = inside ? src[src_off + sum((i[d] - lo[d]) * ss[d])] : value
// where inside means lo[d] <= i[d] < hi[d] for every d.

typedef struct {
    int dims[6];
    int ds[6];
    int ss[6];
    int lo[6];
    int hi[6];
} View;

// Grid: (total).
__kernel void strided_copy(__global const float* src, int src_off, __global float* dst,
                           int dst_off, View v, int total, float value) {
    const int i = get_global_id(0);
    if (i >= total) return;
    int rest = i, o = dst_off, s = src_off;
    bool inside = true;
    for (int d = 5; d >= 0; d--) {
        const int k = rest % v.dims[d];
        rest /= v.dims[d];
        o += k * v.ds[d];
        s += (k - v.lo[d]) * v.ss[d];
        inside = inside && k >= v.lo[d] && k < v.hi[d];
    }
    dst[o] = inside ? src[s] : value;
}
