#include "replica/core/site_expr.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <optional>

namespace gfrep::replica {

struct SiteExpr::Node {
  enum class Kind { kAll, kWord, kEquals, kNotEquals, kLess, kGreater, kNot, kAnd, kOr, kMinus };
  Kind kind = Kind::kAll;
  std::string key;
  std::string value;
  std::shared_ptr<const Node> left;
  std::shared_ptr<const Node> right;
};

namespace {

using Node = SiteExpr::Node;
using Kind = Node::Kind;

bool WordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == ':' ||
         c == '-';
}

std::optional<double> Number(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

bool Truthy(std::string_view v) { return v != "false" && v != "no" && v != "0"; }

// Recursive descent over `text`; pos_ is a byte index (columns are pos_ + 1).
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<std::shared_ptr<const Node>> Parse() {
    auto e = Union();
    if (!e.ok()) return e;
    Skip();
    if (pos_ < text_.size()) return Error(fmt::format("unexpected '{}'", text_[pos_]));
    return e;
  }

 private:
  void Skip() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_])) != 0) ++pos_;
  }
  bool Eat(char c) {
    Skip();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        fmt::format("site expression '{}': column {}: {}", text_, pos_ + 1, what));
  }
  static std::shared_ptr<const Node> Make(Kind k, std::shared_ptr<const Node> l,
                                          std::shared_ptr<const Node> r) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->left = std::move(l);
    n->right = std::move(r);
    return n;
  }

  absl::StatusOr<std::shared_ptr<const Node>> Union() {
    auto left = Intersection();
    if (!left.ok()) return left;
    std::shared_ptr<const Node> n = *left;
    while (Eat('|')) {
      auto right = Intersection();
      if (!right.ok()) return right;
      n = Make(Kind::kOr, n, *right);
    }
    return n;
  }

  absl::StatusOr<std::shared_ptr<const Node>> Intersection() {
    auto left = Unary();
    if (!left.ok()) return left;
    std::shared_ptr<const Node> n = *left;
    for (;;) {
      Kind k;
      if (Eat('&')) {
        k = Kind::kAnd;
      } else if (Eat('\\')) {
        k = Kind::kMinus;
      } else {
        break;
      }
      auto right = Unary();
      if (!right.ok()) return right;
      n = Make(k, n, *right);
    }
    return n;
  }

  absl::StatusOr<std::shared_ptr<const Node>> Unary() {
    if (++depth_ > kMaxDepth) return Error("nested too deeply");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (Eat('!')) {
      auto inner = Unary();
      if (!inner.ok()) return inner;
      return Make(Kind::kNot, *inner, nullptr);
    }
    if (Eat('(')) {
      auto inner = Union();
      if (!inner.ok()) return inner;
      if (!Eat(')')) return Error("expected ')'");
      return inner;
    }
    if (Eat('*')) return Make(Kind::kAll, nullptr, nullptr);
    return Term();
  }

  std::string Word() {
    Skip();
    std::size_t start = pos_;
    while (pos_ < text_.size() && WordChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  absl::StatusOr<std::shared_ptr<const Node>> Term() {
    std::string key = Word();
    if (key.empty()) return Error("expected a site or label");
    auto n = std::make_shared<Node>();
    n->key = key;
    Skip();
    if (pos_ + 1 < text_.size() && text_[pos_] == '!' && text_[pos_ + 1] == '=') {
      pos_ += 2;
      n->kind = Kind::kNotEquals;
    } else if (Eat('=')) {
      n->kind = Kind::kEquals;
    } else if (Eat('<')) {
      n->kind = Kind::kLess;
    } else if (Eat('>')) {
      n->kind = Kind::kGreater;
    } else {
      n->kind = Kind::kWord;
      return std::shared_ptr<const Node>(n);
    }
    n->value = Word();
    if (n->value.empty()) return Error(fmt::format("expected a value for label '{}'", key));
    if ((n->kind == Kind::kLess || n->kind == Kind::kGreater) && !Number(n->value)) {
      return Error(fmt::format("'{}' is not a number", n->value));
    }
    return std::shared_ptr<const Node>(n);
  }

  static constexpr int kMaxDepth = 64;
  std::string_view text_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

bool Selects(const Node& n, const catalog::Site& site) {
  auto label = [&]() -> const std::string* {
    auto it = site.labels.find(n.key);
    return it == site.labels.end() ? nullptr : &it->second;
  };
  switch (n.kind) {
    case Kind::kAll:
      return true;
    case Kind::kWord: {
      const std::string* l = label();
      return site.name == n.key || (l != nullptr && Truthy(*l));
    }
    case Kind::kEquals: {
      const std::string* l = label();
      return l != nullptr && *l == n.value;
    }
    case Kind::kNotEquals: {
      const std::string* l = label();
      return l == nullptr || *l != n.value;
    }
    case Kind::kLess:
    case Kind::kGreater: {
      const std::string* l = label();
      if (l == nullptr) return false;
      std::optional<double> have = Number(*l);
      std::optional<double> want = Number(n.value);
      if (!have || !want) return false;
      return n.kind == Kind::kLess ? *have < *want : *have > *want;
    }
    case Kind::kNot:
      return !Selects(*n.left, site);
    case Kind::kAnd:
      return Selects(*n.left, site) && Selects(*n.right, site);
    case Kind::kOr:
      return Selects(*n.left, site) || Selects(*n.right, site);
    case Kind::kMinus:
      return Selects(*n.left, site) && !Selects(*n.right, site);
  }
  return false;
}

}  // namespace

SiteExpr::SiteExpr() : text_("*"), root_(std::make_shared<Node>()) {}

absl::StatusOr<SiteExpr> SiteExpr::Parse(std::string_view text) {
  if (text.size() > 4096) return absl::InvalidArgumentError("site expression longer than 4096 bytes");
  Parser p(text);
  absl::StatusOr<std::shared_ptr<const Node>> root = p.Parse();
  if (!root.ok()) return root.status();
  return SiteExpr(std::string(text), std::move(*root));
}

std::set<std::string> SiteExpr::Evaluate(const std::vector<catalog::Site>& sites) const {
  std::set<std::string> out;
  for (const catalog::Site& s : sites) {
    if (Selects(*root_, s)) out.insert(s.name);
  }
  return out;
}

}  // namespace gfrep::replica
