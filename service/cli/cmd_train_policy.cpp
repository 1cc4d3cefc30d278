// tapp-cli train-policy: one TAPP policy trained across many models and clusters (issue 17).
//
// Problems: every model (--models: zoo names or files; --random-models N:
// placer/training_set.h's random CNNs, every other one deep; --random-transformers N) on every
// cluster (--clusters: files; --random-clusters N), each with the simulator's costs by `tapp-cli plan`'s
// rule (cost_inputs.h; --costs auto by default: cached profiles, else the
// multiply-add estimate). placer/train_policy.h trains one network on them in
// turn for --iterations or --time-budget, with a progress bar on stderr and a
// checkpoint of --out every --checkpoint-every iterations; the file is
// written to a temporary name and renamed, so it is never half-written.
// `optimize --policy FILE` starts from it. Bad input (an unknown model, a
// malformed cluster, no bound on training, no --out): exit 2, nothing written.
#include <iomanip>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "core/cluster.h"
#include "placer/train_policy.h"
#include "planners/lower_bound.h"  // memory_admits_placement
#include "placer/training_set.h"
#include "profiler/model_loader.h"
#include "service/cli/commands.h"
#include "service/cli/cost_inputs.h"
#include "service/cli/progress_bar.h"

namespace tapp::cli {
namespace {

struct TrainArgs {
  std::vector<std::string> models, clusters;
  int random_models = 0, random_transformers = 0, random_clusters = 0, random_mesh_clusters = 0;
  int iterations = 0, checkpoint_every = 200, hidden = 64, imitation_steps = 1, cloning_epochs = 200;
  double time_budget_s = 0;
  int64_t batch = 32;
  uint64_t seed = 1;
  std::string costs = "auto", out;
};

int bad_input(const std::string& message) {
  std::cerr << "tapp-cli train-policy: " << message << "\n";
  return 2;
}

std::string short_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  std::string s = slash == std::string::npos ? path : path.substr(slash + 1);
  const auto dot = s.rfind(".json");
  return dot == std::string::npos ? s : s.substr(0, dot);
}

// "" when every item of a comma-separated list is named once, else which is
// repeated: a repeat would weigh one problem twice.
std::string repeated_item(const std::string& flag, const std::vector<std::string>& items) {
  std::set<std::string> seen;
  for (const std::string& item : items)
    if (!seen.insert(item).second) return flag + ": " + item + " is named twice";
  return "";
}

int train_cmd(const TrainArgs& a) {
  if (a.out.empty()) return bad_input("--out: name the policy file to write");
  if (const std::string why = unwritable("--out", a.out); !why.empty()) return bad_input(why);
  if (a.iterations <= 0 && !(a.time_budget_s > 0)) return bad_input("give --iterations N or --time-budget S");
  if (!cost_source(a.costs))
    return bad_input("--costs: unknown source \"" + a.costs + "\"; expected auto (or cached), estimated or profile");
  if (a.models.empty() && a.random_models == 0 && a.random_transformers == 0)
    return bad_input("--models: name at least one model (or --random-models N, --random-transformers N)");
  if (a.clusters.empty() && a.random_clusters == 0 && a.random_mesh_clusters == 0)
    return bad_input("--clusters: name at least one cluster file (or --random-clusters N, --random-mesh-clusters N)");

  for (const auto& [flag, items] : {std::pair{"--models", &a.models}, std::pair{"--clusters", &a.clusters}})
    if (const std::string why = repeated_item(flag, *items); !why.empty()) return bad_input(why);

  std::vector<LayerGraph> graphs;
  std::vector<std::string> graph_names;
  for (const std::string& m : a.models) {
    auto g = load_model(m);
    if (!g) return bad_input("--models: " + m + ": " + g.status().message());
    graphs.push_back(std::move(*g));
    graph_names.push_back(short_name(m));
  }
  std::mt19937_64 rng(a.seed);
  // Every other random model is a deep one (residual or Inception-like
  // blocks): a policy trained on shallow chains only cut deep models badly.
  for (int k = 0; k < a.random_models; ++k) {
    const bool deep = k % 2 == 1;
    graph_names.push_back((deep ? "random_deep_cnn" : "random_cnn") + std::to_string(k + 1));
    graphs.push_back(deep ? random_deep_cnn(rng, graph_names.back()) : random_cnn(rng, graph_names.back()));
  }
  std::vector<Cluster> clusters;
  std::vector<std::string> cluster_names;
  for (const std::string& path : a.clusters) {
    auto c = load_cluster(path);
    if (!c) return bad_input("--clusters: " + c.status().message());  // the message names the file
    clusters.push_back(std::move(*c));
    cluster_names.push_back(short_name(path));
  }
  for (int k = 0; k < a.random_clusters; ++k) {
    cluster_names.push_back("random_cluster" + std::to_string(k + 1));
    clusters.push_back(random_cluster(rng, cluster_names.back()));
  }
  // Drawn after the clusters, so adding them keeps a seed's other problems.
  for (int k = 0; k < a.random_transformers; ++k) {
    graph_names.push_back("random_transformer" + std::to_string(k + 1));
    graphs.push_back(random_transformer(rng, graph_names.back()));
  }
  for (int k = 0; k < a.random_mesh_clusters; ++k) {  // last, for the same reason
    cluster_names.push_back("random_mesh_cluster" + std::to_string(k + 1));
    clusters.push_back(random_mesh_cluster(rng, cluster_names.back()));
  }

  // A pair where no placement fits the devices' memory teaches nothing: it is
  // left out, said on stderr, as the product of models and clusters makes some
  // such pairs natural (a large model on a small cluster); none left is bad input.
  std::vector<TrainProblem> problems;
  std::vector<std::string> left_out;
  for (size_t m = 0; m < graphs.size(); ++m)
    for (size_t c = 0; c < clusters.size(); ++c) {
      const std::string name = graph_names[m] + " @ " + cluster_names[c];
      if (Status fits = memory_admits_placement(graphs[m], clusters[c]); !fits) {
        left_out.push_back(name + ": no placement fits: " + fits.message());
        continue;
      }
      std::cerr << "\rcosts " << (m * clusters.size() + c + 1) << "/" << graphs.size() * clusters.size() << ": " << name
                << std::string(20, ' ') << std::flush;
      auto costs = load_cost_inputs(graphs[m], clusters[c], a.batch, a.costs, "");
      if (!costs) return bad_input(name + ": " + costs.status().message());
      auto model = CostModel::build(graphs[m], clusters[c], costs->libraries, costs->device_libraries,
                                    costs->calibration);
      if (!model) return bad_input(name + ": " + model.status().message());
      problems.push_back({name, graphs[m], clusters[c], std::move(*model)});
    }
  std::cerr << "\n";
  for (const std::string& why : left_out) std::cerr << "tapp-cli train-policy: left out " << why << "\n";
  if (problems.empty()) return bad_input("no model fits any cluster given (see above)");

  TrainPolicyOptions o;
  o.iterations = a.iterations;
  o.time_budget_s = a.time_budget_s;
  o.batch_size = a.batch;
  o.seed = a.seed;
  o.hidden = a.hidden;
  o.imitation_steps = a.imitation_steps;
  o.cloning_epochs = a.cloning_epochs;
  o.out = a.out;
  o.checkpoint_every = a.checkpoint_every;
  o.trained_on = {{"models", graph_names}, {"clusters", cluster_names}, {"batch_size", a.batch},
                  {"seed", a.seed}, {"costs", a.costs}, {"imitation_steps", a.imitation_steps},
                  {"cloning_epochs", a.cloning_epochs}};
  auto shown = std::make_shared<double>(-1);
  auto progress = [shown](const TrainProgress& p) {
    if (p.problems > 0) {
      std::cerr << "\rclassical plans " << p.planned << "/" << p.problems << ": " << std::left << std::setw(44)
                << p.problem << std::right << std::flush;
      if (p.planned == p.problems) std::cerr << "\n";
      return;
    }
    if (p.cloning_epochs > 0) {
      const double f = static_cast<double>(p.cloning_epoch) / p.cloning_epochs;
      std::cerr << "\r" << progress_bar(f, 30) << " " << std::setw(3) << static_cast<int>(100 * f)
                << "%  cloning the classical plans, epoch " << p.cloning_epoch << " of " << p.cloning_epochs << "  "
                << std::fixed << std::setprecision(0) << p.elapsed_s << " s" << std::string(24, ' ') << std::flush;
      if (p.cloning_epoch == p.cloning_epochs) std::cerr << "\n";
      return;
    }
    const double f = p.total_iterations > 0 ? static_cast<double>(p.iteration) / p.total_iterations
                                            : p.elapsed_s / std::max(1e-9, p.time_budget_s);
    if (f - *shown < 0.002 && f < 1) return;
    *shown = f;
    std::cerr << "\r" << progress_bar(f, 30) << " " << std::setw(3) << static_cast<int>(100 * std::min(1.0, f))
              << "%  iteration " << p.iteration << "  " << std::fixed << std::setprecision(0) << p.elapsed_s
              << " s  " << p.problem << ": best " << std::showpos << std::setprecision(1) << 100 * p.gap
              << std::noshowpos << "% vs classical" << std::string(8, ' ') << std::flush;
  };
  auto result = train_policy(problems, o, progress);
  std::cerr << "\n";
  if (!result) {
    std::cerr << "tapp-cli train-policy: " << result.status().message() << "\n";
    return 1;
  }
  std::cout << "trained " << result->iterations << " iterations in " << std::fixed << std::setprecision(1)
            << result->elapsed_s << " s on " << problems.size() << " problems; wrote " << a.out << "\n";
  std::cout << "  problem                                          classical ms    best known ms     its zero-shot ms   gap\n";
  int within = 0;
  for (const TrainedProblem& p : result->problems) {
    std::ostringstream gap;
    if (p.reference_ms > 0 && p.zero_shot_ms > 0) {
      gap << std::showpos << std::fixed << std::setprecision(1) << 100 * (p.zero_shot_ms / p.reference_ms - 1) << "%";
      within += p.zero_shot_ms <= 1.02 * p.reference_ms;
    } else {
      gap << (p.zero_shot_ms > 0 ? "-" : "failed");
    }
    std::cout << "  " << std::left << std::setw(48) << p.name << std::right << std::setw(13) << std::setprecision(1)
              << p.reference_ms << std::setw(17) << p.best_ms << std::setw(21) << p.zero_shot_ms << std::setw(9)
              << gap.str() << "\n";
  }
  std::cout << "its zero-shot (typical) plan is within 2% of the best classical plan (or ahead) on " << within << " of "
            << result->problems.size() << " training problems\n";
  return 0;
}

}  // namespace

