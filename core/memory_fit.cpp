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
  class Step;

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
  // The bytes by which the devices are under their memory.
  double room(const std::vector<int64_t>& bytes) const {
    double free = 0;
    for (int d = 0; d < c_.num_devices(); ++d)
      free += std::max<double>(0.0, static_cast<double>(device_memory_bytes(c_.devices[d]) - bytes[d]));
    return free;
  }

  // A move: the layers of `run` (a run of one group's layers) go to
  // `to_group`, or (to_group -1) to a new group on `to_device`, and those of
  // `rest` (the group's layers after a run from its middle) to a new group on
  // the group's device; or with `leaving_group` set, the replica on
  // `to_device` leaves that group; or, with neither, the micro-batches double.
  struct Move {
    std::vector<int> run;
    int to_group = -1, to_device = -1;
    std::vector<int> rest;
    std::vector<int64_t> bytes;  // each device's bytes once it is made
    double over = 0;             // and the bytes over
    int leaving_group = -1;
  };

  // The moves to make next: the single move that lowers q's overflow
  // (`over`, from its devices' `bytes`) most, or where none does, the pair
  // that does (a device over by a little beside a server nearly full: a run
  // off the one overfills the other until a run leaves it in turn); none
  // where neither lowers it.
  std::vector<Move> next_moves(const Placement& q, const std::vector<int64_t>& bytes, double over) const {
    Step step(*this, q, over);
    search(step, q, bytes);
    if (step.best) return {std::move(*step.best)};
    // Without replicas, moving layers shifts bytes (and a new cut adds
    // some): where more is over than the devices have free, no pair fits it.
    // (A run off a replicated group frees its bytes on every replica.)
    if (!q.has_replicated_groups() && over > room(bytes)) return {};
    for (const Move& first : step.near) {
      if (!valid_after(q, first)) continue;
      if (std::vector<Move> pair = then_best(q, first, over); !pair.empty()) return pair;
    }
    // Last, a replica leaves its group, alone or before a move (gpt2_medium's
    // embedding replicated on two 1 GB edge devices, which then hold nothing
    // else, while the server is over: one leaves and a block goes there).
    for (const Move& leave : replica_leaves(q)) {
      if (leave.over < over) return {leave};
      if (std::vector<Move> pair = then_best(q, leave, over); !pair.empty()) return pair;
    }
    return {};
  }
  // `first` and the move after it that lowers the overflow most, if one
  // brings it below `over`.
  std::vector<Move> then_best(const Placement& q, const Move& first, double over) const {
    const Placement after_first = apply(q, first);
    Step second(*this, after_first, over);
    search(second, after_first, first.bytes);
    if (!second.best) return {};
    return {first, std::move(*second.best)};
  }
  // Every replica of every replicated group leaving its group, with the
  // bytes each leaves (the replicas left take its micro-batches).
  std::vector<Move> replica_leaves(const Placement& q) const {
    std::vector<Move> out;
    for (int a = 0; a < q.num_groups(); ++a)
      if (q.replica_count(a) > 1)
        for (int e : q.devices_of_group(a)) {
          Move leave;
          leave.leaving_group = a;
          leave.to_device = e;
          const Placement after = apply(q, leave);
          if (!validate_placement(after, g_, c_, batch_size_).is_ok()) continue;
          leave.bytes = device_bytes(after);
          leave.over = overflow(leave.bytes);
          out.push_back(std::move(leave));
        }
    return out;
  }

  // Whether q stays valid after move m: a run on or off a replicated group
  // may leave it both before and after another group, which a replicated
  // group may not be.
  bool valid_after(const Placement& q, const Move& m) const {
    return !q.has_replicated_groups() || validate_placement(apply(q, m), g_, c_, batch_size_).is_ok();
  }
  // q after move m.
  static Placement apply(Placement q, const Move& m) {
    if (m.leaving_group >= 0) return without_replica(std::move(q), m.leaving_group, m.to_device);
    if (m.run.empty()) {
      q.micro_batches *= 2;
      return q;
    }
    const int to = m.to_group >= 0 ? m.to_group : q.add_group(m.to_device, true);
    for (int i : m.run) q.layer_group[i] = to;
    if (!m.rest.empty()) {
      const int rest =
          q.add_group(q.group_device[q.layer_group[m.rest.front()]], true);  // still in its group
      for (int i : m.rest) q.layer_group[i] = rest;
    }
    return q;
  }

 private:
  // Scores step's candidates on q (devices' `bytes`), of those below in
  // turn; the first layer move that leaves no device over is taken as it is.
  void search(Step& step, const Placement& q, const std::vector<int64_t>& bytes) const {
    for (int a = 0; a < q.num_groups(); ++a)
      if (step.over_and_movable(a, bytes) && step.end_runs(a)) return;
    step.more_micro_batches();
    if (step.best) return;
    // Only where nothing else helps: a run from a group's middle (a search
    // over starts and lengths), which splits the group around it; from every
    // group that is over, not only the first whose run lowers the overflow
    // (gpt2_medium in two groups on an 8 GB server: the first group's blocks
    // lower it most onto a 1 GB edge device, but only the last group's leave
    // the server fitting).
    for (int a = 0; a < q.num_groups(); ++a)
      if (q.replica_count(a) == 1 && step.over_and_movable(a, bytes) && step.middle_runs(a)) return;
  }

  // One step's candidates, each made on a copy of q with two spare empty
  // groups (an empty group weighs nothing), scored and undone; the best kept.
  class Step {
   public:
    Step(const Moves& m, const Placement& q, double over)
        : m_(m), q_(q), over_(over), t_(with_spare_groups(q)), members_(q.num_groups()) {
      holds_.assign(m.c_.num_devices(), 0);
      for (int i = 0; i < static_cast<int>(q.layer_group.size()); ++i)
        members_[q.layer_group[i]].push_back(i);
      for (int g = 0; g < q.num_groups(); ++g)
        if (!members_[g].empty())
          for (int d : q.devices_of_group(g)) holds_[d] = 1;
    }
    std::optional<Move> best;
    // While no move lowers the overflow, the layer moves that raise it
    // least: the first of a pair (next_moves).
    static constexpr size_t kNear = 16;
    std::vector<Move> near;

    // Whether group a holds layers on a device that is over (one of its
    // replicas: a run off a replicated group leaves every replica).
    bool over_and_movable(int a, const std::vector<int64_t>& bytes) const {
      if (members_[a].empty()) return false;
      for (int d : q_.devices_of_group(a))
        if (bytes[d] > device_memory_bytes(m_.c_.devices[d])) return true;
      return false;
    }
    // A run of group a's first or last layers (run_lengths) goes to a group
    // on another device that one of them exchanges tensors with, or to a new
    // group on another device. Runs, not single layers: cutting a chain anew
    // adds the received buffers on both sides, which one small layer does not
    // pay back. True once a move leaves nothing over.
    bool end_runs(int a) {
      const std::vector<int>& members = members_[a];
      const int n = static_cast<int>(members.size()), d = q_.group_device[a];
      for (bool from_end : {false, true})
        for (int k : m_.run_lengths(members, from_end)) {
          const auto first = members.begin() + (from_end ? n - k : 0);
          const std::vector<int> run(first, first + k);
          for (int b : m_.neighbour_groups(q_, run, d))
            if (score(a, run, b, -1, {})) return true;
          if (to_new_group(a, run, {})) return true;
        }
      return false;
    }
    // A run from group a's middle goes to a new group on another device, and
    // the layers after it to a new group on a's device (gpt2_medium's middle
    // blocks off an 8 GB server onto a 1 GB edge device, the embedding and
    // the head that shares its table staying). Its starts are chosen as its
    // lengths are (run_lengths: the layers left before it, a block's end).
    bool middle_runs(int a) {
      const std::vector<int>& members = members_[a];
      const int n = static_cast<int>(members.size());
      for (int start : m_.run_lengths(members, false)) {
        if (start >= n - 1) continue;  // no layer after a run from here
        const std::vector<int> tail(members.begin() + start, members.end());
        for (int k : m_.run_lengths(tail, false)) {
          if (start + k >= n) continue;  // an end run
          if (to_new_group(a, {tail.begin(), tail.begin() + k}, {tail.begin() + k, tail.end()})) return true;
        }
      }
      return false;
    }
    // Twice the micro-batches, which keep fewer activations each (a proposal
    // of one micro-batch that holds tens of GB of logits: each layer moved
    // takes off a few percent, each doubling half).
    void more_micro_batches() {
      if (q_.micro_batches * 2 > m_.batch_size_) return;
      Placement more = q_;
      more.micro_batches *= 2;
      if (!validate_placement(more, m_.g_, m_.c_, m_.batch_size_).is_ok()) return;
      std::vector<int64_t> after = m_.device_bytes(more);
      const double o = m_.overflow(after);
      if (better(o)) best = Move{{}, -1, -1, {}, std::move(after), o};
    }

   private:
    // `run` to a new group on each other device, an idle one first (where
    // none is idle, a run beside another device's groups: gpt2's tied head,
    // whose only neighbour is a small device, beside the embedding on the server).
    bool to_new_group(int a, const std::vector<int>& run, const std::vector<int>& rest) {
      const int d = q_.group_device[a];
      for (bool idle : {true, false})
        for (int e = 0; e < static_cast<int>(holds_.size()); ++e)
          if (e != d && !holds_[e] == idle && score(a, run, -1, e, rest)) return true;
      return false;
    }
    // Scores the move of `run` (and `rest`) out of group a; true once nothing is over.
    bool score(int a, const std::vector<int>& run, int to_group, int to_device,
               const std::vector<int>& rest) {
      const int spare = q_.num_groups();
      t_.group_device[spare] = to_device;
      t_.group_device[spare + 1] = q_.group_device[a];
      for (int i : run) t_.layer_group[i] = to_group >= 0 ? to_group : spare;
      for (int i : rest) t_.layer_group[i] = spare + 1;
      std::vector<int64_t> after = m_.device_bytes(t_);
      for (int i : run) t_.layer_group[i] = a;
      for (int i : rest) t_.layer_group[i] = a;
      const double o = m_.overflow(after);
      if (better(o)) {
        Move move{run, to_group, to_device, rest, std::move(after), o};
        if (!m_.valid_after(q_, move)) return false;
        best = std::move(move);
        return o <= 0;
      }
      if (!best && (near.size() < kNear || o < near.back().over))
        keep_near(Move{run, to_group, to_device, rest, std::move(after), o});
      return false;
    }
    bool better(double over) const { return over < (best ? best->over : over_); }
    // Keeps `m` among the kNear moves that raise the overflow least, in order.
    void keep_near(Move m) {
      auto at = std::find_if(near.begin(), near.end(), [&](const Move& n) { return m.over < n.over; });
      near.insert(at, std::move(m));
      if (near.size() > kNear) near.pop_back();
    }
    static Placement with_spare_groups(Placement q) {
      q.add_group(0, true);
      q.add_group(0, true);
      return q;
    }

    const Moves& m_;
    const Placement& q_;
    double over_;
    Placement t_;
    std::vector<std::vector<int>> members_;  // each group's layers in order
    std::vector<char> holds_;                // devices that run a layer
  };

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
  // q with device e no longer a replica of group a (its next replica becomes
  // the first where e was; the weights of the others kept).
  static Placement without_replica(Placement q, int a, int e) {
    std::vector<int> devices = q.devices_of_group(a);
    const auto at = std::find(devices.begin(), devices.end(), e) - devices.begin();
    devices.erase(devices.begin() + at);
    q.group_device[a] = devices.front();
    q.group_replicas[a].assign(devices.begin() + 1, devices.end());
    if (q.has_replica_weights(a)) {
      std::vector<int>& weights = q.group_replica_weights[a];
      weights.erase(weights.begin() + at);
      if (weights.size() < 2) weights.clear();  // one device left: no weights
    }
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

bool LayerMover::fit(Placement& p) const {
  const LayerGraph& g = moves_->graph();
  if (p.is_data_parallel() || p.schedule == Schedule::al || g.is_al_form()) return false;
  Placement q = p;
  q.group_recompute.assign(q.num_groups(), 1);
  std::vector<int64_t> bytes = moves_->device_bytes(q);
  double over = moves_->overflow(bytes);
  // Each move lowers the overflow. A fit takes a few layer moves a device, or
  // where the devices are nearly full, one block at a time (gpt2_medium off a
  // 512 MB edge device: 65 moves); a longer crawl is cut short (doublings and
  // replicas leaving end by themselves).
  const int max_moves = 2 * static_cast<int>(bytes.size()) + static_cast<int>(g.layers.size()) / 2 + 8;
  for (int moves = 0; over > 0 && moves < max_moves;) {
    std::vector<Moves::Move> next = moves_->next_moves(q, bytes, over);
    if (next.empty()) break;
    for (Moves::Move& m : next) {
      moves += !m.run.empty();
      q = Moves::apply(std::move(q), m);
      bytes = std::move(m.bytes);
      over = m.over;
    }
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
