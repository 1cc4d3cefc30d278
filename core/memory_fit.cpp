#include "core/memory_fit.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"

namespace tapp {

// The moves themselves; LayerMover::fit makes them one after another.
class LayerMover::Moves {
 public:
  Moves(const LayerGraph& g, const Cluster& c, int64_t batch_size)
      : g_(g), c_(c), batch_size_(batch_size), consumers_(g.consumers()), memory_(g) {}

  const LayerGraph& graph() const { return g_; }
  // Each device's bytes for q (q recomputes every group).
  std::vector<int64_t> device_bytes(const Placement& q) const {
    return estimate_device_memory_bytes(q, g_, c_, batch_size_);
  }
  // Marks recomputation where needed on q (recompute_where_needed); whether q then fits and is valid.
  bool recompute_to_fit(Placement& q) const {
    return recompute_where_needed(q, g_, c_, batch_size_) &&
           validate_placement(q, g_, c_, batch_size_).is_ok();
  }
  // The bytes by which the devices are over their memory.
  double overflow(const std::vector<int64_t>& bytes) const {
    double over = 0;
    for (int d = 0; d < c_.num_devices(); ++d)
      over += std::max<double>(0.0, static_cast<double>(bytes[d] - device_memory_bytes(c_.devices[d])));
    return over;
  }

  // A move: the layers of `run` (a run of one group's first or last layers)
  // go to `to_group`, or (to_group -1) to a new group on `to_device`; or,
  // with `run` empty, the micro-batches double.
  struct Move {
    std::vector<int> run;
    int to_group = -1, to_device = -1;
    std::vector<int64_t> bytes;  // each device's bytes once it is made
    double over = 0;             // and the bytes over
  };

  // The single move that lowers q's overflow (`over`, from its devices'
  // `bytes`) most (none: no move lowers it): a run of a group's first or last
  // layers (run_lengths) on a device that is over goes to a group on another
  // device that one of them exchanges tensors with, or to a new group on a
  // device that holds no layer. Runs, not single layers: cutting a chain anew
  // adds the received buffers on both sides, which one small layer does not
  // pay back. The first move that leaves no device over is taken as it is.
  std::optional<Move> best_move(const Placement& q, const std::vector<int64_t>& bytes, double over) const {
    const int D = c_.num_devices();
    std::vector<char> holds(D, 0);  // devices that run a layer
    std::vector<std::vector<int>> members(q.num_groups());
    for (int i = 0; i < static_cast<int>(q.layer_group.size()); ++i) {
      members[q.layer_group[i]].push_back(i);
      for (int d : q.devices_of_group(q.layer_group[i])) holds[d] = 1;
    }
    // Each move is made on this copy, scored and undone (an empty group
    // weighs nothing, so the spare one is there for every move).
    const int spare = q.num_groups();
    Placement t = with_group_on(q, 0);
    std::optional<Move> best;
    // Scores a move of `run` from group a; true once nothing is over (no move can do better).
    auto score = [&](int a, const std::vector<int>& run, int to_group, int to_device) {
      const int to = to_group >= 0 ? to_group : spare;
      if (to_group < 0) t.group_device[spare] = to_device;
      for (int i : run) t.layer_group[i] = to;
      std::vector<int64_t> after = device_bytes(t);
      for (int i : run) t.layer_group[i] = a;
      const double o = overflow(after);
      if (o < (best ? best->over : over)) best = Move{run, to_group, to_device, std::move(after), o};
      return o <= 0;
    };
    for (int a = 0; a < q.num_groups(); ++a) {
      const int d = q.group_device[a];
      const int n = static_cast<int>(members[a].size());
      if (n == 0 || q.replica_count(a) > 1 || bytes[d] <= device_memory_bytes(c_.devices[d])) continue;
      for (bool from_end : {false, true})
        for (int k : run_lengths(members[a], from_end)) {
          const auto first = members[a].begin() + (from_end ? n - k : 0);
          const std::vector<int> run(first, first + k);
          for (int b : neighbour_groups(q, run, d))
            if (score(a, run, b, -1)) return best;
          for (int e = 0; e < D; ++e)
            if (!holds[e] && score(a, run, -1, e)) return best;
        }
    }
    // No layer can go: smaller micro-batches keep fewer activations.
    if (!best && q.micro_batches * 2 <= batch_size_) {
      Placement more = q;
      more.micro_batches *= 2;
      if (validate_placement(more, g_, c_, batch_size_).is_ok()) {
        std::vector<int64_t> after = device_bytes(more);
        const double o = overflow(after);
        if (o < over) best = Move{{}, -1, -1, std::move(after), o};
      }
    }
    return best;
  }

