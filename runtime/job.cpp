#include "runtime/job.h"

#include "model/al_form.h"
#include "model/model_json.h"

namespace tapp {
using nlohmann::json;

json job_to_json(const Job& job) {
  const RunOptions& o = job.options;
  json j;
  j["mode"] = job.mode;
  // An AL form travels as its source graph and cuts; the worker makes it again.
  j["graph"] = model_to_json(job.graph.is_al_form() ? al_source(job.graph) : job.graph);
  if (job.graph.is_al_form()) j["al"] = al_form_to_json(job.graph);
  j["cluster"] = cluster_to_json(job.cluster);
  j["placement"] = {{"layer_group", job.placement.layer_group},
                    {"group_device", job.placement.group_device},
                    {"group_replicas", job.placement.group_replicas},
                    {"group_replica_weights", job.placement.group_replica_weights},
                    {"aggregation_every", job.placement.aggregation_every},
                    {"micro_batches", job.placement.micro_batches},
                    {"schedule", schedule_name(job.placement.schedule)},
                    {"optimizer", optimizer_name(job.placement.optimizer)},
                    {"group_recompute", std::vector<int>(job.placement.group_recompute.begin(),
                                                         job.placement.group_recompute.end())}};
  j["options"] = {{"warmup_steps", o.warmup_steps},     {"steps", o.steps},
                  {"batch_size", o.batch_size},         {"seed", o.seed},
                  {"learning_rate", o.learning_rate},   {"momentum", o.momentum},
                  {"timeout_s", o.timeout_s},           {"collect_parameters", o.collect_parameters},
                  {"fault_rank", o.fault_rank},         {"fault_step", o.fault_step},
                  {"fault_mode", o.fault_mode}};
  j["gloo_hosts"] = job.gloo_hosts;
  j["shm_name"] = job.shm_name;
  j["compute_gate"] = {{"dir", job.compute_gate_dir}, {"slot", job.compute_gate_slot}};
  return j;
}

Result<Job> job_from_json(const json& j) {
  Job job;
  try {
    job.mode = j.at("mode").get<std::string>();
    auto g = model_from_json(j.at("graph"));
    if (!g) return g.status();
    job.graph = std::move(*g);
    if (j.contains("al")) {
      auto al = al_form_from_json(job.graph, j["al"]);
      if (!al) return al.status();
      job.graph = std::move(*al);
    }
    auto c = cluster_from_json(j.at("cluster"));
    if (!c) return c.status().with_context("job.cluster");
    job.cluster = std::move(*c);
    const json& p = j.at("placement");
    job.placement.layer_group = p.at("layer_group").get<std::vector<int>>();
    job.placement.group_device = p.at("group_device").get<std::vector<int>>();
    job.placement.group_replicas = p.at("group_replicas").get<std::vector<std::vector<int>>>();
    job.placement.group_replica_weights = p.at("group_replica_weights").get<std::vector<std::vector<int>>>();
    job.placement.aggregation_every = p.at("aggregation_every").get<int>();
    job.placement.micro_batches = p.at("micro_batches").get<int>();
    auto sched = schedule_from_name(p.at("schedule").get<std::string>());
    if (!sched) return sched.status();
    job.placement.schedule = *sched;
    auto optimizer = optimizer_from_name(p.at("optimizer").get<std::string>());
    if (!optimizer) return optimizer.status();
    job.placement.optimizer = *optimizer;
    for (int flag : p.at("group_recompute").get<std::vector<int>>())
      job.placement.group_recompute.push_back(static_cast<char>(flag != 0));
    const json& o = j.at("options");
    RunOptions& r = job.options;
    r.warmup_steps = o.at("warmup_steps").get<int>();
    r.steps = o.at("steps").get<int>();
    r.batch_size = o.at("batch_size").get<int64_t>();
    r.seed = o.at("seed").get<uint64_t>();
    r.learning_rate = o.at("learning_rate").get<double>();
    r.momentum = o.at("momentum").get<double>();
    r.timeout_s = o.at("timeout_s").get<double>();
    r.collect_parameters = o.at("collect_parameters").get<bool>();
    r.fault_rank = o.at("fault_rank").get<int>();
    r.fault_step = o.at("fault_step").get<int>();
    r.fault_mode = o.at("fault_mode").get<std::string>();
    job.gloo_hosts = j.at("gloo_hosts").get<std::vector<std::string>>();
    job.shm_name = j.at("shm_name").get<std::string>();
    const json& gate = j.at("compute_gate");
    job.compute_gate_dir = gate.at("dir").get<std::string>();
    job.compute_gate_slot = gate.at("slot").get<std::vector<int>>();
    if (!job.compute_gate_slot.empty() && job.compute_gate_slot.size() != job.cluster.devices.size())
      return Status::error("job.compute_gate.slot: one per device expected");
  } catch (const std::exception& e) {
    return Status::error(std::string("job: ") + e.what());
  }
  return job;
}

}  // namespace tapp
