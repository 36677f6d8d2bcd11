// Element-wise kernels. Shapes are described up to rank 6 (leading dimensions 1).

typedef struct {
    int dims[6];     // output shape
    int sa[6];       // element strides of `a` per output dimension (0 where broadcast)
    int sb[6];       // same for `b`
} Bcast;

#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3
#define OP_PRELU 4

// dst = act(a op b) with broadcasting. `same`: a, b and dst have one shape (no index math).
// Grid: (total).
__kernel void binary(__global const float* a, int a_off, __global const float* b, int b_off,
                     __global float* dst, int dst_off, Bcast s, int total, int same, int op,
                     int act) {
    const int i = get_global_id(0);
    if (i >= total) return;
    int ia = i, ib = i;
    if (!same) {
        int rest = i;
        ia = 0;
        ib = 0;
        for (int d = 5; d >= 0; d--) {
            const int k = rest % s.dims[d];
            rest /= s.dims[d];
            ia += k * s.sa[d];
            ib += k * s.sb[d];
        }
    }
    const float x = a[a_off + ia], y = b[b_off + ib];
    float r;
    switch (op) {
    case OP_ADD: r = x + y; break;
    case OP_SUB: r = x - y; break;
    case OP_MUL: r = x * y; break;
    case OP_DIV: r = x / y; break;
    default: r = x >= 0.0f ? x : x * y; break;
    }
    dst[dst_off + i] = activate(r, act);
}

#define U_LOGISTIC 0
#define U_TANH 1
#define U_RELU 2
#define U_RELU6 3
#define U_RELU_N1_TO_1 4
#define U_HARD_SWISH 5
#define U_LEAKY_RELU 6

// Grid: (total).
__kernel void unary(__global const float* x, int x_off, __global float* dst, int dst_off,
                    int total, int op, float alpha) {
    const int i = get_global_id(0);
    if (i >= total) return;
    const float v = x[x_off + i];
    float r;
    switch (op) {
    case U_LOGISTIC: r = 1.0f / (1.0f + exp(-v)); break;
    case U_TANH: r = tanh(v); break;
    case U_RELU: r = v < 0.0f ? 0.0f : v; break;
    case U_RELU6: r = clamp(v, 0.0f, 6.0f); break;
    case U_RELU_N1_TO_1: r = clamp(v, -1.0f, 1.0f); break;
    case U_HARD_SWISH: r = v * clamp(v + 3.0f, 0.0f, 6.0f) / 6.0f; break;
    default: r = v > 0.0f ? v : v * alpha; break;
    }
    dst[dst_off + i] = r;
}

// Softmax over the last axis, one row per work item. Grid: (rows).
__kernel void softmax(__global const float* x, int x_off, __global float* dst, int dst_off,
                      int rows, int depth, float beta) {
    const int r = get_global_id(0);
    if (r >= rows) return;
    __global const float* p = x + x_off + r * depth;
    __global float* o = dst + dst_off + r * depth;
    float m = -INFINITY;
    for (int i = 0; i < depth; i++) m = fmax(m, p[i]);
    float sum = 0.0f;
    for (int i = 0; i < depth; i++) {
        const float e = exp((p[i] - m) * beta);
        o[i] = e;
        sum += e;
    }
    for (int i = 0; i < depth; i++) o[i] /= sum;
}
