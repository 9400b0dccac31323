#include "tools/internal/ca.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace gfrep::tools {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Ext = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

absl::Status SslError(const std::string& what) {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error(); e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return absl::InternalError(fmt::format("{}: {}", what, buf));
}

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 64 || s[0] == '.' || s[0] == '-') return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) return false;
  }
  return true;
}

bool IsIp(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

absl::StatusOr<Key> NewKey() {
  Key k(EVP_EC_gen("P-256"));
  if (!k) return SslError("generate an EC key");
  return k;
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* k) {
  Bio b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return SslError("write a key");
  }
  char* data = nullptr;
  long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

absl::StatusOr<std::string> CertPem(X509* c) {
  Bio b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), c) != 1) return SslError("write a certificate");
  char* data = nullptr;
  long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

absl::Status AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Ext ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return SslError(fmt::format("certificate extension {}={}", OBJ_nid2sn(nid), value));
  }
  return absl::OkStatus();
}

// A certificate for `key`'s public half named `name`, valid per `days` (negative: expired).
absl::StatusOr<Cert> NewCert(EVP_PKEY* key, const std::string& name, int days) {
  Cert c(X509_new());
  if (!c) return SslError("new certificate");
  X509_set_version(c.get(), 2);  // v3
  std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>> serial(BN_new());
  if (!serial || BN_rand(serial.get(), 63, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(c.get())) == nullptr) {
    return SslError("serial number");
  }
  const long day = 24L * 3600;
  if (days >= 0) {
    X509_gmtime_adj(X509_getm_notBefore(c.get()), -300);  // a little clock skew
    X509_gmtime_adj(X509_getm_notAfter(c.get()), days * day);
  } else {
    X509_gmtime_adj(X509_getm_notBefore(c.get()), 2L * days * day);
    X509_gmtime_adj(X509_getm_notAfter(c.get()), days * day);
  }
  if (X509_set_pubkey(c.get(), key) != 1) return SslError("set the public key");
  X509_NAME* subject = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("gfrep"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(name.c_str()), -1,
                             -1, 0);
  return c;
}

absl::StatusOr<Key> ReadKey(const std::string& pem) {
  Bio b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Key k(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
  if (!k) return SslError("read the CA key");
  return k;
}

absl::StatusOr<Cert> ReadCert(const std::string& pem) {
  Bio b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert c(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
  if (!c) return SslError("read the CA certificate");
  return c;
}

}  // namespace

absl::StatusOr<Pem> MakeCa(const std::string& name, int days) {
  if (!ValidName(name)) return absl::InvalidArgumentError(fmt::format("CA name '{}': letters, digits, . - _", name));
  if (days <= 0) return absl::InvalidArgumentError("a CA must be valid for at least one day");
  absl::StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  absl::StatusOr<Cert> cert = NewCert(key->get(), name, days);
  if (!cert.ok()) return cert.status();
  X509_set_issuer_name(cert->get(), X509_get_subject_name(cert->get()));
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                            std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                            std::pair{NID_subject_key_identifier, "hash"}}) {
    if (absl::Status s = AddExt(cert->get(), cert->get(), nid, value); !s.ok()) return s;
  }
  if (X509_sign(cert->get(), key->get(), EVP_sha256()) == 0) return SslError("sign the CA certificate");
  Pem out;
  absl::StatusOr<std::string> c = CertPem(cert->get());
  absl::StatusOr<std::string> k = KeyPem(key->get());
  if (!c.ok()) return c.status();
  if (!k.ok()) return k.status();
  out.cert = *c;
  out.key = *k;
  return out;
}

absl::StatusOr<Pem> Issue(const Pem& ca, const IssueOptions& o) {
  if (o.role != "node" && o.role != "user" && o.role != "admin" && o.role != "catalog") {
    return absl::InvalidArgumentError(fmt::format("role '{}': node, user, admin or catalog", o.role));
  }
  if (!ValidName(o.name)) {
    return absl::InvalidArgumentError(fmt::format("name '{}': 1-64 letters, digits, . - _", o.name));
  }
  absl::StatusOr<Key> ca_key = ReadKey(ca.key);
  if (!ca_key.ok()) return ca_key.status();
  absl::StatusOr<Cert> ca_cert = ReadCert(ca.cert);
  if (!ca_cert.ok()) return ca_cert.status();
  absl::StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  absl::StatusOr<Cert> cert = NewCert(key->get(), o.name, o.days);
  if (!cert.ok()) return cert.status();
  X509_set_issuer_name(cert->get(), X509_get_subject_name(ca_cert->get()));
  std::string san = fmt::format("URI:gfrep://{}/{}", o.role, o.name);
  if (o.role == "node" || o.role == "catalog") san += ",DNS:" + o.name;
  for (const std::string& g : o.groups) {
    if (!ValidName(g)) return absl::InvalidArgumentError(fmt::format("group '{}': 1-64 letters, digits, . - _", g));
    san += ",URI:gfrep://group/" + g;
  }
  for (const std::string& h : o.hosts) {
    if (IsIp(h)) {
      san += ",IP:" + h;
    } else if (ValidName(h)) {
      san += ",DNS:" + h;
    } else {
      return absl::InvalidArgumentError(fmt::format("host '{}': a DNS name or an IP address", h));
    }
  }
  for (auto [nid, value] : {std::pair{NID_basic_constraints, std::string("critical,CA:FALSE")},
                            std::pair{NID_key_usage, std::string("critical,digitalSignature,keyAgreement")},
                            std::pair{NID_ext_key_usage, std::string("serverAuth,clientAuth")},
                            std::pair{NID_subject_key_identifier, std::string("hash")},
                            std::pair{NID_authority_key_identifier, std::string("keyid:always")},
                            std::pair{NID_subject_alt_name, san}}) {
    if (absl::Status s = AddExt(cert->get(), ca_cert->get(), nid, value); !s.ok()) return s;
  }
  if (X509_sign(cert->get(), ca_key->get(), EVP_sha256()) == 0) return SslError("sign the certificate");
  absl::StatusOr<std::string> c = CertPem(cert->get());
  absl::StatusOr<std::string> k = KeyPem(key->get());
  if (!c.ok()) return c.status();
  if (!k.ok()) return k.status();
  return Pem{*c, *k};
}

absl::Status WriteFileMode(const std::filesystem::path& path, const std::string& text, unsigned mode) {
  const std::string tmp = path.string() + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return absl::InternalError(fmt::format("create {}: {}", tmp, std::strerror(errno)));
  bool ok = ::fchmod(fd, mode) == 0;
  std::size_t off = 0;
  while (ok && off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) off += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::InternalError(fmt::format("write {}: {}", path.string(), std::strerror(ok ? errno : err)));
  }
  return absl::OkStatus();
}

}  // namespace gfrep::tools