  // q after move m.
  static Placement apply(Placement q, const Move& m) {
    if (m.run.empty()) {
      q.micro_batches *= 2;
      return q;
    }
    const int to = m.to_group >= 0 ? m.to_group : q.num_groups();
    if (m.to_group < 0) q = with_group_on(std::move(q), m.to_device);
    for (int i : m.run) q.layer_group[i] = to;
    return q;
  }

 private:
  // The lengths of the runs tried from one end of a group (its layers in
  // order): in each of [1, 2), [2, 4), [4, 8), ... the length whose cut
  // crosses the fewest bytes (a transformer block's end, not its middle,
  // where the residual and the branch both cross), and the whole group.
  std::vector<int> run_lengths(const std::vector<int>& members, bool from_end) const {
    const int n = static_cast<int>(members.size());
    std::vector<int> out;
    for (int lo = 1; lo < n; lo *= 2) {
      int best = lo;
      int64_t fewest = -1;
      for (int k = lo; k < std::min(2 * lo, n); ++k) {
        // The run's cut in layer order: after its last layer, or before its first.
        const int64_t bytes = memory_.cut_bytes(from_end ? members[n - k] : members[k - 1] + 1);
        if (fewest < 0 || bytes < fewest) fewest = bytes, best = k;
      }
      out.push_back(best);
    }
    out.push_back(n);
    return out;
  }
  // The groups, not replicated and not on device d, that hold a producer or
  // a consumer of a layer of `run`.
  std::vector<int> neighbour_groups(const Placement& q, const std::vector<int>& run, int d) const {
    std::vector<int> out;
    auto add = [&](int j) {
      const int b = q.layer_group[j];
      if (q.group_device[b] != d && q.replica_count(b) == 1 &&
          std::find(out.begin(), out.end(), b) == out.end())
        out.push_back(b);
    };
    for (int i : run) {
      for (int j : g_.layers[i].inputs) add(j);
      for (int j : consumers_[i]) add(j);
    }
    return out;
  }
  // q with one more group, on device e, empty and recomputing.
  static Placement with_group_on(Placement q, int e) {
    q.group_device.push_back(e);
    if (!q.group_replicas.empty()) q.group_replicas.emplace_back();
    if (!q.group_replica_weights.empty()) q.group_replica_weights.emplace_back();
    q.group_recompute.push_back(1);
    return q;
  }

  const LayerGraph& g_;
  const Cluster& c_;
  int64_t batch_size_;
  std::vector<std::vector<int>> consumers_;
  StageMemory memory_;  // for the bytes each cut in layer order crosses
};

LayerMover::LayerMover(const LayerGraph& g, const Cluster& c, int64_t batch_size)
    : moves_(std::make_unique<const Moves>(g, c, batch_size)) {}
LayerMover::~LayerMover() = default;
LayerMover::LayerMover(LayerMover&&) noexcept = default;

bool LayerMover::fit(Placement& p) const {
  const LayerGraph& g = moves_->graph();
  if (p.is_data_parallel() || p.schedule == Schedule::al || g.is_al_form()) return false;
  Placement q = p;
  q.group_recompute.assign(q.num_groups(), 1);
  std::vector<int64_t> bytes = moves_->device_bytes(q);
  double over = moves_->overflow(bytes);
  // Each move lowers the overflow. A fit takes a few moves a device; a longer
  // crawl is cut short.
  const int max_moves = 2 * static_cast<int>(bytes.size()) + 8;
  for (int move = 0; over > 0 && move < max_moves; ++move) {
    std::optional<Moves::Move> next = moves_->best_move(q, bytes, over);
    if (!next) break;
    q = Moves::apply(std::move(q), *next);
    bytes = std::move(next->bytes);
    over = next->over;
  }
  if (over > 0) return false;
  q.group_recompute.clear();
  if (!moves_->recompute_to_fit(q)) return false;
  p = std::move(q);
  return true;
}

bool move_layers_to_fit(Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size) {
  return LayerMover(g, c, batch_size).fit(p);
}

}  // namespace tapp
