// The bundled kernels as PyTorch operators dispatched from C++: fuseprof::ln_shift_partition,
// window_attention, attention, window_reverse_residual, window_reverse_add, linear_residual,
// linear_gelu_tanh, linear and ln_mlp_residual, and the backward kernels window_attention_backward,
// ln_shift_partition_backward and window_reverse_backward, with CUDA implementations that call
// libfuseprof_kernels.so's C ABI (fpk_*) on the current stream. No Python runs per call, so a patched model called op by op costs what
// an aten op costs to dispatch, and CUDA graphs capture the launches.
//
// The schemas are defined here and their fake (meta) implementations in fuseprof_patch.py,
// which also registers CPU reference implementations (the tests run the patched models on CPU
// through them). fuseprof_patch.py compiles this file with g++ against the installed torch on
// first use, caches the library, loads it with torch.ops.load_library and calls
// fuseprof_ops_init with the kernels library's path; when it cannot be built the same ops are
// defined in Python instead (slower dispatch, same kernels).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <tuple>

namespace {

using u64 = uint64_t;
using FnAttention = int32_t (*)(int32_t, u64, u64, u64, u64, int64_t, int64_t, int64_t, int64_t, int32_t,
                                int64_t, float, void*);
using FnLnShiftPartition = int32_t (*)(int32_t, u64, u64, u64, u64, int64_t, int64_t, int64_t, int64_t,
                                       int64_t, int64_t, float, void*);
using FnWindowReverse = int32_t (*)(int32_t, u64, u64, u64, u64, u64, u64, int64_t, int64_t, int64_t, int64_t,
                                    int64_t, int64_t, float, void*);
using FnGemm = int32_t (*)(int32_t, int64_t, int64_t, int64_t, int64_t, u64, int64_t, int64_t, u64, int64_t,
                           int64_t, int32_t, u64, u64, u64, int64_t, int64_t, int32_t, void*);
using FnLnMlp = int32_t (*)(int32_t, u64, u64, u64, float, u64, u64, u64, u64, u64, int64_t, int64_t, int64_t,
                            void*);
using FnAttentionBackward = int32_t (*)(int32_t, u64, u64, u64, u64, u64, int64_t, int64_t, int64_t, int64_t, int64_t,
                                        float, void*);
using FnLnShiftPartitionBackward = int32_t (*)(int32_t, u64, u64, u64, u64, u64, u64, int64_t, int64_t, int64_t,
                                               int64_t, int64_t, int64_t, float, void*);
using FnWindowReverseBackward = int32_t (*)(int32_t, u64, u64, u64, u64, u64, u64, u64, u64, int64_t, int64_t, int64_t,
                                            int64_t, int64_t, int64_t, float, void*);
using FnLastError = size_t (*)(char*, size_t);

FnAttention g_attention = nullptr;
FnLnShiftPartition g_ln_shift_partition = nullptr;
FnWindowReverse g_window_reverse = nullptr;
FnGemm g_gemm = nullptr;
FnLnMlp g_ln_mlp = nullptr;
FnAttentionBackward g_attention_backward = nullptr;
FnLnShiftPartitionBackward g_ln_shift_partition_backward = nullptr;
FnWindowReverseBackward g_window_reverse_backward = nullptr;
FnLastError g_last_error = nullptr;

// Epilogue codes of fpk_gemm (kernels/src/gemm.rs, Epilogue::from_code).
constexpr int32_t kEpilogueNone = 0;
constexpr int32_t kEpilogueBias = 1;
constexpr int32_t kEpilogueBiasGeluTanh = 3;
constexpr int32_t kEpilogueBiasResidual = 4;

void check(int32_t status, const char* what) {
  if (status == 0) return;
  std::string msg = "unknown error";
  if (g_last_error) {
    char buf[4096];
    size_t n = g_last_error(buf, sizeof(buf));
    msg.assign(buf, n < sizeof(buf) ? n : sizeof(buf) - 1);
  }
  TORCH_CHECK(false, "fuseprof::", what, ": status ", status, ": ", msg);
}

void ready(const char* what) {
  TORCH_CHECK(g_gemm != nullptr, "fuseprof::", what, ": the kernels library is not loaded (fuseprof_ops_init)");
}

int32_t dtype_code(const at::Tensor& t) {
  if (t.scalar_type() == at::kHalf) return 0;
  if (t.scalar_type() == at::kBFloat16) return 1;
  TORCH_CHECK(false, "fuseprof: dtype ", t.scalar_type(), " not supported (fp16, bf16)");
}

u64 ptr(const at::Tensor& t) { return reinterpret_cast<u64>(t.data_ptr()); }

u64 opt_ptr(const c10::optional<at::Tensor>& t) { return t.has_value() ? ptr(*t) : 0; }

void* stream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.get_device()).stream(); }

