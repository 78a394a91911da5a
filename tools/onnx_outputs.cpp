#include "onnx_outputs.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "tessera/error.h"
#include "tessera/nn/file_io.h"
#include "tessera/onnx.h"
#include "tessera/ops/creation.h"

namespace tessera::tools {
namespace {
const char* npy_descr(DType dt) {
  switch (dt) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::bf16: return "<u2";  // numpy has no bfloat16: the bit patterns
    case DType::i8: return "|i1";
    case DType::u8: return "|u1";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::boolean: return "|b1";
  }
  return "|u1";
}
}  // namespace

std::string npy_bytes(const Tensor& t) {
  const Tensor c = t.to(kCPU).contiguous();
  std::string shape = "(";
  for (int64_t d : c.shape()) shape += std::to_string(d) + ",";
  if (c.dim() > 1) shape.pop_back();  // (3,) for one axis, (2,3) for more, () for none
  shape += ")";
  std::string header = std::string("{'descr': '") + npy_descr(c.dtype()) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of 64 and
  // ended by a newline, as numpy writes it.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.nbytes()));
  return out;
}

void write_outputs(const std::string& dir, const std::vector<Tensor>& outputs, const std::vector<std::string>& names) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TESSERA_CHECK(!ec, "onnx run", "cannot create --output directory '", dir, "': ", ec.message());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string base = dir + "/output_" + std::to_string(i);
    nn::write_file_atomic(base + ".pb", onnx::tensor_to_proto_bytes(outputs[i], i < names.size() ? names[i] : ""), "onnx run --output");
    nn::write_file_atomic(base + ".npy", npy_bytes(outputs[i]), "onnx run --output");
  }
}

bool compare_outputs(const std::vector<Tensor>& outputs, const std::vector<std::string>& names, const std::vector<std::string>& refs,
                     double rtol, double atol) {
  TESSERA_CHECK(refs.size() <= outputs.size(), "onnx run", refs.size(), " --compare files for ", outputs.size(), " outputs");
  bool all_ok = true;
  for (size_t i = 0; i < refs.size(); ++i) {
    const Tensor got = outputs[i].to(kCPU), want = onnx::load_tensor(refs[i]);
    const std::string name = i < names.size() ? names[i] : "output " + std::to_string(i);
    TESSERA_CHECK(got.shape() == want.shape() && got.dtype() == want.dtype(), "onnx run", name, " is ", shape_str(got.shape()), " ",
                  got.dtype(), ", the reference '", refs[i], "' ", shape_str(want.shape()), " ", want.dtype());
    const std::vector<double> a = got.to(DType::f64).to_vector<double>(), b = want.to(DType::f64).to_vector<double>();
    double max_abs = 0, max_rel = 0;
    int64_t bad = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      if (std::isnan(a[k]) && std::isnan(b[k])) continue;
      const double err = a[k] == b[k] ? 0.0 : std::fabs(a[k] - b[k]);  // equal infinities: no error
      if (std::isnan(err) || err > atol + rtol * std::fabs(b[k])) ++bad;
      if (!std::isnan(err)) {
        max_abs = std::max(max_abs, err);
        if (b[k] != 0) max_rel = std::max(max_rel, err / std::fabs(b[k]));
      }
    }
    std::printf("%s: %s, max abs error %.3g, max rel error %.3g, %lld of %zu elements outside rtol %g atol %g\n", name.c_str(),
                bad ? "DIFFERS" : "matches", max_abs, max_rel, static_cast<long long>(bad), a.size(), rtol, atol);
    all_ok = all_ok && bad == 0;
  }
  return all_ok;
}

}  // namespace tessera::tools
