// einsum over the existing ops, so every backend runs it and autograd comes from the parts:
// a label repeated within one operand becomes a diagonal (index_select on the two axes
// flattened), a label no other operand or the output needs is summed away at once, and the
// operands are contracted left to right, each pair as one batched matmul
// ([batch, left, contracted] @ [batch, contracted, right]). Sizes of a label broadcast from 1,
// like torch.einsum.
#include <algorithm>
#include <numeric>

#include "dispatch.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/indexing.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/reduction.h"

namespace tessera {

namespace {
// Labels: 'A'-'Z' are 0-25 and 'a'-'z' 26-51 (ASCII order, the implicit output's order); the
// ellipsis's axes are 52 + k, right-aligned across the operands.
constexpr int kEllipsisBase = 52;

struct Operand {
  Tensor t;
  std::vector<int> labels;  // one per axis of t
};

int letter_label(char ch, const std::string& eq) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + (ch - 'a');
  throw Error(detail::concat("einsum: '", ch, "' in \"", eq, "\" is not a subscript letter"));
}

// A term's letters and where its ellipsis is (-1: none), e.g. "a...b" -> {a, b}, 1.
std::pair<std::vector<int>, int> parse_term(const std::string& term, const std::string& eq) {
  std::vector<int> letters;
  int ellipsis = -1;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      TESSERA_CHECK(ellipsis < 0 && term.compare(i, 3, "...") == 0, "einsum", "malformed ellipsis in \"", eq, "\"");
      ellipsis = static_cast<int>(letters.size());
      i += 2;
    } else {
      letters.push_back(letter_label(term[i], eq));
    }
  }
  return {letters, ellipsis};
}

std::vector<int> with_ellipsis(const std::vector<int>& letters, int at, int count, int total) {
  if (at < 0) return letters;
  std::vector<int> out(letters.begin(), letters.begin() + at);
  for (int k = 0; k < count; ++k) out.push_back(kEllipsisBase + total - count + k);
  out.insert(out.end(), letters.begin() + at, letters.end());
  return out;
}

// Replaces the axes p < q (equal sizes) by their diagonal, at the end.
Operand diagonal(const Operand& op, size_t p, size_t q) {
  const int64_t n = op.t.size(static_cast<int64_t>(p));
  TESSERA_CHECK(op.t.size(static_cast<int64_t>(q)) == n, "einsum", "a repeated subscript spans axes of sizes ", n, " and ",
                op.t.size(static_cast<int64_t>(q)));
  std::vector<int64_t> order;
  Operand out;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (d == p || d == q) continue;
    order.push_back(static_cast<int64_t>(d));
    out.labels.push_back(op.labels[d]);
  }
  order.push_back(static_cast<int64_t>(p));
  order.push_back(static_cast<int64_t>(q));
  out.labels.push_back(op.labels[p]);
  const Tensor moved = op.t.permute(order).flatten(static_cast<int64_t>(order.size()) - 2);
  out.t = index_select(moved, -1, arange(0, static_cast<double>(n * n), static_cast<double>(n + 1), DType::i64, op.t.device()));
  return out;
}

// Sums away the labels of `op` that `keep` does not hold.
Operand sum_unneeded(const Operand& op, const std::vector<bool>& keep) {
  std::vector<int64_t> axes;
  Operand out;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (keep[static_cast<size_t>(op.labels[d])]) out.labels.push_back(op.labels[d]);
    else axes.push_back(static_cast<int64_t>(d));
  }
  out.t = axes.empty() ? op.t : sum(op.t, axes);
  return out;
}

// op's axes permuted to `labels` (which it must all have) and expanded to the label sizes.
Tensor arrange(const Operand& op, const std::vector<int>& labels, const std::vector<int64_t>& size) {
  std::vector<int64_t> order;
  Shape shape;
  for (int l : labels) {
    order.push_back(std::find(op.labels.begin(), op.labels.end(), l) - op.labels.begin());
    shape.push_back(size[static_cast<size_t>(l)]);
  }
  return op.t.permute(order).expand(shape);
}

int64_t product(const std::vector<int>& labels, const std::vector<int64_t>& size) {
  int64_t p = 1;
  for (int l : labels) p *= size[static_cast<size_t>(l)];
  return p;
}