at::Tensor ln_shift_partition(const at::Tensor& x_, const at::Tensor& gamma, const at::Tensor& beta,
                              int64_t window, int64_t shift, double eps) {
  ready("ln_shift_partition");
  at::Tensor x = x_.contiguous();
  TORCH_CHECK(x.dim() == 4, "fuseprof::ln_shift_partition: x must be [B, H, W, C]");
  int64_t b = x.size(0), h = x.size(1), w = x.size(2), c = x.size(3);
  int64_t nh = (h + window - 1) / window, nw = (w + window - 1) / window;
  at::Tensor out = at::empty({b * nh * nw, window * window, c}, x.options());
  at::Tensor g = gamma.contiguous(), be = beta.contiguous();
  check(g_ln_shift_partition(dtype_code(x), ptr(x), ptr(g), ptr(be), ptr(out), b, h, w, c, window, shift,
                             static_cast<float>(eps), stream(x)),
        "ln_shift_partition");
  return out;
}

// qkv: [tokens, 3 * heads * d] -> [tokens, heads * d]. mask_kind as fpk_attention: 0 none,
// 2 key padding ([batch, seq] additive), 3 precombined bias + window mask (attention_add).
at::Tensor attention_impl(const at::Tensor& qkv_, const c10::optional<at::Tensor>& mask, int32_t kind,
                          int64_t n_mask, int64_t heads, int64_t seq, double scale, const char* what) {
  ready(what);
  at::Tensor qkv = qkv_.contiguous();
  int64_t width = qkv.size(-1);
  int64_t tokens = qkv.numel() / width;
  int64_t d = width / (3 * heads);
  TORCH_CHECK(tokens % seq == 0, "fuseprof::", what, ": token count is not a multiple of seq");
  at::Tensor out = at::empty({tokens, heads * d}, qkv.options());
  c10::optional<at::Tensor> m;
  if (mask.has_value()) m = mask->contiguous();
  check(g_attention(dtype_code(qkv), ptr(qkv), ptr(out), 0, opt_ptr(m), tokens / seq, seq, heads, d, kind, n_mask,
                    static_cast<float>(scale), stream(qkv)),
        what);
  return out;
}

at::Tensor window_attention(const at::Tensor& qkv, const at::Tensor& add, int64_t heads, int64_t seq,
                            double scale) {
  return attention_impl(qkv, add, 3, add.size(0), heads, seq, scale, "window_attention");
}

at::Tensor attention(const at::Tensor& qkv, int64_t heads, int64_t seq, double scale,
                     const c10::optional<at::Tensor>& key_padding_mask) {
  int64_t batch = (qkv.numel() / qkv.size(-1)) / seq;
  if (key_padding_mask.has_value()) {
    TORCH_CHECK(key_padding_mask->numel() == batch * seq, "fuseprof::attention: key_padding_mask must be [B, seq]");
    return attention_impl(qkv, key_padding_mask, 2, batch, heads, seq, scale, "attention");
  }
  return attention_impl(qkv, c10::nullopt, 0, 0, heads, seq, scale, "attention");
}

