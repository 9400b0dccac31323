// gfsited and gfcp as real processes over loopback: copies, third-party copies, resume
// after kill -9 of either side, disk full, authentication and CLI errors.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using testing::BinPath;
using testing::RunCommand;
using testing::RunResult;
using testing::Subprocess;
using testing::TempDir;
using namespace std::chrono_literals;

class TransferIntegrationTest : public ::testing::Test {
 protected:
  TransferIntegrationTest() : dir_("xfer-it") { key_ = dir_.Sub("shared_key"); }

  // Starts gfsited on `spool`; returns "127.0.0.1:PORT".
  std::string StartAgent(Subprocess& agent, const std::string& spool,
                         std::vector<std::string> extra = {}, const std::string& key = "") {
    std::vector<std::string> argv{BinPath("gfsited"), "--listen", "127.0.0.1:0", "--spool", spool,
                                  "--key-file", key.empty() ? key_ : key, "--journal-interval", "1M",
                                  "--log-level", "info"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    absl::StatusOr<Subprocess> p = Subprocess::Start(argv);
    EXPECT_TRUE(p.ok()) << p.status();
    agent = std::move(*p);
    absl::StatusOr<std::string> addr = agent.WaitForListen(10s);
    EXPECT_TRUE(addr.ok()) << addr.status();
    return addr.ok() ? *addr : "";
  }

  std::vector<std::string> Gfcp(std::vector<std::string> args, const std::string& key = "") {
    std::vector<std::string> argv{BinPath("gfcp"), "--key-file", key.empty() ? key_ : key, "--timeout", "10"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  static nlohmann::json Json(const RunResult& r) {
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
    return j;
  }

  // Waits (bounded) until some journal under `tmp_dir` records at least one range.
  static bool WaitForJournalRecords(const fs::path& tmp_dir, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(tmp_dir, ec)) {
        // Header is 16 bytes + JSON (< 200); each record 24 bytes.
        if (e.path().extension() == ".journal" && e.file_size(ec) > 300) return true;
      }
      std::this_thread::sleep_for(20ms);  // polling a file: there is no event to wait on
    }
    return false;
  }

  TempDir dir_;
  std::string key_;
};

TEST_F(TransferIntegrationTest, LocalToAgentThirdPartyAndBackAreByteIdentical) {
  Subprocess a, b;
  std::string pa = StartAgent(a, dir_.Sub("a"));
  std::string pb = StartAgent(b, dir_.Sub("b"));
  testing::WriteRandomFile(dir_.path() / "src.dat", (24 << 20) + 12345, 1);
  RunResult push = RunCommand(Gfcp({"-p", "4", "--stripe", "1M", "--json", dir_.Sub("src.dat"),
                                    "gf://" + pa + "/run/src.dat"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  nlohmann::json j = Json(push);
  EXPECT_EQ(j["bytes"], (24 << 20) + 12345);
  EXPECT_EQ(j["streams"], 4);
  EXPECT_EQ(j["resumed_bytes"], 0);
  EXPECT_GT(j["mbit_per_s"].get<double>(), 0);
  EXPECT_TRUE(j["checksum"].get<std::string>().starts_with("xxh3-tree:"));
  EXPECT_GT(j["seconds"].get<double>(), 0);
  EXPECT_EQ(j["tls"], "");  // in clear

  RunResult third = RunCommand(Gfcp({"-p", "8", "--json", "gf://" + pa + "/run/src.dat", "gf://" + pb + "/copy.dat"}));
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(Json(third)["checksum"], j["checksum"]);
  EXPECT_EQ(Json(third)["streams"], 8);

  RunResult pull = RunCommand(Gfcp({"-p", "3", "--checksum", "sha256", "--json", "gf://" + pb + "/copy.dat", dir_.Sub("back.dat")}));
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_TRUE(Json(pull)["checksum"].get<std::string>().starts_with("sha256:"));
  std::string original = testing::ReadFile(dir_.path() / "src.dat");
  EXPECT_EQ(testing::ReadFile(dir_.path() / "a" / "run" / "src.dat"), original);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "b" / "copy.dat"), original);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "back.dat"), original);
  EXPECT_FALSE(fs::exists(dir_.path() / ".gfrep-tmp"));
}

