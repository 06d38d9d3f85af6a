/* Short causal depthwise convolution + optional SiLU, forward and backward, for one CPU thread.
 *
 * Same maths as short_conv_ref in models/short_conv.py (fla's ShortConvolution):
 *     z[b, t, d] = sum_{w < W} weight[d, w] * x[b, t - (W - 1) + w, d] (+ bias[d]),  x[< 0] = 0
 *     y = silu(z) when `silu`, else z
 * Layouts (row-major, contiguous): x, y, dy, dx [B, T, D]; the weight comes transposed, wt [W, D]
 * (so every inner loop runs over contiguous channels), dwt [W, D] likewise; bias, dbias [D] (bias
 * may be NULL). dwt and dbias are accumulated into (zero them first). `z` is scratch [D].
 * Built and loaded by models/native.py; plain C99.
 */
#include <math.h>
#include <stdint.h>

/* z[:] = pre-activation of token t of sequence b */
static inline void conv_row(const float *restrict x, const float *restrict wt, const float *restrict bias,
                            float *restrict z, int64_t b, int64_t t, int64_t T, int64_t D, int64_t W) {
    for (int64_t d = 0; d < D; d++) z[d] = bias ? bias[d] : 0.0f;
    for (int64_t w = 0; w < W; w++) {
        const int64_t s = t - (W - 1) + w;
        if (s < 0) continue;
        const float *restrict xs = x + (b * T + s) * D, *restrict ws = wt + w * D;
        for (int64_t d = 0; d < D; d++) z[d] += ws[d] * xs[d];
    }
}

void short_conv_forward(const float *restrict x, const float *restrict wt, const float *restrict bias,
                        float *restrict y, float *restrict z, int64_t silu, int64_t B, int64_t T, int64_t D,
                        int64_t W) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            conv_row(x, wt, bias, z, b, t, T, D, W);
            float *restrict yt = y + (b * T + t) * D;
            if (silu)
                for (int64_t d = 0; d < D; d++) yt[d] = z[d] / (1.0f + expf(-z[d]));
            else
                for (int64_t d = 0; d < D; d++) yt[d] = z[d];
        }
}

void short_conv_backward(const float *restrict x, const float *restrict wt, const float *restrict bias,
                         const float *restrict dy, float *restrict dz, float *restrict dx, float *restrict dwt,
                         float *restrict dbias, int64_t silu, int64_t B, int64_t T, int64_t D, int64_t W) {
    /* dz = dy * silu'(z), z recomputed; silu'(z) = s (1 + z (1 - s)), s = sigmoid(z). dz is [B, T, D]. */
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = (b * T + t) * D;
            float *restrict dzt = dz + row;
            const float *restrict dyt = dy + row;
            if (silu) {
                conv_row(x, wt, bias, dzt, b, t, T, D, W);
                for (int64_t d = 0; d < D; d++) {
                    const float s = 1.0f / (1.0f + expf(-dzt[d]));
                    dzt[d] = dyt[d] * s * (1.0f + dzt[d] * (1.0f - s));
                }
            } else {
                for (int64_t d = 0; d < D; d++) dzt[d] = dyt[d];
            }
            if (dbias)
                for (int64_t d = 0; d < D; d++) dbias[d] += dzt[d];
        }
    /* dx[t] = sum_w wt[w] dz[t + (W - 1) - w];  dwt[w] = sum_t dz[t] x[t - (W - 1) + w] */
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = (b * T + t) * D;
            float *restrict dxt = dx + row;
            const float *restrict dzt = dz + row;
            for (int64_t d = 0; d < D; d++) dxt[d] = 0.0f;
            for (int64_t w = 0; w < W; w++) {
                const int64_t s = t + (W - 1) - w, r = t - (W - 1) + w;
                const float *restrict ws = wt + w * D;
                float *restrict dws = dwt + w * D;
                if (s < T) {
                    const float *restrict dzs = dz + (b * T + s) * D;
                    for (int64_t d = 0; d < D; d++) dxt[d] += ws[d] * dzs[d];
                }
                if (r >= 0) {
                    const float *restrict xr = x + (b * T + r) * D;
                    for (int64_t d = 0; d < D; d++) dws[d] += dzt[d] * xr[d];
                }
            }
        }
}