std::tuple<at::Tensor, at::Tensor> window_reverse_residual(const at::Tensor& windows_, const at::Tensor& shortcut_,
                                                           int64_t window, int64_t shift, const at::Tensor& gamma,
                                                           const at::Tensor& beta, double eps) {
  ready("window_reverse_residual");
  at::Tensor windows = windows_.contiguous(), shortcut = shortcut_.contiguous();
  TORCH_CHECK(shortcut.dim() == 4, "fuseprof::window_reverse_residual: shortcut must be [B, H, W, C]");
  at::Tensor out = at::empty_like(shortcut), ln_out = at::empty_like(shortcut);
  at::Tensor g = gamma.contiguous(), be = beta.contiguous();
  check(g_window_reverse(dtype_code(windows), ptr(windows), ptr(shortcut), ptr(out), ptr(g), ptr(be), ptr(ln_out),
                         shortcut.size(0), shortcut.size(1), shortcut.size(2), shortcut.size(3), window, shift,
                         static_cast<float>(eps), stream(windows)),
        "window_reverse_residual");
  return {out, ln_out};
}

// y[M, N] = x[M, K] @ weight[N, K]^T (+ bias, + epilogue) as one 2-D cuBLASLt GEMM over all leading
// dimensions of x; `residual` has y's shape. Returns [..., N].
at::Tensor linear_impl(const at::Tensor& x_, const at::Tensor& weight_, const c10::optional<at::Tensor>& bias,
                       const c10::optional<at::Tensor>& residual, int32_t epilogue, const char* what) {
  ready(what);
  at::Tensor x = x_.contiguous(), weight = weight_.contiguous();
  int64_t k = x.size(-1), n = weight.size(0);
  TORCH_CHECK(weight.size(1) == k, "fuseprof::", what, ": inner dimensions differ (", k, " vs ", weight.size(1), ")");
  int64_t m = x.numel() / k;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = n;
  at::Tensor out = at::empty(shape, x.options());
  c10::optional<at::Tensor> b, r;
  if (bias.has_value()) b = bias->contiguous();
  if (residual.has_value()) {
    r = residual->contiguous();
    TORCH_CHECK(r->numel() == m * n, "fuseprof::", what, ": residual must have the output's shape");
  }
  check(g_gemm(dtype_code(x), m, n, k, 1, ptr(x), k, m * k, ptr(weight), k, 0, 0, opt_ptr(b), opt_ptr(r), ptr(out),
               n, m * n, epilogue, stream(x)),
        what);
  return out;
}

at::Tensor linear_residual(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& residual) {
  return linear_impl(x, weight, bias, residual, kEpilogueBiasResidual, "linear_residual");
}

at::Tensor linear_gelu_tanh(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return linear_impl(x, weight, bias, c10::nullopt, kEpilogueBiasGeluTanh, "linear_gelu_tanh");
}

// y = x @ weight^T + bias, first n columns. The weight may be zero-padded (once, by the caller)
// to [N8, K8] and the bias to N8: x's K columns are then padded to K8 per call, the GEMM writes
// [M, N8], and the first n columns are returned.
at::Tensor linear(const at::Tensor& x_, const at::Tensor& weight_padded, const c10::optional<at::Tensor>& bias,
                         int64_t n) {
  at::Tensor x = x_;
  int64_t k8 = weight_padded.size(1);
  if (x.size(-1) != k8) x = at::constant_pad_nd(x, {0, k8 - x.size(-1)});
  at::Tensor y = linear_impl(x, weight_padded, bias, c10::nullopt, bias.has_value() ? kEpilogueBias : kEpilogueNone,
                             "linear");
  return n == y.size(-1) ? y : y.narrow(-1, 0, n).contiguous();
}

// windows reversed, shifted back and added to the shortcut, without the LayerNorm output.
at::Tensor window_reverse_add(const at::Tensor& windows_, const at::Tensor& shortcut_, int64_t window,
                              int64_t shift) {
  ready("window_reverse_add");
  at::Tensor windows = windows_.contiguous(), shortcut = shortcut_.contiguous();
  TORCH_CHECK(shortcut.dim() == 4, "fuseprof::window_reverse_add: shortcut must be [B, H, W, C]");
  at::Tensor out = at::empty_like(shortcut);
  check(g_window_reverse(dtype_code(windows), ptr(windows), ptr(shortcut), ptr(out), 0, 0, 0, shortcut.size(0),
                         shortcut.size(1), shortcut.size(2), shortcut.size(3), window, shift, 0.f, stream(windows)),
        "window_reverse_add");
  return out;
}

