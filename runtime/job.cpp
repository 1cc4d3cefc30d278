#include "runtime/job.h"

namespace tapp {
using nlohmann::json;

json layer_graph_to_json(const LayerGraph& g) {
  json j;
  j["name"] = g.name;
  j["input_shape"] = g.input_shape;
  j["num_classes"] = g.num_classes;
  j["layers"] = json::array();
  for (const Layer& l : g.layers) {
    const LayerAttrs& a = l.attrs;
    j["layers"].push_back({{"name", l.name},
                           {"op", l.op},
                           {"inputs", l.inputs},
                           {"out", a.out},
                           {"kernel", {a.kernel[0], a.kernel[1]}},
                           {"stride", {a.stride[0], a.stride[1]}},
                           {"padding", {a.padding[0], a.padding[1]}},
                           {"groups", a.groups},
                           {"bias", a.bias},
                           {"ceil_mode", a.ceil_mode},
                           {"p", a.p},
                           {"eps", a.eps},
                           {"dim", a.dim}});
  }
  return j;
}

Result<LayerGraph> layer_graph_from_json(const json& j) {
  try {
    LayerGraph g;
    g.name = j.at("name").get<std::string>();
    g.input_shape = j.at("input_shape").get<Shape>();
    g.num_classes = j.at("num_classes").get<int64_t>();
    for (const json& lj : j.at("layers")) {
      Layer l;
      l.name = lj.at("name").get<std::string>();
      l.op = lj.at("op").get<std::string>();
      l.inputs = lj.at("inputs").get<std::vector<int>>();
      LayerAttrs& a = l.attrs;
      a.out = lj.at("out").get<int64_t>();
      for (int k = 0; k < 2; ++k) {
        a.kernel[k] = lj.at("kernel").at(k).get<int64_t>();
        a.stride[k] = lj.at("stride").at(k).get<int64_t>();
        a.padding[k] = lj.at("padding").at(k).get<int64_t>();
      }
      a.groups = lj.at("groups").get<int64_t>();
      a.bias = lj.at("bias").get<bool>();
      a.ceil_mode = lj.at("ceil_mode").get<bool>();
      a.p = lj.at("p").get<double>();
      a.eps = lj.at("eps").get<double>();
      a.dim = lj.at("dim").get<int64_t>();
      g.layers.push_back(std::move(l));
    }
    int64_t classes = g.num_classes;
    if (Status s = infer_shapes(g); !s) return s;
    if (classes > 0) g.num_classes = classes;
    return g;
  } catch (const std::exception& e) {
    return Status::error(std::string("job.graph: ") + e.what());
  }
}

json job_to_json(const Job& job) {
  const RunOptions& o = job.options;
  json j;
  j["mode"] = job.mode;
  j["graph"] = layer_graph_to_json(job.graph);
  j["cluster"] = cluster_to_json(job.cluster);
  j["placement"] = {{"layer_group", job.placement.layer_group},
                    {"group_device", job.placement.group_device},
                    {"micro_batches", job.placement.micro_batches},
                    {"schedule", schedule_name(job.placement.schedule)}};
  j["options"] = {{"warmup_steps", o.warmup_steps},     {"steps", o.steps},
                  {"batch_size", o.batch_size},         {"seed", o.seed},
                  {"learning_rate", o.learning_rate},   {"momentum", o.momentum},
                  {"timeout_s", o.timeout_s},           {"collect_parameters", o.collect_parameters},
                  {"fault_rank", o.fault_rank},         {"fault_step", o.fault_step},
                  {"fault_mode", o.fault_mode}};
  j["gloo_hosts"] = job.gloo_hosts;
  j["shm_name"] = job.shm_name;
  return j;
}

Result<Job> job_from_json(const json& j) {
  Job job;
  try {
    job.mode = j.at("mode").get<std::string>();
    auto g = layer_graph_from_json(j.at("graph"));
    if (!g) return g.status();
    job.graph = std::move(*g);
    auto c = cluster_from_json(j.at("cluster"));
    if (!c) return c.status().with_context("job.cluster");
    job.cluster = std::move(*c);
    const json& p = j.at("placement");
    job.placement.layer_group = p.at("layer_group").get<std::vector<int>>();
    job.placement.group_device = p.at("group_device").get<std::vector<int>>();
    job.placement.micro_batches = p.at("micro_batches").get<int>();
    auto sched = schedule_from_name(p.at("schedule").get<std::string>());
    if (!sched) return sched.status();
    job.placement.schedule = *sched;
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
  } catch (const std::exception& e) {
    return Status::error(std::string("job: ") + e.what());
  }
  return job;
}

}  // namespace tapp
