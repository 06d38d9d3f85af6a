/* The delta rule, token by token, in C: forward and backward for one CPU thread.
 *
 * Same maths as delta_rule_recurrence in models/delta_rule.py (prepared fp32 inputs, q already
 * scaled), token by token for all heads of a sequence at once, so the H states stay in cache and
 * the inputs are read in order:
 *
 *     w_t = S_{t-1}^T k_t,  u_t = beta_t (v_t - w_t),  S_t = S_{t-1} + k_t u_t^T,  o_t = S_t^T q_t
 *
 * With a decay alpha (NULL: none), the state is first multiplied by alpha_t and S_{t-1} above reads
 * alpha_t S_{t-1}: alpha [B, T, H] (A = 1: one decay per head, the gated delta rule,
 * models/gated_delta_rule.py) or [B, T, H, V] (A = V: one per value column, S_{t-1} Diag(alpha_t), the
 * value-gated delta rule, models/value_gated_delta_rule.py). The A = 1 path computes what it did
 * before A existed, operation for operation.
 *
 * Layouts (row-major, contiguous): q, k [B, T, H, K]; v, o [B, T, H, V]; beta [B, T, H];
 * states S [B, H, K, V]. For the backward pass the forward keeps only every BLOCK-th state,
 * `ckpt` [B, ceil(T / BLOCK), H, K, V] (the state before tokens 0, BLOCK, 2 BLOCK, ...; NULL when
 * no backward follows), and the backward recomputes the BLOCK states of one block at a time into
 * `scratch` [BLOCK, H, K, V]: 1/BLOCK of the memory of keeping every state, and no fresh pages
 * to fault in at every training step. `states` (NULL: not kept) receives the state after every
 * `stride`-th token, [B, T / stride, H, K, V] (T a multiple of stride): what hook_state shows, written
 * once per token as the recurrence passes it (a DeltaProduct token is `stride` sub-tokens). With
 * `slots` [B, T / stride] (int64; NULL: every state), only the states whose slot is >= 0 are kept,
 * in `states` [rows, H, K, V] at row slots[b, step]: a capture of some positions' S_t never
 * allocates the others.
 * Built and loaded by models/native.py; plain C99, no Python or torch headers.
 */
#include <stdint.h>
#include <string.h>

#define BLOCK 16
#define LANES 16 /* independent partial sums: a dot product the compiler can vectorise without -ffast-math */

/* sum_j a_j b_j over n floats, in LANES interleaved partial sums (a plain `s += a[j] * b[j]` is a serial
 * chain the compiler may not reorder, so it runs one multiply-add at a time) */
static inline float dotp(const float *restrict a, const float *restrict b, int64_t n) {
    float part[LANES] = {0.0f};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int64_t l = 0; l < LANES; l++) part[l] += a[j + l] * b[j + l];
    float s = 0.0f;
    for (; j < n; j++) s += a[j] * b[j];
    for (int64_t l = 0; l < LANES; l++) s += part[l];
    return s;
}

/* w = a S^T k and u = beta (v - w) for one head and token (a: the decay, 1 without one) */
static inline void new_value(const float *restrict s, const float *restrict kt, const float *restrict vt, float bt,
                             float a, float *restrict w, float *restrict u, int64_t K, int64_t V) {
    for (int64_t j = 0; j < V; j++) w[j] = 0.0f;
    for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) w[j] += s[i * V + j] * kt[i];
    for (int64_t j = 0; j < V; j++) {
        w[j] *= a;
        u[j] = bt * (vt[j] - w[j]);
    }
}

static inline void forward_body(const float *restrict q, const float *restrict k, const float *restrict v,
                                const float *restrict beta, const float *restrict alpha, int64_t A, float *restrict S,
                                float *restrict o, float *restrict ckpt, float *restrict states, int64_t stride,
                                const int64_t *restrict slots, int64_t B, int64_t T, int64_t H, int64_t K, int64_t V) {
    const int64_t NB = (T + BLOCK - 1) / BLOCK, TS = T / stride;
    float w[V], u[V];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                float *restrict s = S + (b * H + h) * K * V;
                const int64_t tok = (b * T + t) * H + h;
                const float *restrict qt = q + tok * K, *restrict kt = k + tok * K;
                if (ckpt && t % BLOCK == 0)
                    memcpy(ckpt + ((b * NB + t / BLOCK) * H + h) * K * V, s, sizeof(float) * K * V);
                if (alpha && A == 1) {
                    const float a = alpha[tok];
                    for (int64_t i = 0; i < K * V; i++) s[i] *= a;
                } else if (alpha) {
                    const float *restrict at = alpha + tok * V;
                    for (int64_t i = 0; i < K; i++)
                        for (int64_t j = 0; j < V; j++) s[i * V + j] *= at[j];
                }
                new_value(s, kt, v + tok * V, beta[tok], 1.0f, w, u, K, V);
                float *restrict ot = o + tok * V;
                for (int64_t j = 0; j < V; j++) ot[j] = 0.0f;
                for (int64_t i = 0; i < K; i++)
                    for (int64_t j = 0; j < V; j++) {
                        s[i * V + j] += kt[i] * u[j];
                        ot[j] += s[i * V + j] * qt[i];
                    }
                if (states && (t + 1) % stride == 0) {
                    const int64_t row = slots ? slots[b * TS + t / stride] : b * TS + t / stride;
                    if (row >= 0) memcpy(states + (row * H + h) * K * V, s, sizeof(float) * K * V);
                }
            }
}

