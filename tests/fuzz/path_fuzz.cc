// Fuzzes the validation of names and paths that arrive from outside: the catalog's
// ValidateName / SplitPath / IsValidUtf8 / TruncateUtf8 (catalog/types.h; every gRPC path
// and name goes through them) and the transfer agent's ResolveSpoolPath /
// IsReplicaRelativePath (transfer/internal/path.h, transfer/spool_names.h; the PATH of
// every gf:// request).
//
// The first input byte picks the function; the rest is the name or path. The properties are
// checked against small independent oracles written here from the headers' contracts:
//  - ValidateName accepts exactly the non-empty names of at most 255 bytes that are not "."
//    or "..", contain no '/' and no control character (0x00-0x1f, 0x7f) and are well-formed
//    UTF-8 (Unicode Table 3-7);
//  - IsValidUtf8 agrees with the table; TruncateUtf8 returns a prefix of at most the bound
//    that is still well-formed when the input was, cutting only the last character;
//  - SplitPath accepts exactly absolute paths of at most 4096 bytes whose components
//    ValidateName accepts, returns those components, and JoinPath gives a path that splits
//    to the same components;
//  - ResolveSpoolPath never accepts a path that is absolute, has a control character, an
//    empty, "." or ".." component, a reserved first component other than a replica name, or
//    that leaves the spool through a symlink (the spool here has "up" -> ".." and "root" -> "/");
//  - IsReplicaRelativePath accepts exactly what ReplicaRelativePath writes.

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "catalog/types.h"
#include "tests/fuzz/fuzz_check.h"
#include "transfer/internal/path.h"
#include "transfer/spool_names.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;

// Well-formed UTF-8 by the byte ranges of Unicode Table 3-7 (a different method from
// catalog's decoder, which computes code points).
bool WellFormedUtf8(std::string_view s) {
  auto in = [](unsigned char c, unsigned lo, unsigned hi) { return c >= lo && c <= hi; };
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    unsigned lo = 0x80, hi = 0xbf;  // range of the second byte
    std::size_t n = 0;              // bytes in the sequence
    if (b0 <= 0x7f) {
      n = 1;
    } else if (in(b0, 0xc2, 0xdf)) {
      n = 2;
    } else if (b0 == 0xe0) {
      n = 3, lo = 0xa0;
    } else if (in(b0, 0xe1, 0xec) || in(b0, 0xee, 0xef)) {
      n = 3;
    } else if (b0 == 0xed) {
      n = 3, hi = 0x9f;
    } else if (b0 == 0xf0) {
      n = 4, lo = 0x90;
    } else if (in(b0, 0xf1, 0xf3)) {
      n = 4;
    } else if (b0 == 0xf4) {
      n = 4, hi = 0x8f;
    } else {
      return false;
    }
    if (s.size() - i < n) return false;
    if (n > 1 && !in(static_cast<unsigned char>(s[i + 1]), lo, hi)) return false;
    for (std::size_t k = 2; k < n; ++k) {
      if (!in(static_cast<unsigned char>(s[i + k]), 0x80, 0xbf)) return false;
    }
    i += n;
  }
  return true;
}

bool HasControl(std::string_view text) {
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return true;
  }
  return false;
}

bool NameOk(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.size() <= catalog::kMaxNameBytes &&
         name.find('/') == std::string_view::npos && !HasControl(name) && WellFormedUtf8(name);
}

std::vector<std::string_view> NonEmptyPieces(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i <= path.size()) {
    std::size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

void CheckName(std::string_view name, std::size_t bound) {
  const bool ok = catalog::ValidateName(name).ok();
  FUZZ_CHECK(ok == NameOk(name), "ValidateName disagrees with its contract");
  if (!ok) FUZZ_CHECK(absl::IsInvalidArgument(catalog::ValidateName(name)), "refusal code");
  const bool utf8 = WellFormedUtf8(name);
  FUZZ_CHECK(catalog::IsValidUtf8(name) == utf8, "IsValidUtf8 disagrees with Table 3-7");

  const std::string_view cut = catalog::TruncateUtf8(name, bound);
  FUZZ_CHECK(cut.data() == name.data() && cut.size() <= name.size(), "TruncateUtf8 not a prefix");
  FUZZ_CHECK(cut.size() <= bound, "TruncateUtf8 longer than the bound");
  if (name.size() <= bound) FUZZ_CHECK(cut.size() == name.size(), "TruncateUtf8 cut a short text");
  if (utf8) {
    FUZZ_CHECK(WellFormedUtf8(cut), "TruncateUtf8 broke a character");
    FUZZ_CHECK(cut.size() + 4 > std::min(bound, name.size()),
               "TruncateUtf8 cut more than a character");
  }
}

void CheckPath(std::string_view path) {
  absl::StatusOr<std::vector<std::string>> parts = catalog::SplitPath(path);
  const std::vector<std::string_view> pieces = NonEmptyPieces(path);
  bool expect = !path.empty() && path.front() == '/' && path.size() <= catalog::kMaxPathBytes;
  for (std::string_view p : pieces) expect = expect && NameOk(p);
  FUZZ_CHECK(parts.ok() == expect, "SplitPath disagrees with its contract");
  if (!parts.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(parts.status()), "SplitPath refusal code");
    return;
  }
  FUZZ_CHECK(parts->size() == pieces.size(), "SplitPath component count");
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    FUZZ_CHECK((*parts)[i] == pieces[i], "SplitPath changed a component");
    FUZZ_CHECK((*parts)[i] != ".." && (*parts)[i] != ".", "SplitPath let a dot component through");
  }
  const std::string joined = catalog::JoinPath(*parts);
  FUZZ_CHECK(joined.find("//") == std::string::npos, "JoinPath wrote an empty component");
  absl::StatusOr<std::vector<std::string>> again = catalog::SplitPath(joined);
  FUZZ_CHECK(again.ok() && *again == *parts, "JoinPath/SplitPath round trip");
}

