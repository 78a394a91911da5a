// TensorProto <-> Tensor for every dtype Tessera has: raw_data (little-endian) and the typed
// fields; external data, strings and the dtypes Tessera lacks are refused by name.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "proto.h"
#include "tessera/ops/creation.h"

namespace tessera::onnx {

namespace {
const char* onnx_type_name(int t) {
  static const char* names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8",  "UINT16",    "INT16",      "INT32",   "INT64", "STRING",
                                "BOOL",      "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  return t >= 0 && t < static_cast<int>(std::size(names)) ? names[t] : "unknown";
}
}  // namespace

DType dtype_from_onnx(int t, const std::string& what) {
  switch (t) {
    case ::onnx::TensorProto::FLOAT: return DType::f32;
    case ::onnx::TensorProto::DOUBLE: return DType::f64;
    case ::onnx::TensorProto::FLOAT16: return DType::f16;
    case ::onnx::TensorProto::BFLOAT16: return DType::bf16;
    case ::onnx::TensorProto::INT8: return DType::i8;
    case ::onnx::TensorProto::UINT8: return DType::u8;
    case ::onnx::TensorProto::INT32: return DType::i32;
    case ::onnx::TensorProto::INT64: return DType::i64;
    case ::onnx::TensorProto::BOOL: return DType::boolean;
    default: break;
  }
  throw Unsupported(detail::concat("onnx: ", what, " has dtype ", onnx_type_name(t), ", which Tessera does not have"));
}

int dtype_to_onnx(DType dt) {
  switch (dt) {
    case DType::f32: return ::onnx::TensorProto::FLOAT;
    case DType::f64: return ::onnx::TensorProto::DOUBLE;
    case DType::f16: return ::onnx::TensorProto::FLOAT16;
    case DType::bf16: return ::onnx::TensorProto::BFLOAT16;
    case DType::i8: return ::onnx::TensorProto::INT8;
    case DType::u8: return ::onnx::TensorProto::UINT8;
    case DType::i32: return ::onnx::TensorProto::INT32;
    case DType::i64: return ::onnx::TensorProto::INT64;
    case DType::boolean: return ::onnx::TensorProto::BOOL;
  }
  return ::onnx::TensorProto::UNDEFINED;
}

Tensor tensor_from_proto(const ::onnx::TensorProto& p) {
  const std::string what = p.name().empty() ? std::string("a tensor") : "tensor '" + p.name() + "'";
  TESSERA_CHECK(p.data_location() != ::onnx::TensorProto::EXTERNAL, "onnx", what,
                " keeps its data in an external file, which this importer does not read");
  TESSERA_CHECK(!p.has_segment(), "onnx", what, " is segmented, which this importer does not read");
  const DType dt = dtype_from_onnx(p.data_type(), what);
  Shape shape;
  for (int64_t d : p.dims()) {
    TESSERA_CHECK(d >= 0, "onnx", what, " has a negative dimension ", d);
    shape.push_back(d);
  }
  // The declared size is checked against the data the file holds before anything is allocated:
  // an 87-byte model declaring a 4 TiB initializer failed only when allocating it.
  const size_t esize = itemsize(dt);
  const auto n = static_cast<size_t>(checked_nbytes(shape, esize, "onnx") / static_cast<int64_t>(esize));
  if (p.has_raw_data()) {
    TESSERA_CHECK(p.raw_data().size() == n * esize, "onnx", what, " has ", p.raw_data().size(), " bytes of raw data, ",
                  shape_str(shape), " ", dt, " needs ", n * esize);
  } else {
    const int have = p.data_type() == ::onnx::TensorProto::FLOAT    ? p.float_data_size()
                     : p.data_type() == ::onnx::TensorProto::DOUBLE ? p.double_data_size()
                     : p.data_type() == ::onnx::TensorProto::INT64  ? p.int64_data_size()
                                                                    : p.int32_data_size();
    TESSERA_CHECK(static_cast<size_t>(have) == n, "onnx", what, " holds ", have, " values, ", shape_str(shape), " needs ", n);
  }
  Tensor t = empty(shape, dt, kCPU);
  auto* dst = static_cast<char*>(t.data_ptr());
  if (p.has_raw_data()) {
    if (n) std::memcpy(dst, p.raw_data().data(), n * esize);
    return t;
  }
  auto check_count = [&](int have) {
    TESSERA_CHECK(static_cast<size_t>(have) == n, "onnx", what, " holds ", have, " values, ", shape_str(shape), " needs ", n);
  };
  switch (p.data_type()) {
    case ::onnx::TensorProto::FLOAT: check_count(p.float_data_size()); if (n) std::memcpy(dst, p.float_data().data(), n * 4); break;
    case ::onnx::TensorProto::DOUBLE: check_count(p.double_data_size()); if (n) std::memcpy(dst, p.double_data().data(), n * 8); break;
    case ::onnx::TensorProto::INT64: check_count(p.int64_data_size()); if (n) std::memcpy(dst, p.int64_data().data(), n * 8); break;
    case ::onnx::TensorProto::INT32: check_count(p.int32_data_size()); if (n) std::memcpy(dst, p.int32_data().data(), n * 4); break;
    default: {  // narrow types travel one per int32 (16-bit floats as their bit patterns)
      check_count(p.int32_data_size());
      for (size_t i = 0; i < n; ++i) {
        const int32_t v = p.int32_data(static_cast<int>(i));
        if (esize == 1) {
          const auto b = static_cast<uint8_t>(v);
          std::memcpy(dst + i, &b, 1);
        } else {
          const auto h = static_cast<uint16_t>(v);
          std::memcpy(dst + 2 * i, &h, 2);
        }
      }
    }
  }
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, ::onnx::TensorProto& p) {
  const Tensor c = t.to(kCPU).contiguous();
  p.set_name(name);
  p.set_data_type(dtype_to_onnx(c.dtype()));
  for (int64_t d : c.shape()) p.add_dims(d);
  p.set_raw_data(std::string(static_cast<const char*>(c.data_ptr()), c.nbytes()));
}

Tensor tensor_from_proto_bytes(const std::string& bytes, const std::string& name) {
  ::onnx::TensorProto p;
  TESSERA_CHECK(p.ParseFromString(bytes), "onnx", name, " is not a serialized TensorProto");
  return tensor_from_proto(p);
}

std::string read_model_file(const std::string& path, const char* what) {
  // Only a regular file of at most 2 GiB (protobuf's limit for one message): a FIFO made
  // `tessera onnx run` wait forever and /dev/zero read 4.5 GB before failing on bad_alloc.
  struct stat st {};
  TESSERA_CHECK(::stat(path.c_str(), &st) == 0, "onnx", "cannot open '", path, "' (", what, "): ", std::strerror(errno));
  TESSERA_CHECK(S_ISREG(st.st_mode), "onnx", what, " '", path, "' is not a regular file (",
                S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "a special file",
                "): refused");
  constexpr off_t kMax = off_t{2} << 30;
  TESSERA_CHECK(st.st_size <= kMax, "onnx", what, " '", path, "' is ", st.st_size, " bytes, over protobuf's 2 GiB limit for one message");
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, "onnx", "cannot open '", path, "' (", what, ")");
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  TESSERA_CHECK(in.gcount() == static_cast<std::streamsize>(bytes.size()), "onnx", "reading ", what, " '", path, "' stopped after ", in.gcount(),
                " of ", bytes.size(), " bytes");
  return bytes;
}

Tensor load_tensor(const std::string& path) { return tensor_from_proto_bytes(read_model_file(path, "tensor file"), "'" + path + "'"); }

std::string tensor_to_proto_bytes(const Tensor& t, const std::string& name) {
  ::onnx::TensorProto p;
  tensor_to_proto(t, name, p);
  return p.SerializeAsString();
}

}  // namespace tessera::onnx