// a and b contracted over their shared labels that nothing later needs.
Operand contract(const Operand& a, const Operand& b, const std::vector<bool>& needed_later, const std::vector<int64_t>& size) {
  std::vector<int> batch, left, inner, right;
  for (int l : a.labels) {
    const bool in_b = std::find(b.labels.begin(), b.labels.end(), l) != b.labels.end();
    (in_b ? (needed_later[static_cast<size_t>(l)] ? batch : inner) : left).push_back(l);
  }
  for (int l : b.labels) {
    if (std::find(a.labels.begin(), a.labels.end(), l) == a.labels.end()) right.push_back(l);
  }
  auto concat = [](std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  const int64_t nb = product(batch, size), nl = product(left, size), nk = product(inner, size), nr = product(right, size);
  const Tensor am = arrange(a, concat(batch, left, inner), size).reshape({nb, nl, nk});
  const Tensor bm = arrange(b, concat(batch, inner, right), size).reshape({nb, nk, nr});
  Operand out;
  out.labels = concat(batch, left, right);
  Shape shape;
  for (int l : out.labels) shape.push_back(size[static_cast<size_t>(l)]);
  out.t = matmul(am, bm).reshape(shape);
  return out;
}
}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char ch : equation) {
    if (ch != ' ') eq += ch;
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char ch : lhs) {
    if (ch == ',') terms.emplace_back();
    else terms.back() += ch;
  }
  TESSERA_CHECK(terms.size() == operands.size(), "einsum", "\"", equation, "\" has ", terms.size(), " operand terms but ", operands.size(),
                " tensors were given");
  TESSERA_CHECK(!operands.empty(), "einsum", "needs at least one operand");
  for (const Tensor& t : operands) {
    detail::check_defined(t, "einsum");
    detail::common_device({&operands[0], &t}, "einsum");
  }

  // Labels of every operand's axes, the ellipsis expanded.
  std::vector<std::pair<std::vector<int>, int>> parsed;
  int ell = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    parsed.push_back(parse_term(terms[i], equation));
    const int64_t extra = operands[i].dim() - static_cast<int64_t>(parsed[i].first.size());
    TESSERA_CHECK(extra == 0 || (parsed[i].second >= 0 && extra > 0), "einsum", "term \"", terms[i], "\" of \"", equation,
                  "\" does not fit operand ", i, " of shape ", shape_str(operands[i].shape()));
    if (parsed[i].second >= 0) ell = std::max<int>(ell, static_cast<int>(extra));
  }
  std::vector<Operand> ops;
  std::vector<int> count(static_cast<size_t>(kEllipsisBase + ell), 0);
  std::vector<int64_t> size(count.size(), 1);
  for (size_t i = 0; i < terms.size(); ++i) {
    const int extra = static_cast<int>(operands[i].dim()) - static_cast<int>(parsed[i].first.size());
    Operand op{operands[i], with_ellipsis(parsed[i].first, parsed[i].second, extra, ell)};
    for (size_t d = 0; d < op.labels.size(); ++d) {  // sizes broadcast from 1
      const int64_t n = op.t.size(static_cast<int64_t>(d));
      int64_t& s = size[static_cast<size_t>(op.labels[d])];
      TESSERA_CHECK(n == s || n == 1 || s == 1, "einsum", "subscript of \"", equation, "\" has sizes ", s, " and ", n);
      s = std::max(s, n);
    }
    for (int l : op.labels) ++count[static_cast<size_t>(l)];  // before the diagonals: "ii" is a trace
    for (bool repeated = true; repeated;) {  // diagonals of repeated labels
      repeated = false;
      for (size_t p = 0; p < op.labels.size() && !repeated; ++p) {
        for (size_t q = p + 1; q < op.labels.size() && !repeated; ++q) {
          if (op.labels[p] == op.labels[q]) op = diagonal(op, p, q), repeated = true;
        }
      }
    }
    ops.push_back(op);
  }

  std::vector<int> out_labels;
  if (arrow == std::string::npos) {  // implicit: the ellipsis, then the letters used once, in order
    for (int k = 0; k < ell; ++k) out_labels.push_back(kEllipsisBase + k);
    for (int l = 0; l < kEllipsisBase; ++l) {
      if (count[static_cast<size_t>(l)] == 1) out_labels.push_back(l);
    }
  } else {
    const auto [letters, at] = parse_term(eq.substr(arrow + 2), equation);
    out_labels = with_ellipsis(letters, at, at >= 0 ? ell : 0, ell);
    for (size_t i = 0; i < out_labels.size(); ++i) {
      const int l = out_labels[i];
      TESSERA_CHECK(l >= kEllipsisBase || count[static_cast<size_t>(l)] > 0, "einsum", "output subscript of \"", equation,
                    "\" is in no operand");
      TESSERA_CHECK(std::count(out_labels.begin(), out_labels.end(), l) == 1, "einsum", "output of \"", equation, "\" repeats a subscript");
    }
  }

  // Contract left to right; before each step, sum away what neither the output nor a later
  // operand holds.
  std::vector<bool> in_output(count.size(), false);
  for (int l : out_labels) in_output[static_cast<size_t>(l)] = true;
  auto needed_after = [&](size_t i) {  // labels of the output and of operands i..end
    std::vector<bool> need = in_output;
    for (size_t j = i; j < ops.size(); ++j) {
      for (int l : ops[j].labels) need[static_cast<size_t>(l)] = true;
    }
    return need;
  };
  Operand acc = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::vector<bool> keep = needed_after(i);
    acc = sum_unneeded(acc, keep);
    const Operand next = sum_unneeded(ops[i], [&] {
      std::vector<bool> k = needed_after(i + 1);
      for (int l : acc.labels) k[static_cast<size_t>(l)] = true;
      return k;
    }());
    acc = contract(acc, next, needed_after(i + 1), size);
  }
  acc = sum_unneeded(acc, in_output);
  std::vector<int64_t> order;
  Shape shape;
  for (int l : out_labels) {
    order.push_back(std::find(acc.labels.begin(), acc.labels.end(), l) - acc.labels.begin());
    shape.push_back(size[static_cast<size_t>(l)]);
  }
  return acc.t.permute(order).expand(shape).contiguous();
}

}  // namespace tessera