// x + gelu_erf(layer_norm(x) @ w1^T + b1) @ w2^T + b2 in one kernel: [..., C] -> [..., C].
at::Tensor ln_mlp_residual(const at::Tensor& x_, const at::Tensor& gamma_, const at::Tensor& beta_, double eps,
                           const at::Tensor& w1_, const at::Tensor& b1_, const at::Tensor& w2_, const at::Tensor& b2_) {
  ready("ln_mlp_residual");
  at::Tensor x = x_.contiguous(), gamma = gamma_.contiguous(), beta = beta_.contiguous(), w1 = w1_.contiguous(),
             b1 = b1_.contiguous(), w2 = w2_.contiguous(), b2 = b2_.contiguous();
  int64_t c = x.size(-1), hid = w1.size(0), m = x.numel() / c;
  TORCH_CHECK(w1.size(1) == c && w2.size(0) == c && w2.size(1) == hid && gamma.numel() == c && beta.numel() == c,
              "fuseprof::ln_mlp_residual: shapes do not chain");
  at::Tensor out = at::empty_like(x);
  check(g_ln_mlp(dtype_code(x), ptr(x), ptr(gamma), ptr(beta), static_cast<float>(eps), ptr(w1), ptr(b1), ptr(w2),
                 ptr(b2), ptr(out), m, c, hid, stream(x)),
        "ln_mlp_residual");
  return out;
}

// The gradient of window_attention: (dqkv, dadd), dadd in add's layout and dtype (the padding
// columns zero) summed over the windows that share a term, or empty when need_add is false.
std::tuple<at::Tensor, at::Tensor> window_attention_backward(const at::Tensor& qkv_, const at::Tensor& add_,
                                                             const at::Tensor& grad, int64_t heads, int64_t seq,
                                                             double scale, bool need_add) {
  ready("window_attention_backward");
  at::Tensor qkv = qkv_.contiguous(), add = add_.contiguous();
  int64_t width = qkv.size(-1), tokens = qkv.numel() / width, d = width / (3 * heads);
  TORCH_CHECK(tokens % seq == 0, "fuseprof::window_attention_backward: token count is not a multiple of seq");
  at::Tensor dout = grad.to(qkv.scalar_type()).reshape({tokens, heads * d}).contiguous();
  at::Tensor dqkv = at::empty_like(qkv);
  at::Tensor dadd = at::empty({0}, add.options());
  at::Tensor dadd32;
  if (need_add) dadd32 = at::zeros({add.size(0), heads, seq, seq}, qkv.options().dtype(at::kFloat));
  check(g_attention_backward(dtype_code(qkv), ptr(qkv), ptr(dout), ptr(add), ptr(dqkv), need_add ? ptr(dadd32) : 0,
                             tokens / seq, seq, heads, d, add.size(0), static_cast<float>(scale), stream(qkv)),
        "window_attention_backward");
  if (need_add) dadd = at::constant_pad_nd(dadd32, {0, add.size(-1) - seq}).to(add.scalar_type());
  return {dqkv.view(qkv_.sizes()), dadd};
}

