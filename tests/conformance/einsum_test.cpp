// einsum against a brute-force double loop over every assignment of the subscripts: matrix
// and batch products, transposes, diagonals and traces, outer products, three operands,
// implicit outputs, broadcast size-1 axes, "..." against the spelled-out equation, gradients
// by finite differences, and the errors.
#include <map>

#include "support/checks.h"
#include "support/gradcheck.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using V = std::vector<Tensor>;

// sum over all subscript values of the product of the operands, into the output's subscripts.
ref::Ref brute_force(const std::vector<std::string>& terms, const std::string& out, const std::vector<ref::Ref>& ops) {
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], ops[i].shape[d]);
  }
  std::vector<char> labels;
  for (const auto& [c, n] : size) labels.push_back(c);
  Shape oshape;
  for (char c : out) oshape.push_back(size[c]);
  ref::Ref r{oshape, std::vector<double>(static_cast<size_t>(numel(oshape)), 0.0)};
  std::map<char, int64_t> at;
  for (char c : labels) at[c] = 0;
  for (bool more = true; more;) {
    double prod = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      std::vector<int64_t> idx;
      for (size_t d = 0; d < terms[i].size(); ++d) idx.push_back(ops[i].shape[d] == 1 ? 0 : at[terms[i][d]]);  // size 1 broadcasts
      prod *= ops[i].v[static_cast<size_t>(ref::ravel(idx, ops[i].shape))];
    }
    std::vector<int64_t> oidx;
    for (char c : out) oidx.push_back(at[c]);
    r.v[static_cast<size_t>(ref::ravel(oidx, oshape))] += prod;
    more = false;
    for (auto it = labels.rbegin(); it != labels.rend() && !more; ++it) {
      if (++at[*it] < size[*it]) more = true;
      else at[*it] = 0;
    }
  }
  return r;
}

struct Case {
  const char* equation;       // as given to einsum
  std::vector<std::string> terms;
  const char* out;            // the output's subscripts, spelled out
  std::vector<Shape> shapes;
};
}  // namespace

TEST_CASE("einsum matches a brute-force loop: products, transposes, diagonals, traces, three operands, implicit outputs") {
  const Case cases[] = {
      {"ij,jk->ik", {"ij", "jk"}, "ik", {{3, 4}, {4, 5}}},
      {"ij->ji", {"ij"}, "ji", {{3, 4}}},
      {"ba", {"ba"}, "ab", {{3, 4}}},  // implicit: the letters in order, so a transpose
      {"ii->i", {"ii"}, "i", {{4, 4}}},
      {"ii", {"ii"}, "", {{4, 4}}},  // the trace
      {"iij->ji", {"iij"}, "ji", {{3, 3, 2}}},
      {"ij->", {"ij"}, "", {{3, 4}}},
      {"i,j->ij", {"i", "j"}, "ij", {{3}, {4}}},
      {"ab,ab", {"ab", "ab"}, "", {{3, 4}, {3, 4}}},
      {"ij,ij->ij", {"ij", "ij"}, "ij", {{3, 4}, {3, 4}}},
      {"bij,bjk->bik", {"bij", "bjk"}, "bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bij,bjk->bik", {"bij", "bjk"}, "bik", {{1, 3, 4}, {3, 4, 5}}},  // the batch broadcasts from 1
      {"bn,anm,bm->ba", {"bn", "anm", "bm"}, "ba", {{2, 3}, {4, 3, 5}, {2, 5}}},
      {"ij,jk,kl->li", {"ij", "jk", "kl"}, "li", {{2, 3}, {3, 4}, {4, 2}}},
      {"i j , j k -> i k", {"ij", "jk"}, "ik", {{2, 3}, {3, 2}}},  // spaces are ignored
  };
  uint64_t seed = 9000;
  for (const Case& c : cases) {
    for (DType dt : {DType::f32, DType::f64}) {
      CAPTURE(c.equation);
      CAPTURE(dtype_name(dt));
      std::vector<Tensor> ops;
      std::vector<ref::Ref> refs;
      for (const Shape& s : c.shapes) {
        ops.push_back(make_input(s, dt, ++seed, -1, 1, s.size() >= 2 ? Layout::transposed : Layout::contiguous));
        refs.push_back(to_ref(ops.back()));
      }
      const Tensor y = einsum(c.equation, ops);
      CHECK(y.dtype() == dt);
      TESSERA_CHECK_CLOSE(y, brute_force(c.terms, c.out, refs), dt == DType::f32 ? Tolerance{1e-5, 1e-5} : tolerance_for(dt));
    }
  }
}

TEST_CASE("einsum's ellipsis broadcasts leading axes like the spelled-out equation") {
  const Tensor a = make_input({2, 3, 4, 5}, DType::f32, 9101, -1, 1);
  const Tensor b = make_input({3, 5, 6}, DType::f32, 9102, -1, 1);
  TESSERA_CHECK_CLOSE(einsum("...ij,...jk->...ik", {a, b}), to_ref(einsum("abij,bjk->abik", {a, b})), Tolerance{1e-6, 1e-6});
  TESSERA_CHECK_CLOSE(einsum("...ij,...jk", {a, b}), to_ref(einsum("abij,bjk->abik", {a, b})), Tolerance{1e-6, 1e-6});
  const Tensor sq = make_input({2, 3, 4, 4}, DType::f32, 9103, -1, 1);
  TESSERA_CHECK_CLOSE(einsum("...ii->...i", {sq}), to_ref(einsum("abii->abi", {sq})), Tolerance{0, 0});
  TESSERA_CHECK_CLOSE(einsum("i...->...", {a}), to_ref(einsum("ibcd->bcd", {a})), Tolerance{1e-6, 1e-6});
}

TEST_CASE("einsum gradients and errors") {
  TESSERA_CHECK_GRAD([](const V& in) { return einsum("bn,anm,bm->ba", in); }, {grad_input({2, 3}, 1), grad_input({4, 3, 5}, 2), grad_input({2, 5}, 3)});
  TESSERA_CHECK_GRAD([](const V& in) { return einsum("ii->i", in); }, {grad_input({4, 4}, 4)});
  TESSERA_CHECK_GRAD([](const V& in) { return einsum("...ij,jk", in); }, {grad_input({2, 3, 4}, 5), grad_input({4, 2}, 6)});
  const Tensor m = zeros({2, 3}, DType::f32, device());
  TESSERA_CHECK_THROWS_WITH(einsum("ij,jk->ik", {m}), "einsum: \"ij,jk->ik\" has 2 operand terms but 1 tensors were given");
  TESSERA_CHECK_THROWS_WITH(einsum("ij,jk", {m, zeros({4, 2}, DType::f32, device())}), "einsum: subscript of \"ij,jk\" has sizes 3 and 4");
  TESSERA_CHECK_THROWS_WITH(einsum("ijk", {m}), "einsum: term \"ijk\" of \"ijk\" does not fit operand 0 of shape [2, 3]");
  TESSERA_CHECK_THROWS_WITH(einsum("i1", {m}), "einsum: '1' in \"i1\" is not a subscript letter");
  TESSERA_CHECK_THROWS_WITH(einsum("ij->ik", {m}), "einsum: output subscript of \"ij->ik\" is in no operand");
  TESSERA_CHECK_THROWS_WITH(einsum("ij->ii", {m}), "einsum: output of \"ij->ii\" repeats a subscript");
}
