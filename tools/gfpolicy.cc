// gfpolicy: the federation's replication policies (replica/plan/policy.h), stored in the catalog
// and enforced by gfcatalogd's policy engine.
//
//   gfpolicy apply FILE          replace every rule with FILE's (checked first)
//   gfpolicy add FILE            add FILE's rules to the stored ones (names must be new)
//   gfpolicy rm NAME...          remove rules (the document is rewritten; comments go)
//   gfpolicy list [--json]       the rules in force
//   gfpolicy show NAME           one rule, as stored
//   gfpolicy explain PATH [--json]   for each rule matching PATH: satisfied, in flight,
//                                    waiting or failed, and why
//   gfpolicy status RULE [--json]    the rule's files by state, and the unsatisfied ones
//   gfpolicy check FILE          check a file without storing it
// Exit: 0 ok (explain/status: every file satisfied), 1 something is not (or a mistake in a
// file), 2 usage or catalog errors.
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "catalog/client.h"
#include "replica/plan/policy.h"
#include "replica/plan/policy_explain.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

namespace {

using namespace gfrep;
constexpr const char* kProgram = "gfpolicy";

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(fmt::format("{}: cannot read", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json RuleJson(const replica::plan::PolicyRule& r) {
  nlohmann::json j = {{"name", r.name},         {"paths", r.paths},
                      {"copies", r.copies},     {"sites", r.sites.text()},
                      {"priority", r.priority}, {"continuous", r.continuous}};
  if (r.source_sites) j["source_sites"] = r.source_sites->text();
  if (r.lifetime) j["lifetime_s"] = r.lifetime->count();
  if (r.schedule) {
    j["schedule"] = r.schedule->spec();
    j["timezone"] = r.schedule->time_zone();
  }
  return j;
}

std::string RuleLine(const replica::plan::PolicyRule& r) {
  std::string s = fmt::format("{}: {} cop{} of {} in '{}'", r.name, r.copies,
                              r.copies == 1 ? "y" : "ies", fmt::join(r.paths, " "), r.sites.text());
  if (r.source_sites) s += fmt::format(" from '{}'", r.source_sites->text());
  if (r.priority != 0) s += fmt::format(", priority {}", r.priority);
  if (r.continuous) s += ", continuous";
  if (r.schedule) s += fmt::format(", at '{}' {}", r.schedule->spec(), r.schedule->time_zone());
  if (r.lifetime) s += fmt::format(", lifetime {} s", r.lifetime->count());
  return s;
}

nlohmann::json VerdictJson(const replica::plan::RuleFileVerdict& v) {
  return {{"rule", v.rule},
          {"path", v.path},
          {"state", std::string(replica::plan::ToString(v.state))},
          {"wanted", v.wanted},
          {"have", v.have},
          {"sites", v.sites},
          {"request_id", v.request_id},
          {"reason", v.reason}};
}

// Rewrites the stored document with `edit` applied to its rules (a YAML sequence), checked,
// stored only if nobody changed it meanwhile.
int Edit(catalog::CatalogClient& c, const std::string& source,
         const std::function<absl::Status(YAML::Node&)>& edit) {
  absl::StatusOr<catalog::PolicyDocument> doc = c.GetPolicies();
  if (!doc.ok()) return tools::Fail(kProgram, tools::ErrorText(doc.status()), 2);
  YAML::Node root;
  try {
    root = doc->text.empty() ? YAML::Node(YAML::NodeType::Map) : YAML::Load(doc->text);
  } catch (const YAML::Exception& e) {
    return tools::Fail(kProgram, fmt::format("the stored policies do not parse: {}", e.what()), 2);
  }
  if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
  YAML::Node rules = root["rules"];
  if (!rules || rules.IsNull()) {
    root["rules"] = YAML::Node(YAML::NodeType::Sequence);
    rules = root["rules"];
  }
  if (absl::Status s = edit(rules); !s.ok()) return tools::Fail(kProgram, tools::ErrorText(s), 1);
  YAML::Emitter out;
  out << root;
  const std::string text = std::string(out.c_str()) + "\n";
  absl::StatusOr<std::vector<replica::plan::PolicyRule>> parsed =
      replica::plan::ParsePolicies(text, source);
  if (!parsed.ok()) return tools::Fail(kProgram, tools::ErrorText(parsed.status()), 1);
  absl::StatusOr<catalog::PolicyDocument> put = c.PutPolicies(text, source, doc->version);
  if (!put.ok()) return tools::Fail(kProgram, tools::ErrorText(put.status()), 2);
  std::cout << fmt::format("{} rule(s) in force (version {})\n", parsed->size(), put->version);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gfpolicy: replication policies (rules stored in the catalog, enforced by gfcatalogd)"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.require_subcommand(1);
  std::string file, path, rule;
  std::vector<std::string> names;
  bool json = false;
  CLI::App* apply = app.add_subcommand("apply", "Replace every rule with those of FILE");
  apply->add_option("FILE", file, "Policy file (YAML)")->required();
  CLI::App* add = app.add_subcommand("add", "Add the rules of FILE to the stored ones");
  add->add_option("FILE", file, "Policy file (YAML)")->required();
  CLI::App* rm = app.add_subcommand("rm", "Remove rules by name");
  rm->add_option("NAME", names, "Rule names")->required();
  CLI::App* list = app.add_subcommand("list", "The rules in force");
  list->add_flag("--json", json, "JSON array");
  CLI::App* show = app.add_subcommand("show", "One rule");
  show->add_option("NAME", rule, "Rule name")->required();
  show->add_flag("--json", json, "JSON object");
  CLI::App* explain = app.add_subcommand("explain", "Why PATH has (or lacks) each matching rule's copies");
  explain->add_option("PATH", path, "File")->required();
  explain->add_flag("--json", json, "JSON array, one object per rule");
  CLI::App* status = app.add_subcommand("status", "A rule's files: satisfied, in flight, waiting, failed");
  status->add_option("RULE", rule, "Rule name")->required();
  status->add_flag("--json", json, "JSON object");
  CLI::App* check = app.add_subcommand("check", "Check a policy file without storing it");
  check->add_option("FILE", file, "Policy file (YAML)")->required();
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);

  if (check->parsed()) {
    absl::StatusOr<std::vector<replica::plan::PolicyRule>> r = replica::plan::LoadPolicyFile(file);
    if (!r.ok()) return tools::Fail(kProgram, tools::ErrorText(r.status()), 1);
    for (const replica::plan::PolicyRule& x : *r) std::cout << RuleLine(x) << "\n";
    std::cout << fmt::format("{}: {} rule(s), no mistakes\n", file, r->size());
    return 0;
  }
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()), 2);
  catalog::CatalogClient& c = **client;

