// Pooling, mean, resizing: one output element per work item.

typedef struct {
    int n, h, w, c, oh, ow;
    int fh, fw, sh, sw, pt, pl;
} PoolGeom;

// Grid: (n * oh * ow * c). `is_max`: max pooling, else average over the clipped window.
__kernel void pool2d(__global const float* src, int src_off, __global float* dst, int dst_off,
                     PoolGeom g, int is_max, int act) {
    const int i = get_global_id(0);
    if (i >= g.n * g.oh * g.ow * g.c) return;
    const int ch = i % g.c;
    const int ox = (i / g.c) % g.ow;
    const int oy = (i / (g.c * g.ow)) % g.oh;
    const int n = i / (g.c * g.ow * g.oh);
    const int y0 = max(oy * g.sh - g.pt, 0), y1 = min(oy * g.sh - g.pt + g.fh, g.h);
    const int x0 = max(ox * g.sw - g.pl, 0), x1 = min(ox * g.sw - g.pl + g.fw, g.w);
    float acc = is_max ? -INFINITY : 0.0f;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            const float v = src[src_off + ((n * g.h + y) * g.w + x) * g.c + ch];
            acc = is_max ? fmax(acc, v) : acc + v;
        }
    const int count = (y1 - y0) * (x1 - x0);
    if (!is_max) acc = count > 0 ? acc / (float)count : 0.0f;
    dst[dst_off + i] = activate(acc, act);
}

typedef struct {
    int dims[6];     // output shape (reduced axes removed, leading 1s)
    int so[6];       // input strides per output dimension
    int rdims[6];    // reduced box
    int sr[6];       // input strides per reduced dimension
    int count;       // elements in the box
} Reduce;

// Mean over the reduced box. Grid: (output elements).
__kernel void mean(__global const float* src, int src_off, __global float* dst, int dst_off,
                   Reduce r, int total) {
    const int i = get_global_id(0);
    if (i >= total) return;
    int rest = i, base = src_off;
    for (int d = 5; d >= 0; d--) {
        base += (rest % r.dims[d]) * r.so[d];
        rest /= r.dims[d];
    }
    float sum = 0.0f;
    for (int j = 0; j < r.count; j++) {
        int q = j, s = base;
        for (int d = 5; d >= 0; d--) {
            s += (q % r.rdims[d]) * r.sr[d];
            q /= r.rdims[d];
        }
        sum += src[s];
    }
    dst[dst_off + i] = r.count > 0 ? sum / (float)r.count : 0.0f;
}

typedef struct {
    int n, h, w, c, oh, ow;
    float scale_y, scale_x;
    int align_corners, half_pixel;
} ResizeGeom;

inline float resize_source(int o, float scale, int half_pixel) {
    return half_pixel ? ((float)o + 0.5f) * scale - 0.5f : (float)o * scale;
}

// Grid: (n * oh * ow * c).
__kernel void resize_bilinear(__global const float* src, int src_off, __global float* dst,
                              int dst_off, ResizeGeom g) {
    const int i = get_global_id(0);
    if (i >= g.n * g.oh * g.ow * g.c) return;
    const int ch = i % g.c;
    const int ox = (i / g.c) % g.ow;
    const int oy = (i / (g.c * g.ow)) % g.oh;
    const int n = i / (g.c * g.ow * g.oh);
    const float sy = resize_source(oy, g.scale_y, g.half_pixel);
    const float sx = resize_source(ox, g.scale_x, g.half_pixel);
    const int y0 = clamp((int)floor(sy), 0, g.h - 1), y1 = clamp((int)ceil(sy), 0, g.h - 1);
    const int x0 = clamp((int)floor(sx), 0, g.w - 1), x1 = clamp((int)ceil(sx), 0, g.w - 1);
    const float fy = sy - (float)y0, fx = sx - (float)x0;
    __global const float* p = src + src_off + n * g.h * g.w * g.c + ch;
    const float top = p[(y0 * g.w + x0) * g.c] * (1.0f - fx) + p[(y0 * g.w + x1) * g.c] * fx;
    const float bottom = p[(y1 * g.w + x0) * g.c] * (1.0f - fx) + p[(y1 * g.w + x1) * g.c] * fx;
    dst[dst_off + i] = top * (1.0f - fy) + bottom * fy;
}

inline int nearest_source(int o, float scale, int align_corners, int half_pixel, int size) {
    const float s = ((float)o + (half_pixel ? 0.5f : 0.0f)) * scale;
    const int k = align_corners ? (int)round(s) : (int)floor(s);
    return clamp(k, 0, size - 1);
}

// Grid: (n * oh * ow * c).
__kernel void resize_nearest(__global const float* src, int src_off, __global float* dst,
                             int dst_off, ResizeGeom g) {
    const int i = get_global_id(0);
    if (i >= g.n * g.oh * g.ow * g.c) return;
    const int ch = i % g.c;
    const int ox = (i / g.c) % g.ow;
    const int oy = (i / (g.c * g.ow)) % g.oh;
    const int n = i / (g.c * g.ow * g.oh);
    const int y = nearest_source(oy, g.scale_y, g.align_corners, g.half_pixel, g.h);
    const int x = nearest_source(ox, g.scale_x, g.align_corners, g.half_pixel, g.w);
    dst[dst_off + i] = src[src_off + ((n * g.h + y) * g.w + x) * g.c + ch];
}