// The gradient of ln_shift_partition: (dx, dgamma, dbeta), the last two float32 [C] or empty.
std::tuple<at::Tensor, at::Tensor, at::Tensor> ln_shift_partition_backward(const at::Tensor& grad,
                                                                           const at::Tensor& x_,
                                                                           const at::Tensor& gamma_, int64_t window,
                                                                           int64_t shift, double eps,
                                                                           bool need_params) {
  ready("ln_shift_partition_backward");
  at::Tensor x = x_.contiguous();
  TORCH_CHECK(x.dim() == 4, "fuseprof::ln_shift_partition_backward: x must be [B, H, W, C]");
  at::Tensor dy = grad.to(x.scalar_type()).contiguous(), gamma = gamma_.to(x.scalar_type()).contiguous();
  int64_t c = x.size(3);
  at::Tensor dx = at::empty_like(x);
  at::Tensor dgamma = at::zeros({need_params ? c : 0}, x.options().dtype(at::kFloat));
  at::Tensor dbeta = at::zeros({need_params ? c : 0}, x.options().dtype(at::kFloat));
  check(g_ln_shift_partition_backward(dtype_code(x), ptr(dy), ptr(x), ptr(gamma), ptr(dx),
                                      need_params ? ptr(dgamma) : 0, need_params ? ptr(dbeta) : 0, x.size(0),
                                      x.size(1), x.size(2), c, window, shift, static_cast<float>(eps), stream(x)),
        "ln_shift_partition_backward");
  return {dx, dgamma, dbeta};
}

// The gradient of window_reverse_residual (of window_reverse_add without g_ln): (d_windows,
// d_shortcut, dgamma, dbeta) for the sum's gradient g_out and the LayerNorm output's g_ln at the
// saved sum y; d_shortcut, dgamma and dbeta empty where not asked for.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> window_reverse_backward(
    const c10::optional<at::Tensor>& g_out_, const c10::optional<at::Tensor>& g_ln_, const c10::optional<at::Tensor>& y_,
    const c10::optional<at::Tensor>& gamma_, int64_t window, int64_t shift, double eps, bool need_shortcut,
    bool need_params) {
  ready("window_reverse_backward");
  TORCH_CHECK(g_out_.has_value() || g_ln_.has_value(), "fuseprof::window_reverse_backward: no gradient given");
  TORCH_CHECK(g_ln_.has_value() == y_.has_value() && g_ln_.has_value() == gamma_.has_value(),
              "fuseprof::window_reverse_backward: g_ln needs y and gamma");
  const at::Tensor& first = g_out_.has_value() ? *g_out_ : *g_ln_;
  at::ScalarType dt = y_.has_value() ? y_->scalar_type() : first.scalar_type();
  auto prep = [&](const c10::optional<at::Tensor>& t) -> c10::optional<at::Tensor> {
    if (!t.has_value()) return c10::nullopt;
    return t->to(dt).contiguous();
  };
  c10::optional<at::Tensor> g_out = prep(g_out_), g_ln = prep(g_ln_), y = prep(y_), gamma = prep(gamma_);
  const at::Tensor& ref = g_out.has_value() ? *g_out : *g_ln;
  TORCH_CHECK(ref.dim() == 4, "fuseprof::window_reverse_backward: gradients must be [B, H, W, C]");
  int64_t b = ref.size(0), h = ref.size(1), w = ref.size(2), c = ref.size(3);
  int64_t nh = (h + window - 1) / window, nw = (w + window - 1) / window;
  at::Tensor d_windows = at::empty({b * nh * nw, window * window, c}, ref.options());
  at::Tensor d_shortcut = need_shortcut ? at::empty_like(ref) : at::empty({0}, ref.options());
  bool params = need_params && g_ln.has_value();
  at::Tensor dgamma = params ? at::zeros({c}, ref.options().dtype(at::kFloat)) : at::empty({0}, ref.options());
  at::Tensor dbeta = params ? at::zeros({c}, ref.options().dtype(at::kFloat)) : at::empty({0}, ref.options());
  check(g_window_reverse_backward(dtype_code(ref), opt_ptr(g_out), opt_ptr(g_ln), opt_ptr(y), opt_ptr(gamma),
                                  need_shortcut ? ptr(d_shortcut) : 0, ptr(d_windows), params ? ptr(dgamma) : 0,
                                  params ? ptr(dbeta) : 0, b, h, w, c, window, shift, static_cast<float>(eps),
                                  stream(ref)),
        "window_reverse_backward");
  return {d_windows, d_shortcut, dgamma, dbeta};
}

}  // namespace