  if (apply->parsed()) {
    absl::StatusOr<std::string> text = ReadFile(file);
    if (!text.ok()) return tools::Fail(kProgram, tools::ErrorText(text.status()), 2);
    absl::StatusOr<std::vector<replica::plan::PolicyRule>> r =
        replica::plan::ParsePolicies(*text, file);
    if (!r.ok()) return tools::Fail(kProgram, tools::ErrorText(r.status()), 1);
    absl::StatusOr<catalog::PolicyDocument> put = c.PutPolicies(*text, file, std::nullopt);
    if (!put.ok()) return tools::Fail(kProgram, tools::ErrorText(put.status()), 2);
    std::cout << fmt::format("{} rule(s) in force (version {})\n", r->size(), put->version);
    return 0;
  }
  if (add->parsed()) {
    absl::StatusOr<std::string> text = ReadFile(file);
    if (!text.ok()) return tools::Fail(kProgram, tools::ErrorText(text.status()), 2);
    absl::StatusOr<std::vector<replica::plan::PolicyRule>> r =
        replica::plan::ParsePolicies(*text, file);
    if (!r.ok()) return tools::Fail(kProgram, tools::ErrorText(r.status()), 1);
    YAML::Node more = YAML::Load(*text)["rules"];
    return Edit(c, "gfpolicy add " + file, [&](YAML::Node& rules) {
      for (const YAML::Node& n : more) rules.push_back(n);
      return absl::OkStatus();
    });
  }
  if (rm->parsed()) {
    return Edit(c, fmt::format("gfpolicy rm {}", fmt::join(names, " ")), [&](YAML::Node& rules) {
      std::set<std::string> gone(names.begin(), names.end());
      YAML::Node kept(YAML::NodeType::Sequence);
      std::set<std::string> removed;
      for (const YAML::Node& n : rules) {
        const std::string name = n["name"] ? n["name"].as<std::string>("") : "";
        if (gone.count(name) > 0) {
          removed.insert(name);
        } else {
          kept.push_back(n);
        }
      }
      for (const std::string& n : names) {
        if (removed.count(n) == 0) return absl::NotFoundError(fmt::format("no rule named {}", n));
      }
      rules = kept;
      return absl::OkStatus();
    });
  }