// A spool directory for the whole run: "a/" inside, "up" -> ".." and "root" -> "/" leave it.
const fs::path& Spool() {
  static const fs::path spool = [] {
    std::string tmpl = (fs::temp_directory_path() / "gfrep-path-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    fs::path dir = fs::canonical(tmpl);
    fs::create_directory(dir / "a");
    fs::create_directory_symlink("..", dir / "up");
    fs::create_directory_symlink("/", dir / "root");
    // At a normal exit; libFuzzer often ends with _Exit, so tools/run-fuzz also points
    // TMPDIR into its work directory. remove_all does not follow the symlinks.
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(Spool(), ec);
    });
    return dir;
  }();
  return spool;
}

// What ResolveSpoolPath checks before touching the file system, written from its header.
bool LexicallyOk(std::string_view rel) {
  if (rel.empty() || rel.size() > 4096 || HasControl(rel) || rel.front() == '/') {
    return false;
  }
  std::size_t i = 0;
  bool first = true;
  while (true) {
    std::size_t j = rel.find('/', i);
    std::string_view comp = rel.substr(i, j == std::string_view::npos ? j : j - i);
    if (comp.empty() || comp == "." || comp == ".." || comp.size() > 255) return false;
    if (first && comp.starts_with(transfer::internal::kReservedPrefix) &&
        !transfer::IsReplicaRelativePath(rel)) {
      return false;
    }
    first = false;
    if (j == std::string_view::npos) return true;
    i = j + 1;
  }
}

void CheckSpoolPath(std::string_view rel) {
  const fs::path& spool = Spool();
  absl::StatusOr<fs::path> r = transfer::internal::ResolveSpoolPath(spool, rel);
  const bool lexical = LexicallyOk(rel);
  if (!r.ok()) {
    if (lexical) {
      FUZZ_CHECK(absl::IsPermissionDenied(r.status()) || absl::IsInternal(r.status()),
                 "a lexically fine path refused with kInvalidArgument");
    } else {
      FUZZ_CHECK(absl::IsInvalidArgument(r.status()), "a bad path refused with another code");
    }
    return;
  }
  FUZZ_CHECK(lexical, "ResolveSpoolPath accepted a path its contract refuses");
  FUZZ_CHECK(*r == spool / std::string(rel), "ResolveSpoolPath returned another path");
  std::error_code ec;
  const std::string resolved = fs::weakly_canonical(*r, ec).string();
  FUZZ_CHECK(!ec && resolved.starts_with(spool.string() + "/"),
             "ResolveSpoolPath accepted a path that leaves the spool");
}

void CheckReplicaName(FuzzedDataProvider& in) {
  const auto inode = in.ConsumeIntegral<std::uint64_t>();
  const auto generation = in.ConsumeIntegral<std::uint64_t>();
  const std::string made = transfer::ReplicaRelativePath(inode, generation);
  FUZZ_CHECK(transfer::IsReplicaRelativePath(made), "refused a name ReplicaRelativePath wrote");

  const std::string text = in.ConsumeRemainingBytesAsString();
  if (!transfer::IsReplicaRelativePath(text)) return;
  // Accepted: it must be exactly ".gfrep-data/<a>/<b>" for some uint64 a and b.
  const std::string_view rest = std::string_view(text).substr(transfer::kReplicaDirName.size() + 1);
  const std::size_t slash = rest.find('/');
  FUZZ_CHECK(slash != std::string_view::npos, "accepted a replica name without generation");
  std::uint64_t a = 0, b = 0;
  auto ra = std::from_chars(rest.data(), rest.data() + slash, a);
  auto rb = std::from_chars(rest.data() + slash + 1, rest.data() + rest.size(), b);
  FUZZ_CHECK(ra.ec == std::errc() && ra.ptr == rest.data() + slash && rb.ec == std::errc() &&
                 rb.ptr == rest.data() + rest.size(),
             "accepted a replica name whose numbers are not uint64");
  FUZZ_CHECK(transfer::ReplicaRelativePath(a, b) == text,
             "accepted a replica name ReplicaRelativePath would not write");
}

}  // namespace
}  // namespace gfrep

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep;
  if (size < 2) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  switch (data[0] % 4) {
    case 0:
      CheckName(text, data[1]);
      break;
    case 1:
      CheckPath(text);
      break;
    case 2:
      CheckSpoolPath(text);
      break;
    default: {
      FuzzedDataProvider in(data + 2, size - 2);
      CheckReplicaName(in);
      break;
    }
  }
  return 0;
}