TEST_F(TransferIntegrationTest, ResumesAfterReceiverAgentKilled) {
  Subprocess a;
  std::string pa = StartAgent(a, dir_.Sub("a"));
  testing::WriteRandomFile(dir_.path() / "src.dat", 48 << 20, 2);
  // Slow the copy (route cap) so the kill lands mid-transfer.
  absl::StatusOr<Subprocess> cp = Subprocess::Start(Gfcp({"-p", "4", "--stripe", "256K", "--route-rate", "100M",
                                                          dir_.Sub("src.dat"), "gf://" + pa + "/f.dat"}));
  ASSERT_TRUE(cp.ok());
  ASSERT_TRUE(WaitForJournalRecords(dir_.path() / "a" / ".gfrep-tmp", 20s));
  a.Kill();
  RunResult failed = cp->Wait(20s);
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_NE(failed.err.find("gfcp: "), std::string::npos) << failed.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "a" / "f.dat"));  // nothing partial under the final name

  Subprocess a2;
  std::string pa2 = StartAgent(a2, dir_.Sub("a"));
  RunResult again = RunCommand(Gfcp({"-p", "4", "--json", dir_.Sub("src.dat"), "gf://" + pa2 + "/f.dat"}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  nlohmann::json j = Json(again);
  EXPECT_GT(j["resumed_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_LT(j["bytes_transferred"].get<std::uint64_t>(), 48u << 20);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "a" / "f.dat"), testing::ReadFile(dir_.path() / "src.dat"));
}

TEST_F(TransferIntegrationTest, ResumesAfterReceivingClientKilled) {
  Subprocess a;
  std::string pa = StartAgent(a, dir_.Sub("a"));
  testing::WriteRandomFile(dir_.path() / "a" / "f.dat", 48 << 20, 3);
  fs::create_directories(dir_.path() / "local");
  absl::StatusOr<Subprocess> cp = Subprocess::Start(Gfcp({"-p", "2", "--stripe", "256K", "--route-rate", "100M",
                                                          "--journal-interval", "1M", "gf://" + pa + "/f.dat",
                                                          dir_.Sub("local/f.dat")}));
  ASSERT_TRUE(cp.ok());
  ASSERT_TRUE(WaitForJournalRecords(dir_.path() / "local" / ".gfrep-tmp", 20s));
  cp->Kill();
  EXPECT_FALSE(fs::exists(dir_.path() / "local" / "f.dat"));
  RunResult again = RunCommand(Gfcp({"-p", "2", "--json", "gf://" + pa + "/f.dat", dir_.Sub("local/f.dat")}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_GT(Json(again)["resumed_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "local" / "f.dat"), testing::ReadFile(dir_.path() / "a" / "f.dat"));
}

TEST_F(TransferIntegrationTest, ResumesAfterSendingAgentKilledInThirdPartyCopy) {
  Subprocess a, b;
  std::string pa = StartAgent(a, dir_.Sub("a"));
  std::string pb = StartAgent(b, dir_.Sub("b"));
  testing::WriteRandomFile(dir_.path() / "a" / "f.dat", 48 << 20, 4);
  absl::StatusOr<Subprocess> cp = Subprocess::Start(Gfcp({"-p", "4", "--stripe", "256K", "--route-rate", "100M",
                                                          "gf://" + pa + "/f.dat", "gf://" + pb + "/f.dat"}));
  ASSERT_TRUE(cp.ok());
  ASSERT_TRUE(WaitForJournalRecords(dir_.path() / "b" / ".gfrep-tmp", 20s));
  a.Kill();
  RunResult failed = cp->Wait(20s);
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_NE(failed.err.find("rerun to resume"), std::string::npos) << failed.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "b" / "f.dat"));
  Subprocess a2;
  std::string pa2 = StartAgent(a2, dir_.Sub("a"));
  RunResult again = RunCommand(Gfcp({"-p", "4", "--json", "gf://" + pa2 + "/f.dat", "gf://" + pb + "/f.dat"}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_GT(Json(again)["resumed_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "b" / "f.dat"), testing::ReadFile(dir_.path() / "a" / "f.dat"));
}

TEST_F(TransferIntegrationTest, FlippedByteOnTheSendingAgentIsDetectedAndResent) {
  Subprocess a, b;
  std::string pa = StartAgent(a, dir_.Sub("a"), {"--test-corrupt-offset", "5000000", "--test-corrupt-times", "1"});
  std::string pb = StartAgent(b, dir_.Sub("b"));
  testing::WriteRandomFile(dir_.path() / "a" / "f.dat", 12 << 20, 5);
  RunResult r = RunCommand(Gfcp({"-p", "4", "--json", "gf://" + pa + "/f.dat", "gf://" + pb + "/f.dat"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json(r)["resend_rounds"], 1);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "b" / "f.dat"), testing::ReadFile(dir_.path() / "a" / "f.dat"));
  EXPECT_NE(b.Stderr().find("failed its xxh3-64 checksum"), std::string::npos);
}

TEST_F(TransferIntegrationTest, DiskFullOnReceiverFailsClearlyAndLeavesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  fs::path mnt = dir_.path() / "small";
  fs::create_directories(mnt);
  if (::mount("gfrep-test-tmpfs", mnt.c_str(), "tmpfs", 0, "size=4m") != 0) {
    GTEST_SKIP() << "cannot mount tmpfs: " << std::strerror(errno);
  }
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  Subprocess a;
  std::string pa = StartAgent(a, (mnt / "spool").string());
  testing::WriteRandomFile(dir_.path() / "big.dat", 8 << 20, 6);
  RunResult r = RunCommand(Gfcp({dir_.Sub("big.dat"), "gf://" + pa + "/big.dat"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("disk full"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(mnt / "spool" / "big.dat"));
  // A file that fits still goes through afterwards.
  testing::WriteRandomFile(dir_.path() / "small.dat", 1 << 20, 7);
  RunResult ok = RunCommand(Gfcp({dir_.Sub("small.dat"), "gf://" + pa + "/small.dat"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST_F(TransferIntegrationTest, WrongKeyIsRefusedOnBothSides) {
  Subprocess a;
  std::string pa = StartAgent(a, dir_.Sub("a"));
  testing::WriteRandomFile(dir_.path() / "src.dat", 1000, 8);
  std::string other = dir_.Sub("other_key");
  RunResult r = RunCommand(Gfcp({dir_.Sub("src.dat"), "gf://" + pa + "/x"}, other));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("authentication failed"), std::string::npos) << r.err;
  // The key file was created on first use, private to its owner.
  struct stat st {};
  ASSERT_EQ(::stat(other.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // The agent says so too (its log is on stderr; poll it, bounded).
  bool logged = false;
  for (int i = 0; i < 250 && !logged; ++i) {
    logged = a.Stderr().find("refused unauthenticated peer") != std::string::npos;
    if (!logged) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(logged) << a.Stderr();
  EXPECT_FALSE(fs::exists(dir_.path() / "a" / "x"));
}

TEST_F(TransferIntegrationTest, TlsCopiesAndNeverFallsBackToClearText) {
  // A throwaway CA and an agent certificate for 127.0.0.1 (openssl CLI).
  std::string d = dir_.path().string();
  std::string script =
      "set -e; cd " + d + "; "
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=ca -keyout ca.key -out ca.pem; "
      "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout agent.key -out agent.csr; "
      "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext; "
      "openssl x509 -req -in agent.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
      "-extfile san.ext -out agent.pem";
  RunResult certs = RunCommand({"/bin/sh", "-c", script});
  ASSERT_EQ(certs.exit_code, 0) << certs.err;
  Subprocess a;
  std::string pa = StartAgent(a, dir_.Sub("a"), {"--tls-cert", d + "/agent.pem", "--tls-key", d + "/agent.key",
                                                  "--tls-ca", d + "/ca.pem", "--require-tls"});
  testing::WriteRandomFile(dir_.path() / "src.dat", 5 << 20, 11);
  RunResult tls = RunCommand(Gfcp({"--tls", "--tls-ca", d + "/ca.pem", "-p", "3", "--json", dir_.Sub("src.dat"),
                                   "gf://" + pa + "/t.dat"}));
  ASSERT_EQ(tls.exit_code, 0) << tls.err;
  EXPECT_EQ(testing::ReadFile(dir_.path() / "a" / "t.dat"), testing::ReadFile(dir_.path() / "src.dat"));
  // Who encrypted the records is reported: OpenSSL in user space, or the kernel (kTLS).
  const std::string tls_path = Json(tls)["tls"].get<std::string>();
  EXPECT_TRUE(tls_path == "openssl" || tls_path.starts_with("ktls")) << tls.out;
  // Clear text to an agent that requires TLS is refused, with the reason.
  RunResult clear = RunCommand(Gfcp({dir_.Sub("src.dat"), "gf://" + pa + "/c.dat"}));
  EXPECT_NE(clear.exit_code, 0);
  EXPECT_NE(clear.err.find("requires TLS"), std::string::npos) << clear.err;
  // TLS without a CA to verify the agent is refused before connecting.
  RunResult no_ca = RunCommand(Gfcp({"--tls", dir_.Sub("src.dat"), "gf://" + pa + "/c.dat"}));
  EXPECT_NE(no_ca.exit_code, 0);
  EXPECT_NE(no_ca.err.find("CA"), std::string::npos) << no_ca.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "a" / "c.dat"));
}

TEST_F(TransferIntegrationTest, TlsChecksTheAgentsHostNameAndTheClientsRole) {
  // gfca certificates: the agent's names 127.0.0.1 (a good one) or 10.9.9.9 (another host's);
  // clients hold a node, a user and a catalog certificate.
  const std::string ca = dir_.Sub("ca");
  absl::Status certs = testing::MakeCertificates(
      ca, {{"init"}, {"issue", "node", "agent", "--host", "127.0.0.1"}, {"issue", "node", "elsewhere", "--host", "10.9.9.9"},
           {"issue", "node", "kek1"}, {"issue", "user", "alice"}, {"issue", "catalog", "cat"}});
  ASSERT_TRUE(certs.ok()) << certs;
  testing::WriteRandomFile(dir_.path() / "src.dat", 1 << 20, 12);
  auto put = [&](const std::string& agent, const std::string& client, const std::string& name) {
    return RunCommand(Gfcp({"--tls", "--tls-ca", ca + "/ca.pem", "--tls-cert", ca + "/" + client + ".pem",
                            "--tls-key", ca + "/" + client + ".key", dir_.Sub("src.dat"),
                            "gf://" + agent + "/" + name}));
  };
  Subprocess good;
  const std::string pg = StartAgent(good, dir_.Sub("a"), {"--tls-cert", ca + "/agent.pem", "--tls-key",
                                                          ca + "/agent.key", "--tls-ca", ca + "/ca.pem",
                                                          "--require-tls", "--tls-peers", "node,admin"});
  RunResult node = put(pg, "kek1", "by-node.dat");
  EXPECT_EQ(node.exit_code, 0) << node.err;
  EXPECT_TRUE(fs::exists(dir_.path() / "a" / "by-node.dat"));
  // A user and the catalog's own certificate are not among --tls-peers: refused, named.
  RunResult user = put(pg, "alice", "by-user.dat");
  EXPECT_NE(user.exit_code, 0);
  EXPECT_NE(user.err.find("user alice may not"), std::string::npos) << user.err;
  RunResult catalog = put(pg, "cat", "by-catalog.dat");
  EXPECT_NE(catalog.exit_code, 0);
  EXPECT_NE(catalog.err.find("catalog cat may not"), std::string::npos) << catalog.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "a" / "by-user.dat"));
  EXPECT_FALSE(fs::exists(dir_.path() / "a" / "by-catalog.dat"));
  EXPECT_TRUE(good.Stderr().find("refused peer") != std::string::npos) << good.Stderr();
  // An agent whose certificate (rightly signed) names another host: the client refuses it.
  Subprocess wrong;
  const std::string pw = StartAgent(wrong, dir_.Sub("b"), {"--tls-cert", ca + "/elsewhere.pem", "--tls-key",
                                                           ca + "/elsewhere.key", "--tls-ca", ca + "/ca.pem",
                                                           "--require-tls"});
  RunResult mismatch = put(pw, "kek1", "x.dat");
  EXPECT_NE(mismatch.exit_code, 0);
  EXPECT_NE(mismatch.err.find("does not name 127.0.0.1"), std::string::npos) << mismatch.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "b" / "x.dat"));
  // A bad --tls-peers is a clear start-up error.
  RunResult bad = RunCommand({BinPath("gfsited"), "--spool", dir_.Sub("c"), "--key-file", key_,
                              "--tls-peers", "node,robot"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown role 'robot'"), std::string::npos) << bad.err;
}

// Off loopback an agent talks mutual TLS with the others by default: without a certificate
// set it does not start, unless told --insecure. (10.9.9.9 is never bound: the check comes
// first, and binding an address this machine lacks fails after it.)
TEST_F(TransferIntegrationTest, AnAgentOffLoopbackNeedsACertificateSetOrInsecure) {
  const std::string ca = dir_.Sub("ca");
  absl::Status certs = testing::MakeCertificates(ca, {{"init"}, {"issue", "node", "n1", "--host", "10.9.9.9"}});
  ASSERT_TRUE(certs.ok()) << certs;
  auto start = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv{BinPath("gfsited"), "--listen", "10.9.9.9:0", "--spool", dir_.Sub("s"),
                                  "--key-file", key_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv, {}, 20s);
  };
  RunResult bare = start({});
  EXPECT_NE(bare.exit_code, 0);
  EXPECT_NE(bare.err.find("not a loopback address, and no certificate set"), std::string::npos) << bare.err;
  // A certificate without the CA to check other agents is not a set either.
  RunResult no_ca = start({"--tls-cert", ca + "/n1.pem", "--tls-key", ca + "/n1.key"});
  EXPECT_NE(no_ca.err.find("no certificate set"), std::string::npos) << no_ca.err;
  // With the set, or --insecure, the check passes (and binding the foreign address fails).
  for (const RunResult& r : {start({"--tls-cert", ca + "/n1.pem", "--tls-key", ca + "/n1.key", "--tls-ca",
                                    ca + "/ca.pem"}),
                             start({"--insecure"})}) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.err.find("no certificate set"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("10.9.9.9"), std::string::npos) << r.err;
  }
  RunResult control = start({"--insecure", "--require-mutual-tls"});
  EXPECT_NE(control.err.find("--require-mutual-tls needs --tls-cert"), std::string::npos) << control.err;
}

// Certificate rotation without a restart: gfsited reads its TLS files again on SIGHUP. A
// broken set (a key that does not match) is refused and the one in force stays.
TEST_F(TransferIntegrationTest, SighupReloadsTheAgentsCertificate) {
  const std::string ca = dir_.Sub("ca");
  absl::Status certs = testing::MakeCertificates(ca, {
           {"init"}, {"issue", "node", "old", "--host", "10.9.9.9"}, {"issue", "node", "new", "--host", "127.0.0.1"}});
  ASSERT_TRUE(certs.ok()) << certs;
  // The files the agent is started with first hold a certificate for another host.
  const fs::path pem = dir_.path() / "agent.pem";
  const fs::path key = dir_.path() / "agent.key";
  auto install = [&](const std::string& pem_from, const std::string& key_from) {
    fs::copy_file(pem_from, dir_.path() / "next.pem", fs::copy_options::overwrite_existing);
    fs::copy_file(key_from, dir_.path() / "next.key", fs::copy_options::overwrite_existing);
    fs::rename(dir_.path() / "next.pem", pem);
    fs::rename(dir_.path() / "next.key", key);
  };
  install(ca + "/old.pem", ca + "/old.key");
  Subprocess a;
  const std::string pa = StartAgent(a, dir_.Sub("a"), {"--tls-cert", pem.string(), "--tls-key", key.string(),
                                                       "--tls-ca", ca + "/ca.pem", "--require-tls"});
  testing::WriteRandomFile(dir_.path() / "src.dat", 1 << 20, 13);
  auto put = [&](const std::string& name) {
    return RunCommand(Gfcp({"--tls", "--tls-ca", ca + "/ca.pem", dir_.Sub("src.dat"), "gf://" + pa + "/" + name}));
  };
  auto wait_for_log = [&](const std::string& needle, std::size_t count) {
    for (int i = 0; i < 100; ++i) {
      std::string err = a.Stderr();
      std::size_t n = 0;
      for (std::size_t at = err.find(needle); at != std::string::npos; at = err.find(needle, at + 1)) ++n;
      if (n >= count) return true;
      std::this_thread::sleep_for(50ms);  // polling a log file: there is no event to wait on
    }
    return false;
  };
  RunResult before = put("before.dat");
  EXPECT_NE(before.exit_code, 0);
  EXPECT_NE(before.err.find("does not name 127.0.0.1"), std::string::npos) << before.err;
  // A certificate with another certificate's key: refused, the old one stays in force.
  install(ca + "/new.pem", ca + "/old.key");
  a.Signal(SIGHUP);
  ASSERT_TRUE(wait_for_log("TLS files not reloaded", 1)) << a.Stderr();
  EXPECT_NE(put("mismatch.dat").err.find("does not name 127.0.0.1"), std::string::npos);
  // The right pair: new sessions use it, with no restart.
  install(ca + "/new.pem", ca + "/new.key");
  a.Signal(SIGHUP);
  ASSERT_TRUE(wait_for_log("TLS certificate, key and CA reloaded", 1)) << a.Stderr();
  RunResult after = put("after.dat");
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(testing::ReadFile(dir_.path() / "a" / "after.dat"), testing::ReadFile(dir_.path() / "src.dat"));
  EXPECT_TRUE(a.running());
}

TEST_F(TransferIntegrationTest, CommandLineErrorsAreOneLineAndNonZero) {
  RunResult both_local = RunCommand(Gfcp({"a", "b"}));
  EXPECT_NE(both_local.exit_code, 0);
  EXPECT_NE(both_local.err.find("gf://"), std::string::npos) << both_local.err;
  RunResult bad_stripe = RunCommand(Gfcp({"--stripe", "1", "x", "gf://127.0.0.1:1/x"}));
  EXPECT_NE(bad_stripe.exit_code, 0);
  EXPECT_NE(bad_stripe.err.find("stripe unit"), std::string::npos) << bad_stripe.err;
  RunResult refused = RunCommand(Gfcp({"gf://127.0.0.1:1/x", dir_.Sub("x")}));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("connect"), std::string::npos) << refused.err;
  RunResult version = RunCommand({BinPath("gfcp"), "--version"});
  EXPECT_EQ(version.exit_code, 0);
  RunResult help = RunCommand({BinPath("gfsited"), "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--spool"), std::string::npos);
}

}  // namespace
}  // namespace gfrep
