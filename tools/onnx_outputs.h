#pragma once
// `tessera onnx run --output DIR` and `--compare REF.pb`: a model's outputs at full precision
// (TensorProto .pb as the ONNX node suite stores them, and .npy for numpy), and a comparison with
// reference outputs from another runtime under rtol/atol.
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::tools {

/** The .npy (format 1.0) bytes of t: its raw little-endian data, bit for bit. bfloat16, which
 *  numpy lacks, is written as its 16-bit patterns ('<u2'). */
std::string npy_bytes(const Tensor& t);

/** Writes DIR/output_<i>.pb and DIR/output_<i>.npy for each output (DIR is created). */
void write_outputs(const std::string& dir, const std::vector<Tensor>& outputs, const std::vector<std::string>& names);

/** Compares each output with the TensorProto in refs[i] (as many refs as outputs, or fewer: the
 *  first ones): |out - ref| <= atol + rtol |ref| elementwise, NaN equal to NaN. Prints one line per
 *  output (max absolute and relative error, elements out of tolerance) and returns whether all
 *  passed; a shape or dtype mismatch is an error naming both. */
bool compare_outputs(const std::vector<Tensor>& outputs, const std::vector<std::string>& names, const std::vector<std::string>& refs,
                     double rtol, double atol);

}  // namespace tessera::tools