extern "C" int fuseprof_ops_init(const char* kernels_lib) {
  void* h = dlopen(kernels_lib, RTLD_NOW | RTLD_GLOBAL);
  if (!h) return 1;
  g_attention = reinterpret_cast<FnAttention>(dlsym(h, "fpk_attention"));
  g_ln_shift_partition = reinterpret_cast<FnLnShiftPartition>(dlsym(h, "fpk_ln_shift_partition"));
  g_window_reverse = reinterpret_cast<FnWindowReverse>(dlsym(h, "fpk_window_reverse_residual"));
  g_last_error = reinterpret_cast<FnLastError>(dlsym(h, "fpk_last_error"));
  g_gemm = reinterpret_cast<FnGemm>(dlsym(h, "fpk_gemm"));
  g_ln_mlp = reinterpret_cast<FnLnMlp>(dlsym(h, "fpk_ln_mlp_residual"));
  g_attention_backward = reinterpret_cast<FnAttentionBackward>(dlsym(h, "fpk_attention_backward"));
  g_ln_shift_partition_backward =
      reinterpret_cast<FnLnShiftPartitionBackward>(dlsym(h, "fpk_ln_shift_partition_backward"));
  g_window_reverse_backward = reinterpret_cast<FnWindowReverseBackward>(dlsym(h, "fpk_window_reverse_residual_backward"));
  if (!g_attention || !g_ln_shift_partition || !g_window_reverse || !g_last_error || !g_gemm || !g_ln_mlp ||
      !g_attention_backward || !g_ln_shift_partition_backward || !g_window_reverse_backward) {
    g_gemm = nullptr;
    return 2;
  }
  return 0;
}

TORCH_LIBRARY(fuseprof, m) {
  m.def("ln_shift_partition(Tensor x, Tensor gamma, Tensor beta, int window, int shift, float eps) -> Tensor");
  m.def("window_attention(Tensor qkv, Tensor add, int heads, int seq, float scale) -> Tensor");
  m.def("attention(Tensor qkv, int heads, int seq, float scale, Tensor? key_padding_mask=None) -> Tensor");
  m.def(
      "window_reverse_residual(Tensor windows, Tensor shortcut, int window, int shift, Tensor gamma, Tensor beta, "
      "float eps) -> (Tensor, Tensor)");
  m.def("linear_residual(Tensor x, Tensor weight, Tensor bias, Tensor residual) -> Tensor");
  m.def("linear_gelu_tanh(Tensor x, Tensor weight, Tensor bias) -> Tensor");
  m.def("linear(Tensor x, Tensor weight_padded, Tensor? bias, int n) -> Tensor");
  m.def("window_reverse_add(Tensor windows, Tensor shortcut, int window, int shift) -> Tensor");
  m.def(
      "ln_mlp_residual(Tensor x, Tensor gamma, Tensor beta, float eps, Tensor w1, Tensor b1, Tensor w2, Tensor b2) "
      "-> Tensor");
  m.def(
      "window_attention_backward(Tensor qkv, Tensor add, Tensor grad, int heads, int seq, float scale, "
      "bool need_add) -> (Tensor, Tensor)");
  m.def(
      "ln_shift_partition_backward(Tensor grad, Tensor x, Tensor gamma, int window, int shift, float eps, "
      "bool need_params) -> (Tensor, Tensor, Tensor)");
  m.def(
      "window_reverse_backward(Tensor? g_out, Tensor? g_ln, Tensor? y, Tensor? gamma, int window, int shift, "
      "float eps, bool need_shortcut, bool need_params) -> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(fuseprof, CUDA, m) {
  m.impl("ln_shift_partition", &ln_shift_partition);
  m.impl("window_attention", &window_attention);
  m.impl("attention", &attention);
  m.impl("window_reverse_residual", &window_reverse_residual);
  m.impl("linear_residual", &linear_residual);
  m.impl("linear_gelu_tanh", &linear_gelu_tanh);
  m.impl("linear", &linear);
  m.impl("window_reverse_add", &window_reverse_add);
  m.impl("ln_mlp_residual", &ln_mlp_residual);
  m.impl("window_attention_backward", &window_attention_backward);
  m.impl("ln_shift_partition_backward", &ln_shift_partition_backward);
  m.impl("window_reverse_backward", &window_reverse_backward);
}
