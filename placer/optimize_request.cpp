// placer/optimize_request.cpp — parsing the POST /placements body into an OptimizeRequest.
//
// Body: {"model": "alexnet" | {layer graph}, "cluster": {...},
//        "options": {"evaluator", "iterations", "time_budget_s", "seed",
//                    "batch_size", "input_size", "num_classes", "warm_start", "baselines",
//                    "verify", "optimizer", "costs", "torchscript", "policy", "allow_al"}}
// Every error names the field ("options.iterations: must be >= 0, got -3").
// No LibTorch here, so the service can parse requests cheaply.
#include <set>

#include "common/json_fields.h"
#include "placer/optimize.h"

namespace tapp {
namespace jf = json_fields;
using nlohmann::json;

namespace {

Status read_options(const json& o, OptimizeRequest& r) {
  if (Status s = jf::expect_object(o, "options"); !s) return s;
  static const std::set<std::string> known = {"evaluator",  "iterations", "time_budget_s",
                                              "seed",       "batch_size", "input_size",
                                              "num_classes", "warm_start", "baselines",
                                              "verify",      "optimizer",  "costs",
                                              "torchscript", "policy",     "allow_al"};
  for (auto it = o.begin(); it != o.end(); ++it)
    if (!known.count(it.key()))
      return jf::field_error("options." + it.key(),
                             "unknown option (known: evaluator, iterations, time_budget_s, seed, batch_size, "
                           "input_size, num_classes, warm_start, baselines, verify, optimizer, costs, torchscript, policy, "
                           "allow_al; and the server's memory_limit_mib)");
  const std::string p = "options";
  std::string evaluator = evaluator_kind_name(r.evaluator);
  if (Status s = jf::read(o, "evaluator", evaluator, p); !s) return s;
  Result<EvaluatorKind> kind = evaluator_kind_from_name(evaluator, "options.evaluator");
  if (!kind) return kind.status();
  r.evaluator = *kind;
  if (Status s = jf::read(o, "iterations", r.iterations, p); !s) return s;
  if (r.iterations < 0 || r.iterations > kMaxIterations)
    return jf::field_error("options.iterations", "must be in [0, 1000000], got " + std::to_string(r.iterations));
  if (Status s = jf::read(o, "time_budget_s", r.time_budget_s, p); !s) return s;
  if (!(r.time_budget_s >= 0) || r.time_budget_s > kMaxTimeBudgetS)
    return jf::field_error("options.time_budget_s", "must be in [0, 604800], got " + o.at("time_budget_s").dump());
  // Read as every integer option is (5.0 is one); a negative one gets its own message.
  if (auto it = o.find("seed"); it != o.end() && it->is_number() && it->get<double>() < 0)
    return jf::field_error("options.seed", "expected a non-negative integer, got " + it->dump());
  if (Status s = jf::read(o, "seed", r.seed, p); !s) return s;
  if (Status s = jf::read(o, "batch_size", r.batch_size, p); !s) return s;
  if (r.batch_size < 1 || r.batch_size > kMaxBatchSize)
    return jf::field_error("options.batch_size", "must be in [1, 65536], got " + std::to_string(r.batch_size));
  if (Status s = jf::read(o, "input_size", r.input_size, p); !s) return s;
  if (r.input_size < 0 || r.input_size > kMaxInputSize)
    return jf::field_error("options.input_size", "must be 0 (model default) or in [1, 4096], got " +
                         std::to_string(r.input_size));
  if (Status s = jf::read(o, "num_classes", r.num_classes, p); !s) return s;
  if (r.num_classes < 0 || r.num_classes > 1000000)
    return jf::field_error("options.num_classes", "must be 0 (model default) or positive, got " +
                         std::to_string(r.num_classes));
  if (Status s = jf::read(o, "warm_start", r.warm_start, p); !s) return s;
  std::string optimizer = optimizer_name(r.optimizer);
  if (Status s = jf::read(o, "optimizer", optimizer, p); !s) return s;
  Result<Optimizer> named = optimizer_from_name(optimizer);
  if (!named) return jf::field_error("options.optimizer", named.error_message());
  r.optimizer = *named;
  std::string costs = "profile";
  if (Status s = jf::read(o, "costs", costs, p); !s) return s;
  if (costs == "profile") r.costs = CostSource::profile;
  else if (costs == "cached") r.costs = CostSource::cached_only;
  else if (costs == "estimated") r.costs = CostSource::estimated;
  else return jf::field_error("options.costs", "expected profile, cached or estimated, got \"" + costs + "\"");
  std::string torchscript = "auto";
  if (Status s = jf::read(o, "torchscript", torchscript, p); !s) return s;
  Result<ScriptImport> import = script_import_from_name(torchscript);
  if (!import) return jf::field_error("options.torchscript", import.error_message());
  r.torchscript = *import;
  std::string policy = "latest";
  if (Status s = jf::read(o, "policy", policy, p); !s) return s;
  if (policy == "latest") r.policy_start = PolicyStart::latest;
  else if (policy == "fresh") r.policy_start = PolicyStart::fresh;
  else return jf::field_error("options.policy", "expected latest or fresh, got \"" + policy.substr(0, 100) + "\"");
  if (Status s = jf::read(o, "baselines", r.baselines, p); !s) return s;
  if (Status s = jf::read(o, "verify", r.verify, p); !s) return s;
  if (Status s = jf::read(o, "allow_al", r.allow_al, p); !s) return s;
  return Status::ok();
}

}  // namespace

Result<OptimizeRequest> optimize_request_from_json(const json& j) {
  OptimizeRequest r;
  if (!j.is_object())
    return Status::coded(ErrorCode::invalid_argument, "request: expected an object, got " + std::string(j.type_name()));
  static const std::set<std::string> top = {"model", "cluster", "options"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!top.count(it.key())) return jf::field_error(it.key(), "unknown field (known: model, cluster, options)");

  auto m = j.find("model");
  if (m == j.end() || m->is_null()) return jf::field_error("model", "missing required field");
  if (m->is_string()) {
    r.model = m->get<std::string>();
    if (r.model.empty()) return jf::field_error("model", "must name a zoo model or a file, got an empty string");
  } else if (m->is_object()) {
    r.model_graph = *m;
    if (auto n = m->find("name"); n != m->end() && n->is_string()) r.model = n->get<std::string>();
    if (r.model.empty()) r.model = "inline";
  } else {
    return jf::field_error("model", "expected a zoo name (string) or a layer graph (object), got " +
                         std::string(m->type_name()));
  }

  auto c = j.find("cluster");
  if (c == j.end() || c->is_null()) return jf::field_error("cluster", "missing required field");
  Result<Cluster> cluster = cluster_from_json(*c);
  if (!cluster) {
    const Status& s = cluster.status();
    return s.field() == "cluster" ? s : s.nested_in("cluster");
  }
  r.cluster = std::move(cluster.value());

  // A present field has its type: "options": null is an error, not the defaults (json_fields.h).
  if (auto o = j.find("options"); o != j.end())
    if (Status s = read_options(*o, r); !s) return s;
  // A device faster than this host can be planned for, not measured here.
  if (r.evaluator != EvaluatorKind::simulate)
    if (Status s = measurable_here(r.cluster, {}, "cluster."); !s)
      return s.with_hint("plan for it with the evaluator \"simulate\" (tapp-cli optimize --evaluator simulate)");
  return r;
}

}  // namespace tapp