/* Gradients of o (and of the final state: dS on entry) back to q, k, v, beta, the decay alpha and
 * the initial state (dS on exit), block by block from the end, each block's states recomputed from
 * `ckpt`. With A = V the decay is per value column: av holds alpha_t's V entries (all 1 without alpha),
 * and the A = 1 branches keep the scalar decay's own arithmetic. */
static inline void backward_body(const float *restrict q, const float *restrict k, const float *restrict v,
                                 const float *restrict beta, const float *restrict alpha, int64_t A,
                                 const float *restrict ckpt, const float *restrict dO, float *restrict dS,
                                 float *restrict dq, float *restrict dk, float *restrict dv, float *restrict dbeta,
                                 float *restrict dalpha, float *restrict scratch, int64_t B, int64_t T, int64_t H,
                                 int64_t K, int64_t V) {
    const int64_t NB = (T + BLOCK - 1) / BLOCK, KV = K * V;
    const int columns = alpha && A != 1;
    float w[V], u[V], du[V], av[V], ado[V], da[V];
    for (int64_t j = 0; j < V; j++) av[j] = 1.0f;
    for (int64_t b = 0; b < B; b++)
        for (int64_t blk = NB - 1; blk >= 0; blk--) {
            const int64_t t0 = blk * BLOCK, t1 = t0 + BLOCK < T ? t0 + BLOCK : T;
            /* scratch[(t - t0) H + h] = S_{t-1} of head h, for t in [t0, t1) */
            memcpy(scratch, ckpt + (b * NB + blk) * H * KV, sizeof(float) * H * KV);
            for (int64_t t = t0; t + 1 < t1; t++)
                for (int64_t h = 0; h < H; h++) {
                    const int64_t tok = (b * T + t) * H + h;
                    const float *restrict sp = scratch + ((t - t0) * H + h) * KV;
                    float *restrict sn = scratch + ((t + 1 - t0) * H + h) * KV;
                    const float *restrict kt = k + tok * K;
                    if (columns) {
                        memcpy(av, alpha + tok * V, sizeof(float) * V);
                        new_value(sp, kt, v + tok * V, beta[tok], 1.0f, w, u, K, V);
                        for (int64_t j = 0; j < V; j++) { /* w = (S_{t-1} Diag(a))^T k */
                            w[j] *= av[j];
                            u[j] = beta[tok] * (v[tok * V + j] - w[j]);
                        }
                        for (int64_t i = 0; i < K; i++)
                            for (int64_t j = 0; j < V; j++) sn[i * V + j] = av[j] * sp[i * V + j] + kt[i] * u[j];
                        continue;
                    }
                    const float a = alpha ? alpha[tok] : 1.0f;
                    new_value(sp, kt, v + tok * V, beta[tok], a, w, u, K, V);
                    for (int64_t i = 0; i < K; i++)
                        for (int64_t j = 0; j < V; j++) sn[i * V + j] = a * sp[i * V + j] + kt[i] * u[j];
                }
            for (int64_t t = t1 - 1; t >= t0; t--)
                for (int64_t h = 0; h < H; h++) {
                    float *restrict ds = dS + (b * H + h) * KV;
                    const int64_t tok = (b * T + t) * H + h;
                    const float *restrict qt = q + tok * K, *restrict kt = k + tok * K, *restrict vt = v + tok * V;
                    const float *restrict dot = dO + tok * V;
                    const float *restrict sp = scratch + ((t - t0) * H + h) * KV;
                    const float bt = beta[tok], a = alpha && !columns ? alpha[tok] : 1.0f;
                    float *restrict dqt = dq + tok * K, *restrict dkt = dk + tok * K, *restrict dvt = dv + tok * V;
                    if (columns) {
                        memcpy(av, alpha + tok * V, sizeof(float) * V);
                        new_value(sp, kt, vt, bt, 1.0f, w, u, K, V);
                        for (int64_t j = 0; j < V; j++) {
                            w[j] *= av[j];
                            u[j] = bt * (vt[j] - w[j]);
                            ado[j] = av[j] * dot[j];
                        }
                    } else {
                        new_value(sp, kt, vt, bt, a, w, u, K, V);
                    }
                    const float u_do = dotp(u, dot, V);
                    /* o_t = S_t^T q_t, S_t = S_{t-1} Diag(a) + k_t u_t^T: dq_t = S_{t-1} Diag(a) do_t + k_t (u_t . do_t) */
                    for (int64_t i = 0; i < K; i++)
                        dqt[i] = (columns ? dotp(sp + i * V, ado, V) : a * dotp(sp + i * V, dot, V)) + kt[i] * u_do;
                    /* dS_t += q_t do_t^T; then du_t = dS_t^T k_t and dk_t = dS_t u_t (from k_t u_t^T) */
                    for (int64_t j = 0; j < V; j++) du[j] = 0.0f;
                    for (int64_t i = 0; i < K; i++) {
                        float *restrict dsi = ds + i * V;
                        for (int64_t j = 0; j < V; j++) {
                            dsi[j] += qt[i] * dot[j];
                            du[j] += dsi[j] * kt[i];
                        }
                        dkt[i] = dotp(dsi, u, V);
                    }
                    /* u_t = beta_t (v_t - w_t), w_t = (S_{t-1} Diag(a))^T k_t */
                    float db = 0.0f;
                    for (int64_t j = 0; j < V; j++) {
                        db += du[j] * (vt[j] - w[j]);
                        dvt[j] = bt * du[j];
                        du[j] = -bt * du[j]; /* now dw_t */
                    }
                    dbeta[tok] = db;
                    /* dk_t += S_{t-1} Diag(a) dw_t;  dS' = dS_t + k_t dw_t^T (S' = S_{t-1} Diag(a));
                     * d alpha_t = <dS', S_{t-1}> (per column with A = V),  dS_{t-1} = dS' Diag(a) */
                    if (columns) {
                        for (int64_t j = 0; j < V; j++) {
                            ado[j] = av[j] * du[j]; /* now Diag(a) dw_t */
                            da[j] = 0.0f;
                        }
                        for (int64_t i = 0; i < K; i++) {
                            float *restrict dsi = ds + i * V;
                            const float *restrict spi = sp + i * V;
                            dkt[i] += dotp(spi, ado, V);
                            for (int64_t j = 0; j < V; j++) {
                                dsi[j] += kt[i] * du[j];
                                da[j] += dsi[j] * spi[j];
                                dsi[j] *= av[j];
                            }
                        }
                        memcpy(dalpha + tok * V, da, sizeof(float) * V);
                        continue;
                    }
                    float dascalar = 0.0f;
                    for (int64_t i = 0; i < K; i++) {
                        float *restrict dsi = ds + i * V;
                        dkt[i] += a * dotp(sp + i * V, du, V);
                        for (int64_t j = 0; j < V; j++) dsi[j] += kt[i] * du[j];
                        if (alpha) dascalar += dotp(dsi, sp + i * V, V);
                    }
                    if (alpha) {
                        dalpha[tok] = dascalar;
                        for (int64_t i = 0; i < K * V; i++) ds[i] *= a;
                    }
                }
        }
}

