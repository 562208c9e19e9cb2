// fuseprof's PyTorch op observer: one range per operator on the thread that runs it, named as
// torch.autograd.profiler.emit_nvtx(record_shapes=True) names its NVTX ranges
//   aten::addmm, seq = 12, sizes = [[768], [8192, 768], [768, 768], [], []]
// and pushed straight into the fuseprof tracer (fuseprof_range_push / fuseprof_range_pop).
//
// Why not emit_nvtx: with record_shapes it also records every op's outputs, keeps a map from
// tensors to the ops that made them (for its input_op_ids field) and builds each name through
// repeated fmt::format copies; under a tracer that doubled the cost of a Swin-T step. This
// observer builds the name once in a per-thread buffer from the inputs alone.
//
// sitecustomize.py compiles it on first use against the installed torch (g++, torch's headers,
// -DNDEBUG as torch's release builds: RecordFunction's members depend on it) and caches the
// library; it falls back to emit_nvtx when that fails.
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <dlfcn.h>

#include <cstdint>
#include <string>

namespace {

using PushFn = int (*)(const char*, size_t);
using PopFn = int (*)();

PushFn g_push = nullptr;
PopFn g_pop = nullptr;
bool g_shapes = false;

void append_int(std::string& s, int64_t v) {
  char digits[24];
  int n = 0;
  uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  do {
    digits[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (v < 0) s.push_back('-');
  while (n > 0) s.push_back(digits[--n]);
}

void append_sizes(std::string& s, const at::Tensor& t) {
  s.push_back('[');
  // Nested and symbolic-size tensors have no plain sizes: they show as [] (as undefined ones).
  if (t.defined() && !t.is_nested() && !t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    const auto sizes = t.sizes();
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (i > 0) s.append(", ");
      append_int(s, sizes[i]);
    }
  }
  s.push_back(']');
}

void build_name(std::string& s, const at::RecordFunction& fn) {
  s.append(fn.name());
  const int64_t seq = fn.seqNr();
  if (seq >= 0) {
    s.append(", seq = ");
    append_int(s, seq);
  }
  // As emit_nvtx: no sizes field for a range without inputs (autograd's evaluate_function).
  if (g_shapes && !fn.inputs().empty()) {
    s.append(", sizes = [");
    bool first = true;
    auto next = [&] {
      if (!first) s.append(", ");
      first = false;
    };
    for (const c10::IValue& v : fn.inputs()) {
      if (v.isTensor()) {
        next();
        append_sizes(s, v.toTensor());
      } else if (v.isList()) {
        // As emit_nvtx: the tensors of a list (Tensor[], Tensor?[]) are flattened into one
        // entry each (undefined ones left out); a list without tensors (int[]) is one empty entry.
        bool any = false;
        for (const c10::IValue& e : v.toListRef()) {
          if (e.isTensor() && e.toTensor().defined()) {
            next();
            append_sizes(s, e.toTensor());
            any = true;
          }
        }
        if (!any) {
          next();
          s.append("[]");
        }
      } else {
        next();
        s.append("[]");
      }
    }
    s.push_back(']');
  }
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  thread_local std::string s;
  s.clear();
  try {
    build_name(s, fn);
  } catch (...) {  // never let naming fail the op; the range still opens (on_exit pops it)
    s.assign(fn.name());
  }
  g_push(s.data(), s.size());
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext*) { g_pop(); }

}  // namespace

// Finds the tracer's entry points in `tracer` (already loaded by NVTX or CUDA, or loaded here)
// and registers the observer for every thread. Returns 0, or -1 when the library cannot be
// opened, -2 when it lacks the entry points.
extern "C" int fuseprof_ops_install(const char* tracer, int shapes) {
  void* h = dlopen(tracer, RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) return -1;
  g_push = reinterpret_cast<PushFn>(dlsym(h, "fuseprof_range_push"));
  g_pop = reinterpret_cast<PopFn>(dlsym(h, "fuseprof_range_pop"));
  if (g_push == nullptr || g_pop == nullptr) return -2;
  g_shapes = shapes != 0;
  at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit).needsInputs(g_shapes));
  return 0;
}