  absl::StatusOr<catalog::PolicyDocument> doc = c.GetPolicies();
  if (!doc.ok()) return tools::Fail(kProgram, tools::ErrorText(doc.status()), 2);
  absl::StatusOr<std::vector<replica::plan::PolicyRule>> rules =
      replica::plan::ParsePolicies(doc->text, doc->source.empty() ? "policies" : doc->source);
  if (!rules.ok()) {
    return tools::Fail(kProgram, "the stored policies do not parse: " + tools::ErrorText(rules.status()), 2);
  }
  auto find = [&](const std::string& name) -> const replica::plan::PolicyRule* {
    for (const replica::plan::PolicyRule& r : *rules) {
      if (r.name == name) return &r;
    }
    return nullptr;
  };
  if (list->parsed()) {
    if (json) {
      nlohmann::json j = nlohmann::json::array();
      for (const replica::plan::PolicyRule& r : *rules) j.push_back(RuleJson(r));
      std::cout << j.dump() << "\n";
      return 0;
    }
    for (const replica::plan::PolicyRule& r : *rules) std::cout << RuleLine(r) << "\n";
    std::cout << fmt::format("{} rule(s), version {} from {}\n", rules->size(), doc->version,
                             doc->source.empty() ? "(none)" : doc->source);
    return 0;
  }
  if (show->parsed()) {
    const replica::plan::PolicyRule* r = find(rule);
    if (r == nullptr) return tools::Fail(kProgram, fmt::format("no rule named {} (NOT_FOUND)", rule), 2);
    std::cout << (json ? RuleJson(*r).dump() : RuleLine(*r)) << "\n";
    return 0;
  }
  if (explain->parsed()) {
    absl::StatusOr<std::vector<replica::plan::RuleFileVerdict>> v =
        replica::plan::ExplainPath(c, *rules, path);
    if (!v.ok()) return tools::Fail(kProgram, tools::ErrorText(v.status()), 2);
    bool all = true;
    if (json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& x : *v) j.push_back(VerdictJson(x));
      std::cout << j.dump() << "\n";
    } else if (v->empty()) {
      std::cout << fmt::format("{}: no rule matches it\n", path);
    }
    for (const auto& x : *v) {
      all = all && (x.state == replica::plan::RuleFileState::kSatisfied ||
                    x.state == replica::plan::RuleFileState::kEnded);
      if (json) continue;
      std::cout << fmt::format(
          "{}: rule {}: {} ({} of {} copies in {}){}{}\n", path, x.rule,
          replica::plan::ToString(x.state), x.have, x.wanted,
          x.sites.empty() ? "no site" : fmt::format("{}", fmt::join(x.sites, ",")),
          x.reason.empty() ? "" : ": ", x.reason);
    }
    return all ? 0 : 1;
  }
  if (status->parsed()) {
    const replica::plan::PolicyRule* r = find(rule);
    if (r == nullptr) return tools::Fail(kProgram, fmt::format("no rule named {} (NOT_FOUND)", rule), 2);
    absl::StatusOr<replica::plan::RuleStatusSummary> s = replica::plan::StatusOfRule(c, *r);
    if (!s.ok()) return tools::Fail(kProgram, tools::ErrorText(s.status()), 2);
    if (json) {
      nlohmann::json j = {{"rule", s->rule},           {"files", s->files},
                          {"satisfied", s->satisfied}, {"in_flight", s->in_flight},
                          {"waiting", s->waiting},     {"failed", s->failed},
                          {"ended", s->ended},
                          {"unsatisfied", nlohmann::json::array()}};
      for (const auto& x : s->unsatisfied) j["unsatisfied"].push_back(VerdictJson(x));
      std::cout << j.dump() << "\n";
    } else {
      std::cout << fmt::format("rule {}: {} files: {} satisfied, {} in flight, {} waiting, {} failed{}\n",
                               s->rule, s->files, s->satisfied, s->in_flight, s->waiting, s->failed,
                               s->ended == 0 ? "" : fmt::format(", {} past their lifetime", s->ended));
      for (const auto& x : s->unsatisfied) {
        std::cout << fmt::format("  {} {}: {}\n", replica::plan::ToString(x.state), x.path,
                                 x.reason);
      }
    }
    return s->satisfied + s->ended == s->files ? 0 : 1;
  }
  return 2;
}