/* The exported entry points. The common head sizes get a copy compiled with K and V fixed, so
 * the compiler unrolls and vectorises the inner loops over V. */
#define DISPATCH(body, ...)                                                                          \
    if (K == 16 && V == 16) body(__VA_ARGS__, B, T, H, 16, 16);                                      \
    else if (K == 32 && V == 32) body(__VA_ARGS__, B, T, H, 32, 32);                                 \
    else if (K == 64 && V == 64) body(__VA_ARGS__, B, T, H, 64, 64);                                 \
    else if (K == 128 && V == 128) body(__VA_ARGS__, B, T, H, 128, 128);                             \
    else body(__VA_ARGS__, B, T, H, K, V);

int64_t delta_rule_block(void) { return BLOCK; }

void delta_rule_forward(const float *q, const float *k, const float *v, const float *beta, const float *alpha,
                        int64_t A, float *S, float *o, float *ckpt, int64_t B, int64_t T, int64_t H, int64_t K,
                        int64_t V) {
    DISPATCH(forward_body, q, k, v, beta, alpha, A, S, o, ckpt, NULL, 1, NULL)
}

void delta_rule_forward_states(const float *q, const float *k, const float *v, const float *beta, const float *alpha,
                               int64_t A, float *S, float *o, float *states, int64_t stride, int64_t B, int64_t T,
                               int64_t H, int64_t K, int64_t V) {
    DISPATCH(forward_body, q, k, v, beta, alpha, A, S, o, NULL, states, stride, NULL)
}

void delta_rule_forward_rows(const float *q, const float *k, const float *v, const float *beta, const float *alpha,
                             int64_t A, float *S, float *o, float *states, const int64_t *slots, int64_t stride,
                             int64_t B, int64_t T, int64_t H, int64_t K, int64_t V) {
    DISPATCH(forward_body, q, k, v, beta, alpha, A, S, o, NULL, states, stride, slots)
}

void delta_rule_backward(const float *q, const float *k, const float *v, const float *beta, const float *alpha,
                         int64_t A, const float *ckpt, const float *dO, float *dS, float *dq, float *dk, float *dv,
                         float *dbeta, float *dalpha, float *scratch, int64_t B, int64_t T, int64_t H, int64_t K,
                         int64_t V) {
    DISPATCH(backward_body, q, k, v, beta, alpha, A, ckpt, dO, dS, dq, dk, dv, dbeta, dalpha, scratch)
}