void add_train_policy_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TrainArgs>();
  auto* sub = app.add_subcommand("train-policy", "train one TAPP policy across many models and clusters (simulated)");
  sub->add_option("--models", args->models, "zoo names or model files, comma-separated")->delimiter(',');
  sub->add_option("--random-models", args->random_models, "also this many random CNNs, every other one deep (residual or Inception-like; default 0)")
      ->check(CLI::Range(0, 1000));
  sub->add_option("--random-transformers", args->random_transformers,
                  "also this many random transformers: GPT-2-, encoder- or BERT-like at random sizes (default 0)")
      ->check(CLI::Range(0, 1000));
  sub->add_option("--clusters", args->clusters, "cluster files, comma-separated")->delimiter(',');
  sub->add_option("--random-clusters", args->random_clusters, "also this many random clusters (default 0)")
      ->check(CLI::Range(0, 1000));
  sub->add_option("--random-mesh-clusters", args->random_mesh_clusters,
                  "also this many random clusters whose every device pair has its own link, each direction its own "
                  "(default 0)")
      ->check(CLI::Range(0, 1000));
  sub->add_option("--iterations", args->iterations, "policy updates over all problems")->check(CLI::Range(1, 10000000));
  sub->add_option("--time-budget", args->time_budget_s, "stop after this many seconds")->check(CLI::Range(1.0, 604800.0));
  sub->add_option("--out", args->out, "the policy file to write (checkpoints too)");
  sub->add_option("--checkpoint-every", args->checkpoint_every, "iterations between checkpoints (default 200)")
      ->check(CLI::Range(1, 10000000));
  sub->add_option("--batch", args->batch, "batch size (default 32)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--seed", args->seed, "networks, random problems and sampling seed (default 1)")->check(seed_text());
  sub->add_option("--hidden", args->hidden, "hidden width of the networks (default 64)")->check(CLI::Range(4, 1024));
  sub->add_option("--imitation-steps", args->imitation_steps,
                  "supervised steps towards each problem's fastest known plan per iteration (default 1; 0 = REINFORCE alone)")
      ->check(CLI::Range(0, 100));
  sub->add_option("--cloning-epochs", args->cloning_epochs,
                  "supervised epochs over each problem's fastest classical plan before the iterations (default 200)")
      ->check(CLI::Range(0, 100000));
  sub->add_option("--costs", args->costs, "auto (default: cached profiles, else estimated; also 'cached') | estimated | profile");
  sub->callback([args, &exit_code] { exit_code = train_cmd(*args); });
}

}  // namespace tapp::cli
